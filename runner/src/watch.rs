//! [`QueueWatch`]: wakes whoever waits on a queue when its file changes,
//! whichever process changed it.
//!
//! Every commit to a queue in a file writes one of a few files, which the
//! store names ([`Store::watched_files`]: the file itself, a write-ahead
//! log beside it): the watch knows no backend's file layout. It is on
//! each file's *folder* (a watch on a file alone would miss one created
//! later, and a file replaced by a rename), filtered to those names,
//! through the `notify` crate (inotify on Linux). Its watcher thread
//! blocks in the kernel with no timeout: a waiter costs nothing until a
//! commit lands.
//!
//! Notifications are not a guarantee (a network filesystem, a full
//! inotify table, a folder replaced under the watch), so every wait also
//! looks again on a long poll ([`QueueWatch::poll_interval`]), and a
//! watch that could not be made at all polls often instead and says why
//! ([`QueueWatch::notice`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use slothqueue_core::{ChangeGuard, ChangeWaker, Store};
use tokio::sync::watch;

/// How often a wait looks again although no notification came: they can
/// be missed on some filesystems. Long, because they normally do come.
pub const NOTIFIED_POLL: Duration = Duration::from_secs(10);

/// How often a wait looks when there are no notifications at all.
pub const UNNOTIFIED_POLL: Duration = Duration::from_secs(1);

/// Changes to one queue file, seen by every waiter of this process.
///
/// Made once per process (or per server) and shared: each waiter takes its
/// own [`QueueChanges`] from [`QueueWatch::changes`].
pub struct QueueWatch {
    /// Bumped on every relevant change; waiters hold receivers.
    generation: watch::Sender<u64>,
    /// Kept alive for as long as the watch: dropping it stops the file
    /// watcher's thread, or the store's subscription.
    _watcher: Option<Notifier>,
    poll: Duration,
    notice: Option<String>,
    /// Why the watch could not be made, as the error said it.
    unwatched: Option<String>,
}

/// Where the notifications come from; held only to keep them coming.
#[allow(dead_code, reason = "the fields are held, never read")]
enum Notifier {
    /// The queue's folder, watched by the `notify` crate.
    File(RecommendedWatcher),
    /// The store's own ([`Store::watch_changes`]: PostgreSQL's `LISTEN`).
    Store(ChangeGuard),
}

impl std::fmt::Debug for QueueWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueWatch")
            .field("notified", &self._watcher.is_some())
            .field("poll", &self.poll)
            .field("notice", &self.notice)
            .finish_non_exhaustive()
    }
}

impl QueueWatch {
    /// Watches `files` (which need not exist yet), the files a commit to
    /// the queue `queue` writes ([`Store::watched_files`]): their folders,
    /// for changes to those files, and, for a symlink, the folder of the
    /// file it points to as well. `queue` names the queue in the notice.
    ///
    /// Never fails: where notifications cannot be had (no file to watch,
    /// no inotify instance left, a folder that cannot be watched), the
    /// watch polls every [`UNNOTIFIED_POLL`] instead and
    /// [`QueueWatch::notice`] says why.
    pub fn on_files(queue: &Path, files: &[PathBuf]) -> QueueWatch {
        let (generation, _) = watch::channel(0u64);
        match watch_files(files, generation.clone()) {
            Ok(watcher) => QueueWatch {
                generation,
                _watcher: Some(Notifier::File(watcher)),
                poll: NOTIFIED_POLL,
                notice: None,
                unwatched: None,
            },
            Err(e) => QueueWatch {
                generation,
                _watcher: None,
                poll: UNNOTIFIED_POLL,
                notice: Some(format!(
                    "no change notifications for {} ({e}): looking every {}s instead",
                    queue.display(),
                    UNNOTIFIED_POLL.as_secs()
                )),
                unwatched: Some(e.to_string()),
            },
        }
    }

