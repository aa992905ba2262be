//! The runner's public face: [`Runner`] holds the store, the config and
//! the executors by kind, and starts a run. The loop itself is in `run/`.

use std::collections::BTreeMap;
use std::sync::Arc;

use slothqueue_core::{SHELL_KIND, Store};
use tokio::sync::Notify;

use crate::config::RunnerConfig;
use crate::error::RunnerError;
use crate::event::{Reporter, RunSummary};
use crate::exec::{Executor, HandlerDirExecutor, ShellExecutor};
use crate::process::spawn::{catch_inherited_ignores, seal_inherited_fds};
use crate::run::Run;
use crate::run::job_control::{self, Suspended};
use crate::signal::{ShutdownSignal, Suspension};

/// Runs jobs from a store, one at a time or up to
/// [`RunnerConfig::slots`] at once.
pub struct Runner {
    store: Arc<dyn Store>,
    config: RunnerConfig,
    executors: BTreeMap<String, Arc<dyn Executor>>,
    waker: Arc<Notify>,
    job_control: Option<Suspension>,
}

impl Runner {
    /// A runner over `store`. It runs `shell` jobs ([`ShellExecutor`]) unless
    /// told otherwise with [`Runner::unregister`].
    pub fn new(store: Arc<dyn Store>, config: RunnerConfig) -> Runner {
        let mut executors: BTreeMap<String, Arc<dyn Executor>> = BTreeMap::new();
        executors.insert(SHELL_KIND.to_owned(), Arc::new(ShellExecutor));
        Runner { store, config, executors, waker: Arc::new(Notify::new()), job_control: None }
    }

    /// Runs jobs of `kind` with `executor` (replacing any before).
    pub fn register(&mut self, kind: impl Into<String>, executor: Arc<dyn Executor>) {
        self.executors.insert(kind.into(), executor);
    }

    /// Runs every kind a handler directory has an executable for, except
    /// `shell`: a file named `shell` must not take over shell jobs.
    pub fn register_handlers(&mut self, dir: HandlerDirExecutor) {
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
        let suspended = Arc::new(Suspended::default());
        let control = self.job_control.map(|s| job_control::spawn(s, suspended.clone()));
        let ended = Run::new(
            self.store,
            self.config,
            self.executors,
            self.waker,
            reporter,
            shutdown,
            suspended,
        )
        .until_done()
        .await;
        if let Some(task) = control {
            task.abort();
        }
        ended
    }
}
