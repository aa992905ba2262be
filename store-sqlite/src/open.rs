//! Opening a queue file: the read-only probe that refuses a foreign,
//! damaged or too-new file without writing a single byte to it, the
//! creation of a missing one, and the migration to this build's layout
//! under the write lock.
//!
//! The probe exists because opening a file read-write is not harmless:
//! setting `journal_mode=WAL` rewrites the header and leaves `-wal`/`-shm`
//! files beside it. A user who points `--db` at the wrong file, or at a
//! queue from a newer slothqueue, must get a clear refusal and find the file
//! exactly as it was.

use std::fs::{self, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use slothqueue_core::StoreError;

use crate::error::{self, Context, Error};
use crate::schema::{
    APPLICATION_ID, CURRENT_FINGERPRINT, MIGRATIONS, SCHEMA_VERSION, SchemaEntry, TABLES,
    expected_schema, fingerprint, schema_entries, table_names,
};
use crate::txn::{
    Journal, SqliteOptions, configure, configure_read_only, connect, nap_blocking, write_tx,
};

/// The first 16 bytes of every SQLite database file.
const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The size of SQLite's file header.
const HEADER_LEN: usize = 100;

/// Whether `header` (the first bytes of a file) is a SQLite header, so the
/// CLI can pick the backend from an existing file rather than its name.
pub fn sniff(header: &[u8]) -> bool {
    header.starts_with(MAGIC)
}

/// A read-write connection to the queue at `path`, configured as
/// `options` say: the file probed first (and refused untouched if it is
/// not a queue this build may open), created when missing, and migrated
/// to [`SCHEMA_VERSION`].
///
/// Only this open makes a queue, and only of a file it created itself
/// (`O_CREAT|O_EXCL`). A file that already exists but is empty (0 bytes,
/// or a SQLite database with no tables) is taken for another slothqueue
/// creating the queue right now, and waited for (see [`wait_for_creator`]);
/// if it is still empty after the wait it is refused untouched: it may be
/// another program's, and adopting it would silently write a queue into
/// it. A queue whose creation was interrupted is such a file, and must be
/// removed by hand.
pub(crate) fn open(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let ctx = Context { path: path.to_path_buf(), busy_timeout: options.busy_timeout };
    let mut ours = false;
    let current = is_current_by_header(path, options.journal);
    let found = if current {
        Found::Queue { version: SCHEMA_VERSION }
    } else {
        probe(path, options.busy_timeout, false)?
    };
    match found {
        Found::Missing => {
            ours = create_file(path)?;
            if !ours {
                wait_for_creator(path, options.busy_timeout)?;
            }
        }
        Found::Empty | Found::NoTables => wait_for_creator(path, options.busy_timeout)?,
        Found::Queue { .. } => {}
    }
    let mut conn = connect(path, options).map_err(|e| ctx.map_sql(e))?;
    configure(&mut conn, options).map_err(|e| ctx.map_sql(e))?;
    if current {
        // What the probe's connection would have read, read by this one
        // before anything is written.
        let id = read_identity(&conn).map_err(|e| ctx.map_sql(e))?;
        if !matches!(judge_identity(path, &id)?, Found::Queue { version } if version == SCHEMA_VERSION)
        {
            return Err(error::corrupt(
                path,
                "its header says slothqueue's current layout, its tables do not",
            ));
        }
    }
    migrate(&conn, path, ours).map_err(|e| ctx.map(e))?;
    Ok(conn)
}

/// A read-only connection to the queue at `path`, for commands that only
/// look: nothing is created, migrated from an empty file or written. A
/// missing file is [`StoreError::Io`] (`NotFound`); an empty one (0 bytes,
/// or a SQLite database with no tables) is refused untouched. A queue of
/// an older layout is migrated first, by [`open`]: the one write such an
/// open makes, as every open did before this one existed.
///
/// SQLite reads a WAL-mode file through its shared-memory file (`-shm`),
/// which it must be able to create beside it. Where it cannot (a read-only
/// folder or filesystem, a full disk), the file is opened immutable
/// instead, as the probe reads it, and the second value says so: such a
/// connection takes no lock and reads the file alone, so it sees neither
/// the commits still in the `-wal` nor those made after it opened.
pub(crate) fn open_read_only(
    path: &Path,
    options: &SqliteOptions,
) -> Result<(Connection, Option<String>), StoreError> {
    let ctx = Context { path: path.to_path_buf(), busy_timeout: options.busy_timeout };
    match probe(path, options.busy_timeout, true)? {
        Found::Missing => {
            return Err(error::io(
                format!("no queue at {}", path.display()),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        found @ (Found::Empty | Found::NoTables) => return Err(refusal(path, &found, false)),
        Found::Queue { version } if version < SCHEMA_VERSION => drop(open(path, options)?),
        Found::Queue { .. } => {}
    }
    let first = match connect_read_only(path, false, options) {
        Ok(conn) => return Ok((conn, None)),
        Err(e) => e,
    };
    let why = match first.sqlite_error().map(|e| (e.code, e.extended_code)) {
        Some((_, rusqlite::ffi::SQLITE_IOERR_SHMSIZE))
        | Some((rusqlite::ErrorCode::DiskFull, _)) => "the disk is full",
        Some((
            rusqlite::ErrorCode::CannotOpen
            | rusqlite::ErrorCode::ReadOnly
            | rusqlite::ErrorCode::SystemIoFailure
            | rusqlite::ErrorCode::PermissionDenied,
            _,
        )) => "its folder cannot be written",
        _ => return Err(ctx.map_sql(first)),
    };
    let Ok(conn) = connect_read_only(path, true, options) else {
        return Err(ctx.map_sql(first));
    };
    let wal = sidecar(path, "-wal");
    let unseen = match fs::metadata(&wal).map(|m| m.len()) {
        Ok(n) if n > 0 => format!(
            "the commits still in {} ({n} bytes, not yet checkpointed into the file), nor ",
            wal.display()
        ),
        _ => String::new(),
    };
    let note = format!(
        "opened immutable: {why}, so SQLite cannot make its shared-memory file; \
         this look does not see {unseen}anything committed after it opened"
    );
    Ok((conn, Some(note)))
}

/// A read-only (or immutable) connection with the store's busy handler,
/// proven usable by one read: in WAL mode that read is what needs `-shm`.
fn connect_read_only(
    path: &Path,
    immutable: bool,
    options: &SqliteOptions,
) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(uri(path, immutable), flags)?;
    configure_read_only(&mut conn, options)?;
    let _: i64 = conn.query_row("SELECT COUNT(*) FROM sqlite_schema", [], |r| r.get(0))?;
    Ok(conn)
}

/// The refusal of a file that is not a queue yet; `waited` when a writing
/// open gave another slothqueue the time to make it one.
fn refusal(path: &Path, found: &Found, waited: bool) -> StoreError {
    let what = match found {
        Found::NoTables => "a SQLite database with no tables",
        _ => "it is empty",
    };
    let detail = if waited {
        format!(
            "{what}: not a queue yet, and no slothqueue is making it one; \
             remove it to start a new queue there"
        )
    } else {
        format!("{what}: not a queue yet")
    };
    error::corrupt(path, detail)
}

/// Waits, for at most `budget`, for another slothqueue to make the empty
/// file at `path` a queue: it created the file (`O_EXCL`) and is writing
/// the schema. Refuses the file untouched if it is still empty after the
/// wait, or at once if neither it nor its WAL has changed for `budget`
/// (an empty file made a while ago by someone else, or a creation that
/// died half-way).
fn wait_for_creator(path: &Path, budget: Duration) -> Result<(), StoreError> {
    const NAP: Duration = Duration::from_millis(10);
    let mut waited = Duration::ZERO;
    loop {
        let found = probe(path, budget, false)?;
        match found {
            Found::Queue { .. } => return Ok(()),
            Found::Missing => {
                return Err(error::io(
                    format!("{} disappeared while it was being created", path.display()),
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ));
            }
            Found::Empty | Found::NoTables => {
                if waited >= budget || unchanged_for(path, budget) {
                    return Err(refusal(path, &found, true));
                }
            }
        }
        nap_blocking(NAP);
        waited += NAP;
    }
}

/// Whether neither the file nor its WAL was modified in the last `d`.
#[expect(
    clippy::disallowed_methods,
    reason = "an empty file's age tells a creation in progress from an abandoned file"
)]
fn unchanged_for(path: &Path, d: Duration) -> bool {
    let now = std::time::SystemTime::now();
    let young = |p: &Path| {
        fs::metadata(p)
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).map_or(true, |age| age < d))
    };
    !young(path) && !young(&sidecar(path, "-wal"))
}

