//! How jobs, trails and counts read as text. Pure functions of their
//! input (and `now`), so the words can be tested without a queue.
//!
//! **API Boundary:** these lines are what people read and scripts
//! sometimes grep; `--json` is the stable format for scripts.

use std::fmt::Write as _;

use slothqueue::core::machine::NOT_RETRIED;
use slothqueue::core::{LaneScope, LaneSettings, QueuesReport, Schedule, Stamp};
use slothqueue::{Event, EventKind, Job, JobState, Stats, Timestamp};

use super::duration;
use super::time::local;

// The phrases `show`'s why shares with every face, written once in the
// read model; re-exported so each presenter here names them as before.
pub use slothqueue_view::words::{cancelled_by, job_list, one_line, stamp, state_word, waiting_on};

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
    if let Some(g) = &job.gpus {
        parts.push(format!("needs {}", g.words()));
    }
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
                // A permanent failure's message already says it was not
                // retried (`machine::NOT_RETRIED`), attempts left or not.
                None if e.message.as_deref().is_some_and(|m| m.ends_with(NOT_RETRIED)) => {}
                None => line.push_str("; no attempts left"),
            }
            return line;
        }
        _ => {}
    }
    match &e.message {
        // `superseded by #5` says it all; `superseded: superseded by #5`
        // stutters (and `cloned_as: cloned as #6`).
        Some(m) if m.starts_with(&e.kind.as_str().replace('_', " ")) => {
            format!("{} {}", local(e.at, now), one_line(m))
        }
        Some(m) => {
            let _ = write!(line, ": {}", one_line(m));
            line
        }
        None => line,
    }
}

/// What a job does, in a few words: the command, or `kind payload`.
pub fn what(job: &Job) -> String {
    match job.command() {
        Some(c) if job.kind == slothqueue::core::SHELL_KIND => one_line(c),
        _ => one_line(&format!("[{}] {}", job.kind, job.payload)),
    }
}

