//! Torture S16 on redb, two finds on damaged files, each pinned by a
//! checked-in reproducer. The first, a damaged allocator state found by
//! the proptest in `properties.rs` with a random seed and minimized to one byte,
//! once aborted the process; now the open refuses the file.
//!
//! The reproducer, `tests/data/s16_damaged_allocator.redb`, is a valid
//! queue (5 jobs pushed with keys `k0`..`k4`, one claimed and completed,
//! one claimed) with one byte flipped: offset 12521, 159 → 227, inside a page of the tree
//! the header's primary commit slot points to. A plain redb open trusts
//! the file (redb verifies page checksums only in its repair and
//! integrity check), so `push` and `claim` succeeded, then
//! `Database::close`, writing the allocator state, handed out a page that
//! was already in use: a panic in redb's write cache (cached_file.rs:97)
//! with its mutex held, then a second one in `WritablePage::drop` on the
//! poisoned mutex while unwinding, which aborts whatever `catch_unwind`
//! the store wraps around the close. The fix: every writable open runs
//! redb's integrity check first (`schema::open_writable`), which names
//! this file ("Primary is corrupted despite 2-phase commit").

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::Path;
use std::sync::Arc;

use slothqueue_core::{
    ClaimRequest, ClockOnly, ListFilter, NewJob, Owner, Store, StoreError, Timestamp,
};
use slothqueue_store_redb::{RedbOptions, RedbStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

/// Set in the child process that runs the reproducer.
const CHILD: &str = "SQ_REDB_ABORT_CHILD";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// What the fuzz target does with an opened file. Before the fix the
/// open succeeded and the drop at the end aborted the process; now the
/// open must be refused, as a damaged file, with nothing written.
fn use_damaged(path: &Path) {
    let before = std::fs::read(path).unwrap();
    let store = match RedbStore::open(path, RedbOptions::default()) {
        Ok(store) => Arc::new(store) as Arc<dyn Store>,
        Err(e) => {
            assert!(matches!(e, StoreError::Corrupt { .. }), "refused, but not as damaged: {e:?}");
            assert_eq!(std::fs::read(path).unwrap(), before, "the refused file was written to");
            return;
        }
    };
    rt().block_on(async {
        let _ = store.list(&ListFilter::default()).await;
        let _ = store.stats(T).await;
        let _ = store.push(NewJob::shell("true", "/tmp"), T).await;
        let _ = store.claim(&ClaimRequest::new(Owner::named("fuzz"), Arc::new(ClockOnly)), T).await;
    });
    drop(store);
    panic!("the damaged file was opened for writing");
}

#[test]
fn s16_a_damaged_allocator_state_is_refused_at_open_instead_of_aborting() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    if std::env::var_os(CHILD).is_some() {
        let path = std::env::var_os(CHILD).unwrap();
        use_damaged(Path::new(&path));
        return;
    }
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/s16_damaged_allocator.redb");
    std::fs::copy(&fixture, &path).unwrap();
    // In a child: the abort would take the test harness with it.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "s16_a_damaged_allocator_state_is_refused_at_open_instead_of_aborting"])
        .arg("--nocapture")
        .env(CHILD, &path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
}

/// Found by the `open_redb` fuzz target after the fix above: a damaged file
/// that redb's read-only open accepts but a writable open must recover
/// first (its stored layout disagrees with the file's length). redb
/// rewrote the header (one byte of the layout, at offset 28) and only then
/// found the trees corrupt, so the refused file had changed.
#[test]
fn s16_a_damaged_file_needing_recovery_is_refused_with_its_header_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/s16_unclean_damaged_header.redb");
    std::fs::copy(&fixture, &path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let err = RedbStore::open(&path, RedbOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the refused file was written to");
}
