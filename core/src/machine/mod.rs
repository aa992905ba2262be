//! The state machine: every transition a pure function of
//! (job, input, now, policy) that returns the new job and the events to
//! append, or says why it refuses.
//!
//! Stores call these inside one transaction: read the job, apply the
//! function, write the result with the old owner and attempt in the write's
//! condition, append the events. Nothing here reads a clock or touches I/O,
//! so the same functions serve as the reference model in tests.

use std::time::Duration;

use crate::job::{Event, EventKind, Fence, Job, JobId, JobState, Lease, NewJob, Owner};
use crate::liveness::Liveness;
use crate::policy::Policy;
use crate::time::Timestamp;

mod after;
mod claim;
mod edit;
mod lanes;
mod validate;

pub use after::{
    Graph, MAX_PARENTS, cancel_takes, check_retry, check_supersede, count_not_done, load_parents,
    plan_purge, plan_with_dependents, resolve_parents, restored,
};
pub use claim::{
    CLAIM_SCAN_CAP, ClaimFilter, ClaimPlan, ClaimRequest, Claimed, PlannedWrite, Reclaim,
    plan_claim_in_order,
};
pub use edit::{JobEdit, clone_of, cloned_events, edit};
pub use lanes::{AttemptNote, LaneCheck, LaneVerdict, hold, note_attempt, release_hold};
pub use validate::{
    MAX_ARG_LEN, MAX_ATTEMPTS, MAX_MAX_RUNTIME, MAX_NAME_LEN, MIN_MAX_RUNTIME, check_restore,
    is_plain_name, payload_hash, validate,
};

/// A transition's result: the job as it must be written, and the events to
/// append to its trail (possibly none, as for a heartbeat).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The job after the transition.
    pub job: Job,
    /// The events, in order.
    pub events: Vec<Event>,
}

/// Why a transition refused; it changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// The caller is not (or no longer) the owner of this attempt.
    #[error("lease lost: job #{id} is no longer held by this owner")]
    LeaseLost {
        /// The job.
        id: JobId,
    },
    /// The job is in a state where this action makes no sense.
    #[error("cannot {action} job #{id}: it is {state}")]
    InvalidTransition {
        /// The job.
        id: JobId,
        /// Its current state.
        state: JobState,
        /// What was attempted (`cancel`, `retry`, `claim`).
        action: &'static str,
    },
    /// A new job was malformed.
    #[error("invalid job: {0}")]
    InvalidJob(String),
    /// A schedule was malformed (or its key taken by another definition).
    #[error("invalid schedule: {0}")]
    InvalidSchedule(String),
}

/// A freshly pushed job with id `id`, after `parents` (as
/// [`resolve_parents`] found them): waiting on those not `done`, or
/// cancelled at once when one has already failed or been cancelled (a
/// `retry` of that one brings it back).
pub fn create(
    id: JobId,
    new: &NewJob,
    parents: &[Job],
    now: Timestamp,
    policy: &Policy,
) -> Transition {
    let (pending_parents, ended) = after::start_state(parents);
    let mut job = Job {
        id,
        queue: new.queue.clone(),
        kind: new.kind.clone(),
        payload: new.payload.clone(),
        priority: new.priority,
        state: JobState::Pending,
        attempts: 0,
        max_attempts: new.max_attempts.unwrap_or(policy.default_max_attempts).max(1),
        max_runtime: new.max_runtime,
        not_before: new.not_before.unwrap_or(now),
        lease: None,
        idempotency_key: new.idempotency_key.clone(),
        payload_hash: payload_hash(&new.payload),
        cancel_requested: false,
        last_error: None,
        result: None,
        exit_code: None,
        created_at: now,
        started_at: None,
        finished_at: None,
        after: parents.iter().map(|p| p.id).collect(),
        pending_parents,
        cancelled_by: None,
        held: None,
        gpus: new.gpus.clone(),
    };
    let mut events = vec![Event::new(id, EventKind::Pushed, now)];
    if let Some((root, why)) = ended {
        job.state = JobState::Cancelled;
        job.cancelled_by = Some(root);
        job.last_error = Some(why.clone());
        job.finished_at = Some(now);
        events.push(Event::new(id, EventKind::Cancelled, now).saying(why));
    }
    Transition { job, events }
}

/// What `push` must do given the job that currently holds the new job's
/// idempotency key, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushPlan {
    /// Same key, same payload: return this existing job, write nothing.
    Duplicate(JobId),
    /// Insert the new job; first write `displaced` (the old holder of the
    /// key, which loses it and, if still pending, is superseded).
    Insert {
        /// The old key holder after the change.
        displaced: Option<Box<Transition>>,
        /// The pending job this push supersedes (the old holder, when it
        /// was still pending): what [`crate::Pushed::superseded`] reports.
        superseded: Option<JobId>,
    },
}

/// How a superseded job's `last_error` starts; the replacement's id
/// follows.
pub const SUPERSEDED_BY: &str = "superseded by #";

/// The job that superseded `job`, when a push with its key replaced it
/// while it was pending (it is cancelled, saying so in `last_error`).
pub fn superseded_by(job: &Job) -> Option<JobId> {
    if job.state != JobState::Cancelled || job.cancelled_by.is_some() {
        return None;
    }
    job.last_error.as_deref()?.strip_prefix(SUPERSEDED_BY)?.parse().ok()
}

