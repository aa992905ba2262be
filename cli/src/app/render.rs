//! How jobs, trails and counts read as text. Pure functions of their
//! input (and `now`), so the words can be tested without a queue.
//!
//! **API Boundary:** these lines are what people read and scripts
//! sometimes grep; `--json` is the stable format for scripts.

use std::fmt::Write as _;

use slothqueue::{Event, EventKind, Job, JobState, Stats, Timestamp};

use super::duration;
use super::time::local;

/// Red, for FAILED and failed; only when colour is on.
pub fn red(s: &str, color: bool) -> String {
    if color { format!("\x1b[31m{s}\x1b[0m") } else { s.to_owned() }
}

/// The `added job …` line.
pub fn added(job: &Job, now: Timestamp) -> String {
    let mut parts = Vec::new();
    if job.kind != slothqueue::core::SHELL_KIND {
        parts.push(format!("kind {}", job.kind));
    }
    if job.queue != slothqueue::core::DEFAULT_QUEUE {
        parts.push(format!("queue {}", job.queue));
    }
    parts.push(format!("priority {}", job.priority));
    parts.push(match job.max_runtime {
        Some(d) => format!("max runtime {}", duration::format(d)),
        None => "no max runtime".to_owned(),
    });
    if job.not_before > now {
        parts.push(format!("due {}", local(job.not_before, now)));
    }
    format!("added job #{} ({})", job.id, parts.join(", "))
}

/// `host:pid` from an owner id (`host:pid:start:random`), as trails show it.
pub fn owner_short(id: &str) -> String {
    let mut parts = id.splitn(3, ':');
    match (parts.next(), parts.next()) {
        (Some(host), Some(pid)) if pid.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{host}:{pid}")
        }
        _ => id.to_owned(),
    }
}

/// One event of a trail as a line of the story: `12:03:05 claimed by host:pid (attempt 1)`.
pub fn event_line(e: &Event, now: Timestamp) -> String {
    let mut line = format!("{} {}", local(e.at, now), e.kind);
    match e.kind {
        EventKind::Claimed => {
            if let Some(o) = &e.owner {
                let _ = write!(line, " by {}", owner_short(o));
            }
            if let Some(a) = e.attempt {
                let _ = write!(line, " (attempt {a})");
            }
        }
        EventKind::Failed => {
            if let Some(a) = e.attempt {
                let _ = write!(line, " (attempt {a})");
            }
            if let Some(m) = &e.message {
                let _ = write!(line, ": {}", one_line(m));
            }
            match e.retry_at {
                Some(t) => {
                    let _ = write!(line, "; retry at {}", local(t, now));
                }
                None => line.push_str("; no attempts left"),
            }
            return line;
        }
        _ => {}
    }
    match &e.message {
        // `superseded by #5` says it all; `superseded: superseded by #5` stutters.
        Some(m) if m.starts_with(e.kind.as_str()) => {
            format!("{} {}", local(e.at, now), one_line(m))
        }
        Some(m) => {
            let _ = write!(line, ": {}", one_line(m));
            line
        }
        None => line,
    }
}

/// Control characters (newlines, escapes) as spaces, so a value cannot
/// break a line or a table, nor drive the terminal.
pub fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// What a job does, in a few words: the command, or `kind payload`.
pub fn what(job: &Job) -> String {
    match job.command() {
        Some(c) if job.kind == slothqueue::core::SHELL_KIND => one_line(c),
        _ => one_line(&format!("[{}] {}", job.kind, job.payload)),
    }
}

