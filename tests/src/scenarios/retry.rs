//! Failure, backoff and `retry`.

use std::time::Duration;

use slothqueue_core::machine::NOT_RETRIED;
use slothqueue_core::{
    ClaimFilter, Completion, EventKind, Failure, JobState, Settlement, StoreError,
};

use crate::{Harness, assert_trail_consistent, event_kinds, job, secs, shell};

/// Each failure reschedules the job `backoff(attempts)` into the future:
/// 2 s, 4 s, 8 s (`not_before - now`, and the `failed` event's `retry_at`);
/// it is not claimable a millisecond before that. The failure with no
/// attempts left ends it `failed` with `last_error`, `exit_code` and
/// `finished_at`, its `failed` event without `retry_at`.
pub async fn failures_back_off_2_4_8_seconds_then_fail(h: &Harness) {
    let s = h.store();
    let mut now = h.start();
    let j = h.push(&*s, shell("false").max_attempts(4), now).await;
    for (attempt, wait) in [(1, 2), (2, 4), (3, 8)] {
        let c = h.claim_expect(&*s, "w1", now, j.id).await;
        assert_eq!(c.job.attempts, attempt);
        let err = Failure {
            error: format!("exit {attempt}"),
            exit_code: Some(attempt as i32),
            permanent: false,
        };
        let f = s.fail(j.id, &c.fence, err, now).await.expect("fail");
        assert_eq!(f.state, JobState::Pending);
        assert_eq!(f.not_before.duration_since(now), secs(wait), "attempt {attempt}");
        assert_eq!(f.last_error, Some(format!("exit {attempt}")));
        assert_eq!(f.lease, None);
        assert_eq!(f.finished_at, None);
        let events = s.events(j.id).await.expect("events");
        let last = events.last().expect("an event");
        assert_eq!((last.kind, last.retry_at), (EventKind::Failed, Some(f.not_before)));

        let early = f.not_before.saturating_sub(Duration::from_millis(1));
        assert!(h.claim(&*s, "w1", early).await.is_none(), "claimed before the backoff ended");
        now = f.not_before;
    }
    let c = h.claim_expect(&*s, "w1", now, j.id).await;
    assert_eq!(c.job.attempts, 4);
    let end =
        Failure { error: "disk check: 82% full".into(), exit_code: Some(3), permanent: false };
    let f = s.fail(j.id, &c.fence, end, now).await.expect("last fail");
    assert_eq!(f.state, JobState::Failed);
    assert_eq!(f.last_error.as_deref(), Some("disk check: 82% full"));
    assert_eq!(f.exit_code, Some(3));
    assert_eq!(f.finished_at, Some(now));
    assert_eq!(job(&*s, j.id).await, f);
    let events = s.events(j.id).await.expect("events");
    let last = events.last().expect("an event");
    assert_eq!((last.kind, last.retry_at), (EventKind::Failed, None));
    assert_eq!(events.iter().filter(|e| e.kind == EventKind::Failed).count(), 4);
    assert!(h.claim(&*s, "w1", h.at(secs(86_400))).await.is_none(), "failed is final");
    assert_trail_consistent(&*s, j.id).await;
}

