//! Executors: what runs a job of a given kind.
//!
//! The runner owns the policy (max runtime, heartbeats, cancel, lost lease,
//! shutdown) and tells an executor to stop through its [`ExecContext`]; an
//! executor owns the mechanism (a process group to signal, a future to
//! finish). So every executor gets the same timeouts and the same stop
//! semantics, and a library user's async handler is a first-class citizen
//! next to shell commands and handler directories.

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use slothqueue_core::machine::is_plain_name;
use slothqueue_core::shell::EnvMode;
use slothqueue_core::{Job, Limits, Timestamp};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use crate::contain::Containment;
use crate::error::RunnerError;
use crate::event::{Reporter, RunnerEvent};
use crate::fmt::format_timestamp;
use crate::limits::{InForce, Plan};
use crate::logfile::{Capture, LogTarget};
use crate::process::group::{group_alive, signal_group, stop_group};
use crate::process::manners;
use crate::process::spawn::{manners_before_exec, prepare_child};
use crate::stop::StopListener;

/// The shell that runs shell jobs, by absolute path: an `exact` job's
/// `PATH` is its own, and the runner's must not be needed to find it.
pub(crate) const SHELL: &str = "/bin/sh";

/// How long to wait for the last output after a job's group is gone.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);
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
                if !Path::new(dir).is_dir() {
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
#[derive(Clone, Debug)]
pub struct HandlerDirExecutor {
    dir: PathBuf,
    kinds: Vec<String>,
}

impl HandlerDirExecutor {
    /// Opens a handler directory and lists its handlers (executable files
    /// with plain names). The list is fixed for the runner's lifetime: the
    /// runner only claims kinds it can run.
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
        let mut this = HandlerDirExecutor { dir, kinds: Vec::new() };
        let mut kinds: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| this.resolve(name).is_ok())
            .collect();
        kinds.sort();
        this.kinds = kinds;
        Ok(this)
    }

    /// The directory, resolved.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The kinds this directory handles (its executables' names).
    pub fn kinds(&self) -> &[String] {
        &self.kinds
    }

    /// The executable for `kind`, or why there is none.
    pub fn resolve(&self, kind: &str) -> Result<PathBuf, RunnerError> {
        if !is_plain_name(kind) {
            return Err(RunnerError::Handler(format!(
                "handler name `{kind}` is not a plain name (letters, digits, `-`, `_`, `.`)"
            )));
        }
        let path = self.dir.join(kind);
        let real = path.canonicalize().map_err(|e| {
            RunnerError::Handler(format!("no handler `{kind}` in {}: {e}", self.dir.display()))
        })?;
        if !real.starts_with(&self.dir) {
            return Err(RunnerError::Handler(format!(
                "handler `{kind}` resolves to {}, outside {}; refusing to run it",
                real.display(),
                self.dir.display()
            )));
        }
        let meta = real.metadata().map_err(|e| {
            RunnerError::Handler(format!("cannot inspect handler {}: {e}", real.display()))
        })?;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            return Err(RunnerError::Handler(format!(
                "handler {} is not an executable file",
                real.display()
            )));
        }
        Ok(real)
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

/// A process to run for a job.
pub(crate) struct ProcessSpec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub cwd: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    /// Whether `env` is the whole environment (`Exact`) or laid over the
    /// runner's (`Inherit`); the `SLOTHQUEUE_*` variables are added either way.
    pub env_mode: EnvMode,
    /// The limits to run under (every default but the niceness and I/O
    /// class filled in); `None` for a process that is not a job (the
    /// on-finish command), which runs as the runner does.
    pub limits: Option<Limits>,
    pub stdin: Option<Vec<u8>>,
    /// How the log header names it.
    pub what: String,
}

/// Runs `spec` as the leader of a new process group, output to the job's
/// log, until it exits or the runner asks it to stop.
pub(crate) async fn run_process(job: &Job, spec: ProcessSpec, mut ctx: ExecContext) -> ExecOutcome {
    let header = Header {
        start: format!(
            "--- job #{} attempt {}/{} started {}",
            job.id,
            ctx.attempt,
            job.max_attempts,
            format_timestamp(ctx.started_at)
        ),
        what: spec.what,
    };
    let mut env = spec.env;
    env.push(("SLOTHQUEUE_JOB_ID".into(), job.id.to_string()));
    env.push(("SLOTHQUEUE_ATTEMPT".into(), ctx.attempt.to_string()));
    env.push(("SLOTHQUEUE_KIND".into(), job.kind.clone()));
    env.push(("SLOTHQUEUE_QUEUE".into(), job.queue.clone()));
    if let Some(marker) = &ctx.lease_marker {
        env.push((crate::contain::LEASE_VAR.into(), marker.clone()));
    }
    let mut cmd = tokio::process::Command::new(&spec.program);
    cmd.args(&spec.args);
    match spec.env_mode {
        EnvMode::Exact => {
            cmd.env_clear();
        }
        EnvMode::Inherit => scrub_env(&mut cmd),
    }
    let how = How { cwd: spec.cwd, env, stdin: spec.stdin, limits: spec.limits };
    let (outcome, log_error) = spawn_and_wait(job, cmd, how, header, &mut ctx).await;
    match (outcome, log_error) {
        (ExecOutcome::Failure { error, exit_code, permanent }, Some(w)) => {
            ExecOutcome::Failure { error: format!("{error} ({w})"), exit_code, permanent }
        }
        // The job did its work, but its log is incomplete: said in its
        // result, not dropped.
        (ExecOutcome::Success { result, exit_code }, Some(w)) => ExecOutcome::Success {
            result: Some(match result {
                Some(r) => format!("{r} ({w})"),
                None => w,
            }),
            exit_code,
        },
        (o, _) => o,
    }
}