/// What the probe found at the path.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// No file: a queue an open may create.
    Missing,
    /// A file of 0 bytes.
    Empty,
    /// A SQLite database with no tables (and no application id or version).
    NoTables,
    /// A slothqueue queue at this schema version (at most ours).
    Queue {
        /// Its `user_version`.
        version: u32,
    },
}

/// What a read-only look at a SQLite file tells.
struct Identity {
    application_id: i32,
    user_version: i64,
    tables: Vec<String>,
    /// Every entry of `sqlite_schema` (see [`schema_entries`]).
    schema: Vec<SchemaEntry>,
}

/// Looks at the file without changing it: no write, no journal-mode change,
/// no `-wal`/`-shm` left behind.
///
/// An immutable read takes no lock, so another process creating the queue
/// can checkpoint into the file while it is read: the header's application
/// id from before and the tables from after made a queue being created
/// look like another program's database (torture S17: 3 in 60 runs; 5 in
/// 200 rounds of six concurrent `add`s). A read is trusted only if the file
/// and its WAL look the same after it as before, and a refusal only if it
/// is the same over a few looks 10 ms apart: file times are too coarse to
/// show every write, and a damaged file stays damaged, while a creation in
/// progress finishes.
fn probe(path: &Path, busy_timeout: Duration, read_only: bool) -> Result<Found, StoreError> {
    const ATTEMPTS: usize = 100;
    const REFUSALS: usize = 5;
    let mut refusals = 0;
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let before = snapshot(path);
        let found = probe_once(path, busy_timeout, read_only);
        if snapshot(path) == before {
            match found {
                Err(StoreError::Corrupt { .. }) if refusals + 1 < REFUSALS => {
                    refusals += 1;
                    nap_blocking(Duration::from_millis(10));
                }
                found => return found,
            }
        }
        last = Some(found);
    }
    last.unwrap_or_else(|| probe_once(path, busy_timeout, read_only))
}

