//! RELIABILITY S16, found by the torture suite's fuzzing (`cargo xtask
//! torture`): a bit-flipped file that opens, whose damage redb meets only
//! when it writes its allocator state on close. `slothqueue add` on it
//! ended in a panic (exit 101) after the add itself had answered.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use slothqueue_core::{NewJob, Store, Timestamp};
use slothqueue_store_redb::{RedbOptions, RedbStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

#[tokio::test]
async fn s16_closing_a_damaged_file_does_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/s16_damaged_close.redb"), &path)
        .unwrap();
    // Whatever the open and the push answer, dropping the store must not
    // panic (a panic here fails the test).
    if let Ok(store) = RedbStore::open(&path, RedbOptions::default()) {
        let _ = store.push(NewJob::shell("true", "/tmp"), T).await;
        drop(store);
    }
}
