//! The model of `top`: what was last read of the queue ([`Snapshot`]) and
//! what the person is doing with it ([`Model`]: the screen, the selection,
//! the filters, a question waiting for an answer). Pure: a key changes the
//! model and may ask for an [`Effect`] (an action on the queue, a new
//! read, the end), which the runtime performs; nothing here reads the
//! store, the clock or the terminal, so every rule is a plain test.

use slothqueue::core::{PendingShown, QueuesReport};
use slothqueue::{Job, JobId, JobState, ListFilter, ListOrder, Timestamp};
use slothqueue_view::{JobView, StatusView};

use crate::keys::Key;

/// What one read of the queue found.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// When it was read (the clock of every word in the frame).
    pub now: Timestamp,
    /// `status`'s facts: counts, lanes, runners, GPUs.
    pub status: StatusView,
    /// Every queue with jobs or settings, with its counts.
    pub queues: QueuesReport,
    /// The jobs the filters let through, newest first.
    pub jobs: Vec<Job>,
    /// Whether more jobs matched than [`Snapshot::jobs`] holds.
    pub more: bool,
    /// The job open in the detail screen, as `show` sees it.
    pub detail: Option<Detail>,
}

impl Default for Snapshot {
    fn default() -> Snapshot {
        Snapshot {
            now: Timestamp::from_millis(0),
            status: StatusView::default(),
            queues: QueuesReport::default(),
            jobs: Vec::new(),
            more: false,
            detail: None,
        }
    }
}

/// The job open in the detail screen.
#[derive(Clone, Debug)]
pub enum Detail {
    /// It exists: its look and the end of its log.
    Found {
        /// `show`'s facts, `why` among them.
        view: Box<JobView>,
        /// The end of its log, followed.
        log: LogTail,
    },
    /// No job has this id (never had, or purged).
    Missing(JobId),
}

/// The end of a job's log, as the screen follows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogTail {
    /// Whether the log file exists (no attempt started yet when not).
    pub exists: bool,
    /// The last [`LOG_KEPT`] bytes or so, whole lines where it could.
    pub text: String,
    /// Where the next read starts.
    pub next_offset: u64,
    /// Why the log could not be read, if it could not.
    pub error: Option<String>,
}

/// How much of a log the screen keeps (it shows the last lines that fit).
pub const LOG_KEPT: usize = 64 * 1024;

impl LogTail {
    /// Appends a newly read piece, keeping the last [`LOG_KEPT`] bytes.
    pub fn push(&mut self, text: &str, next_offset: u64) {
        self.text.push_str(text);
        if self.text.len() > LOG_KEPT {
            let mut cut = self.text.len() - LOG_KEPT;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
        }
        self.next_offset = next_offset;
    }
}

/// Which screen is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screen {
    /// Counts, queues, runners, GPUs and the job list.
    List,
    /// One job: its facts, why it waits, its trail, its log.
    Job(JobId),
}

/// The state filter of the job list, in the order `s` cycles through it.
/// `held` and `waiting` are pending jobs as the CLI words them
/// (`words::state_word`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StateFilter {
    /// Every job.
    #[default]
    All,
    /// Pending (held and waiting ones among them).
    Pending,
    /// Running.
    Running,
    /// Pending and held.
    Held,
    /// Pending and waiting on parents, not held.
    Waiting,
    /// Done.
    Done,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl StateFilter {
    const CYCLE: [StateFilter; 8] = [
        StateFilter::All,
        StateFilter::Pending,
        StateFilter::Running,
        StateFilter::Held,
        StateFilter::Waiting,
        StateFilter::Done,
        StateFilter::Failed,
        StateFilter::Cancelled,
    ];

    /// The next one in the cycle.
    pub fn next(self) -> StateFilter {
        let at = Self::CYCLE.iter().position(|s| *s == self).unwrap_or(0);
        Self::CYCLE[(at + 1) % Self::CYCLE.len()]
    }

    /// The word shown in the list's title.
    pub fn word(self) -> &'static str {
        match self {
            StateFilter::All => "all",
            StateFilter::Pending => "pending",
            StateFilter::Running => "running",
            StateFilter::Held => "held",
            StateFilter::Waiting => "waiting",
            StateFilter::Done => "done",
            StateFilter::Failed => "failed",
            StateFilter::Cancelled => "cancelled",
        }
    }

    /// The state a store lists for this filter (`None`: every state).
    pub fn stored(self) -> Option<JobState> {
        match self {
            StateFilter::All => None,
            StateFilter::Pending | StateFilter::Held | StateFilter::Waiting => {
                Some(JobState::Pending)
            }
            StateFilter::Running => Some(JobState::Running),
            StateFilter::Done => Some(JobState::Done),
            StateFilter::Failed => Some(JobState::Failed),
            StateFilter::Cancelled => Some(JobState::Cancelled),
        }
    }

    /// The finer filter of pending jobs a store answers (`list --state
    /// held|waiting`'s), if this is one.
    pub fn shown(self) -> Option<PendingShown> {
        match self {
            StateFilter::Held => Some(PendingShown::Held),
            StateFilter::Waiting => Some(PendingShown::Waiting),
            _ => None,
        }
    }
}

