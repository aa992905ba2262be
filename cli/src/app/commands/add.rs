//! `add`: push one job, or (`--stdin`) one job a line in one transaction,
//! and say what was added and what it waits on.

use std::io::{self, Read as _, Write};

use slothqueue::{Job, JobState, StoreError};

use super::inspect::jobs_by_id;
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

/// Reads stdin's lines, checks every one, and pushes them in one
/// `push_many`: all of them or, naming the line at fault, none.
pub async fn add_stdin(ctx: &Ctx, config: StdinConfig) -> Outcome {
    let mut text = String::new();
    io::stdin().read_to_string(&mut text).map_err(|e| usage(format!("cannot read stdin: {e}")))?;
    let lines = batch::parse(&text, &config.defaults, &config.current_dir).map_err(usage)?;
    say_notes(&config.notes)?;
    let mut out = io::stdout().lock();
    if lines.is_empty() {
        if ctx.json {
            writeln!(out, "[]")?;
        } else {
            writeln!(out, "added 0 jobs (stdin held no job lines)")?;
        }
        return Ok(Code::Success);
    }
    let store = ctx.open(true)?;
    let now = ctx.now();
    let numbers: Vec<usize> = lines.iter().map(|l| l.number).collect();
    let jobs = lines
        .into_iter()
        .map(|mut l| {
            l.job.not_before = l.when.resolve(now);
            l.job
        })
        .collect();
    let pushed = store.push_many(jobs, now).await.map_err(|e| match e {
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
        let all: Vec<serde_json::Value> =
            pushed.iter().map(|p| job_json(&p.job, None)).collect::<anyhow::Result<_>>()?;
        print_json(&mut out, &serde_json::Value::Array(all))?;
        return Ok(Code::Success);
    }
    let created: Vec<&Job> = pushed.iter().filter(|p| p.created).map(|p| &p.job).collect();
    let mut line = match created.as_slice() {
        [] => "added 0 jobs".to_owned(),
        [one] => format!("added 1 job (#{})", one.id),
        [first, .., last] => format!("added {} jobs (#{}–#{})", created.len(), first.id, last.id),
    };
    let mut notes = Vec::new();
    let held = pushed.len() - created.len();
    if held > 0 {
        notes.push(format!("{held} already held by a job with the same key and job"));
    }
    let superseded = pushed.iter().filter(|p| p.superseded.is_some()).count();
    if superseded > 0 {
        notes.push(format!("{superseded} superseded an older pending job of the same key"));
    }
    let cancelled = created.iter().filter(|j| j.state == JobState::Cancelled).count();
    if cancelled > 0 {
        notes.push(format!(
            "{cancelled} cancelled at once: a job they wait on had already failed or been cancelled"
        ));
    }
    if !notes.is_empty() {
        line.push_str(&format!("; {}", notes.join("; ")));
    }
    writeln!(out, "{line}")?;
    Ok(Code::Success)
}