/// What tells whether a file changed: its and its WAL's size and mtime.
fn snapshot(path: &Path) -> [Option<(u64, Option<std::time::SystemTime>)>; 2] {
    let look = |p: &Path| fs::metadata(p).ok().map(|m| (m.len(), m.modified().ok()));
    [look(path), look(&sidecar(path, "-wal"))]
}

fn probe_once(path: &Path, busy_timeout: Duration, read_only: bool) -> Result<Found, StoreError> {
    let mut file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return Err(error::io(format!("cannot open {}", path.display()), e)),
    };
    let meta = file
        .metadata()
        .map_err(|e| error::io(format!("cannot read the size of {}", path.display()), e))?;
    if meta.is_dir() {
        return Err(error::corrupt(path, "it is a directory"));
    }
    let len = meta.len();
    if len == 0 {
        return Ok(Found::Empty);
    }
    let mut header = Vec::with_capacity(HEADER_LEN);
    file.by_ref()
        .take(HEADER_LEN as u64)
        .read_to_end(&mut header)
        .map_err(|e| error::io(format!("cannot read {}", path.display()), e))?;
    drop(file);
    if !sniff(&header) {
        return Err(error::corrupt(path, "not a SQLite file"));
    }
    let Ok(header) = <[u8; HEADER_LEN]>::try_from(header.as_slice()) else {
        return Err(error::corrupt(path, "truncated SQLite header"));
    };
    let wal_has_frames = fs::metadata(sidecar(path, "-wal")).is_ok_and(|m| m.len() > 0);
    if !wal_has_frames {
        // With no WAL to replay, the header's page count must be on disk; a
        // shorter file was truncated. (While a WAL exists a checkpoint may
        // be half-way through growing the file, so the count proves nothing.)
        check_length(path, &header, len)?;
    }
    // A WAL-mode file with no WAL beside it is complete as it stands: read
    // it as immutable, because a read-only connection would otherwise create
    // `-wal` and `-shm` files and leave them behind. Everything else gets an
    // ordinary read-only connection, whose shared lock writes nothing.
    //
    // Where that ordinary connection cannot make its `-shm` (a read-only
    // folder, a full disk), a read-only open reads the file immutable after
    // all, as it will read it then: what the WAL holds is not seen. Unless
    // the file alone has no tables yet: the queue is in the WAL, and this
    // open cannot read it (a writing open could not either).
    let wal_mode = header[18] == 2 || header[19] == 2;
    let immutable = wal_mode && !wal_has_frames;
    let id = match identify(path, immutable, busy_timeout) {
        Err(e @ (StoreError::Io { .. } | StoreError::DiskFull(_))) if read_only && !immutable => {
            match identify(path, true, busy_timeout) {
                Ok(id) if !id.tables.is_empty() => id,
                _ => return Err(e),
            }
        }
        id => id?,
    };
    judge_identity(path, &id)
}