/// Environment variables the runner's own environment must not pass on:
/// anything of slothqueue's (an HTTP token, the queue path) is not the
/// job's business. Jobs get their own `SLOTHQUEUE_*` variables instead.
fn scrub_env(cmd: &mut tokio::process::Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SLOTHQUEUE_") {
            cmd.env_remove(k);
        }
    }
}

/// The log header of an attempt, said once the job runs:
/// `--- job #3 attempt 1/3 started 2026-01-02 10:00:00, contained by
/// cgroup, limits: nice 10, ionice best-effort:7: sh -c make ---`. `show`
/// reads the mechanism and the limits back (`contained_by`), so the limits
/// part never holds `": "` ([`InForce`]).
struct Header {
    /// Up to the start time.
    start: String,
    /// What runs.
    what: String,
}

/// How the process runs besides its command.
struct How {
    cwd: Option<PathBuf>,
    env: Vec<(String, String)>,
    stdin: Option<Vec<u8>>,
    limits: Option<Limits>,
}

async fn spawn_and_wait(
    job: &Job,
    mut cmd: tokio::process::Command,
    how: How,
    header: Header,
    ctx: &mut ExecContext,
) -> (ExecOutcome, Option<String>) {
    let How { cwd, env, stdin, limits } = how;
    let failure = |m: String| (ExecOutcome::failure(m), None);
    cmd.envs(env);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    // One pipe for stdout and stderr keeps their order in the log.
    let (reader, writer) = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
        Ok(p) => p,
        Err(e) => return failure(format!("cannot create a pipe for output: {e}")),
    };
    let writer2 = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return failure(format!("cannot create a pipe for output: {e}")),
    };
    cmd.stdout(Stdio::from(writer)).stderr(Stdio::from(writer2));
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    cmd.kill_on_drop(false);
    let hooked = prepare_child(&mut cmd);
    let containment = ctx.containment.clone();
    let plan = limits.as_ref().map(Plan::new);
    // The ceilings first: the cgroups they need are joined before exec.
    let ceilings = match (&plan, &containment) {
        (Some(p), Some(c)) if p.memory_max.is_some() || p.cpu_weight.is_some() => {
            c.set_ceilings(p.memory_max, p.cpu_weight)
        }
        (Some(p), _) => crate::contain::CeilingReport {
            memory: p.memory_max.map(|_| Err("run outside a runner".to_owned())),
            cpu: p.cpu_weight.map(|_| Err("run outside a runner".to_owned())),
        },
        (None, _) => Default::default(),
    };
    let joins = containment.as_ref().is_some_and(|c| c.join_before_exec(&mut cmd));
    if let (Some(p), true) = (&plan, hooked || joins) {
        // The spawn forks anyway: no instruction of the job runs impolitely.
        manners_before_exec(&mut cmd, p.manners);
    }
    let spawned = cmd.spawn();
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    // Drop our copies of the write end now, so the reader sees the end of
    // output when the job's processes are gone.
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return failure(format!("cannot start {program}: {e}")),
    };
    let Some(pgid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
        return failure("the job's process vanished before it could be tracked".to_owned());
    };
    if let Some(c) = &containment {
        c.spawned(pgid as u32);
    }
    // The whole group, at once: on the `posix_spawn` path this is where the
    // manners are set; after a hook, where a failure is seen.
    let in_force = plan.as_ref().map(|p| {
        let set = manners::set_group(pgid, &p.manners);
        // A set the kernel accepted is in force ([`InForce::of`]); only a
        // refusal needs the leader read back, to say what it runs at.
        let refused = set.nice.is_err() || set.ioprio.is_err();
        let live = refused && crate::process::procfs::proc_stat(pgid).is_some_and(|s| s.is_live());
        let seen = if live { manners::read_back(pgid) } else { (None, None) };
        InForce::of(p, set, seen, &ceilings)
    });
    if let (Some(f), Some(r)) = (&in_force, &ctx.reporter) {
        for (limit, why) in f.not_enforced() {
            r.report(RunnerEvent::LimitNotEnforced {
                job: job.id,
                limit: limit.to_owned(),
                why: why.to_owned(),
            });
        }
    }
    // The mechanism holding the attempt's processes and the limits in force
    // are said in its log header: `show` reads them back.
    let contained = match &containment {
        Some(c) => format!(", contained by {}", c.mechanism()),
        None => String::new(),
    };
    let limits_said = match &in_force {
        Some(f) => format!(", limits: {f}"),
        None => String::new(),
    };
    let log = LogTarget {
        dir: ctx.log_dir.clone(),
        id: job.id,
        cap: ctx.log_cap,
        header: format!("{}{contained}{limits_said}: {} ---", header.start, header.what),
    };
    slothqueue_core::failpoint::hit("after_spawn"); // the child runs; its group is not recorded yet
    let mut guard = GroupGuard { pgid, armed: true };
    ctx.report_pgid(pgid);
    let capture = Capture::start(std::fs::File::from(reader), log);
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // Written beside the job, so a handler that never reads stdin
        // cannot block the runner; a closed pipe is the handler's choice.
        tokio::spawn(async move {
            let _ = pipe.write_all(&bytes).await;
            let _ = pipe.shutdown().await;
        });
    }
    let grace = ctx.kill_grace;
    let result = tokio::select! {
        status = child.wait() => Ok(status),
        request = ctx.stop.requested() => Err(request),
    };
    let (outcome, report) = match (result, &containment) {
        (Ok(status), Some(c)) => {
            // The leader is gone; whatever it started (`cmd &`, a daemon,
            // a new session) is still the job's and ends with it, before
            // the attempt is recorded.
            let report = stop_all(c, grace, &mut ctx.stop).await;
            (Ok(status), Some(report))
        }
        (Ok(status), None) => {
            // The leader is gone; a `cmd &` it left behind is still the
            // job's and ends with it.
            if group_alive(pgid) {
                stop_group(pgid, None, grace, Some(&mut ctx.stop)).await;
            }
            (Ok(status), None)
        }
        (Err(_), Some(c)) => {
            // Everything of the attempt, the leader included (it is not
            // reaped until it was signalled: its pid cannot be reused).
            let report = stop_all(c, grace, &mut ctx.stop).await;
            let _ = tokio::time::timeout(LEADER_REAP, child.wait()).await;
            (Err(()), Some(report))
        }
        (Err(_), None) => {
            stop_group(pgid, Some(&mut child), grace, Some(&mut ctx.stop)).await;
            (Err(()), None)
        }
    };
    guard.armed = false;
    let captured = match capture {
        Ok(c) => c.finish(OUTPUT_DRAIN).await,
        Err(_) => Default::default(),
    };
    let outcome = match outcome {
        Err(()) => ExecOutcome::Stopped {
            detail: match &report {
                Some(r) => stopped_detail(r),
                None => "process group killed".into(),
            },
        },
        Ok(Err(e)) => ExecOutcome::failure(format!("lost track of the job's process: {e}")),
        Ok(Ok(status)) => {
            let last = captured.last_line;
            match (status.code(), status.signal()) {
                (Some(0), _) => ExecOutcome::Success { result: last, exit_code: Some(0) },
                (Some(code), _) => ExecOutcome::Failure {
                    error: match last {
                        Some(l) => format!("exit code {code}: {l}"),
                        None => format!("exit code {code}"),
                    },
                    exit_code: Some(code),
                    permanent: false,
                },
                (None, Some(sig)) => ExecOutcome::Failure {
                    error: format!("killed by signal {sig}"),
                    exit_code: None,
                    permanent: false,
                },
                (None, None) => ExecOutcome::failure(format!("ended with {status}")),
            }
        }
    };
    // A failure the memory ceiling caused says so, not `exit code 137`:
    // the kernel killed a process of the attempt for going over it.
    let outcome = match (outcome, containment.as_ref().and_then(|c| c.memory_exceeded())) {
        (ExecOutcome::Failure { .. }, Some(limit)) => {
            ExecOutcome::failure(crate::contain::memory_exceeded(limit))
        }
        (o, _) => o,
    };
    (outcome, captured.log_error)
}

