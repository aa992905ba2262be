//! [`SqliteStore`]: the core's [`Store`] on one SQLite connection, and the
//! operations behind it.
//!
//! Every operation is one transaction on the blocking pool: read the row(s)
//! or the candidates (`rows.rs`), ask `slothqueue_core::machine` what the
//! transition is, write it and what it causes to the jobs waiting on that
//! one ([`write`]), each row with its old state, owner and attempt in
//! the `UPDATE`'s condition, append the events, commit. Nothing here
//! decides a rule; it only stores.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{Connection, params, params_from_iter};
use slothqueue_core::machine::{self, AttemptNote, LaneCheck, PushPlan, Transition};
use slothqueue_core::schedule::{self, PutPlan, TickAction};
use slothqueue_core::{
    ClaimRequest, Claimed, Completion, Event, Failure, Fence, HeartbeatAck, Job, JobEdit, JobId,
    JobState, LaneChange, LaneScope, Lanes, ListFilter, ListOrder, NewJob, NewSchedule, Policy,
    PurgeFilter, Pushed, PutSchedule, QueueCounts, RunnerRecord, Schedule, ScheduleChange,
    SettledAndClaimed, Settlement, Stamp, Stats, Store, StoreError, Ticks, Timestamp,
};

use crate::error::{Context, Error};
use crate::open;
use crate::rows::{
    COLUMNS, TxGraph, append_events, append_events_from, apply, best_due_pending, delete_job,
    delete_schedule, event_from_row, find, find_schedule, insert_job, key_holder, load, millis,
    query_jobs, read_lanes, read_schedules, running_jobs, text, ts, write_lane, write_schedule,
};
use crate::schema;
use crate::txn::{Journal, SqliteOptions, Synchronous, read_tx, write_tx, write_tx_unsynced};

