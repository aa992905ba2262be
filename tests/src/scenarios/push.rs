//! Creating jobs: what is recorded, what is refused, and how ids grow.

use std::time::Duration;

use serde_json::json;
use slothqueue_core::machine::payload_hash;
use std::sync::Arc;

use slothqueue_core::{
    DEFAULT_QUEUE, EventKind, JobSource, JobState, ListFilter, ListOrder, NewJob, PurgeFilter,
    PushedId, SHELL_KIND, Stats, StoreError,
};

use crate::{Harness, event_kinds, job, refused_in_batch, secs, shell};

/// A push records every field as asked (queue, kind, payload, priority,
/// attempts, runtime, delay) with state `pending`, `attempts == 0`, the
/// payload's hash, `created_at == now` and a `pushed` event; unset fields
/// take the defaults (queue `default`, the policy's max attempts, due now).
pub async fn push_records_the_job_as_asked(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let payload = json!({"to": "a@example.com", "n": 3, "tags": ["x", "y"], "nested": {"k": null}});
    let new = NewJob::new("mail", payload.clone())
        .queue("q-1.a_b")
        .priority(-7)
        .max_attempts(5)
        .max_runtime(Some(Duration::from_millis(1_500)))
        .not_before(h.at(secs(7)));
    let pushed = s.push(new, t).await.expect("push");
    assert!(pushed.created);
    assert_eq!(pushed.superseded, None);
    let j = pushed.job;
    assert!(j.id > 0);
    assert_eq!(j.queue, "q-1.a_b");
    assert_eq!(j.kind, "mail");
    assert_eq!(j.payload, payload);
    assert_eq!(j.priority, -7);
    assert_eq!(j.state, JobState::Pending);
    assert_eq!((j.attempts, j.max_attempts), (0, 5));
    assert_eq!(j.max_runtime, Some(Duration::from_millis(1_500)));
    assert_eq!(j.not_before, h.at(secs(7)));
    assert_eq!(j.lease, None);
    assert_eq!(j.idempotency_key, None);
    assert_eq!(j.payload_hash, payload_hash(&payload));
    assert!(!j.cancel_requested);
    assert_eq!((j.last_error.as_deref(), j.result.as_deref(), j.exit_code), (None, None, None));
    assert_eq!((j.created_at, j.started_at, j.finished_at), (t, None, None));
    assert_eq!(job(&*s, j.id).await, j);
    let events = s.events(j.id).await.expect("events");
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].kind, events[0].at, events[0].job_id), (EventKind::Pushed, t, j.id));

    let d = h.push(&*s, shell("echo defaults"), t).await;
    assert_eq!(d.queue, DEFAULT_QUEUE);
    assert_eq!(d.kind, SHELL_KIND);
    assert_eq!(d.command(), Some("echo defaults"));
    assert_eq!(d.max_attempts, h.policy().default_max_attempts);
    assert_eq!(d.max_runtime, None);
    assert_eq!(d.not_before, t);
    assert_eq!(d.priority, 0);
}

/// Invalid pushes (empty or blank command, a shell job without a command,
/// a bad queue or kind name, `max_attempts` 0, an empty key) are refused
/// with `InvalidInput` and write nothing.
pub async fn invalid_pushes_are_rejected_and_write_nothing(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let bad = [
        ("empty command", shell("")),
        ("blank command", shell("   ")),
        ("no command", NewJob::new(SHELL_KIND, json!({"cwd": "/tmp"}))),
        ("queue with a space", shell("echo").queue("bad queue")),
        ("empty queue", shell("echo").queue("")),
        ("dot queue", shell("echo").queue(".hidden")),
        ("slash queue", shell("echo").queue("a/b")),
        ("empty kind", NewJob::new("", json!({}))),
        ("path kind", NewJob::new("../evil", json!({}))),
        ("zero attempts", shell("echo").max_attempts(0)),
        ("empty key", shell("echo").key("")),
    ];
    for (what, new) in bad {
        let err = s.push(new, t).await.expect_err(what);
        assert!(matches!(err, StoreError::InvalidInput(_)), "{what}: {err:?}");
    }
    assert_eq!(s.stats(t).await.expect("stats"), Stats::default());
    assert!(s.list(&ListFilter::default()).await.expect("list").is_empty());
    assert_eq!(s.next_due().await.expect("next_due"), None);

    let ok = h.push(&*s, shell("echo fine"), t).await;
    assert_eq!(s.list(&ListFilter::default()).await.expect("list").len(), 1);
    assert_eq!(event_kinds(&*s, ok.id).await, [EventKind::Pushed]);
}

