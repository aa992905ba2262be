//! The figures measured in this process through the `Store` trait and the
//! `Runner`: raw_commit, push, cycle (interleaved, so the ratios compare
//! like with like on a noisy machine), push_many, claim_scaling,
//! claim_concurrency, drain, slots and bytes_per_job; the dependency
//! figures are in `deps.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use slothqueue_core::{
    ClaimRequest, Clock, ClockOnly, Completion, JobState, ListFilter, NewJob, Owner, Store,
    SystemClock, Timestamp,
};
use slothqueue_runner::{LoadGate, Mode, Runner, RunnerConfig, ShutdownSignal, log_dir_for};

use crate::pg;
use crate::raw::{PUSH_TABLES, RawCommit, RawPg, RawRedb, RawSqlite, rate_for};
use crate::setting::{Backend, QueueFile as _, Setting};
use crate::stats::{Figures, median};
use crate::{Args, Sizes};

fn now() -> Timestamp {
    SystemClock.now()
}

/// A `true` shell job recorded in `cwd`.
fn true_job(cwd: &Path) -> NewJob {
    NewJob::shell("true", cwd.to_string_lossy())
}

/// One job through its whole life: push, claim, complete.
async fn cycle(store: &dyn Store, owner: &Owner, cwd: &Path) -> Result<()> {
    store.push(true_job(cwd), now()).await?;
    claim_complete(store, owner).await
}

/// Claims the best due job and completes it.
async fn claim_complete(store: &dyn Store, owner: &Owner) -> Result<()> {
    claim_complete_timed(store, owner).await.map(|_| ())
}

/// [`claim_complete`], timed: milliseconds of the claim alone and of both.
async fn claim_complete_timed(store: &dyn Store, owner: &Owner) -> Result<(f64, f64)> {
    let start = Instant::now();
    let Some(claimed) =
        store.claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), now()).await?
    else {
        bail!("a claim found nothing due");
    };
    let claim = start.elapsed().as_secs_f64() * 1e3;
    let done = Completion { result: None, exit_code: Some(0) };
    store.complete(claimed.job.id, &claimed.fence, done, now()).await?;
    Ok((claim, start.elapsed().as_secs_f64() * 1e3))
}

/// Pushes `n` `true` jobs in calls of at most 100,000; the seconds spent in
/// `push_many` (building the batch excluded).
pub(crate) async fn fill(store: &dyn Store, n: usize, cwd: &Path) -> Result<f64> {
    let mut secs = 0.0;
    let mut left = n;
    while left > 0 {
        let chunk = left.min(100_000);
        let jobs: Vec<NewJob> = (0..chunk).map(|_| true_job(cwd)).collect();
        let start = Instant::now();
        let pushed = store.push_many(jobs, now()).await?;
        secs += start.elapsed().as_secs_f64();
        ensure!(pushed.len() == chunk, "push_many returned {} of {chunk}", pushed.len());
        left -= chunk;
    }
    Ok(secs)
}

/// On PostgreSQL, brings a queue just filled to the state autovacuum
/// leaves it in within a minute (`pg::analyze`); nothing on a file.
pub(crate) async fn settled(path: &Path) -> Result<()> {
    if pg::is_url(path) {
        pg::analyze(path).await?;
    }
    Ok(())
}

/// Every in-process figure for `setting`, using `dir` as scratch space.
pub async fn measure(setting: Setting, sizes: &Sizes, dir: &Path, args: &Args) -> Result<Figures> {
    let mut f = Figures::new();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    if args.runs("rounds") {
        step(setting, "raw_commit, push, cycle");
        rounds(setting, sizes, dir, &mut f).await?;
    }
    if args.runs("scaling") {
        step(setting, "push_many, claim_scaling");
        claim_scaling(setting, sizes, dir, &mut f).await?;
    }
    if args.runs("concurrency") {
        step(setting, "claim_concurrency");
        claim_concurrency(setting, sizes, dir, &mut f).await?;
    }
    if args.runs("graph") {
        step(setting, "chain, fan_out");
        f.extend(crate::deps::measure(setting, sizes, dir).await?);
    }
    if args.runs("drain") {
        step(setting, "drain");
        f.extend(in_child(setting, "--child-drain", &DRAIN_FIGURES, args.quick, dir)?);
    }
    if args.runs("slots") {
        step(setting, "slots (one slot, then two)");
        f.extend(in_child(setting, "--child-slots", &SLOTS_FIGURES, args.quick, dir)?);
    }
    Ok(f)
}

