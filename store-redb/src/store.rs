//! [`RedbStore`]: the [`Store`] trait on redb tables (see the crate docs for
//! the table design), and the operations behind it. Each operation is one
//! transaction run on tokio's blocking pool; every state change goes
//! through a [`slothqueue_core::machine`] function, then [`write_plan`]
//! (the change and what it causes to the jobs waiting on it) and
//! [`Tx::put`], which keeps the indexes in step with the row. The schedule
//! operations are `schedules.rs`'s, handed [`push_in`] for a tick's job.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata};
use slothqueue_core::machine::{self, Graph, PushPlan, Transition};
use slothqueue_core::{
    AttemptNote, ClaimRequest, Claimed, Completion, Event, Failure as JobFailure, Fence,
    HeartbeatAck, Job, JobEdit, JobId, JobState, LaneChange, LaneCheck, LaneScope, Lanes,
    ListFilter, ListOrder, NewJob, NewSchedule, Policy, PurgeFilter, Pushed, PutSchedule,
    QueueCounts, RunnerRecord, Schedule, ScheduleChange, SettledAndClaimed, Settlement, Stamp,
    Stats, Store, StoreError, Ticks, Timestamp,
};

use crate::error::{Failure, corrupt, guarded, panic_message};
use crate::rows::{
    Tx, decode_event, decode_job, dependents_in, lanes_in, load, out_of_step, schedules_in,
    verify_indexes,
};
use crate::schema::{
    COUNTS, EDGES, EVENTS, HELD, JOBS, LANES, PENDING, RUNNERS, RUNNING, SCHEDULES, SCHEMA_VERSION,
    WAITING,
};
use crate::txn::{self, Db, Gate, Handle, RedbOptions, gate_for, read_only};
use crate::{open, schedules, seal};

/// A queue in one redb file. Cheap to share (`Arc`); several handles, in
/// one process or many, may hold the same file.
#[derive(Debug)]
pub struct RedbStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    options: RedbOptions,
    /// Write-locked only to reopen after a latched I/O error and for the
    /// integrity check, which need the handle to themselves.
    db: RwLock<Db>,
    /// One write transaction at a time among every handle of this process
    /// on this file, handed over in turn rather than polled for, so
    /// threads of one process do not starve each other; other processes
    /// are polled for (see [`txn::patiently`]).
    gate: Arc<Gate>,
    /// Opened from a file (not a test backend), so it can be reopened.
    on_file: bool,
    /// Opened with [`RedbStore::open_read_only`]: every write is refused.
    read_only: bool,
}

impl RedbStore {
    /// Opens the queue at `path`, creating it (and its directory, file mode
    /// 0600) when the file is missing or empty. A foreign, damaged or newer
    /// file is refused with [`StoreError::Corrupt`] or
    /// [`StoreError::SchemaTooNew`] and left unchanged.
    pub fn open(path: &Path, options: RedbOptions) -> Result<RedbStore, StoreError> {
        let db = open::open_database(path, options.lock_timeout, options.full_check)?;
        Ok(RedbStore::on(path, options, Handle::Writable(db), gate_for(path)?, true))
    }

    /// Opens the existing queue at `path` for reading only: nothing is
    /// written to the file, not even redb's header (a writable open
    /// rewrites it on opening and closing), so commands that only look
    /// leave the file byte-for-byte as they found it. Vetted like
    /// [`RedbStore::open`]; a missing file is [`StoreError::Io`].
    ///
    /// It shares the file with writers in other processes and sees their
    /// commits. A file a crash left needing repair, with no live writer to
    /// repair it, is repaired in memory and read as a snapshot until a
    /// writer has repaired the real file. Every write through the store
    /// answers [`StoreError::Io`] of kind
    /// [`std::io::ErrorKind::ReadOnlyFilesystem`].
    pub fn open_read_only(path: &Path, options: RedbOptions) -> Result<RedbStore, StoreError> {
        let handle = open::open_read_only(path, options.lock_timeout)?;
        Ok(RedbStore::on(path, options, handle, gate_for(path)?, true))
    }

    /// Opens a queue on a redb storage backend rather than a file, for
    /// storage-fault tests (power loss, failing writes) that must see every
    /// write and sync. `label` names it in errors. The backend must keep
    /// redb's lock contract; an image private to one handle may grant
    /// every lock. None of the file checks of [`RedbStore::open`] apply,
    /// and a latched I/O error is not recovered by reopening.
    #[doc(hidden)]
    pub fn open_backend(
        backend: impl redb::StorageBackend,
        label: &Path,
        options: RedbOptions,
    ) -> Result<RedbStore, StoreError> {
        let db = open::open_backend(backend, label, options.lock_timeout)?;
        Ok(RedbStore::on(label, options, Handle::Writable(db), Arc::new(Gate::default()), false))
    }

