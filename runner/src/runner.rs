//! The runner's public face: [`Runner`] holds the store, the config and
//! the executors by kind, and starts a run. The loop itself is in `run/`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{RefusedKind, SHELL_KIND, Store};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::config::{Mode, RunnerConfig, WATCHED_POLL};
use crate::error::RunnerError;
use crate::event::{Reporter, RunSummary, RunnerEvent};
use crate::exec::{Executor, HandlerDirExecutor, RefusedHandler, ShellExecutor};
use crate::fmt::format_duration;
use crate::process::spawn::{catch_inherited_ignores, seal_inherited_fds};
use crate::run::Run;
use crate::run::job_control::{self, Suspended};
use crate::signal::{ShutdownSignal, Suspension};
use crate::watch::{QueueChanges, QueueWatch};

/// Runs jobs from a store, one at a time or up to
/// [`RunnerConfig::slots`] at once.
pub struct Runner {
    store: Arc<dyn Store>,
    config: RunnerConfig,
    executors: BTreeMap<String, Arc<dyn Executor>>,
    waker: Arc<Notify>,
    job_control: Option<Suspension>,
    /// Handlers refused at open, said once when the run starts.
    refused: Vec<RefusedHandler>,
}

impl Runner {
    /// A runner over `store`. It runs `shell` jobs ([`ShellExecutor`]) unless
    /// told otherwise with [`Runner::unregister`].
    pub fn new(store: Arc<dyn Store>, config: RunnerConfig) -> Runner {
        let mut executors: BTreeMap<String, Arc<dyn Executor>> = BTreeMap::new();
        executors.insert(SHELL_KIND.to_owned(), Arc::new(ShellExecutor));
        Runner {
            store,
            config,
            executors,
            waker: Arc::new(Notify::new()),
            job_control: None,
            refused: Vec::new(),
        }
    }

    /// Runs jobs of `kind` with `executor` (replacing any before).
    pub fn register(&mut self, kind: impl Into<String>, executor: Arc<dyn Executor>) {
        self.executors.insert(kind.into(), executor);
    }

    /// Runs every kind a handler directory has an executable for, except
    /// `shell`: a file named `shell` must not take over shell jobs.
    ///
    /// Its refused handlers ([`HandlerDirExecutor::refused`]) are not
    /// registered: their jobs are never claimed (left pending, where
    /// `status` and `/metrics` count them as unserved, rather than claimed
    /// and refused again and again), and the run's start says each once.
    pub fn register_handlers(&mut self, dir: HandlerDirExecutor) {
        self.refused.extend(dir.refused().iter().filter(|r| r.kind != SHELL_KIND).cloned());
        let dir = Arc::new(dir);
        for kind in dir.kinds() {
            if kind != SHELL_KIND {
                self.executors.insert(kind.clone(), dir.clone());
            }
        }
    }

    /// Answers Ctrl-Z ([`JobControl`](crate::JobControl) from
    /// [`unix_signals_with`](crate::unix_signals_with)): `Suspend` stops the
    /// running jobs' processes, all of them, then the runner; once the
    /// runner is continued they are continued (but for jobs a closed gate
    /// keeps stopped, with [`RunnerConfig::suspend_when_gated`]). Time spent stopped does not
    /// count against the job's max runtime. (A runner stopped longer than
    /// its lease may find the job taken by another runner when continued.)
    pub fn job_control(&mut self, suspension: Suspension) {
        self.job_control = Some(suspension);
    }

    /// Stops running jobs of `kind`.
    pub fn unregister(&mut self, kind: &str) {
        self.executors.remove(kind);
    }

    /// The kinds this runner claims.
    pub fn kinds(&self) -> Vec<String> {
        self.executors.keys().cloned().collect()
    }

    /// Wakes a runner in follow mode at once (the HTTP server calls it after
    /// an enqueue). A wake-up while busy is remembered for the next wait.
    pub fn waker(&self) -> Arc<Notify> {
        self.waker.clone()
    }

