//! Fixing a job: `edit` changes a pending (or held) job in one fenced
//! write ([`Store::edit`]); `clone` adds a new pending job from any job,
//! its trail tied to the original's both ways ([`Store::clone_job`]).
//!
//! The rules are `slothqueue_core`'s ([`slothqueue_core::machine::edit`],
//! [`slothqueue_core::machine::clone_of`]); these scenarios check that a
//! store reads the job inside the write (a job claimed since the caller
//! looked is refused whole), moves an edited job in every index a claim,
//! `stats`, `next_due` and `queue_counts` read (queue, priority, due
//! time), and pushes a clone through its own push path.
//!
//! An edit keeps the job's idempotency key, and its payload hash follows
//! the payload: pushing the key with the edited payload is a duplicate of
//! the edited job, and pushing it with the old payload is a newer request
//! that supersedes it, as any other payload would (the newer push wins; the
//! hash is always the hash of the payload the job will run).

use std::time::Duration;

use slothqueue_core::machine::payload_hash;
use slothqueue_core::{
    ClaimFilter, Completion, EventKind, Failure, JobEdit, JobId, JobState, LaneChange, LaneScope,
    ListFilter, Stamp, Store, StoreError, Timestamp,
};

use crate::{Harness, assert_trail_consistent, event_kinds, job, secs, shell, snapshot};

fn only(queue: &str) -> ClaimFilter {
    ClaimFilter { queues: vec![queue.to_owned()], kinds: None }
}

fn is_invalid_transition<T: std::fmt::Debug>(
    out: &Result<T, StoreError>,
    id: JobId,
    state: JobState,
) -> bool {
    matches!(out, Err(StoreError::InvalidTransition { id: i, state: st, action: "edit" })
        if *i == id && *st == state)
}

async fn pending_in(s: &dyn Store, queue: &str, now: Timestamp) -> u64 {
    s.queue_counts(now)
        .await
        .expect("queue_counts")
        .into_iter()
        .find(|c| c.queue == queue)
        .map_or(0, |c| c.pending)
}

fn edit_command(command: &str) -> JobEdit {
    JobEdit { command: Some(command.to_owned()), ..JobEdit::default() }
}

/// An edit of a pending job changes exactly the fields it names, returns
/// the job as `get` then reads it (also after a reopen), and appends one
/// `edited` event saying which fields changed; the payload hash is the new
/// payload's. An empty edit changes nothing and writes no event.
pub async fn edit_changes_a_pending_job_and_says_what(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("mkae test").max_attempts(3), t).await;
    let at = h.at(secs(1));
    let e = JobEdit {
        command: Some("make test".into()),
        priority: Some(5),
        max_runtime: Some(Some(Duration::from_secs(60))),
        max_attempts: Some(4),
        env: [("CI".to_owned(), "1".to_owned())].into(),
        ..JobEdit::default()
    };
    let edited = s.edit(j.id, &e, at).await.expect("edit");
    assert_eq!(edited.command(), Some("make test"));
    assert_eq!(edited.payload["cwd"], "/tmp", "the rest of the payload stays");
    assert_eq!(edited.payload["env"]["CI"], "1");
    assert_eq!(
        (edited.priority, edited.max_runtime, edited.max_attempts),
        (5, Some(Duration::from_secs(60)), 4)
    );
    assert_eq!(edited.payload_hash, payload_hash(&edited.payload));
    assert_eq!(
        (edited.state, edited.queue.as_str(), edited.not_before, edited.attempts),
        (JobState::Pending, j.queue.as_str(), j.not_before, 0),
        "what the edit does not name stays"
    );
    assert_eq!(job(&*s, j.id).await, edited);
    let events = s.events(j.id).await.expect("events");
    assert_eq!(
        events.iter().map(|e| e.kind).collect::<Vec<_>>(),
        [EventKind::Pushed, EventKind::Edited]
    );
    assert_eq!(
        (events[1].at, events[1].message.as_deref()),
        (at, Some("changed command, priority, max-runtime, max-attempts, env CI"))
    );

    let before = snapshot(&*s, j.id).await;
    let same = s.edit(j.id, &JobEdit::default(), h.at(secs(2))).await.expect("empty edit");
    assert_eq!(same, edited);
    assert_eq!(snapshot(&*s, j.id).await, before, "an empty edit writes nothing");

    let s = h.reopen(s);
    assert_eq!(job(&*s, j.id).await, edited, "the edit is in the file");
    let c = h.claim_expect(&*s, "w1", h.at(secs(3)), j.id).await;
    assert_eq!(c.job.command(), Some("make test"));
}

