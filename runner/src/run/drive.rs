//! Driving a stoppable process until it ends: the one loop that turns a
//! deadline, shutdown requests and (for an attempt) the heartbeat task's
//! news into stop requests, and that gives up on a process which does not
//! stop when asked. An attempt and the on-finish command both run through
//! it, with a context from the one builder here.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{JobId, Timestamp};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::contain::Containment;
use crate::event::RunnerEvent;
use crate::exec::{ExecContext, ExecOutcome};
use crate::run::heartbeat::HeartbeatNews;
use crate::run::job_control::PauseClock;
use crate::run::worker::Worker;
use crate::signal::ShutdownSignal;
use crate::stop::{StopReason, Stopper};

/// What a drive oversees besides the process and shutdown requests (not
/// a [`QueueWatch`](crate::QueueWatch), which wakes waiters at commits).
pub(super) struct Oversight {
    /// When the process has run too long: it is stopped as timed out.
    pub deadline: Option<Instant>,
    /// Shutdown requests that came before the drive began. An attempt
    /// counts from zero (a request that came just before it stops it at
    /// once); the on-finish command runs even after a shutdown and
    /// answers only to requests that come while it runs.
    pub signals_seen: u32,
    /// The job whose attempt this is: named when a shutdown stops it.
    pub job: Option<JobId>,
    /// When to record the attempt as running in the runner record: a job
    /// that ends sooner costs no write.
    pub record_running_at: Option<Instant>,
    /// What the attempt's heartbeat task hears: a cancel, a lost lease.
    pub news: Option<mpsc::UnboundedReceiver<HeartbeatNews>>,
    /// The attempt's processes: a shutdown signal one of them sent is the
    /// job's doing, and charged to it.
    pub containment: Option<Arc<Containment>>,
    /// The time a closed gate kept the attempt stopped
    /// (`--suspend-when-gated`): not counted against the deadline.
    pub pause: Option<Arc<PauseClock>>,
}

/// How a driven process ended.
pub(super) struct Driven {
    /// As its executor saw it (or abandoned, when it would not stop).
    pub outcome: ExecOutcome,
    /// Why the runner asked it to stop, if it did: the first reason.
    pub stopped: Option<StopReason>,
    /// The heartbeat task found the lease gone while it ran.
    pub lease_lost: bool,
    /// The heartbeat task could not renew the lease in time, and the
    /// process was stopped before the lease could run out: for how long
    /// no renewal had reached the store.
    pub fenced: Option<Duration>,
    /// It did not stop when asked and was dropped.
    pub abandoned: bool,
    /// The shutdown came from the job's own processes (`kill $PPID`):
    /// why, as its failure says it. Such a stop is charged, not released,
    /// or a job could rerun forever by stopping every runner that takes it.
    pub self_stop: Option<String>,
}

impl Worker {
    /// The context for one process the runner starts, the stopper that
    /// speaks to it, and the channel on which it reports its process group.
    pub(super) fn exec_context(
        &self,
        attempt: u32,
        started_at: Timestamp,
        lease_marker: Option<String>,
        containment: Option<Arc<Containment>>,
    ) -> (ExecContext, Stopper, watch::Receiver<Option<i32>>) {
        let (stopper, stop) = Stopper::new(self.cfg.kill_grace);
        let (pgid, pgid_rx) = watch::channel(None);
        let ctx = ExecContext {
            attempt,
            stop,
            pgid,
            log_dir: self.cfg.log_dir.clone(),
            log_cap: self.cfg.log_cap_bytes,
            kill_grace: self.cfg.kill_grace,
            started_at,
            lease_marker,
            containment,
            limits: self.cfg.limits,
            reporter: Some(self.reporter.clone()),
            hide_gpus: self.cfg.hide_gpus,
        };
        (ctx, stopper, pgid_rx)
    }