/// Decides a push against the current holder of its key (the newer wins).
pub fn plan_push(new: &NewJob, holder: Option<&Job>, new_id: JobId, now: Timestamp) -> PushPlan {
    let Some(old) = holder else { return PushPlan::Insert { displaced: None, superseded: None } };
    if old.payload_hash == payload_hash(&new.payload) && old.kind == new.kind {
        return PushPlan::Duplicate(old.id);
    }
    let mut job = old.clone();
    job.idempotency_key = None;
    let mut events = Vec::new();
    let mut superseded = None;
    if job.state == JobState::Pending {
        job.state = JobState::Cancelled;
        job.finished_at = Some(now);
        job.held = None;
        // Why it ended, where `show` and a refused `retry` can say it.
        job.last_error = Some(format!("{SUPERSEDED_BY}{new_id}"));
        superseded = Some(job.id);
        events.push(
            Event::new(job.id, EventKind::Superseded, now)
                .saying(format!("superseded by #{new_id}")),
        );
    }
    PushPlan::Insert { displaced: Some(Box::new(Transition { job, events })), superseded }
}

/// Why a running job may be taken from its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReclaimReason {
    /// The lease ran out and the owner could not be checked.
    LeaseExpired,
    /// The owner is certainly dead.
    OwnerDead,
}

impl ReclaimReason {
    /// The words the trail uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ReclaimReason::LeaseExpired => "lease expired",
            ReclaimReason::OwnerDead => "owner dead",
        }
    }
}

/// Whether a running job may be taken from its owner at `now`, given what
/// the liveness judge said about the owner.
pub fn reclaimable(job: &Job, now: Timestamp, owner: Liveness) -> Option<ReclaimReason> {
    let lease = job.lease.as_ref().filter(|_| job.state == JobState::Running)?;
    match owner {
        Liveness::Alive => None,
        Liveness::Gone => Some(ReclaimReason::OwnerDead),
        Liveness::Unknown => (lease.until < now).then_some(ReclaimReason::LeaseExpired),
    }
}

/// The result of offering a candidate job to a claimer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The claimer now holds the job.
    Claimed(Transition),
    /// The job could not be handed out and ended instead (out of attempts
    /// after its lease expired, or cancelled while its owner was gone);
    /// the store writes this and looks for another candidate.
    Retired(Transition),
}

/// Claims `job` for `owner`: a due pending job, or a running job whose
/// owner is gone or whose lease expired (`owner_liveness` is the judge's
/// answer about the current lease holder; ignored for pending jobs).
/// Stores do not call this directly: [`plan_claim_in_order`] decides which job a
/// claim takes and calls it.
pub fn claim(
    job: &Job,
    owner: &Owner,
    now: Timestamp,
    policy: &Policy,
    owner_liveness: Liveness,
) -> Result<ClaimOutcome, TransitionError> {
    let mut events = Vec::new();
    match job.state {
        JobState::Pending if job.is_due(now) => {}
        JobState::Running => {
            let Some(reason) = reclaimable(job, now, owner_liveness) else {
                return Err(invalid(job, "claim"));
            };
            if let Some(ended) = retire_abandoned(job, now, reason) {
                return Ok(ClaimOutcome::Retired(ended));
            }
            events.push(reclaimed_event(job, now, reason));
        }
        _ => return Err(invalid(job, "claim")),
    }
    let mut next = job.clone();
    next.state = JobState::Running;
    next.attempts = job.attempts.saturating_add(1);
    next.started_at = Some(now);
    next.lease = Some(Lease {
        owner: owner.clone(),
        attempt: next.attempts,
        until: now.saturating_add(policy.lease_ttl),
        child_pgid: None,
        gpus: Vec::new(),
    });
    events.push(Event::new(job.id, EventKind::Claimed, now).by(&owner.id, next.attempts));
    Ok(ClaimOutcome::Claimed(Transition { job: next, events }))
}

/// The sweep's reclaim of one attempt whose owner the caller found dead
/// (and whose leftover processes it dealt with): the job goes back to
/// pending, or ends if it has no attempts left or a cancel was requested.
/// `None` when the job is no longer running under exactly that attempt:
/// it moved on, and must be left alone.
pub fn reclaim_dead(job: &Job, attempt: &Fence, now: Timestamp) -> Option<Transition> {
    check_owner(job, attempt).ok()?;
    let reason = ReclaimReason::OwnerDead;
    if let Some(ended) = retire_abandoned(job, now, reason) {
        return Some(ended);
    }
    let mut next = job.clone();
    next.state = JobState::Pending;
    next.lease = None;
    Some(Transition { job: next, events: vec![reclaimed_event(job, now, reason)] })
}

fn reclaimed_event(job: &Job, now: Timestamp, reason: ReclaimReason) -> Event {
    let mut e = Event::new(job.id, EventKind::Reclaimed, now).saying(reason.as_str());
    if let Some(l) = &job.lease {
        e = e.by(&l.owner.id, l.attempt);
    }
    e
}

/// An abandoned running job that must not run again: cancelled while its
/// owner was away, or out of attempts.
fn retire_abandoned(job: &Job, now: Timestamp, reason: ReclaimReason) -> Option<Transition> {
    let mut next = job.clone();
    next.lease = None;
    next.finished_at = Some(now);
    let mut event = reclaimed_event(job, now, reason);
    if job.cancel_requested {
        next.state = JobState::Cancelled;
        event.kind = EventKind::Cancelled;
        event.message = Some(format!("cancelled ({} while cancel was requested)", reason.as_str()));
    } else if job.attempts >= job.max_attempts {
        next.state = JobState::Failed;
        let why = match reason {
            ReclaimReason::LeaseExpired => format!("lease expired after {} attempts", job.attempts),
            ReclaimReason::OwnerDead => format!("owner died after {} attempts", job.attempts),
        };
        next.last_error = Some(why.clone());
        event.kind = EventKind::Expired;
        event.message = Some(why);
    } else {
        return None;
    }
    Some(Transition { job: next, events: vec![event] })
}

/// What a heartbeat tells its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatAck {
    /// The lease now runs until this instant.
    pub lease_until: Timestamp,
    /// A user asked to cancel the job: kill it and report it failed.
    pub cancel_requested: bool,
}