/// `push_many` is all or nothing: one invalid element rejects the batch
/// with `InBatch` naming its place (from 0) around `InvalidInput`, and
/// nothing is written; a valid batch creates every
/// job with increasing ids, in order. An empty batch writes nothing.
pub async fn push_many_is_all_or_nothing(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let first = h.push(&*s, shell("echo before"), t).await;

    let batch = vec![shell("echo a"), shell("echo b").queue("no good"), shell("echo c")];
    let out = s.push_many(batch, t).await;
    assert_eq!(refused_in_batch(&out, "a bad queue").0, 1);
    let all = s.list(&ListFilter::default()).await.expect("list");
    assert_eq!(all.iter().map(|j| j.id).collect::<Vec<_>>(), [first.id]);
    let batch = vec![shell("echo a"), shell("echo b"), shell("echo c").max_attempts(0)];
    let out = s.push_many(batch, t).await;
    assert_eq!(refused_in_batch(&out, "zero attempts").0, 2);
    assert_eq!(s.stats(t).await.expect("stats").pending, 1);

    assert!(s.push_many(Vec::new(), t).await.expect("an empty batch").is_empty());
    assert_eq!(s.stats(t).await.expect("stats").pending, 1);

    let batch = vec![shell("echo a"), shell("echo b").priority(3), shell("echo c").queue("other")];
    let pushed = s.push_many(batch, t).await.expect("a valid batch");
    assert_eq!(pushed.len(), 3);
    assert!(pushed.iter().all(|p| p.created && p.superseded.is_none()));
    let ids: Vec<_> = pushed.iter().map(|p| p.job.id).collect();
    assert!(first.id < ids[0] && ids[0] < ids[1] && ids[1] < ids[2], "ids {ids:?}");
    assert_eq!(pushed[0].job.command(), Some("echo a"));
    assert_eq!(pushed[1].job.priority, 3);
    assert_eq!(pushed[2].job.queue, "other");
    for p in &pushed {
        assert_eq!(job(&*s, p.job.id).await, p.job);
        assert_eq!(event_kinds(&*s, p.job.id).await, [EventKind::Pushed]);
    }
    assert_eq!(s.stats(t).await.expect("stats").pending, 4);
}

/// A long stream for [`push_stream_is_all_or_nothing_and_takes_jobs_as_they_come`]:
/// `len` jobs made as they are taken, every 100th with a key that the
/// next one and a job 1,500 further on wait on (a parent written well
/// before, past any batch a store holds back), and at `fault` what the
/// fault says instead of a job.
struct Stream {
    len: usize,
    fault: Option<(usize, Fault)>,
}

#[derive(Clone, Copy)]
enum Fault {
    /// The source itself refuses the element (a line that does not parse).
    Source,
    /// A job the door checks refuse (a queue name with a space).
    BadQueue,
    /// A job naming a key nothing holds.
    UnknownParent,
}

impl JobSource for Stream {
    fn jobs(&self) -> Box<dyn Iterator<Item = Result<NewJob, StoreError>> + '_> {
        Box::new((0..self.len).map(move |i| {
            let mut job = shell(&format!("echo {i}"));
            if i % 100 == 0 {
                job = job.key(format!("k{i}"));
            } else if i % 100 == 1 {
                job = job.after(format!("k{}", i - 1).as_str());
            }
            if i >= 1_500 && i % 100 == 50 {
                job = job.after(format!("k{}", (i - 1_500) / 100 * 100).as_str());
            }
            match self.fault {
                Some((at, Fault::Source)) if at == i => {
                    Err(StoreError::InvalidInput(format!("element {i} is no job")))
                }
                Some((at, Fault::BadQueue)) if at == i => Ok(job.queue("no good")),
                Some((at, Fault::UnknownParent)) if at == i => Ok(job.after("nobody-holds-this")),
                _ => Ok(job),
            }
        }))
    }
}

