//! The runner loop: pick → gate → claim → execute with heartbeats → record
//! → cooldown.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use slothqueue_core::{
    ClaimFilter, ClaimRequest, Claimed, Clock, Completion, Failure, Fence, Job, JobId, JobState,
    ListFilter, Liveness, LivenessJudge, Owner, Reclaim, RunnerActivity, RunnerRecord, SHELL_KIND,
    Settlement, Store, StoreError, SystemClock, Timestamp,
};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::error::RunnerError;
use crate::event::{Reporter, RetryPlan, RunnerEvent};
use crate::exec::{
    ExecContext, ExecOutcome, Executor, HandlerDirExecutor, ProcessSpec, ShellExecutor,
    StopListener, StopReason, StopRequest, run_process,
};
use crate::fmt::format_duration;
use crate::gate::Gate;
use crate::idle::IdleTimer;
use crate::owner::{ProcJudge, this_process_owner};
use crate::process::{
    lease_marker, marked_groups, may_signal_group, orphan_group_is_jobs, stop_group,
};
use crate::signal::ShutdownSignal;

/// Default cap of one job's log file.
pub(crate) const DEFAULT_LOG_CAP: u64 = 1 << 20;
/// Default time between TERM and KILL.
pub(crate) const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);
/// How long past its kill grace an executor may take to stop before the
/// runner drops it (a KILLed group is waited for up to 5 s, its last output
/// up to 2 s).
const ABANDON_MARGIN: Duration = Duration::from_secs(10);
/// How often the loop looks for dead owners' jobs between claims. A claim
/// never takes such a job (see [`ClaimJudge`]), so sweeping less often only
/// delays their return; sweeping before every claim cost a read of every
/// running job per job. A drain that finds nothing to claim sweeps at once.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How often an idle runner rewrites an unchanged idle record, so that
/// `status` still hears from it (a runner on another host counts as live
/// for 5 minutes after its last record). More often would be a write, and
/// on redb an fsync, every poll of a machine with nothing to do.
const IDLE_RECORD_REFRESH: Duration = Duration::from_secs(60);
/// How long a job runs before the runner records its process group in the
/// lease and `Running` in its runner record. Until then a successor finds
/// the job's processes by their [`LEASE_VAR`](crate::process::LEASE_VAR)
/// marker if this runner dies; recording at once cost a write (an fsync'd
/// commit on redb) for every job, though most short jobs end before it.
const SETTLE: Duration = Duration::from_millis(200);
/// How much earlier than its job's claim an orphaned group's leader may
/// seem to have started and still be the job's: process start times derive
/// from the boot time, which `/proc/stat` gives in whole seconds and which
/// drifts from the wall clock with NTP adjustments over a long uptime.
const ORPHAN_START_SLACK: Duration = Duration::from_secs(30);

/// When the runner stops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Run everything that is due, then exit (the default).
    #[default]
    Drain,
    /// Run at most one job.
    Once,
    /// Never exit on its own: when nothing is due, sleep until the next due
    /// time, a poll interval, or a wake-up.
    Follow,
}

/// How a runner behaves. [`RunnerConfig::new`] gives the defaults; set
/// fields directly.
pub struct RunnerConfig {
    /// Drain, once or follow.
    pub mode: Mode,
    /// Queues served; empty for all.
    pub queues: Vec<String>,
    /// Checked in order before each job; all must be open.
    pub gates: Vec<Box<dyn Gate>>,
    /// Wait between gate checks while a gate holds (default 1 s).
    pub check_interval: Duration,
    /// Pause between one job's end and the next one's start (default 0).
    pub cooldown: Duration,
    /// In follow mode, look for work at least this often even when nothing
    /// is due: other processes add jobs without waking us (default 5 s).
    pub poll_interval: Duration,
    /// Wait before retrying when the queue file is busy (default 1 s).
    pub busy_pause: Duration,
    /// Heartbeat period; `None` for a third of the lease the claim gave.
    pub heartbeat_interval: Option<Duration>,
    /// Between heartbeats, how often the running job is read back to see a
    /// requested cancel or a lost lease (default 1 s). A read costs no
    /// fsync, unlike a heartbeat, so a cancel lands in about a second
    /// without a durable write every second.
    pub cancel_check_interval: Duration,
    /// A shell command run after each job (`--on-finish`).
    pub on_finish: Option<String>,
    /// How long `on_finish` may run before its group is killed (default 60 s).
    pub on_finish_timeout: Duration,
    /// Where per-job logs go (`<log_dir>/<id>.log`).
    pub log_dir: PathBuf,
    /// Most bytes of output kept per job (default 1 MiB).
    pub log_cap_bytes: u64,
    /// Time between TERM and KILL when stopping a job (default 2 s).
    pub kill_grace: Duration,
    /// Wall time for the store.
    pub clock: Arc<dyn Clock>,
    /// Judges other owners' liveness (default: [`ProcJudge`]).
    pub judge: Arc<dyn LivenessJudge>,
    /// This runner's identity (default: [`this_process_owner`]).
    pub owner: Owner,
}

