//! **API Boundary.** The `Store` trait every backend implements, and the
//! one error type they all answer with.
//!
//! Every method is one atomic transaction. Owner-side writes (`heartbeat`,
//! `complete`, `fail`, `release`) carry a [`Fence`] and change nothing unless
//! the job is still running under exactly that owner and attempt. The
//! conformance suite in `slothqueue-conformance` is the executable form of these
//! contracts; a backend is correct when it passes all of it.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::job::{Event, Fence, Job, JobId, JobState, NewJob};
use crate::lane::{LaneChange, LaneScope, Lanes, QueueCounts, QueuesReport, Stamp};
use crate::machine::{
    AttemptNote, ClaimRequest, Claimed, Completion, Failure, HeartbeatAck, JobEdit, Settlement,
    TransitionError,
};
use crate::schedule::{NewSchedule, Schedule, ScheduleChange, Ticks};
use crate::time::Timestamp;

pub use crate::runners::{RefusedKind, RunnerActivity, RunnerRecord, WaitCause};

/// The result of a push.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pushed {
    /// The job now holding the request's idempotency key (or the new job).
    pub job: Job,
    /// `false` when an identical job with the same key already existed and
    /// nothing was written.
    pub created: bool,
    /// The pending job this push superseded, if any.
    pub superseded: Option<JobId>,
}

/// What [`Store::push_stream`] did with one element: the job's id and
/// what a caller says of it, not the job (a stream of 200,000 holds
/// 200,000 of these, a few bytes each, where whole jobs, environments
/// and all, would take gigabytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushedId {
    /// The job now holding the element's idempotency key (or the new job).
    pub id: JobId,
    /// `false` when an identical job with the same key already existed.
    pub created: bool,
    /// The pending job this push superseded, if any.
    pub superseded: Option<JobId>,
    /// The job's state right after the push (a new job whose parent had
    /// already failed is cancelled at once).
    pub state: JobState,
}

impl From<&Pushed> for PushedId {
    fn from(p: &Pushed) -> Self {
        PushedId { id: p.job.id, created: p.created, superseded: p.superseded, state: p.job.state }
    }
}

/// The new jobs of a [`Store::push_stream`], made one at a time as the
/// push takes them, so that a long batch never sits in memory whole (a
/// `NewJob` carries its recorded environment: kilobytes each).
///
/// A store may run its transaction again (a connection lost before the
/// commit, a latched I/O error), so [`JobSource::jobs`] may be called more
/// than once, and must yield the same jobs each time, from the first.
pub trait JobSource: Send + Sync {
    /// The jobs, in order. An `Err` refuses the whole push: the store
    /// answers [`StoreError::InBatch`] with its place, nothing written.
    fn jobs(&self) -> Box<dyn Iterator<Item = Result<NewJob, StoreError>> + '_>;
}

/// What [`Store::put_schedule`] did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutSchedule {
    /// The schedule as stored.
    pub schedule: Schedule,
    /// `false` when the same definition was stored already.
    pub created: bool,
}

/// What [`Store::settle_and_claim`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettledAndClaimed {
    /// The finished job, as `complete` or `fail` would have returned it.
    pub settled: Job,
    /// The next job, as `claim` would have returned it right after.
    pub next: Option<Claimed>,
}

/// The order `list` returns jobs in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListOrder {
    /// Newest first (highest id first). `cursor` returns ids below it.
    #[default]
    Newest,
    /// Oldest first. `cursor` returns ids above it.
    Oldest,
    /// The order claims would take them: priority, `not_before`, id.
    /// `cursor` is not allowed with this order.
    DueFirst,
}

/// Which jobs `list` returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this state.
    pub state: Option<JobState>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// At most this many.
    pub limit: Option<usize>,
    /// Resume after this id (see [`ListOrder`]).
    pub cursor: Option<JobId>,
    /// The order.
    pub order: ListOrder,
    /// Of the pending jobs, only those a face words this way
    /// ([`PendingShown`]); implies pending, and refuses another `state`.
    pub shown: Option<PendingShown>,
    /// Only jobs whose kind, idempotency key or payload JSON text (a shell
    /// job's command is in it) contains this, case-sensitive.
    pub search: Option<String>,
    /// Only jobs that finished at or after this time (`finished_at`):
    /// what a history of the last hour reads.
    pub finished_since: Option<Timestamp>,
}

