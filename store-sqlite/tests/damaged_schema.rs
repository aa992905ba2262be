//! RELIABILITY S16, found by the torture suite (`cargo xtask torture`): a
//! bit flip in the stored schema renamed a column; the file still opened,
//! and every query then failed with a raw, multi-line SQL error and exit
//! code 1 instead of "damaged file" (exit code 6) naming the file.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use slothqueue_core::{NewJob, Store, StoreError, Timestamp};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

#[tokio::test]
async fn s16_a_damaged_schema_is_a_corrupt_file_not_a_storage_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let id = {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        store.push(NewJob::shell("true", "/tmp"), T).await.unwrap().job.id
    };
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("ALTER TABLE events RENAME COLUMN owner TO ownr").unwrap();
    }
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let err = store.events(id).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { path: ref p, .. } if p == &path), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("no such column: owner") && !msg.contains('\n'), "{msg}");
    let err = store.push(NewJob::shell("true", "/tmp"), T).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
}

/// Found by the `open_sqlite` fuzz target (`fuzz/`): a file whose header
/// names an unknown schema format (byte 44) was refused with SQLite's raw
/// "unsupported file format", an untyped storage error, instead of as a
/// damaged file; it must be refused as corrupt and left untouched.
#[test]
fn an_unknown_schema_format_in_the_header_is_a_corrupt_file() {
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
