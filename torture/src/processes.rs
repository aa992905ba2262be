//! S07 (graceful SIGTERM/SIGINT), S08 (max runtime), S09 (orphaned group
//! after kill -9), S10 (pid reuse), S22 (what a job inherits).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustix::process::Signal;
use slothqueue_core::{
    ClaimRequest, Clock, ClockOnly, EventKind, JobId, JobState, NewJob, Owner, SystemClock,
};

use crate::ctx::{Ctx, Status};
use crate::history::{self, Expect, History};
use crate::queue::{self, Where as _};
use crate::util::{Procs, group_members, read_or_empty, sh_quote, wait_for};

/// `add --json`, the new job's id.
pub fn add_job(ctx: &mut Ctx, db: &Path, cmd: &str, extra: &[&str]) -> Result<JobId> {
    let mut args = vec!["--json", "add", cmd];
    args.extend_from_slice(extra);
    let e = ctx.sq_run(db, &args)?;
    if e.code() != Some(0) {
        bail!("add failed: {}", e.describe());
    }
    let v: serde_json::Value = serde_json::from_str(&e.stdout).context("add printed no JSON")?;
    v["id"].as_i64().context("add printed no id")
}

/// The `S` record of job `id`'s attempt `attempt`, once it is written.
fn started(hist: &History, id: JobId, attempt: u32) -> Result<history::Record> {
    wait_for(Duration::from_secs(60), &format!("job #{id} attempt {attempt} to start"), || {
        Ok(hist.read()?.into_iter().find(|r| r.kind == 'S' && r.job == id && r.attempt == attempt))
    })
}

/// The history check for the jobs of one queue file.
fn check_history(ctx: &mut Ctx, db: &Path, hist: &History) -> Result<()> {
    let snap = queue::snapshot(ctx.backend, db)?;
    let acked: BTreeSet<JobId> = snap.keys().copied().collect();
    let v = history::check(&hist.read()?, &acked, &snap, Expect::AtLeastOnce);
    ctx.verdict(v);
    Ok(())
}

