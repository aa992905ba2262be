//! `settle_and_claim`: the end of one attempt and the claim of the next job
//! in one call, as `complete` or `fail` followed by `claim` would do them.

use slothqueue_core::{
    ClaimFilter, Claimed, Completion, Event, EventKind, Failure, JobId, JobState, Liveness,
    SettledAndClaimed, Settlement, Store, StoreError, Timestamp,
};

use crate::{Harness, assert_trail_consistent, event_kinds, job, secs, shell, snapshot};

/// `settle_and_claim` for `owner_id` with the harness's judge.
async fn settle_and_claim(
    h: &Harness,
    s: &dyn Store,
    held: &Claimed,
    settlement: Settlement,
    owner_id: &str,
    filter: &ClaimFilter,
    now: Timestamp,
) -> Result<SettledAndClaimed, StoreError> {
    let next = h.request(owner_id).filter(filter.clone());
    s.settle_and_claim(held.job.id, &held.fence, settlement, &next, now).await
}

fn done(result: &str) -> Settlement {
    Settlement::Complete(Completion { result: Some(result.to_owned()), exit_code: Some(0) })
}

fn failed(error: &str) -> Settlement {
    Settlement::Fail(Failure { error: error.to_owned(), exit_code: Some(1), permanent: false })
}

/// Completing one job and claiming the next in one call leaves the first
/// `done` (result, exit code, no lease) and the next `running` under the
/// same owner with a fresh lease, exactly as the store reports them
/// afterwards; a failed attempt is recorded as `fail` records it.
pub async fn settle_and_claim_settles_then_claims_the_next_job(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let a = h.push(&*s, shell("echo a"), t).await;
    let b = h.push(&*s, shell("echo b"), t).await;
    let c = h.push(&*s, shell("echo c"), t).await;
    let held = h.claim_expect(&*s, "w1", t, a.id).await;
    let any = ClaimFilter::default();

    let now = h.at(secs(5));
    let got = settle_and_claim(h, &*s, &held, done("ok"), "w1", &any, now).await.expect("settle");
    assert_eq!(got.settled, job(&*s, a.id).await);
    assert_eq!(got.settled.state, JobState::Done);
    assert_eq!(got.settled.result.as_deref(), Some("ok"));
    assert_eq!(got.settled.exit_code, Some(0));
    assert_eq!(got.settled.lease, None);
    assert_eq!(got.settled.finished_at, Some(now));
    let next = got.next.expect("b is due");
    assert_eq!(next.job, job(&*s, b.id).await);
    assert_eq!(next.job.state, JobState::Running);
    assert_eq!(next.job.attempts, 1);
    assert_eq!(next.reclaimed_from, None);
    let lease = next.job.lease.as_ref().expect("a lease");
    assert_eq!(lease.owner, h.owner("w1"));
    assert_eq!(lease.until, now.saturating_add(secs(60)));
    assert_eq!(next.fence, lease.fence());

    // A failure with attempts left goes back to pending with its backoff.
    let later = h.at(secs(9));
    let got =
        settle_and_claim(h, &*s, &next, failed("boom"), "w1", &any, later).await.expect("settle");
    assert_eq!(got.settled, job(&*s, b.id).await);
    assert_eq!(got.settled.state, JobState::Pending);
    assert_eq!(got.settled.last_error.as_deref(), Some("boom"));
    assert!(got.settled.not_before > later, "a retry waits its backoff");
    assert_eq!(got.next.map(|n| n.job.id), Some(c.id), "the retried job is not due yet");
    for id in [a.id, b.id, c.id] {
        assert_trail_consistent(&*s, id).await;
    }
}

/// A settle the store refuses (the lease was lost to a reclaim, or the job
/// is gone) changes nothing at all and claims nothing, though a job is due.
pub async fn settle_and_claim_with_a_lost_lease_changes_nothing(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let a = h.push(&*s, shell("echo a"), t).await;
    let b = h.push(&*s, shell("echo b"), t).await;
    let stale = h.claim_expect(&*s, "w1", t, a.id).await;
    h.set_liveness("w1", Liveness::Gone);
    let now = h.at(secs(1));
    h.claim_expect(&*s, "w2", now, a.id).await;
    let (a_before, b_before) = (snapshot(&*s, a.id).await, snapshot(&*s, b.id).await);
    let any = ClaimFilter::default();

    for settlement in [done("late"), failed("late")] {
        let err = settle_and_claim(h, &*s, &stale, settlement, "w1", &any, h.at(secs(2)))
            .await
            .expect_err("the lease was lost");
        assert!(matches!(err, StoreError::LeaseLost { id } if id == a.id), "got {err:?}");
    }
    assert_eq!(snapshot(&*s, a.id).await, a_before, "the lost job changed");
    assert_eq!(snapshot(&*s, b.id).await, b_before, "a job was claimed");

    let mut missing = stale.clone();
    missing.job.id = JobId::MAX;
    let err = settle_and_claim(h, &*s, &missing, done("?"), "w1", &any, h.at(secs(3)))
        .await
        .expect_err("no such job");
    assert!(matches!(err, StoreError::NotFound(_) | StoreError::LeaseLost { .. }), "got {err:?}");
    assert_eq!(snapshot(&*s, b.id).await, b_before, "a job was claimed");
    assert_eq!(job(&*s, b.id).await.state, JobState::Pending);
}