    /// Changes to the queue `store` holds: the store's own notifications
    /// where it has them ([`Store::watch_changes`], a queue on a server),
    /// else those of the files it names ([`Store::watched_files`]), as
    /// [`QueueWatch::on_files`]. `queue` names the queue in the notice.
    pub fn for_store(queue: &Path, store: &dyn Store) -> QueueWatch {
        let (generation, _) = watch::channel(0u64);
        let sender = generation.clone();
        let waker: ChangeWaker = Arc::new(move || bump(&sender));
        match store.watch_changes(waker) {
            Some(guard) => QueueWatch {
                generation,
                _watcher: Some(Notifier::Store(guard)),
                poll: NOTIFIED_POLL,
                notice: None,
                unwatched: None,
            },
            None => QueueWatch::on_files(queue, &store.watched_files()),
        }
    }

    /// A watch without notifications that polls every `interval`: for a
    /// store with no file (or a caller that prefers polling).
    pub fn polling(interval: Duration) -> QueueWatch {
        let (generation, _) = watch::channel(0u64);
        QueueWatch { generation, _watcher: None, poll: interval, notice: None, unwatched: None }
    }

    /// Looks every `interval` even without a notification.
    pub fn with_poll_interval(mut self, interval: Duration) -> QueueWatch {
        self.poll = interval;
        self
    }

    /// How long a waiter sleeps without a notification before it looks.
    pub fn poll_interval(&self) -> Duration {
        self.poll
    }

    /// Whether changes are notified (else the watch only polls).
    pub fn is_notified(&self) -> bool {
        self._watcher.is_some()
    }

    /// Why changes are not notified, when [`QueueWatch::on_files`] could not
    /// set that up; a user may want to know why a wait reacts slowly.
    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    /// Why [`QueueWatch::on_files`] could not watch the files (the error alone,
    /// for a caller that polls at its own interval and says so itself).
    pub fn unwatched(&self) -> Option<&str> {
        self.unwatched.as_deref()
    }

    /// A new waiter's view: it sees every change after this call.
    pub fn changes(&self) -> QueueChanges {
        QueueChanges { rx: self.generation.subscribe() }
    }

    /// How many waits are in progress on this watch (each holds a
    /// [`QueueChanges`]): what a server can show, and a test can wait for.
    pub fn waiting(&self) -> usize {
        self.generation.receiver_count()
    }

    /// Wakes every waiter as a change to the file would: for a writer in
    /// this process that knows it just committed (or a test).
    pub fn poke(&self) {
        bump(&self.generation);
    }
}

/// One waiter's view of a [`QueueWatch`].
#[derive(Debug)]
pub struct QueueChanges {
    rx: watch::Receiver<u64>,
}

impl QueueChanges {
    /// Forgets the changes so far: call it just before looking at the
    /// queue, so that a commit during the look wakes the next
    /// [`QueueChanges::changed`] at once.
    pub fn mark_seen(&mut self) {
        self.rx.mark_unchanged();
    }

    /// Resolves at the next change since the last [`QueueChanges::mark_seen`]
    /// (at once if one already happened). Never resolves on a watch
    /// without notifications (the caller's poll decides then).
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            // The watch is gone; only the poll can wake this waiter.
            std::future::pending::<()>().await;
        }
    }
}

fn bump(generation: &watch::Sender<u64>) {
    generation.send_modify(|n| *n = n.wrapping_add(1));
}