    /// Runs `process` until it ends, asking it to stop (through `stopper`)
    /// when its deadline passes, a shutdown is requested, or the heartbeat
    /// task says the job was cancelled or its lease lost, or that it could
    /// not renew the lease in time (the self-fence: killed once the fence's
    /// grace is over, however the executor counts its own). A first shutdown
    /// request stops it gracefully unless something else already does; a
    /// second one kills it at once. A process that has not stopped by the
    /// stopper's abandon time is dropped.
    pub(super) async fn drive(
        &mut self,
        process: impl Future<Output = ExecOutcome>,
        mut stopper: Stopper,
        oversight: Oversight,
    ) -> Driven {
        let Oversight {
            mut deadline,
            signals_seen,
            job,
            mut record_running_at,
            mut news,
            containment,
            pause,
        } = oversight;
        let mut self_stop = None;
        // Time the runner spent stopped (Ctrl-Z), and the time a closed gate
        // kept the attempt stopped, do not count against the deadline: the
        // monotonic clock ran on meanwhile.
        let paused_before = self.suspended.total();
        let base_deadline = deadline;
        tokio::pin!(process);
        let mut shutdown = self.shutdown.clone();
        let mut signals = signals_seen;
        let mut lease_lost = false;
        let mut fenced = None;
        // A fence's stop turns into a KILL once its grace is over.
        let mut fence_kill_at: Option<Instant> = None;
        let mut abandoned = false;
        // The runner record's write in flight, if one is.
        let mut recording: Option<Pin<Box<dyn Future<Output = ()> + Send>>> = None;
        let outcome = loop {
            tokio::select! {
                out = &mut process => break out,
                () = sleep_until_opt(deadline), if !stopper.is_stopping() => {
                    let gated = pause.as_ref().map_or(Duration::ZERO, |p| p.total(Instant::now()));
                    let paused = self.suspended.total().saturating_sub(paused_before) + gated;
                    let moved = base_deadline.map(|d| d + paused);
                    if moved.is_some_and(|d| d > Instant::now()) {
                        deadline = moved;
                    } else {
                        stopper.stop(StopReason::Timeout, false);
                    }
                }
                () = shutdown.reached(signals + 1) => {
                    let before = signals;
                    signals = shutdown.count();
                    if self_stop.is_none() && !stopper.is_stopping() {
                        if let Some(c) = &containment {
                            self_stop = sent_by_the_job(c, &shutdown, before);
                        }
                    }
                    self.tally(|s| s.interrupted = true);
                    let again = signals.saturating_sub(signals_seen) >= 2;
                    if !stopper.is_stopping() {
                        if let Some(job) = job {
                            let grace = self.cfg.kill_grace;
                            self.report(RunnerEvent::ShuttingDown { job, grace });
                        }
                        stopper.stop(StopReason::Shutdown, again);
                    } else if again {
                        stopper.stop(StopReason::Shutdown, true);
                    }
                }
                got = recv_opt(&mut news), if news.is_some() => match got {
                    Some(HeartbeatNews::LeaseLost) => {
                        lease_lost = true;
                        stopper.stop(StopReason::LeaseLost, false);
                    }
                    Some(HeartbeatNews::Fenced { silent, grace }) => {
                        fenced = Some(silent);
                        if let Some(job) = job {
                            self.report(RunnerEvent::Fenced { job, silent, grace });
                        }
                        // Stopped as a lost lease is: it may be lost by now.
                        stopper.stop(StopReason::LeaseLost, grace.is_zero());
                        fence_kill_at = Some(Instant::now() + grace);
                    }
                    Some(HeartbeatNews::CancelRequested) => stopper.stop(StopReason::Cancelled, false),
                    Some(HeartbeatNews::Warning(message)) => self.warn(message),
                    None => news = None,
                },
                () = sleep_until_opt(fence_kill_at) => {
                    fence_kill_at = None;
                    stopper.stop(StopReason::LeaseLost, true);
                }
                () = sleep_until_opt(record_running_at) => {
                    record_running_at = None;
                    if job.is_some() {
                        // Beside the loop, not in it: a store that does not
                        // answer (a partition) must not hold up the stop
                        // when the fence falls (S26).
                        let worker = Worker { sh: self.sh.clone(), busy_warned: false };
                        recording = Some(Box::pin(async move { worker.record_running().await }));
                    }
                }
                () = poll_opt(&mut recording) => recording = None,
                () = sleep_until_opt(stopper.abandon_at()) => {
                    abandoned = true;
                    break ExecOutcome::Stopped {
                        detail: "abandoned: it did not stop when asked".to_owned(),
                    };
                }
            }
        };
        // Finished before the attempt's end is written, so that the
        // records keep their order.
        if let Some(recording) = recording {
            recording.await;
        }
        Driven { outcome, stopped: stopper.reason(), lease_lost, fenced, abandoned, self_stop }
    }
}

/// Whether a shutdown request after the first `before` came from one of
/// the attempt's processes: `stopped its own runner (SIGTERM from pid 812,
/// a process of this job)`.
fn sent_by_the_job(c: &Containment, shutdown: &ShutdownSignal, before: u32) -> Option<String> {
    let requests = shutdown.requests();
    requests.iter().skip(before as usize).find_map(|r| {
        let sender = r.sender.as_ref().filter(|s| c.sent(s))?;
        let signal = r
            .signal
            .map(|s| {
                signal_hook::low_level::signal_name(s).map_or(format!("signal {s}"), str::to_owned)
            })
            .unwrap_or_else(|| "a signal".to_owned());
        Some(format!(
            "stopped its own runner ({signal} from pid {}, a process of this job)",
            sender.pid
        ))
    })
}

pub(super) async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

async fn poll_opt(f: &mut Option<Pin<Box<dyn Future<Output = ()> + Send>>>) {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

async fn recv_opt(
    news: &mut Option<mpsc::UnboundedReceiver<HeartbeatNews>>,
) -> Option<HeartbeatNews> {
    match news {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
