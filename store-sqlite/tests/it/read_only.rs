//! `SqliteStore::open_read_only`, for commands that only look: it creates
//! nothing, refuses an empty file (0 bytes, or a database with no tables)
//! untouched, refuses every write, and still reads a queue whose folder
//! cannot be written (a read-only filesystem, a full disk), where SQLite
//! cannot make its `-shm` file: immutable then, and saying so.

#![expect(clippy::unwrap_used, reason = "helpers of tests: a failure is a panic")]

use std::fs;
use std::path::Path;
use std::process::Command;

use rusqlite::Connection;
use slothqueue_core::{JobState, ListFilter, NewJob, Store, StoreError, Timestamp};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

async fn queue_of(path: &Path, jobs: usize) {
    let store = SqliteStore::open(path, SqliteOptions::default()).unwrap();
    for i in 0..jobs {
        store.push(NewJob::shell(format!("echo {i}"), "/"), T).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_open_refuses_empty_files_untouched_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.db");
    fs::write(&empty, b"").unwrap();
    let tableless = dir.path().join("tableless.db");
    Connection::open(&tableless).unwrap().execute_batch("VACUUM").unwrap();
    let before = names_in(dir.path());
    for (path, says) in [(&empty, "it is empty"), (&tableless, "a SQLite database with no tables")]
    {
        let bytes = fs::read(path).unwrap();
        let err = SqliteStore::open_read_only(path, SqliteOptions::default()).unwrap_err();
        assert!(matches!(&err, StoreError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains(says), "{err}");
        assert!(err.to_string().contains("not a queue yet"), "{err}");
        assert_eq!(fs::read(path).unwrap(), bytes, "{} was written", path.display());
    }
    let missing = dir.path().join("sub/missing.db");
    let err = SqliteStore::open_read_only(&missing, SqliteOptions::default()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    assert_eq!(names_in(dir.path()), before, "nothing was created beside them");
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_store_reads_sees_later_commits_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    queue_of(&path, 2).await;
    let reader = SqliteStore::open_read_only(&path, SqliteOptions::default()).unwrap();
    assert_eq!(reader.read_only_note(), None);
    assert_eq!(reader.stats(T).await.unwrap().pending, 2);
    assert_eq!(reader.get(1).await.unwrap().state, JobState::Pending);
    let err = reader.push(NewJob::shell("echo no", "/"), T).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::ReadOnlyFilesystem),
        "{err:?}"
    );
    let err = reader.cancel(1, T).await.unwrap_err();
    assert!(matches!(&err, StoreError::Io { .. }), "{err:?}");
    let writer = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    writer.push(NewJob::shell("echo 3", "/"), T).await.unwrap();
    assert_eq!(reader.list(&ListFilter::default()).await.unwrap().len(), 3, "a later commit");
}

/// A tmpfs mounted for one test (root only), unmounted on drop.
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

    fn remount_read_only(&self) -> bool {
        Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(self.path())
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.path()).status();
    }
}

#[expect(clippy::print_stderr, reason = "a skipped check says so")]
fn skip(why: &str) {
    eprintln!("SKIPPED: {why}");
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_open_reads_a_queue_on_a_read_only_filesystem() {
    let Some(fs_) = Tmpfs::mount("8m") else {
        return skip("cannot mount a tmpfs here (needs root): read-only filesystem not checked");
    };
    let path = fs_.path().join("q.db");
    queue_of(&path, 3).await;
    let bytes = fs::read(&path).unwrap();
    if !fs_.remount_read_only() {
        return skip("cannot remount the tmpfs read-only: read-only filesystem not checked");
    }
    let reader = SqliteStore::open_read_only(&path, SqliteOptions::default()).unwrap();
    let note = reader.read_only_note().expect("the store says it opened immutable");
    assert!(note.starts_with("opened immutable: its folder cannot be written"), "{note}");
    assert_eq!(reader.stats(T).await.unwrap().pending, 3);
    assert_eq!(reader.get(3).await.unwrap().command(), Some("echo 2"));
    assert!(reader.events(1).await.unwrap().len() == 1);
    drop(reader);
    assert_eq!(fs::read(&path).unwrap(), bytes);
    assert_eq!(names_in(fs_.path()), ["q.db"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_open_reads_a_queue_on_a_full_disk() {
    let Some(fs_) = Tmpfs::mount("1m") else {
        return skip("cannot mount a tmpfs here (needs root): full disk not checked");
    };
    let path = fs_.path().join("q.db");
    queue_of(&path, 3).await;
    // Fill every byte left.
    let filler = fs_.path().join("filler");
    let chunk = vec![0u8; 4096];
    let mut f = fs::File::create(&filler).unwrap();
    while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
    drop(f);
    let reader = SqliteStore::open_read_only(&path, SqliteOptions::default()).unwrap();
    let note = reader.read_only_note().expect("the store says it opened immutable");
    assert!(note.starts_with("opened immutable: the disk is full"), "{note}");
    assert_eq!(reader.stats(T).await.unwrap().pending, 3);
    assert_eq!(reader.list(&ListFilter::default()).await.unwrap().len(), 3);
}

/// Commits still in the WAL cannot be read without `-shm`: the immutable
/// look sees the file as of the last checkpoint, and the note says what it
/// does not see.
#[tokio::test(flavor = "multi_thread")]
async fn read_only_open_on_a_read_only_filesystem_says_what_the_wal_holds() {
    let Some(fs_) = Tmpfs::mount("8m") else {
        return skip("cannot mount a tmpfs here (needs root): read-only filesystem not checked");
    };
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("q.db");
    queue_of(&live, 2).await;
    let writer = SqliteStore::open(&live, SqliteOptions::default()).unwrap();
    writer.push(NewJob::shell("echo in the wal", "/"), T).await.unwrap();
    let path = fs_.path().join("q.db");
    fs::copy(&live, &path).unwrap();
    fs::copy(dir.path().join("q.db-wal"), fs_.path().join("q.db-wal")).unwrap();
    drop(writer);
    if !fs_.remount_read_only() {
        return skip("cannot remount the tmpfs read-only: read-only filesystem not checked");
    }
    let reader = SqliteStore::open_read_only(&path, SqliteOptions::default()).unwrap();
    let note = reader.read_only_note().expect("the store says it opened immutable");
    assert!(note.contains("the commits still in") && note.contains("q.db-wal"), "{note}");
    assert_eq!(reader.stats(T).await.unwrap().pending, 2, "the WAL's job is not seen");
}