/// A permanent failure (another attempt would fail the same way) at
/// attempt 1 of 3 ends the job `failed` at once: `attempts` 1,
/// `last_error` and `exit_code` as given, `finished_at` set, no retry time
/// on the job (`not_before` unchanged) nor on its `failed` event, whose
/// message is the error followed by `; ` and [`NOT_RETRIED`]. It is never
/// claimed again, and the jobs waiting on it are cancelled as for any
/// failed parent. `settle_and_claim` with a permanent failure records the
/// same and then claims the next job. A cancel requested meanwhile still
/// wins: that job ends `cancelled`.
pub async fn a_permanent_failure_ends_the_job_failed_without_retry(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("false").max_attempts(3).priority(3), t).await;
    let child = h.push(&*s, shell("echo child").after(j.id), t).await;
    let c = h.claim_expect(&*s, "w1", t, j.id).await;
    assert_eq!((c.job.attempts, c.job.max_attempts), (1, 3));
    let now = h.at(secs(1));
    let error = "cannot decode the payload: missing field `b`";
    let permanent = Failure { error: error.into(), exit_code: Some(2), permanent: true };
    let f = s.fail(j.id, &c.fence, permanent.clone(), now).await.expect("fail");
    assert_eq!((f.state, f.attempts, f.max_attempts), (JobState::Failed, 1, 3));
    assert_eq!(f.last_error.as_deref(), Some(error));
    assert_eq!(f.exit_code, Some(2));
    assert_eq!(f.finished_at, Some(now));
    assert_eq!(f.lease, None);
    assert_eq!(f.not_before, j.not_before, "no retry time");
    assert_eq!(job(&*s, j.id).await, f);
    let events = s.events(j.id).await.expect("events");
    let last = events.last().expect("an event");
    assert_eq!((last.kind, last.retry_at, last.attempt), (EventKind::Failed, None, Some(1)));
    let says = format!("{error}; {NOT_RETRIED}");
    assert_eq!(last.message.as_deref(), Some(says.as_str()), "the trail says it was not retried");
    assert_eq!(job(&*s, child.id).await.state, JobState::Cancelled, "its dependents end too");
    assert!(h.claim(&*s, "w1", h.at(secs(86_400))).await.is_none(), "failed is final");
    assert_trail_consistent(&*s, j.id).await;
    assert_trail_consistent(&*s, child.id).await;

    // The same through `settle_and_claim`, which then claims the next job.
    let a = h.push(&*s, shell("false").max_attempts(3).priority(2), now).await;
    let b = h.push(&*s, shell("echo b"), now).await;
    let held = h.claim_expect(&*s, "w1", now, a.id).await;
    let later = h.at(secs(2));
    let next = h.request("w1").filter(ClaimFilter::default());
    let got = s
        .settle_and_claim(a.id, &held.fence, Settlement::Fail(permanent.clone()), &next, later)
        .await
        .expect("settle");
    assert_eq!(got.settled, job(&*s, a.id).await);
    assert_eq!((got.settled.state, got.settled.attempts), (JobState::Failed, 1));
    assert_eq!(got.settled.last_error.as_deref(), Some(error));
    assert_eq!(got.settled.finished_at, Some(later));
    assert_eq!(got.settled.not_before, a.not_before, "no retry time");
    assert_eq!(got.next.map(|n| n.job.id), Some(b.id));
    let events = s.events(a.id).await.expect("events");
    let last = events.last().expect("an event");
    assert_eq!((last.kind, last.retry_at), (EventKind::Failed, None));
    assert_eq!(last.message.as_deref(), Some(says.as_str()));
    assert_trail_consistent(&*s, a.id).await;

    // A cancel requested while it ran still ends the job `cancelled`.
    let x = h.push(&*s, shell("sleep 100").max_attempts(3), later).await;
    let held = h.claim_expect(&*s, "w2", later, x.id).await;
    s.cancel(x.id, later).await.expect("request cancel");
    let f = s.fail(x.id, &held.fence, permanent, h.at(secs(3))).await.expect("fail");
    assert_eq!(f.state, JobState::Cancelled);
    assert_eq!(event_kinds(&*s, x.id).await.last(), Some(&EventKind::Cancelled));
}