/// The two kinds of pending job a user sees apart, as
/// `slothqueue_view::words::state_word` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PendingShown {
    /// Pending and held by a user (waiting on parents or not).
    Held,
    /// Pending, not held, waiting on parents not done yet.
    Waiting,
}

impl ListFilter {
    /// Refuses a filter no store can answer: a cursor with the due-first
    /// order, whose position an id alone cannot mark.
    pub fn check(&self) -> Result<(), StoreError> {
        if self.order == ListOrder::DueFirst && self.cursor.is_some() {
            return Err(StoreError::InvalidInput(
                "a cursor cannot be used with the due-first order".to_owned(),
            ));
        }
        if self.shown.is_some() && self.state.is_some_and(|s| s != JobState::Pending) {
            return Err(StoreError::InvalidInput(
                "held and waiting jobs are pending: no other state can be asked with them"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// **List eligibility**, every condition but the order, the cursor and
    /// the limit: what a store's query answers (the SQL stores say it in
    /// SQL, and a conformance scenario holds them to this).
    pub fn admits(&self, job: &Job) -> bool {
        self.state.is_none_or(|s| job.state == s)
            && self.queue.as_ref().is_none_or(|q| &job.queue == q)
            && self.kind.as_ref().is_none_or(|k| &job.kind == k)
            && self.shown.is_none_or(|w| match w {
                PendingShown::Held => job.is_held(),
                PendingShown::Waiting => !job.is_held() && job.is_waiting_on_parents(),
            })
            && self.finished_since.is_none_or(|t| job.finished_at.is_some_and(|f| f >= t))
            && self.search.as_deref().is_none_or(|text| search_hits(job, text))
    }
}

/// Whether `text` is in the job's kind, key or payload JSON text (the
/// compact JSON every store writes: `{"command":"echo hi",…}`).
pub fn search_hits(job: &Job, text: &str) -> bool {
    job.kind.contains(text)
        || job.idempotency_key.as_deref().is_some_and(|k| k.contains(text))
        || serde_json::to_string(&job.payload).is_ok_and(|p| p.contains(text))
}

/// Counts per state and what is due.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Jobs waiting, due or not, and those waiting on parents.
    pub pending: u64,
    /// Of `pending`, the jobs waiting on parents not yet done.
    #[serde(default)]
    pub waiting_on_parents: u64,
    /// Of `pending`, the jobs a user holds (`hold`), waiting on parents or
    /// not.
    #[serde(default)]
    pub held: u64,
    /// Jobs under a lease.
    pub running: u64,
    /// Jobs completed.
    pub done: u64,
    /// Jobs out of attempts.
    pub failed: u64,
    /// Jobs cancelled or superseded.
    pub cancelled: u64,
    /// Pending jobs with `not_before <= now`, no parent left to wait on,
    /// and not held. (A paused or full lane does not change this: the job
    /// is due, its lane holds it.)
    pub due_now: u64,
    /// The earliest `not_before` among pending jobs not yet due (jobs
    /// waiting on parents or held left out: their time is not what they
    /// wait for).
    pub next_due: Option<Timestamp>,
}

/// What `purge` deletes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PurgeFilter {
    /// Also delete pending jobs (never running ones).
    pub include_pending: bool,
    /// Only jobs that finished (or, for pending, were created) before this.
    pub older_than: Option<Timestamp>,
}

impl PurgeFilter {
    /// The states whose jobs this purge may delete: the terminal ones, and
    /// pending when asked (never running).
    pub fn states(&self) -> &'static [JobState] {
        if self.include_pending {
            &[JobState::Pending, JobState::Done, JobState::Failed, JobState::Cancelled]
        } else {
            &[JobState::Done, JobState::Failed, JobState::Cancelled]
        }
    }

    /// **Purge eligibility**, the one rule: whether `job` is one this
    /// filter names (of [`PurgeFilter::states`], and old enough: a pending
    /// job by its creation, any other by its end, or its creation when it
    /// has none). A pending job that a job left behind still waits on is
    /// kept by [`crate::machine::plan_purge`], not here.
    pub fn admits(&self, job: &Job) -> bool {
        let age = match job.state {
            JobState::Running => return false,
            JobState::Pending if !self.include_pending => return false,
            JobState::Pending => job.created_at,
            _ => job.finished_at.unwrap_or(job.created_at),
        };
        self.older_than.is_none_or(|o| age < o)
    }
}

/// Every way a store operation can fail. Matching on the variant, not the
/// message, is the contract; backend errors are mapped onto these at the
/// boundary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No job with this id.
    #[error("no job #{0}")]
    NotFound(JobId),
    /// No schedule with this key.
    #[error("no schedule `{0}`")]
    NoSchedule(String),
    /// The caller's fence no longer matches: the job was reclaimed, finished
    /// or released. Nothing was changed.
    #[error("lease lost: job #{id} is no longer held by this owner")]
    LeaseLost {
        /// The job.
        id: JobId,
    },
    /// The job's state does not allow the operation.
    #[error("cannot {action} job #{id}: it is {state}")]
    InvalidTransition {
        /// The job.
        id: JobId,
        /// Its state.
        state: JobState,
        /// The operation.
        action: &'static str,
    },
    /// The request itself is malformed; nothing was written.
    #[error("{0}")]
    InvalidInput(String),
    /// One job of a batch ([`Store::push_many`], [`Store::restore_many`])
    /// was refused, so nothing of the batch was written.
    #[error("job {} of the batch: {error}", index + 1)]
    InBatch {
        /// Its place in the batch, from 0.
        index: usize,
        /// Why it was refused.
        error: Box<StoreError>,
    },
    /// Another process held the queue's write lock for longer than the wait.
    #[error("queue file is busy: another process held it for {waited:?}; try again")]
    Busy {
        /// How long this call waited.
        waited: Duration,
    },
    /// The file is not a slothqueue queue, or is damaged.
    #[error(
        "{path}: not a slothqueue queue or damaged ({detail}); restore it from a backup or point --db elsewhere"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// The file was written by a newer slothqueue.
    #[error(
        "{path}: created by a newer slothqueue (schema {found} > {supported}); upgrade slothqueue to open it"
    )]
    SchemaTooNew {
        /// The file.
        path: PathBuf,
        /// The file's schema version.
        found: u32,
        /// The newest this build understands.
        supported: u32,
    },
    /// The disk is full.
    #[error("no space left on device ({0})")]
    DiskFull(PathBuf),
    /// Another I/O failure.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The database server could not be reached, or the connection to it
    /// was lost (a server backend: PostgreSQL). The message names the
    /// server and the cause.
    #[error("cannot reach the database server: {0}")]
    Unreachable(String),
    /// The database server only reads: a PostgreSQL hot standby (a
    /// replica in recovery), found at open (`pg_is_in_recovery()`) or by a
    /// write it refused. Not temporary for the caller: a writer pointed at
    /// a standby must be pointed at the primary, not retried (a runner
    /// would restart forever). The message names the server.
    #[error("{0}: this server is a read-only standby; point --db at the primary")]
    ReadOnlyStandby(String),
    /// A backend failure with no better mapping.
    #[error("storage error: {0}")]
    Backend(String),
}