/// An edit of a held job keeps it held (the same stamp; not claimable),
/// and once released it runs as edited.
pub async fn edit_of_a_held_job_keeps_it_held(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo tpyo"), t).await;
    let stamp = Stamp::new("ana", t);
    s.hold(j.id, stamp.clone(), t).await.expect("hold");
    let edited = s.edit(j.id, &edit_command("echo typo"), h.at(secs(1))).await.expect("edit");
    assert_eq!((edited.state, edited.held.clone()), (JobState::Pending, Some(stamp)));
    assert_eq!(h.claim(&*s, "w1", h.at(secs(2))).await, None, "still held");
    assert_eq!(s.stats(h.at(secs(2))).await.expect("stats").held, 1);
    s.release_hold(j.id, "ana", h.at(secs(3))).await.expect("release");
    let c = h.claim_expect(&*s, "w1", h.at(secs(3)), j.id).await;
    assert_eq!(c.job.command(), Some("echo typo"));
    assert_eq!(
        event_kinds(&*s, j.id).await,
        [
            EventKind::Pushed,
            EventKind::Held,
            EventKind::Edited,
            EventKind::HoldReleased,
            EventKind::Claimed
        ]
    );
}

/// The edit is fenced: a job claimed between the caller's look and the
/// edit is refused with `InvalidTransition` naming `running`, and nothing
/// is written. So is an edit of a done, failed or cancelled job; an unknown
/// id is `NotFound`.
pub async fn edit_of_a_job_not_pending_is_refused_and_changes_nothing(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let r = h.push(&*s, shell("echo r").priority(4), t).await.id;
    let d = h.push(&*s, shell("echo d").priority(3), t).await.id;
    let f = h.push(&*s, shell("echo f").priority(2).max_attempts(1), t).await.id;
    let c = h.push(&*s, shell("echo c"), t).await.id;

    let looked = job(&*s, r).await;
    assert_eq!(looked.state, JobState::Pending, "the caller looked while it was pending");
    let other = h.open_second();
    h.claim_expect(&*other, "w1", t, r).await;

    let dc = h.claim_expect(&*s, "w1", t, d).await;
    s.complete(d, &dc.fence, Completion::default(), t).await.expect("complete");
    let fc = h.claim_expect(&*s, "w1", t, f).await;
    s.fail(f, &fc.fence, Failure::default(), t).await.expect("fail");
    s.cancel(c, t).await.expect("cancel");

    let now = h.at(secs(1));
    let e = JobEdit { command: Some("echo fixed".into()), priority: Some(9), ..JobEdit::default() };
    for (id, state) in [
        (r, JobState::Running),
        (d, JobState::Done),
        (f, JobState::Failed),
        (c, JobState::Cancelled),
    ] {
        let before = snapshot(&*s, id).await;
        let out = s.edit(id, &e, now).await;
        assert!(is_invalid_transition(&out, id, state), "edit of a {state} job: {out:?}");
        assert_eq!(snapshot(&*s, id).await, before, "#{id} unchanged");
    }
    let missing = c + 100;
    assert!(matches!(s.edit(missing, &e, now).await, Err(StoreError::NotFound(i)) if i == missing));
}

