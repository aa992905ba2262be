//! [`SqliteStore`]: the core's [`Store`] on one SQLite connection.
//!
//! Every operation is one transaction on the blocking pool: read the row(s),
//! ask `slothqueue_core::machine` what the transition is, write the result
//! with the row's old state, owner and attempt in the `UPDATE`'s condition,
//! append the events, commit. Nothing here decides a rule; it only stores.
//!
//! Writes begin `BEGIN IMMEDIATE`, never a deferred transaction that upgrades
//! later: SQLite does not run the busy handler for an upgrade (it would
//! deadlock), so a deferred write fails with `SQLITE_BUSY` at once instead of
//! waiting its turn behind a runner.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags, Row, params, params_from_iter};
use slothqueue_core::machine::{self, PushPlan, Transition};
use slothqueue_core::{
    ClaimFilter, ClaimRequest, Claimed, Completion, Event, EventKind, Failure, Fence, HeartbeatAck,
    Job, JobId, JobState, Lease, ListFilter, ListOrder, NewJob, Owner, Policy, PurgeFilter, Pushed,
    RunnerRecord, SettledAndClaimed, Settlement, Stats, Store, StoreError, Timestamp,
};

use crate::error::{Context, Error};
use crate::schema::{self, Found};

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

/// A queue in one SQLite file. One connection per store, behind a mutex;
/// any number of stores, in this process or others, may share the file.
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Mutex<Connection>,
    ctx: Context,
    policy: Policy,
    /// A call failed for lack of space and the WAL has not been
    /// checkpointed since (see [`Inner::run`]).
    disk_was_full: AtomicBool,
    /// WAL with `synchronous=FULL`: writes that need no fsync may skip it
    /// (see [`write_tx_unsynced`]).
    can_skip_sync: bool,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.inner.ctx.path).finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens the queue at `path`, creating it (and its directory, with the
    /// file private to the user) when it is missing or empty, and migrating
    /// an older layout. A file that is not a queue, is damaged, or comes
    /// from a newer slothqueue is refused before anything is written to it.
    pub fn open(path: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        let ctx = Context { path: path.to_path_buf(), busy_timeout: options.busy_timeout };
        if schema::probe(path, options.busy_timeout)? == Found::New {
            schema::create_file(path)?;
        }
        let mut conn = connect(path, &options).map_err(|e| ctx.map_sql(e))?;
        configure(&mut conn, &options).map_err(|e| ctx.map_sql(e))?;
        schema::migrate(&conn, path).map_err(|e| ctx.map(e))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                ctx,
                policy: options.policy,
                disk_was_full: AtomicBool::new(false),
                can_skip_sync: options.journal == Journal::Wal
                    && options.synchronous == Synchronous::Full,
            }),
        })
    }

    /// The queue file.
    pub fn path(&self) -> &Path {
        &self.inner.ctx.path
    }

    /// Runs SQLite's full consistency check (`PRAGMA integrity_check`, and
    /// `foreign_key_check` for trails without a job). Reads every page, so
    /// it is for `doctor`-style commands, not every open.
    pub fn check_integrity(&self) -> Result<(), StoreError> {
        self.inner.run(|conn| {
            let mut problems: Vec<String> = Vec::new();
            let mut stmt = conn.prepare("PRAGMA integrity_check")?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let line: String = row.get(0)?;
                if line != "ok" {
                    problems.push(line);
                }
            }
            let orphans: i64 =
                conn.query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| r.get(0))?;
            if orphans > 0 {
                problems.push(format!("{orphans} row(s) refer to a missing job"));
            }
            if problems.is_empty() {
                return Ok(());
            }
            let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
            Err(Error::Decode(format!("integrity check failed: {}", shown.join("; "))))
        })
    }

    /// Runs `f` on the connection on tokio's blocking pool.
    async fn with<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &Policy) -> Result<T, Error> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.run(|conn| f(conn, &inner.policy)))
            .await
            .map_err(|e| StoreError::Backend(format!("the storage task failed: {e}")))?
    }

    #[cfg(test)]
    pub(crate) fn lock_for_test(&self) -> MutexGuard<'_, Connection> {
        self.inner.lock()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-written change:
        // the open transaction is rolled back below before the next use.
        self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn run<T>(&self, f: impl FnOnce(&Connection) -> Result<T, Error>) -> Result<T, StoreError> {
        let conn = self.lock();
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        let out = f(&conn).map_err(|e| self.ctx.map(e));
        match &out {
            Err(StoreError::DiskFull(_)) => self.disk_was_full.store(true, Ordering::Relaxed),
            Ok(_) if self.disk_was_full.swap(false, Ordering::Relaxed) => {
                // Space is back. On a small disk the WAL may be what filled
                // it, and writes would eat the freed space again before the
                // next checkpoint: move it into the database file while it
                // fits, and truncate it (S15).
                let truncated = conn
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get::<_, i64>(0))
                    .is_ok_and(|busy| busy == 0);
                if !truncated {
                    self.disk_was_full.store(true, Ordering::Relaxed);
                }
            }
            _ => {}
        }
        out
    }
}

