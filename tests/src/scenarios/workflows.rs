//! A workflow's edges where other features meet it: a supersede by key
//! never strands the jobs waiting on the holder (the push is refused while
//! any wait on it, and a superseded job is not retried beside its
//! replacement), and an import recomputes every dependency count from the
//! parents themselves, refusing a live job whose parent is nowhere. The
//! rules are `slothqueue_core::machine`'s and `ops::restore_many`'s; these
//! scenarios check that every store gets them.

use slothqueue_core::{
    Completion, EventKind, Failure, Job, JobId, JobState, ListFilter, ListOrder, Store, StoreError,
    Timestamp,
};

use crate::{Harness, job, refused_in_batch, secs, shell, snapshot};

/// Every job with its trail, oldest first: what an export holds.
async fn export(s: &dyn Store) -> Vec<(Job, Vec<slothqueue_core::Event>)> {
    let oldest = ListFilter { order: ListOrder::Oldest, ..ListFilter::default() };
    let mut out = Vec::new();
    for j in s.list(&oldest).await.expect("list") {
        let events = s.events(j.id).await.expect("events");
        out.push((j, events));
    }
    out
}

/// Every job claimable at `now`, claimed one after the other.
async fn claim_all(h: &Harness, s: &dyn Store, now: Timestamp) -> Vec<JobId> {
    let mut ids = Vec::new();
    while let Some(c) = h.claim(s, "sweeper", now).await {
        ids.push(c.job.id);
    }
    ids
}

/// A push (alone or in a batch) that would supersede a pending key holder
/// that jobs wait on is refused with `InvalidInput` naming the waiting
/// job, and writes nothing; once nothing waits on the holder (the child
/// cancelled), the supersede goes through, and the superseded job says so
/// (`last_error` "superseded by #N"). A retry of the superseded job is
/// refused naming its replacement (it would run beside it) and changes
/// nothing.
pub async fn a_supersede_never_strands_the_jobs_waiting_on_the_holder(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let old = h.push_keyed(&*s, "echo v1", "deploy", t).await;
    let child = h.push(&*s, shell("echo notify").after("deploy"), t).await;
    let now = h.at(secs(1));
    let before = (snapshot(&*s, old.id).await, snapshot(&*s, child.id).await);

    let out = s.push_many(vec![shell("echo other"), shell("echo v2").key("deploy")], now).await;
    let (index, why) = refused_in_batch(&out, "a supersede with a waiting child");
    assert_eq!(index, 1);
    assert!(why.contains(&format!("#{} waits on it", child.id)), "{why}");
    assert!(why.contains(&format!("edit {}", old.id)), "says what to do instead: {why}");
    let err = s.push(shell("echo v2").key("deploy"), now).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput(_)), "{err:?}");
    assert_eq!((snapshot(&*s, old.id).await, snapshot(&*s, child.id).await), before);
    assert_eq!(s.list(&ListFilter::default()).await.expect("list").len(), 2, "nothing written");

    s.cancel(child.id, now).await.expect("cancel the child");
    let pushed = s.push(shell("echo v2").key("deploy"), now).await.expect("supersede");
    assert_eq!(pushed.superseded, Some(old.id));
    let replaced = job(&*s, old.id).await;
    assert_eq!(replaced.state, JobState::Cancelled);
    let said = format!("superseded by #{}", pushed.job.id);
    assert_eq!(replaced.last_error.as_deref(), Some(said.as_str()));

    let before = snapshot(&*s, old.id).await;
    let err = s.retry(old.id, now).await.unwrap_err();
    let StoreError::InvalidInput(why) = &err else { panic!("retry: {err:?}") };
    assert!(why.contains(&said), "{why}");
    assert_eq!(snapshot(&*s, old.id).await, before, "the refused retry wrote nothing");
    assert_eq!(claim_all(h, &*s, now).await, [pushed.job.id], "only the replacement runs");
}

/// An import never trusts a dependency count: a child whose line says
/// `pending_parents: 0` while its parent (in the file, in any order) is
/// pending waits on it, and one saying `1` whose parent is done is due; a
/// child whose parent is in the queue, not the file, counts it as the
/// queue has it. Completing the parent makes the child due.
pub async fn import_recomputes_dependency_counts(h: &Harness) {
    let src = h.store();
    let t = h.start();
    let parent = h.push(&*src, shell("echo parent").priority(1), t).await;
    let child = h.push(&*src, shell("echo child").after(parent.id), t).await;
    let done = h.push(&*src, shell("echo done").priority(2), t).await;
    let c = h.claim_expect(&*src, "w1", t, done.id).await;
    src.complete(done.id, &c.fence, Completion::default(), t).await.expect("complete");
    let ready = h.push(&*src, shell("echo ready").after(done.id), t).await;
    let mut file = export(&*src).await;
    for (j, _) in &mut file {
        if j.id == child.id {
            j.pending_parents = 0;
        } else if j.id == ready.id {
            j.pending_parents = 1;
        }
    }
    file.reverse();

    let dst = h.open_other("imported");
    dst.restore_many(file.clone()).await.expect("import");
    assert_eq!(job(&*dst, child.id).await.pending_parents, 1, "recomputed, not the file's 0");
    assert_eq!(job(&*dst, ready.id).await.pending_parents, 0, "recomputed, not the file's 1");
    assert_eq!(claim_all(h, &*dst, t).await, [parent.id, ready.id], "the child waits");

    let split = h.open_other("split");
    let (parents, children): (Vec<_>, Vec<_>) =
        file.into_iter().partition(|(j, _)| j.id == parent.id || j.id == done.id);
    split.restore_many(parents).await.expect("the parents first");
    split.restore_many(children).await.expect("then the children");
    assert_eq!(job(&*split, child.id).await.pending_parents, 1);
    assert_eq!(job(&*split, ready.id).await.pending_parents, 0);
    let c = h.claim_expect(&*split, "w1", t, parent.id).await;
    split.complete(parent.id, &c.fence, Completion::default(), t).await.expect("complete");
    assert_eq!(job(&*split, child.id).await.pending_parents, 0);
}

