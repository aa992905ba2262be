//! Files that are not a healthy slothqueue redb queue are refused with a
//! typed error, never a panic, and are left byte-for-byte as they were.

#![allow(clippy::unwrap_used, reason = "a test failure is a panic")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use slothqueue_core::{NewJob, StoreError, Timestamp};
use slothqueue_store_redb::{RedbOptions, RedbStore, SCHEMA_VERSION, sniff};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn open(path: &Path) -> Result<RedbStore, StoreError> {
    RedbStore::open(path, RedbOptions::default())
}

/// A closed queue with a few jobs and events in it.
fn healthy_queue(dir: &Path) -> PathBuf {
    let path = dir.join("healthy.redb");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use slothqueue_core::Store;
        let s = open(&path).unwrap();
        for i in 0..40 {
            let job =
                NewJob::shell(format!("echo {i} {}", "x".repeat(200)), "/tmp").priority(i % 5);
            s.push(job, T).await.unwrap();
        }
    });
    path
}

/// Opens `path` and insists on a refusal that leaves the file unchanged.
fn assert_refused_untouched(path: &Path, what: &str) -> StoreError {
    let before = std::fs::read(path).unwrap();
    let outcome = std::panic::catch_unwind(|| open(path));
    let err = match outcome {
        Ok(Ok(_)) => panic!("{what}: opened"),
        Ok(Err(e)) => e,
        Err(_) => panic!("{what}: the open panicked"),
    };
    assert_eq!(std::fs::read(path).unwrap(), before, "{what}: the file changed");
    assert!(!path.with_extension("redb-journal").exists());
    err
}

fn assert_corrupt(err: &StoreError, path: &Path, what: &str) {
    match err {
        StoreError::Corrupt { path: p, .. } => assert_eq!(p, path, "{what}"),
        other => panic!("{what}: expected Corrupt, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{what}: {message}");
}

/// A small deterministic generator, so failures reproduce.
fn lcg(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *seed >> 33
}

#[test]
fn random_bytes_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 7;
    for len in [1usize, 8, 9, 100, 4096, 70_000] {
        let path = dir.path().join(format!("random-{len}"));
        let bytes: Vec<u8> = (0..len).map(|_| lcg(&mut seed) as u8).collect();
        std::fs::write(&path, bytes).unwrap();
        let err = assert_refused_untouched(&path, "random bytes");
        assert_corrupt(&err, &path, "random bytes");
    }
}

#[test]
fn a_text_file_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "remember the milk\n").unwrap();
    let err = assert_refused_untouched(&path, "text");
    assert_corrupt(&err, &path, "text");
}

#[test]
fn a_sqlite_file_is_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.resize(4096, 0);
    std::fs::write(&path, bytes).unwrap();
    let err = assert_refused_untouched(&path, "sqlite");
    assert_corrupt(&err, &path, "sqlite");
    assert!(err.to_string().contains("SQLite"), "{err}");
}

#[test]
fn truncated_queues_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let healthy = healthy_queue(dir.path());
    let full = std::fs::read(&healthy).unwrap();
    assert!(sniff(&full));
    let mut seed = 11;
    let mut cuts: Vec<usize> = vec![9, 10, 64, 100, 511, 4096, full.len() - 1];
    cuts.extend((0..13).map(|_| 9 + lcg(&mut seed) as usize % (full.len() - 9)));
    for cut in cuts {
        let path = dir.path().join(format!("cut-{cut}.redb"));
        std::fs::write(&path, &full[..cut]).unwrap();
        let err = assert_refused_untouched(&path, &format!("cut at {cut}"));
        assert_corrupt(&err, &path, &format!("cut at {cut}"));
    }
}

#[test]
fn a_newer_schema_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = healthy_queue(dir.path());
    {
        // What a newer slothqueue would have written.
        const META: redb::TableDefinition<'static, &str, u64> =
            redb::TableDefinition::new("slothqueue_meta");
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert("schema_version", u64::from(SCHEMA_VERSION) + 1)
            .unwrap();
        txn.commit().unwrap();
    }
    let err = assert_refused_untouched(&path, "newer schema");
    match err {
        StoreError::SchemaTooNew { path: p, found, supported } => {
            assert_eq!((p, found, supported), (path.clone(), SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}

/// A newer slothqueue migrating the file while a handle of this build is
/// open (a runner left going across an upgrade): the handle's next write
/// is refused, not written in this build's layout; its reads go on.
#[tokio::test(flavor = "multi_thread")]
async fn a_handle_refuses_to_write_once_a_newer_build_migrated_its_file() {
    use slothqueue_core::Store;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let s = open(&path).unwrap();
    s.push(NewJob::shell("echo 1", "/tmp"), T).await.unwrap();
    {
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
    }
    let err = s.push(NewJob::shell("echo 2", "/tmp"), T).await.unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaTooNew { found, .. } if found == SCHEMA_VERSION + 1),
        "{err:?}"
    );
    assert_eq!(s.stats(T).await.unwrap().pending, 1, "nothing was written");
}

#[test]
fn another_programs_redb_file_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("theirs.redb");
    {
        const THEIRS: redb::TableDefinition<'static, &str, &str> =
            redb::TableDefinition::new("settings");
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(THEIRS).unwrap().insert("theme", "dark").unwrap();
        txn.commit().unwrap();
    }
    let err = assert_refused_untouched(&path, "foreign redb");
    assert_corrupt(&err, &path, "foreign redb");
    assert!(err.to_string().contains("settings"), "{err}");
}