impl RunnerConfig {
    /// The defaults: drain all queues, no gates, logs in `log_dir`.
    pub fn new(log_dir: impl Into<PathBuf>) -> Self {
        RunnerConfig {
            mode: Mode::Drain,
            queues: Vec::new(),
            gates: Vec::new(),
            check_interval: Duration::from_secs(1),
            cooldown: Duration::ZERO,
            poll_interval: Duration::from_secs(5),
            busy_pause: Duration::from_secs(1),
            heartbeat_interval: None,
            cancel_check_interval: Duration::from_secs(1),
            on_finish: None,
            on_finish_timeout: Duration::from_secs(60),
            log_dir: log_dir.into(),
            log_cap_bytes: DEFAULT_LOG_CAP,
            kill_grace: DEFAULT_KILL_GRACE,
            clock: Arc::new(SystemClock),
            judge: Arc::new(ProcJudge::new()),
            owner: this_process_owner(),
        }
    }
}

/// What a run did. Failed counts attempts, not jobs: a job that failed
/// twice and then succeeded counts two failed and one done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Jobs completed.
    pub done: u32,
    /// Attempts that failed (including timeouts), retried or not.
    pub failed: u32,
    /// Jobs cancelled while running.
    pub cancelled: u32,
    /// Attempts whose lease was lost (killed, not completed).
    pub lost: u32,
    /// Jobs handed back to pending by a shutdown.
    pub released: u32,
    /// The run ended because of a shutdown request.
    pub interrupted: bool,
}

impl RunSummary {
    /// The process exit code the CLI uses: 130 when interrupted, 1 when any
    /// attempt failed or lost its lease, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.interrupted {
            130
        } else if self.failed > 0 || self.lost > 0 {
            1
        } else {
            0
        }
    }
}

/// Runs jobs from a store, one at a time.
pub struct Runner {
    store: Arc<dyn Store>,
    config: RunnerConfig,
    executors: BTreeMap<String, Arc<dyn Executor>>,
    waker: Arc<Notify>,
}

impl Runner {
    /// A runner over `store`. It runs `shell` jobs ([`ShellExecutor`]) unless
    /// told otherwise with [`Runner::unregister`].
    pub fn new(store: Arc<dyn Store>, config: RunnerConfig) -> Runner {
        let mut executors: BTreeMap<String, Arc<dyn Executor>> = BTreeMap::new();
        executors.insert(SHELL_KIND.to_owned(), Arc::new(ShellExecutor));
        Runner { store, config, executors, waker: Arc::new(Notify::new()) }
    }

    /// Runs jobs of `kind` with `executor` (replacing any before).
    pub fn register(&mut self, kind: impl Into<String>, executor: Arc<dyn Executor>) {
        self.executors.insert(kind.into(), executor);
    }

    /// Runs every kind a handler directory has an executable for, except
    /// `shell`: a file named `shell` must not take over shell jobs.
    pub fn register_handlers(&mut self, dir: HandlerDirExecutor) {
        let dir = Arc::new(dir);
        for kind in dir.kinds() {
            if kind != SHELL_KIND {
                self.executors.insert(kind.clone(), dir.clone());
            }
        }
    }

    /// Stops running jobs of `kind`.
    pub fn unregister(&mut self, kind: &str) {
        self.executors.remove(kind);
    }

    /// The kinds this runner claims.
    pub fn kinds(&self) -> Vec<String> {
        self.executors.keys().cloned().collect()
    }

    /// Wakes a runner in follow mode at once (the HTTP server calls it after
    /// an enqueue). A wake-up while busy is remembered for the next wait.
    pub fn waker(&self) -> Arc<Notify> {
        self.waker.clone()
    }

    /// Runs until the mode says stop or `shutdown` fires, reporting every
    /// event to `reporter`. The runner's record is removed from the store
    /// however the run ends.
    ///
    /// Descriptors this process inherited without close-on-exec become
    /// close-on-exec: no job may inherit them, and sealing them once here
    /// spares every job's spawn a fork of the whole runner. Signals it
    /// inherited as ignored (but SIGHUP, SIGPIPE and SIGCHLD) are caught
    /// and dropped from then on, for the same reason: still ignored by the
    /// runner, not inherited by its jobs.
    pub async fn run(
        self,
        reporter: impl Reporter + 'static,
        shutdown: ShutdownSignal,
    ) -> Result<RunSummary, RunnerError> {
        crate::process::seal_inherited_fds();
        crate::process::catch_inherited_ignores();
        let started_at = self.config.clock.now();
        let mut run = Run {
            store: self.store,
            cfg: self.config,
            executors: self.executors,
            waker: self.waker,
            reporter: Arc::new(reporter),
            shutdown,
            summary: RunSummary::default(),
            started_at,
            busy_warned: false,
            idle_timer: IdleTimer::default(),
            idle_recorded: Mutex::new(None),
        };
        let result = run.main_loop().await;
        if let Err(e) = run.store.remove_runner(&run.cfg.owner.id).await {
            run.warn(format!("cannot remove this runner's record: {e}"));
        }
        result?;
        run.reporter.report(RunnerEvent::Finished(run.summary));
        Ok(run.summary)
    }
}