/// S07: SIGTERM and SIGINT stop the job's whole group, hand the job back
/// uncharged and exit 130; a second signal skips the grace period and
/// still loses nothing.
pub fn s07_graceful_signals(ctx: &mut Ctx) -> Result<Status> {
    let dir = ctx.dir("s07")?;
    let db = ctx.db(&dir);
    let hist = History::new(&dir)?;
    let mut procs = Procs::new(&dir, &ctx.tag("s07"))?;
    let mut notes = Vec::new();
    for (sig, name) in [(Signal::TERM, "SIGTERM"), (Signal::INT, "SIGINT")] {
        let marker = dir.join(format!("trapped-{name}"));
        let quick = dir.join(format!("quick-{name}"));
        let body = format!(
            "if [ ! -e {q} ]; then trap 'echo trapped >> {m}; exit 143' TERM; sleep 30 & wait; fi",
            q = sh_quote(&quick.to_string_lossy()),
            m = sh_quote(&marker.to_string_lossy())
        );
        let id = add_job(ctx, &db, &hist.wrap(&body), &[])?;
        let runner = procs.spawn("runner", ctx.runner_cmd(&db, &[]))?;
        let rec = started(&hist, id, 1)?;
        wait_for(Duration::from_secs(10), "the job's sleep", || {
            Ok((group_members(rec.pid).len() >= 2).then_some(()))
        })?;
        let t = Instant::now();
        procs.signal(runner, sig)?;
        let e = procs.wait(runner, Duration::from_secs(30))?;
        let took = t.elapsed();
        ctx.observe(&e, false);
        if e.code() != Some(130) {
            ctx.problem(format!("{name}: expected exit 130: {}", e.describe()));
        }
        // Grace (2 s) and reaping, with room for a loaded machine.
        if took > Duration::from_secs(6) {
            ctx.problem(format!("{name}: the runner took {took:?} to stop"));
        }
        if read_or_empty(&marker)?.is_empty() {
            ctx.problem(format!("{name}: the job never saw SIGTERM"));
        }
        if !group_members(rec.pid).is_empty() {
            ctx.problem(format!("{name}: processes of the job's group survived"));
        }
        let job = queue::get(ctx.backend, &db, id)?;
        if (job.state, job.attempts) != (JobState::Pending, 0) {
            ctx.problem(format!(
                "{name}: expected the job pending with its attempt uncharged, got {} with {} attempt(s)",
                job.state, job.attempts
            ));
        }
        notes.push(format!("{name}: exit 130 in {took:.1?}"));
        // Run it to the end (quickly) so the next case starts clean.
        std::fs::write(&quick, "").context("cannot write a flag file")?;
        let e = ctx.sq_run(&db, &["run", "--load-ceiling", "100000"])?;
        if e.code() != Some(0) {
            ctx.problem(format!("{name}: the rerun: {}", e.describe()));
        }
    }
    // A job whose group ignores TERM: the first signal waits the grace
    // period, a second one kills at once; the job still goes back.
    let quick = dir.join("quick-second");
    let body = format!(
        "if [ ! -e {} ]; then trap '' TERM; sleep 30; fi",
        sh_quote(&quick.to_string_lossy())
    );
    let id = add_job(ctx, &db, &hist.wrap(&body), &[])?;
    let runner = procs.spawn("runner", ctx.runner_cmd(&db, &[]))?;
    let rec = started(&hist, id, 1)?;
    let t = Instant::now();
    procs.signal(runner, Signal::TERM)?;
    wait_for(Duration::from_secs(10), "the runner to say it is shutting down", || {
        Ok(procs.stdout_of(runner)?.contains("shutting down: stopping job").then_some(()))
    })?;
    procs.signal(runner, Signal::INT)?;
    let e = procs.wait(runner, Duration::from_secs(30))?;
    let took = t.elapsed();
    ctx.observe(&e, false);
    if e.code() != Some(130) {
        ctx.problem(format!("second signal: expected exit 130: {}", e.describe()));
    }
    if took >= Duration::from_secs(2) {
        ctx.problem(format!("second signal: the runner still waited the 2 s grace ({took:?})"));
    }
    if !group_members(rec.pid).is_empty() {
        ctx.problem("second signal: the TERM-ignoring group survived".to_owned());
    }
    let job = queue::get(ctx.backend, &db, id)?;
    if job.state != JobState::Pending {
        ctx.problem(format!(
            "second signal: the job is {}, expected pending (not lost)",
            job.state
        ));
    }
    notes.push(format!("second signal: exit 130 in {took:.1?}"));
    std::fs::write(&quick, "").context("cannot write a flag file")?;
    let e = ctx.sq_run(&db, &["run", "--load-ceiling", "100000"])?;
    if e.code() != Some(0) {
        ctx.problem(format!("the rerun: {}", e.describe()));
    }
    check_history(ctx, &db, &hist)?;
    ctx.integrity(&db, "after S07");
    Ok(Status::Ran(notes.join("; ")))
}

/// S08: max runtime kills the whole group of `sleep`, of a TERM-ignoring
/// job (after the grace period) and of nested children, and records a
/// timeout.
pub fn s08_max_runtime(ctx: &mut Ctx) -> Result<Status> {
    let dir = ctx.dir("s08")?;
    let db = ctx.db(&dir);
    let hist = History::new(&dir)?;
    let cases = [
        ("sleep", "sleep 100"),
        ("ignores TERM", "trap '' TERM; sleep 100"),
        ("nested", "sleep 100 & sleep 100 & (sleep 100 &) ; wait"),
    ];
    let mut ids = Vec::new();
    for (name, body) in cases {
        let id =
            add_job(ctx, &db, &hist.wrap(body), &["--max-runtime", "1s", "--max-attempts", "1"])?;
        ids.push((name, id));
    }
    let t = Instant::now();
    let e = ctx.sq_run(&db, &["run", "--load-ceiling", "100000"])?;
    let took = t.elapsed();
    if e.code() != Some(1) {
        ctx.problem(format!("expected exit 1 (attempts failed): {}", e.describe()));
    }
    for (name, id) in &ids {
        let job = queue::get(ctx.backend, &db, *id)?;
        let err = job.last_error.clone().unwrap_or_default();
        if job.state != JobState::Failed || !err.starts_with("timeout: exceeded max runtime of 1s")
        {
            ctx.problem(format!("{name}: {} with last error `{err}`", job.state));
        }
        for r in hist.read()?.iter().filter(|r| r.kind == 'S' && r.job == *id) {
            let left = group_members(r.pid);
            if !left.is_empty() {
                ctx.problem(format!("{name}: group {} survived: {left:?}", r.pid));
            }
        }
    }
    // 1 s + 1 s + (1 s + 2 s grace), plus starting and reaping.
    if took > Duration::from_secs(20) {
        ctx.problem(format!("three 1 s jobs took {took:?}"));
    }
    check_history(ctx, &db, &hist)?;
    ctx.integrity(&db, "after S08");
    Ok(Status::Ran(format!("3 jobs timed out, every group gone, in {took:.1?}")))
}