fn step(setting: Setting, what: &str) {
    eprintln!("bench: {setting}: {what}");
}

/// raw_commit, push and cycle, measured in alternating slices so that the
/// machine's mood changes each figure alike; then bytes_per_job from the
/// cycle queue (every job in it done).
async fn rounds(setting: Setting, sizes: &Sizes, dir: &Path, f: &mut Figures) -> Result<()> {
    let b = setting.backend;
    let mut raw1 = Raw::open(setting, &b.file(dir, "raw"), 1).await?;
    let mut raw_push = Raw::open(setting, &b.file(dir, "raw_push"), PUSH_TABLES).await?;
    let mut exclusive = match b {
        Backend::Redb => Some(RawRedb::open(&b.file(dir, "raw-exclusive"), false, 1)?),
        Backend::Sqlite | Backend::Postgres => None,
    };
    // PostgreSQL also: the one-statement commit (autocommit), one round
    // trip instead of BEGIN, INSERT, COMMIT.
    let autocommit = match b {
        Backend::Postgres => Some(RawPg::open(&b.file(dir, "raw-autocommit"), 1).await?),
        Backend::Sqlite | Backend::Redb => None,
    };
    let push_store = setting.open(&b.file(dir, "push"))?;
    let cycle_path = b.file(dir, "cycle");
    let cycle_store = setting.open(&cycle_path)?;
    let owner = Owner::named("bench");
    let (mut raws, mut pushes, mut cycles, mut excl) = (vec![], vec![], vec![], vec![]);
    let mut autocommits = vec![];
    let (mut raws_push, mut handoffs) = (vec![], vec![]);
    let (mut push_ratios, mut cycle_ratios) = (vec![], vec![]);
    let mut cycled = 0u64;
    for _ in 0..sizes.rounds {
        let r = raw1.commit_for(sizes.slice).await?;
        raws_push.push(raw_push.commit_for(sizes.slice).await?);
        if let Some(x) = exclusive.as_mut() {
            excl.push(x.commit_for(sizes.slice)?);
        }
        if let Some(x) = autocommit.as_ref() {
            autocommits.push(x.autocommit_for(sizes.slice).await?);
        }
        // What every store call pays to reach tokio's blocking pool and back.
        let (h, _) = rate_for(sizes.slice / 4, || async {
            tokio::task::spawn_blocking(|| ()).await?;
            Ok(())
        })
        .await?;
        handoffs.push(1e6 / h);
        let (p, _) = rate_for(sizes.slice, || async {
            push_store.push(true_job(dir), now()).await?;
            Ok(())
        })
        .await?;
        let (c, n) = rate_for(sizes.slice, || cycle(cycle_store.as_ref(), &owner, dir)).await?;
        cycled += n;
        raws.push(r);
        pushes.push(p);
        cycles.push(c);
        push_ratios.push(p / r);
        cycle_ratios.push(c / (r / 3.0));
    }
    f.insert("raw_commit", median(&raws));
    f.insert("raw_commit_push_pages", median(&raws_push));
    f.insert("handoff_us", median(&handoffs));
    if !excl.is_empty() {
        f.insert("raw_commit_exclusive", median(&excl));
    }
    if !autocommits.is_empty() {
        f.insert("raw_commit_autocommit", median(&autocommits));
    }
    f.insert("push", median(&pushes));
    f.insert("push_ratio", median(&push_ratios));
    f.insert("cycle", median(&cycles));
    f.insert("cycle_ratio", median(&cycle_ratios));
    drop((raw1, raw_push, exclusive, autocommit, push_store, cycle_store));

    // bytes_per_job: the cycle queue's growth over an empty queue's size.
    let empty_path = b.file(dir, "empty");
    drop(setting.open(&empty_path)?);
    let empty = setting.file_bytes(&empty_path).await?;
    let full = setting.file_bytes(&cycle_path).await?;
    f.insert("bytes_per_job", full.saturating_sub(empty) as f64 / cycled.max(1) as f64);
    f.insert("bytes_per_job_jobs", cycled as f64);
    for stem in ["raw", "raw_push", "raw-autocommit", "push", "cycle", "empty"] {
        if b == Backend::Postgres {
            remove_queue(&b.file(dir, stem)).await;
        }
    }
    Ok(())
}

