//! S26: a runner cut off from its PostgreSQL server longer than its lease
//! (a queue on a server only), and the hidden `relay` mode that cuts it
//! off.
//!
//! Runner A reaches the server through a relay process; the scenario
//! freezes the relay with SIGSTOP, which looks to A like a partition:
//! nothing is closed, nothing answers. Runner B, on another host (a UTS
//! namespace of its own, as in the CLI's `postgres_hosts` tests, so only
//! the lease's expiry lets it take A's job), takes the job over once the
//! lease expired. A must have stopped the job before that (the self-fence,
//! `runner/src/run/heartbeat.rs`), so the history shows no two executions
//! alive at once, and must report the lost attempt once the relay runs
//! again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use rustix::process::Signal;
use slothqueue_core::{Clock, JobState, NewJob, SystemClock};

use crate::ctx::{Ctx, Status};
use crate::history::{self, Expect, History};
use crate::queue;
use crate::util::{Procs, jitter, wait_for};

/// The lease both runners give (`run --lease`): the shortest the CLI
/// takes, so a round takes seconds. A fences 1.5 s after its last renewal
/// was sent, with no kill grace (`FencePlan`).
const LEASE: &str = "3s";

/// What A prints when it fences (`RunnerEvent::Fenced`).
const FENCED: &str = "no lease renewal got through";

/// What A prints when the store, reached again, says the job moved on
/// (`RunnerEvent::LeaseLost`).
const LOST: &str = "lost its lease";

