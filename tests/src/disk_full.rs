//! Disk full (S15 in docs/reliability.md), on a real full filesystem: a
//! 2 MiB tmpfs. One check for every backend, called from each store's
//! `tests/disk_full.rs` (it needs the privilege to mount, so it is not a
//! conformance scenario; without the privilege it says so and checks
//! nothing).
//!
//! The failing call answers `DiskFull` naming the file, nothing
//! half-written is visible, and once space is freed the same handle works
//! again and keeps working: SQLite's WAL, which had filled the disk, once
//! ate the freed space again before any checkpoint gave its own back, and
//! redb latches an I/O error until the store reopens.

use std::path::Path;
use std::process::Command;

use slothqueue_core::{NewJob, Store, StoreError, Timestamp};

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
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// How to fill the disk for one backend: sizes that make it fill within a
/// few hundred pushes and leave room for 30 more once the filler is gone.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// The queue file's name inside the tmpfs.
    pub file_name: &'static str,
    /// The deletable file that takes most of the 2 MiB.
    pub filler_bytes: usize,
    /// The size of each job's command.
    pub payload_bytes: usize,
}

/// Fills a 2 MiB tmpfs through the store that `open` opens, frees space,
/// and checks the same handle recovers; `integrity` runs the backend's own
/// full check at the end. Where mounting is not permitted it checks
/// nothing (the torture suite's S15 prints that reason).
pub async fn fails_cleanly_and_recovers<S: Store>(
    sizes: Sizes,
    open: impl FnOnce(&Path) -> S,
    integrity: impl FnOnce(&S),
) {
    let Some(fs) = Tmpfs::mount("2m") else {
        // Not permitted here (no privilege to mount): nothing to check.
        return;
    };
    let path = fs.0.path().join(sizes.file_name);
    let store = open(&path);
    let filler = fs.0.path().join("filler");
    std::fs::write(&filler, vec![1u8; sizes.filler_bytes]).unwrap();

    let big = "x".repeat(sizes.payload_bytes);
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
    let last = *pushed.last().expect("some pushes fit before the disk filled");

    std::fs::remove_file(&filler).unwrap();
    // The same handle carries on, and keeps carrying on.
    for i in 0..30 {
        let next = store
            .push(NewJob::shell(format!("echo after {i} {big}"), "/tmp"), T)
            .await
            .unwrap_or_else(|e| panic!("push {i} after space was freed: {e}"));
        assert!(next.job.id > last);
    }
    // It holds exactly what was acknowledged.
    assert_eq!(store.stats(T).await.unwrap().pending, pushed.len() as u64 + 30);
    for id in &pushed {
        store.get(*id).await.unwrap();
    }
    integrity(&store);
}
