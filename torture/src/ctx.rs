//! One backend's run: options, the tally behind the summary line, and the
//! ways scenarios start the binary.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use crate::queue::{Backend, Where as _};
use crate::util::{Ended, Rng, run_capture};

/// What the command line asked for.
#[derive(Clone, Debug)]
pub struct Options {
    pub bin: PathBuf,
    pub quick: bool,
    pub seed: u64,
    pub keep: bool,
    /// The PostgreSQL server's URL (no schema), for the `postgres`
    /// backend.
    pub pg_url: Option<String>,
}

/// How a scenario ended (a failure is an `Err` or recorded problems).
#[derive(Clone, Debug)]
pub enum Status {
    Ran(String),
    Skipped(String),
}

/// The numbers of the summary line.
#[derive(Debug, Default)]
pub struct Tally {
    pub kills: u64,
    pub jobs: u64,
    pub lost: u64,
    pub overlaps: u64,
    pub panics: u64,
    pub integrity_failures: u64,
    pub locked_messages: u64,
}

pub struct Ctx {
    pub opts: Options,
    pub backend: Backend,
    pub rng: Rng,
    pub tally: Tally,
    /// Problems of the scenario running now.
    problems: Vec<String>,
    /// (scenario, status line, problems).
    results: Vec<(String, String, Vec<String>)>,
    root: tempfile::TempDir,
    scenario: String,
    /// The queues on the server made so far: (URL, the scenario directory
    /// that goes with it, schema). A URL has no parent folder to run the
    /// binary in, and its schema is dropped at the end.
    server_queues: RefCell<Vec<(PathBuf, PathBuf, String)>>,
}

impl Ctx {
    pub fn new(opts: Options, backend: Backend) -> Result<Ctx> {
        let root = tempfile::Builder::new()
            .prefix(&format!("sq-torture-{}-", backend.as_str()))
            .tempdir()
            .context("cannot create the work directory")?;
        let rng = Rng::new(opts.seed).fork(backend.as_str());
        Ok(Ctx {
            opts,
            backend,
            rng,
            tally: Tally::default(),
            problems: Vec::new(),
            results: Vec::new(),
            root,
            scenario: String::new(),
            server_queues: RefCell::new(Vec::new()),
        })
    }

    pub fn quick(&self) -> bool {
        self.opts.quick
    }

