//! RELIABILITY S16, found by the torture suite (`cargo xtask torture`): a
//! bit flip in the stored schema renamed a column or garbled a CHECK; the
//! file still opened, and commands then failed half-way with raw SQL
//! errors — `run` after it had already written its runner record, so a
//! refused file had changed. Now the open compares the whole schema with
//! the one its version must have and refuses a damaged file untouched.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use slothqueue_core::{NewJob, Store, StoreError, Timestamp};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

/// A queue with one job, then `damage` applied to its schema by hand.
async fn damaged(damage: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        store.push(NewJob::shell("true", "/tmp"), T).await.unwrap();
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(damage).unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
    drop(conn);
    (dir, path)
}

fn assert_refused_untouched(path: &std::path::Path, what: &str) {
    let before = std::fs::read(path).unwrap();
    let err = SqliteStore::open(path, SqliteOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { path: ref p, .. } if p == path), "{what}: {err:?}");
    let msg = err.to_string();
    assert!(msg.contains("schema") && !msg.contains('\n'), "{what}: {msg}");
    assert_eq!(std::fs::read(path).unwrap(), before, "{what}: a refused file was changed");
}

#[tokio::test]
async fn s16_a_renamed_column_is_refused_at_open() {
    let (_dir, path) = damaged("ALTER TABLE events RENAME COLUMN owner TO ownr").await;
    assert_refused_untouched(&path, "renamed events.owner");
    let (_dir, path) = damaged("ALTER TABLE jobs RENAME COLUMN started_at TO started_as").await;
    assert_refused_untouched(&path, "renamed jobs.started_at");
}

#[tokio::test]
async fn s16_a_garbled_check_constraint_is_refused_at_open() {
    let (_dir, path) = damaged(
        "PRAGMA writable_schema = ON;
         UPDATE sqlite_schema SET sql = replace(sql, '''pending''', '''p_nding''')
             WHERE name = 'jobs';
         PRAGMA writable_schema = OFF;",
    )
    .await;
    assert_refused_untouched(&path, "garbled CHECK");
}

#[tokio::test]
async fn s16_an_extra_index_is_refused_at_open() {
    let (_dir, path) = damaged("CREATE INDEX sneaky ON jobs (payload)").await;
    assert_refused_untouched(&path, "extra index");
}

/// Found by the `open_sqlite` fuzz target (`fuzz/`): a file whose header
/// names an unknown schema format (byte 44) was refused with SQLite's raw
/// "unsupported file format", an untyped storage error, instead of as a
/// damaged file; it must be refused as corrupt and left untouched.
#[test]
fn s16_an_unknown_schema_format_in_the_header_is_a_corrupt_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    drop(SqliteStore::open(&path, SqliteOptions::default()).unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[44..48].copy_from_slice(&8u32.to_be_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = SqliteStore::open(&path, SqliteOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { path: ref p, .. } if p == &path), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "a refused file was changed");
}

/// Found by the `open_sqlite` fuzz target: a v3 file (its schema intact)
/// whose damaged rows read back a NULL where v4's new column check runs;
/// the migration failed with a raw "NOT NULL constraint failed". A
/// constraint a migration's rows break is damage: refused as `Corrupt`,
/// the file untouched (the migration's transaction rolled back).
#[tokio::test]
async fn a_v3_file_whose_rows_break_the_v4_migration_is_refused_as_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v3-damaged-rows.sqlite");
    std::fs::copy(fixture, &path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path, SqliteOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { path: ref p, .. } if p == &path), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "a refused file was changed");
}
