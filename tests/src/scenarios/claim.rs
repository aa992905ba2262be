//! Which job a claim hands out, when, and what the lease looks like.

use std::time::Duration;

use serde_json::json;
use slothqueue_core::{
    ClaimFilter, Completion, EventKind, Fence, JobState, Lease, NewJob, Stats, Timestamp,
};

use crate::{Harness, assert_trail_consistent, event_kinds, job, secs, shell, snapshot};

/// A job pushed with a future `not_before` is not claimed before then, not
/// even a millisecond early, and is claimed once `now >= not_before`.
pub async fn delayed_job_is_not_claimed_early(h: &Harness) {
    let s = h.store();
    let t0 = h.start();
    let due = h.at(secs(30));
    let j = h.push(&*s, shell("echo later").not_before(due), t0).await;
    assert_eq!(j.not_before, due);
    assert_eq!(j.state, JobState::Pending);

    assert!(h.claim(&*s, "w1", t0).await.is_none(), "claimed 30 s early");
    let just_before = due.saturating_sub(Duration::from_millis(1));
    assert!(h.claim(&*s, "w1", just_before).await.is_none(), "claimed 1 ms early");
    assert_eq!(job(&*s, j.id).await.state, JobState::Pending);
    assert_eq!(event_kinds(&*s, j.id).await, [EventKind::Pushed]);

    let c = h.claim_expect(&*s, "w1", due, j.id).await;
    assert_eq!(c.job.state, JobState::Running);
    assert_eq!(c.job.attempts, 1);
    assert_eq!(c.job.lease.as_ref().map(|l| l.until), Some(due.saturating_add(secs(60))));
    assert_trail_consistent(&*s, j.id).await;
}

/// Claims take the highest priority first, then the earliest `not_before`,
/// then the lowest id; a job not yet due waits whatever its priority.
pub async fn claim_order_is_priority_then_not_before_then_id(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j1 = h.push(&*s, shell("echo 1"), t).await;
    let j2 = h.push(&*s, shell("echo 2").priority(5), t).await;
    let j3 =
        h.push(&*s, shell("echo 3").priority(5).not_before(t.saturating_sub(secs(5))), t).await;
    let j4 = h.push(&*s, shell("echo 4").priority(5), t).await;
    let j5 = h.push(&*s, shell("echo 5").priority(-1), t).await;
    let j6 = h.push(&*s, shell("echo 6").priority(100).not_before(h.at(secs(10))), t).await;
    assert!(j1.id < j2.id && j2.id < j3.id && j3.id < j4.id && j4.id < j5.id && j5.id < j6.id);

    let mut order = Vec::new();
    while let Some(c) = h.claim(&*s, "w1", t).await {
        order.push(c.job.id);
    }
    assert_eq!(order, [j3.id, j2.id, j4.id, j1.id, j5.id]);
    assert_eq!(job(&*s, j6.id).await.state, JobState::Pending);
    h.claim_expect(&*s, "w1", h.at(secs(10)), j6.id).await;
}

/// A claim restricted to queues takes only jobs of those queues, in claim
/// order, and leaves the others pending.
pub async fn claim_filters_by_queue(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let a = h.push(&*s, shell("echo a").queue("alpha").priority(9), t).await;
    let b = h.push(&*s, shell("echo b").queue("beta"), t).await;
    let g = h.push(&*s, shell("echo g").queue("gamma").priority(1), t).await;
    let only = ClaimFilter { queues: vec!["beta".into(), "gamma".into()], kinds: None };

    let first = h.claim_filtered(&*s, "w1", &only, t).await.expect("a beta or gamma job");
    assert_eq!(first.job.id, g.id);
    let second = h.claim_filtered(&*s, "w1", &only, t).await.expect("the beta job");
    assert_eq!(second.job.id, b.id);
    assert!(h.claim_filtered(&*s, "w1", &only, t).await.is_none(), "alpha is not in the filter");
    assert_eq!(job(&*s, a.id).await.state, JobState::Pending);

    let alpha = ClaimFilter { queues: vec!["alpha".into()], kinds: None };
    assert_eq!(h.claim_filtered(&*s, "w1", &alpha, t).await.map(|c| c.job.id), Some(a.id));
}

