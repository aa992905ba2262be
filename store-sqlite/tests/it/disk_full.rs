//! RELIABILITY S15 on SQLite (the check is `slothqueue_conformance::disk_full`).
//! Found by the torture suite: a long-lived handle (a runner) kept failing
//! after space was freed, because the WAL, which had filled the disk, ate
//! the freed space again before any checkpoint could give its own back.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use slothqueue_conformance::disk_full::{Sizes, fails_cleanly_and_recovers};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

#[tokio::test(flavor = "multi_thread")]
async fn s15_space_freed_after_a_full_disk_is_not_eaten_by_the_wal() {
    let sizes = Sizes { file_name: "q.db", filler_bytes: 600 * 1024, payload_bytes: 16 * 1024 };
    fails_cleanly_and_recovers(
        sizes,
        |path| SqliteStore::open(path, SqliteOptions::default()).unwrap(),
        |store| store.check_integrity().unwrap(),
    )
    .await;
}
