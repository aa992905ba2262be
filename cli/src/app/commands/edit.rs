//! The commands that change jobs a user already added: `cancel`, `retry`,
//! `clear`. None of them creates a queue file.

use std::io::{self, Write};
use std::time::Duration;

use anyhow::Context as _;
use slothqueue::core::Liveness;
use slothqueue::runner::ProcJudge;
use slothqueue::{JobId, JobState, PurgeFilter};

use super::inspect::log_file;
use super::{Ctx, job_json, print_json};
use crate::app::Outcome;
use crate::app::exit::Code;

/// Cancels a pending job, or asks the runner of a running one to stop it.
pub async fn cancel(ctx: &Ctx, id: JobId) -> Outcome {
    let store = ctx.open(false)?;
    let job = store.cancel(id, ctx.now()).await?;
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(&mut out, &job_json(&job, None)?)?;
    } else if job.state == JobState::Cancelled {
        writeln!(out, "cancelled job #{id}")?;
    } else {
        let gone = job.lease.as_ref().is_some_and(|l| {
            slothqueue::core::LivenessJudge::judge(&ProcJudge::new(), l) == Liveness::Gone
        });
        if gone {
            writeln!(
                out,
                "cancel requested for job #{id}: its runner is gone, so the next runner to start ends it (cancelled) as it takes the job back"
            )?;
        } else {
            writeln!(
                out,
                "cancel requested for job #{id}: its runner stops it at the next heartbeat"
            )?;
        }
    }
    Ok(Code::Success)
}

/// Puts a failed or cancelled job back to pending, due now, attempts reset.
pub async fn retry(ctx: &Ctx, id: JobId) -> Outcome {
    let store = ctx.open(false)?;
    let job = store.retry(id, ctx.now()).await?;
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(&mut out, &job_json(&job, None)?)?;
    } else {
        writeln!(out, "job #{id} is pending again (attempts reset)")?;
    }
    Ok(Code::Success)
}

/// Deletes finished jobs (and pending ones with `--all`), never running
/// ones, with their trails and log files.
pub async fn clear(ctx: &Ctx, include_pending: bool, older_than: Option<Duration>) -> Outcome {
    let mut out = io::stdout().lock();
    let Some(store) = ctx.open_existing()? else {
        if ctx.json {
            print_json(&mut out, &serde_json::json!({ "deleted": [] }))?;
        } else {
            writeln!(out, "deleted 0 job(s) (no queue at {})", ctx.db.display())?;
        }
        return Ok(Code::Success);
    };
    let now = ctx.now();
    let filter =
        PurgeFilter { include_pending, older_than: older_than.map(|d| now.saturating_sub(d)) };
    let deleted = store.purge(&filter).await.context("cannot clear jobs")?;
    for id in &deleted {
        // Best effort: a log left behind is harmless, a failed clear is not.
        let _ = std::fs::remove_file(log_file(&ctx.db, *id));
    }
    if ctx.json {
        print_json(&mut out, &serde_json::json!({ "deleted": deleted }))?;
    } else {
        writeln!(out, "deleted {} job(s)", deleted.len())?;
    }
    Ok(Code::Success)
}
