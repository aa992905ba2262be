//! A store that answers `Busy` for a while: the runner waits it out, warns
//! once, and carries on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use slothqueue_core::machine::{Completion, Failure, HeartbeatAck};
use slothqueue_core::{
    ClaimFilter, Claimed, Event, Fence, Job, JobId, JobState, ListFilter, LivenessJudge, NewJob,
    Owner, PurgeFilter, Pushed, RunnerRecord, Stats, Store, StoreError, Timestamp,
};

use crate::support::env;

/// Delegates to a real store, but the first `busy` claims and completions
/// each answer `Busy`.
struct Faulty {
    inner: Arc<dyn Store>,
    busy_claims: AtomicU32,
    busy_completes: AtomicU32,
}

fn busy(counter: &AtomicU32) -> Result<(), StoreError> {
    let left = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    match left {
        Ok(_) => Err(StoreError::Busy { waited: Duration::from_secs(5) }),
        Err(_) => Ok(()),
    }
}

#[async_trait]
impl Store for Faulty {
    async fn push(&self, job: NewJob, now: Timestamp) -> Result<Pushed, StoreError> {
        self.inner.push(job, now).await
    }
    async fn push_many(
        &self,
        jobs: Vec<NewJob>,
        now: Timestamp,
    ) -> Result<Vec<Pushed>, StoreError> {
        self.inner.push_many(jobs, now).await
    }
    async fn claim(
        &self,
        owner: &Owner,
        filter: &ClaimFilter,
        now: Timestamp,
        judge: &dyn LivenessJudge,
    ) -> Result<Option<Claimed>, StoreError> {
        busy(&self.busy_claims)?;
        self.inner.claim(owner, filter, now, judge).await
    }
    async fn heartbeat(
        &self,
        id: JobId,
        fence: &Fence,
        child_pgid: Option<i32>,
        now: Timestamp,
    ) -> Result<HeartbeatAck, StoreError> {
        self.inner.heartbeat(id, fence, child_pgid, now).await
    }
    async fn complete(
        &self,
        id: JobId,
        fence: &Fence,
        done: Completion,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        busy(&self.busy_completes)?;
        self.inner.complete(id, fence, done, now).await
    }
    async fn fail(
        &self,
        id: JobId,
        fence: &Fence,
        failure: Failure,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        self.inner.fail(id, fence, failure, now).await
    }
    async fn release(&self, id: JobId, fence: &Fence, now: Timestamp) -> Result<Job, StoreError> {
        self.inner.release(id, fence, now).await
    }
    async fn cancel(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.inner.cancel(id, now).await
    }
    async fn retry(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.inner.retry(id, now).await
    }
    async fn get(&self, id: JobId) -> Result<Job, StoreError> {
        self.inner.get(id).await
    }
    async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        self.inner.events(id).await
    }
    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
        self.inner.list(filter).await
    }
    async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError> {
        self.inner.stats(now).await
    }
    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.inner.next_due().await
    }
    async fn reclaim_dead(
        &self,
        now: Timestamp,
        judge: &dyn LivenessJudge,
    ) -> Result<Vec<Job>, StoreError> {
        self.inner.reclaim_dead(now, judge).await
    }
    async fn purge(&self, filter: &PurgeFilter) -> Result<Vec<JobId>, StoreError> {
        self.inner.purge(filter).await
    }
    async fn restore(&self, job: Job, events: Vec<Event>) -> Result<(), StoreError> {
        self.inner.restore(job, events).await
    }
    async fn put_runner(&self, record: &RunnerRecord) -> Result<(), StoreError> {
        self.inner.put_runner(record).await
    }
    async fn remove_runner(&self, owner_id: &str) -> Result<(), StoreError> {
        self.inner.remove_runner(owner_id).await
    }
    async fn runners(&self) -> Result<Vec<RunnerRecord>, StoreError> {
        self.inner.runners().await
    }
}

#[tokio::test]
async fn a_busy_queue_file_is_waited_out_not_fatal() {
    let env = env();
    let id = env.add("echo survived", |j| j).await;
    let faulty = Arc::new(Faulty {
        inner: env.store.clone(),
        busy_claims: AtomicU32::new(3),
        busy_completes: AtomicU32::new(2),
    });
    let runner = slothqueue_runner::Runner::new(faulty, env.config());
    let (summary, lines) = env.drain(runner).await;
    assert_eq!(summary.done, 1, "{lines:?}");
    let warnings: Vec<&String> = lines.iter().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(warnings.len(), 2, "one warning per streak: {lines:?}");
    assert!(
        warnings[0].starts_with("warning: cannot claim a job: queue file is busy"),
        "{lines:?}"
    );
    assert!(warnings[0].ends_with("; retrying every 50ms"), "{lines:?}");
    assert!(warnings[1].starts_with("warning: cannot record a completed job: queue file is busy"));
    let job = env.job(id).await;
    assert_eq!((job.state, job.result.as_deref()), (JobState::Done, Some("survived")));
}
