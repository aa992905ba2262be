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
//!
//! The wait keeps each job's id and state, not the job; what the report
//! says of a job that did not end done (its exit code, its error, the
//! job whose failure cancelled it) is read by id at the end, one job at a
//! time, as is every job of the JSON, written as it is read: a wait on a
//! queue of 200,000 holds ids, never 200,000 jobs.

use std::io::{self, Write};
use std::time::Duration;

use slothqueue::runner::wait::{WaitOutcome, WaitTarget, Waited, wait as wait_on};
use slothqueue::runner::{QueueWatch, format_duration};
use slothqueue::{Job, JobState};

use super::read_back::ReadBack;
use super::{Ctx, job_json};
use crate::app::Outcome;
use crate::app::exit::Code;
use crate::app::render::{one_line, red};

/// Waits for `target`, at most `timeout` (awake time), then reports.
pub async fn wait(ctx: &Ctx, target: WaitTarget, timeout: Option<Duration>) -> Outcome {
    let store = ctx.open_read_only()?;
    let watch = QueueWatch::for_store(&ctx.db, store.as_ref());
    if let Some(notice) = watch.notice() {
        crate::app::exit::say(&format!("note: {notice}"));
    }
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let outcome = wait_on(store.as_ref(), &watch, &target, deadline).await?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    let mut jobs = ReadBack::new(store.as_ref());
    if ctx.json {
        write_json(&mut out, &mut jobs, &outcome).await?;
    } else {
        for waited in &outcome.jobs {
            let job = match waited.state {
                JobState::Failed | JobState::Cancelled => read(&mut jobs, waited.id).await?,
                _ => None,
            };
            if let Some(line) = job_line(waited, job.as_ref(), ctx.color) {
                writeln!(out, "{line}")?;
            }
        }
        for id in &outcome.gone {
            writeln!(out, "#{id} was deleted before it was seen finished")?;
        }
        writeln!(out, "{}", summary(&outcome, timeout))?;
    }
    out.flush()?;
    Ok(code(&outcome))
}

/// Job `id` as the store has it now; `None` when it was deleted since
/// the wait saw it (its line then says what the wait saw, without why).
async fn read(jobs: &mut ReadBack<'_>, id: i64) -> anyhow::Result<Option<Job>> {
    jobs.job(id).await.map_err(|e| anyhow::Error::new(e).context(format!("cannot read job #{id}")))
}