impl StoreError {
    /// Whether trying the same call again later may succeed.
    pub fn is_temporary(&self) -> bool {
        matches!(
            self,
            StoreError::Busy { .. } | StoreError::DiskFull(_) | StoreError::Unreachable(_)
        )
    }
}

impl From<TransitionError> for StoreError {
    fn from(e: TransitionError) -> Self {
        match e {
            TransitionError::LeaseLost { id } => StoreError::LeaseLost { id },
            TransitionError::InvalidTransition { id, state, action } => {
                StoreError::InvalidTransition { id, state, action }
            }
            TransitionError::InvalidJob(m) | TransitionError::InvalidSchedule(m) => {
                StoreError::InvalidInput(m)
            }
        }
    }
}

/// A durable job queue. Object-safe: the runner and the CLI hold an
/// `Arc<dyn Store>` and never learn which backend they got.
///
/// Time (`now`) and the judge of owner liveness (inside a
/// [`ClaimRequest`]) are arguments, never read inside, so every contract
/// can be tested with a manual clock. What a claim takes is decided by
/// [`crate::machine::plan_claim_in_order`], never by the backend. A
/// backend implements the writes by running the operations of
/// `slothqueue_core::ops` inside its own transaction (see that module).
#[async_trait]
pub trait Store: Send + Sync {
    /// Adds a job (see [`crate::machine::plan_push`] for the idempotency
    /// rule). Ids increase and are never reused, even after a purge.
    async fn push(&self, job: NewJob, now: Timestamp) -> Result<Pushed, StoreError>;