/// What the heartbeat task tells the job's driver.
enum HeartbeatNews {
    LeaseLost,
    CancelRequested,
    Warning(String),
}

/// One run's state.
struct Run {
    store: Arc<dyn Store>,
    cfg: RunnerConfig,
    executors: BTreeMap<String, Arc<dyn Executor>>,
    waker: Arc<Notify>,
    reporter: Arc<dyn Reporter>,
    shutdown: ShutdownSignal,
    summary: RunSummary,
    started_at: Timestamp,
    busy_warned: bool,
    idle_timer: IdleTimer,
    /// The idle record last written (what it said, when, and the summary
    /// then); cleared by any other record. See [`IDLE_RECORD_REFRESH`].
    idle_recorded: Mutex<Option<(RunnerActivity, Instant, RunSummary)>>,
}

impl Run {
    fn report(&self, event: RunnerEvent) {
        self.reporter.report(event);
    }

    fn warn(&self, message: String) {
        self.report(RunnerEvent::Warning { message });
    }

    fn now(&self) -> Timestamp {
        self.cfg.clock.now()
    }

    async fn main_loop(&mut self) -> Result<(), RunnerError> {
        self.record(RunnerActivity::Starting).await;
        self.sweep_dead().await?;
        let mut last_sweep = Instant::now();
        let mut last_end: Option<Instant> = None;
        // A job claimed in the same transaction that settled the previous
        // one (see `may_chain`): it runs next, without another claim.
        let mut chained: Option<Claimed> = None;
        loop {
            if self.shutdown.is_requested() {
                if let Some(claimed) = chained.take() {
                    self.hand_back(&claimed).await?;
                }
                self.summary.interrupted = true;
                return Ok(());
            }
            if let Some(claimed) = chained.take() {
                chained = self.run_job(claimed, last_sweep).await?;
                last_end = Some(Instant::now());
                continue;
            }
            let store = self.store.clone();
            let Some(next) = self.retrying("read the queue", || store.next_due()).await? else {
                continue;
            };
            let now = self.now();
            if next.is_none_or(|t| t > now) {
                match self.cfg.mode {
                    Mode::Follow => {
                        self.idle(next).await;
                        continue;
                    }
                    Mode::Drain | Mode::Once => return Ok(()),
                }
            }
            // Not even a zero sleep: a timer rounds up to tokio's next
            // millisecond tick, about 1 ms per job with no cooldown.
            if let Some(until) = last_end.map(|end| end + self.cfg.cooldown) {
                if until > Instant::now() && !self.sleep_until(until).await {
                    continue; // shutdown: the loop's head notices
                }
            }
            if !self.pass_gates().await {
                continue;
            }
            if last_sweep.elapsed() >= SWEEP_EVERY {
                self.sweep_dead().await?;
                last_sweep = Instant::now();
            }
            let Some(claimed) = self.claim().await? else { continue };
            let Some(claimed) = claimed else {
                // Something is due but not for us (another queue or kind),
                // or another runner took it.
                match self.cfg.mode {
                    Mode::Follow => {
                        self.idle(None).await;
                        continue;
                    }
                    // A claim leaves a dead owner's job to the sweep (see
                    // `ClaimJudge`): one whose owner died since the last
                    // sweep is taken back now rather than left behind.
                    Mode::Drain | Mode::Once => {
                        last_sweep = Instant::now();
                        if self.sweep_dead().await? > 0 {
                            continue;
                        }
                        return Ok(());
                    }
                }
            };
            chained = self.run_job(claimed, last_sweep).await?;
            last_end = Some(Instant::now());
            if self.cfg.mode == Mode::Once {
                if self.shutdown.is_requested() {
                    self.summary.interrupted = true;
                }
                return Ok(());
            }
        }
    }

    /// What this runner claims: jobs of its queues and of the kinds it can
    /// run, and of a running job only an expired lease, never a dead
    /// owner's job: a claim cannot first kill what is left of the dead
    /// attempt, so that job is the sweep's ([`Run::sweep_dead`]), and a job
    /// never runs twice at once, even when its owner dies between a sweep
    /// and a claim.
    fn claim_request(&self) -> ClaimRequest {
        ClaimRequest::new(self.cfg.owner.clone(), self.cfg.judge.clone())
            .filter(ClaimFilter {
                queues: self.cfg.queues.clone(),
                kinds: Some(self.executors.keys().cloned().collect()),
            })
            .reclaim(Reclaim::ExpiredOnly)
    }

    /// `Some(claim result)`, or `None` when a shutdown cut the retries short.
    async fn claim(&mut self) -> Result<Option<Option<Claimed>>, RunnerError> {
        let request = self.claim_request();
        let store = self.store.clone();
        let clock = self.cfg.clock.clone();
        self.retrying("claim a job", || store.claim(&request, clock.now())).await
    }

