//! `add`: push one job, or (`--stdin`) one job a line in one transaction,
//! and say what was added and what it waits on.
//!
//! `--stdin` checks every line first (naming the line at fault, before the
//! queue is opened), then streams the jobs into one `push_stream`: the
//! store takes them one at a time and answers an id a line, so 200,000
//! lines never sit in memory as jobs (each carries its recorded
//! environment), and a `--json` answer reads each job back as it writes it.

use std::io::{self, Read as _, Write};
use std::sync::Arc;

use slothqueue::core::{JobSource, PushedId};
use slothqueue::{Job, JobState, NewJob, Store, StoreError, Timestamp};

use super::inspect::jobs_by_id;
use super::read_back::ReadBack;
use super::{Ctx, job_json, print_json};
use crate::app::Outcome;
use crate::app::batch;
use crate::app::config::{AddConfig, StdinConfig};
use crate::app::exit::{AtLine, Code, new_jobs_failed, usage};
use crate::app::render;

/// Pushes the job; with an idempotency key that already holds the same
/// job, adds nothing and says so.
pub async fn add(ctx: &Ctx, add: AddConfig) -> Outcome {
    let AddConfig { mut job, when, notes } = add;
    say_notes(&notes)?;
    let store = ctx.open(true)?;
    let now = ctx.now();
    job.not_before = when.resolve(now);
    let pushed = store.push(job, now).await.map_err(|e| {
        let look = "look with `slothqueue list` (or add it with --key, which never adds twice)";
        let what = new_jobs_failed(&e, "cannot add the job", "", look);
        anyhow::Error::new(e).context(what)
    })?;
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(&mut out, &job_json(&pushed.job, None)?)?;
        return Ok(Code::Success);
    }
    if !pushed.created {
        writeln!(
            out,
            "job #{} already holds key {} with the same job; nothing added",
            pushed.job.id,
            pushed.job.idempotency_key.as_deref().map(render::one_line).unwrap_or_default()
        )?;
        return Ok(Code::Success);
    }
    writeln!(out, "{}", render::added(&pushed.job, now))?;
    // A supersede is refused while jobs wait on the holder (the refusal
    // names them), so one that went through stranded nobody: say so.
    if let Some(old) = pushed.superseded {
        writeln!(
            out,
            "superseded job #{old} (same key, different job; it will not run, and no job waited on it)"
        )?;
    }
    if let Some(line) =
        after_line(&pushed.job, &jobs_by_id(store.as_ref(), &pushed.job.after).await?)
    {
        writeln!(out, "{line}")?;
    }
    Ok(Code::Success)
}

/// Says on stderr what the user should know of what is recorded (the
/// secret-looking names `--env-all` left out): stdout stays the result.
pub(super) fn say_notes(notes: &[String]) -> anyhow::Result<()> {
    let mut err = io::stderr().lock();
    for note in notes {
        writeln!(err, "{note}")?;
    }
    Ok(())
}

/// What a new job with parents waits on, or that it was cancelled at once
/// because one had already failed; `None` without parents.
fn after_line(job: &Job, parents: &[Job]) -> Option<String> {
    if let Some(because) = render::cancelled_by(job) {
        return Some(format!("cancelled at once {because}"));
    }
    if job.is_waiting_on_parents() {
        return Some(render::waiting_on(job, parents));
    }
    (!job.after.is_empty()).then(|| {
        format!("after {}: all done already", render::job_list(parents, job.after.len(), 5))
    })
}

/// The jobs of stdin's lines as `push_stream` takes them: each due as its
/// line says, from the time of the push.
struct StdinJobs {
    lines: batch::Lines,
    now: Timestamp,
}

impl JobSource for StdinJobs {
    fn jobs(&self) -> Box<dyn Iterator<Item = Result<NewJob, StoreError>> + '_> {
        Box::new(self.lines.jobs().map(|line| {
            let mut line = line.map_err(StoreError::InvalidInput)?;
            line.job.not_before = line.when.resolve(self.now);
            Ok(line.job)
        }))
    }
}

