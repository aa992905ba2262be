//! What survives closing the file, second handles, export/import, and the
//! runner records.

use slothqueue_core::{
    Completion, Event, EventKind, Failure, Job, JobState, ListFilter, ListOrder, RunnerActivity,
    RunnerRecord, Store, StoreError, Timestamp, WaitCause,
};

use crate::{Harness, event_kinds, job, refused_in_batch, secs, shell};

/// A queue with a job in every state (and a key, a delay, a runtime limit,
/// a heartbeat's process group, a requested cancel, a runner record).
async fn populate(h: &Harness, s: &dyn Store, t: Timestamp) {
    let p = shell("echo p").key("k").priority(4).max_runtime(Some(secs(2)));
    h.push(s, p.not_before(h.at(secs(100))), t).await;
    let r = h.push(s, shell("echo r").priority(9), t).await.id;
    let d = h.push(s, shell("echo d").priority(8), t).await.id;
    let f = h.push(s, shell("echo f").priority(7).max_attempts(1), t).await.id;
    let cr = h.push(s, shell("echo cr").priority(6), t).await.id;
    let c = h.push(s, shell("echo c"), t).await.id;
    let retrying = h.push(s, shell("echo retrying").priority(5), t).await.id;

    let rc = h.claim_expect(s, "w1", t, r).await;
    s.heartbeat(r, &rc.fence, Some(77), h.at(secs(1))).await.expect("heartbeat");
    let dc = h.claim_expect(s, "w1", t, d).await;
    let done = Completion { result: Some("ok".into()), exit_code: Some(0) };
    s.complete(d, &dc.fence, done, h.at(secs(2))).await.expect("complete");
    let fc = h.claim_expect(s, "w1", t, f).await;
    let failure = Failure { error: "boom".into(), exit_code: Some(2), permanent: false };
    s.fail(f, &fc.fence, failure.clone(), h.at(secs(3))).await.expect("fail");
    h.claim_expect(s, "w2", t, cr).await;
    s.cancel(cr, h.at(secs(4))).await.expect("cancel running");
    s.cancel(c, h.at(secs(5))).await.expect("cancel pending");
    let rt = h.claim_expect(s, "w3", t, retrying).await;
    s.fail(retrying, &rt.fence, failure, h.at(secs(6))).await.expect("fail and retry later");
    s.put_runner(&runner(h, "w1", t)).await.expect("put_runner");
}

fn runner(h: &Harness, id: &str, t: Timestamp) -> RunnerRecord {
    RunnerRecord {
        owner: h.owner(id),
        queues: vec!["default".into(), "other".into()],
        kinds: None,
        refused: Vec::new(),
        started_at: t,
        updated_at: t,
        activity: RunnerActivity::Gated {
            reading: "load 3.20 >= ceiling 2.00".into(),
            since: t,
            cause: WaitCause::Gate,
        },
        slots: 1,
        running: Vec::new(),
        gpus: None,
    }
}

/// Everything a store knows, for comparison.
async fn everything(s: &dyn Store, now: Timestamp) -> (Vec<Job>, Vec<Vec<Event>>, String) {
    let oldest = ListFilter { order: ListOrder::Oldest, ..ListFilter::default() };
    let jobs = s.list(&oldest).await.expect("list");
    let mut trails = Vec::new();
    for j in &jobs {
        trails.push(s.events(j.id).await.expect("events"));
    }
    let mut runners = s.runners().await.expect("runners");
    runners.sort_by(|a, b| a.owner.id.cmp(&b.owner.id));
    let stats = s.stats(now).await.expect("stats");
    let next = s.next_due().await.expect("next_due");
    (jobs, trails, format!("{stats:?} {next:?} {runners:?}"))
}

