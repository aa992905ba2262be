//! Contention on the file's write lock: every write begins `BEGIN IMMEDIATE`
//! and so waits its turn for the busy timeout, then says `Busy` with how
//! long it waited; reads go on meanwhile (WAL); and a lock released in time
//! lets the write through.
//!
//! These tests wait for real: the waiting is the thing under test.

#![expect(clippy::unwrap_used, reason = "helpers of tests: a failure is a panic")]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use slothqueue_core::{
    ClaimRequest, ClockOnly, Completion, Event, EventKind, Failure, ListFilter, NewJob, Owner,
    PurgeFilter, RunnerActivity, RunnerRecord, Store, StoreError, Timestamp,
};
use slothqueue_store_sqlite::{Journal, SqliteOptions, SqliteStore};

const TIMEOUT: Duration = Duration::from_millis(200);

fn t(secs: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
}

fn open(path: &Path, journal: Journal) -> Arc<SqliteStore> {
    let options = SqliteOptions { busy_timeout: TIMEOUT, journal, ..SqliteOptions::default() };
    Arc::new(SqliteStore::open(path, options).unwrap())
}

/// Another process's write transaction, held open until dropped.
fn hold_write_lock(path: &Path) -> Connection {
    let blocker = Connection::open(path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    blocker
}

#[expect(clippy::disallowed_methods, reason = "measures a real wait for a lock")]
async fn timed<T>(f: impl Future<Output = T>) -> (T, Duration) {
    let start = Instant::now();
    let out = f.await;
    (out, start.elapsed())
}

async fn assert_waits_then_busy<T: std::fmt::Debug>(
    what: &str,
    f: impl Future<Output = Result<T, StoreError>>,
) {
    let (out, took) = timed(f).await;
    match out {
        Err(StoreError::Busy { waited }) => {
            assert_eq!(waited, TIMEOUT, "{what}");
            let msg = StoreError::Busy { waited }.to_string();
            assert!(msg.contains("200ms"), "{what}: the message says how long: {msg}");
        }
        other => panic!("{what}: expected Busy, got {other:?}"),
    }
    // A deferred transaction upgraded to a write fails at once, without
    // the busy handler: having waited proves the write began IMMEDIATE.
    assert!(took >= TIMEOUT * 3 / 4, "{what} gave up after {took:?}, without waiting its turn");
    assert!(took < TIMEOUT * 10, "{what} waited {took:?}, far beyond the timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_waits_for_the_busy_timeout_then_says_busy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let store = open(&path, Journal::Wal);
    let s: &dyn Store = &*store;
    for i in 0..3 {
        s.push(NewJob::shell(format!("echo {i}"), "/"), t(0)).await.unwrap();
    }
    let owner = Owner::named("w");
    let c = s
        .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), t(1))
        .await
        .unwrap()
        .unwrap();
    let (id, fence) = (c.job.id, c.fence.clone());
    let record = RunnerRecord {
        owner: owner.clone(),
        queues: vec![],
        kinds: None,
        refused: Vec::new(),
        started_at: t(0),
        updated_at: t(0),
        activity: RunnerActivity::Starting,
        slots: 1,
        running: Vec::new(),
        gpus: None,
    };
    s.put_runner(&record).await.unwrap();

    let blocker = hold_write_lock(&path);
    let job = s.get(id).await.unwrap();
    let mut other = job.clone();
    other.id = 50;
    let trail = vec![Event::new(50, EventKind::Pushed, t(0))];

    assert_waits_then_busy("push", s.push(NewJob::shell("x", "/"), t(2))).await;
    assert_waits_then_busy("push_many", s.push_many(vec![NewJob::shell("x", "/")], t(2))).await;
    assert_waits_then_busy(
        "claim",
        s.claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), t(2)),
    )
    .await;
    assert_waits_then_busy("heartbeat", s.heartbeat(id, &fence, Some(7), t(2))).await;
    assert_waits_then_busy("complete", s.complete(id, &fence, Completion::default(), t(2))).await;
    let failure = Failure { error: "boom".into(), exit_code: Some(1), permanent: false };
    assert_waits_then_busy("fail", s.fail(id, &fence, failure, t(2))).await;
    assert_waits_then_busy("release", s.release(id, &fence, t(2))).await;
    assert_waits_then_busy("cancel", s.cancel(id, t(2))).await;
    assert_waits_then_busy("retry", s.retry(id, t(2))).await;
    assert_waits_then_busy("reclaim_dead", s.reclaim_dead(&[(id, fence.clone())], t(2))).await;
    assert_waits_then_busy("purge", s.purge(&PurgeFilter::default())).await;
    assert_waits_then_busy("restore", s.restore(other, trail)).await;
    assert_waits_then_busy("put_runner", s.put_runner(&record)).await;
    assert_waits_then_busy("remove_runner", s.remove_runner(&owner.id)).await;

    // Readers are not blocked by a writer in WAL mode: the lock is held
    // throughout, so a read that had to wait for it would end in `Busy`.
    s.get(id).await.unwrap();
    s.events(id).await.unwrap();
    s.list(&ListFilter::default()).await.unwrap();
    s.stats(t(2)).await.unwrap();
    s.next_due().await.unwrap();
    assert_eq!(s.runners().await.unwrap(), vec![record]);

    // Nothing was half-written, and once the lock is gone writes go through.
    drop(blocker);
    assert_eq!(s.get(id).await.unwrap(), job);
    s.complete(id, &fence, Completion::default(), t(3)).await.unwrap();
    assert_eq!(s.push(NewJob::shell("x", "/"), t(3)).await.unwrap().job.id, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_upgrade_would_fail_at_once() {
    // The control for the test above: a transaction that reads and then
    // writes, begun DEFERRED, does not wait at all.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    drop(open(&path, Journal::Wal));
    let blocker = hold_write_lock(&path);
    let conn = Connection::open(&path).unwrap();
    conn.busy_timeout(TIMEOUT).unwrap();
    let (out, took) = timed(async {
        conn.execute_batch("BEGIN DEFERRED")?;
        conn.query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get::<_, i64>(0))?;
        conn.execute_batch("DELETE FROM runners")
    })
    .await;
    let code = out.unwrap_err().sqlite_error_code();
    assert_eq!(code, Some(rusqlite::ErrorCode::DatabaseBusy));
    assert!(took < TIMEOUT / 2, "the deferred upgrade waited {took:?}");
    drop(blocker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_journal_writes_wait_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let store = open(&path, Journal::Rollback);
    let blocker = hold_write_lock(&path);
    assert_waits_then_busy("push", store.push(NewJob::shell("x", "/"), t(0))).await;
    drop(blocker);
    assert_eq!(store.push(NewJob::shell("x", "/"), t(0)).await.unwrap().job.id, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_released_within_the_timeout_lets_the_write_through() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let options =
        SqliteOptions { busy_timeout: Duration::from_secs(5), ..SqliteOptions::default() };
    let store = SqliteStore::open(&path, options).unwrap();
    let blocker = hold_write_lock(&path);
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        locked_tx.send(()).unwrap();
        hold_briefly();
        blocker.execute_batch("COMMIT").unwrap();
    });
    locked_rx.recv().unwrap();
    let (pushed, took) = timed(store.push(NewJob::shell("x", "/"), t(0))).await;
    assert_eq!(pushed.unwrap().job.id, 1);
    assert!(took >= TIMEOUT, "the write waited for the lock: {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    holder.join().unwrap();
}

#[expect(
    clippy::disallowed_methods,
    reason = "holds a lock for a real while: the contention under test"
)]
fn hold_briefly() {
    std::thread::sleep(Duration::from_millis(300));
}
