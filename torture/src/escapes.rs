//! S24: escapes. A job starts a process that leaves its process group by
//! one route (`setsid`, bash `set -m`, `setpgid(0, 0)`, a double-forked
//! daemon, the runner's own group) and is stopped by one path (max
//! runtime, cancel, SIGTERM, SIGHUP, exit 0 leaving the escapee). The
//! escapee inherits the history's per-job lock (fd 9), so if it outlived
//! its attempt the next execution of the job records an `X` and the
//! history checker counts an overlapping run; the harness also probes the
//! lock and the escapee's pid the moment the attempt's ending is recorded.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::process::Signal;
use slothqueue_core::{Clock, JobId, JobState, SystemClock};

use crate::ctx::{Ctx, Status};
use crate::history::{self, Expect, History};
use crate::processes::add_job;
use crate::queue;
use crate::util::{Procs, alive, read_or_empty, sh_quote, wait_for};

/// How a job's process leaves its group; `{esc}` is where the escapee
/// writes its pid once it has left.
const ROUTES: [(&str, &str); 5] = [
    ("setsid", "setsid sh -c 'echo $$ > {esc}; exec sleep 300' &"),
    ("set -m", "bash -c 'set -m; sleep 300 & echo $! > {esc}' 2>/dev/null"),
    (
        "setpgid",
        "python3 -c 'import os,time; os.setpgid(0,0); open(\"{esc}\",\"w\").write(\"%d\\n\" % os.getpid()); time.sleep(300)' &",
    ),
    ("daemon", "(setsid sh -c 'sleep 300 & echo $! > {esc}' &)"),
    (
        "runner's group",
        "python3 -c 'import os,time; os.setpgid(0,os.getpgid('$PPID')); open(\"{esc}\",\"w\").write(\"%d\\n\" % os.getpid()); time.sleep(300)' &",
    ),
];

/// How the attempt ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    MaxRuntime,
    Cancel,
    Term,
    Hup,
    ExitZero,
}

const STOPS: [Stop; 5] = [Stop::MaxRuntime, Stop::Cancel, Stop::Term, Stop::Hup, Stop::ExitZero];

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::MaxRuntime => "max runtime",
            Stop::Cancel => "cancel",
            Stop::Term => "SIGTERM",
            Stop::Hup => "SIGHUP",
            Stop::ExitZero => "exit 0",
        }
    }
}

