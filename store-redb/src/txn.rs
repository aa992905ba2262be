//! The handle and its locks: the options, the [`Handle`] a store holds
//! (and closes without panicking), the per-file write [`Gate`] that hands
//! the turn to write from one thread of this process to the next, the
//! bounded wait for another process's lock ([`patiently`]), and the write
//! transaction every change runs in.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use redb::{Database, Durability, ReadOnlyDatabase, ReadTransaction, ReadableDatabase};
use slothqueue_core::{Policy, StoreError};

use crate::error::Failure;
use crate::rows::RedbTx;
use crate::seal::Seal;

/// How [`RedbStore::open`](crate::RedbStore::open) opens a queue.
///
/// There is no durability setting: every commit is
/// [`redb::Durability::Immediate`]. redb's only faster one,
/// `Durability::None`, is refused on a file shared between processes
/// (`NonDurableCommitUnsupported`), which every slothqueue file is.
#[derive(Clone, Debug)]
pub struct RedbOptions {
    /// Lease, backoff and attempt settings for every transition.
    pub policy: Policy,
    /// How long a call waits for another process's write before answering
    /// [`StoreError::Busy`].
    pub lock_timeout: Duration,
    /// Run redb's integrity check (every page read) at a writable open
    /// even when the file's seal says only slothqueue wrote it since the
    /// last check: what a runner does at its start, for damage no
    /// timestamp shows. Default `false`: a file the seal does not vouch
    /// for is checked in full anyway (see `seal.rs`).
    pub full_check: bool,
}

impl Default for RedbOptions {
    fn default() -> Self {
        RedbOptions {
            policy: Policy::default(),
            lock_timeout: Duration::from_secs(5),
            full_check: false,
        }
    }
}

/// The open database a store holds: writable, redb's read-only handle
/// beside whatever processes share the file, or a snapshot in memory.
pub(crate) enum Handle {
    /// Open for writing, shared with other processes.
    Writable(Database),
    /// Open read-only beside other processes; it follows their commits.
    ReadOnly(ReadOnlyDatabase),
    /// A file redb cannot open read-only as it stands (left unclean by a
    /// crash with no live writer to repair it, empty, or never
    /// initialised), brought up to date in a memory overlay: a snapshot,
    /// which the store swaps for a [`Handle::ReadOnly`] as soon as the
    /// file opens as one (see `open_current_read_only` in `open.rs`).
    Snapshot(Database),
}

impl Handle {
    pub(crate) fn begin_read(&self) -> Result<ReadTransaction, Failure> {
        Ok(match self {
            Handle::Writable(db) | Handle::Snapshot(db) => db.begin_read()?,
            Handle::ReadOnly(db) => db.begin_read()?,
        })
    }

    /// Closes the file; redb writes its allocator state on closing a
    /// writable handle, which may fail or panic on a damaged file.
    pub(crate) fn close(self) -> Result<(), Failure> {
        match self {
            Handle::Writable(db) | Handle::Snapshot(db) => db.close()?,
            Handle::ReadOnly(db) => db.close()?,
        }
        Ok(())
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Handle::Writable(db) => f.debug_tuple("Writable").field(db).finish(),
            Handle::ReadOnly(_) => f.write_str("ReadOnly"),
            Handle::Snapshot(_) => f.write_str("Snapshot"),
        }
    }
}

/// The open database. Closing it, when the store is dropped or a handle
/// is replaced after a latched I/O error, never panics out of the store:
/// redb writes its allocator state on close, and on a file damaged where
/// nothing has read yet, that can panic inside redb (S16: the torture
/// suite's fuzzing found `add` on a bit-flipped file ending in exit 101).
///
/// A writable handle on a file has a [`Seal`], renewed after each commit
/// and after the close.
#[derive(Debug)]
pub(crate) struct Db(pub(crate) Option<Handle>, Option<Seal>);

impl Db {
    pub(crate) fn new(handle: Handle) -> Self {
        Db(Some(handle), None)
    }

    /// A writable handle on `path` with its seal, renewed now: the file
    /// as this open left it (a writable open rewrites redb's header).
    pub(crate) fn sealed(handle: Handle, path: &Path) -> Self {
        let seal = Seal::open(path);
        if let Some(seal) = &seal {
            seal.renew();
        }
        Db(Some(handle), seal)
    }

    /// After a commit through this handle: the file as it left it.
    pub(crate) fn renew_seal(&self) {
        if let Some(seal) = &self.1 {
            seal.renew();
        }
    }

    pub(crate) fn handle(&self) -> &Handle {
        match &self.0 {
            Some(h) => h,
            None => unreachable!("the database is taken out only when dropped"),
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            let closed =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || handle.close()));
            // redb wrote its allocator state on closing: sealed as left,
            // unless the close failed (then the next open checks in full).
            if matches!(closed, Ok(Ok(()))) {
                self.renew_seal();
            }
        }
    }
}