/// A queue in one SQLite file. One connection per store, behind a mutex;
/// any number of stores, in this process or others, may share the file.
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Mutex<Connection>,
    ctx: Context,
    policy: Policy,
    /// Why a read-only store was opened immutable (see
    /// [`SqliteStore::read_only_note`]).
    note: Option<String>,
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
    ///
    /// A file that exists but is empty (0 bytes, or a SQLite database with
    /// no tables) is made a queue only if another slothqueue is making it
    /// one right now (waited for, up to the busy timeout); else it is
    /// refused untouched with [`StoreError::Corrupt`]: only a file this
    /// open created itself becomes a new queue.
    pub fn open(path: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        let conn = open::open(path, &options)?;
        Ok(SqliteStore::on(path, conn, options, None))
    }

    /// Opens the existing queue at `path` for commands that only look
    /// (`status`, `list`, `show`, `logs`): nothing is created and nothing
    /// written, and every write through the store answers
    /// [`StoreError::Io`] of kind [`std::io::ErrorKind::ReadOnlyFilesystem`].
    /// A missing file is [`StoreError::Io`] of kind `NotFound`; an empty
    /// one (0 bytes, or a SQLite database with no tables) is refused
    /// untouched with [`StoreError::Corrupt`]; foreign, damaged and newer
    /// files as by [`SqliteStore::open`]. An older layout is migrated
    /// first (the one write this open may make).
    ///
    /// Where SQLite cannot create its shared-memory file beside the queue
    /// (a read-only folder or filesystem, a full disk) the file is read
    /// immutable, and [`SqliteStore::read_only_note`] says so and what is
    /// not seen then.
    pub fn open_read_only(path: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        let (conn, note) = open::open_read_only(path, &options)?;
        Ok(SqliteStore::on(path, conn, options, note))
    }

    fn on(
        path: &Path,
        conn: Connection,
        options: SqliteOptions,
        note: Option<String>,
    ) -> SqliteStore {
        let ctx = Context { path: path.to_path_buf(), busy_timeout: options.busy_timeout };
        SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                ctx,
                policy: options.policy,
                note,
                disk_was_full: AtomicBool::new(false),
                can_skip_sync: options.journal == Journal::Wal
                    && options.synchronous == Synchronous::Full,
            }),
        }
    }

    /// Set when [`SqliteStore::open_read_only`] had to open the file
    /// immutable, e.g. "opened immutable: its folder cannot be written, so
    /// SQLite cannot make its shared-memory file; this look does not see
    /// the commits still in q.db-wal (…), nor anything committed after it
    /// opened": for the CLI to show beside what it reads. `None` for every
    /// other store.
    pub fn read_only_note(&self) -> Option<&str> {
        self.inner.note.as_deref()
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
            // Edges have no foreign key (see `schema::v4`): checked here.
            let loose: i64 = conn.query_row(
                "SELECT COUNT(*) FROM edges WHERE child NOT IN (SELECT id FROM jobs)",
                [],
                |r| r.get(0),
            )?;
            if loose > 0 {
                problems.push(format!("{loose} dependency edge(s) of a missing job"));
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

// ---------------------------------------------------------------------------
// Writing a transition

/// Writes the transition `before → t` of one job and every write it causes
/// to the jobs waiting on it (transitively), as
/// [`machine::plan_with_dependents`] plans them from this transaction's
/// view, in the plan's order, each conditional on the row it was planned
/// from. Every transition of this store is written here. Returns the job
/// as written. For a transition that changes nothing for dependents (a
/// heartbeat, a claim, a failure that will be retried) the plan reads
/// nothing and is the one write.
fn write(conn: &Connection, before: Job, t: Transition, now: Timestamp) -> Result<Job, Error> {
    let id = before.id;
    let plan = machine::plan_with_dependents(&mut TxGraph::new(conn), before, t, now)?;
    let mut own = None;
    for w in plan {
        apply(conn, &w.before, &w.after)?;
        if w.before.id == id {
            own = Some(w.after.job);
        }
    }
    own.ok_or_else(|| {
        Error::Store(StoreError::Backend(format!("the plan for job #{id} left the job out")))
    })
}

// ---------------------------------------------------------------------------
// Claim

/// One claim, as [`machine::plan_claim`] decides it from the running jobs,
/// the lanes and the best due pending job whose lane is open, all read
/// inside this transaction, so a limit holds across every claimer on the
/// file (the write lock makes the claims one after the other). On a file
/// nobody configured lanes on, the lanes cost one read of an empty table.
/// A retired job's end reaches the jobs waiting on it ([`write`]); the job
/// taken is due, so it waits on nobody whom a retirement could end.
fn claim_tx(
    conn: &Connection,
    request: &ClaimRequest,
    now: Timestamp,
    policy: &Policy,
) -> Result<Option<Claimed>, Error> {
    let running = running_jobs(conn)?;
    let lanes = LaneCheck::new(read_lanes(conn)?, &running);
    let best_due = best_due_pending(conn, &request.filter, &lanes, now)?;
    let plan = machine::plan_claim(request, &lanes, running, best_due, now, policy)
        .map_err(|e| Error::Decode(format!("the pending indexes are out of step: {e}")))?;
    let claimed = plan.claimed();
    for w in plan.retire.into_iter().chain(plan.take) {
        write(conn, w.before, w.after, now)?;
    }
    Ok(claimed)
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

/// One job of a push: its parents looked up (refused when one is unknown,
/// also for a duplicate), the key's holder displaced if need be, then the
/// job created from its parents as they are after that (the displaced
/// holder may be one of them, just cancelled).
fn push_one(
    conn: &Connection,
    new: &NewJob,
    now: Timestamp,
    policy: &Policy,
    next: &mut JobId,
) -> Result<Pushed, Error> {
    let mut parents = machine::resolve_parents(&mut TxGraph::new(conn), new)?;
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
            if let (Some(t), Some(old)) = (displaced, holder) {
                write(conn, old, *t, now)?;
                parents = parents.iter().map(|p| load(conn, p.id)).collect::<Result<_, _>>()?;
            }
            let t = machine::create(id, new, &parents, now, policy);
            insert_job(conn, &t.job)?;
            *next += 1;
            append_events_from(conn, &t.events, Some(1))?;
            Ok(Pushed { job: t.job, created: true, superseded })
        }
    }
}

/// A clone in one write transaction: the original read (`NotFound` if
/// gone), the new job built by [`machine::clone_of`] and pushed through
/// [`push_one`], the path every push takes (id, indexes, its `pushed`
/// event), then the two events tying the trails together. It has no key
/// and no parents, so the push always creates.
fn clone_tx(
    conn: &Connection,
    id: JobId,
    edit: &JobEdit,
    now: Timestamp,
    policy: &Policy,
) -> Result<Job, Error> {
    let original = load(conn, id)?;
    let new = machine::clone_of(&original, edit)?;
    let mut next = next_id(conn)?;
    let pushed = push_one(conn, &new, now, policy, &mut next)?;
    append_events(conn, &machine::cloned_events(original.id, pushed.job.id, now))?;
    Ok(pushed.job)
}

// ---------------------------------------------------------------------------
// Schedules

/// A put in one write transaction: the key's schedule read,
/// [`schedule::create`] decides, and a new one is inserted; the same
/// definition again writes nothing.
fn put_schedule_tx(
    conn: &Connection,
    new: &NewSchedule,
    now: Timestamp,
) -> Result<PutSchedule, Error> {
    let existing = find_schedule(conn, &new.key)?;
    match schedule::create(new, existing.as_ref(), now)? {
        PutPlan::Insert(s) => {
            write_schedule(conn, &s)?;
            Ok(PutSchedule { schedule: s, created: true })
        }
        PutPlan::Unchanged(s) => Ok(PutSchedule { schedule: s, created: false }),
    }
}

/// A pause, resume or removal in one write transaction, as
/// [`schedule::change`] decides it from the schedule read inside it.
fn change_schedule_tx(
    conn: &Connection,
    key: &str,
    change: &ScheduleChange,
    now: Timestamp,
) -> Result<Option<Schedule>, Error> {
    let Some(s) = find_schedule(conn, key)? else {
        return Err(Error::Store(StoreError::NoSchedule(key.to_owned())));
    };
    let after = schedule::change(&s, change, now);
    match &after {
        Some(next) if *next != s => write_schedule(conn, next)?,
        Some(_) => {}
        None => delete_schedule(conn, key)?,
    }
    Ok(after)
}

/// Every due tick in one write transaction: each schedule, in key order,
/// as [`schedule::plan_tick`] decides from it and the state of its last
/// tick's job, both read here (so a second caller reads the first's
/// cursor and decides nothing twice). An enqueue pushes through
/// [`push_one`], the path every push takes (id, indexes, `pushed` event,
/// the tick's idempotency key), then appends the plan's events as
/// [`clone_tx`] does; a skip appends its event to the unfinished job;
/// every decided tick writes the schedule with its cursor moved.
fn fire_schedules_tx(conn: &Connection, now: Timestamp, policy: &Policy) -> Result<Ticks, Error> {
    let stored = read_schedules(conn)?;
    let mut next: Option<JobId> = None;
    let mut ticks = Vec::new();
    let mut after = Vec::with_capacity(stored.len());
    for s in stored {
        let previous = match &s.last_fire {
            Some(fire) => find(conn, fire.job)?.map(|job| job.state),
            None => None,
        };
        let Some(plan) = schedule::plan_tick(&s, now, previous) else {
            after.push(s);
            continue;
        };
        let (written, events, tick) = match &plan.action {
            TickAction::Enqueue(new) => {
                let next = match &mut next {
                    Some(id) => id,
                    None => next.insert(next_id(conn)?),
                };
                let pushed = push_one(conn, new, now, policy, next)?;
                plan.enqueued(pushed.job.id, pushed.created, now)
            }
            TickAction::Skip { .. } | TickAction::Drop => plan.without_push(),
        };
        append_events(conn, &events)?;
        ticks.push(tick);
        write_schedule(conn, &written)?;
        after.push(written);
    }
    Ok(Ticks { ticks, next: schedule::next_fire(&after) })
}

// ---------------------------------------------------------------------------
// Looking, purging, restoring

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
/// entry (SQLite's own page-count shortcut skips partial indexes). Pending
/// is the jobs in the due index (waiting on no parent, not held), those
/// waiting on parents (`jobs_waiting`, held or not) and those held
/// (`jobs_held`, waiting or not), less the held ones that wait (counted
/// twice; held jobs are few, so counting them is cheap); due now is the
/// due index less the jobs not yet due, which are few unless many are
/// scheduled ahead.
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
    let ready = count("jobs_pending_due")?;
    let waiting = count("jobs_waiting")?;
    let held = count("jobs_held")?;
    let held_waiting: i64 = conn.prepare_cached(HELD_WAITING_SQL)?.query_row([], |r| r.get(0))?;
    let held_waiting = u64::try_from(held_waiting).unwrap_or(0);
    let not_due: i64 =
        conn.prepare_cached(NOT_DUE_SQL)?.query_row([now.as_millis()], |r| r.get(0))?;
    let next_due = first_value(conn, NEXT_NOT_DUE_SQL, &[millis(now)])?.map(ts);
    Ok(Stats {
        pending: (ready + waiting + held).saturating_sub(held_waiting),
        waiting_on_parents: waiting,
        held,
        running: count("jobs_running")?,
        done: count("jobs_done")?,
        failed: count("jobs_failed")?,
        cancelled: count("jobs_cancelled")?,
        due_now: ready.saturating_sub(u64::try_from(not_due).unwrap_or(0)),
        next_due,
    })
}

