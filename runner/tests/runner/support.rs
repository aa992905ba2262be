//! Shared fixtures: a queue in a temp dir, a runner config with short
//! intervals, an event collector, and waiting with a deadline.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{
    Clock, Job, JobId, Lease, Liveness, LivenessJudge, NewJob, Store, SystemClock,
};
use slothqueue_runner::{
    Mode, RunSummary, Runner, RunnerConfig, RunnerError, RunnerEvent, ShutdownSignal,
    ShutdownTrigger,
};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long any wait in a test may take before the test fails. Generous:
/// the machine is shared and slow is fine; hanging is not.
pub const DEADLINE: Duration = Duration::from_secs(30);

pub struct Env {
    pub dir: tempfile::TempDir,
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
}

pub fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("queue.db"), SqliteOptions::default()).unwrap();
    Env { dir, store: Arc::new(store), clock: Arc::new(SystemClock) }
}

impl Env {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn logs(&self) -> PathBuf {
        self.path("logs")
    }

    /// Short intervals so tests do not wait on politeness.
    pub fn config(&self) -> RunnerConfig {
        let mut cfg = RunnerConfig::new(self.logs());
        cfg.check_interval = Duration::from_millis(20);
        cfg.kill_grace = Duration::from_millis(300);
        cfg.heartbeat_interval = Some(Duration::from_millis(50));
        cfg.busy_pause = Duration::from_millis(50);
        cfg.poll_interval = Duration::from_secs(3600);
        cfg
    }

    pub fn now(&self) -> slothqueue_core::Timestamp {
        self.clock.now()
    }

    /// Adds a shell job running in the temp dir.
    pub async fn add(&self, command: &str, edit: impl FnOnce(NewJob) -> NewJob) -> JobId {
        let job = edit(NewJob::shell(command, self.dir.path().to_string_lossy()));
        self.store.push(job, self.now()).await.unwrap().job.id
    }

    pub async fn job(&self, id: JobId) -> Job {
        self.store.get(id).await.unwrap()
    }

    /// Starts a runner in the background.
    pub fn start(&self, runner: Runner) -> Running {
        let (tx, rx) = mpsc::unbounded_channel();
        let (trigger, shutdown) = ShutdownSignal::new();
        let handle = tokio::spawn(runner.run(tx, shutdown));
        Running { events: Events { rx, seen: Vec::new() }, trigger, handle }
    }

    pub fn runner(&self, cfg: RunnerConfig) -> Runner {
        Runner::new(self.store.clone(), cfg)
    }

    /// Runs a runner in drain mode to the end; returns its summary and lines.
    pub async fn drain(&self, runner: Runner) -> (RunSummary, Vec<String>) {
        let mut running = self.start(runner);
        let summary = running.finish().await.unwrap();
        (summary, running.events.lines())
    }
}

pub struct Running {
    pub events: Events,
    pub trigger: ShutdownTrigger,
    pub handle: JoinHandle<Result<RunSummary, RunnerError>>,
}

impl Running {
    pub async fn finish(&mut self) -> Result<RunSummary, RunnerError> {
        let out = tokio::time::timeout(DEADLINE, &mut self.handle)
            .await
            .expect("runner did not finish in time")
            .unwrap();
        self.events.drain();
        out
    }
}

pub struct Events {
    rx: mpsc::UnboundedReceiver<RunnerEvent>,
    pub seen: Vec<RunnerEvent>,
}

impl Events {
    fn drain(&mut self) {
        while let Ok(e) = self.rx.try_recv() {
            self.seen.push(e);
        }
    }

    pub fn lines(&mut self) -> Vec<String> {
        self.drain();
        self.seen.iter().map(ToString::to_string).collect()
    }

    /// Waits for the next event matching `pred` (events before it are kept).
    pub async fn wait_for(
        &mut self,
        what: &str,
        pred: impl Fn(&RunnerEvent) -> bool,
    ) -> RunnerEvent {
        let found = tokio::time::timeout(DEADLINE, async {
            loop {
                match self.rx.recv().await {
                    Some(e) => {
                        self.seen.push(e.clone());
                        if pred(&e) {
                            return e;
                        }
                    }
                    None => panic!("runner ended before {what}; saw {:?}", self.seen),
                }
            }
        })
        .await;
        match found {
            Ok(e) => e,
            Err(_) => panic!("timed out waiting for {what}; saw {:?}", self.seen),
        }
    }
}

