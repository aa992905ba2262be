//! **The store operations, written once.** Every [`crate::Store`] method
//! that changes the queue is the same sequence on every backend — read the
//! rows, ask [`crate::machine`] what the transition is, write it with what
//! it causes to the jobs waiting on it — so it is written here, once,
//! generic over [`Tx`]: one open write transaction of a backend, seen
//! through a handful of row verbs.
//!
//! **What a backend writes.** An implementation of [`Tx`] over its own
//! transaction: reads (a job by id, the holder of a key, a job's
//! dependents, the running jobs, due jobs in claim order after a cursor,
//! the jobs in some states, the lanes, the schedules, the next id) and
//! writes (insert a new job with its first events, update a job on
//! condition that its row is still the one planned from, append events,
//! delete jobs, put a lane, put or delete a schedule). Each verb's doc is
//! its contract; none decides anything.
//!
//! **How it plugs in.** Each `Store` method opens the backend's write
//! transaction and runs the operation inside it, e.g.
//! `self.write(move |tx, policy| ops::push_many(tx, &jobs, now, policy))`;
//! [`crate::store_ops!`] writes those methods for the operations a backend
//! lists, given its `write`. The reads that are not operations (`list`,
//! `stats`, `events`, the runner records) stay the backend's own. A backend may run one operation
//! in a transaction mode of its own (PostgreSQL runs `claim` and an
//! owner's settle under a shared lock with row locks, and may rerun it
//! exclusively): the operation does not care how the transaction was
//! begun, only that every verb answers from inside it. A backend's error
//! type says which of its errors are refusals of the request ([`TxError`]),
//! so a batch names the element that was refused.
//!
//! What lives here once: the batch error mapping ([`in_batch`], [`alone`]),
//! the push path (parents resolved, the key's holder displaced — refused
//! while jobs wait on a pending holder — the parents re-read after that,
//! the job created), the claim's candidate walk ([`claim`]), purge
//! eligibility ([`crate::PurgeFilter::admits`] and
//! [`crate::machine::plan_purge`]), the restore conflicts and the
//! dependency counts an import recomputes, and the firing of schedules.

use std::collections::BTreeSet;

use crate::job::{Event, Job, JobId, JobState};
use crate::lane::{LaneScope, LaneSettings, Lanes};
use crate::machine::{self, Graph, Transition, TransitionError};
use crate::schedule::Schedule;
use crate::store::StoreError;
use crate::time::Timestamp;

mod claim;
mod glue;
mod jobs;
mod schedules;

/// For [`crate::store_ops!`]: the attribute its `impl Store` block needs,
/// reachable from any backend crate.
#[doc(hidden)]
pub use async_trait::async_trait as __async_trait;

pub use claim::{claim, settle_and_claim};
pub use jobs::{
    cancel, clone_job, complete, edit, fail, heartbeat, hold, note_attempt, purge, push_many,
    push_stream, reclaim_dead, release, release_hold, restore_many, retry, settle,
};
pub use schedules::{
    change_lane, change_schedule, fire_schedules, put_schedule, restore_schedules,
};

/// One open write transaction of a backend, as the operations see it: row
/// verbs only. Every read answers from inside the transaction, its own
/// earlier writes included (a batch sees the jobs pushed before in it).
pub trait Tx {
    /// The backend's error; a refusal in the core's terms becomes one.
    type Error: TxError;

    /// Brings what the store keeps about due times up to `now` before a
    /// push or a claim reads or writes it: redb moves the jobs that became
    /// due into its ready index (its watermark rule), so a job pushed due
    /// now goes straight there. Nothing for a store that keeps no such
    /// thing.
    fn catch_up(&mut self, now: Timestamp) -> Result<(), Self::Error> {
        let _ = now;
        Ok(())
    }

    /// The job with this id, if any.
    fn job(&mut self, id: JobId) -> Result<Option<Job>, Self::Error>;

    /// The job holding this idempotency key, if any (at most one does).
    fn key_holder(&mut self, key: &str) -> Result<Option<Job>, Self::Error>;

    /// The ids of the jobs that name `id` as a parent, lowest first. An
    /// edge lives as long as its child: a deleted parent still has them.
    fn dependents(&mut self, id: JobId) -> Result<Vec<JobId>, Self::Error>;

