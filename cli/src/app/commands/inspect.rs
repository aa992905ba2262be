//! The commands that only look: `status`, `list`, `show`, `logs`. None of
//! them creates a queue file; on a missing one they say so.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use slothqueue::core::serving;
use slothqueue::core::{LaneCheck, LaneVerdict, Lanes, Liveness, LivenessJudge, QueuesReport};
use slothqueue::runner::ProcJudge;
use slothqueue::{
    Job, JobId, JobState, ListFilter, ListOrder, Owner, RunnerRecord, Stats, Store, StoreError,
    Timestamp,
};

use super::{Ctx, Secrets, job_json_with, print_json};
use crate::app::Outcome;
use crate::app::config::log_dir;
use crate::app::exit::{Code, NotFound};
use crate::app::explain::{self, SeenRunner, Situation};
use crate::app::render;

/// This host's name, as runners record it in their owner.
pub fn this_host() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// Judges a runner by its owner.
pub fn judge_owner(judge: &ProcJudge, owner: &Owner) -> Liveness {
    judge.judge_owner(owner)
}

/// Counts per state, due now, next due, and the live runners.
pub async fn status(ctx: &Ctx) -> Outcome {
    let now = ctx.now();
    let mut out = io::stdout().lock();
    let Some(store) = ctx.look_existing()? else {
        if ctx.json {
            let mut v = serde_json::to_value(Stats::default())?;
            v["exists"] = false.into();
            v["lanes"] = serde_json::to_value(Lanes::default())?;
            v["schedules"] = 0.into();
            v["next_tick"] = serde_json::Value::Null;
            v["runners"] = serde_json::json!([]);
            v["unserved"] = serde_json::json!([]);
            print_json(&mut out, &v)?;
        } else {
            writeln!(
                out,
                "no queue at {} yet (add a job to create it)",
                slothqueue::shown(&ctx.db)
            )?;
            write!(out, "{}", render::stats(&Stats::default(), now))?;
            writeln!(out, "runners: none")?;
        }
        return Ok(Code::Success);
    };
    let stats = store.stats(now).await.context("cannot read the queue's counts")?;
    let lanes = store.lanes().await.context("cannot read the lanes")?;
    let schedules = store.schedules().await.context("cannot read the schedules")?;
    let next_tick =
        schedules.iter().filter_map(|s| s.next_fire().map(|t| (t, s))).min_by_key(|(t, _)| *t);
    let records = store.runners().await.context("cannot read the runners")?;
    let judge = ProcJudge::new();
    let host = this_host();
    let seen: Vec<SeenRunner<'_>> = records
        .iter()
        .map(|r| SeenRunner { record: r, liveness: judge_owner(&judge, &r.owner) })
        .collect();
    let live: Vec<&SeenRunner<'_>> = seen.iter().filter(|r| r.is_live(now)).collect();
    // Pending jobs the live runners cannot run (a kind none has a handler
    // for); with no runner alive, `runners: none alive` says it for all.
    let unserved = if live.is_empty() {
        Vec::new()
    } else {
        let filter = ListFilter {
            state: Some(JobState::Pending),
            order: ListOrder::DueFirst,
            limit: Some(serving::UNSERVED_SCAN),
            ..ListFilter::default()
        };
        let pending = store.list(&filter).await.context("cannot list pending jobs")?;
        let records: Vec<&RunnerRecord> = live.iter().map(|r| r.record).collect();
        serving::unserved(&pending, &records)
    };
    if ctx.json {
        let mut v = serde_json::to_value(&stats)?;
        v["exists"] = true.into();
        v["lanes"] = serde_json::to_value(&lanes)?;
        v["schedules"] = schedules.len().into();
        v["next_tick"] = next_tick
            .map_or(serde_json::Value::Null, |(t, s)| serde_json::json!({ "key": s.key, "at": t }));
        v["runners"] = serde_json::to_value(live.iter().map(|r| r.record).collect::<Vec<_>>())?;
        v["unserved"] = serde_json::to_value(&unserved)?;
        print_json(&mut out, &v)?;
        return Ok(Code::Success);
    }
    let backend = slothqueue::detect(&ctx.db, ctx.backend).map_or("?", |b| b.as_str());
    writeln!(out, "queue: {} ({backend})", slothqueue::shown(&ctx.db))?;
    write!(out, "{}", render::stats(&stats, now))?;
    if !lanes.is_default() {
        // Counted only when some lane has a setting: a file without any
        // pays nothing for lanes in `status`.
        let counts = store.queue_counts(now).await.context("cannot count the queues' jobs")?;
        write!(out, "{}", render::lanes_lines(&QueuesReport::new(&lanes, counts), now))?;
    }
    if let Some(line) = render::schedules_status(&schedules, next_tick.map(|(_, s)| s), now) {
        writeln!(out, "{line}")?;
    }
    if live.is_empty() {
        writeln!(out, "runners: none alive")?;
    } else {
        writeln!(out, "runners: {} alive", live.len())?;
        for r in live {
            writeln!(out, "  {}: {}", r.name(&host), explain::activity(r.record, now))?;
        }
    }
    for u in &unserved {
        let jobs = if u.pending == 1 { "job" } else { "jobs" };
        writeln!(out, "{}: {} pending {jobs} in queue {}", u.why, u.pending, u.queue)?;
    }
    Ok(Code::Success)
}

