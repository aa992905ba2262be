//! Read-only questions: `stats`, `next_due`, `list`, `events`.

use serde_json::json;
use slothqueue_core::{
    Completion, Failure, JobId, JobState, ListFilter, ListOrder, NewJob, Stats, StoreError,
};

use crate::{Harness, secs, shell};

/// `stats` counts jobs per state, `due_now` counts pending jobs with
/// `not_before <= now`, and `next_due` is the earliest `not_before` of the
/// pending jobs not yet due (`None` when every pending job is due).
pub async fn stats_count_states_due_now_and_next_due(h: &Harness) {
    let s = h.store();
    let t = h.start();
    assert_eq!(s.stats(t).await.expect("stats"), Stats::default());
    h.push(&*s, shell("echo due"), t).await;
    h.push(&*s, shell("echo +10").not_before(h.at(secs(10))), t).await;
    h.push(&*s, shell("echo +20").not_before(h.at(secs(20))), t).await;
    let run = h.push(&*s, shell("echo run").priority(10), t).await;
    let done = h.push(&*s, shell("echo done").priority(9), t).await;
    let failed = h.push(&*s, shell("echo failed").priority(8).max_attempts(1), t).await;
    let cancelled = h.push(&*s, shell("echo cancelled").not_before(h.at(secs(5))), t).await;
    h.claim_expect(&*s, "w1", t, run.id).await;
    let c = h.claim_expect(&*s, "w1", t, done.id).await;
    s.complete(done.id, &c.fence, Completion::default(), t).await.expect("complete");
    let c = h.claim_expect(&*s, "w1", t, failed.id).await;
    s.fail(failed.id, &c.fence, Failure::default(), t).await.expect("fail");
    s.cancel(cancelled.id, t).await.expect("cancel");

    let at = |pending_due, next| Stats {
        pending: 3,
        waiting_on_parents: 0,
        held: 0,
        running: 1,
        done: 1,
        failed: 1,
        cancelled: 1,
        due_now: pending_due,
        next_due: next,
    };
    assert_eq!(s.stats(t).await.expect("stats"), at(1, Some(h.at(secs(10)))));
    assert_eq!(s.stats(h.at(secs(15))).await.expect("stats"), at(2, Some(h.at(secs(20)))));
    assert_eq!(s.stats(h.at(secs(20))).await.expect("stats"), at(3, None));
}

/// `next_due` is when a sleeping runner should look again: the earliest
/// `not_before` of any pending job (due or not) or lease expiry of a
/// running job; `None` on an empty or finished queue.
pub async fn next_due_is_the_earliest_wake_up(h: &Harness) {
    let s = h.store();
    let t = h.start();
    assert_eq!(s.next_due().await.expect("next_due"), None);
    let a = h.push(&*s, shell("echo +30").not_before(h.at(secs(30))), t).await;
    assert_eq!(s.next_due().await.expect("next_due"), Some(h.at(secs(30))));
    let b = h.push(&*s, shell("echo +10").not_before(h.at(secs(10))), t).await;
    assert_eq!(s.next_due().await.expect("next_due"), Some(h.at(secs(10))));
    let now_job = h.push(&*s, shell("echo now"), t).await;
    assert_eq!(s.next_due().await.expect("next_due"), Some(t));

    // Running: its lease (t + 60 s) counts, the pending ones still come first.
    let c0 = h.claim_expect(&*s, "w1", t, now_job.id).await;
    assert_eq!(s.next_due().await.expect("next_due"), Some(h.at(secs(10))));
    let cb = h.claim_expect(&*s, "w1", h.at(secs(10)), b.id).await;
    assert_eq!(s.next_due().await.expect("next_due"), Some(h.at(secs(30))));
    let ca = h.claim_expect(&*s, "w1", h.at(secs(30)), a.id).await;
    assert_eq!(s.next_due().await.expect("next_due"), Some(h.at(secs(60))), "a lease expiry");

    for (id, c) in [(now_job.id, c0), (b.id, cb), (a.id, ca)] {
        s.complete(id, &c.fence, Completion::default(), h.at(secs(31))).await.expect("complete");
    }
    assert_eq!(s.next_due().await.expect("next_due"), None);
}

