//! [`PgStore`]: the core's [`Store`] on a PostgreSQL schema, and the
//! operations behind it.
//!
//! Every operation is one transaction on a pooled connection, run on the
//! store's runtime's blocking threads: read the row(s) or the candidates
//! (`rows.rs`), ask `slothqueue_core::machine` what the transition is,
//! write it and what it causes to the jobs waiting on that one
//! ([`write`]), each row with its old state, owner and attempt in the
//! `UPDATE`'s condition, append the events, notify, commit. Nothing here
//! decides a rule; it only stores.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use slothqueue_core::machine::{self, AttemptNote, LaneCheck, PushPlan, Transition};
use slothqueue_core::schedule::{self, PutPlan, TickAction};
use slothqueue_core::{
    ChangeGuard, ChangeWaker, ClaimRequest, Claimed, Completion, Event, Failure, Fence,
    HeartbeatAck, Job, JobEdit, JobId, JobState, LaneChange, LaneScope, Lanes, ListFilter,
    ListOrder, NewJob, NewSchedule, Policy, PurgeFilter, Pushed, PutSchedule, QueueCounts,
    RunnerRecord, Schedule, ScheduleChange, SettledAndClaimed, Settlement, Stamp, Stats, Store,
    StoreError, Ticks, Timestamp,
};
use tokio_postgres::types::ToSql;

use crate::error::{Context, Error};
use crate::listen::{self, ChangeListener};
use crate::open;
use crate::rows::{
    COLUMNS, NewJobs, READY, TxGraph, append_events, apply, best_due_pending, delete_job,
    delete_schedule, event_from_row, find, find_schedule, key_holder, load, query_jobs, read_lanes,
    read_schedules, running_jobs, ts, write_lane, write_schedule,
};
use crate::schema;
use crate::txn::{Db, Keys, Lock, PgOptions, Pool, ServerClock, connection_config, parse_url};

/// A batch of at least this many new jobs is followed by `ANALYZE jobs`
/// ([`PgStore::analyze_after_bulk`]).
const BULK_ANALYZE: usize = 1_000;

/// A queue in one PostgreSQL schema. Any number of stores, in this process
/// or others, on this host or others, may share it.
pub struct PgStore {
    inner: Arc<Inner>,
    /// The store's own runtime: its connections' tasks, the blocking
    /// threads its operations run on, the change listeners. Shut down in
    /// the background on drop (dropping a runtime inside another's async
    /// context would panic).
    runtime: Option<tokio::runtime::Runtime>,
}

