//! One attempt of a claimed job: run it under heartbeats and its max
//! runtime, then record how it ended. The ending is decided first (an
//! outcome becomes a release or a settlement), then written once and
//! reported once.

use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::machine::NOT_RETRIED;
use slothqueue_core::{Claimed, Completion, Failure, Fence, Job, JobId, JobState, Settlement};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::contain::Containment;
use crate::error::RunnerError;
use crate::event::{RetryPlan, RunnerEvent};
use crate::exec::{ExecOutcome, Executor};
use crate::fmt::format_duration;
use crate::gate::{GateCheck, read_gates};
use crate::run::decide::{ChainView, may_chain};
use crate::run::drive::Oversight;
use crate::run::heartbeat::{
    Cadence, FencePlan, PGID_RECORD_DELAY, Processes, Taken, heartbeat_loop,
};
use crate::run::job_control::PauseClock;
use crate::run::worker::{Retried, Worker};
use crate::stop::StopReason;

/// How an attempt's end goes into the store.
enum Ending {
    /// A shutdown stopped it: back to pending, the attempt not charged.
    Release,
    /// It completed or failed.
    Settle(Settlement),
}

impl Ending {
    /// What `outcome` means for `job`, given why the runner stopped it (if
    /// it did): the runner words a stop, the executor only says it obeyed.
    /// A shutdown the job's own processes asked for (`self_stop`, its
    /// wording) is charged as a failure, not released. An attempt stopped
    /// by the self-fence (`fenced`: for how long no renewal got through)
    /// fails with that reason: like a lease that expired, it is charged.
    fn of(
        job: &Job,
        stopped: Option<StopReason>,
        outcome: ExecOutcome,
        self_stop: Option<String>,
        fenced: Option<Duration>,
    ) -> Ending {
        let failure = match (stopped, outcome) {
            (_, ExecOutcome::Stopped { detail }) if fenced.is_some() => Failure {
                error: format!(
                    "cut off from the queue: no lease renewal got through for {}, so this \
                     runner stopped the job before its lease could run out ({detail})",
                    format_duration(fenced.unwrap_or_default())
                ),
                exit_code: None,
                permanent: false,
            },
            (Some(StopReason::Shutdown), ExecOutcome::Stopped { detail }) => match self_stop {
                None => return Ending::Release,
                Some(why) => Failure {
                    error: format!("{why} ({detail})"),
                    exit_code: None,
                    permanent: false,
                },
            },
            (_, ExecOutcome::Success { result, exit_code }) => {
                return Ending::Settle(Settlement::Complete(Completion { result, exit_code }));
            }
            // The executor's word on whether another attempt could do
            // better stands (a cancel requested meanwhile still wins:
            // `machine::fail` ends the job `cancelled`).
            (_, ExecOutcome::Failure { error, exit_code, permanent }) => {
                Failure { error, exit_code, permanent }
            }
            (Some(StopReason::Timeout), ExecOutcome::Stopped { detail }) => Failure {
                error: format!(
                    "timeout: exceeded max runtime of {} ({detail})",
                    format_duration(job.max_runtime.unwrap_or_default())
                ),
                exit_code: None,
                permanent: false,
            },
            (Some(StopReason::Cancelled), ExecOutcome::Stopped { detail }) => {
                let error = format!("cancelled while running ({detail})");
                Failure { error, exit_code: None, permanent: false }
            }
            (Some(StopReason::LeaseLost) | None, ExecOutcome::Stopped { detail }) => {
                Failure { error: detail, exit_code: None, permanent: false }
            }
        };
        Ending::Settle(Settlement::Fail(failure))
    }

    /// What the store is told it is doing, for warnings and errors.
    fn what(&self) -> &'static str {
        match self {
            Ending::Release => "release a job",
            Ending::Settle(Settlement::Complete(_)) => "record a completed job",
            Ending::Settle(Settlement::Fail(_)) => "record a failed job",
        }
    }
}

/// The job as the store recorded the end of its attempt, and the next job
/// when one was claimed in the same transaction.
struct Settled {
    job: Job,
    next: Option<Taken>,
}