/// The held jobs also waiting on parents (in `jobs_waiting` too).
const HELD_WAITING_SQL: &str = "SELECT COUNT(*) FROM jobs INDEXED BY jobs_held
     WHERE state = 'pending' AND held = 1 AND pending_parents > 0";

/// Per queue: the jobs a claim could take (waiting on no parent, not
/// held), and of them those due at `?1`; from the covering per-queue
/// claim index, in queue order, without reading the table.
const QUEUE_READY_SQL: &str = "SELECT queue, COUNT(*), SUM(not_before <= ?1)
     FROM jobs INDEXED BY jobs_pending_queue
     WHERE state = 'pending' AND pending_parents = 0 AND held = 0
     GROUP BY queue";

/// Per queue: the jobs waiting on parents, held or not.
const QUEUE_WAITING_SQL: &str = "SELECT queue, COUNT(*) FROM jobs INDEXED BY jobs_waiting
     WHERE state = 'pending' AND pending_parents > 0 GROUP BY queue";

/// Per queue: the held jobs, and of them those also waiting on parents.
const QUEUE_HELD_SQL: &str = "SELECT queue, COUNT(*), SUM(pending_parents > 0)
     FROM jobs INDEXED BY jobs_held
     WHERE state = 'pending' AND held = 1 GROUP BY queue";