/// Extends the owner's lease to `now + lease_ttl`; also after expiry, as long
/// as nobody reclaimed the job (slow is not gone). `child_pgid` records the
/// job's process group once it has one.
pub fn heartbeat(
    job: &Job,
    fence: &Fence,
    now: Timestamp,
    policy: &Policy,
    child_pgid: Option<i32>,
) -> Result<(Transition, HeartbeatAck), TransitionError> {
    check_owner(job, fence)?;
    let mut next = job.clone();
    let until = now.saturating_add(policy.lease_ttl);
    if let Some(lease) = next.lease.as_mut() {
        lease.until = until;
        if child_pgid.is_some() {
            lease.child_pgid = child_pgid;
        }
    }
    let ack = HeartbeatAck { lease_until: until, cancel_requested: job.cancel_requested };
    Ok((Transition { job: next, events: Vec::new() }, ack))
}

/// What a successful attempt reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// A short summary, such as the last line of output.
    pub result: Option<String>,
    /// The process's exit code, if it was one.
    pub exit_code: Option<i32>,
}

/// What a failed attempt reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failure {
    /// Why it failed, in one line.
    pub error: String,
    /// The process's exit code, if it exited.
    pub exit_code: Option<i32>,
    /// Another attempt would fail the same way (a payload that does not
    /// decode, an input the handler refuses): [`fail`] ends the job
    /// `failed` at once, whatever attempts it has left. Only this failure
    /// is not retried; the job keeps its `max_attempts`, and a user's
    /// `retry` runs it again as usual.
    pub permanent: bool,
}

/// What the `failed` event of a [`Failure::permanent`] says after the
/// error (`exit code 2: bad input; permanent failure, not retried`): the
/// job ended `failed` without a retry, whatever attempts it had left.
pub const NOT_RETRIED: &str = "permanent failure, not retried";

/// The owner finished the job.
pub fn complete(
    job: &Job,
    fence: &Fence,
    done: &Completion,
    now: Timestamp,
) -> Result<Transition, TransitionError> {
    check_owner(job, fence)?;
    let mut next = job.clone();
    next.state = JobState::Done;
    next.lease = None;
    next.result = done.result.clone();
    next.exit_code = done.exit_code;
    next.last_error = None;
    next.finished_at = Some(now);
    let mut event = Event::new(job.id, EventKind::Completed, now).by(&fence.owner, fence.attempt);
    event.message = done.result.clone();
    Ok(Transition { job: next, events: vec![event] })
}

/// The owner's attempt failed: retry after `backoff(attempts)`, or end in
/// `failed` when no attempts are left or the failure is
/// [`permanent`](Failure::permanent) (its event's message then ends with
/// [`NOT_RETRIED`]), or in `cancelled` when a cancel was requested (the
/// owner killed the job because of it), permanent or not.
pub fn fail(
    job: &Job,
    fence: &Fence,
    failure: &Failure,
    now: Timestamp,
    policy: &Policy,
) -> Result<Transition, TransitionError> {
    check_owner(job, fence)?;
    let mut next = job.clone();
    next.lease = None;
    next.last_error = Some(failure.error.clone());
    next.exit_code = failure.exit_code;
    next.result = None;
    let mut event = Event::new(job.id, EventKind::Failed, now)
        .by(&fence.owner, fence.attempt)
        .saying(failure.error.clone());
    if job.cancel_requested {
        next.state = JobState::Cancelled;
        next.finished_at = Some(now);
        event.kind = EventKind::Cancelled;
    } else if failure.permanent {
        next.state = JobState::Failed;
        next.finished_at = Some(now);
        event.message = Some(format!("{}; {NOT_RETRIED}", failure.error));
    } else if job.attempts >= job.max_attempts {
        next.state = JobState::Failed;
        next.finished_at = Some(now);
    } else {
        let retry_at = now.saturating_add(policy.backoff(job.id, job.attempts));
        next.state = JobState::Pending;
        next.not_before = retry_at;
        event.retry_at = Some(retry_at);
    }
    Ok(Transition { job: next, events: vec![event] })
}

/// How an owner ends an attempt it saw through: what
/// [`crate::Store::settle_and_claim`] writes before it claims the next job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// The attempt succeeded: [`complete`].
    Complete(Completion),
    /// The attempt failed: [`fail`].
    Fail(Failure),
}

/// The owner's end of an attempt, as [`complete`] or [`fail`] decides it.
pub fn settle(
    job: &Job,
    fence: &Fence,
    settlement: &Settlement,
    now: Timestamp,
    policy: &Policy,
) -> Result<Transition, TransitionError> {
    match settlement {
        Settlement::Complete(done) => complete(job, fence, done, now),
        Settlement::Fail(failure) => fail(job, fence, failure, now, policy),
    }
}

/// Whether a job's trail records that the attempt `fence` names was ended
/// by its owner (completed, failed, cancelled or released). An owner whose
/// ending write was refused with `LeaseLost` asks this before calling the
/// attempt lost: when a server went away after its commit and before its
/// answer, the retried write finds its own ending already there. Owner ids
/// are unique to a runner process and attempts to a job, so no other
/// owner's event can match.
pub fn ended_by_owner(trail: &[Event], fence: &Fence) -> bool {
    trail.iter().any(|e| {
        matches!(
            e.kind,
            EventKind::Completed | EventKind::Failed | EventKind::Cancelled | EventKind::Released
        ) && e.owner.as_deref() == Some(fence.owner.as_str())
            && e.attempt == Some(fence.attempt)
    })
}

