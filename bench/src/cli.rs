//! The figures only the `slothqueue` binary can give: `add` and `status`
//! wall times, `add` on a small against a large queue (`add_scaling`), `add`
//! against the floor of any add (a process of this program committing one
//! row with the bare engine, `add_floor_ratio`), the rate of `import`, an
//! idle `run --follow`'s and a waiting `wait`'s CPU time and wake-ups, and
//! a draining runner's peak RSS. The CLI opens every queue with the default
//! durability (it has no switch), so these are measured once per backend
//! and belong to the default setting.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};

use crate::inproc::{fill, remove_queue, settled};
use crate::procfs;
use crate::setting::{Backend, QueueFile as _, Setting};
use crate::stats::{Figures, median};
use crate::{Args, Sizes};

/// The poll of `run --follow`, which watches its queue file: the only
/// wake-ups an idle runner should have (the kernel's notifications wake
/// it for changes).
const POLL_INTERVAL: Duration = slothqueue_runner::WATCHED_POLL;

/// How often a `wait` looks without a change notification
/// (`slothqueue_runner::watch::NOTIFIED_POLL`).
const WAIT_POLL: Duration = slothqueue_runner::watch::NOTIFIED_POLL;

/// How `run` is started: a load gate that never closes, so that a busy
/// benchmark machine measures the runner and not the gate's patience.
const RUN_FLAGS: [&str; 2] = ["--load-ceiling", "1000"];

/// Every CLI figure for `backend`.
pub async fn measure(
    bin: &Path,
    backend: Backend,
    sizes: &Sizes,
    dir: &Path,
    args: &Args,
) -> Result<Option<Figures>> {
    let mut f = Figures::new();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cli = Cli { bin: bin.to_owned(), dir: dir.to_owned() };
    if backend == Backend::Postgres {
        if let Err(e) = cli.can_open_postgres().await {
            eprintln!("\n*** bench: postgres/default: CLI figures SKIPPED: {e:#}\n");
            return Ok(None);
        }
    }
    if args.runs("add") {
        eprintln!("bench: {}/default: add_ratio", backend.as_str());
        cli.add_ratio(backend, sizes, &mut f)?;
    }
    if args.runs("add_scaling") {
        eprintln!("bench: {}/default: add_scaling", backend.as_str());
        cli.add_scaling(backend, sizes, &mut f).await?;
    }
    if args.runs("import") {
        eprintln!("bench: {}/default: import ({} jobs)", backend.as_str(), sizes.import_jobs);
        cli.import(backend, sizes, &mut f).await?;
    }
    if args.runs("floor") {
        eprintln!("bench: {}/default: add_floor_ratio", backend.as_str());
        cli.floor(backend, sizes, &mut f)?;
    }
    if args.runs("status") {
        eprintln!("bench: {}/default: status_100k", backend.as_str());
        cli.status(backend, sizes, &mut f).await?;
    }
    if args.runs("idle") {
        eprintln!(
            "bench: {}/default: idle ({} s of run --follow)",
            backend.as_str(),
            sizes.idle_window.as_secs_f64() + sizes.settle.as_secs_f64()
        );
        cli.idle(backend, sizes, &mut f)?;
    }
    if args.runs("wait_idle") {
        eprintln!(
            "bench: {}/default: wait_idle ({} s of wait on a job nobody runs)",
            backend.as_str(),
            sizes.idle_window.as_secs_f64() + sizes.settle.as_secs_f64()
        );
        cli.wait_idle(backend, sizes, &mut f).await?;
    }
    if args.runs("rss") {
        eprintln!("bench: {}/default: rss", backend.as_str());
        cli.rss(backend, sizes, &mut f).await?;
    }
    Ok(Some(f))
}

struct Cli {
    bin: PathBuf,
    dir: PathBuf,
}