/// The job list's filters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filters {
    /// By state.
    pub state: StateFilter,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only jobs whose command, kind or key contains this (case-sensitive,
    /// as `list --search` and the page's search: the store's one rule).
    pub search: String,
}

impl Filters {
    /// The store's list filter for these, newest first, at most `limit`:
    /// every filter is answered by the store's query, none after it.
    pub fn list_filter(&self, limit: usize) -> ListFilter {
        ListFilter {
            state: self.state.stored(),
            shown: self.state.shown(),
            queue: self.queue.clone(),
            search: Some(self.search.clone()).filter(|s| !s.is_empty()),
            limit: Some(limit),
            order: ListOrder::Newest,
            ..ListFilter::default()
        }
    }
}

/// What a job does, in a few words: the command, or `[kind] payload`.
pub fn what(job: &Job) -> String {
    match job.command() {
        Some(c) if job.kind == slothqueue::core::SHELL_KIND => slothqueue_view::words::one_line(c),
        _ => slothqueue_view::words::one_line(&format!("[{}] {}", job.kind, job.payload)),
    }
}

/// A change to the queue a key asks for, performed through the store's
/// operation the CLI's command of the same name calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `cancel ID`: a pending job ends; a running one is asked to stop.
    Cancel(JobId),
    /// `retry ID`: a failed or cancelled job runs again, attempts reset.
    Retry(JobId),
    /// `hold ID`.
    Hold(JobId),
    /// `release ID`.
    Release(JobId),
    /// `pause --queue Q` (`None`: every queue).
    Pause(Option<String>),
    /// `resume --queue Q` (`None`: every queue).
    Resume(Option<String>),
}

impl Action {
    /// The question asked before a destructive action, `None` for one done
    /// at once. Cancel kills a running job (and cancels what waits on it);
    /// retry runs a command again, which may not be harmless either. Hold,
    /// release, pause and resume stop or start nothing that runs and are
    /// undone by the same key, so they are not asked.
    pub fn question(&self) -> Option<String> {
        match self {
            Action::Cancel(id) => Some(format!(
                "cancel job #{id} (a running job is killed, jobs waiting on it are cancelled)? y/n"
            )),
            Action::Retry(id) => Some(format!("retry job #{id} (its command runs again)? y/n")),
            _ => None,
        }
    }
}

/// What the runtime is asked to do after a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing but a redraw.
    Redraw,
    /// Read the queue again (a filter or the screen changed).
    Reload,
    /// Perform this action, then read the queue again.
    Act(Action),
    /// Restore the terminal and end.
    Quit,
}

/// A line being typed or a question waiting for its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    /// The search text as typed so far (Enter keeps it, Esc drops it).
    Search(String),
    /// An action that waits for `y`.
    Confirm(Action),
}

