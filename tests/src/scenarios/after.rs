//! Jobs that run after other jobs (`NewJob::after`): a job waits until
//! every parent is `done`, unseen by claims and by the due counts; a parent
//! that fails or is cancelled cancels its pending dependents, transitively,
//! in the same transaction (`cancelled_by` names the root); a retry of that
//! root brings them back. Parents are named by id or by idempotency key and
//! must exist when the job is pushed (in a batch: earlier in it), so no
//! cycle can form. The rule itself is `slothqueue_core::machine`'s; these
//! scenarios check that a store applies it on every path that writes.

use slothqueue_core::{
    Claimed, Completion, Event, EventKind, Failure, Job, JobId, JobState, ListFilter, ListOrder,
    Liveness, NewJob, PurgeFilter, Settlement, Stats, Store, StoreError, Timestamp,
};

use crate::{Harness, event_kinds, job, refused_in_batch, secs, shell, snapshot};

/// Claims and insists on job `id`, then completes it.
async fn run_ok(h: &Harness, s: &dyn Store, id: JobId, now: Timestamp) -> Job {
    let c = h.claim_expect(s, "w1", now, id).await;
    s.complete(id, &c.fence, Completion::default(), now).await.expect("complete")
}

/// Claims and insists on job `id`, then fails the attempt.
async fn run_fail(h: &Harness, s: &dyn Store, id: JobId, now: Timestamp) -> Job {
    let c = h.claim_expect(s, "w1", now, id).await;
    fail_held(s, &c, now).await
}

async fn fail_held(s: &dyn Store, c: &Claimed, now: Timestamp) -> Job {
    let failure = Failure { error: "boom".into(), exit_code: Some(1), permanent: false };
    s.fail(c.job.id, &c.fence, failure, now).await.expect("fail")
}

/// Every job claimable at `now`, claimed one after the other (and left
/// running): what a claimer could be handed.
async fn claim_all(h: &Harness, s: &dyn Store, now: Timestamp) -> Vec<JobId> {
    let mut ids = Vec::new();
    while let Some(c) = h.claim(s, "sweeper", now).await {
        ids.push(c.job.id);
    }
    ids
}

async fn last_event(s: &dyn Store, id: JobId) -> Event {
    let events = s.events(id).await.expect("events");
    events.last().cloned().expect("a trail")
}

/// Checks that `id` was cancelled at `now` because of `root`, saying `why`,
/// with a `cancelled` event saying the same.
async fn assert_cancelled_by(s: &dyn Store, id: JobId, root: JobId, why: &str, now: Timestamp) {
    let j = job(s, id).await;
    assert_eq!(j.state, JobState::Cancelled, "#{id}");
    assert_eq!(j.cancelled_by, Some(root), "#{id} names the root of the failure");
    assert_eq!(j.last_error.as_deref(), Some(why), "#{id}");
    assert_eq!(j.finished_at, Some(now), "#{id}");
    let e = last_event(s, id).await;
    assert_eq!((e.kind, e.message.as_deref(), e.at), (EventKind::Cancelled, Some(why), now));
}

/// Checks that `id` is pending, waiting on `n` parents, unfailed.
async fn assert_waiting(s: &dyn Store, id: JobId, n: u32) {
    let j = job(s, id).await;
    assert_eq!(
        (j.state, j.pending_parents, j.cancelled_by),
        (JobState::Pending, n, None),
        "#{id} waits on {n} parents"
    );
    assert!(j.is_waiting_on_parents() == (n > 0));
}