/// Runs `cmd` to the end, output captured; milliseconds of wall time.
fn timed(cmd: &mut Command) -> Result<f64> {
    let start = Instant::now();
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("cannot run {cmd:?}"))?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    if !out.status.success() {
        bail!("{cmd:?} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(ms)
}

/// Sleeps; the bench's own waits are real time.
fn pause(d: Duration) {
    std::thread::sleep(d);
}

impl Cli {
    fn cmd(&self, queue: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--db").arg(queue).args(args);
        c
    }

    /// A child's stderr goes to a file in the scratch folder, read on failure.
    fn stderr_file(&self, name: &str) -> Result<(PathBuf, File)> {
        let path = self.dir.join(format!("{name}.stderr"));
        let file =
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok((path, file))
    }

    /// One `slothqueue add` against one spawn of `true`, alternately; also
    /// `slothqueue --version` (the binary doing nothing: the floor of any
    /// command) and `status` on this small queue (what `status_100k` costs
    /// before counting).
    fn add_ratio(&self, backend: Backend, sizes: &Sizes, f: &mut Figures) -> Result<()> {
        let queue = backend.file(&self.dir, "add");
        let version = || {
            let mut c = Command::new(&self.bin);
            c.arg("--version");
            c
        };
        for _ in 0..3 {
            timed(&mut self.cmd(&queue, &["add", "true"]))?;
            timed(&mut Command::new("true"))?;
            timed(&mut version())?;
        }
        let (mut adds, mut trues, mut versions, mut statuses) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..sizes.add_runs {
            trues.push(timed(&mut Command::new("true"))?);
            adds.push(timed(&mut self.cmd(&queue, &["add", "true"]))?);
            versions.push(timed(&mut version())?);
            statuses.push(timed(&mut self.cmd(&queue, &["status"]))?);
        }
        let (add, tru) = (median(&adds), median(&trues));
        f.insert("add_ms", add);
        f.insert("true_ms", tru);
        f.insert("add_ratio", add / tru);
        f.insert("version_ratio", median(&versions) / tru);
        f.insert("status_small_ms", median(&statuses));
        Ok(())
    }

    /// `slothqueue add` on a queue of a few pending jobs against one on a
    /// queue of many, alternately, after two untimed calls on each.
    async fn add_scaling(&self, backend: Backend, sizes: &Sizes, f: &mut Figures) -> Result<()> {
        let [small_jobs, large_jobs] = sizes.add_scaling_jobs;
        let small = self.filled(backend, "add-small", small_jobs).await?;
        let large = self.filled(backend, "add-large", large_jobs).await?;
        for _ in 0..2 {
            timed(&mut self.cmd(&small, &["add", "true"]))?;
            timed(&mut self.cmd(&large, &["add", "true"]))?;
        }
        let (mut smalls, mut larges) = (Vec::new(), Vec::new());
        for _ in 0..sizes.add_runs {
            smalls.push(timed(&mut self.cmd(&small, &["add", "true"]))?);
            larges.push(timed(&mut self.cmd(&large, &["add", "true"]))?);
        }
        let (s, l) = (median(&smalls), median(&larges));
        f.insert("add_small_ms", s);
        f.insert("add_large_ms", l);
        f.insert("add_scaling", l / s);
        f.insert("add_scaling_small_jobs", small_jobs as f64);
        f.insert("add_scaling_large_jobs", large_jobs as f64);
        remove_queue(&small).await;
        remove_queue(&large).await;
        Ok(())
    }

    /// `slothqueue import FILE` of `import_jobs` jobs into a new queue, the
    /// whole process timed once; FILE is what `slothqueue export` wrote of
    /// a queue of as many pending jobs. The new queue must then count them.
    async fn import(&self, backend: Backend, sizes: &Sizes, f: &mut Figures) -> Result<()> {
        let n = sizes.import_jobs;
        let source = self.filled(backend, "export-source", n).await?;
        let file = self.dir.join("export.jsonl");
        let (err_path, err) = self.stderr_file("export")?;
        let out =
            File::create(&file).with_context(|| format!("cannot create {}", file.display()))?;
        let status = self
            .cmd(&source, &["export"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .context("cannot run slothqueue export")?;
        if !status.success() {
            let text = std::fs::read_to_string(&err_path).unwrap_or_default();
            bail!("slothqueue export failed ({status}): {}", text.trim());
        }
        remove_queue(&source).await;
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
        drop(text);
        ensure!(lines == n, "export wrote {lines} lines for {n} pending jobs");
        let queue = backend.file(&self.dir, "import");
        let ms = timed(self.cmd(&queue, &["import"]).arg(&file))?;
        let pending = self.pending(&queue)?;
        ensure!(pending == n as u64, "status counts {pending} pending jobs after importing {n}");
        f.insert("import_jobs_s", n as f64 / (ms / 1e3));
        f.insert("import_jobs", n as f64);
        remove_queue(&queue).await;
        let _ = std::fs::remove_file(&file);
        Ok(())
    }

    /// `slothqueue add` on a small queue against the floor of any add: this
    /// program as `--raw-add`, a process that opens a file of its own with
    /// the bare engine and the store's settings, commits one row and exits.
    /// Alternately, the order swapped each round, after three of each.
    fn floor(&self, backend: Backend, sizes: &Sizes, f: &mut Figures) -> Result<()> {
        let queue = backend.file(&self.dir, "floor-add");
        let raw = backend.file(&self.dir, "floor-raw");
        let exe = std::env::current_exe().context("cannot find this program to re-run it")?;
        let floor = || {
            let mut c = Command::new(&exe);
            c.args(["--raw-add", backend.as_str()]).arg(&raw);
            c
        };
        for _ in 0..3 {
            timed(&mut self.cmd(&queue, &["add", "true"]))?;
            timed(&mut floor())?;
        }
        let (mut adds, mut floors) = (Vec::new(), Vec::new());
        for i in 0..sizes.add_runs {
            if i % 2 == 0 {
                adds.push(timed(&mut self.cmd(&queue, &["add", "true"]))?);
                floors.push(timed(&mut floor())?);
            } else {
                floors.push(timed(&mut floor())?);
                adds.push(timed(&mut self.cmd(&queue, &["add", "true"]))?);
            }
        }
        let (add, bare) = (median(&adds), median(&floors));
        f.insert("floor_add_ms", add);
        f.insert("floor_ms", bare);
        f.insert("add_floor_ratio", add / bare);
        Ok(())
    }

    /// Whether the binary opens a `postgres://` queue: `status` on a new
    /// one of one job, made in process, must count it (a binary that takes
    /// the URL for a file path reads an empty queue). An error says why
    /// not: a build without the `postgres` feature, or no such support.
    async fn can_open_postgres(&self) -> Result<()> {
        let queue = self.filled(Backend::Postgres, "probe", 1).await?;
        let pending = self.pending(&queue);
        remove_queue(&queue).await;
        let pending = pending
            .with_context(|| format!("{} cannot open a postgres:// queue", self.bin.display()))?;
        ensure!(
            pending == 1,
            "{} counts {pending} pending jobs in a postgres:// queue of 1: it does not open it",
            self.bin.display()
        );
        Ok(())
    }

    /// A new queue `stem` of this backend holding `n` pending jobs (pushed
    /// in process, the store closed again).
    async fn filled(&self, backend: Backend, stem: &str, n: usize) -> Result<PathBuf> {
        let queue = backend.file(&self.dir, stem);
        let store = Setting { backend, fast: false }.open(&queue)?;
        fill(store.as_ref(), n, &self.dir).await?;
        settled(&queue).await?;
        Ok(queue)
    }

    /// The pending jobs `slothqueue --json status` counts in `queue`.
    fn pending(&self, queue: &Path) -> Result<u64> {
        let out = self
            .cmd(queue, &["--json", "status"])
            .stdin(Stdio::null())
            .output()
            .context("cannot run slothqueue status")?;
        ensure!(
            out.status.success(),
            "slothqueue status failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!("status --json printed no JSON: {}", String::from_utf8_lossy(&out.stderr))
        })?;
        json["pending"].as_u64().context("status --json gave no `pending` count")
    }

    /// `slothqueue status` on a queue of `status_jobs` pending jobs.
    async fn status(&self, backend: Backend, sizes: &Sizes, f: &mut Figures) -> Result<()> {
        let queue = self.filled(backend, "status", sizes.status_jobs).await?;
        let pending = self.pending(&queue)?;
        ensure!(
            pending == sizes.status_jobs as u64,
            "status counted {pending} pending jobs, expected {}",
            sizes.status_jobs
        );
        for _ in 0..2 {
            timed(&mut self.cmd(&queue, &["status"]))?;
        }
        let runs: Vec<f64> = (0..sizes.status_runs)
            .map(|_| timed(&mut self.cmd(&queue, &["status"])))
            .collect::<Result<_>>()?;
        f.insert("status_100k", median(&runs));
        f.insert("status_jobs", sizes.status_jobs as f64);
        Ok(())
    }

    /// `run --follow` on an empty queue: its CPU time and context switches
    /// over the window (after it settles, `Sizes::settle`), scaled to 10 s,
    /// and in how many separate bursts it woke (switches sampled every
    /// 100 ms; consecutive busy samples are one burst). Then, the same
    /// runner still asleep, `wake_latency`.
    fn idle(&self, backend: Backend, sizes: &Sizes, f: &mut Figures) -> Result<()> {
        let queue = backend.file(&self.dir, "idle");
        let mut cmd = self.cmd(&queue, &["run", "--follow"]);
        cmd.args(RUN_FLAGS);
        let (idle, runner) = self.watch_idle(cmd, "idle", sizes)?;
        f.insert("idle", idle.cpu_ms_per_10s);
        f.insert("idle_stat_ms", idle.stat_ms_per_10s);
        f.insert("idle_wakeups", idle.switches_per_10s);
        f.insert("idle_bursts", idle.bursts);
        f.insert("idle_polls", idle.window_s / POLL_INTERVAL.as_secs_f64());
        f.insert("idle_window_s", idle.window_s);
        eprintln!("bench: {}/default: wake_latency ({} adds)", backend.as_str(), sizes.wake_runs);
        self.wake_latency(&queue, sizes, f)?;
        drop(runner);
        Ok(())
    }

    /// From `slothqueue add` in another process to the start of its job
    /// under the idle `run --follow`: the job's `started_at` less its
    /// `created_at` (milliseconds, both stamped by the wall clock of this
    /// machine), one add at a time, each after the runner went back to
    /// sleep. A runner that only polled would take up to its poll.
    fn wake_latency(&self, queue: &Path, sizes: &Sizes, f: &mut Figures) -> Result<()> {
        let mut latencies = Vec::new();
        for _ in 0..sizes.wake_runs {
            let out = self.cmd(queue, &["--json", "add", "true"]).stdin(Stdio::null()).output()?;
            ensure!(out.status.success(), "add failed: {}", String::from_utf8_lossy(&out.stderr));
            let job: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            let id = job["id"].as_u64().context("add --json printed no id")?.to_string();
            let start = Instant::now();
            let done = loop {
                let out =
                    self.cmd(queue, &["--json", "show", &id]).stdin(Stdio::null()).output()?;
                let shown: serde_json::Value = serde_json::from_slice(&out.stdout)?;
                if shown["state"] == "done" {
                    break shown;
                }
                ensure!(start.elapsed() < Duration::from_secs(90), "job {id} never ran");
                pause(Duration::from_millis(10));
            };
            let (created, started) = (done["created_at"].as_f64(), done["started_at"].as_f64());
            latencies.push(started.zip(created).map(|(s, c)| s - c).context("no timestamps")?);
            // Asleep again (past the runner's last look after a change).
            pause(Duration::from_millis(1000));
        }
        latencies.sort_by(f64::total_cmp);
        f.insert("wake_latency_ms", median(&latencies));
        f.insert("wake_latency_max_ms", latencies.last().copied().unwrap_or(f64::NAN));
        Ok(())
    }

    /// `slothqueue wait` on a job nobody runs, measured as [`Cli::idle`]
    /// measures `run --follow`: what blocking a script on a job costs.
    async fn wait_idle(&self, backend: Backend, sizes: &Sizes, f: &mut Figures) -> Result<()> {
        let queue = backend.file(&self.dir, "wait");
        {
            let store = Setting { backend, fast: false }.open(&queue)?;
            fill(store.as_ref(), 1, &self.dir).await?;
        }
        let (idle, _waiting) = self.watch_idle(self.cmd(&queue, &["wait", "1"]), "wait", sizes)?;
        f.insert("wait_idle", idle.cpu_ms_per_10s);
        f.insert("wait_idle_stat_ms", idle.stat_ms_per_10s);
        f.insert("wait_idle_wakeups", idle.switches_per_10s);
        f.insert("wait_idle_bursts", idle.bursts);
        f.insert("wait_idle_polls", idle.window_s / WAIT_POLL.as_secs_f64());
        Ok(())
    }

    /// Starts `cmd` (which must not exit by itself), lets it settle for
    /// `Sizes::settle`, then watches it for the idle window; returns it still
    /// running (killed when dropped).
    fn watch_idle(&self, mut cmd: Command, name: &str, sizes: &Sizes) -> Result<(Idle, Reaped)> {
        let (err_path, err) = self.stderr_file(name)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .with_context(|| format!("cannot start {cmd:?}"))?;
        let mut child = Reaped(child);
        pause(sizes.settle);
        if let Some(status) = child.0.try_wait()? {
            let text = std::fs::read_to_string(&err_path).unwrap_or_default();
            bail!("{cmd:?} exited at once ({status}): {}", text.trim());
        }
        let pid = child.0.id();
        let cpu0 = procfs::stat_cpu_ms(pid)?;
        let ns0 = procfs::threads_cpu_ns(pid);
        let sw0 = procfs::threads_switches(pid);
        let start = Instant::now();
        let mut prev = sw0.clone();
        let mut slices = Vec::new();
        while start.elapsed() < sizes.idle_window {
            pause(Duration::from_millis(100));
            let now = procfs::threads_switches(pid);
            slices.push(now != prev);
            prev = now;
        }
        let window = start.elapsed();
        let cpu1 = procfs::stat_cpu_ms(pid)?;
        let ns1 = procfs::threads_cpu_ns(pid);
        let sw1 = procfs::threads_switches(pid);
        if let Some(status) = child.0.try_wait()? {
            bail!("{cmd:?} exited during the idle window ({status})");
        }
        let per_10s = 10.0 / window.as_secs_f64();
        let precise = procfs::growth(&ns0, &ns1) as f64 / 1e6;
        // Ticks see exited threads too; schedstat sees the live ones to the ns.
        let cpu = precise.max(cpu1 - cpu0);
        let bursts = slices
            .iter()
            .zip(std::iter::once(&false).chain(&slices))
            .filter(|(now, before)| **now && !**before)
            .count();
        let idle = Idle {
            cpu_ms_per_10s: cpu * per_10s,
            stat_ms_per_10s: (cpu1 - cpu0) * per_10s,
            switches_per_10s: procfs::growth(&sw0, &sw1) as f64 * per_10s,
            bursts: bursts as f64,
            window_s: window.as_secs_f64(),
        };
        Ok((idle, child))
    }

    /// `slothqueue run` draining `rss_jobs` `true` jobs: its peak RSS
    /// (`VmHWM`, polled every 5 ms until it exits), and the largest
    /// anonymous and file-backed (the binary's code, shared) parts seen.
    async fn rss(&self, backend: Backend, sizes: &Sizes, f: &mut Figures) -> Result<()> {
        let queue = backend.file(&self.dir, "rss");
        {
            let store = Setting { backend, fast: false }.open(&queue)?;
            fill(store.as_ref(), sizes.rss_jobs, &self.dir).await?;
        }
        let (err_path, err) = self.stderr_file("rss")?;
        let start = Instant::now();
        let child = self
            .cmd(&queue, &["run"])
            .args(RUN_FLAGS)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .context("cannot start slothqueue run")?;
        let mut child = Reaped(child);
        let pid = child.0.id();
        let (mut peak, mut anon, mut file) = (0u64, 0u64, 0u64);
        let status = loop {
            if let Some((hwm, a, f)) = procfs::rss_kib(pid) {
                peak = peak.max(hwm);
                anon = anon.max(a);
                file = file.max(f);
            }
            if let Some(status) = child.0.try_wait()? {
                break status;
            }
            pause(Duration::from_millis(5));
        };
        let secs = start.elapsed().as_secs_f64();
        if !status.success() {
            let text = std::fs::read_to_string(&err_path).unwrap_or_default();
            bail!("slothqueue run failed ({status}): {}", text.trim());
        }
        f.insert("rss", peak as f64 / 1024.0);
        f.insert("rss_anon", anon as f64 / 1024.0);
        f.insert("rss_file", file as f64 / 1024.0);
        f.insert("cli_drain_ms_per_job", secs / sizes.rss_jobs as f64 * 1e3);
        Ok(())
    }
}

/// What [`Cli::watch_idle`] saw.
struct Idle {
    cpu_ms_per_10s: f64,
    stat_ms_per_10s: f64,
    switches_per_10s: f64,
    bursts: f64,
    window_s: f64,
}

/// A child killed and reaped when dropped, so an error never leaves a
/// runner behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}
