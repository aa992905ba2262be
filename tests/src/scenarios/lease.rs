//! Leases: expiry and recovery, fencing of everyone but the current owner,
//! the liveness judge, the `reclaim_dead` sweep, heartbeat, release and
//! complete.

use std::time::Duration;

use slothqueue_core::{Completion, EventKind, Failure, Fence, JobState, Liveness, StoreError};

use crate::{Harness, assert_trail_consistent, event_kinds, job, secs, shell, snapshot};

fn failure(msg: &str) -> Failure {
    Failure { error: msg.to_owned(), exit_code: Some(1), permanent: false }
}

/// A dead worker's job is recovered once its lease expires (`until < now`;
/// at exactly `until` it still belongs to the owner): the next claim gets
/// it with `attempts == 2`, `reclaimed_from` the old owner, and the trail
/// is exactly `pushed, claimed, reclaimed, claimed`, the `reclaimed` event
/// naming the old owner and attempt.
pub async fn dead_worker_lease_is_recovered_after_expiry(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo slow"), t).await;
    let c1 = h.claim_expect(&*s, "dead", t, j.id).await;
    let until = c1.job.lease.as_ref().expect("a lease").until;
    assert_eq!(until, t.saturating_add(secs(60)));

    assert!(h.claim(&*s, "w2", h.at(secs(30))).await.is_none(), "taken while the lease is valid");
    assert!(h.claim(&*s, "w2", until).await.is_none(), "taken at exactly `until`");

    let now = until.saturating_add(Duration::from_millis(1));
    let c2 = h.claim_expect(&*s, "w2", now, j.id).await;
    assert_eq!(c2.job.attempts, 2);
    assert_eq!(c2.fence, Fence { owner: "w2".into(), attempt: 2 });
    assert_eq!(c2.reclaimed_from, Some(h.owner("dead")));
    assert_eq!(c2.job.lease.as_ref().map(|l| (l.owner.id.as_str(), l.attempt)), Some(("w2", 2)));
    assert_eq!(
        event_kinds(&*s, j.id).await,
        [EventKind::Pushed, EventKind::Claimed, EventKind::Reclaimed, EventKind::Claimed]
    );
    let events = s.events(j.id).await.expect("events");
    assert_eq!((events[2].owner.as_deref(), events[2].attempt), (Some("dead"), Some(1)));
    assert_eq!((events[3].owner.as_deref(), events[3].attempt), (Some("w2"), Some(2)));
    assert_eq!(events[2].at, now);
    assert_trail_consistent(&*s, j.id).await;
}

/// A heartbeat by anyone but the holder gets `LeaseLost` and changes
/// nothing: the job and its trail are byte-for-byte the same.
pub async fn non_owner_heartbeat_is_refused_and_changes_nothing(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo mine"), t).await;
    let c = h.claim_expect(&*s, "owner", t, j.id).await;
    let before = snapshot(&*s, j.id).await;

    let later = h.at(secs(10));
    for fence in [
        Fence { owner: "thief".into(), attempt: 1 },
        Fence { owner: "thief".into(), attempt: 2 },
        Fence { owner: "owner".into(), attempt: 2 },
        Fence { owner: "owner".into(), attempt: 0 },
    ] {
        let err = s.heartbeat(j.id, &fence, Some(77), later).await.expect_err("not the holder");
        assert!(matches!(err, StoreError::LeaseLost { id } if id == j.id), "{fence:?}: {err:?}");
        assert_eq!(snapshot(&*s, j.id).await, before, "{fence:?} changed the job");
    }
    let ack = s.heartbeat(j.id, &c.fence, None, later).await.expect("the holder's heartbeat");
    assert_eq!(ack.lease_until, later.saturating_add(secs(60)));
}