    /// Every running job, in any order.
    fn running(&mut self) -> Result<Vec<Job>, Self::Error>;

    /// Up to `limit` pending jobs strictly after `after` in claim order
    /// (highest priority, earliest `not_before`, lowest id), in that
    /// order: every due one (not held, waiting on no parent, `not_before
    /// <= scope.now`) that `scope` admits must be among them, up to the
    /// limit. The store pushes down what its indexes serve — it may leave
    /// out any job `scope` does not admit, or that is not due — and may
    /// return such jobs too: [`crate::machine::plan_claim_in_order`]
    /// applies every predicate. Fewer than `limit` means there are no more.
    /// A claim looks at most [`crate::machine::CLAIM_SCAN_CAP`] jobs, so a
    /// store should leave out at least the jobs that are not due, as a
    /// claim index does: jobs passed over should be few (refusals, a lane
    /// it could not skip).
    fn due(
        &mut self,
        scope: &DueScope<'_>,
        after: Option<&ClaimCursor>,
        limit: usize,
    ) -> Result<Vec<Job>, Self::Error>;

    /// Every job in one of `states`, lowest id first (what a purge looks
    /// at; it applies its own rule to them).
    fn jobs_in(&mut self, states: &[JobState]) -> Result<Vec<Job>, Self::Error>;

    /// Every lane's settings as stored; a stored row that does not read
    /// back is damage (see [`Lanes::insert_stored`]).
    fn lanes(&mut self) -> Result<Lanes, Self::Error>;

    /// Stores `scope`'s settings; the defaults are stored by forgetting
    /// the scope.
    fn put_lane(&mut self, scope: &LaneScope, settings: &LaneSettings) -> Result<(), Self::Error>;

    /// The schedule stored under `key`, if any.
    fn schedule(&mut self, key: &str) -> Result<Option<Schedule>, Self::Error>;

    /// Every schedule, in key order.
    fn schedules(&mut self) -> Result<Vec<Schedule>, Self::Error>;

    /// Stores `s` under its key, replacing what the key held.
    fn put_schedule(&mut self, s: &Schedule) -> Result<(), Self::Error>;

    /// Forgets the schedule `key` (its jobs stay).
    fn delete_schedule(&mut self, key: &str) -> Result<(), Self::Error>;

    /// The id the next new job gets: above every id the queue ever held,
    /// deleted and restored ones included, and above those inserted so far
    /// in this transaction. An operation reads it once and counts up from
    /// it for the jobs it inserts.
    fn next_id(&mut self) -> Result<JobId, Self::Error>;

    /// Inserts a job whose id no job has (new, or restored from an
    /// export), with its trail so far (`events`, oldest first) and an edge
    /// from each of its parents (`Job::after`). Later [`Tx::next_id`]s are
    /// above its id.
    fn insert(&mut self, job: &Job, events: &[Event]) -> Result<(), Self::Error>;

    /// Writes `after` over the job `before`, on condition that the stored
    /// row is still `before` (at least its state, lease owner and attempt),
    /// and appends `after.events`. A row that changed is the store's
    /// failure, not a refusal: it cannot happen inside the transaction
    /// unless something else edits the store.
    fn update(&mut self, before: &Job, after: &Transition) -> Result<(), Self::Error>;

    /// Appends events to the trails of jobs that exist, each after its
    /// job's last.
    fn append(&mut self, events: &[Event]) -> Result<(), Self::Error>;

    /// Deletes these jobs with their trails and their edges to their
    /// parents (edges from them to children stay with the children). Their
    /// ids never come back: [`Tx::next_id`] stays above them.
    fn delete(&mut self, jobs: &[Job]) -> Result<(), Self::Error>;
}

/// A backend's error as the operations need to see it.
pub trait TxError: From<StoreError> + From<TransitionError> {
    /// This error as a refusal of the request (a [`StoreError`] in the
    /// core's terms: not found, invalid input, lease lost, ...), or back as
    /// it was when it is the store's own failure (I/O, a damaged row, a
    /// busy lock), which a batch does not pin on one element.
    fn refusal(self) -> Result<StoreError, Self>;
}

