//! S11 (forward clock jump, SIGSTOP past the lease) and S12 (backward
//! step).
//!
//! The `slothqueue` binary reads the system clock and offers no way to
//! inject another, so these scenarios run the library's `Runner` (the one
//! the binary wraps, with the real `/proc` liveness judge) in separate
//! processes of this harness (`lib-runner`), whose wall clock is the
//! system's plus an offset read from a file the scenario rewrites: every
//! runner of a scenario sees the same jump at once.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rustix::process::Signal;
use slothqueue_core::{Clock, EventKind, JobId, JobState, Policy, Store, SystemClock, Timestamp};
use slothqueue_runner::{Mode, Runner, RunnerConfig, RunnerEvent, log_dir_for, unix_signals};
use slothqueue_store_postgres::{PgOptions, PgStore};
use slothqueue_store_redb::{RedbOptions, RedbStore};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

use crate::ctx::{Ctx, Status};
use crate::history::{self, Expect, History};
use crate::processes::add_job;
use crate::queue;
use crate::util::{Procs, group_members, sh_quote, wait_for};

/// The system clock plus an offset (ms) read from a file at every look.
#[derive(Debug)]
struct FileClock(PathBuf);

impl Clock for FileClock {
    fn now(&self) -> Timestamp {
        let offset: i64 =
            std::fs::read_to_string(&self.0).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        Timestamp::from_millis(SystemClock.now().as_millis().saturating_add(offset))
    }
}

/// The lease the lib-runners' stores give: short, so heartbeats (a third
/// of it) happen within a scenario.
const LEASE: Duration = Duration::from_secs(3);

