//! README's recipe for a queue kept as sqlite3's text `.dump`: replayed
//! into a new file with SQLite's own `sqlite_sequence` lines left out (the
//! new file has no such table until a table with `AUTOINCREMENT` makes
//! one, so sqlite3 printed "no such table: sqlite_sequence" before the
//! open's refusal), then marked as slothqueue's, it opens with its jobs.
//! Needs the `sqlite3` program: SKIPPED without it, failed under `CI`.

#![expect(clippy::unwrap_used, reason = "helpers of tests: a failure is a panic")]

use std::path::Path;
use std::process::Command;

use slothqueue_core::{NewJob, Store, Timestamp};
use slothqueue_store_sqlite::{APPLICATION_ID, SCHEMA_VERSION, SqliteOptions, SqliteStore};

/// The replay, as README writes it (`q.sql` the dump, `new.db` the queue).
const REPLAY: &str = "grep -v -e '^DELETE FROM sqlite_sequence;$' -e '^INSERT INTO sqlite_sequence' q.sql | sqlite3 new.db";

fn have_sqlite3() -> bool {
    if Command::new("sqlite3").arg("-version").output().is_ok_and(|o| o.status.success()) {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but sqlite3 cannot be run: install sqlite3"
    );
    #[expect(clippy::print_stderr, reason = "a skipped test says so loudly")]
    let () = eprintln!(
        "SKIPPED: README's dump recipe, for want of sqlite3 (install it to run this test)"
    );
    false
}

/// Runs `script` with `sh` in `dir`; its exit status and its stderr.
fn sh(dir: &Path, script: &str) -> (bool, String) {
    let out = Command::new("sh").arg("-c").arg(script).current_dir(dir).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn a_dump_replayed_by_the_readme_recipe_opens_without_a_stray_error() {
    if !have_sqlite3() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let now = Timestamp::from_millis(1_700_000_000_000);
    let id = {
        let store = SqliteStore::open(&dir.path().join("q.db"), SqliteOptions::default()).unwrap();
        store.push(NewJob::shell("make backup", "/"), now).await.unwrap().job.id
    };
    let (ok, err) = sh(dir.path(), "sqlite3 q.db .dump > q.sql");
    assert!(ok, "{err}");
    // The plain replay trips on SQLite's own table: what the recipe avoids.
    let (_, err) = sh(dir.path(), "sqlite3 plain.db < q.sql");
    assert!(err.contains("no such table: sqlite_sequence"), "{err}");

    let (ok, err) = sh(dir.path(), REPLAY);
    assert!(ok && err.is_empty(), "the recipe printed: {err}");
    // Not yet marked: the open says so and how.
    let refused = SqliteStore::open(&dir.path().join("new.db"), SqliteOptions::default());
    let refused = refused.err().unwrap().to_string();
    assert!(refused.contains("PRAGMA application_id"), "{refused}");
    let mark = format!(
        "sqlite3 new.db 'PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION}'"
    );
    let (ok, err) = sh(dir.path(), &mark);
    assert!(ok && err.is_empty(), "{err}");
    let store = SqliteStore::open(&dir.path().join("new.db"), SqliteOptions::default()).unwrap();
    assert_eq!(store.get(id).await.unwrap().payload["command"], "make backup");
}
