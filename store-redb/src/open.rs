//! Opening a queue file: the sniff and the read-only probe that refuse a
//! foreign, damaged or newer file before redb may write a byte of it, the
//! atomic creation of a new queue, the vetted writable open, the read-only
//! open, and the copy-on-write [`Overlay`] in memory that lets a file a
//! crash left needing repair be vetted (or read) without writing to it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redb::{
    Builder, ConcurrencyMode, Database, ReadOnlyDatabase, ReadableDatabase, StorageBackend,
    TableHandle,
};
use slothqueue_core::StoreError;

use crate::error::{Failure, corrupt, guarded, io as io_error};
use crate::schema::{META, META_SCHEMA_VERSION, SCHEMA_VERSION, initialise_in, tables_of};
use crate::seal;
use crate::txn::{Handle, patiently};

/// redb's magic number, the first bytes of every redb file (redb 1.0 and
/// later; `MAGICNUMBER` in redb's `header.rs`).
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// The first bytes of every SQLite 3 database, to name the mistake.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Whether `header` (a file's first bytes) starts like a redb file, so the
/// CLI can pick the backend of an existing file by its content.
pub fn sniff(header: &[u8]) -> bool {
    header.starts_with(&REDB_MAGIC)
}

/// redb's page cache per handle. Small: the CLI opens, does one thing and
/// exits, and in multi-writer mode another process's commit empties the
/// cache anyway.
const CACHE_BYTES: usize = 64 * 1024 * 1024;

/// The page cache of a read-only handle (`status`, `list`, `show`,
/// `wait`): smaller still, as those read a page or a few of the queue at a
/// time and a long `wait` must stay small on a long queue (docs/wait.md);
/// a page read again comes from the OS's cache.
const READ_CACHE_BYTES: usize = 8 * 1024 * 1024;

/// The builder every writable and probing open uses: multi-writer, so that
/// a runner, `add`, `status` and `serve` share the file.
pub(crate) fn builder() -> Builder {
    let mut b = Builder::new();
    b.set_concurrency_mode(ConcurrencyMode::MultiWriter).set_cache_size(CACHE_BYTES);
    b
}

/// What the probe found in an existing redb file.
enum Found {
    /// A redb file with no tables: a queue created but never initialised.
    Empty,
    /// slothqueue's tables at this schema version.
    Version(u64),
}

/// Opens (creating if missing or empty) the queue at `path` for writing,
/// after vetting it: a file that is foreign, damaged or from a newer
/// slothqueue is refused before redb may write a byte. redb's integrity
/// check runs when `full_check` asks for it or the file's seal does not
/// vouch for it (see `seal.rs`).
pub(crate) fn open_database(
    path: &Path,
    lock_timeout: Duration,
    full_check: bool,
) -> Result<Database, StoreError> {
    let fresh = prepare_file(path, lock_timeout, true)?;
    // A file the seal does not vouch for is checked in memory before the
    // probe reads it: a damaged string key panics inside redb's read
    // (torture S16: `add` on a flipped byte), which the store catches but
    // cannot keep from printing. Checked so, the writable open need not
    // check again (not even for `full_check`); a file in use, which the
    // check leaves alone, is checked by the writable open under redb's
    // writer lock.
    let sealed = fresh || seal::holds(path);
    let verified = !sealed && check_quiet(path)?;
    let found = if fresh { Found::Empty } else { probe(path, lock_timeout)? };
    let check = !verified && (full_check || !sealed);
    let db = open_writable(path, lock_timeout, check)?;
    match found {
        Found::Version(v) if v == u64::from(SCHEMA_VERSION) => {}
        _ => initialise(&db, path, lock_timeout)?,
    }
    Ok(db)
}