/// How long to wait for the KILLed leader's exit status after the
/// attempt was stopped (it is dead unless in uninterruptible sleep).
const LEADER_REAP: Duration = Duration::from_secs(1);

/// Stops everything of the attempt with `grace`, or at once when the stop
/// request is or becomes immediate (a second Ctrl-C).
async fn stop_all(
    c: &Containment,
    grace: Duration,
    stop: &mut StopListener,
) -> crate::contain::StopReport {
    if stop.current().is_some_and(|r| r.immediate) {
        return c.stop_all(Duration::ZERO).await;
    }
    tokio::select! {
        report = c.stop_all(grace) => report,
        () = stop.immediate() => c.stop_all(Duration::ZERO).await,
    }
}

/// What a stop did, as the attempt's failure records it: `all its
/// processes killed, contained by cgroup` (how many depends on timing, so
/// it is not said).
fn stopped_detail(r: &crate::contain::StopReport) -> String {
    match r.survivors.len() {
        0 => format!("all its processes killed, contained by {}", r.mechanism),
        n => format!(
            "killed, but {n} process{} still alive after KILL, contained by {}",
            if n == 1 { "" } else { "es" },
            r.mechanism
        ),
    }
}

/// Kills the job's group if the future running it is dropped (the runner
/// abandoned it, or its task was aborted): no job outlives its executor.
struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pgid, rustix::process::Signal::KILL);
        }
    }
}
