//! The routes of the jobs in the outbox: list, show (with why a job is
//! not running), stats, and the changes to one job (edit, clone, cancel,
//! retry, hold, release), with their request types and schemas.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use slothqueue_core::{
    Event, Job, JobEdit, JobId, JobState, ListFilter, ListOrder, PendingShown, RunnerRecord,
    SHELL_KIND, Stamp, Stats, Unserved, machine,
};
use slothqueue_runner::RunnerError;
use slothqueue_runner::wait::{WaitTarget, wait_briefly};

use super::doc::{AUTHED, IONICE_PATTERN, id_param, ok_json, plain_name, responses};
use super::enqueue::shell_payload;
use super::{bad, given, present, refusal};
use crate::extract::{IdParam, JsonBody, MaybeJsonBody, QueryParams, Who};
use crate::mask::{self, Secrets};
use crate::serving;
use crate::{AppState, HttpError};

/// Jobs per page of the outbox when the client does not say.
pub(super) const DEFAULT_LIMIT: usize = 50;
/// The most jobs one page may hold.
pub(super) const MAX_LIMIT: usize = 500;
/// The longest `?wait=` a client may ask for, in seconds: long enough that
/// a client polls a few times a minute at most, short enough that a
/// forgotten request does not hold a connection for long.
pub(super) const MAX_WAIT_SECS: u64 = 120;

/// The body of `PATCH /api/tasks/outbox/{id}` and of `POST
/// /api/tasks/outbox/{id}/clone`: what to change, every field optional.
/// Times and durations in milliseconds, as the job JSON has them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EditRequest {
    #[serde(default, deserialize_with = "given")]
    command: Option<String>,
    /// A whole new payload; `null` is one (a handler's payload may be).
    #[serde(default, deserialize_with = "given")]
    payload: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    priority: Option<i32>,
    /// Absent: unchanged; `null`: no limit; a number: milliseconds.
    #[serde(default, deserialize_with = "present")]
    max_runtime: Option<Option<u64>>,
    #[serde(default, deserialize_with = "given")]
    max_attempts: Option<u32>,
    /// UTC milliseconds since the epoch.
    #[serde(default, deserialize_with = "given")]
    not_before: Option<i64>,
    /// Milliseconds from now (not with `not_before`).
    #[serde(default, deserialize_with = "given")]
    delay: Option<u64>,
    #[serde(default, deserialize_with = "given")]
    queue: Option<String>,
    #[serde(default, deserialize_with = "given")]
    env: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "given")]
    limits: Option<slothqueue_core::Limits>,
    /// Absent: unchanged; `null`: none any more; an object: the new request.
    #[serde(default, deserialize_with = "present")]
    gpus: Option<Option<slothqueue_core::GpuRequest>>,
}

