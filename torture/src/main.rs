//! slothqueue's torture suite: "nothing lost, nothing run twice at once"
//! under kill -9, contention, clock jumps, full disks and hostile files.
//!
//! Run it through `cargo xtask torture [--quick] [--backend sqlite|redb|postgres]`,
//! which builds the `slothqueue` binary (with the `failpoints` feature, inert
//! unless `SLOTHQUEUE_FAILPOINT` is set) and passes its path here. Every
//! scenario drives that binary as separate processes, waits on events
//! (files, states, exits) with deadlines, and cleans up every process and
//! directory it made. The seed is printed first; `--seed N` replays.
//!
//! The `postgres` backend runs on the server `SLOTHQUEUE_PG_URL` names, a
//! fresh schema per queue (`pg.rs`), the scenarios that do not concern
//! files, S25 (the server restarted mid-run) and S26 (a runner cut off
//! from the server past its lease). Without `--backend` it
//! runs when that variable is set: only S04, S25 and S26 with `--quick` (CI's
//! pass, kept short), every applicable scenario without.
//!
//! The last lines are the summary, one per backend:
//! `torture: <backend> <N> kills, <M> jobs, <L> lost, <D> overlapping runs, <P> panics, integrity ok|FAILED`.
//!
//! Hidden helper modes (`enqueue`, `poll`, `lib-runner`, `relay`) are this binary
//! started by the scenarios as their own processes.

#![allow(
    clippy::disallowed_methods,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a torture harness measures real time, waits on real processes and reports on stdout"
)]

mod clock;
mod ctx;
mod escapes;
mod files;
mod helpers;
mod history;
mod load;
mod partition;
mod pg;
mod processes;
mod queue;
mod server;
mod util;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::ctx::{Ctx, Options, Status};
use crate::queue::{Backend, Where as _};

/// A scenario: runs against one backend, records its problems in the
/// context.
type Scenario = fn(&mut Ctx) -> Result<Status>;

/// Which backends a scenario concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Concerns {
    /// Every backend.
    Every,
    /// Queue files: their locks, the disk under them, their bytes.
    Files,
    /// A queue on a server: the server going away.
    Server,
}

impl Concerns {
    fn includes(self, backend: Backend) -> bool {
        match self {
            Concerns::Every => true,
            Concerns::Files => backend.is_file(),
            Concerns::Server => !backend.is_file(),
        }
    }
}

/// Every scenario, in the order they run.
const SCENARIOS: &[(&str, Concerns, Scenario)] = &[
    ("S03", Concerns::Every, load::s03_contention),
    ("S04", Concerns::Every, load::s04_kill_loop),
    ("S25", Concerns::Server, server::s25_server_restart),
    ("S26", Concerns::Server, partition::s26_partition),
    ("S05", Concerns::Every, load::s05_failpoints),
    ("S07", Concerns::Every, processes::s07_graceful_signals),
    ("S08", Concerns::Every, processes::s08_max_runtime),
    ("S09", Concerns::Every, processes::s09_orphaned_group),
    ("S10", Concerns::Every, processes::s10_pid_reuse),
    ("S22", Concerns::Every, processes::s22_child_inherits),
    ("S24", Concerns::Every, escapes::s24_escapes),
    ("S11", Concerns::Every, clock::s11_forward_jump),
    ("S12", Concerns::Every, clock::s12_backward_step),
    ("S13", Concerns::Files, files::s13_busy),
    ("S15", Concerns::Files, files::s15_disk_full),
    ("S16", Concerns::Files, files::s16_hostile_files),
    ("S17", Concerns::Files, files::s17_schema),
];