/// The raw limit of a setting: the file engines' are synchronous, the
/// PostgreSQL client is async.
enum Raw {
    File(Box<dyn RawCommit>),
    Pg(RawPg),
}

impl Raw {
    async fn open(setting: Setting, path: &Path, tables: usize) -> Result<Raw> {
        Ok(match setting.backend {
            Backend::Sqlite => Raw::File(Box::new(RawSqlite::open(path, setting.fast, tables)?)),
            Backend::Redb => Raw::File(Box::new(RawRedb::open(path, true, tables)?)),
            Backend::Postgres => Raw::Pg(RawPg::open(path, tables).await?),
        })
    }

    async fn commit_for(&mut self, d: Duration) -> Result<f64> {
        match self {
            Raw::File(raw) => raw.commit_for(d),
            Raw::Pg(raw) => raw.commit_for(d).await,
        }
    }
}

/// push_many (the middle backlog, pushed in one call into an empty queue)
/// and claim_scaling: the median latency of claim+complete on queues of
/// each backlog, sampled in turn.
async fn claim_scaling(setting: Setting, sizes: &Sizes, dir: &Path, f: &mut Figures) -> Result<()> {
    let owner = Owner::named("bench");
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for (i, &n) in sizes.backlogs.iter().enumerate() {
        let store = setting.open(&setting.backend.file(dir, &format!("backlog-{n}")))?;
        let secs = fill(store.as_ref(), n, dir).await?;
        if i == 1 {
            // One call: the batch fits in a single push_many.
            f.insert("push_many", n as f64 / secs);
            f.insert("push_many_jobs", n as f64);
            // The first claim on the queue as push_many left it (on
            // PostgreSQL: before any ANALYZE; see `settled`).
            let (_, fresh) = claim_complete_timed(store.as_ref(), &owner).await?;
            f.insert("claim_fresh_ms", fresh);
        }
        stores.push(store);
    }
    for &n in &sizes.backlogs {
        settled(&setting.backend.file(dir, &format!("backlog-{n}"))).await?;
    }
    for store in &stores {
        for _ in 0..10 {
            claim_complete(store.as_ref(), &owner).await?;
        }
    }
    let mut latencies = vec![Vec::new(); stores.len()];
    let mut claims = vec![Vec::new(); stores.len()];
    for _ in 0..sizes.claim_samples {
        for (i, store) in stores.iter().enumerate() {
            let (claim, both) = claim_complete_timed(store.as_ref(), &owner).await?;
            claims[i].push(claim);
            latencies[i].push(both);
        }
    }
    let m: Vec<f64> = latencies.iter().map(|l| median(l)).collect();
    f.insert("claim_scaling_small_ms", m[0]);
    f.insert("claim_scaling_mid_ms", m[1]);
    f.insert("claim_scaling", m[2]);
    f.insert("claim_scaling_ratio", m[2] / m[0]);
    f.insert("claim_only_small_ms", median(&claims[0]));
    f.insert("claim_only_large_ms", median(&claims[2]));
    drop(stores);
    for &n in &sizes.backlogs {
        remove_queue(&setting.backend.file(dir, &format!("backlog-{n}"))).await;
    }
    Ok(())
}

/// How many claimers `claim_concurrency` runs at once, in turn.
pub const CLAIMERS: [usize; 3] = [1, 4, 16];