pub fn s24_escapes(ctx: &mut Ctx) -> Result<Status> {
    let dir = ctx.dir("s24")?;
    let db = ctx.db(&dir);
    let hist = History::new(&dir)?;
    let mut procs = Procs::new(&dir, &ctx.tag("s24"))?;
    let python =
        std::process::Command::new("python3").arg("-c").arg("").status().is_ok_and(|s| s.success());
    // Quick: every route once and every path once (route i × path i);
    // full: every route × every path.
    let mut cells = Vec::new();
    for (i, route) in ROUTES.iter().enumerate() {
        if !python && route.1.starts_with("python3") {
            continue;
        }
        if ctx.opts.quick {
            cells.push((*route, STOPS[i % STOPS.len()]));
        } else {
            cells.extend(STOPS.iter().map(|s| (*route, *s)));
        }
    }
    let t = Instant::now();
    let mut mechanisms = std::collections::BTreeSet::new();
    let mut caught = 0;
    for (n, ((route, script), stop)) in cells.iter().enumerate() {
        let what = format!("{route} × {}", stop.name());
        let esc = dir.join(format!("esc-{n}"));
        let quick = dir.join(format!("quick-{n}"));
        let escape = script.replace("{esc}", &esc.to_string_lossy());
        let tail = match stop {
            Stop::ExitZero => {
                format!("while [ ! -s {} ]; do sleep 0.02; done", sh_quote(&esc.to_string_lossy()))
            }
            _ => "sleep 300".to_owned(),
        };
        let body = format!(
            "if [ ! -e {q} ]; then {escape}\n{tail}; fi",
            q = sh_quote(&quick.to_string_lossy())
        );
        let extra: &[&str] = match stop {
            Stop::MaxRuntime => &["--max-runtime", "1s", "--max-attempts", "2"],
            _ => &["--max-attempts", "1"],
        };
        let id = add_job(ctx, &db, &hist.wrap(&body), extra)?;
        let runner = procs.spawn("runner", ctx.runner_cmd(&db, &[]))?;
        let pid = escapee(&esc, &what)?;
        let expected = match stop {
            Stop::MaxRuntime => (Some(1), JobState::Pending),
            Stop::ExitZero => (Some(0), JobState::Done),
            Stop::Cancel => {
                let e = ctx.sq_run(&db, &["cancel", &id.to_string()])?;
                if e.code() != Some(0) {
                    ctx.problem(format!("{what}: cancel: {}", e.describe()));
                }
                (None, JobState::Cancelled)
            }
            Stop::Term => {
                procs.signal(runner, Signal::TERM)?;
                (Some(130), JobState::Pending)
            }
            Stop::Hup => {
                procs.signal(runner, Signal::HUP)?;
                (Some(130), JobState::Pending)
            }
        };
        let e = procs.wait(runner, Duration::from_secs(30))?;
        ctx.observe(&e, false);
        // The ending is recorded before the runner exits: nothing of the
        // attempt may be alive now.
        let job = queue::get(ctx.backend, &db, id)?;
        if job.state != expected.1 || expected.0.is_some_and(|c| e.code() != Some(c)) {
            ctx.problem(format!(
                "{what}: expected exit {:?} and {}, got {} and {}",
                expected.0,
                expected.1,
                e.describe(),
                job.state
            ));
        }
        if matches!(stop, Stop::Term | Stop::Hup) && job.attempts != 0 {
            ctx.problem(format!("{what}: the attempt was charged"));
        }
        if alive(pid) || lock_held(&hist, id)? {
            ctx.tally.overlaps += 1;
            ctx.problem(format!("{what}: escapee {pid} outlived its attempt"));
        } else {
            caught += 1;
        }
        if let Some(m) = mechanism(ctx, &db, id)? {
            mechanisms.insert(m);
        }
        // The next execution (its own attempt: a timeout retries, a
        // signal hands back): its prologue records an `X` if anything of
        // the first one still holds the job's lock. A cancelled or done
        // job has none; the probe above is its check.
        std::fs::write(&quick, "").context("cannot write a flag file")?;
        if job.state == JobState::Pending {
            wait_for(Duration::from_secs(30), &format!("{what}: the retry to be due"), || {
                let job = queue::get(ctx.backend, &db, id)?;
                Ok((job.not_before <= SystemClock.now()).then_some(()))
            })?;
            let e = ctx.sq_run(&db, &["run", "--load-ceiling", "100000"])?;
            let job = queue::get(ctx.backend, &db, id)?;
            if e.code() != Some(0) || job.state != JobState::Done {
                ctx.problem(format!("{what}: the rerun: {} ({})", e.describe(), job.state));
            }
        }
    }
    let snap = queue::snapshot(ctx.backend, &db)?;
    let acked = snap.keys().copied().collect();
    let v = history::check(&hist.read()?, &acked, &snap, Expect::AtLeastOnce);
    ctx.verdict(v);
    ctx.integrity(&db, "after S24");
    let strays = procs.shutdown();
    if strays > 0 {
        ctx.problem(format!("{strays} stray process(es) left behind"));
    }
    let mechanisms: Vec<String> = mechanisms.into_iter().collect();
    Ok(Status::Ran(format!(
        "{caught}/{} escapes killed before the ending was recorded (contained by {}) in {:.1?}{}",
        cells.len(),
        mechanisms.join(", "),
        t.elapsed(),
        if python { "" } else { "; no python3: setpgid routes skipped" }
    )))
}

/// The escapee's pid, once it has left the group.
fn escapee(esc: &Path, what: &str) -> Result<i32> {
    wait_for(Duration::from_secs(30), &format!("{what}: the escapee"), || {
        let text = read_or_empty(esc)?;
        Ok(text.ends_with('\n').then(|| text.trim().parse().ok()).flatten())
    })
}

/// Whether something still holds job `id`'s history lock (an escapee of
/// an attempt inherits it).
fn lock_held(hist: &History, id: JobId) -> Result<bool> {
    let lock = hist.locks.join(id.to_string());
    let status = std::process::Command::new("flock")
        .arg("-n")
        .arg(&lock)
        .arg("true")
        .status()
        .context("cannot run flock")?;
    Ok(!status.success())
}

/// The mechanism the attempt's log header names (`contained by cgroup`).
fn mechanism(ctx: &mut Ctx, db: &Path, id: JobId) -> Result<Option<String>> {
    let e = ctx.sq_run(db, &["logs", &id.to_string()])?;
    let header = e.stdout.lines().next().unwrap_or_default();
    Ok(header.split(", contained by ").nth(1).and_then(|r| r.split(": ").next()).map(str::to_owned))
}