/// `{"outcome": …, "jobs": […], "gone": […]}` (and `"cut_short": true`
/// when the deadline came during the first look), each job read and written
/// in turn (as `show --json` has it; one deleted since the wait saw it is
/// its id and the state seen).
async fn write_json(
    out: &mut impl Write,
    jobs: &mut ReadBack<'_>,
    outcome: &WaitOutcome,
) -> anyhow::Result<()> {
    write!(out, "{{\"outcome\":{},\"jobs\":[", serde_json::to_string(verdict(outcome))?)?;
    for (i, waited) in outcome.jobs.iter().enumerate() {
        if i > 0 {
            write!(out, ",")?;
        }
        let value = match read(jobs, waited.id).await? {
            Some(job) => job_json(&job, None)?,
            None => serde_json::json!({"id": waited.id, "state": waited.state}),
        };
        serde_json::to_writer(&mut *out, &value)?;
    }
    write!(out, "],\"gone\":")?;
    serde_json::to_writer(&mut *out, &outcome.gone)?;
    if outcome.cut_short {
        // The jobs are those its first look saw before the deadline.
        write!(out, ",\"cut_short\":true")?;
    }
    writeln!(out, "}}")?;
    Ok(())
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

/// The line of a job that did not end done (`#12 failed: exit 3`), from
/// the state the wait saw and, for a failed or cancelled one, the job as
/// read at the end (`None` when it is gone since); none for a done job:
/// a wait on a whole queue may cover thousands.
fn job_line(waited: &Waited, job: Option<&Job>, color: bool) -> Option<String> {
    let id = waited.id;
    Some(match waited.state {
        JobState::Done => return None,
        JobState::Failed => match job {
            Some(job) => format!("#{id} {}: {}", red("failed", color), failure(job)),
            None => format!("#{id} {}", red("failed", color)),
        },
        JobState::Cancelled => cancelled(id, job),
        JobState::Pending | JobState::Running => format!("#{id} still {}", waited.state.as_str()),
    })
}

/// The last line: how many jobs ended how, or how many were not finished
/// when the wait timed out.
fn summary(outcome: &WaitOutcome, timeout: Option<Duration>) -> String {
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
    match (outcome.timed_out(), total) {
        (true, _) if outcome.cut_short => format!(
            "timed out after {} during its first look: {unfinished} of the {total} {jobs} it saw not finished ({})",
            timeout.map_or_else(|| "0s".to_owned(), format_duration),
            parts.join(", ")
        ),
        (true, _) => format!(
            "timed out after {}: {unfinished} of {total} {jobs} not finished ({})",
            timeout.map_or_else(|| "0s".to_owned(), format_duration),
            parts.join(", ")
        ),
        (false, 0) => "nothing to wait for: no job pending or running".to_owned(),
        (false, _) => format!("{total} {jobs} finished: {}", parts.join(", ")),
    }
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
fn cancelled(id: i64, job: Option<&Job>) -> String {
    match job.and_then(|j| j.cancelled_by) {
        Some(root) => format!("#{id} cancelled: #{root}, which it runs after, did not succeed"),
        None => format!("#{id} cancelled"),
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

    fn outcome(end: WaitEnd, jobs: &[Job], gone: Vec<i64>) -> WaitOutcome {
        let jobs = jobs.iter().map(|j| Waited { id: j.id, state: j.state }).collect();
        WaitOutcome { end, jobs, gone, cut_short: false }
    }

    /// The lines `wait` prints for `o`, each job as `jobs` has it.
    fn lines(o: &WaitOutcome, jobs: &[Job], timeout: Option<Duration>) -> Vec<String> {
        let mut lines: Vec<String> = o
            .jobs
            .iter()
            .filter_map(|w| job_line(w, jobs.iter().find(|j| j.id == w.id), false))
            .collect();
        lines.extend(
            o.gone.iter().map(|id| format!("#{id} was deleted before it was seen finished")),
        );
        lines.push(summary(o, timeout));
        lines
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
        let jobs = [job(11, JobState::Done), failed, killed, child];
        let o = outcome(WaitEnd::Finished, &jobs, vec![15]);
        assert_eq!(
            lines(&o, &jobs, None),
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
        assert_eq!(
            lines(&o, &jobs[..1], None)[..3],
            ["#12 failed", "#13 failed", "#14 cancelled"],
            "a job deleted since the wait saw it: what the wait saw"
        );
    }

    #[test]
    fn all_done_exits_0_and_a_timeout_124() {
        let one = [job(1, JobState::Done)];
        let done = outcome(WaitEnd::Finished, &one, vec![]);
        assert_eq!(lines(&done, &one, None), ["1 job finished: 1 done"]);
        assert_eq!(code(&done), Code::Success);
        let nothing = outcome(WaitEnd::Finished, &[], vec![]);
        assert_eq!(lines(&nothing, &[], None), ["nothing to wait for: no job pending or running"]);
        assert_eq!(code(&nothing), Code::Success);
        let mut failed = job(3, JobState::Failed);
        failed.exit_code = Some(1);
        let jobs = [job(1, JobState::Done), job(2, JobState::Running), failed];
        let late = outcome(WaitEnd::TimedOut, &jobs, vec![]);
        assert_eq!(
            lines(&late, &jobs, Some(Duration::from_secs(5))),
            [
                "#2 still running",
                "#3 failed: exit 1",
                "timed out after 5s: 1 of 3 jobs not finished (1 done, 1 failed)",
            ]
        );
        assert_eq!(code(&late), Code::TimedOut, "a timeout wins over a failure");
        assert_eq!(verdict(&late), "timed_out");
        let cut = WaitOutcome { cut_short: true, ..late };
        assert_eq!(
            lines(&cut, &jobs, Some(Duration::from_secs(5))).last().unwrap(),
            "timed out after 5s during its first look: 1 of the 3 jobs it saw not finished (1 done, 1 failed)"
        );
    }
}
