//! [`Worker`]: the runner of a program's typed jobs. Each
//! [`Worker::handle`] registers one executor (a [`handler_fn`]) for
//! [`Job::KIND`] that decodes the payload, runs [`Job::run`] on a task of
//! its own, and turns what it returns into the attempt's outcome; the run
//! itself is the runner's (leases, heartbeats, max runtime, cancel,
//! shutdown, retries), not a second one.

use std::any::type_name;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::SHELL_KIND;
use slothqueue_core::machine::is_plain_name;
use slothqueue_runner::{
    ExecContext, ExecOutcome, Executor, Mode, Reporter, RunSummary, Runner, RunnerConfig,
    RunnerEvent, ShutdownSignal, handler_fn, log_dir_for,
};
use tokio::task::{JoinError, JoinHandle};

use super::QueueError;
use super::data::{DataMap, SharedData};
use super::job::{Job, JobContext, JobError, encode_output};
use super::queue::Queue;

/// Runs a program's typed jobs from a [`Queue`]: register each type with
/// [`Worker::handle`], then run until the queue is idle, once, or until a
/// shutdown ([`Worker::follow`]).
///
/// ```no_run
/// # use slothqueue::typed::{Job, JobContext, JobError, Queue, Worker};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Resize { width: u32 }
/// # impl Job for Resize { const KIND: &'static str = "resize"; type Output = ();
/// #   async fn run(self, _: JobContext) -> Result<(), JobError> { Ok(()) } }
/// # async fn demo() -> Result<(), slothqueue::typed::QueueError> {
/// let queue = Queue::open("queue.db")?;
/// let summary = Worker::new(&queue)
///     .handle::<Resize>()
///     .on_event(|event| println!("{event}"))
///     .run_until_idle()
///     .await?;
/// println!("{} done, {} failed", summary.done, summary.failed);
/// # Ok(()) }
/// ```
///
/// A worker claims only the kinds it was given (a `shell` job added with
/// the CLI stays for a `slothqueue run`, unless [`Worker::shell`] says
/// otherwise), and reports what it does as [`RunnerEvent`]s to
/// [`Worker::on_event`] (nothing by default: a library never prints).
pub struct Worker {
    queue: Queue,
    config: RunnerConfig,
    handlers: BTreeMap<String, Handler>,
    shell: bool,
    problems: Vec<String>,
    reporter: Arc<dyn Reporter>,
    /// The values given with [`Worker::data`], fixed into `shared` when
    /// the worker becomes a runner.
    data: DataMap,
    shared: SharedData,
}

/// An executor registered for a kind, and what registered it.
struct Handler {
    executor: Arc<dyn Executor>,
    /// The job type's name, or `executor` for [`Worker::register`].
    by: &'static str,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("queue", &self.queue)
            .field("kinds", &self.kinds())
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker on `queue` with the runner's defaults (one slot, no gates),
    /// the queue's clock, and, for a queue opened from a file, logs in
    /// `<file>.logs` and the file watched so that jobs other processes
    /// push start at once in follow mode.
    pub fn new(queue: &Queue) -> Worker {
        let mut config = match queue.path() {
            Some(path) => {
                let mut config = RunnerConfig::new(log_dir_for(path));
                config.watch_file = Some(path.to_owned());
                config
            }
            // Only shell jobs and `on_finish` write logs.
            None => RunnerConfig::new(std::env::temp_dir().join("slothqueue.logs")),
        };
        config.clock = queue.clock().clone();
        Worker::with_config(queue, config)
    }

    /// A worker on `queue` with a runner configuration of the caller's
    /// (gates, slots, lanes served, heartbeats; see [`RunnerConfig`]), for
    /// example `slothqueue::http::DrainWorker::config` for a server's
    /// worker. Its mode is what [`Worker::into_runner`] gives the runner;
    /// the `run_*` methods set their own. Its clock is the
    /// configuration's, not the queue's.
    pub fn with_config(queue: &Queue, config: RunnerConfig) -> Worker {
        Worker {
            queue: queue.clone(),
            config,
            handlers: BTreeMap::new(),
            shell: false,
            problems: Vec::new(),
            reporter: Arc::new(|_: RunnerEvent| {}),
            data: DataMap::default(),
            shared: SharedData::default(),
        }
    }