impl EditRequest {
    /// The edit this body asks for, at `now`. A whole `payload` for a
    /// shell job is completed as an enqueue's is (`cwd`, `env`).
    pub(super) fn into_edit(
        self,
        app: &AppState,
        kind: Option<&str>,
        now: slothqueue_core::Timestamp,
    ) -> Result<JobEdit, HttpError> {
        // The OpenAPI document's rule, as it says it: a whole payload
        // comes without the fields that change a shell payload's parts,
        // even empty ones.
        if self.payload.is_some()
            && (self.command.is_some() || self.env.is_some() || self.limits.is_some())
        {
            return Err(bad(
                "a whole payload cannot be given with a command, env or limits".to_owned()
            ));
        }
        let not_before = match (self.not_before, self.delay) {
            (Some(_), Some(_)) => return Err(bad("give `not_before` or `delay`, not both")),
            (Some(ms), None) => Some(slothqueue_core::Timestamp::from_millis(ms)),
            (None, Some(ms)) if ms > i64::MAX as u64 => {
                return Err(bad(format!("delay must be at most {} milliseconds", i64::MAX)));
            }
            (None, Some(ms)) => Some(now.saturating_add(Duration::from_millis(ms))),
            (None, None) => None,
        };
        let max_runtime = match self.max_runtime {
            None => None,
            Some(None) => Some(None),
            Some(Some(0)) => {
                return Err(bad("max_runtime must be a positive number of milliseconds or null"));
            }
            Some(Some(ms)) => Some(Some(Duration::from_millis(ms))),
        };
        let limits = self.limits.unwrap_or_default();
        limits.check().map_err(|e| bad(format!("limits: {e}")))?;
        let payload = match (self.payload, kind) {
            (Some(p), Some(SHELL_KIND)) => {
                // What a shell job's payload must be depends on the job
                // being a shell job: the same body fits a handler job.
                let p = shell_payload(p, app).map_err(|e| match e {
                    HttpError::BadRequest(m) => HttpError::Conflict(m),
                    other => other,
                })?;
                // The whole shell payload checked now, by the enqueue's
                // rule, as this job's kind makes it: 409 like the above.
                let probe = slothqueue_core::NewJob::new(SHELL_KIND, p.clone());
                machine::validate(&probe).map_err(|e| HttpError::Conflict(e.to_string()))?;
                super::enqueue::check_cwd(SHELL_KIND, &p)?;
                Some(p)
            }
            (p, _) => p,
        };
        Ok(JobEdit {
            command: self.command,
            payload,
            priority: self.priority,
            max_runtime,
            max_attempts: self.max_attempts,
            not_before,
            queue: self.queue,
            env: self.env.unwrap_or_default(),
            limits,
            gpus: self.gpus,
        })
    }
}

/// The query of `GET /api/tasks/outbox`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    state: Option<String>,
    kind: Option<String>,
    queue: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
    show_secrets: Option<String>,
    search: Option<String>,
}

/// The query of `GET /api/tasks/outbox/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ShowQuery {
    wait: Option<String>,
    show_secrets: Option<String>,
}

#[derive(Debug, Serialize)]
pub(super) struct JobPage {
    jobs: Vec<ListedJob>,
    next_cursor: Option<JobId>,
}

/// A job as a row of the list: the job, and the words the CLI's `list`
/// prints for its state (`slothqueue_view::listing`).
#[derive(Debug, Serialize)]
pub(super) struct ListedJob {
    #[serde(flatten)]
    job: Job,
    /// `held`, `waiting`, or the state (`state_word`).
    shown_state: &'static str,
    /// For a waiting job: `after #16`, `after 3 jobs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting_on: Option<String>,
}

impl ListedJob {
    fn of(job: Job, secrets: Secrets) -> Self {
        let shown_state = slothqueue_view::words::state_word(&job);
        let waiting_on = slothqueue_view::listing::waiting_after(&job);
        ListedJob { job: mask::job(job, secrets), shown_state, waiting_on }
    }
}

/// `?state=`: a state, or `held` / `waiting`, the two kinds of pending
/// job `state_word` names.
fn state_query(raw: Option<String>) -> Result<(Option<JobState>, Option<PendingShown>), HttpError> {
    match raw.as_deref() {
        None => Ok((None, None)),
        Some("held") => Ok((None, Some(PendingShown::Held))),
        Some("waiting") => Ok((None, Some(PendingShown::Waiting))),
        Some(s) => match s.parse::<JobState>() {
            Ok(state) => Ok((Some(state), None)),
            Err(e) => Err(bad(format!("{e}; or held or waiting"))),
        },
    }
}

#[derive(Debug, Serialize)]
pub(super) struct JobWithEvents {
    #[serde(flatten)]
    job: Job,
    events: Vec<Event>,
    /// Why no live runner takes this pending job (`no handler for kind
    /// download`); absent when one can.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting: Option<String>,
    /// Why it is not running yet, or who runs it (the read model's words,
    /// the same `show` prints); absent for a finished job, but one a
    /// dependency's failure cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<String>,
}

/// The answer of `GET /api/tasks/outbox/stats`: the store's counts and
/// the pending jobs no live runner can run.
#[derive(Debug, Serialize)]
pub(super) struct StatsAnswer {
    #[serde(flatten)]
    stats: Stats,
    unserved: Vec<Unserved>,
    /// Each host's GPUs as its live runners last saw them, with who uses
    /// each; absent when no runner looked (docs/gpus.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    gpus: Vec<slothqueue_view::HostGpus>,
}