/// Refuses a file shorter than its header says it is.
fn check_length(path: &Path, header: &[u8; HEADER_LEN], len: u64) -> Result<(), StoreError> {
    let be32 = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        n => u64::from(n),
    };
    let pages = u64::from(be32(28));
    let size_is_valid = pages > 0 && be32(24) == be32(92);
    if size_is_valid && pages.saturating_mul(page_size) > len {
        return Err(error::corrupt(
            path,
            format!(
                "truncated: the header says {} bytes, the file has {len}",
                pages.saturating_mul(page_size)
            ),
        ));
    }
    Ok(())
}

fn identify(path: &Path, immutable: bool, busy_timeout: Duration) -> Result<Identity, StoreError> {
    let ctx = Context { path: path.to_path_buf(), busy_timeout };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn =
        Connection::open_with_flags(uri(path, immutable), flags).map_err(|e| ctx.map_sql(e))?;
    let read = || -> rusqlite::Result<Identity> {
        // rusqlite panics on a timeout beyond i32::MAX ms; nobody waits 24 days.
        conn.busy_timeout(busy_timeout.min(Duration::from_millis(i32::MAX as u64)))?;
        read_identity(&conn)
    };
    let id = read().map_err(|e| ctx.map_sql(e))?;
    drop(conn);
    Ok(id)
}

/// What a connection reads of the file's identity (nothing is written).
fn read_identity(conn: &Connection) -> rusqlite::Result<Identity> {
    let application_id = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let user_version = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let tables = table_names(conn)?;
    let schema = schema_entries(conn)?;
    Ok(Identity { application_id, user_version, tables, schema })
}

/// Whether the file's header alone says it is a queue of this build's
/// layout, whole (as long as its header says, with no WAL to replay),
/// already in `journal` mode: the writing open then skips the
/// probe's own connection, and vets the schema on its own connection
/// before its first write. Configuring such a connection writes nothing
/// (its journal mode is already the one asked), so a damaged schema is
/// still refused untouched. Anything else, or any doubt, is `false`: the
/// full probe decides.
fn is_current_by_header(path: &Path, journal: Journal) -> bool {
    let Ok(mut file) = fs::File::open(path) else { return false };
    let Ok(meta) = file.metadata() else { return false };
    let mut header = [0u8; HEADER_LEN];
    if !meta.is_file() || file.read_exact(&mut header).is_err() || !sniff(&header) {
        return false;
    }
    let be32 = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    // Bytes 18 and 19: the write and read versions, 2 in WAL mode, 1 not.
    let mode = match journal {
        Journal::Wal => 2,
        Journal::Rollback => 1,
    };
    // A WAL with frames may change what the header says, or be another
    // database's (torture S16's stale `-wal`): a writing connection would
    // replay it and, refusing, checkpoint it into the file on closing.
    // Only the probe's read-only look may read such a file.
    let wal_has_frames = fs::metadata(sidecar(path, "-wal")).is_ok_and(|m| m.len() > 0);
    !wal_has_frames
        && be32(68) == APPLICATION_ID as u32
        && be32(60) == SCHEMA_VERSION
        && header[18] == mode
        && header[19] == mode
        && check_length(path, &header, meta.len()).is_ok()
}

