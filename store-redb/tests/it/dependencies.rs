//! Job dependencies on redb (schema 2): a job waiting on parents is kept
//! out of the claim's indexes (`pending_by_time`, `ready`) and counted in
//! `waiting_on_parents`, and enters them in the transaction that completes
//! its last parent; a v1 queue migrates; refusals in a batch name the
//! element and write nothing. The rule itself is the core's and the
//! shared contract the conformance suite's; what is here is what this
//! backend's tables could get wrong, at sizes where a scan would show.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::machine;
use slothqueue_core::{
    ClaimRequest, Claimed, ClockOnly, Completion, JobState, NewJob, Owner, Policy, PurgeFilter,
    Settlement, Store, StoreError, Timestamp,
};
use slothqueue_store_redb::{RedbOptions, RedbStore, SCHEMA_VERSION};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn at(s: u64) -> Timestamp {
    T.saturating_add(Duration::from_secs(s))
}

fn sh(cmd: &str) -> NewJob {
    NewJob::shell(cmd, "/tmp")
}

fn open(path: &Path) -> RedbStore {
    RedbStore::open(path, RedbOptions::default()).unwrap()
}

fn request() -> ClaimRequest {
    ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly))
}

async fn claim(s: &RedbStore, now: Timestamp) -> Option<Claimed> {
    s.claim(&request(), now).await.unwrap()
}

async fn complete(s: &RedbStore, c: &Claimed, now: Timestamp) {
    s.complete(c.job.id, &c.fence, Completion::default(), now).await.unwrap();
}

/// The schema version and table names of a closed queue file, read with
/// plain redb.
fn layout(path: &Path) -> (u64, Vec<String>) {
    use redb::{ReadableDatabase, TableHandle};
    const META: redb::TableDefinition<'static, &str, u64> =
        redb::TableDefinition::new("slothqueue_meta");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let names = txn.list_tables().unwrap().map(|t| t.name().to_owned()).collect();
    let version = txn.open_table(META).unwrap().get("schema_version").unwrap().unwrap().value();
    (version, names)
}

fn v1_copy(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("v1.redb");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1.redb"), &path).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn a_v1_queue_migrates_and_then_takes_jobs_with_parents() {
    let dir = tempfile::tempdir().unwrap();
    let path = v1_copy(dir.path());
    let (version, names) = layout(&path);
    assert_eq!(version, 1);
    assert!(!names.iter().any(|n| n == "dependency_edges"), "{names:?}");

    let s = open(&path);
    s.check_integrity().unwrap();
    let before = s.stats(at(10)).await.unwrap();
    assert_eq!((before.pending, before.waiting_on_parents, before.due_now), (5, 0, 4));
    assert!(s.dependents(9).await.unwrap().is_empty());

    // A parent of the old queue (#9, pending) and a new one (#13).
    let parent = s.push(sh("echo parent"), at(11)).await.unwrap().job;
    assert_eq!(parent.id, 13);
    let child = sh("echo child").after(9).after(parent.id).key("child");
    let child = s.push(child, at(11)).await.unwrap().job;
    assert_eq!((child.id, child.pending_parents, child.after.clone()), (14, 2, vec![9, 13]));
    assert_eq!(s.dependents(9).await.unwrap(), [14]);
    assert_eq!(s.dependents(13).await.unwrap(), [14]);
    let stats = s.stats(at(11)).await.unwrap();
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (7, 1, 5));
    s.check_integrity().unwrap();

    // Claim and complete everything due: the child comes only after both
    // of its parents are done.
    let mut taken = Vec::new();
    while let Some(c) = claim(&s, at(12)).await {
        taken.push(c.job.id);
        complete(&s, &c, at(12)).await;
    }
    let place = |id| taken.iter().position(|t| *t == id).unwrap();
    assert!(place(14) > place(9) && place(14) > place(13), "{taken:?}");
    assert_eq!(s.get(14).await.unwrap().state, JobState::Done);
    s.check_integrity().unwrap();
    drop(s);

    let (version, names) = layout(&path);
    assert_eq!(version, u64::from(SCHEMA_VERSION));
    for table in ["dependency_edges", "waiting_on_parents"] {
        assert!(names.iter().any(|n| n == table), "{table} missing: {names:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_v1_queue_reads_through_a_read_only_open_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = v1_copy(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let s = RedbStore::open_read_only(&path, RedbOptions::default()).unwrap();
    let stats = s.stats(at(10)).await.unwrap();
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (5, 0, 4));
    assert!(s.dependents(1).await.unwrap().is_empty());
    drop(s);
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the migration was in memory only");
}