/// A claim restricted to kinds takes only jobs of those kinds; queue and
/// kind restrictions combine.
pub async fn claim_filters_by_kind(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let sh = h.push(&*s, shell("echo a").priority(5), t).await;
    let mail = h.push(&*s, NewJob::new("mail", json!({"to": "a@example.com"})), t).await;
    let other =
        h.push(&*s, NewJob::new("mail", json!({"to": "b@example.com"})).queue("other"), t).await;

    let mails = ClaimFilter { queues: vec!["default".into()], kinds: Some(vec!["mail".into()]) };
    assert_eq!(h.claim_filtered(&*s, "w1", &mails, t).await.map(|c| c.job.id), Some(mail.id));
    assert!(h.claim_filtered(&*s, "w1", &mails, t).await.is_none(), "the other mail is elsewhere");
    assert_eq!(job(&*s, sh.id).await.state, JobState::Pending);

    let any_mail = ClaimFilter { queues: vec![], kinds: Some(vec!["mail".into()]) };
    assert_eq!(h.claim_filtered(&*s, "w1", &any_mail, t).await.map(|c| c.job.id), Some(other.id));
    let shells = ClaimFilter { queues: vec![], kinds: Some(vec!["shell".into()]) };
    assert_eq!(h.claim_filtered(&*s, "w1", &shells, t).await.map(|c| c.job.id), Some(sh.id));
}

/// A claim returns the job running under a lease naming the full owner
/// (host, boot id, pid, start time), attempt 1, `until = now + lease_ttl`;
/// the fence is (owner id, attempt); `get` returns the same job; the trail
/// gains `claimed` with the owner and attempt.
pub async fn claim_hands_out_a_lease_with_the_claimers_identity(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let pushed = h.push(&*s, shell("echo x").max_runtime(Some(secs(2))), t).await;
    let now = h.at(secs(1));
    let c = h.claim_expect(&*s, "w1", now, pushed.id).await;

    assert_eq!(c.fence, Fence { owner: "w1".into(), attempt: 1 });
    assert_eq!(c.reclaimed_from, None);
    assert_eq!(
        c.job.lease,
        Some(Lease {
            owner: h.owner("w1"),
            attempt: 1,
            until: now.saturating_add(h.policy().lease_ttl),
            child_pgid: None,
            gpus: Vec::new(),
        })
    );
    assert_eq!(c.job.state, JobState::Running);
    assert_eq!(c.job.attempts, 1);
    assert_eq!(c.job.started_at, Some(now));
    assert_eq!(c.job.max_runtime, Some(secs(2)));
    assert_eq!(c.job.created_at, t);
    assert_eq!(job(&*s, pushed.id).await, c.job);

    let events = s.events(pushed.id).await.expect("events");
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].kind, EventKind::Claimed);
    assert_eq!(events[1].at, now);
    assert_eq!(events[1].owner.as_deref(), Some("w1"));
    assert_eq!(events[1].attempt, Some(1));
}

/// Claiming from an empty queue, or one whose jobs are all finished,
/// returns `None` and writes nothing.
pub async fn claim_returns_none_when_nothing_is_due(h: &Harness) {
    let s = h.store();
    let t = h.start();
    assert!(h.claim(&*s, "w1", t).await.is_none());
    assert_eq!(s.stats(t).await.expect("stats"), Stats::default());

    let j = h.push(&*s, shell("echo once"), t).await;
    let c = h.claim_expect(&*s, "w1", t, j.id).await;
    s.complete(j.id, &c.fence, Default::default(), t).await.expect("complete");
    let before = snapshot(&*s, j.id).await;
    let much_later = Timestamp::from_millis(t.as_millis() + 86_400_000);
    assert!(h.claim(&*s, "w2", much_later).await.is_none(), "a done job is never claimed");
    assert_eq!(snapshot(&*s, j.id).await, before);
}

/// A claim ends every abandoned job it may take that must not run again
/// (here: lease expired, no attempts left), also one *behind* the job it
/// takes: the rule is the core's claim plan, and a store that stops at the
/// winner leaves a dead job `running` until some later claim.
pub async fn claim_retires_abandoned_jobs_behind_the_job_it_takes(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let spent = h.push(&*s, shell("echo spent").priority(-5).max_attempts(1), t).await;
    h.claim_expect(&*s, "w1", t, spent.id).await;
    let best = h.push(&*s, shell("echo best").priority(9), t).await;
    let later = h.at(secs(3_600));
    let c = h.claim(&*s, "w2", later).await.expect("the pending job is taken");
    assert_eq!(c.job.id, best.id);
    let ended = job(&*s, spent.id).await;
    assert_eq!(ended.state, JobState::Failed, "the abandoned job behind the winner is ended");
    assert_eq!(ended.lease, None);
    assert_eq!(ended.finished_at, Some(later));
    assert_eq!(
        event_kinds(&*s, spent.id).await,
        [EventKind::Pushed, EventKind::Claimed, EventKind::Expired]
    );
    assert_trail_consistent(&*s, spent.id).await;
}