/// Decides, from what a file says about itself, whether we may open it.
fn judge_identity(path: &Path, id: &Identity) -> Result<Found, StoreError> {
    if id.application_id == APPLICATION_ID {
        let version = u32::try_from(id.user_version)
            .map_err(|_| error::corrupt(path, format!("bad schema version {}", id.user_version)))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                path: path.to_path_buf(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if let Some(tables) = version.checked_sub(1).and_then(|v| TABLES.get(v as usize)) {
            if let Some(missing) = tables.iter().find(|t| !id.tables.iter().any(|n| n == *t)) {
                return Err(error::corrupt(path, format!("the `{missing}` table is missing")));
            }
        }
        // The current layout is known by its fingerprint, without building
        // the expected schema; anything else is compared entry by entry.
        let current = version == SCHEMA_VERSION && fingerprint(&id.schema) == CURRENT_FINGERPRINT;
        if let Some(expected) = (!current).then(|| expected_schema(version)).flatten() {
            if id.schema != expected {
                let differs = expected
                    .iter()
                    .find(|e| !id.schema.contains(e))
                    .or_else(|| id.schema.iter().find(|e| !expected.contains(e)))
                    .map_or_else(String::new, |e| format!(" (at the {} `{}`)", e.0, e.1));
                return Err(error::corrupt(
                    path,
                    format!("its schema is not slothqueue's version {version}{differs}"),
                ));
            }
        }
        return Ok(Found::Queue { version });
    }
    if id.application_id == 0 && id.user_version == 0 && id.tables.is_empty() {
        return Ok(Found::NoTables);
    }
    // sqlite3's `.dump` keeps the tables but not the application id (nor
    // the version): a restored queue is ours in all but its mark.
    if id.application_id == 0 {
        if let Some(version) =
            (1..=SCHEMA_VERSION).rev().find(|v| expected_schema(*v).is_some_and(|e| e == id.schema))
        {
            return Err(error::corrupt(
                path,
                format!(
                    "a SQLite database with slothqueue's tables (schema {version}) but without its application id, as sqlite3's .dump restores one; if it is your queue, mark it with: sqlite3 {} 'PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {version}'",
                    path.display()
                ),
            ));
        }
    }
    let tables = if id.tables.is_empty() { "none".to_owned() } else { id.tables.join(", ") };
    Err(error::corrupt(
        path,
        format!(
            "not a slothqueue queue: a SQLite database of another program (application id {:#x}, tables: {tables})",
            id.application_id
        ),
    ))
}

/// The path of a file SQLite keeps beside the database (`-wal`, `-shm`).
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// A `file:` URI for a read-only (optionally immutable) open. Every byte
/// outside a safe set is percent-encoded, so no file name can smuggle in
/// URI parameters.
fn uri(path: &Path, immutable: bool) -> String {
    use std::fmt::Write as _;
    #[cfg(unix)]
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
    #[cfg(not(unix))]
    let bytes = path.to_string_lossy().into_owned().into_bytes();
    // `file:///abs` and `file:rel`: an absolute path gets an empty authority
    // so that a path starting `//` is never read as a host name.
    let mut out = String::from(if bytes.first() == Some(&b'/') { "file://" } else { "file:" });
    for b in bytes {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out.push_str("?mode=ro");
    if immutable {
        out.push_str("&immutable=1");
    }
    out
}

/// Creates the queue file (and its directory) if it does not exist, private
/// to the user: jobs carry commands and environment. Answers whether this
/// call created it (`false`: another process got there first).
fn create_file(path: &Path) -> Result<bool, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)
            .map_err(|e| error::io(format!("cannot create the directory {}", dir.display()), e))?;
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(error::io(format!("cannot create {}", path.display()), e)),
    }
}

/// Brings the file to [`SCHEMA_VERSION`]: creates a new queue (only in a
/// file this open created, `ours`), or migrates an older one, in one write
/// transaction. Everything the probe checked is checked again under the
/// write lock, since another process may have created or migrated the file
/// in between.
fn migrate(conn: &Connection, path: &Path, ours: bool) -> Result<(), Error> {
    let app: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if app == APPLICATION_ID && version == i64::from(SCHEMA_VERSION) {
        return Ok(()); // the common case: no write lock needed to open
    }
    // Rebuilding a table drops the old one, which must not cascade into the
    // trails; the pragma is a no-op inside a transaction, hence out here.
    conn.execute_batch("PRAGMA foreign_keys = OFF")?;
    let out = migrate_tx(conn, path, ours);
    conn.execute_batch("PRAGMA foreign_keys = ON")?;
    out
}