    /// `quick` or `full`, by mode.
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.opts.quick { quick } else { full }
    }

    pub fn run_scenario(&mut self, name: &str, f: fn(&mut Ctx) -> Result<Status>) {
        self.scenario = name.to_owned();
        self.rng = Rng::new(self.opts.seed).fork(&format!("{}/{name}", self.backend.as_str()));
        self.problems.clear();
        let started = Instant::now();
        println!("torture: {} {name} ...", self.backend.as_str());
        let status = f(self);
        let took = started.elapsed();
        let mut problems = std::mem::take(&mut self.problems);
        let line = match status {
            Ok(Status::Ran(what)) => format!("ran in {took:.1?}: {what}"),
            Ok(Status::Skipped(why)) => format!("SKIPPED: {why}"),
            Err(e) => {
                problems.push(format!("{e:#}"));
                format!("ERROR after {took:.1?}")
            }
        };
        let mark = if problems.is_empty() { "ok" } else { "FAILED" };
        println!("torture: {} {name} {mark} — {line}", self.backend.as_str());
        for p in problems.iter().take(20) {
            println!("torture:     {p}");
        }
        if problems.len() > 20 {
            println!("torture:     … and {} more", problems.len() - 20);
        }
        self.results.push((name.to_owned(), line, problems));
    }

    /// Records something wrong in the current scenario.
    pub fn problem(&mut self, msg: impl Into<String>) {
        self.problems.push(msg.into());
    }

    /// A fresh directory for a scenario step (under the run's temp dir,
    /// which is removed at the end unless `--keep`).
    pub fn dir(&self, name: &str) -> Result<PathBuf> {
        let d = self.root.path().join(format!("{}-{name}", self.scenario));
        std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
        Ok(d)
    }

    /// A tag unique to this scenario step, carried by every process.
    pub fn tag(&self, name: &str) -> String {
        format!("{}-{}-{}-{}", std::process::id(), self.backend.as_str(), self.scenario, name)
    }

    /// The queue for a scenario step whose directory is `dir`: the file in
    /// `dir`, or on a server a fresh schema, named by its URL (which the
    /// scenarios pass around as they would a path).
    pub fn db(&self, dir: &Path) -> PathBuf {
        if let Some(name) = self.backend.file_name() {
            return dir.join(name);
        }
        let base = self.opts.pg_url.as_deref().unwrap_or_default();
        let mut queues = self.server_queues.borrow_mut();
        let label = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let schema = crate::pg::schema_name(&label, queues.len());
        let url = PathBuf::from(crate::pg::with_schema(base, &schema));
        queues.push((url.clone(), dir.to_path_buf(), schema));
        url
    }

    /// The scenario directory of the queue `db`: where the binary runs and
    /// keeps its job logs (`HOME`, for a queue on a server).
    pub fn work_dir(&self, db: &Path) -> PathBuf {
        if !self.backend.is_file() {
            if let Some((_, dir, _)) = self.server_queues.borrow().iter().find(|(u, ..)| u == db) {
                return dir.clone();
            }
            return self.root.path().to_path_buf();
        }
        db.parent().unwrap_or(Path::new("/")).to_path_buf()
    }

    /// The binary on `db`, with a clean environment, run in the queue's
    /// scenario directory.
    pub fn sq(&self, db: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.opts.bin);
        let dir = self.work_dir(db);
        let dir = dir.as_path();
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
            .env("HOME", dir)
            .env("TZ", "UTC")
            .env("NO_COLOR", "1")
            .current_dir(dir)
            .arg("--db")
            .arg(db);
        if let Some(backend) = self.backend.cli_flag() {
            cmd.arg("--backend").arg(backend);
        }
        cmd.args(args);
        cmd
    }

    /// A runner that never waits for the machine to be quiet (the
    /// harness itself is the load).
    pub fn runner_cmd(&self, db: &Path, extra: &[&str]) -> Command {
        let mut args = vec!["run", "--load-ceiling", "100000"];
        args.extend_from_slice(extra);
        self.sq(db, &args)
    }

    /// Runs the binary to the end (deadline 60 s) and records panics.
    pub fn sq_run(&mut self, db: &Path, args: &[&str]) -> Result<Ended> {
        let cmd = self.sq(db, args);
        let ended = run_capture(
            &format!("slothqueue {}", args.join(" ")),
            cmd,
            Duration::from_secs(60),
            &self.tag("run"),
        )?;
        self.observe(&ended, false);
        Ok(ended)
    }

    /// Counts a panic or a raw "database is locked" in a process's output.
    pub fn observe(&mut self, e: &Ended, abort_expected: bool) {
        if e.panicked(abort_expected) {
            self.tally.panics += 1;
            self.problem(format!("PANIC: {}", e.describe()));
        }
        let locked = count_locked(&e.stdout) + count_locked(&e.stderr);
        if locked > 0 {
            self.tally.locked_messages += locked;
            self.problem(format!("{}: `database is locked` surfaced {locked} time(s)", e.name));
        }
    }

    /// Runs the integrity check; a failure is counted and recorded.
    pub fn integrity(&mut self, db: &Path, when: &str) {
        if let Err(e) = crate::queue::integrity(self.backend, db) {
            self.tally.integrity_failures += 1;
            self.problem(format!("integrity check FAILED {when}: {e}"));
        }
    }

    /// Adds a history verdict to the tally and the problems.
    pub fn verdict(&mut self, v: crate::history::Verdict) {
        self.tally.jobs += v.jobs;
        self.tally.lost += v.lost;
        self.tally.overlaps += v.overlaps;
        for p in v.problems {
            self.problem(p);
        }
    }

    pub fn passed(&self) -> bool {
        self.results.iter().all(|(_, _, p)| p.is_empty())
            && self.tally.lost == 0
            && self.tally.overlaps == 0
            && self.tally.panics == 0
            && self.tally.integrity_failures == 0
    }

    pub fn print_report(&self) {
        println!("torture: {} scenarios:", self.backend.as_str());
        for (name, line, problems) in &self.results {
            let mark = if problems.is_empty() { "ok    " } else { "FAILED" };
            println!("torture:   {name} {mark} {line}");
        }
        if self.opts.keep {
            println!("torture: work files kept in {}", self.root.path().display());
            let _ = self.root.path().to_path_buf();
        }
    }

    pub fn summary_line(&self) -> String {
        let t = &self.tally;
        format!(
            "torture: {} {} kills, {} jobs, {} lost, {} overlapping runs, {} panics, integrity {}",
            self.backend.as_str(),
            t.kills,
            t.jobs,
            t.lost,
            t.overlaps,
            t.panics,
            if t.integrity_failures == 0 { "ok" } else { "FAILED" }
        )
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        let schemas: Vec<String> =
            self.server_queues.borrow().iter().map(|(.., schema)| schema.clone()).collect();
        if let (Some(base), false) = (&self.opts.pg_url, schemas.is_empty()) {
            // The harness's kept connection goes first: a schema in use
            // still drops, but no connection should outlive the run.
            crate::queue::forget_pg();
            if self.opts.keep {
                println!("torture: schemas kept on {base}: {}", schemas.join(", "));
            } else if let Err(e) = crate::pg::drop_schemas(base, &schemas) {
                eprintln!("torture: cannot drop the run's schemas: {e:#}");
            }
        }
        if self.opts.keep {
            let root = std::mem::replace(
                &mut self.root,
                match tempfile::tempdir() {
                    Ok(d) => d,
                    Err(_) => return,
                },
            );
            let _ = root.keep();
        }
    }
}

fn count_locked(s: &str) -> u64 {
    s.matches("database is locked").count() as u64
}
