//! Executors: what runs a job of a given kind.
//!
//! The runner owns the policy (max runtime, heartbeats, cancel, lost lease,
//! shutdown) and tells an executor to stop through its [`ExecContext`]; an
//! executor owns the mechanism (a process group to signal, a future to
//! finish). So every executor gets the same timeouts and the same stop
//! semantics, and a library user's async handler is a first-class citizen
//! next to shell commands and handler directories.
//!
//! The [`Executor`] API and the executors are here; the life of a child
//! process an executor starts (spawned as a group leader, logged, stopped
//! when asked, reaped) is in `child`.

mod child;

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use slothqueue_core::machine::is_plain_name;
use slothqueue_core::shell::EnvMode;
use slothqueue_core::{Job, Limits, Timestamp};
use tokio::sync::watch;

use crate::contain::Containment;
use crate::error::RunnerError;
use crate::event::Reporter;
use crate::private::{AlsoOwnedBy, NotPrivate, check_private};
use crate::stop::StopListener;
pub(crate) use child::{ProcessSpec, run_process};

/// The shell that runs shell jobs, by absolute path: an `exact` job's
/// `PATH` is its own, and the runner's must not be needed to find it.
pub(crate) const SHELL: &str = "/bin/sh";

/// Default cap of one job's log file.
pub(crate) const DEFAULT_LOG_CAP: u64 = 1 << 20;
/// Default time between TERM and KILL.
pub(crate) const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);

/// What an executor gets besides the job.
pub struct ExecContext {
    pub(crate) attempt: u32,
    pub(crate) stop: StopListener,
    pub(crate) pgid: watch::Sender<Option<i32>>,
    pub(crate) log_dir: PathBuf,
    pub(crate) log_cap: u64,
    pub(crate) kill_grace: Duration,
    pub(crate) started_at: Timestamp,
    /// The attempt's [`LEASE_VAR`] value, set in the job's environment;
    /// `None` outside a runner's claim.
    pub(crate) lease_marker: Option<String>,
    /// Everything the attempt starts, found and stopped (see
    /// [`Containment`]); `None` outside a runner's claim, where only the
    /// process group is stopped.
    pub(crate) containment: Option<Arc<Containment>>,
    /// The runner's limits for jobs that set none (see
    /// [`RunnerConfig::limits`](crate::RunnerConfig::limits)).
    pub(crate) limits: Limits,
    /// Where a limit not in force is said; `None` outside a runner.
    pub(crate) reporter: Option<Arc<dyn Reporter>>,
    /// Whether an attempt that holds no GPU gets `CUDA_VISIBLE_DEVICES`
    /// empty (`run --hide-gpus`).
    pub(crate) hide_gpus: bool,
}

impl std::fmt::Debug for ExecContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecContext")
            .field("attempt", &self.attempt)
            .field("log_dir", &self.log_dir)
            .field("started_at", &self.started_at)
            .field("lease_marker", &self.lease_marker)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl ExecContext {
    /// A context for running an executor outside a runner (tests, tools):
    /// never stopped, logs into `log_dir`.
    pub fn standalone(log_dir: impl Into<PathBuf>, attempt: u32, now: Timestamp) -> Self {
        let (pgid, _) = watch::channel(None);
        ExecContext {
            attempt,
            stop: StopListener::never(),
            pgid,
            log_dir: log_dir.into(),
            log_cap: DEFAULT_LOG_CAP,
            kill_grace: DEFAULT_KILL_GRACE,
            started_at: now,
            lease_marker: None,
            containment: None,
            limits: Limits::default(),
            reporter: None,
            hide_gpus: false,
        }
    }

    /// The attempt number (the claim's fencing token), 1-based.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Fires when the runner wants the job stopped; an executor must then
    /// stop within the kill grace (or at once when the request is
    /// immediate), or the runner abandons it.
    pub fn stop(&self) -> StopListener {
        self.stop.clone()
    }

    /// Records the process group the job runs in, so that it can be killed
    /// by a successor if this runner dies. Call it as soon as the child
    /// exists.
    pub fn report_pgid(&self, pgid: i32) {
        self.pgid.send_replace(Some(pgid));
    }

    /// Where the job's output log goes.
    pub fn log_path(&self, job: &Job) -> PathBuf {
        crate::logfile::log_path(&self.log_dir, job.id)
    }

    /// TERM first, KILL after this long.
    pub fn kill_grace(&self) -> Duration {
        self.kill_grace
    }
}

