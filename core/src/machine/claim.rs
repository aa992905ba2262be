//! **The claim rule**: which job a claim takes and which abandoned jobs it
//! ends on the way ([`plan_claim_in_order`]), from what the request asks
//! for ([`ClaimRequest`]), the running jobs and the due jobs a store hands
//! over in claim order, pulled one by one until one may be taken. Every
//! predicate (the filter, the lanes, holds, parents, the jobs a request
//! refuses) is applied here, whatever the store pushed down into its
//! search; a store decides nothing.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{ClaimOutcome, LaneCheck, Transition, TransitionError, claim, invalid};
use crate::job::{Fence, Job, JobId, JobState, Lease, Owner};
use crate::liveness::{Liveness, LivenessJudge};
use crate::policy::Policy;
use crate::time::Timestamp;

/// Which jobs a claim may take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimFilter {
    /// Only these queues; empty means every queue.
    pub queues: Vec<String>,
    /// Only these kinds; `None` means every kind, and `Some(vec![])`
    /// admits nothing (a runner with no executors claims nothing).
    pub kinds: Option<Vec<String>>,
}

impl ClaimFilter {
    /// Whether `job` passes the filter.
    pub fn admits(&self, job: &Job) -> bool {
        (self.queues.is_empty() || self.queues.contains(&job.queue))
            && self.kinds.as_ref().is_none_or(|ks| ks.contains(&job.kind))
    }
}

/// Which running jobs a claim may take from their owners.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reclaim {
    /// Only jobs whose lease expired while the judge could not tell
    /// ([`Liveness::Unknown`]). A job whose owner the judge says is gone is
    /// left alone: its dead attempt may still have processes running, and
    /// only a caller that killed them first may take it back, with
    /// [`crate::Store::reclaim_dead`]. What a runner asks for.
    ExpiredOnly,
    /// Also the jobs of owners the judge says are gone, at once. For a
    /// caller with nothing left to kill (tests, models, remote owners).
    #[default]
    DeadOrExpired,
}

/// What a claim asks for: who claims, which jobs it may take, who judges
/// the owners of running jobs, and whether a dead owner's job may be taken.
#[derive(Clone)]
pub struct ClaimRequest {
    /// The claimer; the lease is written in its name.
    pub owner: Owner,
    /// The queues and kinds it can run.
    pub filter: ClaimFilter,
    /// Judges the owner of each running job's lease. Called inside the
    /// claim's transaction, so its verdict is about the very lease acted
    /// on; that is why it comes as an `Arc` (a backend may move it onto
    /// its blocking pool).
    pub judge: Arc<dyn LivenessJudge>,
    /// Whether dead owners' jobs may be taken, or only expired leases.
    pub reclaim: Reclaim,
    /// Jobs this claimer will not take (e.g. a runner whose handler refused
    /// one): passed over as if its lane were closed, for this claimer only;
    /// other claimers may still take them. An abandoned job among them is
    /// still retired (that hands it to nobody).
    pub refused: BTreeSet<JobId>,
}

impl ClaimRequest {
    /// A request by `owner` for any job, judged by `judge`, taking dead
    /// owners' jobs too ([`Reclaim::DeadOrExpired`]).
    pub fn new(owner: Owner, judge: Arc<dyn LivenessJudge>) -> Self {
        ClaimRequest {
            owner,
            filter: ClaimFilter::default(),
            judge,
            reclaim: Reclaim::default(),
            refused: BTreeSet::new(),
        }
    }

    /// Never takes these jobs ([`ClaimRequest::refused`]).
    #[must_use]
    pub fn refusing(mut self, ids: impl IntoIterator<Item = JobId>) -> Self {
        self.refused.extend(ids);
        self
    }

    /// Only jobs `filter` admits.
    #[must_use]
    pub fn filter(mut self, filter: ClaimFilter) -> Self {
        self.filter = filter;
        self
    }

    /// Takes running jobs as `reclaim` allows.
    #[must_use]
    pub fn reclaim(mut self, reclaim: Reclaim) -> Self {
        self.reclaim = reclaim;
        self
    }

    /// The judge's verdict on a running job's owner, as this request lets
    /// the claim act on it: a gone owner counts as alive (not ours to
    /// take) under [`Reclaim::ExpiredOnly`].
    fn verdict(&self, lease: &Lease) -> Liveness {
        match (self.judge.judge(lease), self.reclaim) {
            (Liveness::Gone, Reclaim::ExpiredOnly) => Liveness::Alive,
            (verdict, _) => verdict,
        }
    }
}

impl std::fmt::Debug for ClaimRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimRequest")
            .field("owner", &self.owner)
            .field("filter", &self.filter)
            .field("reclaim", &self.reclaim)
            .field("refused", &self.refused)
            .finish_non_exhaustive()
    }
}

/// One write a plan asks for: the job as read, and its transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedWrite {
    /// The job as the store read it (stores key their index updates on it).
    pub before: Job,
    /// What to write instead.
    pub after: Transition,
}

/// What one claim writes, decided by [`plan_claim_in_order`]: the abandoned jobs it
/// ends on the way, then the job it takes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimPlan {
    /// Abandoned running jobs that must not run again (out of attempts, or
    /// cancelled while their owner was away), ended now; written first.
    pub retire: Vec<PlannedWrite>,
    /// The job the claimer takes, if any.
    pub take: Option<PlannedWrite>,
}