/// The pragmas every connection runs with. The busy handler comes first so
/// that even the journal-mode switch waits for another process's lock.
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
fn connect(path: &Path, options: &SqliteOptions) -> rusqlite::Result<Connection> {
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

fn configure(conn: &mut Connection, options: &SqliteOptions) -> rusqlite::Result<()> {
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

/// A small, well-known mixing function: jitter without a random-number
/// dependency.
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
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
fn write_tx_unsynced<T>(
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
fn read_tx<T>(
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

// ---------------------------------------------------------------------------
// Rows

/// The job columns, in the order [`job_values`] and [`job_from_row`] use.
const JOB_COLUMNS: [&str; 27] = [
    "id",
    "queue",
    "kind",
    "payload",
    "priority",
    "state",
    "attempts",
    "max_attempts",
    "max_runtime_ms",
    "not_before",
    "lease_owner",
    "lease_host",
    "lease_boot_id",
    "lease_pid",
    "lease_pid_start",
    "lease_attempt",
    "lease_until",
    "lease_child_pgid",
    "idempotency_key",
    "payload_hash",
    "cancel_requested",
    "last_error",
    "result",
    "exit_code",
    "created_at",
    "started_at",
    "finished_at",
];

static COLUMNS: LazyLock<String> = LazyLock::new(|| JOB_COLUMNS.join(", "));

static INSERT_JOB: LazyLock<String> = LazyLock::new(|| {
    let marks: Vec<String> = (1..=JOB_COLUMNS.len()).map(|i| format!("?{i}")).collect();
    format!("INSERT INTO jobs ({}) VALUES ({})", *COLUMNS, marks.join(", "))
});

/// Every column but the id, with the old state, owner and attempt in the
/// condition: the write lands only on the row the transition was computed
/// from.
static UPDATE_JOB: LazyLock<String> = LazyLock::new(|| {
    let n = JOB_COLUMNS.len();
    let sets: Vec<String> =
        JOB_COLUMNS.iter().enumerate().skip(1).map(|(i, c)| format!("{c} = ?{}", i + 1)).collect();
    format!(
        "UPDATE jobs SET {} WHERE id = ?1 AND state = ?{} AND lease_owner IS ?{} AND lease_attempt IS ?{}",
        sets.join(", "),
        n + 1,
        n + 2,
        n + 3
    )
});

fn millis(t: Timestamp) -> Value {
    Value::Integer(t.as_millis())
}

fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> Value) -> Value {
    v.map_or(Value::Null, f)
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

fn job_values(job: &Job) -> Result<Vec<Value>, Error> {
    let payload = serde_json::to_string(&job.payload)
        .map_err(|e| StoreError::InvalidInput(format!("the payload cannot be stored: {e}")))?;
    let lease = job.lease.as_ref();
    let owner = lease.map(|l| &l.owner);
    Ok(vec![
        Value::Integer(job.id),
        text(&job.queue),
        text(&job.kind),
        Value::Text(payload),
        Value::Integer(i64::from(job.priority)),
        text(job.state.as_str()),
        Value::Integer(i64::from(job.attempts)),
        Value::Integer(i64::from(job.max_attempts)),
        opt(job.max_runtime, |d| Value::Integer(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))),
        millis(job.not_before),
        opt(owner, |o| text(&o.id)),
        opt(owner, |o| text(&o.host)),
        opt(owner.and_then(|o| o.boot_id.as_deref()), text),
        opt(owner.and_then(|o| o.pid), |p| Value::Integer(i64::from(p))),
        // Stored bit for bit: SQLite integers are signed.
        opt(owner.and_then(|o| o.pid_start_time), |s| {
            Value::Integer(i64::from_ne_bytes(s.to_ne_bytes()))
        }),
        opt(lease, |l| Value::Integer(i64::from(l.attempt))),
        opt(lease, |l| millis(l.until)),
        opt(lease.and_then(|l| l.child_pgid), |g| Value::Integer(i64::from(g))),
        opt(job.idempotency_key.as_deref(), text),
        text(&job.payload_hash),
        Value::Integer(i64::from(job.cancel_requested)),
        opt(job.last_error.as_deref(), text),
        opt(job.result.as_deref(), text),
        opt(job.exit_code, |c| Value::Integer(i64::from(c))),
        millis(job.created_at),
        opt(job.started_at, millis),
        opt(job.finished_at, millis),
    ])
}

fn ts(v: i64) -> Timestamp {
    Timestamp::from_millis(v)
}

fn job_from_row(row: &Row<'_>) -> Result<Job, Error> {
    let id: i64 = row.get(0)?;
    let state: String = row.get(5)?;
    let state = state.parse::<JobState>().map_err(|e| Error::Decode(format!("job #{id}: {e}")))?;
    let payload: String = row.get(3)?;
    let payload = serde_json::from_str(&payload)
        .map_err(|e| Error::Decode(format!("job #{id}: the payload is not JSON: {e}")))?;
    let max_runtime = match row.get::<_, Option<i64>>(8)? {
        None => None,
        Some(ms) => Some(Duration::from_millis(
            u64::try_from(ms)
                .map_err(|_| Error::Decode(format!("job #{id}: negative max runtime {ms}")))?,
        )),
    };
    let lease = match row.get::<_, Option<String>>(10)? {
        None => None,
        Some(owner_id) => Some(Lease {
            owner: Owner {
                id: owner_id,
                host: row.get(11)?,
                boot_id: row.get(12)?,
                pid: row.get(13)?,
                pid_start_time: row
                    .get::<_, Option<i64>>(14)?
                    .map(|s| u64::from_ne_bytes(s.to_ne_bytes())),
            },
            attempt: row.get(15)?,
            until: ts(row.get(16)?),
            child_pgid: row.get(17)?,
        }),
    };
    Ok(Job {
        id,
        queue: row.get(1)?,
        kind: row.get(2)?,
        payload,
        priority: row.get(4)?,
        state,
        attempts: row.get(6)?,
        max_attempts: row.get(7)?,
        max_runtime,
        not_before: ts(row.get(9)?),
        lease,
        idempotency_key: row.get(18)?,
        payload_hash: row.get(19)?,
        cancel_requested: row.get::<_, i64>(20)? != 0,
        last_error: row.get(21)?,
        result: row.get(22)?,
        exit_code: row.get(23)?,
        created_at: ts(row.get(24)?),
        started_at: row.get::<_, Option<i64>>(25)?.map(ts),
        finished_at: row.get::<_, Option<i64>>(26)?.map(ts),
    })
}

/// Runs a `SELECT` of [`JOB_COLUMNS`] and decodes every row.
fn query_jobs(conn: &Connection, sql: &str, params: &[Value]) -> Result<Vec<Job>, Error> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params_from_iter(params))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(job_from_row(row)?);
    }
    Ok(out)
}

fn query_job(conn: &Connection, sql: &str, params: &[Value]) -> Result<Option<Job>, Error> {
    Ok(query_jobs(conn, sql, params)?.into_iter().next())
}

fn find(conn: &Connection, id: JobId) -> Result<Option<Job>, Error> {
    let sql = format!("SELECT {} FROM jobs WHERE id = ?1", *COLUMNS);
    query_job(conn, &sql, &[Value::Integer(id)])
}

fn load(conn: &Connection, id: JobId) -> Result<Job, Error> {
    find(conn, id)?.ok_or(Error::Store(StoreError::NotFound(id)))
}