/// [`open_database`] on a storage backend (tests of storage faults): no
/// file checks, the schema version checked and initialised alike.
pub(crate) fn open_backend(
    backend: impl StorageBackend,
    label: &Path,
    lock_timeout: Duration,
) -> Result<Database, StoreError> {
    let db =
        guarded(|| Ok(builder().create_with_backend(backend)?)).map_err(|e| e.into_store(label))?;
    match guarded(|| inspect(&db)).map_err(|e| e.into_store(label))? {
        Found::Version(v) if v == u64::from(SCHEMA_VERSION) => {}
        Found::Version(v) if v > u64::from(SCHEMA_VERSION) => {
            return Err(StoreError::SchemaTooNew {
                path: label.to_owned(),
                found: u32::try_from(v).unwrap_or(u32::MAX),
                supported: SCHEMA_VERSION,
            });
        }
        _ => initialise(&db, label, lock_timeout)?,
    }
    Ok(db)
}

/// Creates the parent directory and a new 0600 queue when there is no
/// file (if `create`); answers whether the file is a queue still to be
/// initialised (zero bytes), and refuses a file that is not redb without
/// opening it in redb.
fn prepare_file(path: &Path, lock_timeout: Duration, create: bool) -> Result<bool, StoreError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(corrupt(path, "a directory, not a queue file")),
        Ok(m) if m.len() == 0 => Ok(true),
        Ok(_) => {
            // redb writes its magic number last when it creates a file, so
            // a blank one may be another process creating the queue now.
            let header = patiently(lock_timeout, || {
                let header = read_header(path)?;
                if header.len() >= REDB_MAGIC.len()
                    && header[..REDB_MAGIC.len()].iter().all(|b| *b == 0)
                {
                    return Err(Failure::Redb(redb::Error::WouldBlock));
                }
                Ok(header)
            });
            let header = match header {
                Ok(h) => h,
                Err(Failure::Store(StoreError::Busy { .. })) => {
                    return Err(corrupt(
                        path,
                        "not a redb file (its header is blank: was its creation interrupted?)",
                    ));
                }
                Err(e) => return Err(e.into_store(path)),
            };
            if sniff(&header) {
                Ok(false)
            } else if header == SQLITE_MAGIC {
                Err(corrupt(path, "a SQLite database, not a redb queue (use the sqlite backend)"))
            } else {
                Err(corrupt(path, "not a redb file"))
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| io_error(dir, "creating directory", e))?;
            }
            create_atomically(path, lock_timeout)
        }
        Err(e) => Err(io_error(path, "reading", e)),
    }
}

/// Makes a new queue appear complete or not at all: it is built under a
/// temporary name beside `path`, then hard-linked into place, which fails
/// if another process got there first (whose queue is then used). redb
/// initialises a file in place in steps, and a crash between them would
/// leave a file it never opens again. Where hard links are not available
/// the empty file is created in place for redb to initialise there.
/// Answers whether the queue at `path` is still to be initialised.
fn create_atomically(path: &Path, lock_timeout: Duration) -> Result<bool, StoreError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_file_name(format!(".{name}.new-{}-{n}", std::process::id()));
    let built = build_new_queue(&tmp, lock_timeout);
    let linked = built.and_then(|()| {
        std::fs::hard_link(&tmp, path).or_else(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => Ok(()),
            _ => Err(io_error(path, "linking the new queue into place", e)),
        })
    });
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(false),
        Err(StoreError::Io { .. }) => {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(path)
                .map_err(|e| io_error(path, "creating", e))?;
            Ok(true)
        }
        Err(e) => Err(e),
    }
}

fn build_new_queue(tmp: &Path, lock_timeout: Duration) -> Result<(), StoreError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)
        .map_err(|e| io_error(tmp, "creating", e))?;
    let db = guarded(|| Ok(builder().create(tmp)?)).map_err(|e| e.into_store(tmp))?;
    initialise(&db, tmp, lock_timeout)?;
    db.close().map_err(|e| Failure::from(e).into_store(tmp))
}

