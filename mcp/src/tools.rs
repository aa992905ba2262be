//! The tools' handlers: one method of [`Queue`] per tool, each a thin face
//! over what the CLI already does. A job is built by `add`'s own
//! `slothqueue::spec::build` (with `add`'s environment rule,
//! `core::shell::capture`); `show_job` and `queue_status` are the read
//! model's `view::job` and `view::status` (the words `show` prints);
//! `wait_jobs` is `runner::wait`; logs are read where `logs` reads them.
//!
//! What this server may do is the user's choice ([`Policy`]): each
//! handler asks it first, and a refusal is a [`ToolError`] with a sentence
//! the model can act on. The handlers are plain async functions of typed
//! input, so tests call them directly on a temporary queue.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use slothqueue::core::serving::{self, Coverage};
use slothqueue::core::shell;
use slothqueue::core::{GpuRequest, LaneChange, LaneScope, LaneSettings, Parent, Stamp};
use slothqueue::runner::wait::{WaitEnd, WaitTarget, wait};
use slothqueue::runner::{ProcJudge, QueueWatch};
use slothqueue::spec::{self, JobSpec, Source, When};
use slothqueue::{
    Clock, Job, JobId, JobState, ListFilter, ListOrder, Owner, Store, StoreError, SystemClock,
    Timestamp,
};
use slothqueue_view::{Look, ViewError};

use crate::error::ToolError;
use crate::logs;
use crate::policy::Policy;
use crate::wire::*;

/// The most ids one `wait_jobs` call names.
pub const MAX_WAIT_IDS: usize = 1000;
/// `wait_jobs`'s timeout when the call gives none.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// The longest `wait_jobs` may wait in one call (a client that wants
/// longer calls again).
pub const MAX_WAIT: Duration = Duration::from_secs(600);
/// `list_jobs`'s limit when the call gives none, and its ceiling.
pub const DEFAULT_LIST: u32 = 20;
/// See [`DEFAULT_LIST`].
pub const MAX_LIST: u32 = 200;
/// How often a wait with a progress token reports.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// What the server is started with.
#[derive(Clone, Debug)]
pub struct Options {
    /// The queue (`--db`): a file the waits watch, or a server's URL.
    pub queue_file: PathBuf,
    /// Where this host keeps the queue's files: the job logs are beside
    /// it (`runner::log_dir_for`).
    pub files: PathBuf,
    /// What the user lets the agent do.
    pub policy: Policy,
    /// The server's environment, from which `add_job` records what `add`
    /// would (the allowlist and the names given in `env_pass`).
    pub env: Vec<(String, String)>,
    /// A shell job's directory when the call names none.
    pub cwd: Option<PathBuf>,
    /// Who pauses and holds (`USER@host`).
    pub who: String,
    /// This host's name, as runners record it.
    pub this_host: String,
    /// A drain worker runs inside this server (`mcp --worker`).
    pub worker: bool,
}

/// An answer: a short text for the model, and the structured result.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer<T> {
    /// What a model reads.
    pub text: String,
    /// `structuredContent`.
    pub data: T,
}

fn answer<T>(text: impl Into<String>, data: T) -> Result<Answer<T>, ToolError> {
    Ok(Answer { text: text.into(), data })
}

/// How a wait reports progress: `(finished, total, message)`.
pub type ProgressSink = tokio::sync::mpsc::Sender<(f64, Option<f64>, String)>;

/// The queue the tools act on.
pub struct Queue {
    store: Arc<dyn Store>,
    watch: QueueWatch,
    opts: Options,
    clock: Arc<dyn Clock + Send + Sync>,
}

impl Queue {
    /// The tools over `store`.
    pub fn new(store: Arc<dyn Store>, opts: Options) -> Queue {
        Queue::with_clock(store, opts, Arc::new(SystemClock))
    }

    /// The tools over `store`, reading the time from `clock`.
    pub fn with_clock(
        store: Arc<dyn Store>,
        opts: Options,
        clock: Arc<dyn Clock + Send + Sync>,
    ) -> Queue {
        let watch = QueueWatch::for_store(&opts.queue_file, store.as_ref());
        Queue { store, watch, opts, clock }
    }