/// The owner hands the job back (a clean shutdown): pending, due now, and
/// the attempt is not charged. A job whose cancel was requested ends
/// `cancelled` instead.
pub fn release(job: &Job, fence: &Fence, now: Timestamp) -> Result<Transition, TransitionError> {
    check_owner(job, fence)?;
    let mut next = job.clone();
    next.lease = None;
    let mut event = Event::new(job.id, EventKind::Released, now).by(&fence.owner, fence.attempt);
    if job.cancel_requested {
        next.state = JobState::Cancelled;
        next.finished_at = Some(now);
        event.kind = EventKind::Cancelled;
        event.message = Some("cancelled while being released".to_owned());
    } else {
        next.state = JobState::Pending;
        next.attempts = job.attempts.saturating_sub(1);
        next.not_before = now;
    }
    Ok(Transition { job: next, events: vec![event] })
}

/// A user cancels: a pending job ends at once; a running job is flagged and
/// its owner ends it; a terminal job refuses.
pub fn cancel(job: &Job, now: Timestamp) -> Result<Transition, TransitionError> {
    let mut next = job.clone();
    let event = match job.state {
        JobState::Pending => {
            next.state = JobState::Cancelled;
            next.finished_at = Some(now);
            next.held = None;
            Event::new(job.id, EventKind::Cancelled, now)
        }
        JobState::Running if job.cancel_requested => {
            return Ok(Transition { job: next, events: Vec::new() });
        }
        JobState::Running => {
            next.cancel_requested = true;
            Event::new(job.id, EventKind::CancelRequested, now)
        }
        _ => return Err(invalid(job, "cancel")),
    };
    Ok(Transition { job: next, events: vec![event] })
}

/// A user retries a failed or cancelled job: pending, due now (or waiting
/// again on those of its `parents` not yet done), attempts reset. Refused
/// while a parent is failed or cancelled ([`check_retry`]). The jobs it
/// cancelled come back with it ([`plan_with_dependents`]).
pub fn retry(job: &Job, parents: &[Job], now: Timestamp) -> Result<Transition, TransitionError> {
    if !matches!(job.state, JobState::Failed | JobState::Cancelled) {
        return Err(invalid(job, "retry"));
    }
    if let Some(by) = superseded_by(job) {
        return Err(TransitionError::InvalidJob(format!(
            "cannot retry job #{}: it was superseded by #{by} (a push with its key and another job); \
             it would run beside its replacement. Retry #{by}, or add the old job again under another key",
            job.id
        )));
    }
    check_retry(job, parents)?;
    let mut next = job.clone();
    next.state = JobState::Pending;
    next.attempts = 0;
    next.not_before = now;
    next.cancel_requested = false;
    next.finished_at = None;
    next.pending_parents = count_not_done(parents);
    next.cancelled_by = None;
    Ok(Transition { job: next, events: vec![Event::new(job.id, EventKind::Retried, now)] })
}

/// The state a trail leads to, replaying its events from nothing; `None`
/// for an empty trail. A store's trail must always replay to its job's state.
pub fn replay(events: &[Event]) -> Option<JobState> {
    let mut state = None;
    for e in events {
        state = match e.kind {
            EventKind::Pushed | EventKind::Released | EventKind::Retried | EventKind::Reclaimed => {
                Some(JobState::Pending)
            }
            EventKind::Claimed => Some(JobState::Running),
            EventKind::Failed if e.retry_at.is_some() => Some(JobState::Pending),
            EventKind::Failed | EventKind::Expired => Some(JobState::Failed),
            EventKind::Completed => Some(JobState::Done),
            EventKind::Cancelled | EventKind::Superseded => Some(JobState::Cancelled),
            EventKind::CancelRequested
            | EventKind::Held
            | EventKind::HoldReleased
            | EventKind::Suspended
            | EventKind::Resumed
            | EventKind::Edited
            | EventKind::ClonedFrom
            | EventKind::ClonedAs
            | EventKind::Scheduled
            | EventKind::TickSkipped => state,
        };
    }
    state
}

/// How long a job still has to wait at `now` (zero when due).
pub fn wait_time(job: &Job, now: Timestamp) -> Duration {
    job.not_before.duration_since(now)
}

fn check_owner(job: &Job, fence: &Fence) -> Result<(), TransitionError> {
    match &job.lease {
        Some(l)
            if job.state == JobState::Running
                && l.owner.id == fence.owner
                && l.attempt == fence.attempt =>
        {
            Ok(())
        }
        _ => Err(TransitionError::LeaseLost { id: job.id }),
    }
}