/// Up to the first 16 bytes of the file.
fn read_header(path: &Path) -> Result<Vec<u8>, Failure> {
    let mut header = [0u8; 16];
    let mut f = File::open(path)?;
    let n = read_up_to(&mut f, &mut header)?;
    Ok(header[..n].to_vec())
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match f.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Reads the schema version without writing: a read-only open beside
/// whatever processes share the file. A file a crash left needing repair
/// cannot be opened read-only; it is repaired in a memory overlay instead,
/// so a damaged file is still refused untouched.
fn probe(path: &Path, lock_timeout: Duration) -> Result<Found, StoreError> {
    let opened = patiently(lock_timeout, || guarded(|| Ok(builder().open_read_only(path)?)));
    let found = match opened {
        Ok(ro) => guarded(|| inspect(&ro)),
        Err(Failure::Redb(redb::Error::RepairAborted)) => {
            overlay_database(path).and_then(|db| guarded(|| inspect(&db)))
        }
        Err(e) => Err(e),
    }
    .map_err(|e| e.into_store(path))?;
    judged(path, found)
}

/// Refuses what no build of this version may open: a newer schema, or
/// version 0 (never written).
fn judged(path: &Path, found: Found) -> Result<Found, StoreError> {
    match found {
        Found::Version(v) if v > u64::from(SCHEMA_VERSION) => Err(StoreError::SchemaTooNew {
            path: path.to_owned(),
            found: u32::try_from(v).unwrap_or(u32::MAX),
            supported: SCHEMA_VERSION,
        }),
        Found::Version(0) => Err(corrupt(path, "schema version 0")),
        found => Ok(found),
    }
}

fn inspect(db: &impl ReadableDatabase) -> Result<Found, Failure> {
    let txn = db.begin_read()?;
    let names: Vec<String> = txn.list_tables()?.map(|t| t.name().to_owned()).collect();
    if names.is_empty() {
        return Ok(Found::Empty);
    }
    if !names.iter().any(|n| n == META.name()) {
        return Err(Failure::Damaged(format!(
            "a redb database of another program (tables: {})",
            names.join(", ")
        )));
    }
    let meta = txn.open_table(META)?;
    let Some(version) = meta.get(META_SCHEMA_VERSION)?.map(|v| v.value()) else {
        return Err(Failure::Damaged("the meta table has no schema version".to_owned()));
    };
    // Each version's own tables: an older file is migrated from what its
    // version must have, and a newer one is judged by its version alone.
    if let Some(required) = tables_of(version) {
        for name in required {
            if !names.iter().any(|n| n == name) {
                return Err(Failure::Damaged(format!("table `{name}` is missing")));
            }
        }
    }
    Ok(Found::Version(version))
}

/// Opens the file for writing in multi-writer mode. redb's open waits,
/// without a limit, for another process's write transaction to end; the
/// open runs on its own thread so that this call gives up after
/// `lock_timeout` (the thread closes the database when it gets it).
///
/// With `check`, the open verifies every page checksum first (redb's
/// integrity check on open, under its writer lock). A plain open trusts
/// the file: on one damaged outside redb (torture S16, one flipped byte in
/// a b-tree page) it hands out pages already in use and, on close, panics
/// twice inside redb, which aborts the process whatever we catch. The
/// check refuses such a file before a byte is written. It reads the whole
/// file: about 1 ms per 1,000 jobs (+80–90 ms on a 73 MB queue of 100,000
/// jobs), which is why it runs only when the seal does not vouch for the
/// file (see `seal.rs`). After a crash redb runs the same walk anyway.
pub(crate) fn open_writable(
    path: &Path,
    lock_timeout: Duration,
    check: bool,
) -> Result<Database, StoreError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let owned = path.to_owned();
    std::thread::Builder::new()
        .name("slothqueue-redb-open".to_owned())
        .spawn(move || {
            let mut b = builder();
            b.set_check_integrity_on_open(check);
            let header = HeaderSnapshot::take(&owned);
            let r = patiently(lock_timeout, || guarded(|| Ok(b.create(&owned)?)))
                .map_err(|e| e.into_store(&owned));
            if let (Err(StoreError::Corrupt { .. }), Some(header)) = (&r, header) {
                header.put_back(&owned);
            }
            // Nobody listening means the caller gave up; dropping closes it.
            let _ = tx.send(r);
        })
        .map_err(|e| io_error(path, "starting the open", e))?;
    match rx.recv_timeout(lock_timeout.saturating_add(Duration::from_millis(100))) {
        Ok(r) => r,
        Err(_) => Err(StoreError::Busy { waited: lock_timeout }),
    }
}

