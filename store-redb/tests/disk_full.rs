//! RELIABILITY S15, disk full, on a real full filesystem: a 2 MiB tmpfs
//! (mounting needs the privilege to mount; where it is missing the test
//! says so and checks nothing). The failing call answers `DiskFull`,
//! nothing half-written is visible, and once space is freed the same
//! handle works again (redb latches the I/O error; the store reopens).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::Path;
use std::process::Command;

use slothqueue_core::{NewJob, Store, StoreError, Timestamp};
use slothqueue_store_redb::{RedbOptions, RedbStore};

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
async fn a_full_disk_fails_cleanly_and_the_queue_recovers_when_space_is_freed() {
    let Some(fs) = Tmpfs::mount("2m") else {
        // Not permitted here (no privilege to mount): nothing to check.
        return;
    };
    let path = fs.path().join("q.redb");
    let store = RedbStore::open(&path, RedbOptions::default()).unwrap();
    // Most of the space goes to a file we can delete later.
    let filler = fs.path().join("filler");
    std::fs::write(&filler, vec![1u8; 1024 * 1024]).unwrap();

    let big = "x".repeat(4000);
    let mut pushed = Vec::new();
    let err = loop {
        match store.push(NewJob::shell(format!("echo {} {big}", pushed.len()), "/tmp"), T).await {
            Ok(p) => pushed.push(p.job.id),
            Err(e) => break e,
        }
        assert!(pushed.len() < 10_000, "the disk never filled");
    };
    assert!(matches!(err, StoreError::DiskFull(ref p) if p == &path), "{err:?}");
    assert!(err.to_string().contains("no space left"), "{err}");
    assert!(!pushed.is_empty());

    std::fs::remove_file(&filler).unwrap();
    // The same handle works again, and holds exactly what was acknowledged.
    let next = store.push(NewJob::shell("echo after", "/tmp"), T).await.unwrap();
    let stats = store.stats(T).await.unwrap();
    assert_eq!(stats.pending, pushed.len() as u64 + 1);
    for id in &pushed {
        store.get(*id).await.unwrap();
    }
    assert!(next.job.id > *pushed.last().unwrap());
    store.check_integrity().unwrap();
}