fn key_holder(conn: &Connection, key: &str) -> Result<Option<Job>, Error> {
    let sql = format!("SELECT {} FROM jobs WHERE idempotency_key = ?1", *COLUMNS);
    query_job(conn, &sql, &[text(key)])
}

fn insert_job(conn: &Connection, job: &Job) -> Result<(), Error> {
    conn.prepare_cached(&INSERT_JOB)?.execute(params_from_iter(job_values(job)?))?;
    Ok(())
}

/// Writes `new` over `old`, on condition that the row still is `old`.
fn update_job(conn: &Connection, old: &Job, new: &Job) -> Result<(), Error> {
    let mut values = job_values(new)?;
    values[0] = Value::Integer(old.id);
    values.push(text(old.state.as_str()));
    values.push(opt(old.lease.as_ref(), |l| text(&l.owner.id)));
    values.push(opt(old.lease.as_ref(), |l| Value::Integer(i64::from(l.attempt))));
    let changed = conn.prepare_cached(&UPDATE_JOB)?.execute(params_from_iter(values))?;
    if changed != 1 {
        // Impossible under the write lock unless something outside
        // slothqueue edits the file; refuse rather than guess.
        return Err(Error::Store(StoreError::Backend(format!(
            "job #{} changed under a write transaction ({changed} rows matched)",
            old.id
        ))));
    }
    Ok(())
}

fn append_events(conn: &Connection, events: &[Event]) -> Result<(), Error> {
    append_events_from(conn, events, None)
}

/// Appends `events`, numbering a job's from `first_seq` when the caller
/// knows its trail is empty (a job just created), else after its last one:
/// one lookup per job, not per event.
fn append_events_from(
    conn: &Connection,
    events: &[Event],
    first_seq: Option<i64>,
) -> Result<(), Error> {
    let mut insert = conn.prepare_cached(
        "INSERT INTO events (job_id, seq, at, kind, owner, attempt, message, retry_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    let mut last: Option<(JobId, i64)> = None;
    for e in events {
        let seq = match (last, first_seq) {
            (Some((job, seq)), _) if job == e.job_id => seq + 1,
            (None, Some(first)) => first,
            _ => conn
                .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE job_id = ?1")?
                .query_row([e.job_id], |r| r.get(0))?,
        };
        last = Some((e.job_id, seq));
        insert.execute(params![
            e.job_id,
            seq,
            e.at.as_millis(),
            e.kind.as_str(),
            e.owner,
            e.attempt,
            e.message,
            e.retry_at.map(Timestamp::as_millis),
        ])?;
    }
    Ok(())
}

/// Writes a transition computed from `old`: the row, then its events.
fn apply(conn: &Connection, old: &Job, t: &Transition) -> Result<(), Error> {
    update_job(conn, old, &t.job)?;
    append_events(conn, &t.events)
}

fn event_from_row(row: &Row<'_>) -> Result<Event, Error> {
    let job_id: i64 = row.get(0)?;
    let kind: String = row.get(2)?;
    let kind =
        kind.parse::<EventKind>().map_err(|e| Error::Decode(format!("job #{job_id}: {e}")))?;
    Ok(Event {
        job_id,
        at: ts(row.get(1)?),
        kind,
        owner: row.get(3)?,
        attempt: row.get(4)?,
        message: row.get(5)?,
        retry_at: row.get::<_, Option<i64>>(6)?.map(ts),
    })
}

// ---------------------------------------------------------------------------
// Claim

/// The highest priority below `?1` that has a pending job (in queue `?2`).
/// One index seek each, so a claim walks priority levels, not jobs.
pub(crate) fn top_priority_sql(by_queue: bool) -> &'static str {
    if by_queue {
        "SELECT priority FROM jobs INDEXED BY jobs_pending_queue
         WHERE state = 'pending' AND queue = ?2 AND priority < ?1
         ORDER BY priority DESC LIMIT 1"
    } else {
        "SELECT priority FROM jobs INDEXED BY jobs_pending
         WHERE state = 'pending' AND priority < ?1
         ORDER BY priority DESC LIMIT 1"
    }
}

/// The first due job at priority `?1` (`not_before <= ?2`), in queue `?3`,
/// of one of `kinds` kinds (bound after the queue).
pub(crate) fn due_at_priority_sql(by_queue: bool, kinds: usize) -> String {
    let (index, queue) =
        if by_queue { ("jobs_pending_queue", " AND queue = ?3") } else { ("jobs_pending", "") };
    let first_kind = if by_queue { 4 } else { 3 };
    let kinds = if kinds == 0 {
        String::new()
    } else {
        let marks: Vec<String> = (0..kinds).map(|i| format!("?{}", first_kind + i)).collect();
        format!(" AND kind IN ({})", marks.join(", "))
    };
    format!(
        "SELECT {} FROM jobs INDEXED BY {index}
         WHERE state = 'pending' AND priority = ?1 AND not_before <= ?2{queue}{kinds}
         ORDER BY not_before, id LIMIT 1",
        *COLUMNS
    )
}

/// The best due pending job in one queue (or all), in claim order.
fn best_due_in(
    conn: &Connection,
    queue: Option<&str>,
    kinds: &[String],
    now: Timestamp,
) -> Result<Option<Job>, Error> {
    let by_queue = queue.is_some();
    let due_sql = due_at_priority_sql(by_queue, kinds.len());
    let mut below = i64::from(i32::MAX) + 1;
    loop {
        let mut seek: Vec<Value> = vec![Value::Integer(below)];
        if let Some(q) = queue {
            seek.push(text(q));
        }
        let mut stmt = conn.prepare_cached(top_priority_sql(by_queue))?;
        let priority: Option<i64> = {
            let mut rows = stmt.query(params_from_iter(&seek))?;
            match rows.next()? {
                Some(row) => Some(row.get(0)?),
                None => None,
            }
        };
        let Some(priority) = priority else { return Ok(None) };
        let mut params = vec![Value::Integer(priority), millis(now)];
        if let Some(q) = queue {
            params.push(text(q));
        }
        params.extend(kinds.iter().map(|k| text(k)));
        if let Some(job) = query_job(conn, &due_sql, &params)? {
            return Ok(Some(job));
        }
        below = priority;
    }
}