/// Everything the frame shows.
#[derive(Clone, Debug)]
pub struct Model {
    /// What was last read.
    pub snapshot: Snapshot,
    /// The screen.
    pub screen: Screen,
    /// The job list's filters.
    pub filters: Filters,
    /// The selected row of the job list.
    pub selected: usize,
    /// The selected job's id, so a reload keeps the selection on it.
    pub selected_id: Option<JobId>,
    /// A line being typed or a question.
    pub prompt: Option<Prompt>,
    /// The last action's outcome or a read's failure, until the next key.
    pub message: Option<String>,
    /// The queue's name as shown in the title (`shown` path or URL).
    pub title: String,
    /// This host's name, as runners record it (`runner pid 42 on this host`).
    pub this_host: String,
}

/// Rows a page key moves.
const PAGE: usize = 10;

impl Model {
    /// A model before the first read.
    pub fn new(title: impl Into<String>, this_host: impl Into<String>) -> Model {
        Model {
            snapshot: Snapshot::default(),
            screen: Screen::List,
            filters: Filters::default(),
            selected: 0,
            selected_id: None,
            prompt: None,
            message: None,
            title: title.into(),
            this_host: this_host.into(),
        }
    }

    /// Takes a new read, keeping the selection on the same job where it is
    /// still listed.
    pub fn take(&mut self, snapshot: Snapshot) {
        self.snapshot = snapshot;
        let jobs = &self.snapshot.jobs;
        if let Some(at) = self.selected_id.and_then(|id| jobs.iter().position(|j| j.id == id)) {
            self.selected = at;
        }
        self.selected = self.selected.min(jobs.len().saturating_sub(1));
        self.selected_id = jobs.get(self.selected).map(|j| j.id);
    }

    /// The job a key acts on: the open one, else the selected row.
    pub fn current_job(&self) -> Option<&Job> {
        match self.screen {
            Screen::Job(id) => match &self.snapshot.detail {
                Some(Detail::Found { view, .. }) if view.job.id == id => Some(&view.job),
                _ => None,
            },
            Screen::List => self.snapshot.jobs.get(self.selected),
        }
    }

    /// The queue `p` pauses or resumes: the open job's, else the queue
    /// filter's, else the selected job's.
    pub fn current_queue(&self) -> Option<String> {
        match (self.screen, &self.filters.queue) {
            (Screen::List, Some(q)) => Some(q.clone()),
            _ => self.current_job().map(|j| j.queue.clone()),
        }
    }

    /// The queue names the `u` key cycles through.
    fn queue_names(&self) -> Vec<String> {
        self.snapshot.queues.queues.iter().map(|q| q.counts.queue.clone()).collect()
    }

    /// Whether `queue` (`None`: every queue) is paused now.
    fn is_paused(&self, queue: Option<&str>) -> bool {
        let lanes = &self.snapshot.status.lanes;
        match queue {
            None => lanes.all_paused.is_some(),
            Some(q) => lanes.of(q).paused.is_some(),
        }
    }