/// Polls `check` until it holds, failing the test after the deadline.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(DEADLINE, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for {what}");
}

/// Waits for a file to exist and hold a complete line.
pub async fn read_when_written(path: &Path) -> String {
    eventually(&format!("{} to be written", path.display()), || {
        std::fs::read_to_string(path).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    std::fs::read_to_string(path).unwrap()
}

/// Whether a process is still alive (a zombie is not).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s.rsplit_once(')').map(|(_, r)| r.trim_start().chars().next());
        !matches!(state, Some(Some('Z' | 'X')))
    })
}

/// A judge that calls every owner dead: another owner may take any job.
pub struct AlwaysGone;

impl LivenessJudge for AlwaysGone {
    fn judge(&self, _lease: &Lease) -> Liveness {
        Liveness::Gone
    }
}

pub fn drain_mode(mut cfg: RunnerConfig, mode: Mode) -> RunnerConfig {
    cfg.mode = mode;
    cfg
}

/// A hook run before a store call; an `Err` is answered instead of calling.
pub type Hook = Box<dyn Fn() -> Result<(), slothqueue_core::StoreError> + Send + Sync>;

/// Delegates every call to a real store, running a hook before `claim` and
/// `complete` (both also before `settle_and_claim`, which the runner uses
/// for a complete followed by a claim): how the tests inject a busy file or
/// a death at a chosen step without re-writing the whole trait per test.
pub struct Intercepted {
    pub inner: Arc<dyn Store>,
    pub before_claim: Hook,
    pub before_complete: Hook,
    /// Run before `settle_and_claim` only, after the other two hooks.
    pub before_settle_and_claim: Hook,
    /// Run before every write that ends an attempt: `complete`, `fail`,
    /// `release`, `settle_and_claim` (after the hooks above).
    pub before_ending: Hook,
    /// Run before `fire_schedules`.
    pub before_fire: Hook,
    /// Run after `claim` and `settle_and_claim` went through: an error here
    /// is their answer lost on its way back, the claim standing in the
    /// store all the same (a server gone mid-call).
    pub after_claim: Hook,
    /// Run after every write that ends an attempt went through: an error
    /// here is its answer lost on the way back, the ending committed all
    /// the same.
    pub after_ending: Hook,
    /// How many `settle_and_claim` calls reached the real store.
    pub settle_and_claims: std::sync::atomic::AtomicU32,
    /// How many `next_due` calls (one per look at the queue) were made.
    pub next_dues: std::sync::atomic::AtomicU32,
    /// How many runner records were written.
    pub put_runners: std::sync::atomic::AtomicU32,
    /// How many looks at jobs (`get`, `list`) have returned: a test waits
    /// on it until a waiter has looked, instead of sleeping.
    pub looks: tokio::sync::watch::Sender<u64>,
    /// The files to name for a watch instead of the real store's.
    pub watched_files: Option<Vec<PathBuf>>,
    /// While `true`, every call a runner makes of a job (claims, heartbeats,
    /// reads, endings, runner records, `next_due`) waits: a store cut off
    /// by a partition, where nothing fails and nothing answers (S26).
    pub frozen: tokio::sync::watch::Sender<bool>,
}

impl Intercepted {
    /// Hooks that let every call through.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Intercepted {
            inner,
            before_claim: Box::new(|| Ok(())),
            before_complete: Box::new(|| Ok(())),
            before_settle_and_claim: Box::new(|| Ok(())),
            before_ending: Box::new(|| Ok(())),
            before_fire: Box::new(|| Ok(())),
            after_claim: Box::new(|| Ok(())),
            after_ending: Box::new(|| Ok(())),
            settle_and_claims: std::sync::atomic::AtomicU32::new(0),
            next_dues: std::sync::atomic::AtomicU32::new(0),
            put_runners: std::sync::atomic::AtomicU32::new(0),
            looks: tokio::sync::watch::channel(0).0,
            watched_files: None,
            frozen: tokio::sync::watch::channel(false).0,
        }
    }

    /// Waits while the store is [`Intercepted::frozen`].
    async fn thawed(&self) {
        let mut frozen = self.frozen.subscribe();
        let _ = frozen.wait_for(|f| !*f).await;
    }
}

