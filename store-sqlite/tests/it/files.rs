//! What opening does to files on disk: a new queue is created private to
//! the user; a foreign, damaged, truncated or too-new file is refused and
//! left byte-for-byte as it was, with no `-wal`, `-shm` or `-journal` file
//! left beside it; ids are never reused.

#![expect(clippy::unwrap_used, reason = "helpers of tests: a failure is a panic")]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use slothqueue_core::{
    ClaimRequest, ClockOnly, Completion, Event, EventKind, Job, JobState, NewJob, Owner,
    PurgeFilter, Store, StoreError, Timestamp,
};
use slothqueue_store_sqlite::{
    APPLICATION_ID, Journal, SCHEMA_VERSION, SqliteOptions, SqliteStore, sniff,
};

fn t(secs: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn sidecars(path: &Path) -> Vec<PathBuf> {
    ["-wal", "-shm", "-journal"].iter().map(|s| sidecar(path, s)).filter(|p| p.exists()).collect()
}

/// Opening `path` fails with an error `check` accepts, and the file is
/// exactly as it was, alone in its directory.
fn assert_refused_untouched(path: &Path, check: impl Fn(&StoreError) -> bool) -> StoreError {
    let before = fs::read(path).unwrap();
    let mode_before = fs::metadata(path).unwrap().permissions();
    let err = SqliteStore::open(path, SqliteOptions::default()).unwrap_err();
    assert!(check(&err), "unexpected error for {}: {err:?}", path.display());
    assert!(err.to_string().contains(&path.display().to_string()), "names the file: {err}");
    assert!(fs::read(path).unwrap() == before, "{} was modified", path.display());
    assert_eq!(fs::metadata(path).unwrap().permissions(), mode_before);
    assert_eq!(sidecars(path), Vec::<PathBuf>::new(), "files left beside {}", path.display());
    err
}

fn is_corrupt(e: &StoreError) -> bool {
    matches!(e, StoreError::Corrupt { .. })
}

/// Deterministic noise without a dependency.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as u8
        })
        .collect()
}

/// A real queue with a few jobs, closed (so fully checkpointed).
async fn make_queue(path: &Path, journal: Journal) {
    let store =
        SqliteStore::open(path, SqliteOptions { journal, ..SqliteOptions::default() }).unwrap();
    for i in 0..40 {
        store
            .push(NewJob::shell(format!("echo {i} {}", "x".repeat(300)), "/"), t(0))
            .await
            .unwrap();
    }
    let c = store.claim(&ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly)), t(1)).await;
    let c = c.unwrap().unwrap();
    store.complete(c.job.id, &c.fence, Completion::default(), t(2)).await.unwrap();
    drop(store);
    assert_eq!(sidecars(path), Vec::<PathBuf>::new(), "a closed queue is one file");
}

#[test]
fn random_bytes_and_text_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("noise", noise(4096, 7)),
        ("short-noise", noise(10, 8)),
        ("text", b"hello, this is not a queue\n".to_vec()),
        ("redb", b"redb\x1a\x0a\xa9\x0d\x0a\0\0\0\0\0\0\0\0\0\0\0".to_vec()),
    ] {
        let path = dir.path().join(name);
        fs::write(&path, &bytes).unwrap();
        let err = assert_refused_untouched(&path, is_corrupt);
        assert!(err.to_string().contains("not a SQLite file"), "{err}");
    }
}

#[tokio::test]
async fn truncated_queues_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    for journal in [Journal::Wal, Journal::Rollback] {
        let good = dir.path().join(format!("good-{journal:?}"));
        make_queue(&good, journal).await;
        let bytes = fs::read(&good).unwrap();
        let len = bytes.len();
        assert!(len > 3 * 4096, "the queue spans several pages ({len} bytes)");
        for cut in [1, 15, 16, 50, 99, 100, 101, 512, 4096, 4097, len / 2, len - 4096, len - 1] {
            let path = dir.path().join(format!("cut-{journal:?}-{cut}"));
            fs::write(&path, &bytes[..cut]).unwrap();
            assert_refused_untouched(&path, is_corrupt);
        }
    }
}

#[tokio::test]
async fn damaged_pages_are_reported_as_corrupt_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    make_queue(&good, Journal::Wal).await;
    let bytes = fs::read(&good).unwrap();
    let pages = bytes.len() / 4096;
    for page in 1..pages {
        // Scribble over a b-tree page's header (scribbling over its unused
        // space would be harmless, and rightly go unnoticed).
        let mut bad = bytes.clone();
        let at = page * 4096;
        bad[at..at + 8].fill(0xff);
        let path = dir.path().join(format!("page-{page}"));
        fs::write(&path, &bad).unwrap();
        // Either refused at open, or every read and the integrity check say
        // corrupt; nothing panics and nothing claims success on bad data.
        let Ok(store) = SqliteStore::open(&path, SqliteOptions::default()) else { continue };
        let listed = store.list(&Default::default()).await;
        let checked = store.check_integrity();
        assert!(
            listed.is_err() || checked.is_err(),
            "page {page}: damage went unnoticed (list and integrity check both fine)"
        );
        if let Err(e) = checked {
            assert!(is_corrupt(&e), "{e:?}");
        }
    }
}