    /// Runs until the mode says stop or `shutdown` fires, reporting every
    /// event to `reporter`. The runner's record is removed from the store
    /// however the run ends.
    ///
    /// Descriptors this process inherited without close-on-exec become
    /// close-on-exec: no job may inherit them, and sealing them once here
    /// spares every job's spawn a fork of the whole runner. Signals it
    /// inherited as ignored (but SIGHUP, SIGPIPE and SIGCHLD) are caught
    /// and dropped from then on, for the same reason: still ignored by the
    /// runner, not inherited by its jobs.
    pub async fn run(
        self,
        reporter: impl Reporter + 'static,
        shutdown: ShutdownSignal,
    ) -> Result<RunSummary, RunnerError> {
        seal_inherited_fds();
        catch_inherited_ignores();
        let reporter = Arc::new(reporter);
        for refused in &self.refused {
            reporter.report(RunnerEvent::Warning {
                message: format!(
                    "{}; its jobs (kind `{}`) stay pending",
                    refused.why, refused.kind
                ),
            });
        }
        let suspended = Arc::new(Suspended::default());
        let control = self.job_control.map(|s| job_control::spawn(s, suspended.clone()));
        let mut config = self.config;
        config.refused = self
            .refused
            .iter()
            .map(|r| RefusedKind { kind: r.kind.clone(), why: r.why.clone() })
            .collect();
        let watching = watch_queue(&mut config, &*self.store, &self.waker, &*reporter);
        let ended =
            Run::new(self.store, config, self.executors, self.waker, reporter, shutdown, suspended)
                .until_done()
                .await;
        for task in [control, watching].into_iter().flatten() {
            task.abort();
        }
        ended
    }
}

/// In follow mode with a [`RunnerConfig::watch_file`]: a task that wakes
/// the run at every change of the queue (the store's notifications, or
/// the files it names), and the poll stretched to [`WATCHED_POLL`] while
/// it does. Where the queue cannot be watched, says why and leaves the
/// poll as it is.
fn watch_queue(
    config: &mut RunnerConfig,
    store: &dyn Store,
    waker: &Arc<Notify>,
    reporter: &dyn Reporter,
) -> Option<JoinHandle<()>> {
    let file = config.watch_file.as_ref().filter(|_| config.mode == Mode::Follow)?;
    let watch = QueueWatch::for_store(file, store);
    if let Some(why) = watch.unwatched() {
        reporter.report(RunnerEvent::Warning {
            message: format!(
                "cannot watch {} for changes ({why}): jobs other processes add start within {} instead of at once",
                file.display(),
                format_duration(config.poll_interval)
            ),
        });
        return None;
    }
    config.poll_interval = config.poll_interval.max(WATCHED_POLL);
    let mut changes = watch.changes();
    let waker = waker.clone();
    Some(tokio::spawn(async move {
        // Owned by the task: dropping the watch stops its thread.
        let _watch = watch;
        loop {
            changes.changed().await;
            // Woken now and again as the commit becomes visible, unless
            // another change comes first (then from that one).
            while wake_and_retry(&mut changes, &waker).await {}
        }
    }))
}

/// How long after a change the run is woken again. A commit is notified
/// at its first write, before other processes can see it: SQLite writes
/// its WAL frames and fsyncs them before it publishes them in the
/// memory-mapped `-shm` index (no notification for that), and redb
/// writes its header after its pages. A look at the first notification
/// may find nothing yet, so the run looks again as the fsync ends on a
/// fast disk, a slow one, and a very slow one; past that, the poll.
const WAKE_RETRIES: [Duration; 4] = [
    Duration::from_millis(5),
    Duration::from_millis(25),
    Duration::from_millis(125),
    Duration::from_millis(625),
];

/// Wakes the run for a change and at each [`WAKE_RETRIES`] step after it;
/// `true` when another change came meanwhile (to start over from it).
async fn wake_and_retry(changes: &mut QueueChanges, waker: &Notify) -> bool {
    waker.notify_one();
    for delay in WAKE_RETRIES {
        tokio::select! {
            () = tokio::time::sleep(delay) => waker.notify_one(),
            () = changes.changed() => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_watched_follow_runner_is_woken_by_a_write_and_polls_only_as_a_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let waker = Arc::new(Notify::new());
        // A store in a file has no notifications of its own: the watch on
        // the files it names serves it.
        let store = slothqueue_store_sqlite::SqliteStore::open(
            &dir.path().join("q.db"),
            slothqueue_store_sqlite::SqliteOptions::default(),
        )
        .unwrap();
        let mut cfg = RunnerConfig::new(dir.path());
        cfg.mode = Mode::Follow;
        cfg.watch_file = Some(dir.path().join("q.db"));
        let task = watch_queue(&mut cfg, &store, &waker, &|_: RunnerEvent| {}).unwrap();
        assert_eq!(cfg.poll_interval, WATCHED_POLL);
        let job = slothqueue_core::NewJob::shell("true", dir.path().to_string_lossy());
        store.push(job, slothqueue_core::Timestamp::EPOCH).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), waker.notified())
            .await
            .expect("a commit to the queue did not wake the runner");
        task.abort();

        // A drain ends by itself: nothing to watch, the poll as it was.
        let mut cfg = RunnerConfig::new(dir.path());
        cfg.watch_file = Some(dir.path().join("q.db"));
        assert!(watch_queue(&mut cfg, &store, &waker, &|_: RunnerEvent| {}).is_none());
        assert_eq!(cfg.poll_interval, Duration::from_secs(5));
    }
}
