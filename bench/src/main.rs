//! `slothqueue-bench`: every figure of slothqueue's performance, each as a
//! ratio against the raw storage limit measured in the same run. Run it
//! through `cargo xtask bench [--quick] [--backend sqlite|redb|postgres]`,
//! which builds it and the `slothqueue` binary and passes the latter's
//! path, and finds or starts a PostgreSQL server.
//!
//! ```text
//! slothqueue-bench [--quick] [--backend sqlite|redb|postgres] [--slothqueue PATH]
//!                  [--out DIR] [--benchmarks-md PATH]
//!                  [--durability default|fast] [--only STEP,...]
//!                  [--pg-skipped WHY]
//! ```
//!
//! Per backend, the default and (SQLite only: redb and PostgreSQL have
//! one) the fast durability setting are measured in this process
//! (raw_commit, push, cycle, push_many, claim_scaling, claim_concurrency,
//! chain, fan_out, drain, slots, bytes_per_job); the figures only the binary can give (add_ratio,
//! add_scaling, add_floor_ratio, import, status_100k, idle, wait_idle, rss) are measured on it,
//! under the default setting, the only one the CLI has. `add_floor_ratio` times this program
//! too: run as `slothqueue-bench --raw-add sqlite|redb FILE` (hidden), it is the floor of
//! one `add`, a process that opens FILE with the bare engine and the store's settings,
//! commits one row and exits (`raw::add_once`). Results: a markdown table on stdout, and
//! `results.json` and `results.md` in `--out` (default `target/bench`). A
//! full run of every backend also rewrites the generated section of
//! `--benchmarks-md`. Speed is reported, never asserted: the exit code says
//! only whether every measurement could be taken.
//!
//! PostgreSQL is measured on the server of `SLOTHQUEUE_PG_URL` (see
//! `pg.rs`); without one its column is skipped, loudly, and says why
//! (`--pg-skipped`, from xtask, which could not start a server either).

#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time")]
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark reports what it measured"
)]

mod cli;
mod deps;
mod inproc;
mod pg;
mod procfs;
mod raw;
mod report;
mod setting;
mod stats;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::report::{Machine, Results};
use crate::setting::{Backend, QueueFile, Setting};
use crate::stats::Figures;

/// How much of everything to do.
pub struct Sizes {
    /// Alternating slices of raw_commit, push and cycle.
    pub rounds: usize,
    /// The length of one slice.
    pub slice: Duration,
    /// Pending jobs for claim_scaling: small, mid (also push_many's one
    /// call), large.
    pub backlogs: [usize; 3],
    /// claim+complete samples per backlog.
    pub claim_samples: usize,
    /// Pending jobs claim_concurrency keeps in its queue.
    pub concurrency_backlog: usize,
    /// `true` jobs drained by the in-process runner.
    pub drain_jobs: usize,
    /// `true` jobs drained with one slot, and as many with two (`slots`).
    pub slots_jobs: usize,
    /// How long the idle runner is watched.
    pub idle_window: Duration,
    /// How long an idle command is left to settle before it is watched:
    /// its start, its last looks after its own writes (a runner's wake-ups
    /// as each commit settles, up to 0.8 s after it).
    pub settle: Duration,
    /// Jobs in the queue `status` reads.
    pub status_jobs: usize,
    /// Timed `status` calls.
    pub status_runs: usize,
    /// Timed `add` calls (and as many `true`s); also the `add` calls on
    /// each queue of `add_scaling`, and the `add`s and floor processes of
    /// `add_floor_ratio`.
    pub add_runs: usize,
    /// Pending jobs in the small and the large queue of `add_scaling`.
    pub add_scaling_jobs: [usize; 2],
    /// Jobs in the file `import` reads.
    pub import_jobs: usize,
    /// Adds whose start an idle `run --follow` is timed on (`wake_latency`).
    pub wake_runs: usize,
    /// `true` jobs drained by `slothqueue run` for rss.
    pub rss_jobs: usize,
    /// The length of the dependency chain, and the children of the
    /// fan-out's parent.
    pub graph_jobs: usize,
}

impl Sizes {
    fn full() -> Sizes {
        Sizes {
            rounds: 5,
            slice: Duration::from_secs(1),
            backlogs: [1_000, 100_000, 1_000_000],
            claim_samples: 301,
            concurrency_backlog: 100_000,
            drain_jobs: 1_000,
            slots_jobs: 1_000,
            idle_window: Duration::from_secs(30),
            settle: Duration::from_secs(3),
            status_jobs: 100_000,
            status_runs: 21,
            add_runs: 41,
            add_scaling_jobs: [100, 100_000],
            import_jobs: 100_000,
            wake_runs: 21,
            rss_jobs: 1_000,
            graph_jobs: 10_000,
        }
    }

