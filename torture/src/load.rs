//! S03 (contention), S04 (kill -9 loop), S05 (crash at each step).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use rustix::process::Signal;
use slothqueue_core::JobId;

use crate::ctx::{Ctx, Status};
use crate::history::{self, Expect, History};
use crate::queue;
use crate::util::{Procs, jitter, read_or_empty, wait_for};

/// The torture binary itself, for the helper processes.
pub(crate) fn me() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find the torture binary")
}

/// An enqueuer process (see `helpers::enqueue`).
pub(crate) fn enqueuer(
    ctx: &Ctx,
    db: &Path,
    dir: &Path,
    n: usize,
    extra: &[&str],
) -> Result<Command> {
    let mut cmd = Command::new(me()?);
    cmd.arg("enqueue")
        .args(["--bin", &ctx.opts.bin.to_string_lossy()])
        .args(["--db", &db.to_string_lossy()])
        .args(["--backend", ctx.backend.as_str()])
        .args(["--dir", &dir.to_string_lossy()])
        .args(["--ack", &dir.join(format!("ack-{n}")).to_string_lossy()])
        .args(["--errors", &dir.join(format!("enqueue-errors-{n}")).to_string_lossy()])
        .args(["--seed", &(ctx.opts.seed ^ n as u64).to_string()])
        .args(extra);
    Ok(cmd)
}

/// Every id acknowledged in `dir/ack-*`.
pub(crate) fn acked(dir: &Path) -> Result<BTreeSet<JobId>> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(dir).context("cannot list the scenario directory")? {
        let entry = entry.context("cannot list the scenario directory")?;
        if entry.file_name().to_string_lossy().starts_with("ack-") {
            for line in read_or_empty(&entry.path())?.lines() {
                if let Ok(id) = line.trim().parse() {
                    out.insert(id);
                }
            }
        }
    }
    Ok(out)
}

/// Lines of every `dir/<prefix>*` file: the helpers' failures.
pub(crate) fn error_lines(dir: &Path, prefix: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).context("cannot list the scenario directory")? {
        let entry = entry.context("cannot list the scenario directory")?;
        if entry.file_name().to_string_lossy().starts_with(prefix) {
            out.extend(read_or_empty(&entry.path())?.lines().map(str::to_owned));
        }
    }
    Ok(out)
}

/// Waits until no job is pending or running.
pub(crate) fn wait_all_terminal(ctx: &Ctx, db: &Path, limit: Duration) -> Result<()> {
    wait_for(limit, "every job to reach a terminal state", || {
        let s = queue::stats(ctx.backend, db)?;
        Ok((s.pending == 0 && s.running == 0).then_some(()))
    })
}

/// Stops runners with SIGTERM and checks they exit as documented.
pub(crate) fn stop_runners(ctx: &mut Ctx, procs: &mut Procs, pids: &[i32]) -> Result<()> {
    for &pid in pids {
        procs.signal(pid, Signal::TERM)?;
    }
    for &pid in pids {
        let e = procs.wait(pid, Duration::from_secs(20))?;
        ctx.observe(&e, false);
        if !matches!(e.code(), Some(0 | 130)) {
            ctx.problem(format!("runner: {}", e.describe()));
        }
    }
    Ok(())
}