/// The header of `show`: what the job is and where it stands; a shell
/// job's environment masked unless `show_secrets`.
pub fn job_details(job: &Job, now: Timestamp, color: bool, show_secrets: bool) -> String {
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
        out.push_str(&environment(&job.payload, show_secrets));
        out.push_str(&limits_asked(&job.payload));
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
    if let Some(g) = &job.gpus {
        let _ = writeln!(out, "gpus:         {}", g.words());
    }
    if let Some(l) = job.lease.as_ref().filter(|l| !l.gpus.is_empty()) {
        let _ = writeln!(out, "holds:        {}", slothqueue::core::gpu::holds_words(&l.gpus));
    }
    if let Some(k) = &job.idempotency_key {
        let _ = writeln!(out, "key:          {}", one_line(k));
    }
    if let Some(h) = job.held.as_ref().filter(|_| job.is_held()) {
        let _ = writeln!(out, "held:         {}", stamp(h, now));
        let _ = writeln!(out, "due:          once released (slothqueue release {})", job.id);
    } else if job.is_waiting_on_parents() {
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

/// A shell job's environment as it will run with it: for an exact one
/// (what `add` records) every variable, for an inheriting one (recorded
/// before `add` captured environments, or enqueued over HTTP without
/// `"env_mode": "exact"`) the runner's, with the payload's own laid over
/// it. One `  NAME=value` line a variable, secret-looking values masked
/// unless `show_secrets`.
pub fn environment(payload: &serde_json::Value, show_secrets: bool) -> String {
    let shown =
        if show_secrets { payload.clone() } else { slothqueue::core::shell::masked(payload) };
    let vars: Vec<(&String, &serde_json::Value)> = shown
        .get("env")
        .and_then(|e| e.as_object())
        .map(|e| e.iter().collect())
        .unwrap_or_default();
    let mut out = match slothqueue::core::EnvMode::of(payload) {
        Ok(slothqueue::core::EnvMode::Exact) if vars.is_empty() => {
            "env:          only SLOTHQUEUE_* (nothing else was recorded)\n".to_owned()
        }
        Ok(slothqueue::core::EnvMode::Exact) => "env (exactly, plus SLOTHQUEUE_*):\n".to_owned(),
        Ok(slothqueue::core::EnvMode::Inherit) => {
            let (with, end) =
                if vars.is_empty() { ("", "") } else { (", with these over it", ":") };
            format!(
                "env:          the runner's{with} (added before slothqueue recorded environments, or over HTTP without \"env_mode\": \"exact\"){end}\n"
            )
        }
        Err(e) => format!("env:          unreadable ({})\n", one_line(&e)),
    };
    for (name, value) in vars {
        let value = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
        let _ = writeln!(out, "  {}={}", one_line(name), one_line(&value));
    }
    out
}

/// The `limits:` line of a shell job: what it asks for itself, or that its
/// runner's defaults apply (what is in force is the runner's to say).
pub fn limits_asked(payload: &serde_json::Value) -> String {
    match slothqueue::core::Limits::of(payload) {
        Ok(l) if l.is_empty() => "limits:       the runner's defaults\n".to_owned(),
        Ok(l) => format!("limits:       asked: {l}\n"),
        Err(e) => format!("limits:       unreadable ({})\n", one_line(&e)),
    }
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
    let mut of_pending = Vec::new();
    if s.waiting_on_parents > 0 {
        of_pending.push(format!("{} waiting on parents", s.waiting_on_parents));
    }
    if s.held > 0 {
        of_pending.push(format!("{} held", s.held));
    }
    if !of_pending.is_empty() {
        let _ = write!(out, " ({})", of_pending.join(", "));
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

/// `3 due jobs`, `1 due job`.
fn due_jobs(n: u64) -> String {
    if n == 1 { "1 due job".to_owned() } else { format!("{n} due jobs") }
}

/// What `parallel` prints: `queue disk: at most 2 at once` or `queue
/// disk: no limit`, and the pause when the lane is paused too.
pub fn limit_line(queue: &str, settings: &LaneSettings, now: Timestamp) -> String {
    let mut line = match settings.limit {
        0 => format!("queue {queue}: no limit"),
        n => format!("queue {queue}: at most {n} at once"),
    };
    if let Some(p) = &settings.paused {
        let _ = write!(line, " (paused {})", stamp(p, now));
    }
    line
}

/// What `pause` prints: `queue backups paused (3 due jobs wait; running
/// jobs go on)`, or, when it was paused before (the first pause's stamp
/// is kept), `queue backups was already paused since … by …`.
pub fn paused_line(
    scope: &LaneScope,
    paused: Option<&Stamp>,
    mine: &Stamp,
    due: u64,
    now: Timestamp,
) -> String {
    let verb = if due == 1 { "waits" } else { "wait" };
    let counts = format!("({} {verb}; running jobs go on)", due_jobs(due));
    match paused {
        Some(p) if p != mine => format!("{scope} was already paused {} {counts}", stamp(p, now)),
        _ => format!("{scope} paused {counts}"),
    }
}

/// What `resume` prints: `queue backups resumed (3 due jobs may start)`
/// or `queue backups was not paused`, and what stays paused: the pause of
/// every queue after a queue's resume, the queues paused on their own
/// after the resume of every queue.
pub fn resumed_line(
    scope: &LaneScope,
    was_paused: bool,
    after: &slothqueue::core::Lanes,
    due: u64,
    now: Timestamp,
) -> String {
    let mut line = if was_paused {
        format!("{scope} resumed ({} may start)", due_jobs(due))
    } else {
        format!("{scope} was not paused")
    };
    match scope {
        LaneScope::Queue(_) => {
            if let Some(all) = &after.all_paused {
                let _ = write!(
                    line,
                    "; every queue is still paused {} (`slothqueue resume` lifts that)",
                    stamp(all, now)
                );
            }
        }
        LaneScope::All => {
            let own: Vec<&str> = after
                .queues
                .iter()
                .filter(|(_, s)| s.paused.is_some())
                .map(|(q, _)| q.as_str())
                .collect();
            if !own.is_empty() {
                let _ = write!(
                    line,
                    "; still paused on their own: {} (`slothqueue resume --queue Q`)",
                    own.join(", ")
                );
            }
        }
    }
    line
}

/// `status`'s lines about lanes with settings: the pause of every queue,
/// then each lane paused or limited, with what waits on it.
pub fn lanes_lines(report: &QueuesReport, now: Timestamp) -> String {
    let mut out = String::from("lanes:\n");
    if let Some(all) = &report.all_paused {
        let _ = writeln!(out, "  every queue: paused {} (`slothqueue resume`)", stamp(all, now));
    }
    for q in report.queues.iter().filter(|q| q.limit > 0 || q.paused.is_some()) {
        let c = &q.counts;
        let mut parts = Vec::new();
        if let Some(p) = &q.paused {
            parts.push(format!("paused {}", stamp(p, now)));
        }
        if q.limit > 0 {
            let full = if q.is_full() { "full: " } else { "" };
            parts.push(format!("{full}{} of {} running", c.running, q.limit));
        }
        let mut line = format!("  {}: {}", c.queue, parts.join(", "));
        if c.due > 0 {
            let verb = if c.due == 1 { "waits" } else { "wait" };
            let _ = write!(line, "; {} {verb}", due_jobs(c.due));
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The columns of `queues`.
const QUEUE_HEADERS: [&str; 7] = ["QUEUE", "PENDING", "DUE", "HELD", "RUNNING", "LIMIT", "PAUSED"];

/// `queues`' table: one row per lane, then a line when every queue is
/// paused. Numbers right-aligned; `-` for no limit and not paused.
pub fn queues_table(report: &QueuesReport, now: Timestamp) -> String {
    let mut out = String::new();
    if report.queues.is_empty() {
        out.push_str("no queues: no pending or running job, no limit, no pause\n");
    } else {
        let rows: Vec<[String; 7]> = report
            .queues
            .iter()
            .map(|q| {
                let c = &q.counts;
                [
                    c.queue.clone(),
                    c.pending.to_string(),
                    c.due.to_string(),
                    c.held.to_string(),
                    c.running.to_string(),
                    if q.limit == 0 { "-".to_owned() } else { q.limit.to_string() },
                    q.paused.as_ref().map_or_else(|| "-".to_owned(), |p| stamp(p, now)),
                ]
            })
            .collect();
        let header = QUEUE_HEADERS.map(str::to_owned);
        let mut widths = [0usize; 7];
        for row in std::iter::once(&header).chain(&rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&header).chain(&rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i == 0 || i == 6 {
                    let _ = write!(line, "{cell:<w$}  ", w = widths[i]);
                } else {
                    let _ = write!(line, "{cell:>w$}  ", w = widths[i]);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    if let Some(all) = &report.all_paused {
        let _ = writeln!(
            out,
            "every queue is paused {} (`slothqueue resume` lifts it)",
            stamp(all, now)
        );
    }
    out
}

/// A pause of a schedule, its time read in the schedule's zone: `since
/// 2026-12-01 22:00:00 CET by ana@laptop`.
fn schedule_stamp(s: &Schedule, p: &Stamp) -> String {
    format!("since {} by {}", s.local(p.since), one_line(&p.by))
}

/// When a schedule fires next, for `every`'s line: `next 2026-12-02
/// 03:00:00 CET (in 4h59m)`, `paused since … by …`, or that no slot is
/// left.
fn next_tick(s: &Schedule, now: Timestamp) -> String {
    if let Some(p) = &s.paused {
        return format!("paused {}", schedule_stamp(s, p));
    }
    match s.next_fire() {
        Some(t) => {
            format!("next {} (in {})", s.local(t), duration::format_span(t.duration_since(now)))
        }
        None => "no slot left to fire".to_owned(),
    }
}

/// What `every` prints: `schedule nightly: 0 3 * * * in Europe/Berlin,
/// next 2026-12-02 03:00:00 CET (in 4h59m)`, and when the same definition
/// was stored already, that nothing changed.
pub fn schedule_line(s: &Schedule, created: bool, now: Timestamp) -> String {
    let mut line = format!("schedule {}: {} in {}, {}", s.key, s.spec, s.zone, next_tick(s, now));
    if !created {
        line.push_str(" (unchanged: the same definition was stored already)");
    }
    line
}

/// What `every --pause` and `--resume` print: the schedule as it is now,
/// and whether the change changed anything (a second pause keeps the
/// first one's stamp; a resume of a running schedule does nothing).
pub fn schedule_changed(
    s: &Schedule,
    mine: Option<&Stamp>,
    was_paused: bool,
    now: Timestamp,
) -> String {
    match (mine, &s.paused) {
        (Some(mine), Some(p)) if p != mine => {
            format!("schedule {} was already paused {}", s.key, schedule_stamp(s, p))
        }
        (Some(_), _) => format!(
            "schedule {} paused: no tick fires until `slothqueue every --resume {}`",
            s.key, s.key
        ),
        (None, _) if was_paused => format!(
            "schedule {} resumed, {} (the slots passed while paused are not run)",
            s.key,
            next_tick(s, now)
        ),
        (None, _) => format!("schedule {} was not paused, {}", s.key, next_tick(s, now)),
    }
}

/// What a schedule's job runs, in a few words: the command, or `[kind]
/// payload`.
fn what_new(job: &slothqueue::NewJob) -> String {
    let command = job.payload.get("command").and_then(|c| c.as_str());
    match command {
        Some(c) if job.kind == slothqueue::core::SHELL_KIND => one_line(c),
        _ => one_line(&format!("[{}] {}", job.kind, job.payload)),
    }
}

/// The `schedule:` line of `show` for a tick's job: `nightly, slot
/// 2026-12-02 03:00:00 CET`, the slot in the schedule's zone while it is
/// stored, else in UTC and saying so.
pub fn tick_slot(key: &str, slot: Timestamp, stored: Option<&Schedule>) -> String {
    match stored {
        Some(s) => format!("{}, slot {}", one_line(key), s.local(slot)),
        None => {
            let utc = jiff::Timestamp::from_millisecond(slot.as_millis()).map_or_else(
                |_| format!("{}ms", slot.as_millis()),
                |t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
            );
            format!("{}, slot {utc} (no schedule {} is stored now)", one_line(key), one_line(key))
        }
    }
}

/// `status`' line of schedules, when there is any: `schedules: 2 (next
/// tick nightly at 2026-12-02 03:00:00 CET, in 3h46m; 1 paused)`; `next`
/// is the one whose slot comes first.
pub fn schedules_status(
    all: &[Schedule],
    next: Option<&Schedule>,
    now: Timestamp,
) -> Option<String> {
    if all.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if let Some((s, t)) = next.and_then(|s| s.next_fire().map(|t| (s, t))) {
        // A slot already passed waits for a runner: `in 0s` forever would
        // hide that nobody fires it.
        let when = if t <= now {
            format!(
                "due {} ago, fired when a runner runs",
                duration::format_span(now.duration_since(t))
            )
        } else {
            format!("in {}", duration::format_span(t.duration_since(now)))
        };
        parts.push(format!("next tick {} at {}, {when}", s.key, s.local(t)));
    }
    let paused = all.iter().filter(|s| s.paused.is_some()).count();
    if paused == all.len() {
        parts.push("all paused".to_owned());
    } else if paused > 0 {
        parts.push(format!("{paused} paused"));
    }
    Some(if parts.is_empty() {
        format!("schedules: {}", all.len())
    } else {
        format!("schedules: {} ({})", all.len(), parts.join("; "))
    })
}

/// The columns of `schedules`.
const SCHEDULE_HEADERS: [&str; 8] =
    ["KEY", "SPEC", "ZONE", "NEXT", "LAST FIRE", "LAST MISSED", "PAUSED", "COMMAND"];

/// `schedules`' table, every time in the schedule's own zone, sized to
/// `width` columns by truncating the command (`None`: no limit).
pub fn schedules_table(list: &[Schedule], width: Option<usize>) -> String {
    let rows: Vec<[String; 8]> = list
        .iter()
        .map(|s| {
            let next = match (&s.paused, s.next_fire()) {
                (Some(_), _) => "-".to_owned(),
                (None, Some(t)) => s.local(t),
                (None, None) => "none".to_owned(),
            };
            let fire = s
                .last_fire
                .as_ref()
                .map_or_else(|| "-".to_owned(), |f| format!("{} #{}", s.local(f.slot), f.job));
            let missed = s
                .last_missed
                .as_ref()
                .map_or_else(|| "-".to_owned(), |m| format!("{m}, latest {}", s.local(m.latest)));
            let paused = s.paused.as_ref().map_or_else(|| "-".to_owned(), |p| schedule_stamp(s, p));
            [
                s.key.clone(),
                s.spec.to_string(),
                s.zone.clone(),
                next,
                fire,
                missed,
                paused,
                what_new(&s.job),
            ]
        })
        .collect();
    let header = SCHEDULE_HEADERS.map(str::to_owned);
    let mut widths = [0usize; 8];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let fixed: usize = widths[..7].iter().map(|w| w + 2).sum();
    let command_width = width.map(|w| w.saturating_sub(fixed).max(12));
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i == 7 {
                line.push_str(&truncate(cell, command_width));
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
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
    if let Some(h) = job.held.as_ref().filter(|_| job.is_held()) {
        return format!("since {}", local(h.since, now));
    }
    if let Some(after) = slothqueue_view::listing::waiting_after(job) {
        return after;
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
    use slothqueue_view::words::job_ref;

    #[test]
    fn owner_ids_shorten_to_host_and_pid() {
        assert_eq!(owner_short("box:4242:123:00ff"), "box:4242");
        assert_eq!(owner_short("worker-7"), "worker-7");
    }

    /// A message that already says what happened is the line, not
    /// `kind: message` (`cloned_as: cloned as #6` stuttered).
    #[test]
    fn an_event_whose_message_names_it_is_not_said_twice() {
        use slothqueue::EventKind;
        let at = Timestamp::from_millis(0);
        let mut e = Event::new(5, EventKind::ClonedAs, at);
        e.message = Some("cloned as #6".into());
        assert!(event_line(&e, at).ends_with(" cloned as #6"), "{}", event_line(&e, at));
        assert!(!event_line(&e, at).contains("cloned_as"));
        e.kind = EventKind::Edited;
        e.message = Some("changed command".into());
        assert!(event_line(&e, at).ends_with(" edited: changed command"));
    }

    /// A failure with no retry says why: no attempts left, or (its
    /// message says so) a permanent failure, not retried.
    #[test]
    fn a_failed_event_says_why_it_is_not_retried() {
        let at = Timestamp::from_millis(0);
        let mut e = Event::new(5, EventKind::Failed, at);
        e.attempt = Some(3);
        e.message = Some("exit code 1".into());
        let line = event_line(&e, at);
        assert!(line.ends_with(" failed (attempt 3): exit code 1; no attempts left"), "{line}");
        e.attempt = Some(1);
        e.message = Some(format!("bad input; {NOT_RETRIED}"));
        let line = event_line(&e, at);
        assert!(
            line.ends_with(" failed (attempt 1): bad input; permanent failure, not retried"),
            "{line}"
        );
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
    fn show_says_the_environment_as_the_job_gets_it_and_masks_secrets() {
        let exact = serde_json::json!({"command": "x", "env": {"API_TOKEN": "abc", "PATH": "/bin"},
            "env_mode": "exact", "limits": {"nice": 5, "memory_max": 52428800}});
        assert_eq!(
            environment(&exact, false),
            "env (exactly, plus SLOTHQUEUE_*):\n  API_TOKEN=<secret>\n  PATH=/bin\n"
        );
        assert!(environment(&exact, true).contains("  API_TOKEN=abc\n"));
        assert_eq!(limits_asked(&exact), "limits:       asked: nice 5, memory-max 50 MiB\n");
        let old = serde_json::json!({"command": "x", "env": {}});
        assert!(environment(&old, false).starts_with("env:          the runner's (added before"));
        assert_eq!(limits_asked(&old), "limits:       the runner's defaults\n");
        let over = serde_json::json!({"command": "x", "env": {"A": "1\n2"}});
        let text = environment(&over, false);
        assert!(text.starts_with("env:          the runner's, with these over it ("), "{text}");
        assert!(text.ends_with("):\n  A=1 2\n"), "{text}");
    }

    #[test]
    fn long_commands_are_truncated_to_the_width() {
        assert_eq!(truncate("abcdefgh", Some(5)), "abcd…");
        assert_eq!(truncate("abc", Some(5)), "abc");
        assert_eq!(truncate("abcdefgh", None), "abcdefgh");
    }

    mod schedules {
        use super::super::*;
        use slothqueue::core::schedule::{self, LastFire, Missed, PutPlan};
        use slothqueue::core::{CatchUp, NewSchedule, Overlap, Spec};

        fn at(s: &str) -> Timestamp {
            let t: jiff::Timestamp = s.parse().unwrap();
            Timestamp::from_millis(t.as_millisecond())
        }

        fn nightly() -> Schedule {
            let new = NewSchedule {
                key: "nightly".into(),
                spec: Spec::cron("0 3 * * *").unwrap(),
                zone: "Europe/Berlin".into(),
                catch_up: CatchUp::Once,
                overlap: Overlap::Skip,
                job: slothqueue::NewJob::shell("make nightly", "/src"),
            };
            match schedule::create(&new, None, at("2026-12-01T22:00:00Z")).unwrap() {
                PutPlan::Insert(s) => s,
                PutPlan::Unchanged(_) => unreachable!(),
            }
        }

        #[test]
        fn every_says_the_next_slot_in_the_schedules_zone() {
            let now = at("2026-12-01T22:00:00Z");
            let s = nightly();
            assert_eq!(
                schedule_line(&s, true, now),
                "schedule nightly: 0 3 * * * in Europe/Berlin, next 2026-12-02 03:00:00 CET (in 4h)"
            );
            assert!(
                schedule_line(&s, false, now)
                    .ends_with("(unchanged: the same definition was stored already)")
            );
            let mut paused = s.clone();
            paused.paused = Some(Stamp::new("ana@laptop", now));
            assert_eq!(
                schedule_line(&paused, true, now),
                "schedule nightly: 0 3 * * * in Europe/Berlin, paused since 2026-12-01 23:00:00 CET by ana@laptop"
            );
            let mine = Stamp::new("bo@box", now);
            assert_eq!(
                schedule_changed(&paused, Some(&mine), false, now),
                "schedule nightly was already paused since 2026-12-01 23:00:00 CET by ana@laptop"
            );
            assert!(
                schedule_changed(&s, None, true, now)
                    .starts_with("schedule nightly resumed, next 2026-12-02 03:00:00 CET")
            );
            assert!(
                schedule_changed(&s, None, false, now)
                    .starts_with("schedule nightly was not paused")
            );
        }

        #[test]
        fn the_table_tells_fires_misses_and_pauses_in_the_zone() {
            let mut s = nightly();
            s.last_fire = Some(LastFire {
                slot: at("2026-12-02T02:00:00Z"),
                at: at("2026-12-02T02:00:00.010Z"),
                job: 12,
            });
            s.last_missed = Some(Missed {
                count: 2,
                at_least: false,
                at: at("2026-12-02T02:00:00.010Z"),
                latest: at("2026-12-01T02:00:00Z"),
            });
            s.cursor = at("2026-12-02T02:00:00Z");
            let mut p = nightly();
            p.key = "paused".into();
            p.paused = Some(Stamp::new("ana@laptop", at("2026-12-01T22:00:00Z")));
            assert_eq!(
                schedules_table(&[s, p], None),
                "\
KEY      SPEC       ZONE           NEXT                     LAST FIRE                    LAST MISSED                              PAUSED                                       COMMAND
nightly  0 3 * * *  Europe/Berlin  2026-12-03 03:00:00 CET  2026-12-02 03:00:00 CET #12  2 slots, latest 2026-12-01 03:00:00 CET  -                                            make nightly
paused   0 3 * * *  Europe/Berlin  -                        -                            -                                        since 2026-12-01 23:00:00 CET by ana@laptop  make nightly
"
            );
        }

        #[test]
        fn a_tick_names_its_slot_in_the_zone_while_stored() {
            let slot = at("2026-12-02T02:00:00Z");
            let s = nightly();
            assert_eq!(
                tick_slot("nightly", slot, Some(&s)),
                "nightly, slot 2026-12-02 03:00:00 CET"
            );
            assert_eq!(
                tick_slot("nightly", slot, None),
                "nightly, slot 2026-12-02 02:00:00 UTC (no schedule nightly is stored now)"
            );
        }

        #[test]
        fn status_counts_schedules_and_names_the_next_tick() {
            let now = at("2026-12-01T22:00:00Z");
            let s = nightly();
            assert_eq!(schedules_status(&[], None, now), None);
            assert_eq!(
                schedules_status(std::slice::from_ref(&s), Some(&s), now).unwrap(),
                "schedules: 1 (next tick nightly at 2026-12-02 03:00:00 CET, in 4h)"
            );
            let mut p = s.clone();
            p.paused = Some(Stamp::new("ana@laptop", now));
            assert_eq!(
                schedules_status(&[s.clone(), p.clone()], Some(&s), now).unwrap(),
                "schedules: 2 (next tick nightly at 2026-12-02 03:00:00 CET, in 4h; 1 paused)"
            );
            assert_eq!(schedules_status(&[p], None, now).unwrap(), "schedules: 1 (all paused)");
            let late = at("2026-12-02T02:03:10Z");
            assert_eq!(
                schedules_status(std::slice::from_ref(&s), Some(&s), late).unwrap(),
                "schedules: 1 (next tick nightly at 2026-12-02 03:00:00 CET, due 3m10s ago, \
                 fired when a runner runs)"
            );
        }
    }

    mod lanes {
        use super::super::*;
        use slothqueue::core::{LaneChange, Lanes, QueueCounts};
        use slothqueue_view::words::job_ref;

        const NOW: Timestamp = Timestamp::from_millis(1_700_000_000_000);

        fn stamp_of(by: &str) -> Stamp {
            Stamp::new(by, NOW)
        }

        fn q(name: &str) -> LaneScope {
            LaneScope::Queue(name.to_owned())
        }

        fn report() -> QueuesReport {
            let mut lanes = Lanes::default();
            lanes.apply(&q("disk"), &LaneChange::Limit(2)).unwrap();
            lanes.apply(&q("backups"), &LaneChange::Pause(stamp_of("ana@laptop"))).unwrap();
            let counts = vec![
                QueueCounts {
                    queue: "backups".into(),
                    pending: 4,
                    due: 3,
                    held: 1,
                    ..QueueCounts::default()
                },
                QueueCounts {
                    queue: "default".into(),
                    pending: 12,
                    due: 10,
                    ..QueueCounts::default()
                },
                QueueCounts {
                    queue: "disk".into(),
                    pending: 5,
                    due: 5,
                    running: 2,
                    ..QueueCounts::default()
                },
            ];
            QueuesReport::new(&lanes, counts)
        }

        #[test]
        fn the_queues_table_has_a_row_per_lane() {
            assert_eq!(
                queues_table(&report(), NOW),
                "\
QUEUE    PENDING  DUE  HELD  RUNNING  LIMIT  PAUSED
backups        4    3     1        0      -  since 22:13:20 by ana@laptop
default       12   10     0        0      -  -
disk           5    5     0        2      2  -
"
            );
            let mut all = report();
            all.all_paused = Some(stamp_of("bo@box"));
            assert!(queues_table(&all, NOW).ends_with(
                "every queue is paused since 22:13:20 by bo@box (`slothqueue resume` lifts it)\n"
            ));
            assert_eq!(
                queues_table(&QueuesReport::default(), NOW),
                "no queues: no pending or running job, no limit, no pause\n"
            );
        }

        #[test]
        fn status_names_paused_and_full_lanes() {
            assert_eq!(
                lanes_lines(&report(), NOW),
                "\
lanes:
  backups: paused since 22:13:20 by ana@laptop; 3 due jobs wait
  disk: full: 2 of 2 running; 5 due jobs wait
"
            );
        }

        #[test]
        fn pause_resume_and_parallel_say_what_is_now_true() {
            let mine = stamp_of("ana@laptop");
            assert_eq!(
                paused_line(&q("backups"), Some(&mine), &mine, 3, NOW),
                "queue backups paused (3 due jobs wait; running jobs go on)"
            );
            assert_eq!(
                paused_line(&LaneScope::All, Some(&mine), &mine, 1, NOW),
                "every queue paused (1 due job waits; running jobs go on)"
            );
            let earlier = stamp_of("bo@box");
            assert_eq!(
                paused_line(&q("backups"), Some(&earlier), &mine, 0, NOW),
                "queue backups was already paused since 22:13:20 by bo@box (0 due jobs wait; running jobs go on)"
            );
            let mut lanes = Lanes::default();
            assert_eq!(
                resumed_line(&q("backups"), true, &lanes, 3, NOW),
                "queue backups resumed (3 due jobs may start)"
            );
            assert_eq!(
                resumed_line(&q("backups"), false, &lanes, 3, NOW),
                "queue backups was not paused"
            );
            lanes.apply(&LaneScope::All, &LaneChange::Pause(earlier.clone())).unwrap();
            assert_eq!(
                resumed_line(&q("backups"), true, &lanes, 3, NOW),
                "queue backups resumed (3 due jobs may start); every queue is still paused since 22:13:20 by bo@box (`slothqueue resume` lifts that)"
            );
            let mut own = Lanes::default();
            own.apply(&q("disk"), &LaneChange::Pause(earlier)).unwrap();
            assert_eq!(
                resumed_line(&LaneScope::All, true, &own, 7, NOW),
                "every queue resumed (7 due jobs may start); still paused on their own: disk (`slothqueue resume --queue Q`)"
            );
            let limited = LaneSettings { limit: 2, paused: None };
            assert_eq!(limit_line("disk", &limited, NOW), "queue disk: at most 2 at once");
            assert_eq!(limit_line("disk", &LaneSettings::default(), NOW), "queue disk: no limit");
            let both = LaneSettings { limit: 1, paused: Some(mine) };
            assert_eq!(
                limit_line("disk", &both, NOW),
                "queue disk: at most 1 at once (paused since 22:13:20 by ana@laptop)"
            );
        }

        #[test]
        fn a_held_job_reads_held_in_lists_and_counts() {
            let policy = slothqueue::Policy::default();
            let new = slothqueue::NewJob::shell("true", "/");
            let mut job = slothqueue::core::machine::create(12, &new, &[], NOW, &policy).job;
            job.held = Some(stamp_of("ana@laptop"));
            assert_eq!(state_word(&job), "held");
            assert_eq!(job_ref(&job), "#12 (held)");
            let table = table(std::slice::from_ref(&job), NOW, None, false);
            assert!(table.contains("#12  held   "), "{table}");
            assert!(table.contains("since 22:13:20"), "{table}");
            let details = job_details(&job, NOW, false, false);
            assert!(details.contains("held:         since 22:13:20 by ana@laptop\n"), "{details}");
            assert!(details.contains("due:          once released (slothqueue release 12)\n"));
            let s = Stats { pending: 3, held: 1, waiting_on_parents: 2, ..Stats::default() };
            assert!(stats(&s, NOW).starts_with("pending: 3 (2 waiting on parents, 1 held)\n"));
        }
    }
}