/// Per queue: the running jobs (few; their index is by lease).
const QUEUE_RUNNING_SQL: &str = "SELECT queue, COUNT(*) FROM jobs INDEXED BY jobs_running
     WHERE state = 'running' GROUP BY queue";

/// What every queue with a pending or running job holds, by name: four
/// `GROUP BY`s, one per partial index, in one read transaction.
fn queue_counts_tx(conn: &Connection, now: Timestamp) -> Result<Vec<QueueCounts>, Error> {
    let mut by_queue: BTreeMap<String, QueueCounts> = BTreeMap::new();
    let mut each = |sql: &str, params: &[Value], add: &dyn Fn(&mut QueueCounts, u64, u64)| {
        let mut stmt = conn.prepare_cached(sql)?;
        let mut rows = stmt.query(params_from_iter(params))?;
        while let Some(row) = rows.next()? {
            let queue: String = row.get(0)?;
            let n = u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0);
            let of_them = match row.as_ref().column_count() {
                3 => u64::try_from(row.get::<_, Option<i64>>(2)?.unwrap_or(0)).unwrap_or(0),
                _ => 0,
            };
            let counts = by_queue
                .entry(queue)
                .or_insert_with_key(|q| QueueCounts { queue: q.clone(), ..QueueCounts::default() });
            add(counts, n, of_them);
        }
        Ok::<(), Error>(())
    };
    each(QUEUE_READY_SQL, &[millis(now)], &|c, n, due| {
        c.pending += n;
        c.due += due;
    })?;
    each(QUEUE_WAITING_SQL, &[], &|c, n, _| {
        c.pending += n;
        c.waiting_on_parents += n;
    })?;
    each(QUEUE_HELD_SQL, &[], &|c, n, waiting| {
        // The held jobs that wait are in `jobs_waiting` too.
        c.pending += n.saturating_sub(waiting);
        c.held += n;
    })?;
    each(QUEUE_RUNNING_SQL, &[], &|c, n, _| c.running += n)?;
    Ok(by_queue.into_values().collect())
}

/// Changes one lane in the write transaction: the stored lanes, the
/// change applied by the core's one rule ([`Lanes::apply`]; a refusal
/// writes nothing), the scope's row written or, back at the defaults,
/// deleted.
fn change_lane_tx(
    conn: &Connection,
    scope: &LaneScope,
    change: &LaneChange,
) -> Result<Lanes, Error> {
    let mut lanes = read_lanes(conn)?;
    let settings = lanes.apply(scope, change)?;
    write_lane(conn, scope, &settings)?;
    Ok(lanes)
}

/// The pending jobs waiting on no parent and not held whose time has not
/// come (`?1`).
const NOT_DUE_SQL: &str = "SELECT COUNT(*) FROM jobs INDEXED BY jobs_pending_due
     WHERE state = 'pending' AND pending_parents = 0 AND held = 0 AND not_before > ?1";

/// The earliest time after `?1` a job waiting on no parent and not held
/// becomes due.
const NEXT_NOT_DUE_SQL: &str = "SELECT not_before FROM jobs INDEXED BY jobs_pending_due
     WHERE state = 'pending' AND pending_parents = 0 AND held = 0 AND not_before > ?1
     ORDER BY not_before LIMIT 1";

/// The earliest `not_before` of a job waiting on no parent and not held,
/// due or not.
const FIRST_DUE_SQL: &str = "SELECT not_before FROM jobs INDEXED BY jobs_pending_due
     WHERE state = 'pending' AND pending_parents = 0 AND held = 0 ORDER BY not_before LIMIT 1";

fn first_value(conn: &Connection, sql: &str, params: &[Value]) -> Result<Option<i64>, Error> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params_from_iter(params))?;
    Ok(match rows.next()? {
        Some(row) => Some(row.get(0)?),
        None => None,
    })
}