/// A successful claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The job, now running under the claimer's lease.
    pub job: Job,
    /// The proof of ownership for every later write.
    pub fence: Fence,
    /// Set when the job was taken back from a previous owner.
    pub reclaimed_from: Option<Owner>,
}

impl ClaimPlan {
    /// What the claimer gets once the plan is written.
    pub fn claimed(&self) -> Option<Claimed> {
        let take = self.take.as_ref()?;
        let fence = take.after.job.lease.as_ref()?.fence();
        Some(Claimed {
            job: take.after.job.clone(),
            fence,
            reclaimed_from: take.before.lease.as_ref().map(|l| l.owner.clone()),
        })
    }
}

/// The most due jobs one claim looks at before it gives up: a claim whose
/// candidates are all passed over (refused, or of a closed lane the store
/// could not skip in its index) takes nothing this time rather than read
/// the whole queue inside the write transaction.
pub const CLAIM_SCAN_CAP: usize = 1_000;

/// **The claim rule.** Which job a claim takes, and which abandoned jobs it
/// ends on the way, from what a store reads inside the claim's
/// transaction:
///
/// - `lanes`: the lanes' settings with every running job counted
///   ([`LaneCheck::new`], built from the same read as `running`);
/// - `running`: every running job (the plan applies the filter itself and
///   asks the request's judge about each lease);
/// - `due`: pending jobs in claim order (highest priority, earliest
///   `not_before`, lowest id), pulled only as far as needed. The store may
///   leave out jobs it knows no predicate admits (its indexes' pushdown) and
///   may include any others: every predicate is applied here — due now
///   (not held, no parent left, its time come), the filter, the lane
///   ([`LaneCheck::may_start`]), not refused ([`ClaimRequest::refused`]).
///   A job that is not pending at all means the store's search is out of
///   step with its rows: `InvalidTransition`, and the store reports damage.
///   At most [`CLAIM_SCAN_CAP`] are looked at.
///
/// An expired job is taken back only when its lane would let it start
/// besides itself ([`LaneCheck::may_take_back`]): not while paused, and
/// only under the limit. Retiring an abandoned job starts nothing, so
/// lanes do not hold it up.
///
/// Every admitted running job that may be taken from its owner (see
/// [`Reclaim`] and [`reclaimable`](super::reclaimable)) but must not run
/// again is retired, whether or not it would have won. Of the others and
/// the first due job every predicate admits, the first in claim order is
/// taken.
pub fn plan_claim_in_order<E: From<TransitionError>>(
    request: &ClaimRequest,
    lanes: &LaneCheck,
    running: impl IntoIterator<Item = Job>,
    due: impl IntoIterator<Item = Result<Job, E>>,
    now: Timestamp,
    policy: &Policy,
) -> Result<ClaimPlan, E> {
    let mut plan = plan_running(request, lanes, running, now, policy);
    for job in due.into_iter().take(CLAIM_SCAN_CAP) {
        let job = job?;
        if plan.take.as_ref().is_some_and(|b| b.before.claim_order() < job.claim_order()) {
            break; // the job taken back comes first; so would it before every later one
        }
        if job.state != JobState::Pending {
            return Err(invalid(&job, "claim").into());
        }
        if !job.is_due(now)
            || !request.filter.admits(&job)
            || !lanes.may_start(&job.queue)
            || request.refused.contains(&job.id)
        {
            continue;
        }
        match claim(&job, &request.owner, now, policy, Liveness::Unknown)? {
            ClaimOutcome::Claimed(after) => {
                plan.take = Some(PlannedWrite { before: job, after });
                break;
            }
            // A pending job is never retired: claim() retires only
            // running ones.
            ClaimOutcome::Retired(_) => return Err(invalid(&job, "claim").into()),
        }
    }
    Ok(plan)
}

/// The running jobs' part of a claim: every abandoned one the filter
/// admits that must not run again, retired; of those that may be taken
/// back (lane permitting, not refused), the first in claim order.
fn plan_running(
    request: &ClaimRequest,
    lanes: &LaneCheck,
    running: impl IntoIterator<Item = Job>,
    now: Timestamp,
    policy: &Policy,
) -> ClaimPlan {
    let mut plan = ClaimPlan::default();
    for job in running {
        if job.state != JobState::Running || !request.filter.admits(&job) {
            continue;
        }
        let Some(lease) = &job.lease else { continue };
        let verdict = request.verdict(lease);
        let Ok(outcome) = claim(&job, &request.owner, now, policy, verdict) else {
            continue; // alive, or unknown and not expired: not ours to take
        };
        match outcome {
            ClaimOutcome::Retired(after) => plan.retire.push(PlannedWrite { before: job, after }),
            ClaimOutcome::Claimed(_)
                if !lanes.may_take_back(&job) || request.refused.contains(&job.id) => {}
            ClaimOutcome::Claimed(after) => {
                if plan.take.as_ref().is_none_or(|b| job.claim_order() < b.before.claim_order()) {
                    plan.take = Some(PlannedWrite { before: job, after });
                }
            }
        }
    }
    plan
}