/// The start of a queue file, where redb keeps its header, as it was
/// before a writable open.
///
/// A file the read-only probe accepts may still need recovery in a
/// writable open's eyes (a stored layout that does not match the file's
/// length, a primary slot marked unflushed); redb then rewrites the header
/// before it verifies the trees, and a file it refuses as corrupt would be
/// left changed (found by the `open_redb` fuzz target: one byte of the
/// layout recomputed). redb wrote nothing else by then, so putting the
/// header back leaves a refused file as it was.
struct HeaderSnapshot {
    bytes: Vec<u8>,
    len: u64,
}

impl HeaderSnapshot {
    /// redb's header is 320 bytes; one page covers it in every version.
    const BYTES: u64 = 4096;

    fn take(path: &Path) -> Option<HeaderSnapshot> {
        let file = File::open(path).ok()?;
        let len = file.metadata().ok()?.len();
        let mut bytes = vec![0; usize::try_from(len.min(Self::BYTES)).ok()?];
        file.read_exact_at(&mut bytes, 0).ok()?;
        Some(HeaderSnapshot { bytes, len })
    }

    /// Writes the header back if it changed and the file kept its length,
    /// and only if both commit slots are as they were: a recovery rewrites
    /// the first 64 bytes (flags, layout) and leaves the slots' contents
    /// alone, while any commit by another process since the snapshot
    /// changed a slot, and putting back the old header would drop that
    /// commit. Best effort: the open is refused either way.
    fn put_back(&self, path: &Path) {
        /// Where redb's two commit slots are (64 bytes in, 128 each).
        const SLOTS: std::ops::Range<usize> = 64..320;
        let Some(now) = HeaderSnapshot::take(path) else { return };
        if now.len != self.len || now.bytes == self.bytes {
            return;
        }
        if now.bytes.get(SLOTS) != self.bytes.get(SLOTS) {
            return;
        }
        if let Ok(file) = OpenOptions::new().write(true).open(path) {
            if file.write_all_at(&self.bytes, 0).is_ok() {
                let _ = file.sync_data();
            }
        }
    }
}

/// Creates the tables and records the schema version in a new queue, or
/// migrates an older one; whichever process gets the write lock first does
/// it, the others find it done.
fn initialise(db: &Database, path: &Path, lock_timeout: Duration) -> Result<(), StoreError> {
    let txn =
        patiently(lock_timeout, || Ok(db.try_begin_write()?)).map_err(|e| e.into_store(path))?;
    initialise_in(&txn, path)?;
    slothqueue_core::failpoint::hit("mid_migration"); // tables made, not committed
    txn.commit().map_err(|e| Failure::from(e).into_store(path))
}

/// The file as redb would see it after repairing it, with every write
/// kept in memory (a copy-on-write overlay): the real file is untouched
/// whatever happens. A file a crash left unclean is repaired in the
/// overlay by this open; if that works out, the real open repairs it the
/// same way.
fn overlay_database(path: &Path) -> Result<Database, Failure> {
    overlay_database_checked(path, false)
}

/// [`overlay_database`], with redb's integrity check (every page) first
/// when `check`.
fn overlay_database_checked(path: &Path, check: bool) -> Result<Database, Failure> {
    let file = File::open(path)?;
    let overlay = Overlay::new(file)?;
    guarded(|| {
        let mut b = Builder::new();
        b.set_cache_size(CACHE_BYTES).set_check_integrity_on_open(check);
        Ok(b.create_with_backend(overlay)?)
    })
}

/// Opens the queue at `path` without writing a byte of it, vetted like a
/// writable open: a foreign, damaged or newer file is refused, and so is
/// one that is not a queue yet (0 bytes, or a redb file with no tables):
/// only a writing open makes a queue. A file redb cannot open read-only is
/// read through a repaired snapshot in memory.
pub(crate) fn open_read_only(path: &Path, lock_timeout: Duration) -> Result<Handle, StoreError> {
    if prepare_file(path, lock_timeout, false)? {
        return Err(corrupt(path, "it is empty: not a queue yet"));
    }
    // A file the seal does not vouch for is checked first, in memory: on a
    // damaged one redb can panic in the middle of a read (a flipped byte
    // in a b-tree page: `status` ended in "entered unreachable code"),
    // where it is refused here as damaged instead. A sealed file, as every
    // slothqueue writer leaves it, costs nothing more.
    if !seal::holds(path) {
        check_quiet(path)?;
    }
    if let Some(ro) = open_current_read_only(path, lock_timeout)? {
        return Ok(Handle::ReadOnly(ro));
    }
    let db = overlay_database(path).map_err(|e| e.into_store(path))?;
    let found = guarded(|| inspect(&db)).map_err(|e| e.into_store(path))?;
    match judged(path, found)? {
        Found::Version(v) if v == u64::from(SCHEMA_VERSION) => {}
        Found::Empty => {
            return Err(corrupt(path, "a redb database with no tables: not a queue yet"));
        }
        // An older schema: brought up to date in memory.
        Found::Version(_) => initialise(&db, path, lock_timeout)?,
    }
    Ok(Handle::Snapshot(db))
}