/// Closing and reopening the file keeps every job field for field, every
/// trail, the stats, `next_due`, runner records, idempotency keys and the
/// id counter (the next push gets a higher id than any before).
pub async fn reopen_keeps_jobs_events_and_counters(h: &Harness) {
    let s = h.store();
    let t = h.start();
    populate(h, &*s, t).await;
    let last = h.push(&*s, shell("echo last"), t).await;
    s.cancel(last.id, t).await.expect("cancel");
    s.purge(&Default::default()).await.expect("purge"); // the highest id is gone
    let now = h.at(secs(10));
    let before = everything(&*s, now).await;
    assert_eq!(before.0.len(), 4);

    let s = h.reopen(s);
    let after = everything(&*s, now).await;
    assert_eq!(after, before);

    let next = h.push(&*s, shell("echo after reopen"), now).await;
    assert!(next.id > last.id, "id {} after reopen is not above {}", next.id, last.id);
    let dup = s.push(shell("echo p").key("k").priority(4).max_runtime(Some(secs(2))), now);
    let dup = dup.await.expect("push a duplicate");
    assert!(!dup.created, "the key survived the reopen");
}

/// Two handles on one file work at once: a job pushed on one is claimed on
/// the other, heartbeated through the first, completed through the second,
/// and both see the same jobs, trails and ids.
pub async fn two_handles_on_one_file_work_at_once(h: &Harness) {
    let a = h.store();
    let b = h.open_second();
    let t = h.start();
    let j = h.push(&*a, shell("echo shared"), t).await;
    assert_eq!(job(&*b, j.id).await, j);
    let c = h.claim_expect(&*b, "w1", t, j.id).await;
    assert_eq!(job(&*a, j.id).await, c.job);

    let ack = a.heartbeat(j.id, &c.fence, Some(12), h.at(secs(1))).await.expect("heartbeat via a");
    assert_eq!(ack.lease_until, h.at(secs(61)));
    assert_eq!(job(&*b, j.id).await.lease.and_then(|l| l.child_pgid), Some(12));
    let ja = h.push(&*a, shell("echo from a"), t).await;
    let jb = h.push(&*b, shell("echo from b"), t).await;
    assert!(j.id < ja.id && ja.id < jb.id);
    b.complete(j.id, &c.fence, Completion::default(), h.at(secs(2))).await.expect("complete via b");
    assert_eq!(job(&*a, j.id).await.state, JobState::Done);
    assert_eq!(a.events(j.id).await.expect("events"), b.events(j.id).await.expect("events"));
    assert_eq!(everything(&*a, t).await, everything(&*b, t).await);
    drop(b);
    assert_eq!(a.stats(t).await.expect("stats").pending, 2);
}

/// `restore` (import) writes jobs and trails exactly as exported, in any
/// order: ids, states, leases, keys and events survive; a taken id is
/// refused with `InvalidInput`; later pushes get ids above every imported
/// one; an imported lease still fences its owner.
pub async fn restore_keeps_ids_states_and_events(h: &Harness) {
    let src = h.store();
    let t = h.start();
    populate(h, &*src, t).await;
    let (jobs, trails, _) = everything(&*src, t).await;
    let dst = h.open_other("restored");
    for (j, ev) in jobs.iter().zip(&trails).rev() {
        dst.restore(j.clone(), ev.clone()).await.expect("restore");
    }
    assert_restored(h, &*src, &*dst, &jobs, &trails).await;
}

/// `restore_many` is the same import in one call: every job, trail, lease
/// and key as exported, in any order, later pushes above every imported
/// id, an imported lease still fencing its owner.
pub async fn restore_many_keeps_ids_states_and_events(h: &Harness) {
    let src = h.store();
    let t = h.start();
    populate(h, &*src, t).await;
    let (jobs, trails, _) = everything(&*src, t).await;
    let dst = h.open_other("restored");
    let batch: Vec<(Job, Vec<Event>)> =
        jobs.iter().cloned().zip(trails.iter().cloned()).rev().collect();
    dst.restore_many(batch).await.expect("restore_many");
    assert_restored(h, &*src, &*dst, &jobs, &trails).await;
    assert!(dst.restore_many(Vec::new()).await.is_ok(), "an empty import is fine");
}

