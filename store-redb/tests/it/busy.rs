//! Contention: a call waits (bounded) for another process's write, then
//! answers `Busy`; several handles and a foreign writer share one file.

#![allow(clippy::unwrap_used, reason = "a test failure is a panic")]

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use slothqueue_core::{NewJob, Store, StoreError, Timestamp};
use slothqueue_store_redb::{RedbOptions, RedbStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn options(lock_timeout: Duration) -> RedbOptions {
    RedbOptions { lock_timeout, ..RedbOptions::default() }
}

/// Another writer on the file, as another process would open it: redb's
/// locks belong to the open file, so a second `Database` in this process
/// contends exactly like a second process.
fn foreign_writer(path: &Path) -> redb::Database {
    let mut b = redb::Builder::new();
    b.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    b.open(path).unwrap()
}

fn job(n: u32) -> NewJob {
    NewJob::shell(format!("echo {n}"), "/tmp")
}

#[tokio::test(flavor = "multi_thread")]
#[expect(clippy::disallowed_methods, reason = "the test is about how long a call waits")]
async fn a_write_waits_for_the_lock_then_answers_busy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let store = RedbStore::open(&path, options(Duration::from_millis(400))).unwrap();
    store.push(job(1), T).await.unwrap();

    let other = foreign_writer(&path);
    let held = other.begin_write().unwrap();
    let start = Instant::now();
    let err = store.push(job(2), T).await.unwrap_err();
    let elapsed = start.elapsed();
    match err {
        StoreError::Busy { waited } => {
            assert!(waited >= Duration::from_millis(400), "gave up after {waited:?}");
            assert!(err.is_temporary());
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(elapsed >= Duration::from_millis(400), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    // Reads do not wait for writers.
    assert_eq!(store.stats(T).await.unwrap().pending, 1);
    // Nor does an open that finds the writer holding on; it too gives up.
    let err = RedbStore::open(&path, options(Duration::from_millis(300))).unwrap_err();
    assert!(matches!(err, StoreError::Busy { .. }), "{err:?}");

    held.abort().unwrap();
    let pushed = store.push(job(3), T).await.unwrap();
    assert_eq!(pushed.job.id, 2, "the refused push wrote nothing");
}

#[tokio::test(flavor = "multi_thread")]
#[expect(clippy::disallowed_methods, reason = "the foreign writer holds its lock for a while")]
async fn a_write_that_finds_the_lock_held_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let store = RedbStore::open(&path, options(Duration::from_secs(10))).unwrap();
    let other = foreign_writer(&path);
    let (taken, wait_taken) = mpsc::channel();
    let holder = std::thread::spawn(move || {
        let txn = other.begin_write().unwrap();
        taken.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        txn.commit().unwrap();
    });
    wait_taken.recv().unwrap();
    let start = Instant::now();
    let pushed = store.push(job(1), T).await.unwrap();
    assert!(start.elapsed() >= Duration::from_millis(200), "{:?}", start.elapsed());
    assert_eq!(pushed.job.id, 1);
    holder.join().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn handles_in_one_process_share_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let a = RedbStore::open(&path, RedbOptions::default()).unwrap();
    // The same file by another spelling of its path.
    let b = RedbStore::open(&dir.path().join(".").join("q.redb"), RedbOptions::default()).unwrap();
    let x = a.push(job(1), T).await.unwrap().job.id;
    let y = b.push(job(2), T).await.unwrap().job.id;
    assert_eq!((x, y), (1, 2));
    assert_eq!(b.get(x).await.unwrap().command(), Some("echo 1"));
    assert_eq!(a.get(y).await.unwrap().command(), Some("echo 2"));
    drop(a);
    assert_eq!(b.stats(T).await.unwrap().pending, 2);
    b.check_integrity().unwrap();
}
