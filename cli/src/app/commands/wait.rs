//! `wait`: blocks until jobs are finished, whichever process runs them,
//! and says how they ended in its exit code: 0 all done, 1 one failed or
//! was cancelled (or was deleted before it was seen finished), 124 timed
//! out, 3 an id that does not exist.
//!
//! It only looks (the queue is opened read-only, nothing is written) and
//! sleeps on the queue file's change notifications in between
//! (`slothqueue::runner::wait`), so a wait on a job that runs for hours
//! costs one look per 10 s poll.
//!
//! With `--queue` or `--all`, the jobs waited on are every job pending or
//! running there when the wait starts or at a later look, and every job
//! added during the wait: a job that failed before the wait started does
//! not make it exit 1, one that fails during it does.

use std::io::{self, Write};
use std::time::Duration;

use slothqueue::runner::wait::{WaitOutcome, WaitTarget, wait as wait_on};
use slothqueue::runner::{QueueWatch, format_duration};
use slothqueue::{Job, JobState};

use super::{Ctx, job_json, print_json};
use crate::app::Outcome;
use crate::app::exit::Code;
use crate::app::render::{one_line, red};

/// Waits for `target`, at most `timeout` (awake time), then reports.
pub async fn wait(ctx: &Ctx, target: WaitTarget, timeout: Option<Duration>) -> Outcome {
    let store = ctx.open_read_only()?;
    let watch = QueueWatch::for_store(&ctx.db, store.as_ref());
    if let Some(notice) = watch.notice() {
        eprintln!("note: {notice}");
    }
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let outcome = wait_on(store.as_ref(), &watch, &target, deadline).await?;
    let mut out = io::stdout().lock();
    if ctx.json {
        let jobs = outcome.jobs.iter().map(|j| job_json(j, None)).collect::<Result<Vec<_>, _>>()?;
        let value = serde_json::json!({
            "outcome": verdict(&outcome),
            "jobs": jobs,
            "gone": outcome.gone,
        });
        print_json(&mut out, &value)?;
    } else {
        for line in lines(&outcome, timeout, ctx.color) {
            writeln!(out, "{line}")?;
        }
    }
    out.flush()?;
    Ok(code(&outcome))
}

/// The exit code: a timeout first, then any job that did not end done.
fn code(outcome: &WaitOutcome) -> Code {
    if outcome.timed_out() {
        Code::TimedOut
    } else if outcome.all_done() {
        Code::Success
    } else {
        Code::Failure
    }
}

/// `done`, `failed` or `timed_out`: the JSON's `outcome`, as the exit code.
fn verdict(outcome: &WaitOutcome) -> &'static str {
    match code(outcome) {
        Code::TimedOut => "timed_out",
        Code::Success => "done",
        _ => "failed",
    }
}

/// One line per job that did not end done (`#12 failed: exit 3`), then a
/// count. Done jobs get no line of their own: a wait on a whole queue
/// may cover thousands.
fn lines(outcome: &WaitOutcome, timeout: Option<Duration>, color: bool) -> Vec<String> {
    let mut lines = Vec::new();
    for job in &outcome.jobs {
        match job.state {
            JobState::Done => {}
            JobState::Failed => {
                lines.push(format!("#{} {}: {}", job.id, red("failed", color), failure(job)))
            }
            JobState::Cancelled => lines.push(cancelled(job)),
            JobState::Pending | JobState::Running => {
                lines.push(format!("#{} still {}", job.id, job.state.as_str()))
            }
        }
    }
    for id in &outcome.gone {
        lines.push(format!("#{id} was deleted before it was seen finished"));
    }
    let count = |state: JobState| outcome.jobs.iter().filter(|j| j.state == state).count();
    let total = outcome.jobs.len() + outcome.gone.len();
    let mut parts = vec![format!("{} done", count(JobState::Done))];
    for (n, word) in
        [(count(JobState::Failed), "failed"), (count(JobState::Cancelled), "cancelled")]
    {
        if n > 0 {
            parts.push(format!("{n} {word}"));
        }
    }
    if !outcome.gone.is_empty() {
        parts.push(format!("{} deleted", outcome.gone.len()));
    }
    let unfinished = outcome.unfinished().count();
    let jobs = if total == 1 { "job" } else { "jobs" };
    lines.push(match (outcome.timed_out(), total) {
        (true, _) => format!(
            "timed out after {}: {unfinished} of {total} {jobs} not finished ({})",
            timeout.map_or_else(|| "0s".to_owned(), format_duration),
            parts.join(", ")
        ),
        (false, 0) => "nothing to wait for: no job pending or running".to_owned(),
        (false, _) => format!("{total} {jobs} finished: {}", parts.join(", ")),
    });
    lines
}