pub(crate) struct Inner {
    pool: Pool,
    ctx: Context,
    policy: Policy,
    keys: Keys,
    clock: ServerClock,
    rt: tokio::runtime::Handle,
    /// The settings a change listener connects with.
    listen_config: tokio_postgres::Config,
    read_only: bool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("queue", &self.inner.ctx.name).finish_non_exhaustive()
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl PgStore {
    /// Opens the queue at `url` (`postgres://USER@HOST/DB?schema=NAME`,
    /// any parameter tokio-postgres knows besides; the schema defaults to
    /// `slothqueue`), creating its schema when missing or empty and
    /// migrating an older layout, under the schema's creation lock. A
    /// schema holding other tables, or a queue of a newer slothqueue, is
    /// refused untouched ([`StoreError::Corrupt`],
    /// [`StoreError::SchemaTooNew`]); a server that cannot be reached is
    /// [`StoreError::Unreachable`].
    ///
    /// Synchronous, and callable from anywhere, also from inside a tokio
    /// runtime: the store starts its own small runtime and connects from a
    /// thread of its own.
    pub fn open(url: &str, options: PgOptions) -> Result<PgStore, StoreError> {
        PgStore::start(url, options, false)
    }

    /// Opens the existing queue at `url` for commands that only look:
    /// nothing is created, every transaction is read-only, and every write
    /// through the store answers [`StoreError::Io`] of kind
    /// [`std::io::ErrorKind::ReadOnlyFilesystem`]. A missing schema is
    /// [`StoreError::Io`] of kind `NotFound`; an empty one, or one that is
    /// not a queue, [`StoreError::Corrupt`]. An older layout is migrated
    /// first (the one write this open may make).
    pub fn open_read_only(url: &str, options: PgOptions) -> Result<PgStore, StoreError> {
        PgStore::start(url, options, true)
    }

    fn start(url: &str, options: PgOptions, read_only: bool) -> Result<PgStore, StoreError> {
        let target = parse_url(url)?;
        let ctx = Context {
            name: target.name.clone().into(),
            server: target.server.clone(),
            busy_timeout: options.busy_timeout,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(options.pool_size.max(1) + 4)
            // An idle blocking thread would otherwise exit 10 s after its
            // last call, waking an idle runner (`run --follow`) for nothing;
            // a few parked threads cost nothing while they wait.
            .thread_keep_alive(std::time::Duration::from_secs(3600))
            .thread_name("slothqueue-pg")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Io {
                context: "start the store's runtime".into(),
                source: e,
            })?;
        let rt = runtime.handle().clone();
        let clock = ServerClock::new(options.host_clock.clone());
        // Connect and migrate from a plain thread: `block_on` inside the
        // caller's runtime would panic.
        let first = std::thread::scope(|s| {
            s.spawn(|| {
                let conn = if read_only {
                    open::open_read_only(&rt, &target, &options, &ctx)?
                } else {
                    open::open(&rt, &target, &options, &ctx)?
                };
                clock.measure(&Db::on(&conn, &rt, false)).map_err(|e| ctx.map(e))?;
                Ok::<_, StoreError>(conn)
            })
            .join()
            .unwrap_or_else(|_| Err(StoreError::Backend("the opening thread panicked".into())))
        });
        let first = match first {
            Ok(c) => c,
            Err(e) => {
                runtime.shutdown_background();
                return Err(e);
            }
        };
        let pool = Pool::new(
            connection_config(&target, &options, read_only),
            rt.clone(),
            options.pool_size,
            Some(first),
        );
        Ok(PgStore {
            inner: Arc::new(Inner {
                pool,
                keys: Keys::new(&target.schema),
                listen_config: connection_config(&target, &options, true),
                ctx,
                policy: options.policy,
                clock,
                rt,
                read_only,
            }),
            runtime: Some(runtime),
        })
    }

    /// The queue, as errors name it: `postgres://USER@SERVER/DB?schema=NAME`
    /// (never a password).
    pub fn name(&self) -> &str {
        self.inner.ctx.name.to_str().unwrap_or("postgres")
    }

    /// The schema the queue lives in.
    pub fn schema(&self) -> &str {
        self.name().rsplit_once("schema=").map_or("", |(_, s)| s)
    }

    /// The offset of the server's clock from this host's now in force, in
    /// milliseconds (0 when under 250 ms): every call is judged at
    /// `now + offset`.
    pub fn clock_offset_ms(&self) -> i64 {
        self.inner.clock.offset_ms()
    }

    /// Calls `f` whenever another handle (in any process, on any host)
    /// commits a change that may make work claimable or change what a
    /// waiter waits for: one dedicated connection `LISTEN`s on the queue's
    /// channel. `f` is also called once each time listening (re)starts,
    /// since a change may have been missed while it was not; a lost
    /// connection is retried every second or so. Listening stops when the
    /// returned guard is dropped, or the store is. `f` runs on the store's
    /// runtime: it must not block.
    pub fn on_change(&self, f: Box<dyn Fn() + Send + Sync>) -> ChangeListener {
        listen::spawn(
            &self.inner.rt,
            self.inner.listen_config.clone(),
            self.inner.keys.channel.clone(),
            f,
        )
    }

    /// Times of the host's clock on the server's.
    fn judge(&self, now: Timestamp) -> Timestamp {
        self.inner.clock.judge(now)
    }

    /// A new job's own times (its due time), given on the host's clock, on
    /// the server's.
    fn judge_new(&self, mut job: NewJob) -> NewJob {
        job.not_before = job.not_before.map(|t| self.judge(t));
        job
    }

    /// Runs `f` on a pooled connection on the store's blocking threads.
    async fn with<T, F>(&self, writes: bool, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Db<'_>, &Inner) -> Result<T, Error> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let task = self.inner.rt.spawn_blocking(move || inner.run(writes, f));
        task.await.map_err(|e| StoreError::Backend(format!("the storage task failed: {e}")))?
    }

    /// Runs `f` in one write transaction taking the queue's lock as `lock`
    /// says, notifying the queue's listeners on commit when `notify`.
    async fn tx<T, F>(&self, lock: Lock, notify: bool, mut f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&Db<'_>, &Inner) -> Result<T, Error> + Send + 'static,
    {
        self.with(true, move |db, inner| {
            db.transaction(&inner.keys, lock, notify, &mut |db| f(db, inner))
        })
        .await
    }

    /// After a batch of `rows` new jobs (`push_many`, an import), brings
    /// the planner's statistics of `jobs` up to date when the batch is
    /// large: until autovacuum gets to it (a minute or so), PostgreSQL
    /// plans a claim on a table it believes small, walking and sorting
    /// every pending row (334 ms a claim right after 100,000 jobs, against
    /// about a millisecond once analyzed). Best effort: the jobs are
    /// committed already, and a failure here only leaves it to autovacuum.
    async fn analyze_after_bulk(&self, rows: usize) {
        if rows < BULK_ANALYZE {
            return;
        }
        let _ = self.with(true, |db, _| db.batch("ANALYZE jobs")).await;
    }

    /// Runs `f` in one read-only transaction (one snapshot).
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Db<'_>) -> Result<T, Error> + Send + 'static,
    {
        self.with(false, move |db, _| db.read(f)).await
    }

    /// One user- or owner-side transition on one job, under the queue's
    /// exclusive lock: load (locked), decide (reading the graph if it needs
    /// to, as a retry its parents), write it with what it causes to the
    /// jobs waiting on it, notify.
    async fn transition<F>(&self, id: JobId, now: Timestamp, decide: F) -> Result<Job, StoreError>
    where
        F: Fn(&mut TxGraph<'_, '_>, &Job, &Policy) -> Result<Transition, Error> + Send + 'static,
    {
        self.tx(Lock::Exclusive, true, move |db, inner| {
            let job = load(db, id)?;
            let t = decide(&mut TxGraph::new(db), &job, &inner.policy)?;
            write(db, job, t, now)
        })
        .await
    }

    /// A transition of the running job's owner that touches that one row
    /// only (a heartbeat, a note): its row lock is enough.
    async fn owner_write<T, F>(&self, id: JobId, now: Timestamp, decide: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Job, &Policy) -> Result<(Transition, T), Error> + Send + 'static,
    {
        self.tx(Lock::Rows, false, move |db, inner| {
            let job = load(db, id)?;
            let (t, out) = decide(&job, &inner.policy)?;
            write(db, job, t, now)?;
            Ok(out)
        })
        .await
    }
}

impl Inner {
    fn run<T>(
        &self,
        writes: bool,
        f: impl FnOnce(&Db<'_>, &Inner) -> Result<T, Error>,
    ) -> Result<T, StoreError> {
        let mut pooled = self.pool.get().map_err(|e| self.ctx.map(e))?;
        let out = {
            let db = pooled.db(writes && !self.read_only);
            if self.clock.stale() {
                // A failure here fails `f` the same way just below.
                let _ = self.clock.measure(&db);
            }
            f(&db, self)
        };
        if let Err(e) = &out {
            if e.breaks_connection() {
                pooled.broken = true;
            }
        }
        out.map_err(|e| self.ctx.map(e))
    }
}

/// Tells the queue's listeners, when this transaction commits, that it
/// changed.
fn notify(db: &Db<'_>, keys: &Keys) -> Result<(), Error> {
    db.execute("SELECT 1 FROM pg_notify($1, '')", &[&keys.channel])?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Writing a transition

/// Writes the transition `before → t` of one job and every write it causes
/// to the jobs waiting on it (transitively), as
/// [`machine::plan_with_dependents`] plans them from this transaction's
/// view, in the plan's order, each conditional on the row it was planned
/// from. Every transition of this store is written here. Returns the job
/// as written.
fn write(db: &Db<'_>, before: Job, t: Transition, now: Timestamp) -> Result<Job, Error> {
    let id = before.id;
    let plan = machine::plan_with_dependents(&mut TxGraph::new(db), before, t, now)?;
    let mut own = None;
    for w in plan {
        apply(db, &w.before, &w.after)?;
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

/// One claim, as [`machine::plan_claim`] decides it from the lanes, the
/// running jobs and the best due pending job whose lane is open, all read
/// inside this transaction.
///
/// Under the shared lock (`exclusive` false) claimers run side by side:
/// each locks the running jobs it reads and its candidate with
/// `FOR UPDATE SKIP LOCKED`, so no two take one job. That is only sound
/// while nothing needs a count over every running job or writes beyond the
/// claimed row: with lanes configured (a limit counts the running jobs of
/// a lane, a pause must be seen whole) or abandoned jobs to end (their end
/// reaches their dependents) the claim answers [`Error::Escalate`] and is
/// run again under the exclusive lock, where it sees every running job.
fn claim_tx(
    db: &Db<'_>,
    keys: &Keys,
    request: &ClaimRequest,
    now: Timestamp,
    policy: &Policy,
    exclusive: bool,
) -> Result<Option<Claimed>, Error> {
    let lanes = lanes_for_claim(db, exclusive)?;
    claim_with_lanes(db, keys, lanes, request, now, policy, exclusive)
}

/// The lanes a claim judges by, or [`Error::Escalate`] under the shared
/// lock when any are configured.
fn lanes_for_claim(db: &Db<'_>, exclusive: bool) -> Result<Lanes, Error> {
    let lanes = read_lanes(db)?;
    if !exclusive && !lanes.is_default() {
        return Err(Error::Escalate);
    }
    Ok(lanes)
}

/// [`claim_tx`] with the lanes read already ([`lanes_for_claim`]).
fn claim_with_lanes(
    db: &Db<'_>,
    keys: &Keys,
    lanes: Lanes,
    request: &ClaimRequest,
    now: Timestamp,
    policy: &Policy,
    exclusive: bool,
) -> Result<Option<Claimed>, Error> {
    let running = running_jobs(db, !exclusive)?;
    let check = LaneCheck::new(lanes, &running);
    let best_due = best_due_pending(db, &request.filter, &check, now)?;
    let plan = machine::plan_claim(request, &check, running, best_due, now, policy)
        .map_err(|e| Error::Decode(format!("the pending indexes are out of step: {e}")))?;
    if !exclusive && !plan.retire.is_empty() {
        return Err(Error::Escalate);
    }
    let claimed = plan.claimed();
    let retired = !plan.retire.is_empty();
    for w in plan.retire.into_iter().chain(plan.take) {
        write(db, w.before, w.after, now)?;
    }
    if retired {
        notify(db, keys)?;
    }
    Ok(claimed)
}

/// A claim: under the shared lock, or the exclusive one when it must.
fn claim_any(
    db: &Db<'_>,
    inner: &Inner,
    request: &ClaimRequest,
    now: Timestamp,
) -> Result<Option<Claimed>, Error> {
    let keys = &inner.keys;
    let policy = &inner.policy;
    let shared = db.transaction(keys, Lock::Shared, false, &mut |db| {
        claim_tx(db, keys, request, now, policy, false)
    });
    match shared {
        Err(Error::Escalate) => db.transaction(keys, Lock::Exclusive, false, &mut |db| {
            claim_tx(db, keys, request, now, policy, true)
        }),
        other => other,
    }
}

// ---------------------------------------------------------------------------
// Settle

/// An owner's end of its attempt (and, given `next`, the claim of the next
/// job in the same transaction), under the queue's **shared** lock, so
/// settles and claims of many runners run side by side and their commits
/// can share the server's WAL flushes. That is sound because a settle
/// writes only rows it holds locked: its own job (locked, and fenced, by
/// its owner), and the jobs waiting on it, each read `FOR UPDATE` (the
/// `Graph` of a write transaction) before the core's rule computes its new
/// count of parents, so two parents settling at once count a shared child
/// down one after the other, the second from the first's commit (`READ
/// COMMITTED` re-reads a row it waited for); two that lock children in
/// opposite orders deadlock, and the server's deadlock is retried. Whatever
/// needs a view of every job (pushes, cancels, retries, purges) holds the
/// lock exclusively and waits for them. A claim that must escalate
/// ([`claim_tx`]) runs the whole transaction again under the exclusive lock;
/// with lanes configured it knows so before the settle is written.
fn settle_any(
    db: &Db<'_>,
    inner: &Inner,
    id: JobId,
    fence: &Fence,
    settlement: &Settlement,
    next: Option<&ClaimRequest>,
    now: Timestamp,
) -> Result<SettledAndClaimed, Error> {
    let keys = &inner.keys;
    let policy = &inner.policy;
    let attempt = |db: &Db<'_>, exclusive: bool| {
        // Read first: with lanes configured the claim escalates, and the
        // settle is not written twice for it.
        let lanes = next.map(|_| lanes_for_claim(db, exclusive)).transpose()?;
        let job = load(db, id)?;
        let t = machine::settle(&job, fence, settlement, now, policy)?;
        let settled = write(db, job, t, now)?;
        if settled.state == JobState::Done {
            slothqueue_core::failpoint::hit("mid_complete"); // written, not committed
        }
        // Sees the settle's writes: a dependent it made due may be taken.
        let next = match (next, lanes) {
            (Some(request), Some(lanes)) => {
                claim_with_lanes(db, keys, lanes, request, now, policy, exclusive)?
            }
            _ => None,
        };
        Ok(SettledAndClaimed { settled, next })
    };
    match db.transaction(keys, Lock::Shared, true, &mut |db| attempt(db, false)) {
        Err(Error::Escalate) => {
            db.transaction(keys, Lock::Exclusive, true, &mut |db| attempt(db, true))
        }
        other => other,
    }
}

// ---------------------------------------------------------------------------
// Push

/// The id the next job gets: above every id ever used, including purged and
/// restored ones (`purge` raises the high water in `meta` before it
/// deletes). Read under the exclusive lock, once per transaction: the
/// transaction's inserts count up from it.
fn next_id(db: &Db<'_>) -> Result<JobId, Error> {
    let sql = format!(
        "SELECT GREATEST(COALESCE((SELECT value FROM meta WHERE name = '{}'), 0),
                         COALESCE((SELECT MAX(id) FROM jobs), 0)) + 1",
        schema::ID_HIGH_WATER
    );
    let row = db.query_opt(&sql, &[])?;
    Ok(row.map(|r| r.try_get::<_, i64>(0)).transpose()?.unwrap_or(1))
}

/// Whether pushing `new` reads the queue: its parents, the holder of its
/// key (and, through the holder, what displacing it causes). A push that
/// does not is planned from `new` alone, so it can be held in a
/// [`NewJobs`] with no write before it.
fn push_reads(new: &NewJob) -> bool {
    !new.after.is_empty() || new.idempotency_key.is_some()
}

/// One job of a push: its parents looked up, the key's holder displaced if
/// need be, then the job created from its parents as they are after that
/// and held in `held`, to be written with it. The caller has flushed
/// `held` first when [`push_reads`]: the reads must see every earlier job
/// of the batch.
fn push_one(
    db: &Db<'_>,
    new: &NewJob,
    now: Timestamp,
    policy: &Policy,
    next: &mut JobId,
    held: &mut NewJobs,
) -> Result<Pushed, Error> {
    debug_assert!(held.is_empty() || !push_reads(new), "a read past unwritten jobs");
    let mut parents = machine::resolve_parents(&mut TxGraph::new(db), new)?;
    let holder = match &new.idempotency_key {
        Some(key) => key_holder(db, key)?,
        None => None,
    };
    let id = *next;
    match machine::plan_push(new, holder.as_ref(), id, now) {
        PushPlan::Duplicate(existing) => {
            let job = match holder.filter(|h| h.id == existing) {
                Some(h) => h,
                None => load(db, existing)?,
            };
            Ok(Pushed { job, created: false, superseded: None })
        }
        PushPlan::Insert { displaced, superseded } => {
            if let (Some(t), Some(old)) = (displaced, holder) {
                write(db, old, *t, now)?;
                parents = parents.iter().map(|p| load(db, p.id)).collect::<Result<_, _>>()?;
            }
            let t = machine::create(id, new, &parents, now, policy);
            held.add(&t.job, t.events)?;
            *next += 1;
            Ok(Pushed { job: t.job, created: true, superseded })
        }
    }
}

/// One push written at once: [`push_one`] for a caller that writes more
/// after it (a clone's events, a tick's), which must find the job there.
fn push_now(
    db: &Db<'_>,
    new: &NewJob,
    now: Timestamp,
    policy: &Policy,
    next: &mut JobId,
) -> Result<Pushed, Error> {
    let mut held = NewJobs::default();
    let pushed = push_one(db, new, now, policy, next, &mut held)?;
    held.flush(db)?;
    Ok(pushed)
}

/// A clone in one write transaction: the original read, the new job built
/// by [`machine::clone_of`] and pushed through [`push_now`], then the two
/// events tying the trails together.
fn clone_tx(
    db: &Db<'_>,
    id: JobId,
    edit: &JobEdit,
    now: Timestamp,
    policy: &Policy,
) -> Result<Job, Error> {
    let original = load(db, id)?;
    let new = machine::clone_of(&original, edit)?;
    let mut next = next_id(db)?;
    let pushed = push_now(db, &new, now, policy, &mut next)?;
    append_events(db, &machine::cloned_events(original.id, pushed.job.id, now))?;
    Ok(pushed.job)
}

// ---------------------------------------------------------------------------
// Schedules

fn put_schedule_tx(db: &Db<'_>, new: &NewSchedule, now: Timestamp) -> Result<PutSchedule, Error> {
    let existing = find_schedule(db, &new.key)?;
    match schedule::create(new, existing.as_ref(), now)? {
        PutPlan::Insert(s) => {
            write_schedule(db, &s)?;
            Ok(PutSchedule { schedule: s, created: true })
        }
        PutPlan::Unchanged(s) => Ok(PutSchedule { schedule: s, created: false }),
    }
}

fn change_schedule_tx(
    db: &Db<'_>,
    key: &str,
    change: &ScheduleChange,
    now: Timestamp,
) -> Result<Option<Schedule>, Error> {
    let Some(s) = find_schedule(db, key)? else {
        return Err(Error::Store(StoreError::NoSchedule(key.to_owned())));
    };
    let after = schedule::change(&s, change, now);
    match &after {
        Some(next) if *next != s => write_schedule(db, next)?,
        Some(_) => {}
        None => delete_schedule(db, key)?,
    }
    Ok(after)
}

/// Every due tick in one write transaction under the exclusive lock: each
/// schedule, in key order, as [`schedule::plan_tick`] decides from it and
/// the state of its last tick's job, both read here (so a second caller
/// reads the first's cursor and decides nothing twice).
fn fire_schedules_tx(db: &Db<'_>, now: Timestamp, policy: &Policy) -> Result<Ticks, Error> {
    let stored = read_schedules(db)?;
    let mut next: Option<JobId> = None;
    let mut ticks = Vec::new();
    let mut after = Vec::with_capacity(stored.len());
    for s in stored {
        let previous = match &s.last_fire {
            Some(fire) => find(db, fire.job)?.map(|job| job.state),
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
                    None => next.insert(next_id(db)?),
                };
                let pushed = push_now(db, new, now, policy, next)?;
                plan.enqueued(pushed.job.id, pushed.created, now)
            }
            TickAction::Skip { .. } | TickAction::Drop => plan.without_push(),
        };
        append_events(db, &events)?;
        ticks.push(tick);
        write_schedule(db, &written)?;
        after.push(written);
    }
    Ok(Ticks { ticks, next: schedule::next_fire(&after) })
}

// ---------------------------------------------------------------------------
// Looking, purging, restoring

/// The `SELECT` behind `list`, and its parameters.
fn list_sql(filter: &ListFilter) -> Result<(String, Vec<Box<dyn ToSql + Sync + Send>>), Error> {
    let mut sql = format!("SELECT {} FROM jobs WHERE TRUE", *COLUMNS);
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    let mut bind = |sql: &mut String, cond: &str, v: Box<dyn ToSql + Sync + Send>| {
        params.push(v);
        sql.push_str(&format!(" AND {cond} ${}", params.len()));
    };
    if let Some(s) = filter.state {
        // A literal: the planner picks a partial index only for a state it
        // can see.
        sql.push_str(&format!(" AND state = '{}'", s.as_str()));
    }
    if let Some(q) = &filter.queue {
        bind(&mut sql, "queue =", Box::new(q.clone()));
    }
    if let Some(k) = &filter.kind {
        bind(&mut sql, "kind =", Box::new(k.clone()));
    }
    match (filter.order, filter.cursor) {
        (ListOrder::Newest, Some(c)) => bind(&mut sql, "id <", Box::new(c)),
        (ListOrder::Oldest, Some(c)) => bind(&mut sql, "id >", Box::new(c)),
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
        params.push(Box::new(i64::try_from(limit).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT ${}", params.len()));
    }
    Ok((sql, params))
}

fn list_tx(db: &Db<'_>, filter: &ListFilter) -> Result<Vec<Job>, Error> {
    let (sql, params) = list_sql(filter)?;
    let refs: Vec<&(dyn ToSql + Sync)> =
        params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
    query_jobs(db, &sql, &refs)
}

fn count(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Every count in one pass over the jobs.
fn stats_tx(db: &Db<'_>, now: Timestamp) -> Result<Stats, Error> {
    let sql = format!(
        "SELECT
            COUNT(*) FILTER (WHERE state = 'pending'),
            COUNT(*) FILTER (WHERE state = 'pending' AND pending_parents > 0),
            COUNT(*) FILTER (WHERE state = 'pending' AND held),
            COUNT(*) FILTER (WHERE state = 'running'),
            COUNT(*) FILTER (WHERE state = 'done'),
            COUNT(*) FILTER (WHERE state = 'failed'),
            COUNT(*) FILTER (WHERE state = 'cancelled'),
            COUNT(*) FILTER (WHERE {READY} AND not_before <= $1),
            MIN(not_before) FILTER (WHERE {READY} AND not_before > $1)
         FROM jobs"
    );
    let Some(row) = db.query_opt(&sql, &[&now.as_millis()])? else {
        return Ok(Stats::default());
    };
    Ok(Stats {
        pending: count(row.try_get(0)?),
        waiting_on_parents: count(row.try_get(1)?),
        held: count(row.try_get(2)?),
        running: count(row.try_get(3)?),
        done: count(row.try_get(4)?),
        failed: count(row.try_get(5)?),
        cancelled: count(row.try_get(6)?),
        due_now: count(row.try_get(7)?),
        next_due: row.try_get::<_, Option<i64>>(8)?.map(ts),
    })
}

/// What every queue with a pending or running job holds, by name.
fn queue_counts_tx(db: &Db<'_>, now: Timestamp) -> Result<Vec<QueueCounts>, Error> {
    let sql = format!(
        "SELECT queue,
            COUNT(*) FILTER (WHERE state = 'pending'),
            COUNT(*) FILTER (WHERE {READY} AND not_before <= $1),
            COUNT(*) FILTER (WHERE state = 'pending' AND held),
            COUNT(*) FILTER (WHERE state = 'pending' AND pending_parents > 0),
            COUNT(*) FILTER (WHERE state = 'running')
         FROM jobs WHERE state IN ('pending', 'running')
         GROUP BY queue ORDER BY queue COLLATE \"C\""
    );
    db.query(&sql, &[&now.as_millis()])?
        .iter()
        .map(|row| {
            Ok(QueueCounts {
                queue: row.try_get(0)?,
                pending: count(row.try_get(1)?),
                due: count(row.try_get(2)?),
                held: count(row.try_get(3)?),
                waiting_on_parents: count(row.try_get(4)?),
                running: count(row.try_get(5)?),
            })
        })
        .collect()
}

fn change_lane_tx(db: &Db<'_>, scope: &LaneScope, change: &LaneChange) -> Result<Lanes, Error> {
    let mut lanes = read_lanes(db)?;
    let settings = lanes.apply(scope, change)?;
    write_lane(db, scope, &settings)?;
    Ok(lanes)
}

/// The earliest `not_before` of a claimable pending job, or lease end.
fn next_due_tx(db: &Db<'_>) -> Result<Option<Timestamp>, Error> {
    let sql = format!(
        "SELECT LEAST(
            (SELECT MIN(not_before) FROM jobs WHERE {READY}),
            (SELECT MIN(lease_until) FROM jobs WHERE state = 'running'))"
    );
    let row = db.query_opt(&sql, &[])?;
    Ok(row.map(|r| r.try_get::<_, Option<i64>>(0)).transpose()?.flatten().map(ts))
}

/// Deletes the jobs the filter names that [`machine::plan_purge`] lets go,
/// each with its trail and edges.
fn purge_tx(db: &Db<'_>, filter: &PurgeFilter) -> Result<Vec<JobId>, Error> {
    let states = if filter.include_pending {
        "('pending', 'done', 'failed', 'cancelled')"
    } else {
        "('done', 'failed', 'cancelled')"
    };
    let older = filter.older_than.map(Timestamp::as_millis);
    let age = if older.is_some() {
        " AND (CASE WHEN state = 'pending' THEN created_at
                    ELSE COALESCE(finished_at, created_at) END) < $1"
    } else {
        ""
    };
    let sql = format!(
        "SELECT {} FROM jobs WHERE state IN {states}{age} ORDER BY id FOR UPDATE",
        *COLUMNS
    );
    let candidates = match &older {
        Some(t) => query_jobs(db, &sql, &[t])?,
        None => query_jobs(db, &sql, &[])?,
    };
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let ids = machine::plan_purge(&mut TxGraph::new(db), &candidates)?;
    if !ids.is_empty() {
        // Ids are never reused: the next id stays above the ones deleted.
        db.execute(
            &format!(
                "UPDATE meta SET value = GREATEST(value, COALESCE((SELECT MAX(id) FROM jobs), 0))
                 WHERE name = '{}'",
                schema::ID_HIGH_WATER
            ),
            &[],
        )?;
    }
    let mut deleting = ids.iter().peekable();
    for job in &candidates {
        if deleting.next_if_eq(&&job.id).is_some() {
            delete_job(db, job)?;
        }
    }
    Ok(ids)
}

/// Restores an import's jobs into the open write transaction: each
/// checked in batch order against the queue and the jobs before it in the
/// batch, as if each were written before the next is checked, then all
/// written together ([`NewJobs`]). What the queue holds is read once for
/// the whole batch: the rows among its ids, the holders of its keys.
fn restore_tx(db: &Db<'_>, jobs: &[(Job, Vec<Event>)]) -> Result<(), Error> {
    if jobs.is_empty() {
        return Ok(());
    }
    let ids: Vec<JobId> = jobs.iter().map(|(j, _)| j.id).collect();
    let mut taken: HashSet<JobId> = db
        .query("SELECT id FROM jobs WHERE id = ANY($1)", &[&ids])?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    let keys: Vec<&str> = jobs.iter().filter_map(|(j, _)| j.idempotency_key.as_deref()).collect();
    let mut holders: HashMap<String, JobId> = if keys.is_empty() {
        HashMap::new()
    } else {
        db.query(
            "SELECT idempotency_key, id FROM jobs
             WHERE idempotency_key IS NOT NULL AND idempotency_key = ANY($1)",
            &[&keys],
        )?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, Error>>()?
    };
    let mut held = NewJobs::default();
    for (i, (job, events)) in jobs.iter().enumerate() {
        restore_check(job, events, &mut taken, &mut holders).map_err(|e| in_batch(i, e))?;
        held.add(job, events.clone()).map_err(|e| in_batch(i, e))?;
    }
    held.flush(db)
}

/// Whether `job` may be restored into a queue whose ids are `taken` and
/// whose keys `holders` hold (the batch's earlier jobs included); counts
/// it in both when it may.
fn restore_check(
    job: &Job,
    events: &[Event],
    taken: &mut HashSet<JobId>,
    holders: &mut HashMap<String, JobId>,
) -> Result<(), Error> {
    machine::check_restore(job, events)?;
    let invalid = |m: String| Err(Error::Store(StoreError::InvalidInput(m)));
    if !taken.insert(job.id) {
        return invalid(format!("job #{} already exists", job.id));
    }
    if let Some(key) = &job.idempotency_key {
        match holders.entry(key.clone()) {
            Entry::Occupied(holder) => {
                return invalid(format!(
                    "job #{}: idempotency key `{key}` is already held by job #{}",
                    job.id,
                    holder.get()
                ));
            }
            Entry::Vacant(v) => {
                v.insert(job.id);
            }
        }
    }
    Ok(())
}

fn decode_runner(json: &str) -> Result<RunnerRecord, Error> {
    serde_json::from_str(json).map_err(|e| Error::Decode(format!("a runner record: {e}")))
}

#[async_trait]
impl Store for PgStore {
    async fn put_schedule(
        &self,
        new: &NewSchedule,
        now: Timestamp,
    ) -> Result<PutSchedule, StoreError> {
        let (new, now) = (new.clone(), self.judge(now));
        self.tx(Lock::Exclusive, true, move |db, _| put_schedule_tx(db, &new, now)).await
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        self.read(read_schedules).await
    }

    async fn change_schedule(
        &self,
        key: &str,
        change: &ScheduleChange,
        now: Timestamp,
    ) -> Result<Option<Schedule>, StoreError> {
        let (key, change, now) = (key.to_owned(), change.clone(), self.judge(now));
        self.tx(Lock::Exclusive, true, move |db, _| change_schedule_tx(db, &key, &change, now))
            .await
    }

    async fn fire_schedules(&self, now: Timestamp) -> Result<Ticks, StoreError> {
        let now = self.judge(now);
        let mut ticks = self
            .tx(Lock::Exclusive, true, move |db, inner| fire_schedules_tx(db, now, &inner.policy))
            .await?;
        ticks.next = ticks.next.map(|t| self.inner.clock.to_host(t));
        Ok(ticks)
    }

    async fn restore_schedules(&self, schedules: Vec<Schedule>) -> Result<(), StoreError> {
        for s in &schedules {
            schedule::check_restore(s)?;
        }
        self.tx(Lock::Exclusive, true, move |db, _| {
            schedules.iter().try_for_each(|s| write_schedule(db, s))
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
        let (fence, note, now) = (fence.clone(), note.clone(), self.judge(now));
        let job = self
            .owner_write(id, now, move |job, _| {
                let t = machine::note_attempt(job, &fence, &note, now)?;
                let out = t.job.clone();
                Ok((t, out))
            })
            .await?;
        Ok(job)
    }

    async fn hold(&self, id: JobId, stamp: Stamp, now: Timestamp) -> Result<Job, StoreError> {
        let now = self.judge(now);
        self.transition(id, now, move |_, job, _| Ok(machine::hold(job, stamp.clone(), now)?)).await
    }

    async fn release_hold(&self, id: JobId, by: &str, now: Timestamp) -> Result<Job, StoreError> {
        let (by, now) = (by.to_owned(), self.judge(now));
        self.transition(id, now, move |_, job, _| Ok(machine::release_hold(job, &by, now)?)).await
    }

    async fn edit(&self, id: JobId, edit: &JobEdit, now: Timestamp) -> Result<Job, StoreError> {
        let mut edit = edit.clone();
        edit.not_before = edit.not_before.map(|t| self.judge(t));
        let now = self.judge(now);
        self.transition(id, now, move |_, job, _| Ok(machine::edit(job, &edit, now)?)).await
    }

    async fn clone_job(
        &self,
        id: JobId,
        edit: &JobEdit,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let mut edit = edit.clone();
        edit.not_before = edit.not_before.map(|t| self.judge(t));
        let now = self.judge(now);
        self.tx(Lock::Exclusive, true, move |db, inner| clone_tx(db, id, &edit, now, &inner.policy))
            .await
    }

    async fn lanes(&self) -> Result<Lanes, StoreError> {
        self.read(read_lanes).await
    }

    async fn change_lane(
        &self,
        scope: &LaneScope,
        change: &LaneChange,
    ) -> Result<Lanes, StoreError> {
        let (scope, change) = (scope.clone(), change.clone());
        self.tx(Lock::Exclusive, true, move |db, _| change_lane_tx(db, &scope, &change)).await
    }

    async fn queue_counts(&self, now: Timestamp) -> Result<Vec<QueueCounts>, StoreError> {
        let now = self.judge(now);
        self.read(move |db| queue_counts_tx(db, now)).await
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
        let jobs: Vec<NewJob> = jobs.into_iter().map(|j| self.judge_new(j)).collect();
        let now = self.judge(now);
        let count = jobs.len();
        let pushed = self
            .tx(Lock::Exclusive, true, move |db, inner| {
                let mut next = next_id(db)?;
                let mut held = NewJobs::default();
                let mut pushed = Vec::with_capacity(jobs.len());
                for (i, j) in jobs.iter().enumerate() {
                    if push_reads(j) {
                        // Outside `in_batch`: a failure to write the
                        // earlier jobs is not this one's.
                        held.flush(db)?;
                    }
                    let p = push_one(db, j, now, &inner.policy, &mut next, &mut held);
                    pushed.push(p.map_err(|e| in_batch(i, e))?);
                }
                held.flush(db)?;
                Ok(pushed)
            })
            .await?;
        self.analyze_after_bulk(count).await;
        Ok(pushed)
    }

    async fn claim(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<Option<Claimed>, StoreError> {
        let (request, now) = (request.clone(), self.judge(now));
        self.with(true, move |db, inner| claim_any(db, inner, &request, now)).await
    }

    async fn heartbeat(
        &self,
        id: JobId,
        fence: &Fence,
        child_pgid: Option<i32>,
        now: Timestamp,
    ) -> Result<HeartbeatAck, StoreError> {
        let (fence, now) = (fence.clone(), self.judge(now));
        self.owner_write(id, now, move |job, policy| {
            Ok(machine::heartbeat(job, &fence, now, policy, child_pgid)?)
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
        let (fence, now) = (fence.clone(), self.judge(now));
        let settlement = Settlement::Complete(done);
        self.with(true, move |db, inner| settle_any(db, inner, id, &fence, &settlement, None, now))
            .await
            .map(|s| s.settled)
    }

    async fn fail(
        &self,
        id: JobId,
        fence: &Fence,
        failure: Failure,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let (fence, now) = (fence.clone(), self.judge(now));
        let settlement = Settlement::Fail(failure);
        self.with(true, move |db, inner| settle_any(db, inner, id, &fence, &settlement, None, now))
            .await
            .map(|s| s.settled)
    }

    async fn settle_and_claim(
        &self,
        id: JobId,
        fence: &Fence,
        settlement: Settlement,
        next: &ClaimRequest,
        now: Timestamp,
    ) -> Result<SettledAndClaimed, StoreError> {
        let (fence, request, now) = (fence.clone(), next.clone(), self.judge(now));
        self.with(true, move |db, inner| {
            settle_any(db, inner, id, &fence, &settlement, Some(&request), now)
        })
        .await
    }

    async fn release(&self, id: JobId, fence: &Fence, now: Timestamp) -> Result<Job, StoreError> {
        let (fence, now) = (fence.clone(), self.judge(now));
        self.transition(id, now, move |_, job, _| Ok(machine::release(job, &fence, now)?)).await
    }

    async fn cancel(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        let now = self.judge(now);
        self.transition(id, now, move |_, job, _| Ok(machine::cancel(job, now)?)).await
    }

    async fn retry(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        let now = self.judge(now);
        self.transition(id, now, move |g, job, _| {
            let parents = machine::load_parents(g, job)?;
            Ok(machine::retry(job, &parents, now)?)
        })
        .await
    }

    async fn get(&self, id: JobId) -> Result<Job, StoreError> {
        self.with(false, move |db, _| load(db, id)).await
    }

    async fn dependents(&self, id: JobId) -> Result<Vec<JobId>, StoreError> {
        self.with(false, move |db, _| crate::rows::dependents(db, id)).await
    }

    async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        self.read(move |db| {
            load(db, id)?;
            db.query(
                "SELECT job_id, at, kind, owner, attempt, message, retry_at
                 FROM events WHERE job_id = $1 ORDER BY seq",
                &[&id],
            )?
            .iter()
            .map(event_from_row)
            .collect()
        })
        .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
        let filter = filter.clone();
        self.with(false, move |db, _| list_tx(db, &filter)).await
    }

    async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError> {
        let now = self.judge(now);
        let mut stats = self.read(move |db| stats_tx(db, now)).await?;
        stats.next_due = stats.next_due.map(|t| self.inner.clock.to_host(t));
        Ok(stats)
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        let due = self.read(next_due_tx).await?;
        Ok(due.map(|t| self.inner.clock.to_host(t)))
    }

    async fn reclaim_dead(
        &self,
        attempts: &[(JobId, Fence)],
        now: Timestamp,
    ) -> Result<Vec<Job>, StoreError> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        let (attempts, now) = (attempts.to_vec(), self.judge(now));
        self.tx(Lock::Exclusive, true, move |db, _| {
            let mut taken = Vec::new();
            for (id, attempt) in &attempts {
                let Some(job) = find(db, *id)? else { continue };
                if let Some(t) = machine::reclaim_dead(&job, attempt, now) {
                    write(db, job.clone(), t, now)?;
                    taken.push(job);
                }
            }
            Ok(taken)
        })
        .await
    }

    async fn purge(&self, filter: &PurgeFilter) -> Result<Vec<JobId>, StoreError> {
        let mut filter = filter.clone();
        filter.older_than = filter.older_than.map(|t| self.judge(t));
        self.tx(Lock::Exclusive, false, move |db, _| purge_tx(db, &filter)).await
    }

    async fn restore(&self, job: Job, events: Vec<Event>) -> Result<(), StoreError> {
        self.restore_many(vec![(job, events)]).await.map_err(alone)
    }

    async fn restore_many(&self, jobs: Vec<(Job, Vec<Event>)>) -> Result<(), StoreError> {
        let count = jobs.len();
        self.tx(Lock::Exclusive, true, move |db, _| restore_tx(db, &jobs)).await?;
        self.analyze_after_bulk(count).await;
        Ok(())
    }

    async fn put_runner(&self, record: &RunnerRecord) -> Result<(), StoreError> {
        let json = serde_json::to_string(record).map_err(|e| {
            StoreError::InvalidInput(format!("the runner record cannot be stored: {e}"))
        })?;
        let owner_id = record.owner.id.clone();
        self.tx(Lock::Rows, false, move |db, _| {
            db.execute(
                "INSERT INTO runners (owner_id, record) VALUES ($1, $2)
                 ON CONFLICT (owner_id) DO UPDATE SET record = excluded.record",
                &[&owner_id, &json],
            )?;
            Ok(())
        })
        .await
    }

    async fn remove_runner(&self, owner_id: &str) -> Result<(), StoreError> {
        let owner_id = owner_id.to_owned();
        self.tx(Lock::Rows, true, move |db, _| {
            db.execute("DELETE FROM runners WHERE owner_id = $1", &[&owner_id])?;
            Ok(())
        })
        .await
    }

    fn watch_changes(&self, wake: ChangeWaker) -> Option<ChangeGuard> {
        Some(Box::new(self.on_change(Box::new(move || wake()))))
    }

    async fn runners(&self) -> Result<Vec<RunnerRecord>, StoreError> {
        self.with(false, |db, _| {
            db.query("SELECT record FROM runners ORDER BY owner_id COLLATE \"C\"", &[])?
                .iter()
                .map(|row| decode_runner(&row.try_get::<_, String>(0)?))
                .collect()
        })
        .await
    }
}

/// Element `index`'s refusal as the batch's ([`StoreError::InBatch`]).
/// Only a refusal in the core's terms is wrapped: a server failure or a
/// damaged row is the batch's, not the element's.
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
mod tests;