#[test]
fn another_programs_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    for (name, wal, app_id, tables) in [
        ("rollback-with-tables", false, 0, true),
        ("wal-with-tables", true, 0, true),
        ("other-app-id-empty", false, 0x1234_5678, false),
        ("other-app-id-wal", true, 0x1234_5678, true),
    ] {
        let path = dir.path().join(name);
        {
            let conn = Connection::open(&path).unwrap();
            if wal {
                conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(())).unwrap();
            }
            conn.execute_batch(&format!("PRAGMA application_id = {app_id}")).unwrap();
            if tables {
                conn.execute_batch(
                    "CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT);
                     INSERT INTO jobs (name) VALUES ('not ours');",
                )
                .unwrap();
            }
        }
        assert_eq!(sidecars(&path), Vec::<PathBuf>::new());
        assert!(sniff(&fs::read(&path).unwrap()));
        let err = assert_refused_untouched(&path, is_corrupt);
        assert!(err.to_string().contains("not a slothqueue queue"), "{err}");
    }
}

#[tokio::test]
async fn a_newer_schema_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    for journal in [Journal::Wal, Journal::Rollback] {
        let path = dir.path().join(format!("newer-{journal:?}"));
        make_queue(&path, journal).await;
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(&format!("PRAGMA user_version = {}", SCHEMA_VERSION + 1)).unwrap();
        }
        assert_eq!(sidecars(&path), Vec::<PathBuf>::new());
        let err = assert_refused_untouched(&path, |e| {
            matches!(e, StoreError::SchemaTooNew { found, supported, .. }
                if *found == SCHEMA_VERSION + 1 && *supported == SCHEMA_VERSION)
        });
        assert!(err.to_string().contains("newer slothqueue"), "{err}");
    }
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap_err();
    assert!(is_corrupt(&err), "{err:?}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_missing_file_and_directory_become_a_private_new_queue() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep/er/queue.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert_eq!(store.path(), path);
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    store.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let app: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0)).unwrap();
    let version: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!((app, version), (APPLICATION_ID, SCHEMA_VERSION));
}

/// A file someone else left empty (0 bytes, or a SQLite database with no
/// tables) is not adopted as a queue: it may be another program's. One not
/// touched for the busy timeout is refused at once, untouched.
#[test]
fn an_empty_file_or_empty_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    fs::write(&empty, b"").unwrap();
    let empty_db = dir.path().join("empty-db");
    Connection::open(&empty_db).unwrap().execute_batch("VACUUM").unwrap();
    let an_hour_ago = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for (path, says) in [(&empty, "it is empty"), (&empty_db, "a SQLite database with no tables")] {
        fs::File::options().write(true).open(path).unwrap().set_modified(an_hour_ago).unwrap();
        let err = assert_refused_untouched(path, |e| matches!(e, StoreError::Corrupt { .. }));
        assert!(err.to_string().contains(says), "{err}");
    }
}

/// An empty file is what another slothqueue creating the queue makes
/// first: an open that finds one waits for it to become a queue (here:
/// a queue copied over it 100 ms later) rather than refusing it, and a
/// fresh one that stays empty is refused once the busy timeout is over.
#[tokio::test(flavor = "multi_thread")]
async fn an_empty_file_being_made_a_queue_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let made = dir.path().join("made.db");
    let store = SqliteStore::open(&made, SqliteOptions::default()).unwrap();
    store.push(NewJob::shell("echo made", "/"), t(0)).await.unwrap();
    drop(store);
    let path = dir.path().join("q.db");
    fs::write(&path, b"").unwrap();
    let creator = {
        let (made, path) = (made.clone(), path.clone());
        std::thread::spawn(move || {
            nap(Duration::from_millis(100));
            fs::copy(made, path).unwrap();
        })
    };
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    creator.join().unwrap();
    assert_eq!(store.get(1).await.unwrap().command(), Some("echo made"));

    let stays = dir.path().join("stays.db");
    fs::write(&stays, b"").unwrap();
    let options = SqliteOptions { busy_timeout: Duration::from_millis(200), ..Default::default() };
    let err = SqliteStore::open(&stays, options).unwrap_err();
    assert!(matches!(&err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(fs::metadata(&stays).unwrap().len(), 0);
}

#[expect(clippy::disallowed_methods, reason = "a test's stand-in for another process's pace")]
fn nap(d: Duration) {
    std::thread::sleep(d);
}

#[tokio::test]
async fn ids_are_never_reused_and_restored_ids_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    for _ in 0..3 {
        let id = store.push(NewJob::shell("true", "/"), t(0)).await.unwrap().job.id;
        store.cancel(id, t(1)).await.unwrap();
    }
    assert_eq!(store.purge(&PurgeFilter::default()).await.unwrap(), vec![1, 2, 3]);
    assert!(matches!(store.events(2).await, Err(StoreError::NotFound(2))));
    drop(store);
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert_eq!(store.push(NewJob::shell("true", "/"), t(2)).await.unwrap().job.id, 4);

    let mut job: Job = store.get(4).await.unwrap();
    job.id = 100;
    job.state = JobState::Done;
    job.finished_at = Some(t(3));
    let trail =
        vec![Event::new(100, EventKind::Pushed, t(2)), Event::new(100, EventKind::Completed, t(3))];
    store.restore(job.clone(), trail.clone()).await.unwrap();
    assert_eq!(store.get(100).await.unwrap(), job);
    assert_eq!(store.events(100).await.unwrap(), trail);
    assert!(matches!(store.restore(job, vec![]).await, Err(StoreError::InvalidInput(_))));
    assert_eq!(store.push(NewJob::shell("true", "/"), t(4)).await.unwrap().job.id, 101);
    store.check_integrity().unwrap();
}