/// A claim looks only at the jobs its filter admits: an abandoned job of
/// another queue is neither taken nor ended by it.
pub async fn claim_retires_only_jobs_its_filter_admits(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let other = h.push(&*s, shell("echo other").queue("other").max_attempts(1), t).await;
    h.claim_expect(&*s, "w1", t, other.id).await;
    let later = h.at(secs(3_600));
    let mine = ClaimFilter { queues: vec!["mine".to_owned()], kinds: None };
    assert!(h.claim_filtered(&*s, "w2", &mine, later).await.is_none());
    assert_eq!(job(&*s, other.id).await.state, JobState::Running, "not the claim's to end");
    h.claim(&*s, "w2", later).await;
    assert_eq!(job(&*s, other.id).await.state, JobState::Failed);
}

/// `Reclaim::ExpiredOnly` (what a runner asks for) leaves a gone owner's
/// job alone while its lease is valid, ends nothing of it, and takes it
/// once the lease expired; `DeadOrExpired` takes it at once.
pub async fn claim_takes_a_dead_owners_job_only_when_the_request_allows(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo orphan"), t).await;
    h.claim_expect(&*s, "w1", t, j.id).await;
    h.set_liveness("w1", slothqueue_core::Liveness::Gone);
    let soon = h.at(secs(5));
    let expired_only = h.request("w2").reclaim(slothqueue_core::Reclaim::ExpiredOnly);
    let got = s.claim(&expired_only, soon).await.expect("claim");
    assert!(got.is_none(), "a dead owner's job is the sweep's while its lease holds");
    assert_eq!(job(&*s, j.id).await.lease.map(|l| l.owner.id).as_deref(), Some("w1"));
    let got = s.claim(&h.request("w2"), soon).await.expect("claim").expect("taken at once");
    assert_eq!(got.job.id, j.id);
    assert_eq!(got.reclaimed_from.map(|o| o.id).as_deref(), Some("w1"));
    assert_eq!(got.job.attempts, 2);
}

/// A claim passes over the jobs its request refuses (a runner whose
/// handler refused one must not be handed it again) and takes the next in
/// claim order, whatever the queue, kind or lane; another claimer, refusing
/// nothing, still takes them. An expired job the request refuses is not
/// taken back by it either. Added in core alone: no store's candidate
/// search knows of refusals.
pub async fn claim_skips_jobs_the_request_refuses(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let top = h.push(&*s, shell("echo top").priority(9), t).await;
    let next = h.push(&*s, shell("echo next").priority(9), t).await;
    let low = h.push(&*s, shell("echo low").queue("other"), t).await;

    let picky = h.request("picky").refusing([top.id, next.id]);
    let c = s.claim(&picky, t).await.expect("claim").expect("the job it does not refuse");
    assert_eq!(c.job.id, low.id, "both refused jobs are passed over");
    s.complete(low.id, &c.fence, Completion::default(), t).await.expect("complete");
    assert!(s.claim(&picky, t).await.expect("claim").is_none(), "only refused jobs are left");
    assert_eq!(job(&*s, top.id).await.state, JobState::Pending);
    assert_eq!(event_kinds(&*s, next.id).await, [EventKind::Pushed], "passing over writes nothing");

    let other = h.claim_expect(&*s, "other", t, top.id).await;
    assert_eq!(other.job.attempts, 1);

    // `other` goes silent; its expired lease may be taken back, but not by
    // a claimer refusing the job.
    let late = t.saturating_add(secs(61));
    let refusing_both = h.request("picky").refusing([top.id, next.id]);
    assert!(s.claim(&refusing_both, late).await.expect("claim").is_none());
    assert_eq!(job(&*s, top.id).await.lease.map(|l| l.owner.id).as_deref(), Some("other"));
    let c = h.claim(&*s, "third", late).await.expect("the expired job, taken back");
    assert_eq!((c.job.id, c.job.attempts), (top.id, 2));
    assert_trail_consistent(&*s, top.id).await;
}