/// The header of `show`: what the job is and where it stands.
pub fn job_details(job: &Job, now: Timestamp, color: bool) -> String {
    let mut out = String::new();
    let state = if job.state == JobState::Failed {
        red(job.state.as_str(), color)
    } else {
        job.state.as_str().to_owned()
    };
    let _ = writeln!(out, "job #{}: {state}", job.id);
    if job.kind == slothqueue::core::SHELL_KIND {
        let _ = writeln!(out, "command:      {}", job.command().map(one_line).unwrap_or_default());
        if let Some(cwd) = job.payload.get("cwd").and_then(|c| c.as_str()) {
            let _ = writeln!(out, "cwd:          {}", one_line(cwd));
        }
        if let Some(env) = job.payload.get("env").and_then(|e| e.as_object()) {
            if !env.is_empty() {
                let names: Vec<&str> = env.keys().map(String::as_str).collect();
                let _ = writeln!(out, "env:          {}", names.join(", "));
            }
        }
    } else {
        let _ = writeln!(out, "kind:         {}", job.kind);
        let _ = writeln!(out, "payload:      {}", one_line(&job.payload.to_string()));
    }
    let _ = writeln!(out, "queue:        {}", job.queue);
    let _ = writeln!(out, "priority:     {}", job.priority);
    let _ = writeln!(out, "attempts:     {} of {}", job.attempts, job.max_attempts);
    let _ = writeln!(
        out,
        "max runtime:  {}",
        job.max_runtime.map_or_else(|| "none".to_owned(), duration::format)
    );
    if let Some(k) = &job.idempotency_key {
        let _ = writeln!(out, "key:          {}", one_line(k));
    }
    if job.is_waiting_on_parents() {
        let not_before = if job.not_before > now {
            format!(", and not before {}", due(job, now))
        } else {
            String::new()
        };
        let _ = writeln!(out, "due:          once its parents are done{not_before}");
    } else if job.state == JobState::Pending {
        let _ = writeln!(out, "due:          {}", due(job, now));
    }
    if let Some(code) = job.exit_code {
        let _ = writeln!(out, "exit code:    {code}");
    }
    if let Some(r) = &job.result {
        let _ = writeln!(out, "result:       {}", one_line(r));
    }
    if let Some(e) = &job.last_error {
        let _ = writeln!(out, "last error:   {}", one_line(e));
    }
    out
}

/// The word for a job's state in tables and parent lists: `waiting` for
/// a pending job that waits on parents, else the state.
pub fn state_word(job: &Job) -> &'static str {
    if job.is_waiting_on_parents() { "waiting" } else { job.state.as_str() }
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

/// `now` or the local due time with how long until then.
pub fn due(job: &Job, now: Timestamp) -> String {
    if job.not_before <= now {
        "now".to_owned()
    } else {
        format!(
            "{} (in {})",
            local(job.not_before, now),
            duration::format_span(job.not_before.duration_since(now))
        )
    }
}

/// `status`'s counts, one `name: n` line each, in the seed's words; the
/// pending jobs waiting on parents said beside their count, when any.
pub fn stats(s: &Stats, now: Timestamp) -> String {
    let mut out = String::new();
    let _ = write!(out, "pending: {}", s.pending);
    if s.waiting_on_parents > 0 {
        let _ = write!(out, " ({} waiting on parents)", s.waiting_on_parents);
    }
    out.push('\n');
    for (name, n) in
        [("running", s.running), ("done", s.done), ("failed", s.failed), ("cancelled", s.cancelled)]
    {
        let _ = writeln!(out, "{name}: {n}");
    }
    let _ = writeln!(out, "due now: {}", s.due_now);
    match s.next_due {
        Some(t) => {
            let _ = writeln!(
                out,
                "next due: {} (in {})",
                local(t, now),
                duration::format_span(t.duration_since(now))
            );
        }
        None => out.push_str("next due: none\n"),
    }
    out
}

/// The columns of `list`.
const HEADERS: [&str; 6] = ["ID", "STATE", "PRI", "ATT", "WHEN", "COMMAND"];