/// How an attempt ended, as the executor saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecOutcome {
    /// The job did its work.
    Success {
        /// A short summary (the last line of output).
        result: Option<String>,
        /// The process's exit code, if there was a process.
        exit_code: Option<i32>,
    },
    /// The job failed on its own.
    Failure {
        /// Why, in one line (`exit code 3: no such file`).
        error: String,
        /// The process's exit code, if it exited.
        exit_code: Option<i32>,
        /// Another attempt would fail the same way (say, a payload the
        /// handler cannot read): the job ends `failed` now instead of
        /// being retried (`slothqueue_core::Failure::permanent`). The
        /// shell executor never says so: a command is retried.
        permanent: bool,
    },
    /// The executor stopped the job because the runner asked; the runner
    /// knows why and words it (`timeout: exceeded max runtime of 2s
    /// (process group killed)`).
    Stopped {
        /// What was done to stop it, e.g. `process group killed`.
        detail: String,
    },
}

impl ExecOutcome {
    /// A success with a result.
    pub fn success(result: impl Into<String>) -> Self {
        ExecOutcome::Success { result: Some(result.into()), exit_code: None }
    }

    /// A failure with an error, retried while the job has attempts left.
    pub fn failure(error: impl Into<String>) -> Self {
        ExecOutcome::Failure { error: error.into(), exit_code: None, permanent: false }
    }

    /// A failure that another attempt would repeat: the job ends `failed`
    /// at once, whatever attempts it has left.
    pub fn permanent_failure(error: impl Into<String>) -> Self {
        ExecOutcome::Failure { error: error.into(), exit_code: None, permanent: true }
    }
}

/// Runs jobs of one or more kinds.
#[async_trait]
pub trait Executor: Send + Sync {
    /// Runs one attempt of `job`. Must watch `ctx.stop()` and stop when
    /// asked, returning [`ExecOutcome::Stopped`].
    async fn execute(&self, job: &Job, ctx: ExecContext) -> ExecOutcome;
}

/// An executor from an async function, for library users' handlers.
///
/// The function gets its own copy of the job. It should watch
/// `ctx.stop()`; if it ignores it, the runner drops the future after the
/// kill grace.
pub fn handler_fn<F, Fut>(f: F) -> Arc<dyn Executor>
where
    F: Fn(Job, ExecContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ExecOutcome> + Send + 'static,
{
    Arc::new(FnExecutor(f))
}

struct FnExecutor<F>(F);

#[async_trait]
impl<F, Fut> Executor for FnExecutor<F>
where
    F: Fn(Job, ExecContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ExecOutcome> + Send + 'static,
{
    async fn execute(&self, job: &Job, ctx: ExecContext) -> ExecOutcome {
        (self.0)(job.clone(), ctx).await
    }
}

/// Whether a shell job's `cwd` is a directory a job can start in here (it
/// exists, and following links, is a directory). The one rule for it:
/// the executor checks it before each attempt, and the HTTP API at
/// enqueue, so that a `cwd` with a typo is refused when it is given, as
/// `slothqueue add` records only the directory it runs in.
pub fn working_dir_exists(dir: &str) -> bool {
    Path::new(dir).is_dir()
}

/// Runs `shell` jobs: `/bin/sh -c <command>` in the recorded `cwd`, with
/// the payload's `env`, stdin from `/dev/null`, output to the job's log.
///
/// The environment follows the payload's `env_mode`
/// ([`EnvMode`]): `exact` is the payload's
/// `env` and the job's `SLOTHQUEUE_*` variables, nothing of the runner's;
/// `inherit` (a payload that names no mode) is the runner's environment
/// minus its `SLOTHQUEUE_*`, with `env` laid over it. The shell is named
/// by absolute path, so it is found whatever `PATH` the job has.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShellExecutor;

#[async_trait]
impl Executor for ShellExecutor {
    async fn execute(&self, job: &Job, ctx: ExecContext) -> ExecOutcome {
        let Some(command) = job.command() else {
            return ExecOutcome::failure(format!(
                "job #{} has no `command` in its payload; nothing to run",
                job.id
            ));
        };
        let cwd = match job.payload.get("cwd") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(dir)) => {
                if !working_dir_exists(dir) {
                    return ExecOutcome::failure(format!(
                        "working directory {dir} no longer exists (recorded when the job was added)"
                    ));
                }
                Some(PathBuf::from(dir))
            }
            Some(_) => return ExecOutcome::failure("`cwd` in the payload must be a string"),
        };
        let mut env = Vec::new();
        match job.payload.get("env") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Object(vars)) => {
                for (k, v) in vars {
                    if k.is_empty() || k.contains('=') || k.contains('\0') {
                        return ExecOutcome::failure(format!(
                            "environment variable name `{k}` is not valid"
                        ));
                    }
                    let v = match v {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    if v.contains('\0') {
                        return ExecOutcome::failure(format!(
                            "environment variable `{k}` contains a NUL byte"
                        ));
                    }
                    env.push((k.clone(), v));
                }
            }
            Some(_) => return ExecOutcome::failure("`env` in the payload must be an object"),
        }
        let env_mode = match EnvMode::of(&job.payload) {
            Ok(mode) => mode,
            Err(e) => return ExecOutcome::failure(e),
        };
        let limits = match Limits::of(&job.payload) {
            Ok(own) => own.over(&ctx.limits),
            Err(e) => return ExecOutcome::failure(e),
        };
        let spec = ProcessSpec {
            program: PathBuf::from(SHELL),
            args: vec!["-c".into(), command.into()],
            cwd,
            env,
            env_mode,
            limits: Some(limits),
            stdin: None,
            what: format!("sh -c {command}"),
        };
        run_process(job, spec, ctx).await
    }
}

