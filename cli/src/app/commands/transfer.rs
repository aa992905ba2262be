//! `export` and `import`: every job with its trail as JSON lines, so a
//! queue can be backed up, inspected with `jq`, or moved between SQLite and
//! redb.
//!
//! Import parses every line before it opens the queue, so malformed input
//! writes nothing; each line is then restored in its own transaction (all
//! or nothing per line), and a refusal names the line.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use slothqueue::{Event, Job, ListFilter, ListOrder};

use super::{Ctx, job_json, print_json};
use crate::app::Outcome;
use crate::app::exit::{Code, usage};

/// Jobs read per page while exporting.
const PAGE: usize = 500;

/// Writes every job, oldest first, one JSON object per line with its `events`.
pub async fn export(ctx: &Ctx) -> Outcome {
    let Some(store) = ctx.look_existing()? else {
        return Ok(Code::Success);
    };
    let mut out = io::BufWriter::new(io::stdout().lock());
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
            print_json(&mut out, &job_json(job, Some(&events))?)?;
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

fn parse_line(number: usize, text: &str) -> anyhow::Result<Line> {
    let mut value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| usage(format!("line {number}: not JSON ({e})")))?;
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
    Ok(Line { number, job, events })
}

/// Reads `export` output from `file` (or stdin) and restores each job.
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
    let lines: Vec<Line> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_line(i + 1, l))
        .collect::<anyhow::Result<_>>()?;
    let store = ctx.open(true)?;
    let mut imported = 0usize;
    for line in lines {
        let id = line.job.id;
        store.restore(line.job, line.events).await.with_context(|| {
            let before = match imported {
                0 => "nothing was imported".to_owned(),
                n => format!("the {n} job(s) before it were imported"),
            };
            format!("line {}: cannot import job #{id} ({before})", line.number)
        })?;
        imported += 1;
    }
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(&mut out, &serde_json::json!({ "imported": imported }))?;
    } else {
        writeln!(out, "imported {imported} job(s)")?;
    }
    Ok(Code::Success)
}