/// What an import into `dst` of `src`'s `jobs` and `trails` must give.
async fn assert_restored(
    h: &Harness,
    src: &dyn Store,
    dst: &dyn Store,
    jobs: &[Job],
    trails: &[Vec<Event>],
) {
    let t = h.start();
    let max = jobs.iter().map(|j| j.id).max().expect("jobs");
    for (j, ev) in jobs.iter().zip(trails) {
        assert_eq!(job(dst, j.id).await, *j);
        assert_eq!(&dst.events(j.id).await.expect("events"), ev);
        crate::assert_trail_consistent(dst, j.id).await;
    }
    assert_eq!(dst.stats(t).await.expect("stats"), src.stats(t).await.expect("stats"));

    let again = dst.restore(jobs[0].clone(), trails[0].clone()).await;
    assert!(matches!(again, Err(StoreError::InvalidInput(_))), "{again:?}");
    assert_eq!(job(dst, jobs[0].id).await, jobs[0]);

    let next = h.push(dst, shell("echo new"), t).await;
    assert!(next.id > max, "pushed #{} after importing up to #{max}", next.id);
    let dup = dst.push(shell("echo p").key("k").priority(4).max_runtime(Some(secs(2))), t);
    assert!(!dup.await.expect("push").created, "the imported key holds");

    let running = jobs.iter().find(|j| j.state == JobState::Running && !j.cancel_requested);
    let running = running.expect("a running job");
    let fence = running.lease.as_ref().expect("a lease").fence();
    let done = dst.complete(running.id, &fence, Completion::default(), h.at(secs(7))).await;
    assert_eq!(done.expect("the imported lease's owner completes").state, JobState::Done);
    assert_eq!(
        event_kinds(src, running.id).await.len() + 1,
        event_kinds(dst, running.id).await.len()
    );
}

/// `restore_many` writes all of a batch or none of it: a batch with one
/// bad job (its id already in the batch, its key held by a job in the
/// queue or earlier in the batch, a zero id, a running job without a
/// lease, an event of another job), wherever it stands, is refused with
/// `InBatch` naming its place (from 0) around `InvalidInput`, and leaves the
/// queue exactly as it was; the same batch
/// without the bad job then imports whole.
pub async fn restore_many_is_all_or_nothing(h: &Harness) {
    let src = h.store();
    let t = h.start();
    populate(h, &*src, t).await;
    let (jobs, trails, _) = everything(&*src, t).await;
    let batch: Vec<(Job, Vec<Event>)> = jobs.iter().cloned().zip(trails.iter().cloned()).collect();
    let dst = h.open_other("restored");
    // A job already in the queue, holding a key no exported job has.
    let resident = h.push(&*dst, shell("echo resident").key("resident"), t).await;
    let base = jobs.iter().map(|j| j.id).max().expect("jobs") + resident.id;
    // The batch's jobs moved above the resident's id, so only what is
    // planted below clashes.
    let moved: Vec<(Job, Vec<Event>)> = batch
        .iter()
        .map(|(j, ev)| {
            let id = j.id + base;
            let ev = ev.iter().map(|e| Event { job_id: id, ..e.clone() }).collect();
            (Job { id, ..j.clone() }, ev)
        })
        .collect();
    let before = everything(&*dst, t).await;

    let with = |bad: (Job, Vec<Event>), at_end: bool| {
        let mut b = moved.clone();
        let at = if at_end { b.len() } else { b.len() / 2 };
        b.insert(at, bad);
        (at, b)
    };
    let plain = |id| {
        let mut j = moved[0].0.clone();
        j.id = id;
        j.state = JobState::Cancelled;
        j.lease = None;
        j.idempotency_key = None;
        (j, Vec::new())
    };
    let fresh_id = base * 3;
    let mut keyed_like_resident = plain(fresh_id);
    keyed_like_resident.0.idempotency_key = Some("resident".into());
    let keyed = moved.iter().find(|(j, _)| j.idempotency_key.is_some()).expect("a keyed job");
    let mut keyed_twice = plain(fresh_id);
    keyed_twice.0.idempotency_key = keyed.0.idempotency_key.clone();
    let mut leaseless = plain(fresh_id);
    leaseless.0.state = JobState::Running;
    let mut foreign_trail = plain(fresh_id);
    foreign_trail.1 = vec![Event { job_id: fresh_id + 1, ..trails[0][0].clone() }];
    let bad_batches = [
        ("a duplicate id at the end", with(moved[0].clone(), true)),
        ("the resident's id", with(plain(resident.id), false)),
        ("a key the queue holds", with(keyed_like_resident.clone(), true)),
        ("a key held earlier in the batch", with(keyed_twice, true)),
        ("a zero id", with(plain(0), true)),
        ("a running job without a lease", with(leaseless, false)),
        ("an event of another job", with(foreign_trail, true)),
    ];
    for (what, (at, bad)) in bad_batches {
        let out = dst.restore_many(bad).await;
        assert_eq!(refused_in_batch(&out, what).0, at, "{what}: the bad job's place");
        assert_eq!(everything(&*dst, t).await, before, "{what}: nothing was written");
    }

    dst.restore_many(moved.clone()).await.expect("the good batch imports whole");
    for (j, ev) in &moved {
        assert_eq!(job(&*dst, j.id).await, *j);
        assert_eq!(&dst.events(j.id).await.expect("events"), ev);
    }
    assert_eq!(job(&*dst, resident.id).await, resident);
    let top = moved.iter().map(|(j, _)| j.id).max().expect("jobs");
    let next = h.push(&*dst, shell("echo after"), t).await;
    assert!(next.id > top, "pushed #{} after importing up to #{top}", next.id);
}