/// An edit the push checks refuse (an empty command, a bad queue name, no
/// attempts, a whole payload with a command) is `InvalidInput` and changes
/// nothing; so is an attempt limit the attempts made already reach.
pub async fn an_invalid_edit_changes_nothing(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo x").max_attempts(3), t).await;
    let c = h.claim_expect(&*s, "w1", t, j.id).await;
    let failure = Failure { error: "boom".into(), exit_code: Some(1), permanent: false };
    let retrying = s.fail(j.id, &c.fence, failure, t).await.expect("fail, to retry");
    assert_eq!((retrying.state, retrying.attempts), (JobState::Pending, 1));

    let before = snapshot(&*s, j.id).await;
    let bad = [
        edit_command(""),
        JobEdit { queue: Some("../etc".into()), ..JobEdit::default() },
        JobEdit { max_attempts: Some(0), ..JobEdit::default() },
        JobEdit { max_attempts: Some(1), ..JobEdit::default() },
        JobEdit {
            command: Some("echo y".into()),
            payload: Some(serde_json::json!({"command": "echo z", "cwd": "/tmp"})),
            ..JobEdit::default()
        },
    ];
    for e in &bad {
        let out = s.edit(j.id, e, h.at(secs(1))).await;
        assert!(matches!(out, Err(StoreError::InvalidInput(_))), "{e:?}: {out:?}");
        assert_eq!(snapshot(&*s, j.id).await, before, "{e:?} changed nothing");
    }
}

/// A queue change moves the job to the other lane: a claim limited to the
/// old queue no longer takes it, one limited to the new queue does, and
/// `queue_counts` and a pause of the new lane follow it.
pub async fn edit_of_the_queue_moves_the_job_to_the_other_lane(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo moved").queue("slow"), t).await;
    let kept = h.push(&*s, shell("echo kept").queue("slow"), t).await;
    assert_eq!(pending_in(&*s, "slow", t).await, 2);
    let edited = JobEdit { queue: Some("fast".into()), ..JobEdit::default() };
    let moved = s.edit(j.id, &edited, t).await.expect("edit queue");
    assert_eq!(moved.queue, "fast");
    assert_eq!((pending_in(&*s, "slow", t).await, pending_in(&*s, "fast", t).await), (1, 1));

    let fast = LaneScope::Queue("fast".to_owned());
    s.change_lane(&fast, &LaneChange::Pause(Stamp::new("ana", t))).await.expect("pause fast");
    assert_eq!(h.claim_filtered(&*s, "w1", &only("fast"), t).await, None, "its new lane is paused");
    s.change_lane(&fast, &LaneChange::Resume).await.expect("resume fast");

    let c = h.claim_filtered(&*s, "w1", &only("slow"), t).await.expect("claim from slow");
    assert_eq!(c.job.id, kept.id, "the old queue has only the job left there");
    assert_eq!(h.claim_filtered(&*s, "w1", &only("slow"), t).await, None);
    let c = h.claim_filtered(&*s, "w1", &only("fast"), t).await.expect("claim from fast");
    assert_eq!((c.job.id, c.job.queue.as_str()), (j.id, "fast"));
}

/// A priority change reorders the claims: raised above the others it is
/// taken first, lowered below them it is taken last.
pub async fn edit_of_the_priority_reorders_claims(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let low = h.push(&*s, shell("echo low"), t).await;
    let mid = h.push(&*s, shell("echo mid").priority(5), t).await;
    let top = h.push(&*s, shell("echo top").priority(9), t).await;
    let at = h.at(secs(1));
    s.edit(low.id, &JobEdit { priority: Some(10), ..JobEdit::default() }, at).await.expect("raise");
    s.edit(top.id, &JobEdit { priority: Some(-1), ..JobEdit::default() }, at).await.expect("lower");
    let mut order = Vec::new();
    while let Some(c) = h.claim(&*s, "w1", at).await {
        order.push(c.job.id);
    }
    assert_eq!(order, [low.id, mid.id, top.id]);
}

