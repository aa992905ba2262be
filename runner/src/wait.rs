//! [`wait`]: blocks until jobs are finished, at next to no cost meanwhile.
//!
//! A wait looks at the queue, then sleeps until the queue file changes
//! (a [`QueueWatch`] notification: another process committed), a long
//! poll passes (notifications can be missed), or the deadline comes; then
//! it looks again. Between looks it makes no wake-up of its own, so a wait
//! on a job that runs for hours costs one look per poll interval.
//!
//! A busy queue (a runner finishing a job every few milliseconds) would
//! make a look per commit; looks are spaced so that a wait never takes
//! more than about a fifth of a CPU however fast the queue moves: after a
//! look that took `t`, the next one comes no sooner than `4 t` later (and
//! at least [`MIN_GAP`]). The commits in between are seen together.
//!
//! A wait on a whole queue keeps each job's id and state, never the job
//! (200,000 pending jobs, each with its recorded environment, would be
//! gigabytes), and reads the queue a page of [`PAGE`] jobs at a time, so
//! what it holds is bounded by the ids, not by the jobs. A look is raced
//! against the deadline: on a queue so long that one look takes seconds,
//! the wait still ends when its deadline comes (a page is a short read,
//! so the one left running in the background ends soon after).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use slothqueue_core::{Job, JobId, JobState, ListFilter, ListOrder, Store, StoreError};
use tokio::time::Instant;

use crate::RunnerError;
use crate::idle::IdleTimer;
use crate::watch::QueueWatch;

/// The least time between two looks of a wait woken by changes.
pub const MIN_GAP: Duration = Duration::from_millis(20);

/// How many jobs one read of a look lists: a few MB of jobs at most,
/// a few milliseconds of the store's time.
pub const PAGE: usize = 500;

/// What a wait waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitTarget {
    /// Until each of these jobs is finished (done, failed or cancelled).
    /// Every id must exist when the wait starts.
    Jobs(Vec<JobId>),
    /// Until no job of this queue is pending or running.
    Queue(String),
    /// Until no job of any queue is pending or running.
    All,
}

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// Everything waited on is finished.
    Finished,
    /// The deadline came first.
    TimedOut,
}

/// One job waited on, as last seen: its id and state, not the job (what a
/// caller reports of the few that did not end done it reads by id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waited {
    /// The job.
    pub id: JobId,
    /// Its state when last seen.
    pub state: JobState,
}

/// What a wait saw last.
#[derive(Clone, Debug, PartialEq)]
pub struct WaitOutcome {
    /// Finished, or timed out.
    pub end: WaitEnd,
    /// Every job waited on as last seen: for [`WaitTarget::Jobs`] in the
    /// order given (each once); for a queue or all, in id order, every job
    /// that was pending or running there at some look of the wait or was
    /// added after it started (a wait that timed out during its first
    /// look has only those that look had seen).
    pub jobs: Vec<Waited>,
    /// Jobs waited on that were deleted (`clear`) before they were seen
    /// finished: how they ended is unknown.
    pub gone: Vec<JobId>,
    /// The deadline came during the wait's first look: `jobs` holds only
    /// the jobs that look had seen (of a queue, not every one pending or
    /// running there; of [`WaitTarget::Jobs`], not every id given).
    pub cut_short: bool,
}

impl WaitOutcome {
    /// The deadline came before everything finished.
    pub fn timed_out(&self) -> bool {
        self.end == WaitEnd::TimedOut
    }

    /// Everything finished, and every job ended `done`.
    pub fn all_done(&self) -> bool {
        self.end == WaitEnd::Finished
            && self.gone.is_empty()
            && self.jobs.iter().all(|j| j.state == JobState::Done)
    }

    /// The jobs that ended failed or cancelled.
    pub fn unsuccessful(&self) -> impl Iterator<Item = &Waited> {
        self.jobs.iter().filter(|j| matches!(j.state, JobState::Failed | JobState::Cancelled))
    }

    /// The jobs not finished when the wait ended (none unless it timed out).
    pub fn unfinished(&self) -> impl Iterator<Item = &Waited> {
        self.jobs.iter().filter(|j| !j.state.is_terminal())
    }
}