mod intercepted {
    use std::sync::atomic::Ordering;

    use async_trait::async_trait;
    use slothqueue_core::machine::{Completion, Failure, HeartbeatAck};
    use slothqueue_core::{
        ClaimRequest, Claimed, Event, Fence, Job, JobId, ListFilter, NewJob, PurgeFilter, Pushed,
        RunnerRecord, SettledAndClaimed, Settlement, Stats, Store, StoreError, Timestamp,
    };

    use super::Intercepted;

    #[async_trait]
    impl Store for Intercepted {
        async fn put_schedule(
            &self,
            new: &slothqueue_core::NewSchedule,
            now: Timestamp,
        ) -> Result<slothqueue_core::PutSchedule, StoreError> {
            self.inner.put_schedule(new, now).await
        }
        async fn schedules(&self) -> Result<Vec<slothqueue_core::Schedule>, StoreError> {
            self.inner.schedules().await
        }
        async fn change_schedule(
            &self,
            key: &str,
            change: &slothqueue_core::ScheduleChange,
            now: Timestamp,
        ) -> Result<Option<slothqueue_core::Schedule>, StoreError> {
            self.inner.change_schedule(key, change, now).await
        }
        async fn fire_schedules(
            &self,
            now: Timestamp,
        ) -> Result<slothqueue_core::Ticks, StoreError> {
            (self.before_fire)()?;
            self.inner.fire_schedules(now).await
        }
        async fn restore_schedules(
            &self,
            schedules: Vec<slothqueue_core::Schedule>,
        ) -> Result<(), StoreError> {
            self.inner.restore_schedules(schedules).await
        }

