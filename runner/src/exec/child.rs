//! A child process's life for a job: spawned as the leader of its own
//! process group (contained and limited where it can be), its output to
//! the job's log under a header, stopped when the runner asks through the
//! [`ExecContext`], and reaped with every process of its group.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use slothqueue_core::shell::EnvMode;
use slothqueue_core::{Job, Limits};
use tokio::io::AsyncWriteExt;

use crate::contain::Containment;
use crate::event::RunnerEvent;
use crate::fmt::format_timestamp;
use crate::limits::{InForce, Plan};
use crate::logfile::{Capture, LogTarget};
use crate::process::group::{group_alive, signal_group, stop_group};
use crate::process::manners;
use crate::process::spawn::{manners_before_exec, prepare_child};
use crate::stop::StopListener;

use super::{ExecContext, ExecOutcome};

/// How long to wait for the last output after a job's group is gone.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

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
        // An attempt's GPUs (or, under `--hide-gpus`, none), over whatever
        // the job's own env says: the runner decides which GPUs it uses.
        let holds = job.lease.as_ref().map(|l| l.gpus.as_slice()).unwrap_or_default();
        env.extend(crate::gpu::gpu_env(holds, ctx.hide_gpus));
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