    /// Applies a key: the model changes, and the effect says what the
    /// runtime does next.
    pub fn key(&mut self, key: Key) -> Effect {
        if matches!(key, Key::Interrupt) {
            return Effect::Quit;
        }
        self.message = None;
        match self.prompt.take() {
            Some(Prompt::Confirm(action)) => {
                return if matches!(key, Key::Char('y' | 'Y')) {
                    Effect::Act(action)
                } else {
                    self.message = Some("not done".to_owned());
                    Effect::Redraw
                };
            }
            Some(Prompt::Search(mut text)) => {
                return match key {
                    Key::Enter => {
                        self.filters.search = text;
                        self.selected = 0;
                        self.selected_id = None;
                        Effect::Reload
                    }
                    Key::Esc => Effect::Redraw,
                    Key::Backspace => {
                        text.pop();
                        self.prompt = Some(Prompt::Search(text));
                        Effect::Redraw
                    }
                    Key::Char(c) => {
                        text.push(c);
                        self.prompt = Some(Prompt::Search(text));
                        Effect::Redraw
                    }
                    _ => {
                        self.prompt = Some(Prompt::Search(text));
                        Effect::Redraw
                    }
                };
            }
            None => {}
        }
        match key {
            Key::Char('q') => Effect::Quit,
            Key::Esc | Key::Backspace | Key::Left if self.screen != Screen::List => {
                self.screen = Screen::List;
                Effect::Reload
            }
            Key::Up | Key::Char('k') => self.move_by(-1),
            Key::Down | Key::Char('j') => self.move_by(1),
            Key::PageUp => self.move_by(-(PAGE as isize)),
            Key::PageDown => self.move_by(PAGE as isize),
            Key::Home | Key::Char('g') => self.move_by(isize::MIN / 2),
            Key::End | Key::Char('G') => self.move_by(isize::MAX / 2),
            Key::Enter | Key::Right if self.screen == Screen::List => match self.current_job() {
                Some(job) => {
                    self.screen = Screen::Job(job.id);
                    Effect::Reload
                }
                None => Effect::Redraw,
            },
            Key::Char('s') if self.screen == Screen::List => {
                self.filters.state = self.filters.state.next();
                self.selected = 0;
                self.selected_id = None;
                Effect::Reload
            }
            Key::Char('u') if self.screen == Screen::List => {
                let names = self.queue_names();
                let at =
                    self.filters.queue.as_ref().and_then(|q| names.iter().position(|n| n == q));
                self.filters.queue = match at {
                    None => names.first().cloned(),
                    Some(i) => names.get(i + 1).cloned(),
                };
                self.selected = 0;
                self.selected_id = None;
                Effect::Reload
            }
            Key::Char('/') if self.screen == Screen::List => {
                self.prompt = Some(Prompt::Search(self.filters.search.clone()));
                Effect::Redraw
            }
            Key::Char('x') if self.screen == Screen::List => {
                self.filters = Filters::default();
                self.selected = 0;
                self.selected_id = None;
                Effect::Reload
            }
            Key::Char('c') => self.ask(self.current_job().map(|j| Action::Cancel(j.id))),
            Key::Char('r') => self.ask(self.current_job().map(|j| Action::Retry(j.id))),
            Key::Char('h') => self.ask(
                self.current_job()
                    .map(|j| if j.is_held() { Action::Release(j.id) } else { Action::Hold(j.id) }),
            ),
            Key::Char('p') => {
                let queue = self.current_queue();
                let action = queue.map(|q| {
                    if self.is_paused(Some(&q)) {
                        Action::Resume(Some(q))
                    } else {
                        Action::Pause(Some(q))
                    }
                });
                self.ask(action)
            }
            Key::Char('P') => self.ask(Some(if self.is_paused(None) {
                Action::Resume(None)
            } else {
                Action::Pause(None)
            })),
            _ => Effect::Redraw,
        }
    }

    /// Asks `action`'s question, or asks for it at once when it has none.
    fn ask(&mut self, action: Option<Action>) -> Effect {
        match action {
            None => {
                self.message = Some("no job selected".to_owned());
                Effect::Redraw
            }
            Some(a) if a.question().is_some() => {
                self.prompt = Some(Prompt::Confirm(a));
                Effect::Redraw
            }
            Some(a) => Effect::Act(a),
        }
    }