/// S09: kill -9 of a runner while its job's group runs: the next runner
/// kills the orphaned group before running the job again.
pub fn s09_orphaned_group(ctx: &mut Ctx) -> Result<Status> {
    let dir = ctx.dir("s09")?;
    let db = ctx.db(&dir);
    let hist = History::new(&dir)?;
    let mut procs = Procs::new(&dir, &ctx.tag("s09"))?;
    let body = "if [ \"$SLOTHQUEUE_ATTEMPT\" = 1 ]; then sleep 100 & sleep 100 & wait; fi";
    let id = add_job(ctx, &db, &hist.wrap(body), &[])?;
    let runner = procs.spawn("runner", ctx.runner_cmd(&db, &[]))?;
    let rec = started(&hist, id, 1)?;
    wait_for(Duration::from_secs(30), "the job's group to be recorded", || {
        let job = queue::get(ctx.backend, &db, id)?;
        Ok(job.lease.and_then(|l| l.child_pgid).filter(|p| *p == rec.pid).map(|_| ()))
    })?;
    wait_for(Duration::from_secs(10), "the job's sleeps", || {
        Ok((group_members(rec.pid).len() >= 3).then_some(()))
    })?;
    procs.signal(runner, Signal::KILL)?;
    let e = procs.wait(runner, Duration::from_secs(10))?;
    ctx.observe(&e, false);
    ctx.tally.kills += 1;
    let orphans = group_members(rec.pid);
    if orphans.is_empty() {
        bail!("the job's group died with its runner: nothing to test");
    }
    let e = ctx.sq_run(&db, &["run", "--load-ceiling", "100000"])?;
    if e.code() != Some(0) || !e.stdout.contains(&format!("reclaimed 1 stale job(s): #{id}")) {
        ctx.problem(format!("the next runner: {} / {}", e.describe(), e.stdout.trim()));
    }
    if !group_members(rec.pid).is_empty() {
        ctx.problem("the orphaned group survived the next runner".to_owned());
    }
    let job = queue::get(ctx.backend, &db, id)?;
    if (job.state, job.attempts) != (JobState::Done, 2) {
        ctx.problem(format!(
            "expected done after 2 attempts: {} after {}",
            job.state, job.attempts
        ));
    }
    check_history(ctx, &db, &hist)?;
    ctx.integrity(&db, "after S09");
    Ok(Status::Ran(format!(
        "orphaned group of {} process(es) killed before the rerun",
        orphans.len()
    )))
}

