//! S25: the database server restarted under working runners (a queue on
//! a server only).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use slothqueue_core::{Clock, NewJob, SystemClock};

use crate::ctx::{Ctx, Status};
use crate::history::{self, Expect, History};
use crate::load::{acked, enqueuer, error_lines, stop_runners, wait_all_terminal};
use crate::pg::{self, Server};
use crate::queue;
use crate::util::{Procs, jitter, wait_for};

/// How `StoreError::Unreachable` reads: what the runners warn while they
/// wait the server out, and the one failure an `add` may end with while
/// it is down.
const UNREACHABLE: &str = "cannot reach the database server";

/// What a runner says when it hands back a job claimed by a call whose
/// answer it lost (the commit landed, the server went before answering).
const HANDED_BACK: &str = "answer was lost; handed back";

/// How `StoreError::Backend` reads: a failure with no better mapping,
/// which a runner does not retry. Met while the server restarts, it is a
/// lost connection the store did not recognise.
const UNMAPPED: &str = "storage error:";

/// S25: runners work through a batch while the server is restarted with
/// `pg_ctl restart -m immediate` (every connection dropped, crash recovery
/// on the way up), twice (five times in a full run), at random points;
/// an enqueuer adds a few jobs around each restart. The runners must wait
/// the outage out, never exit, and every job must end done, run exactly
/// once, never reclaimed, no two runs of a job overlapping.
pub fn s25_server_restart(ctx: &mut Ctx) -> Result<Status> {
    let server = match Server::from_env() {
        Ok(s) => s,
        Err(why) if pg::required() => bail!(why),
        Err(why) => return Ok(Status::Skipped(why)),
    };
    let dir = ctx.dir("s25")?;
    let db = ctx.db(&dir);
    let hist = History::new(&dir)?;
    let mut procs = Procs::new(&dir, &ctx.tag("s25"))?;
    let batch: usize = ctx.pick(60, 300);
    let restarts: usize = ctx.pick(2, 5);
    // Short jobs: the more transitions are in flight when the server
    // goes, the likelier a commit whose answer is lost.
    let (shortest, longest) = ctx.pick((50, 400), (10, 400));
    let runners = 3;
    // The batch, pushed through the store (a process per `add` would
    // spend the scenario's time on starting processes).
    let mut pushed = BTreeSet::new();
    {
        let store = queue::open(ctx.backend, &db).context("cannot create the queue")?.store();
        let rt = queue::runtime()?;
        let cwd = dir.to_string_lossy().into_owned();
        for _ in 0..batch {
            let job = NewJob::shell(hist.sleeper(ctx.rng.range(shortest, longest)), cwd.clone());
            let added = rt.block_on(store.push(job, SystemClock.now())).context("cannot push")?;
            pushed.insert(added.job.id);
        }
    }
    let tickets = dir.join("tickets");
    let mut granted: u64 = 0;
    std::fs::write(&tickets, "0").context("cannot write tickets")?;
    let tickets_arg = tickets.to_string_lossy().into_owned();
    let enq_args = [
        "--tickets",
        &tickets_arg,
        "--already",
        "0",
        "--min-ms",
        "100",
        "--max-ms",
        "400",
        "--max-attempts",
        "3",
    ];
    let enq = procs.spawn("enqueuer", enqueuer(ctx, &db, &dir, 0, &enq_args)?)?;
    let mut rpids = Vec::new();
    for n in 0..runners {
        rpids.push(procs.spawn(&format!("runner{n}"), ctx.runner_cmd(&db, &["--follow"]))?);
    }
    let mut took = Vec::new();
    for r in 0..restarts {
        let target = batch * (r + 1) / (restarts + 1);
        wait_for(Duration::from_secs(120), "jobs to start", || {
            Ok((hist.starts()? >= target).then_some(()))
        })
        .with_context(|| format!("before restart {}", r + 1))?;
        // A few adds in flight as the server goes.
        granted += ctx.rng.range(3, 8);
        std::fs::write(&tickets, granted.to_string()).context("cannot write tickets")?;
        jitter(&mut ctx.rng, 150);
        let t = server.restart_immediate().with_context(|| format!("restart {}", r + 1))?;
        took.push(format!("{t:.1?}"));
        ctx.tally.kills += 1;
        // The harness's own connection died too; its reconnection is not
        // what is under test here.
        queue::forget_pg();
        for e in procs.reap()? {
            ctx.observe(&e, false);
            ctx.problem(format!("exited during the restarts: {}", e.describe()));
        }
        // And a few once it is back.
        granted += ctx.rng.range(2, 5);
        std::fs::write(&tickets, granted.to_string()).context("cannot write tickets")?;
    }
    wait_for(Duration::from_secs(120), "the enqueuer to use its tickets", || {
        let used = acked(&dir)?.len() + error_lines(&dir, "enqueue-errors")?.len();
        Ok((used as u64 >= granted).then_some(()))
    })?;
    let e = procs.kill(enq)?;
    ctx.observe(&e, false);
    wait_all_terminal(ctx, &db, Duration::from_secs(180))?;
    for e in procs.reap()? {
        ctx.observe(&e, false);
        ctx.problem(format!("exited on its own: {}", e.describe()));
    }
    let live: Vec<i32> = rpids.iter().copied().filter(|&p| crate::util::alive(p)).collect();
    stop_runners(ctx, &mut procs, &live)?;
    let mut refused = 0;
    for line in error_lines(&dir, "enqueue-errors")? {
        // An `add` while the server is down fails, and says why; any
        // other failure is a problem.
        if line.contains(UNREACHABLE) {
            refused += 1;
        } else {
            ctx.problem(format!("an add failed: {line}"));
        }
    }
    let ended = std::mem::take(&mut procs.ended);
    let (mut warnings, mut handed_back) = (0, 0);
    for e in &ended {
        // Observed already, as each ended.
        if !e.name.starts_with("runner") {
            continue;
        }
        for line in e.stdout.lines().chain(e.stderr.lines()) {
            if line.contains(UNREACHABLE) {
                warnings += 1;
            } else if line.contains(HANDED_BACK) {
                handed_back += 1;
            } else if line.contains(UNMAPPED) {
                ctx.problem(format!("{}: a lost server not told as one: {line}", e.name));
            }
        }
    }
    let added = acked(&dir)?;
    let all: BTreeSet<_> = pushed.iter().chain(added.iter()).copied().collect();
    let snap = queue::snapshot(ctx.backend, &db)?;
    let v = history::check(&hist.read()?, &all, &snap, Expect::ExactlyOnce);
    let summary = format!(
        "{restarts} restarts ({}), {batch} jobs pushed + {} added ({refused} adds refused while the server was down), {} jobs, {} executions, {warnings} runner warnings of a lost server, {handed_back} unheard claim(s) handed back",
        took.join(", "),
        added.len(),
        v.jobs,
        v.executions
    );
    ctx.verdict(v);
    ctx.integrity(&db, "at the end of S25");
    let strays = procs.shutdown();
    if strays > 0 {
        ctx.problem(format!("{strays} stray process(es) left behind"));
    }
    Ok(Status::Ran(summary))
}
