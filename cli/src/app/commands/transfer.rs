//! `export` and `import`: every job with its trail as JSON lines, so a
//! queue can be backed up, inspected with `jq`, or moved between SQLite and
//! redb.
//!
//! Import parses and checks every line before it writes anything: each job
//! must pass the checks a new job passes (`machine::validate`), and no id
//! or idempotency key may appear twice in the file or already be in the
//! queue, so malformed or clashing input writes nothing. The lines are then
//! restored in one transaction (`Store::restore_many`), so not even a
//! writer that takes an id or key between the check and the write, or a
//! failing disk, can leave an import half done.
//!
//! The lanes' settings (limits, pauses) travel too: when any is set,
//! `export` writes them first as one line `{"lanes": …}`, and `import`
//! takes such a line (anywhere, at most one), checks it with the rest, and
//! applies each setting once the jobs are in (`Store::change_lane`, one
//! write each, after the jobs' one transaction). Holds travel inside each
//! job (`held`).
//!
//! Schedules travel too, one line `{"schedule": …}` each, after the lanes
//! line and before the jobs, exactly as stored (cursor, last fire, pause),
//! so a restored schedule goes on where it was: slots since its cursor are
//! missed slots, caught up as its `catch_up` says. `import` checks each
//! with `core::schedule::check_restore` and refuses a key twice in the file
//! or already in the queue, and restores them in one transaction
//! (`Store::restore_schedules`) after the jobs, whose ids their last fires
//! name.
//!
//! Import restores data, never live authority: a job exported while
//! running comes back pending (no lease, no process group, no owner) with a
//! `reclaimed` event saying so, its interrupted attempt charged as a
//! reclaim charges it (failed with `expired` if none is left, cancelled if
//! a cancel was pending).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use slothqueue::core::{LaneChange, LaneScope, Lanes, Schedule, machine, schedule};
use slothqueue::{
    Event, EventKind, Job, JobState, ListFilter, ListOrder, NewJob, StoreError, Timestamp,
};

use super::{Ctx, Secrets, job_json_with, print_json, schedule_line};
use crate::app::Outcome;
use crate::app::exit::{Code, new_jobs_failed, usage};

/// Jobs read per page while exporting.
const PAGE: usize = 500;

/// Writes every job, oldest first, one JSON object per line with its
/// `events`. Values are as stored, secrets too (an export restores the
/// queue), and a shell job holding secret-looking variables names them in
/// `secrets`, so whoever keeps the file knows what it holds.
pub async fn export(ctx: &Ctx) -> Outcome {
    let Some(store) = ctx.look_existing()? else {
        return Ok(Code::Success);
    };
    let lanes = store.lanes().await.context("cannot read the lanes")?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    if !lanes.is_default() {
        print_json(&mut out, &serde_json::json!({ "lanes": lanes }))?;
    }
    for schedule in store.schedules().await.context("cannot read the schedules")? {
        print_json(&mut out, &schedule_line(&schedule)?)?;
    }
    let mut cursor = None;
    loop {
        let filter = ListFilter {
            limit: Some(PAGE),
            cursor,
            order: ListOrder::Oldest,
            ..ListFilter::default()
        };
        let page = store.list(&filter).await.context("cannot list jobs")?;
        for job in &page {
            let events = store.events(job.id).await?;
            print_json(&mut out, &job_json_with(job, Some(&events), Secrets::Marked)?)?;
        }
        match page.last() {
            Some(last) if page.len() == PAGE => cursor = Some(last.id),
            _ => break,
        }
    }
    out.flush()?;
    Ok(Code::Success)
}

/// One parsed line of an export.
struct Line {
    number: usize,
    job: Job,
    events: Vec<Event>,
}

/// A line of an export: a job with its trail, the lanes' settings, or a
/// schedule.
enum Parsed {
    Job(Box<Line>),
    Lanes(Lanes),
    Schedule(Box<Schedule>),
}

/// A `{"schedule": …}` line (with the `secrets` an export marks beside
/// it, which say what the line holds and are no part of it), checked as
/// `Store::restore_schedules` will check it.
fn parse_schedule(
    number: usize,
    obj: &serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<Schedule> {
    let s: Schedule = serde_json::from_value(obj["schedule"].clone())
        .map_err(|e| usage(format!("line {number}: bad `schedule` ({e})")))?;
    schedule::check_restore(&s).map_err(|e| {
        let why = match e {
            machine::TransitionError::InvalidSchedule(m)
            | machine::TransitionError::InvalidJob(m) => m,
            e => e.to_string(),
        };
        usage(format!("line {number}: schedule `{}`: {why}", s.key))
    })?;
    Ok(s)
}

fn parse_any(number: usize, text: &str) -> anyhow::Result<Parsed> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| usage(format!("line {number}: not JSON ({e})")))?;
    match value.as_object() {
        Some(o) if o.len() == 1 && o.contains_key("lanes") => {
            let lanes: Lanes = serde_json::from_value(o["lanes"].clone())
                .map_err(|e| usage(format!("line {number}: bad `lanes` ({e})")))?;
            // Every setting as `change_lane` will take it, on a scratch
            // copy: a bad queue name is refused before anything is written.
            let mut scratch = Lanes::default();
            for (scope, change) in lane_changes(&lanes) {
                scratch.apply(&scope, &change).map_err(|e| {
                    let why = match e {
                        machine::TransitionError::InvalidJob(m) => m,
                        e => e.to_string(),
                    };
                    usage(format!("line {number}: bad `lanes`: {why}"))
                })?;
            }
            Ok(Parsed::Lanes(lanes))
        }
        Some(o)
            if o.contains_key("schedule")
                && o.keys().all(|k| k == "schedule" || k == "secrets") =>
        {
            parse_schedule(number, o).map(|s| Parsed::Schedule(Box::new(s)))
        }
        _ => parse_line(number, value).map(|l| Parsed::Job(Box::new(l))),
    }
}