/// The PostgreSQL scenarios of a quick run that names no backend (CI's):
/// the kill loop, the server restart and the partition (one round, about
/// 5 s), so the pass stays within about a minute beside the file backends'
/// full quick set.
const PG_QUICK: &[&str] = &["S04", "S25", "S26"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("enqueue") => helpers::enqueue(&args[1..]),
        Some("poll") => helpers::poll(&args[1..]),
        Some("lib-runner") => clock::lib_runner(&args[1..]),
        Some("relay") => partition::relay(&args[1..]),
        _ => torture(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("torture: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> &'static str {
    "usage: slothqueue-torture --bin PATH [--quick] [--backend sqlite|redb|postgres|both|all] [--seed N] [--only S03,S04,...] [--keep]\n\
     (postgres: the server in SLOTHQUEUE_PG_URL; both: sqlite and redb; without --backend, postgres joins when SLOTHQUEUE_PG_URL is set)"
}

fn torture(args: &[String]) -> Result<ExitCode> {
    let mut bin: Option<PathBuf> = None;
    let mut quick = false;
    let mut backends: Option<Vec<Backend>> = None;
    let mut seed: Option<u64> = None;
    let mut only: Option<Vec<String>> = None;
    let mut keep = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value\n{}", usage()));
        match a.as_str() {
            "--bin" => bin = Some(PathBuf::from(value()?)),
            "--quick" => quick = true,
            "--keep" => keep = true,
            "--backend" => {
                backends = Some(match value()?.as_str() {
                    "sqlite" => vec![Backend::Sqlite],
                    "redb" => vec![Backend::Redb],
                    "postgres" => vec![Backend::Postgres],
                    "both" => vec![Backend::Sqlite, Backend::Redb],
                    "all" => vec![Backend::Sqlite, Backend::Redb, Backend::Postgres],
                    other => bail!("unknown backend `{other}`\n{}", usage()),
                })
            }
            "--seed" => seed = Some(value()?.parse().context("--seed takes a number")?),
            "--only" => {
                only = Some(value()?.split(',').map(|s| s.trim().to_ascii_uppercase()).collect())
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return Ok(ExitCode::SUCCESS);
            }
            other => bail!("unknown argument `{other}`\n{}", usage()),
        }
    }
    let bin = bin.context(usage())?;
    let bin = bin.canonicalize().with_context(|| format!("no binary at {}", bin.display()))?;
    let pg_url = pg::url_from_env().map(|u| pg::base_url(&u));
    // A quick run that named no backend is CI's: PostgreSQL joins it with
    // its short set when a server is named.
    let pg_subset = quick && backends.is_none();
    let backends = match backends {
        Some(b) => b,
        None if pg_url.is_some() => vec![Backend::Sqlite, Backend::Redb, Backend::Postgres],
        None if pg::required() => {
            bail!("{} is required but not set: no PostgreSQL server to run on", pg::URL_ENV)
        }
        None => {
            println!(
                "torture: postgres not run: {} is not set (`cargo xtask torture --backend postgres` starts a server)",
                pg::URL_ENV
            );
            vec![Backend::Sqlite, Backend::Redb]
        }
    };
    if backends.contains(&Backend::Postgres) {
        let url = pg_url.as_deref().with_context(|| {
            format!("--backend postgres needs a server: set {} (a postgres:// URL)", pg::URL_ENV)
        })?;
        pg::ping(url)?;
    }
    let seed = seed.unwrap_or_else(|| (util::now_ns() as u64) ^ u64::from(std::process::id()));
    println!(
        "torture: seed {seed} ({}; replay with --seed {seed}), binary {}",
        if quick { "quick" } else { "full" },
        bin.display()
    );
    let started = Instant::now();
    let mut summaries = Vec::new();
    let mut failed = false;
    for backend in backends {
        let opts = Options { bin: bin.clone(), quick, seed, keep, pg_url: pg_url.clone() };
        let mut ctx = Ctx::new(opts, backend)?;
        let mut elsewhere = Vec::new();
        let mut later = Vec::new();
        for (name, concerns, scenario) in SCENARIOS {
            if only.as_ref().is_some_and(|o| !o.iter().any(|x| x == name)) {
                continue;
            }
            if !concerns.includes(backend) {
                elsewhere.push(*name);
                continue;
            }
            if backend == Backend::Postgres && pg_subset && !PG_QUICK.contains(name) {
                later.push(*name);
                continue;
            }
            ctx.run_scenario(name, *scenario);
        }
        if !elsewhere.is_empty() {
            println!(
                "torture: {}: {} not run (not about {})",
                backend.as_str(),
                elsewhere.join(", "),
                if backend.is_file() { "a queue file" } else { "a queue on a server" }
            );
        }
        if !later.is_empty() {
            println!(
                "torture: {}: {} not run in this quick pass (`--backend {}` runs them)",
                backend.as_str(),
                later.join(", "),
                backend.as_str()
            );
        }
        ctx.print_report();
        failed |= !ctx.passed();
        summaries.push(ctx.summary_line());
    }
    println!("torture: finished in {:.0?}", started.elapsed());
    for line in summaries {
        println!("{line}");
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
