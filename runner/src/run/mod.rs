//! One run of a [`Runner`](crate::Runner): the main loop, and the plumbing
//! its steps share (store calls retried through busy spells, the runner
//! record `status` reads, sleeps that a shutdown cuts short).
//!
//! Each turn of the loop is a short list of named steps ([`Run::turn`]).
//! The bigger steps have files of their own: [`attempt`] runs one claimed
//! job and records how it ended, [`drive`] is the one loop that stops a
//! process when it must (for an attempt and for the on-finish command),
//! [`heartbeat`] keeps an attempt's lease, [`sweep`] takes back dead
//! owners' jobs, and [`on_finish`] runs the notification command.

mod attempt;
mod drive;
mod heartbeat;
pub(crate) mod job_control;
mod on_finish;
mod sweep;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{
    ClaimFilter, ClaimRequest, Claimed, Fence, Job, JobId, JobState, ListFilter, ListOrder,
    Reclaim, RunnerActivity, RunnerRecord, Store, StoreError, Timestamp,
};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::{Mode, RunnerConfig};
use crate::error::RunnerError;
use crate::event::{Reporter, RunSummary, RunnerEvent, SkipReason, SkippedJob};
use crate::exec::Executor;
use crate::fmt::format_duration;
use crate::gate::{GateCheck, read_gates};
use crate::idle::IdleTimer;
use crate::signal::ShutdownSignal;

/// How often the loop looks for dead owners' jobs between claims. A claim
/// never takes such a job (see [`Run::claim_request`]), so sweeping less
/// often only delays their return; sweeping before every claim cost a read
/// of every running job per job. A drain that finds nothing to claim sweeps
/// at once.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How many due jobs a drain ending with nothing claimed looks at to say
/// which it skipped.
const SKIPPED_LOOKED_AT: usize = 1_000;

/// How often an idle runner rewrites an unchanged idle record, so that
/// `status` still hears from it (a runner on another host counts as live
/// for 5 minutes after its last record). More often would be a write, and
/// on redb an fsync, every poll of a machine with nothing to do.
const IDLE_RECORD_REFRESH: Duration = Duration::from_secs(60);

/// What a store call retried through busy spells came to.
enum Retried<T> {
    /// It went through, with this answer.
    Done(T),
    /// A new shutdown request came while waiting to retry; the call was
    /// given up.
    ShutDown,
}

impl<T> Retried<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Retried<U> {
        match self {
            Retried::Done(v) => Retried::Done(f(v)),
            Retried::ShutDown => Retried::ShutDown,
        }
    }
}

/// Whether the loop turns again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    /// Back to the loop's head (which notices a shutdown).
    Again,
    /// The run is over.
    End,
}

/// What a claim gave.
#[expect(
    clippy::large_enum_variant,
    reason = "lives for one step and is moved once; a box would cost an allocation per job"
)]
enum Claim {
    /// A job to run.
    Job(Claimed),
    /// Nothing: what is due is not for us (another queue or kind), or
    /// another runner took it.
    Nothing,
    /// A shutdown came while a busy queue file held the claim up.
    ShutDown,
}

/// The idle record last written: an unchanged one is not written again
/// until [`IDLE_RECORD_REFRESH`] has passed.
struct IdleRecord {
    /// What it said.
    activity: RunnerActivity,
    /// When it was written.
    at: Instant,
    /// The summary then (`status` shows the counts).
    summary: RunSummary,
}

impl IdleRecord {
    /// Whether writing `activity` with `summary` now would say nothing new.
    fn still_says(&self, activity: &RunnerActivity, summary: &RunSummary) -> bool {
        self.activity == *activity
            && self.summary == *summary
            && self.at.elapsed() < IDLE_RECORD_REFRESH
    }
}