#[tokio::test]
async fn s17_several_handles_creating_one_new_queue_at_once_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
    let openers: Vec<_> = (0..6)
        .map(|_| {
            let (path, barrier) = (path.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                SqliteStore::open(&path, SqliteOptions::default())
            })
        })
        .collect();
    let stores: Vec<SqliteStore> =
        openers.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
    for (i, s) in stores.iter().enumerate() {
        s.push(NewJob::shell(format!("echo {i}"), "/"), t(0)).await.unwrap();
    }
    assert_eq!(stores[0].stats(t(0)).await.unwrap().pending, 6);
    stores[0].check_integrity().unwrap();
}

/// Another database's WAL left where a new queue is created is not
/// replayed into it.
#[tokio::test]
async fn a_stale_wal_beside_a_new_queue_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.db");
    let conn = Connection::open(&other).unwrap();
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(())).unwrap();
    conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);").unwrap();
    let path = dir.path().join("q.db");
    fs::copy(sidecar(&other, "-wal"), sidecar(&path, "-wal")).unwrap();
    drop(conn);
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert_eq!(store.push(NewJob::shell("true", "/"), t(0)).await.unwrap().job.id, 1);
    store.check_integrity().unwrap();
}

/// Another database's WAL beside an existing queue (torture S16's stale
/// `-wal`) is refused and the queue left as it was: the file's header
/// alone says "a current queue", but only a read-only look may read what
/// the WAL makes of it; a writing connection would replay the WAL and
/// checkpoint it into the file as it closed.
#[tokio::test]
async fn a_stale_wal_beside_an_existing_queue_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    make_queue(&path, Journal::Wal).await;
    let other = dir.path().join("other.db");
    let conn = Connection::open(&other).unwrap();
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(())).unwrap();
    conn.execute_batch(
        "PRAGMA wal_autocheckpoint = 0; CREATE TABLE t (x); INSERT INTO t VALUES (1);",
    )
    .unwrap();
    fs::copy(sidecar(&other, "-wal"), sidecar(&path, "-wal")).unwrap();
    drop(conn);
    let before = fs::read(&path).unwrap();
    let err = SqliteStore::open(&path, SqliteOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(fs::read(&path).unwrap(), before, "the refused queue was changed");
}

const CREATOR_ENV: &str = "SLOTHQUEUE_SQLITE_CREATOR_CHILD";

/// In the child: open (creating) the queue named by the environment and
/// push one job. Does nothing in an ordinary run.
#[tokio::test]
async fn creator_child() {
    let Ok(path) = std::env::var(CREATOR_ENV) else { return };
    let store = SqliteStore::open(Path::new(&path), SqliteOptions::default()).unwrap();
    store.push(NewJob::shell("echo child", "/"), t(0)).await.unwrap();
}

/// S17 across processes: six processes creating one new queue at once all
/// succeed, over several rounds. Only the one whose `O_EXCL` create won
/// makes the schema; the others find an empty file and wait for it.
#[tokio::test(flavor = "multi_thread")]
async fn s17_several_processes_creating_one_new_queue_at_once_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..5 {
        let path = dir.path().join(format!("q{round}.db"));
        let children: Vec<_> = (0..6)
            .map(|_| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", "files::creator_child", "--test-threads", "1"])
                    .env(CREATOR_ENV, &path)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        assert_eq!(store.stats(t(0)).await.unwrap().pending, 6, "round {round}");
        store.check_integrity().unwrap();
    }
}
