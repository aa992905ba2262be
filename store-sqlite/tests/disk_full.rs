//! RELIABILITY S15, disk full, on a real full filesystem: a 2 MiB tmpfs
//! (mounting needs the privilege to mount; where it is missing the test
//! says so and checks nothing). Found by the torture suite: a long-lived
//! handle (a runner) kept failing after space was freed, because the WAL,
//! which had filled the disk, ate the freed space again before any
//! checkpoint could give its own back.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::Path;
use std::process::Command;

use slothqueue_core::{NewJob, Store, StoreError, Timestamp};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

/// Unmounts on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .is_ok_and(|o| o.status.success());
        ok.then_some(Tmpfs(dir))
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn s15_space_freed_after_a_full_disk_is_not_eaten_by_the_wal() {
    let Some(fs) = Tmpfs::mount("2m") else {
        // Not permitted here (no privilege to mount): nothing to check.
        return;
    };
    let path = fs.path().join("q.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let filler = fs.path().join("filler");
    std::fs::write(&filler, vec![1u8; 600 * 1024]).unwrap();
    let big = "x".repeat(16 * 1024);
    let mut pushed = 0u64;
    let err = loop {
        match store.push(NewJob::shell(format!("echo {pushed} {big}"), "/tmp"), T).await {
            Ok(_) => pushed += 1,
            Err(e) => break e,
        }
        assert!(pushed < 10_000, "the disk never filled");
    };
    assert!(matches!(err, StoreError::DiskFull(_)), "{err:?}");

    std::fs::remove_file(&filler).unwrap();
    // The same handle carries on, and keeps carrying on: the freed space
    // is not swallowed by the WAL.
    for i in 0..30 {
        store
            .push(NewJob::shell(format!("echo after {i} {big}"), "/tmp"), T)
            .await
            .unwrap_or_else(|e| panic!("push {i} after space was freed: {e}"));
    }
    assert_eq!(store.stats(T).await.unwrap().pending, pushed + 30);
    store.check_integrity().unwrap();
}