fn migrate_tx(conn: &Connection, path: &Path, ours: bool) -> Result<(), Error> {
    write_tx(conn, |conn| {
        let application_id = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        let user_version = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let tables = table_names(conn)?;
        let schema = schema_entries(conn)?;
        let id = Identity { application_id, user_version, tables, schema };
        let from = match judge_identity(path, &id)? {
            Found::Queue { version } => version,
            Found::NoTables if ours => 0,
            found => return Err(Error::Store(refusal(path, &found, true))),
        };
        for (to, step) in MIGRATIONS.iter().enumerate().skip(from as usize) {
            step(conn).map_err(|e| broken_rows(path, to + 1, e))?;
        }
        slothqueue_core::failpoint::hit("mid_migration"); // tables made, version not yet set
        if from < SCHEMA_VERSION {
            conn.execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
            ))?;
        }
        Ok(())
    })
}

/// A migration step's error: the step's DDL runs on a file whose schema
/// was just vetted, so a plain SQL error (`SQLITE_ERROR`, as SQLite
/// answers when existing rows break a new column's constraint) or a
/// constraint violation means its rows are damaged, not that the store
/// failed (the fuzzer found a v3 file whose damaged rows read back a NULL
/// under v4's new column). Busy, full-disk and I/O errors pass as they are.
fn broken_rows(path: &Path, to: usize, e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::ConstraintViolation | rusqlite::ErrorCode::Unknown) => {
            Error::Store(StoreError::Corrupt {
                path: path.to_path_buf(),
                detail: format!("its rows do not fit schema {to}: {e}"),
            })
        }
        _ => Error::from(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniff_knows_the_sqlite_header_only() {
        assert!(sniff(b"SQLite format 3\0and the rest"));
        assert!(!sniff(b"SQLite format 3"));
        assert!(!sniff(b"redb\x1a\x0a\xa9\x0d\x0a"));
        assert!(!sniff(b""));
    }

    #[test]
    fn uri_escapes_everything_that_could_be_a_parameter() {
        assert_eq!(uri(Path::new("/tmp/q.db"), false), "file:///tmp/q.db?mode=ro");
        assert_eq!(
            uri(Path::new("/a b/q?x=1#y%"), true),
            "file:///a%20b/q%3Fx%3D1%23y%25?mode=ro&immutable=1"
        );
        assert_eq!(uri(Path::new("rel/q.db"), false), "file:rel/q.db?mode=ro");
    }

    /// A file of schema v2 is migrated on open, a read-only one included:
    /// the lease it holds reads back without a PID namespace, the next open
    /// finds exactly the current schema, and a namespace is stored from
    /// then on.
    #[tokio::test]
    async fn a_v2_file_migrates_and_keeps_its_lease() {
        use slothqueue_core::{JobState, Store};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
            for step in &MIGRATIONS[..2] {
                step(&conn).unwrap();
            }
            conn.execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 2;
                 INSERT INTO jobs (id, queue, kind, payload, priority, state, attempts,
                     max_attempts, not_before, lease_owner, lease_host, lease_pid,
                     lease_attempt, lease_until, payload_hash, cancel_requested, created_at)
                 VALUES (1, 'default', 'shell', '{{}}', 0, 'running', 1, 3, 0, 'w', 'h', 42,
                     1, 5000, 'x', 0, 0);"
            ))
            .unwrap();
        }
        // A command that only looks migrates it too (the one write it makes).
        let store = crate::SqliteStore::open_read_only(&path, SqliteOptions::default()).unwrap();
        let job = store.get(1).await.unwrap();
        assert_eq!(job.state, JobState::Running);
        let owner = job.lease.unwrap().owner;
        assert_eq!((owner.pid, owner.pid_ns), (Some(42), None));
        drop(store);
        let conn = Connection::open(&path).unwrap();
        let version: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        assert_eq!(schema_entries(&conn).unwrap(), expected_schema(SCHEMA_VERSION).unwrap());
        drop(conn);
        crate::SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    }

    /// A file of schema v3 (the layout before dependencies) is migrated on
    /// open: its pending jobs, due or scheduled, are in the rebuilt claim
    /// and due indexes (a claim takes them, `stats` counts them), none
    /// waits on a parent, and the file has exactly the current schema.
    #[tokio::test]
    async fn a_v3_file_migrates_and_its_jobs_stay_due() {
        use slothqueue_core::{ClaimRequest, ClockOnly, Owner, Store, Timestamp};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
            for step in &MIGRATIONS[..3] {
                step(&conn).unwrap();
            }
            conn.execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 3;
                 INSERT INTO jobs (id, queue, kind, payload, priority, state, attempts,
                     max_attempts, not_before, payload_hash, cancel_requested, created_at)
                 VALUES (1, 'default', 'shell', '{{}}', 0, 'pending', 0, 3, 0, 'x', 0, 0),
                        (2, 'mail', 'send', '{{}}', 5, 'pending', 0, 3, 0, 'x', 0, 0),
                        (3, 'default', 'shell', '{{}}', 9, 'pending', 0, 3, 9000, 'x', 0, 0);"
            ))
            .unwrap();
        }
        let store = crate::SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let now = Timestamp::from_millis(1000);
        let stats = store.stats(now).await.unwrap();
        assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (3, 0, 2));
        assert_eq!(stats.next_due, Some(Timestamp::from_millis(9000)));
        assert_eq!(store.next_due().await.unwrap(), Some(Timestamp::from_millis(0)));
        let job = store.get(1).await.unwrap();
        assert_eq!((job.after.len(), job.pending_parents, job.cancelled_by), (0, 0, None));
        assert!(store.dependents(1).await.unwrap().is_empty());
        let request = ClaimRequest::new(Owner::named("w"), std::sync::Arc::new(ClockOnly));
        let first = store.claim(&request, now).await.unwrap().unwrap();
        assert_eq!(first.job.id, 2, "the highest due priority, from the rebuilt index");
        drop(store);
        let conn = Connection::open(&path).unwrap();
        let version: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        assert_eq!(schema_entries(&conn).unwrap(), expected_schema(SCHEMA_VERSION).unwrap());
    }

    #[test]
    fn an_empty_database_has_no_tables_and_a_foreign_one_is_refused() {
        let p = Path::new("/q.db");
        let empty = Identity { application_id: 0, user_version: 0, tables: vec![], schema: vec![] };
        assert_eq!(judge_identity(p, &empty).unwrap(), Found::NoTables);
        let foreign = Identity {
            application_id: 0,
            user_version: 0,
            tables: vec!["t".into()],
            schema: vec![],
        };
        assert!(matches!(judge_identity(p, &foreign), Err(StoreError::Corrupt { .. })));
        let other_app =
            Identity { application_id: 7, user_version: 0, tables: vec![], schema: vec![] };
        assert!(matches!(judge_identity(p, &other_app), Err(StoreError::Corrupt { .. })));
        let newer = Identity {
            application_id: APPLICATION_ID,
            user_version: i64::from(SCHEMA_VERSION) + 1,
            tables: vec![],
            schema: vec![],
        };
        assert!(matches!(
            judge_identity(p, &newer),
            Err(StoreError::SchemaTooNew { found, supported: SCHEMA_VERSION, .. }) if found == SCHEMA_VERSION + 1
        ));
        let gutted = Identity {
            application_id: APPLICATION_ID,
            user_version: 1,
            tables: vec!["jobs".into()],
            schema: vec![],
        };
        assert!(matches!(judge_identity(p, &gutted), Err(StoreError::Corrupt { .. })));
    }

    /// sqlite3's `.dump` restores slothqueue's tables without its
    /// application id: the refusal says so and how to mark the file.
    #[test]
    fn a_dump_restored_queue_is_refused_with_the_fix() {
        let p = Path::new("/q.db");
        let restored = Identity {
            application_id: 0,
            user_version: 0,
            tables: TABLES[TABLES.len() - 1].iter().map(|t| (*t).to_owned()).collect(),
            schema: expected_schema(SCHEMA_VERSION).unwrap().to_vec(),
        };
        let err = judge_identity(p, &restored).unwrap_err().to_string();
        assert!(err.contains("as sqlite3's .dump restores one"), "{err}");
        assert!(
            err.contains(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION}"
            )),
            "{err}"
        );
    }
}
