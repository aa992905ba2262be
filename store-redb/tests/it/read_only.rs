//! `RedbStore::open_read_only`: commands that only look (`status`, `list`,
//! `show`, `logs`, `export`) must leave a queue byte-for-byte as they found
//! it, which a writable redb open does not (it rewrites the header on
//! opening and closing), and must still share the file with writers.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use slothqueue_core::{ListFilter, NewJob, Store, StoreError, Timestamp};
use slothqueue_store_redb::{RedbOptions, RedbStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn refused_as_read_only(err: &StoreError) -> bool {
    matches!(err, StoreError::Io { source, .. }
        if source.kind() == std::io::ErrorKind::ReadOnlyFilesystem)
}

async fn queue_of(path: &std::path::Path, n: usize) {
    let store = RedbStore::open(path, RedbOptions::default()).unwrap();
    for i in 0..n {
        store.push(NewJob::shell(format!("echo {i}"), "/tmp"), T).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_open_reads_refuses_writes_and_leaves_the_bytes_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    queue_of(&path, 3).await;
    let before = std::fs::read(&path).unwrap();
    let store = RedbStore::open_read_only(&path, RedbOptions::default()).unwrap();
    assert_eq!(store.stats(T).await.unwrap().pending, 3);
    assert_eq!(store.list(&ListFilter::default()).await.unwrap().len(), 3);
    assert_eq!(store.events(2).await.unwrap().len(), 1);
    assert!(store.next_due().await.unwrap().is_some());
    assert!(store.runners().await.unwrap().is_empty());
    let err = store.push(NewJob::shell("echo no", "/tmp"), T).await.unwrap_err();
    assert!(refused_as_read_only(&err), "{err:?}");
    let err = store.cancel(1, T).await.unwrap_err();
    assert!(refused_as_read_only(&err), "{err:?}");
    let err = store.check_integrity().unwrap_err();
    assert!(refused_as_read_only(&err), "{err:?}");
    drop(store);
    assert_eq!(std::fs::read(&path).unwrap(), before, "a read-only look changed the file");
    // A writable open, by contrast, rewrites the header (why this exists).
    drop(RedbStore::open(&path, RedbOptions::default()).unwrap());
    assert_ne!(std::fs::read(&path).unwrap(), before, "redb no longer rewrites on open");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_open_shares_the_file_with_a_live_writer_and_sees_its_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let writer = RedbStore::open(&path, RedbOptions::default()).unwrap();
    writer.push(NewJob::shell("echo 1", "/tmp"), T).await.unwrap();
    let reader = RedbStore::open_read_only(&path, RedbOptions::default()).unwrap();
    assert_eq!(reader.stats(T).await.unwrap().pending, 1);
    writer.push(NewJob::shell("echo 2", "/tmp"), T).await.unwrap();
    assert_eq!(reader.stats(T).await.unwrap().pending, 2);
    // A second writer still gets in beside the reader.
    let other = RedbStore::open(&path, RedbOptions::default()).unwrap();
    other.push(NewJob::shell("echo 3", "/tmp"), T).await.unwrap();
    assert_eq!(reader.list(&ListFilter::default()).await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_file_is_refused_untouched_and_a_missing_one_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.redb");
    std::fs::write(&empty, b"").unwrap();
    let err = RedbStore::open_read_only(&empty, RedbOptions::default()).unwrap_err();
    assert!(matches!(&err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("it is empty: not a queue yet"), "{err}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0, "the empty file was written");

    let tableless = dir.path().join("tableless.redb");
    drop(redb::Database::create(&tableless).unwrap());
    let bytes = std::fs::read(&tableless).unwrap();
    let err = RedbStore::open_read_only(&tableless, RedbOptions::default()).unwrap_err();
    assert!(err.to_string().contains("a redb database with no tables"), "{err}");
    assert_eq!(std::fs::read(&tableless).unwrap(), bytes, "the table-less file was written");

    let missing = dir.path().join("sub/missing.redb");
    let err = RedbStore::open_read_only(&missing, RedbOptions::default()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    assert!(!dir.path().join("sub").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn damaged_files_are_refused_or_read_read_only_and_never_changed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    queue_of(&path, 20).await;
    let good = std::fs::read(&path).unwrap();
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for cut in [1, 16, 100, 600, 5000, good.len() / 2, good.len() - 1] {
        cases.push((format!("cut at {cut}"), good[..cut].to_vec()));
    }
    // Flips spread over the file, header included; a fixed list, so a
    // failure is reproducible.
    for at in (0..good.len()).step_by(good.len() / 23 + 1).chain([0, 9, 12, 64, 200, 4096]) {
        let mut bad = good.clone();
        bad[at] ^= 0x5a;
        cases.push((format!("flip at {at}"), bad));
    }
    let mut refused = 0;
    for (n, (what, bytes)) in cases.iter().enumerate() {
        let copy = dir.path().join(format!("case-{n}.redb"));
        std::fs::write(&copy, bytes).unwrap();
        let outcome =
            std::panic::catch_unwind(|| RedbStore::open_read_only(&copy, RedbOptions::default()));
        match outcome {
            Err(_) => panic!("{what}: the open panicked"),
            Ok(Err(_)) => refused += 1,
            Ok(Ok(store)) => {
                // Whatever the reads answer, they must not panic or write.
                let _ = store.stats(T).await;
                let _ = store.list(&ListFilter::default()).await;
                let _ = store.events(1).await;
            }
        }
        assert_eq!(&std::fs::read(&copy).unwrap(), bytes, "{what}: the file changed");
    }
    assert!(refused > 0, "no damage was refused");
}