    /// Calls `op` until it succeeds, waiting out temporary errors (a busy
    /// queue file, a full disk) with one warning per streak. `Ok(None)` when
    /// a new shutdown request arrived while waiting.
    async fn retrying<T, F, Fut>(&mut self, what: &str, op: F) -> Result<Option<T>, RunnerError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let seen = self.shutdown.count();
        loop {
            match op().await {
                Ok(v) => {
                    self.busy_warned = false;
                    return Ok(Some(v));
                }
                Err(e) if e.is_temporary() => {
                    if !self.busy_warned {
                        self.busy_warned = true;
                        self.warn(format!(
                            "cannot {what}: {e}; retrying every {}",
                            format_duration(self.cfg.busy_pause)
                        ));
                    }
                    let mut shutdown = self.shutdown.clone();
                    tokio::select! {
                        () = tokio::time::sleep(self.cfg.busy_pause) => {}
                        () = shutdown.reached(seen + 1) => return Ok(None),
                    }
                }
                Err(e) => return Err(RunnerError::store(format!("cannot {what}"), e)),
            }
        }
    }

    /// Records what this runner does, for `status`. Failing to is not worth
    /// stopping for.
    async fn record(&self, activity: RunnerActivity) {
        if !matches!(activity, RunnerActivity::Idle { .. }) {
            *self.idle_recorded.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
        let record = RunnerRecord {
            owner: self.cfg.owner.clone(),
            queues: self.cfg.queues.clone(),
            started_at: self.started_at,
            updated_at: self.now(),
            activity,
        };
        if let Err(e) = self.store.put_runner(&record).await {
            if !e.is_temporary() {
                self.warn(format!("cannot record this runner's activity: {e}"));
            }
        }
    }

    /// Sleeps until `t` unless a shutdown is requested; `false` then.
    async fn sleep_until(&mut self, t: Instant) -> bool {
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            () = tokio::time::sleep_until(t) => true,
            () = shutdown.requested() => false,
        }
    }

    /// Follow mode with nothing to do: sleep until the next due time (or a
    /// poll interval, whichever is first), a wake-up or a shutdown. The
    /// sleep is a kernel timer ([`IdleTimer`]): one wake-up per poll.
    async fn idle(&mut self, next_due: Option<Timestamp>) {
        let now = self.now();
        let poll_until = now.saturating_add(self.cfg.poll_interval);
        let until = match next_due {
            Some(t) if t > now => t.min(poll_until),
            _ => poll_until,
        };
        // The record names a job's due time, not the next poll, so that
        // it stays the same from poll to poll and need not be rewritten.
        let activity = RunnerActivity::Idle { until: next_due.filter(|t| *t > now) };
        let unchanged = matches!(
            &*self.idle_recorded.lock().unwrap_or_else(PoisonError::into_inner),
            Some((said, at, summary))
                if *said == activity && *summary == self.summary && at.elapsed() < IDLE_RECORD_REFRESH
        );
        if !unchanged {
            self.record(activity.clone()).await;
            *self.idle_recorded.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((activity, Instant::now(), self.summary));
        }
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            () = self.idle_timer.sleep(until.duration_since(now)) => {}
            () = self.waker.notified() => {}
            () = shutdown.requested() => {}
        }
    }

    /// Whether the attempt ending now may be settled together with the
    /// next claim ([`Store::settle_and_claim`], one commit instead of two):
    /// only when the main loop would claim right after with nothing in
    /// between. Not in `once` mode, with a cooldown or an on-finish command
    /// (each comes between the two), once a shutdown was asked for or the
    /// sweep is due (it must come first), nor while a gate is closed (the
    /// main loop then waits at the gates as usual). The gates are read here
    /// instead of before the claim, so each job still costs one reading.
    async fn may_chain(&self, last_sweep: Instant) -> bool {
        if self.cfg.mode == Mode::Once
            || !self.cfg.cooldown.is_zero()
            || self.cfg.on_finish.is_some()
            || self.shutdown.is_requested()
            || last_sweep.elapsed() >= SWEEP_EVERY
        {
            return false;
        }
        for gate in &self.cfg.gates {
            if !gate.check().await.open {
                return false;
            }
        }
        true
    }

    /// Records the end of an attempt; with `chain`, claims the next job in
    /// the same transaction. `None` when a shutdown cut the retries short.
    async fn settle(
        &mut self,
        id: JobId,
        fence: &Fence,
        settlement: Settlement,
        chain: bool,
    ) -> Result<Option<(Job, Option<Claimed>)>, RunnerError> {
        let what = match settlement {
            Settlement::Complete(_) => "record a completed job",
            Settlement::Fail(_) => "record a failed job",
        };
        let store = self.store.clone();
        let clock = self.cfg.clock.clone();
        if !chain {
            return self
                .retrying(what, || {
                    let (store, settlement, now) = (&store, settlement.clone(), clock.now());
                    async move {
                        match settlement {
                            Settlement::Complete(done) => {
                                store.complete(id, fence, done, now).await
                            }
                            Settlement::Fail(failure) => store.fail(id, fence, failure, now).await,
                        }
                        .map(|job| (job, None))
                    }
                })
                .await;
        }
        let request = self.claim_request();
        self.retrying(what, || {
            let (store, request) = (&store, &request);
            let (settlement, now) = (settlement.clone(), clock.now());
            async move {
                let r = store.settle_and_claim(id, fence, settlement, request, now).await?;
                Ok((r.settled, r.next))
            }
        })
        .await
    }

    /// Returns a chained claim that will not run (a shutdown came after
    /// it), without charging the attempt.
    async fn hand_back(&mut self, claimed: &Claimed) -> Result<(), RunnerError> {
        let store = self.store.clone();
        let clock = self.cfg.clock.clone();
        let (id, fence) = (claimed.job.id, &claimed.fence);
        match self.retrying("release a job", || store.release(id, fence, clock.now())).await {
            Ok(_) | Err(RunnerError::Store { source: StoreError::LeaseLost { .. }, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Waits until every gate is open, reporting each check while one holds.
    /// `false` when a shutdown came first.
    async fn pass_gates(&mut self) -> bool {
        let mut held = vec![false; self.cfg.gates.len()];
        let mut since = None;
        loop {
            let mut closed = None;
            let mut readings = Vec::new();
            for (i, gate) in self.cfg.gates.iter().enumerate() {
                let reading = gate.check().await;
                if !reading.open {
                    closed = Some((i, reading));
                    break;
                }
                readings.push((i, reading));
            }
            let Some((i, reading)) = closed else {
                for (i, reading) in readings {
                    if held[i] {
                        self.report(RunnerEvent::GateOpened { reading: reading.text });
                    }
                }
                return true;
            };
            held[i] = true;
            let since = *since.get_or_insert_with(|| self.now());
            self.report(RunnerEvent::Gated {
                reading: reading.text.clone(),
                wait: self.cfg.check_interval,
            });
            self.record(RunnerActivity::Gated { reading: reading.text, since }).await;
            if !self.sleep_until(Instant::now() + self.cfg.check_interval).await {
                return false;
            }
        }
    }

    /// Reclaims jobs of dead owners on this host, killing each one's
    /// orphaned process group first so that a job never runs twice at once.
    /// Returns how many jobs it took back.
    async fn sweep_dead(&mut self) -> Result<usize, RunnerError> {
        let store = self.store.clone();
        let filter = ListFilter { state: Some(JobState::Running), ..ListFilter::default() };
        let Some(running) = self.retrying("list running jobs", || store.list(&filter)).await?
        else {
            return Ok(0);
        };
        let dead: Vec<&Job> = running
            .iter()
            .filter(|j| j.lease.as_ref().is_some_and(|l| self.cfg.judge.judge(l) == Liveness::Gone))
            .collect();
        if dead.is_empty() {
            return Ok(0);
        }
        let mut killed = Vec::new();
        let mut swept = Vec::new();
        for job in dead {
            self.kill_orphan(job, &mut killed).await;
            swept.extend(job.lease.as_ref().map(|l| (job.id, l.fence())));
        }
        // Exactly the attempts whose orphans were just dealt with: an owner
        // that died since the list waits for the next sweep, so its job is
        // never pending while its processes still run.
        let clock = self.cfg.clock.clone();
        let Some(reclaimed) = self
            .retrying("reclaim jobs of dead runners", || store.reclaim_dead(&swept, clock.now()))
            .await?
        else {
            return Ok(0);
        };
        if !reclaimed.is_empty() {
            self.report(RunnerEvent::Reclaimed {
                jobs: reclaimed.iter().map(|j| j.id).collect(),
                killed_groups: killed,
            });
        }
        Ok(reclaimed.len())
    }

    async fn kill_orphan(&self, job: &Job, killed: &mut Vec<(JobId, i32)>) {
        let Some(lease) = job.lease.as_ref() else { return };
        if let Some(pgid) = lease.child_pgid {
            if orphan_group_is_jobs(pgid, job.started_at, ORPHAN_START_SLACK) {
                stop_group(pgid, None, self.cfg.kill_grace, None).await;
                killed.push((job.id, pgid));
            }
        }
        // The group is not recorded when the owner died right after the
        // spawn, before the heartbeat that records it: the processes
        // marked with this attempt are the job's all the same.
        for pgid in marked_groups(&lease_marker(job.id, &lease.fence())) {
            if may_signal_group(pgid) && !killed.contains(&(job.id, pgid)) {
                stop_group(pgid, None, self.cfg.kill_grace, None).await;
                killed.push((job.id, pgid));
            }
        }
    }

    /// Executes a claimed job under heartbeats and its max runtime, and
    /// records how it ended. Returns the next job when it was claimed in the
    /// same transaction (see [`Run::may_chain`]).
    async fn run_job(
        &mut self,
        claimed: Claimed,
        last_sweep: Instant,
    ) -> Result<Option<Claimed>, RunnerError> {
        let Claimed { job, fence, .. } = claimed;
        crate::failpoint::hit("after_claim");
        let Some(executor) = self.executors.get(&job.kind).cloned() else {
            // The claim filter makes this unreachable; hand the job back.
            self.warn(format!("no executor for kind `{}` of job #{}; released", job.kind, job.id));
            let store = self.store.clone();
            let clock = self.cfg.clock.clone();
            self.retrying("release a job", || store.release(job.id, &fence, clock.now())).await?;
            return Ok(None);
        };
        let started = Instant::now();
        let mut settle_at = Some(started + SETTLE);
        let wall_start = self.now();
        let lease_left = job
            .lease
            .as_ref()
            .map_or(Duration::from_secs(60), |l| l.until.duration_since(wall_start));
        let beat_every =
            self.cfg.heartbeat_interval.unwrap_or(lease_left / 3).max(Duration::from_millis(100));

        let (stop_tx, stop_rx) = watch::channel(None);
        let (pgid_tx, pgid_rx) = watch::channel(None);
        let ctx = ExecContext {
            attempt: fence.attempt,
            stop: StopListener::new(stop_rx),
            pgid: pgid_tx,
            log_dir: self.cfg.log_dir.clone(),
            log_cap: self.cfg.log_cap_bytes,
            kill_grace: self.cfg.kill_grace,
            started_at: wall_start,
            lease_marker: Some(lease_marker(job.id, &fence)),
        };
        let (news_tx, mut news) = mpsc::unbounded_channel();
        let beats = tokio::spawn(heartbeat_loop(
            self.store.clone(),
            self.cfg.clock.clone(),
            job.id,
            fence.clone(),
            Cadence {
                beat: beat_every,
                check: self.cfg.cancel_check_interval.max(Duration::from_millis(50)),
            },
            pgid_rx,
            news_tx,
        ));

        let exec = executor.execute(&job, ctx);
        tokio::pin!(exec);
        let deadline = job.max_runtime.map(|d| started + d);
        let mut stopper =
            Stopper { tx: stop_tx, request: None, abandon_at: None, grace: self.cfg.kill_grace };
        let mut lease_lost = false;
        let mut news_open = true;
        let mut shutdown = self.shutdown.clone();
        let mut signals = 0;
        let outcome = loop {
            tokio::select! {
                out = &mut exec => break Some(out),
                () = sleep_until_opt(deadline), if stopper.request.is_none() => {
                    stopper.stop(StopReason::Timeout, false);
                }
                () = shutdown.reached(signals + 1) => {
                    signals = shutdown.count();
                    self.summary.interrupted = true;
                    if stopper.request.is_none() {
                        self.report(RunnerEvent::ShuttingDown { job: job.id, grace: self.cfg.kill_grace });
                    }
                    if stopper.request.is_none() || signals >= 2 {
                        stopper.stop(StopReason::Shutdown, signals >= 2);
                    }
                }
                got = news.recv(), if news_open => match got {
                    Some(HeartbeatNews::LeaseLost) => {
                        lease_lost = true;
                        stopper.stop(StopReason::LeaseLost, false);
                    }
                    Some(HeartbeatNews::CancelRequested) => stopper.stop(StopReason::Cancelled, false),
                    Some(HeartbeatNews::Warning(message)) => self.warn(message),
                    None => news_open = false,
                },
                () = sleep_until_opt(settle_at) => {
                    settle_at = None;
                    self.record(RunnerActivity::Running { job: job.id }).await;
                }
                () = sleep_until_opt(stopper.abandon_at) => break None,
            }
        };
        beats.abort();
        let elapsed = started.elapsed();
        let outcome = outcome.unwrap_or_else(|| ExecOutcome::Stopped {
            detail: "abandoned: it did not stop when asked".to_owned(),
        });
        if lease_lost {
            self.lost(job.id, elapsed);
            return Ok(None);
        }
        crate::failpoint::hit("before_complete");
        let reason = stopper.request.map(|s| s.reason);
        self.record_outcome(&job, &fence, reason, outcome, elapsed, last_sweep).await
    }

    fn lost(&mut self, id: JobId, elapsed: Duration) {
        self.summary.lost += 1;
        self.report(RunnerEvent::LeaseLost { job: id, elapsed });
    }

    async fn record_outcome(
        &mut self,
        job: &Job,
        fence: &Fence,
        reason: Option<StopReason>,
        outcome: ExecOutcome,
        elapsed: Duration,
        last_sweep: Instant,
    ) -> Result<Option<Claimed>, RunnerError> {
        let store = self.store.clone();
        let clock = self.cfg.clock.clone();
        let id = job.id;
        let failure = match (reason, outcome) {
            (Some(StopReason::Shutdown), ExecOutcome::Stopped { .. }) => {
                let released =
                    self.retrying("release a job", || store.release(id, fence, clock.now())).await;
                match released {
                    Err(RunnerError::Store { source: StoreError::LeaseLost { .. }, .. }) => {
                        self.lost(id, elapsed)
                    }
                    Err(e) => return Err(e),
                    Ok(_) => {
                        self.summary.released += 1;
                        self.report(RunnerEvent::Released { job: id, elapsed });
                    }
                }
                return Ok(None);
            }
            (_, ExecOutcome::Success { result, exit_code }) => {
                let done = Settlement::Complete(Completion { result, exit_code });
                let chain = self.may_chain(last_sweep).await;
                match self.settle(id, fence, done, chain).await {
                    Err(RunnerError::Store { source: StoreError::LeaseLost { .. }, .. }) => {
                        self.lost(id, elapsed)
                    }
                    Err(e) => return Err(e),
                    Ok(None) => {}
                    Ok(Some((after, next))) => {
                        self.summary.done += 1;
                        self.report(RunnerEvent::Done { job: id, elapsed });
                        self.on_finish(&after).await;
                        return Ok(next);
                    }
                }
                return Ok(None);
            }
            (_, ExecOutcome::Failure { error, exit_code }) => Failure { error, exit_code },
            (Some(StopReason::Timeout), ExecOutcome::Stopped { detail }) => Failure {
                error: format!(
                    "timeout: exceeded max runtime of {} ({detail})",
                    format_duration(job.max_runtime.unwrap_or_default())
                ),
                exit_code: None,
            },
            (Some(StopReason::Cancelled), ExecOutcome::Stopped { detail }) => {
                Failure { error: format!("cancelled while running ({detail})"), exit_code: None }
            }
            (Some(StopReason::LeaseLost) | None, ExecOutcome::Stopped { detail }) => {
                Failure { error: detail, exit_code: None }
            }
        };
        let short = match failure.exit_code {
            Some(code) => format!("exit code {code}"),
            None => failure.error.clone(),
        };
        let chain = self.may_chain(last_sweep).await;
        let (after, next) = match self.settle(id, fence, Settlement::Fail(failure), chain).await {
            Err(RunnerError::Store { source: StoreError::LeaseLost { .. }, .. }) => {
                self.lost(id, elapsed);
                return Ok(None);
            }
            Err(e) => return Err(e),
            Ok(None) => return Ok(None),
            Ok(Some(settled)) => settled,
        };
        match after.state {
            JobState::Cancelled => {
                self.summary.cancelled += 1;
                self.report(RunnerEvent::Cancelled { job: id, elapsed });
            }
            JobState::Pending => {
                self.summary.failed += 1;
                let retry = RetryPlan {
                    attempt: after.attempts,
                    max_attempts: after.max_attempts,
                    delay: whole_seconds(after.not_before.duration_since(self.now())),
                };
                self.report(RunnerEvent::Failed {
                    job: id,
                    elapsed,
                    reason: short,
                    retry: Some(retry),
                });
            }
            _ => {
                self.summary.failed += 1;
                self.report(RunnerEvent::Failed { job: id, elapsed, reason: short, retry: None });
            }
        }
        self.on_finish(&after).await;
        Ok(next)
    }

    /// Runs the `--on-finish` command for `job` (as recorded after the
    /// attempt). Its failure is a warning: a notification must never decide
    /// a job's fate or stop the runner.
    async fn on_finish(&mut self, job: &Job) {
        let Some(command) = self.cfg.on_finish.clone() else { return };
        let env = vec![
            ("SLOTHQUEUE_STATE".to_owned(), job.state.as_str().to_owned()),
            (
                "SLOTHQUEUE_EXIT_CODE".to_owned(),
                job.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            ),
            ("SLOTHQUEUE_RESULT".to_owned(), job.result.clone().unwrap_or_default()),
            ("SLOTHQUEUE_ERROR".to_owned(), job.last_error.clone().unwrap_or_default()),
        ];
        let spec = ProcessSpec {
            program: PathBuf::from("sh"),
            args: vec!["-c".into(), command.clone().into()],
            cwd: None,
            env,
            stdin: None,
            what: format!("on-finish: {command}"),
        };
        let (stop_tx, stop_rx) = watch::channel(None);
        let (pgid_tx, _) = watch::channel(None);
        let ctx = ExecContext {
            attempt: job.attempts,
            stop: StopListener::new(stop_rx),
            pgid: pgid_tx,
            log_dir: self.cfg.log_dir.clone(),
            log_cap: self.cfg.log_cap_bytes,
            kill_grace: self.cfg.kill_grace,
            started_at: self.now(),
            lease_marker: None,
        };
        let run = run_process(job, spec, ctx);
        tokio::pin!(run);
        let deadline = Instant::now() + self.cfg.on_finish_timeout;
        let mut shutdown = self.shutdown.clone();
        let mut signals = shutdown.count();
        let mut stopping = false;
        let outcome = loop {
            tokio::select! {
                out = &mut run => break out,
                () = tokio::time::sleep_until(deadline), if !stopping => {
                    stopping = true;
                    stop_tx.send_replace(Some(StopRequest { reason: StopReason::Timeout, immediate: false }));
                }
                () = shutdown.reached(signals + 1) => {
                    signals = shutdown.count();
                    self.summary.interrupted = true;
                    stop_tx.send_replace(Some(StopRequest { reason: StopReason::Shutdown, immediate: stopping }));
                    stopping = true;
                }
            }
        };
        let problem = match outcome {
            ExecOutcome::Success { .. } => return,
            ExecOutcome::Failure { error, .. } => error,
            ExecOutcome::Stopped { detail } => format!("stopped ({detail})"),
        };
        self.warn(format!("on-finish command for job #{} failed: {problem}", job.id));
    }
}

/// The driver's side of a stop: the first reason wins (it decides how the
/// attempt is recorded); a later request can only make it immediate.
struct Stopper {
    tx: watch::Sender<Option<StopRequest>>,
    request: Option<StopRequest>,
    abandon_at: Option<Instant>,
    grace: Duration,
}

impl Stopper {
    fn stop(&mut self, reason: StopReason, immediate: bool) {
        let req = match self.request {
            Some(r) if r.immediate || !immediate => return,
            Some(r) => StopRequest { immediate: true, ..r },
            None => StopRequest { reason, immediate },
        };
        self.request = Some(req);
        self.tx.send_replace(Some(req));
        let by =
            Instant::now() + if immediate { Duration::ZERO } else { self.grace } + ABANDON_MARGIN;
        self.abandon_at = Some(self.abandon_at.map_or(by, |a| a.min(by)));
    }
}

/// A retry delay as the user reads it: backoff is whole seconds, and the few
/// milliseconds spent recording the failure must not show as `1.997s`.
fn whole_seconds(d: Duration) -> Duration {
    if d < Duration::from_secs(1) {
        d
    } else {
        Duration::from_secs((d.as_millis() as u64 + 500) / 1000)
    }
}

async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// How often the heartbeat task writes (a heartbeat) and reads (the check
/// for a cancel or a lost lease).
struct Cadence {
    beat: Duration,
    check: Duration,
}

/// Extends the lease every `every` while the job runs, and records the
/// job's process group once it is known and the job has run for
/// [`SETTLE`] (so that a successor can kill it if this runner dies). Tells
/// the driver when the lease is lost or a cancel was requested. The driver
/// aborts this task when the job has ended.
async fn heartbeat_loop(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    id: JobId,
    fence: Fence,
    cadence: Cadence,
    mut pgid: watch::Receiver<Option<i32>>,
    news: mpsc::UnboundedSender<HeartbeatNews>,
) {
    let Cadence { beat: every, check: check_every } = cadence;
    let mut recorded: Option<i32> = None;
    let mut pgid_open = true;
    let mut next = Instant::now() + every;
    let mut next_check = Instant::now() + check_every;
    let mut cancel_told = false;
    let settle = Instant::now() + SETTLE;
    let mut pgid_waiting = false;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = tokio::time::sleep_until(settle), if pgid_waiting => pgid_waiting = false,
            () = tokio::time::sleep_until(next_check), if next_check < next => {
                next_check = Instant::now() + check_every;
                // A read, not a write: only look for news between beats.
                match store.get(id).await {
                    Ok(job) => {
                        let ours = job.lease.as_ref().is_some_and(|l| l.fence() == fence);
                        if !ours {
                            let _ = news.send(HeartbeatNews::LeaseLost);
                            return;
                        }
                        if job.cancel_requested && !cancel_told {
                            cancel_told = true;
                            let _ = news.send(HeartbeatNews::CancelRequested);
                        }
                    }
                    Err(StoreError::NotFound(_)) => {
                        let _ = news.send(HeartbeatNews::LeaseLost);
                        return;
                    }
                    // Busy and the like: the next beat will tell.
                    Err(_) => {}
                }
                continue;
            }
            changed = pgid.changed(), if pgid_open => {
                if changed.is_err() {
                    pgid_open = false;
                    continue;
                }
                if *pgid.borrow() == recorded {
                    continue;
                }
                if Instant::now() < settle {
                    pgid_waiting = true;
                    continue;
                }
            }
        }
        let current = *pgid.borrow();
        let send = current.filter(|p| Some(*p) != recorded);
        match store.heartbeat(id, &fence, send, clock.now()).await {
            Ok(ack) => {
                if send.is_some() {
                    recorded = send;
                }
                if ack.cancel_requested && !cancel_told {
                    cancel_told = true;
                    let _ = news.send(HeartbeatNews::CancelRequested);
                }
            }
            Err(StoreError::LeaseLost { .. } | StoreError::NotFound(_)) => {
                let _ = news.send(HeartbeatNews::LeaseLost);
                return;
            }
            Err(e) => {
                let _ = news.send(HeartbeatNews::Warning(format!(
                    "heartbeat for job #{id} failed: {e}; will retry"
                )));
            }
        }
        next = Instant::now() + every;
    }
}
