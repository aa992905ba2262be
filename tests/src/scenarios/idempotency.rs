//! Idempotency keys: a duplicate is the same job; a newer payload wins.

use slothqueue_core::{Completion, EventKind, JobState, ListFilter};

use crate::{Harness, event_kinds, job, secs, shell, snapshot};

/// Pushing the same key with the same payload returns the existing job
/// with `created == false` and nothing superseded, and writes nothing: no
/// second job, no new event.
pub async fn same_key_same_payload_returns_the_existing_job(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let first = s.push(shell("backup.sh").key("nightly"), t).await.expect("push");
    assert!(first.created);
    assert_eq!(first.job.idempotency_key.as_deref(), Some("nightly"));
    let before = snapshot(&*s, first.job.id).await;

    let again = s.push(shell("backup.sh").key("nightly"), h.at(secs(5))).await.expect("push again");
    assert!(!again.created);
    assert_eq!(again.superseded, None);
    assert_eq!(again.job, first.job);
    assert_eq!(snapshot(&*s, first.job.id).await, before);
    assert_eq!(s.list(&ListFilter::default()).await.expect("list").len(), 1);

    let batch = s.push_many(vec![shell("backup.sh").key("nightly")], h.at(secs(6))).await;
    let batch = batch.expect("push_many");
    assert_eq!((batch[0].created, batch[0].job.id), (false, first.job.id));
    assert_eq!(s.stats(t).await.expect("stats").pending, 1);
}

/// Pushing the same key with a different payload creates the new job and
/// supersedes the pending old one: `superseded` names it, it ends
/// `cancelled` with a `superseded` event and loses the key, which moves to
/// the new job (so pushing the new payload again is a duplicate of it).
pub async fn same_key_new_payload_supersedes_the_pending_job(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let old = h.push_keyed(&*s, "echo v1", "deploy", t).await;
    let now = h.at(secs(10));
    let newer = s.push(shell("echo v2").key("deploy"), now).await.expect("push v2");
    assert!(newer.created);
    assert_eq!(newer.superseded, Some(old.id));
    assert!(newer.job.id > old.id);
    assert_eq!(newer.job.idempotency_key.as_deref(), Some("deploy"));
    assert_eq!(newer.job.command(), Some("echo v2"));

    let o = job(&*s, old.id).await;
    assert_eq!(o.state, JobState::Cancelled);
    assert_eq!(o.idempotency_key, None);
    assert_eq!(o.finished_at, Some(now));
    assert_eq!(event_kinds(&*s, old.id).await, [EventKind::Pushed, EventKind::Superseded]);
    assert_eq!(event_kinds(&*s, newer.job.id).await, [EventKind::Pushed]);

    let dup = s.push(shell("echo v2").key("deploy"), h.at(secs(11))).await.expect("push v2 again");
    assert_eq!((dup.created, dup.job.id, dup.superseded), (false, newer.job.id, None));
    let stats = s.stats(now).await.expect("stats");
    assert_eq!((stats.pending, stats.cancelled), (1, 1));
    assert_eq!(h.claim(&*s, "w1", now).await.map(|c| c.job.id), Some(newer.job.id));
}

/// A newer payload under the key of a running job creates the new job but
/// supersedes nothing: the running job keeps running (no event) and only
/// gives up the key.
pub async fn same_key_new_payload_leaves_a_running_job_running(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let old = h.push_keyed(&*s, "echo v1", "sync", t).await;
    let c = h.claim_expect(&*s, "w1", t, old.id).await;
    let newer = s.push(shell("echo v2").key("sync"), h.at(secs(1))).await.expect("push v2");
    assert!(newer.created);
    assert_eq!(newer.superseded, None);
    assert_ne!(newer.job.id, old.id);

    let o = job(&*s, old.id).await;
    assert_eq!(o.state, JobState::Running);
    assert_eq!(o.idempotency_key, None);
    assert_eq!(o.lease, c.job.lease);
    assert_eq!(event_kinds(&*s, old.id).await, [EventKind::Pushed, EventKind::Claimed]);
    let d = s.complete(old.id, &c.fence, Completion::default(), h.at(secs(2))).await;
    assert_eq!(d.expect("the old owner still completes").state, JobState::Done);
    assert_eq!(job(&*s, newer.job.id).await.state, JobState::Pending);
}

/// A key stays with its job after the job finishes: pushing the same key
/// and payload again returns the done job (`created == false`) and queues
/// nothing new.
pub async fn duplicate_of_a_finished_job_is_not_queued_again(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push_keyed(&*s, "echo once", "once", t).await;
    let c = h.claim_expect(&*s, "w1", t, j.id).await;
    s.complete(j.id, &c.fence, Completion::default(), t).await.expect("complete");

    let again = s.push(shell("echo once").key("once"), h.at(secs(60))).await.expect("push");
    assert!(!again.created);
    assert_eq!(again.job.id, j.id);
    assert_eq!(again.job.state, JobState::Done);
    assert!(h.claim(&*s, "w1", h.at(secs(60))).await.is_none());
    assert_eq!(s.list(&ListFilter::default()).await.expect("list").len(), 1);
}

/// A new payload under the key of a finished job creates the new job and
/// supersedes nothing (`superseded` is `None`): the done job stays done,
/// with no new event, and only gives up the key.
pub async fn same_key_new_payload_over_a_finished_job_supersedes_nothing(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let old = h.push_keyed(&*s, "echo v1", "nightly", t).await;
    let c = h.claim_expect(&*s, "w1", t, old.id).await;
    s.complete(old.id, &c.fence, Completion::default(), t).await.expect("complete");
    let newer = s.push(shell("echo v2").key("nightly"), h.at(secs(1))).await.expect("push v2");
    assert!(newer.created);
    assert_eq!(newer.superseded, None);
    let o = job(&*s, old.id).await;
    assert_eq!((o.state, o.idempotency_key), (JobState::Done, None));
    assert_eq!(
        event_kinds(&*s, old.id).await,
        [EventKind::Pushed, EventKind::Claimed, EventKind::Completed]
    );
}