/// S10: running rows whose recorded owner is a reused pid (a live
/// unrelated process), pid 1, another boot, or a dead pid: each job is
/// reclaimed and run, and the unrelated process is not signalled.
pub fn s10_pid_reuse(ctx: &mut Ctx) -> Result<Status> {
    let dir = ctx.dir("s10")?;
    let db = ctx.db(&dir);
    let hist = History::new(&dir)?;
    let mut procs = Procs::new(&dir, &ctx.tag("s10"))?;
    let mut sleeper = Command::new("sleep");
    sleeper.arg("300");
    let stranger = procs.spawn("stranger", sleeper)?;
    let dead_pid = {
        let mut c = Command::new("true").spawn().context("cannot run true")?;
        let pid = c.id();
        c.wait().context("cannot wait for true")?;
        pid
    };
    let me = slothqueue_runner::this_process_owner();
    let stranger_start = std::fs::read_to_string(format!("/proc/{stranger}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].to_owned()))
        .and_then(|rest| rest.split_whitespace().nth(19).and_then(|v| v.parse::<u64>().ok()))
        .context("cannot read the stranger's start time")?;
    let cases: Vec<(&str, Owner, Option<i32>)> = vec![
        (
            "reused pid",
            Owner {
                id: "s10-reused".into(),
                pid: Some(stranger as u32),
                pid_start_time: Some(stranger_start + 12_345),
                ..me.clone()
            },
            Some(stranger),
        ),
        (
            "pid 1",
            Owner {
                id: "s10-init".into(),
                pid: Some(1),
                pid_start_time: Some(987_654_321),
                ..me.clone()
            },
            Some(1),
        ),
        (
            "another boot",
            Owner { id: "s10-boot".into(), boot_id: Some("another-boot".into()), ..me.clone() },
            Some(stranger),
        ),
        ("dead pid", Owner { id: "s10-dead".into(), pid: Some(dead_pid), ..me.clone() }, None),
    ];
    let an_hour_ago = SystemClock.now().saturating_sub(Duration::from_secs(3600));
    let mut ids = BTreeMap::new();
    {
        let opened = queue::open(ctx.backend, &db).context("cannot create the queue")?;
        let store = opened.store();
        let rt = queue::runtime()?;
        for (name, owner, pgid) in &cases {
            let cwd = dir.to_string_lossy().into_owned();
            let pushed = rt
                .block_on(store.push(NewJob::shell(hist.wrap("true"), cwd), an_hour_ago))
                .context("cannot push")?;
            let claimed = rt
                .block_on(
                    store
                        .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), an_hour_ago),
                )
                .context("cannot claim")?
                .context("nothing to claim")?;
            if claimed.job.id != pushed.job.id {
                bail!("claimed #{} instead of #{}", claimed.job.id, pushed.job.id);
            }
            rt.block_on(store.heartbeat(pushed.job.id, &claimed.fence, *pgid, an_hour_ago))
                .context("cannot heartbeat")?;
            ids.insert(pushed.job.id, *name);
        }
    }
    let e = ctx.sq_run(&db, &["run", "--load-ceiling", "100000"])?;
    if e.code() != Some(0) || !e.stdout.contains(&format!("reclaimed {} stale job(s)", cases.len()))
    {
        ctx.problem(format!("the runner: {} / {}", e.describe(), e.stdout.trim()));
    }
    if !crate::util::alive(stranger) {
        ctx.problem("the unrelated process with the recorded pid was killed".to_owned());
    }
    let snap = queue::snapshot(ctx.backend, &db)?;
    for (id, name) in &ids {
        let Some((job, events)) = snap.get(id) else { bail!("job #{id} vanished") };
        let reclaimed = events.iter().any(|e| e.kind == EventKind::Reclaimed);
        if job.state != JobState::Done || !reclaimed {
            ctx.problem(format!("{name}: job #{id} is {} (reclaimed: {reclaimed})", job.state));
        }
    }
    check_history(ctx, &db, &hist)?;
    ctx.integrity(&db, "after S10");
    Ok(Status::Ran(format!(
        "{} crafted leases reclaimed (reused pid, pid 1, another boot, dead pid); the stranger untouched",
        cases.len()
    )))
}