/// redb's integrity check of the file at `path` in the memory overlay,
/// while nobody has it open. Every redb handle, in any process, holds a
/// shared `flock` on the file while open; this check runs only if it gets
/// the exclusive one at once, and holds it throughout, so no writer can
/// commit under it (one that opens meanwhile waits, as for any lock). A
/// file in use is not checked here (`Ok(false)`): the overlay takes no
/// lock of redb's, and a check of a file changing under it once read a
/// half-made commit (torture S03), whose image redb's close then tripped
/// over. Its users have checked it; a writing open checks it under redb's
/// own writer lock. `Ok(true)`: checked and sound.
fn check_quiet(path: &Path) -> Result<bool, StoreError> {
    let Ok(file) = File::open(path) else { return Ok(false) };
    if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Ok(false);
    }
    // Opened and closed inside `guarded`: a panic in redb is an error.
    let checked = guarded(|| overlay_database_checked(path, true).map(drop));
    drop(file);
    checked.map(|()| true).map_err(|e| e.into_store(path))
}

/// redb's read-only handle on `path` if the file opens as one and is in
/// this build's schema; `None` when it needs writing first (a repair
/// after a crash with no live writer, tables still to be made).
pub(crate) fn open_current_read_only(
    path: &Path,
    lock_timeout: Duration,
) -> Result<Option<ReadOnlyDatabase>, StoreError> {
    let opened = patiently(lock_timeout, || {
        guarded(|| {
            let mut b = builder();
            b.set_cache_size(READ_CACHE_BYTES);
            Ok(b.open_read_only(path)?)
        })
    });
    let ro = match opened {
        Ok(ro) => ro,
        Err(Failure::Redb(redb::Error::RepairAborted)) => return Ok(None),
        Err(e) => return Err(e.into_store(path)),
    };
    let found = guarded(|| inspect(&ro)).map_err(|e| e.into_store(path))?;
    match judged(path, found)? {
        Found::Version(v) if v == u64::from(SCHEMA_VERSION) => Ok(Some(ro)),
        _ => Ok(None),
    }
}

/// The overlay's unit of copy-on-write.
const BLOCK: u64 = 4096;

/// A [`StorageBackend`] that reads a file and keeps writes in memory. It
/// takes no locks (redb then runs without any, in exclusive mode): it is
/// private to one probe and never touches the file.
#[derive(Debug)]
struct Overlay {
    base: File,
    state: Mutex<OverlayState>,
}

#[derive(Debug)]
struct OverlayState {
    /// The image's length.
    len: u64,
    /// Bytes of the file at or past this offset read as zero (the image
    /// was shrunk below them at some point).
    base_visible: u64,
    /// Written blocks, by block number.
    blocks: HashMap<u64, Box<[u8]>>,
}

impl Overlay {
    fn new(base: File) -> io::Result<Self> {
        let len = base.metadata()?.len();
        Ok(Overlay {
            base,
            state: Mutex::new(OverlayState { len, base_visible: len, blocks: HashMap::new() }),
        })
    }