    /// Small enough for CI in a dev build: keeps the harness alive, says
    /// nothing about speed.
    fn quick() -> Sizes {
        Sizes {
            rounds: 2,
            slice: Duration::from_millis(150),
            backlogs: [100, 2_000, 10_000],
            claim_samples: 21,
            concurrency_backlog: 2_000,
            drain_jobs: 40,
            slots_jobs: 40,
            idle_window: Duration::from_secs(2),
            // Past the runner's last look (0.8 s); the quick run measures
            // nothing, and CI waits for every second of it.
            settle: Duration::from_secs(1),
            status_jobs: 5_000,
            status_runs: 5,
            add_runs: 7,
            add_scaling_jobs: [100, 5_000],
            import_jobs: 2_000,
            wake_runs: 3,
            rss_jobs: 40,
            graph_jobs: 300,
        }
    }

    /// [`Sizes::quick`] for PostgreSQL, with smaller queues: every claim,
    /// settle and dependent written is a few round trips to the server
    /// (milliseconds each in a dev build), and the quick run must add at
    /// most ~30 s to CI.
    fn quick_postgres() -> Sizes {
        Sizes {
            backlogs: [100, 500, 2_000],
            concurrency_backlog: 500,
            status_jobs: 1_000,
            add_scaling_jobs: [100, 1_000],
            import_jobs: 500,
            graph_jobs: 100,
            ..Sizes::quick()
        }
    }

    /// The sizes of a run of `backend`.
    fn of(quick: bool, backend: Backend) -> Sizes {
        match (quick, backend) {
            (false, _) => Sizes::full(),
            (true, Backend::Postgres) => Sizes::quick_postgres(),
            (true, _) => Sizes::quick(),
        }
    }

    fn describe(&self, quick: bool) -> String {
        format!(
            "{} (slices {} × {:.2} s; backlogs {:?}; claimers {:?} on {} jobs; drain {} jobs; slots {} jobs per count; idle {:.0} s; status on {} jobs; add on {} / {} jobs; import {} jobs; chain and fan-out of {})",
            if quick { "--quick" } else { "full" },
            self.rounds,
            self.slice.as_secs_f64(),
            self.backlogs,
            inproc::CLAIMERS,
            self.concurrency_backlog,
            self.drain_jobs,
            self.slots_jobs,
            self.idle_window.as_secs_f64(),
            self.status_jobs,
            self.add_scaling_jobs[0],
            self.add_scaling_jobs[1],
            self.import_jobs,
            self.graph_jobs
        )
    }
}

struct Args {
    quick: bool,
    backends: Vec<Backend>,
    slothqueue: Option<PathBuf>,
    out: PathBuf,
    benchmarks_md: Option<PathBuf>,
    /// Only these steps (for profiling one figure); empty for all.
    only: Vec<String>,
    /// Only this durability setting (`default` or `fast`); `None` for both.
    durability: Option<bool>,
    /// Internal: measure the drain of one setting in this fresh process
    /// (`--out` is its scratch folder) and print its figures as JSON.
    child_drain: bool,
    /// Internal: the same for the slots drains.
    child_slots: bool,
    /// Internal: be the floor of one `add` (`raw::add_once`) on this file.
    raw_add: Option<(Backend, PathBuf)>,
    /// Why there is no PostgreSQL server (xtask could not start one).
    pg_skipped: Option<String>,
}

/// The steps `--only` can name.
pub const STEPS: [&str; 14] = [
    "rounds",
    "scaling",
    "concurrency",
    "graph",
    "drain",
    "slots",
    "add",
    "add_scaling",
    "import",
    "floor",
    "status",
    "idle",
    "wait_idle",
    "rss",
];