/// Runs a job of kind `K` as the executable `DIR/K`, with the payload JSON
/// on stdin and `SLOTHQUEUE_JOB_ID`, `SLOTHQUEUE_ATTEMPT` and
/// `SLOTHQUEUE_KIND` in the environment.
///
/// Nothing outside `DIR` ever runs: `K` must be a plain name (no `/`, no
/// leading `.`), and `DIR/K` resolved through symlinks must still lie in
/// `DIR` resolved.
///
/// Nothing another user could have written runs either: the handler (resolved)
/// and every folder from it up to `DIR` (included) must be this user's or
/// root's and writable by neither group nor others — the queue file's rule
/// ([`crate::private`]), since whoever can change a handler runs commands
/// as the runner's user. A handler that fails it is *refused*: not among
/// [`HandlerDirExecutor::kinds`], so a runner never claims its jobs (they
/// stay pending, counted as unserved), and listed with the reason in
/// [`HandlerDirExecutor::refused`] for the runner to say once.
#[derive(Clone, Debug)]
pub struct HandlerDirExecutor {
    dir: PathBuf,
    kinds: Vec<String>,
    refused: Vec<RefusedHandler>,
}

/// A handler the directory has but that must not run, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedHandler {
    /// The kind (the file's name in the directory).
    pub kind: String,
    /// Why, in one line naming the file or folder at fault.
    pub why: String,
}

/// Why a name in the directory does not run.
enum Unfit {
    /// It is no handler at all (not a plain name, missing, outside the
    /// directory, not an executable file): left out silently at open.
    NotAHandler(String),
    /// A handler, but one that others could have changed: refused, said.
    Refused(String),
}