/// One row a job; with `--json`, secret-looking values masked unless
/// `show_secrets`.
pub async fn list(ctx: &Ctx, filter: ListFilter, show_secrets: bool) -> Outcome {
    let mut out = io::stdout().lock();
    let Some(store) = ctx.look_existing()? else {
        if ctx.json {
            writeln!(out, "[]")?;
        } else {
            writeln!(out, "no queue at {} yet: no jobs", slothqueue::shown(&ctx.db))?;
        }
        return Ok(Code::Success);
    };
    let jobs = store.list(&filter).await.context("cannot list jobs")?;
    if ctx.json {
        let secrets = if show_secrets { Secrets::Shown } else { Secrets::Masked };
        let all: Vec<serde_json::Value> =
            jobs.iter().map(|j| job_json_with(j, None, secrets)).collect::<anyhow::Result<_>>()?;
        print_json(&mut out, &serde_json::Value::Array(all))?;
        return Ok(Code::Success);
    }
    if jobs.is_empty() {
        match filter.state {
            Some(s) => writeln!(out, "no {s} jobs")?,
            None => writeln!(out, "no jobs")?,
        }
        return Ok(Code::Success);
    }
    let now = ctx.now();
    write!(out, "{}", render::table(&jobs, now, terminal_width(), ctx.color))?;
    if let Some(limit) = filter.limit.filter(|l| jobs.len() >= *l) {
        writeln!(out, "(first {limit} shown; --limit N for more)")?;
    }
    Ok(Code::Success)
}

/// The terminal's width when stdout is one, else `$COLUMNS`, else no limit.
pub(super) fn terminal_width() -> Option<usize> {
    let stdout = io::stdout();
    if let Ok(size) = rustix::termios::tcgetwinsize(&stdout) {
        if size.ws_col > 0 {
            return Some(usize::from(size.ws_col));
        }
    }
    std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).filter(|c: &usize| *c > 0)
}

/// Dependents `show` names before it only counts the rest.
const DEPENDENTS_LISTED: usize = 10;
/// Parents `show` names before it only counts the rest.
const PARENTS_LISTED: usize = 20;