    /// A store on an opened handle; read-only unless the handle is writable.
    fn on(
        path: &Path,
        options: RedbOptions,
        handle: Handle,
        gate: Arc<Gate>,
        on_file: bool,
    ) -> RedbStore {
        let read_only = !matches!(handle, Handle::Writable(_));
        let db = RwLock::new(if on_file && !read_only {
            Db::sealed(handle, path)
        } else {
            Db::new(handle)
        });
        RedbStore {
            inner: Arc::new(Inner { path: path.to_owned(), options, db, gate, on_file, read_only }),
        }
    }

    /// The queue file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs redb's integrity check (every page checksum, the allocator
    /// state) and then checks that every index agrees with the job rows.
    /// Slow: it reads the whole file. Blocks; call it from a blocking
    /// context. `Corrupt` names what was wrong; if redb found damage it
    /// could repair, it has repaired the file and still says so.
    pub fn check_integrity(&self) -> Result<(), StoreError> {
        let path = &self.inner.path;
        {
            let mut db = self.inner.db.write().unwrap_or_else(PoisonError::into_inner);
            let Some(Handle::Writable(db)) = db.0.as_mut() else {
                // redb's check repairs what it finds: it writes.
                return Err(read_only(path));
            };
            match guarded(|| Ok(db.check_integrity()?)) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(corrupt(
                        path,
                        "redb's integrity check found damage and repaired it; check the jobs",
                    ));
                }
                Err(e) => return Err(e.into_store(path)),
            }
        }
        self.inner.read(verify_indexes)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = Arc::clone(&self.inner);
        match tokio::task::spawn_blocking(move || f(&inner)).await {
            Ok(r) => r,
            Err(e) => Err(StoreError::Backend(match e.try_into_panic() {
                Ok(p) => format!("the storage task panicked: {}", panic_message(&*p)),
                Err(e) => format!("the storage task failed: {e}"),
            })),
        }
    }
}

impl Inner {
    /// Runs `f` in a read transaction.
    fn read<T>(&self, f: impl Fn(&ReadTransaction) -> Result<T, Failure>) -> Result<T, StoreError> {
        self.refresh_snapshot();
        self.with_db(|h| {
            let txn = h.begin_read()?;
            f(&txn)
        })
    }

    /// Swaps a snapshot (see [`Handle::Snapshot`]) for redb's read-only
    /// handle once the file opens as one, so that a long look (`logs
    /// --follow`) sees what writers do after a crash. Until then the
    /// snapshot answers; a failed try changes nothing.
    fn refresh_snapshot(&self) {
        if !self.on_file {
            return;
        }
        let stale = matches!(
            self.db.read().unwrap_or_else(PoisonError::into_inner).0,
            Some(Handle::Snapshot(_))
        );
        if !stale {
            return;
        }
        if let Ok(Some(ro)) = open::open_current_read_only(&self.path, Duration::ZERO) {
            *self.db.write().unwrap_or_else(PoisonError::into_inner) =
                Db::new(Handle::ReadOnly(ro));
        }
    }

