//! How the store talks to SQLite: the options, opening a connection and
//! configuring it (journal mode, pragmas, the busy handler), and the three
//! kinds of transaction every call runs in.
//!
//! Writes begin `BEGIN IMMEDIATE`, never a deferred transaction that upgrades
//! later: SQLite does not run the busy handler for an upgrade (it would
//! deadlock), so a deferred write fails with `SQLITE_BUSY` at once instead of
//! waiting its turn behind a runner.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use slothqueue_core::{Policy, splitmix64};

use crate::error::Error;

/// How hard SQLite syncs to disk on commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// `synchronous=FULL`: a commit that returned survives power loss. The
    /// default, because slow is fine and gone is not: an acknowledged `add`
    /// must not vanish.
    #[default]
    Full,
    /// `synchronous=NORMAL`: in WAL mode, faster commits, but the last
    /// transactions before a power loss or OS crash may be rolled back
    /// (never corrupted; an application crash loses nothing).
    Normal,
}

/// SQLite's journal mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Journal {
    /// Write-ahead log: readers never block the writer, and `status` never
    /// waits behind a runner. The default.
    #[default]
    Wal,
    /// The classic rollback journal (`journal_mode=DELETE`). Exists so the
    /// conformance suite can prove the store does not depend on WAL for
    /// correctness; readers and the writer block each other briefly.
    Rollback,
}

/// How to open a queue file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteOptions {
    /// Lease, backoff and attempt settings for every transition.
    pub policy: Policy,
    /// Durability of commits.
    pub synchronous: Synchronous,
    /// How long a write waits for another process's write lock before
    /// giving up with `StoreError::Busy`: long enough that a CLI call never
    /// fails just because a runner is committing.
    pub busy_timeout: Duration,
    /// The journal mode.
    pub journal: Journal,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            policy: Policy::default(),
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            journal: Journal::Wal,
        }
    }
}

/// How long one connection tries to switch the journal mode before
/// [`connect`] starts over with a fresh one.
const JOURNAL_SWITCH_WAIT: Duration = Duration::from_millis(50);

/// A read-write connection whose journal mode is already the one asked for.
///
/// Switching a new, empty file to WAL needs an exclusive lock. When several
/// handles create one queue at once, a connection opened before another
/// converted the file still believes it is in rollback mode and asks for
/// that lock, which the other's WAL connection, holding its shared lock for
/// as long as it lives, never grants: it used to wait the whole busy timeout
/// and fail. A fresh connection reads the converted header and simply joins
/// the WAL, so a short try per connection and a new one after each refusal,
/// up to the busy timeout in all, always gets through.
pub(crate) fn connect(path: &Path, options: &SqliteOptions) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mode = match options.journal {
        Journal::Wal => "WAL",
        Journal::Rollback => "DELETE",
    };
    let mut waited = Duration::ZERO;
    loop {
        let mut conn = Connection::open_with_flags(path, flags)?;
        install_busy_handler(&mut conn, JOURNAL_SWITCH_WAIT)?;
        // SQLite answers a switch it could not make with the old mode, not
        // an error: a connection left in rollback mode would write pages
        // straight into the file under another process's immutable probe.
        let refused = match conn
            .query_row(&format!("PRAGMA journal_mode = {mode}"), [], |r| r.get::<_, String>(0))
        {
            Ok(now) if now.eq_ignore_ascii_case(mode) => return Ok(conn),
            Ok(now) => rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                Some(format!("the journal mode stayed {now}, not {mode}")),
            ),
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => e,
            Err(e) => return Err(e),
        };
        if waited >= options.busy_timeout {
            return Err(refused);
        }
        waited += JOURNAL_SWITCH_WAIT;
    }
}

