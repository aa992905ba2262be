//! The commands that change jobs a user already added: `cancel`, `retry`,
//! `clear`. None of them creates a queue file. `cancel` and `retry` take
//! many ids, each in turn, as `hold` and `release` do.

use std::io::{self, Write};
use std::time::Duration;

use anyhow::Context as _;
use slothqueue::core::Liveness;
use slothqueue::runner::ProcJudge;
use slothqueue::{Job, JobId, JobState, PurgeFilter, Store, StoreError};

use super::inspect::jobs_by_id;
use super::{Ctx, job_json, print_json};
use crate::app::Outcome;
use crate::app::config::log_dir;
use crate::app::exit::{self, Code};
use crate::app::render;

/// Cancels each pending job, or asks the runner of each running one to
/// stop it, one line each (`cancel 3 4 5`, `… | xargs slothqueue cancel`).
pub async fn cancel(ctx: &Ctx, ids: &[JobId]) -> Outcome {
    let store = ctx.open(false)?;
    let mut code = Code::Success;
    for &id in ids {
        match store.cancel(id, ctx.now()).await {
            Ok(job) => said_cancelled(ctx, store.as_ref(), &job).await?,
            Err(e) => refused(e, &mut code)?,
        }
    }
    Ok(code)
}

/// What `cancel` says of one job it cancelled (or asked to stop).
async fn said_cancelled(ctx: &Ctx, store: &dyn Store, job: &Job) -> anyhow::Result<()> {
    let id = job.id;
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(&mut out, &job_json(job, None)?)?;
    } else if job.state == JobState::Cancelled {
        let with = cancelled_under(store, id).await?;
        if with.is_empty() {
            writeln!(out, "cancelled job #{id}")?;
        } else {
            let listed = jobs_by_id(store, &with[..with.len().min(LISTED)]).await?;
            writeln!(
                out,
                "cancelled job #{id}, and with it {} that waited on it: {} (`slothqueue retry {id}` brings them back)",
                count(with.len()),
                render::job_list(&listed, with.len(), LISTED)
            )?;
        }
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
    Ok(())
}

/// Puts each failed or cancelled job back to pending, due now, attempts
/// reset, one line each.
pub async fn retry(ctx: &Ctx, ids: &[JobId]) -> Outcome {
    let store = ctx.open(false)?;
    let mut code = Code::Success;
    for &id in ids {
        let under = cancelled_under(store.as_ref(), id).await?;
        match store.retry(id, ctx.now()).await {
            Ok(job) => said_retried(ctx, store.as_ref(), &job, &under).await?,
            Err(e) => refused(e, &mut code)?,
        }
    }
    Ok(code)
}

/// What `retry` says of one job it put back (`under`: the jobs its
/// failure had cancelled, read before the retry brought them back).
async fn said_retried(
    ctx: &Ctx,
    store: &dyn Store,
    job: &Job,
    under: &[JobId],
) -> anyhow::Result<()> {
    let id = job.id;
    let mut out = io::stdout().lock();
    if ctx.json {
        return print_json(&mut out, &job_json(job, None)?);
    }
    let mut line = format!("job #{id} is pending again (attempts reset)");
    if job.is_waiting_on_parents() {
        let parents = jobs_by_id(store, &job.after).await?;
        line.push_str(&format!(", {}", render::waiting_on(job, &parents)));
    }
    let back: Vec<_> = jobs_by_id(store, under)
        .await?
        .into_iter()
        .filter(|j| j.state == JobState::Pending)
        .collect();
    if !back.is_empty() {
        line.push_str(&format!(
            "; back with it: {} it had cancelled, {}",
            count(back.len()),
            render::job_list(&back, back.len(), LISTED)
        ));
    }
    writeln!(out, "{line}")?;
    Ok(())
}

/// One id of several refused, as `hold` treats it: a job that does not
/// exist, whose state forbids the change, or that the store refuses for
/// its own sake (a retry of a job whose parent failed) gets an error line
/// and the rest go on, the first such refusal's code kept for the exit;
/// any other failure (a busy or damaged file) stops at once. The store's
/// refusals name the job and the verb themselves.
fn refused(e: StoreError, code: &mut Code) -> anyhow::Result<()> {
    match e {
        StoreError::NotFound(_)
        | StoreError::InvalidTransition { .. }
        | StoreError::InvalidInput(_) => {
            let this = exit::warn(&anyhow::Error::new(e));
            if *code == Code::Success {
                *code = this;
            }
            Ok(())
        }
        e => Err(e.into()),
    }
}

/// Jobs a line names before it only counts the rest.
const LISTED: usize = 5;

/// The most dependents [`cancelled_under`] looks at: it only feeds a line
/// of text, which must not cost a walk of a huge graph.
const WALK_LIMIT: usize = 10_000;

/// `1 job`, `3 jobs`.
fn count(n: usize) -> String {
    if n == 1 { "1 job".to_owned() } else { format!("{n} jobs") }
}

/// The jobs cancelled because `root` failed or was cancelled (its
/// dependents, transitively, that name it as `cancelled_by`), lowest id
/// first: what a retry of `root` brings back.
async fn cancelled_under(store: &dyn Store, root: JobId) -> anyhow::Result<Vec<JobId>> {
    let mut found = std::collections::BTreeSet::new();
    let mut todo = vec![root];
    let mut seen = 0usize;
    while let Some(id) = todo.pop() {
        for child in store.dependents(id).await.context("cannot read dependents")? {
            seen += 1;
            if seen > WALK_LIMIT || found.contains(&child) {
                continue;
            }
            let job = match store.get(child).await {
                Ok(j) => j,
                Err(slothqueue::StoreError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            if job.state == JobState::Cancelled && job.cancelled_by == Some(root) {
                found.insert(child);
                todo.push(child);
            }
        }
    }
    Ok(found.into_iter().collect())
}

/// Deletes finished jobs (and pending ones with `--all`), never running
/// ones, with their trails and log files.
pub async fn clear(ctx: &Ctx, include_pending: bool, older_than: Option<Duration>) -> Outcome {
    let mut out = io::stdout().lock();
    let Some(store) = ctx.open_existing()? else {
        if ctx.json {
            print_json(&mut out, &serde_json::json!({ "deleted": [] }))?;
        } else {
            writeln!(out, "deleted 0 job(s) (no queue at {})", slothqueue::shown(&ctx.db))?;
        }
        return Ok(Code::Success);
    };
    let now = ctx.now();
    let filter =
        PurgeFilter { include_pending, older_than: older_than.map(|d| now.saturating_sub(d)) };
    let deleted = store.purge(&filter).await.context("cannot clear jobs")?;
    slothqueue::runner::remove_logs(&log_dir(&ctx.files), &deleted);
    if ctx.json {
        print_json(&mut out, &serde_json::json!({ "deleted": deleted }))?;
    } else {
        writeln!(out, "deleted {} job(s)", deleted.len())?;
    }
    Ok(Code::Success)
}
