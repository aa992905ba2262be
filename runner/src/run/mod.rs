//! One run of a [`Runner`](crate::Runner): the main loop ([`Run`]).
//!
//! The loop decides nothing itself: [`decide()`] turns what the run knows
//! ([`decide::View`]) into the next step, and [`Run::turn`] carries it out
//! and writes back what it learned. Attempts run as tasks of their own (up
//! to [`RunnerConfig::slots`] at once), each with its own lease,
//! heartbeat, log, max runtime and containment; the loop is the one place
//! that claims (but for the job an attempt's settlement claims in the same
//! transaction, see [`decide::may_chain`]) and hears each attempt's end.
//!
//! The bigger steps have files of their own: [`attempt`] runs one claimed
//! job and writes how it ended, [`claim`] takes the next job (and says when GPU jobs wait), [`drive`] is the one loop that stops a
//! process when it must (for an attempt and for the on-finish command),
//! [`heartbeat`] keeps an attempt's lease, [`sweep`] takes back dead
//! owners' jobs, [`lanes`] reads why the lanes hold due jobs, and
//! [`on_finish`] runs the notification command. What the loop and the
//! attempts share is in [`worker`]: [`Worker`], the plumbing every task's
//! steps use (store calls retried through busy spells, the runner record
//! `status` reads), whose methods for each of those steps sit in that
//! step's file.

mod attempt;
mod claim;
mod decide;
mod drive;
mod heartbeat;
pub(crate) mod job_control;
mod lanes;
mod on_finish;
mod sweep;
mod worker;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use slothqueue_core::schedule::{self, TickOutcome};
use slothqueue_core::{
    AttemptNote, Fence, JobId, JobState, ListFilter, ListOrder, QueuesReport, RunnerActivity,
    Store, StoreError, Timestamp, WaitCause,
};
use tokio::sync::Notify;
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;

use crate::config::RunnerConfig;
use crate::contain::{Containment, lease_marker};
use crate::error::RunnerError;
use crate::event::{Reporter, RunSummary, RunnerEvent, SkipReason, SkippedJob};
use crate::exec::Executor;
use crate::gate::{GateCheck, read_gates};
use crate::idle::IdleTimer;
use crate::signal::ShutdownSignal;
use decide::{Blocked, ClaimState, Gates, Step, View, Wait, decide};
use heartbeat::Taken;
use job_control::PauseClock;
use worker::{IDLE_RECORD_REFRESH, IdleRecord, Records, Retried, Shared, Worker};

/// How many due jobs a drain ending with nothing claimed looks at to say
/// which it skipped.
const SKIPPED_LOOKED_AT: usize = 1_000;

/// Whether the loop turns again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    /// Back to the decision.
    Again,
    /// The run is over.
    End,
}

/// A running attempt, as the loop knows it.
struct Slot {
    job: JobId,
    fence: Fence,
    task: tokio::task::Id,
    containment: Arc<Containment>,
    pause: Arc<PauseClock>,
}

/// How an attempt's task ended: the next job when its settlement claimed
/// one in the same transaction.
struct AttemptEnd {
    next: Result<Option<Taken>, RunnerError>,
}

