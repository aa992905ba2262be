//! The phrases every face shares: a local time, a span, a stamp, a job
//! named as a parent, a lane's reason, a runner's name and activity.
//! Written once here so that `show`'s text, the JSON `why` and the page
//! word the same fact the same way; the CLI's presenters use them too.

use std::fmt::Write as _;
use std::time::Duration;

use jiff::tz::TimeZone;
use slothqueue_core::{
    Job, JobId, JobState, LaneVerdict, Lanes, Owner, RunnerActivity, RunnerRecord, Stamp,
    Timestamp, WaitCause,
};

fn zoned(t: Timestamp) -> Option<jiff::Zoned> {
    jiff::Timestamp::from_millisecond(t.as_millis()).ok().map(|ts| ts.to_zoned(TimeZone::system()))
}

/// A local time for a story or a table: `12:03:04` when it falls on the
/// same local day as `now`, else `2025-01-02 12:03:04`. The local zone is
/// jiff's system zone, which honours `TZ`.
pub fn local(t: Timestamp, now: Timestamp) -> String {
    match (zoned(t), zoned(now)) {
        (Some(z), Some(n)) if z.date() == n.date() => z.strftime("%H:%M:%S").to_string(),
        (Some(z), _) => z.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        _ => format!("{}ms", t.as_millis()),
    }
}

/// A short human span for "in 4m" style hints: the two largest units.
pub fn format_span(d: Duration) -> String {
    let secs = d.as_secs();
    let (days, hours, mins, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (days, hours, mins) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) if s == 0 => format!("{mins}m"),
        (0, 0, _) => format!("{mins}m{s}s"),
        (0, _, 0) => format!("{hours}h"),
        (0, _, _) => format!("{hours}h{mins}m"),
        (_, 0, _) => format!("{days}d"),
        _ => format!("{days}d{hours}h"),
    }
}

/// Control characters (newlines, escapes) as spaces, so a value cannot
/// break a line or a table, nor drive the terminal.
pub fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// `since 10:02:03 by ana@laptop`: when and by whom a pause or a hold.
pub fn stamp(s: &Stamp, now: Timestamp) -> String {
    format!("since {} by {}", local(s.since, now), one_line(&s.by))
}

/// The word for a job's state in tables and parent lists: `held` for a
/// pending job a user holds (whatever else it waits on: the hold is what
/// a user must undo), `waiting` for one that waits on parents, else the
/// state. (`--json` keeps `"state": "pending"` and adds `held`.)
pub fn state_word(job: &Job) -> &'static str {
    if job.is_held() {
        "held"
    } else if job.is_waiting_on_parents() {
        "waiting"
    } else {
        job.state.as_str()
    }
}

/// A job named as a parent or dependent: `#12 (running, attempt 2)`, or by
/// its key when it has one, `key build-7 (#31, pending)`.
pub fn job_ref(job: &Job) -> String {
    let mut state = state_word(job).to_owned();
    if job.state == JobState::Running {
        let attempt = job.lease.as_ref().map_or(job.attempts, |l| l.attempt);
        let _ = write!(state, ", attempt {attempt}");
    }
    match &job.idempotency_key {
        Some(k) => format!("key {} (#{}, {state})", one_line(k), job.id),
        None => format!("#{} ({state})", job.id),
    }
}

/// Jobs as a list: `a`, `a and b`, `a, b and c`; past `max`, `and N more`
/// (of `total`, which may count jobs not in `jobs`).
pub fn job_list(jobs: &[Job], total: usize, max: usize) -> String {
    let mut names: Vec<String> = jobs.iter().take(max).map(job_ref).collect();
    let rest = total.saturating_sub(names.len());
    if rest > 0 {
        names.push(format!("{rest} more"));
    }
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, init)) => format!("{} and {last}", init.join(", ")),
    }
}

/// Parents listed before their count is cut short.
const MAX_LISTED: usize = 5;