/// `lib-runner --backend B --db PATH --clock FILE`: drains the queue with
/// the library runner, its clock offset by the file, printing each event.
pub fn lib_runner(args: &[String]) -> Result<ExitCode> {
    let get = |k: &str| -> Result<String> {
        let i = args.iter().position(|a| a == k).with_context(|| format!("{k} is required"))?;
        args.get(i + 1).cloned().with_context(|| format!("{k} needs a value"))
    };
    let db = PathBuf::from(get("--db")?);
    let clock = PathBuf::from(get("--clock")?);
    let policy = Policy { lease_ttl: LEASE, ..Policy::default() };
    let store: Arc<dyn Store> = match get("--backend")?.as_str() {
        "sqlite" => {
            Arc::new(SqliteStore::open(&db, SqliteOptions { policy, ..SqliteOptions::default() })?)
        }
        "redb" => Arc::new(RedbStore::open(&db, RedbOptions { policy, ..RedbOptions::default() })?),
        "postgres" => {
            let url = db.to_str().context("--db: not UTF-8")?;
            Arc::new(PgStore::open(url, PgOptions { policy, ..PgOptions::default() })?)
        }
        other => bail!("unknown backend {other}"),
    };
    // A queue on a server has no folder of its own: its logs go to the
    // scenario directory the harness runs us in.
    let logs = if get("--backend")? == "postgres" {
        std::env::current_dir().context("no current directory")?.join("logs")
    } else {
        log_dir_for(&db)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start tokio")?;
    let summary = rt.block_on(async move {
        let shutdown = unix_signals()?;
        let mut cfg = RunnerConfig::new(logs);
        cfg.mode = Mode::Drain;
        cfg.clock = Arc::new(FileClock(clock));
        let runner = Runner::new(store, cfg);
        runner
            .run(
                |e: RunnerEvent| {
                    use std::io::Write;
                    let _ = writeln!(std::io::stdout().lock(), "{e}");
                },
                shutdown,
            )
            .await
            .context("the runner failed")
    })?;
    Ok(ExitCode::from(summary.exit_code()))
}

fn lib_runner_cmd(ctx: &Ctx, db: &Path, clock: &Path) -> Result<Command> {
    let mut cmd = Command::new(std::env::current_exe().context("cannot find the torture binary")?);
    cmd.arg("lib-runner")
        .args(["--backend", ctx.backend.as_str()])
        .args(["--db", &db.to_string_lossy()])
        .args(["--clock", &clock.to_string_lossy()])
        .current_dir(ctx.work_dir(db));
    Ok(cmd)
}

fn set_offset(clock: &Path, ms: i64) -> Result<()> {
    // Written whole and renamed in, so a reader never sees half a number.
    let tmp = clock.with_extension("new");
    std::fs::write(&tmp, ms.to_string()).context("cannot write the clock file")?;
    std::fs::rename(&tmp, clock).context("cannot move the clock file into place")
}

/// One job that runs until `go` exists, started by runner A; then
/// `during` (with A's pid and the job's pid) while it runs; then the job
/// is let go and must end done, run once, never reclaimed.
fn live_owner_case(
    ctx: &mut Ctx,
    name: &str,
    during: &mut dyn FnMut(&mut Ctx, &mut Procs, &Case) -> Result<()>,
) -> Result<()> {
    let dir = ctx.dir(name)?;
    let db = ctx.db(&dir);
    let hist = History::new(&dir)?;
    let clock = dir.join("clock-offset");
    set_offset(&clock, 0)?;
    let go = dir.join("go");
    let body = format!("while [ ! -e {} ]; do sleep 0.02; done", sh_quote(&go.to_string_lossy()));
    let id = add_job(ctx, &db, &hist.wrap(&body), &[])?;
    let mut procs = Procs::new(&dir, &ctx.tag(name))?;
    let a = procs.spawn("runner-a", lib_runner_cmd(ctx, &db, &clock)?)?;
    let rec = wait_for(Duration::from_secs(60), "the job to start", || {
        Ok(hist.read()?.into_iter().find(|r| r.kind == 'S' && r.job == id))
    })?;
    let case = Case { db: db.clone(), clock: clock.clone(), id, runner: a, job_pid: rec.pid };
    during(ctx, &mut procs, &case)?;
    std::fs::write(&go, "").context("cannot write the go file")?;
    let e = procs.wait(a, Duration::from_secs(60))?;
    ctx.observe(&e, false);
    if e.code() != Some(0) {
        ctx.problem(format!("{name}: runner A: {}", e.describe()));
    }
    let snap = queue::snapshot(ctx.backend, &db)?;
    let acked = snap.keys().copied().collect();
    let v = history::check(&hist.read()?, &acked, &snap, Expect::ExactlyOnce);
    ctx.verdict(v);
    ctx.integrity(&db, &format!("after {name}"));
    Ok(())
}

struct Case {
    db: PathBuf,
    clock: PathBuf,
    id: JobId,
    runner: i32,
    job_pid: i32,
}

/// Runs runner B to its end; it must take nothing from the live A.
fn second_runner_takes_nothing(ctx: &mut Ctx, case: &Case, what: &str) -> Result<()> {
    let cmd = lib_runner_cmd(ctx, &case.db, &case.clock)?;
    let e = crate::util::run_capture("runner B", cmd, Duration::from_secs(60), &ctx.tag("b"))?;
    ctx.observe(&e, false);
    if e.code() != Some(0) || e.stdout.contains("reclaimed") || !e.stdout.contains("0 done") {
        ctx.problem(format!("{what}: runner B: {} / {}", e.describe(), e.stdout.trim()));
    }
    let job = queue::get(ctx.backend, &case.db, case.id)?;
    if job.state != JobState::Running || job.attempts != 1 {
        ctx.problem(format!("{what}: job is {} after {} attempt(s)", job.state, job.attempts));
    }
    Ok(())
}

/// Waits for A's next heartbeat to extend the lease past `after`.
fn heartbeat_extends(ctx: &Ctx, case: &Case, after: Timestamp, what: &str) -> Result<()> {
    wait_for(Duration::from_secs(15), what, || {
        let job = queue::get(ctx.backend, &case.db, case.id)?;
        Ok(job.lease.filter(|l| l.until > after).map(|_| ()))
    })
}

const TWO_HOURS_MS: i64 = 2 * 3600 * 1000;

/// S11: a forward clock jump with a live owner (a laptop waking up), a
/// runner SIGSTOPped past its lease, and a whole-"machine" pause (runner
/// and job stopped): a second runner takes nothing, the first one's
/// heartbeat extends the lease from the new now, the job runs once.
pub fn s11_forward_jump(ctx: &mut Ctx) -> Result<Status> {
    live_owner_case(ctx, "s11-jump", &mut |ctx, _procs, case| {
        set_offset(&case.clock, TWO_HOURS_MS)?;
        second_runner_takes_nothing(ctx, case, "jump with a live owner")?;
        let jumped = SystemClock.now().saturating_add(Duration::from_millis(TWO_HOURS_MS as u64));
        heartbeat_extends(ctx, case, jumped, "runner A's heartbeat after the jump")
    })?;
    live_owner_case(ctx, "s11-sigstop", &mut |ctx, procs, case| {
        procs.signal(case.runner, Signal::STOP)?;
        set_offset(&case.clock, TWO_HOURS_MS)?;
        second_runner_takes_nothing(ctx, case, "SIGSTOPped runner past its lease")?;
        procs.signal(case.runner, Signal::CONT)?;
        let jumped = SystemClock.now().saturating_add(Duration::from_millis(TWO_HOURS_MS as u64));
        heartbeat_extends(ctx, case, jumped, "runner A's heartbeat after SIGCONT")
    })?;
    live_owner_case(ctx, "s11-pause", &mut |ctx, procs, case| {
        procs.signal(case.runner, Signal::STOP)?;
        procs.signal_group(case.job_pid, Signal::STOP)?;
        set_offset(&case.clock, TWO_HOURS_MS)?;
        second_runner_takes_nothing(ctx, case, "whole pause")?;
        procs.signal_group(case.job_pid, Signal::CONT)?;
        procs.signal(case.runner, Signal::CONT)?;
        if group_members(case.job_pid).is_empty() {
            bail!("the job's group is gone after SIGCONT");
        }
        let jumped = SystemClock.now().saturating_add(Duration::from_millis(TWO_HOURS_MS as u64));
        heartbeat_extends(ctx, case, jumped, "runner A's heartbeat after the pause")
    })?;
    Ok(Status::Ran(
        "+2 h with a live owner, SIGSTOP past the lease, whole pause: no reclaim, one run each (library runner, injected clock)"
            .into(),
    ))
}

/// S12: the wall clock steps back an hour mid-run: no panic, no premature
/// reclaim, the lease extends from the new now, and the CLI shows the
/// job's times without negative ages.
pub fn s12_backward_step(ctx: &mut Ctx) -> Result<Status> {
    let mut id = 0;
    let mut db = PathBuf::new();
    live_owner_case(ctx, "s12", &mut |ctx, _procs, case| {
        id = case.id;
        db = case.db.clone();
        set_offset(&case.clock, -3600 * 1000)?;
        // The next heartbeat writes a lease ending 3 s after the new now:
        // an hour before the old lease's end.
        wait_for(Duration::from_secs(15), "a heartbeat from the new now", || {
            let job = queue::get(ctx.backend, &case.db, case.id)?;
            let early = SystemClock.now().saturating_sub(Duration::from_secs(1800));
            Ok(job.lease.filter(|l| l.until < early).map(|_| ()))
        })?;
        second_runner_takes_nothing(ctx, case, "after the step back")?;
        // Around the new lease's end: B looks again just after it.
        set_offset(&case.clock, -3600 * 1000 + LEASE.as_millis() as i64 + 500)?;
        second_runner_takes_nothing(ctx, case, "just past the lease's end")?;
        set_offset(&case.clock, -3600 * 1000)
    })?;
    let snap = queue::snapshot(ctx.backend, &db)?;
    if let Some((_, events)) = snap.get(&id) {
        if events.iter().any(|e| e.kind == EventKind::Reclaimed) {
            ctx.problem("the job was reclaimed after the step back".to_owned());
        }
    }
    for args in [vec!["list"], vec!["show", &id.to_string()], vec!["status"]] {
        let args: Vec<&str> = args.iter().map(|s| &**s).collect();
        let e = ctx.sq_run(&db, &args)?;
        if e.code() != Some(0) {
            ctx.problem(format!("{}: {}", args.join(" "), e.describe()));
        }
        if e.stdout.contains(" -")
            && e.stdout.lines().any(|l| l.contains("in -") || l.contains(" -1"))
        {
            ctx.problem(format!("{} shows a negative time: {}", args.join(" "), e.stdout.trim()));
        }
    }
    Ok(Status::Ran(
        "−1 h mid-run and around the lease's end: no panic, no reclaim, lease from the new now (library runner, injected clock)"
            .into(),
    ))
}