/// A job pushed after another (by id, or by the key its parent holds)
/// records the parent's id in `after` and waits: pending, not claimable,
/// counted in `pending` and `waiting_on_parents`, left out of `due_now`,
/// of `Stats::next_due` and of `Store::next_due` (its own `not_before`
/// wakes nobody; a runner would spin on it). `dependents` lists it under
/// its parent, lowest id first. Once the parent is `done` it is due at its
/// own time, like any job.
pub async fn a_child_waits_until_its_parent_is_done(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let parent = h.push(&*s, shell("echo build").key("build"), t).await;
    let by_id = h.push(&*s, shell("echo test").after(parent.id).not_before(h.at(secs(5))), t).await;
    let by_key = h.push(&*s, shell("echo ship").after("build").not_before(h.at(secs(20))), t).await;
    for child in [&by_id, &by_key] {
        assert_eq!(child.after, [parent.id]);
        assert_eq!((child.state, child.pending_parents), (JobState::Pending, 1));
        assert_eq!(job(&*s, child.id).await, *child);
        assert_eq!(event_kinds(&*s, child.id).await, [EventKind::Pushed]);
    }
    assert_eq!(s.dependents(parent.id).await.expect("dependents"), [by_id.id, by_key.id]);
    assert!(s.dependents(by_id.id).await.expect("dependents").is_empty());
    assert!(s.dependents(parent.id + 100).await.expect("dependents of no job").is_empty());

    let now = h.at(secs(30));
    let waiting =
        Stats { pending: 3, waiting_on_parents: 2, due_now: 1, next_due: None, ..Stats::default() };
    assert_eq!(s.stats(now).await.expect("stats"), waiting);
    assert_eq!(s.next_due().await.expect("next_due"), Some(t), "only the parent wakes a runner");

    let held = h.claim_expect(&*s, "w1", t, parent.id).await;
    assert_eq!(h.claim(&*s, "w2", now).await, None, "the children wait on a running parent");
    let stats = s.stats(now).await.expect("stats");
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (2, 2, 0));
    assert_eq!(stats.next_due, None);
    let lease_end = held.job.lease.as_ref().expect("a lease").until;
    assert_eq!(s.next_due().await.expect("next_due"), Some(lease_end), "not a child's time");

    let done_at = h.at(secs(10));
    s.complete(parent.id, &held.fence, Completion::default(), done_at).await.expect("complete");
    for child in [&by_id, &by_key] {
        let j = job(&*s, child.id).await;
        assert_eq!((j.state, j.pending_parents), (JobState::Pending, 0), "#{} is free", j.id);
        assert_eq!(j.not_before, child.not_before, "and keeps its own time");
        assert_eq!(event_kinds(&*s, child.id).await, [EventKind::Pushed]);
    }
    let stats = s.stats(done_at).await.expect("stats");
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (2, 0, 1));
    assert_eq!(stats.next_due, Some(h.at(secs(20))));
    assert_eq!(s.next_due().await.expect("next_due"), Some(h.at(secs(5))));
    assert_eq!(claim_all(h, &*s, done_at).await, [by_id.id]);
    assert_eq!(claim_all(h, &*s, h.at(secs(20))).await, [by_key.id]);
}

/// A parent that does not exist (no job with that id, no job holding that
/// key) is refused with `InvalidInput` and nothing is written, also when
/// the other parents named exist; `push_many` refuses the whole batch.
pub async fn an_unknown_parent_is_refused_and_writes_nothing(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let real = h.push(&*s, shell("echo real").key("real"), t).await;
    let before = snapshot(&*s, real.id).await;
    let stats = s.stats(t).await.expect("stats");
    let bad = [
        ("an unknown id", shell("echo x").after(real.id + 41)),
        ("an unknown key", shell("echo x").after("nobody-has-it")),
        ("a real and an unknown parent", shell("echo x").after("real").after(real.id + 41)),
    ];
    for (what, new) in bad {
        let out = s.push(new.clone(), t).await;
        assert!(matches!(out, Err(StoreError::InvalidInput(_))), "{what}: {out:?}");
        let out = s.push_many(vec![shell("echo fine"), new], t).await;
        assert_eq!(refused_in_batch(&out, what).0, 1, "{what}");
        assert_eq!(s.stats(t).await.expect("stats"), stats, "{what}: nothing was written");
        assert_eq!(snapshot(&*s, real.id).await, before, "{what}: the parent is untouched");
    }
    let all = s.list(&ListFilter::default()).await.expect("list");
    assert_eq!(all.iter().map(|j| j.id).collect::<Vec<_>>(), [real.id]);
    assert!(s.dependents(real.id).await.expect("dependents").is_empty());
}

/// A parent that ends `failed` cancels every pending job waiting on it,
/// transitively, in the same write: each is `cancelled` with
/// `cancelled_by` the root and `last_error` "dependency #N failed" (the
/// root's id, also further down the chain), and its trail ends with a
/// `cancelled` event saying so. Jobs not waiting on it are untouched.
pub async fn a_failed_parent_cancels_its_dependents_transitively(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let root = h.push(&*s, shell("echo root").max_attempts(1).priority(5), t).await;
    let child = h.push(&*s, shell("echo child").after(root.id), t).await;
    let grandchild = h.push(&*s, shell("echo grandchild").after(child.id), t).await;
    let other = h.push(&*s, shell("echo other"), t).await;
    let other_before = snapshot(&*s, other.id).await;

    let now = h.at(secs(3));
    let failed = run_fail(h, &*s, root.id, now).await;
    assert_eq!(failed.state, JobState::Failed);
    assert_eq!(failed.cancelled_by, None, "the root is not cancelled by anyone");
    let why = format!("dependency #{} failed", root.id);
    for id in [child.id, grandchild.id] {
        assert_cancelled_by(&*s, id, root.id, &why, now).await;
        assert_eq!(event_kinds(&*s, id).await, [EventKind::Pushed, EventKind::Cancelled]);
    }
    assert_eq!(snapshot(&*s, other.id).await, other_before);
    let stats = s.stats(now).await.expect("stats");
    assert_eq!((stats.pending, stats.waiting_on_parents), (1, 0));
    assert_eq!((stats.failed, stats.cancelled), (1, 2));
    assert_eq!(claim_all(h, &*s, now).await, [other.id]);
}