fn invalid(job: &Job, action: &'static str) -> TransitionError {
    TransitionError::InvalidTransition { id: job.id, state: job.state, action }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::liveness::LivenessJudge;

    const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Stored files compare against hashes written by earlier builds, so
    /// the text must stay SHA-256 in lower-case hex over canonical JSON.
    #[test]
    fn payload_hash_is_sha256_hex_of_the_canonical_json() {
        let payload = serde_json::json!({ "b": [2], "a": 1 });
        assert_eq!(
            payload_hash(&payload),
            "0855bfc20eb6cfaa4be7d6b510c63dd22997718bddadcb1a4915cec3a16145b9"
        );
    }

    fn pushed(id: JobId) -> Job {
        create(id, &NewJob::shell("true", "/"), &[], T0, &Policy::default()).job
    }

    fn claimed(job: &Job, owner: &str, now: Timestamp) -> Job {
        match claim(job, &Owner::named(owner), now, &Policy::default(), Liveness::Unknown) {
            Ok(ClaimOutcome::Claimed(t)) => t.job,
            other => panic!("expected a claim, got {other:?}"),
        }
    }

    fn fence(job: &Job) -> Fence {
        job.lease.as_ref().map(Lease::fence).expect("running job has a lease")
    }

    fn kinds(t: &Transition) -> Vec<EventKind> {
        t.events.iter().map(|e| e.kind).collect()
    }

    /// The trail of a settled attempt answers for its own owner and
    /// attempt only: not for the same owner's next attempt, not for
    /// another owner, and not for a claim.
    #[test]
    fn ended_by_owner_matches_the_attempts_own_ending_only() {
        let job = claimed(&pushed(1), "a", T0);
        let f = fence(&job);
        let claim_trail = vec![Event::new(1, EventKind::Claimed, T0).by(&f.owner, f.attempt)];
        assert!(!ended_by_owner(&claim_trail, &f));
        let done = complete(&job, &f, &Completion::default(), T0).unwrap();
        assert!(ended_by_owner(&done.events, &f));
        let next_attempt = Fence { owner: f.owner.clone(), attempt: f.attempt + 1 };
        assert!(!ended_by_owner(&done.events, &next_attempt));
        let other = Fence { owner: format!("{}x", f.owner), attempt: f.attempt };
        assert!(!ended_by_owner(&done.events, &other));
        let boom = Failure { error: "boom".into(), exit_code: Some(1), permanent: false };
        let failed = fail(&job, &f, &boom, T0, &Policy::default()).unwrap();
        assert!(ended_by_owner(&failed.events, &f));
        assert!(ended_by_owner(&release(&job, &f, T0).unwrap().events, &f));
    }

    #[test]
    fn create_applies_policy_defaults_and_records_pushed() {
        let t = create(7, &NewJob::shell("echo hi", "/tmp"), &[], T0, &Policy::default());
        assert_eq!(t.job.state, JobState::Pending);
        assert_eq!(t.job.max_attempts, 3);
        assert_eq!(t.job.not_before, T0);
        assert_eq!(kinds(&t), vec![EventKind::Pushed]);
    }

    #[test]
    fn validate_rejects_bad_input() {
        let ok = NewJob::shell("true", "/");
        assert!(validate(&ok).is_ok());
        assert!(validate(&NewJob::shell("  ", "/")).is_err());
        assert!(validate(&NewJob::shell("a\0b", "/")).is_err());
        let relative = validate(&NewJob::shell("true", "build")).unwrap_err().to_string();
        assert!(relative.contains("the `cwd` `build` is not an absolute path"), "{relative}");
        assert!(validate(&ok.clone().queue("../etc")).is_err());
        assert!(validate(&ok.clone().queue("")).is_err());
        assert!(validate(&ok.clone().max_attempts(0)).is_err());
        assert!(validate(&NewJob::new("shell", serde_json::json!({}))).is_err());
        assert!(validate(&NewJob::new("backup", serde_json::json!(null))).is_ok());
    }

    #[test]
    fn claim_takes_only_due_jobs() {
        let job = Job { not_before: T0.saturating_add(secs(10)), ..pushed(1) };
        let early = claim(&job, &Owner::named("a"), T0, &Policy::default(), Liveness::Unknown);
        assert!(matches!(early, Err(TransitionError::InvalidTransition { action: "claim", .. })));
        let on_time = claimed(&job, "a", T0.saturating_add(secs(10)));
        assert_eq!(on_time.state, JobState::Running);
        assert_eq!(on_time.attempts, 1);
        let lease = on_time.lease.expect("lease");
        assert_eq!(lease.until, T0.saturating_add(secs(70)));
        assert_eq!(lease.attempt, 1);
    }

    #[test]
    fn reclaim_needs_expiry_unless_owner_gone_and_never_when_alive() {
        let job = claimed(&pushed(1), "a", T0);
        let p = Policy::default();
        let b = Owner::named("b");
        let before_expiry = T0.saturating_add(secs(30));
        assert!(claim(&job, &b, before_expiry, &p, Liveness::Unknown).is_err());
        assert!(matches!(
            claim(&job, &b, before_expiry, &p, Liveness::Gone),
            Ok(ClaimOutcome::Claimed(_))
        ));
        let long_after = T0.saturating_add(secs(3600));
        assert!(
            claim(&job, &b, long_after, &p, Liveness::Alive).is_err(),
            "a live owner is slow, not gone"
        );
        match claim(&job, &b, long_after, &p, Liveness::Unknown) {
            Ok(ClaimOutcome::Claimed(t)) => {
                assert_eq!(kinds(&t), vec![EventKind::Reclaimed, EventKind::Claimed]);
                assert_eq!(t.job.attempts, 2);
                assert_eq!(t.events[0].message.as_deref(), Some("lease expired"));
            }
            other => panic!("expected reclaim, got {other:?}"),
        }
    }

    #[test]
    fn expired_lease_without_attempts_left_fails() {
        let mut job = pushed(1);
        job.max_attempts = 1;
        let job = claimed(&job, "a", T0);
        let later = T0.saturating_add(secs(61));
        match claim(&job, &Owner::named("b"), later, &Policy::default(), Liveness::Unknown) {
            Ok(ClaimOutcome::Retired(t)) => {
                assert_eq!(t.job.state, JobState::Failed);
                assert_eq!(t.job.last_error.as_deref(), Some("lease expired after 1 attempts"));
                assert_eq!(kinds(&t), vec![EventKind::Expired]);
                assert!(t.job.lease.is_none());
            }
            other => panic!("expected retirement, got {other:?}"),
        }
    }

    #[test]
    fn heartbeat_is_for_the_owner_only_and_survives_expiry() {
        let job = claimed(&pushed(1), "a", T0);
        let p = Policy::default();
        let late = T0.saturating_add(secs(500));
        let (t, ack) =
            heartbeat(&job, &fence(&job), late, &p, Some(4242)).expect("owner may heartbeat late");
        assert_eq!(ack.lease_until, late.saturating_add(secs(60)));
        assert!(!ack.cancel_requested);
        assert_eq!(t.job.lease.as_ref().and_then(|l| l.child_pgid), Some(4242));
        assert!(t.events.is_empty());
        let stranger = Fence { owner: "b".into(), attempt: 1 };
        assert_eq!(
            heartbeat(&job, &stranger, late, &p, None),
            Err(TransitionError::LeaseLost { id: 1 })
        );
        let stale = Fence { owner: "a".into(), attempt: 0 };
        assert!(heartbeat(&job, &stale, late, &p, None).is_err());
    }

    #[test]
    fn complete_records_result_and_refuses_strangers() {
        let job = claimed(&pushed(1), "a", T0);
        let done = Completion { result: Some("moved 4 files".into()), exit_code: Some(0) };
        let stranger = Fence { owner: "b".into(), attempt: 1 };
        assert!(complete(&job, &stranger, &done, T0).is_err());
        let t = complete(&job, &fence(&job), &done, T0).expect("owner completes");
        assert_eq!(t.job.state, JobState::Done);
        assert_eq!(t.job.result.as_deref(), Some("moved 4 files"));
        assert!(t.job.lease.is_none());
        assert_eq!(t.job.finished_at, Some(T0));
        assert!(complete(&t.job, &fence(&job), &done, T0).is_err(), "twice is refused");
    }

    #[test]
    fn failures_back_off_two_four_eight_then_fail() {
        let p = Policy::default();
        let mut job = pushed(1);
        let mut now = T0;
        for expected in [2, 4] {
            job = claimed(&job, "a", now);
            let t = fail(
                &job,
                &fence(&job),
                &Failure { error: "boom".into(), exit_code: Some(1), permanent: false },
                now,
                &p,
            )
            .expect("owner fails");
            assert_eq!(t.job.state, JobState::Pending);
            assert_eq!(t.job.not_before.duration_since(now), secs(expected));
            assert_eq!(t.events[0].retry_at, Some(t.job.not_before));
            now = t.job.not_before;
            job = t.job;
        }
        job = claimed(&job, "a", now);
        let t = fail(
            &job,
            &fence(&job),
            &Failure { error: "boom".into(), exit_code: Some(1), permanent: false },
            now,
            &p,
        )
        .expect("owner fails");
        assert_eq!(t.job.state, JobState::Failed);
        assert_eq!(t.job.last_error.as_deref(), Some("boom"));
        assert_eq!(t.events[0].retry_at, None);
        // The third delay would have been 8 s: check the formula directly.
        assert_eq!(p.backoff(1, 3), secs(8));
    }

    #[test]
    fn a_permanent_failure_ends_failed_at_once_unless_cancelled() {
        let p = Policy::default();
        let job = claimed(&pushed(1), "a", T0);
        assert_eq!((job.attempts, job.max_attempts), (1, 3));
        let failure = Failure { error: "bad input".into(), exit_code: Some(2), permanent: true };
        let t = fail(&job, &fence(&job), &failure, T0, &p).expect("owner fails");
        assert_eq!(t.job.state, JobState::Failed);
        assert_eq!(t.job.attempts, 1);
        assert_eq!(t.job.finished_at, Some(T0));
        assert_eq!(t.job.not_before, job.not_before, "no retry time");
        assert_eq!(t.job.last_error.as_deref(), Some("bad input"));
        assert_eq!(t.job.exit_code, Some(2));
        assert_eq!(kinds(&t), vec![EventKind::Failed]);
        assert_eq!(t.events[0].retry_at, None);
        let says = format!("bad input; {NOT_RETRIED}");
        assert_eq!(t.events[0].message.as_deref(), Some(says.as_str()));
        assert_eq!(replay(&t.events), Some(JobState::Failed));

        let flagged = cancel(&job, T0).expect("flag").job;
        let t = fail(&flagged, &fence(&flagged), &failure, T0, &p).expect("owner fails");
        assert_eq!(t.job.state, JobState::Cancelled, "a cancel request wins");
        assert_eq!(t.events[0].message.as_deref(), Some("bad input"));
    }

    #[test]
    fn release_does_not_charge_the_attempt() {
        let job = claimed(&pushed(1), "a", T0);
        let later = T0.saturating_add(secs(5));
        let t = release(&job, &fence(&job), later).expect("owner releases");
        assert_eq!(t.job.state, JobState::Pending);
        assert_eq!(t.job.attempts, 0);
        assert_eq!(t.job.not_before, later);
        assert_eq!(kinds(&t), vec![EventKind::Released]);
    }

    #[test]
    fn cancel_pending_running_and_terminal() {
        let t = cancel(&pushed(1), T0).expect("pending cancels");
        assert_eq!(t.job.state, JobState::Cancelled);
        assert!(matches!(
            cancel(&t.job, T0),
            Err(TransitionError::InvalidTransition { action: "cancel", .. })
        ));

        let running = claimed(&pushed(2), "a", T0);
        let t = cancel(&running, T0).expect("running accepts a request");
        assert_eq!(t.job.state, JobState::Running);
        assert!(t.job.cancel_requested);
        assert_eq!(kinds(&t), vec![EventKind::CancelRequested]);
        let again = cancel(&t.job, T0).expect("asking twice is harmless");
        assert!(again.events.is_empty());
        let (_, ack) = heartbeat(&t.job, &fence(&t.job), T0, &Policy::default(), None).expect("hb");
        assert!(ack.cancel_requested);
        let ended = fail(
            &t.job,
            &fence(&t.job),
            &Failure { error: "cancelled".into(), exit_code: None, permanent: false },
            T0,
            &Policy::default(),
        )
        .expect("owner reports the kill");
        assert_eq!(ended.job.state, JobState::Cancelled);
    }

    #[test]
    fn retry_resets_attempts_for_failed_and_cancelled_only() {
        let mut job = pushed(1);
        job.state = JobState::Failed;
        job.attempts = 3;
        job.last_error = Some("x".into());
        let t = retry(&job, &[], T0).expect("failed retries");
        assert_eq!((t.job.state, t.job.attempts, t.job.not_before), (JobState::Pending, 0, T0));
        assert!(retry(&pushed(2), &[], T0).is_err());
        let running = claimed(&pushed(3), "a", T0);
        assert!(retry(&running, &[], T0).is_err());
    }

    #[test]
    fn push_plan_dedups_or_supersedes() {
        let old = create(1, &NewJob::shell("a", "/").key("k"), &[], T0, &Policy::default()).job;
        assert_eq!(
            plan_push(&NewJob::shell("a", "/").key("k"), Some(&old), 2, T0),
            PushPlan::Duplicate(1)
        );
        match plan_push(&NewJob::shell("b", "/").key("k"), Some(&old), 2, T0) {
            PushPlan::Insert { displaced: Some(t), superseded } => {
                assert_eq!(superseded, Some(1));
                assert_eq!(t.job.state, JobState::Cancelled);
                assert_eq!(t.job.idempotency_key, None);
                assert_eq!(kinds(&t), vec![EventKind::Superseded]);
            }
            other => panic!("expected supersede, got {other:?}"),
        }
        let running = claimed(&old, "a", T0);
        match plan_push(&NewJob::shell("b", "/").key("k"), Some(&running), 2, T0) {
            PushPlan::Insert { displaced: Some(t), superseded } => {
                assert_eq!(superseded, None, "a running holder is not superseded");
                assert_eq!(
                    t.job.state,
                    JobState::Running,
                    "a running job keeps running; only the key moves"
                );
                assert!(t.events.is_empty());
            }
            other => panic!("expected key move, got {other:?}"),
        }
        assert_eq!(
            plan_push(&NewJob::shell("b", "/"), None, 2, T0),
            PushPlan::Insert { displaced: None, superseded: None }
        );
    }

    #[test]
    fn reclaim_dead_takes_only_the_named_attempt() {
        let job = claimed(&pushed(1), "a", T0);
        let stale = Fence { owner: "a".into(), attempt: 0 };
        assert!(reclaim_dead(&job, &stale, T0).is_none(), "another attempt is left alone");
        let t = reclaim_dead(&job, &fence(&job), T0).expect("the named attempt is reclaimed");
        assert_eq!(t.job.state, JobState::Pending);
        assert_eq!(t.job.attempts, 1, "the next claim counts the new attempt");
        assert_eq!(t.events[0].message.as_deref(), Some("owner dead"));
        assert!(reclaim_dead(&t.job, &fence(&job), T0).is_none(), "a pending job is left alone");
    }

    struct Verdicts(Vec<(&'static str, Liveness)>);

    impl LivenessJudge for Verdicts {
        fn judge(&self, lease: &Lease) -> Liveness {
            self.0.iter().find(|(o, _)| *o == lease.owner.id).map_or(Liveness::Unknown, |v| v.1)
        }
    }

    fn request(verdicts: Vec<(&'static str, Liveness)>, reclaim: Reclaim) -> ClaimRequest {
        ClaimRequest::new(Owner::named("me"), Arc::new(Verdicts(verdicts))).reclaim(reclaim)
    }

    /// The claim rule with at most one due candidate, as a store hands it
    /// over.
    fn plan_claim(
        request: &ClaimRequest,
        lanes: &LaneCheck,
        running: impl IntoIterator<Item = Job>,
        due: Option<Job>,
        now: Timestamp,
        policy: &Policy,
    ) -> Result<ClaimPlan, TransitionError> {
        plan_claim_in_order(request, lanes, running, due.map(Ok), now, policy)
    }

    fn ids(plan: &ClaimPlan) -> (Vec<JobId>, Option<JobId>) {
        (plan.retire.iter().map(|w| w.before.id).collect(), plan.take.as_ref().map(|w| w.before.id))
    }

    #[test]
    fn plan_claim_retires_every_abandoned_job_even_behind_the_winner() {
        let p = Policy::default();
        let late = T0.saturating_add(secs(3600));
        let mut exhausted = pushed(1);
        exhausted.max_attempts = 1;
        exhausted.priority = -5;
        let exhausted = claimed(&exhausted, "dead", T0);
        let mut best = pushed(2);
        best.priority = 9;
        let r = request(vec![], Reclaim::ExpiredOnly);
        let plan =
            plan_claim(&r, &LaneCheck::open(), [exhausted], Some(best), late, &p).expect("plan");
        assert_eq!(ids(&plan), (vec![1], Some(2)));
        assert_eq!(plan.retire[0].after.job.state, JobState::Failed);
        let claimed = plan.claimed().expect("a claim");
        assert_eq!((claimed.job.id, claimed.reclaimed_from), (2, None));
    }

    #[test]
    fn plan_claim_leaves_dead_owners_to_the_sweep_unless_asked() {
        let p = Policy::default();
        let running = claimed(&pushed(1), "dead", T0);
        let soon = T0.saturating_add(secs(1));
        let only_expired = request(vec![("dead", Liveness::Gone)], Reclaim::ExpiredOnly);
        let plan = plan_claim(&only_expired, &LaneCheck::open(), [running.clone()], None, soon, &p)
            .expect("plan");
        assert_eq!(ids(&plan), (vec![], None));
        let dead_too = request(vec![("dead", Liveness::Gone)], Reclaim::DeadOrExpired);
        let plan = plan_claim(&dead_too, &LaneCheck::open(), [running.clone()], None, soon, &p)
            .expect("plan");
        assert_eq!(ids(&plan), (vec![], Some(1)));
        let from = plan.claimed().and_then(|c| c.reclaimed_from).map(|o| o.id);
        assert_eq!(from.as_deref(), Some("dead"));
        let alive = request(vec![("dead", Liveness::Alive)], Reclaim::DeadOrExpired);
        let hour = T0.saturating_add(secs(3600));
        assert_eq!(
            ids(&plan_claim(&alive, &LaneCheck::open(), [running], None, hour, &p).expect("plan")),
            (vec![], None)
        );
    }

    #[test]
    fn plan_claim_takes_the_first_in_claim_order_and_passes_over_what_it_may_not_take() {
        let p = Policy::default();
        let hour = T0.saturating_add(secs(3600));
        let mut expired = pushed(1);
        expired.priority = 3;
        let expired = claimed(&expired, "slow", T0);
        let mut due = pushed(2);
        due.priority = 1;
        let r = request(vec![], Reclaim::ExpiredOnly);
        let plan =
            plan_claim(&r, &LaneCheck::open(), [expired.clone()], Some(due.clone()), hour, &p)
                .expect("plan");
        assert_eq!(ids(&plan), (vec![], Some(1)), "the expired job has the higher priority");
        due.priority = 5;
        let plan = plan_claim(&r, &LaneCheck::open(), [expired], Some(due.clone()), hour, &p)
            .expect("plan");
        assert_eq!(ids(&plan), (vec![], Some(2)));
        let early = Job { not_before: hour.saturating_add(secs(1)), ..due.clone() };
        let plan = plan_claim(&r, &LaneCheck::open(), [], Some(early), hour, &p).expect("plan");
        assert_eq!(ids(&plan), (vec![], None), "not due: passed over");
        let other = r.clone().filter(ClaimFilter { queues: vec!["other".into()], kinds: None });
        let plan = plan_claim(&other, &LaneCheck::open(), [], Some(due), hour, &p).expect("plan");
        assert_eq!(ids(&plan), (vec![], None), "not admitted: passed over");
    }

    /// Candidates as a store hands them over, counting how many were pulled.
    fn pulled<'a>(
        jobs: &'a [Job],
        count: &'a std::cell::Cell<usize>,
    ) -> impl Iterator<Item = Result<Job, TransitionError>> + 'a {
        jobs.iter().map(move |j| {
            count.set(count.get() + 1);
            Ok(j.clone())
        })
    }

    #[test]
    fn plan_claim_in_order_passes_over_what_a_predicate_refuses_and_stops_at_the_first_taken() {
        let p = Policy::default();
        let hour = T0.saturating_add(secs(3600));
        let mut held = pushed(1);
        held.held = Some(crate::Stamp::new("me", T0));
        let early = Job { not_before: hour.saturating_add(secs(1)), ..pushed(2) };
        let waiting = Job { pending_parents: 1, ..pushed(3) };
        let elsewhere = Job { queue: "other".into(), ..pushed(4) };
        let refused = pushed(5);
        let good = pushed(6);
        let after = pushed(7);
        let all = [held, early, waiting, elsewhere, refused, good, after];
        let r = request(vec![], Reclaim::ExpiredOnly)
            .filter(ClaimFilter { queues: vec![crate::DEFAULT_QUEUE.into()], kinds: None })
            .refusing([5]);
        let n = std::cell::Cell::new(0);
        let plan = plan_claim_in_order(&r, &LaneCheck::open(), [], pulled(&all, &n), hour, &p)
            .expect("plan");
        assert_eq!(ids(&plan), (vec![], Some(6)));
        assert_eq!(n.get(), 6, "nothing is pulled after the job taken");

        let n = std::cell::Cell::new(0);
        let none = plan_claim_in_order(&r, &LaneCheck::open(), [], pulled(&all[..5], &n), hour, &p)
            .expect("plan");
        assert_eq!(ids(&none), (vec![], None));

        let done = Job { state: JobState::Done, ..pushed(8) };
        let n = std::cell::Cell::new(0);
        assert!(
            plan_claim_in_order(&r, &LaneCheck::open(), [], pulled(&[done], &n), hour, &p).is_err(),
            "a job that is not pending at all: the store's search is out of step"
        );
    }

    #[test]
    fn plan_claim_in_order_prefers_an_expired_job_ahead_and_stops_pulling() {
        let p = Policy::default();
        let hour = T0.saturating_add(secs(3600));
        let mut expired = pushed(1);
        expired.priority = 3;
        let expired = claimed(&expired, "slow", T0);
        let mut due = pushed(2);
        due.priority = 1;
        let r = request(vec![], Reclaim::ExpiredOnly);
        let n = std::cell::Cell::new(0);
        let all = [due];
        let plan = plan_claim_in_order(
            &r,
            &LaneCheck::open(),
            [expired.clone()],
            pulled(&all, &n),
            hour,
            &p,
        )
        .expect("plan");
        assert_eq!(ids(&plan), (vec![], Some(1)));
        let refusing = r.refusing([1]);
        let plan = plan_claim_in_order(
            &refusing,
            &LaneCheck::open(),
            [expired],
            pulled(&all, &n),
            hour,
            &p,
        )
        .expect("plan");
        assert_eq!(ids(&plan), (vec![], Some(2)), "a refused job is not taken back");
    }

    #[test]
    fn replay_follows_every_path() {
        let job = claimed(&pushed(1), "a", T0);
        let mut trail = create(1, &NewJob::shell("true", "/"), &[], T0, &Policy::default()).events;
        trail.push(Event::new(1, EventKind::Claimed, T0));
        assert_eq!(replay(&trail), Some(JobState::Running));
        let t = complete(&job, &fence(&job), &Completion::default(), T0).expect("complete");
        trail.extend(t.events);
        assert_eq!(replay(&trail), Some(JobState::Done));
        assert_eq!(replay(&[]), None);
    }
}