/// `list`'s table, sized to `width` columns by truncating the command
/// (`None`: no limit, as when writing to a pipe).
pub fn table(jobs: &[Job], now: Timestamp, width: Option<usize>, color: bool) -> String {
    let show_queue = jobs.iter().any(|j| j.queue != slothqueue::core::DEFAULT_QUEUE);
    let rows: Vec<[String; 7]> = jobs
        .iter()
        .map(|j| {
            [
                format!("#{}", j.id),
                state_word(j).to_owned(),
                j.priority.to_string(),
                format!("{}/{}", j.attempts, j.max_attempts),
                when(j, now),
                j.queue.clone(),
                what(j),
            ]
        })
        .collect();
    let header: [String; 7] = [
        HEADERS[0].into(),
        HEADERS[1].into(),
        HEADERS[2].into(),
        HEADERS[3].into(),
        HEADERS[4].into(),
        "QUEUE".into(),
        HEADERS[5].into(),
    ];
    let mut widths = [0usize; 7];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let fixed: usize = widths[..6]
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 5 || show_queue)
        .map(|(_, w)| w + 2)
        .sum();
    let command_width = width.map(|w| w.saturating_sub(fixed).max(12));
    let mut out = String::new();
    for (n, row) in std::iter::once(&header).chain(&rows).enumerate() {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i == 5 && !show_queue {
                continue;
            }
            if i == 6 {
                line.push_str(&truncate(cell, command_width));
                continue;
            }
            let padded = if i == 0 || i == 2 {
                format!("{cell:>w$}  ", w = widths[i])
            } else {
                format!("{cell:<w$}  ", w = widths[i])
            };
            if i == 1 && n > 0 && cell == "failed" {
                line.push_str(&red(cell, color));
                line.push_str(&padded[cell.len()..]);
            } else {
                line.push_str(&padded);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn when(job: &Job, now: Timestamp) -> String {
    if job.is_waiting_on_parents() {
        return match job.after.as_slice() {
            [one] => format!("after #{one}"),
            _ => format!("after {} jobs", job.pending_parents),
        };
    }
    match job.state {
        JobState::Pending if job.not_before <= now => "due now".to_owned(),
        JobState::Pending => format!("due {}", local(job.not_before, now)),
        JobState::Running => {
            format!("since {}", local(job.started_at.unwrap_or(job.created_at), now))
        }
        _ => local(job.finished_at.unwrap_or(job.created_at), now),
    }
}

fn truncate(s: &str, width: Option<usize>) -> String {
    match width {
        Some(w) if s.chars().count() > w => {
            let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
            t.push('…');
            t
        }
        _ => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_shorten_to_host_and_pid() {
        assert_eq!(owner_short("box:4242:123:00ff"), "box:4242");
        assert_eq!(owner_short("worker-7"), "worker-7");
    }

    #[test]
    fn control_characters_cannot_break_lines() {
        assert_eq!(one_line("a\nb\x1b[31m"), "a b [31m");
    }

    #[test]
    fn jobs_are_named_by_key_when_they_have_one_and_lists_are_cut_short() {
        let policy = slothqueue::Policy::default();
        let now = Timestamp::from_millis(1_700_000_000_000);
        let new = |key: Option<&str>| {
            let mut n = slothqueue::NewJob::shell("true", "/");
            n.idempotency_key = key.map(str::to_owned);
            n
        };
        let plain = slothqueue::core::machine::create(12, &new(None), &[], now, &policy).job;
        let keyed =
            slothqueue::core::machine::create(31, &new(Some("build-7")), &[], now, &policy).job;
        let waiting = slothqueue::core::machine::create(
            40,
            &new(None).after(12),
            std::slice::from_ref(&plain),
            now,
            &policy,
        )
        .job;
        assert_eq!(job_ref(&plain), "#12 (pending)");
        assert_eq!(job_ref(&keyed), "key build-7 (#31, pending)");
        assert_eq!(job_ref(&waiting), "#40 (waiting)");
        let three = [plain.clone(), keyed.clone(), waiting.clone()];
        assert_eq!(job_list(&three[..1], 1, 5), "#12 (pending)");
        assert_eq!(
            job_list(&three, 3, 5),
            "#12 (pending), key build-7 (#31, pending) and #40 (waiting)"
        );
        assert_eq!(job_list(&three, 9, 2), "#12 (pending), key build-7 (#31, pending) and 7 more");
        assert_eq!(waiting_on(&waiting, &three[..1]), "waiting on #12 (pending)");
        assert!(cancelled_by(&waiting).is_none(), "only a job a dependency cancelled");
    }

    #[test]
    fn status_says_how_many_pending_jobs_wait_on_parents_only_when_some_do() {
        let now = Timestamp::from_millis(1_700_000_000_000);
        let mut s = Stats { pending: 3, ..Stats::default() };
        assert!(stats(&s, now).starts_with("pending: 3\nrunning: 0\n"));
        s.waiting_on_parents = 2;
        assert!(stats(&s, now).starts_with("pending: 3 (2 waiting on parents)\nrunning: 0\n"));
    }

    #[test]
    fn long_commands_are_truncated_to_the_width() {
        assert_eq!(truncate("abcdefgh", Some(5)), "abcd…");
        assert_eq!(truncate("abc", Some(5)), "abc");
        assert_eq!(truncate("abcdefgh", None), "abcdefgh");
    }
}