/// With many attempts allowed, the backoff doubles up to the 300 s cap and
/// stays there: 2, 4, 8, … 256, 300, 300.
pub async fn backoff_caps_at_300_seconds(h: &Harness) {
    let s = h.store();
    let mut now = h.start();
    let j = h.push(&*s, shell("false").max_attempts(50), now).await;
    let mut waits = Vec::new();
    for _ in 0..11 {
        let c = h.claim_expect(&*s, "w1", now, j.id).await;
        let f = s.fail(j.id, &c.fence, Failure::default(), now).await.expect("fail");
        assert_eq!(f.state, JobState::Pending);
        waits.push(f.not_before.duration_since(now).as_secs());
        now = f.not_before;
    }
    assert_eq!(waits, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
    assert_eq!(job(&*s, j.id).await.attempts, 11);
}

/// `retry` puts a `failed` job back to `pending`, due now, with attempts
/// reset to 0 and a `retried` event; it then runs a full set of attempts.
pub async fn retry_puts_a_failed_job_back_with_attempts_reset(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("false").max_attempts(1), t).await;
    let c = h.claim_expect(&*s, "w1", t, j.id).await;
    let f = s
        .fail(
            j.id,
            &c.fence,
            Failure { error: "boom".into(), exit_code: Some(1), permanent: false },
            t,
        )
        .await;
    assert_eq!(f.expect("fail").state, JobState::Failed);

    let now = h.at(secs(3_600));
    let r = s.retry(j.id, now).await.expect("retry");
    assert_eq!(r.state, JobState::Pending);
    assert_eq!(r.attempts, 0);
    assert_eq!(r.not_before, now);
    assert_eq!(r.finished_at, None);
    assert!(r.is_due(now));
    assert_eq!(job(&*s, j.id).await, r);
    assert_eq!(event_kinds(&*s, j.id).await.last(), Some(&EventKind::Retried));

    let c = h.claim_expect(&*s, "w2", now, j.id).await;
    assert_eq!(c.job.attempts, 1);
    let d = s.complete(j.id, &c.fence, Completion::default(), now).await.expect("complete");
    assert_eq!(d.state, JobState::Done);
}

/// `retry` puts a `cancelled` job back to `pending`, due now, attempts
/// reset, the cancel request cleared.
pub async fn retry_puts_a_cancelled_job_back(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo hi").not_before(h.at(secs(1_000))), t).await;
    let running = h.push(&*s, shell("echo running").priority(5), t).await;
    s.cancel(j.id, t).await.expect("cancel pending");
    let c = h.claim_expect(&*s, "w1", t, running.id).await;
    s.cancel(running.id, t).await.expect("request cancel");
    let f = s.fail(
        running.id,
        &c.fence,
        Failure { error: "killed".into(), exit_code: None, permanent: false },
        t,
    );
    assert_eq!(f.await.expect("fail").state, JobState::Cancelled);

    let now = h.at(secs(10));
    for id in [j.id, running.id] {
        let r = s.retry(id, now).await.expect("retry");
        assert_eq!((r.state, r.attempts, r.not_before), (JobState::Pending, 0, now), "#{id}");
        assert!(!r.cancel_requested, "#{id}");
        assert_eq!(r.finished_at, None);
    }
    let mut got = Vec::new();
    while let Some(c) = h.claim(&*s, "w2", now).await {
        got.push(c.job.id);
    }
    assert_eq!(got, [running.id, j.id]);
}

/// `retry` refuses a job that is pending, running or done with
/// `InvalidTransition` naming its state, and changes nothing.
pub async fn retry_of_a_live_or_done_job_is_refused(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let done = h.push(&*s, shell("echo d").priority(2), t).await;
    let running = h.push(&*s, shell("echo r").priority(1), t).await;
    let pending = h.push(&*s, shell("echo p").not_before(h.at(secs(60))), t).await;
    let c = h.claim_expect(&*s, "w1", t, done.id).await;
    s.complete(done.id, &c.fence, Completion::default(), t).await.expect("complete");
    h.claim_expect(&*s, "w1", t, running.id).await;

    for (id, state) in [
        (pending.id, JobState::Pending),
        (running.id, JobState::Running),
        (done.id, JobState::Done),
    ] {
        let before = crate::snapshot(&*s, id).await;
        let err = s.retry(id, t).await.expect_err("retry must refuse");
        assert!(
            matches!(err, StoreError::InvalidTransition { id: e, state: st, .. } if e == id && st == state),
            "#{id}: {err:?}"
        );
        assert_eq!(crate::snapshot(&*s, id).await, before);
    }
}