/// The pragmas every connection runs with. The busy handler comes first so
/// that even the journal-mode switch waits for another process's lock.
pub(crate) fn configure(conn: &mut Connection, options: &SqliteOptions) -> rusqlite::Result<()> {
    install_busy_handler(conn, options.busy_timeout)?;
    let mode = match options.journal {
        Journal::Wal => "WAL",
        Journal::Rollback => "DELETE",
    };
    let _: String = conn.query_row(&format!("PRAGMA journal_mode = {mode}"), [], |r| r.get(0))?;
    // Plans must not depend on bound values. Without this, the bundled
    // SQLite marks any statement with a `col = ?` term for re-preparation
    // once its bindings are cleared, which rusqlite's statement cache does
    // on every reuse: each cached statement was parsed and planned again on
    // every call. Every hot query names its index anyway.
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    let sync = match options.synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    // A WAL checkpoint every 128 pages (512 KiB), not SQLite's 1000 (4 MiB):
    // on a nearly full disk the WAL, rewriting the same pages, otherwise
    // takes every byte before its first checkpoint, which then cannot grow
    // the database file to empty it; the queue stays stuck (S15).
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {sync};
         PRAGMA foreign_keys = ON;
         PRAGMA journal_size_limit = 67108864;
         PRAGMA wal_autocheckpoint = 128;"
    ))
}

/// What a read-only connection needs of [`configure`]: the busy handler
/// (a rollback-journal file is locked while a writer commits) and plans
/// that do not depend on bound values. No pragma that writes.
pub(crate) fn configure_read_only(
    conn: &mut Connection,
    options: &SqliteOptions,
) -> rusqlite::Result<()> {
    install_busy_handler(conn, options.busy_timeout)?;
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

/// Waits for a lock held by another connection for up to `timeout`, like
/// `PRAGMA busy_timeout`, but polling every 0.5 to 2.5 ms (jittered) for the
/// whole wait.
///
/// SQLite's own handler backs off to 100 ms naps, so under a steady stream
/// of short write transactions (several runners, a burst of `add`s) a
/// waiter that has napped long keeps missing the brief moments the lock is
/// free and gives up after the timeout although the queue was never stuck.
/// Short, jittered naps give every waiter its turn. As in SQLite, the wait
/// is the sum of the naps, so no clock is read.
fn install_busy_handler(conn: &mut Connection, timeout: Duration) -> rusqlite::Result<()> {
    static SEEDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEEDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut state = splitmix64(u64::from(std::process::id()) << 32 ^ n);
    let mut slept = Duration::ZERO;
    conn.busy_handler(Some(move |count: i32| -> bool {
        if count == 0 {
            slept = Duration::ZERO;
        }
        if slept >= timeout {
            return false;
        }
        state = splitmix64(state);
        let nap = Duration::from_micros(500 + state % 2000).min(timeout - slept);
        nap_blocking(nap);
        slept += nap;
        true
    }))
}

#[expect(
    clippy::disallowed_methods,
    reason = "SQLite's busy handler must block its own thread; it runs on tokio's blocking pool"
)]
pub(crate) fn nap_blocking(d: Duration) {
    std::thread::sleep(d);
}

/// Runs `f` in a write transaction begun `BEGIN IMMEDIATE`, so the busy
/// handler waits for the write lock up front. On any error the transaction
/// is rolled back explicitly: after `SQLITE_FULL` SQLite may leave it open,
/// and the next call must start clean.
pub(crate) fn write_tx<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<T, Error>,
) -> Result<T, Error> {
    // Cached: parsing these two on every write showed in profiles.
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let out = f(conn).and_then(|v| {
        conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(v)
    });
    if out.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    out
}

/// As [`write_tx`], without the fsync when `skip_sync` (WAL with
/// `synchronous=FULL`): for heartbeats and runner records, whose loss in a
/// power cut changes nothing, since after one every lease's owner is gone
/// (another boot) and every runner's record stale. A crash of any process
/// loses nothing, the commit being in the file (in the OS's cache); WAL
/// with `synchronous=NORMAL` never corrupts the file; and the next FULL
/// commit makes it durable with its own.
pub(crate) fn write_tx_unsynced<T>(
    conn: &Connection,
    skip_sync: bool,
    f: impl FnOnce(&Connection) -> Result<T, Error>,
) -> Result<T, Error> {
    if !skip_sync {
        return write_tx(conn, f);
    }
    conn.execute_batch("PRAGMA synchronous = NORMAL")?;
    let out = write_tx(conn, f);
    let restored = conn.execute_batch("PRAGMA synchronous = FULL");
    let v = out?;
    restored?;
    Ok(v)
}

/// Runs `f` in a read transaction, so several queries see one snapshot.
/// It never writes, so it never needs to upgrade.
pub(crate) fn read_tx<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<T, Error>,
) -> Result<T, Error> {
    conn.prepare_cached("BEGIN DEFERRED")?.execute([])?;
    let out = f(conn);
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    out
}