/// What a waiting job waits on: `waiting on #12 (running, attempt 2)`,
/// from its `parents` as the store has them now (the ones not done named).
pub fn waiting_on(job: &Job, parents: &[Job]) -> String {
    let open: Vec<Job> = parents.iter().filter(|p| p.state != JobState::Done).cloned().collect();
    if open.is_empty() {
        return format!("waiting on {} parent(s) not done yet", job.pending_parents);
    }
    let total = open.len().max(job.pending_parents as usize);
    format!("waiting on {}", job_list(&open, total, MAX_LISTED))
}

/// Why a job was cancelled by a dependency and how it comes back, after
/// `cancelled`: ` because dependency #12 failed: `slothqueue retry 12` runs
/// #12 again and brings this job back`. `None` for any other job.
pub fn cancelled_by(job: &Job) -> Option<String> {
    let root = job.cancelled_by.filter(|_| job.state == JobState::Cancelled)?;
    let reason =
        job.last_error.as_deref().map_or_else(|| format!("dependency #{root} ended"), one_line);
    Some(format!(
        "because {reason}: `slothqueue retry {root}` runs #{root} again and brings this job back"
    ))
}

/// Why a lane lets no job of it start, for `show` and `status`: `its
/// queue backups is paused since … by …`, `queue disk is full: 2 of 2
/// running`. `None` for an open lane.
pub fn lane_reason(
    queue: &str,
    verdict: &LaneVerdict,
    lanes: &Lanes,
    now: Timestamp,
) -> Option<String> {
    match verdict {
        LaneVerdict::Open => None,
        LaneVerdict::Paused(p) if lanes.of(queue).paused.is_none() => Some(format!(
            "every queue is paused {} (`slothqueue resume` lets it run)",
            stamp(p, now)
        )),
        LaneVerdict::Paused(p) => Some(format!(
            "its queue {queue} is paused {} (`slothqueue resume --queue {queue}` lets it run)",
            stamp(p, now)
        )),
        LaneVerdict::Full { running, limit } => Some(format!(
            "lane full: {running} of {limit} running in queue {queue} (it starts when one ends; `slothqueue parallel N --queue {queue}` changes the limit)"
        )),
    }
}

/// How a lease owner or a runner is named: `runner pid 4242 on this host`.
pub fn runner_name(owner: &Owner, this_host: &str) -> String {
    let pid = owner.pid.map_or_else(|| owner.id.clone(), |p| format!("pid {p}"));
    if owner.host == this_host {
        format!("runner {pid} on this host")
    } else {
        format!("runner {pid} on {}", owner.host)
    }
}

/// What a runner is doing, in words: `running job #15`; with free slots
/// that wait while it runs some, both: `running job #15; its other slot is
/// waiting: queue backups paused — 2 due jobs waiting (since 12:00:01)`.
/// A closed gate is `waiting on its gate: …`; a paused or full lane is the
/// queue's, not the runner's gate, and reads `waiting: …`.
pub fn activity(record: &RunnerRecord, now: Timestamp) -> String {
    let running = running_jobs(record);
    let free = match &record.activity {
        RunnerActivity::Starting => "starting".to_owned(),
        RunnerActivity::Running { .. } => return running_words(&running),
        RunnerActivity::Gated { reading, since, cause: WaitCause::Gate } => {
            format!("waiting on its gate: {} (since {})", one_line(reading), local(*since, now))
        }
        RunnerActivity::Gated { reading, since, cause: WaitCause::Lanes } => {
            format!("waiting: {} (since {})", one_line(reading), local(*since, now))
        }
        RunnerActivity::Idle { until: Some(t) } => format!("idle until {}", local(*t, now)),
        RunnerActivity::Idle { until: None } => "idle".to_owned(),
    };
    if running.is_empty() {
        return free;
    }
    let slots = match record.slots as usize {
        n if n <= running.len() + 1 && n > 1 => "its other slot is".to_owned(),
        n if n > running.len() + 1 => format!("its {} other slots are", n - running.len()),
        _ => "it is also".to_owned(),
    };
    format!("{}; {slots} {free}", running_words(&running))
}

