//! Steering the queue from a face, beyond one job: what a cancel takes
//! with it ([`cancel_takes`], asked before the cancel is offered), and the
//! bulk actions ([`retry_failed`], [`cancel_pending`]), each a loop over
//! the jobs of a queue through the single-job operation, so every rule of
//! that operation (fences, dependents, refusals) holds for each job. The
//! loop is written once here, beside the reads it starts from (this is
//! the lowest crate that awaits a store), for the HTTP API and any other
//! face.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;
use slothqueue_core::{
    Job, JobId, JobState, ListFilter, ListOrder, Store, StoreError, Timestamp, machine,
};

use crate::words;

/// Jobs named by [`cancel_takes_words`] before the rest are counted.
pub const TAKES_LISTED: usize = 5;

/// The unfinished jobs that cancelling job `id` at `now` ends with it,
/// transitively, as they are now, lowest id first: the rule the cancel
/// itself runs ([`machine::cancel_takes`], over the dependents read
/// here). A running job's dependents go when its runner has stopped it.
/// Read in several reads, not one snapshot: a preview for a
/// confirmation, which the cancel itself decides again.
pub async fn cancel_takes(
    store: &dyn Store,
    id: JobId,
    now: Timestamp,
) -> Result<Vec<Job>, StoreError> {
    let job = store.get(id).await?;
    if job.state.is_terminal() {
        return Ok(Vec::new());
    }
    let mut graph = Snapshot::default();
    let mut todo = VecDeque::from([id]);
    let mut seen = BTreeSet::from([id]);
    while let Some(parent) = todo.pop_front() {
        let children = store.dependents(parent).await?;
        for child in &children {
            if !seen.insert(*child) {
                continue;
            }
            match store.get(*child).await {
                Ok(j) => {
                    // Only an unfinished job passes a cancel on.
                    if !j.state.is_terminal() {
                        todo.push_back(*child);
                    }
                    graph.jobs.insert(*child, j);
                }
                Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        graph.dependents.insert(parent, children);
    }
    graph.jobs.insert(id, job.clone());
    machine::cancel_takes(&mut graph, &job, now)
}

/// `#17 (waiting) and #18 (waiting)`: the jobs a cancel takes, as a
/// sentence's object (the first [`TAKES_LISTED`] named, then `and N
/// more`); empty when none.
pub fn cancel_takes_words(jobs: &[Job]) -> String {
    words::job_list(jobs, jobs.len(), TAKES_LISTED)
}

/// The jobs and dependents read for one preview.
#[derive(Default)]
struct Snapshot {
    jobs: BTreeMap<JobId, Job>,
    dependents: BTreeMap<JobId, Vec<JobId>>,
}

impl machine::Graph for Snapshot {
    type Error = StoreError;

    fn job(&mut self, id: JobId) -> Result<Option<Job>, StoreError> {
        Ok(self.jobs.get(&id).cloned())
    }

    fn key_holder(&mut self, key: &str) -> Result<Option<Job>, StoreError> {
        Ok(self.jobs.values().find(|j| j.idempotency_key.as_deref() == Some(key)).cloned())
    }

    fn dependents(&mut self, id: JobId) -> Result<Vec<JobId>, StoreError> {
        Ok(self.dependents.get(&id).cloned().unwrap_or_default())
    }
}

/// What a bulk action did: the jobs it changed, lowest id first, and
/// those it found but the single-job operation refused (moved on since
/// they were listed), with the refusal's words.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Bulk {
    /// How many jobs it changed: `ids.len()`.
    pub count: usize,
    /// The jobs it changed.
    pub ids: Vec<JobId>,
    /// The jobs it left, and why; absent from the JSON when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// A job a bulk action left as it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The job.
    pub id: JobId,
    /// The operation's refusal: `cannot retry job #9: it is pending`.
    pub why: String,
}

impl Bulk {
    fn changed(&mut self, id: JobId) {
        self.ids.push(id);
        self.count = self.ids.len();
    }
}

/// The jobs of `queue` in `state`, oldest first.
async fn in_queue(
    store: &dyn Store,
    queue: &str,
    state: JobState,
) -> Result<Vec<JobId>, StoreError> {
    let filter = ListFilter {
        state: Some(state),
        queue: Some(queue.to_owned()),
        order: ListOrder::Oldest,
        ..ListFilter::default()
    };
    Ok(store.list(&filter).await?.into_iter().map(|j| j.id).collect())
}

/// A refusal of one job's operation, which leaves that job and goes on;
/// any other error (the store busy or gone) stops the loop.
fn refused(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::NotFound(_)
            | StoreError::InvalidTransition { .. }
            | StoreError::InvalidInput(_)
            | StoreError::LeaseLost { .. }
    )
}

/// Retries every failed job of `queue` ([`Store::retry`] each, oldest
/// first): each is pending again, its attempts counted afresh, and the
/// jobs its failure cancelled come back with it. A job the retry refuses
/// (superseded by a newer job with its key) is skipped. An error of the
/// store stops the loop; the jobs retried before it stay retried.
pub async fn retry_failed(
    store: &dyn Store,
    queue: &str,
    now: Timestamp,
) -> Result<Bulk, StoreError> {
    let mut bulk = Bulk::default();
    for id in in_queue(store, queue, JobState::Failed).await? {
        match store.retry(id, now).await {
            Ok(_) => bulk.changed(id),
            Err(e) if refused(&e) => bulk.skipped.push(Skipped { id, why: e.to_string() }),
            Err(e) => return Err(e),
        }
    }
    Ok(bulk)
}

/// Cancels every pending job of `queue`, held and waiting ones included
/// ([`Store::cancel`] each, oldest first), and with each the jobs waiting
/// on it, as a single cancel does (those in other queues too; they are
/// not in `ids`). A job of the queue an earlier cancel of the loop
/// already took is counted as cancelled. An error of the store stops the
/// loop; the jobs cancelled before it stay cancelled.
pub async fn cancel_pending(
    store: &dyn Store,
    queue: &str,
    now: Timestamp,
) -> Result<Bulk, StoreError> {
    let mut bulk = Bulk::default();
    for id in in_queue(store, queue, JobState::Pending).await? {
        match store.cancel(id, now).await {
            Ok(_) => bulk.changed(id),
            Err(StoreError::InvalidTransition { state: JobState::Cancelled, .. })
                if taken_by(store, id, &bulk.ids).await =>
            {
                bulk.changed(id);
            }
            Err(e) if refused(&e) => bulk.skipped.push(Skipped { id, why: e.to_string() }),
            Err(e) => return Err(e),
        }
    }
    Ok(bulk)
}

/// Whether job `id` was cancelled by the cancel of one of `cancelled`.
async fn taken_by(store: &dyn Store, id: JobId, cancelled: &[JobId]) -> bool {
    store.get(id).await.is_ok_and(|j| j.cancelled_by.is_some_and(|root| cancelled.contains(&root)))
}