impl Worker {
    /// Executes a claimed job under heartbeats and its max runtime (less
    /// the time a closed gate kept it stopped, `pause`), and finishes the
    /// attempt with how it ended. Returns the next job when it was claimed in the same
    /// transaction (see [`may_chain`]). The loop made its containment and
    /// hears its end.
    ///
    /// When no renewal of the lease gets through in time (the self-fence,
    /// [`FencePlan`], counted from when the claim was asked for), the job is
    /// stopped before the lease can run out, reported at once, and
    /// recorded as failed once the store answers again (or reported lost,
    /// if another runner took it meanwhile).
    pub(super) async fn run_job(
        &mut self,
        taken: Taken,
        executor: Arc<dyn Executor>,
        marker: String,
        containment: Arc<Containment>,
        pause: Arc<PauseClock>,
    ) -> Result<Option<Taken>, RunnerError> {
        let Taken { claimed: Claimed { job, fence, .. }, asked } = taken;
        let plan = FencePlan::for_job(&job, self.cfg.kill_grace);
        let started = Instant::now();
        let wall_start = self.now();
        let cadence = Cadence::new(&self.cfg, job.lease.as_ref(), wall_start);
        let (ctx, stopper, pgid) =
            self.exec_context(fence.attempt, wall_start, Some(marker), Some(containment.clone()));
        let (news_tx, news) = mpsc::unbounded_channel();
        let beats = tokio::spawn(heartbeat_loop(
            self.store.clone(),
            self.cfg.clock.clone(),
            job.id,
            fence.clone(),
            cadence,
            Processes { pgid, containment: containment.clone() },
            (plan, asked),
            news_tx,
        ));
        let oversight = Oversight {
            deadline: job.max_runtime.map(|d| started + d),
            signals_seen: 0,
            job: Some(job.id),
            record_running_at: Some(started + PGID_RECORD_DELAY),
            news: Some(news),
            containment: Some(containment.clone()),
            pause: Some(pause.clone()),
        };
        let driven = self.drive(executor.execute(&job, ctx), stopper, oversight).await;
        beats.abort();
        if driven.abandoned {
            // Its executor was dropped mid-stop: finish the stop here, so
            // nothing of the attempt outlives its record.
            let report = containment.stop_all(Duration::ZERO).await;
            if !report.is_clean() {
                self.warn(format!("job #{}: {report}", job.id));
            }
        }
        let elapsed = started.elapsed();
        if driven.lease_lost {
            self.lost(job.id, elapsed);
            return Ok(None);
        }
        slothqueue_core::failpoint::hit("before_complete");
        let ending =
            Ending::of(&job, driven.stopped, driven.outcome, driven.self_stop, driven.fenced);
        self.finish_attempt(&job, &fence, ending, elapsed).await
    }

    /// Finishes an attempt with how it ended: writes its ending (with the
    /// next claim when it may chain), reports it, and runs the on-finish
    /// command for a completed or failed job.
    async fn finish_attempt(
        &mut self,
        job: &Job,
        fence: &Fence,
        ending: Ending,
        elapsed: Duration,
    ) -> Result<Option<Taken>, RunnerError> {
        let chain = match ending {
            Ending::Release => false,
            Ending::Settle(_) => self.chain_now().await,
        };
        let settled = match self.write_ending(job.id, fence, &ending, chain).await {
            Err(e) if e.is_lease_lost() => match self.ended_unheard(job.id, fence).await? {
                Some(Retried::Done(after)) => Some(Settled { job: after, next: None }),
                Some(Retried::ShutDown) => None,
                None => {
                    self.lost(job.id, elapsed);
                    return Ok(None);
                }
            },
            Err(e) => return Err(e),
            Ok(Retried::Done(settled)) => Some(settled),
            Ok(Retried::ShutDown) => None,
        };
        let (settlement, Settled { job: after, next }) = match (ending, settled) {
            // Counted and reported as released even when a second shutdown
            // cut the release's retries short (then the store still has the
            // job running under this runner's lease, until it is reclaimed).
            (Ending::Release, _) => {
                self.tally(|s| s.released += 1);
                self.report(RunnerEvent::Released { job: job.id, elapsed });
                return Ok(None);
            }
            (Ending::Settle(_), None) => return Ok(None),
            (Ending::Settle(settlement), Some(settled)) => (settlement, settled),
        };
        self.report_settled(&settlement, &after, elapsed);
        self.on_finish(&after).await;
        Ok(next)
    }

