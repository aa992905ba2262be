//! What a person watching the queue asks of `list`: search in commands,
//! kinds and keys, the held and waiting jobs apart from the other pending
//! ones, and the jobs that finished since a time (the page's history).
//! Each is answered in the store's own query, so a limit and a cursor
//! page through exactly the jobs the filter admits.

use serde_json::json;
use slothqueue_core::{
    Completion, Failure, Job, JobId, JobState, ListFilter, ListOrder, NewJob, PendingShown, Stamp,
    StoreError,
};

use crate::{Harness, secs, shell};

fn ids(jobs: &[Job]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

fn search(text: &str) -> ListFilter {
    ListFilter { search: Some(text.into()), ..ListFilter::default() }
}

/// `search` finds the jobs whose kind, idempotency key or payload JSON
/// text contains the text: case-sensitive, with no wildcard (`%` and `_`
/// are plain characters), combined with the other filters, a limit and a
/// cursor as the store's query answers them.
pub async fn list_search_finds_kind_key_and_payload_text(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let by_command = h.push(&*s, shell("grep needle /var/log/syslog"), t).await.id;
    let by_kind = h.push(&*s, NewJob::new("needle-sort", json!({"n": 1})), t).await.id;
    let by_key = h.push_keyed(&*s, "echo keyed", "build-needle-7", t).await.id;
    let other_queue = h.push(&*s, shell("echo needle").queue("backups"), t).await.id;
    let upper = h.push(&*s, shell("echo NEEDLE"), t).await.id;
    let percent = h.push(&*s, shell("echo 100% a_b"), t).await.id;
    let by_payload = h.push(&*s, NewJob::new("mail", json!({"to": "needle@example.org"})), t).await;

    let list = async |f: ListFilter| ids(&s.list(&f).await.expect("list"));
    assert_eq!(
        list(search("needle")).await,
        [by_payload.id, other_queue, by_key, by_kind, by_command],
        "kind, key, command and payload, newest first; not `NEEDLE`"
    );
    assert_eq!(list(search("NEEDLE")).await, [upper], "case-sensitive");
    assert_eq!(list(search("0% a_b")).await, [percent], "`%` and `_` are plain characters");
    assert_eq!(list(search("ec_o")).await, Vec::<JobId>::new(), "`_` matches no character");
    assert_eq!(list(search("1%")).await, Vec::<JobId>::new(), "`%` matches no characters");
    assert_eq!(list(search("no such text")).await, Vec::<JobId>::new());

    let in_default = ListFilter { queue: Some("default".into()), ..search("needle") };
    assert_eq!(list(in_default.clone()).await, [by_payload.id, by_key, by_kind, by_command]);
    let shells = ListFilter { kind: Some("shell".into()), ..search("needle") };
    assert_eq!(list(shells).await, [other_queue, by_key, by_command]);
    let page = ListFilter { limit: Some(2), ..in_default.clone() };
    assert_eq!(list(page).await, [by_payload.id, by_key], "the limit counts matches only");
    let next = ListFilter { limit: Some(2), cursor: Some(by_key), ..in_default.clone() };
    assert_eq!(list(next).await, [by_kind, by_command], "the cursor pages on among matches");
    let oldest = ListFilter { order: ListOrder::Oldest, limit: Some(1), ..in_default };
    assert_eq!(list(oldest).await, [by_command]);

    let c = h.claim_expect(&*s, "w1", t, by_command).await;
    let running = ListFilter { state: Some(JobState::Running), ..search("needle") };
    assert_eq!(list(running).await, [c.job.id], "with a state");
}

fn shown(w: PendingShown) -> ListFilter {
    ListFilter { shown: Some(w), ..ListFilter::default() }
}

/// `shown: held` lists the pending jobs a user holds (waiting on parents
/// or not); `shown: waiting` the pending jobs not held that wait on
/// parents not done: the two words `list` and the page print instead of
/// `pending`. A job leaves them when it is released or its parent is
/// done; `state: pending` still lists every pending job, and another
/// state with either is refused.
pub async fn list_tells_held_and_waiting_jobs_apart(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let parent = h.push(&*s, shell("echo parent"), t).await.id;
    let child = h.push(&*s, shell("echo child").after(parent), t).await.id;
    let held = h.push(&*s, shell("echo held"), t).await.id;
    let held_child = h.push(&*s, shell("echo held child").after(parent), t).await.id;
    let plain = h.push(&*s, shell("echo plain").not_before(h.at(secs(60))), t).await.id;
    let elsewhere = h.push(&*s, shell("echo other").queue("backups").after(parent), t).await.id;
    s.hold(held, Stamp::new("ana", t), t).await.expect("hold");
    s.hold(held_child, Stamp::new("ana", t), t).await.expect("hold");

    let list = async |f: ListFilter| ids(&s.list(&f).await.expect("list"));
    assert_eq!(list(shown(PendingShown::Held)).await, [held_child, held]);
    assert_eq!(list(shown(PendingShown::Waiting)).await, [elsewhere, child]);
    let pending = ListFilter { state: Some(JobState::Pending), ..ListFilter::default() };
    assert_eq!(list(pending).await, [elsewhere, plain, held_child, held, child, parent]);
    let queued = ListFilter { queue: Some("default".into()), ..shown(PendingShown::Waiting) };
    assert_eq!(list(queued).await, [child]);
    let as_pending =
        ListFilter { state: Some(JobState::Pending), limit: Some(1), ..shown(PendingShown::Held) };
    assert_eq!(list(as_pending).await, [held_child], "with state pending and a limit");
    let searched = ListFilter { search: Some("held".into()), ..shown(PendingShown::Waiting) };
    assert_eq!(list(searched).await, Vec::<JobId>::new(), "a held child is not waiting");

    let c = h.claim_expect(&*s, "w1", t, parent).await;
    s.complete(parent, &c.fence, Completion::default(), t).await.expect("complete");
    s.release_hold(held, "ana", t).await.expect("release");
    assert_eq!(list(shown(PendingShown::Waiting)).await, Vec::<JobId>::new());
    assert_eq!(list(shown(PendingShown::Held)).await, [held_child], "held, no longer waiting");

    let running = ListFilter { state: Some(JobState::Running), ..shown(PendingShown::Held) };
    assert!(
        matches!(s.list(&running).await, Err(StoreError::InvalidInput(_))),
        "held jobs are pending: another state is refused"
    );
}

/// `finished_since` lists the jobs that finished (done, failed or
/// cancelled) at or after a time, by their own `finished_at`: the trail a
/// history of the last hour is counted from, with nothing else written.
pub async fn list_finished_since_reads_when_jobs_ended(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let done = h.push(&*s, shell("echo done"), t).await.id;
    let failed = h.push(&*s, shell("echo failed").max_attempts(1), t).await.id;
    let cancelled = h.push(&*s, shell("echo cancelled").not_before(h.at(secs(600))), t).await.id;
    let pending = h.push(&*s, shell("echo later").not_before(h.at(secs(600))), t).await.id;
    let c = h.claim_expect(&*s, "w1", t, done).await;
    s.complete(done, &c.fence, Completion::default(), h.at(secs(10))).await.expect("complete");
    let c = h.claim_expect(&*s, "w1", h.at(secs(10)), failed).await;
    s.fail(failed, &c.fence, Failure::default(), h.at(secs(20))).await.expect("fail");
    s.cancel(cancelled, h.at(secs(30))).await.expect("cancel");

    let since = |at| ListFilter { finished_since: Some(at), ..ListFilter::default() };
    let list = async |f: ListFilter| ids(&s.list(&f).await.expect("list"));
    assert_eq!(list(since(t)).await, [cancelled, failed, done]);
    assert_eq!(list(since(h.at(secs(10)))).await, [cancelled, failed, done], "at or after");
    assert_eq!(list(since(h.at(secs(11)))).await, [cancelled, failed]);
    assert_eq!(list(since(h.at(secs(31)))).await, Vec::<JobId>::new());
    let failed_only = ListFilter { state: Some(JobState::Failed), ..since(t) };
    assert_eq!(list(failed_only).await, [failed]);
    let limited = ListFilter { limit: Some(1), order: ListOrder::Oldest, ..since(h.at(secs(11))) };
    assert_eq!(list(limited).await, [failed]);
    assert!(list(since(t)).await.iter().all(|id| *id != pending), "a pending job has not ended");
}