/// Cancelling a parent ends its dependents the same way, "dependency #N
/// cancelled": at once for a pending parent; for a running one, when its
/// owner ends the attempt after seeing the request (until then they wait).
pub async fn a_cancelled_parent_cancels_its_dependents(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let pending = h.push(&*s, shell("echo p").not_before(h.at(secs(100))), t).await;
    let a = h.push(&*s, shell("echo a").after(pending.id), t).await;
    let b = h.push(&*s, shell("echo b").after(a.id), t).await;
    let now = h.at(secs(1));
    s.cancel(pending.id, now).await.expect("cancel a pending parent");
    let why = format!("dependency #{} cancelled", pending.id);
    assert_cancelled_by(&*s, a.id, pending.id, &why, now).await;
    assert_cancelled_by(&*s, b.id, pending.id, &why, now).await;

    let running = h.push(&*s, shell("echo r"), now).await;
    let c = h.push(&*s, shell("echo c").after(running.id), now).await;
    let held = h.claim_expect(&*s, "w1", now, running.id).await;
    let asked = h.at(secs(2));
    s.cancel(running.id, asked).await.expect("request a cancel");
    assert_waiting(&*s, c.id, 1).await;
    let ended = h.at(secs(3));
    let failure = Failure { error: "killed".into(), exit_code: None, permanent: false };
    let r = s.fail(running.id, &held.fence, failure, ended).await.expect("the owner ends it");
    assert_eq!(r.state, JobState::Cancelled);
    let why = format!("dependency #{} cancelled", running.id);
    assert_cancelled_by(&*s, c.id, running.id, &why, ended).await;
}

/// A retry of the failed root brings back the jobs its failure cancelled,
/// transitively: pending, waiting again on their parents (not due, attempts
/// 0, no `cancelled_by`, no `last_error`), with a `retried` event; as the
/// chain then completes, each becomes due in turn. A retry of a dependent
/// while one of its parents is failed or cancelled is refused with
/// `InvalidInput` and changes nothing. A dependent the user cancelled
/// himself stays cancelled.
pub async fn retry_of_the_root_brings_its_dependents_back(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let root = h.push(&*s, shell("echo root").max_attempts(1), t).await;
    let child = h.push(&*s, shell("echo child").after(root.id), t).await;
    let grandchild = h.push(&*s, shell("echo grandchild").after(child.id), t).await;
    let mine = h.push(&*s, shell("echo mine").after(root.id), t).await;
    s.cancel(mine.id, t).await.expect("the user cancels one dependent");
    let mine_before = snapshot(&*s, mine.id).await;
    let now = h.at(secs(1));
    run_fail(h, &*s, root.id, now).await;

    for id in [child.id, grandchild.id] {
        let before = snapshot(&*s, id).await;
        let out = s.retry(id, now).await;
        assert!(matches!(out, Err(StoreError::InvalidInput(_))), "retry #{id}: {out:?}");
        assert_eq!(snapshot(&*s, id).await, before, "a refused retry changes nothing");
    }

    let later = h.at(secs(5));
    let back = s.retry(root.id, later).await.expect("retry the root");
    assert_eq!((back.state, back.attempts), (JobState::Pending, 0));
    for id in [child.id, grandchild.id] {
        assert_waiting(&*s, id, 1).await;
        let j = job(&*s, id).await;
        assert_eq!((j.attempts, j.last_error.as_deref(), j.finished_at), (0, None, None), "#{id}");
        assert_eq!(
            event_kinds(&*s, id).await,
            [EventKind::Pushed, EventKind::Cancelled, EventKind::Retried]
        );
    }
    assert_eq!(snapshot(&*s, mine.id).await, mine_before, "a user's cancel is not undone");
    let stats = s.stats(later).await.expect("stats");
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (3, 2, 1));

    run_ok(h, &*s, root.id, later).await;
    assert_waiting(&*s, child.id, 0).await;
    assert_waiting(&*s, grandchild.id, 1).await;
    run_ok(h, &*s, child.id, later).await;
    run_ok(h, &*s, grandchild.id, later).await;
    assert_eq!(s.stats(later).await.expect("stats").done, 3);
}