impl Args {
    /// Whether `step` is to run.
    pub fn runs(&self, step: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == step)
    }
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        quick: false,
        backends: Backend::ALL.to_vec(),
        slothqueue: None,
        out: PathBuf::from("target/bench"),
        benchmarks_md: None,
        only: Vec::new(),
        durability: None,
        child_drain: false,
        child_slots: false,
        raw_add: None,
        pg_skipped: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--quick" => args.quick = true,
            "--child-drain" => args.child_drain = true,
            "--child-slots" => args.child_slots = true,
            "--raw-add" => {
                let backend: Backend = value("--raw-add")?.parse().map_err(anyhow::Error::msg)?;
                args.raw_add = Some((backend, value("--raw-add")?.into()));
            }
            "--backend" => {
                args.backends = vec![value("--backend")?.parse().map_err(anyhow::Error::msg)?]
            }
            "--slothqueue" => args.slothqueue = Some(value("--slothqueue")?.into()),
            "--pg-skipped" => args.pg_skipped = Some(value("--pg-skipped")?),
            "--out" => args.out = value("--out")?.into(),
            "--benchmarks-md" => args.benchmarks_md = Some(value("--benchmarks-md")?.into()),
            "--only" => {
                for step in value("--only")?.split(',') {
                    if !STEPS.contains(&step) {
                        bail!("unknown step `{step}` (expected some of {})", STEPS.join(","));
                    }
                    args.only.push(step.to_owned());
                }
            }
            "--durability" => {
                args.durability = Some(match value("--durability")?.as_str() {
                    "default" => false,
                    "fast" => true,
                    other => bail!("unknown durability `{other}` (expected default or fast)"),
                })
            }
            "-h" | "--help" => {
                println!(
                    "usage: slothqueue-bench [--quick] [--backend sqlite|redb|postgres] \
                     [--slothqueue PATH] [--out DIR] [--benchmarks-md PATH] \
                     [--durability default|fast] [--only STEP,...] [--pg-skipped WHY]\nsteps: {}",
                    STEPS.join(",")
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument `{other}`"),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("slothqueue-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Removes the scratch folder however the run ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs everything; `Ok(false)` when some measurement failed (the others
/// are still reported).
fn run() -> Result<bool> {
    let args = parse_args()?;
    if let Some((backend, path)) = &args.raw_add {
        raw::add_once(*backend, path)?;
        return Ok(true);
    }
    if args.child_drain || args.child_slots {
        let (Some(fast), [backend]) = (args.durability, args.backends.as_slice()) else {
            bail!("--child-drain and --child-slots need one --backend and a --durability");
        };
        let sizes = Sizes::of(args.quick, *backend);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("cannot start the tokio runtime")?;
        let setting = Setting { backend: *backend, fast };
        let figures = if args.child_slots {
            runtime.block_on(inproc::slots(setting, &sizes, &args.out))?
        } else {
            runtime.block_on(inproc::drain(setting, &sizes, &args.out))?
        };
        println!("{}", serde_json::json!(figures));
        return Ok(true);
    }
    // The sizes the header names: the one backend's, else the file
    // backends' (PostgreSQL's quick sizes are named in a note).
    let sizes = match args.backends.as_slice() {
        [backend] => Sizes::of(args.quick, *backend),
        _ => Sizes::of(args.quick, Backend::Sqlite),
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let scratch = Scratch(args.out.join(format!("scratch-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0)
        .with_context(|| format!("cannot create {}", scratch.0.display()))?;
    let profile = if cfg!(debug_assertions) { "dev (unoptimised)" } else { "release" };
    let mut machine = Machine::probe(&scratch.0);
    eprintln!(
        "bench: {} on {} CPUs, load {}",
        sizes.describe(args.quick),
        machine.nproc,
        machine.load_before
    );
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;

    let mut results: Results = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    // Columns not measured, and CLI figures not taken, with why: in the
    // report under the table, and a full run with any is not complete.
    let mut skipped: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut pg_server: Option<String> = None;
    for &backend in &args.backends {
        let backend_started = Instant::now();
        let sizes = Sizes::of(args.quick, backend);
        if args.quick && backend == Backend::Postgres && args.backends.len() > 1 {
            notes.push(format!("postgres/default sizes: {}", sizes.describe(true)));
        }
        if backend == Backend::Postgres {
            if pg::server_url().is_none() {
                let why = args.pg_skipped.clone().unwrap_or_else(|| {
                    format!("{} is not set (`cargo xtask bench` sets it)", pg::URL_ENV)
                });
                eprintln!(
                    "\n*** bench: postgres/default SKIPPED: no PostgreSQL server: {why}\n\
                     *** (set {} to a server's URL, or install the server binaries for \
                     `cargo xtask bench` to start one)\n",
                    pg::URL_ENV
                );
                skipped.push(format!("postgres/default: SKIPPED, no PostgreSQL server: {why}"));
                results.push(("postgres/default".to_owned(), Figures::new()));
                continue;
            }
            match runtime.block_on(pg::describe()) {
                Ok(d) => pg_server = Some(d),
                Err(e) => {
                    eprintln!("bench: postgres/default: FAILED: {e:#}");
                    failures.push(format!("postgres/default: {e:#}"));
                    results.push(("postgres/default".to_owned(), Figures::new()));
                    continue;
                }
            }
        }
        for fast in [false, true] {
            if args.durability.is_some_and(|d| d != fast) || (fast && !backend.has_fast_setting()) {
                continue;
            }
            let setting = Setting { backend, fast };
            let dir = scratch.0.join(setting.to_string().replace('/', "-"));
            let mut figures = match runtime.block_on(inproc::measure(setting, &sizes, &dir, &args))
            {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("bench: {setting}: FAILED: {e:#}");
                    failures.push(format!("{setting}: {e:#}"));
                    Figures::new()
                }
            };
            let _ = std::fs::remove_dir_all(&dir);
            if !fast {
                match &args.slothqueue {
                    Some(bin) => {
                        let dir = scratch.0.join(format!("{}-cli", backend.as_str()));
                        match runtime.block_on(cli::measure(bin, backend, &sizes, &dir, &args)) {
                            Ok(Some(f)) => figures.extend(f),
                            Ok(None) => notes.push(format!(
                                "{setting}: CLI figures skipped: the `slothqueue` binary cannot \
                                 open a postgres:// queue"
                            )),
                            Err(e) => {
                                eprintln!("bench: {setting} (CLI): FAILED: {e:#}");
                                failures.push(format!("{setting} (CLI): {e:#}"));
                            }
                        }
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                    None => eprintln!("bench: no --slothqueue binary given: CLI figures skipped"),
                }
            }
            results.push((setting.to_string(), figures));
        }
        if backend == Backend::Postgres {
            match runtime.block_on(pg::drop_run_schemas()) {
                Ok(n) => eprintln!("bench: postgres: dropped this run's {n} schemas"),
                Err(e) => eprintln!("bench: postgres: cannot drop this run's schemas: {e:#}"),
            }
        }
        // What each backend adds to a run (CI's quick run has a budget).
        eprintln!("bench: {backend} took {:.0} s", backend_started.elapsed().as_secs_f64());
    }
    drop(runtime);
    machine.load_after = report::loadavg();
    let elapsed = started.elapsed().as_secs_f64();

    notes.splice(0..0, skipped.iter().cloned());
    let run = Run { profile, sizes: sizes.describe(args.quick), elapsed, pg_server, notes };
    let md = markdown(&results, &machine, &run, &args);
    println!("\n{md}");
    for f in &failures {
        println!("FAILED: {f}");
    }
    write(&args.out.join("results.md"), &md)?;
    let json = serde_json::to_string_pretty(&report::json(&results))?;
    write(&args.out.join("results.json"), &format!("{json}\n"))?;
    eprintln!(
        "bench: wrote {} and results.md ({elapsed:.0} s)",
        args.out.join("results.json").display()
    );
    let complete = failures.is_empty()
        && skipped.is_empty()
        && args.backends.len() == Backend::ALL.len()
        && args.only.is_empty()
        && args.durability.is_none();
    if let Some(path) = &args.benchmarks_md {
        if args.quick || !complete || args.slothqueue.is_none() {
            eprintln!("bench: {} left alone (only a complete full run updates it)", path.display());
        } else if report::update_benchmarks_md(path, &md)? {
            eprintln!("bench: updated the table in {}", path.display());
        } else {
            eprintln!("bench: {} has no bench markers; not updated", path.display());
        }
    }
    Ok(failures.is_empty())
}

/// What the report says about the run besides the figures.
struct Run {
    profile: &'static str,
    sizes: String,
    elapsed: f64,
    /// The PostgreSQL server measured (`pg::describe`).
    pg_server: Option<String>,
    /// Skipped columns and figures, each with why.
    notes: Vec<String>,
}

fn markdown(results: &Results, machine: &Machine, run: &Run, args: &Args) -> String {
    let mut settings = String::new();
    for (label, _) in results {
        if let Some((b, d)) = label.split_once('/') {
            if let Ok(backend) = b.parse::<Backend>() {
                let setting = Setting { backend, fast: d == "fast" };
                settings.push_str(&format!("- `{label}`: {}", setting.describe()));
                match (&run.pg_server, backend) {
                    (Some(server), Backend::Postgres) => {
                        settings.push_str(&format!("; server: {server}"))
                    }
                    (None, Backend::Postgres) => settings.push_str("; no server"),
                    _ => {}
                }
                settings.push('\n');
            }
        }
    }
    let mut notes = String::new();
    for note in &run.notes {
        notes.push_str(&format!("**{note}**\n\n"));
    }
    let cli_note = if args.slothqueue.is_some() {
        "CLI figures (idle, wait_idle, status_100k, add_ratio, add_scaling, add_floor_ratio, import, \
         rss) are taken on the `slothqueue` binary, \
         which always opens queues with the default durability: they appear in the default columns only."
    } else {
        "CLI figures skipped: no `slothqueue` binary given."
    };
    format!(
        "{}\n{settings}\n{}\n{notes}{}\n{cli_note} The whole run took {:.0} s.\n",
        machine.markdown(run.profile, &run.sizes),
        report::table(results),
        report::targets(results),
        run.elapsed,
    )
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