    /// Adds many jobs in one transaction: all or none. A job may name as
    /// parents (`after`) jobs of the queue or jobs earlier in the batch,
    /// by id or key. A refused element rejects the whole batch with
    /// [`StoreError::InBatch`] naming it.
    ///
    /// A job with parents waits until they are all `done` and is not seen
    /// by claims meanwhile; when one fails or is cancelled, its dependents
    /// are cancelled in the same transaction, and a retry of it brings them
    /// back ([`crate::machine::plan_with_dependents`]). An unknown parent
    /// is [`StoreError::InvalidInput`].
    async fn push_many(&self, jobs: Vec<NewJob>, now: Timestamp)
    -> Result<Vec<Pushed>, StoreError>;

    /// [`Store::push_many`] of the jobs `source` makes, taken one at a time
    /// inside the one transaction: all or none, a job naming as parents
    /// jobs earlier in the stream as in a batch, a refused element (or an
    /// `Err` of the source) rejecting the whole push with
    /// [`StoreError::InBatch`] naming it. Memory stays bounded whatever
    /// the length: what is returned is one [`PushedId`] per element, and
    /// a backend that holds new rows to write them together writes them
    /// in bounded batches.
    ///
    /// The default collects the stream and calls `push_many`, which is
    /// atomic but holds it whole; it serves wrappers and models, and a
    /// backend overrides it with [`crate::ops::push_stream`].
    async fn push_stream(
        &self,
        source: std::sync::Arc<dyn JobSource>,
        now: Timestamp,
    ) -> Result<Vec<PushedId>, StoreError> {
        let jobs = source
            .jobs()
            .enumerate()
            .map(|(index, job)| job.map_err(|e| StoreError::InBatch { index, error: Box::new(e) }))
            .collect::<Result<Vec<_>, _>>()?;
        let pushed = self.push_many(jobs, now).await?;
        Ok(pushed.iter().map(PushedId::from).collect())
    }

