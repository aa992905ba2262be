//! An attempt's heartbeat task: extends the lease while the job runs,
//! records the job's process group once it has run a little, and tells the
//! attempt's driver when the job was cancelled or its lease lost — or,
//! when no renewal got through for too long, that the attempt must be
//! stopped before its lease can run out (the self-fence, [`FencePlan`]).
//!
//! The fence is kept on this host's monotonic clock and raced against
//! every store call, so a call that hangs (a connection to a server cut
//! off without a reset) cannot hold it back.

use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{Claimed, Clock, Fence, Job, JobId, Lease, Store, StoreError, Timestamp};
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
    /// No renewal reached the store for `silent`: the lease may run out
    /// before this runner hears from the store again, and another runner
    /// may then take the job. Its processes must be gone by then: stop
    /// them now, killing what is left after `grace`.
    Fenced { silent: Duration, grace: Duration },
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

/// How far the clock that judges a lease may be from this host's: the
/// PostgreSQL store treats an offset under 250 ms as none on each host
/// (so two hosts may disagree by 500 ms), measures the rest to within
/// half a round trip, and measures it again only every minute. One clock
/// (SQLite, redb on one host) needs none of it; a clock stepped by hand
/// is beyond any allowance (S11, S12 are judged by the owner's liveness).
pub(crate) const FENCE_CLOCK_ALLOWANCE: Duration = Duration::from_secs(1);

/// The time a stop takes after its KILL: the group's end, the last of the
/// attempt's processes found and killed (`Containment::stop_all`), the
/// runner's own scheduling.
pub(crate) const FENCE_STOP_ALLOWANCE: Duration = Duration::from_millis(500);

/// When a runner that cannot renew an attempt's lease stops the attempt:
/// `after` the last renewal that reached the store was sent (the store
/// dates the new lease from a `now` read before sending, so the lease
/// ends at `sent + lease`, give or take the clocks' offset), with TERM
/// and KILL `grace` later.
///
/// The margin before the lease's end is the sum of `grace`,
/// [`FENCE_CLOCK_ALLOWANCE`] and [`FENCE_STOP_ALLOWANCE`], so the job's
/// processes are gone before another runner may take the job. The fence never comes before half
/// the lease (heartbeats come every third of it and must have time to
/// land): a lease shorter than twice the full margin (7 s with the
/// default 2 s kill grace) shortens the fence's grace instead, down to
/// none (KILL at once) for a lease of 3 s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FencePlan {
    /// From the last renewal sent to the stop.
    pub after: Duration,
    /// From TERM to KILL, in that stop.
    pub grace: Duration,
}

impl FencePlan {
    /// The plan for a lease of length `lease` and a kill grace of
    /// `kill_grace`.
    pub(crate) fn new(lease: Duration, kill_grace: Duration) -> FencePlan {
        let allowances = FENCE_CLOCK_ALLOWANCE + FENCE_STOP_ALLOWANCE;
        let after = lease.saturating_sub(kill_grace + allowances).max(lease / 2);
        let grace = kill_grace.min(lease.saturating_sub(after).saturating_sub(allowances));
        FencePlan { after, grace }
    }

    /// The plan for `job` as its claim gave it: the lease's length is
    /// its end less the attempt's start, both on the store's clock (a
    /// claim without a lease counts as a 60 s one).
    pub(super) fn for_job(job: &Job, kill_grace: Duration) -> FencePlan {
        let lease = match (&job.lease, job.started_at) {
            (Some(l), Some(start)) => l.until.duration_since(start),
            _ => Duration::from_secs(60),
        };
        FencePlan::new(lease, kill_grace)
    }
}

/// A claimed job and when its claim was asked for: the lease it was given
/// is dated no earlier, so the fence counts from then.
pub(super) struct Taken {
    pub claimed: Claimed,
    pub asked: Instant,
}

/// When the fence falls for a store call begun at `started`, given the
/// fence time and whether the store failed to answer last time. A call
/// begun after the fence time by a runner whose store was answering (the
/// runner itself was stopped, or its host suspended, past it) gets
/// [`FENCE_CLOCK_ALLOWANCE`] to answer: on this host a live owner keeps
/// its job past its lease, and a renewal then goes through.
fn call_deadline(fence_at: Instant, started: Instant, failing: bool) -> Instant {
    if failing || fence_at > started { fence_at } else { started + FENCE_CLOCK_ALLOWANCE }
}