    /// The options it was started with.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn policy(&self) -> &Policy {
        &self.opts.policy
    }

    /// The job, if this server may see it.
    async fn job_in_scope(&self, id: JobId) -> Result<Job, ToolError> {
        let job = self.store.get(id).await?;
        self.policy().job_in_scope(&job)?;
        Ok(job)
    }

    async fn look<T, F>(&self, read: F) -> Result<T, ToolError>
    where
        F: AsyncFnOnce(&Look<'_>) -> Result<T, ViewError>,
    {
        let judge = ProcJudge::new();
        let judge = move |owner: &Owner| judge.judge_owner(owner);
        let look = Look {
            store: self.store.as_ref(),
            now: self.now(),
            judge: &judge,
            this_host: &self.opts.this_host,
        };
        read(&look).await.map_err(|e| match e {
            ViewError::Store(e) => ToolError::Queue(e),
            ViewError::Read { what, source } => ToolError::Store { what, source },
        })
    }

    /// `add_job`: queues a job exactly as `add` would.
    pub async fn add_job(&self, input: AddJobInput) -> Result<Answer<AddJobOutput>, ToolError> {
        self.policy().may_change("add_job")?;
        self.policy().may_add(input.command.is_some(), input.kind.as_deref())?;
        let queue = self.policy().queue_for("add_job", input.queue)?;
        let recorded = if input.kind.is_some() {
            if !input.env_pass.is_empty() {
                return Err(ToolError::BadInput(
                    "`env_pass` is for shell commands; put a handler's settings in `payload`"
                        .to_owned(),
                ));
            }
            None
        } else {
            let captured = shell::capture(self.opts.env.clone(), &input.env_pass, false);
            if let Some(name) = captured.missing.first() {
                return Err(ToolError::BadInput(format!(
                    "`env_pass` {name}: {name} is not set in the server's environment; give its value in `env` instead"
                )));
            }
            Some(captured.env)
        };
        let gpus = match (input.gpus, input.gpu_memory_mib) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(ToolError::BadInput(
                    "`gpu_memory_mib` needs `gpus`: how many GPUs with that much free memory"
                        .to_owned(),
                ));
            }
            (Some(count), mib) => {
                Some(GpuRequest { count, memory: mib.map(|m| m.saturating_mul(1024 * 1024)) })
            }
        };
        let spec = JobSpec {
            command: input.command,
            kind: input.kind,
            payload: input.payload,
            priority: input.priority,
            max_runtime: input.max_runtime.map(|s| (s > 0).then(|| Duration::from_secs(s))),
            max_attempts: input.max_attempts,
            when: input.delay.map_or(When::Now, |s| When::After(Duration::from_secs(s))),
            key: input.key,
            queue,
            env: input.env,
            recorded,
            limits: None,
            gpus,
            cwd: input.cwd,
            after: input
                .after
                .into_iter()
                .map(|p| match p {
                    ParentRef::Id(id) => Parent::Id(id),
                    ParentRef::Key(k) => Parent::Key(k),
                })
                .collect(),
        };
        let cwd = self.opts.cwd.clone().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "the server has no directory")
        });
        let (mut job, when) = spec::build(spec, Source::Tool, &cwd).map_err(ToolError::BadInput)?;
        let now = self.now();
        job.not_before = when.resolve(now);
        let pushed = self.store.push(job, now).await.map_err(|e| match e {
            StoreError::InvalidInput(why) => ToolError::BadInput(why),
            e @ StoreError::InvalidTransition { .. } => ToolError::Queue(e),
            e => ToolError::store("cannot add the job")(e),
        })?;
        let job = &pushed.job;
        let outcome = match (pushed.created, pushed.superseded) {
            (false, _) => "existing",
            (true, Some(_)) => "superseded",
            (true, None) => "created",
        };
        let coverage = self
            .look(async |look| {
                let runners = look.runners().await?;
                let live = runners.iter().filter(|r| r.live).map(|r| &r.record);
                Ok(serving::coverage(&job.queue, &job.kind, live))
            })
            .await?;
        let runner_note = (!coverage.is_served()).then(|| self.start_hint(&coverage));
        let mut text = match outcome {
            "existing" => format!(
                "job #{} already holds key {} with the same job; nothing added ({})",
                job.id,
                job.idempotency_key.as_deref().unwrap_or_default(),
                job.state
            ),
            _ => format!("added job #{} to queue {} ({})", job.id, job.queue, job.state),
        };
        if let Some(old) = pushed.superseded {
            text.push_str(&format!("; superseded job #{old} (same key, different job)"));
        }
        if let Some(note) = &runner_note {
            text.push_str(&format!("; {note}"));
        }
        answer(
            text,
            AddJobOutput {
                outcome: outcome.to_owned(),
                job: job.into(),
                superseded: pushed.superseded,
                served: coverage.is_served(),
                runner_note,
            },
        )
    }

    /// What to do when no live runner takes a job.
    fn start_hint(&self, coverage: &Coverage) -> String {
        match coverage {
            Coverage::NoHandler { kind } => format!(
                "{coverage}: the runners of its queue have no handler `{kind}` (start one with `slothqueue run --follow --handlers DIR`, DIR holding an executable named {kind})"
            ),
            _ if self.opts.worker => {
                format!("{coverage} yet: this server's worker is starting, or serves other queues")
            }
            _ => format!(
                "{coverage}: it waits until one starts: `slothqueue run --follow` (or its systemd unit), or this server started with `slothqueue mcp --worker`"
            ),
        }
    }

    /// `list_jobs`.
    pub async fn list_jobs(
        &self,
        input: ListJobsInput,
    ) -> Result<Answer<ListJobsOutput>, ToolError> {
        let state = input
            .state
            .map(|s| {
                s.parse::<JobState>().map_err(|_| {
                    ToolError::BadInput(format!(
                        "`state` `{s}` is not a state: give pending, running, done, failed or cancelled"
                    ))
                })
            })
            .transpose()?;
        if let Some(kind) = &input.kind {
            spec::plain_name("`kind`", kind).map_err(ToolError::BadInput)?;
        }
        let queue = self.policy().queue_for("list_jobs", input.queue)?;
        let order = match input.order.as_deref() {
            None | Some("newest") => ListOrder::Newest,
            Some("oldest") => ListOrder::Oldest,
            Some("due") => ListOrder::DueFirst,
            Some(other) => {
                return Err(ToolError::BadInput(format!(
                    "`order` `{other}` is not an order: give newest, oldest or due"
                )));
            }
        };
        let limit = input.limit.unwrap_or(DEFAULT_LIST).clamp(1, MAX_LIST) as usize;
        let filter = ListFilter {
            state,
            queue,
            kind: input.kind,
            limit: Some(limit + 1),
            cursor: None,
            order,
            ..ListFilter::default()
        };
        let mut jobs =
            self.store.list(&filter).await.map_err(ToolError::store("cannot list jobs"))?;
        let more = jobs.len() > limit;
        jobs.truncate(limit);
        let mut text = match jobs.len() {
            0 => "no jobs".to_owned(),
            1 => "1 job:".to_owned(),
            n => format!("{n} jobs{}:", if more { " (more match)" } else { "" }),
        };
        for j in &jobs {
            text.push_str(&format!("\n#{} {} {} {}", j.id, j.state, j.queue, what(j)));
        }
        answer(text, ListJobsOutput { jobs: jobs.iter().map(JobOut::from).collect(), more })
    }

    /// `show_job`: the read model's view of one job.
    pub async fn show_job(&self, input: JobIdInput) -> Result<Answer<ShowJobOutput>, ToolError> {
        let view = self.look(async |look| slothqueue_view::job(look, input.id).await).await?;
        self.policy().job_in_scope(&view.job)?;
        let job = &view.job;
        let mut text =
            format!("job #{} ({}): {} in queue {}", job.id, job.state, what(job), job.queue);
        if let Some(why) = &view.why {
            text.push_str(&format!("\n{}: {why}", view.why_label()));
        }
        if let Some(e) = &job.last_error {
            text.push_str(&format!("\nlast error: {e}"));
        }
        let data = ShowJobOutput {
            job: job.into(),
            why: view.why.clone(),
            events: view
                .events
                .iter()
                .map(|e| EventOut {
                    at: e.at.as_millis(),
                    kind: e.kind.as_str().to_owned(),
                    attempt: e.attempt,
                    message: e.message.clone(),
                })
                .collect(),
            parents: view.parents.iter().map(JobOut::from).collect(),
            dependents: view.dependents.clone(),
            log_uri: log_uri(job.id),
        };
        answer(text, data)
    }

    /// `job_logs`: a bounded piece of the job's log.
    pub async fn job_logs(&self, input: JobLogsInput) -> Result<Answer<JobLogsOutput>, ToolError> {
        let job = self.job_in_scope(input.id).await?;
        let chunk = self.read_log(input.id, input.offset, input.max_bytes, input.lines).await?;
        let text = if !chunk.exists {
            let why = if job.attempts == 0 { "it has not run yet" } else { "its log is gone" };
            format!("no output for job #{}: {why}", job.id)
        } else if chunk.text.is_empty() {
            format!("no output for job #{} from byte {}", job.id, chunk.start)
        } else {
            chunk.text.clone()
        };
        answer(
            text,
            JobLogsOutput {
                id: job.id,
                exists: chunk.exists,
                size: chunk.size,
                start: chunk.start,
                next_offset: chunk.next_offset,
                text: chunk.text,
                finished: job.state.is_terminal(),
            },
        )
    }

    /// The log of job `id`, read off the runtime's threads.
    pub(crate) async fn read_log(
        &self,
        id: JobId,
        offset: Option<u64>,
        max_bytes: Option<u64>,
        lines: Option<u32>,
    ) -> Result<logs::Chunk, ToolError> {
        let dir = slothqueue::runner::log_dir_for(&self.opts.files);
        let limit = max_bytes.unwrap_or(logs::DEFAULT_CHUNK);
        let read = tokio::task::spawn_blocking(move || logs::read(&dir, id, offset, limit, lines))
            .await
            .map_err(|e| ToolError::Io(format!("cannot read the log of job #{id}: {e}")))?;
        read.map_err(|e| ToolError::Io(format!("cannot read the log of job #{id}: {e}")))
    }

    /// `queue_status`: the read model's status.
    pub async fn queue_status(&self, _: NoInput) -> Result<Answer<QueueStatusOutput>, ToolError> {
        let view = self.look(async |look| slothqueue_view::status(look).await).await?;
        let now = self.now();
        let confined = self.policy().queue.clone();
        let counts = match &confined {
            None => Counts {
                pending: view.stats.pending,
                running: view.stats.running,
                done: Some(view.stats.done),
                failed: Some(view.stats.failed),
                cancelled: Some(view.stats.cancelled),
                due_now: view.stats.due_now,
            },
            Some(q) => {
                let all = self
                    .store
                    .queue_counts(now)
                    .await
                    .map_err(ToolError::store("cannot count the queue's jobs"))?;
                let c = all.into_iter().find(|c| c.queue == *q);
                Counts {
                    pending: c.as_ref().map_or(0, |c| c.pending),
                    running: c.as_ref().map_or(0, |c| c.running),
                    done: None,
                    failed: None,
                    cancelled: None,
                    due_now: c.as_ref().map_or(0, |c| c.due),
                }
            }
        };
        let in_scope = |q: &str| confined.as_deref().is_none_or(|c| c == q);
        let mut lanes = vec![lane_out(None, &view.lanes.get(&LaneScope::All))];
        for (q, settings) in &view.lanes.queues {
            if in_scope(q) {
                lanes.push(lane_out(Some(q), settings));
            }
        }
        let runners: Vec<RunnerOut> = view
            .live
            .iter()
            .map(|r| RunnerOut {
                name: r.name(&self.opts.this_host),
                activity: slothqueue_view::words::activity(&r.record, now),
                queues: r.record.queues.clone(),
            })
            .collect();
        let unserved: Vec<UnservedOut> = view
            .unserved
            .iter()
            .filter(|u| in_scope(&u.queue))
            .map(|u| UnservedOut {
                queue: u.queue.clone(),
                kind: u.kind.clone(),
                pending: u.pending,
                why: u.why.clone(),
            })
            .collect();
        let mut text = format!(
            "{} pending ({} due now), {} running",
            counts.pending, counts.due_now, counts.running
        );
        if let (Some(d), Some(f), Some(c)) = (counts.done, counts.failed, counts.cancelled) {
            text.push_str(&format!(", {d} done, {f} failed, {c} cancelled"));
        }
        if let Some(q) = &confined {
            text.push_str(&format!(" in queue {q}"));
        }
        match runners.len() {
            0 => text.push_str("; runners: none alive (start one: `slothqueue run --follow`)"),
            n => text.push_str(&format!("; runners: {n} alive")),
        }
        for l in lanes.iter().filter(|l| l.paused_by.is_some()) {
            let which =
                l.queue.as_deref().map_or("every queue".to_owned(), |q| format!("queue {q}"));
            text.push_str(&format!("; {which} paused"));
        }
        for u in &unserved {
            text.push_str(&format!("; {}: {} pending in queue {}", u.why, u.pending, u.queue));
        }
        answer(text, QueueStatusOutput { exists: view.exists, counts, lanes, runners, unserved })
    }

    /// `wait_jobs`: `runner::wait`, bounded by [`MAX_WAIT`]; with a
    /// `progress` sink, in pieces of [`PROGRESS_EVERY`] with a report
    /// after each.
    pub async fn wait_jobs(
        &self,
        input: WaitJobsInput,
        progress: Option<ProgressSink>,
    ) -> Result<Answer<WaitJobsOutput>, ToolError> {
        if input.ids.len() > MAX_WAIT_IDS {
            return Err(ToolError::BadInput(format!(
                "`ids` names {} jobs; wait on at most {MAX_WAIT_IDS} at once (or on a `queue`)",
                input.ids.len()
            )));
        }
        let target = match (input.ids.is_empty(), input.queue) {
            (false, Some(_)) => {
                return Err(ToolError::BadInput("give `ids` or `queue`, not both".to_owned()));
            }
            (false, None) => {
                for id in &input.ids {
                    self.job_in_scope(*id).await?;
                }
                WaitTarget::Jobs(input.ids)
            }
            (true, queue) => match self.policy().queue_for("wait_jobs", queue)? {
                Some(q) => WaitTarget::Queue(q),
                None => WaitTarget::All,
            },
        };
        let timeout = input.timeout_s.map_or(DEFAULT_WAIT, Duration::from_secs).min(MAX_WAIT);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut seen: BTreeMap<JobId, JobState> = BTreeMap::new();
        let mut gone: BTreeSet<JobId> = BTreeSet::new();
        let end = loop {
            let piece = match &progress {
                Some(_) => deadline.min(tokio::time::Instant::now() + PROGRESS_EVERY),
                None => deadline,
            };
            let outcome = wait(self.store.as_ref(), &self.watch, &target, Some(piece))
                .await
                .map_err(|e| match e {
                    slothqueue::runner::RunnerError::Store { source, .. }
                        if matches!(source, StoreError::NotFound(_)) =>
                    {
                        ToolError::Queue(source)
                    }
                    e => ToolError::Io(format!("cannot wait on the queue: {e}")),
                })?;
            let looked: BTreeSet<JobId> = outcome.jobs.iter().map(|w| w.id).collect();
            for w in &outcome.jobs {
                seen.insert(w.id, w.state);
            }
            gone.extend(outcome.gone.iter().copied());
            // A job an earlier piece saw unfinished that this piece's look
            // no longer lists (it ended in between) is read by id.
            let missed: Vec<JobId> = seen
                .iter()
                .filter(|(id, s)| !s.is_terminal() && !looked.contains(id) && !gone.contains(id))
                .map(|(id, _)| *id)
                .take(MAX_WAIT_IDS)
                .collect();
            for id in missed {
                match self.store.get(id).await {
                    Ok(j) => {
                        seen.insert(id, j.state);
                    }
                    Err(StoreError::NotFound(_)) => {
                        gone.insert(id);
                    }
                    Err(e) => return Err(ToolError::store("cannot wait on the queue")(e)),
                }
            }
            let open = seen.values().filter(|s| !s.is_terminal()).count();
            if outcome.end == WaitEnd::Finished && open == 0 {
                break WaitEnd::Finished;
            }
            if tokio::time::Instant::now() >= deadline {
                break WaitEnd::TimedOut;
            }
            if let Some(sink) = &progress {
                let total = seen.len() + gone.len();
                let finished = total - open;
                let note = format!("{finished} of {total} finished; waiting on {open}");
                // A client that reads no notifications loses some: never a wait.
                let _ = sink.try_send((finished as f64, Some(total as f64), note));
            }
        };
        seen.retain(|id, _| !gone.contains(id));
        let ids_in = |state: JobState| -> Vec<JobId> {
            seen.iter().filter(|(_, s)| **s == state).map(|(id, _)| *id).collect()
        };
        let data = WaitJobsOutput {
            outcome: String::new(),
            done: ids_in(JobState::Done),
            failed: ids_in(JobState::Failed),
            cancelled: ids_in(JobState::Cancelled),
            pending: seen.iter().filter(|(_, s)| !s.is_terminal()).map(|(id, _)| *id).collect(),
            gone: gone.into_iter().collect(),
            timeout_s: timeout.as_secs(),
        };
        let outcome = if end == WaitEnd::TimedOut {
            "timed_out"
        } else if data.failed.is_empty() && data.cancelled.is_empty() && data.gone.is_empty() {
            "done"
        } else {
            "failed"
        };
        let text = match outcome {
            "timed_out" => format!(
                "timed out after {}s: {} still pending or running ({}); call wait_jobs again to go on waiting",
                timeout.as_secs(),
                data.pending.len(),
                id_list(&data.pending)
            ),
            "done" => format!("all {} done ({})", data.done.len(), id_list(&data.done)),
            _ => format!(
                "ended: {} done, {} failed ({}), {} cancelled ({}){}",
                data.done.len(),
                data.failed.len(),
                id_list(&data.failed),
                data.cancelled.len(),
                id_list(&data.cancelled),
                if data.gone.is_empty() {
                    String::new()
                } else {
                    format!(", {} deleted before seen ending", data.gone.len())
                }
            ),
        };
        answer(text, WaitJobsOutput { outcome: outcome.to_owned(), ..data })
    }

    /// `cancel_job`.
    pub async fn cancel_job(
        &self,
        input: JobIdInput,
    ) -> Result<Answer<JobChangeOutput>, ToolError> {
        self.policy().may_change("cancel_job")?;
        self.job_in_scope(input.id).await?;
        let job = self.store.cancel(input.id, self.now()).await?;
        let message = if job.state == JobState::Cancelled {
            format!("cancelled job #{}", job.id)
        } else {
            format!(
                "cancel requested for job #{}: its runner stops it at the next heartbeat",
                job.id
            )
        };
        changed(&job, message)
    }

    /// `retry_job`.
    pub async fn retry_job(&self, input: JobIdInput) -> Result<Answer<JobChangeOutput>, ToolError> {
        self.policy().may_change("retry_job")?;
        self.job_in_scope(input.id).await?;
        let job = self.store.retry(input.id, self.now()).await?;
        changed(&job, format!("job #{} is pending again (attempts reset)", job.id))
    }

    /// `hold_job`.
    pub async fn hold_job(&self, input: JobIdInput) -> Result<Answer<JobChangeOutput>, ToolError> {
        self.policy().may_change("hold_job")?;
        self.job_in_scope(input.id).await?;
        let now = self.now();
        let job = self.store.hold(input.id, Stamp::new(self.opts.who.clone(), now), now).await?;
        changed(&job, format!("held job #{}: it starts only after release_job", job.id))
    }

    /// `release_job`.
    pub async fn release_job(
        &self,
        input: JobIdInput,
    ) -> Result<Answer<JobChangeOutput>, ToolError> {
        self.policy().may_change("release_job")?;
        self.job_in_scope(input.id).await?;
        let job = self.store.release_hold(input.id, &self.opts.who, self.now()).await?;
        changed(&job, format!("released job #{}: it may start again", job.id))
    }

    /// `pause_queue`.
    pub async fn pause_queue(
        &self,
        input: QueueInput,
    ) -> Result<Answer<LaneChangeOutput>, ToolError> {
        self.policy().may_change("pause_queue")?;
        let scope = self.lane_scope("pause_queue", input.queue)?;
        let stamp = Stamp::new(self.opts.who.clone(), self.now());
        let lanes = self
            .store
            .change_lane(&scope, &LaneChange::Pause(stamp))
            .await
            .map_err(ToolError::store(format!("cannot pause {scope}")))?;
        let lane = lane_of(&scope, &lanes.get(&scope));
        let message = format!("paused {scope}: no new job of it starts; running ones go on");
        answer(message.clone(), LaneChangeOutput { lane, message })
    }

    /// `resume_queue`.
    pub async fn resume_queue(
        &self,
        input: QueueInput,
    ) -> Result<Answer<LaneChangeOutput>, ToolError> {
        self.policy().may_change("resume_queue")?;
        let scope = self.lane_scope("resume_queue", input.queue)?;
        let lanes = self
            .store
            .change_lane(&scope, &LaneChange::Resume)
            .await
            .map_err(ToolError::store(format!("cannot resume {scope}")))?;
        let lane = lane_of(&scope, &lanes.get(&scope));
        let mut message = format!("resumed {scope}");
        if scope != LaneScope::All && lanes.all_paused.is_some() {
            message.push_str(
                " (every queue is still paused: resume_queue without `queue` lifts that)",
            );
        }
        answer(message.clone(), LaneChangeOutput { lane, message })
    }

    fn lane_scope(&self, tool: &str, queue: Option<String>) -> Result<LaneScope, ToolError> {
        Ok(match self.policy().queue_for(tool, queue)? {
            Some(q) => LaneScope::Queue(q),
            None => LaneScope::All,
        })
    }

    /// The jobs whose logs `resources/list` offers: the newest in scope.
    pub async fn recent_jobs(&self, limit: usize) -> Result<Vec<Job>, ToolError> {
        let filter = ListFilter {
            queue: self.policy().queue.clone(),
            limit: Some(limit),
            ..ListFilter::default()
        };
        self.store.list(&filter).await.map_err(ToolError::store("cannot list jobs"))
    }

    /// `resources/read` of a job's log: its last [`logs::MAX_CHUNK`] bytes.
    pub async fn log_resource(&self, id: JobId) -> Result<String, ToolError> {
        self.job_in_scope(id).await?;
        let chunk = self.read_log(id, None, Some(logs::MAX_CHUNK), None).await?;
        Ok(chunk.text)
    }
}

