//! A process that dies with the queue open leaves a file redb must repair.
//! The open repairs it (nothing committed is lost), but only after a dry
//! run in memory has shown the repaired file is a queue this build can
//! open: a crashed file that is damaged or from a newer slothqueue is still
//! refused untouched.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::{Path, PathBuf};
use std::process::Command;

use slothqueue_core::{NewJob, Store, StoreError, Timestamp};
use slothqueue_store_redb::{RedbOptions, RedbStore, SCHEMA_VERSION};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);
const CHILD_ENV: &str = "SLOTHQUEUE_REDB_CRASH_CHILD";
/// [`crash_child`]'s name in the test binary (`tests/it/main.rs`), which
/// runs it again as the child.
const CHILD_TEST: &str = "crash::crash_child";
const JOBS: usize = 30;

/// In the child: push, optionally mark the file as a newer schema, and die
/// without closing anything. Does nothing in an ordinary run.
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (mode, path) = spec.split_once(':').unwrap();
    let path = PathBuf::from(path);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = RedbStore::open(&path, RedbOptions::default()).unwrap();
    rt.block_on(async {
        for i in 0..JOBS {
            store.push(NewJob::shell(format!("echo {i}"), "/tmp"), T).await.unwrap();
        }
    });
    if mode == "newer" {
        const META: redb::TableDefinition<'static, &str, u64> =
            redb::TableDefinition::new("slothqueue_meta");
        let mut b = redb::Builder::new();
        b.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
        let db = b.open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert("schema_version", u64::from(SCHEMA_VERSION) + 1)
            .unwrap();
        txn.commit().unwrap();
        std::mem::forget(db);
    }
    std::mem::forget(store);
    std::process::abort();
}

/// Runs the child on a fresh queue in `dir` and returns the file it left.
fn crashed_queue(dir: &Path, mode: &str) -> PathBuf {
    let path = dir.join(format!("{mode}.redb"));
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, format!("{mode}:{}", path.display()))
        .output()
        .unwrap();
    assert!(!status.status.success(), "the child was meant to die: {status:?}");
    assert!(path.exists());
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_queue_is_repaired_on_open_with_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed_queue(dir.path(), "plain");
    let store = RedbStore::open(&path, RedbOptions::default()).unwrap();
    let stats = store.stats(T).await.unwrap();
    assert_eq!(stats.pending, JOBS as u64);
    let next = store.push(NewJob::shell("echo after", "/tmp"), T).await.unwrap();
    assert_eq!(next.job.id, JOBS as i64 + 1);
    store.check_integrity().unwrap();
}

#[test]
fn a_crashed_queue_from_a_newer_slothqueue_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed_queue(dir.path(), "newer");
    let before = std::fs::read(&path).unwrap();
    let err = RedbStore::open(&path, RedbOptions::default()).unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaTooNew { found, .. } if found == SCHEMA_VERSION + 1),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before, "the refused file changed");
}

#[test]
fn a_crashed_and_damaged_queue_never_panics_and_a_refusal_leaves_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed_queue(dir.path(), "plain");
    let full = std::fs::read(&path).unwrap();
    let mut refused = 0;
    for (n, cut) in [full.len() / 2, full.len() / 3, 5000, 600].into_iter().enumerate() {
        let copy = dir.path().join(format!("damaged-{n}.redb"));
        std::fs::write(&copy, &full[..cut]).unwrap();
        let outcome = std::panic::catch_unwind(|| RedbStore::open(&copy, RedbOptions::default()));
        match outcome {
            Err(_) => panic!("cut at {cut}: the open panicked"),
            Ok(Err(e)) => {
                assert!(matches!(e, StoreError::Corrupt { .. }), "cut at {cut}: {e:?}");
                assert_eq!(std::fs::read(&copy).unwrap(), &full[..cut], "cut at {cut}: changed");
                refused += 1;
            }
            Ok(Ok(_)) => {}
        }
    }
    assert!(refused > 0, "no cut was refused");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_queue_is_read_only_from_a_repaired_snapshot_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed_queue(dir.path(), "plain");
    let before = std::fs::read(&path).unwrap();
    // The case this covers: redb will not open the file read-only as it is.
    let mut b = redb::Builder::new();
    b.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    assert!(matches!(b.open_read_only(&path), Err(redb::DatabaseError::RepairAborted)));
    let store = RedbStore::open_read_only(&path, RedbOptions::default()).unwrap();
    assert_eq!(store.stats(T).await.unwrap().pending, JOBS as u64);
    assert_eq!(store.events(JOBS as i64).await.unwrap().len(), 1, "the last push's trail");
    let err = store.push(NewJob::shell("echo no", "/tmp"), T).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::ReadOnlyFilesystem),
        "{err:?}"
    );
    drop(store);
    assert_eq!(std::fs::read(&path).unwrap(), before, "a read-only look changed the file");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_snapshot_follows_the_file_once_a_writer_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed_queue(dir.path(), "plain");
    let reader = RedbStore::open_read_only(&path, RedbOptions::default()).unwrap();
    assert_eq!(reader.stats(T).await.unwrap().pending, JOBS as u64);
    let writer = RedbStore::open(&path, RedbOptions::default()).unwrap();
    writer.push(NewJob::shell("echo after", "/tmp"), T).await.unwrap();
    assert_eq!(reader.stats(T).await.unwrap().pending, JOBS as u64 + 1);
    writer.push(NewJob::shell("echo later", "/tmp"), T).await.unwrap();
    assert_eq!(reader.stats(T).await.unwrap().pending, JOBS as u64 + 2);
}

#[test]
fn a_crashed_queue_from_a_newer_slothqueue_is_refused_read_only_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed_queue(dir.path(), "newer");
    let before = std::fs::read(&path).unwrap();
    let err = RedbStore::open_read_only(&path, RedbOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::SchemaTooNew { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the refused file changed");
}
