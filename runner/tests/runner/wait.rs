//! `wait` against real queue files on both backends: the waiter reads
//! through its own read-only handle, as `slothqueue wait` does, and a
//! second handle on the same file writes, as another process would. The
//! waiter's poll is an hour long, so a wait released within the test's
//! deadline was released by the file's change notification.
//!
//! Nothing sleeps to make time pass: the writer waits until the waiter has
//! looked (its store, `Intercepted`, counts looks), and the test's deadline bounds every
//! wait.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use slothqueue::Backend;
use slothqueue_core::machine::{Completion, Failure};
use slothqueue_core::{
    ClaimRequest, Claimed, ClockOnly, JobId, JobState, NewJob, Owner, PurgeFilter, Store,
    StoreError, Timestamp,
};
use slothqueue_runner::wait::{WaitEnd, WaitOutcome, WaitTarget, wait};
use slothqueue_runner::{QueueWatch, RunnerError};
use slothqueue_store_redb::{RedbOptions, RedbStore};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};
use tokio::time::Instant;

use crate::support::Intercepted;

/// The most any wait here may take: the machine is shared, slow is fine.
const DEADLINE: Duration = Duration::from_secs(30);

/// Longer than any test: a poll never releases a wait here.
const NO_POLL: Duration = Duration::from_secs(3600);

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Sqlite).await
                }
            )*
        }
        mod redb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Redb).await
                }
            )*
        }
    };
}

on_both_backends!(
    a_wait_is_released_by_another_writer,
    a_wait_times_out_at_its_deadline,
    an_unknown_job_is_not_found,
    failed_and_cancelled_jobs_are_told_apart,
    a_queue_wait_counts_jobs_added_meanwhile,
    a_wait_on_all_ignores_what_finished_before,
    a_job_deleted_while_waited_on_is_gone,
);

/// A queue file with a writer handle and a read-only waiter handle.
struct Queue {
    dir: tempfile::TempDir,
    path: PathBuf,
    writer: Arc<dyn Store>,
    /// The waiter's store: the read-only handle, counting its looks.
    waiter: Arc<Intercepted>,
}

fn queue(backend: Backend) -> Queue {
    let dir = tempfile::tempdir().unwrap();
    let (path, writer, reader): (PathBuf, Arc<dyn Store>, Arc<dyn Store>) = match backend {
        Backend::Sqlite => {
            let path = dir.path().join("q.db");
            let w = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
            let r = SqliteStore::open_read_only(&path, SqliteOptions::default()).unwrap();
            (path, Arc::new(w), Arc::new(r))
        }
        Backend::Redb => {
            let path = dir.path().join("q.redb");
            let w = RedbStore::open(&path, RedbOptions::default()).unwrap();
            let r = RedbStore::open_read_only(&path, RedbOptions::default()).unwrap();
            (path, Arc::new(w), Arc::new(r))
        }
        Backend::Postgres => unreachable!("these waits watch a queue file"),
    };
    Queue { dir, path, writer, waiter: Arc::new(Intercepted::new(reader)) }
}

impl Queue {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000)
    }

    fn job(&self) -> NewJob {
        NewJob::shell("true", self.dir.path().to_string_lossy())
    }

    async fn push(&self, job: NewJob) -> JobId {
        self.writer.push(job, self.now()).await.unwrap().job.id
    }

    async fn claim(&self) -> Claimed {
        let req = ClaimRequest::new(Owner::named("other-process"), Arc::new(ClockOnly));
        self.writer.claim(&req, self.now()).await.unwrap().expect("nothing to claim")
    }

    async fn complete(&self, c: &Claimed) {
        let done = Completion { result: None, exit_code: Some(0) };
        self.writer.complete(c.job.id, &c.fence, done, self.now()).await.unwrap();
    }

    async fn fail(&self, c: &Claimed) {
        let failure = Failure { error: "exit code 3".into(), exit_code: Some(3), permanent: false };
        self.writer.fail(c.job.id, &c.fence, failure, self.now()).await.unwrap();
    }

    /// Starts a wait with an hour-long poll and no deadline of its own
    /// (which would end in a last look): only a notification releases it,
    /// within the test's [`DEADLINE`].
    fn start(
        &self,
        target: WaitTarget,
    ) -> tokio::task::JoinHandle<Result<WaitOutcome, RunnerError>> {
        let store = self.waiter.clone();
        let watch = QueueWatch::for_store(&self.path, &*self.waiter).with_poll_interval(NO_POLL);
        assert!(watch.is_notified(), "{:?}", watch.notice());
        tokio::spawn(async move { wait(store.as_ref(), &watch, &target, None).await })
    }

    /// Returns once the waiter has made `n` store reads since the start.
    async fn looked(&self, n: u64) {
        let mut rx = self.waiter.looks.subscribe();
        tokio::time::timeout(DEADLINE, rx.wait_for(|r| *r >= n)).await.unwrap().unwrap();
    }
}

async fn finished(task: tokio::task::JoinHandle<Result<WaitOutcome, RunnerError>>) -> WaitOutcome {
    let joined = tokio::time::timeout(DEADLINE, task).await;
    let outcome = joined.expect("the wait was not released").unwrap().unwrap();
    assert_eq!(outcome.end, WaitEnd::Finished, "{outcome:?}");
    outcome
}

fn states(outcome: &WaitOutcome) -> Vec<(JobId, JobState)> {
    outcome.jobs.iter().map(|j| (j.id, j.state)).collect()
}