/// The URI of job `id`'s log as a resource.
pub fn log_uri(id: JobId) -> String {
    format!("slothqueue://jobs/{id}/log")
}

/// The id in a log resource's URI.
pub fn parse_log_uri(uri: &str) -> Option<JobId> {
    uri.strip_prefix("slothqueue://jobs/")?.strip_suffix("/log")?.parse().ok()
}

/// A job's command, or its kind.
fn what(job: &Job) -> String {
    match job.command() {
        Some(c) if job.kind == slothqueue::core::SHELL_KIND => slothqueue_view::words::one_line(c),
        _ => format!("kind {}", job.kind),
    }
}

fn id_list(ids: &[JobId]) -> String {
    let mut s: Vec<String> = ids.iter().take(20).map(|id| format!("#{id}")).collect();
    if ids.len() > 20 {
        s.push(format!("and {} more", ids.len() - 20));
    }
    if s.is_empty() { "none".to_owned() } else { s.join(", ") }
}

fn changed(job: &Job, message: String) -> Result<Answer<JobChangeOutput>, ToolError> {
    answer(message.clone(), JobChangeOutput { job: job.into(), message })
}

fn lane_out(queue: Option<&str>, s: &LaneSettings) -> LaneOut {
    LaneOut {
        queue: queue.map(str::to_owned),
        limit: s.limit,
        paused_by: s.paused.as_ref().map(|p| p.by.clone()),
        paused_since: s.paused.as_ref().map(|p| p.since.as_millis()),
    }
}

fn lane_of(scope: &LaneScope, s: &LaneSettings) -> LaneOut {
    match scope {
        LaneScope::All => lane_out(None, s),
        LaneScope::Queue(q) => lane_out(Some(q), s),
    }
}
