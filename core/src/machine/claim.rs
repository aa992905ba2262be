//! **The claim rule**: which job a claim takes and which abandoned jobs it
//! ends on the way ([`plan_claim_in_order`]), from what the request asks
//! for ([`ClaimRequest`]), the running jobs and the due jobs a store hands
//! over in claim order, pulled one by one until one may be taken. Every
//! predicate (the filter, the lanes, holds, parents, the jobs a request
//! refuses, free GPUs) is applied here, whatever the store pushed down into its
//! search; a store decides nothing.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{ClaimOutcome, LaneCheck, Transition, TransitionError, claim, invalid};
use crate::gpu::{GpuHold, GpuOffer, GpuPool, holds_on, holds_words};
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
    /// This claimer's sight of its host's GPUs and its rules: a job that
    /// needs GPUs is taken only with that many free here (`crate::gpu`).
    /// `None`: no job that needs GPUs is taken (they wait for a claimer
    /// that can see GPUs).
    pub gpus: Option<GpuOffer>,
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
            gpus: None,
        }
    }

    /// Offers this host's GPUs ([`ClaimRequest::gpus`]).
    #[must_use]
    pub fn gpus(mut self, offer: GpuOffer) -> Self {
        self.gpus = Some(offer);
        self
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
            .field("gpus", &self.gpus)
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
/// A job that asks for GPUs ([`Job::gpus`]) is taken only with that many
/// free on the claimer's host, measured through the request's
/// [`GpuOffer`] (asked once, at the first such candidate, never when there
/// is none) less the GPUs the running jobs on that host hold; it gets the
/// lowest free ones, written into its lease and its `claimed` event. One
/// that does not fit is passed over, and lower ones may take the free GPUs
/// until its wait passes the offer's bound ([`GpuPool::reserve_for`], the
/// starvation rule). A claimer without an offer takes no such job.
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
    let running: Vec<Job> = running.into_iter().collect();
    let mut gpus = Gpus::new(request, &running);
    let mut plan = plan_running(request, lanes, running, now, policy);
    if let Some(take) = plan.take.take() {
        plan.take = gpus.fit(take, now);
    }
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
                let Some(take) = gpus.fit(PlannedWrite { before: job, after }, now) else {
                    continue; // its GPUs are not free here: the next job may fit
                };
                plan.take = Some(take);
                break;
            }
            // A pending job is never retired: claim() retires only
            // running ones.
            ClaimOutcome::Retired(_) => return Err(invalid(&job, "claim").into()),
        }
    }
    Ok(plan)
}

/// The GPU condition of one claim: the holds on the claimer's host (read
/// from the running jobs), and the pool of free GPUs, measured only when
/// the first candidate that needs GPUs comes up.
struct Gpus<'r> {
    offer: Option<&'r GpuOffer>,
    holds: std::collections::BTreeMap<String, JobId>,
    look: Option<crate::gpu::GpuLook>,
    pool: Option<GpuPool>,
}

impl<'r> Gpus<'r> {
    fn new(request: &'r ClaimRequest, running: &[Job]) -> Self {
        let holds = match &request.gpus {
            Some(_) => holds_on(&request.owner.host, running),
            None => std::collections::BTreeMap::new(),
        };
        Gpus { offer: request.gpus.as_ref(), holds, look: None, pool: None }
    }

    fn look<'s>(
        look: &'s mut Option<crate::gpu::GpuLook>,
        offer: &GpuOffer,
    ) -> &'s crate::gpu::GpuLook {
        look.get_or_insert_with(|| offer.sight.look())
    }

    /// The planned take with its GPUs in its lease and trail, or `None`
    /// when it needs GPUs this claimer cannot hand out now (see
    /// [`GpuPool::reserve_for`] for the starvation rule). A job that needs
    /// none passes unchanged. A job taken back from its owner gives up the
    /// GPUs it held, so they count as free for it alone: if a due job
    /// comes first instead, the old attempt keeps them.
    fn fit(&mut self, mut take: PlannedWrite, now: Timestamp) -> Option<PlannedWrite> {
        let Some(request) = take.before.gpus.clone() else { return Some(take) };
        let offer = self.offer?;
        let got = if let Some(lease) = &take.before.lease {
            let mut holds = self.holds.clone();
            holds.retain(|uuid, _| !lease.gpus.iter().any(|h| &h.uuid == uuid));
            let busy = offer.busy_above_pct;
            GpuPool::new(Self::look(&mut self.look, offer), &holds, busy).take(&request)
        } else {
            if self.pool.is_none() {
                let pool = GpuPool::new(
                    Self::look(&mut self.look, offer),
                    &self.holds,
                    offer.busy_above_pct,
                );
                self.pool = Some(pool);
            }
            let pool = self.pool.as_mut()?;
            let got = pool.take(&request);
            if got.is_none() {
                pool.reserve_for(&take.before, &request, now, offer.backfill_for);
            }
            got
        };
        give(&mut take.after, got?);
        Some(take)
    }
}