/// The file names whose changes mean a commit, each once.
fn names_of(files: &[PathBuf]) -> Vec<OsString> {
    let mut names: Vec<OsString> = Vec::new();
    for name in files.iter().filter_map(|f| f.file_name()) {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    names
}

/// The folder a file lives in (`.` for a bare name).
fn folder_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// `files`, and for each symlink among them the file it resolves to (a
/// commit writes that one, in its own folder). Every name counts in
/// every watched folder, so a log a backend writes beside the resolved
/// file counts too.
fn with_resolved(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut places = files.to_vec();
    for file in files {
        if let Ok(real) = std::fs::canonicalize(file) {
            if !places.contains(&real) {
                places.push(real);
            }
        }
    }
    places
}

fn watch_files(
    files: &[PathBuf],
    generation: watch::Sender<u64>,
) -> notify::Result<RecommendedWatcher> {
    if files.is_empty() {
        return Err(notify::Error::generic("the store names no file to watch"));
    }
    let places = with_resolved(files);
    let names = names_of(&places);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // A lost event (queue overflow) or a broken watch: look.
        if event.map_or(true, |e| is_relevant(&e, &names)) {
            bump(&generation);
        }
    })?;
    let mut folders: Vec<PathBuf> = Vec::new();
    for folder in places.iter().map(|p| folder_of(p)) {
        if !folders.contains(&folder) {
            folders.push(folder);
        }
    }
    for folder in &folders {
        watcher.watch(folder, RecursiveMode::NonRecursive)?;
    }
    Ok(watcher)
}

/// Whether `event` may mean a commit to the queue: a write to one of
/// `names`, or events lost (the kernel asks for a rescan).
fn is_relevant(event: &notify::Event, names: &[OsString]) -> bool {
    event.need_rescan()
        || (is_write(&event.kind)
            && event
                .paths
                .iter()
                .any(|p| p.file_name().is_some_and(|n| names.iter().any(|m| m.as_os_str() == n))))
}

