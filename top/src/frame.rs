//! What a frame shows, drawn from the [`Model`] alone: the list screen
//! (counts, queues, runners, GPUs, the job list) and a job's screen (its
//! facts, why it waits, its trail, its log), with the key line or the
//! question at the bottom. Every phrase about the queue is the read
//! model's (`slothqueue_view::words`, `JobView::why`, the GPU lines), so
//! `top` says what `status` and `show` say.

use std::fmt::Write as _;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState, Wrap};
use slothqueue::{Event, EventKind, Job, JobState, Timestamp};
use slothqueue_view::words::{self, local, one_line};
use slothqueue_view::{JobView, StatusView};

use crate::model::{Detail, LogTail, Model, Prompt, Screen, what};

/// Draws the whole frame.
pub fn draw(frame: &mut Frame<'_>, model: &Model) {
    let [title, body, footer] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(0), Constraint::Length(1)])
            .areas(frame.area());
    draw_title(frame, title, model);
    match model.screen {
        Screen::List => draw_list_screen(frame, body, model),
        Screen::Job(_) => draw_job_screen(frame, body, model),
    }
    draw_footer(frame, footer, model);
}

fn draw_title(frame: &mut Frame<'_>, area: Rect, model: &Model) {
    let now = model.snapshot.now;
    let clock = local(now, now);
    let left = format!(" slothqueue top · {}", one_line(&model.title));
    let room = (area.width as usize).saturating_sub(clock.chars().count() + 2);
    let text = format!("{} {} ", pad(&left, room), clock);
    frame.render_widget(
        Paragraph::new(text).style(Style::new().add_modifier(Modifier::REVERSED)),
        area,
    );
}