/// The best due pending job the filter admits.
fn best_due_pending(
    conn: &Connection,
    filter: &ClaimFilter,
    now: Timestamp,
) -> Result<Option<Job>, Error> {
    let kinds: &[String] = match &filter.kinds {
        Some(ks) if ks.is_empty() => return Ok(None),
        Some(ks) => ks,
        None => &[],
    };
    let mut queues: Vec<Option<&str>> = filter.queues.iter().map(|q| Some(q.as_str())).collect();
    queues.sort_unstable();
    queues.dedup();
    if queues.is_empty() {
        queues.push(None);
    }
    let mut best: Option<Job> = None;
    for q in queues {
        if let Some(job) = best_due_in(conn, q, kinds, now)? {
            if best.as_ref().is_none_or(|b| job.claim_order() < b.claim_order()) {
                best = Some(job);
            }
        }
    }
    Ok(best)
}

fn running_jobs(conn: &Connection) -> Result<Vec<Job>, Error> {
    let sql = format!(
        "SELECT {} FROM jobs INDEXED BY jobs_running WHERE state = 'running' ORDER BY lease_until",
        *COLUMNS
    );
    query_jobs(conn, &sql, &[])
}

/// One claim, as [`machine::plan_claim`] decides it from the running jobs
/// and the best due pending job, judged inside this transaction.
fn claim_tx(
    conn: &Connection,
    request: &ClaimRequest,
    now: Timestamp,
    policy: &Policy,
) -> Result<Option<Claimed>, Error> {
    let running = running_jobs(conn)?;
    let best_due = best_due_pending(conn, &request.filter, now)?;
    let plan = machine::plan_claim(request, running, best_due, now, policy)
        .map_err(|e| Error::Decode(format!("the pending indexes are out of step: {e}")))?;
    for w in plan.retire.iter().chain(&plan.take) {
        apply(conn, &w.before, &w.after)?;
    }
    Ok(plan.claimed())
}

// ---------------------------------------------------------------------------
// Push

/// The id the next job gets: above every id ever used, including purged and
/// restored ones (`purge` raises the high water in `meta` before it
/// deletes; see `schema::v2`). Read once per write transaction: the
/// transaction's inserts count up from it.
fn next_id(conn: &Connection) -> Result<JobId, Error> {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT MAX(COALESCE((SELECT value FROM meta WHERE name = '{}'), 0),
                    COALESCE((SELECT MAX(id) FROM jobs), 0)) + 1",
            schema::ID_HIGH_WATER
        )
    });
    Ok(conn.prepare_cached(&SQL)?.query_row([], |r| r.get(0))?)
}

fn push_one(
    conn: &Connection,
    new: &NewJob,
    now: Timestamp,
    policy: &Policy,
    next: &mut JobId,
) -> Result<Pushed, Error> {
    let holder = match &new.idempotency_key {
        Some(key) => key_holder(conn, key)?,
        None => None,
    };
    let id = *next;
    match machine::plan_push(new, holder.as_ref(), id, now) {
        PushPlan::Duplicate(existing) => {
            let job = match holder.filter(|h| h.id == existing) {
                Some(h) => h,
                None => load(conn, existing)?,
            };
            Ok(Pushed { job, created: false, superseded: None })
        }
        PushPlan::Insert { displaced, superseded } => {
            if let (Some(t), Some(old)) = (displaced, holder.as_ref()) {
                apply(conn, old, &t)?;
            }
            let t = machine::create(id, new, now, policy);
            insert_job(conn, &t.job)?;
            *next += 1;
            append_events_from(conn, &t.events, Some(1))?;
            Ok(Pushed { job: t.job, created: true, superseded })
        }
    }
}

// ---------------------------------------------------------------------------
// The rest

fn list_tx(conn: &Connection, filter: &ListFilter) -> Result<Vec<Job>, Error> {
    let (sql, params) = list_sql(filter)?;
    query_jobs(conn, &sql, &params)
}

/// The `SELECT` behind `list`, and its parameters.
fn list_sql(filter: &ListFilter) -> Result<(String, Vec<Value>), Error> {
    // Running jobs are few and their index is by lease: without the hint
    // the planner walks the whole table in id order to find them.
    let hint =
        if filter.state == Some(JobState::Running) { " INDEXED BY jobs_running" } else { "" };
    let mut sql = format!("SELECT {} FROM jobs{hint} WHERE 1", *COLUMNS);
    let mut params: Vec<Value> = Vec::new();
    let mut bind = |sql: &mut String, cond: &str, v: Value| {
        params.push(v);
        sql.push_str(&format!(" AND {cond} ?{}", params.len()));
    };
    if let Some(s) = filter.state {
        // A literal, not a parameter: the planner picks a partial index
        // (`jobs_done`, `jobs_pending`, ...) only for a state it can see.
        sql.push_str(&format!(" AND state = '{}'", s.as_str()));
    }
    if let Some(q) = &filter.queue {
        bind(&mut sql, "queue =", text(q));
    }
    if let Some(k) = &filter.kind {
        bind(&mut sql, "kind =", text(k));
    }
    match (filter.order, filter.cursor) {
        (ListOrder::Newest, Some(c)) => bind(&mut sql, "id <", Value::Integer(c)),
        (ListOrder::Oldest, Some(c)) => bind(&mut sql, "id >", Value::Integer(c)),
        (ListOrder::DueFirst, Some(_)) => {
            return Err(Error::Store(StoreError::InvalidInput(
                "a cursor cannot be used with the due-first order".to_owned(),
            )));
        }
        (_, None) => {}
    }
    sql.push_str(match filter.order {
        ListOrder::Newest => " ORDER BY id DESC",
        ListOrder::Oldest => " ORDER BY id",
        ListOrder::DueFirst => " ORDER BY priority DESC, not_before, id",
    });
    if let Some(limit) = filter.limit {
        params.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT ?{}", params.len()));
    }
    Ok((sql, params))
}

