//! `purge`: what it deletes, what it never touches.

use slothqueue_core::{Claimed, Completion, Failure, JobId, PurgeFilter, StoreError, Timestamp};

use crate::{Harness, event_kinds, job, secs, shell, snapshot};

struct Mix {
    pending: JobId,
    running: JobId,
    running_claim: Claimed,
    done: JobId,
    failed: JobId,
    cancelled: JobId,
}

/// One job in each state, all finished at `t`.
async fn one_of_each(h: &Harness, t: Timestamp) -> Mix {
    let s = h.store();
    let pending = h.push(&*s, shell("echo p").not_before(h.at(secs(3_600))), t).await.id;
    let running = h.push(&*s, shell("echo r").priority(3), t).await.id;
    let done = h.push(&*s, shell("echo d").priority(2), t).await.id;
    let failed = h.push(&*s, shell("echo f").priority(1).max_attempts(1), t).await.id;
    let cancelled = h.push(&*s, shell("echo c"), t).await.id;
    let running_claim = h.claim_expect(&*s, "w1", t, running).await;
    let c = h.claim_expect(&*s, "w1", t, done).await;
    s.complete(done, &c.fence, Completion::default(), t).await.expect("complete");
    let c = h.claim_expect(&*s, "w1", t, failed).await;
    s.fail(failed, &c.fence, Failure::default(), t).await.expect("fail");
    s.cancel(cancelled, t).await.expect("cancel");
    Mix { pending, running, running_claim, done, failed, cancelled }
}

fn sorted(mut ids: Vec<JobId>) -> Vec<JobId> {
    ids.sort_unstable();
    ids
}

/// By default `purge` deletes exactly the done, failed and cancelled jobs,
/// with their trails (`get` and `events` answer `NotFound`), and leaves
/// pending and running jobs as they were.
pub async fn purge_deletes_only_terminal_jobs_and_their_trails(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let m = one_of_each(h, t).await;
    let pending_before = snapshot(&*s, m.pending).await;
    let running_before = snapshot(&*s, m.running).await;

    let purged = s.purge(&PurgeFilter::default()).await.expect("purge");
    assert_eq!(sorted(purged), sorted(vec![m.done, m.failed, m.cancelled]));
    for id in [m.done, m.failed, m.cancelled] {
        assert!(matches!(s.get(id).await, Err(StoreError::NotFound(_))), "#{id} still there");
        assert!(matches!(s.events(id).await, Err(StoreError::NotFound(_))), "#{id}'s trail");
    }
    assert_eq!(snapshot(&*s, m.pending).await, pending_before);
    assert_eq!(snapshot(&*s, m.running).await, running_before);
    let stats = s.stats(t).await.expect("stats");
    assert_eq!(
        (stats.pending, stats.running, stats.done, stats.failed, stats.cancelled),
        (1, 1, 0, 0, 0)
    );
    assert!(s.purge(&PurgeFilter::default()).await.expect("purge again").is_empty());
}

/// `purge` with `include_pending` also deletes pending jobs, and still
/// never a running one; once that job finishes, it can be purged.
pub async fn purge_with_pending_never_touches_running(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let m = one_of_each(h, t).await;
    let all = PurgeFilter { include_pending: true, older_than: None };
    let purged = s.purge(&all).await.expect("purge");
    assert_eq!(sorted(purged), sorted(vec![m.pending, m.done, m.failed, m.cancelled]));
    assert!(matches!(s.get(m.pending).await, Err(StoreError::NotFound(_))));
    let r = job(&*s, m.running).await;
    assert_eq!(r.lease.as_ref().map(|l| l.owner.id.as_str()), Some("w1"));
    assert_eq!(s.stats(t).await.expect("stats").running, 1);

    let fence = &m.running_claim.fence;
    s.complete(m.running, fence, Completion::default(), h.at(secs(1))).await.expect("complete");
    assert_eq!(s.purge(&all).await.expect("purge"), [m.running]);
    assert!(matches!(s.get(m.running).await, Err(StoreError::NotFound(_))));
}

/// `older_than` limits `purge` to jobs that finished (or, pending ones,
/// were created) before that instant.
pub async fn purge_respects_older_than(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let early = h.push(&*s, shell("echo early").not_before(h.at(secs(10_000))), t).await.id;
    let d1 = h.push(&*s, shell("echo d1").priority(2), t).await.id;
    let d2 = h.push(&*s, shell("echo d2").priority(1), t).await.id;
    let c = h.claim_expect(&*s, "w1", h.at(secs(10)), d1).await;
    s.complete(d1, &c.fence, Completion::default(), h.at(secs(10))).await.expect("complete");
    let c = h.claim_expect(&*s, "w1", h.at(secs(100)), d2).await;
    s.complete(d2, &c.fence, Completion::default(), h.at(secs(100))).await.expect("complete");
    let late =
        h.push(&*s, shell("echo late").not_before(h.at(secs(10_000))), h.at(secs(500))).await;
    let late = late.id;

    let cutoff = PurgeFilter { include_pending: false, older_than: Some(h.at(secs(50))) };
    assert_eq!(s.purge(&cutoff).await.expect("purge"), [d1]);
    assert_eq!(event_kinds(&*s, d2).await.len(), 3, "d2 finished after the cutoff");

    let pending_cutoff = PurgeFilter { include_pending: true, older_than: Some(h.at(secs(200))) };
    assert_eq!(sorted(s.purge(&pending_cutoff).await.expect("purge")), sorted(vec![early, d2]));
    assert_eq!(job(&*s, late).await.created_at, h.at(secs(500)));
}
