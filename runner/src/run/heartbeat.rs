//! An attempt's heartbeat task: extends the lease while the job runs,
//! records the job's process group once it has run a little, and tells the
//! attempt's driver when the job was cancelled or its lease lost.

use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{Clock, Fence, JobId, Lease, Store, StoreError, Timestamp};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::config::RunnerConfig;
use crate::contain::Containment;

/// How long a job runs before the runner records its process group in the
/// lease and `Running` in its runner record. Until then a successor finds
/// the job's processes by their [`LEASE_VAR`](crate::contain::LEASE_VAR)
/// marker if this runner dies; recording at once cost a write (an fsync'd
/// commit on redb) for every job, though most short jobs end before it.
pub(super) const PGID_RECORD_DELAY: Duration = Duration::from_millis(200);

/// What the heartbeat task tells the job's driver.
pub(super) enum HeartbeatNews {
    /// The lease is no longer this attempt's (or the job is gone).
    LeaseLost,
    /// A user asked for the job to be cancelled.
    CancelRequested,
    /// A heartbeat failed; the next one will try again.
    Warning(String),
}

/// How often the heartbeat task writes (a heartbeat) and reads (the check
/// for a cancel or a lost lease).
pub(super) struct Cadence {
    beat: Duration,
    check: Duration,
}

impl Cadence {
    /// For an attempt whose claim gave `lease` at `now`: a beat every third
    /// of the lease unless configured (never more often than every 100 ms;
    /// a claim without a lease counts as a 60 s one), a check as configured
    /// (never more often than every 50 ms).
    pub(super) fn new(cfg: &RunnerConfig, lease: Option<&Lease>, now: Timestamp) -> Cadence {
        let lease_left = lease.map_or(Duration::from_secs(60), |l| l.until.duration_since(now));
        Cadence {
            beat: cfg.heartbeat_interval.unwrap_or(lease_left / 3).max(Duration::from_millis(100)),
            check: cfg.cancel_check_interval.max(Duration::from_millis(50)),
        }
    }
}

/// The attempt's processes as the heartbeat task follows them: the group
/// the executor reports, and everything the attempt started.
pub(super) struct Processes {
    pub pgid: watch::Receiver<Option<i32>>,
    pub containment: Arc<Containment>,
}

/// Extends the lease at the cadence's beat while the job runs, and records
/// the job's process group once it is known and the job has run for
/// [`PGID_RECORD_DELAY`] (so that a successor can kill it if this runner
/// dies). Tells the driver when the lease is lost or a cancel was
/// requested. The driver aborts this task when the job has ended.
pub(super) async fn heartbeat_loop(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    id: JobId,
    fence: Fence,
    cadence: Cadence,
    processes: Processes,
    news: mpsc::UnboundedSender<HeartbeatNews>,
) {
    let Processes { mut pgid, containment } = processes;
    let Cadence { beat: every, check: check_every } = cadence;
    let mut recorded: Option<i32> = None;
    let mut pgid_open = true;
    let mut next = Instant::now() + every;
    let mut next_check = Instant::now() + check_every;
    let mut cancel_told = false;
    let record_from = Instant::now() + PGID_RECORD_DELAY;
    let mut pgid_waiting = false;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = tokio::time::sleep_until(record_from), if pgid_waiting => pgid_waiting = false,
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
                if Instant::now() < record_from {
                    pgid_waiting = true;
                    continue;
                }
            }
        }
        // Remember the attempt's processes while they still lead back to
        // the job (a later escapee that cut every tie stays known), and
        // reap its adopted orphans.
        containment.observe();
        containment.reap_adopted();
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