/// One run's state: the loop's side.
pub(crate) struct Run {
    w: Worker,
    waker: Arc<Notify>,
    idle_timer: IdleTimer,
    /// A job claimed in the same transaction that settled the previous one
    /// (see [`decide::may_chain`]): it starts next, without another claim.
    chained: Option<Taken>,
    tasks: JoinSet<AttemptEnd>,
    slots: Vec<Slot>,
    started: u32,
    next_due: Option<Option<Timestamp>>,
    /// The next schedule tick as last read or fired, and when: read again
    /// a poll later (another process may have added or changed a
    /// schedule), after a wake-up, and after an idle wait.
    next_tick: Option<(Option<Timestamp>, Instant)>,
    /// The last start or end (the cooldown counts from the later).
    last_start_or_end: Option<Instant>,
    gates: Gates,
    /// Which gates held at their last reported reading (a gate that held
    /// and opens says so).
    held_gates: Vec<bool>,
    /// The last closed gate's reading.
    gate_reading: String,
    /// Since when a gate or the lanes hold the next start.
    waiting_since: Option<Timestamp>,
    claim: ClaimState,
    /// When the next pending job not yet due becomes due, read with the
    /// lanes after a claim took nothing ([`View::later_due`]).
    later_due: Option<Timestamp>,
    /// What the last lanes report since the last change said.
    seen: Option<lanes::Sight>,
    /// The last lanes report, for the skipped report at a drain's end.
    last_report: Option<QueuesReport>,
    /// The lanes report failed once (warned once per run).
    lanes_warned: bool,
    /// Firing the schedules was refused once (warned once per run).
    ticks_warned: bool,
    /// When the lane wait was last recorded: an unchanged one is not
    /// recorded again at every check (a write, on redb an fsync) until
    /// [`IDLE_RECORD_REFRESH`] has passed.
    lane_record: Option<Instant>,
    /// The running attempts are stopped because a gate closed, since.
    suspended_at: Option<Instant>,
    /// A step failed for good: the error the run ends with once its
    /// attempts have.
    fatal: Option<RunnerError>,
    /// The GPU wait last said ([`RunnerEvent::GpuWait`]), while it lasts.
    gpu_wait: Option<String>,
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
        let held_gates = vec![false; cfg.gates.len()];
        let mut cfg = cfg;
        // The claim asks this wrapper, which remembers the last look for
        // the runner's record and the wait it prints.
        let gpu_sight = cfg.gpus.as_mut().map(|offer| {
            let sight = Arc::new(crate::gpu::Remembering::new(offer.sight.clone()));
            offer.sight = sight.clone();
            sight
        });
        let sh = Arc::new(Shared {
            store,
            cfg,
            executors,
            reporter,
            shutdown,
            suspended,
            started_at,
            summary: Mutex::new(RunSummary::default()),
            records: Mutex::new(Records::default()),
            last_sweep: Mutex::new(Instant::now()), // again after the first sweep
            unheard_claims: AtomicBool::new(false),
            gpu_sight,
        });
        Run {
            w: Worker { sh, busy_warned: false },
            waker,
            idle_timer: IdleTimer::default(),
            chained: None,
            tasks: JoinSet::new(),
            slots: Vec::new(),
            started: 0,
            next_due: None,
            next_tick: None,
            last_start_or_end: None,
            gates: Gates::Unread,
            held_gates,
            gate_reading: String::new(),
            waiting_since: None,
            claim: ClaimState::Fresh,
            later_due: None,
            seen: None,
            last_report: None,
            lanes_warned: false,
            ticks_warned: false,
            lane_record: None,
            suspended_at: None,
            fatal: None,
            gpu_wait: None,
        }
    }

    /// Runs the loop to its end, then removes this runner's record however
    /// it ended and reports the summary.
    pub(crate) async fn until_done(mut self) -> Result<RunSummary, RunnerError> {
        let result = self.main_loop().await;
        if let Err(e) = self.w.store.remove_runner(&self.w.cfg.owner.id).await {
            self.w.warn(format!("cannot remove this runner's record: {e}"));
        }
        result?;
        let summary = self.w.summary();
        self.w.report(RunnerEvent::Finished(summary));
        Ok(summary)
    }

    async fn main_loop(&mut self) -> Result<(), RunnerError> {
        self.start().await?;
        loop {
            match self.turn().await {
                Ok(Turn::Again) => {}
                Ok(Turn::End) => break,
                // The attempts still running end first (their leases and
                // processes are theirs to end), then the run, with the
                // first such error.
                Err(e) if !self.slots.is_empty() => {
                    self.fatal.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        match self.fatal.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// What the run knows now, for [`decide()`].
    fn view(&self) -> View {
        let cfg = &self.w.cfg;
        let cooldown_until = match self.last_start_or_end {
            Some(t) if !cfg.cooldown.is_zero() => Some(t + cfg.cooldown),
            _ => None,
        };
        View {
            mode: cfg.mode,
            slots: cfg.slots.max(1),
            running: self.slots.len(),
            started: self.started,
            shutdown: self.w.shutdown.is_requested(),
            failed: self.fatal.is_some(),
            chained: self.chained.is_some(),
            now: Instant::now(),
            wall_now: self.w.now(),
            next_due: self.next_due,
            cooldown_until,
            gates: self.gates,
            check_interval: cfg.check_interval,
            poll_interval: cfg.poll_interval,
            sweep_due: self.w.sweep_due(),
            claim: self.claim,
            // Without gates there is nothing to watch.
            suspend_when_gated: cfg.suspend_when_gated && !cfg.gates.is_empty(),
            suspended: self.suspended_at.is_some(),
            next_tick: self
                .next_tick
                .filter(|(_, at)| at.elapsed() < cfg.poll_interval)
                .map(|(t, _)| t),
            tick_recheck: self.next_tick.map(|(_, at)| at + cfg.poll_interval),
            later_due: self.later_due,
        }
    }

    /// One turn of the loop: decide the next step, carry it out.
    async fn turn(&mut self) -> Result<Turn, RunnerError> {
        // Only while no attempt runs and none is chained: then no claim is
        // in flight, and every job held under this runner's lease is one
        // it does not know it has.
        if self.slots.is_empty()
            && self.chained.is_none()
            && self.w.unheard_claims.swap(false, Ordering::SeqCst)
        {
            self.hand_back_unheard().await?;
        }
        match decide(&self.view()) {
            Step::HandBack => self.hand_back().await?,
            Step::StartChained => {
                if let Some(taken) = self.chained.take() {
                    self.begin(taken).await?;
                }
            }
            Step::ReadNextDue => {
                let store = self.w.store.clone();
                if let Retried::Done(next_due) =
                    self.w.retrying("read the queue", || store.next_due()).await?
                {
                    self.next_due = Some(next_due);
                }
            }
            Step::ReadTicks => self.read_ticks().await?,
            Step::FireTicks => self.fire_ticks().await?,
            Step::ReadGates { report } => self.read_gates(report).await,
            Step::Suspend => self.suspend().await,
            Step::Resume => self.resume().await,
            Step::Sweep => {
                self.swept().await?;
            }
            Step::Claim => self.claim().await?,
            Step::ReadLanes => self.read_lanes().await,
            Step::SweepBeforeEnd => {
                if !self.swept().await? {
                    self.claim = ClaimState::Swept;
                }
            }
            Step::Wait(wait) => self.wait(wait).await,
            Step::Idle { next_due, next_tick } => {
                self.idle(next_due, next_tick).await;
                self.forget();
                self.next_tick = None;
            }
            Step::End { skipped } => {
                if skipped {
                    self.report_skipped().await;
                }
                if self.w.shutdown.is_requested() {
                    self.w.tally(|s| s.interrupted = true);
                }
                return Ok(Turn::End);
            }
        }
        Ok(Turn::Again)
    }

    /// Forgets what the next look must read again: the due time, and the
    /// last claim's answer.
    fn forget(&mut self) {
        self.next_due = None;
        self.claim = ClaimState::Fresh;
        self.seen = None;
        self.later_due = None;
    }

    /// Start: says so in the runner record and takes back what dead owners
    /// left, before anything is claimed.
    async fn start(&mut self) -> Result<(), RunnerError> {
        self.w.record(RunnerActivity::Starting).await;
        self.w.sweep_cgroups().await;
        self.w.sweep_dead().await?;
        self.w.swept_now();
        Ok(())
    }

    /// Read ticks: when the next schedule tick fires (`schedules` is a
    /// read; a queue without schedules answers at once).
    async fn read_ticks(&mut self) -> Result<(), RunnerError> {
        let store = self.w.store.clone();
        if let Retried::Done(schedules) =
            self.w.retrying("read the schedules", || store.schedules()).await?
        {
            self.next_tick = Some((schedule::next_fire(&schedules), Instant::now()));
        }
        Ok(())
    }

    /// Fire ticks: enqueues every due tick's job, in one write; each runner
    /// on the file may try at once, and each slot is still decided once
    /// (the store reads the cursor the other moved). What was enqueued is
    /// looked at afresh.
    async fn fire_ticks(&mut self) -> Result<(), RunnerError> {
        let store = self.w.store.clone();
        let clock = self.w.cfg.clock.clone();
        let now = clock.now();
        // A schedule the store refuses to fire (a tick's job refused at
        // push) must not stop the runner: its jobs still run, and the
        // schedules are tried again a poll later.
        let fire = || {
            let store = store.clone();
            async move {
                match store.fire_schedules(now).await {
                    Err(StoreError::InvalidInput(why)) => Ok(Err(why)),
                    other => other.map(Ok),
                }
            }
        };
        let ticks = match self.w.retrying("fire the schedules", fire).await? {
            Retried::Done(Ok(ticks)) => Retried::Done(ticks),
            Retried::Done(Err(why)) => {
                if !self.ticks_warned {
                    self.ticks_warned = true;
                    self.w.warn(format!(
                        "cannot fire the schedules: {why}; jobs still run, the schedules are tried again every {}",
                        crate::fmt::format_duration(self.w.cfg.poll_interval)
                    ));
                }
                self.next_tick = Some((None, Instant::now()));
                return Ok(());
            }
            Retried::ShutDown => Retried::ShutDown,
        };
        if let Retried::Done(ticks) = ticks {
            // A next fire not after `now` that fired nothing would be
            // fired again at once; it is looked at again a poll later.
            let next = ticks.next.filter(|t| *t > now || !ticks.ticks.is_empty());
            self.next_tick = Some((next, Instant::now()));
            if !ticks.ticks.is_empty() {
                self.forget();
                // A skip is said once per unfinished job, as its trail
                // says it: not every second of an `every 1s` held back.
                let said: Vec<_> = ticks
                    .ticks
                    .into_iter()
                    .filter(|t| !matches!(t.outcome, TickOutcome::Skipped { noted: false, .. }))
                    .collect();
                if !said.is_empty() {
                    self.w.report(RunnerEvent::Ticks { ticks: said });
                }
            }
        }
        Ok(())
    }

    /// Hand back: a job claimed together with the last settlement will not
    /// run; it goes back to pending without its attempt charged.
    async fn hand_back(&mut self) -> Result<(), RunnerError> {
        if let Some(Taken { claimed, .. }) = self.chained.take() {
            if let Err(e) = self.w.release(claimed.job.id, &claimed.fence).await {
                if !e.is_lease_lost() {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Hands back, to pending and their attempt not charged, the jobs the
    /// store says this runner holds though no attempt of it runs: claimed
    /// by a call whose answer was lost ([`Shared::unheard_claims`]), so
    /// never started.
    async fn hand_back_unheard(&mut self) -> Result<(), RunnerError> {
        let store = self.w.store.clone();
        let filter = ListFilter { state: Some(JobState::Running), ..ListFilter::default() };
        let Retried::Done(running) =
            self.w.retrying("list running jobs", || store.list(&filter)).await?
        else {
            return Ok(());
        };
        let mut handed_back = false;
        for job in running {
            let Some(fence) = job.lease.as_ref().map(|l| l.fence()) else { continue };
            if fence.owner != self.w.cfg.owner.id {
                continue;
            }
            self.w.warn(format!(
                "job #{}: claimed by a call whose answer was lost; handed back",
                job.id
            ));
            match self.w.release(job.id, &fence).await {
                Ok(_) => handed_back = true,
                Err(e) if e.is_lease_lost() => {}
                Err(e) => return Err(e),
            }
        }
        if handed_back {
            self.forget();
        }
        Ok(())
    }

    /// Sweep: looks for dead owners' jobs; `true` when it took some back
    /// (then the due time and the claim are read again).
    async fn swept(&mut self) -> Result<bool, RunnerError> {
        let n = self.w.sweep_dead().await?;
        self.w.swept_now();
        if n > 0 {
            self.forget();
        }
        Ok(n > 0)
    }

    /// Gates: reads them. `report`: a start waits on them, so a closed one
    /// is reported and recorded (each check, as it holds), and one that
    /// held and opened says so.
    async fn read_gates(&mut self, report: bool) {
        let now = Instant::now();
        match read_gates(&self.w.cfg.gates).await {
            GateCheck::Open(readings) => {
                self.gates = Gates::Open { at: now };
                if report {
                    for (i, reading) in readings {
                        if self.held_gates.get(i).copied().unwrap_or(false) {
                            self.w.report(RunnerEvent::GateOpened { reading: reading.text });
                        }
                    }
                    self.held_gates.iter_mut().for_each(|h| *h = false);
                    self.waiting_since = None;
                }
            }
            GateCheck::Closed(i, reading) => {
                self.gates = Gates::Closed { at: now };
                self.gate_reading = reading.text.clone();
                if report {
                    if let Some(h) = self.held_gates.get_mut(i) {
                        *h = true;
                    }
                    let since = *self.waiting_since.get_or_insert_with(|| self.w.now());
                    self.w.report(RunnerEvent::Gated {
                        reading: reading.text.clone(),
                        wait: self.w.cfg.check_interval,
                    });
                    self.w
                        .record(RunnerActivity::Gated {
                            reading: reading.text,
                            since,
                            cause: WaitCause::Gate,
                        })
                        .await;
                }
            }
        }
    }

    /// Starts an attempt of `claimed` as a task of its own. The gates are
    /// read again before the next start, and the next claim looks afresh.
    async fn begin(&mut self, taken: Taken) -> Result<(), RunnerError> {
        let Taken { claimed, asked } = taken;
        let id = claimed.job.id;
        slothqueue_core::failpoint::hit("after_claim");
        self.started += 1;
        self.gates = Gates::Unread;
        self.last_start_or_end = Some(Instant::now());
        self.waiting_since = None;
        self.forget();
        let Some(executor) = self.w.executors.get(&claimed.job.kind).cloned() else {
            // The claim filter makes this unreachable; hand the job back.
            self.w.warn(format!(
                "no executor for kind `{}` of job #{id}; released",
                claimed.job.kind
            ));
            self.w.release(id, &claimed.fence).await?;
            return Ok(());
        };
        // Before the spawn: the attempt's cgroup (where one can be made)
        // and the subreaper, so nothing the job starts escapes its stop.
        let marker = lease_marker(id, &claimed.fence);
        let containment = Arc::new(if self.w.cfg.cgroups {
            Containment::new(id, claimed.fence.attempt, &marker)
        } else {
            Containment::without_cgroup(&marker)
        });
        let pause = Arc::new(PauseClock::default());
        self.w.suspended.add(containment.clone());
        if let Ok(mut r) = self.w.records.lock() {
            r.started(id);
        }
        let fence = claimed.fence.clone();
        let worker = Worker { sh: self.w.sh.clone(), busy_warned: false };
        let (c, p) = (containment.clone(), pause.clone());
        // Boxed: the attempt's future is several KiB, and unboxed the spawn
        // and every stage change of the task copy it whole (a tenth of a
        // drain's instructions went to those copies).
        let attempt = Box::pin(async move {
            let mut worker = worker;
            let next = worker.run_job(Taken { claimed, asked }, executor, marker, c, p).await;
            AttemptEnd { next }
        });
        let task = self.tasks.spawn(attempt).id();
        self.slots.push(Slot { job: id, fence, task, containment, pause });
        Ok(())
    }

    /// An attempt's task ended: forget it, keep the job its settlement
    /// claimed, and look afresh (a slot is free, a lane may be).
    async fn ended(&mut self, end: Result<(tokio::task::Id, AttemptEnd), JoinError>) {
        let (task, next) = match end {
            Ok((task, AttemptEnd { next })) => (task, next),
            Err(e) => (
                e.id(),
                Err(RunnerError::io(
                    "an attempt's task failed",
                    std::io::Error::other(e.to_string()),
                )),
            ),
        };
        let Some(at) = self.slots.iter().position(|s| s.task == task) else { return };
        let slot = self.slots.remove(at);
        self.w.suspended.remove(&slot.containment);
        let rewrite = match self.w.records.lock() {
            Ok(mut r) => {
                r.running.retain(|j| *j != slot.job);
                r.last.clone().filter(|_| r.recorded_running.contains(&slot.job))
            }
            Err(_) => None,
        };
        // The record named the job that ended: it names the others now,
        // whatever the free slots were recorded doing.
        match rewrite {
            Some(RunnerActivity::Running { .. }) => self.w.record_running().await,
            Some(other) => self.w.record(other).await,
            None => {}
        }
        self.last_start_or_end = Some(Instant::now());
        self.forget();
        match next {
            Ok(Some(taken)) => self.chained = Some(taken),
            Ok(None) => {}
            Err(e) => {
                self.fatal.get_or_insert(e);
            }
        }
    }

    /// Wait: until the step's time, a wake-up, an attempt's end or a
    /// shutdown request, whichever comes first.
    async fn wait(&mut self, wait: Wait) {
        let mut shutdown = self.w.shutdown.clone();
        let asked = shutdown.is_requested();
        let waker = self.waker.clone();
        tokio::select! {
            () = drive::sleep_until_opt(wait.until) => {}
            Some(end) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                self.ended(end).await;
            }
            () = waker.notified(), if wait.wake => {
                self.forget();
                self.next_tick = None;
            }
            () = shutdown.requested(), if !asked => {}
        }
        self.next_due = None;
    }

    /// Suspend: a gate closed while attempts run; stop their processes,
    /// note it on each attempt, say so.
    async fn suspend(&mut self) {
        let now = Instant::now();
        self.suspended_at = Some(now);
        self.w.suspended.set_gated(true);
        for slot in &self.slots {
            slot.pause.stop(now);
            slot.containment.suspend();
        }
        let reading = self.gate_reading.clone();
        let jobs: Vec<JobId> = self.slots.iter().map(|s| s.job).collect();
        self.w.report(RunnerEvent::Suspended { jobs, reading: reading.clone() });
        let note = AttemptNote::Suspended { reading };
        self.note(&note).await;
    }

    /// Resume: the gates opened (or no attempt is left); continue the
    /// attempts' processes, note it on each, say so.
    async fn resume(&mut self) {
        let now = Instant::now();
        let since = self.suspended_at.take().unwrap_or(now);
        self.w.suspended.set_gated(false);
        for slot in &self.slots {
            slot.containment.resume();
            slot.pause.go(now);
        }
        if self.slots.is_empty() {
            return;
        }
        let after = now.saturating_duration_since(since);
        let jobs: Vec<JobId> = self.slots.iter().map(|s| s.job).collect();
        self.w.report(RunnerEvent::Resumed { jobs, after });
        self.note(&AttemptNote::Resumed { after }).await;
    }

    /// Notes `note` on every running attempt's trail; a note that cannot
    /// be written is a warning (the attempt goes on either way).
    async fn note(&mut self, note: &AttemptNote) {
        let notes: Vec<(JobId, Fence)> =
            self.slots.iter().map(|s| (s.job, s.fence.clone())).collect();
        for (job, fence) in notes {
            if let Err(e) = self.w.store.note_attempt(job, &fence, note, self.w.now()).await {
                self.w.warn(format!(
                    "cannot note on job #{job} that it was suspended or resumed: {e}"
                ));
            }
        }
    }

    /// Read lanes: why the last claim took nothing though something was
    /// due, from the read-only queues report. Lanes holding due jobs are
    /// reported (each check, as they hold) and recorded.
    async fn read_lanes(&mut self) {
        let now = Instant::now();
        let report = match self.w.store.queues(self.w.now()).await {
            Ok(report) => report,
            Err(e) => {
                if !self.lanes_warned {
                    self.lanes_warned = true;
                    self.w.warn(format!("cannot read the queues' lanes: {e}"));
                }
                self.last_report = None;
                self.claim = ClaimState::Lanes { at: now, blocked: Blocked::None };
                return;
            }
        };
        // Due jobs the claim passed over (no handler for their kind, a
        // queue not served) must not hide the next job that becomes due.
        self.later_due = match self.w.store.stats(self.w.now()).await {
            Ok(stats) => stats.next_due,
            Err(_) => None,
        };
        let blocks = lanes::blocks(&report, &self.w.cfg.queues);
        let sight = lanes::Sight::of(&report, &self.w.cfg.queues, &blocks);
        let blocked = lanes::classify(self.seen.as_ref(), &sight, &blocks);
        self.seen = Some(sight);
        self.last_report = Some(report);
        self.claim = ClaimState::Lanes { at: now, blocked };
        if !blocks.is_empty() {
            let since = *self.waiting_since.get_or_insert_with(|| self.w.now());
            let reading = lanes::reading(&blocks);
            self.w.report(RunnerEvent::LanesWaiting { lanes: blocks });
            let unchanged = self.lane_record.is_some_and(|at| {
                at.elapsed() < IDLE_RECORD_REFRESH && self.w.records_say_gated(&reading)
            });
            if !unchanged {
                self.lane_record = Some(now);
                self.w
                    .record(RunnerActivity::Gated { reading, since, cause: WaitCause::Lanes })
                    .await;
            }
        }
    }

    /// Before a drain ends with due jobs left: says which ones this runner
    /// passed over and why (a kind it has no handler for, a queue it does
    /// not serve, a paused queue), so "finished: 0 done" is not the whole
    /// story.
    async fn report_skipped(&mut self) {
        let filter = ListFilter {
            state: Some(JobState::Pending),
            order: ListOrder::DueFirst,
            limit: Some(SKIPPED_LOOKED_AT),
            ..ListFilter::default()
        };
        let Ok(pending) = self.w.store.list(&filter).await else { return };
        let now = self.w.now();
        let request = self.w.claim_request();
        let cfg = &self.w.cfg;
        let paused = |queue: &str| {
            self.last_report.as_ref().is_some_and(|r| {
                r.all_paused.is_some() || r.get(queue).is_some_and(|q| q.paused.is_some())
            })
        };
        let jobs: Vec<SkippedJob> = pending
            .iter()
            .filter(|j| j.is_due(now))
            .filter_map(|j| {
                let reason = if !request.filter.admits(j) {
                    if cfg.queues.is_empty() || cfg.queues.contains(&j.queue) {
                        SkipReason::NoHandler { kind: j.kind.clone() }
                    } else {
                        SkipReason::QueueNotServed { queue: j.queue.clone() }
                    }
                } else if paused(&j.queue) {
                    SkipReason::Paused { queue: j.queue.clone() }
                } else {
                    return None;
                };
                Some(SkippedJob { job: j.id, reason })
            })
            .collect();
        if !jobs.is_empty() {
            self.w.report(RunnerEvent::Skipped { jobs });
        }
    }

    /// Idle, in follow mode with nothing to do: sleeps until the next due
    /// time (or a poll interval, whichever is first), a wake-up or a
    /// shutdown. The sleep is a kernel timer ([`IdleTimer`]): one wake-up
    /// per poll.
    async fn idle(&mut self, next_due: Option<Timestamp>, next_tick: Option<Timestamp>) {
        let now = self.w.now();
        let poll_until = now.saturating_add(self.w.cfg.poll_interval);
        let until = [next_due, next_tick]
            .into_iter()
            .flatten()
            .filter(|t| *t > now)
            .fold(poll_until, Timestamp::min);
        // The record names a job's due time, not the next poll, so that
        // it stays the same from poll to poll and need not be rewritten.
        let activity = RunnerActivity::Idle { until: next_due.filter(|t| *t > now) };
        let summary = self.w.summary();
        let unchanged = self
            .w
            .records
            .lock()
            .is_ok_and(|r| r.idle.as_ref().is_some_and(|i| i.still_says(&activity, &summary)));
        if !unchanged {
            self.w.record(activity.clone()).await;
            if let Ok(mut r) = self.w.records.lock() {
                r.idle = Some(IdleRecord { activity, at: Instant::now(), summary });
            }
        }
        let mut shutdown = self.w.shutdown.clone();
        tokio::select! {
            () = self.idle_timer.sleep(until.duration_since(now)) => {}
            () = self.waker.notified() => {}
            () = shutdown.requested() => {}
        }
    }
}
