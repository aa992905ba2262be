//! Jobs that run after others, as SQLite stores them (the behaviour every
//! store shares is in the conformance scenarios): a job waiting on parents
//! is in no index a claim reads, so a long chain costs a claim nothing and
//! each completion makes exactly the next job due; the edges are written
//! with a job, restored with it and deleted with it; a batch names its
//! refused element.

#![expect(clippy::unwrap_used, reason = "helpers of tests: a failure is a panic")]

use std::path::Path;
use std::sync::Arc;

use rusqlite::Connection;
use slothqueue_core::{
    ClaimRequest, ClockOnly, Completion, Failure, JobState, ListFilter, NewJob, Owner, PurgeFilter,
    Store, StoreError, Timestamp,
};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

fn t(secs: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
}

fn request() -> ClaimRequest {
    ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly))
}

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default()).unwrap()
}

/// The number of entries of an index or table, read through another
/// connection (the store's own is behind its mutex).
fn entries(path: &Path, sql: &str) -> i64 {
    Connection::open(path).unwrap().query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Claims the one due job and completes it.
async fn run(s: &SqliteStore, now: Timestamp) -> i64 {
    let c = s.claim(&request(), now).await.unwrap().unwrap();
    s.complete(c.job.id, &c.fence, Completion::default(), now).await.unwrap();
    c.job.id
}

/// A chain of 10,000 jobs, each after the one before: only the head is in
/// the claim and due indexes, the rest are counted from the waiting index
/// (and the counts agree with the table), and each completion makes
/// exactly the next one due.
#[tokio::test]
async fn a_chain_of_10_000_jobs_is_due_one_at_a_time() {
    const N: i64 = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let s = open(&path);
    let jobs = (1..=N)
        .map(|i| {
            let new = NewJob::shell(format!("step {i}"), "/");
            if i == 1 { new } else { new.after(i - 1) }
        })
        .collect();
    let pushed = s.push_many(jobs, t(0)).await.unwrap();
    assert_eq!(pushed.last().unwrap().job.id, N);

    let stats = s.stats(t(1)).await.unwrap();
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (10_000, 9_999, 1));
    assert_eq!((stats.next_due, s.next_due().await.unwrap()), (None, Some(t(0))));
    for index in ["jobs_pending", "jobs_pending_queue", "jobs_pending_due"] {
        let n = entries(
            &path,
            &format!(
                "SELECT COUNT(*) FROM jobs INDEXED BY {index} WHERE state = 'pending' AND pending_parents = 0 AND held = 0"
            ),
        );
        assert_eq!(n, 1, "{index} holds only the head");
    }
    let waiting = entries(
        &path,
        "SELECT COUNT(*) FROM jobs NOT INDEXED WHERE state = 'pending' AND pending_parents > 0",
    );
    assert_eq!(waiting, 9_999);

    for next in 2..=4 {
        assert_eq!(run(&s, t(next)).await, next - 1);
        let stats = s.stats(t(next)).await.unwrap();
        assert_eq!(
            (stats.pending, stats.due_now),
            ((N - next + 1) as u64, 1),
            "after #{}",
            next - 1
        );
        assert_eq!(stats.done, (next - 1) as u64);
        let due = s.get(next).await.unwrap();
        assert_eq!(
            (due.state, due.pending_parents, due.after.clone()),
            (JobState::Pending, 0, vec![next - 1])
        );
        assert_eq!(s.get(next + 1).await.unwrap().pending_parents, 1);
    }
    assert_eq!(s.dependents(4).await.unwrap(), [5]);
}

/// A failure at the head of a chain cancels the whole chain in its
/// transaction, naming the root; a retry of the root brings it back,
/// waiting again, and the chain then runs to its end.
#[tokio::test]
async fn a_failure_cancels_a_chain_and_a_retry_brings_it_back() {
    const N: i64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let s = open(&path);
    let jobs = (1..=N)
        .map(|i| {
            let new = NewJob::shell(format!("step {i}"), "/").max_attempts(1);
            if i == 1 { new } else { new.after(i - 1) }
        })
        .collect();
    s.push_many(jobs, t(0)).await.unwrap();
    let c = s.claim(&request(), t(1)).await.unwrap().unwrap();
    let failure = Failure { error: "boom".into(), exit_code: Some(1), permanent: false };
    s.fail(c.job.id, &c.fence, failure, t(2)).await.unwrap();

    let stats = s.stats(t(2)).await.unwrap();
    assert_eq!((stats.failed, stats.cancelled, stats.pending), (1, (N - 1) as u64, 0));
    let last = s.get(N).await.unwrap();
    assert_eq!((last.state, last.cancelled_by), (JobState::Cancelled, Some(1)));
    assert_eq!(last.last_error.as_deref(), Some("dependency #1 failed"));
    let err = s.retry(N, t(3)).await.unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidInput(ref m) if m.contains("retry #1 instead")),
        "{err:?}"
    );

    s.retry(1, t(3)).await.unwrap();
    let stats = s.stats(t(3)).await.unwrap();
    assert_eq!(
        (stats.pending, stats.waiting_on_parents, stats.due_now),
        (N as u64, (N - 1) as u64, 1)
    );
    for i in 1..=N {
        assert_eq!(run(&s, t(4)).await, i);
    }
    assert_eq!(s.stats(t(5)).await.unwrap().done, N as u64);
}