    /// Hands the best available job to `request.owner`, as
    /// [`crate::machine::plan_claim_in_order`] decides from the lanes'
    /// settings, the running jobs and the due pending jobs in claim order:
    /// the first the filter admits, whose lane lets it start and which the
    /// request does not refuse (highest priority, earliest `not_before`,
    /// lowest id); abandoned jobs with no attempts left (or a cancel
    /// requested) are ended on the way. The judge is asked, and the lanes
    /// read and counted ([`crate::machine::LaneCheck`]), inside the
    /// transaction, so a lane's limit holds across every claimer. Among
    /// racing claimers each job goes to exactly one. `None` when nothing
    /// is due, or nothing due may start.
    async fn claim(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<Option<Claimed>, StoreError>;

    /// Extends the lease held under `fence` (also after expiry, if nobody
    /// reclaimed the job); records the child's process group when given.
    /// `LeaseLost` for anyone else (a backend may answer `NotFound` when
    /// the job was purged), with nothing changed.
    async fn heartbeat(
        &self,
        id: JobId,
        fence: &Fence,
        child_pgid: Option<i32>,
        now: Timestamp,
    ) -> Result<HeartbeatAck, StoreError>;

    /// Marks the job done. `LeaseLost` unless `fence` still holds it.
    async fn complete(
        &self,
        id: JobId,
        fence: &Fence,
        done: Completion,
        now: Timestamp,
    ) -> Result<Job, StoreError>;

    /// Records a failed attempt: retry later, `failed`, or `cancelled` if a
    /// cancel was requested. `LeaseLost` unless `fence` still holds it.
    async fn fail(
        &self,
        id: JobId,
        fence: &Fence,
        failure: Failure,
        now: Timestamp,
    ) -> Result<Job, StoreError>;

    /// Settles the attempt held under `fence` (as `complete` or `fail`
    /// would) and claims the next job for `next.owner` (as `claim` would
    /// right after) in one transaction: a runner going from one job to the next
    /// pays one durable commit instead of two. If the settle is refused
    /// (`LeaseLost`, `NotFound`, ...) nothing is written and nothing is
    /// claimed. The trail gains exactly the events the two calls would
    /// write.
    ///
    /// The default makes the two calls one after the other, which is not
    /// atomic: a crash between them leaves the job settled and nothing
    /// claimed, which the two calls allow anyway. It serves wrappers and
    /// models; a backend overrides it with one transaction.
    async fn settle_and_claim(
        &self,
        id: JobId,
        fence: &Fence,
        settlement: Settlement,
        next: &ClaimRequest,
        now: Timestamp,
    ) -> Result<SettledAndClaimed, StoreError> {
        let settled = match settlement {
            Settlement::Complete(done) => self.complete(id, fence, done, now).await?,
            Settlement::Fail(failure) => self.fail(id, fence, failure, now).await?,
        };
        let next = self.claim(next, now).await?;
        Ok(SettledAndClaimed { settled, next })
    }

    /// Returns the job to pending without charging the attempt.
    async fn release(&self, id: JobId, fence: &Fence, now: Timestamp) -> Result<Job, StoreError>;

    /// Notes a suspend or a resume on the attempt held under `fence`
    /// ([`crate::machine::note_attempt`]): one event, nothing else.
    /// `LeaseLost` unless `fence` still holds it.
    async fn note_attempt(
        &self,
        id: JobId,
        fence: &Fence,
        note: &AttemptNote,
        now: Timestamp,
    ) -> Result<Job, StoreError>;

    /// Holds a pending job ([`crate::machine::hold`]): it stays pending
    /// but no claim takes it until [`Store::release_hold`]. A held job is
    /// left as it is; `InvalidTransition` for any other state.
    async fn hold(&self, id: JobId, stamp: Stamp, now: Timestamp) -> Result<Job, StoreError>;

    /// Releases a held job ([`crate::machine::release_hold`]); a pending
    /// job not held is left as it is. `InvalidTransition` for any other
    /// state.
    async fn release_hold(&self, id: JobId, by: &str, now: Timestamp) -> Result<Job, StoreError>;

    /// Changes a pending (or held) job in one fenced write
    /// ([`crate::machine::edit`]): the job is read inside the write
    /// transaction, so one claimed since the caller looked is refused
    /// (`InvalidTransition`) with nothing written. `InvalidInput` for an
    /// edit the push checks refuse; `NotFound` for no job.
    async fn edit(&self, id: JobId, edit: &JobEdit, now: Timestamp) -> Result<Job, StoreError>;

    /// Adds a new pending job from any job ([`crate::machine::clone_of`]),
    /// `edit` applied, in one transaction with a `cloned_as` event on the
    /// original's trail and `cloned_from` on the new one's
    /// ([`crate::machine::cloned_events`]). Returns the new job.
    /// `NotFound` for no job; `InvalidInput` for an edit refused.
    async fn clone_job(&self, id: JobId, edit: &JobEdit, now: Timestamp)
    -> Result<Job, StoreError>;

    /// Every lane's settings (limits and pauses), as stored.
    async fn lanes(&self) -> Result<Lanes, StoreError>;

    /// Changes one lane's settings in one write ([`Lanes::apply`] on what
    /// is stored), seen by every claim after it. Returns every lane's
    /// settings after the change. `InvalidInput` for a change
    /// [`Lanes::apply`] refuses, with nothing written.
    async fn change_lane(
        &self,
        scope: &LaneScope,
        change: &LaneChange,
    ) -> Result<Lanes, StoreError>;

    /// Stores a schedule ([`crate::schedule::create`] on what the key holds, in
    /// one write): a new key is inserted (cursor at `now`); the same
    /// definition again changes nothing (`created: false`); another
    /// definition under the key is `InvalidInput`, nothing written.
    async fn put_schedule(
        &self,
        new: &NewSchedule,
        now: Timestamp,
    ) -> Result<PutSchedule, StoreError>;

    /// Every schedule, in key order.
    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError>;

    /// Pauses, resumes or removes the schedule `key` in one write
    /// ([`crate::schedule::change`]); returns it as it is after (`None` once
    /// removed). `NoSchedule` for an unknown key.
    async fn change_schedule(
        &self,
        key: &str,
        change: &ScheduleChange,
        now: Timestamp,
    ) -> Result<Option<Schedule>, StoreError>;

    /// Fires every due tick, in one write transaction: for each schedule
    /// (in key order) [`crate::schedule::plan_tick`] on it as stored (with the
    /// state of its last tick's job read in the same transaction), then
    /// the push of the tick's job through the path every push takes, the
    /// plan's events, and the schedule with its cursor moved. Two callers
    /// racing decide each slot once: the second reads the first's cursor.
    /// Returns the ticks decided and the next fire after them.
    async fn fire_schedules(&self, now: Timestamp) -> Result<Ticks, StoreError>;

    /// Writes schedules as they were exported (cursor, last fire and all),
    /// replacing any under the same keys, in one transaction, all or
    /// nothing; each checked by [`crate::schedule::check_restore`].
    async fn restore_schedules(&self, schedules: Vec<Schedule>) -> Result<(), StoreError>;

    /// What every queue with a pending or a running job holds, by queue
    /// name ([`QueueCounts`]; `due` as of `now`).
    async fn queue_counts(&self, now: Timestamp) -> Result<Vec<QueueCounts>, StoreError>;

    /// Every lane with its counts and settings (what `queues` shows): a
    /// lane with settings but no jobs is listed too. Two reads, not one
    /// transaction: for display.
    async fn queues(&self, now: Timestamp) -> Result<QueuesReport, StoreError> {
        let counts = self.queue_counts(now).await?;
        let lanes = self.lanes().await?;
        Ok(QueuesReport::new(&lanes, counts))
    }

    /// Cancels a pending job, or requests cancellation of a running one.
    /// `InvalidTransition` for a terminal job, `NotFound` for none.
    async fn cancel(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError>;

    /// Puts a failed or cancelled job back to pending with attempts reset,
    /// and with it the jobs its failure cancelled. `InvalidInput` while
    /// one of its own parents is failed or cancelled.
    async fn retry(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError>;

    /// One job. `NotFound` when there is none.
    async fn get(&self, id: JobId) -> Result<Job, StoreError>;

    /// The ids of the jobs that name `id` as a parent, lowest first: an
    /// edge lives as long as its child, so a parent purged before its
    /// dependents still lists them. Empty when nobody names `id`.
    async fn dependents(&self, id: JobId) -> Result<Vec<JobId>, StoreError>;

    /// The job's trail, oldest first. `NotFound` when there is no such job.
    async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError>;

    /// Jobs matching `filter`.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError>;

    /// Counts per state, due now and next due.
    async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError>;

    /// The earliest `not_before` of any pending job (due or not, but not
    /// waiting on parents nor held: its time is not what it waits for, and
    /// a runner woken for it would find nothing to claim), or the
    /// earliest lease expiry of a running one, whichever comes first: when
    /// a sleeping runner should look again.
    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError>;

    /// Takes back exactly these attempts, found dead by the caller (which
    /// dealt with what was left of their processes first): each job still
    /// running under that fence goes back to pending with a `reclaimed`
    /// event, or ends as [`crate::machine::reclaim_dead`] decides. Jobs
    /// that moved on, or are gone, are skipped. Returns the jobs as they
    /// were before, leases included.
    async fn reclaim_dead(
        &self,
        attempts: &[(JobId, Fence)],
        now: Timestamp,
    ) -> Result<Vec<Job>, StoreError>;

    /// Deletes terminal jobs (and pending ones if asked), with their
    /// trails; never running ones, nor a pending job that a job left
    /// behind still waits on ([`crate::machine::plan_purge`]). Returns the
    /// ids deleted.
    async fn purge(&self, filter: &PurgeFilter) -> Result<Vec<JobId>, StoreError>;

    /// Writes a job and its trail exactly as given (export/import between
    /// backends). `InvalidInput` if the id is taken; later pushes get ids
    /// above every imported one. A backend makes it
    /// [`Store::restore_many`] of one.
    async fn restore(&self, job: Job, events: Vec<Event>) -> Result<(), StoreError>;

    /// Writes every job and its trail exactly as given (an import), all or
    /// nothing, in one transaction: each job is checked
    /// ([`crate::machine::check_restore`]: a positive id, a lease exactly
    /// while running, a trail of its own; then its id free and its
    /// idempotency key held by no job, in the queue or earlier in the
    /// batch), and if one fails, `InvalidInput` naming it and nothing is
    /// written. Later pushes get ids above every restored one.
    ///
    /// The default restores one job after the other, which is not atomic
    /// (a refusal half-way leaves the jobs before it written); it serves
    /// wrappers and models, and a backend overrides it with one
    /// transaction.
    async fn restore_many(&self, jobs: Vec<(Job, Vec<Event>)>) -> Result<(), StoreError> {
        for (job, events) in jobs {
            self.restore(job, events).await?;
        }
        Ok(())
    }

    /// Records or refreshes a runner's record.
    async fn put_runner(&self, record: &RunnerRecord) -> Result<(), StoreError>;

    /// Forgets a runner (it stopped).
    async fn remove_runner(&self, owner_id: &str) -> Result<(), StoreError>;

    /// Every recorded runner, live or not (the caller judges).
    async fn runners(&self) -> Result<Vec<RunnerRecord>, StoreError>;

    /// Calls `wake` after commits to this queue by any process or host,
    /// for as long as the returned guard lives: for a backend with
    /// notifications of its own (PostgreSQL's `LISTEN`). `None`, the
    /// default, for a store in a file, which the file's watch serves
    /// (`slothqueue_runner::QueueWatch`). Like a file's notifications,
    /// these may be missed (a lost connection): waiters still poll.
    fn watch_changes(&self, wake: ChangeWaker) -> Option<ChangeGuard> {
        let _ = wake;
        None
    }

    /// The files a commit to this queue writes, for a watch on them
    /// (`slothqueue_runner::QueueWatch`) to wake waiters at every commit
    /// by any process: a store in a file names them, so that no watcher
    /// needs to know a backend's file layout. Empty, the default, for a
    /// store with no file (or one that notifies through
    /// [`Store::watch_changes`]).
    fn watched_files(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// What [`Store::watch_changes`] calls after a commit.
pub type ChangeWaker = std::sync::Arc<dyn Fn() + Send + Sync>;

/// Keeps a [`Store::watch_changes`] subscription alive; dropping it ends it.
pub type ChangeGuard = Box<dyn std::any::Any + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;
    use crate::machine;

    const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

    fn job(state: JobState, finished_at: Option<Timestamp>) -> Job {
        let new = NewJob::shell("true", "/");
        let mut job = machine::create(1, &new, &[], T0, &Policy::default()).job;
        job.state = state;
        job.finished_at = finished_at;
        job
    }

    #[test]
    fn purge_eligibility_is_state_then_age_by_end_or_creation() {
        let later = T0.saturating_add(Duration::from_secs(60));
        let all = PurgeFilter { include_pending: true, older_than: None };
        let finished = PurgeFilter { include_pending: false, older_than: None };
        assert!(!all.admits(&job(JobState::Running, None)), "never a running job");
        assert!(all.admits(&job(JobState::Pending, None)));
        assert!(!finished.admits(&job(JobState::Pending, None)), "pending only when asked");
        assert!(finished.admits(&job(JobState::Done, Some(later))));
        assert_eq!(finished.states().len(), 3);
        assert_eq!(all.states().len(), 4);

        let old = PurgeFilter { include_pending: true, older_than: Some(later) };
        assert!(old.admits(&job(JobState::Pending, None)), "created before the cut");
        assert!(!old.admits(&job(JobState::Failed, Some(later))), "ended at the cut: kept");
        assert!(old.admits(&job(JobState::Cancelled, None)), "no end: by its creation");
    }
}
