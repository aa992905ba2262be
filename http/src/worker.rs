//! The drain worker: a runner in follow mode beside the server, sharing its
//! store, woken by every enqueue.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::Store;
use slothqueue_runner::{
    Mode, Reporter, Runner, RunnerConfig, RunnerEvent, ShutdownSignal, ShutdownTrigger,
};
use tokio::sync::Notify;

use crate::HttpError;
use crate::metrics::WorkerCounters;

/// How often the worker's running job heartbeats, and so how soon a cancel
/// sent through the API stops it. The runner's default (a third of the
/// lease, 20 s) is fine for a terminal; a program that cancels over HTTP
/// expects the job to stop about now. A heartbeat is one small write.
pub const WORKER_HEARTBEAT: Duration = Duration::from_secs(2);

type RunFuture = Pin<Box<dyn Future<Output = Result<(), HttpError>> + Send>>;
type RunFn = Box<dyn FnOnce(ShutdownSignal) -> RunFuture + Send>;

/// Runs the queue's jobs while the server accepts them; give it to
/// [`crate::serve`] or [`crate::Bound::run`].
pub struct DrainWorker {
    waker: Arc<Notify>,
    run: RunFn,
    counters: WorkerCounters,
}

impl fmt::Debug for DrainWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DrainWorker").finish_non_exhaustive()
    }
}

/// Asks a started worker to stop.
pub(crate) struct WorkerStop(ShutdownTrigger);

impl WorkerStop {
    /// The running job's group is stopped and the job handed back.
    pub(crate) fn stop(&self) {
        self.0.trigger();
    }
}

/// The log directory the CLI uses for `queue`: `<queue>.logs` beside it, so
/// `slothqueue logs ID` finds what the server's worker wrote.
pub fn log_dir_beside(queue: &Path) -> PathBuf {
    slothqueue_runner::log_dir_for(queue)
}

impl DrainWorker {
    /// The runner settings of a drain worker for the queue at `queue`: follow
    /// mode, logs in `<queue>.logs`, heartbeats every [`WORKER_HEARTBEAT`],
    /// woken by every change of the queue file (`watch_file`),
    /// the runner's defaults otherwise (one slot). Adjust (`slots`, gates,
    /// `suspend_when_gated`, `on_finish`, queues) and pass to
    /// [`DrainWorker::new`]: the worker is a [`Runner`] with this config, so
    /// it runs as many jobs at once as `slots` says and keeps every lane's
    /// limit and pause as `run` does.
    pub fn config(queue: &Path) -> RunnerConfig {
        let mut config = RunnerConfig::new(log_dir_beside(queue));
        config.mode = Mode::Follow;
        // Jobs `slothqueue add` (another process) queues start at once too.
        config.watch_file = Some(queue.to_owned());
        config.heartbeat_interval = Some(WORKER_HEARTBEAT);
        config
    }

    /// A worker running shell jobs from `store` with `config` (its mode is
    /// forced to follow: a worker that exits when the queue is empty would
    /// leave later enqueues unrun), reporting to `reporter`.
    pub fn new(
        store: Arc<dyn Store>,
        mut config: RunnerConfig,
        reporter: impl Reporter + 'static,
    ) -> Self {
        config.mode = Mode::Follow;
        DrainWorker::from_runner(Runner::new(store, config), reporter)
    }

    /// A worker from a runner built by the caller (to register handlers).
    /// The runner must be in [`Mode::Follow`]; one that stops by itself
    /// stops the server with an error.
    /// Its attempts, retries and failures are counted for `GET /metrics`.
    pub fn from_runner(runner: Runner, reporter: impl Reporter + 'static) -> Self {
        let waker = runner.waker();
        let counters = WorkerCounters::default();
        let seen = counters.clone();
        let reporter = move |event: RunnerEvent| {
            seen.count(&event);
            reporter.report(event);
        };
        let mut worker = DrainWorker::custom(waker, move |shutdown| async move {
            runner.run(reporter, shutdown).await.map(|_summary| ()).map_err(HttpError::Worker)
        });
        worker.counters = counters;
        worker
    }

    /// A worker from any loop: `run` must work until the signal it is given
    /// fires, then hand back its job and return; `waker` is notified after
    /// every enqueue and cancel. Its attempts are not counted in
    /// `GET /metrics` (the loop reports to nobody the server knows).
    pub fn custom<F, Fut>(waker: Arc<Notify>, run: F) -> Self
    where
        F: FnOnce(ShutdownSignal) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), HttpError>> + Send + 'static,
    {
        DrainWorker {
            waker,
            run: Box::new(move |signal| Box::pin(run(signal))),
            counters: WorkerCounters::default(),
        }
    }

    /// What `/metrics` counts of it.
    pub(crate) fn counters(&self) -> WorkerCounters {
        self.counters.clone()
    }

    /// What enqueue notifies.
    pub(crate) fn waker(&self) -> Arc<Notify> {
        self.waker.clone()
    }

    /// The stop handle and the future that runs the worker.
    pub(crate) fn start(self) -> (WorkerStop, RunFuture) {
        let (trigger, signal) = ShutdownSignal::new();
        (WorkerStop(trigger), (self.run)(signal))
    }
}