/// The job, why it is not running, and its story; secret-looking values
/// masked unless `show_secrets`.
pub async fn show(ctx: &Ctx, id: JobId, show_secrets: bool) -> Outcome {
    let store = ctx.open_read_only()?;
    let job = store.get(id).await?;
    let events = store.events(id).await?;
    let dependents = store.dependents(id).await.context("cannot read the job's dependents")?;
    let mut out = io::stdout().lock();
    if ctx.json {
        let secrets = if show_secrets { Secrets::Shown } else { Secrets::Masked };
        let mut v = job_json_with(&job, Some(&events), secrets)?;
        v["dependents"] = serde_json::to_value(&dependents)?;
        if let Some((key, slot)) = tick_of(&job) {
            v["schedule"] = serde_json::json!({ "key": key, "slot": slot });
        }
        print_json(&mut out, &v)?;
        return Ok(Code::Success);
    }
    let now = ctx.now();
    write!(out, "{}", render::job_details(&job, now, ctx.color, show_secrets))?;
    if let Some((key, slot)) = tick_of(&job) {
        let schedules = store.schedules().await.context("cannot read the schedules")?;
        let stored = schedules.iter().find(|s| s.key == key);
        writeln!(out, "schedule:     {}", render::tick_slot(key, slot, stored))?;
    }
    let parents = jobs_by_id(store.as_ref(), &job.after).await?;
    if !job.after.is_empty() {
        writeln!(
            out,
            "after:        {}",
            render::job_list(&parents, job.after.len(), PARENTS_LISTED)
        )?;
    }
    if !dependents.is_empty() {
        let listed = &dependents[..dependents.len().min(DEPENDENTS_LISTED)];
        let jobs = jobs_by_id(store.as_ref(), listed).await?;
        writeln!(out, "dependents:   {}", render::job_list(&jobs, dependents.len(), listed.len()))?;
    }
    let mut records = Vec::new();
    if !job.state.is_terminal() {
        records = store.runners().await.context("cannot read the runners")?;
    }
    let judge = ProcJudge::new();
    let seen: Vec<SeenRunner<'_>> = records
        .iter()
        .map(|r| SeenRunner { record: r, liveness: judge_owner(&judge, &r.owner) })
        .collect();
    let ahead =
        if job.is_due(now) { jobs_ahead(store.as_ref(), &job, &records, now).await? } else { 0 };
    let lease_owner = job.lease.as_ref().map_or(Liveness::Unknown, |l| judge.judge(l));
    let lanes = if job.state == JobState::Pending {
        store.lanes().await.context("cannot read the lanes")?
    } else {
        Lanes::default()
    };
    let lane = lane_verdict(store.as_ref(), &lanes, &job.queue).await?;
    let host = this_host();
    let situation = Situation {
        job: &job,
        now,
        ahead,
        runners: &seen,
        lease_owner,
        this_host: &host,
        parents: &parents,
        lanes: &lanes,
        lane,
    };
    if let Some(line) = explain::why(&situation) {
        let label = if job.state == JobState::Running { "now" } else { "why" };
        writeln!(out, "{label}:          {line}")?;
    }
    if let Some(told) = contained_by(&log_dir(&ctx.files), id) {
        if let Some(mechanism) = &told.mechanism {
            writeln!(out, "contained:    {mechanism} (attempt {})", told.attempt)?;
        }
        if let Some(limits) = &told.limits {
            writeln!(out, "in force:     {limits} (attempt {})", told.attempt)?;
        }
    }
    writeln!(out)?;
    for e in &events {
        writeln!(out, "{}", render::event_line(e, now))?;
    }
    Ok(Code::Success)
}

/// The schedule and slot of a tick's job, from its idempotency key
/// (`nightly@2026-12-02T03:00:00Z`, `core::schedule::tick_key`).
fn tick_of(job: &Job) -> Option<(&str, Timestamp)> {
    job.idempotency_key.as_deref().and_then(slothqueue::core::schedule::parse_tick_key)
}

/// What `queue`'s lane says of a new start now: open when no lane has a
/// setting (nothing more is read), else counted from its running jobs as a
/// claim counts them.
async fn lane_verdict(
    store: &dyn Store,
    lanes: &Lanes,
    queue: &str,
) -> anyhow::Result<LaneVerdict> {
    if lanes.is_default() {
        return Ok(LaneVerdict::Open);
    }
    let running = store
        .list(&ListFilter {
            state: Some(JobState::Running),
            queue: Some(queue.to_owned()),
            limit: Some(10_000),
            ..ListFilter::default()
        })
        .await
        .context("cannot list running jobs")?;
    Ok(LaneCheck::new(lanes.clone(), &running).verdict(queue))
}