fn ids(jobs: &[slothqueue_core::Job]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

/// `list` filters by state, queue and kind, alone and combined, and
/// returns every job (newest first by default) without a filter.
pub async fn list_filters_by_state_queue_and_kind(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let a1 = h.push(&*s, shell("echo a1").queue("alpha").priority(3), t).await;
    let a2 = h.push(&*s, NewJob::new("mail", json!({"n": 1})).queue("alpha"), t).await;
    let b1 = h.push(&*s, shell("echo b1").queue("beta"), t).await;
    let b2 = h.push(&*s, NewJob::new("mail", json!({"n": 2})).queue("beta"), t).await;
    h.claim_expect(&*s, "w1", t, a1.id).await;
    s.cancel(b2.id, t).await.expect("cancel");

    let list = async |f: ListFilter| ids(&s.list(&f).await.expect("list"));
    assert_eq!(list(ListFilter::default()).await, [b2.id, b1.id, a2.id, a1.id]);
    let state = |st| ListFilter { state: Some(st), ..ListFilter::default() };
    assert_eq!(list(state(JobState::Pending)).await, [b1.id, a2.id]);
    assert_eq!(list(state(JobState::Running)).await, [a1.id]);
    assert_eq!(list(state(JobState::Cancelled)).await, [b2.id]);
    assert_eq!(list(state(JobState::Done)).await, Vec::<JobId>::new());
    let queue = |q: &str| ListFilter { queue: Some(q.into()), ..ListFilter::default() };
    assert_eq!(list(queue("alpha")).await, [a2.id, a1.id]);
    assert_eq!(list(queue("nowhere")).await, Vec::<JobId>::new());
    let kind = |k: &str| ListFilter { kind: Some(k.into()), ..ListFilter::default() };
    assert_eq!(list(kind("mail")).await, [b2.id, a2.id]);
    assert_eq!(list(kind("shell")).await, [b1.id, a1.id]);
    let both = ListFilter {
        state: Some(JobState::Pending),
        queue: Some("beta".into()),
        kind: Some("shell".into()),
        ..ListFilter::default()
    };
    assert_eq!(list(both).await, [b1.id]);
    let alpha = ListFilter { queue: Some("alpha".into()), ..ListFilter::default() };
    let listed = s.list(&alpha).await.expect("list");
    assert_eq!(listed[1], crate::job(&*s, a1.id).await, "list returns whole jobs");
}

/// `list` orders newest first (default), oldest first, or due-first (the
/// claim order); `limit` caps the answer; `cursor` pages on after an id
/// (below it for newest, above it for oldest).
pub async fn list_orders_limits_and_pages(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j1 = h.push(&*s, shell("echo 1"), t).await.id;
    let j2 = h.push(&*s, shell("echo 2").priority(5), t).await.id;
    let j3 = h.push(&*s, shell("echo 3").not_before(h.at(secs(9))), t).await.id;
    let j4 = h.push(&*s, shell("echo 4").priority(5).not_before(h.at(secs(1))), t).await.id;
    let j5 = h.push(&*s, shell("echo 5").priority(-2), t).await.id;

    let list = async |f: ListFilter| ids(&s.list(&f).await.expect("list"));
    let order = |o| ListFilter { order: o, ..ListFilter::default() };
    assert_eq!(list(order(ListOrder::Newest)).await, [j5, j4, j3, j2, j1]);
    assert_eq!(list(order(ListOrder::Oldest)).await, [j1, j2, j3, j4, j5]);
    assert_eq!(list(order(ListOrder::DueFirst)).await, [j2, j4, j1, j3, j5]);

    let page = |o, limit, cursor| ListFilter { order: o, limit, cursor, ..ListFilter::default() };
    assert_eq!(list(page(ListOrder::Newest, Some(2), None)).await, [j5, j4]);
    assert_eq!(list(page(ListOrder::Newest, Some(2), Some(j4))).await, [j3, j2]);
    assert_eq!(list(page(ListOrder::Newest, Some(2), Some(j2))).await, [j1]);
    assert_eq!(list(page(ListOrder::Oldest, Some(3), None)).await, [j1, j2, j3]);
    assert_eq!(list(page(ListOrder::Oldest, None, Some(j3))).await, [j4, j5]);
    assert_eq!(list(page(ListOrder::Oldest, Some(1), Some(j5))).await, Vec::<JobId>::new());
    assert_eq!(list(page(ListOrder::DueFirst, Some(2), None)).await, [j2, j4]);
    assert_eq!(list(page(ListOrder::Newest, Some(0), None)).await, Vec::<JobId>::new());
    // An id cannot mark a place in the due-first order: refused, on every store alike.
    let refused = s.list(&page(ListOrder::DueFirst, Some(2), Some(j2))).await;
    assert!(matches!(refused, Err(StoreError::InvalidInput(_))), "{refused:?}");
}