    fn lock(&self) -> io::Result<std::sync::MutexGuard<'_, OverlayState>> {
        self.state.lock().map_err(|_| io::Error::other("overlay lock poisoned"))
    }

    /// The current content of block `n` (whole, zero past the end).
    fn block(&self, st: &OverlayState, n: u64) -> io::Result<Box<[u8]>> {
        if let Some(b) = st.blocks.get(&n) {
            return Ok(b.clone());
        }
        let mut buf = vec![0u8; BLOCK as usize].into_boxed_slice();
        let start = n * BLOCK;
        let visible = st.base_visible.min(st.len);
        if start < visible {
            let want = usize::try_from((visible - start).min(BLOCK)).unwrap_or(BLOCK as usize);
            self.base.read_exact_at(&mut buf[..want], start)?;
        }
        Ok(buf)
    }
}

impl StorageBackend for Overlay {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.lock()?.len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let st = self.lock()?;
        let end = offset.checked_add(out.len() as u64).filter(|e| *e <= st.len);
        if end.is_none() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"));
        }
        let mut done = 0usize;
        while done < out.len() {
            let pos = offset + done as u64;
            let (n, within) = (pos / BLOCK, (pos % BLOCK) as usize);
            let take = (BLOCK as usize - within).min(out.len() - done);
            let block = self.block(&st, n)?;
            out[done..done + take].copy_from_slice(&block[within..within + take]);
            done += take;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut st = self.lock()?;
        if len < st.len {
            // Zero what lies past the new end, so growing again reads zeros.
            let last = len / BLOCK;
            let cut = (len % BLOCK) as usize;
            if cut != 0 {
                let mut b = self.block(&st, last)?;
                b[cut..].fill(0);
                st.blocks.insert(last, b);
            }
            let first_gone = len.div_ceil(BLOCK);
            st.blocks.retain(|n, _| *n < first_gone);
            st.base_visible = st.base_visible.min(len);
        }
        st.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "write past any end"))?;
        let mut st = self.lock()?;
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let (n, within) = (pos / BLOCK, (pos % BLOCK) as usize);
            let take = (BLOCK as usize - within).min(data.len() - done);
            let mut block = self.block(&st, n)?;
            block[within..within + take].copy_from_slice(&data[done..done + take]);
            st.blocks.insert(n, block);
            done += take;
        }
        st.len = st.len.max(end);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniff_knows_redb_and_nothing_else() {
        assert!(sniff(&REDB_MAGIC));
        assert!(!sniff(SQLITE_MAGIC));
        assert!(!sniff(b"redb"));
        assert!(!sniff(b""));
    }

    #[test]
    fn a_header_is_put_back_only_when_no_commit_came_in_between() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.redb");
        let original: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &original).unwrap();
        let snapshot = HeaderSnapshot::take(&path).unwrap();

        // What a recovery writes: flags and layout, before the slots.
        let mut recovered = original.clone();
        recovered[28] ^= 0xff;
        std::fs::write(&path, &recovered).unwrap();
        snapshot.put_back(&path);
        assert_eq!(std::fs::read(&path).unwrap(), original);

        // Another process's commit changed a slot: left as it is.
        let mut committed = recovered.clone();
        committed[200] ^= 0xff;
        std::fs::write(&path, &committed).unwrap();
        snapshot.put_back(&path);
        assert_eq!(std::fs::read(&path).unwrap(), committed);
    }

    #[test]
    fn overlay_reads_through_and_keeps_writes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let content: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &content).unwrap();
        let o = Overlay::new(File::open(&p).unwrap()).unwrap();
        let mut buf = vec![0u8; 5000];
        o.read(3000, &mut buf).unwrap();
        assert_eq!(buf, content[3000..8000]);
        o.write(4090, &[7u8; 20]).unwrap();
        o.read(4080, &mut buf[..40]).unwrap();
        assert_eq!(&buf[..10], &content[4080..4090]);
        assert_eq!(&buf[10..30], &[7u8; 20]);
        o.set_len(4095).unwrap();
        o.set_len(9000).unwrap();
        o.read(4090, &mut buf[..10]).unwrap();
        assert_eq!(&buf[..5], &[7u8; 5]);
        assert_eq!(&buf[5..10], &[0u8; 5]);
        let mut tail = vec![1u8; 100];
        o.read(8900, &mut tail).unwrap();
        assert!(tail.iter().all(|b| *b == 0));
        assert!(o.read(8950, &mut tail).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), content, "the file is untouched");
    }
}
