//! The commands that only look: `status`, `list`, `show`, `logs`. None of
//! them creates a queue file; on a missing one they say so.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use slothqueue::core::PendingShown;
use slothqueue::runner::ProcJudge;
use slothqueue::{Job, JobId, ListFilter, Owner, RunnerRecord, Stats, Store};
use slothqueue_view::{DEPENDENTS_LISTED, Look, StatusView, ViewError, words};

use super::{Ctx, Secrets, job_json_with, print_json};
use crate::app::Outcome;
use crate::app::config::log_dir;
use crate::app::exit::{self, Code, NotFound};
use crate::app::render;

/// This host's name, as runners record it in their owner.
pub fn this_host() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// A store's refusal met while a look was read, as the CLI reports it:
/// the read named (`cannot read the runners: …`), the store's error kept
/// in the chain for the exit code.
fn look_failed(e: ViewError) -> anyhow::Error {
    match e {
        ViewError::Store(e) => anyhow::Error::new(e),
        ViewError::Read { what, source } => anyhow::Error::new(source).context(what),
    }
}

/// Reads a look at `store` with this process's judge of runners.
async fn looked<T, F>(ctx: &Ctx, store: &dyn Store, read: F) -> anyhow::Result<T>
where
    F: AsyncFnOnce(&Look<'_>) -> Result<T, ViewError>,
{
    let judge = ProcJudge::new();
    let judge = move |owner: &Owner| judge.judge_owner(owner);
    let host = this_host();
    let look = Look { store, now: ctx.now(), judge: &judge, this_host: &host };
    read(&look).await.map_err(look_failed)
}

/// Counts per state, due now, next due, and the live runners.
pub async fn status(ctx: &Ctx) -> Outcome {
    let now = ctx.now();
    let mut out = io::stdout().lock();
    let Some(store) = ctx.look_existing()? else {
        if ctx.json {
            print_json(&mut out, &status_json(&StatusView::default())?)?;
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
    let view =
        looked(ctx, store.as_ref(), async |look| slothqueue_view::status(look).await).await?;
    if ctx.json {
        print_json(&mut out, &status_json(&view)?)?;
        return Ok(Code::Success);
    }
    let backend = slothqueue::detect(&ctx.db, ctx.backend).map_or("?", |b| b.as_str());
    writeln!(out, "queue: {} ({backend})", slothqueue::shown(&ctx.db))?;
    write!(out, "{}", render::stats(&view.stats, now))?;
    if let Some(report) = &view.queues {
        write!(out, "{}", render::lanes_lines(report, now))?;
    }
    if let Some(line) = render::schedules_status(&view.schedules, view.next_schedule(), now) {
        writeln!(out, "{line}")?;
    }
    if view.live.is_empty() {
        writeln!(out, "runners: none alive")?;
    } else {
        writeln!(out, "runners: {} alive", view.live.len())?;
        let host = this_host();
        for r in &view.live {
            writeln!(out, "  {}: {}", r.name(&host), words::activity(&r.record, now))?;
        }
    }
    for u in unserved_shown(&view) {
        let jobs = if u.pending == 1 { "job" } else { "jobs" };
        writeln!(out, "{}: {} pending {jobs} in queue {}", u.why, u.pending, u.queue)?;
    }
    let host = this_host();
    for h in &view.gpus {
        let on = if h.host == host { "this host".to_owned() } else { h.host.clone() };
        match &h.error {
            Some(e) => {
                let why = e.strip_prefix("no GPU found: ").unwrap_or(e);
                writeln!(out, "GPUs on {on}: none found ({why})")?;
            }
            None => {
                writeln!(out, "GPUs on {on}: {}", h.gpus.len())?;
                for g in &h.gpus {
                    writeln!(out, "  {} ({})", g.line, g.gpu.name)?;
                }
            }
        }
    }
    Ok(Code::Success)
}

/// The unserved jobs `status` names: none while no runner is alive
/// (`runners: none alive` says it for all of them).
fn unserved_shown(view: &StatusView) -> &[slothqueue::core::Unserved] {
    if view.live.is_empty() { &[] } else { &view.unserved }
}

/// `status --json`: the counts, `exists`, the lanes, how many schedules
/// and the next tick, the live runners' records, the unserved jobs.
fn status_json(view: &StatusView) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(&view.stats)?;
    v["exists"] = view.exists.into();
    v["lanes"] = serde_json::to_value(&view.lanes)?;
    v["schedules"] = view.schedules.len().into();
    v["next_tick"] = serde_json::to_value(&view.next_tick)?;
    let records: Vec<&RunnerRecord> = view.live.iter().map(|r| &r.record).collect();
    v["runners"] = serde_json::to_value(records)?;
    v["unserved"] = serde_json::to_value(unserved_shown(view))?;
    if !view.gpus.is_empty() {
        v["gpus"] = serde_json::to_value(&view.gpus)?;
    }
    Ok(v)
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
    let more = match filter.limit {
        Some(limit) if jobs.len() >= limit => more_than_shown(store.as_ref(), &filter).await?,
        _ => More::None,
    };
    if ctx.json {
        let secrets = if show_secrets { Secrets::Shown } else { Secrets::Masked };
        let all: Vec<serde_json::Value> =
            jobs.iter().map(|j| job_json_with(j, None, secrets)).collect::<anyhow::Result<_>>()?;
        print_json(&mut out, &serde_json::Value::Array(all))?;
        if let Some(line) = more.line() {
            // The array stays what scripts already read; the sign that it
            // was cut goes beside it, as JSON on stderr (docs/json.md).
            let (more, at_least) = more.count();
            exit::say(
                &serde_json::json!({ "warning": line, "more": more, "at_least": at_least })
                    .to_string(),
            );
        }
        return Ok(Code::Success);
    }
    if jobs.is_empty() {
        let what = match (filter.shown, filter.state) {
            (Some(PendingShown::Held), _) => "held ".to_owned(),
            (Some(PendingShown::Waiting), _) => "waiting ".to_owned(),
            (None, Some(s)) => format!("{s} "),
            (None, None) => String::new(),
        };
        match &filter.search {
            Some(text) => writeln!(out, "no {what}jobs contain `{}`", render::one_line(text))?,
            None => writeln!(out, "no {what}jobs")?,
        }
        return Ok(Code::Success);
    }
    let now = ctx.now();
    write!(out, "{}", render::table(&jobs, now, terminal_width(), ctx.color))?;
    if let Some(line) = more.line() {
        writeln!(out, "{line}")?;
    }
    Ok(Code::Success)
}

/// How many matching jobs a cut list left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum More {
    /// None: the list is whole.
    None,
    /// Exactly this many.
    Exactly(usize),
    /// At least this many (counting stopped at [`MORE_COUNTED`]).
    AtLeast(usize),
}

/// The most jobs past a cut list that are counted, in pages of
/// [`COUNT_PAGE`]: the line only needs a size, not a walk of a huge queue.
const MORE_COUNTED: usize = 10_000;

/// The page size of that count.
const COUNT_PAGE: usize = 1_000;

impl More {
    /// The list's last line: `… 12 more; --all or --limit`.
    fn line(self) -> Option<String> {
        match self {
            More::None => None,
            More::Exactly(n) => Some(format!("… {n} more; --all or --limit")),
            More::AtLeast(n) => Some(format!("… {n}+ more; --all or --limit")),
        }
    }

    /// The count and whether it is a lower bound.
    fn count(self) -> (usize, bool) {
        match self {
            More::None => (0, false),
            More::Exactly(n) => (n, false),
            More::AtLeast(n) => (n, true),
        }
    }
}

/// How many jobs match `filter` beyond its limit: the matching jobs are
/// counted newest first, page by page (whatever order the list was in,
/// it held the limit's worth of the same set), up to [`MORE_COUNTED`]
/// past the limit.
async fn more_than_shown(store: &dyn Store, filter: &ListFilter) -> anyhow::Result<More> {
    let Some(shown) = filter.limit else { return Ok(More::None) };
    let mut page = ListFilter {
        limit: Some(COUNT_PAGE),
        cursor: None,
        order: slothqueue::ListOrder::Newest,
        ..filter.clone()
    };
    let mut matching = 0usize;
    loop {
        let jobs = store.list(&page).await.context("cannot count the jobs left out")?;
        matching += jobs.len();
        if matching >= shown + MORE_COUNTED {
            return Ok(More::AtLeast(matching - shown));
        }
        match jobs.last() {
            Some(last) if jobs.len() == COUNT_PAGE => page.cursor = Some(last.id),
            _ => break,
        }
    }
    Ok(match matching.saturating_sub(shown) {
        0 => More::None,
        n => More::Exactly(n),
    })
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

/// Parents `show` names before it only counts the rest.
const PARENTS_LISTED: usize = 20;

/// The job, why it is not running, and its story; secret-looking values
/// masked unless `show_secrets`. Everything is read first (the read
/// model's `slothqueue_view::JobView`, then the log header), then printed.
pub async fn show(ctx: &Ctx, id: JobId, show_secrets: bool) -> Outcome {
    let store = ctx.open_read_only()?;
    let view =
        looked(ctx, store.as_ref(), async |look| slothqueue_view::job(look, id).await).await?;
    let mut out = io::stdout().lock();
    if ctx.json {
        let secrets = if show_secrets { Secrets::Shown } else { Secrets::Masked };
        let mut v = job_json_with(&view.job, Some(&view.events), secrets)?;
        v["dependents"] = serde_json::to_value(&view.dependents)?;
        if let Some(tick) = &view.schedule {
            v["schedule"] = serde_json::json!({ "key": tick.key, "slot": tick.slot });
        }
        if let Some(why) = &view.why {
            v["why"] = why.as_str().into();
        }
        print_json(&mut out, &v)?;
        return Ok(Code::Success);
    }
    let told = contained_by(&log_dir(&ctx.files), id);
    let now = ctx.now();
    let job = &view.job;
    write!(out, "{}", render::job_details(job, now, ctx.color, show_secrets))?;
    if let Some(tick) = &view.schedule {
        let line = render::tick_slot(&tick.key, tick.slot, tick.stored.as_ref());
        writeln!(out, "schedule:     {line}")?;
    }
    if !job.after.is_empty() {
        let parents = render::job_list(&view.parents, job.after.len(), PARENTS_LISTED);
        writeln!(out, "after:        {parents}")?;
    }
    if !view.dependents.is_empty() {
        let listed = view.dependents.len().min(DEPENDENTS_LISTED);
        let names = render::job_list(&view.listed_dependents, view.dependents.len(), listed);
        writeln!(out, "dependents:   {names}")?;
    }
    if let Some(line) = &view.why {
        writeln!(out, "{}:          {line}", view.why_label())?;
    }
    if let Some(told) = told {
        if let Some(mechanism) = &told.mechanism {
            writeln!(out, "contained:    {mechanism} (attempt {})", told.attempt)?;
        }
        if let Some(limits) = &told.limits {
            writeln!(out, "in force:     {limits} (attempt {})", told.attempt)?;
        }
    }
    writeln!(out)?;
    for e in &view.events {
        writeln!(out, "{}", render::event_line(e, now))?;
    }
    Ok(Code::Success)
}

/// The jobs with these ids, in their order, leaving out those that are
/// gone (the read model's rule: a parent purged after it finished holds
/// nobody up).
pub async fn jobs_by_id(store: &dyn Store, ids: &[JobId]) -> anyhow::Result<Vec<Job>> {
    slothqueue_view::job::jobs_by_id(store, ids).await.map_err(look_failed)
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