fn draw_footer(frame: &mut Frame<'_>, area: Rect, model: &Model) {
    let line = match (&model.prompt, &model.message) {
        (Some(Prompt::Search(text)), _) => Line::from(vec![
            Span::styled("search: ", Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(one_line(text)),
            Span::raw("▏ (enter keeps, esc drops)"),
        ]),
        (Some(Prompt::Confirm(action)), _) => Line::styled(
            action.question().unwrap_or_default(),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ),
        (None, Some(message)) => Line::raw(one_line(message)),
        (None, None) => {
            Line::styled(keys_help(model.screen, area.width), Style::new().fg(Color::DarkGray))
        }
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// The keys of a screen, as the footer lists them: every key where they
/// fit, the main ones where not.
pub fn keys_help(screen: Screen, width: u16) -> &'static str {
    let (all, main) = match screen {
        Screen::List => (
            "↑↓ move  ⏎ open  s state  u queue  / search  x clear filters  c cancel  r retry  h hold/release  p pause queue  P pause all  q quit",
            "⏎ open  s state  u queue  / find  c cancel  r retry  h hold  p pause  q quit",
        ),
        Screen::Job(_) => (
            "esc back  c cancel  r retry  h hold/release  p pause/resume its queue  P pause/resume all  q quit",
            "esc back  c cancel  r retry  h hold/release  p pause/resume its queue  q quit",
        ),
    };
    if all.chars().count() <= width as usize { all } else { main }
}

fn draw_list_screen(frame: &mut Frame<'_>, area: Rect, model: &Model) {
    let overview = overview_lines(model);
    let total = overview.len();
    // The overview takes what it needs up to a third of the screen (at
    // least four lines); the job list the rest.
    let shown = total.min((area.height as usize / 3).max(4));
    let [top, list] =
        Layout::vertical([Constraint::Length(shown as u16), Constraint::Min(0)]).areas(area);
    let mut lines: Vec<Line<'_>> = overview.into_iter().take(shown).collect();
    if shown < total {
        if let Some(last) = lines.last_mut() {
            *last = Line::styled(
                format!("… {} more lines (a taller terminal shows them)", total - shown + 1),
                Style::new().fg(Color::DarkGray),
            );
        }
    }
    frame.render_widget(Paragraph::new(Text::from(lines)), top);
    draw_jobs(frame, list, model);
}

/// The counts, the queues, the runners, the unserved jobs and the GPUs.
fn overview_lines(model: &Model) -> Vec<Line<'static>> {
    let s = &model.snapshot;
    let now = s.now;
    let view: &StatusView = &s.status;
    let st = &view.stats;
    let mut lines = vec![Line::from(vec![
        Span::raw(format!(
            "pending {} ({} due, {} held, {} waiting)  ",
            st.pending, st.due_now, st.held, st.waiting_on_parents
        )),
        Span::styled(format!("running {}", st.running), Style::new().fg(Color::Green)),
        Span::raw(format!("  done {}  ", st.done)),
        Span::styled(format!("failed {}", st.failed), Style::new().fg(Color::Red)),
        Span::raw(format!("  cancelled {}", st.cancelled)),
    ])];
    if let Some(p) = &view.lanes.all_paused {
        lines.push(Line::styled(
            format!("every queue is paused {} (P resumes)", words::stamp(p, now)),
            Style::new().fg(Color::Yellow),
        ));
    }
    for q in &s.queues.queues {
        let c = &q.counts;
        let mut line =
            format!("queue {}: {} pending, {} running", one_line(&c.queue), c.pending, c.running);
        if q.limit > 0 {
            let _ = write!(line, ", limit {}", q.limit);
            if q.is_full() {
                line.push_str(" (full)");
            }
        }
        let style = match &q.paused {
            Some(p) => {
                let _ = write!(line, ", paused {}", words::stamp(p, now));
                Style::new().fg(Color::Yellow)
            }
            None => Style::new(),
        };
        lines.push(Line::styled(line, style));
    }
    if view.live.is_empty() {
        lines.push(Line::styled("runners: none alive", Style::new().fg(Color::Yellow)));
    }
    for r in &view.live {
        lines.push(Line::raw(format!(
            "{}: {}",
            r.name(&model.this_host),
            words::activity(&r.record, now)
        )));
    }
    if !view.live.is_empty() {
        for u in &view.unserved {
            let jobs = if u.pending == 1 { "job" } else { "jobs" };
            lines.push(Line::styled(
                format!("{}: {} pending {jobs} in queue {}", u.why, u.pending, u.queue),
                Style::new().fg(Color::Yellow),
            ));
        }
    }
    for h in &view.gpus {
        let on = if h.host == model.this_host { "this host".to_owned() } else { h.host.clone() };
        match &h.error {
            Some(e) => lines.push(Line::raw(format!("GPUs on {on}: none found ({})", one_line(e)))),
            None => {
                for g in &h.gpus {
                    lines.push(Line::raw(format!(
                        "GPUs on {on}: {} ({})",
                        g.line,
                        one_line(&g.gpu.name)
                    )));
                }
            }
        }
    }
    lines
}

fn draw_jobs(frame: &mut Frame<'_>, area: Rect, model: &Model) {
    let s = &model.snapshot;
    let f = &model.filters;
    let mut title = format!(" jobs · state {}", f.state.word());
    if let Some(q) = &f.queue {
        let _ = write!(title, " · queue {}", one_line(q));
    }
    if !f.search.is_empty() {
        let _ = write!(title, " · search \"{}\"", one_line(&f.search));
    }
    let count = if s.more { format!(" {}+ ", s.jobs.len()) } else { format!(" {} ", s.jobs.len()) };
    let block = Block::new()
        .borders(Borders::TOP)
        .title(Line::raw(title))
        .title(Line::raw(count).right_aligned());
    if s.jobs.is_empty() {
        let empty = if f == &crate::model::Filters::default() {
            "no jobs yet: `slothqueue add -- CMD` adds one"
        } else {
            "no job matches (x clears the filters)"
        };
        frame.render_widget(Paragraph::new(empty).block(block), area);
        return;
    }
    let header = Row::new(["ID", "STATE", "ATT", "WHEN", "QUEUE", "COMMAND"])
        .style(Style::new().add_modifier(Modifier::BOLD));
    let rows = s.jobs.iter().map(|j| {
        Row::new([
            Cell::from(format!("#{}", j.id)),
            Cell::from(words::state_word(j)).style(state_style(j)),
            Cell::from(format!("{}/{}", j.attempts, j.max_attempts)),
            Cell::from(slothqueue_view::listing::when(j, s.now)),
            Cell::from(one_line(&j.queue)),
            Cell::from(what(j)),
        ])
    });
    let widths = [
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Length(5),
        Constraint::Length(14),
        Constraint::Length(10),
        Constraint::Min(10),
    ];
    let table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol(">");
    let mut state = TableState::new().with_selected(Some(model.selected));
    frame.render_stateful_widget(table, area, &mut state);
}

fn state_style(job: &Job) -> Style {
    match words::state_word(job) {
        "running" => Style::new().fg(Color::Green),
        "failed" => Style::new().fg(Color::Red),
        "held" | "waiting" => Style::new().fg(Color::Yellow),
        "done" | "cancelled" => Style::new().fg(Color::DarkGray),
        _ => Style::new(),
    }
}

fn draw_job_screen(frame: &mut Frame<'_>, area: Rect, model: &Model) {
    let now = model.snapshot.now;
    let (view, log) = match &model.snapshot.detail {
        Some(Detail::Found { view, log }) => (view.as_ref(), log),
        Some(Detail::Missing(id)) => {
            let text = format!("job #{id} does not exist (never added, or cleared since)");
            frame.render_widget(Paragraph::new(text), area);
            return;
        }
        None => {
            frame.render_widget(Paragraph::new("reading…"), area);
            return;
        }
    };
    let facts = facts(view, now);
    let width = area.width.max(1) as usize;
    let facts_height: usize = facts
        .iter()
        .map(|l| l.width().max(1).div_ceil(width))
        .sum::<usize>()
        .min(area.height as usize / 2);
    let trail_height = (view.events.len() + 1).min(area.height as usize / 4).max(3);
    let [top, trail, log_area] = Layout::vertical([
        Constraint::Length(facts_height as u16),
        Constraint::Length(trail_height as u16),
        Constraint::Min(0),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(Text::from(facts)).wrap(Wrap { trim: false }), top);
    draw_trail(frame, trail, &view.events, now);
    draw_log(frame, log_area, view.job.id, log);
}

/// A job's facts, as `show` gives them: what, where it stands, why.
fn facts(view: &JobView, now: Timestamp) -> Vec<Line<'static>> {
    let job = &view.job;
    let mut head = format!(
        "#{} {} · attempts {}/{} · queue {} · priority {}",
        job.id,
        words::state_word(job),
        job.attempts,
        job.max_attempts,
        one_line(&job.queue),
        job.priority
    );
    if let Some(k) = &job.idempotency_key {
        let _ = write!(head, " · key {}", one_line(k));
    }
    let mut lines = vec![
        Line::styled(head, state_style(job).add_modifier(Modifier::BOLD)),
        Line::raw(format!("what: {}", what(job))),
    ];
    if let Some(why) = &view.why {
        lines.push(Line::from(vec![
            Span::styled(
                format!("{}: ", view.why_label()),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::raw(one_line(why)),
        ]));
    }
    if let (Some(e), JobState::Failed | JobState::Pending) = (&job.last_error, job.state) {
        lines.push(Line::styled(
            format!("last error: {}", one_line(e)),
            Style::new().fg(Color::Red),
        ));
    }
    if !view.parents.is_empty() {
        lines.push(Line::raw(format!(
            "after: {}",
            words::job_list(&view.parents, view.parents.len(), 5)
        )));
    }
    if !view.dependents.is_empty() {
        lines.push(Line::raw(format!(
            "then: {}",
            words::job_list(&view.listed_dependents, view.dependents.len(), 5)
        )));
    }
    if let Some(h) = job.held.as_ref().filter(|_| job.is_held()) {
        lines.push(Line::styled(
            format!("held {}", words::stamp(h, now)),
            Style::new().fg(Color::Yellow),
        ));
    }
    lines
}

fn draw_trail(frame: &mut Frame<'_>, area: Rect, events: &[Event], now: Timestamp) {
    let block = Block::new().borders(Borders::TOP).title(" trail ");
    let room = area.height.saturating_sub(1) as usize;
    let skip = events.len().saturating_sub(room);
    let lines: Vec<Line<'_>> =
        events[skip..].iter().map(|e| Line::raw(event_line(e, now))).collect();
    frame.render_widget(Paragraph::new(Text::from(lines)).block(block), area);
}

/// One event: `12:03:05 claimed (attempt 1)`, `12:03:09 failed (attempt 1): exit 2`.
fn event_line(e: &Event, now: Timestamp) -> String {
    let mut line = format!("{} {}", local(e.at, now), e.kind);
    if let (Some(a), EventKind::Claimed | EventKind::Failed) = (e.attempt, e.kind) {
        let _ = write!(line, " (attempt {a})");
    }
    if let Some(m) = &e.message {
        let _ = write!(line, ": {}", one_line(m));
    }
    if let Some(t) = e.retry_at {
        let _ = write!(line, "; retry at {}", local(t, now));
    }
    line
}

fn draw_log(frame: &mut Frame<'_>, area: Rect, id: slothqueue::JobId, log: &LogTail) {
    let title = if log.exists { format!(" log of #{id} (following) ") } else { " log ".to_owned() };
    let block = Block::new().borders(Borders::TOP).title(title);
    let room = area.height.saturating_sub(1) as usize;
    let lines: Vec<Line<'_>> = match (&log.error, log.exists) {
        (Some(e), _) => vec![Line::styled(one_line(e), Style::new().fg(Color::Red))],
        (None, false) => vec![Line::styled(
            "no log yet (it starts with the first attempt)",
            Style::new().fg(Color::DarkGray),
        )],
        (None, true) => {
            let all: Vec<&str> = log.text.lines().collect();
            all[all.len().saturating_sub(room)..]
                .iter()
                .map(|l| Line::raw(one_line(&l.replace('\t', "    "))))
                .collect()
        }
    };
    frame.render_widget(Paragraph::new(Text::from(lines)).block(block), area);
}

/// `s` padded with spaces to `width` characters, or cut with `…`.
fn pad(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n > width {
        let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
        if width > 0 {
            out.push('…');
        }
        return out;
    }
    let mut out = s.to_owned();
    out.extend(std::iter::repeat_n(' ', width - n));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_title_is_cut_and_keeps_a_space_before_the_clock() {
        assert_eq!(pad("abcdef", 4), "abc…");
        assert_eq!(pad("ab", 4), "ab  ");
        assert_eq!(pad("ab", 0), "");
    }
}