/// A parent whose attempt fails with attempts left goes back to pending
/// (with its backoff), and its dependents keep waiting, uncancelled and
/// with no new event; when the parent then succeeds they are due. A
/// parent released by its owner (a shutdown) keeps them waiting too.
pub async fn a_parent_retrying_with_backoff_keeps_its_children_waiting(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let parent = h.push(&*s, shell("echo flaky").max_attempts(3), t).await;
    let child = h.push(&*s, shell("echo child").after(parent.id), t).await;
    let retrying = run_fail(h, &*s, parent.id, t).await;
    assert_eq!(retrying.state, JobState::Pending);
    assert!(retrying.not_before > t);
    assert_waiting(&*s, child.id, 1).await;
    assert_eq!(event_kinds(&*s, child.id).await, [EventKind::Pushed]);
    assert_eq!(claim_all(h, &*s, t).await, Vec::<JobId>::new(), "nothing due meanwhile");
    assert_eq!(s.next_due().await.expect("next_due"), Some(retrying.not_before));

    let again = retrying.not_before;
    let held = h.claim_expect(&*s, "w1", again, parent.id).await;
    s.release(parent.id, &held.fence, again).await.expect("release");
    assert_waiting(&*s, child.id, 1).await;
    run_ok(h, &*s, parent.id, again).await;
    assert_waiting(&*s, child.id, 0).await;
    assert_eq!(claim_all(h, &*s, again).await, [child.id]);
}

/// A job pushed after a parent that already failed (or was cancelled, or
/// was itself cancelled for a dependency) is created `cancelled` at once,
/// trail `pushed`, `cancelled`, naming the root of the failure; a retry of
/// that root brings it back like the others. A job pushed after a parent
/// already `done` is due at once.
pub async fn a_child_pushed_after_a_failed_parent_starts_cancelled(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let root = h.push(&*s, shell("echo root").max_attempts(1), t).await;
    run_fail(h, &*s, root.id, t).await;
    let now = h.at(secs(2));
    let child = h.push(&*s, shell("echo child").after(root.id), now).await;
    let why = format!("dependency #{} failed", root.id);
    assert_eq!(child.state, JobState::Cancelled);
    assert_eq!(job(&*s, child.id).await, child);
    assert_cancelled_by(&*s, child.id, root.id, &why, now).await;
    assert_eq!(event_kinds(&*s, child.id).await, [EventKind::Pushed, EventKind::Cancelled]);
    let grandchild = h.push(&*s, shell("echo grandchild").after(child.id), now).await;
    assert_cancelled_by(&*s, grandchild.id, root.id, &why, now).await;

    let cancelled = h.push(&*s, shell("echo never"), now).await;
    s.cancel(cancelled.id, now).await.expect("cancel");
    let late = h.push(&*s, shell("echo late").after(cancelled.id), now).await;
    let why_cancelled = format!("dependency #{} cancelled", cancelled.id);
    assert_cancelled_by(&*s, late.id, cancelled.id, &why_cancelled, now).await;

    let later = h.at(secs(4));
    s.retry(root.id, later).await.expect("retry the root");
    assert_waiting(&*s, child.id, 1).await;
    assert_waiting(&*s, grandchild.id, 1).await;

    let done = h.push(&*s, shell("echo done").priority(1), later).await;
    let done = run_ok(h, &*s, done.id, later).await;
    assert_eq!(done.state, JobState::Done);
    let free = h.push(&*s, shell("echo free").after(done.id), later).await;
    assert_eq!(
        (free.state, free.pending_parents, free.after.clone()),
        (JobState::Pending, 0, vec![done.id])
    );
    assert_eq!(claim_all(h, &*s, later).await, [root.id, free.id]);
}

/// In `push_many` a job may name an earlier job of the same batch by its
/// key, and waits on it like on any job. A job naming one that comes only
/// later in the batch (or not at all) is refused: `InBatch` with its place
/// (from 0) around `InvalidInput`, and nothing of the batch is written.
pub async fn push_many_may_name_earlier_jobs_of_the_batch(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let resident = h.push(&*s, shell("echo resident").key("resident"), t).await;
    let batch = vec![
        shell("echo fetch").key("fetch"),
        shell("echo build").key("build").after("fetch").after("resident"),
        shell("echo test").after("build"),
    ];
    let pushed = s.push_many(batch, t).await.expect("a batch naming its earlier jobs");
    let [fetch, build, test] = [0, 1, 2].map(|i| pushed[i].job.clone());
    assert_eq!(fetch.after, Vec::<JobId>::new());
    assert_eq!((build.after.clone(), build.pending_parents), (vec![fetch.id, resident.id], 2));
    assert_eq!((test.after.clone(), test.pending_parents), (vec![build.id], 1));
    for j in [&build, &test] {
        assert_eq!(job(&*s, j.id).await, *j);
    }
    assert_eq!(s.dependents(fetch.id).await.expect("dependents"), [build.id]);
    assert_eq!(s.dependents(resident.id).await.expect("dependents"), [build.id]);

    let before = s.stats(t).await.expect("stats");
    let listed = s.list(&ListFilter::default()).await.expect("list").len();
    let forward = vec![shell("echo a").after("b-later"), shell("echo b").key("b-later")];
    let out = s.push_many(forward, t).await;
    assert_eq!(refused_in_batch(&out, "a forward reference").0, 0);
    let unknown =
        vec![shell("echo a").key("a"), shell("echo b").after("a"), shell("echo c").after("zzz")];
    let out = s.push_many(unknown, t).await;
    assert_eq!(refused_in_batch(&out, "an unknown key").0, 2);
    assert_eq!(s.stats(t).await.expect("stats"), before, "nothing of either batch was written");
    assert_eq!(s.list(&ListFilter::default()).await.expect("list").len(), listed);
    let again = s.push(shell("echo b").after("a"), t).await;
    assert!(
        matches!(again, Err(StoreError::InvalidInput(_))),
        "the refused batch left no key `a`: {again:?}"
    );
}