/// The claim half takes what `claim` would: the filter's queues only, in
/// priority, `not_before`, id order, including a gone owner's job, which
/// it takes back (`reclaimed_from` set) when that comes first.
pub async fn settle_and_claim_follows_the_claim_order_and_filter(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let first = h.push(&*s, shell("echo first").queue("mine"), t).await;
    let low = h.push(&*s, shell("echo low").queue("mine"), t).await;
    let high = h.push(&*s, shell("echo high").queue("mine").priority(5), t).await;
    let other = h.push(&*s, shell("echo other").queue("theirs").priority(9), t).await;
    let orphan = h.push(&*s, shell("echo orphan").queue("mine").priority(7), t).await;
    h.claim_expect(&*s, "crashed", t, other.id).await;
    h.claim_expect(&*s, "crashed", t, orphan.id).await;
    let mine = ClaimFilter { queues: vec!["mine".into()], kinds: None };
    let held = h.claim_filtered(&*s, "w1", &mine, t).await.expect("a job of mine");
    assert_eq!(held.job.id, high.id);

    h.set_liveness("crashed", Liveness::Gone);
    let now = h.at(secs(1));
    let got = settle_and_claim(h, &*s, &held, done("1"), "w1", &mine, now).await.expect("settle");
    let next = got.next.expect("the orphan is gone's and first in order");
    assert_eq!(next.job.id, orphan.id);
    assert_eq!(next.job.attempts, 2);
    assert_eq!(next.reclaimed_from.map(|o| o.id), Some("crashed".to_owned()));

    let held = h.claim_filtered(&*s, "w1", &mine, now).await.expect("first");
    assert_eq!(held.job.id, first.id, "same priority and due time: the lower id first");
    let got = settle_and_claim(h, &*s, &held, done("2"), "w1", &mine, now).await.expect("settle");
    assert_eq!(got.next.map(|n| n.job.id), Some(low.id));
    assert_eq!(job(&*s, other.id).await.state, JobState::Running, "not in the filter");

    let none = ClaimFilter { queues: Vec::new(), kinds: Some(Vec::new()) };
    let held = h.claim_expect(&*s, "w2", now, other.id).await;
    let got = settle_and_claim(h, &*s, &held, done("3"), "w2", &none, now).await.expect("settle");
    assert_eq!(got.settled.state, JobState::Done);
    assert!(got.next.is_none(), "an empty kind list admits nothing");
}

/// An event without its job's id, and with only whether it has a retry time
/// (the backoff's jitter depends on the id).
type Shape = (EventKind, Timestamp, Option<String>, Option<u32>, Option<String>, bool);

/// The events, without the job's id: what two trails are compared by.
fn shape(events: &[Event]) -> Vec<Shape> {
    events
        .iter()
        .map(|e| {
            (e.kind, e.at, e.owner.clone(), e.attempt, e.message.clone(), e.retry_at.is_some())
        })
        .collect()
}

/// The trails `settle_and_claim` writes are the ones `complete` (or `fail`)
/// then `claim` write: event for event, owner, attempt, message and time.
pub async fn settle_and_claim_writes_the_trail_of_the_two_calls(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let now = h.at(secs(4));
    for settlement in [done("fine"), failed("bad")] {
        let mut trails = Vec::new();
        for (queue, combined) in [("split", false), ("joined", true)] {
            let first = h.push(&*s, shell("echo 1").queue(queue).max_attempts(1), t).await;
            let second = h.push(&*s, shell("echo 2").queue(queue), t).await;
            let only = ClaimFilter { queues: vec![queue.into()], kinds: None };
            let held = h.claim_filtered(&*s, "w1", &only, t).await.expect("first");
            assert_eq!(held.job.id, first.id);
            let next = if combined {
                settle_and_claim(h, &*s, &held, settlement.clone(), "w1", &only, now)
                    .await
                    .expect("settle")
                    .next
            } else {
                match settlement.clone() {
                    Settlement::Complete(d) => s.complete(first.id, &held.fence, d, now).await,
                    Settlement::Fail(f) => s.fail(first.id, &held.fence, f, now).await,
                }
                .expect("settle");
                h.claim_filtered(&*s, "w1", &only, now).await
            };
            assert_eq!(next.map(|n| n.job.id), Some(second.id));
            let a = s.events(first.id).await.expect("events");
            let b = s.events(second.id).await.expect("events");
            trails.push((shape(&a), shape(&b), job(&*s, first.id).await.state));
        }
        assert_eq!(trails[0], trails[1], "the combined call wrote other events");
        assert_eq!(trails[1].0.len(), 3, "pushed, claimed, and completed or failed");
    }
}

/// With nothing due for the owner (nothing pending, only future jobs, or
/// only the job just failed, which waits its backoff) the settle is still
/// written and the claim half returns `None`, leaving every job as it was.
pub async fn settle_and_claim_claims_nothing_when_nothing_is_due(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let any = ClaimFilter::default();
    let a = h.push(&*s, shell("echo a"), t).await;
    let held = h.claim_expect(&*s, "w1", t, a.id).await;
    let got = settle_and_claim(h, &*s, &held, done("a"), "w1", &any, t).await.expect("settle");
    assert_eq!(got.settled.state, JobState::Done);
    assert!(got.next.is_none(), "nothing was pending");

    let later = h.push(&*s, shell("echo later").not_before(h.at(secs(60))), t).await;
    let again = h.push(&*s, shell("echo again"), t).await;
    let held = h.claim_expect(&*s, "w1", t, again.id).await;
    let later_before = snapshot(&*s, later.id).await;
    let now = h.at(secs(1));
    let got = settle_and_claim(h, &*s, &held, failed("x"), "w1", &any, now).await.expect("settle");
    assert_eq!(got.settled.state, JobState::Pending);
    assert!(got.next.is_none(), "claimed a job that is not due");
    assert_eq!(snapshot(&*s, later.id).await, later_before);
    assert_eq!(job(&*s, again.id).await, got.settled);
    assert_eq!(
        event_kinds(&*s, again.id).await,
        [EventKind::Pushed, EventKind::Claimed, EventKind::Failed]
    );
}