        async fn note_attempt(
            &self,
            id: JobId,
            fence: &Fence,
            note: &slothqueue_core::AttemptNote,
            now: Timestamp,
        ) -> Result<Job, StoreError> {
            self.inner.note_attempt(id, fence, note, now).await
        }
        async fn hold(
            &self,
            id: JobId,
            stamp: slothqueue_core::Stamp,
            now: Timestamp,
        ) -> Result<Job, StoreError> {
            self.inner.hold(id, stamp, now).await
        }
        async fn release_hold(
            &self,
            id: JobId,
            by: &str,
            now: Timestamp,
        ) -> Result<Job, StoreError> {
            self.inner.release_hold(id, by, now).await
        }
        async fn edit(
            &self,
            id: JobId,
            edit: &slothqueue_core::JobEdit,
            now: Timestamp,
        ) -> Result<Job, StoreError> {
            self.inner.edit(id, edit, now).await
        }
        async fn clone_job(
            &self,
            id: JobId,
            edit: &slothqueue_core::JobEdit,
            now: Timestamp,
        ) -> Result<Job, StoreError> {
            self.inner.clone_job(id, edit, now).await
        }
        async fn lanes(&self) -> Result<slothqueue_core::Lanes, StoreError> {
            self.inner.lanes().await
        }
        async fn change_lane(
            &self,
            scope: &slothqueue_core::LaneScope,
            change: &slothqueue_core::LaneChange,
        ) -> Result<slothqueue_core::Lanes, StoreError> {
            self.inner.change_lane(scope, change).await
        }
        async fn queue_counts(
            &self,
            now: Timestamp,
        ) -> Result<Vec<slothqueue_core::QueueCounts>, StoreError> {
            self.inner.queue_counts(now).await
        }
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
            request: &ClaimRequest,
            now: Timestamp,
        ) -> Result<Option<Claimed>, StoreError> {
            self.thawed().await;
            (self.before_claim)()?;
            let claimed = self.inner.claim(request, now).await?;
            (self.after_claim)()?;
            Ok(claimed)
        }
        async fn heartbeat(
            &self,
            id: JobId,
            fence: &Fence,
            child_pgid: Option<i32>,
            now: Timestamp,
        ) -> Result<HeartbeatAck, StoreError> {
            self.thawed().await;
            self.inner.heartbeat(id, fence, child_pgid, now).await
        }
        async fn complete(
            &self,
            id: JobId,
            fence: &Fence,
            done: Completion,
            now: Timestamp,
        ) -> Result<Job, StoreError> {
            self.thawed().await;
            (self.before_complete)()?;
            (self.before_ending)()?;
            let job = self.inner.complete(id, fence, done, now).await?;
            (self.after_ending)()?;
            Ok(job)
        }
        async fn fail(
            &self,
            id: JobId,
            fence: &Fence,
            failure: Failure,
            now: Timestamp,
        ) -> Result<Job, StoreError> {
            self.thawed().await;
            (self.before_ending)()?;
            let job = self.inner.fail(id, fence, failure, now).await?;
            (self.after_ending)()?;
            Ok(job)
        }
        async fn settle_and_claim(
            &self,
            id: JobId,
            fence: &Fence,
            settlement: Settlement,
            next: &ClaimRequest,
            now: Timestamp,
        ) -> Result<SettledAndClaimed, StoreError> {
            self.thawed().await;
            if matches!(settlement, Settlement::Complete(_)) {
                (self.before_complete)()?;
            }
            (self.before_claim)()?;
            (self.before_settle_and_claim)()?;
            (self.before_ending)()?;
            self.settle_and_claims.fetch_add(1, Ordering::SeqCst);
            let settled = self.inner.settle_and_claim(id, fence, settlement, next, now).await?;
            (self.after_ending)()?;
            (self.after_claim)()?;
            Ok(settled)
        }
        async fn release(
            &self,
            id: JobId,
            fence: &Fence,
            now: Timestamp,
        ) -> Result<Job, StoreError> {
            self.thawed().await;
            (self.before_ending)()?;
            let job = self.inner.release(id, fence, now).await?;
            (self.after_ending)()?;
            Ok(job)
        }
        async fn cancel(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
            self.inner.cancel(id, now).await
        }
        async fn retry(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
            self.inner.retry(id, now).await
        }
        async fn dependents(&self, id: JobId) -> Result<Vec<JobId>, StoreError> {
            self.inner.dependents(id).await
        }
        async fn get(&self, id: JobId) -> Result<Job, StoreError> {
            self.thawed().await;
            let job = self.inner.get(id).await;
            self.looks.send_modify(|n| *n += 1);
            job
        }
        async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
            self.inner.events(id).await
        }
        async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
            let jobs = self.inner.list(filter).await;
            self.looks.send_modify(|n| *n += 1);
            jobs
        }
        async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError> {
            self.inner.stats(now).await
        }
        async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
            self.thawed().await;
            self.next_dues.fetch_add(1, Ordering::Relaxed);
            self.inner.next_due().await
        }
        async fn reclaim_dead(
            &self,
            attempts: &[(JobId, Fence)],
            now: Timestamp,
        ) -> Result<Vec<Job>, StoreError> {
            self.inner.reclaim_dead(attempts, now).await
        }
        async fn purge(&self, filter: &PurgeFilter) -> Result<Vec<JobId>, StoreError> {
            self.inner.purge(filter).await
        }
        async fn restore(&self, job: Job, events: Vec<Event>) -> Result<(), StoreError> {
            self.inner.restore(job, events).await
        }
        async fn restore_many(&self, jobs: Vec<(Job, Vec<Event>)>) -> Result<(), StoreError> {
            self.inner.restore_many(jobs).await
        }
        async fn put_runner(&self, record: &RunnerRecord) -> Result<(), StoreError> {
            self.thawed().await;
            self.put_runners.fetch_add(1, Ordering::Relaxed);
            self.inner.put_runner(record).await
        }
        async fn remove_runner(&self, owner_id: &str) -> Result<(), StoreError> {
            self.inner.remove_runner(owner_id).await
        }
        async fn runners(&self) -> Result<Vec<RunnerRecord>, StoreError> {
            self.inner.runners().await
        }
        fn watched_files(&self) -> Vec<std::path::PathBuf> {
            self.watched_files.clone().unwrap_or_else(|| self.inner.watched_files())
        }
    }
}