/// S03: 4 runner processes, 2 enqueuer processes and a stats poller over
/// 500 jobs: every job exactly once, no overlap, no `database is locked`,
/// integrity ok.
pub fn s03_contention(ctx: &mut Ctx) -> Result<Status> {
    let dir = ctx.dir("s03")?;
    let db = ctx.db(&dir);
    let hist = History::new(&dir)?;
    let mut procs = Procs::new(&dir, &ctx.tag("s03"))?;
    let total: usize = 500;
    let (runners, enqueuers) = (4, 2);
    let per = total / enqueuers;
    let mut enq = Vec::new();
    for n in 0..enqueuers {
        let cmd = enqueuer(
            ctx,
            &db,
            &dir,
            n,
            &[
                "--count",
                &per.to_string(),
                "--min-ms",
                "0",
                "--max-ms",
                "20",
                "--max-attempts",
                "3",
            ],
        )?;
        enq.push(procs.spawn(&format!("enqueuer{n}"), cmd)?);
    }
    // Runners in follow mode sleep up to a poll interval when they find
    // nothing; start them once there is work.
    wait_for(Duration::from_secs(60), "the first acknowledged add", || {
        Ok((!acked(&dir)?.is_empty()).then_some(()))
    })?;
    let mut rpids = Vec::new();
    for n in 0..runners {
        rpids.push(procs.spawn(&format!("runner{n}"), ctx.runner_cmd(&db, &["--follow"]))?);
    }
    let mut poll = Command::new(me()?);
    poll.arg("poll")
        .args(["--bin", &ctx.opts.bin.to_string_lossy()])
        .args(["--db", &db.to_string_lossy()])
        .args(["--backend", ctx.backend.as_str()])
        .args(["--errors", &dir.join("poll-errors").to_string_lossy()]);
    let poller = procs.spawn("poller", poll)?;
    for pid in enq {
        let e = procs.wait(pid, Duration::from_secs(300))?;
        ctx.observe(&e, false);
        if e.code() != Some(0) {
            ctx.problem(format!("enqueuer: {}", e.describe()));
        }
    }
    wait_all_terminal(ctx, &db, Duration::from_secs(300))?;
    procs.kill(poller)?;
    stop_runners(ctx, &mut procs, &rpids)?;
    for line in
        error_lines(&dir, "enqueue-errors")?.into_iter().chain(error_lines(&dir, "poll-errors")?)
    {
        if line.contains("database is locked") {
            ctx.tally.locked_messages += 1;
        }
        ctx.problem(format!("a CLI call failed under contention: {line}"));
    }
    let ended = std::mem::take(&mut procs.ended);
    for e in &ended {
        ctx.observe(e, false);
    }
    let acked = acked(&dir)?;
    if acked.len() != total {
        ctx.problem(format!("{} of {total} adds acknowledged", acked.len()));
    }
    let snap = queue::snapshot(ctx.backend, &db)?;
    let v = history::check(&hist.read()?, &acked, &snap, Expect::ExactlyOnce);
    let summary = format!(
        "{} jobs, {} executions, {} runners, {} enqueuers",
        v.jobs, v.executions, runners, enqueuers
    );
    ctx.verdict(v);
    ctx.integrity(&db, "after S03");
    let strays = procs.shutdown();
    if strays > 0 {
        ctx.problem(format!("{strays} stray process(es) left behind"));
    }
    Ok(Status::Ran(summary))
}