/// One write transaction at a time among the handles of this process on
/// one file (see [`Gate::enter`]).
#[derive(Debug, Default)]
pub(crate) struct Gate {
    held: Mutex<bool>,
    free: Condvar,
}

/// The gates of the files this process has open, by (device, inode), so
/// that every handle on one file shares one, however the path was spelt.
static GATES: Mutex<Vec<(FileId, Weak<Gate>)>> = Mutex::new(Vec::new());

/// A file's (device, inode).
type FileId = (u64, u64);

pub(crate) fn gate_for(path: &Path) -> Result<Arc<Gate>, StoreError> {
    let meta = std::fs::metadata(path).map_err(|e| crate::error::io(path, "reading", e))?;
    let id = (meta.dev(), meta.ino());
    let mut gates = GATES.lock().unwrap_or_else(PoisonError::into_inner);
    gates.retain(|(_, g)| g.strong_count() > 0);
    if let Some(gate) = gates.iter().find(|(k, _)| *k == id).and_then(|(_, g)| g.upgrade()) {
        return Ok(gate);
    }
    let gate = Arc::new(Gate::default());
    gates.push((id, Arc::downgrade(&gate)));
    Ok(gate)
}

/// Holds [`Gate`] until dropped.
struct GateGuard<'a>(&'a Gate);

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        *self.0.held.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.0.free.notify_one();
    }
}

/// The longest pause between two tries for another process's lock.
const MAX_PAUSE: Duration = Duration::from_millis(10);

/// Retries `attempt` while another process holds the file or its write
/// lock, pausing 1, 2, 4 … up to 10 ms, for at most `timeout`; then
/// [`StoreError::Busy`]. Any other outcome is returned at once.
#[expect(
    clippy::disallowed_methods,
    reason = "waiting out another process's write lock is a real wait, bounded by lock_timeout"
)]
pub(crate) fn patiently<T>(
    timeout: Duration,
    mut attempt: impl FnMut() -> Result<T, Failure>,
) -> Result<T, Failure> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match attempt() {
            Err(e) if e.is_would_block() => {
                let waited = start.elapsed();
                if waited >= timeout {
                    return Err(Failure::Store(StoreError::Busy { waited }));
                }
                std::thread::sleep(pause.min(timeout - waited));
                pause = (pause * 2).min(MAX_PAUSE);
            }
            r => return r,
        }
    }
}

impl Gate {
    /// Waits for this process's other writers to this file, at most
    /// `timeout`; answers how long it waited.
    #[expect(
        clippy::disallowed_methods,
        reason = "the wait for this process's other writers is bounded by lock_timeout"
    )]
    fn enter(&self, timeout: Duration) -> Result<(GateGuard<'_>, Duration), Failure> {
        let start = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        while *held {
            let waited = start.elapsed();
            let Some(left) = timeout.checked_sub(waited).filter(|d| !d.is_zero()) else {
                return Err(Failure::Store(StoreError::Busy { waited }));
            };
            held = self.free.wait_timeout(held, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        *held = true;
        Ok((GateGuard(self), start.elapsed()))
    }
}

/// Runs `f` in a write transaction on `db` and commits it, or aborts it if
/// `f` fails (nothing is written then). The turn is taken first at this
/// process's [`Gate`], then at redb's lock, within one budget of
/// `lock_timeout` for both waits. Every commit is
/// [`Durability::Immediate`].
pub(crate) fn write<T>(
    db: &Database,
    gate: &Gate,
    lock_timeout: Duration,
    f: impl FnOnce(&mut RedbTx<'_>) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let (_gate, waited) = gate.enter(lock_timeout)?;
    let left = lock_timeout.saturating_sub(waited);
    let mut txn = patiently(left, || Ok(db.try_begin_write()?)).map_err(|e| match e {
        Failure::Store(StoreError::Busy { waited: w }) => {
            Failure::Store(StoreError::Busy { waited: w.saturating_add(waited) })
        }
        e => e,
    })?;
    // redb refuses `Durability::None` in multi-writer mode.
    txn.set_durability(Durability::Immediate)?;
    let out = {
        let mut tx = RedbTx::open(&txn)?;
        f(&mut tx)
    };
    match out {
        Ok(v) => {
            txn.commit()?;
            Ok(v)
        }
        Err(e) => {
            // The abort only discards; the error that caused it matters.
            let _ = txn.abort();
            Err(e)
        }
    }
}

/// The answer to a write through a read-only handle: an I/O error of kind
/// `ReadOnlyFilesystem`, the kind the OS gives for the same mistake.
pub(crate) fn read_only(path: &Path) -> StoreError {
    StoreError::Io {
        context: format!("cannot write to {}", path.display()),
        source: std::io::Error::new(
            std::io::ErrorKind::ReadOnlyFilesystem,
            "the queue was opened read-only",
        ),
    }
}