impl HandlerDirExecutor {
    /// Opens a handler directory and lists its handlers (executable files
    /// with plain names), vetted: the list and the refusals are fixed for
    /// the runner's lifetime, and the runner only claims kinds it can run.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, RunnerError> {
        let given = dir.as_ref();
        let dir = given.canonicalize().map_err(|e| {
            RunnerError::io(format!("cannot open handler directory {}", given.display()), e)
        })?;
        if !dir.is_dir() {
            return Err(RunnerError::Handler(format!(
                "handler directory {} is not a directory",
                given.display()
            )));
        }
        let entries = std::fs::read_dir(&dir).map_err(|e| {
            RunnerError::io(format!("cannot list handler directory {}", dir.display()), e)
        })?;
        let mut this = HandlerDirExecutor { dir, kinds: Vec::new(), refused: Vec::new() };
        let mut names: Vec<String> =
            entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
        names.sort();
        for name in names {
            match this.find(&name) {
                Ok(_) => this.kinds.push(name),
                Err(Unfit::Refused(why)) => this.refused.push(RefusedHandler { kind: name, why }),
                Err(Unfit::NotAHandler(_)) => {}
            }
        }
        Ok(this)
    }

    /// The directory, resolved.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The kinds this directory handles (its vetted executables' names).
    pub fn kinds(&self) -> &[String] {
        &self.kinds
    }

    /// The handlers found but refused at open, by name, with why.
    pub fn refused(&self) -> &[RefusedHandler] {
        &self.refused
    }

    /// The executable for `kind`, or why there is none (or why it must not
    /// run). Vetted again at every call: a handler made writable after the
    /// open is refused from then on.
    pub fn resolve(&self, kind: &str) -> Result<PathBuf, RunnerError> {
        self.find(kind).map_err(|unfit| match unfit {
            Unfit::NotAHandler(why) | Unfit::Refused(why) => RunnerError::Handler(why),
        })
    }

    fn find(&self, kind: &str) -> Result<PathBuf, Unfit> {
        if !is_plain_name(kind) {
            return Err(Unfit::NotAHandler(format!(
                "handler name `{kind}` is not a plain name (letters, digits, `-`, `_`, `.`)"
            )));
        }
        let path = self.dir.join(kind);
        let real = path.canonicalize().map_err(|e| {
            Unfit::NotAHandler(format!("no handler `{kind}` in {}: {e}", self.dir.display()))
        })?;
        if !real.starts_with(&self.dir) {
            return Err(Unfit::NotAHandler(format!(
                "handler `{kind}` resolves to {}, outside {}; refusing to run it",
                real.display(),
                self.dir.display()
            )));
        }
        let meta = real.metadata().map_err(|e| {
            Unfit::NotAHandler(format!("cannot inspect handler {}: {e}", real.display()))
        })?;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            return Err(Unfit::NotAHandler(format!(
                "handler {} is not an executable file",
                real.display()
            )));
        }
        self.vet(&real, &meta)?;
        Ok(real)
    }

    /// The handler `real` (resolved, inside the directory) and each folder
    /// from it up to the directory, by the queue file's rule.
    fn vet(&self, real: &Path, meta: &std::fs::Metadata) -> Result<(), Unfit> {
        let refuse = |what: String, why: NotPrivate| {
            Unfit::Refused(format!(
                "{what} {why}: whoever can change it can run commands as you; refusing to run handler {}",
                real.display()
            ))
        };
        check_private(meta, AlsoOwnedBy::Root)
            .map_err(|why| refuse(format!("handler {}", real.display()), why))?;
        for folder in real.ancestors().skip(1) {
            let meta = folder.metadata().map_err(|e| {
                Unfit::Refused(format!("cannot inspect folder {}: {e}", folder.display()))
            })?;
            check_private(&meta, AlsoOwnedBy::Root)
                .map_err(|why| refuse(format!("folder {}", folder.display()), why))?;
            if folder == self.dir {
                break;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Executor for HandlerDirExecutor {
    async fn execute(&self, job: &Job, ctx: ExecContext) -> ExecOutcome {
        let program = match self.resolve(&job.kind) {
            Ok(p) => p,
            Err(e) => return ExecOutcome::failure(e.to_string()),
        };
        let stdin = match serde_json::to_vec(&job.payload) {
            Ok(mut bytes) => {
                bytes.push(b'\n');
                bytes
            }
            Err(e) => return ExecOutcome::failure(format!("cannot encode the payload: {e}")),
        };
        let spec = ProcessSpec {
            what: program.display().to_string(),
            program,
            args: Vec::new(),
            cwd: None,
            env: Vec::new(),
            env_mode: EnvMode::Inherit,
            // A handler's payload is its own business: the runner's limits.
            limits: Some(ctx.limits),
            stdin: Some(stdin),
        };
        run_process(job, spec, ctx).await
    }
}