/// S22: a job inherits no queue file descriptors, no blocked or ignored
/// signals (even from a runner started with SIGINT and SIGTERM ignored and
/// an inheritable descriptor open), leads its own process group, and sees
/// no slothqueue variables but its own.
pub fn s22_child_inherits(ctx: &mut Ctx) -> Result<Status> {
    let dir = ctx.dir("s22")?;
    let db = ctx.db(&dir);
    // What a program started by a job sees: its own status (read by the
    // program itself, since a shell blocks signals while it waits).
    let sig_job = add_job(ctx, &db, "exec grep -E '^(SigBlk|SigIgn)' /proc/self/status", &[])?;
    // The shell's descriptors, group and environment, written to the log
    // (a redirection would add the shell's own saved descriptors).
    let cmd = "ls -l /proc/$$/fd/; echo \"pgid $(cut -d' ' -f5 /proc/$$/stat) pid $$\"; env";
    let env_job = add_job(ctx, &db, cmd, &[])?;
    let launcher = format!(
        "trap '' INT TERM; exec 7>>{}; exec {} --db {}{} run --load-ceiling 100000",
        sh_quote(&dir.join("leaked").to_string_lossy()),
        sh_quote(&ctx.opts.bin.to_string_lossy()),
        sh_quote(&db.to_string_lossy()),
        ctx.backend.cli_flag().map(|b| format!(" --backend {b}")).unwrap_or_default()
    );
    let mut sh = Command::new("sh");
    // HOME as `ctx.sq` gives it: a queue on a server keeps its job logs
    // under it, where `logs` below looks.
    sh.args(["-c", &launcher]).env("SLOTHQUEUE_DB", &db).env("HOME", &dir).current_dir(&dir);
    let e = crate::util::run_capture(
        "runner (signals ignored)",
        sh,
        Duration::from_secs(60),
        &ctx.tag("s22"),
    )?;
    ctx.observe(&e, false);
    if e.code() != Some(0) {
        ctx.problem(format!("runner: {}", e.describe()));
    }
    let logs = |ctx: &mut Ctx, id: JobId| -> Result<String> {
        let e = ctx.sq_run(&db, &["logs", &id.to_string()])?;
        if e.code() != Some(0) {
            bail!("logs {id}: {}", e.describe());
        }
        Ok(e.stdout)
    };
    let sig = logs(ctx, sig_job)?;
    let sig: Vec<&str> = sig.lines().filter(|l| l.starts_with("Sig")).collect();
    for line in &sig {
        let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap_or("x"), 16);
        // Signals 32 and 33 are glibc's own (thread cancellation, setxid):
        // glibc's posix_spawn sets them to SIG_IGN in every child of a
        // threaded process, and any glibc program installs its handlers
        // for them itself. Every signal a job can use must be default.
        let glibc_internal = (1u64 << 31) | (1u64 << 32);
        match mask {
            Ok(m) if m & !glibc_internal == 0 => {}
            _ => ctx.problem(format!("a job's program inherited {line}")),
        }
    }
    if sig.len() != 2 {
        ctx.problem(format!("cannot read the job's signal state: {sig:?}"));
    }
    let out = logs(ctx, env_job)?;
    let ids = out.lines().find_map(|l| l.strip_prefix("pgid ")).unwrap_or("");
    let (pgid, pid) = ids.split_once(" pid ").unwrap_or(("?", "!"));
    if pid != pgid {
        ctx.problem(format!("the job (pid {pid}) is not its own group's leader (pgid {pgid})"));
    }
    let mut open = Vec::new();
    for line in out.lines().filter(|l| l.contains(" -> ")) {
        let Some((left, target)) = line.split_once(" -> ") else { continue };
        let fd = left.split_whitespace().last().unwrap_or("?").to_owned();
        open.push(fd.clone());
        if !["0", "1", "2"].contains(&fd.as_str()) {
            ctx.problem(format!("the job inherited descriptor {fd} -> {target}"));
        }
        let queue_file = ctx.backend.file_name().is_some_and(|name| target.contains(name));
        if queue_file || target.contains("socket:") {
            ctx.problem(format!("the job inherited {fd} -> {target}"));
        }
    }
    if open.len() < 3 {
        ctx.problem(format!("cannot read the job's descriptors: `{out}`"));
    }
    let env = out;
    let allowed = [
        "SLOTHQUEUE_JOB_ID",
        "SLOTHQUEUE_ATTEMPT",
        "SLOTHQUEUE_KIND",
        "SLOTHQUEUE_QUEUE",
        "SLOTHQUEUE_LEASE",
    ];
    for var in env.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)) {
        if var.starts_with("SLOTHQUEUE_") && !allowed.contains(&var) {
            ctx.problem(format!("the job sees {var}"));
        }
    }
    ctx.integrity(&db, "after S22");
    Ok(Status::Ran(format!(
        "fds {}; no blocked or ignored signals; own group; env clean",
        open.join(",")
    )))
}