/// The jobs a record says its runner runs: its `running` list, or, in
/// records written before that was kept, those its `Running` names.
fn running_jobs(record: &RunnerRecord) -> Vec<JobId> {
    match &record.activity {
        _ if !record.running.is_empty() => record.running.clone(),
        RunnerActivity::Running { job, also } => {
            std::iter::once(*job).chain(also.iter().copied()).collect()
        }
        _ => Vec::new(),
    }
}

fn running_words(jobs: &[JobId]) -> String {
    match jobs {
        [] => "running".to_owned(),
        [one] => format!("running job #{one}"),
        many => {
            let names: Vec<String> = many.iter().map(|j| format!("#{j}")).collect();
            format!("running jobs {}", names.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_keep_the_two_largest_units() {
        assert_eq!(format_span(Duration::from_secs(3725)), "1h2m");
        assert_eq!(format_span(Duration::from_secs(59)), "59s");
        assert_eq!(format_span(Duration::from_secs(2 * 86_400 + 3 * 3600)), "2d3h");
    }

    fn record(activity: RunnerActivity, slots: u32, running: Vec<JobId>) -> RunnerRecord {
        RunnerRecord {
            owner: Owner::named("h:42:1:ff"),
            queues: Vec::new(),
            kinds: None,
            refused: Vec::new(),
            started_at: Timestamp::from_millis(0),
            updated_at: Timestamp::from_millis(0),
            activity,
            slots,
            running,
            gpus: None,
        }
    }

    /// With `--slots 2`, one slot running #15 and the other held by a
    /// paused queue: the record says both, and a pause is not a gate.
    #[test]
    fn a_runner_with_free_slots_says_what_runs_and_what_waits() {
        let now = Timestamp::from_millis(60_000);
        let since = Timestamp::from_millis(1_000);
        let paused = RunnerActivity::Gated {
            reading: "queue backups paused — 2 due jobs waiting".into(),
            since,
            cause: WaitCause::Lanes,
        };
        let said = activity(&record(paused.clone(), 2, vec![15]), now);
        assert!(
            said.starts_with(
                "running job #15; its other slot is waiting: queue backups paused — 2 due jobs waiting (since "
            ),
            "{said}"
        );
        assert!(!said.contains("gate"), "{said}");
        let said = activity(&record(paused.clone(), 4, vec![15, 16]), now);
        assert!(
            said.starts_with("running jobs #15, #16; its 2 other slots are waiting: "),
            "{said}"
        );
        let alone = activity(&record(paused, 2, Vec::new()), now);
        assert!(alone.starts_with("waiting: queue backups paused"), "{alone}");
        let gate = RunnerActivity::Gated {
            reading: "load 3.20 >= ceiling 2.00".into(),
            since,
            cause: WaitCause::Gate,
        };
        let said = activity(&record(gate, 2, vec![15]), now);
        assert!(
            said.starts_with("running job #15; its other slot is waiting on its gate: load 3.20"),
            "{said}"
        );
    }

    /// Records written before `running` was kept still name their jobs.
    #[test]
    fn an_older_running_record_names_its_jobs() {
        let now = Timestamp::from_millis(0);
        let old = record(RunnerActivity::Running { job: 7, also: vec![8] }, 1, Vec::new());
        assert_eq!(activity(&old, now), "running jobs #7, #8");
        // A gate, one slot, nothing running: the JSON older builds wrote
        // and read, field for field.
        let gated =
            RunnerActivity::Gated { reading: "load 3".into(), since: now, cause: WaitCause::Gate };
        let json = serde_json::to_value(record(gated, 1, Vec::new())).unwrap();
        for field in ["slots", "running", "cause"] {
            assert!(!json.to_string().contains(field), "{json}");
        }
        let read: RunnerRecord = serde_json::from_value(json).unwrap();
        assert_eq!(read.slots, 1);
        assert!(matches!(read.activity, RunnerActivity::Gated { cause: WaitCause::Gate, .. }));
    }

    #[test]
    fn a_value_cannot_break_a_line() {
        assert_eq!(one_line("a\nb\u{1b}[2J"), "a b [2J");
    }
}
