//! [`PgStore`]: the core's [`Store`] on a PostgreSQL schema.
//!
//! Every write is one of core's operations ([`ops`]) run as one
//! transaction on a pooled connection, on the store's runtime's blocking
//! threads, over the row verbs of [`PgTx`] (`verbs.rs`), under the queue
//! lock the crate docs give it; an owner's settle and a claim run under the
//! shared lock, and again under the exclusive one when they must
//! ([`shared_or_exclusive`]). Nothing here decides a rule; it opens
//! transactions and stores.

use std::sync::Arc;

use async_trait::async_trait;
use slothqueue_core::ops;
use slothqueue_core::{
    AttemptNote, ChangeGuard, ChangeWaker, ClaimRequest, Claimed, Completion, Event, Failure,
    Fence, HeartbeatAck, Job, JobEdit, JobId, JobSource, LaneChange, LaneScope, Lanes, ListFilter,
    NewJob, NewSchedule, Policy, PurgeFilter, Pushed, PushedId, PutSchedule, QueueCounts,
    RunnerRecord, Schedule, ScheduleChange, SettledAndClaimed, Settlement, Stamp, Stats, Store,
    StoreError, Ticks, Timestamp,
};

use crate::clock::{Judged, ServerClock};
use crate::error::{Context, Error};
use crate::listen::{self, ChangeListener};
use crate::open;
use crate::reads::{events_tx, list_tx, next_due_tx, queue_counts_tx, runners_tx, stats_tx};
use crate::rows::{dependents, load, read_lanes, read_schedules};
use crate::txn::{Db, Keys, Lock, PgOptions, Pool, connection_config, parse_url, runtime};
use crate::verbs::{PgTx, shared_or_exclusive};

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
    listen_config: crate::txn::Session,
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
            writer: !read_only,
        };
        let runtime = runtime(options.pool_size)?;
        let rt = runtime.handle().clone();
        let clock = ServerClock::new(options.host_clock.clone());
        let first = open::first_connection(&rt, &target, &options, &ctx, &clock, read_only);
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
            options.call_timeout,
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
    fn judge_new(&self, job: NewJob) -> NewJob {
        self.inner.clock.judge_new(job)
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
        // Named with its schema: through a pooler no search path is set
        // outside a transaction (and `ANALYZE` may run in none).
        let sql = format!("ANALYZE {}.jobs", self.schema());
        let _ = self.with(true, move |db, _| db.batch(&sql)).await;
    }

    /// Runs `f` in one read-only transaction (one snapshot).
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Db<'_>) -> Result<T, Error> + Send + 'static,
    {
        self.with(false, move |db, _| db.read(f)).await
    }

    /// Runs `f` (one of core's operations) in one write transaction over
    /// the row verbs of [`PgTx`], taking the queue's lock as `lock` says,
    /// notifying the queue's listeners on commit when `notify`; what `f`
    /// left held is written before the commit.
    async fn write<T, F>(&self, lock: Lock, notify: bool, mut f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&mut PgTx<'_, '_>, &Policy) -> Result<T, Error> + Send + 'static,
    {
        self.tx(lock, notify, move |db, inner| {
            let mut tx = PgTx::new(db, false);
            let out = f(&mut tx, &inner.policy)?;
            tx.finish()?;
            Ok(out)
        })
        .await
    }

    /// An owner's end of its attempt ([`ops::settle`]), under the shared
    /// lock ([`shared_or_exclusive`]).
    async fn settle(
        &self,
        id: JobId,
        fence: &Fence,
        settlement: Settlement,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let (fence, now) = (fence.clone(), self.judge(now));
        self.with(true, move |db, inner| {
            shared_or_exclusive(db, &inner.keys, true, false, &mut |tx| {
                ops::settle(tx, id, &fence, &settlement, now, &inner.policy)
            })
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

/// Every write is core's operation ([`ops`]) in one transaction over the
/// row verbs of `PgTx`, under the lock the crate docs give it; the
/// reads are `reads.rs`.
#[async_trait]
impl Store for PgStore {
    async fn put_schedule(
        &self,
        new: &NewSchedule,
        now: Timestamp,
    ) -> Result<PutSchedule, StoreError> {
        let (new, now) = (new.clone(), self.judge(now));
        self.write(Lock::Exclusive, true, move |tx, _| ops::put_schedule(tx, &new, now)).await
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
        self.write(Lock::Exclusive, true, move |tx, _| ops::change_schedule(tx, &key, &change, now))
            .await
    }

    async fn fire_schedules(&self, now: Timestamp) -> Result<Ticks, StoreError> {
        let now = self.judge(now);
        let mut ticks = self
            .write(Lock::Exclusive, true, move |tx, policy| ops::fire_schedules(tx, now, policy))
            .await?;
        ticks.next = ticks.next.map(|t| self.inner.clock.to_host(t));
        Ok(ticks)
    }

    async fn restore_schedules(&self, schedules: Vec<Schedule>) -> Result<(), StoreError> {
        self.write(Lock::Exclusive, true, move |tx, _| ops::restore_schedules(tx, &schedules)).await
    }

    async fn note_attempt(
        &self,
        id: JobId,
        fence: &Fence,
        note: &AttemptNote,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let (fence, note, now) = (fence.clone(), note.clone(), self.judge(now));
        self.write(Lock::Rows, false, move |tx, _| ops::note_attempt(tx, id, &fence, &note, now))
            .await
    }

    async fn hold(&self, id: JobId, stamp: Stamp, now: Timestamp) -> Result<Job, StoreError> {
        let now = self.judge(now);
        self.write(Lock::Exclusive, true, move |tx, _| ops::hold(tx, id, stamp.clone(), now)).await
    }

    async fn release_hold(&self, id: JobId, by: &str, now: Timestamp) -> Result<Job, StoreError> {
        let (by, now) = (by.to_owned(), self.judge(now));
        self.write(Lock::Exclusive, true, move |tx, _| ops::release_hold(tx, id, &by, now)).await
    }

    async fn edit(&self, id: JobId, edit: &JobEdit, now: Timestamp) -> Result<Job, StoreError> {
        let mut edit = edit.clone();
        edit.not_before = edit.not_before.map(|t| self.judge(t));
        let now = self.judge(now);
        self.write(Lock::Exclusive, true, move |tx, _| ops::edit(tx, id, &edit, now)).await
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
        self.write(Lock::Exclusive, true, move |tx, policy| {
            ops::clone_job(tx, id, &edit, now, policy)
        })
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
        self.write(Lock::Exclusive, true, move |tx, _| ops::change_lane(tx, &scope, &change)).await
    }

    async fn queue_counts(&self, now: Timestamp) -> Result<Vec<QueueCounts>, StoreError> {
        let now = self.judge(now);
        self.read(move |db| queue_counts_tx(db, now)).await
    }

    async fn push(&self, job: NewJob, now: Timestamp) -> Result<Pushed, StoreError> {
        let mut out = self.push_many(vec![job], now).await.map_err(ops::alone)?;
        out.pop().ok_or_else(|| StoreError::Backend("push returned nothing".to_owned()))
    }

    async fn push_many(
        &self,
        jobs: Vec<NewJob>,
        now: Timestamp,
    ) -> Result<Vec<Pushed>, StoreError> {
        let jobs: Vec<NewJob> = jobs.into_iter().map(|j| self.judge_new(j)).collect();
        let (count, now) = (jobs.len(), self.judge(now));
        let pushed = self
            .write(Lock::Exclusive, true, move |tx, policy| ops::push_many(tx, &jobs, now, policy))
            .await?;
        self.analyze_after_bulk(count).await;
        Ok(pushed)
    }

    async fn push_stream(
        &self,
        source: Arc<dyn JobSource>,
        now: Timestamp,
    ) -> Result<Vec<PushedId>, StoreError> {
        let inner = Arc::clone(&self.inner);
        let source = Judged { source, judge: move |job| inner.clock.judge_new(job) };
        let now = self.judge(now);
        let pushed = self
            .write(Lock::Exclusive, true, move |tx, policy| {
                ops::push_stream(tx, &source, now, policy)
            })
            .await?;
        self.analyze_after_bulk(pushed.len()).await;
        Ok(pushed)
    }

    async fn claim(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<Option<Claimed>, StoreError> {
        let (request, now) = (request.clone(), self.judge(now));
        self.with(true, move |db, inner| {
            shared_or_exclusive(db, &inner.keys, false, true, &mut |tx| {
                ops::claim(tx, &request, now, &inner.policy)
            })
        })
        .await
    }

    async fn heartbeat(
        &self,
        id: JobId,
        fence: &Fence,
        child_pgid: Option<i32>,
        now: Timestamp,
    ) -> Result<HeartbeatAck, StoreError> {
        let (fence, now) = (fence.clone(), self.judge(now));
        self.write(Lock::Rows, false, move |tx, policy| {
            ops::heartbeat(tx, id, &fence, child_pgid, now, policy)
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
        self.settle(id, fence, Settlement::Complete(done), now).await
    }

    async fn fail(
        &self,
        id: JobId,
        fence: &Fence,
        failure: Failure,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        self.settle(id, fence, Settlement::Fail(failure), now).await
    }

    async fn settle_and_claim(
        &self,
        id: JobId,
        fence: &Fence,
        settlement: Settlement,
        next: &ClaimRequest,
        now: Timestamp,
    ) -> Result<SettledAndClaimed, StoreError> {
        let (fence, next, now) = (fence.clone(), next.clone(), self.judge(now));
        self.with(true, move |db, inner| {
            shared_or_exclusive(db, &inner.keys, true, true, &mut |tx| {
                ops::settle_and_claim(tx, id, &fence, &settlement, &next, now, &inner.policy)
            })
        })
        .await
    }

    async fn release(&self, id: JobId, fence: &Fence, now: Timestamp) -> Result<Job, StoreError> {
        let (fence, now) = (fence.clone(), self.judge(now));
        self.write(Lock::Exclusive, true, move |tx, _| ops::release(tx, id, &fence, now)).await
    }

    async fn cancel(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        let now = self.judge(now);
        self.write(Lock::Exclusive, true, move |tx, _| ops::cancel(tx, id, now)).await
    }

    async fn retry(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        let now = self.judge(now);
        self.write(Lock::Exclusive, true, move |tx, _| ops::retry(tx, id, now)).await
    }

    async fn get(&self, id: JobId) -> Result<Job, StoreError> {
        self.with(false, move |db, _| db.single(|db| load(db, id))).await
    }

    async fn dependents(&self, id: JobId) -> Result<Vec<JobId>, StoreError> {
        self.with(false, move |db, _| db.single(|db| dependents(db, id))).await
    }

    async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        self.read(move |db| events_tx(db, id)).await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
        let filter = filter.clone();
        self.with(false, move |db, _| db.single(|db| list_tx(db, &filter))).await
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
        self.write(Lock::Exclusive, true, move |tx, _| ops::reclaim_dead(tx, &attempts, now)).await
    }

    async fn purge(&self, filter: &PurgeFilter) -> Result<Vec<JobId>, StoreError> {
        let mut filter = filter.clone();
        filter.older_than = filter.older_than.map(|t| self.judge(t));
        self.write(Lock::Exclusive, false, move |tx, _| ops::purge(tx, &filter)).await
    }

    async fn restore(&self, job: Job, events: Vec<Event>) -> Result<(), StoreError> {
        self.restore_many(vec![(job, events)]).await.map_err(ops::alone)
    }

    async fn restore_many(&self, jobs: Vec<(Job, Vec<Event>)>) -> Result<(), StoreError> {
        let count = jobs.len();
        self.write(Lock::Exclusive, true, move |tx, _| {
            tx.prime_restore(&jobs)?;
            ops::restore_many(tx, &jobs)
        })
        .await?;
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
        self.with(false, |db, _| db.single(runners_tx)).await
    }
}

#[cfg(test)]
mod tests;