/// Extends the lease at the cadence's beat while the job runs, and records
/// the job's process group once it is known and the job has run for
/// [`PGID_RECORD_DELAY`] (so that a successor can kill it if this runner
/// dies). Tells the driver when the lease is lost or a cancel was
/// requested, and when no renewal got through in time (`fence`, counted
/// from `asked`, when the claim was asked for): then it stops. The driver
/// aborts this task when the job has ended.
#[expect(clippy::too_many_arguments, reason = "one task's inputs, each used once")]
pub(super) async fn heartbeat_loop(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    id: JobId,
    fence: Fence,
    cadence: Cadence,
    processes: Processes,
    (plan, asked): (FencePlan, Instant),
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
    // When the last renewal that the store answered was sent, and whether
    // the store failed to answer the last call.
    let mut renewed = asked;
    let mut failing = false;
    let fenced = |renewed: Instant| {
        let _ = news.send(HeartbeatNews::Fenced { silent: renewed.elapsed(), grace: plan.grace });
    };
    loop {
        let fence_at = renewed + plan.after;
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = tokio::time::sleep_until(fence_at), if failing => return fenced(renewed),
            () = tokio::time::sleep_until(record_from), if pgid_waiting => pgid_waiting = false,
            () = tokio::time::sleep_until(next_check), if next_check < next => {
                let started = Instant::now();
                next_check = started + check_every;
                // A read, not a write: only look for news between beats;
                // one still unanswered at the next beat is given up.
                let answer = tokio::select! {
                    got = store.get(id) => Some(got),
                    () = tokio::time::sleep_until(next) => None,
                    () = tokio::time::sleep_until(call_deadline(fence_at, started, failing)) => {
                        return fenced(renewed);
                    }
                };
                match answer {
                    Some(Ok(job)) => {
                        failing = false;
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
                    Some(Err(StoreError::NotFound(_))) => {
                        let _ = news.send(HeartbeatNews::LeaseLost);
                        return;
                    }
                    // Busy and the like: the next beat will tell.
                    Some(Err(e)) => failing |= e.is_temporary(),
                    None => {}
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
        let sent = Instant::now();
        let answer = tokio::select! {
            got = store.heartbeat(id, &fence, send, clock.now()) => got,
            () = tokio::time::sleep_until(call_deadline(fence_at, sent, failing)) => {
                return fenced(renewed);
            }
        };
        match answer {
            Ok(ack) => {
                renewed = sent;
                failing = false;
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
                // Once per streak: while it lasts the beat comes at the
                // check's pace, so that a store back soon renews soon.
                if !failing {
                    let _ = news.send(HeartbeatNews::Warning(format!(
                        "heartbeat for job #{id} failed: {e}; will retry"
                    )));
                }
                failing = true;
            }
        }
        next = Instant::now() + if failing { every.min(check_every) } else { every };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    #[test]
    fn the_fence_leaves_the_kill_grace_and_the_allowances_before_the_lease_ends() {
        // The default: a 60 s lease, a 2 s grace: 3.5 s of margin.
        assert_eq!(FencePlan::new(s(60.0), s(2.0)), FencePlan { after: s(56.5), grace: s(2.0) });
        // From 7 s down the fence comes at half the lease, its grace shrunk.
        assert_eq!(FencePlan::new(s(7.0), s(2.0)), FencePlan { after: s(3.5), grace: s(2.0) });
        assert_eq!(FencePlan::new(s(5.0), s(2.0)), FencePlan { after: s(2.5), grace: s(1.0) });
        assert_eq!(FencePlan::new(s(3.0), s(2.0)), FencePlan { after: s(1.5), grace: s(0.0) });
        for lease in [3.0, 4.0, 5.0, 7.0, 10.0, 60.0, 3600.0] {
            let plan = FencePlan::new(s(lease), s(2.0));
            let gone = plan.after + plan.grace + FENCE_STOP_ALLOWANCE;
            assert!(gone + FENCE_CLOCK_ALLOWANCE <= s(lease), "{lease}: {plan:?}");
            assert!(plan.after >= s(lease) / 2, "{lease}: renewals have room: {plan:?}");
        }
    }

    #[test]
    fn a_call_begun_past_the_fence_by_a_stopped_runner_gets_a_moment() {
        let t = Instant::now();
        let later = t + s(5.0);
        assert_eq!(call_deadline(later, t, false), later);
        assert_eq!(call_deadline(later, t, true), later);
        assert_eq!(call_deadline(t, later, true), t, "failing: the fence falls at once");
        assert_eq!(call_deadline(t, later, false), later + FENCE_CLOCK_ALLOWANCE);
    }
}