fn next_due_tx(conn: &Connection) -> Result<Option<Timestamp>, Error> {
    // A job waiting on parents or held is left out: no time makes it due.
    let pending = first_value(conn, FIRST_DUE_SQL, &[])?;
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

/// Deletes the jobs the filter names that [`machine::plan_purge`] lets go
/// (not a pending job that a job left behind still waits on), each with
/// its trail and edges.
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
    let params: Vec<Value> = filter.older_than.map(millis).into_iter().collect();
    let sql = format!("SELECT {} FROM jobs WHERE state IN {states}{age} ORDER BY id", *COLUMNS);
    let candidates = query_jobs(conn, &sql, &params)?;
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let ids = machine::plan_purge(&mut TxGraph::new(conn), &candidates)?;
    if !ids.is_empty() {
        // Ids are never reused: the next id stays above the ones deleted here.
        conn.prepare_cached(&format!(
            "UPDATE meta SET value = MAX(value, COALESCE((SELECT MAX(id) FROM jobs), 0))
             WHERE name = '{}'",
            schema::ID_HIGH_WATER
        ))?
        .execute([])?;
    }
    // Both lists are in id order.
    let mut deleting = ids.iter().peekable();
    for job in &candidates {
        if deleting.next_if_eq(&&job.id).is_some() {
            delete_job(conn, job)?;
        }
    }
    Ok(ids)
}