/// One run's state.
pub(crate) struct Run {
    store: Arc<dyn Store>,
    cfg: RunnerConfig,
    executors: BTreeMap<String, Arc<dyn Executor>>,
    waker: Arc<Notify>,
    reporter: Arc<dyn Reporter>,
    shutdown: ShutdownSignal,
    summary: RunSummary,
    started_at: Timestamp,
    /// Whether the current busy spell was warned about (once per spell).
    busy_warned: bool,
    idle_timer: IdleTimer,
    /// The idle record last written; `None` once another record was.
    idle_record: Option<IdleRecord>,
    /// When dead owners' jobs were last looked for.
    last_sweep: Instant,
    /// When the last attempt ended (the cooldown counts from there).
    last_end: Option<Instant>,
    /// A job claimed in the same transaction that settled the previous one
    /// (see [`Run::may_chain`]): it runs next, without another claim.
    chained: Option<Claimed>,
    /// Shared with the job-control task (Ctrl-Z), if the run has one.
    suspended: Arc<job_control::Suspended>,
}

impl Run {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        cfg: RunnerConfig,
        executors: BTreeMap<String, Arc<dyn Executor>>,
        waker: Arc<Notify>,
        reporter: Arc<dyn Reporter>,
        shutdown: ShutdownSignal,
        suspended: Arc<job_control::Suspended>,
    ) -> Run {
        let started_at = cfg.clock.now();
        Run {
            store,
            cfg,
            executors,
            waker,
            reporter,
            shutdown,
            summary: RunSummary::default(),
            started_at,
            busy_warned: false,
            idle_timer: IdleTimer::default(),
            idle_record: None,
            last_sweep: Instant::now(), // again after the first sweep
            last_end: None,
            chained: None,
            suspended,
        }
    }

    /// Runs the loop to its end, then removes this runner's record however
    /// it ended and reports the summary.
    pub(crate) async fn until_done(mut self) -> Result<RunSummary, RunnerError> {
        let result = self.main_loop().await;
        if let Err(e) = self.store.remove_runner(&self.cfg.owner.id).await {
            self.warn(format!("cannot remove this runner's record: {e}"));
        }
        result?;
        self.report(RunnerEvent::Finished(self.summary));
        Ok(self.summary)
    }

    async fn main_loop(&mut self) -> Result<(), RunnerError> {
        self.start().await?;
        while self.turn().await? == Turn::Again {}
        Ok(())
    }

    /// One turn of the loop: hand back (on shutdown), run chained, read the
    /// next due time, idle, cool down, gates, sweep, claim, run. A step that
    /// has nothing more to do this turn ends it.
    async fn turn(&mut self) -> Result<Turn, RunnerError> {
        if self.shutdown.is_requested() {
            return self.hand_back().await;
        }
        if let Some(claimed) = self.chained.take() {
            self.run_attempt(claimed).await?;
            return Ok(Turn::Again);
        }
        let Retried::Done(next_due) = self.read_next_due().await? else { return Ok(Turn::Again) };
        if !self.is_due(next_due) {
            return Ok(self.idle_or_end(next_due).await);
        }
        if !self.cool_down().await || !self.pass_gates().await {
            return Ok(Turn::Again); // a shutdown: the next turn's head notices
        }
        self.sweep_if_due().await?;
        match self.claim().await? {
            Claim::Job(claimed) => {
                self.run_attempt(claimed).await?;
                Ok(self.once_done())
            }
            Claim::Nothing => self.nothing_claimed().await,
            Claim::ShutDown => Ok(Turn::Again),
        }
    }

    /// Start: says so in the runner record and takes back what dead owners
    /// left, before anything is claimed.
    async fn start(&mut self) -> Result<(), RunnerError> {
        self.record(RunnerActivity::Starting).await;
        self.sweep_cgroups().await;
        self.sweep_dead().await?;
        self.last_sweep = Instant::now();
        Ok(())
    }

    /// Hand back: a shutdown ends the run. A job claimed together with the
    /// last settlement will not run; it goes back to pending without its
    /// attempt charged.
    async fn hand_back(&mut self) -> Result<Turn, RunnerError> {
        if let Some(claimed) = self.chained.take() {
            if let Err(e) = self.release(claimed.job.id, &claimed.fence).await {
                if !e.is_lease_lost() {
                    return Err(e);
                }
            }
        }
        self.summary.interrupted = true;
        Ok(Turn::End)
    }

    /// Run: one attempt of `claimed`, from start to record. The job claimed
    /// in the same transaction as the record, if any, runs next.
    async fn run_attempt(&mut self, claimed: Claimed) -> Result<(), RunnerError> {
        self.chained = self.run_job(claimed).await?;
        self.last_end = Some(Instant::now());
        Ok(())
    }

    /// Once mode ends after its one job (interrupted if a shutdown came
    /// meanwhile); the other modes turn again.
    fn once_done(&mut self) -> Turn {
        if self.cfg.mode != Mode::Once {
            return Turn::Again;
        }
        if self.shutdown.is_requested() {
            self.summary.interrupted = true;
        }
        Turn::End
    }

    /// Read next due: the earliest time a pending job becomes due, if any.
    async fn read_next_due(&mut self) -> Result<Retried<Option<Timestamp>>, RunnerError> {
        let store = self.store.clone();
        self.retrying("read the queue", || store.next_due()).await
    }

    fn is_due(&self, next_due: Option<Timestamp>) -> bool {
        next_due.is_some_and(|t| t <= self.now())
    }

    /// Nothing due: follow mode idles until it may be; the others are done.
    async fn idle_or_end(&mut self, next_due: Option<Timestamp>) -> Turn {
        match self.cfg.mode {
            Mode::Follow => {
                self.idle(next_due).await;
                Turn::Again
            }
            Mode::Drain | Mode::Once => Turn::End,
        }
    }

    /// Cool down: waits out the pause after the last job. `false` when a
    /// shutdown cut it short.
    async fn cool_down(&mut self) -> bool {
        // Not even a zero sleep: a timer rounds up to tokio's next
        // millisecond tick, about 1 ms per job with no cooldown.
        match self.last_end.map(|end| end + self.cfg.cooldown) {
            Some(until) if until > Instant::now() => self.sleep_until(until).await,
            _ => true,
        }
    }

    /// Gates: waits until every gate is open, reporting each check while one
    /// holds. `false` when a shutdown came first.
    async fn pass_gates(&mut self) -> bool {
        let mut held = vec![false; self.cfg.gates.len()];
        let mut since = None;
        loop {
            let (i, reading) = match read_gates(&self.cfg.gates).await {
                GateCheck::Open(readings) => {
                    for (i, reading) in readings {
                        if held[i] {
                            self.report(RunnerEvent::GateOpened { reading: reading.text });
                        }
                    }
                    return true;
                }
                GateCheck::Closed(i, reading) => (i, reading),
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

    /// Sweep: looks for dead owners' jobs if it has not for a while.
    async fn sweep_if_due(&mut self) -> Result<(), RunnerError> {
        if self.last_sweep.elapsed() >= SWEEP_EVERY {
            self.sweep_dead().await?;
            self.last_sweep = Instant::now();
        }
        Ok(())
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

    /// Claim: the best due job this runner may run.
    async fn claim(&mut self) -> Result<Claim, RunnerError> {
        let request = self.claim_request();
        let store = self.store.clone();
        let clock = self.cfg.clock.clone();
        Ok(match self.retrying("claim a job", || store.claim(&request, clock.now())).await? {
            Retried::Done(Some(claimed)) => Claim::Job(claimed),
            Retried::Done(None) => Claim::Nothing,
            Retried::ShutDown => Claim::ShutDown,
        })
    }

    /// Nothing claimed though something was due: follow mode idles until
    /// the next poll. Drain and once sweep first and end only if the sweep
    /// took nothing back: a claim leaves a dead owner's job to the sweep, so
    /// one whose owner died since the last sweep is taken back now rather
    /// than left behind.
    async fn nothing_claimed(&mut self) -> Result<Turn, RunnerError> {
        match self.cfg.mode {
            Mode::Follow => {
                self.idle(None).await;
                Ok(Turn::Again)
            }
            Mode::Drain | Mode::Once => {
                self.last_sweep = Instant::now();
                if self.sweep_dead().await? > 0 {
                    return Ok(Turn::Again);
                }
                self.report_skipped().await;
                Ok(Turn::End)
            }
        }
    }

    /// Before a drain ends with due jobs left: says which ones this runner
    /// passed over and why (a kind it has no handler for, a queue it does
    /// not serve), so "finished: 0 done" is not the whole story.
    async fn report_skipped(&mut self) {
        let filter = ListFilter {
            state: Some(JobState::Pending),
            order: ListOrder::DueFirst,
            limit: Some(SKIPPED_LOOKED_AT),
            ..ListFilter::default()
        };
        let Ok(pending) = self.store.list(&filter).await else { return };
        let now = self.now();
        let request = self.claim_request();
        let jobs: Vec<SkippedJob> = pending
            .iter()
            .filter(|j| j.is_due(now) && !request.filter.admits(j))
            .map(|j| SkippedJob {
                job: j.id,
                reason: if self.cfg.queues.is_empty() || self.cfg.queues.contains(&j.queue) {
                    SkipReason::NoHandler { kind: j.kind.clone() }
                } else {
                    SkipReason::QueueNotServed { queue: j.queue.clone() }
                },
            })
            .collect();
        if !jobs.is_empty() {
            self.report(RunnerEvent::Skipped { jobs });
        }
    }

    /// Idle, in follow mode with nothing to do: sleeps until the next due
    /// time (or a poll interval, whichever is first), a wake-up or a
    /// shutdown. The sleep is a kernel timer ([`IdleTimer`]): one wake-up
    /// per poll.
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
        let unchanged =
            self.idle_record.as_ref().is_some_and(|r| r.still_says(&activity, &self.summary));
        if !unchanged {
            self.record(activity.clone()).await;
            self.idle_record =
                Some(IdleRecord { activity, at: Instant::now(), summary: self.summary });
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
    async fn may_chain(&self) -> bool {
        if self.cfg.mode == Mode::Once
            || !self.cfg.cooldown.is_zero()
            || self.cfg.on_finish.is_some()
            || self.shutdown.is_requested()
            || self.last_sweep.elapsed() >= SWEEP_EVERY
        {
            return false;
        }
        matches!(read_gates(&self.cfg.gates).await, GateCheck::Open(_))
    }

    /// Hands job `id` back to pending without charging the attempt.
    async fn release(&mut self, id: JobId, fence: &Fence) -> Result<Retried<Job>, RunnerError> {
        let store = self.store.clone();
        let clock = self.cfg.clock.clone();
        self.retrying("release a job", || store.release(id, fence, clock.now())).await
    }

    /// Calls `op` until it succeeds, waiting out temporary errors (a busy
    /// queue file, a full disk) with one warning per streak. Gives up
    /// ([`Retried::ShutDown`]) when a new shutdown request arrives while
    /// waiting.
    async fn retrying<T, F, Fut>(&mut self, what: &str, op: F) -> Result<Retried<T>, RunnerError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let seen = self.shutdown.count();
        loop {
            match op().await {
                Ok(v) => {
                    self.busy_warned = false;
                    return Ok(Retried::Done(v));
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
                        () = shutdown.reached(seen + 1) => return Ok(Retried::ShutDown),
                    }
                }
                Err(e) => return Err(RunnerError::store(format!("cannot {what}"), e)),
            }
        }
    }

    /// Records what this runner does, for `status`. Failing to is not worth
    /// stopping for.
    async fn record(&mut self, activity: RunnerActivity) {
        if !matches!(activity, RunnerActivity::Idle { .. }) {
            self.idle_record = None;
        }
        let record = RunnerRecord {
            owner: self.cfg.owner.clone(),
            queues: self.cfg.queues.clone(),
            kinds: Some(self.executors.keys().cloned().collect()),
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

    fn report(&self, event: RunnerEvent) {
        self.reporter.report(event);
    }

    fn warn(&self, message: String) {
        self.report(RunnerEvent::Warning { message });
    }

    fn now(&self) -> Timestamp {
        self.cfg.clock.now()
    }
}