/// `push_stream` is `push_many` of what a source makes, one at a time:
/// all or nothing (a refusal by the source, by the door checks or for an
/// unknown parent, even at the last of 2,500 elements, is `InBatch` naming
/// its place around the cause, and nothing is written); parents named by
/// the key of an earlier element of the stream, near or far, are waited
/// on; a key an identical job already holds adds nothing. It answers one
/// `PushedId` per element, as the store then has the job.
pub async fn push_stream_is_all_or_nothing_and_takes_jobs_as_they_come(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let resident = h.push(&*s, shell("echo 0").key("k0"), t).await;
    let before = s.stats(t).await.expect("stats");
    let len = 2_500;
    for (at, fault, what) in [
        (len - 1, Fault::Source, "the source's refusal"),
        (len - 1, Fault::BadQueue, "a bad queue"),
        (1_777, Fault::UnknownParent, "an unknown parent"),
    ] {
        let out = s.push_stream(Arc::new(Stream { len, fault: Some((at, fault)) }), t).await;
        let (index, message) = refused_in_batch(&out, what);
        assert_eq!(index, at, "{what}: {message}");
        if let Fault::Source = fault {
            assert_eq!(message, format!("element {at} is no job"), "the source's own message");
        }
        assert_eq!(s.stats(t).await.expect("stats"), before, "{what}: nothing written");
    }
    let after_resident =
        ListFilter { cursor: Some(resident.id), order: ListOrder::Oldest, ..ListFilter::default() };
    let none = s.list(&after_resident).await.expect("list");
    assert!(none.is_empty(), "no job after the resident one: {none:?}");

    let pushed = s.push_stream(Arc::new(Stream { len, fault: None }), t).await.expect("a stream");
    assert_eq!(pushed.len(), len);
    assert_eq!(
        pushed[0],
        PushedId { id: resident.id, created: false, superseded: None, state: JobState::Pending },
        "k0 is held by the same job already"
    );
    let created: Vec<_> = pushed[1..].iter().map(|p| p.id).collect();
    assert!(pushed[1..].iter().all(|p| p.created && p.superseded.is_none()));
    assert!(created.windows(2).all(|w| w[0] + 1 == w[1]), "ids one after the other");
    assert!(created[0] > resident.id);
    for i in [1, 99, 100, 101, 1_050, 1_550, 2_450, len - 1] {
        let job = job(&*s, pushed[i].id).await;
        assert_eq!(job.command(), Some(format!("echo {i}").as_str()));
        assert_eq!(job.state, pushed[i].state);
        let mut parents = Vec::new();
        if i % 100 == 1 {
            parents.push(pushed[i - 1].id);
        }
        if i >= 1_500 && i % 100 == 50 {
            parents.push(pushed[(i - 1_500) / 100 * 100].id);
        }
        assert_eq!(job.after, parents, "element {i}");
        assert_eq!(job.pending_parents as usize, parents.len(), "element {i}");
    }
    let stats = s.stats(t).await.expect("stats");
    assert_eq!(stats.pending, before.pending + len as u64 - 1);
    for (parent, children) in [(100, [101, 1_650]), (2_400, [2_401, 0])] {
        let expected: Vec<_> = children.iter().filter(|&&c| c > 0).map(|&c| pushed[c].id).collect();
        let got = s.dependents(pushed[parent].id).await.expect("dependents");
        assert_eq!(got, expected, "the children of element {parent}");
    }
}

/// Ids increase and are never reused, even after every job was purged.
pub async fn ids_are_never_reused_after_purge(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let mut ids = Vec::new();
    for i in 0..3 {
        let j = h.push(&*s, shell(&format!("echo {i}")), t).await;
        ids.push(j.id);
        s.cancel(j.id, t).await.expect("cancel");
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let mut purged = s.purge(&PurgeFilter::default()).await.expect("purge");
    purged.sort_unstable();
    assert_eq!(purged, ids);
    assert!(s.list(&ListFilter::default()).await.expect("list").is_empty());

    let next = h.push(&*s, shell("echo after"), t).await;
    assert!(next.id > ids[2], "id {} reused after purge of {ids:?}", next.id);
    let all =
        s.purge(&PurgeFilter { include_pending: true, older_than: None }).await.expect("purge");
    assert_eq!(all, [next.id]);
    let last = h.push(&*s, shell("echo last"), t).await;
    assert!(last.id > next.id);
}