/// Every count is the size of one partial index, read with `dbstat`: it
/// walks the index's pages and sums their cells, so 100,000 pending jobs
/// cost a few hundred page reads, where `COUNT(*)` steps through every
/// entry (SQLite's own page-count shortcut skips partial indexes). Due now
/// is the pending count less the jobs not yet due, which are few unless
/// many are scheduled ahead.
fn stats_tx(conn: &Connection, now: Timestamp) -> Result<Stats, Error> {
    let count = |index: &str| -> Result<u64, Error> {
        let n: Option<i64> = conn
            .prepare_cached("SELECT ncell FROM dbstat WHERE name = ?1 AND aggregate = 1")?
            .query_row([index], |r| r.get(0))
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        match n {
            Some(n) => Ok(u64::try_from(n).unwrap_or(0)),
            None => Err(Error::Decode(format!("the index `{index}` is missing"))),
        }
    };
    let pending = count("jobs_pending_due")?;
    let not_due: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM jobs INDEXED BY jobs_pending_due
             WHERE state = 'pending' AND not_before > ?1",
        )?
        .query_row([now.as_millis()], |r| r.get(0))?;
    let next_due = first_value(
        conn,
        "SELECT not_before FROM jobs INDEXED BY jobs_pending_due
         WHERE state = 'pending' AND not_before > ?1 ORDER BY not_before LIMIT 1",
        &[millis(now)],
    )?
    .map(ts);
    Ok(Stats {
        pending,
        running: count("jobs_running")?,
        done: count("jobs_done")?,
        failed: count("jobs_failed")?,
        cancelled: count("jobs_cancelled")?,
        due_now: pending.saturating_sub(u64::try_from(not_due).unwrap_or(0)),
        next_due,
    })
}

fn first_value(conn: &Connection, sql: &str, params: &[Value]) -> Result<Option<i64>, Error> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params_from_iter(params))?;
    Ok(match rows.next()? {
        Some(row) => Some(row.get(0)?),
        None => None,
    })
}

fn next_due_tx(conn: &Connection) -> Result<Option<Timestamp>, Error> {
    let pending = first_value(
        conn,
        "SELECT not_before FROM jobs INDEXED BY jobs_pending_due
         WHERE state = 'pending' ORDER BY not_before LIMIT 1",
        &[],
    )?;
    let lease = first_value(
        conn,
        "SELECT lease_until FROM jobs INDEXED BY jobs_running
         WHERE state = 'running' ORDER BY lease_until LIMIT 1",
        &[],
    )?;
    Ok(match (pending, lease) {
        (Some(a), Some(b)) => Some(ts(a.min(b))),
        (a, b) => a.or(b).map(ts),
    })
}

fn purge_tx(conn: &Connection, filter: &PurgeFilter) -> Result<Vec<JobId>, Error> {
    let states = if filter.include_pending {
        "('pending', 'done', 'failed', 'cancelled')"
    } else {
        "('done', 'failed', 'cancelled')"
    };
    let age = if filter.older_than.is_some() {
        " AND (CASE WHEN state = 'pending' THEN created_at
                    ELSE COALESCE(finished_at, created_at) END) < ?1"
    } else {
        ""
    };
    let cond = format!("state IN {states}{age}");
    let params: Vec<Value> = filter.older_than.map(millis).into_iter().collect();
    let ids: Vec<JobId> = {
        let mut stmt = conn.prepare(&format!("SELECT id FROM jobs WHERE {cond} ORDER BY id"))?;
        let ids = stmt.query_map(params_from_iter(&params), |r| r.get(0))?;
        ids.collect::<rusqlite::Result<_>>()?
    };
    if !ids.is_empty() {
        // Ids are never reused: the next id stays above the ones deleted here.
        conn.prepare_cached(&format!(
            "UPDATE meta SET value = MAX(value, COALESCE((SELECT MAX(id) FROM jobs), 0))
             WHERE name = '{}'",
            schema::ID_HIGH_WATER
        ))?
        .execute([])?;
    }
    // Trails go explicitly, not only by the cascade, so a file opened
    // without `foreign_keys` by another tool cannot leave orphans behind.
    conn.execute(
        &format!("DELETE FROM events WHERE job_id IN (SELECT id FROM jobs WHERE {cond})"),
        params_from_iter(&params),
    )?;
    conn.execute(&format!("DELETE FROM jobs WHERE {cond}"), params_from_iter(&params))?;
    Ok(ids)
}

fn restore_tx(conn: &Connection, job: &Job, events: &[Event]) -> Result<(), Error> {
    let invalid = |m: String| Err(Error::Store(StoreError::InvalidInput(m)));
    if job.id <= 0 {
        return invalid(format!("job id {} is not positive", job.id));
    }
    if (job.state == JobState::Running) != job.lease.is_some() {
        return invalid(format!("job #{}: a lease is present exactly while running", job.id));
    }
    if let Some(e) = events.iter().find(|e| e.job_id != job.id) {
        return invalid(format!("job #{}: its trail holds an event of job #{}", job.id, e.job_id));
    }
    if find(conn, job.id)?.is_some() {
        return invalid(format!("job #{} already exists", job.id));
    }
    if let Some(key) = &job.idempotency_key {
        if let Some(holder) = key_holder(conn, key)? {
            return invalid(format!(
                "idempotency key `{key}` is already held by job #{}",
                holder.id
            ));
        }
    }
    insert_job(conn, job)?;
    append_events(conn, events)
}

fn decode_runner(json: &str) -> Result<RunnerRecord, Error> {
    serde_json::from_str(json).map_err(|e| Error::Decode(format!("a runner record: {e}")))
}

#[async_trait]
impl Store for SqliteStore {
    async fn push(&self, job: NewJob, now: Timestamp) -> Result<Pushed, StoreError> {
        let mut out = self.push_many(vec![job], now).await?;
        out.pop().ok_or_else(|| StoreError::Backend("push returned nothing".to_owned()))
    }

    async fn push_many(
        &self,
        jobs: Vec<NewJob>,
        now: Timestamp,
    ) -> Result<Vec<Pushed>, StoreError> {
        for job in &jobs {
            machine::validate(job)?;
        }
        self.with(move |conn, policy| {
            write_tx(conn, |conn| {
                let mut next = next_id(conn)?;
                jobs.iter().map(|j| push_one(conn, j, now, policy, &mut next)).collect()
            })
        })
        .await
    }