/// A due-time change makes a job not due (no claim takes it before then;
/// `stats` and `next_due` say when) or due (a job scheduled ahead is taken
/// now), also for a job whose old time had already come.
pub async fn edit_of_the_due_time_makes_a_job_due_or_not(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let now_job = h.push(&*s, shell("echo now"), t).await;
    let later = h.push(&*s, shell("echo later").not_before(h.at(secs(100))), t).await;
    let at = h.at(secs(1));
    // A claim at `at`: the first job's time has come and been seen (a
    // store with a due index has it there by now).
    let busy = h.push(&*s, shell("echo busy").priority(9), t).await;
    let bc = h.claim_expect(&*s, "w1", at, busy.id).await;
    s.complete(busy.id, &bc.fence, Completion::default(), at).await.expect("complete");

    let put_off = JobEdit { not_before: Some(h.at(secs(60))), ..JobEdit::default() };
    s.edit(now_job.id, &put_off, at).await.expect("put off");
    assert_eq!(h.claim(&*s, "w1", h.at(secs(2))).await, None, "not due before its new time");
    let stats = s.stats(h.at(secs(2))).await.expect("stats");
    assert_eq!((stats.pending, stats.due_now, stats.next_due), (2, 0, Some(h.at(secs(60)))));

    let bring_forward = JobEdit { not_before: Some(t), ..JobEdit::default() };
    let forward = s.edit(later.id, &bring_forward, h.at(secs(2))).await.expect("bring forward");
    assert_eq!(forward.not_before, t);
    assert_eq!(s.stats(h.at(secs(2))).await.expect("stats").due_now, 1);
    h.claim_expect(&*s, "w1", h.at(secs(2)), later.id).await;
    assert_eq!(h.claim(&*s, "w1", h.at(secs(59))).await, None);
    h.claim_expect(&*s, "w1", h.at(secs(60)), now_job.id).await;
}

/// An edit keeps the idempotency key and the payload hash follows the
/// payload: the key pushed again with the edited payload is a duplicate
/// of the edited job; with the old payload it is a newer request, which
/// supersedes the edited job like any other payload would.
pub async fn edit_keeps_the_key_and_the_hash_follows_the_payload(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let old = h.push_keyed(&*s, "echo v1", "deploy", t).await;
    let edited = s.edit(old.id, &edit_command("echo v2"), h.at(secs(1))).await.expect("edit");
    assert_eq!(edited.idempotency_key.as_deref(), Some("deploy"));
    assert_eq!(edited.payload_hash, payload_hash(&shell("echo v2").payload));

    let again = s.push(shell("echo v2").key("deploy"), h.at(secs(2))).await.expect("push v2");
    assert_eq!((again.created, again.superseded, again.job.id), (false, None, old.id));
    assert_eq!(job(&*s, old.id).await, edited, "a duplicate writes nothing");

    let v1 = s.push(shell("echo v1").key("deploy"), h.at(secs(3))).await.expect("push v1");
    assert_eq!((v1.created, v1.superseded), (true, Some(old.id)));
    let was = job(&*s, old.id).await;
    assert_eq!((was.state, was.idempotency_key), (JobState::Cancelled, None));
}

/// A clone of a failed job is a new pending job with the edit applied (a
/// fixed command) and the rest of the original's payload and settings,
/// without its key or parents, with no attempts made; the original is
/// unchanged but for a `cloned_as` event naming the clone, whose trail is
/// `pushed` then `cloned_from` naming the original. It runs.
pub async fn clone_of_a_failed_job_is_a_new_pending_job_tied_both_ways(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let parent = h.push(&*s, shell("echo parent"), t).await;
    let pc = h.claim_expect(&*s, "w1", t, parent.id).await;
    s.complete(parent.id, &pc.fence, Completion::default(), t).await.expect("complete parent");
    let new = shell("exit 1")
        .key("nightly")
        .after(parent.id)
        .priority(3)
        .queue("batch")
        .max_attempts(1)
        .max_runtime(Some(Duration::from_secs(30)));
    let f = h.push(&*s, new, t).await;
    let fc = h.claim_expect(&*s, "w1", t, f.id).await;
    let failure = Failure { error: "exit code 1".into(), exit_code: Some(1), permanent: false };
    s.fail(f.id, &fc.fence, failure, t).await.expect("fail");
    let failed = job(&*s, f.id).await;
    assert_eq!(failed.state, JobState::Failed);

    let at = h.at(secs(5));
    let clone = s.clone_job(f.id, &edit_command("exit 0"), at).await.expect("clone");
    assert_ne!(clone.id, f.id);
    assert_eq!(job(&*s, clone.id).await, clone);
    assert_eq!((clone.state, clone.attempts, clone.held.clone()), (JobState::Pending, 0, None));
    assert_eq!(clone.payload["command"], "exit 0");
    assert_eq!(clone.payload["cwd"], failed.payload["cwd"]);
    assert_eq!((clone.idempotency_key.clone(), clone.after.clone()), (None, vec![]));
    assert_eq!(clone.pending_parents, 0);
    assert_eq!(
        (clone.queue.as_str(), clone.priority, clone.max_attempts, clone.max_runtime),
        ("batch", 3, 1, Some(Duration::from_secs(30)))
    );
    assert_eq!((clone.created_at, clone.not_before), (at, at), "a clone is due when made");

    let orig_events = s.events(f.id).await.expect("events");
    let last = orig_events.last().expect("a trail");
    assert_eq!(
        (last.kind, last.at, last.message.clone()),
        (EventKind::ClonedAs, at, Some(format!("cloned as #{}", clone.id)))
    );
    assert_eq!(job(&*s, f.id).await, failed, "the original's row is not changed");
    let clone_events = s.events(clone.id).await.expect("events");
    assert_eq!(
        clone_events.iter().map(|e| (e.kind, e.message.clone())).collect::<Vec<_>>(),
        [
            (EventKind::Pushed, clone_events[0].message.clone()),
            (EventKind::ClonedFrom, Some(format!("cloned from #{}", f.id))),
        ]
    );
    assert_trail_consistent(&*s, f.id).await;
    assert_trail_consistent(&*s, clone.id).await;

    let c = h.claim_expect(&*s, "w1", at, clone.id).await;
    assert_eq!(c.job.command(), Some("exit 0"));
    s.complete(clone.id, &c.fence, Completion::default(), at).await.expect("complete the clone");
}