/// Writes `holds` into a claim's lease and its `claimed` event.
fn give(after: &mut Transition, holds: Vec<GpuHold>) {
    let words = holds_words(&holds);
    if let Some(e) =
        after.events.iter_mut().rev().find(|e| e.kind == crate::job::EventKind::Claimed)
    {
        e.message = Some(words);
    }
    if let Some(lease) = after.job.lease.as_mut() {
        lease.gpus = holds;
    }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::gpu::{Gpu, GpuLook, GpuRequest, GpuSight, visible_devices};
    use crate::job::NewJob;
    use crate::liveness::ClockOnly;
    use crate::machine::create;

    const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);
    const GIB: u64 = 1 << 30;

    /// A host's GPUs as a fixed look, counting how often it is asked.
    struct Fixed(Vec<(u64, u8)>, AtomicUsize);

    impl GpuSight for Fixed {
        fn look(&self) -> GpuLook {
            self.1.fetch_add(1, Ordering::SeqCst);
            let gpus = (0u32..)
                .zip(&self.0)
                .map(|(i, &(used, util))| Gpu {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    name: "H100".into(),
                    memory_used: used * GIB,
                    memory_total: 80 * GIB,
                    utilization: Some(util),
                    processes: Vec::new(),
                })
                .collect();
            GpuLook { gpus, error: None }
        }
    }

    fn sight(gpus: Vec<(u64, u8)>) -> Arc<Fixed> {
        Arc::new(Fixed(gpus, AtomicUsize::new(0)))
    }

    fn on(host: &str, sight: &Arc<Fixed>) -> ClaimRequest {
        let mut owner = Owner::named(format!("runner-on-{host}"));
        owner.host = host.to_owned();
        let offer = GpuOffer {
            sight: sight.clone(),
            busy_above_pct: 10,
            backfill_for: Duration::from_secs(600),
        };
        ClaimRequest::new(owner, Arc::new(ClockOnly)).gpus(offer)
    }

    fn job(id: JobId, priority: i32, gpus: Option<u32>) -> Job {
        let mut new = NewJob::shell("train", "/").priority(priority);
        new.gpus = gpus.map(|count| GpuRequest { count, memory: None });
        create(id, &new, &[], T0, &Policy::default()).job
    }

    fn plan(r: &ClaimRequest, running: &[Job], due: &[Job], now: Timestamp) -> Option<Job> {
        let due = due.iter().cloned().map(Ok::<_, TransitionError>);
        let plan = plan_claim_in_order(
            r,
            &LaneCheck::open(),
            running.to_vec(),
            due,
            now,
            &Policy::default(),
        )
        .expect("a plan");
        plan.take.map(|t| t.after.job)
    }

    fn devices(job: &Job) -> String {
        visible_devices(&job.lease.as_ref().expect("a lease").gpus)
    }

    #[test]
    fn a_job_that_needs_gpus_is_passed_over_by_a_claimer_that_sees_none() {
        let r = ClaimRequest::new(Owner::named("blind"), Arc::new(ClockOnly));
        let got = plan(&r, &[], &[job(1, 5, Some(1)), job(2, 0, None)], T0).expect("a take");
        assert_eq!(got.id, 2);
        assert!(got.lease.expect("a lease").gpus.is_empty());
    }

    #[test]
    fn gpu_jobs_get_distinct_free_gpus_and_wait_when_none_are_left() {
        let s = sight(vec![(0, 0), (50, 95), (0, 0)]);
        let r = on("box", &s);
        let first =
            plan(&r, &[], &[job(1, 0, Some(1)), job(2, 0, Some(1)), job(3, 0, Some(1))], T0)
                .expect("the first");
        assert_eq!((first.id, devices(&first)), (1, "0".to_owned()));
        let claimed = first.clone();
        let second =
            plan(&r, std::slice::from_ref(&claimed), &[job(2, 0, Some(1)), job(3, 0, Some(1))], T0)
                .expect("the second");
        assert_eq!((second.id, devices(&second)), (2, "2".to_owned()), "GPU 1 is busy");
        let none = plan(&r, &[claimed, second], &[job(3, 0, Some(1)), job(4, -1, None)], T0)
            .expect("the job that needs none");
        assert_eq!(none.id, 4, "no GPU is free: the GPU job waits, the other runs");
    }

    #[test]
    fn holds_on_another_host_leave_this_hosts_gpus_free() {
        let s = sight(vec![(0, 0)]);
        let there = plan(&on("a", &s), &[], &[job(1, 0, Some(1))], T0).expect("on a");
        let here = plan(&on("b", &s), std::slice::from_ref(&there), &[job(2, 0, Some(1))], T0);
        assert_eq!(here.map(|j| devices(&j)), Some("0".to_owned()));
        assert!(plan(&on("a", &s), &[there], &[job(2, 0, Some(1))], T0).is_none());
    }

    #[test]
    fn a_claim_without_gpu_candidates_never_looks_at_the_gpus() {
        let s = sight(vec![(0, 0)]);
        let got = plan(&on("box", &s), &[], &[job(1, 0, None)], T0).expect("a take");
        assert_eq!(got.id, 1);
        assert_eq!(s.1.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_big_job_lets_small_ones_backfill_until_its_wait_passes_the_bound() {
        let s = sight(vec![(0, 0), (70, 0), (70, 0), (70, 0)]);
        let r = on("box", &s);
        let due = [job(1, 9, Some(4)), job(2, 0, Some(1)), job(3, -1, None)];
        let soon = T0.saturating_add(Duration::from_secs(599));
        assert_eq!(plan(&r, &[], &due, soon).map(|j| j.id), Some(2), "backfill");
        let late = T0.saturating_add(Duration::from_secs(600));
        assert_eq!(
            plan(&r, &[], &due, late).map(|j| j.id),
            Some(3),
            "reserved: no GPU job behind the big one starts, a job without GPUs does"
        );
    }

    #[test]
    fn a_job_taken_back_may_have_its_own_gpus_again() {
        let s = sight(vec![(0, 0)]);
        let r = on("box", &s);
        let first = plan(&r, &[], &[job(1, 0, Some(1))], T0).expect("claimed");
        let late = T0.saturating_add(Duration::from_secs(3600));
        let again = plan(&r, &[first], &[], late).expect("taken back");
        assert_eq!((again.id, again.attempts, devices(&again)), (1, 2, "0".to_owned()));
    }
}