/// The jobs with these ids, in their order, leaving out those that are
/// gone (a parent purged after it finished holds nobody up).
pub async fn jobs_by_id(store: &dyn Store, ids: &[JobId]) -> anyhow::Result<Vec<Job>> {
    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids {
        match store.get(*id).await {
            Ok(j) => jobs.push(j),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot read job #{id}"))),
        }
    }
    Ok(jobs)
}

/// What the log header of the job's latest attempt says of it
/// (`--- job #4 attempt 2/3 started …, contained by cgroup, limits: nice
/// 10, ionice best-effort:7: … ---`).
struct AttemptTold {
    /// The attempt, as the header numbers it.
    attempt: String,
    /// What held its processes: `cgroup`, `subreaper+proc`, `group only`.
    mechanism: Option<String>,
    /// The limits in force (`nice 10, ionice best-effort:7, memory-max 50
    /// MiB not enforced (no delegated cgroup)`); the runner writes them
    /// without `": "`, so the first one after them starts what ran.
    limits: Option<String>,
}

/// What the log header of the job's latest attempt says of its containment
/// and limits. `None` without a log or such a header; a part an older
/// runner did not write is `None`.
fn contained_by(logs: &Path, id: JobId) -> Option<AttemptTold> {
    let bytes = std::fs::read(slothqueue::runner::log_path(logs, id)).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let prefix = format!("--- job #{id} attempt ");
    let header = text.lines().rev().find(|l| l.starts_with(&prefix))?;
    let attempt = header[prefix.len()..].split('/').next()?.to_owned();
    Some(AttemptTold { attempt, ..told_in(header) })
}

/// The mechanism and limits of a header (the attempt left empty).
fn told_in(header: &str) -> AttemptTold {
    // Each part ends where the next begins or where `: what` does, so a
    // command holding `, limits: ` cannot be taken for one.
    let upto = |rest: &str| {
        let what = rest.find(": ").unwrap_or(rest.len());
        match rest.find(", limits: ") {
            Some(l) if l < what => l,
            _ => what,
        }
    };
    let mut told = AttemptTold { attempt: String::new(), mechanism: None, limits: None };
    let mut rest = header;
    if let Some((_, after)) = header.split_once(", contained by ") {
        let end = upto(after);
        told.mechanism = Some(after[..end].to_owned());
        rest = &after[end..];
    }
    let what = rest.find(": ").unwrap_or(rest.len());
    if let Some(l) = rest.find(", limits: ").filter(|l| *l < what) {
        let after = &rest[l + ", limits: ".len()..];
        told.limits = Some(after[..after.find(": ").unwrap_or(after.len())].to_owned());
    }
    told
}

/// How many due pending jobs a runner that could take `job` takes first.
async fn jobs_ahead(
    store: &dyn Store,
    job: &Job,
    runners: &[RunnerRecord],
    now: Timestamp,
) -> anyhow::Result<usize> {
    // A runner serving this job's queue may serve others too; count jobs
    // in every queue such a runner takes (all queues if any serves all, or
    // if none is recorded).
    let serving: Vec<&RunnerRecord> =
        runners.iter().filter(|r| r.serves_queue(&job.queue) && r.runs_kind(&job.kind)).collect();
    let all_queues = serving.is_empty() || serving.iter().any(|r| r.queues.is_empty());
    let filter = ListFilter {
        state: Some(JobState::Pending),
        order: ListOrder::DueFirst,
        limit: Some(10_000),
        ..ListFilter::default()
    };
    let mine = job.claim_order();
    let ahead = store
        .list(&filter)
        .await
        .context("cannot list pending jobs")?
        .into_iter()
        .filter(|j| j.id != job.id && j.is_due(now) && j.claim_order() < mine)
        .filter(|j| all_queues || serving.iter().any(|r| r.queues.contains(&j.queue)))
        // Only jobs a runner that could take this one would take instead.
        .filter(|j| serving.is_empty() || serving.iter().any(|r| r.runs_kind(&j.kind)))
        .count();
    Ok(ahead)
}