/// A larger import (more than a few dozen jobs, so a store that writes a
/// batch in bulk does) is checked in batch order, each job against the
/// queue and the batch's jobs before it: of an id already in the queue
/// and an id repeated in the batch, or a key the queue holds and a key
/// repeated in the batch, the refusal names whichever comes first, and
/// writes nothing. The batch then imports whole: every job and trail as
/// exported (trails of several events, a running job's lease), and a job
/// naming its parent twice keeps its `after` as given with one edge, so a
/// cancel of the parent cancels it once.
pub async fn restore_many_of_a_large_batch_refuses_the_first_clash_then_imports_whole(h: &Harness) {
    const JOBS: usize = 40;
    let src = h.store();
    let t = h.start();
    let mut fill = vec![shell("echo keyed").key("kept")];
    fill.extend((0..JOBS).map(|i| shell(&format!("echo {i}"))));
    let pushed = src.push_many(fill, t).await.expect("fill the source");
    for _ in 0..5 {
        let c = h.claim(&*src, "w1", t).await.expect("a job to run");
        let done = Completion { result: Some("ok".into()), exit_code: Some(0) };
        src.complete(c.job.id, &c.fence, done, h.at(secs(1))).await.expect("complete");
    }
    h.claim(&*src, "w2", t).await.expect("a job left running");
    let parent = pushed[JOBS].job.id;
    let child = h.push(&*src, shell("echo child").after(parent), t).await;
    let (jobs, trails, _) = everything(&*src, t).await;
    let mut batch: Vec<(Job, Vec<Event>)> = jobs.into_iter().zip(trails).collect();
    let last = batch.last_mut().expect("the child");
    assert_eq!(last.0.id, child.id);
    last.0.after = vec![parent, parent];

    let dst = h.open_other("restored");
    let resident_id = 10_000;
    let mut resident = batch[10].clone();
    resident.0.id = resident_id;
    resident.0.idempotency_key = Some("resident".into());
    resident.1.iter_mut().for_each(|e| e.job_id = resident_id);
    dst.restore(resident.0.clone(), resident.1.clone()).await.expect("the resident");
    let before = everything(&*dst, t).await;

    let plain = |id, key: Option<&str>| {
        let mut j = batch[1].0.clone();
        (j.id, j.state, j.lease, j.idempotency_key) =
            (id, JobState::Cancelled, None, key.map(str::to_owned));
        (j, Vec::new())
    };
    let with = |mut bad: Vec<(usize, (Job, Vec<Event>))>| {
        bad.sort_by_key(|(at, _)| *at);
        let mut b = batch.clone();
        for (at, j) in bad {
            b.insert(at, j);
        }
        b
    };
    let again = plain(batch[3].0.id, None);
    let taken = plain(resident_id, None);
    let (fresh, fresher) = (20_000, 20_001);
    let kept_again = plain(fresh, Some("kept"));
    let residents_key = plain(fresher, Some("resident"));
    let bad_batches = [
        (
            "an id of the batch, then one of the queue",
            10,
            vec![(10, again.clone()), (30, taken.clone())],
        ),
        ("an id of the queue, then one of the batch", 10, vec![(10, taken), (30, again)]),
        (
            "a key of the batch, then one of the queue",
            12,
            vec![(12, kept_again.clone()), (25, residents_key.clone())],
        ),
        (
            "a key of the queue, then one of the batch",
            12,
            vec![(12, residents_key), (25, kept_again)],
        ),
    ];
    for (what, at, bad) in bad_batches {
        let out = dst.restore_many(with(bad)).await;
        assert_eq!(refused_in_batch(&out, what).0, at, "{what}: the first clash's place");
        assert_eq!(everything(&*dst, t).await, before, "{what}: nothing was written");
    }

    dst.restore_many(batch.clone()).await.expect("the batch imports whole");
    for (j, ev) in &batch {
        assert_eq!(job(&*dst, j.id).await, *j);
        assert_eq!(&dst.events(j.id).await.expect("events"), ev);
        crate::assert_trail_consistent(&*dst, j.id).await;
    }
    assert!(batch.iter().any(|(_, ev)| ev.len() >= 3), "trails of several events");
    assert_eq!(dst.dependents(parent).await.expect("dependents"), [child.id]);
    assert_eq!(dst.stats(t).await.expect("stats").waiting_on_parents, 1);
    dst.cancel(parent, h.at(secs(2))).await.expect("cancel the parent");
    let c = job(&*dst, child.id).await;
    assert_eq!((c.state, c.cancelled_by), (JobState::Cancelled, Some(parent)));
    let trail = event_kinds(&*dst, child.id).await;
    assert_eq!(trail, [EventKind::Pushed, EventKind::Cancelled], "cancelled once");
    let next = h.push(&*dst, shell("echo after"), t).await;
    assert!(next.id > resident_id, "pushed #{} after importing up to #{resident_id}", next.id);
}

