//! `cancel`, and what happens to missing ids.

use slothqueue_core::{Completion, EventKind, Failure, Fence, JobState, Liveness, StoreError};

use crate::{Harness, event_kinds, job, secs, shell, snapshot};

/// Cancelling a pending job ends it `cancelled` at once, `finished_at` set,
/// with a `cancelled` event; it is never claimed.
pub async fn cancel_pending_job_ends_it(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo never"), t).await;
    let now = h.at(secs(2));
    let c = s.cancel(j.id, now).await.expect("cancel");
    assert_eq!(c.state, JobState::Cancelled);
    assert_eq!(c.finished_at, Some(now));
    assert_eq!(job(&*s, j.id).await, c);
    assert_eq!(event_kinds(&*s, j.id).await, [EventKind::Pushed, EventKind::Cancelled]);
    assert!(h.claim(&*s, "w1", h.at(secs(3_600))).await.is_none());
    assert_eq!(s.stats(now).await.expect("stats").cancelled, 1);
}

/// Cancelling a running job sets `cancel_requested` (state stays running,
/// a `cancel_requested` event); the owner learns it from its heartbeat's
/// ack; a second cancel changes nothing; the owner's `fail` then ends the
/// job `cancelled`, not pending.
pub async fn cancel_running_job_is_seen_by_the_owner_and_ends_cancelled(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("sleep 1000").max_attempts(5), t).await;
    let c = h.claim_expect(&*s, "w1", t, j.id).await;
    let ack = s.heartbeat(j.id, &c.fence, Some(10), h.at(secs(1))).await.expect("heartbeat");
    assert!(!ack.cancel_requested);

    let now = h.at(secs(2));
    let r = s.cancel(j.id, now).await.expect("cancel");
    assert_eq!(r.state, JobState::Running);
    assert!(r.cancel_requested);
    assert_eq!(r.lease.as_ref().map(|l| l.owner.id.as_str()), Some("w1"));
    assert_eq!(
        event_kinds(&*s, j.id).await,
        [EventKind::Pushed, EventKind::Claimed, EventKind::CancelRequested]
    );
    let before = snapshot(&*s, j.id).await;
    let again = s.cancel(j.id, h.at(secs(3))).await.expect("cancel again");
    assert!(again.cancel_requested);
    assert_eq!(snapshot(&*s, j.id).await, before, "a second cancel writes nothing");

    let ack = s.heartbeat(j.id, &c.fence, None, h.at(secs(4))).await.expect("heartbeat");
    assert!(ack.cancel_requested, "the owner must learn of the cancel");
    let end = h.at(secs(5));
    let f = s.fail(
        j.id,
        &c.fence,
        Failure { error: "killed".into(), exit_code: None, permanent: false },
        end,
    );
    let f = f.await.expect("the owner fails the job");
    assert_eq!(f.state, JobState::Cancelled);
    assert_eq!(f.finished_at, Some(end));
    assert_eq!(f.lease, None);
    assert_eq!(event_kinds(&*s, j.id).await.last(), Some(&EventKind::Cancelled));
    assert!(h.claim(&*s, "w2", h.at(secs(3_600))).await.is_none());
}

/// Cancelling a done, failed or cancelled job is refused with
/// `InvalidTransition` naming the state, and changes nothing.
pub async fn cancel_of_a_terminal_job_is_refused(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let done = h.push(&*s, shell("echo d").priority(2), t).await;
    let failed = h.push(&*s, shell("echo f").priority(1).max_attempts(1), t).await;
    let cancelled = h.push(&*s, shell("echo c"), t).await;
    let c = h.claim_expect(&*s, "w1", t, done.id).await;
    s.complete(done.id, &c.fence, Completion::default(), t).await.expect("complete");
    let c = h.claim_expect(&*s, "w1", t, failed.id).await;
    s.fail(failed.id, &c.fence, Failure::default(), t).await.expect("fail");
    s.cancel(cancelled.id, t).await.expect("cancel");

    for (id, state) in [
        (done.id, JobState::Done),
        (failed.id, JobState::Failed),
        (cancelled.id, JobState::Cancelled),
    ] {
        let before = snapshot(&*s, id).await;
        let err = s.cancel(id, h.at(secs(1))).await.expect_err("cancel must refuse");
        assert!(
            matches!(err, StoreError::InvalidTransition { id: e, state: st, .. } if e == id && st == state),
            "#{id}: {err:?}"
        );
        assert_eq!(snapshot(&*s, id).await, before);
    }
}

/// `get`, `events`, `cancel` and `retry` of an id that does not exist
/// answer `NotFound` with that id, and create nothing.
pub async fn missing_ids_are_not_found(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo exists"), t).await;
    for id in [j.id + 1, j.id + 1000] {
        assert!(matches!(s.get(id).await, Err(StoreError::NotFound(e)) if e == id));
        assert!(matches!(s.events(id).await, Err(StoreError::NotFound(e)) if e == id));
        assert!(matches!(s.cancel(id, t).await, Err(StoreError::NotFound(e)) if e == id));
        assert!(matches!(s.retry(id, t).await, Err(StoreError::NotFound(e)) if e == id));
    }
    assert_eq!(s.stats(t).await.expect("stats").pending, 1);
    let fence = Fence { owner: "w1".into(), attempt: 1 };
    let hb = s.heartbeat(j.id + 1, &fence, None, t).await;
    assert!(
        matches!(hb, Err(StoreError::NotFound(_) | StoreError::LeaseLost { .. })),
        "a heartbeat for no job: {hb:?}"
    );
}

/// A running job whose cancel was requested and whose owner then vanished
/// is not handed to another claimer: the claim ends it `cancelled`.
pub async fn cancel_requested_job_of_a_dead_owner_ends_cancelled(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo abandoned"), t).await;
    h.claim_expect(&*s, "vanished", t, j.id).await;
    s.cancel(j.id, h.at(secs(1))).await.expect("cancel");
    h.set_liveness("vanished", Liveness::Gone);
    let now = h.at(secs(2));
    let got = h.claim(&*s, "w2", now).await;
    assert!(got.is_none(), "a cancelled job was handed out: {got:?}");
    let after = job(&*s, j.id).await;
    assert_eq!(after.state, JobState::Cancelled);
    assert_eq!(after.lease, None);
    assert_eq!(after.finished_at, Some(now));
    assert_eq!(event_kinds(&*s, j.id).await.last(), Some(&EventKind::Cancelled));
    let none = s.claim(&h.request("w3"), h.at(secs(999))).await;
    assert!(none.expect("claim").is_none());
}

/// Releasing a job whose cancel was requested ends it `cancelled` instead
/// of returning it to pending.
pub async fn release_with_cancel_requested_ends_cancelled(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo stop"), t).await;
    let c = h.claim_expect(&*s, "w1", t, j.id).await;
    s.cancel(j.id, t).await.expect("cancel");
    let r = s.release(j.id, &c.fence, h.at(secs(1))).await.expect("release");
    assert_eq!(r.state, JobState::Cancelled);
    assert_eq!(r.lease, None);
    assert_eq!(r.finished_at, Some(h.at(secs(1))));
    assert_eq!(job(&*s, j.id).await, r);
    assert!(h.claim(&*s, "w2", h.at(secs(2))).await.is_none());
}