/// Restores one job of an import into the open write transaction: checked
/// on its own ([`machine::check_restore`]), then against the queue as this
/// transaction sees it, so an id or key restored earlier in the same batch
/// counts as taken. The next id needs no bookkeeping: it is above
/// `MAX(id)` (see [`next_id`]). Its parents' edges are written with it
/// (`rows::insert_job`), so the import keeps who waits on whom.
fn restore_tx(conn: &Connection, job: &Job, events: &[Event]) -> Result<(), Error> {
    machine::check_restore(job, events)?;
    let invalid = |m: String| Err(Error::Store(StoreError::InvalidInput(m)));
    if find(conn, job.id)?.is_some() {
        return invalid(format!("job #{} already exists", job.id));
    }
    if let Some(key) = &job.idempotency_key {
        if let Some(holder) = key_holder(conn, key)? {
            return invalid(format!(
                "job #{}: idempotency key `{key}` is already held by job #{}",
                job.id, holder.id
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
    async fn put_schedule(
        &self,
        new: &NewSchedule,
        now: Timestamp,
    ) -> Result<PutSchedule, StoreError> {
        let new = new.clone();
        self.with(move |conn, _| write_tx(conn, |conn| put_schedule_tx(conn, &new, now))).await
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        self.with(|conn, _| read_tx(conn, read_schedules)).await
    }

    async fn change_schedule(
        &self,
        key: &str,
        change: &ScheduleChange,
        now: Timestamp,
    ) -> Result<Option<Schedule>, StoreError> {
        let (key, change) = (key.to_owned(), change.clone());
        self.with(move |conn, _| {
            write_tx(conn, |conn| change_schedule_tx(conn, &key, &change, now))
        })
        .await
    }

    async fn fire_schedules(&self, now: Timestamp) -> Result<Ticks, StoreError> {
        self.with(move |conn, policy| write_tx(conn, |conn| fire_schedules_tx(conn, now, policy)))
            .await
    }

    async fn restore_schedules(&self, schedules: Vec<Schedule>) -> Result<(), StoreError> {
        // Each is checked on its own before the transaction: a refusal
        // writes nothing.
        for s in &schedules {
            schedule::check_restore(s)?;
        }
        self.with(move |conn, _| {
            write_tx(conn, |conn| schedules.iter().try_for_each(|s| write_schedule(conn, s)))
        })
        .await
    }

    async fn note_attempt(
        &self,
        id: JobId,
        fence: &Fence,
        note: &AttemptNote,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let (fence, note) = (fence.clone(), note.clone());
        self.transition(id, now, move |_, job, _| {
            Ok(machine::note_attempt(job, &fence, &note, now)?)
        })
        .await
    }

    async fn hold(&self, id: JobId, stamp: Stamp, now: Timestamp) -> Result<Job, StoreError> {
        self.transition(id, now, move |_, job, _| Ok(machine::hold(job, stamp, now)?)).await
    }

    async fn release_hold(&self, id: JobId, by: &str, now: Timestamp) -> Result<Job, StoreError> {
        let by = by.to_owned();
        self.transition(id, now, move |_, job, _| Ok(machine::release_hold(job, &by, now)?)).await
    }

    async fn edit(&self, id: JobId, edit: &JobEdit, now: Timestamp) -> Result<Job, StoreError> {
        let edit = edit.clone();
        self.transition(id, now, move |_, job, _| Ok(machine::edit(job, &edit, now)?)).await
    }

    async fn clone_job(
        &self,
        id: JobId,
        edit: &JobEdit,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let edit = edit.clone();
        self.with(move |conn, policy| write_tx(conn, |conn| clone_tx(conn, id, &edit, now, policy)))
            .await
    }

    async fn lanes(&self) -> Result<Lanes, StoreError> {
        self.with(|conn, _| read_lanes(conn)).await
    }

    async fn change_lane(
        &self,
        scope: &LaneScope,
        change: &LaneChange,
    ) -> Result<Lanes, StoreError> {
        let (scope, change) = (scope.clone(), change.clone());
        self.with(move |conn, _| write_tx(conn, |conn| change_lane_tx(conn, &scope, &change))).await
    }

    async fn queue_counts(&self, now: Timestamp) -> Result<Vec<QueueCounts>, StoreError> {
        self.with(move |conn, _| read_tx(conn, |conn| queue_counts_tx(conn, now))).await
    }

    async fn push(&self, job: NewJob, now: Timestamp) -> Result<Pushed, StoreError> {
        let mut out = self.push_many(vec![job], now).await.map_err(alone)?;
        out.pop().ok_or_else(|| StoreError::Backend("push returned nothing".to_owned()))
    }

    async fn push_many(
        &self,
        jobs: Vec<NewJob>,
        now: Timestamp,
    ) -> Result<Vec<Pushed>, StoreError> {
        for (index, job) in jobs.iter().enumerate() {
            machine::validate(job)
                .map_err(|e| StoreError::InBatch { index, error: Box::new(e.into()) })?;
        }
        self.with(move |conn, policy| {
            write_tx(conn, |conn| {
                let mut next = next_id(conn)?;
                jobs.iter()
                    .enumerate()
                    .map(|(i, j)| {
                        push_one(conn, j, now, policy, &mut next).map_err(|e| in_batch(i, e))
                    })
                    .collect()
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
                write(conn, job, t, now)?;
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
        self.transition(id, now, move |_, job, _| Ok(machine::complete(job, &fence, &done, now)?))
            .await
    }

    async fn fail(
        &self,
        id: JobId,
        fence: &Fence,
        failure: Failure,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let fence = fence.clone();
        self.transition(id, now, move |_, job, policy| {
            Ok(machine::fail(job, &fence, &failure, now, policy)?)
        })
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
                let settled = write(conn, job, t, now)?;
                if settled.state == JobState::Done {
                    slothqueue_core::failpoint::hit("mid_complete"); // written, not committed
                }
                // Sees the settle's writes: a dependent it made due may be taken.
                let next = claim_tx(conn, &request, now, policy)?;
                Ok(SettledAndClaimed { settled, next })
            })
        })
        .await
    }

    async fn release(&self, id: JobId, fence: &Fence, now: Timestamp) -> Result<Job, StoreError> {
        let fence = fence.clone();
        self.transition(id, now, move |_, job, _| Ok(machine::release(job, &fence, now)?)).await
    }

    async fn cancel(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.transition(id, now, move |_, job, _| Ok(machine::cancel(job, now)?)).await
    }

    async fn retry(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.transition(id, now, move |g, job, _| {
            let parents = machine::load_parents(g, job)?;
            Ok(machine::retry(job, &parents, now)?)
        })
        .await
    }

    async fn get(&self, id: JobId) -> Result<Job, StoreError> {
        self.with(move |conn, _| load(conn, id)).await
    }

    async fn dependents(&self, id: JobId) -> Result<Vec<JobId>, StoreError> {
        self.with(move |conn, _| crate::rows::dependents(conn, id)).await
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
                        write(conn, job.clone(), t, now)?;
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
        self.restore_many(vec![(job, events)]).await.map_err(alone)
    }

    async fn restore_many(&self, jobs: Vec<(Job, Vec<Event>)>) -> Result<(), StoreError> {
        self.with(move |conn, _| {
            write_tx(conn, |conn| {
                jobs.iter().enumerate().try_for_each(|(i, (j, ev))| {
                    restore_tx(conn, j, ev).map_err(|e| in_batch(i, e))
                })
            })
        })
        .await
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

    /// The file and its write-ahead log, which every commit appends to
    /// (checkpoints write the file). A watch on a symlinked file also
    /// watches these names beside the file it resolves to, where SQLite
    /// writes its log.
    fn watched_files(&self) -> Vec<std::path::PathBuf> {
        let mut wal = self.path().as_os_str().to_owned();
        wal.push("-wal");
        vec![self.path().to_owned(), wal.into()]
    }
}

impl SqliteStore {
    /// One user- or owner-side transition on one job: load, decide (reading
    /// the graph if it needs to, as a retry its parents), write it with
    /// what it causes to the jobs waiting on it.
    async fn transition<F>(&self, id: JobId, now: Timestamp, decide: F) -> Result<Job, StoreError>
    where
        F: FnOnce(&mut TxGraph<'_>, &Job, &Policy) -> Result<Transition, Error> + Send + 'static,
    {
        self.with(move |conn, policy| {
            write_tx(conn, |conn| {
                let job = load(conn, id)?;
                let t = decide(&mut TxGraph::new(conn), &job, policy)?;
                let written = write(conn, job, t, now)?;
                if written.state == JobState::Done {
                    slothqueue_core::failpoint::hit("mid_complete"); // written, not committed
                }
                Ok(written)
            })
        })
        .await
    }
}

/// Element `index`'s refusal as the batch's ([`StoreError::InBatch`]), so
/// the caller can name the line. Only a refusal in the core's terms is
/// wrapped: a SQLite failure or a damaged row is the batch's, not the
/// element's (a full disk stays [`StoreError::DiskFull`]).
fn in_batch(index: usize, e: Error) -> Error {
    match e {
        Error::Store(error) => Error::Store(StoreError::InBatch { index, error: Box::new(error) }),
        other => other,
    }
}

/// The error of a batch of one, as the one-job call returns it: plain.
fn alone(e: StoreError) -> StoreError {
    match e {
        StoreError::InBatch { error, .. } => *error,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::{due_at_priority_sql, top_priority_sql};
    use crate::schema::{APPLICATION_ID, SCHEMA_VERSION};
    use slothqueue_core::{ClaimFilter, ClockOnly, Owner};
    use std::time::Duration;

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
    fn stats_and_next_due_read_indexes_not_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        for sql in [NOT_DUE_SQL, NEXT_NOT_DUE_SQL] {
            assert_uses(&conn, sql, &[millis(t(0))], "jobs_pending_due");
        }
        // No bound to seek to: the index walked in order, stopping at the
        // first entry (LIMIT 1), never the table, never a sort.
        let steps = plan(&conn, FIRST_DUE_SQL, &[]);
        assert_eq!(steps, ["SCAN jobs USING COVERING INDEX jobs_pending_due"], "{FIRST_DUE_SQL}");
    }

    /// Every query through a claim or due index names the index's whole
    /// condition, `pending_parents = 0` included: without it SQLite
    /// refuses the `INDEXED BY` (so the plan tests above would fail), and
    /// the indexes do exclude waiting jobs.
    #[test]
    fn the_claim_indexes_leave_waiting_jobs_out() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        let without = "SELECT not_before FROM jobs INDEXED BY jobs_pending_due
             WHERE state = 'pending' AND not_before > ?1";
        let err = conn.prepare(without).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("no query solution"), "{err}");
        for index in ["jobs_pending", "jobs_pending_queue", "jobs_pending_due"] {
            let sql: String = conn
                .query_row("SELECT sql FROM sqlite_schema WHERE name = ?1", [index], |r| r.get(0))
                .unwrap();
            assert!(
                sql.ends_with("WHERE state = 'pending' AND (pending_parents = 0 AND held = 0)"),
                "{sql}"
            );
        }
        for sql in [
            top_priority_sql(false).to_owned(),
            top_priority_sql(true).to_owned(),
            due_at_priority_sql(false, 0),
            due_at_priority_sql(true, 1),
        ] {
            assert!(
                sql.contains("state = 'pending' AND pending_parents = 0 AND held = 0"),
                "{sql}"
            );
        }
    }

    /// What lanes and holds added reads indexes only: the skip-scan of
    /// queues a claim walks when a lane is closed seeks the per-queue
    /// claim index; every per-queue count reads its partial index, never
    /// the table (running jobs, few, aside).
    #[test]
    fn lane_queries_read_their_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        let steps = plan(&conn, crate::rows::NEXT_QUEUE_SQL, &[text("a")]);
        assert_eq!(steps, ["SEARCH jobs USING COVERING INDEX jobs_pending_queue (queue>?)"]);
        for (sql, params, index) in [
            (QUEUE_READY_SQL, vec![millis(t(0))], "jobs_pending_queue"),
            (QUEUE_WAITING_SQL, vec![], "jobs_waiting"),
            (QUEUE_HELD_SQL, vec![], "jobs_held"),
            (HELD_WAITING_SQL, vec![], "jobs_held"),
        ] {
            let steps = plan(&conn, sql, &params);
            assert_eq!(steps, [format!("SCAN jobs USING COVERING INDEX {index}")], "{sql}");
        }
        let steps = plan(&conn, QUEUE_RUNNING_SQL, &[]);
        assert!(steps.iter().any(|s| s.contains("INDEX jobs_running")), "{steps:?}");
        let steps = plan(&conn, "SELECT scope, settings FROM lanes ORDER BY scope", &[]);
        assert_eq!(steps, ["SCAN lanes"], "the table's own order");
        let steps = plan(&conn, "SELECT key, schedule FROM schedules ORDER BY key", &[]);
        assert_eq!(steps, ["SCAN schedules"], "the table's own order");
        let steps = plan(&conn, "SELECT schedule FROM schedules WHERE key = ?1", &[text("k")]);
        assert_eq!(steps, ["SEARCH schedules USING PRIMARY KEY (key=?)"]);
    }

    /// The VM steps of the queries one claim reads its candidates with
    /// (from the statement cache after it; the claim is rolled back).
    fn claim_steps(store: &SqliteStore, now: Timestamp) -> (i32, Option<JobId>) {
        use rusqlite::StatementStatus::VmStep;
        let sqls = [
            top_priority_sql(false).to_owned(),
            top_priority_sql(true).to_owned(),
            due_at_priority_sql(false, 0),
            due_at_priority_sql(true, 0),
            crate::rows::NEXT_QUEUE_SQL.to_owned(),
            "SELECT scope, settings FROM lanes ORDER BY scope".to_owned(),
        ];
        let conn = store.lock_for_test();
        for sql in &sqls {
            conn.prepare_cached(sql).unwrap().reset_status(VmStep);
        }
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        let request = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly));
        let claimed = claim_tx(&conn, &request, now, &Policy::default()).unwrap();
        conn.execute_batch("ROLLBACK").unwrap();
        let steps = sqls.iter().map(|sql| conn.prepare_cached(sql).unwrap().get_status(VmStep));
        (steps.sum(), claimed.map(|c| c.job.id))
    }

    /// A paused lane's backlog costs a claim nothing per job: the claim
    /// skips the lane in the per-queue index, so it runs as many steps
    /// with 5,000 jobs behind the pause as with 50. And a file with no
    /// lane settings claims from the one all-queue index as before.
    #[tokio::test]
    async fn a_paused_backlog_costs_a_claim_nothing_per_job() {
        use slothqueue_core::{LaneChange, LaneScope, Stamp};
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let bulk = |n: usize| (0..n).map(|_| NewJob::shell("true", "/").queue("bulk").priority(5));
        store.push_many(bulk(50).collect(), t(0)).await.unwrap();
        let web = store.push(NewJob::shell("true", "/").queue("web"), t(0)).await.unwrap().job;
        let (open_steps, taken) = claim_steps(&store, t(1));
        assert_eq!(taken, Some(1));
        let pause = LaneChange::Pause(Stamp::new("ana", t(0)));
        store.change_lane(&LaneScope::Queue("bulk".into()), &pause).await.unwrap();
        let (few, taken) = claim_steps(&store, t(1));
        assert_eq!(taken, Some(web.id));
        store.push_many(bulk(5_000).collect(), t(0)).await.unwrap();
        let (many, taken) = claim_steps(&store, t(1));
        assert_eq!(taken, Some(web.id));
        assert!(few > 0 && open_steps > 0, "{few} {open_steps}");
        assert_eq!(many, few, "steps with 5,000 paused jobs against 50");
    }

    #[test]
    fn key_lookups_and_lists_by_state_seek_partial_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        let by_key = format!("SELECT {} FROM jobs WHERE idempotency_key = ?1", *COLUMNS);
        assert_uses(&conn, &by_key, &[text("k")], "jobs_key");
        // A job's dependents: one range of the edges' key, already in order.
        let steps = plan(&conn, crate::rows::DEPENDENTS_SQL, &[Value::Integer(1)]);
        assert_eq!(steps, ["SEARCH edges USING PRIMARY KEY (parent=?)"]);
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
                            Failure { error: "x".into(), exit_code: None, permanent: false },
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
                waiting_on_parents: 0,
                held: 0,
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
            kinds: None,
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
        let big = NewJob::new("big", serde_json::json!({ "data": "x".repeat(200_000) }));
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
    /// fails (here on a job whose stored row does not decode), the settle
    /// is rolled back with it and the finished job is still running under
    /// its lease.
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
        garble(&store, next.id);

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

    /// Overwrites job `id`'s stored payload with text that is not JSON, as a
    /// tool outside slothqueue might.
    fn garble(store: &SqliteStore, id: JobId) {
        store
            .lock_for_test()
            .execute("UPDATE jobs SET payload = 'not json' WHERE id = ?1", [id])
            .unwrap();
    }
}