/// claim_concurrency: claim+complete jobs/s in total with 1, 4 and 16
/// claimers at once, each a task looping over its own store handle (on
/// PostgreSQL its own pool of connections, as separate runners would
/// have), on one queue kept at `concurrency_backlog` pending jobs (topped
/// up between slices, untimed). Slices of each count alternate, the order
/// reversed each round (1, 4, 16, 16, 4, 1 …), medians.
async fn claim_concurrency(
    setting: Setting,
    sizes: &Sizes,
    dir: &Path,
    f: &mut Figures,
) -> Result<()> {
    let path = setting.backend.file(dir, "concurrency");
    let max = CLAIMERS[CLAIMERS.len() - 1];
    let stores: Vec<Arc<dyn Store>> =
        (0..max).map(|_| setting.open(&path)).collect::<Result<_>>()?;
    let owners: Vec<Owner> = (0..max).map(|i| Owner::named(format!("bench-{i}"))).collect();
    fill(stores[0].as_ref(), sizes.concurrency_backlog + max, dir).await?;
    settled(&path).await?;
    // Untimed: every handle's first call (a PostgreSQL store connects its
    // pool's connections on demand).
    for (store, owner) in stores.iter().zip(&owners) {
        claim_complete(store.as_ref(), owner).await?;
    }
    let mut rates = vec![Vec::new(); CLAIMERS.len()];
    for round in 0..sizes.rounds {
        let mut order: Vec<usize> = (0..CLAIMERS.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let due = stores[0].stats(now()).await?.due_now as usize;
            if due < sizes.concurrency_backlog {
                fill(stores[0].as_ref(), sizes.concurrency_backlog - due, dir).await?;
            }
            let n = CLAIMERS[i];
            rates[i].push(claim_race(&stores[..n], &owners[..n], sizes.slice).await?);
        }
    }
    let m: Vec<f64> = rates.iter().map(|r| median(r)).collect();
    f.insert("claim_concurrency_1", m[0]);
    f.insert("claim_concurrency_4", m[1]);
    f.insert("claim_concurrency_16", m[2]);
    f.insert("claim_concurrency_ratio", m[2] / m[0]);
    f.insert("claim_concurrency_backlog", sizes.concurrency_backlog as f64);
    drop(stores);
    remove_queue(&path).await;
    Ok(())
}