/// A batch may name, by key, a job pushed earlier in it; a refused element
/// is named by its place and nothing of the batch is written; a single
/// push returns the plain error.
#[tokio::test]
async fn a_batch_names_earlier_jobs_and_its_refused_element() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.db"));
    let batch = vec![
        NewJob::shell("build", "/").key("build"),
        NewJob::shell("test", "/").after("build"),
        NewJob::shell("ship", "/").after("build").after(2),
    ];
    let pushed = s.push_many(batch, t(0)).await.unwrap();
    assert_eq!(pushed[2].job.after, [1, 2]);
    assert_eq!(pushed[2].job.pending_parents, 2);
    assert_eq!(s.dependents(1).await.unwrap(), [2, 3]);

    let batch = vec![NewJob::shell("a", "/"), NewJob::shell("b", "/").after(99)];
    let err = s.push_many(batch, t(1)).await.unwrap_err();
    match &err {
        StoreError::InBatch { index: 1, error } => {
            assert_eq!(error.to_string(), "--after 99: no job #99");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.to_string(), "job 2 of the batch: --after 99: no job #99");
    assert_eq!(s.list(&ListFilter::default()).await.unwrap().len(), 3, "nothing written");
    let err = s.push(NewJob::shell("c", "/").after("nope"), t(1)).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput(_)), "{err:?}");
}

/// An import keeps who waits on whom: the edges are written from each
/// job's parents, so the restored parent's completion makes its dependent
/// due; a purge deletes a job's edges with it, and keeps a pending parent
/// that a job left behind still waits on.
#[tokio::test]
async fn edges_are_restored_and_purged_with_their_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir.path().join("src.db"));
    src.push(NewJob::shell("a", "/"), t(0)).await.unwrap();
    src.push(NewJob::shell("b", "/").after(1), t(0)).await.unwrap();
    src.push(NewJob::shell("c", "/").after(1).after(2), t(0)).await.unwrap();
    let mut export = Vec::new();
    for job in src
        .list(&ListFilter { order: slothqueue_core::ListOrder::Oldest, ..ListFilter::default() })
        .await
        .unwrap()
    {
        let events = src.events(job.id).await.unwrap();
        export.push((job, events));
    }
    let path = dir.path().join("dst.db");
    let dst = open(&path);
    dst.restore_many(export).await.unwrap();
    assert_eq!(dst.dependents(1).await.unwrap(), [2, 3]);
    assert_eq!(dst.dependents(2).await.unwrap(), [3]);
    assert_eq!(dst.stats(t(1)).await.unwrap().waiting_on_parents, 2);
    assert_eq!(run(&dst, t(1)).await, 1);
    assert_eq!(run(&dst, t(1)).await, 2, "the restored edge carried #1's completion");

    // #3 pending on #2 (done): purging pending jobs deletes #3 and its
    // two edges; #1 and #2 (done) go too.
    let everything = PurgeFilter { include_pending: true, ..PurgeFilter::default() };
    assert_eq!(dst.purge(&everything).await.unwrap(), [1, 2, 3]);
    assert_eq!(entries(&path, "SELECT COUNT(*) FROM edges"), 0);
    dst.check_integrity().unwrap();

    // A pending parent that a job left behind still waits on stays, with
    // its edge; deleted with that job, it may go.
    let p = dst.push(NewJob::shell("p", "/"), t(2)).await.unwrap().job.id;
    let q = dst.push(NewJob::shell("q", "/").after(p), t(5)).await.unwrap().job.id;
    let older = PurgeFilter { include_pending: true, older_than: Some(t(3)) };
    assert_eq!(dst.purge(&older).await.unwrap(), Vec::<i64>::new(), "#{q} waits on #{p}");
    assert_eq!(dst.dependents(p).await.unwrap(), [q]);
    assert_eq!(dst.purge(&everything).await.unwrap(), [p, q]);
    assert_eq!(entries(&path, "SELECT COUNT(*) FROM edges"), 0);
}

/// A dependency edge whose job is gone (deleted by another tool) is
/// reported by the integrity check: edges have no foreign key.
#[tokio::test]
async fn a_loose_edge_fails_the_integrity_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let s = open(&path);
    s.push(NewJob::shell("a", "/"), t(0)).await.unwrap();
    s.check_integrity().unwrap();
    Connection::open(&path).unwrap().execute("INSERT INTO edges VALUES (1, 7)", []).unwrap();
    let err = s.check_integrity().unwrap_err();
    assert!(err.to_string().contains("1 dependency edge(s) of a missing job"), "{err}");
}