/// A lease that expires with no attempts left is ended `failed` by the
/// next claim (which then hands out something else), and that claim
/// cancels its dependents as a failure does; the dependents are not handed
/// out.
pub async fn an_expired_lease_with_no_attempts_left_cancels_dependents(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let parent = h.push(&*s, shell("echo parent").max_attempts(1).priority(3), t).await;
    let child = h.push(&*s, shell("echo child").after(parent.id).priority(9), t).await;
    let other = h.push(&*s, shell("echo other").not_before(h.at(secs(100))), t).await;
    h.claim_expect(&*s, "w1", t, parent.id).await;

    let now = h.at(secs(200));
    assert_eq!(claim_all(h, &*s, now).await, [other.id], "neither the parent nor its child");
    let failed = job(&*s, parent.id).await;
    assert_eq!(failed.state, JobState::Failed);
    let why = format!("dependency #{} failed", parent.id);
    assert_cancelled_by(&*s, child.id, parent.id, &why, now).await;
}

/// `reclaim_dead` of an attempt with no attempts left ends the job `failed`
/// and cancels its dependents in the same write; one with attempts left
/// goes back to pending and its dependents keep waiting.
pub async fn reclaim_dead_out_of_attempts_cancels_dependents(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let last = h.push(&*s, shell("echo last").max_attempts(1).priority(2), t).await;
    let after_last = h.push(&*s, shell("echo a").after(last.id), t).await;
    let more = h.push(&*s, shell("echo more").max_attempts(2).priority(1), t).await;
    let after_more = h.push(&*s, shell("echo b").after(more.id), t).await;
    h.claim_expect(&*s, "dead", t, last.id).await;
    h.claim_expect(&*s, "dead", t, more.id).await;
    h.set_liveness("dead", Liveness::Gone);
    let now = h.at(secs(5));
    let swept = h.reclaim_gone(&*s, now).await;
    assert_eq!(swept.len(), 2);
    assert_eq!(job(&*s, last.id).await.state, JobState::Failed);
    let why = format!("dependency #{} failed", last.id);
    assert_cancelled_by(&*s, after_last.id, last.id, &why, now).await;
    assert_eq!(job(&*s, more.id).await.state, JobState::Pending);
    assert_waiting(&*s, after_more.id, 1).await;
}

/// `settle_and_claim` applies the rule in its one transaction: completing
/// the last parent of a job makes it due, and the same call hands it out;
/// a failure with no attempts left cancels the dependents, and the call
/// hands out none of them.
pub async fn settle_and_claim_hands_out_the_child_it_made_ready(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let parent = h.push(&*s, shell("echo parent").priority(5), t).await;
    let child = h.push(&*s, shell("echo child").after(parent.id).priority(-1), t).await;
    let held = h.claim_expect(&*s, "w1", t, parent.id).await;
    let now = h.at(secs(1));
    let next = h.request("w1");
    let done = Settlement::Complete(Completion::default());
    let got = s.settle_and_claim(parent.id, &held.fence, done, &next, now).await.expect("settle");
    assert_eq!(got.settled.state, JobState::Done);
    let claimed = got.next.expect("the child it made due");
    assert_eq!(claimed.job.id, child.id);
    assert_eq!(claimed.job, job(&*s, child.id).await);

    let doomed = h.push(&*s, shell("echo doomed").max_attempts(1), now).await;
    let orphan = h.push(&*s, shell("echo orphan").after(doomed.id).after(child.id), now).await;
    s.complete(child.id, &claimed.fence, Completion::default(), now).await.expect("complete");
    assert_waiting(&*s, orphan.id, 1).await;
    let held = h.claim_expect(&*s, "w1", now, doomed.id).await;
    let failure =
        Settlement::Fail(Failure { error: "boom".into(), exit_code: Some(1), permanent: false });
    let got =
        s.settle_and_claim(doomed.id, &held.fence, failure, &next, now).await.expect("settle");
    assert_eq!(got.settled.state, JobState::Failed);
    assert_eq!(got.next, None, "its dependent is cancelled, not handed out");
    let why = format!("dependency #{} failed", doomed.id);
    assert_cancelled_by(&*s, orphan.id, doomed.id, &why, now).await;
}