#[test]
fn flipped_bytes_never_panic_and_a_refusal_leaves_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let healthy = healthy_queue(dir.path());
    let full = std::fs::read(&healthy).unwrap();
    let mut seed = 23;
    for round in 0..12 {
        let path = dir.path().join(format!("flipped-{round}.redb"));
        let mut bytes = full.clone();
        for _ in 0..4 {
            // Past the magic number, which only the sniff would catch.
            let at = 9 + lcg(&mut seed) as usize % (bytes.len() - 9);
            bytes[at] ^= 1 << (lcg(&mut seed) % 8);
        }
        std::fs::write(&path, &bytes).unwrap();
        // Damage in a page nothing reads may go unnoticed by an open; what
        // is promised is no panic, and no write to a file that is refused.
        match std::panic::catch_unwind(|| open(&path)) {
            Err(_) => panic!("round {round}: the open panicked"),
            Ok(Err(_)) => assert_eq!(std::fs::read(&path).unwrap(), bytes, "round {round}"),
            Ok(Ok(_)) => {}
        }
    }
}

#[test]
fn a_missing_file_becomes_a_new_private_queue_in_a_new_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/queue.redb");
    let store = open(&path).unwrap();
    assert_eq!(store.path(), path);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(sniff(&std::fs::read(&path).unwrap()));
    store.check_integrity().unwrap();
}

#[test]
fn a_zero_byte_file_becomes_a_new_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.redb");
    std::fs::write(&path, b"").unwrap();
    let store = open(&path).unwrap();
    store.check_integrity().unwrap();
    drop(store);
    // And it opens again as the same queue.
    open(&path).unwrap().check_integrity().unwrap();
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
}

#[test]
fn a_blank_file_is_waited_for_then_refused_untouched() {
    // redb writes the magic number last when it creates a file: a blank
    // header may be another process creating the queue right now.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blank.redb");
    std::fs::write(&path, vec![0u8; 4096]).unwrap();
    let options = RedbOptions {
        lock_timeout: std::time::Duration::from_millis(200),
        ..RedbOptions::default()
    };
    let err = RedbStore::open(&path, options).unwrap_err();
    assert_corrupt(&err, &path, "blank");
    assert!(err.to_string().contains("blank"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), vec![0u8; 4096]);
}

#[test]
fn processes_creating_one_queue_at_once_all_succeed() {
    // Threads stand in for processes: each open is its own redb handle.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.redb");
    let opened: Vec<_> = (0..6)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || open(&path).map(|_| ()))
        })
        .collect();
    for o in opened {
        o.join().unwrap().unwrap();
    }
    open(&path).unwrap().check_integrity().unwrap();
}

/// Each version's own tables are checked before anything is written: a
/// current queue missing `schedules` (schema 4) or `held`, or a v3 queue
/// missing `lanes` or a v2 queue missing `waiting_on_parents` (each would
/// be migrated from a layout it does not have), is refused untouched.
#[test]
fn a_queue_missing_a_table_of_its_version_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let healthy = healthy_queue(dir.path());
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let (v2, v3) = (data.join("v2.redb"), data.join("v3.redb"));
    for (from, table) in
        [(&healthy, "schedules"), (&healthy, "held"), (&v3, "lanes"), (&v2, "waiting_on_parents")]
    {
        let path = dir.path().join(format!("without-{table}.redb"));
        std::fs::copy(from, &path).unwrap();
        {
            let db = redb::Database::open(&path).unwrap();
            let txn = db.begin_write().unwrap();
            let def: redb::TableDefinition<'_, i64, ()> = redb::TableDefinition::new(table);
            assert!(txn.delete_table(def).unwrap(), "{table} was there");
            txn.commit().unwrap();
        }
        let err = assert_refused_untouched(&path, table);
        assert_corrupt(&err, &path, table);
        assert!(err.to_string().contains(&format!("`{table}` is missing")), "{err}");
    }
}