/// A clone of a done job with no edit is the same work again, pending and
/// claimable; a clone of a pending job leaves the original pending; each
/// gets the next id.
pub async fn clone_of_a_done_or_pending_job_adds_the_same_work_again(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let d = h.push(&*s, shell("echo again").priority(2), t).await;
    let dc = h.claim_expect(&*s, "w1", t, d.id).await;
    s.complete(d.id, &dc.fence, Completion::default(), t).await.expect("complete");
    let at = h.at(secs(1));
    let again = s.clone_job(d.id, &JobEdit::default(), at).await.expect("clone a done job");
    assert_eq!((again.id, again.state), (d.id + 1, JobState::Pending));
    assert_eq!(
        (again.payload.clone(), again.payload_hash.clone()),
        (d.payload.clone(), d.payload_hash)
    );
    assert_eq!(job(&*s, d.id).await.state, JobState::Done);

    let p = h.push(&*s, shell("echo waiting").not_before(h.at(secs(50))), t).await;
    let later = JobEdit { not_before: Some(h.at(secs(20))), ..JobEdit::default() };
    let twin = s.clone_job(p.id, &later, at).await.expect("clone a pending job");
    assert_eq!((twin.id, twin.not_before), (p.id + 1, h.at(secs(20))));
    assert_eq!(job(&*s, p.id).await.state, JobState::Pending);

    h.claim_expect(&*s, "w1", at, again.id).await;
    assert_eq!(h.claim(&*s, "w1", at).await, None);
    h.claim_expect(&*s, "w1", h.at(secs(20)), twin.id).await;
    h.claim_expect(&*s, "w1", h.at(secs(50)), p.id).await;
}

/// A clone of an unknown job is `NotFound`; one with an edit the push
/// checks refuse is `InvalidInput`. Neither writes anything: no job, no
/// event on the original, no id used.
pub async fn clone_of_a_missing_job_or_with_a_bad_edit_writes_nothing(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo x"), t).await;
    let before = snapshot(&*s, j.id).await;
    let missing = j.id + 100;
    let out = s.clone_job(missing, &JobEdit::default(), t).await;
    assert!(matches!(out, Err(StoreError::NotFound(i)) if i == missing), "{out:?}");
    let out = s.clone_job(j.id, &edit_command(""), t).await;
    assert!(matches!(out, Err(StoreError::InvalidInput(_))), "{out:?}");
    assert_eq!(snapshot(&*s, j.id).await, before);
    assert_eq!(s.list(&ListFilter::default()).await.expect("list").len(), 1);
    let next = h.push(&*s, shell("echo next"), t).await;
    assert_eq!(next.id, j.id + 1, "no id was used");
}