/// `complete`, `fail` and `release` by a non-owner are refused with
/// `LeaseLost` and change nothing; the owner can still complete.
pub async fn non_owner_complete_fail_and_release_are_refused(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo mine"), t).await;
    let c = h.claim_expect(&*s, "owner", t, j.id).await;
    let before = snapshot(&*s, j.id).await;
    let thief = Fence { owner: "thief".into(), attempt: 1 };
    let now = h.at(secs(5));

    let err = s.complete(j.id, &thief, Completion::default(), now).await.expect_err("complete");
    assert!(matches!(err, StoreError::LeaseLost { id } if id == j.id), "{err:?}");
    let err = s.fail(j.id, &thief, failure("nope"), now).await.expect_err("fail");
    assert!(matches!(err, StoreError::LeaseLost { id } if id == j.id), "{err:?}");
    let err = s.release(j.id, &thief, now).await.expect_err("release");
    assert!(matches!(err, StoreError::LeaseLost { id } if id == j.id), "{err:?}");
    assert_eq!(snapshot(&*s, j.id).await, before);

    let done =
        s.complete(j.id, &c.fence, Completion::default(), now).await.expect("owner completes");
    assert_eq!(done.state, JobState::Done);
}

/// A stale owner, the same owner id holding an older attempt after the job
/// was reclaimed (by itself, restarted), is fenced out by the attempt
/// number: heartbeat, complete, fail and release with attempt 1 get
/// `LeaseLost`; attempt 2 works.
pub async fn stale_attempt_of_the_same_owner_is_fenced_out(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo twice"), t).await;
    let c1 = h.claim_expect(&*s, "w1", t, j.id).await;
    let now = h.at(secs(61));
    let c2 = h.claim_expect(&*s, "w1", now, j.id).await;
    assert_eq!(c1.fence, Fence { owner: "w1".into(), attempt: 1 });
    assert_eq!(c2.fence, Fence { owner: "w1".into(), attempt: 2 });
    let before = snapshot(&*s, j.id).await;

    let stale = &c1.fence;
    assert!(matches!(s.heartbeat(j.id, stale, None, now).await, Err(StoreError::LeaseLost { .. })));
    assert!(matches!(
        s.complete(j.id, stale, Completion::default(), now).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(
        s.fail(j.id, stale, failure("x"), now).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(s.release(j.id, stale, now).await, Err(StoreError::LeaseLost { .. })));
    assert_eq!(snapshot(&*s, j.id).await, before);

    let done = s.complete(j.id, &c2.fence, Completion::default(), now).await.expect("attempt 2");
    assert_eq!((done.state, done.attempts), (JobState::Done, 2));
}

/// Once another owner reclaimed the job, the old owner's heartbeat (even
/// though its lease merely expired), complete and fail are refused with
/// `LeaseLost`, and the new owner's lease is untouched.
pub async fn old_owner_cannot_write_after_another_reclaimed(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo contested"), t).await;
    let old = h.claim_expect(&*s, "old", t, j.id).await;
    let now = h.at(secs(90));
    let new = h.claim_expect(&*s, "new", now, j.id).await;
    let before = snapshot(&*s, j.id).await;

    let later = h.at(secs(95));
    let hb = s.heartbeat(j.id, &old.fence, Some(1), later).await;
    assert!(matches!(hb, Err(StoreError::LeaseLost { .. })), "{hb:?}");
    let done = s.complete(j.id, &old.fence, Completion::default(), later).await;
    assert!(matches!(done, Err(StoreError::LeaseLost { .. })), "{done:?}");
    let failed = s.fail(j.id, &old.fence, failure("late"), later).await;
    assert!(matches!(failed, Err(StoreError::LeaseLost { .. })), "{failed:?}");
    assert_eq!(snapshot(&*s, j.id).await, before);
    assert_eq!(job(&*s, j.id).await.lease.map(|l| l.owner.id), Some("new".to_owned()));

    s.complete(j.id, &new.fence, Completion::default(), later).await.expect("the new owner");
}

/// A lease that expires with no attempts left ends the job `failed` with an
/// `expired` event and a `last_error`, never back to `pending`; the claim
/// that found it goes on to the next due job.
pub async fn expired_lease_after_max_attempts_fails_never_pending(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo doomed").max_attempts(2).priority(1), t).await;
    let other = h.push(&*s, shell("echo other").not_before(h.at(secs(100))), t).await;
    h.claim_expect(&*s, "w1", t, j.id).await;
    let c2 = h.claim_expect(&*s, "w2", h.at(secs(61)), j.id).await;
    assert_eq!(c2.job.attempts, 2);

    // Both attempts used; the lease runs out at 121 s.
    let now = h.at(secs(200));
    let mut claimed = Vec::new();
    while let Some(c) = h.claim(&*s, "w3", now).await {
        claimed.push(c.job.id);
    }
    assert_eq!(claimed, [other.id], "the expired job must not be handed out again");

    let failed = job(&*s, j.id).await;
    assert_eq!(failed.state, JobState::Failed);
    assert_eq!(failed.attempts, 2);
    assert!(failed.last_error.is_some());
    assert_eq!(failed.lease, None);
    assert_eq!(failed.finished_at, Some(now));
    assert_eq!(
        event_kinds(&*s, j.id).await,
        [
            EventKind::Pushed,
            EventKind::Claimed,
            EventKind::Reclaimed,
            EventKind::Claimed,
            EventKind::Expired
        ]
    );
    let stats = s.stats(now).await.expect("stats");
    assert_eq!((stats.pending, stats.running, stats.failed), (0, 1, 1));
}

/// The owner's heartbeat after its lease expired, when nobody reclaimed the
/// job, succeeds (a sleeping laptop is slow, not gone): it extends the
/// lease to `now + lease_ttl`, writes no event, and another claimer then
/// finds nothing.
pub async fn owner_heartbeat_after_expiry_extends_the_lease(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo napping"), t).await;
    let c = h.claim_expect(&*s, "sleeper", t, j.id).await;

    let woke = h.at(secs(600));
    let ack = s.heartbeat(j.id, &c.fence, None, woke).await.expect("heartbeat after expiry");
    assert_eq!(ack.lease_until, woke.saturating_add(secs(60)));
    assert!(!ack.cancel_requested);
    let after = job(&*s, j.id).await;
    assert_eq!(after.state, JobState::Running);
    assert_eq!(after.attempts, 1);
    assert_eq!(after.lease.as_ref().map(|l| (l.until, l.attempt)), Some((ack.lease_until, 1)));
    assert_eq!(event_kinds(&*s, j.id).await, [EventKind::Pushed, EventKind::Claimed]);

    assert!(h.claim(&*s, "w2", h.at(secs(630))).await.is_none(), "the lease was extended");
    let done = s.complete(j.id, &c.fence, Completion::default(), h.at(secs(630))).await;
    assert_eq!(done.expect("complete").state, JobState::Done);
}

/// A heartbeat records the child's process group on the lease; a later
/// heartbeat without one keeps it; a new one replaces it.
pub async fn heartbeat_records_child_pgid(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("sleep 100"), t).await;
    let c = h.claim_expect(&*s, "w1", t, j.id).await;
    let pgid = async |id| job(&*s, id).await.lease.and_then(|l| l.child_pgid);
    assert_eq!(pgid(j.id).await, None);

    s.heartbeat(j.id, &c.fence, Some(4321), h.at(secs(1))).await.expect("heartbeat");
    assert_eq!(pgid(j.id).await, Some(4321));
    s.heartbeat(j.id, &c.fence, None, h.at(secs(20))).await.expect("heartbeat");
    assert_eq!(pgid(j.id).await, Some(4321));
    let lease = job(&*s, j.id).await.lease.expect("a lease");
    assert_eq!(lease.until, h.at(secs(80)));
    s.heartbeat(j.id, &c.fence, Some(99), h.at(secs(40))).await.expect("heartbeat");
    assert_eq!(pgid(j.id).await, Some(99));
}

/// A judge saying the owner is `Alive` prevents reclaim however long ago
/// the lease expired (claim and `reclaim_dead` both leave it); once the
/// judge no longer says so, the expired lease is reclaimed.
pub async fn alive_owner_is_never_reclaimed(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo alive"), t).await;
    h.claim_expect(&*s, "alive", t, j.id).await;
    h.set_liveness("alive", Liveness::Alive);
    let before = snapshot(&*s, j.id).await;

    let hour = h.at(secs(3_600));
    assert!(h.claim(&*s, "w2", hour).await.is_none(), "an alive owner's job was taken");
    assert!(h.reclaim_gone(&*s, hour).await.is_empty());
    assert_eq!(snapshot(&*s, j.id).await, before);

    h.set_liveness("alive", Liveness::Unknown);
    let c = h.claim_expect(&*s, "w2", hour, j.id).await;
    assert_eq!(c.job.attempts, 2);
}

/// A judge saying the owner is `Gone` allows reclaim at once, before the
/// lease expires: attempts 2, a `reclaimed` event, `reclaimed_from` set.
pub async fn gone_owner_is_reclaimed_before_expiry(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo orphan"), t).await;
    h.claim_expect(&*s, "crashed", t, j.id).await;
    let now = h.at(secs(1));
    assert!(h.claim(&*s, "w2", now).await.is_none(), "unknown owner, lease valid");

    h.set_liveness("crashed", Liveness::Gone);
    let c = h.claim_expect(&*s, "w2", now, j.id).await;
    assert_eq!(c.job.attempts, 2);
    assert_eq!(c.reclaimed_from.map(|o| o.id), Some("crashed".to_owned()));
    assert_eq!(
        event_kinds(&*s, j.id).await,
        [EventKind::Pushed, EventKind::Claimed, EventKind::Reclaimed, EventKind::Claimed]
    );
}

/// `reclaim_dead` sends the jobs of gone owners back to `pending` (lease
/// cleared, attempts kept, a `reclaimed` event) and returns them as they
/// were, leases included; jobs of alive and unknown owners stay running,
/// even with expired leases.
pub async fn reclaim_dead_returns_gone_owners_jobs_to_pending(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let jg = h.push(&*s, shell("echo g"), t).await;
    let ja = h.push(&*s, shell("echo a"), t).await;
    let ju = h.push(&*s, shell("echo u"), t).await;
    let cg = h.claim_expect(&*s, "gone", t, jg.id).await;
    h.claim_expect(&*s, "alive", t, ja.id).await;
    h.claim_expect(&*s, "unknown", t, ju.id).await;
    s.heartbeat(jg.id, &cg.fence, Some(555), t).await.expect("heartbeat");
    h.set_liveness("gone", Liveness::Gone);
    h.set_liveness("alive", Liveness::Alive);
    let alive_before = snapshot(&*s, ja.id).await;
    let unknown_before = snapshot(&*s, ju.id).await;
    let gone_before = job(&*s, jg.id).await;

    let now = h.at(secs(120));
    let swept = h.reclaim_gone(&*s, now).await;
    assert_eq!(
        swept,
        std::slice::from_ref(&gone_before),
        "the sweep returns the jobs as they were"
    );
    assert_eq!(swept[0].lease.as_ref().and_then(|l| l.child_pgid), Some(555));

    let back = job(&*s, jg.id).await;
    assert_eq!(back.state, JobState::Pending);
    assert_eq!(back.lease, None);
    assert_eq!(back.attempts, 1);
    assert!(back.is_due(now));
    assert_eq!(
        event_kinds(&*s, jg.id).await,
        [EventKind::Pushed, EventKind::Claimed, EventKind::Reclaimed]
    );
    assert_eq!(snapshot(&*s, ja.id).await, alive_before);
    assert_eq!(snapshot(&*s, ju.id).await, unknown_before);
    assert!(h.reclaim_gone(&*s, now).await.is_empty());

    let c = h.claim_expect(&*s, "w2", now, jg.id).await;
    assert_eq!(c.job.attempts, 2);
}

/// `reclaim_dead` ends a gone owner's job that has no attempts left:
/// `failed` with an `expired` event, not `pending`.
pub async fn reclaim_dead_fails_a_job_out_of_attempts(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo last try").max_attempts(1), t).await;
    h.claim_expect(&*s, "gone", t, j.id).await;
    h.set_liveness("gone", Liveness::Gone);
    let now = h.at(secs(5));
    let swept = h.reclaim_gone(&*s, now).await;
    assert_eq!(swept.iter().map(|j| j.id).collect::<Vec<_>>(), [j.id]);
    let after = job(&*s, j.id).await;
    assert_eq!(after.state, JobState::Failed);
    assert!(after.last_error.is_some());
    assert_eq!(after.finished_at, Some(now));
    assert_eq!(
        event_kinds(&*s, j.id).await,
        [EventKind::Pushed, EventKind::Claimed, EventKind::Expired]
    );
}

/// `release` returns the job to `pending`, due now, lease cleared, and does
/// not charge the attempt: a job with `max_attempts == 1` released twice
/// still runs. A `released` event is written.
pub async fn release_returns_the_job_without_charging_the_attempt(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo interrupted").max_attempts(1), t).await;
    let c = h.claim_expect(&*s, "w1", t, j.id).await;
    let now = h.at(secs(5));
    let r = s.release(j.id, &c.fence, now).await.expect("release");
    assert_eq!(r.state, JobState::Pending);
    assert_eq!(r.attempts, 0);
    assert_eq!(r.not_before, now);
    assert_eq!(r.lease, None);
    assert_eq!(job(&*s, j.id).await, r);
    assert_eq!(
        event_kinds(&*s, j.id).await,
        [EventKind::Pushed, EventKind::Claimed, EventKind::Released]
    );
    let again = s.release(j.id, &c.fence, now).await;
    assert!(matches!(again, Err(StoreError::LeaseLost { .. })), "{again:?}");

    let c2 = h.claim_expect(&*s, "w2", now, j.id).await;
    assert_eq!(c2.job.attempts, 1);
    s.release(j.id, &c2.fence, now).await.expect("release again");
    let c3 = h.claim_expect(&*s, "w3", now, j.id).await;
    assert_eq!(c3.job.attempts, 1);
    let done = s.complete(j.id, &c3.fence, Completion::default(), now).await.expect("complete");
    assert_eq!(done.state, JobState::Done);
}

/// `complete` ends the job `done` with the result and exit code, the
/// lease cleared, `finished_at` set and a `completed` event; afterwards
/// the old fence can neither heartbeat nor complete again (`LeaseLost`).
pub async fn complete_records_the_result_and_ends_the_lease(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo moved 4 files"), t).await;
    let c = h.claim_expect(&*s, "w1", t, j.id).await;
    let now = h.at(secs(3));
    let done = Completion { result: Some("moved 4 files".into()), exit_code: Some(0) };
    let d = s.complete(j.id, &c.fence, done.clone(), now).await.expect("complete");
    assert_eq!(d.state, JobState::Done);
    assert_eq!(d.result.as_deref(), Some("moved 4 files"));
    assert_eq!(d.exit_code, Some(0));
    assert_eq!(d.last_error, None);
    assert_eq!(d.lease, None);
    assert_eq!(d.finished_at, Some(now));
    assert_eq!(d.attempts, 1);
    assert_eq!(job(&*s, j.id).await, d);
    let events = s.events(j.id).await.expect("events");
    let last = events.last().expect("an event");
    assert_eq!((last.kind, last.at, last.attempt), (EventKind::Completed, now, Some(1)));

    let before = snapshot(&*s, j.id).await;
    assert!(matches!(
        s.heartbeat(j.id, &c.fence, None, now).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(
        s.complete(j.id, &c.fence, done, now).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(
        s.fail(j.id, &c.fence, failure("x"), now).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!(snapshot(&*s, j.id).await, before);
}