/// `purge` with pending jobs keeps a pending parent that a job left behind
/// (pending, not purged with it) still waits on: it would otherwise wait
/// forever. A parent purged together with its waiting children, or whose
/// children ended, goes; terminal jobs go as always.
pub async fn purge_keeps_a_pending_parent_a_pending_child_waits_on(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let waited_on = h.push(&*s, shell("echo parent"), t).await;
    let lonely = h.push(&*s, shell("echo lonely"), t).await;
    let abandoned = h.push(&*s, shell("echo abandoned"), t).await;
    let later = h.at(secs(10));
    let child = h.push(&*s, shell("echo child").after(waited_on.id), later).await;
    let ended = h.push(&*s, shell("echo ended").after(abandoned.id), later).await;
    s.cancel(ended.id, later).await.expect("cancel the other child");

    let old = PurgeFilter { include_pending: true, older_than: Some(h.at(secs(5))) };
    let mut purged = s.purge(&old).await.expect("purge");
    purged.sort_unstable();
    assert_eq!(purged, [lonely.id, abandoned.id], "the parent someone waits on stays");
    assert_eq!(job(&*s, waited_on.id).await.state, JobState::Pending);
    assert_waiting(&*s, child.id, 1).await;
    assert_eq!(s.dependents(waited_on.id).await.expect("dependents"), [child.id]);

    run_ok(h, &*s, waited_on.id, later).await;
    assert_waiting(&*s, child.id, 0).await;
    let fresh = h.push(&*s, shell("echo p2"), later).await;
    let fresh_child = h.push(&*s, shell("echo c2").after(fresh.id), later).await;
    let everything = PurgeFilter { include_pending: true, older_than: None };
    let mut purged = s.purge(&everything).await.expect("purge");
    purged.sort_unstable();
    assert_eq!(purged, [waited_on.id, child.id, ended.id, fresh.id, fresh_child.id]);
}

/// In one `push_many`, jobs that read the queue (naming parents, carrying
/// a key) may stand between long runs of jobs that do not, and each sees
/// every job before it in the batch, as if the batch were pushed one job
/// at a time: a job naming a plain job of the batch by id waits on it; a
/// key repeated with the same payload is a duplicate of the batch's first
/// job with it (`created == false`, no id used), and with a new payload
/// supersedes that job; a job naming the key waits on its newest holder;
/// a key the queue held is superseded mid-batch. Every job, trail and edge is as returned. (The runs are long
/// so that a store writing the jobs that read nothing in bulk does so
/// between the reads. The batch names a plain job by the id it will get:
/// a batch's new jobs are numbered one after the other, as the clone
/// scenarios also count on.)
pub async fn push_many_interleaves_plain_jobs_and_jobs_that_read(h: &Harness) {
    const RUN: usize = 40;
    let s = h.store();
    let t = h.start();
    let old = h.push_keyed(&*s, "echo old", "deploy", t).await;
    let waiting = h.push(&*s, shell("echo waiting"), t).await;
    let plain = |run: &'static str| (0..RUN).map(move |i| shell(&format!("echo {run} {i}")));
    let named = waiting.id + 1 + 20;
    let mut batch: Vec<NewJob> = plain("a").collect();
    let child_at = batch.len();
    batch.push(shell("echo child").after(named));
    batch.extend(plain("b"));
    let k1_at = batch.len();
    batch.push(shell("echo k1").key("k"));
    batch.extend(plain("c"));
    let dup_at = batch.len();
    batch.push(shell("echo k1").key("k"));
    let k2_at = batch.len();
    batch.push(shell("echo k2").key("k"));
    let after_k_at = batch.len();
    batch.push(shell("echo after k").after("k"));
    batch.extend(plain("d"));
    let deploy_at = batch.len();
    batch.push(shell("echo new").key("deploy"));
    batch.extend(plain("e"));
    let now = h.at(secs(1));
    let pushed =
        s.push_many(batch.clone(), now).await.expect("a batch mixing plain jobs and reads");
    assert_eq!(pushed.len(), batch.len());

    let mut next = waiting.id + 1;
    for (i, p) in pushed.iter().enumerate() {
        if i == dup_at {
            assert!(!p.created, "#{i}: a duplicate of the batch's own job");
            continue;
        }
        assert!(p.created, "#{i}");
        assert_eq!(p.job.id, next, "#{i}: the batch's new jobs are numbered in turn");
        assert_eq!(p.job.command(), batch[i].payload["command"].as_str(), "#{i}");
        next += 1;
    }
    let id = |i: usize| pushed[i].job.id;
    assert_eq!(id(20), named);
    let child = &pushed[child_at].job;
    assert_eq!((child.after.clone(), child.pending_parents), (vec![named], 1));
    assert_eq!((pushed[dup_at].job.id, pushed[dup_at].superseded), (id(k1_at), None));
    assert_eq!(pushed[k2_at].superseded, Some(id(k1_at)));
    let after_k = &pushed[after_k_at].job;
    assert_eq!((after_k.after.clone(), after_k.pending_parents), (vec![id(k2_at)], 1));
    assert_eq!(pushed[deploy_at].superseded, Some(old.id));

    for (i, p) in pushed.iter().enumerate() {
        if i == dup_at || i == k1_at {
            continue;
        }
        assert_eq!(job(&*s, p.job.id).await, p.job, "#{i} as returned");
        assert_eq!(event_kinds(&*s, p.job.id).await, [EventKind::Pushed], "#{i}");
    }
    let k1 = job(&*s, id(k1_at)).await;
    assert_eq!((k1.state, k1.idempotency_key), (JobState::Cancelled, None));
    assert_eq!(event_kinds(&*s, k1.id).await, [EventKind::Pushed, EventKind::Superseded]);
    assert_eq!(job(&*s, old.id).await.state, JobState::Cancelled);
    assert_eq!(s.dependents(named).await.expect("dependents"), [child.id]);
    assert_eq!(s.dependents(id(k2_at)).await.expect("dependents"), [after_k.id]);
    assert!(s.dependents(id(k1_at)).await.expect("dependents").is_empty());
    let stats = s.stats(now).await.expect("stats");
    let created = pushed.len() - 1;
    assert_eq!((stats.pending, stats.cancelled), (created as u64, 2));
    assert_eq!(stats.waiting_on_parents, 2);
}