    async fn claim(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<Option<Claimed>, StoreError> {
        let request = request.clone();
        self.with(move |conn, policy| write_tx(conn, |conn| claim_tx(conn, &request, now, policy)))
            .await
    }

    async fn heartbeat(
        &self,
        id: JobId,
        fence: &Fence,
        child_pgid: Option<i32>,
        now: Timestamp,
    ) -> Result<HeartbeatAck, StoreError> {
        let fence = fence.clone();
        let skip_sync = self.inner.can_skip_sync;
        self.with(move |conn, policy| {
            write_tx_unsynced(conn, skip_sync, |conn| {
                let job = load(conn, id)?;
                let (t, ack) = machine::heartbeat(&job, &fence, now, policy, child_pgid)?;
                apply(conn, &job, &t)?;
                Ok(ack)
            })
        })
        .await
    }

    async fn complete(
        &self,
        id: JobId,
        fence: &Fence,
        done: Completion,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let fence = fence.clone();
        self.transition(id, move |job, _| machine::complete(job, &fence, &done, now)).await
    }

    async fn fail(
        &self,
        id: JobId,
        fence: &Fence,
        failure: Failure,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let fence = fence.clone();
        self.transition(id, move |job, policy| machine::fail(job, &fence, &failure, now, policy))
            .await
    }

    async fn settle_and_claim(
        &self,
        id: JobId,
        fence: &Fence,
        settlement: Settlement,
        next: &ClaimRequest,
        now: Timestamp,
    ) -> Result<SettledAndClaimed, StoreError> {
        let (fence, request) = (fence.clone(), next.clone());
        self.with(move |conn, policy| {
            write_tx(conn, |conn| {
                let job = load(conn, id)?;
                let t = machine::settle(&job, &fence, &settlement, now, policy)?;
                apply(conn, &job, &t)?;
                if t.job.state == JobState::Done {
                    crate::failpoint::hit("mid_complete"); // written, not committed
                }
                let next = claim_tx(conn, &request, now, policy)?;
                Ok(SettledAndClaimed { settled: t.job, next })
            })
        })
        .await
    }

    async fn release(&self, id: JobId, fence: &Fence, now: Timestamp) -> Result<Job, StoreError> {
        let fence = fence.clone();
        self.transition(id, move |job, _| machine::release(job, &fence, now)).await
    }

    async fn cancel(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.transition(id, move |job, _| machine::cancel(job, now)).await
    }

    async fn retry(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.transition(id, move |job, _| machine::retry(job, now)).await
    }

    async fn get(&self, id: JobId) -> Result<Job, StoreError> {
        self.with(move |conn, _| load(conn, id)).await
    }

    async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        self.with(move |conn, _| {
            read_tx(conn, |conn| {
                load(conn, id)?;
                let mut stmt = conn.prepare_cached(
                    "SELECT job_id, at, kind, owner, attempt, message, retry_at
                     FROM events WHERE job_id = ?1 ORDER BY seq",
                )?;
                let mut rows = stmt.query([id])?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    out.push(event_from_row(row)?);
                }
                Ok(out)
            })
        })
        .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
        let filter = filter.clone();
        self.with(move |conn, _| list_tx(conn, &filter)).await
    }

    async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError> {
        self.with(move |conn, _| read_tx(conn, |conn| stats_tx(conn, now))).await
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.with(|conn, _| read_tx(conn, next_due_tx)).await
    }

    async fn reclaim_dead(
        &self,
        attempts: &[(JobId, Fence)],
        now: Timestamp,
    ) -> Result<Vec<Job>, StoreError> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        let attempts = attempts.to_vec();
        self.with(move |conn, _| {
            write_tx(conn, |conn| {
                let mut taken = Vec::new();
                for (id, attempt) in &attempts {
                    let Some(job) = find(conn, *id)? else { continue };
                    if let Some(t) = machine::reclaim_dead(&job, attempt, now) {
                        apply(conn, &job, &t)?;
                        taken.push(job);
                    }
                }
                Ok(taken)
            })
        })
        .await
    }

    async fn purge(&self, filter: &PurgeFilter) -> Result<Vec<JobId>, StoreError> {
        let filter = filter.clone();
        self.with(move |conn, _| write_tx(conn, |conn| purge_tx(conn, &filter))).await
    }

    async fn restore(&self, job: Job, events: Vec<Event>) -> Result<(), StoreError> {
        self.with(move |conn, _| write_tx(conn, |conn| restore_tx(conn, &job, &events))).await
    }

    async fn put_runner(&self, record: &RunnerRecord) -> Result<(), StoreError> {
        let json = serde_json::to_string(record).map_err(|e| {
            StoreError::InvalidInput(format!("the runner record cannot be stored: {e}"))
        })?;
        let owner_id = record.owner.id.clone();
        let skip_sync = self.inner.can_skip_sync;
        self.with(move |conn, _| {
            write_tx_unsynced(conn, skip_sync, |conn| {
                conn.prepare_cached(
                    "INSERT INTO runners (owner_id, record) VALUES (?1, ?2)
                     ON CONFLICT (owner_id) DO UPDATE SET record = excluded.record",
                )?
                .execute(params![owner_id, json])?;
                Ok(())
            })
        })
        .await
    }

    async fn remove_runner(&self, owner_id: &str) -> Result<(), StoreError> {
        let owner_id = owner_id.to_owned();
        self.with(move |conn, _| {
            write_tx(conn, |conn| {
                conn.execute("DELETE FROM runners WHERE owner_id = ?1", [owner_id])?;
                Ok(())
            })
        })
        .await
    }

    async fn runners(&self) -> Result<Vec<RunnerRecord>, StoreError> {
        self.with(|conn, _| {
            let mut stmt = conn.prepare_cached("SELECT record FROM runners ORDER BY owner_id")?;
            let mut rows = stmt.query([])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let json: String = row.get(0)?;
                out.push(decode_runner(&json)?);
            }
            Ok(out)
        })
        .await
    }
}