    /// Gives every handler of this worker `value`, read in an attempt with
    /// [`JobContext::data`] (one value per type; a second of the same type
    /// replaces the first): a database pool made once at start, not per
    /// job, as apalis's `Data<T>` does.
    ///
    /// ```no_run
    /// # use slothqueue::typed::{Job, JobContext, JobError, Queue, Worker};
    /// struct Pool { url: String }
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Save { row: String }
    ///
    /// impl Job for Save {
    ///     const KIND: &'static str = "save";
    ///     type Output = String;
    ///     async fn run(self, ctx: JobContext) -> Result<String, JobError> {
    ///         let pool = ctx.data::<Pool>()?;
    ///         Ok(format!("saved {} to {}", self.row, pool.url))
    ///     }
    /// }
    ///
    /// # async fn demo() -> Result<(), slothqueue::typed::QueueError> {
    /// let queue = Queue::open("queue.db")?;
    /// let pool = Pool { url: "postgres://localhost/app".into() };
    /// Worker::new(&queue).data(pool).handle::<Save>().run_until_idle().await?;
    /// # Ok(()) }
    /// ```
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// Runs jobs of type `J` (those pushed with kind [`Job::KIND`]).
    ///
    /// A kind that is not a plain name, is `shell`, or is another
    /// registered type's makes the run refuse to start
    /// ([`QueueError::Kind`]); registering the same type twice is harmless.
    pub fn handle<J: Job>(mut self) -> Self {
        let by = type_name::<J>();
        if J::KIND == SHELL_KIND {
            self.problems.push(format!(
                "{by}: kind `{SHELL_KIND}` is the shell commands' kind; name the job another way"
            ));
        } else if !is_plain_name(J::KIND) {
            self.problems.push(format!(
                "{by}: kind `{}` is not a plain name (letters, digits, `-`, `_`, `.`)",
                J::KIND
            ));
        } else {
            let executor = typed_executor::<J>(self.queue.clone(), self.shared.clone());
            self.add(J::KIND, Handler { executor, by });
        }
        self
    }

    /// Runs jobs of `kind` with an executor of the runner's kind (say a
    /// [`handler_fn`] over the raw payload), beside the typed ones.
    pub fn register(mut self, kind: impl Into<String>, executor: Arc<dyn Executor>) -> Self {
        let kind = kind.into();
        if is_plain_name(&kind) {
            self.add(&kind, Handler { executor, by: "executor" });
        } else {
            self.problems.push(format!(
                "kind `{kind}` is not a plain name (letters, digits, `-`, `_`, `.`)"
            ));
        }
        self
    }

    fn add(&mut self, kind: &str, handler: Handler) {
        match self.handlers.get(kind) {
            Some(before) if before.by == handler.by && handler.by != "executor" => {}
            Some(before) => self.problems.push(format!(
                "kind `{kind}` is registered twice: by {} and by {}",
                before.by, handler.by
            )),
            None => {
                self.handlers.insert(kind.to_owned(), handler);
            }
        }
    }

    /// Also runs `shell` jobs (commands added with `slothqueue add`), as
    /// `slothqueue run` does; off by default. Their logs go to the
    /// configuration's `log_dir`: beside the queue file, or, for a queue
    /// over a bare store, `slothqueue.logs` in the temporary folder unless
    /// [`Worker::configure`] names another.
    pub fn shell(mut self, yes: bool) -> Self {
        self.shell = yes;
        self
    }

    /// Changes the runner configuration (`slots`, `queues`, gates,
    /// `cooldown`, …) in place.
    pub fn configure(mut self, change: impl FnOnce(&mut RunnerConfig)) -> Self {
        change(&mut self.config);
        self
    }

    /// Where the run's events go (a job started, done, failed and retried,
    /// a gate closed, …); their `Display` is the line `slothqueue run`
    /// prints.
    pub fn on_event(mut self, reporter: impl Reporter + 'static) -> Self {
        self.reporter = Arc::new(reporter);
        self
    }

    /// The kinds this worker claims.
    pub fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self.handlers.keys().cloned().collect();
        if self.shell {
            kinds.push(SHELL_KIND.to_owned());
            kinds.sort();
        }
        kinds
    }

    /// The runner this worker is, in its configuration's mode, to run as
    /// the caller likes (for example as a server's drain worker, with
    /// `slothqueue::http::DrainWorker::from_runner`).
    /// Pushes through the queue's handle wake it.
    pub fn into_runner(self) -> Result<Runner, QueueError> {
        self.build().map(|(runner, _)| runner)
    }

    fn build(self) -> Result<(Runner, Arc<dyn Reporter>), QueueError> {
        if !self.problems.is_empty() {
            return Err(QueueError::Kind(self.problems.join("; ")));
        }
        self.shared.set(self.data);
        let mut runner = Runner::new(self.queue.store().clone(), self.config);
        if !self.shell {
            runner.unregister(SHELL_KIND);
        }
        for (kind, handler) in self.handlers {
            runner.register(kind, handler.executor);
        }
        self.queue.add_waker(&runner.waker());
        Ok((runner, self.reporter))
    }

    /// Runs every job that is due, then returns (retries scheduled for
    /// later stay pending).
    pub async fn run_until_idle(self) -> Result<RunSummary, QueueError> {
        self.run(Mode::Drain, ShutdownSignal::never()).await
    }

    /// Runs at most one job.
    pub async fn run_once(self) -> Result<RunSummary, QueueError> {
        self.run(Mode::Once, ShutdownSignal::never()).await
    }

    /// Runs jobs as they come due until `shutdown` resolves, then stops
    /// the running jobs ([`JobContext::stopped`]) and hands them back to
    /// the queue, their attempts not charged.
    pub async fn follow(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<RunSummary, QueueError> {
        let (trigger, signal) = ShutdownSignal::new();
        let asked = tokio::spawn(async move {
            shutdown.await;
            trigger.trigger();
        });
        let ran = self.run(Mode::Follow, signal).await;
        asked.abort();
        ran
    }

    /// Runs in `mode` until it ends or `shutdown` fires (a second request
    /// stops the jobs at once: see
    /// [`unix_signals`](slothqueue_runner::unix_signals) for Ctrl-C and
    /// SIGTERM).
    pub async fn run(
        mut self,
        mode: Mode,
        shutdown: ShutdownSignal,
    ) -> Result<RunSummary, QueueError> {
        self.config.mode = mode;
        let (runner, reporter) = self.build()?;
        Ok(runner.run(move |event: RunnerEvent| reporter.report(event), shutdown).await?)
    }
}