/// `restore_many` (an import, in any order) keeps the edges: `after`,
/// `pending_parents` and `cancelled_by` as exported, `dependents` as in the
/// source, a waiting job not claimable; completing the restored parent
/// makes its child due, and a retry of a restored failed root brings back
/// the jobs it cancelled. A job naming a parent that is not an earlier job
/// (an id not below its own) is refused (`InBatch` around `InvalidInput`).
pub async fn restore_many_keeps_the_edges(h: &Harness) {
    let src = h.store();
    let t = h.start();
    let parent = h.push(&*src, shell("echo parent").key("parent"), t).await;
    let child = h.push(&*src, shell("echo child").after("parent"), t).await;
    let grandchild = h.push(&*src, shell("echo grandchild").after(child.id), t).await;
    let root = h.push(&*src, shell("echo root").max_attempts(1).priority(1), t).await;
    let victim = h.push(&*src, shell("echo victim").after(root.id), t).await;
    run_fail(h, &*src, root.id, t).await;
    let oldest = ListFilter { order: ListOrder::Oldest, ..ListFilter::default() };
    let jobs = src.list(&oldest).await.expect("list");
    let mut batch = Vec::new();
    for j in jobs.iter().rev() {
        batch.push((j.clone(), src.events(j.id).await.expect("events")));
    }

    let dst = h.open_other("restored");
    let mut bad = batch.clone();
    let mut forward = bad[0].clone();
    forward.0.after = vec![forward.0.id + 1];
    forward.0.pending_parents = 1;
    bad[0] = forward;
    let out = dst.restore_many(bad).await;
    assert_eq!(refused_in_batch(&out, "a parent above the job").0, 0);
    assert!(dst.list(&ListFilter::default()).await.expect("list").is_empty());

    dst.restore_many(batch).await.expect("restore_many");
    for j in &jobs {
        assert_eq!(job(&*dst, j.id).await, *j);
        assert_eq!(
            dst.dependents(j.id).await.expect("dependents"),
            src.dependents(j.id).await.expect("dependents"),
            "dependents of #{}",
            j.id
        );
    }
    assert_eq!(dst.dependents(parent.id).await.expect("dependents"), [child.id]);
    assert_eq!(dst.stats(t).await.expect("stats"), src.stats(t).await.expect("stats"));
    assert_eq!(dst.stats(t).await.expect("stats").waiting_on_parents, 2);

    run_ok(h, &*dst, parent.id, t).await;
    assert_waiting(&*dst, child.id, 0).await;
    assert_waiting(&*dst, grandchild.id, 1).await;
    assert_eq!(claim_all(h, &*dst, t).await, [child.id]);
    dst.retry(root.id, t).await.expect("retry the restored root");
    assert_waiting(&*dst, victim.id, 1).await;
}