/// The job's captured output; with `follow`, new output as it comes until
/// the job finishes.
pub async fn logs(ctx: &Ctx, id: JobId, follow: bool) -> Outcome {
    let store = ctx.open_read_only()?;
    let job = store.get(id).await?;
    let path = slothqueue::runner::log_path(&log_dir(&ctx.files), id);
    let mut out = io::stdout().lock();
    if !follow {
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let why = if job.attempts == 0 { "it has not run yet" } else { "its log is gone" };
                return Err(NotFound(format!(
                    "no output for job #{id}: {why} (looked for {})",
                    path.display()
                ))
                .into());
            }
            Err(e) => {
                return Err(
                    anyhow::Error::new(e).context(format!("cannot read {}", path.display()))
                );
            }
        };
        if ctx.json {
            // `{"id": 3, "log": "…"}`: the log as text (invalid UTF-8 replaced).
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            let log = String::from_utf8_lossy(&bytes);
            print_json(&mut out, &serde_json::json!({ "id": id, "log": log }))?;
        } else {
            io::copy(&mut file, &mut out)?;
        }
        out.flush()?;
        return Ok(Code::Success);
    }
    drop(out);
    follow_log(store.as_ref(), id, &path, ctx.json).await?;
    Ok(Code::Success)
}

/// Copies what is appended to `path` until job `id` is finished; with
/// `json`, each piece read is one line `{"id": …, "log": "…"}`.
async fn follow_log(store: &dyn Store, id: JobId, path: &Path, json: bool) -> anyhow::Result<()> {
    let mut offset = 0u64;
    loop {
        // Read the state before the file, so the output of a job that ends
        // between the two is still copied before we stop.
        let finished = store.get(id).await?.state.is_terminal();
        offset = copy_from(path, offset, json.then_some(id))?;
        if finished {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Copies `path` from `offset` to stdout; returns the new offset. A
/// missing file is not an error (the job has not started yet).
fn copy_from(path: &Path, offset: u64, json: Option<JobId>) -> anyhow::Result<u64> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(offset),
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("cannot read {}", path.display())));
        }
    };
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf)?;
    let mut out = io::stdout().lock();
    match json {
        Some(id) if !buf.is_empty() => {
            let log = String::from_utf8_lossy(&buf);
            print_json(&mut out, &serde_json::json!({ "id": id, "log": log }))?;
        }
        Some(_) => {}
        None => out.write_all(&buf)?,
    }
    out.flush()?;
    Ok(offset + buf.len() as u64)
}

/// The log file of a job, for other commands.
pub fn log_file(db: &Path, id: JobId) -> PathBuf {
    slothqueue::runner::log_path(&log_dir(db), id)
}

#[cfg(test)]
mod told_tests {
    use super::told_in;

    #[test]
    fn the_header_tells_the_mechanism_and_the_limits_in_force() {
        let h = "--- job #4 attempt 2/3 started 2026-01-02 10:00:00, contained by cgroup, \
                 limits: nice 10, ionice best-effort:7, memory-max 50 MiB not enforced (no \
                 delegated cgroup): sh -c echo a: b, limits: x ---";
        let t = told_in(h);
        assert_eq!(t.mechanism.as_deref(), Some("cgroup"));
        assert_eq!(
            t.limits.as_deref(),
            Some(
                "nice 10, ionice best-effort:7, memory-max 50 MiB not enforced (no delegated \
                 cgroup)"
            )
        );
        let old = "--- job #4 attempt 1/3 started 2026-01-02 10:00:00, contained by group only: \
                   sh -c echo ', limits: no' ---";
        let t = told_in(old);
        assert_eq!((t.mechanism.as_deref(), t.limits), (Some("group only"), None));
        let t = told_in("--- job #4 attempt 1/3 started 2026-01-02 10:00:00: sh -c true ---");
        assert_eq!((t.mechanism, t.limits), (None, None));
    }
}