/// `?wait=SECONDS`: any JSON number from 0 to [`MAX_WAIT_SECS`] (`5`,
/// `0.5`, `88.2499479254102`, `1e1`: a client computing `deadline - now`
/// sends what its language prints), as the OpenAPI document's `number`
/// says.
pub(super) fn parse_wait(raw: &str) -> Result<Duration, HttpError> {
    let refused = || {
        bad(format!(
            "wait must be a number of seconds from 0 to {MAX_WAIT_SECS}, such as 30 or 0.5"
        ))
    };
    let secs = crate::numbers::query_number(raw).and_then(|n| n.as_f64()).ok_or_else(refused)?;
    if !(0.0..=MAX_WAIT_SECS as f64).contains(&secs) {
        return Err(refused());
    }
    Duration::try_from_secs_f64(secs.max(0.0)).map_err(|_| refused())
}

pub(super) async fn list(
    State(app): State<AppState>,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<JobPage>, HttpError> {
    let (state, shown) = state_query(q.state)?;
    let limit = match q.limit {
        None => DEFAULT_LIMIT,
        Some(l) => crate::numbers::query_integer(&l, 1, MAX_LIMIT as i128)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| bad(format!("limit must be an integer from 1 to {MAX_LIMIT}")))?,
    };
    let cursor = q
        .cursor
        .map(|c| {
            crate::numbers::query_integer(&c, 1, i128::from(i64::MAX))
                .and_then(|id| i64::try_from(id).ok())
                .ok_or_else(|| bad("cursor must be a job id"))
        })
        .transpose()?;
    for (what, name) in [("kind", &q.kind), ("queue", &q.queue)] {
        if let Some(name) = name
            && (!machine::is_plain_name(name) || name.len() > machine::MAX_NAME_LEN)
        {
            return Err(bad(format!(
                "{what} must be a name: 1 to {} letters, digits, '-', '_' and '.', not starting with '.'",
                machine::MAX_NAME_LEN
            )));
        }
    }
    let secrets = Secrets::from_query(q.show_secrets.as_deref())?;
    let filter = ListFilter {
        state,
        queue: q.queue,
        kind: q.kind,
        // One more than asked tells whether another page follows.
        limit: Some(limit + 1),
        cursor,
        order: ListOrder::Newest,
        shown,
        search: q.search,
        finished_since: None,
    };
    let mut jobs = app.store.list(&filter).await?;
    let next_cursor = if jobs.len() > limit {
        jobs.truncate(limit);
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    let jobs = jobs.into_iter().map(|j| ListedJob::of(j, secrets)).collect();
    Ok(Json(JobPage { jobs, next_cursor }))
}

/// One job with its trail; with `?wait=SECONDS`, once it is finished or
/// the time is up, whichever comes first (the answer says which by the
/// job's state), also when another process runs it: the wait is woken by
/// the queue file's changes ([`slothqueue_runner::wait`]). A server that
/// shuts down answers its waits at once; one holding as many waits as its
/// file limit allows answers 503.
pub(super) async fn show(
    State(app): State<AppState>,
    IdParam(id): IdParam,
    QueryParams(q): QueryParams<ShowQuery>,
) -> Result<Json<JobWithEvents>, HttpError> {
    let wait_for = q.wait.as_deref().map(parse_wait).transpose()?;
    let secrets = Secrets::from_query(q.show_secrets.as_deref())?;
    if let Some(d) = wait_for.filter(|d| !d.is_zero()) {
        // Held while waiting: a poll the file limit has no room for is
        // refused now rather than starve the server (`long_poll`).
        let _place = app.api.long_polls.enter()?;
        let deadline = tokio::time::Instant::now() + d;
        let mut closing = app.api.closing.subscribe();
        let target = WaitTarget::Jobs(vec![id]);
        tokio::select! {
            waited = wait_briefly(app.store.as_ref(), &app.api.watch, &target, Some(deadline)) => {
                match waited {
                    Ok(_) => {}
                    Err(RunnerError::Store { source, .. }) => return Err(source.into()),
                    Err(_) => return Err(HttpError::Internal),
                }
            }
            _ = closing.wait_for(|closing| *closing) => {}
        }
    }
    let (judge, host) = (serving::judge(), serving::this_host());
    let look = serving::look(&app, &judge, &host);
    let view = slothqueue_view::job(&look, id).await.map_err(serving::view_error)?;
    let live: Vec<RunnerRecord> =
        view.runners.into_iter().filter(|r| r.live).map(|r| r.record).collect();
    let waiting = serving::waiting(&view.job, &live);
    Ok(Json(JobWithEvents {
        job: mask::job(view.job, secrets),
        events: view.events,
        waiting,
        why: view.why,
    }))
}

pub(super) async fn cancel(
    State(app): State<AppState>,
    IdParam(id): IdParam,
) -> Result<Json<Job>, HttpError> {
    let job = app.store.cancel(id, app.api.clock.now()).await?;
    // A running job is only flagged; waking the worker lets it notice now.
    app.api.wake_worker();
    Ok(Json(mask::job(job, Secrets::Masked)))
}

/// Runs a failed or cancelled job again: pending now, its attempts
/// counted afresh; the jobs a dependency's failure cancelled come back
/// with it.
pub(super) async fn retry(
    State(app): State<AppState>,
    IdParam(id): IdParam,
) -> Result<Json<Job>, HttpError> {
    let job = app.store.retry(id, app.api.clock.now()).await.map_err(refusal)?;
    app.api.wake_worker();
    Ok(Json(mask::job(job, Secrets::Masked)))
}

/// The edit a body asks of job `id`. A whole payload needs the job's kind
/// (a shell payload is completed as an enqueue's); the kind never
/// changes, so reading it before the write is safe.
pub(super) async fn edit_of(
    app: &AppState,
    id: JobId,
    req: EditRequest,
) -> Result<(JobEdit, slothqueue_core::Timestamp), HttpError> {
    let now = app.api.clock.now();
    let kind = match &req.payload {
        Some(_) => Some(app.store.get(id).await?.kind),
        None => None,
    };
    Ok((req.into_edit(app, kind.as_deref(), now)?, now))
}

/// Changes a pending (or held) job in one fenced write: a job a runner
/// took since the client looked is refused (409) with nothing changed.
pub(super) async fn edit(
    State(app): State<AppState>,
    IdParam(id): IdParam,
    JsonBody(req): JsonBody<EditRequest>,
) -> Result<Json<Job>, HttpError> {
    let (edit, now) = edit_of(&app, id, req).await?;
    let job = app.store.edit(id, &edit, now).await.map_err(refusal)?;
    // It may be due sooner now: the worker need not wait for its next poll.
    app.api.wake_worker();
    Ok(Json(mask::job(job, Secrets::Masked)))
}

/// Adds a new pending job from job `id` (in any state), the body's
/// changes applied (an empty body: none); no key, no parents.
pub(super) async fn clone(
    State(app): State<AppState>,
    IdParam(id): IdParam,
    MaybeJsonBody(req): MaybeJsonBody<EditRequest>,
) -> Result<(StatusCode, Json<Job>), HttpError> {
    let (edit, now) = edit_of(&app, id, req).await?;
    let job = app.store.clone_job(id, &edit, now).await.map_err(refusal)?;
    app.api.wake_worker();
    Ok((StatusCode::CREATED, Json(mask::job(job, Secrets::Masked))))
}

/// Holds a pending job: it stays pending, no runner starts it until it is
/// released. Holding a held job changes nothing (200, the job as it is).
pub(super) async fn hold(
    State(app): State<AppState>,
    IdParam(id): IdParam,
    Who(by): Who,
) -> Result<Json<Job>, HttpError> {
    let now = app.api.clock.now();
    Ok(Json(mask::job(app.store.hold(id, Stamp::new(by, now), now).await?, Secrets::Masked)))
}

/// Releases a held job; a pending job not held is left as it is.
pub(super) async fn release(
    State(app): State<AppState>,
    IdParam(id): IdParam,
    Who(by): Who,
) -> Result<Json<Job>, HttpError> {
    let job = app.store.release_hold(id, &by, app.api.clock.now()).await?;
    // It may be due now: the worker need not wait for its next poll.
    app.api.wake_worker();
    Ok(Json(mask::job(job, Secrets::Masked)))
}

/// The counts, and the pending jobs no live runner can run (among the
/// first [`slothqueue_core::serving::UNSERVED_SCAN`] in claim order), by
/// queue and kind.
pub(super) async fn stats(State(app): State<AppState>) -> Result<Json<StatsAnswer>, HttpError> {
    let (judge, host) = (serving::judge(), serving::this_host());
    let look = serving::look(&app, &judge, &host);
    let view = slothqueue_view::status(&look).await.map_err(serving::view_error)?;
    Ok(Json(StatsAnswer { stats: view.stats, unserved: view.unserved, gpus: view.gpus }))
}

pub(super) fn op_list() -> Value {
    let q = |name: &str, schema: Value, description: &str| json!({ "name": name, "in": "query", "required": false, "schema": schema, "description": description });
    json!({
        "operationId": "listJobs",
        "summary": "jobs, newest first, a page at a time",
        "parameters": [
            q("state", json!({ "anyOf": [{ "$ref": "#/components/schemas/JobState" }, { "enum": ["held", "waiting"] }] }), "only jobs in this state; `held`: the pending jobs a user holds; `waiting`: the pending jobs not held that wait on parents (`pending` is every pending job)"),
            q("search", json!({ "type": "string" }), "only jobs whose kind, idempotency key or payload JSON text (a shell job's command is in it) contains this text, case-sensitive"),
            q("kind", plain_name("a kind"), "only jobs of this kind"),
            q("queue", plain_name("a queue"), "only jobs in this queue"),
            q("limit", json!({ "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT }), "page size"),
            q("cursor", json!({ "type": "integer", "format": "int64", "minimum": 1, "maximum": i64::MAX }), "the next_cursor of the previous page"),
            q("show_secrets", json!({ "type": "boolean", "default": false }), "a shell job's secret-looking env values as stored, not `<secret>`"),
        ],
        "responses": responses(&[("200", ok_json("a page of jobs", "JobPage"))], AUTHED)
    })
}

pub(super) fn op_stats() -> Value {
    json!({
        "operationId": "stats",
        "summary": "counts per state, how many are due now, when the next one is due, and the pending jobs no live runner can run",
        "responses": responses(&[("200", ok_json("the counts", "Stats"))], AUTHED)
    })
}

pub(super) fn op_show() -> Value {
    json!({
        "operationId": "showJob",
        "summary": "one job with its event trail; with `wait`, once the job is finished (done, failed or cancelled) or the seconds are up, whichever comes first (200 either way: the job's state says which)",
        "parameters": [
            id_param(),
            {
                "name": "wait", "in": "query", "required": false,
                "schema": { "type": "number", "minimum": 0, "maximum": MAX_WAIT_SECS },
                "description": "seconds to wait for the job to finish, any JSON number from 0 to 120 (`30`, `0.5`, `88.2499479254102`, `1e1`); the wait sees runners in other processes"
            },
            {
                "name": "show_secrets", "in": "query", "required": false,
                "schema": { "type": "boolean", "default": false },
                "description": "a shell job's secret-looking env values as stored, not `<secret>`"
            }
        ],
        "responses": responses(&[("200", ok_json("the job", "JobWithEvents"))], &["400", "401", "403", "404", "405", "413", "415", "503"])
    })
}

pub(super) fn op_cancel() -> Value {
    json!({
        "operationId": "cancelJob",
        "summary": "cancel a pending job, or ask the runner to stop a running one (it then ends cancelled)",
        "parameters": [id_param()],
        "responses": responses(&[("200", ok_json("the job after the cancel", "Job"))], &["400", "401", "403", "404", "405", "409", "413", "415", "503"])
    })
}

pub(super) fn op_retry() -> Value {
    json!({
        "operationId": "retryJob",
        "summary": "run a failed or cancelled job again: pending now, with its attempts counted afresh; the jobs its failure cancelled come back with it (409 for a pending, running or done job)",
        "parameters": [id_param()],
        "responses": responses(&[("200", ok_json("the job after the retry", "Job"))], &["400", "401", "403", "404", "405", "409", "413", "415", "503"])
    })
}

pub(super) fn op_edit() -> Value {
    json!({
        "operationId": "editJob",
        "summary": "change a pending (or held) job: only the fields given; one fenced write, so a job a runner took since you looked is refused (409) and nothing is changed; the trail gains an `edited` event naming the fields",
        "parameters": [id_param()],
        "requestBody": {
            "required": true,
            "content": { "application/json": { "schema": { "$ref": "#/components/schemas/EditRequest" } } }
        },
        "responses": responses(&[("200", ok_json("the job after the edit", "Job"))], &["400", "401", "403", "404", "405", "408", "409", "413", "415", "503"])
    })
}

pub(super) fn op_clone() -> Value {
    json!({
        "operationId": "cloneJob",
        "summary": "add a new pending job from any job (a failed one, say), with the body's changes (the body may be absent: none); without the idempotency key and the parents; the trails gain `cloned_as` and `cloned_from`",
        "parameters": [id_param()],
        "requestBody": {
            "required": false,
            "content": { "application/json": { "schema": { "$ref": "#/components/schemas/EditRequest" } } }
        },
        "responses": responses(&[("201", ok_json("the new job", "Job"))], &["400", "401", "403", "404", "405", "408", "409", "413", "415", "503"])
    })
}

pub(super) fn op_hold() -> Value {
    json!({
        "operationId": "holdJob",
        "summary": "hold a pending job: it stays pending and no runner starts it until released; a held job is left as it is; the hold is stamped `http <client address>`",
        "parameters": [id_param()],
        "responses": responses(&[("200", ok_json("the job after the hold", "Job"))], &["400", "401", "403", "404", "405", "409", "413", "415", "503"])
    })
}

pub(super) fn op_release() -> Value {
    json!({
        "operationId": "releaseJob",
        "summary": "release a held job: it is due again when its time and parents say; a pending job not held is left as it is",
        "parameters": [id_param()],
        "responses": responses(&[("200", ok_json("the job after the release", "Job"))], &["400", "401", "403", "404", "405", "409", "413", "415", "503"])
    })
}

/// The schemas of the job answers and of the edit body.
pub(super) fn schemas() -> Value {
    let ts = json!({ "type": "integer", "format": "int64", "description": "UTC milliseconds since the epoch" });
    let opt_ts = json!({ "type": ["integer", "null"], "format": "int64", "description": "UTC milliseconds since the epoch" });
    let opt_str = json!({ "type": ["string", "null"] });
    // Its own value: one `json!` of every schema would pass the macro's
    // recursion limit.
    let host_gpus = json!({
        "type": "array",
        "description": "each host's GPUs as its live runners last saw them, with who uses each; absent when no runner looked (docs/gpus.md)",
        "items": {
            "type": "object",
            "properties": {
                "host": { "type": "string" },
                "error": { "type": ["string", "null"], "description": "why the runner found no GPU" },
                "gpus": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "gpu": { "type": "object", "description": "index, uuid, name, memory_used, memory_total (bytes), utilization (percent), processes" },
                            "use": { "type": "string", "enum": ["free", "held", "busy"] },
                            "job": { "type": "integer", "format": "int64", "description": "with `held`: the job holding it" },
                            "line": { "type": "string", "description": "`GPU 0 held by job #12`" }
                        },
                        "required": ["gpu", "use", "line"]
                    }
                }
            },
            "required": ["host", "gpus"]
        }
    });
    let mut all = json!({
        "JobState": { "type": "string", "enum": ["pending", "running", "done", "failed", "cancelled"] },
        "Lease": {
            "type": "object",
            "properties": {
                "owner": { "type": "object" },
                "attempt": { "type": "integer" },
                "until": ts,
                "child_pgid": { "type": ["integer", "null"] },
                "gpus": {
                    "type": "array",
                    "items": { "$ref": "#/components/schemas/GpuHold" },
                    "description": "the GPUs this attempt holds on its runner's host; absent when none"
                }
            }
        },
        "GpuHold": {
            "type": "object",
            "required": ["index", "uuid"],
            "properties": {
                "index": { "type": "integer", "minimum": 0, "description": "as nvidia-smi numbers it (PCI bus order), what CUDA_VISIBLE_DEVICES names" },
                "uuid": { "type": "string" }
            }
        },
        "Job": {
            "type": "object",
            "properties": {
                "id": { "type": "integer", "format": "int64" },
                "queue": { "type": "string" },
                "kind": { "type": "string" },
                "payload": {},
                "priority": { "type": "integer" },
                "state": { "$ref": "#/components/schemas/JobState" },
                "attempts": { "type": "integer" },
                "max_attempts": { "type": "integer" },
                "max_runtime": { "type": ["integer", "null"], "description": "milliseconds; null for no limit" },
                "not_before": ts,
                "lease": { "oneOf": [{ "$ref": "#/components/schemas/Lease" }, { "type": "null" }] },
                "idempotency_key": opt_str,
                "payload_hash": { "type": "string" },
                "cancel_requested": { "type": "boolean" },
                "last_error": opt_str,
                "result": opt_str,
                "exit_code": { "type": ["integer", "null"] },
                "created_at": ts,
                "started_at": opt_ts,
                "finished_at": opt_ts,
                "after": { "type": "array", "items": { "type": "integer", "format": "int64" }, "description": "the parents' ids; absent when none" },
                "pending_parents": { "type": "integer", "description": "parents not done yet; absent when 0" },
                "cancelled_by": { "type": "integer", "format": "int64", "description": "the job whose failure or cancel cancelled this one; absent when none" },
                "held": { "$ref": "#/components/schemas/Stamp", "description": "who held this pending job and when; absent when not held" },
                "gpus": { "$ref": "#/components/schemas/GpuRequest", "description": "the GPUs it needs free on one host to start (docs/gpus.md); absent when none" }
            },
            "required": ["id", "queue", "kind", "payload", "priority", "state", "attempts", "max_attempts", "not_before", "created_at"]
        },
        "Event": {
            "type": "object",
            "properties": {
                "job_id": { "type": "integer" },
                "at": ts,
                "kind": { "type": "string", "enum": slothqueue_core::EventKind::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>() },
                "owner": opt_str,
                "attempt": { "type": ["integer", "null"] },
                "message": opt_str,
                "retry_at": opt_ts
            },
            "required": ["job_id", "at", "kind"]
        },
        "JobWithEvents": {
            "allOf": [
                { "$ref": "#/components/schemas/Job" },
                { "type": "object", "properties": {
                    "events": { "type": "array", "items": { "$ref": "#/components/schemas/Event" } },
                    "waiting": { "type": "string", "description": "why no live runner takes this pending job: `no handler for kind download` (the runners of its queue have no handler for its kind) or `no live runner serves queue Q`; absent when one can, and for a job held or waiting on parents" },
                    "why": { "type": "string", "description": "why the job is not running yet, or who runs it, in the words `slothqueue show` prints (`held since 10:02:03 by ana@laptop — …`, `not due until 14:00:00 (in 5m)`, `lane full: 2 of 2 running in queue disk …`, `waiting behind 3 due job(s) of higher priority`); for a job a dependency's failure cancelled, why and which retry brings it back; absent for other finished jobs" }
                }, "required": ["events"] }
            ]
        },
        "ListedJob": {
            "allOf": [
                { "$ref": "#/components/schemas/Job" },
                { "type": "object", "properties": {
                    "shown_state": { "type": "string", "enum": ["held", "waiting", "pending", "running", "done", "failed", "cancelled"], "description": "the state as `slothqueue list` words it: `held` for a pending job a user holds, `waiting` for a pending one waiting on parents, else the state" },
                    "waiting_on": { "type": "string", "description": "for a waiting job: `after #16` (its one parent) or `after 3 jobs` (the parents not done yet), as `slothqueue list` prints it; absent for any other job" }
                }, "required": ["shown_state"] }
            ]
        },
        "JobPage": {
            "type": "object",
            "properties": {
                "jobs": { "type": "array", "items": { "$ref": "#/components/schemas/ListedJob" } },
                "next_cursor": { "type": ["integer", "null"], "description": "pass as `cursor` for the next page; null on the last" }
            },
            "required": ["jobs", "next_cursor"]
        },
        "Stats": {
            "type": "object",
            "properties": {
                "pending": { "type": "integer" },
                "waiting_on_parents": { "type": "integer", "description": "of pending, the jobs waiting on parents not yet done" },
                "held": { "type": "integer", "description": "of pending, the jobs held" },
                "running": { "type": "integer" },
                "done": { "type": "integer" },
                "failed": { "type": "integer" },
                "cancelled": { "type": "integer" },
                "due_now": { "type": "integer" },
                "next_due": opt_ts,
                "unserved": {
                    "type": "array",
                    "description": "pending jobs no live runner can run, by queue and kind (among the first 1000 pending jobs in claim order)",
                    "items": {
                        "type": "object",
                        "properties": {
                            "queue": { "type": "string" },
                            "kind": { "type": "string" },
                            "pending": { "type": "integer", "minimum": 1 },
                            "why": { "type": "string", "description": "`no handler for kind download`, or `no live runner serves queue Q`" }
                        },
                        "required": ["queue", "kind", "pending", "why"]
                    }
                },
                "gpus": host_gpus
            },
            "required": ["pending", "running", "done", "failed", "cancelled", "due_now", "next_due", "unserved"]
        }
    });
    if let (Value::Object(all), Value::Object(more)) = (&mut all, edit_schemas()) {
        all.extend(more);
    }
    all
}

/// The schemas of `PATCH /api/tasks/outbox/{id}` and of the clone route.
pub(super) fn edit_schemas() -> Value {
    json!({
        "EditRequest": {
            "type": "object",
            "additionalProperties": false,
            "description": "what to change; a field left out stays as the job has it",
            "allOf": [
                { "not": { "required": ["not_before", "delay"] }, "description": "not_before or delay, not both" },
                { "not": { "required": ["payload", "command"] }, "description": "a whole payload, or its parts" },
                { "not": { "required": ["payload", "env"] } },
                { "not": { "required": ["payload", "limits"] } }
            ],
            "properties": {
                "command": super::enqueue::shell_command("a new shell command (shell jobs only)"),
                "payload": { "$ref": "#/components/schemas/JsonValue", "description": "a new payload, whole (not with command, env or limits): any JSON whose integers fit 64 bits (JsonValue); for a shell job a ShellPayload" },
                "priority": { "type": "integer", "format": "int32" },
                "max_runtime": { "type": ["integer", "null"], "minimum": 1, "maximum": machine::MAX_MAX_RUNTIME.as_millis() as u64, "description": "milliseconds (at most 100 years); null for no limit" },
                "max_attempts": { "type": "integer", "minimum": 1, "maximum": machine::MAX_ATTEMPTS, "description": "above the attempts already made" },
                "not_before": { "type": "integer", "format": "int64", "minimum": 0, "description": "due at: UTC milliseconds since the epoch, not before it (not with delay)" },
                "delay": { "type": "integer", "minimum": 0, "description": "due this many milliseconds from now (not with not_before)" },
                "queue": plain_name("move the job to this queue"),
                "env": {
                    "type": "object",
                    "propertyNames": { "minLength": 1, "pattern": "^[^=\\u0000]+$" },
                    "additionalProperties": { "type": "string" },
                    "description": "variables to set or replace in a shell job's env (the others stay)"
                },
                "limits": {
                    "type": "object",
                    "additionalProperties": false,
                    "description": "the job's own limits to set (the others stay)",
                    "properties": {
                        "nice": { "type": "integer", "minimum": -20, "maximum": 19 },
                        "ionice": { "type": "string", "pattern": IONICE_PATTERN, "description": "`idle`, `best-effort` or `best-effort:0` to `:7`" },
                        "memory_max": { "type": "integer", "minimum": slothqueue_core::shell::MIN_MEMORY_MAX, "description": "bytes" },
                        "cpu_weight": { "type": "integer", "minimum": 1, "maximum": 10000 }
                    }
                }
            }
        }
    })
}