    fn move_by(&mut self, by: isize) -> Effect {
        if self.screen != Screen::List {
            return Effect::Redraw;
        }
        let last = self.snapshot.jobs.len().saturating_sub(1) as isize;
        self.selected = (self.selected as isize).saturating_add(by).clamp(0, last.max(0)) as usize;
        self.selected_id = self.snapshot.jobs.get(self.selected).map(|j| j.id);
        Effect::Redraw
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slothqueue::NewJob;

    fn job(id: JobId, state: JobState, queue: &str, command: &str) -> Job {
        let mut new = NewJob::shell(command, "/");
        new.queue = queue.to_owned();
        let mut j = slothqueue::core::machine::create(
            id,
            &new,
            &[],
            Timestamp::from_millis(1_000),
            &slothqueue::Policy::default(),
        )
        .job;
        j.state = state;
        j
    }

    fn listed(jobs: Vec<Job>) -> Model {
        let mut m = Model::new("q", "box");
        m.take(Snapshot { jobs, ..Snapshot::default() });
        m
    }

    #[test]
    fn cancel_and_retry_wait_for_a_yes_and_anything_else_drops_them() {
        let mut m = listed(vec![job(7, JobState::Running, "default", "sleep 9")]);
        assert_eq!(m.key(Key::Char('c')), Effect::Redraw);
        assert_eq!(m.prompt, Some(Prompt::Confirm(Action::Cancel(7))));
        assert_eq!(m.key(Key::Char('y')), Effect::Act(Action::Cancel(7)));
        assert_eq!(m.prompt, None);
        m.key(Key::Char('r'));
        assert_eq!(m.key(Key::Char('n')), Effect::Redraw);
        assert_eq!(m.message.as_deref(), Some("not done"));
        m.key(Key::Char('c'));
        assert_eq!(m.key(Key::Char('q')), Effect::Redraw, "q answers the question: no");
    }

    #[test]
    fn hold_and_pause_act_at_once_and_toggle() {
        let mut m = listed(vec![job(3, JobState::Pending, "backups", "tar c /")]);
        assert_eq!(m.key(Key::Char('h')), Effect::Act(Action::Hold(3)));
        assert_eq!(m.key(Key::Char('p')), Effect::Act(Action::Pause(Some("backups".into()))));
        assert_eq!(m.key(Key::Char('P')), Effect::Act(Action::Pause(None)));
        m.snapshot.jobs[0].held =
            Some(slothqueue::core::Stamp::new("a@b", Timestamp::from_millis(1)));
        m.snapshot.status.lanes.all_paused = m.snapshot.jobs[0].held.clone();
        assert_eq!(m.key(Key::Char('h')), Effect::Act(Action::Release(3)));
        assert_eq!(m.key(Key::Char('P')), Effect::Act(Action::Resume(None)));
    }

    #[test]
    fn ctrl_c_quits_even_inside_a_question() {
        let mut m = listed(vec![job(7, JobState::Running, "default", "x")]);
        m.key(Key::Char('c'));
        assert_eq!(m.key(Key::Interrupt), Effect::Quit);
    }

    #[test]
    fn a_search_is_typed_then_kept_with_enter() {
        let mut m = listed(vec![]);
        m.key(Key::Char('/'));
        for c in "tarx".chars() {
            m.key(Key::Char(c));
        }
        m.key(Key::Backspace);
        assert_eq!(m.key(Key::Enter), Effect::Reload);
        assert_eq!(m.filters.search, "tar");
        let filter = m.filters.list_filter(10);
        assert_eq!((filter.search.as_deref(), filter.limit), (Some("tar"), Some(10)));
        m.key(Key::Char('x'));
        assert_eq!(m.filters.list_filter(10).search, None, "cleared");
    }

    #[test]
    fn the_selection_follows_its_job_across_reads() {
        let mut m = listed(vec![
            job(3, JobState::Pending, "default", "a"),
            job(2, JobState::Pending, "default", "b"),
        ]);
        m.key(Key::Down);
        assert_eq!(m.selected_id, Some(2));
        m.take(Snapshot {
            jobs: vec![
                job(4, JobState::Pending, "default", "c"),
                job(3, JobState::Pending, "default", "a"),
                job(2, JobState::Pending, "default", "b"),
            ],
            ..Snapshot::default()
        });
        assert_eq!(m.selected, 2);
        m.key(Key::End);
        m.key(Key::Down);
        assert_eq!(m.selected, 2);
        m.key(Key::Home);
        assert_eq!(m.selected, 0);
    }

    #[test]
    fn the_state_filter_cycles_through_the_clis_words() {
        let mut s = StateFilter::All;
        let mut words = vec![];
        for _ in 0..8 {
            words.push(s.word());
            s = s.next();
        }
        assert_eq!(s, StateFilter::All);
        assert_eq!(
            words,
            ["all", "pending", "running", "held", "waiting", "done", "failed", "cancelled"]
        );
        assert_eq!(
            (StateFilter::Held.stored(), StateFilter::Held.shown()),
            (Some(JobState::Pending), Some(PendingShown::Held))
        );
        assert_eq!(StateFilter::Pending.shown(), None);
    }

    #[test]
    fn a_log_tail_keeps_its_end_without_splitting_a_character() {
        let mut t = LogTail::default();
        t.push(&"é".repeat(LOG_KEPT), 10);
        assert!(t.text.len() <= LOG_KEPT);
        assert!(t.text.starts_with('é'));
        assert_eq!(t.next_offset, 10);
    }
}