/// Waits until `target` is finished or `deadline` (tokio's clock, so
/// awake time, as a max runtime counts) passes, looking at `store` each
/// time `watch` reports a change and at least every
/// [`QueueWatch::poll_interval`]. With no deadline it waits as long as it
/// takes. A deadline already past still looks once, the whole look; a
/// look under way when the deadline comes is left unfinished, and the
/// wait ends timed out with what the looks had seen.
///
/// An id of [`WaitTarget::Jobs`] that does not exist when the wait starts
/// is an error ([`StoreError::NotFound`] inside [`RunnerError::Store`]);
/// one deleted later is reported in [`WaitOutcome::gone`]. A busy queue
/// file only delays the next look; other store errors end the wait.
pub async fn wait(
    store: &dyn Store,
    watch: &QueueWatch,
    target: &WaitTarget,
    deadline: Option<Instant>,
) -> Result<WaitOutcome, RunnerError> {
    wait_with(IdleTimer::default(), store, watch, target, deadline).await
}

/// [`wait`] for a process that holds many waits at once, each of seconds
/// (the HTTP API's `?wait=` long polls): its sleeps are tokio's timers,
/// which cost no file descriptor, where [`wait`]'s kernel timer costs one
/// a wait (worth it for a wait of hours: one wake-up a sleep, and time
/// asleep counted).
pub async fn wait_briefly(
    store: &dyn Store,
    watch: &QueueWatch,
    target: &WaitTarget,
    deadline: Option<Instant>,
) -> Result<WaitOutcome, RunnerError> {
    wait_with(IdleTimer::tokio_only(), store, watch, target, deadline).await
}

async fn wait_with(
    mut timer: IdleTimer,
    store: &dyn Store,
    watch: &QueueWatch,
    target: &WaitTarget,
    deadline: Option<Instant>,
) -> Result<WaitOutcome, RunnerError> {
    // Subscribed before the first look: a commit during it is not missed.
    let mut changes = watch.changes();
    let mut tracker = Tracker::new(target);
    let mut first = true;
    // A deadline past before the wait began is one whole look.
    let whole = deadline.is_some_and(|d| d <= Instant::now());
    loop {
        changes.mark_seen();
        let started = Instant::now();
        let looked = match deadline.filter(|_| !whole) {
            Some(d) => match tokio::time::timeout_at(d, tracker.look(store, first)).await {
                Ok(looked) => looked,
                Err(_) => {
                    let mut outcome = tracker.outcome(WaitEnd::TimedOut);
                    outcome.cut_short = first;
                    return Ok(outcome);
                }
            },
            None => tracker.look(store, first).await,
        };
        match looked {
            Ok(true) => return Ok(tracker.outcome(WaitEnd::Finished)),
            Ok(false) => first = false,
            // Looked at again after the gap; a first look is done again whole.
            Err(e) if e.is_temporary() => {}
            Err(e) => return Err(RunnerError::store("cannot wait on the queue", e)),
        }
        let cost = started.elapsed();
        let left = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Some(left),
                _ => return Ok(tracker.outcome(WaitEnd::TimedOut)),
            },
            None => None,
        };
        let sleep = left.map_or(watch.poll_interval(), |l| l.min(watch.poll_interval()));
        let woken_by_change = tokio::select! {
            () = changes.changed() => true,
            () = timer.sleep(sleep) => false,
        };
        if woken_by_change {
            // Let a burst of commits gather into one look.
            let gap = (cost * 4).max(MIN_GAP);
            let gap = left.map_or(gap, |l| gap.min(l.saturating_sub(started.elapsed())));
            tokio::time::sleep(gap).await;
        }
    }
}

/// What a wait knows so far.
struct Tracker {
    kind: Kind,
    /// Every job waited on, by id: its state as last seen.
    states: BTreeMap<JobId, JobState>,
    gone: BTreeSet<JobId>,
}

enum Kind {
    /// The ids, in the order given, each once.
    Jobs(Vec<JobId>),
    /// A queue (`None`: every queue), and the highest id seen there: jobs
    /// above it were added during the wait.
    Queue { queue: Option<String>, high: Option<JobId> },
}

