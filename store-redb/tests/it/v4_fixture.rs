//! `tests/data/v4.redb` is a queue written by schema version 4 (by the
//! last v4 build's `slothqueue add --key one 'echo one'` and `add 'echo
//! two'`). Schema 5 adds GPU requests and holds inside the job's JSON and
//! changes no table, but the version must move: a v4 build reads a GPU
//! job as one that needs no GPU and would hand it out beside another on
//! the same card, so a file that may hold one must be refused by it (as
//! it refuses any newer schema). Every later build must migrate a copy of
//! the fixture and read its jobs back, forever.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::{Path, PathBuf};

use slothqueue_core::{GpuRequest, JobState, NewJob, Store, Timestamp};
use slothqueue_store_redb::{RedbOptions, RedbStore, SCHEMA_VERSION};

const T: Timestamp = Timestamp::from_millis(1_900_000_000_000);

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v4.redb")
}

/// The schema version of a closed queue file, read with plain redb.
fn version(path: &Path) -> u64 {
    use redb::ReadableDatabase;
    const META: redb::TableDefinition<'static, &str, u64> =
        redb::TableDefinition::new("slothqueue_meta");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    txn.open_table(META).unwrap().get("schema_version").unwrap().unwrap().value()
}

#[tokio::test(flavor = "multi_thread")]
async fn v4_fixture_migrates_and_a_gpu_job_keeps_v4_builds_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v4.redb");
    std::fs::copy(fixture(), &path).unwrap();
    assert_eq!(version(&path), 4, "the fixture is a v4 file");
    {
        let s = RedbStore::open(&path, RedbOptions::default()).unwrap();
        let one = s.get(1).await.unwrap();
        assert_eq!((one.state, one.idempotency_key.as_deref()), (JobState::Pending, Some("one")));
        assert_eq!(one.command(), Some("echo one"));
        assert_eq!(one.gpus, None, "a v4 job needs no GPU");
        assert_eq!(s.get(2).await.unwrap().command(), Some("echo two"));
        let request = GpuRequest { count: 2, memory: Some(1 << 30) };
        let gpu = NewJob::shell("python3 train.py", "/tmp").gpus(request.clone());
        let id = s.push(gpu, T).await.unwrap().job.id;
        assert_eq!(s.get(id).await.unwrap().gpus, Some(request));
        s.check_integrity().unwrap();
    }
    // A v4 build opens a file only at schema 4 or below: this one, which
    // holds a GPU job, is beyond it.
    assert!(version(&path) > 4, "a file holding a GPU job is still marked v4");
    assert_eq!(version(&path), u64::from(SCHEMA_VERSION));
}