/// Why a failed job failed, shortest first: its exit code, else its error.
fn failure(job: &Job) -> String {
    match (job.exit_code, &job.last_error) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(error)) => one_line(error),
        (None, None) => "no reason recorded".to_owned(),
    }
}

/// `#13 cancelled`, with the job whose failure cancelled it when known.
fn cancelled(job: &Job) -> String {
    match job.cancelled_by {
        Some(root) => {
            format!("#{} cancelled: #{root}, which it runs after, did not succeed", job.id)
        }
        None => format!("#{} cancelled", job.id),
    }
}

#[cfg(test)]
mod tests {
    use slothqueue::runner::WaitEnd;
    use slothqueue::{NewJob, Timestamp};

    use super::*;

    fn job(id: i64, state: JobState) -> Job {
        let new = NewJob::shell("true", "/");
        let now = Timestamp::from_millis(0);
        let mut job =
            slothqueue::core::machine::create(id, &new, &[], now, &Default::default()).job;
        job.state = state;
        job
    }

    fn outcome(end: WaitEnd, jobs: Vec<Job>, gone: Vec<i64>) -> WaitOutcome {
        WaitOutcome { end, jobs, gone }
    }

    #[test]
    fn each_job_that_did_not_end_done_gets_a_line() {
        let mut failed = job(12, JobState::Failed);
        failed.exit_code = Some(3);
        failed.last_error = Some("exit code 3".into());
        let mut killed = job(13, JobState::Failed);
        killed.last_error = Some("timeout: exceeded max runtime of 2s\n".into());
        let mut child = job(14, JobState::Cancelled);
        child.cancelled_by = Some(12);
        let o = outcome(
            WaitEnd::Finished,
            vec![job(11, JobState::Done), failed, killed, child],
            vec![15],
        );
        assert_eq!(
            lines(&o, None, false),
            [
                "#12 failed: exit 3",
                "#13 failed: timeout: exceeded max runtime of 2s ",
                "#14 cancelled: #12, which it runs after, did not succeed",
                "#15 was deleted before it was seen finished",
                "5 jobs finished: 1 done, 2 failed, 1 cancelled, 1 deleted",
            ]
        );
        assert_eq!(code(&o), Code::Failure);
        assert_eq!(verdict(&o), "failed");
    }

    #[test]
    fn all_done_exits_0_and_a_timeout_124() {
        let done = outcome(WaitEnd::Finished, vec![job(1, JobState::Done)], vec![]);
        assert_eq!(lines(&done, None, false), ["1 job finished: 1 done"]);
        assert_eq!(code(&done), Code::Success);
        let nothing = outcome(WaitEnd::Finished, vec![], vec![]);
        assert_eq!(
            lines(&nothing, None, false),
            ["nothing to wait for: no job pending or running"]
        );
        assert_eq!(code(&nothing), Code::Success);
        let mut failed = job(3, JobState::Failed);
        failed.exit_code = Some(1);
        let late = outcome(
            WaitEnd::TimedOut,
            vec![job(1, JobState::Done), job(2, JobState::Running), failed],
            vec![],
        );
        assert_eq!(
            lines(&late, Some(Duration::from_secs(5)), false),
            [
                "#2 still running",
                "#3 failed: exit 1",
                "timed out after 5s: 1 of 3 jobs not finished (1 done, 1 failed)",
            ]
        );
        assert_eq!(code(&late), Code::TimedOut, "a timeout wins over a failure");
        assert_eq!(verdict(&late), "timed_out");
    }
}
