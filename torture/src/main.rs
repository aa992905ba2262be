//! slothqueue's torture suite: "nothing lost, nothing run twice at once"
//! under kill -9, contention, clock jumps, full disks and hostile files.
//!
//! Run it through `cargo xtask torture [--quick] [--backend sqlite|redb]`,
//! which builds the `slothqueue` binary (with the `failpoints` feature, inert
//! unless `SLOTHQUEUE_FAILPOINT` is set) and passes its path here. Every
//! scenario drives that binary as separate processes, waits on events
//! (files, states, exits) with deadlines, and cleans up every process and
//! directory it made. The seed is printed first; `--seed N` replays.
//!
//! The last lines are the summary, one per backend:
//! `torture: <backend> <N> kills, <M> jobs, <L> lost, <D> overlapping runs, <P> panics, integrity ok|FAILED`.
//!
//! Hidden helper modes (`enqueue`, `poll`, `lib-runner`) are this binary
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
mod processes;
mod queue;
mod util;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::ctx::{Ctx, Options, Status};
use crate::queue::Backend;

/// A scenario: runs against one backend, records its problems in the
/// context.
type Scenario = fn(&mut Ctx) -> Result<Status>;

/// Every scenario, in the order they run.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("S03", load::s03_contention),
    ("S04", load::s04_kill_loop),
    ("S05", load::s05_failpoints),
    ("S07", processes::s07_graceful_signals),
    ("S08", processes::s08_max_runtime),
    ("S09", processes::s09_orphaned_group),
    ("S10", processes::s10_pid_reuse),
    ("S22", processes::s22_child_inherits),
    ("S24", escapes::s24_escapes),
    ("S11", clock::s11_forward_jump),
    ("S12", clock::s12_backward_step),
    ("S13", files::s13_busy),
    ("S15", files::s15_disk_full),
    ("S16", files::s16_hostile_files),
    ("S17", files::s17_schema),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("enqueue") => helpers::enqueue(&args[1..]),
        Some("poll") => helpers::poll(&args[1..]),
        Some("lib-runner") => clock::lib_runner(&args[1..]),
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
    "usage: slothqueue-torture --bin PATH [--quick] [--backend sqlite|redb] [--seed N] [--only S03,S04,...] [--keep]"
}

fn torture(args: &[String]) -> Result<ExitCode> {
    let mut bin: Option<PathBuf> = None;
    let mut quick = false;
    let mut backends = vec![Backend::Sqlite, Backend::Redb];
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
                backends = match value()?.as_str() {
                    "sqlite" => vec![Backend::Sqlite],
                    "redb" => vec![Backend::Redb],
                    "both" => vec![Backend::Sqlite, Backend::Redb],
                    other => bail!("unknown backend `{other}`\n{}", usage()),
                }
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
        let opts = Options { bin: bin.clone(), quick, seed, keep };
        let mut ctx = Ctx::new(opts, backend)?;
        for (name, scenario) in SCENARIOS {
            if only.as_ref().is_some_and(|o| !o.iter().any(|x| x == name)) {
                continue;
            }
            ctx.run_scenario(name, *scenario);
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
