//! RELIABILITY S15 on redb (the check is `slothqueue_conformance::disk_full`):
//! redb latches the I/O error of a full disk; the store reopens, so the
//! same handle works again once space is freed.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use slothqueue_conformance::disk_full::{Sizes, fails_cleanly_and_recovers};
use slothqueue_store_redb::{RedbOptions, RedbStore};

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_fails_cleanly_and_the_queue_recovers_when_space_is_freed() {
    let sizes = Sizes { file_name: "q.redb", filler_bytes: 1024 * 1024, payload_bytes: 4000 };
    fails_cleanly_and_recovers(
        sizes,
        |path| RedbStore::open(path, RedbOptions::default()).unwrap(),
        |store| store.check_integrity().unwrap(),
    )
    .await;
}