/// The changes that make a file's lanes `lanes`: the pause of every queue,
/// then each queue's limit and pause (their stamps kept).
fn lane_changes(lanes: &Lanes) -> Vec<(LaneScope, LaneChange)> {
    let mut changes = Vec::new();
    if let Some(p) = &lanes.all_paused {
        changes.push((LaneScope::All, LaneChange::Pause(p.clone())));
    }
    for (queue, settings) in &lanes.queues {
        let scope = LaneScope::Queue(queue.clone());
        if settings.limit > 0 {
            changes.push((scope.clone(), LaneChange::Limit(settings.limit)));
        }
        if let Some(p) = &settings.paused {
            changes.push((scope, LaneChange::Pause(p.clone())));
        }
    }
    changes
}

fn parse_line(number: usize, mut value: serde_json::Value) -> anyhow::Result<Line> {
    // What `export` says of the job (`secrets`: which of its variables
    // look secret) is not part of it; the payload holds the values.
    if let Some(obj) = value.as_object_mut() {
        obj.remove("secrets");
    }
    let events = match value.as_object_mut().and_then(|o| o.remove("events")) {
        Some(ev) => serde_json::from_value(ev)
            .map_err(|e| usage(format!("line {number}: bad `events` ({e})")))?,
        None => Vec::new(),
    };
    let job: Job = serde_json::from_value(value)
        .map_err(|e| usage(format!("line {number}: not a job ({e})")))?;
    if job.id <= 0 {
        return Err(usage(format!("line {number}: job id {} is not positive", job.id)));
    }
    if let Some(e) = events.iter().find(|e: &&Event| e.job_id != job.id) {
        return Err(usage(format!(
            "line {number}: an event of job #{} is in the trail of job #{}",
            e.job_id, job.id
        )));
    }
    let mut new = NewJob::new(job.kind.clone(), job.payload.clone());
    new.queue = job.queue.clone();
    new.priority = job.priority;
    new.max_attempts = Some(job.max_attempts);
    new.max_runtime = job.max_runtime;
    new.not_before = Some(job.not_before);
    new.idempotency_key = job.idempotency_key.clone();
    new.after = job.after.iter().map(|id| slothqueue::core::Parent::Id(*id)).collect();
    machine::validate(&new).map_err(|e| usage(format!("line {number}: job #{}: {e}", job.id)))?;
    Ok(Line { number, job, events })
}

/// A job exported while running, as it must come back: nobody holds it
/// now, so no lease, owner or process group is restored as live.
fn demote_running(line: &mut Line, now: Timestamp) {
    let job = &mut line.job;
    if job.state != JobState::Running {
        return;
    }
    let attempt = job.lease.take().map(|l| l.attempt);
    let (state, kind, message) = if job.cancel_requested {
        (
            JobState::Cancelled,
            EventKind::Cancelled,
            "imported while running with a cancel pending: cancelled",
        )
    } else if job.attempts >= job.max_attempts {
        (JobState::Failed, EventKind::Expired, "imported while running, no attempts left: failed")
    } else {
        (JobState::Pending, EventKind::Reclaimed, "imported while running: back to pending")
    };
    job.state = state;
    if state == JobState::Pending {
        job.not_before = now;
    } else {
        job.finished_at = Some(now);
    }
    let mut event = Event::new(job.id, kind, now);
    event.attempt = attempt;
    event.message = Some(message.to_owned());
    line.events.push(event);
}

/// Refuses the whole file if an id or idempotency key appears twice in it.
fn check_duplicates(lines: &[Line]) -> anyhow::Result<()> {
    let mut ids: HashMap<i64, usize> = HashMap::new();
    let mut keys: HashMap<&str, usize> = HashMap::new();
    for line in lines {
        if let Some(first) = ids.insert(line.job.id, line.number) {
            return Err(usage(format!(
                "line {}: job #{} is also on line {first} (nothing was written)",
                line.number, line.job.id
            )));
        }
        if let Some(key) = &line.job.idempotency_key {
            if let Some(first) = keys.insert(key, line.number) {
                return Err(usage(format!(
                    "line {}: idempotency key `{key}` is also on line {first} (nothing was written)",
                    line.number
                )));
            }
        }
    }
    Ok(())
}