/// The executor of `J`'s jobs.
fn typed_executor<J: Job>(queue: Queue, data: SharedData) -> Arc<dyn Executor> {
    handler_fn(move |job, ctx| attempt::<J>(queue.clone(), data.clone(), job, ctx))
}

/// Aborts the task when dropped: no attempt outlives its executor (the
/// runner drops an executor that did not stop in time).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One attempt of a `J`: decode (a payload that does not decode fails
/// the job permanently: every attempt would read the same bytes), run on a
/// task of its own (a panic is the attempt's failure, not the runner's),
/// and obey a stop.
async fn attempt<J: Job>(
    queue: Queue,
    data: SharedData,
    job: slothqueue_core::Job,
    ctx: ExecContext,
) -> ExecOutcome {
    let value: J = match serde_json::from_value(job.payload.clone()) {
        Ok(value) => value,
        Err(e) => {
            return ExecOutcome::permanent_failure(format!(
                "cannot decode the payload of this `{}` job as {}: {e}",
                J::KIND,
                type_name::<J>()
            ));
        }
    };
    let mut stop = ctx.stop();
    let grace = ctx.kill_grace();
    let context = JobContext { job, attempt: ctx.attempt(), stop: stop.clone(), queue, data };
    let mut task = AbortOnDrop(tokio::spawn(value.run(context)));
    let request = tokio::select! {
        ended = &mut task.0 => return outcome::<J>(ended),
        request = stop.requested() => request,
    };
    // Asked to stop: the attempt has the grace to end (none if immediate).
    let wait = if request.immediate { Duration::ZERO } else { grace };
    let ended = tokio::select! {
        ended = tokio::time::timeout(wait, &mut task.0) => ended.ok(),
        () = stop.immediate() => None,
    };
    match ended {
        // It finished its work meanwhile: that is recorded.
        Some(Ok(Ok(output))) => success::<J>(&output),
        Some(Ok(Err(e))) => ExecOutcome::Stopped { detail: format!("the handler ended: {e}") },
        Some(Err(e)) => ExecOutcome::Stopped { detail: ended_badly::<J>(e) },
        None => {
            task.0.abort();
            ExecOutcome::Stopped { detail: "the handler was dropped".to_owned() }
        }
    }
}

/// The outcome of an attempt that ended on its own.
fn outcome<J: Job>(ended: Result<Result<J::Output, JobError>, JoinError>) -> ExecOutcome {
    match ended {
        Ok(Ok(output)) => success::<J>(&output),
        Ok(Err(e)) if e.is_permanent() => ExecOutcome::permanent_failure(e.to_string()),
        Ok(Err(e)) => ExecOutcome::failure(e.to_string()),
        Err(e) => ExecOutcome::failure(ended_badly::<J>(e)),
    }
}

fn success<J: Job>(output: &J::Output) -> ExecOutcome {
    match encode_output(output) {
        Ok(result) => ExecOutcome::Success { result, exit_code: None },
        Err(e) => ExecOutcome::failure(format!(
            "the `{}` handler's output cannot be stored as JSON: {e}",
            J::KIND
        )),
    }
}

/// A handler task that panicked (or was cancelled, which only happens at
/// the runtime's shutdown), in words.
fn ended_badly<J: Job>(e: JoinError) -> String {
    if !e.is_panic() {
        return format!("the `{}` handler was cancelled", J::KIND);
    }
    let payload = e.into_panic();
    let said = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned());
    match said {
        Some(s) => format!("the `{}` handler panicked: {s}", J::KIND),
        None => format!("the `{}` handler panicked", J::KIND),
    }
}
