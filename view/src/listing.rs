//! How a job reads as a row of a list, in every face: its shown state
//! (`held`, `waiting`, or the state: [`words::state_word`]), what a
//! waiting job waits after (`after #16`, `after 3 jobs`), and what it
//! does in a few words. The CLI's `list` and the HTTP list answer (which
//! the page shows) both take these, so a row says the same everywhere.

use slothqueue_core::{Job, SHELL_KIND};

use crate::words::{self, one_line};

/// What a job waiting on parents waits after, for a list's row: `after
/// #16` when it names one parent, else `after 3 jobs` (the parents not
/// done yet). `None` unless [`words::state_word`] says `waiting` (a held
/// job reads as held, whatever it also waits on).
pub fn waiting_after(job: &Job) -> Option<String> {
    if words::state_word(job) != "waiting" {
        return None;
    }
    Some(match job.after.as_slice() {
        [one] => format!("after #{one}"),
        _ => format!("after {} jobs", job.pending_parents),
    })
}

/// A shell job's command on one line, else its kind: how a job is named
/// beside its id where there is room for a few words only.
pub fn command_or_kind(job: &Job) -> String {
    match job.command() {
        Some(c) if job.kind == SHELL_KIND => one_line(c),
        _ => one_line(&job.kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use slothqueue_core::{JobId, JobState, NewJob, Policy, Stamp, Timestamp, machine};

    /// Job #7 of `new`, after `after`, of which `pending_parents` are not
    /// done yet.
    fn job(new: NewJob, after: &[JobId], pending_parents: u32) -> Job {
        let mut j =
            machine::create(7, &new, &[], Timestamp::from_millis(0), &Policy::default()).job;
        j.after = after.to_vec();
        j.pending_parents = pending_parents;
        j
    }

    #[test]
    fn a_waiting_job_waits_after_its_one_parent_or_a_count() {
        let one = job(NewJob::shell("echo", "/tmp"), &[16], 1);
        assert_eq!(waiting_after(&one).as_deref(), Some("after #16"));
        let three = job(NewJob::shell("echo", "/tmp"), &[3, 4, 5], 2);
        assert_eq!(waiting_after(&three).as_deref(), Some("after 2 jobs"));
    }

    #[test]
    fn only_a_job_shown_as_waiting_waits_after_anything() {
        let mut held = job(NewJob::shell("echo", "/tmp"), &[16], 1);
        held.held = Some(Stamp::new("ana", Timestamp::from_millis(0)));
        assert_eq!(words::state_word(&held), "held");
        assert_eq!(waiting_after(&held), None);
        let due = job(NewJob::shell("echo", "/tmp"), &[16], 0);
        assert_eq!(waiting_after(&due), None, "its parent is done");
        let mut running = job(NewJob::shell("echo", "/tmp"), &[16], 1);
        running.state = JobState::Running;
        assert_eq!(waiting_after(&running), None);
    }

    #[test]
    fn a_row_names_a_shell_jobs_command_and_another_jobs_kind() {
        assert_eq!(command_or_kind(&job(NewJob::shell("echo a\nb", "/tmp"), &[], 0)), "echo a b");
        assert_eq!(command_or_kind(&job(NewJob::new("mail", json!({"to": "x"})), &[], 0)), "mail");
    }
}