async fn a_wait_is_released_by_another_writer(backend: Backend) {
    let q = queue(backend);
    let id = q.push(q.job()).await;
    let claimed = q.claim().await;
    let task = q.start(WaitTarget::Jobs(vec![id]));
    q.looked(1).await;
    assert!(!task.is_finished(), "the wait ended while its job was running");
    q.complete(&claimed).await;
    let outcome = finished(task).await;
    assert_eq!(states(&outcome), [(id, JobState::Done)]);
    assert!(outcome.all_done());
}

async fn a_wait_times_out_at_its_deadline(backend: Backend) {
    let q = queue(backend);
    let id = q.push(q.job()).await;
    let watch = QueueWatch::for_store(&q.path, &*q.waiter).with_poll_interval(NO_POLL);
    let deadline = Instant::now() + Duration::from_millis(300);
    let outcome =
        wait(q.waiter.as_ref(), &watch, &WaitTarget::Jobs(vec![id]), Some(deadline)).await.unwrap();
    assert!(Instant::now() >= deadline);
    assert!(outcome.timed_out());
    assert_eq!(outcome.unfinished().map(|j| j.id).collect::<Vec<_>>(), [id]);
    // A deadline already past still looks once: a finished job is seen.
    let c = q.claim().await;
    q.complete(&c).await;
    let past = Instant::now();
    let outcome =
        wait(q.waiter.as_ref(), &watch, &WaitTarget::Jobs(vec![id]), Some(past)).await.unwrap();
    assert!(outcome.all_done(), "{outcome:?}");
}

async fn an_unknown_job_is_not_found(backend: Backend) {
    let q = queue(backend);
    let id = q.push(q.job()).await;
    let watch = QueueWatch::polling(NO_POLL);
    let target = WaitTarget::Jobs(vec![id, 99]);
    let err = wait(q.waiter.as_ref(), &watch, &target, None).await.unwrap_err();
    assert!(matches!(err, RunnerError::Store { source: StoreError::NotFound(99), .. }), "{err:?}");
}

async fn failed_and_cancelled_jobs_are_told_apart(backend: Backend) {
    let q = queue(backend);
    let done = q.push(q.job()).await;
    let c = q.claim().await;
    q.complete(&c).await;
    let mut once = q.job();
    once.max_attempts = Some(1);
    let failed = q.push(once).await;
    let c = q.claim().await;
    q.fail(&c).await;
    let cancelled = q.push(q.job()).await;
    q.writer.cancel(cancelled, q.now()).await.unwrap();
    let watch = QueueWatch::polling(NO_POLL);
    // Named twice: waited on once, reported once, in the order given.
    let target = WaitTarget::Jobs(vec![cancelled, done, failed, done]);
    let outcome = wait(q.waiter.as_ref(), &watch, &target, None).await.unwrap();
    assert_eq!(outcome.end, WaitEnd::Finished);
    assert_eq!(
        states(&outcome),
        [(cancelled, JobState::Cancelled), (done, JobState::Done), (failed, JobState::Failed)]
    );
    assert!(!outcome.all_done());
    let bad: Vec<JobId> = outcome.unsuccessful().map(|j| j.id).collect();
    assert_eq!(bad, [cancelled, failed]);
    let failed = q.writer.get(outcome.jobs[2].id).await.unwrap();
    assert_eq!(failed.exit_code, Some(3), "the outcome's ids read back the jobs");
}

async fn a_queue_wait_counts_jobs_added_meanwhile(backend: Backend) {
    let q = queue(backend);
    let mut before = q.job();
    before.queue = "q".into();
    let first = q.push(before).await;
    let running = q.claim().await;
    let mut elsewhere = q.job();
    elsewhere.queue = "other".into();
    let other = q.push(elsewhere).await;
    let task = q.start(WaitTarget::Queue("q".into()));
    q.looked(1).await;
    let mut later = q.job();
    later.queue = "q".into();
    later.max_attempts = Some(1);
    later.priority = 5;
    let added = q.push(later).await;
    q.complete(&running).await;
    assert!(!task.is_finished(), "ended with #{added} pending in its queue");
    let c = q.claim().await;
    assert_eq!(c.job.id, added);
    q.fail(&c).await;
    let outcome = finished(task).await;
    assert_eq!(states(&outcome), [(first, JobState::Done), (added, JobState::Failed)]);
    assert!(!outcome.jobs.iter().any(|j| j.id == other), "another queue's job was waited on");
    assert!(!outcome.all_done());
}

async fn a_wait_on_all_ignores_what_finished_before(backend: Backend) {
    let q = queue(backend);
    let mut once = q.job();
    once.max_attempts = Some(1);
    q.push(once).await;
    let c = q.claim().await;
    q.fail(&c).await;
    let watch = QueueWatch::polling(NO_POLL);
    let outcome = wait(q.waiter.as_ref(), &watch, &WaitTarget::All, None).await.unwrap();
    assert_eq!(outcome.end, WaitEnd::Finished);
    assert!(outcome.jobs.is_empty(), "{outcome:?}");
    assert!(outcome.all_done(), "an old failure does not make this wait fail");
}

async fn a_job_deleted_while_waited_on_is_gone(backend: Backend) {
    let q = queue(backend);
    let id = q.push(q.job()).await;
    let task = q.start(WaitTarget::Jobs(vec![id]));
    q.looked(1).await;
    let filter = PurgeFilter { include_pending: true, older_than: None };
    assert_eq!(q.writer.purge(&filter).await.unwrap(), [id]);
    let outcome = finished(task).await;
    assert_eq!(outcome.gone, [id]);
    assert!(outcome.jobs.is_empty());
    assert!(!outcome.all_done());
}