/// `relay --to URL`: relays to the server of `URL` from a fresh port on
/// `127.0.0.1`, printed on stdout, until killed (a scenario freezes it
/// with SIGSTOP).
pub fn relay(args: &[String]) -> Result<ExitCode> {
    let to = match args {
        [flag, url] if flag == "--to" => url,
        _ => bail!("usage: relay --to postgres://..."),
    };
    slothqueue_store_postgres::testing::serve_relay(to).map_err(|e| anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}

/// `slothqueue --db <db> run --follow --lease 3s` on a host of its own
/// named `host`: its own hostname (a UTS namespace).
fn on_host(ctx: &Ctx, db: &Path, host: &str) -> Command {
    let plain = ctx.runner_cmd(db, &["--follow", "--lease", LEASE]);
    let mut cmd = Command::new("unshare");
    if !rustix::process::geteuid().is_root() {
        // An unprivileged user may make a UTS namespace inside a user
        // namespace of its own.
        cmd.args(["--user", "--map-root-user"]);
    }
    cmd.env_clear();
    for (k, v) in plain.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    if let Some(dir) = plain.get_current_dir() {
        cmd.current_dir(dir);
    }
    cmd.args(["--uts", "--", "sh", "-c", r#"hostname "$0" && exec "$@""#, host])
        .arg(plain.get_program())
        .args(plain.get_args());
    cmd
}

/// How many lines of `pid`'s output so far contain `what`.
fn said(procs: &Procs, pid: i32, what: &str) -> Result<usize> {
    Ok(procs.stdout_of(pid)?.lines().filter(|l| l.contains(what)).count())
}

/// S26: one job per round, started by runner A through the relay; the
/// relay frozen a moment later; runner B started on another host. A must
/// stop the job before its lease runs out, B takes it over after, the
/// relay is let go and A reports the attempt lost. Every job ends done,
/// no two executions of one overlap, A fenced once per round.
pub fn s26_partition(ctx: &mut Ctx) -> Result<Status> {
    let dir = ctx.dir("s26")?;
    let db = ctx.db(&dir);
    let url = db.to_str().context("the queue's URL is not UTF-8")?.to_owned();
    let hist = History::new(&dir)?;
    let mut procs = Procs::new(&dir, &ctx.tag("s26"))?;
    let rounds: usize = ctx.pick(1, 3);
    let store = queue::open(ctx.backend, &db).context("cannot create the queue")?.store();
    let rt = queue::runtime()?;
    let exe = std::env::current_exe().context("cannot find the torture binary")?;
    let mut relay_cmd = Command::new(exe);
    relay_cmd.args(["relay", "--to", &url]);
    let relay = procs.spawn("relay", relay_cmd)?;
    let port = wait_for(Duration::from_secs(10), "the relay's port", || {
        Ok(procs.stdout_of(relay)?.lines().find_map(|l| l.trim().parse::<u16>().ok()))
    })?;
    let via = slothqueue_store_postgres::testing::via_relay(&url, port).map_err(|e| anyhow!(e))?;
    let a = procs.spawn("runner-a", on_host(ctx, &PathBuf::from(via), "host-a"))?;
    // Attempt 1 would run long after the lease; a takeover is short.
    let body = r#"if [ "$SLOTHQUEUE_ATTEMPT" = 1 ]; then sleep 30; else sleep 0.2; fi"#;
    let cwd = dir.to_string_lossy().into_owned();
    let mut ids = BTreeSet::new();
    for round in 1..=rounds {
        let job = NewJob::shell(hist.wrap(body), cwd.clone());
        let id = rt.block_on(store.push(job, SystemClock.now())).context("cannot push")?.job.id;
        ids.insert(id);
        wait_for(Duration::from_secs(30), "runner A to start the job", || {
            Ok(hist.read()?.iter().any(|r| r.kind == 'S' && r.job == id).then_some(()))
        })?;
        // Cut A off at a random point of its heartbeat cycle (a beat a
        // second).
        jitter(&mut ctx.rng, 1500);
        procs.signal(relay, Signal::STOP)?;
        ctx.tally.kills += 1;
        let b = procs.spawn("runner-b", on_host(ctx, &db, "host-b"))?;
        let taken_over = wait_for(
            Duration::from_secs(60),
            "runner B to take the job over and finish it",
            || {
                Ok(rt
                    .block_on(store.get(id))
                    .ok()
                    .filter(|j| j.state == JobState::Done)
                    .map(|_| ()))
            },
        );
        if let Err(e) = taken_over {
            // What each side saw, for a failure too rare to reproduce.
            let job = rt.block_on(store.get(id)).map_or_else(
                |e| format!("cannot read it: {e}"),
                |j| format!("{} attempt {}, lease {:?}", j.state, j.attempts, j.lease),
            );
            let (seen_a, seen_b) = (procs.tail_of(a, 30), procs.tail_of(b, 30));
            return Err(e.context(format!(
                "round {round}: job #{id} is {job} at {}\nrunner A: {seen_a}\nrunner B: {seen_b}",
                SystemClock.now()
            )));
        }
        procs.signal(relay, Signal::CONT)?;
        wait_for(Duration::from_secs(60), "runner A to report the attempt lost", || {
            Ok((said(&procs, a, LOST)? >= round).then_some(()))
        })
        .with_context(|| format!("round {round}"))?;
        crate::load::stop_runners(ctx, &mut procs, &[b])?;
    }
    let fenced = said(&procs, a, FENCED)?;
    if fenced < rounds {
        ctx.problem(format!("runner A fenced {fenced} time(s) in {rounds} round(s)"));
    }
    // A runner that lost attempts exits 1 when told to stop.
    procs.signal(a, Signal::TERM)?;
    let e = procs.wait(a, Duration::from_secs(20))?;
    ctx.observe(&e, false);
    if !matches!(e.code(), Some(0 | 1 | 130)) {
        ctx.problem(format!("runner A: {}", e.describe()));
    }
    let e = procs.kill(relay)?;
    ctx.observe(&e, false);
    let snap = queue::snapshot(ctx.backend, &db)?;
    let v = history::check(&hist.read()?, &ids, &snap, Expect::AtLeastOnce);
    let summary = format!(
        "{rounds} partition(s) of runner A longer than its {LEASE} lease: fenced {fenced} time(s), {} jobs, {} executions, {} overlapping",
        v.jobs, v.executions, v.overlaps
    );
    ctx.verdict(v);
    ctx.integrity(&db, "at the end of S26");
    let strays = procs.shutdown();
    if strays > 0 {
        ctx.problem(format!("{strays} stray process(es) left behind"));
    }
    Ok(Status::Ran(summary))
}