/// S04: kill -9 of random runners (and sometimes the enqueuer) at random
/// moments: nothing acknowledged lost, every job terminal, every extra
/// execution matched by a reclaim and an attempt, no overlap, integrity
/// ok after every iteration.
pub fn s04_kill_loop(ctx: &mut Ctx) -> Result<Status> {
    let dir = ctx.dir("s04")?;
    let db = ctx.db(&dir);
    let hist = History::new(&dir)?;
    let mut procs = Procs::new(&dir, &ctx.tag("s04"))?;
    let iterations = ctx.pick(15, 50);
    let runners = 3;
    let tickets = dir.join("tickets");
    let mut granted: u64 = 4;
    std::fs::write(&tickets, granted.to_string()).context("cannot write tickets")?;
    let enq_args = |already: usize| -> Vec<String> {
        [
            "--tickets",
            &tickets.to_string_lossy(),
            "--already",
            &already.to_string(),
            "--min-ms",
            "20",
            "--max-ms",
            "400",
            "--max-attempts",
            "100",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let mut enq_n = 0;
    let args = enq_args(0);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut enq = procs.spawn("enqueuer", enqueuer(ctx, &db, &dir, enq_n, &args)?)?;
    wait_for(Duration::from_secs(60), "the first acknowledged add", || {
        Ok((!acked(&dir)?.is_empty()).then_some(()))
    })?;
    let mut rpids: Vec<i32> = Vec::new();
    for n in 0..runners {
        rpids.push(procs.spawn(&format!("runner{n}"), ctx.runner_cmd(&db, &["--follow"]))?);
    }
    let mut kills_enqueuer = 0;
    let mut hups = 0;
    for it in 0..iterations {
        granted += ctx.rng.range(2, 6);
        std::fs::write(&tickets, granted.to_string()).context("cannot write tickets")?;
        let target = hist.starts()? + ctx.rng.range(1, 3) as usize;
        wait_for(Duration::from_secs(120), "jobs to start", || {
            Ok((hist.starts()? >= target).then_some(()))
        })
        .with_context(|| format!("iteration {it}"))?;
        jitter(&mut ctx.rng, 60);
        if ctx.rng.chance(1, 5) {
            // The enqueuer and the `add` it may be running, mid-write.
            let e = procs.kill(enq)?;
            ctx.observe(&e, false);
            ctx.tally.kills += 1;
            kills_enqueuer += 1;
            enq_n += 1;
            let args = enq_args(acked(&dir)?.len() + error_lines(&dir, "enqueue-errors")?.len());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            enq = procs.spawn("enqueuer", enqueuer(ctx, &db, &dir, enq_n, &args)?)?;
        } else {
            let i = ctx.rng.range(0, rpids.len() as u64) as usize;
            let victim = rpids[i];
            // Mostly kill -9; one in four a SIGHUP (a closed terminal),
            // which must stop the runner cleanly: its job handed back,
            // exit 130. Only once the runner is at work (it has recorded
            // itself, after listening for signals): a runner still opening
            // its queue (on a server, a connection and a few round trips)
            // dies of the signal's default action, having touched nothing.
            let hup = ctx.rng.chance(1, 4);
            if hup {
                let pid = u32::try_from(victim).context("a negative pid")?;
                wait_for(Duration::from_secs(30), "the runner to record itself", || {
                    Ok(queue::runner_pids(ctx.backend, &db)?.contains(&pid).then_some(()))
                })?;
            }
            procs.signal(victim, if hup { Signal::HUP } else { Signal::KILL })?;
            let e = procs.wait(victim, Duration::from_secs(30))?;
            ctx.observe(&e, false);
            if hup {
                hups += 1;
                if e.code() != Some(130) {
                    ctx.problem(format!("SIGHUP: expected exit 130: {}", e.describe()));
                }
            }
            ctx.tally.kills += 1;
            rpids[i] = procs.spawn(&format!("runner{i}"), ctx.runner_cmd(&db, &["--follow"]))?;
        }
        ctx.integrity(&db, &format!("after iteration {it}"));
        for e in procs.reap()? {
            ctx.problem(format!("exited on its own: {}", e.describe()));
        }
    }
    // Let the enqueuer finish what was granted, then drain.
    wait_for(Duration::from_secs(120), "the enqueuer to use its tickets", || {
        let used = acked(&dir)?.len() + error_lines(&dir, "enqueue-errors")?.len();
        Ok((used as u64 >= granted).then_some(()))
    })?;
    let e = procs.kill(enq)?;
    ctx.observe(&e, false);
    wait_all_terminal(ctx, &db, Duration::from_secs(180))?;
    stop_runners(ctx, &mut procs, &rpids)?;
    for line in error_lines(&dir, "enqueue-errors")? {
        ctx.problem(format!("an add failed: {line}"));
    }
    let acked = acked(&dir)?;
    let snap = queue::snapshot(ctx.backend, &db)?;
    let v = history::check(&hist.read()?, &acked, &snap, Expect::AtLeastOnce);
    let summary = format!(
        "{iterations} iterations, {} kills ({kills_enqueuer} of the enqueuer, {hups} by SIGHUP), {} jobs, {} executions",
        iterations, v.jobs, v.executions
    );
    ctx.verdict(v);
    ctx.integrity(&db, "at the end of S04");
    let strays = procs.shutdown();
    if strays > 0 {
        ctx.problem(format!("{strays} stray process(es) left behind"));
    }
    Ok(Status::Ran(summary))
}

/// The crash points (see `core/src/failpoint.rs`): three in the runner,
/// `mid_complete` inside every store's completing transaction.
const FAILPOINTS: [&str; 4] = ["after_claim", "after_spawn", "before_complete", "mid_complete"];

/// S05: a crash at each step boundary (feature-gated failpoints) loses
/// nothing, runs nothing twice at once, and never leaves a half-applied
/// transition; a crash mid-migration leaves a file that opens.
pub fn s05_failpoints(ctx: &mut Ctx) -> Result<Status> {
    let rounds = ctx.pick(2, 4);
    let mut crashes = 0;
    // `mid_complete` is inside every store's completing transaction (on
    // PostgreSQL, a connection dropped before `COMMIT`).
    for fp in FAILPOINTS {
        let dir = ctx.dir(&format!("s05-{fp}"))?;
        let db = ctx.db(&dir);
        let hist = History::new(&dir)?;
        let mut acked = BTreeSet::new();
        for round in 0..rounds {
            for _ in 0..2 {
                let ms = ctx.rng.range(300, 600);
                let e =
                    ctx.sq_run(&db, &["--json", "add", &hist.sleeper(ms), "--max-attempts", "10"])?;
                match (e.code(), serde_json::from_str::<serde_json::Value>(&e.stdout)) {
                    (Some(0), Ok(v)) => {
                        acked.insert(v["id"].as_i64().context("add printed no id")?);
                    }
                    _ => ctx.problem(format!("add: {}", e.describe())),
                }
            }
            let mut cmd = ctx.runner_cmd(&db, &[]);
            cmd.env("SLOTHQUEUE_FAILPOINT", fp);
            let tag = ctx.tag(&format!("s05-{fp}"));
            let e =
                crate::util::run_capture("runner (failpoint)", cmd, Duration::from_secs(60), &tag)?;
            ctx.observe(&e, true);
            if e.signal() != Some(6) {
                ctx.problem(format!(
                    "{fp} round {round}: the runner did not crash at the failpoint: {}",
                    e.describe()
                ));
            } else {
                crashes += 1;
                ctx.tally.kills += 1;
            }
            // Nothing half-applied right after the crash.
            let snap = queue::snapshot(ctx.backend, &db)?;
            for (id, (job, events)) in &snap {
                if let Some(s) = slothqueue_core::machine::replay(events) {
                    if s != job.state {
                        ctx.problem(format!(
                            "{fp}: job #{id} is {} but its trail says {s}",
                            job.state
                        ));
                    }
                }
            }
            ctx.integrity(&db, &format!("after the crash at {fp}"));
            let e = crate::util::run_capture(
                "runner (recovery)",
                ctx.runner_cmd(&db, &[]),
                Duration::from_secs(120),
                &tag,
            )?;
            ctx.observe(&e, false);
            if e.code() != Some(0) {
                ctx.problem(format!("{fp} round {round}: recovery runner: {}", e.describe()));
            }
        }
        // Orphans of crashed runners end on their own (or were killed).
        let tag = ctx.tag(&format!("s05-{fp}"));
        wait_for(Duration::from_secs(10), "orphaned jobs to end", || {
            Ok(crate::util::tagged(&tag).is_empty().then_some(()))
        })?;
        let snap = queue::snapshot(ctx.backend, &db)?;
        let v = history::check(&hist.read()?, &acked, &snap, Expect::AtLeastOnce);
        for p in &v.problems {
            println!("torture:     [{fp}] {p}");
        }
        ctx.verdict(v);
        ctx.integrity(&db, &format!("at the end of {fp}"));
    }
    let migration = s05_mid_migration(ctx)?;
    Ok(Status::Ran(format!(
        "{crashes} crashes at {} failpoints × {rounds} rounds; mid_migration: {migration}",
        FAILPOINTS.len()
    )))
}

/// A crash while a new file is being set up: the next command must find
/// either no queue, a complete one, or (SQLite) an unfinished one it
/// refuses untouched with a message saying to remove it; after that the
/// queue must work.
fn s05_mid_migration(ctx: &mut Ctx) -> Result<String> {
    let dir = ctx.dir("s05-mid_migration")?;
    let db = ctx.db(&dir);
    let mut cmd = ctx.sq(&db, &["add", "true"]);
    cmd.env("SLOTHQUEUE_FAILPOINT", "mid_migration");
    let e =
        crate::util::run_capture("add (failpoint)", cmd, Duration::from_secs(60), &ctx.tag("mig"))?;
    ctx.observe(&e, true);
    let crashed = e.signal() == Some(6);
    if !crashed && e.code() != Some(0) {
        ctx.problem(format!("mid_migration: {}", e.describe()));
    }
    let before = if crashed { 0 } else { 1 };
    let e = ctx.sq_run(&db, &["--json", "list"])?;
    let mut unfinished = false;
    let listed = match e.code() {
        Some(0) => serde_json::from_str::<serde_json::Value>(&e.stdout)
            .ok()
            .and_then(|v| v.as_array().map(Vec::len))
            .unwrap_or(usize::MAX),
        Some(3) => 0, // "no queue": the crash left nothing
        // A queue whose creation died half-way (SQLite: a database with no
        // tables) is refused untouched, never adopted, and the message
        // says to remove it: the documented remedy, taken here.
        Some(6) if e.stderr.contains("not a queue yet") && e.stderr.contains("remove it") => {
            unfinished = true;
            for suffix in ["", "-wal", "-shm"] {
                let mut p = db.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
            0
        }
        _ => {
            ctx.problem(format!("list after a crash mid-migration: {}", e.describe()));
            usize::MAX
        }
    };
    if listed != before {
        ctx.problem(format!(
            "after a crash mid-migration `list` shows {listed} job(s), expected {before}"
        ));
    }
    let e = ctx.sq_run(&db, &["add", "true"])?;
    if e.code() != Some(0) {
        ctx.problem(format!("add after a crash mid-migration: {}", e.describe()));
    }
    ctx.integrity(&db, "after a crash mid-migration");
    Ok(if crashed && unfinished {
        "crashed; the unfinished queue was refused untouched, removed as its message says, and made anew".into()
    } else if crashed {
        "crashed, then reopened cleanly".into()
    } else {
        "no such point on this backend (add ran through)".into()
    })
}