impl SqliteStore {
    /// One user- or owner-side transition on one job: load, decide, write.
    async fn transition<F>(&self, id: JobId, decide: F) -> Result<Job, StoreError>
    where
        F: FnOnce(&Job, &Policy) -> Result<Transition, machine::TransitionError> + Send + 'static,
    {
        self.with(move |conn, policy| {
            write_tx(conn, |conn| {
                let job = load(conn, id)?;
                let t = decide(&job, policy)?;
                apply(conn, &job, &t)?;
                if t.job.state == JobState::Done {
                    crate::failpoint::hit("mid_complete"); // written, not committed
                }
                Ok(t.job)
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{APPLICATION_ID, SCHEMA_VERSION};
    use slothqueue_core::ClockOnly;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
    }

    fn open(dir: &tempfile::TempDir, options: SqliteOptions) -> SqliteStore {
        SqliteStore::open(&dir.path().join("q.db"), options).unwrap()
    }

    fn pragma<T: rusqlite::types::FromSql>(conn: &Connection, name: &str) -> T {
        conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn the_store_can_be_shared_across_tasks() {
        fn shareable<T: Send + Sync + 'static>() {}
        shareable::<SqliteStore>();
    }

    #[test]
    fn default_pragmas_are_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        assert_eq!(pragma::<String>(&conn, "journal_mode"), "wal");
        assert_eq!(pragma::<i64>(&conn, "synchronous"), 2, "FULL");
        assert_eq!(pragma::<i64>(&conn, "foreign_keys"), 1);
        assert_eq!(pragma::<i32>(&conn, "application_id"), APPLICATION_ID);
        assert_eq!(pragma::<i64>(&conn, "user_version"), i64::from(SCHEMA_VERSION));
    }

    #[test]
    fn variant_pragmas_are_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions {
            synchronous: Synchronous::Normal,
            journal: Journal::Rollback,
            busy_timeout: Duration::from_millis(200),
            ..SqliteOptions::default()
        };
        let store = open(&dir, options);
        let conn = store.lock_for_test();
        assert_eq!(pragma::<String>(&conn, "journal_mode"), "delete");
        assert_eq!(pragma::<i64>(&conn, "synchronous"), 1, "NORMAL");
        assert_eq!(pragma::<i64>(&conn, "foreign_keys"), 1);
    }

    fn plan(conn: &Connection, sql: &str, params: &[Value]) -> Vec<String> {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt.query_map(params_from_iter(params), |r| r.get::<_, String>(3)).unwrap();
        rows.map(Result::unwrap).collect()
    }

    /// Each plan step searches the named index: no table scan, no sort.
    fn assert_uses(conn: &Connection, sql: &str, params: &[Value], index: &str) {
        let steps = plan(conn, sql, params);
        assert!(!steps.is_empty(), "no plan for {sql}");
        for step in &steps {
            assert!(step.starts_with("SEARCH jobs USING"), "{step:?} in {steps:?} for {sql}");
            assert!(step.contains(&format!("INDEX {index} (")), "{step:?} for {sql}");
            assert!(!step.contains("TEMP B-TREE"), "{step:?} for {sql}");
        }
    }

    #[test]
    fn claim_queries_seek_the_pending_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        let (p, now, q) = (Value::Integer(0), millis(t(0)), text("mail"));
        assert_uses(&conn, top_priority_sql(false), std::slice::from_ref(&p), "jobs_pending");
        assert_uses(&conn, top_priority_sql(true), &[p.clone(), q.clone()], "jobs_pending_queue");
        assert_uses(
            &conn,
            &due_at_priority_sql(false, 0),
            &[p.clone(), now.clone()],
            "jobs_pending",
        );
        assert_uses(
            &conn,
            &due_at_priority_sql(true, 2),
            &[p, now, q, text("a"), text("b")],
            "jobs_pending_queue",
        );
        let running = format!(
            "SELECT {} FROM jobs INDEXED BY jobs_running WHERE state = 'running' ORDER BY lease_until",
            *COLUMNS
        );
        let steps = plan(&conn, &running, &[]);
        assert!(steps.iter().all(|s| s.contains("INDEX jobs_running") && !s.contains("TEMP")));
    }

    #[test]
    fn stats_read_indexes_not_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        assert_uses(
            &conn,
            "SELECT COUNT(*) FROM jobs INDEXED BY jobs_pending_due
             WHERE state = 'pending' AND not_before > ?1",
            &[millis(t(0))],
            "jobs_pending_due",
        );
        assert_uses(
            &conn,
            "SELECT not_before FROM jobs INDEXED BY jobs_pending_due
             WHERE state = 'pending' AND not_before > ?1 ORDER BY not_before LIMIT 1",
            &[millis(t(0))],
            "jobs_pending_due",
        );
    }

    #[test]
    fn key_lookups_and_lists_by_state_seek_partial_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        let by_key = format!("SELECT {} FROM jobs WHERE idempotency_key = ?1", *COLUMNS);
        assert_uses(&conn, &by_key, &[text("k")], "jobs_key");
        for (state, index) in [
            (JobState::Running, "jobs_running"),
            (JobState::Done, "jobs_done"),
            (JobState::Failed, "jobs_failed"),
            (JobState::Cancelled, "jobs_cancelled"),
        ] {
            let mut sql = format!("SELECT {} FROM jobs WHERE 1", *COLUMNS);
            sql.push_str(&format!(" AND state = '{}' ORDER BY id DESC LIMIT 50", state.as_str()));
            let steps = plan(&conn, &sql, &[]);
            if state == JobState::Running {
                // Few rows, sorted by id: the lease-ordered index, not a scan.
                let filter =
                    ListFilter { state: Some(state), limit: Some(50), ..ListFilter::default() };
                let (sql, params) = list_sql(&filter).unwrap();
                let steps = plan(&conn, &sql, &params);
                assert!(steps[0].contains("INDEX jobs_running"), "{steps:?}");
                continue;
            }
            assert!(
                steps.iter().all(|s| s.contains(&format!("INDEX {index}")) && !s.contains("TEMP")),
                "{steps:?}"
            );
        }
    }