/// A pending parent is not superseded while jobs wait on it: the push
/// with its key and a new payload is refused (`InvalidInput` naming the
/// waiting job) and writes nothing. A running parent that loses its key
/// keeps running and its dependents keep waiting on it.
pub async fn a_superseded_parent_cancels_its_dependents(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let old = h.push_keyed(&*s, "echo v1", "deploy", t).await;
    let child = h.push(&*s, shell("echo notify").after("deploy"), t).await;
    let now = h.at(secs(1));
    let before = (snapshot(&*s, old.id).await, snapshot(&*s, child.id).await);
    let err = s.push(shell("echo v2").key("deploy"), now).await.unwrap_err();
    let StoreError::InvalidInput(why) = &err else { panic!("{err:?}") };
    assert!(why.contains(&format!("#{} waits on it", child.id)), "{why}");
    assert_eq!((snapshot(&*s, old.id).await, snapshot(&*s, child.id).await), before);
    s.cancel(child.id, now).await.expect("cancel the child");
    let pushed = s.push(shell("echo v2").key("deploy"), now).await.expect("supersede");
    assert_eq!(pushed.superseded, Some(old.id));

    let running = h.push_keyed(&*s, "echo r1", "job", now).await;
    let waiting = h.push(&*s, shell("echo w").after("job"), now).await;
    let held = h.claim_expect(&*s, "w1", now, pushed.job.id).await;
    s.complete(pushed.job.id, &held.fence, Completion::default(), now).await.expect("complete");
    let held = h.claim_expect(&*s, "w1", now, running.id).await;
    let moved = s.push(shell("echo r2").key("job"), now).await.expect("move the key");
    assert_eq!(moved.superseded, None);
    assert_waiting(&*s, waiting.id, 1).await;
    s.complete(running.id, &held.fence, Completion::default(), now).await.expect("complete");
    assert_waiting(&*s, waiting.id, 0).await;
}

/// A job may not wait on the job whose idempotency key it takes over (by
/// key or by id): that push would cancel the very parent it waits on. It
/// is refused with `InvalidInput` and nothing is written: the holder keeps
/// its key and stays pending. Parents are checked on the queue as it is
/// before the push, so an unknown parent is refused even when the push
/// would otherwise be a duplicate.
pub async fn a_job_cannot_wait_on_the_job_it_replaces(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let old = h.push_keyed(&*s, "echo v1", "deploy", t).await;
    let before = snapshot(&*s, old.id).await;
    for parent in [slothqueue_core::Parent::Key("deploy".into()), old.id.into()] {
        let err = s.push(shell("echo v2").key("deploy").after(parent), t).await.unwrap_err();
        assert!(matches!(err, StoreError::InvalidInput(_)), "{err:?}");
    }
    let dup = s.push(shell("echo v1").key("deploy").after(999), t).await.unwrap_err();
    assert!(matches!(dup, StoreError::InvalidInput(_)), "{dup:?}");
    assert_eq!(snapshot(&*s, old.id).await, before, "nothing was written");
    assert_eq!(s.list(&ListFilter::default()).await.expect("list").len(), 1);
    assert_eq!(job(&*s, old.id).await.state, JobState::Pending);
}

/// An edge lives as long as its child: once a `done` parent is purged,
/// `dependents` of its id still lists the children left behind, and the
/// children keep naming it in `after` (nothing waits on it any more).
pub async fn dependents_outlive_a_purged_parent(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let parent = h.push(&*s, shell("echo parent"), t).await;
    let child = h.push(&*s, shell("echo child").after(parent.id), t).await;
    run_ok(h, &*s, parent.id, t).await;
    let purged = s.purge(&PurgeFilter::default()).await.expect("purge");
    assert_eq!(purged, [parent.id]);
    assert_eq!(s.dependents(parent.id).await.expect("dependents"), [child.id]);
    let left = job(&*s, child.id).await;
    assert_eq!((left.after.as_slice(), left.pending_parents), (&[parent.id][..], 0));
    assert!(left.is_due(t));
}

/// A job with two parents (a diamond's bottom) counts both, names each
/// once however often it is named (by id and by key), and is due only
/// after both are `done`, whichever finishes first.
pub async fn a_diamond_is_due_only_after_both_parents(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let top = h.push(&*s, shell("echo top"), t).await;
    let left = h.push(&*s, shell("echo left").key("left").after(top.id), t).await;
    let right = h.push(&*s, shell("echo right").after(top.id).priority(1), t).await;
    let bottom =
        h.push(&*s, shell("echo bottom").after(left.id).after(right.id).after("left"), t).await;
    assert_eq!((bottom.after.clone(), bottom.pending_parents), (vec![left.id, right.id], 2));
    assert_eq!(s.dependents(top.id).await.expect("dependents"), [left.id, right.id]);
    assert_eq!(s.stats(t).await.expect("stats").waiting_on_parents, 3);

    run_ok(h, &*s, top.id, t).await;
    assert_waiting(&*s, bottom.id, 2).await;
    run_ok(h, &*s, right.id, t).await;
    assert_waiting(&*s, bottom.id, 1).await;
    assert_eq!(claim_all(h, &*s, t).await, [left.id], "not the bottom yet");
    let held = h.claim(&*s, "w1", t).await;
    assert_eq!(held, None);
    let l = job(&*s, left.id).await;
    let fence = l.lease.as_ref().expect("a lease").fence();
    s.complete(left.id, &fence, Completion::default(), t).await.expect("complete");
    assert_waiting(&*s, bottom.id, 0).await;
    assert_eq!(claim_all(h, &*s, t).await, [bottom.id]);
}