const N: i64 = 10_000;

#[tokio::test(flavor = "multi_thread")]
async fn in_a_chain_of_10_000_only_the_head_is_due_and_each_completion_frees_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.redb"));
    let chain: Vec<NewJob> = (1..=N)
        .map(|id| {
            let job = sh(&format!("echo {id}"));
            if id == 1 { job } else { job.after(id - 1) }
        })
        .collect();
    let pushed = s.push_many(chain, T).await.unwrap();
    assert_eq!(pushed.last().map(|p| (p.job.id, p.job.pending_parents)), Some((N, 1)));

    let stats = s.stats(at(1)).await.unwrap();
    let n = N as u64;
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (n, n - 1, 1));
    assert_eq!(stats.next_due, None, "a waiting job's time is not a due time");
    assert_eq!(s.next_due().await.unwrap(), Some(T), "only the head's");
    s.check_integrity().unwrap();

    let head = claim(&s, at(1)).await.unwrap();
    assert_eq!(head.job.id, 1);
    assert!(claim(&s, at(1)).await.is_none(), "nothing behind the head is due");
    complete(&s, &head, at(2)).await;

    let stats = s.stats(at(2)).await.unwrap();
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (n - 1, n - 2, 1));
    assert_eq!(s.get(2).await.unwrap().pending_parents, 0);
    assert_eq!(s.get(3).await.unwrap().pending_parents, 1);
    assert_eq!(s.dependents(2).await.unwrap(), [3]);
    let next = claim(&s, at(2)).await.unwrap();
    assert_eq!(next.job.id, 2);
    assert!(claim(&s, at(2)).await.is_none());
    s.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_of_10_000_frees_them_all_in_the_transaction_that_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.redb"));
    let parent = s.push(sh("echo parent").key("root"), T).await.unwrap().job;
    // Half name it by id, half by key.
    let children: Vec<NewJob> = (0..N)
        .map(|i| {
            let job = sh(&format!("echo {i}"));
            if i % 2 == 0 { job.after(parent.id) } else { job.after("root") }
        })
        .collect();
    s.push_many(children, T).await.unwrap();
    let stats = s.stats(at(1)).await.unwrap();
    let n = N as u64;
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (n + 1, n, 1));
    let dependents = s.dependents(parent.id).await.unwrap();
    assert_eq!(dependents, (2..=N + 1).collect::<Vec<_>>(), "every child, lowest first");

    let c = claim(&s, at(1)).await.unwrap();
    assert_eq!(c.job.id, parent.id);
    // The settle and the next claim are one transaction: the claim half
    // sees every child due, so the settle made them due in it.
    let both = s
        .settle_and_claim(
            parent.id,
            &c.fence,
            Settlement::Complete(Completion::default()),
            &request(),
            at(2),
        )
        .await
        .unwrap();
    assert_eq!(both.settled.state, JobState::Done);
    assert_eq!(both.next.map(|c| c.job.id), Some(2), "the lowest child, due at once");
    let stats = s.stats(at(2)).await.unwrap();
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (n - 1, 0, n - 1));
    s.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_parent_cancels_its_waiting_children_out_of_every_index() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.redb"));
    s.push(sh("echo parent").max_attempts(1), T).await.unwrap();
    s.push(sh("echo child").after(1), T).await.unwrap();
    s.push(sh("echo grandchild").after(2), T).await.unwrap();
    let c = claim(&s, T).await.unwrap();
    let boom =
        slothqueue_core::Failure { error: "boom".into(), exit_code: Some(1), permanent: false };
    s.fail(1, &c.fence, boom, at(1)).await.unwrap();
    for id in [2, 3] {
        let job = s.get(id).await.unwrap();
        assert_eq!((job.state, job.cancelled_by), (JobState::Cancelled, Some(1)), "#{id}");
    }
    let stats = s.stats(at(1)).await.unwrap();
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.cancelled), (0, 0, 2));
    s.check_integrity().unwrap();

    // The retry of the root brings them back, waiting again.
    s.retry(1, at(2)).await.unwrap();
    let stats = s.stats(at(2)).await.unwrap();
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (3, 2, 1));
    s.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_element_names_its_place_in_the_batch_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.redb"));
    let batch = vec![sh("echo a").key("a"), sh("echo b").after("a"), sh("echo c").after(99)];
    match s.push_many(batch, T).await.unwrap_err() {
        StoreError::InBatch { index: 2, error } => {
            assert!(
                matches!(*error, StoreError::InvalidInput(ref m) if m.contains("#99")),
                "{error:?}"
            );
        }
        other => panic!("expected InBatch at 2, got {other:?}"),
    }
    let bad_first = vec![sh("echo a").queue("../x"), sh("echo b")];
    let err = s.push_many(bad_first, T).await.unwrap_err();
    assert!(matches!(err, StoreError::InBatch { index: 0, .. }), "{err:?}");
    assert_eq!(s.stats(T).await.unwrap().pending, 0, "nothing of either batch");

    // One job alone answers its own error.
    let err = s.push(sh("echo c").after(99), T).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput(_)), "{err:?}");

    let job = |id: i64, after: &[i64]| {
        let mut t = machine::create(id, &sh("echo r"), &[], T, &Policy::default());
        t.job.after = after.to_vec();
        t.job.pending_parents = u32::try_from(after.len()).unwrap();
        (t.job, t.events)
    };
    let err = s.restore_many(vec![job(1, &[]), job(2, &[1]), job(3, &[3])]).await.unwrap_err();
    assert!(matches!(err, StoreError::InBatch { index: 2, .. }), "{err:?}");
    let err = s.restore(job(3, &[3]).0, Vec::new()).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput(_)), "{err:?}");
    assert_eq!(s.stats(T).await.unwrap().pending, 0);
    s.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn restore_writes_edges_and_purge_takes_a_job_s_own_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.redb"));
    let job = |id: i64, state: JobState, after: &[i64], waiting: u32| {
        let mut t = machine::create(id, &sh("echo r"), &[], T, &Policy::default());
        t.job.state = state;
        if state.is_terminal() {
            t.job.finished_at = Some(T);
        }
        t.job.after = after.to_vec();
        t.job.pending_parents = waiting;
        (t.job, t.events)
    };
    // A child restored before its parent, in one batch.
    let batch = vec![
        job(3, JobState::Pending, &[1, 2], 1),
        job(1, JobState::Done, &[], 0),
        job(2, JobState::Pending, &[1], 0),
    ];
    s.restore_many(batch).await.unwrap();
    assert_eq!(s.dependents(1).await.unwrap(), [2, 3]);
    assert_eq!(s.dependents(2).await.unwrap(), [3]);
    let stats = s.stats(T).await.unwrap();
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.due_now), (2, 1, 1));
    s.check_integrity().unwrap();

    // #2 completes: #3 is due.
    let c = claim(&s, T).await.unwrap();
    assert_eq!(c.job.id, 2);
    complete(&s, &c, at(1)).await;
    assert_eq!(s.stats(at(1)).await.unwrap().due_now, 1);

    // Purging #1 and #2 (done) leaves #3 with its edges: an edge lives as
    // long as its child, so the parent gone still lists it.
    let purged =
        s.purge(&PurgeFilter { include_pending: false, older_than: Some(at(5)) }).await.unwrap();
    assert_eq!(purged, [1, 2]);
    assert_eq!(s.dependents(1).await.unwrap(), [3]);
    s.check_integrity().unwrap();
    // And #3 purged takes its edges with it.
    let purged = s.purge(&PurgeFilter { include_pending: true, older_than: None }).await.unwrap();
    assert_eq!(purged, [3]);
    assert!(s.dependents(1).await.unwrap().is_empty());
    s.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_purge_keeps_a_pending_parent_someone_waits_on() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.redb"));
    s.push(sh("echo parent"), T).await.unwrap();
    s.push(sh("echo child").after(1), T).await.unwrap();
    s.push(sh("echo alone"), T).await.unwrap();
    let purged = s.purge(&PurgeFilter { include_pending: true, older_than: None }).await.unwrap();
    // The child and the lone job go; the parent is kept only while
    // someone left behind waits on it, and the child is going too.
    assert_eq!(purged, [1, 2, 3]);
    s.push(sh("echo parent"), T).await.unwrap(); // #4
    s.push(sh("echo child").after(4), T).await.unwrap(); // #5
    s.cancel(5, T).await.unwrap();
    s.push(sh("echo waiting").after(4), T).await.unwrap(); // #6
    let purged = s.purge(&PurgeFilter { include_pending: false, older_than: None }).await.unwrap();
    assert_eq!(purged, [5], "only the terminal one");
    let purged = s.purge(&PurgeFilter { include_pending: true, older_than: None }).await.unwrap();
    assert_eq!(purged, [4, 6]);
    s.check_integrity().unwrap();
}