/// Runner records are stored whole, replaced by owner id on a second put,
/// listed, removed, and survive a reopen.
pub async fn runner_records_are_put_listed_and_removed(h: &Harness) {
    let s = h.store();
    let t = h.start();
    assert!(s.runners().await.expect("runners").is_empty());
    let r1 =
        RunnerRecord { queues: vec![], activity: RunnerActivity::Starting, ..runner(h, "r1", t) };
    // A refused handler's reason is kept with the record (what `show` says).
    let r2 = RunnerRecord {
        refused: vec![slothqueue_core::RefusedKind {
            kind: "resize".into(),
            why: "handler /h/resize is writable by other users (mode 0777)".into(),
        }],
        ..runner(h, "r2", t)
    };
    s.put_runner(&r1).await.expect("put r1");
    s.put_runner(&r2).await.expect("put r2");
    let sorted = async |s: &dyn Store| {
        let mut rs = s.runners().await.expect("runners");
        rs.sort_by(|a, b| a.owner.id.cmp(&b.owner.id));
        rs
    };
    assert_eq!(sorted(&*s).await, [r1.clone(), r2.clone()]);

    let r1b = RunnerRecord {
        updated_at: h.at(secs(5)),
        activity: RunnerActivity::Running { job: 7, also: vec![8] },
        slots: 2,
        running: vec![7, 8],
        ..r1.clone()
    };
    s.put_runner(&r1b).await.expect("refresh r1");
    assert_eq!(sorted(&*s).await, [r1b.clone(), r2.clone()]);
    let r2b = RunnerRecord {
        updated_at: h.at(secs(6)),
        activity: RunnerActivity::Gated {
            reading: "queue backups paused — 2 due jobs waiting".into(),
            since: h.at(secs(60)),
            cause: WaitCause::Lanes,
        },
        slots: 3,
        running: vec![9],
        ..r2.clone()
    };
    s.put_runner(&r2b).await.expect("refresh r2");
    assert_eq!(sorted(&*s).await, [r1b, r2b.clone()]);

    s.remove_runner("r1").await.expect("remove r1");
    assert_eq!(sorted(&*s).await, std::slice::from_ref(&r2b));
    let s = h.reopen(s);
    assert_eq!(sorted(&*s).await, [r2b]);
}