/// The store-level errors a batch pins on its element are the core's
/// refusals; the others are the store's.
impl TxError for StoreError {
    fn refusal(self) -> Result<StoreError, Self> {
        match self {
            StoreError::NotFound(_)
            | StoreError::NoSchedule(_)
            | StoreError::LeaseLost { .. }
            | StoreError::InvalidTransition { .. }
            | StoreError::InvalidInput(_)
            | StoreError::InBatch { .. } => Ok(self),
            other => Err(other),
        }
    }
}

/// What a claim may push down into [`Tx::due`]: what its indexes can
/// serve of the filter and the lanes. Built by [`claim`] from the request
/// and the lanes read in the same transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueScope<'a> {
    /// Due means `not_before <= now`.
    pub now: Timestamp,
    /// Only these queues, in name order, each with an open lane; `None`
    /// for every queue but those in `closed`.
    pub queues: Option<Vec<&'a str>>,
    /// The queues whose lane is paused or full.
    pub closed: BTreeSet<&'a str>,
    /// Only these kinds (never empty); `None` for every kind.
    pub kinds: Option<&'a [String]>,
}

/// Where a walk in claim order stopped: [`Tx::due`] returns the jobs
/// strictly after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimCursor {
    /// The last job's priority.
    pub priority: i32,
    /// The last job's `not_before`.
    pub not_before: Timestamp,
    /// The last job's id.
    pub id: JobId,
}

impl ClaimCursor {
    /// The cursor just after `job`.
    pub fn after(job: &Job) -> ClaimCursor {
        ClaimCursor { priority: job.priority, not_before: job.not_before, id: job.id }
    }

    /// Whether `job` comes strictly after the cursor in claim order.
    pub fn precedes(&self, job: &Job) -> bool {
        (std::cmp::Reverse(self.priority), self.not_before, self.id) < job.claim_order()
    }
}

/// What the dependency rule reads is what a transaction reads.
impl<T: Tx> Graph for T {
    type Error = T::Error;

    fn job(&mut self, id: JobId) -> Result<Option<Job>, T::Error> {
        Tx::job(self, id)
    }

    fn key_holder(&mut self, key: &str) -> Result<Option<Job>, T::Error> {
        Tx::key_holder(self, key)
    }

    fn dependents(&mut self, id: JobId) -> Result<Vec<JobId>, T::Error> {
        Tx::dependents(self, id)
    }
}

/// The job `id`; [`StoreError::NotFound`] when there is none.
pub fn get<T: Tx>(tx: &mut T, id: JobId) -> Result<Job, T::Error> {
    Tx::job(tx, id)?.ok_or_else(|| StoreError::NotFound(id).into())
}

/// **The one write path.** Writes the transition `before → t` of one job
/// and every write it causes to the jobs waiting on it (transitively), as
/// [`machine::plan_with_dependents`] plans them from this transaction's
/// view, in the plan's order, each conditional on the row it was planned
/// from ([`Tx::update`]). Returns the job as written. A transition that
/// changes nothing for dependents (a heartbeat, a claim, a failure that
/// will be retried) reads nothing and is the one write.
pub fn write<T: Tx>(
    tx: &mut T,
    before: Job,
    t: Transition,
    now: Timestamp,
) -> Result<Job, T::Error> {
    let id = before.id;
    let plan = machine::plan_with_dependents(tx, before, t, now)?;
    let mut own = None;
    for w in plan {
        tx.update(&w.before, &w.after)?;
        if w.before.id == id {
            own = Some(w.after.job);
        }
    }
    own.ok_or_else(|| {
        StoreError::Backend(format!("the plan for job #{id} left the job out")).into()
    })
}

/// Element `index`'s refusal as the batch's ([`StoreError::InBatch`]), so
/// the caller can name the line. Only a refusal in the core's terms is
/// wrapped ([`TxError::refusal`]): the store's own failure is the batch's,
/// not the element's (a full disk stays [`StoreError::DiskFull`]).
pub fn in_batch<E: TxError>(index: usize) -> impl FnOnce(E) -> E {
    move |e| match e.refusal() {
        Ok(error) => StoreError::InBatch { index, error: Box::new(error) }.into(),
        Err(e) => e,
    }
}

/// The error of a batch of one, as the one-job call (`push`, `restore`)
/// returns it: plain.
pub fn alone(e: StoreError) -> StoreError {
    match e {
        StoreError::InBatch { error, .. } => *error,
        other => other,
    }
}