impl Tracker {
    fn new(target: &WaitTarget) -> Tracker {
        let kind = match target {
            WaitTarget::Jobs(ids) => {
                let mut seen = BTreeSet::new();
                Kind::Jobs(ids.iter().copied().filter(|id| seen.insert(*id)).collect())
            }
            WaitTarget::Queue(q) => Kind::Queue { queue: Some(q.clone()), high: None },
            WaitTarget::All => Kind::Queue { queue: None, high: None },
        };
        Tracker { kind, states: BTreeMap::new(), gone: BTreeSet::new() }
    }

    /// Looks at the queue once; `true` when everything is finished. What
    /// it learns it records as it goes, so a look cut short by the
    /// deadline leaves the tracker true to what was seen.
    async fn look(&mut self, store: &dyn Store, first: bool) -> Result<bool, StoreError> {
        match &mut self.kind {
            Kind::Jobs(ids) => {
                for &id in ids.iter() {
                    let finished = self.states.get(&id).is_some_and(|s| s.is_terminal());
                    if finished || self.gone.contains(&id) {
                        continue;
                    }
                    match store.get(id).await {
                        Ok(job) => {
                            self.states.insert(id, job.state);
                        }
                        Err(StoreError::NotFound(_)) if !first => {
                            self.states.remove(&id);
                            self.gone.insert(id);
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok(self.states.values().all(|s| s.is_terminal()))
            }
            Kind::Queue { queue, high } => {
                if first {
                    // The newest job before the wait: later ones were added
                    // during it, whatever state they are seen in.
                    let newest = ListFilter {
                        queue: queue.clone(),
                        limit: Some(1),
                        order: ListOrder::Newest,
                        ..ListFilter::default()
                    };
                    *high = store.list(&newest).await?.first().map(|j| j.id);
                }
                // The active jobs first, then those added since the last
                // look: a job added in between is in one or the other.
                let mut active = BTreeSet::new();
                for state in [JobState::Pending, JobState::Running] {
                    let filter = ListFilter {
                        state: Some(state),
                        queue: queue.clone(),
                        ..Default::default()
                    };
                    pages(store, filter, |job| {
                        active.insert(job.id);
                        self.states.insert(job.id, job.state);
                    })
                    .await?;
                }
                if !first {
                    let added =
                        ListFilter { queue: queue.clone(), cursor: *high, ..ListFilter::default() };
                    pages(store, added, |job| {
                        *high = Some(high.map_or(job.id, |h| h.max(job.id)));
                        if !job.state.is_terminal() {
                            active.insert(job.id);
                        }
                        self.states.insert(job.id, job.state);
                    })
                    .await?;
                }
                // Jobs seen active before and not now: how did they end?
                let left: Vec<JobId> = self
                    .states
                    .iter()
                    .filter(|(id, s)| !s.is_terminal() && !active.contains(id))
                    .map(|(id, _)| *id)
                    .collect();
                for id in left {
                    match store.get(id).await {
                        Ok(job) => {
                            if !job.state.is_terminal() {
                                active.insert(id);
                            }
                            self.states.insert(id, job.state);
                        }
                        Err(StoreError::NotFound(_)) => {
                            self.states.remove(&id);
                            self.gone.insert(id);
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok(active.is_empty())
            }
        }
    }

    fn outcome(&self, end: WaitEnd) -> WaitOutcome {
        let waited = |(&id, &state): (&JobId, &JobState)| Waited { id, state };
        let jobs = match &self.kind {
            Kind::Jobs(ids) => {
                ids.iter().filter_map(|id| self.states.get_key_value(id)).map(waited).collect()
            }
            Kind::Queue { .. } => self.states.iter().map(waited).collect(),
        };
        WaitOutcome { end, jobs, gone: self.gone.iter().copied().collect(), cut_short: false }
    }
}

/// Every job `filter` names, oldest first, a [`PAGE`] at a time, each
/// handed to `each` and dropped: what a look holds at once is one page.
async fn pages(
    store: &dyn Store,
    mut filter: ListFilter,
    mut each: impl FnMut(&Job),
) -> Result<(), StoreError> {
    filter.order = ListOrder::Oldest;
    filter.limit = Some(PAGE);
    loop {
        let page = store.list(&filter).await?;
        page.iter().for_each(&mut each);
        match page.last() {
            Some(last) if page.len() >= PAGE => filter.cursor = Some(last.id),
            _ => return Ok(()),
        }
    }
}