    /// The job as it is now, when its trail shows this attempt's ending
    /// written by this runner although the write was refused as
    /// `LeaseLost`: an earlier try of that write committed and its answer
    /// was lost (a server gone mid-call), and the retry found the lease
    /// already ended. `None` when the lease truly moved on.
    async fn ended_unheard(
        &mut self,
        id: JobId,
        fence: &Fence,
    ) -> Result<Option<Retried<Job>>, RunnerError> {
        let store = self.store.clone();
        let trail = match self.retrying("read a job's events", || store.events(id)).await? {
            Retried::Done(trail) => trail,
            Retried::ShutDown => return Ok(Some(Retried::ShutDown)),
        };
        if !slothqueue_core::machine::ended_by_owner(&trail, fence) {
            return Ok(None);
        }
        Ok(Some(self.retrying("read a job", || store.get(id)).await?))
    }

    /// Writes `ending`, retrying through busy spells; with `chain` (a
    /// settlement only), claims the next job in the same transaction.
    async fn write_ending(
        &mut self,
        id: JobId,
        fence: &Fence,
        ending: &Ending,
        chain: bool,
    ) -> Result<Retried<Settled>, RunnerError> {
        let settlement = match ending {
            Ending::Release => {
                let released = self.release(id, fence).await?;
                return Ok(released.map(|job| Settled { job, next: None }));
            }
            Ending::Settle(settlement) => settlement,
        };
        let store = self.store.clone();
        let clock = self.cfg.clock.clone();
        if !chain {
            let settled = self
                .retrying(ending.what(), || {
                    let (store, settlement, now) = (&store, settlement.clone(), clock.now());
                    async move {
                        match settlement {
                            Settlement::Complete(done) => {
                                store.complete(id, fence, done, now).await
                            }
                            Settlement::Fail(failure) => store.fail(id, fence, failure, now).await,
                        }
                    }
                })
                .await?;
            return Ok(settled.map(|job| Settled { job, next: None }));
        }
        let request = self.claim_request();
        // The next job's lease is dated no earlier than this.
        let asked = Instant::now();
        let settled = self
            .retrying(ending.what(), || {
                let (store, request) = (&store, &request);
                let (settlement, now) = (settlement.clone(), clock.now());
                async move { store.settle_and_claim(id, fence, settlement, request, now).await }
            })
            .await?;
        Ok(settled.map(|r| Settled {
            job: r.settled,
            next: r.next.map(|claimed| Taken { claimed, asked }),
        }))
    }

    /// Counts and reports a settled attempt: done, cancelled, or failed
    /// (with when it runs again, if it does).
    fn report_settled(&mut self, settlement: &Settlement, after: &Job, elapsed: Duration) {
        let id = after.id;
        let failure = match settlement {
            Settlement::Complete(_) => {
                self.tally(|s| s.done += 1);
                self.report(RunnerEvent::Done { job: id, elapsed });
                return;
            }
            Settlement::Fail(failure) => failure,
        };
        if after.state == JobState::Cancelled {
            self.tally(|s| s.cancelled += 1);
            self.report(RunnerEvent::Cancelled { job: id, elapsed });
            return;
        }
        self.tally(|s| s.failed += 1);
        let mut reason = match failure.exit_code {
            Some(code) => format!("exit code {code}"),
            None => failure.error.clone(),
        };
        if failure.permanent && after.state == JobState::Failed {
            reason = format!("{reason}; {NOT_RETRIED}");
        }
        let retry = (after.state == JobState::Pending).then(|| RetryPlan {
            attempt: after.attempts,
            max_attempts: after.max_attempts,
            delay: whole_seconds(after.not_before.duration_since(self.now())),
        });
        self.report(RunnerEvent::Failed { job: id, elapsed, reason, retry });
    }

    /// The attempt's lease moved on: killed, not recorded.
    fn lost(&mut self, id: JobId, elapsed: Duration) {
        self.tally(|s| s.lost += 1);
        self.report(RunnerEvent::LeaseLost { job: id, elapsed });
    }

    /// Whether the attempt ending now may claim the next job in the same
    /// transaction ([`may_chain`]). The gates are read here instead of
    /// before the claim, so each job still costs one reading.
    async fn chain_now(&self) -> bool {
        let view = ChainView {
            mode: self.cfg.mode,
            cooldown_zero: self.cfg.cooldown.is_zero(),
            on_finish: self.cfg.on_finish.is_some(),
            shutdown: self.shutdown.is_requested(),
            sweep_due: self.sweep_due(),
            gates_open: true,
        };
        if !may_chain(&view) {
            return false;
        }
        matches!(read_gates(&self.cfg.gates).await, GateCheck::Open(_))
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