/// An import refuses a pending job naming a parent in neither the file
/// nor the queue (what filtering an export by queue leaves): it would
/// wait forever. The refusal names the line and the parent, and nothing
/// is written. A finished job whose parent is gone is imported (its
/// parents no longer matter).
pub async fn import_refuses_a_parent_in_neither_the_file_nor_the_queue(h: &Harness) {
    let src = h.store();
    let t = h.start();
    let parent = h.push(&*src, shell("echo parent").queue("build"), t).await;
    let child = h.push(&*src, shell("echo child").after(parent.id), t).await;
    let finished = h.push(&*src, shell("echo finished").after(parent.id), t).await;
    src.cancel(finished.id, t).await.expect("cancel");
    let file: Vec<_> = export(&*src).await.into_iter().filter(|(j, _)| j.id != parent.id).collect();
    assert_eq!(file.len(), 2);

    let dst = h.open_other("filtered");
    let out = dst.restore_many(file.clone()).await;
    let (index, why) = refused_in_batch(&out, "a child without its parent");
    assert_eq!(file[index].0.id, child.id, "names the child's line");
    assert!(why.contains(&format!("job #{}", parent.id)), "{why}");
    assert!(why.contains("neither the file nor the queue"), "{why}");
    assert!(dst.list(&ListFilter::default()).await.expect("list").is_empty());

    let only_finished: Vec<_> = file.into_iter().filter(|(j, _)| j.id == finished.id).collect();
    dst.restore_many(only_finished).await.expect("a finished job without its parent");
    assert_eq!(job(&*dst, finished.id).await.state, JobState::Cancelled);
}

/// An import of a pending job whose parent (in the file or the queue) has
/// failed cancels it, as a push after that parent would be, instead of
/// leaving it to wait forever: `cancelled_by` names the parent, its trail
/// ends `Cancelled` dated when the parent ended, and a retry of the parent
/// brings it back, waiting on it.
pub async fn import_cancels_a_pending_job_whose_parent_ended(h: &Harness) {
    let src = h.store();
    let t = h.start();
    let parent = h.push(&*src, shell("echo parent"), t).await;
    let child = h.push(&*src, shell("echo child").after(parent.id), t).await;
    let failed_at = h.at(secs(3));
    let c = h.claim_expect(&*src, "w1", failed_at, parent.id).await;
    let failure = Failure { error: "boom".into(), exit_code: Some(1), permanent: true };
    src.fail(parent.id, &c.fence, failure, failed_at).await.expect("fail for good");
    // The child as a hand-made or filtered file has it: still pending.
    let mut file = export(&*src).await;
    for (j, events) in &mut file {
        if j.id == child.id {
            j.state = JobState::Pending;
            j.cancelled_by = None;
            j.last_error = None;
            j.finished_at = None;
            events.retain(|e| e.kind != EventKind::Cancelled);
        }
    }

    for (label, split) in [("together", false), ("parent already in the queue", true)] {
        let dst = h.open_other(label);
        if split {
            let (parents, children): (Vec<_>, Vec<_>) =
                file.clone().into_iter().partition(|(j, _)| j.id == parent.id);
            dst.restore_many(parents).await.expect("the parent first");
            dst.restore_many(children).await.expect("then the child");
        } else {
            dst.restore_many(file.clone()).await.expect("import");
        }
        let imported = job(&*dst, child.id).await;
        assert_eq!(imported.state, JobState::Cancelled, "{label}: not left waiting forever");
        assert_eq!(imported.cancelled_by, Some(parent.id), "{label}");
        assert_eq!(imported.finished_at, Some(failed_at), "{label}: when the parent ended");
        let trail = dst.events(child.id).await.expect("events");
        assert_eq!(trail.last().map(|e| e.kind), Some(EventKind::Cancelled), "{label}");
        assert_eq!(claim_all(h, &*dst, failed_at).await, Vec::<JobId>::new(), "{label}");

        let now = h.at(secs(5));
        dst.retry(parent.id, now).await.expect("retry the parent");
        let back = job(&*dst, child.id).await;
        assert_eq!(back.state, JobState::Pending, "{label}: the parent's retry brings it back");
        assert_eq!(back.pending_parents, 1, "{label}: waiting on the parent");
        assert_eq!(claim_all(h, &*dst, now).await, [parent.id], "{label}: the parent first");
    }
}