/// Each store's claimer loops claim+complete until `d` has passed, all at
/// once; jobs per second in total (the last one's end is the end).
async fn claim_race(stores: &[Arc<dyn Store>], owners: &[Owner], d: Duration) -> Result<f64> {
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (store, owner) in stores.iter().zip(owners) {
        let (store, owner) = (store.clone(), owner.clone());
        tasks.spawn(async move {
            let mut n = 0u64;
            while start.elapsed() < d {
                claim_complete(store.as_ref(), &owner).await?;
                n += 1;
            }
            Ok::<u64, anyhow::Error>(n)
        });
    }
    let mut total = 0u64;
    while let Some(done) = tasks.join_next().await {
        total += done.context("a claimer panicked")??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// Deletes a queue: the file and whatever SQLite kept beside it, or the
/// schema on the server.
pub(crate) async fn remove_queue(path: &Path) {
    if pg::is_url(path) {
        if let Err(e) = pg::drop_queue(path).await {
            eprintln!("bench: cannot drop {}: {e:#}", path.display());
        }
        return;
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

/// Where the runner of the queue `path` (in the scratch folder `dir`)
/// writes its jobs' logs: beside the file, or for a queue on the server in
/// the scratch folder.
fn logs_for(path: &Path, dir: &Path) -> PathBuf {
    if pg::is_url(path) {
        let schema = pg::schema_of(path).unwrap_or_else(|_| "queue".to_owned());
        dir.join(format!("{schema}.logs"))
    } else {
        log_dir_for(path)
    }
}

/// Spawns `sh -c true` `n` times, one after another; seconds.
pub fn plain_loop(n: usize) -> Result<f64> {
    let start = Instant::now();
    for _ in 0..n {
        let status = Command::new("sh")
            .args(["-c", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("cannot spawn sh")?;
        ensure!(status.success(), "sh -c true failed: {status}");
    }
    Ok(start.elapsed().as_secs_f64())
}

/// The figures [`drain`] gives.
const DRAIN_FIGURES: [&str; 4] = ["drain", "drain_ms_per_job", "plain_ms_per_job", "drain_ratio"];

/// Runs [`drain`] (`--child-drain`) or [`slots`] (`--child-slots`) in a
/// fresh copy of this program and reads back its `figures`. Not in this
/// process: the runner forks each job, and a fork copies the page tables of
/// the whole heap, which the million-job backlogs leave large here (a drain
/// measured after them took 30-40 ms a job instead of 5). A fresh process
/// is what `slothqueue run` is.
fn in_child(
    setting: Setting,
    flag: &str,
    figures: &[&'static str],
    quick: bool,
    dir: &Path,
) -> Result<Figures> {
    let exe = std::env::current_exe().context("cannot find this program to re-run it")?;
    let mut cmd = Command::new(exe);
    // Its queues on a server are this run's, dropped with them.
    cmd.env(pg::RUN_ENV, pg::run_id());
    cmd.args([flag, "--backend", setting.backend.as_str(), "--durability"])
        .arg(if setting.fast { "fast" } else { "default" })
        .arg("--out")
        .arg(dir);
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd.stdin(Stdio::null()).output().context("cannot start the drain")?;
    if !out.status.success() {
        bail!(
            "the drain ({flag}) failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("the drain printed no JSON")?;
    let mut f = Figures::new();
    for &key in figures {
        let v = json[key].as_f64().with_context(|| format!("the drain gave no `{key}`"))?;
        f.insert(key, v);
    }
    Ok(f)
}

/// The runner draining `true` jobs against a plain spawn loop of the same
/// count (half before, half after, to share the machine's drift).
pub async fn drain(setting: Setting, sizes: &Sizes, dir: &Path) -> Result<Figures> {
    let mut f = Figures::new();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let n = sizes.drain_jobs;
    let path = setting.backend.file(dir, "drain");
    let store = setting.open(&path)?;
    fill(store.as_ref(), n, dir).await?;
    settled(&path).await?;
    let before = plain_loop(n / 2)?;
    let mut config = RunnerConfig::new(logs_for(&path, dir));
    config.mode = Mode::Drain;
    // As the CLI does: a load gate, read before each job (never closed here).
    config.gates = vec![Box::new(LoadGate::system(Some(1e9)))];
    let runner = Runner::new(store.clone(), config);
    let start = Instant::now();
    let summary = runner.run(|_event| {}, ShutdownSignal::never()).await?;
    let drained = start.elapsed().as_secs_f64();
    let after = plain_loop(n - n / 2)?;
    ensure!(
        summary.done as usize == n,
        "the runner finished {} of {n} jobs ({summary:?})",
        summary.done
    );
    let plain = before + after;
    f.insert(DRAIN_FIGURES[0], (drained - plain) / n as f64 * 1e3);
    f.insert(DRAIN_FIGURES[1], drained / n as f64 * 1e3);
    f.insert(DRAIN_FIGURES[2], plain / n as f64 * 1e3);
    f.insert(DRAIN_FIGURES[3], drained / plain);
    Ok(f)
}

/// The figures [`slots`] gives.
const SLOTS_FIGURES: [&str; 6] = [
    "slots_1_jobs_s",
    "slots_2_jobs_s",
    "slots_ratio",
    "slots_1_peak",
    "slots_2_peak",
    "slots_jobs",
];

/// A drain of `slots_jobs` `true` jobs by a runner with one slot against
/// one of as many jobs with two slots (what `run --slots 2` runs), each
/// set up as the drain figure's runner is, each on a queue of its own.
/// After an untimed warm-up drain of a few jobs with each (the process's
/// first forks and blocking-pool threads must not fall on one side), both
/// drain half their jobs, then the other half, in the order one slot, two,
/// two, one: the machine's drift falls on both alike. Also the most jobs
/// each had running at once, from the jobs' own start and finish times:
/// 2 says the two slots really overlapped, whatever the rate says.
pub async fn slots(setting: Setting, sizes: &Sizes, dir: &Path) -> Result<Figures> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let n = sizes.slots_jobs;
    let mut queues = Vec::new();
    for name in ["slots-1", "slots-2", "slots-warm-up"] {
        let path = setting.backend.file(dir, name);
        queues.push((setting.open(&path)?, path));
    }
    let warm_up = (n / 10).clamp(1, 20);
    let order =
        [(2, 1, 0), (2, 2, 0), (0, 1, n / 2), (1, 2, n / 2), (1, 2, n - n / 2), (0, 1, n - n / 2)];
    let mut secs = [0.0f64; 2];
    for (queue, slots, part) in order {
        let part = if queue == 2 { warm_up } else { part };
        let (store, path) = &queues[queue];
        fill(store.as_ref(), part, dir).await?;
        settled(path).await?;
        let mut config = RunnerConfig::new(logs_for(path, dir));
        config.mode = Mode::Drain;
        config.slots = slots;
        config.gates = vec![Box::new(LoadGate::system(Some(1e9)))];
        let runner = Runner::new(store.clone(), config);
        let start = Instant::now();
        let summary = runner.run(|_event| {}, ShutdownSignal::never()).await?;
        if let Some(s) = secs.get_mut(queue) {
            *s += start.elapsed().as_secs_f64();
        }
        ensure!(
            summary.done as usize == part,
            "the runner with {slots} slots finished {} of {part} jobs ({summary:?})",
            summary.done
        );
    }
    let mut f = Figures::new();
    f.insert(SLOTS_FIGURES[0], n as f64 / secs[0]);
    f.insert(SLOTS_FIGURES[1], n as f64 / secs[1]);
    f.insert(SLOTS_FIGURES[2], secs[0] / secs[1]);
    f.insert(SLOTS_FIGURES[3], peak_running(queues[0].0.as_ref()).await? as f64);
    f.insert(SLOTS_FIGURES[4], peak_running(queues[1].0.as_ref()).await? as f64);
    f.insert(SLOTS_FIGURES[5], n as f64);
    Ok(f)
}

/// The most done jobs of `store` that were running at one instant, from
/// their `started_at` and `finished_at` (milliseconds; a job that ends in
/// the millisecond the next one starts did not overlap it).
async fn peak_running(store: &dyn Store) -> Result<usize> {
    let filter = ListFilter { state: Some(JobState::Done), ..ListFilter::default() };
    let jobs = store.list(&filter).await?;
    Ok(peak_of(jobs.iter().filter_map(|j| Some((j.started_at?, j.finished_at?)))))
}

/// The most of these `[start, end)` intervals that hold one instant.
fn peak_of(intervals: impl Iterator<Item = (Timestamp, Timestamp)>) -> usize {
    // (time, +1 start / -1 end): ends sort before starts at the same time.
    let mut edges: Vec<(Timestamp, i8)> = Vec::new();
    for (start, end) in intervals {
        edges.push((start, 1));
        edges.push((end.max(start), -1));
    }
    edges.sort();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, step) in edges {
        now += i64::from(step);
        peak = peak.max(now);
    }
    usize::try_from(peak).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_count_only_real_overlaps() {
        let t = Timestamp::from_millis;
        assert_eq!(peak_of(std::iter::empty()), 0);
        let one_after_another = [(t(0), t(5)), (t(5), t(9)), (t(9), t(9)), (t(9), t(12))];
        assert_eq!(peak_of(one_after_another.into_iter()), 1);
        let two = [(t(0), t(5)), (t(3), t(8)), (t(8), t(10)), (t(9), t(11))];
        assert_eq!(peak_of(two.into_iter()), 2);
        let three = [(t(0), t(10)), (t(1), t(2)), (t(1), t(3))];
        assert_eq!(peak_of(three.into_iter()), 3);
    }
}