/// The first `#N` an error message names, to point at its line (for a
/// refusal that is not of one element, so carries no batch index).
fn first_job_named(message: &str) -> Option<slothqueue::JobId> {
    let at = message.find('#')?;
    let digits: String = message[at + 1..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Reads `export` output from `file` (or stdin) and restores it, all of it
/// in one transaction.
pub async fn import(ctx: &Ctx, file: Option<PathBuf>) -> Outcome {
    let mut text = String::new();
    match &file {
        Some(path) => {
            std::fs::File::open(path)
                .and_then(|mut f| f.read_to_string(&mut text))
                .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
        }
        None => {
            io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| usage(format!("cannot read stdin: {e}")))?;
        }
    }
    let mut lines: Vec<Line> = Vec::new();
    let mut lanes: Option<(usize, Lanes)> = None;
    let mut schedules: Vec<(usize, Schedule)> = Vec::new();
    for (i, l) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        match parse_any(i + 1, l)? {
            Parsed::Job(line) => lines.push(*line),
            Parsed::Schedule(s) => {
                if let Some((first, _)) = schedules.iter().find(|(_, o)| o.key == s.key) {
                    return Err(usage(format!(
                        "line {}: schedule `{}` is also on line {first} (nothing was written)",
                        i + 1,
                        s.key
                    )));
                }
                schedules.push((i + 1, *s));
            }
            Parsed::Lanes(_) if lanes.is_some() => {
                let first = lanes.as_ref().map_or(0, |(n, _)| *n);
                return Err(usage(format!(
                    "line {}: a second `lanes` line (the first is line {first}); nothing was written",
                    i + 1
                )));
            }
            Parsed::Lanes(l) => lanes = Some((i + 1, l)),
        }
    }
    check_duplicates(&lines)?;
    let store = ctx.open(true)?;
    if !schedules.is_empty() {
        // A file without schedules reads none: it imports as it did
        // before schedules existed.
        let stored = store.schedules().await.context("cannot read the queue's schedules")?;
        if let Some((number, s)) =
            schedules.iter().find(|(_, s)| stored.iter().any(|o| o.key == s.key))
        {
            return Err(usage(format!(
                "line {number}: schedule `{}` already exists in the queue (nothing was written; every --remove {} first to replace it)",
                s.key, s.key
            )));
        }
    }
    let now = ctx.now();
    for line in &mut lines {
        demote_running(line, now);
    }
    let imported = lines.len();
    let numbers: HashMap<slothqueue::JobId, usize> =
        lines.iter().map(|l| (l.job.id, l.number)).collect();
    let line_numbers: Vec<usize> = lines.iter().map(|l| l.number).collect();
    let batch: Vec<_> = lines.into_iter().map(|l| (l.job, l.events)).collect();
    // One transaction, which checks every job against the queue and the
    // jobs before it (`core::ops::restore_many`: an id taken, a key held, a
    // parent missing) and writes nothing if one is refused.
    store.restore_many(batch).await.map_err(|e| {
        let line = match &e {
            StoreError::InBatch { index, .. } => line_numbers.get(*index).copied(),
            _ => first_job_named(&e.to_string()).and_then(|id| numbers.get(&id).copied()),
        };
        let at = line.map_or_else(String::new, |n| format!("line {n}: "));
        let e = match e {
            StoreError::InBatch { error, .. } => *error,
            e => e,
        };
        let what = new_jobs_failed(
            &e,
            &format!("{at}cannot import"),
            "nothing was imported",
            "look with `slothqueue status`",
        );
        anyhow::Error::new(e).context(what)
    })?;
    let restored = schedules.len();
    if !schedules.is_empty() {
        store
            .restore_schedules(schedules.into_iter().map(|(_, s)| s).collect())
            .await
            .with_context(|| {
                format!(
                    "imported {imported} job(s), but cannot restore the schedules (none of them was written)"
                )
            })?;
    }
    // The lanes after the jobs: a pause restored first would not stop a
    // runner from taking the jobs anyway (none are in yet), and a refusal
    // here leaves the jobs in, which the error says.
    let changes = lanes.as_ref().map(|(_, l)| lane_changes(l)).unwrap_or_default();
    for (scope, change) in &changes {
        store.change_lane(scope, change).await.with_context(|| {
            format!(
                "imported {imported} job(s), but cannot restore the settings of {scope} (set them with parallel/pause)"
            )
        })?;
    }
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(
            &mut out,
            &serde_json::json!({
                "imported": imported,
                "schedules": restored,
                "lane_settings": changes.len(),
            }),
        )?;
    } else {
        let mut parts = vec![format!("{imported} job(s)")];
        if restored > 0 {
            parts.push(format!("{restored} schedule(s)"));
        }
        if !changes.is_empty() {
            parts.push(format!("{} lane setting(s)", changes.len()));
        }
        let last = parts.pop().unwrap_or_default();
        if parts.is_empty() {
            writeln!(out, "imported {last}")?;
        } else {
            writeln!(out, "imported {} and {last}", parts.join(", "))?;
        }
    }
    Ok(Code::Success)
}