/// Whether an event can mean new content. Opens, reads and closes of a
/// file only read (every look at the queue makes some, ours included)
/// and metadata changes are not; anything unknown is.
fn is_write(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, MetadataKind};

    #[test]
    fn only_writes_count() {
        assert!(is_write(&EventKind::Modify(ModifyKind::Data(DataChange::Any))));
        assert!(is_write(&EventKind::Create(CreateKind::File)));
        assert!(is_write(&EventKind::Access(AccessKind::Close(AccessMode::Write))));
        assert!(is_write(&EventKind::Any));
        assert!(!is_write(&EventKind::Access(AccessKind::Open(AccessMode::Any))));
        assert!(!is_write(&EventKind::Access(AccessKind::Close(AccessMode::Read))));
        assert!(!is_write(&EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any))));
    }

    /// The files a store in `/q/jobs.db` with a log beside it names.
    fn queue_files() -> Vec<PathBuf> {
        vec![PathBuf::from("/q/jobs.db"), PathBuf::from("/q/jobs.log")]
    }

    #[test]
    fn the_named_files_are_watched_in_their_folder() {
        let mut files = queue_files();
        files.push(PathBuf::from("/elsewhere/jobs.db"));
        assert_eq!(names_of(&files), [OsString::from("jobs.db"), OsString::from("jobs.log")]);
        assert_eq!(folder_of(Path::new("/q/jobs.db")), Path::new("/q"));
        assert_eq!(folder_of(Path::new("jobs.db")), Path::new("."));
    }

    #[test]
    fn a_symlinked_file_is_watched_where_it_points_too() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.db");
        std::fs::write(&real, b"x").unwrap();
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let real = std::fs::canonicalize(&real).unwrap();
        let missing = dir.path().join("missing.db");
        assert_eq!(with_resolved(&[link.clone(), missing.clone()]), [link, missing, real]);
    }

    #[test]
    fn a_store_that_names_no_file_is_polled_and_says_why() {
        let watch = QueueWatch::on_files(Path::new("q.mem"), &[]);
        assert!(!watch.is_notified());
        assert_eq!(watch.poll_interval(), UNNOTIFIED_POLL);
        assert_eq!(watch.unwatched(), Some("the store names no file to watch"));
        assert!(watch.notice().is_some_and(|n| n.starts_with("no change notifications for q.mem")));
    }

    #[test]
    fn only_the_queue_files_count() {
        let names = names_of(&queue_files());
        let write = |path: &str| {
            notify::Event::new(EventKind::Modify(ModifyKind::Data(DataChange::Any)))
                .add_path(PathBuf::from(path))
        };
        assert!(is_relevant(&write("/q/jobs.log"), &names));
        assert!(is_relevant(&write("/q/jobs.db"), &names));
        assert!(!is_relevant(&write("/q/jobs.db-shm"), &names));
        assert!(!is_relevant(&write("/q/other.txt"), &names));
        let open = notify::Event::new(EventKind::Access(AccessKind::Open(AccessMode::Any)))
            .add_path(PathBuf::from("/q/jobs.db"));
        assert!(!is_relevant(&open, &names), "our own looks open the file");
        let rescan = notify::Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        assert!(is_relevant(&rescan, &names));
    }

    /// A write to a file the store names beside the queue (its log) wakes
    /// a waiter (a real notification from the kernel).
    #[tokio::test]
    async fn a_write_beside_the_queue_wakes_a_waiter() {
        let dir = tempfile::tempdir().unwrap();
        let queue = dir.path().join("q.db");
        let watch = QueueWatch::on_files(&queue, &[queue.clone(), dir.path().join("q.log")]);
        assert!(watch.is_notified(), "{:?}", watch.notice());
        let mut changes = watch.changes();
        changes.mark_seen();
        std::fs::write(dir.path().join("q.log"), b"x").unwrap();
        tokio::time::timeout(Duration::from_secs(10), changes.changed())
            .await
            .expect("the write to q.log was not notified");
    }

    /// A store in a file says which files to watch: the SQLite store's
    /// log wakes a waiter through [`QueueWatch::for_store`].
    #[tokio::test]
    async fn a_store_names_the_files_that_wake_a_waiter() {
        let dir = tempfile::tempdir().unwrap();
        let queue = dir.path().join("q.db");
        let store = slothqueue_store_sqlite::SqliteStore::open(
            &queue,
            slothqueue_store_sqlite::SqliteOptions::default(),
        )
        .unwrap();
        let watch = QueueWatch::for_store(&queue, &store);
        assert!(watch.is_notified(), "{:?}", watch.notice());
        let mut changes = watch.changes();
        changes.mark_seen();
        let job = slothqueue_core::NewJob::shell("true", dir.path().to_string_lossy());
        store.push(job, slothqueue_core::Timestamp::from_millis(0)).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), changes.changed())
            .await
            .expect("the store's commit was not notified");
    }

    /// A queue reached through a symlink in another folder: its commits
    /// write beside the file it points to, and still wake a waiter.
    #[tokio::test]
    async fn a_symlinked_store_wakes_a_waiter() {
        let dir = tempfile::tempdir().unwrap();
        let (real, links) = (dir.path().join("real"), dir.path().join("links"));
        std::fs::create_dir_all(&real).unwrap();
        std::fs::create_dir_all(&links).unwrap();
        let options = slothqueue_store_sqlite::SqliteOptions::default;
        drop(slothqueue_store_sqlite::SqliteStore::open(&real.join("q.db"), options()).unwrap());
        let queue = links.join("q.db");
        std::os::unix::fs::symlink(real.join("q.db"), &queue).unwrap();
        let store = slothqueue_store_sqlite::SqliteStore::open(&queue, options()).unwrap();
        let watch = QueueWatch::for_store(&queue, &store);
        let mut changes = watch.changes();
        changes.mark_seen();
        let job = slothqueue_core::NewJob::shell("true", dir.path().to_string_lossy());
        store.push(job, slothqueue_core::Timestamp::EPOCH).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), changes.changed())
            .await
            .expect("the commit beside the symlink's target was not notified");
    }

    #[tokio::test]
    async fn poke_wakes_and_mark_seen_forgets() {
        let watch = QueueWatch::polling(Duration::from_secs(60));
        assert!(!watch.is_notified());
        assert_eq!(watch.waiting(), 0);
        let mut changes = watch.changes();
        assert_eq!(watch.waiting(), 1);
        watch.poke();
        changes.mark_seen();
        let stale = tokio::time::timeout(Duration::from_millis(20), changes.changed()).await;
        assert!(stale.is_err(), "a change marked seen woke the waiter");
        watch.poke();
        tokio::time::timeout(Duration::from_secs(1), changes.changed()).await.unwrap();
    }
}