    /// Runs `f` in a write transaction and commits it, or aborts it if `f`
    /// fails (nothing is written then).
    ///
    /// A file a newer slothqueue migrated while this handle was open (a
    /// runner left going across an upgrade) is refused as
    /// [`StoreError::SchemaTooNew`] before `f` runs: this build would write
    /// rows and indexes in its own layout, out of step with the new one.
    fn write<T>(&self, f: impl Fn(&mut Tx<'_>) -> Result<T, Failure>) -> Result<T, StoreError> {
        if self.read_only {
            return Err(read_only(&self.path));
        }
        let committed = self.with_db(|h| {
            let Handle::Writable(db) = h else {
                return Err(Failure::Store(read_only(&self.path)));
            };
            txn::write(db, &self.gate, self.options.lock_timeout, |t| {
                if t.version > u64::from(SCHEMA_VERSION) {
                    return Err(Failure::Store(StoreError::SchemaTooNew {
                        path: self.path.clone(),
                        found: u32::try_from(t.version).unwrap_or(u32::MAX),
                        supported: SCHEMA_VERSION,
                    }));
                }
                f(t)
            })
        })?;
        self.db.read().unwrap_or_else(PoisonError::into_inner).renew_seal();
        Ok(committed)
    }

    /// Runs `f` on the database, mapping errors; after an I/O error redb
    /// has latched (a full disk, say) the file is opened again and `f`
    /// tried once more, so the queue recovers without a restart.
    fn with_db<T>(&self, f: impl Fn(&Handle) -> Result<T, Failure>) -> Result<T, StoreError> {
        let first = {
            let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
            guarded(|| f(db.handle()))
        };
        match first {
            Err(e) if e.is_previous_io() && self.on_file => {
                let fresh = if self.read_only {
                    open::open_read_only(&self.path, self.options.lock_timeout)?
                } else {
                    let check = !seal::holds(&self.path);
                    Handle::Writable(open::open_writable(
                        &self.path,
                        self.options.lock_timeout,
                        check,
                    )?)
                };
                let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
                *db = if self.read_only { Db::new(fresh) } else { Db::sealed(fresh, &self.path) };
                guarded(|| f(db.handle())).map_err(|e| e.into_store(&self.path))
            }
            r => r.map_err(|e| e.into_store(&self.path)),
        }
    }
}

/// One claim, as [`machine::plan_claim`] decides it from the lanes, the
/// running jobs and the best due pending job their lanes let start, all
/// read and judged inside this transaction (so a limit holds across every
/// claimer on the file). With no lane settings the lanes cost one look at
/// an empty table.
fn claim_in(
    t: &mut Tx<'_>,
    request: &ClaimRequest,
    now: Timestamp,
    policy: &Policy,
) -> Result<Option<Claimed>, Failure> {
    t.advance(now)?;
    let running = t.running_jobs()?;
    let lanes = LaneCheck::new(t.lanes()?, &running);
    let best_due = t.best_due(&request.filter, &lanes, now)?;
    let plan = machine::plan_claim(request, &lanes, running, best_due, now, policy)
        .map_err(|e| Failure::Damaged(format!("the ready index is out of step: {e}")))?;
    let claimed = plan.claimed();
    // A retired job's dependents are waiting (not due), so the cascade
    // never touches the job taken.
    for w in plan.retire.into_iter().chain(plan.take) {
        write_plan(t, w.before, w.after, now)?;
    }
    Ok(claimed)
}

/// Writes `transition` of `before` and every write it causes to the jobs
/// waiting on it, transitively ([`machine::plan_with_dependents`]), each
/// conditional on the row it was planned from, all in this transaction.
/// Every transition a store writes comes here, so none can forget its
/// dependents; one that cannot affect them reads nothing more. Answers the
/// job's own new state.
fn write_plan(
    t: &mut Tx<'_>,
    before: Job,
    transition: Transition,
    now: Timestamp,
) -> Result<Job, Failure> {
    let id = before.id;
    let plan = machine::plan_with_dependents(t, before, transition, now)?;
    let mut own = None;
    for w in plan {
        t.apply(&w.before, &w.after)?;
        if w.before.id == id {
            own = Some(w.after.job);
        }
    }
    own.ok_or_else(|| Failure::Damaged(format!("the plan for job #{id} left it out")))
}

fn push_in(
    t: &mut Tx<'_>,
    new: &NewJob,
    now: Timestamp,
    policy: &Policy,
) -> Result<Pushed, Failure> {
    machine::validate(new)?;
    // Parents are resolved on the queue as it is before this push (so an
    // unknown one is refused even for a duplicate, and the job whose key
    // this push takes over cannot be one of them).
    let parents = machine::resolve_parents(t, new)?;
    let holder = match &new.idempotency_key {
        Some(k) => Graph::key_holder(t, k)?,
        None => None,
    };
    let id = t.next_id()?;
    match machine::plan_push(new, holder.as_ref(), id, now) {
        PushPlan::Duplicate(existing) => {
            Ok(Pushed { job: t.must(existing)?, created: false, superseded: None })
        }
        PushPlan::Insert { displaced, superseded } => {
            if let (Some(d), Some(old)) = (displaced, holder) {
                write_plan(t, old, *d, now)?;
            }
            // Read again: the displaced holder's write may have changed
            // them (a parent cancelled along with the holder's dependents).
            let mut fresh = Vec::with_capacity(parents.len());
            for p in &parents {
                fresh.extend(Graph::job(t, p.id)?);
            }
            let parents = fresh;
            let created = machine::create(id, new, &parents, now, policy);
            t.put(None, Some(&created.job))?;
            t.append(&created.events)?;
            t.set_next_id(id.checked_add(1).ok_or_else(|| {
                Failure::Store(StoreError::InvalidInput("job ids are exhausted".to_owned()))
            })?)?;
            Ok(Pushed { job: created.job, created: true, superseded })
        }
    }
}

/// Restores one job of an import into the open write transaction: checked
/// on its own ([`machine::check_restore`]), then against the queue as this
/// transaction sees it, so an id or key restored earlier in the same batch
/// counts as taken; the next id is raised above it.
fn restore_in(t: &mut Tx<'_>, job: &Job, events: &[Event]) -> Result<(), Failure> {
    machine::check_restore(job, events)?;
    let invalid = |m: String| Err(Failure::Store(StoreError::InvalidInput(m)));
    if t.jobs.get(job.id)?.is_some() {
        return invalid(format!("job #{} already exists", job.id));
    }
    if let Some(k) = &job.idempotency_key {
        if let Some(holder) = t.keys.get(k.as_str())?.map(|v| v.value()) {
            return invalid(format!(
                "job #{}: idempotency key `{k}` is already held by job #{holder}",
                job.id
            ));
        }
    }
    t.put(None, Some(job))?;
    t.append(events)?;
    if t.next_id()? <= job.id {
        t.set_next_id(job.id.saturating_add(1))?;
    }
    Ok(())
}

fn purge_in(t: &mut Tx<'_>, filter: &PurgeFilter) -> Result<Vec<JobId>, Failure> {
    // The jobs table iterates in id order, so the candidates are in it.
    let mut candidates: Vec<Job> = Vec::new();
    for entry in t.jobs.iter()? {
        let (k, v) = entry?;
        let job = decode_job(k.value(), v.value())?;
        let (eligible, age) = match job.state {
            JobState::Running => (false, job.created_at),
            JobState::Pending => (filter.include_pending, job.created_at),
            JobState::Done | JobState::Failed | JobState::Cancelled => {
                (true, job.finished_at.unwrap_or(job.created_at))
            }
        };
        if eligible && filter.older_than.is_none_or(|t| age < t) {
            candidates.push(job);
        }
    }
    // A pending job that a job left behind still waits on is kept.
    let ids = machine::plan_purge(t, &candidates)?;
    // Both lists are in id order.
    let mut deleting = ids.iter().peekable();
    for job in &candidates {
        if deleting.next_if_eq(&&job.id).is_none() {
            continue;
        }
        // The job's own edges (to its parents) go with it; edges naming it
        // as a parent belong to the children that remain.
        t.put(Some(job), None)?;
        t.events.retain_in((job.id, 0)..=(job.id, u32::MAX), |_, _| false)?;
    }
    Ok(ids)
}

fn list_in(txn: &ReadTransaction, filter: &ListFilter) -> Result<Vec<Job>, Failure> {
    let jobs = txn.open_table(JOBS)?;
    let limit = filter.limit.unwrap_or(usize::MAX);
    let admits = |j: &Job| {
        filter.state.is_none_or(|s| j.state == s)
            && filter.queue.as_ref().is_none_or(|q| &j.queue == q)
            && filter.kind.as_ref().is_none_or(|k| &j.kind == k)
    };
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    // The running jobs are few and indexed: no need to read every row.
    if filter.state == Some(JobState::Running) {
        let running = txn.open_table(RUNNING)?;
        for entry in running.iter()? {
            let id = entry?.0.value();
            let job = load(&jobs, id)?.ok_or_else(|| out_of_step("running", id))?;
            if admits(&job) {
                out.push(job);
            }
        }
        match filter.order {
            ListOrder::Newest => out.sort_by_key(|j| std::cmp::Reverse(j.id)),
            ListOrder::Oldest => out.sort_by_key(|j| j.id),
            ListOrder::DueFirst => out.sort_by_key(Job::claim_order),
        }
        out.retain(|j| match (filter.order, filter.cursor) {
            (ListOrder::Newest, Some(c)) => j.id < c,
            (ListOrder::Oldest, Some(c)) => j.id > c,
            _ => true,
        });
        out.truncate(limit);
        return Ok(out);
    }
    let rows = match (filter.order, filter.cursor) {
        (ListOrder::Newest, Some(c)) => jobs.range(..c)?,
        (ListOrder::Oldest, Some(c)) => jobs.range((Bound::Excluded(c), Bound::Unbounded))?,
        _ => jobs.range::<i64>(..)?,
    };
    let mut take = |entry: Result<
        (redb::AccessGuard<'_, i64>, redb::AccessGuard<'_, &'static [u8]>),
        redb::StorageError,
    >|
     -> Result<bool, Failure> {
        let (k, v) = entry?;
        let job = decode_job(k.value(), v.value())?;
        if admits(&job) {
            out.push(job);
        }
        Ok(filter.order == ListOrder::DueFirst || out.len() < limit)
    };
    match filter.order {
        ListOrder::Newest => {
            for entry in rows.rev() {
                if !take(entry)? {
                    break;
                }
            }
        }
        ListOrder::Oldest | ListOrder::DueFirst => {
            for entry in rows {
                if !take(entry)? {
                    break;
                }
            }
        }
    }
    if filter.order == ListOrder::DueFirst {
        out.sort_by_key(Job::claim_order);
        out.truncate(limit);
    }
    Ok(out)
}

fn stats_in(txn: &ReadTransaction, now: Timestamp) -> Result<Stats, Failure> {
    let counts = txn.open_table(COUNTS)?;
    let pending = txn.open_table(PENDING)?;
    let waiting = txn.open_table(WAITING)?;
    let held = txn.open_table(HELD)?;
    let count = |s: JobState| -> Result<u64, Failure> {
        Ok(counts.get(s.as_str())?.map(|v| v.value()).unwrap_or(0))
    };
    let now_ms = now.as_millis();
    // Jobs waiting on parents or held are in neither `pending_by_time`
    // nor `ready`: not counted due, and their time is not `next_due`.
    let mut due_now = 0u64;
    for entry in pending.range(..=(now_ms, i64::MAX))? {
        entry?;
        due_now += 1;
    }
    let next_due =
        match pending.range((Bound::Excluded((now_ms, i64::MAX)), Bound::Unbounded))?.next() {
            Some(entry) => Some(Timestamp::from_millis(entry?.0.value().0)),
            None => None,
        };
    Ok(Stats {
        held: held.len()?,
        pending: count(JobState::Pending)?,
        waiting_on_parents: waiting.len()?,
        running: count(JobState::Running)?,
        done: count(JobState::Done)?,
        failed: count(JobState::Failed)?,
        cancelled: count(JobState::Cancelled)?,
        due_now,
        next_due,
    })
}

/// What each queue with a pending or running job holds: one pass over
/// `pending_by_time` (the claimable jobs, due or not), the rows of the jobs
/// waiting on parents (their queue is in the row), `held` (which names
/// each one's queue) and the few running jobs.
fn queue_counts_in(txn: &ReadTransaction, now: Timestamp) -> Result<Vec<QueueCounts>, Failure> {
    /// Counts one job of `queue` with `f` (the name is copied once per
    /// queue, not once per job).
    fn count(
        by_queue: &mut BTreeMap<String, QueueCounts>,
        queue: &str,
        f: impl FnOnce(&mut QueueCounts),
    ) {
        match by_queue.get_mut(queue) {
            Some(c) => f(c),
            None => {
                let mut c = QueueCounts { queue: queue.to_owned(), ..QueueCounts::default() };
                f(&mut c);
                by_queue.insert(queue.to_owned(), c);
            }
        }
    }
    let mut by_queue = BTreeMap::new();
    let now_ms = now.as_millis();
    for entry in txn.open_table(PENDING)?.iter()? {
        let (k, v) = entry?;
        let due = k.value().0 <= now_ms;
        count(&mut by_queue, v.value().0, |c| {
            c.pending += 1;
            c.due += u64::from(due);
        });
    }
    let jobs = txn.open_table(JOBS)?;
    let waiting = txn.open_table(WAITING)?;
    for entry in waiting.iter()? {
        let id = entry?.0.value();
        let job = load(&jobs, id)?.ok_or_else(|| out_of_step("waiting_on_parents", id))?;
        count(&mut by_queue, &job.queue, |c| {
            c.pending += 1;
            c.waiting_on_parents += 1;
        });
    }
    for entry in txn.open_table(HELD)?.iter()? {
        let (k, v) = entry?;
        // A job both held and waiting is counted pending once, above.
        let also_waiting = waiting.get(k.value())?.is_some();
        count(&mut by_queue, v.value(), |c| {
            c.held += 1;
            c.pending += u64::from(!also_waiting);
        });
    }
    for entry in txn.open_table(RUNNING)?.iter()? {
        let id = entry?.0.value();
        let job = load(&jobs, id)?.ok_or_else(|| out_of_step("running", id))?;
        count(&mut by_queue, &job.queue, |c| c.running += 1);
    }
    Ok(by_queue.into_values().collect())
}

fn next_due_in(txn: &ReadTransaction) -> Result<Option<Timestamp>, Failure> {
    let pending = txn.open_table(PENDING)?;
    let running = txn.open_table(RUNNING)?;
    let mut earliest = pending.first()?.map(|(k, _)| k.value().0);
    for entry in running.iter()? {
        let until = entry?.1.value();
        earliest = Some(earliest.map_or(until, |e| e.min(until)));
    }
    Ok(earliest.map(Timestamp::from_millis))
}

fn pushed_many(
    t: &mut Tx<'_>,
    jobs: &[NewJob],
    now: Timestamp,
    policy: &Policy,
) -> Result<Vec<Pushed>, Failure> {
    // All or nothing: check every element before writing any.
    for (index, j) in jobs.iter().enumerate() {
        machine::validate(j).map_err(|e| in_batch(index, e.into()))?;
    }
    t.advance(now)?;
    jobs.iter()
        .enumerate()
        .map(|(i, j)| push_in(t, j, now, policy).map_err(|e| in_batch(i, e)))
        .collect()
}

/// A refusal of the batch's element `index`, named so ([`StoreError::InBatch`]),
/// so the caller can point at the line; damage and I/O stay as they are
/// (they are the queue's, not the element's).
fn in_batch(index: usize, e: Failure) -> Failure {
    match e {
        Failure::Store(error) => {
            Failure::Store(StoreError::InBatch { index, error: Box::new(error) })
        }
        other => other,
    }
}

/// The error of a batch of one, as its single operation answers it: the
/// element's own error, not [`StoreError::InBatch`].
fn alone(e: StoreError) -> StoreError {
    match e {
        StoreError::InBatch { index: 0, error } => *error,
        other => other,
    }
}

#[async_trait]
impl Store for RedbStore {
    async fn put_schedule(
        &self,
        new: &NewSchedule,
        now: Timestamp,
    ) -> Result<PutSchedule, StoreError> {
        let new = new.clone();
        self.blocking(move |i| i.write(|t| schedules::put_in(t, &new, now))).await
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        self.blocking(|i| i.read(|txn| schedules_in(&txn.open_table(SCHEDULES)?))).await
    }

    async fn change_schedule(
        &self,
        key: &str,
        change: &ScheduleChange,
        now: Timestamp,
    ) -> Result<Option<Schedule>, StoreError> {
        let (key, change) = (key.to_owned(), change.clone());
        self.blocking(move |i| i.write(|t| schedules::change_in(t, &key, &change, now))).await
    }

    async fn fire_schedules(&self, now: Timestamp) -> Result<Ticks, StoreError> {
        self.blocking(move |i| {
            let policy = &i.options.policy;
            i.write(|t| schedules::fire_in(t, now, |t, job| push_in(t, job, now, policy)))
        })
        .await
    }

    async fn restore_schedules(&self, schedules: Vec<Schedule>) -> Result<(), StoreError> {
        self.blocking(move |i| i.write(|t| schedules::restore_in(t, &schedules))).await
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
        self.transition(id, now, move |_, job, _| Ok(machine::hold(job, stamp.clone(), now)?)).await
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
        self.blocking(move |i| {
            i.write(|t| {
                let original = t.must(id)?;
                let new = machine::clone_of(&original, &edit)?;
                let pushed = push_in(t, &new, now, &i.options.policy)?;
                t.append(&machine::cloned_events(original.id, pushed.job.id, now))?;
                Ok(pushed.job)
            })
        })
        .await
    }

    async fn lanes(&self) -> Result<Lanes, StoreError> {
        self.blocking(|i| i.read(|txn| lanes_in(&txn.open_table(LANES)?))).await
    }

    async fn change_lane(
        &self,
        scope: &LaneScope,
        change: &LaneChange,
    ) -> Result<Lanes, StoreError> {
        let (scope, change) = (scope.clone(), change.clone());
        self.blocking(move |i| {
            i.write(|t| {
                let mut lanes = t.lanes()?;
                let settings = lanes.apply(&scope, &change)?;
                t.put_lane(&scope, &settings)?;
                Ok(lanes)
            })
        })
        .await
    }

    async fn queue_counts(&self, now: Timestamp) -> Result<Vec<QueueCounts>, StoreError> {
        self.blocking(move |i| i.read(|txn| queue_counts_in(txn, now))).await
    }

    async fn push(&self, job: NewJob, now: Timestamp) -> Result<Pushed, StoreError> {
        let mut many = self.push_many(vec![job], now).await.map_err(alone)?;
        many.pop().ok_or_else(|| StoreError::Backend("a push returned nothing".to_owned()))
    }

    async fn push_many(
        &self,
        jobs: Vec<NewJob>,
        now: Timestamp,
    ) -> Result<Vec<Pushed>, StoreError> {
        self.blocking(move |i| i.write(|t| pushed_many(t, &jobs, now, &i.options.policy))).await
    }

    async fn claim(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<Option<Claimed>, StoreError> {
        let request = request.clone();
        self.blocking(move |i| i.write(|t| claim_in(t, &request, now, &i.options.policy))).await
    }

    async fn heartbeat(
        &self,
        id: JobId,
        fence: &Fence,
        child_pgid: Option<i32>,
        now: Timestamp,
    ) -> Result<HeartbeatAck, StoreError> {
        let fence = fence.clone();
        self.blocking(move |i| {
            let policy = &i.options.policy;
            i.write(|t| {
                let job = t.must(id)?;
                let (tr, ack) = machine::heartbeat(&job, &fence, now, policy, child_pgid)?;
                write_plan(t, job, tr, now)?;
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
        failure: JobFailure,
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
        self.blocking(move |i| {
            let policy = &i.options.policy;
            i.write(|t| {
                let job = t.must(id)?;
                let tr = machine::settle(&job, &fence, &settlement, now, policy)?;
                let settled = write_plan(t, job, tr, now)?;
                if settled.state == JobState::Done {
                    slothqueue_core::failpoint::hit("mid_complete"); // written, not committed
                }
                let next = claim_in(t, &request, now, policy)?;
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
        self.transition(id, now, move |t, job, _| {
            let parents = machine::load_parents(t, job)?;
            Ok(machine::retry(job, &parents, now)?)
        })
        .await
    }

    async fn dependents(&self, id: JobId) -> Result<Vec<JobId>, StoreError> {
        self.blocking(move |i| {
            i.read(|txn| {
                // A parent purged before its children still lists them:
                // an edge lives as long as its child.
                dependents_in(&txn.open_table(EDGES)?, id)
            })
        })
        .await
    }

    async fn get(&self, id: JobId) -> Result<Job, StoreError> {
        self.blocking(move |i| {
            i.read(|txn| {
                load(&txn.open_table(JOBS)?, id)?.ok_or(Failure::Store(StoreError::NotFound(id)))
            })
        })
        .await
    }

    async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        self.blocking(move |i| {
            i.read(|txn| {
                if txn.open_table(JOBS)?.get(id)?.is_none() {
                    return Err(Failure::Store(StoreError::NotFound(id)));
                }
                let events = txn.open_table(EVENTS)?;
                let mut out = Vec::new();
                for entry in events.range((id, 0)..=(id, u32::MAX))? {
                    out.push(decode_event(entry?.1.value())?);
                }
                Ok(out)
            })
        })
        .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
        if filter.order == ListOrder::DueFirst && filter.cursor.is_some() {
            return Err(StoreError::InvalidInput(
                "a cursor cannot be used with the due-first order".to_owned(),
            ));
        }
        let filter = filter.clone();
        self.blocking(move |i| i.read(|txn| list_in(txn, &filter))).await
    }

    async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError> {
        self.blocking(move |i| i.read(|txn| stats_in(txn, now))).await
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.blocking(|i| i.read(next_due_in)).await
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
        self.blocking(move |i| {
            i.write(|t| {
                let mut before = Vec::new();
                for (id, attempt) in &attempts {
                    let Some(job) = t.job(*id)? else { continue };
                    if let Some(tr) = machine::reclaim_dead(&job, attempt, now) {
                        write_plan(t, job.clone(), tr, now)?;
                        before.push(job);
                    }
                }
                Ok(before)
            })
        })
        .await
    }

    async fn purge(&self, filter: &PurgeFilter) -> Result<Vec<JobId>, StoreError> {
        let filter = filter.clone();
        self.blocking(move |i| i.write(|t| purge_in(t, &filter))).await
    }

    async fn restore(&self, job: Job, events: Vec<Event>) -> Result<(), StoreError> {
        self.restore_many(vec![(job, events)]).await.map_err(alone)
    }

    async fn restore_many(&self, jobs: Vec<(Job, Vec<Event>)>) -> Result<(), StoreError> {
        self.blocking(move |i| {
            i.write(|t| {
                jobs.iter()
                    .enumerate()
                    .try_for_each(|(n, (j, ev))| restore_in(t, j, ev).map_err(|e| in_batch(n, e)))
            })
        })
        .await
    }

    async fn put_runner(&self, record: &RunnerRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(record)
            .map_err(|e| StoreError::Backend(format!("cannot encode a runner record: {e}")))?;
        let owner = record.owner.id.clone();
        self.blocking(move |i| {
            i.write(|t| {
                t.runners.insert(owner.as_str(), bytes.as_slice())?;
                Ok(())
            })
        })
        .await
    }

    async fn remove_runner(&self, owner_id: &str) -> Result<(), StoreError> {
        let owner = owner_id.to_owned();
        self.blocking(move |i| {
            i.write(|t| {
                t.runners.remove(owner.as_str())?;
                Ok(())
            })
        })
        .await
    }

    async fn runners(&self) -> Result<Vec<RunnerRecord>, StoreError> {
        self.blocking(|i| {
            i.read(|txn| {
                let table = txn.open_table(RUNNERS)?;
                let mut out = Vec::new();
                for entry in table.iter()? {
                    let (k, v) = entry?;
                    let record: RunnerRecord = serde_json::from_slice(v.value()).map_err(|e| {
                        Failure::Damaged(format!("runner `{}` does not decode: {e}", k.value()))
                    })?;
                    out.push(record);
                }
                Ok(out)
            })
        })
        .await
    }

    /// redb writes every commit into the file itself.
    fn watched_files(&self) -> Vec<std::path::PathBuf> {
        vec![self.inner.path.clone()]
    }
}

impl RedbStore {
    /// One user- or owner-side transition on one job: load, decide (with
    /// the transaction at hand, to read the job's parents), write it and
    /// what it causes to the jobs waiting on it.
    async fn transition<F>(&self, id: JobId, now: Timestamp, decide: F) -> Result<Job, StoreError>
    where
        F: Fn(&mut Tx<'_>, &Job, &Policy) -> Result<Transition, Failure> + Send + 'static,
    {
        self.blocking(move |i| {
            let policy = &i.options.policy;
            i.write(|t| {
                let job = t.must(id)?;
                let tr = decide(t, &job, policy)?;
                let job = write_plan(t, job, tr, now)?;
                if job.state == JobState::Done {
                    slothqueue_core::failpoint::hit("mid_complete"); // written, not committed
                }
                Ok(job)
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slothqueue_core::{ClaimFilter, ClockOnly, Owner};

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
    }

    fn open(dir: &tempfile::TempDir, options: RedbOptions) -> RedbStore {
        RedbStore::open(&dir.path().join("q.redb"), options).unwrap()
    }

    /// A writable handle seals the file as it leaves it: after opening,
    /// after each commit while another handle (a runner) keeps it open,
    /// and after closing; a write from outside breaks the seal, and the
    /// next open (which checks the whole file then) seals it again.
    #[tokio::test]
    async fn every_writer_leaves_the_file_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.redb");
        let runner = open(&dir, RedbOptions::default());
        assert!(seal::holds(&path), "sealed as the open left it");
        let add = open(&dir, RedbOptions::default());
        add.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        assert!(seal::holds(&path), "sealed after a commit");
        drop(add);
        assert!(seal::holds(&path), "sealed after the close");
        runner.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        assert!(seal::holds(&path), "sealed after the runner's commit");
        drop(runner);
        assert!(seal::holds(&path));

        // A write from outside gives the file another modification time.
        let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(old).unwrap();
        assert!(!seal::holds(&path), "touched from outside");
        let again = open(&dir, RedbOptions::default());
        assert!(seal::holds(&path), "checked in full, then sealed");
        assert_eq!(again.stats(t(1)).await.unwrap().pending, 2);
    }

    /// An edit rewrites every index entry keyed by what it changed (the
    /// ready index by queue, priority and due time, the due-time index, the
    /// held index by queue) from the job as it was: the integrity check,
    /// which compares each index with the rows, finds them in step after
    /// edits of due jobs (already in the ready index), of jobs not yet due
    /// and of a held job, and after a clone.
    #[tokio::test]
    async fn an_edit_moves_the_job_in_every_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, RedbOptions::default());
        let due = store.push(NewJob::shell("true", "/"), t(0)).await.unwrap().job;
        let later = NewJob::shell("true", "/").not_before(t(100));
        let later = store.push(later, t(0)).await.unwrap().job;
        let held = store.push(NewJob::shell("true", "/"), t(0)).await.unwrap().job;
        store.hold(held.id, Stamp::new("ana", t(0)), t(0)).await.unwrap();
        // A claim of nothing in queue `x` moves the watermark past `due`.
        let none = ClaimFilter { queues: vec!["x".to_owned()], kinds: None };
        let request = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly)).filter(none);
        assert!(store.claim(&request, t(1)).await.unwrap().is_none());

        let moved = JobEdit {
            queue: Some("x".into()),
            priority: Some(7),
            not_before: Some(t(50)),
            ..JobEdit::default()
        };
        store.edit(due.id, &moved, t(2)).await.unwrap();
        store.check_integrity().unwrap();
        let forward = JobEdit { not_before: Some(t(0)), priority: Some(-3), ..JobEdit::default() };
        store.edit(later.id, &forward, t(2)).await.unwrap();
        store.check_integrity().unwrap();
        store
            .edit(held.id, &JobEdit { queue: Some("y".into()), ..JobEdit::default() }, t(2))
            .await
            .unwrap();
        store.check_integrity().unwrap();
        let clone = store.clone_job(due.id, &JobEdit::default(), t(3)).await.unwrap();
        store.check_integrity().unwrap();

        // The clone (priority 7, due now), then the job brought forward;
        // the one put off and the held one are not taken.
        let any = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly));
        let mut order = Vec::new();
        while let Some(c) = store.claim(&any, t(3)).await.unwrap() {
            order.push(c.job.id);
        }
        assert_eq!(order, [clone.id, later.id]);
        store.check_integrity().unwrap();
    }

    /// The settle and the claim are one transaction: when the claim half
    /// fails (here on a job whose stored row does not decode), the settle
    /// is rolled back with it and the finished job is still running under
    /// its lease.
    #[tokio::test]
    async fn a_failing_claim_half_rolls_the_settle_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, RedbOptions::default());
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

    /// Overwrites job `id`'s stored row with bytes that are not JSON, as a
    /// tool outside slothqueue might.
    fn garble(store: &RedbStore, id: JobId) {
        store
            .inner
            .with_db(|h| {
                let Handle::Writable(db) = h else { panic!("a writable handle") };
                let txn = db.begin_write()?;
                txn.open_table(JOBS)?.insert(id, b"not json".as_slice())?;
                txn.commit()?;
                Ok(())
            })
            .unwrap();
    }
}