/// Reads stdin's lines, checks every one, and pushes them in one
/// `push_stream`: all of them or, naming the line at fault, none.
pub async fn add_stdin(ctx: &Ctx, config: StdinConfig) -> Outcome {
    let mut text = String::new();
    io::stdin().read_to_string(&mut text).map_err(|e| usage(format!("cannot read stdin: {e}")))?;
    let StdinConfig { defaults, current_dir, notes } = config;
    let lines = batch::Lines::new(text, defaults, current_dir);
    let numbers = lines.check().map_err(usage)?;
    say_notes(&notes)?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    if numbers.is_empty() {
        if ctx.json {
            writeln!(out, "[]")?;
        } else {
            writeln!(out, "added 0 jobs (stdin held no job lines)")?;
        }
        out.flush()?;
        return Ok(Code::Success);
    }
    let store = ctx.open(true)?;
    let now = ctx.now();
    let source = Arc::new(StdinJobs { lines, now });
    let pushed = store.push_stream(source, now).await.map_err(|e| match e {
        StoreError::InBatch { index, error } => match numbers.get(index) {
            Some(&line) => anyhow::Error::new(AtLine { line, source: *error }),
            None => anyhow::Error::new(*error).context("cannot add the jobs (nothing was added)"),
        },
        e => {
            let what = new_jobs_failed(
                &e,
                "cannot add the jobs",
                "nothing was added",
                "look with `slothqueue list`",
            );
            anyhow::Error::new(e).context(what)
        }
    })?;
    if ctx.json {
        write_json(&mut out, store.as_ref(), &pushed).await?;
    } else {
        writeln!(out, "{}", summary(&pushed))?;
    }
    out.flush()?;
    Ok(Code::Success)
}

/// The jobs pushed, as `show --json` has each, read back one at a time
/// and written as read (the answer to 200,000 lines is long; it is never
/// held whole).
async fn write_json(
    out: &mut impl Write,
    store: &dyn Store,
    pushed: &[PushedId],
) -> anyhow::Result<()> {
    let mut jobs = ReadBack::new(store);
    write!(out, "[")?;
    for (i, p) in pushed.iter().enumerate() {
        if i > 0 {
            write!(out, ",")?;
        }
        let cannot = || format!("added, but cannot read job #{} back", p.id);
        let job = jobs
            .job(p.id)
            .await
            .map_err(|e| anyhow::Error::new(e).context(cannot()))?
            .ok_or_else(|| anyhow::anyhow!("{}: it was deleted since", cannot()))?;
        serde_json::to_writer(&mut *out, &job_json(&job, None)?)?;
    }
    writeln!(out, "]")?;
    Ok(())
}

/// `added 3 jobs (#4–#6)`, and what else happened: lines whose key an
/// identical job held already, supersedes, jobs cancelled at once.
fn summary(pushed: &[PushedId]) -> String {
    let mut created = pushed.iter().filter(|p| p.created);
    let count = created.clone().count();
    let mut line = match (created.next(), created.next_back()) {
        (None, _) => "added 0 jobs".to_owned(),
        (Some(one), None) => format!("added 1 job (#{})", one.id),
        (Some(first), Some(last)) => format!("added {count} jobs (#{}–#{})", first.id, last.id),
    };
    let mut notes = Vec::new();
    let held = pushed.len() - count;
    if held > 0 {
        notes.push(format!("{held} already held by a job with the same key and job"));
    }
    let superseded = pushed.iter().filter(|p| p.superseded.is_some()).count();
    if superseded > 0 {
        notes.push(format!("{superseded} superseded an older pending job of the same key"));
    }
    let cancelled = pushed.iter().filter(|p| p.created && p.state == JobState::Cancelled).count();
    if cancelled > 0 {
        notes.push(format!(
            "{cancelled} cancelled at once: a job they wait on had already failed or been cancelled"
        ));
    }
    if !notes.is_empty() {
        line.push_str(&format!("; {}", notes.join("; ")));
    }
    line
}