    /// The counts `stats` reads from `dbstat` agree with `COUNT(*)`, also
    /// once the indexes are deep enough to have interior pages (whose cells
    /// are entries too in an index b-tree) and after deletes.
    #[tokio::test]
    async fn index_sizes_are_exact_counts() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let jobs: Vec<NewJob> = (0..30_000)
            .map(|i| NewJob::shell("true", "/").not_before(t(i % 7 - 3)).priority((i % 3) as i32))
            .collect();
        store.push_many(jobs, t(0)).await.unwrap();
        let owner = Owner::named("w");
        for i in 0..300 {
            let c = store.claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), t(1)).await;
            let c = c.unwrap().unwrap();
            match i % 4 {
                0 => {}
                1 => drop(store.complete(c.job.id, &c.fence, Completion::default(), t(2)).await),
                2 => drop(store.cancel(c.job.id, t(2)).await),
                _ => drop(
                    store
                        .fail(
                            c.job.id,
                            &c.fence,
                            Failure { error: "x".into(), exit_code: None },
                            t(2),
                        )
                        .await,
                ),
            }
        }
        for id in (1..=30_000).step_by(97) {
            let _ = store.cancel(id, t(3)).await;
        }
        let want = {
            let conn = store.lock_for_test();
            let n = |state: &str| -> u64 {
                conn.query_row(
                    &format!("SELECT COUNT(*) FROM jobs NOT INDEXED WHERE state = '{state}'"),
                    [],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap()
                .try_into()
                .unwrap()
            };
            let due: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM jobs NOT INDEXED WHERE state = 'pending' AND not_before <= ?1",
                    [t(1).as_millis()],
                    |r| r.get(0),
                )
                .unwrap();
            let deep: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM dbstat WHERE name = 'jobs_pending_due' AND pagetype = 'internal'",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(deep > 0, "the pending index has interior pages");
            Stats {
                pending: n("pending"),
                running: n("running"),
                done: n("done"),
                failed: n("failed"),
                cancelled: n("cancelled"),
                due_now: due.try_into().unwrap(),
                next_due: Some(t(2)),
            }
        };
        assert!(want.done > 0 && want.cancelled > 0 && want.running > 0, "{want:?}");
        assert_eq!(store.stats(t(1)).await.unwrap(), want);
    }

    #[tokio::test]
    async fn heartbeats_and_runner_records_leave_synchronous_as_configured() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        store.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        let owner = Owner::named("w");
        let c = store
            .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), t(1))
            .await
            .unwrap();
        let c = c.unwrap();
        store.heartbeat(c.job.id, &c.fence, Some(42), t(2)).await.unwrap();
        let record = RunnerRecord {
            owner: owner.clone(),
            queues: vec![],
            started_at: t(0),
            updated_at: t(2),
            activity: slothqueue_core::RunnerActivity::Starting,
        };
        store.put_runner(&record).await.unwrap();
        assert_eq!(pragma::<i64>(&store.lock_for_test(), "synchronous"), 2, "FULL again");
        assert_eq!(store.get(c.job.id).await.unwrap().lease.unwrap().child_pgid, Some(42));
        assert_eq!(store.runners().await.unwrap(), vec![record]);
    }

    #[tokio::test]
    async fn claim_skips_a_priority_level_with_nothing_due() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let later = NewJob::shell("later", "/").priority(9).not_before(t(60));
        let mail = NewJob::new("send", serde_json::json!({})).queue("mail").priority(1);
        let now = NewJob::shell("now", "/").priority(0);
        for j in [later, mail, now] {
            store.push(j, t(0)).await.unwrap();
        }
        let owner = Owner::named("w");
        let any = ClaimFilter::default();
        let first = store
            .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(any.clone()), t(1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.job.id, 2, "priority 9 is not due yet; priority 1 is");
        let shell_only =
            ClaimFilter { queues: vec!["default".into()], kinds: Some(vec!["shell".into()]) };
        let second = store
            .claim(
                &ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(shell_only.clone()),
                t(1),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(second.job.id, 3);
        assert!(
            store
                .claim(
                    &ClaimRequest::new(owner.clone(), Arc::new(ClockOnly))
                        .filter(shell_only.clone()),
                    t(1)
                )
                .await
                .unwrap()
                .is_none()
        );
        let third = store
            .claim(
                &ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(any.clone()),
                t(61),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(third.job.id, 1);
    }

    #[tokio::test]
    async fn a_full_disk_rolls_back_and_the_next_call_works() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        store.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        {
            // SQLite answers SQLITE_FULL when the page limit is reached,
            // exactly as when the disk is.
            let conn = store.lock_for_test();
            let pages: i64 = pragma(&conn, "page_count");
            conn.execute_batch(&format!("PRAGMA max_page_count = {pages}")).unwrap();
        }
        let big = NewJob::shell(format!("echo {}", "x".repeat(200_000)), "/");
        let err = store.push(big.clone(), t(1)).await.unwrap_err();
        assert!(matches!(&err, StoreError::DiskFull(p) if p == store.path()), "{err:?}");
        assert!(err.is_temporary());
        assert!(store.lock_for_test().is_autocommit(), "the failed transaction was rolled back");
        assert_eq!(store.stats(t(1)).await.unwrap().pending, 1, "nothing half-written");
        store.lock_for_test().execute_batch("PRAGMA max_page_count = 1000000").unwrap();
        assert_eq!(store.push(big, t(2)).await.unwrap().job.id, 2);
        store.check_integrity().unwrap();
    }

    #[tokio::test]
    async fn a_row_edited_by_another_tool_reads_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        store.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        store.lock_for_test().execute_batch("UPDATE jobs SET payload = 'not json'").unwrap();
        let err = store.get(1).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    }

    /// The settle and the claim are one transaction: when the claim half
    /// fails (here on a row it cannot decode), the settle is rolled back
    /// with it and the finished job is still running under its lease.
    #[tokio::test]
    async fn a_failing_claim_half_rolls_the_settle_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let owner = Owner::named("w");
        let any = ClaimFilter::default();
        store.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        let held = store
            .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(any.clone()), t(1))
            .await
            .unwrap()
            .unwrap();
        let next = store.push(NewJob::shell("true", "/"), t(1)).await.unwrap().job;
        store
            .lock_for_test()
            .execute("UPDATE jobs SET payload = 'not json' WHERE id = ?1", [next.id])
            .unwrap();

        let done = Settlement::Complete(Completion::default());
        let err = store
            .settle_and_claim(
                held.job.id,
                &held.fence,
                done,
                &ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(any.clone()),
                t(2),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
        let job = store.get(held.job.id).await.unwrap();
        assert_eq!(job.state, JobState::Running);
        assert_eq!(job.lease.map(|l| l.fence()), Some(held.fence));
    }
}
