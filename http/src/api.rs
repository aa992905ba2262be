//! The routes: one table drives both the router and the OpenAPI document,
//! so the document cannot drift from what is served.

mod logs;
mod runners;
mod schedules;

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{MethodRouter, delete, get, patch, post, put};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};
use slothqueue_core::{
    DEFAULT_MAX_RUNTIME, DEFAULT_QUEUE, Event, Job, JobEdit, JobId, JobState, LaneChange,
    LaneScope, Lanes, ListFilter, ListOrder, NewJob, Parent, Pushed, QueuesReport, SHELL_KIND,
    Stamp, Stats, StoreError, Unserved, machine,
};
use slothqueue_runner::RunnerError;
use slothqueue_runner::wait::{WaitTarget, wait};

use crate::extract::{IdParam, JsonBody, MaybeJsonBody, QueryParams, QueueParam, Who, parse_id};
use crate::mask::{self, Secrets};
use crate::serving;
use crate::{AppState, HttpError};

/// Jobs per page of the outbox when the client does not say.
const DEFAULT_LIMIT: usize = 50;
/// The most jobs one page may hold.
const MAX_LIMIT: usize = 500;
/// The most jobs one batch enqueue may hold (the body limit bounds it too).
const MAX_BATCH: usize = 10_000;
/// The longest `?wait=` a client may ask for, in seconds: long enough that
/// a client polls a few times a minute at most, short enough that a
/// forgotten request does not hold a connection for long.
pub(crate) const MAX_WAIT_SECS: u64 = 120;

/// One served route.
pub(crate) struct RouteSpec {
    /// Upper-case HTTP method.
    pub method: &'static str,
    /// The path, in the syntax axum and OpenAPI share (`{id}`).
    pub path: &'static str,
    /// The handler.
    pub handler: fn() -> MethodRouter<AppState>,
    /// The OpenAPI operation object.
    pub operation: fn() -> Value,
}

/// Every route the router serves; nothing else is served.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "POST",
        path: "/api/tasks/enqueue",
        handler: || post(enqueue),
        operation: op_enqueue,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/enqueue/batch",
        handler: || post(enqueue_batch),
        operation: op_enqueue_batch,
    },
    RouteSpec {
        method: "GET",
        path: "/api/tasks/outbox",
        handler: || get(list),
        operation: op_list,
    },
    RouteSpec {
        method: "GET",
        path: "/api/tasks/outbox/stats",
        handler: || get(stats),
        operation: op_stats,
    },
    RouteSpec {
        method: "GET",
        path: "/api/tasks/outbox/{id}",
        handler: || get(show),
        operation: op_show,
    },
    RouteSpec {
        method: "PATCH",
        path: "/api/tasks/outbox/{id}",
        handler: || patch(edit),
        operation: op_edit,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/outbox/{id}/clone",
        handler: || post(clone),
        operation: op_clone,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/outbox/{id}/cancel",
        handler: || post(cancel),
        operation: op_cancel,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/outbox/{id}/retry",
        handler: || post(retry),
        operation: op_retry,
    },
    RouteSpec {
        method: "GET",
        path: "/api/tasks/outbox/{id}/log",
        handler: || get(logs::log),
        operation: logs::op_log,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/outbox/{id}/hold",
        handler: || post(hold),
        operation: op_hold,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/outbox/{id}/release",
        handler: || post(release),
        operation: op_release,
    },
    RouteSpec { method: "GET", path: "/api/queues", handler: || get(queues), operation: op_queues },
    RouteSpec {
        method: "GET",
        path: "/api/runners",
        handler: || get(runners::runners),
        operation: runners::op_runners,
    },
    RouteSpec {
        method: "PUT",
        path: "/api/queues/{queue}/limit",
        handler: || put(set_limit),
        operation: op_set_limit,
    },
    RouteSpec {
        method: "POST",
        path: "/api/queues/{queue}/pause",
        handler: || post(pause_queue),
        operation: op_pause_queue,
    },
    RouteSpec {
        method: "POST",
        path: "/api/queues/{queue}/resume",
        handler: || post(resume_queue),
        operation: op_resume_queue,
    },
    RouteSpec {
        method: "POST",
        path: "/api/pause",
        handler: || post(pause_all),
        operation: op_pause_all,
    },
    RouteSpec {
        method: "POST",
        path: "/api/resume",
        handler: || post(resume_all),
        operation: op_resume_all,
    },
    RouteSpec {
        method: "GET",
        path: "/api/schedules",
        handler: || get(schedules::list),
        operation: schedules::op_list,
    },
    RouteSpec {
        method: "POST",
        path: "/api/schedules",
        handler: || post(schedules::put),
        operation: schedules::op_put,
    },
    RouteSpec {
        method: "GET",
        path: "/api/schedules/{key}",
        handler: || get(schedules::show),
        operation: schedules::op_show,
    },
    RouteSpec {
        method: "DELETE",
        path: "/api/schedules/{key}",
        handler: || delete(schedules::remove),
        operation: schedules::op_remove,
    },
    RouteSpec {
        method: "POST",
        path: "/api/schedules/{key}/pause",
        handler: || post(schedules::pause),
        operation: schedules::op_pause,
    },
    RouteSpec {
        method: "POST",
        path: "/api/schedules/{key}/resume",
        handler: || post(schedules::resume),
        operation: schedules::op_resume,
    },
    RouteSpec {
        method: "GET",
        path: "/api/openapi.json",
        handler: || get(openapi),
        operation: op_openapi,
    },
    RouteSpec {
        method: "GET",
        path: crate::metrics::PATH,
        handler: || get(crate::metrics::metrics),
        operation: crate::metrics::op_metrics,
    },
    RouteSpec {
        method: "GET",
        path: crate::guard::HEALTHZ,
        handler: || get(healthz),
        operation: op_healthz,
    },
];

/// The body of `POST /api/tasks/enqueue`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnqueueRequest {
    kind: String,
    payload: Value,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    priority: Option<i32>,
    #[serde(default)]
    scheduled_for: Option<String>,
    #[serde(default)]
    max_attempts: Option<u32>,
    /// Absent: [`DEFAULT_MAX_RUNTIME`]; `null`: unlimited; a number: seconds.
    #[serde(default, deserialize_with = "present")]
    max_runtime: Option<Option<f64>>,
    #[serde(default)]
    queue: Option<String>,
    /// Parents: numbers are job ids, strings idempotency keys.
    #[serde(default)]
    after: Option<Vec<Value>>,
}

/// The body of `PATCH /api/tasks/outbox/{id}` and of `POST
/// /api/tasks/outbox/{id}/clone`: what to change, every field optional.
/// Times and durations in milliseconds, as the job JSON has them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EditRequest {
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    payload: Option<Value>,
    #[serde(default)]
    priority: Option<i32>,
    /// Absent: unchanged; `null`: no limit; a number: milliseconds.
    #[serde(default, deserialize_with = "present")]
    max_runtime: Option<Option<u64>>,
    #[serde(default)]
    max_attempts: Option<u32>,
    /// UTC milliseconds since the epoch.
    #[serde(default)]
    not_before: Option<i64>,
    /// Milliseconds from now (not with `not_before`).
    #[serde(default)]
    delay: Option<u64>,
    #[serde(default)]
    queue: Option<String>,
    #[serde(default)]
    env: Option<BTreeMap<String, String>>,
    #[serde(default)]
    limits: Option<slothqueue_core::Limits>,
}

impl EditRequest {
    /// The edit this body asks for, at `now`. A whole `payload` for a
    /// shell job is completed as an enqueue's is (`cwd`, `env`).
    fn into_edit(
        self,
        app: &AppState,
        kind: Option<&str>,
        now: slothqueue_core::Timestamp,
    ) -> Result<JobEdit, HttpError> {
        let not_before = match (self.not_before, self.delay) {
            (Some(_), Some(_)) => return Err(bad("give `not_before` or `delay`, not both")),
            (Some(ms), None) => Some(slothqueue_core::Timestamp::from_millis(ms)),
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
            (Some(p), Some(SHELL_KIND)) => Some(shell_payload(p, app)?),
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
        })
    }
}

/// Tells an explicit `null` (`Some(None)`) from an absent field (`None`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The query of `GET /api/tasks/outbox`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    kind: Option<String>,
    queue: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
    show_secrets: Option<String>,
}

/// The query of `GET /api/tasks/outbox/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShowQuery {
    wait: Option<String>,
    show_secrets: Option<String>,
}

#[derive(Debug, Serialize)]
struct JobPage {
    jobs: Vec<Job>,
    next_cursor: Option<JobId>,
}

/// The limit in the body of `PUT /api/queues/{queue}/limit`: an object
/// with one field, `limit`, a whole number from 0 (no limit) to `u32::MAX`.
/// Read by hand rather than derived: serde would also take `[2]` for the
/// object, and name `-1`'s fault in its own words.
fn lane_limit(body: serde_json::Map<String, Value>) -> Result<u32, HttpError> {
    if let Some(key) = body.keys().find(|k| *k != "limit") {
        return Err(bad(format!("invalid json body: unknown field `{key}`, expected `limit`")));
    }
    let v = body.get("limit").ok_or_else(|| bad("invalid json body: missing field `limit`"))?;
    v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
        bad(format!(
            "invalid json body: limit: expected a whole number from 0 (no limit) to {}, got {v}",
            u32::MAX
        ))
    })
}

/// One lane's settings as the lane routes answer them.
#[derive(Debug, Serialize)]
struct LaneView {
    queue: String,
    /// 0 is no limit.
    limit: u32,
    /// The lane's own pause.
    paused: Option<Stamp>,
}

impl LaneView {
    fn of(lanes: &Lanes, queue: &str) -> LaneView {
        let settings = lanes.of(queue);
        LaneView { queue: queue.to_owned(), limit: settings.limit, paused: settings.paused }
    }
}

/// The answer of the per-queue lane routes: the lane after the change,
/// and the pause of every queue (which stops this lane too, whatever its
/// own settings say).
#[derive(Debug, Serialize)]
struct QueueLane {
    #[serde(flatten)]
    lane: LaneView,
    all_paused: Option<Stamp>,
}

/// The answer of `POST /api/pause` and `/api/resume`: every lane with
/// settings, after the change.
#[derive(Debug, Serialize)]
struct LanesView {
    all_paused: Option<Stamp>,
    queues: Vec<LaneView>,
}

impl From<&Lanes> for LanesView {
    fn from(lanes: &Lanes) -> Self {
        LanesView {
            all_paused: lanes.all_paused.clone(),
            queues: lanes.queues.keys().map(|q| LaneView::of(lanes, q)).collect(),
        }
    }
}

#[derive(Debug, Serialize)]
struct JobWithEvents {
    #[serde(flatten)]
    job: Job,
    events: Vec<Event>,
    /// Why no live runner takes this pending job (`no handler for kind
    /// download`); absent when one can.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting: Option<String>,
}

/// The answer of `GET /api/tasks/outbox/stats`: the store's counts and
/// the pending jobs no live runner can run.
#[derive(Debug, Serialize)]
struct StatsAnswer {
    #[serde(flatten)]
    stats: Stats,
    unserved: Vec<Unserved>,
}

fn bad(msg: impl Into<String>) -> HttpError {
    HttpError::BadRequest(msg.into())
}

impl EnqueueRequest {
    fn into_new_job(self, app: &AppState) -> Result<NewJob, HttpError> {
        let payload =
            if self.kind == SHELL_KIND { shell_payload(self.payload, app)? } else { self.payload };
        let mut new = NewJob::new(self.kind, payload);
        new.queue = self.queue.unwrap_or_else(|| DEFAULT_QUEUE.to_owned());
        new.priority = self.priority.unwrap_or(0);
        new.max_attempts = self.max_attempts;
        new.idempotency_key = self.idempotency_key;
        new.max_runtime = match self.max_runtime {
            None => Some(DEFAULT_MAX_RUNTIME),
            Some(None) => None,
            Some(Some(secs)) => {
                Some(Duration::try_from_secs_f64(secs).ok().filter(|d| !d.is_zero()).ok_or_else(
                    || bad("max_runtime must be a positive number of seconds or null"),
                )?)
            }
        };
        if let Some(at) = self.scheduled_for {
            let ts: jiff::Timestamp = at.parse().map_err(|e| {
                bad(format!(
                    "scheduled_for must be an rfc 3339 timestamp such as 2030-01-02T03:04:05Z, in the years 1970 to 9999: {e}"
                ))
            })?;
            new.not_before = Some(slothqueue_core::Timestamp::from_millis(ts.as_millisecond()));
        }
        new.after = parents(self.after.unwrap_or_default())?;
        machine::validate(&new).map_err(|e| bad(api_words(&e.to_string())))?;
        Ok(new)
    }
}

/// `after` as the core takes it: a number is a job id, a string a key.
fn parents(after: Vec<Value>) -> Result<Vec<Parent>, HttpError> {
    after
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Number(n) => n.as_i64().map(Parent::Id).ok_or_else(|| {
                bad(format!("after[{i}]: {n} is not a job id (a positive integer)"))
            }),
            Value::String(key) => Ok(Parent::Key(key)),
            other => Err(bad(format!(
                "after[{i}]: expected a job id (a number) or an idempotency key (a string), got {other}"
            ))),
        })
        .collect()
}

/// The core's messages name the CLI's flag (`--after 9: no job #9`); the
/// API's field is `after`.
fn api_words(message: &str) -> String {
    message.replace("--after", "after")
}

/// A store refusal in the API's words.
fn refusal(e: StoreError) -> HttpError {
    match e {
        StoreError::InvalidInput(m) => HttpError::Store(StoreError::InvalidInput(api_words(&m))),
        StoreError::InBatch { index, error } => {
            HttpError::InBatch { index, error: Box::new(refusal(*error)) }
        }
        e => HttpError::Store(e),
    }
}

/// `?wait=SECONDS`: a non-negative decimal number of seconds (`5`, `0.5`),
/// at most [`MAX_WAIT_SECS`].
fn parse_wait(raw: &str) -> Result<Duration, HttpError> {
    let refused = || {
        bad(format!(
            "wait must be a number of seconds from 0 to {MAX_WAIT_SECS}, such as 30 or 0.5"
        ))
    };
    let (whole, frac) = raw.split_once('.').unwrap_or((raw, "0"));
    let digits = |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(frac) {
        return Err(refused());
    }
    let secs: f64 = raw.parse().map_err(|_| refused())?;
    if !(0.0..=MAX_WAIT_SECS as f64).contains(&secs) {
        return Err(refused());
    }
    Duration::try_from_secs_f64(secs).map_err(|_| refused())
}

/// A shell payload as the runner expects it: `command`, `cwd` (the server's
/// working directory unless given, recorded now as `add` does) and `env`.
fn shell_payload(payload: Value, app: &AppState) -> Result<Value, HttpError> {
    let Value::Object(mut map) = payload else {
        return Err(bad("a shell job needs a payload object with a string `command`"));
    };
    // `env_mode` and `limits` are checked by `machine::validate` with the
    // rest of the job. Without `"env_mode": "exact"` the job runs with the
    // runner's environment under `env`: the API records nothing of the
    // server's own.
    if let Some(key) = map
        .keys()
        .find(|k| !matches!(k.as_str(), "command" | "cwd" | "env" | "env_mode" | "limits"))
    {
        return Err(bad(format!(
            "unknown field `{key}` in the shell payload, expected `command`, `cwd`, `env`, `env_mode` or `limits`"
        )));
    }
    match map.get("cwd") {
        Some(Value::String(cwd)) if cwd.starts_with('/') => {}
        Some(_) => return Err(bad("the shell payload's `cwd` must be an absolute path")),
        None => {
            let cwd = app.api.default_cwd.as_ref().ok_or_else(|| {
                bad("the server's working directory is unknown: give the payload a `cwd`")
            })?;
            let cwd = cwd
                .to_str()
                .ok_or_else(|| bad("the server's working directory is not utf-8: give a `cwd`"))?;
            map.insert("cwd".to_owned(), Value::String(cwd.to_owned()));
        }
    }
    match map.get("env") {
        None => {
            map.insert("env".to_owned(), json!({}));
        }
        Some(Value::Object(env)) if env.values().all(Value::is_string) => {}
        Some(_) => {
            return Err(bad("the shell payload's `env` must be an object of string values"));
        }
    }
    Ok(Value::Object(map))
}

async fn enqueue(
    State(app): State<AppState>,
    JsonBody(req): JsonBody<EnqueueRequest>,
) -> Result<(StatusCode, Json<Pushed>), HttpError> {
    let new = req.into_new_job(&app)?;
    let pushed = app.store.push(new, app.api.clock.now()).await.map_err(refusal)?;
    if pushed.created {
        app.api.wake_worker();
    }
    let status = if pushed.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(mask::pushed(pushed))))
}

/// Many jobs in one transaction (`push_many`): all or none. A later job
/// may name an earlier one's key in `after`.
async fn enqueue_batch(
    State(app): State<AppState>,
    JsonBody(reqs): JsonBody<Vec<EnqueueRequest>>,
) -> Result<(StatusCode, Json<Vec<Pushed>>), HttpError> {
    if reqs.len() > MAX_BATCH {
        return Err(bad(format!(
            "a batch holds at most {MAX_BATCH} jobs, this one {}: send it in parts",
            reqs.len()
        )));
    }
    let jobs = reqs
        .into_iter()
        .enumerate()
        .map(|(index, req)| {
            req.into_new_job(&app).map_err(|e| HttpError::InBatch { index, error: Box::new(e) })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pushed = app.store.push_many(jobs, app.api.clock.now()).await.map_err(refusal)?;
    let created = pushed.iter().any(|p| p.created);
    if created {
        app.api.wake_worker();
    }
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(pushed.into_iter().map(mask::pushed).collect())))
}

async fn list(
    State(app): State<AppState>,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<JobPage>, HttpError> {
    let state =
        q.state.map(|s| s.parse::<JobState>()).transpose().map_err(|e| bad(e.to_string()))?;
    let limit = match q.limit {
        None => DEFAULT_LIMIT,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=MAX_LIMIT).contains(l))
            .ok_or_else(|| bad(format!("limit must be an integer from 1 to {MAX_LIMIT}")))?,
    };
    let cursor =
        q.cursor.map(|c| parse_id(&c).ok_or_else(|| bad("cursor must be a job id"))).transpose()?;
    let secrets = Secrets::from_query(q.show_secrets.as_deref())?;
    let filter = ListFilter {
        state,
        queue: q.queue,
        kind: q.kind,
        // One more than asked tells whether another page follows.
        limit: Some(limit + 1),
        cursor,
        order: ListOrder::Newest,
    };
    let mut jobs = app.store.list(&filter).await?;
    let next_cursor = if jobs.len() > limit {
        jobs.truncate(limit);
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    let jobs = jobs.into_iter().map(|j| mask::job(j, secrets)).collect();
    Ok(Json(JobPage { jobs, next_cursor }))
}

/// One job with its trail; with `?wait=SECONDS`, once it is finished or
/// the time is up, whichever comes first (the answer says which by the
/// job's state), also when another process runs it: the wait is woken by
/// the queue file's changes ([`slothqueue_runner::wait`]). A server that
/// shuts down answers its waits at once.
async fn show(
    State(app): State<AppState>,
    IdParam(id): IdParam,
    QueryParams(q): QueryParams<ShowQuery>,
) -> Result<Json<JobWithEvents>, HttpError> {
    let wait_for = q.wait.as_deref().map(parse_wait).transpose()?;
    let secrets = Secrets::from_query(q.show_secrets.as_deref())?;
    if let Some(d) = wait_for.filter(|d| !d.is_zero()) {
        let deadline = tokio::time::Instant::now() + d;
        let mut closing = app.api.closing.subscribe();
        let target = WaitTarget::Jobs(vec![id]);
        tokio::select! {
            waited = wait(app.store.as_ref(), &app.api.watch, &target, Some(deadline)) => {
                match waited {
                    Ok(_) => {}
                    Err(RunnerError::Store { source, .. }) => return Err(source.into()),
                    Err(_) => return Err(HttpError::Internal),
                }
            }
            _ = closing.wait_for(|closing| *closing) => {}
        }
    }
    let job = app.store.get(id).await?;
    let events = app.store.events(id).await?;
    let waiting = if job.state == JobState::Pending {
        let live = serving::live_runners(app.store.as_ref(), app.api.clock.now()).await?;
        serving::waiting(&job, &live)
    } else {
        None
    };
    Ok(Json(JobWithEvents { job: mask::job(job, secrets), events, waiting }))
}

async fn cancel(State(app): State<AppState>, IdParam(id): IdParam) -> Result<Json<Job>, HttpError> {
    let job = app.store.cancel(id, app.api.clock.now()).await?;
    // A running job is only flagged; waking the worker lets it notice now.
    app.api.wake_worker();
    Ok(Json(mask::job(job, Secrets::Masked)))
}

/// Runs a failed or cancelled job again: pending now, its attempts
/// counted afresh; the jobs a dependency's failure cancelled come back
/// with it.
async fn retry(State(app): State<AppState>, IdParam(id): IdParam) -> Result<Json<Job>, HttpError> {
    let job = app.store.retry(id, app.api.clock.now()).await.map_err(refusal)?;
    app.api.wake_worker();
    Ok(Json(mask::job(job, Secrets::Masked)))
}

/// The edit a body asks of job `id`. A whole payload needs the job's kind
/// (a shell payload is completed as an enqueue's); the kind never
/// changes, so reading it before the write is safe.
async fn edit_of(
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
async fn edit(
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
async fn clone(
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
async fn hold(
    State(app): State<AppState>,
    IdParam(id): IdParam,
    Who(by): Who,
) -> Result<Json<Job>, HttpError> {
    let now = app.api.clock.now();
    Ok(Json(mask::job(app.store.hold(id, Stamp::new(by, now), now).await?, Secrets::Masked)))
}

/// Releases a held job; a pending job not held is left as it is.
async fn release(
    State(app): State<AppState>,
    IdParam(id): IdParam,
    Who(by): Who,
) -> Result<Json<Job>, HttpError> {
    let job = app.store.release_hold(id, &by, app.api.clock.now()).await?;
    // It may be due now: the worker need not wait for its next poll.
    app.api.wake_worker();
    Ok(Json(mask::job(job, Secrets::Masked)))
}

/// Every lane with its counts and settings.
async fn queues(State(app): State<AppState>) -> Result<Json<QueuesReport>, HttpError> {
    Ok(Json(app.store.queues(app.api.clock.now()).await?))
}

/// One write of one lane's settings, then the worker is woken: a raised
/// limit or a resume lets it start jobs now, not at its next look.
async fn change_lane(
    app: &AppState,
    scope: &LaneScope,
    change: LaneChange,
) -> Result<Lanes, HttpError> {
    let lanes = app.store.change_lane(scope, &change).await.map_err(refusal)?;
    app.api.wake_worker();
    Ok(lanes)
}

fn queue_lane(lanes: &Lanes, queue: &str) -> Json<QueueLane> {
    Json(QueueLane { lane: LaneView::of(lanes, queue), all_paused: lanes.all_paused.clone() })
}

async fn set_limit(
    State(app): State<AppState>,
    QueueParam(queue): QueueParam,
    JsonBody(body): JsonBody<serde_json::Map<String, Value>>,
) -> Result<Json<QueueLane>, HttpError> {
    let limit = lane_limit(body)?;
    let scope = LaneScope::Queue(queue);
    let lanes = change_lane(&app, &scope, LaneChange::Limit(limit)).await?;
    Ok(queue_lane(&lanes, scope.key()))
}

async fn pause_queue(
    State(app): State<AppState>,
    QueueParam(queue): QueueParam,
    Who(by): Who,
) -> Result<Json<QueueLane>, HttpError> {
    let scope = LaneScope::Queue(queue);
    let stamp = Stamp::new(by, app.api.clock.now());
    let lanes = change_lane(&app, &scope, LaneChange::Pause(stamp)).await?;
    Ok(queue_lane(&lanes, scope.key()))
}

async fn resume_queue(
    State(app): State<AppState>,
    QueueParam(queue): QueueParam,
) -> Result<Json<QueueLane>, HttpError> {
    let scope = LaneScope::Queue(queue);
    let lanes = change_lane(&app, &scope, LaneChange::Resume).await?;
    Ok(queue_lane(&lanes, scope.key()))
}

async fn pause_all(
    State(app): State<AppState>,
    Who(by): Who,
) -> Result<Json<LanesView>, HttpError> {
    let stamp = Stamp::new(by, app.api.clock.now());
    let lanes = change_lane(&app, &LaneScope::All, LaneChange::Pause(stamp)).await?;
    Ok(Json(LanesView::from(&lanes)))
}

async fn resume_all(State(app): State<AppState>) -> Result<Json<LanesView>, HttpError> {
    let lanes = change_lane(&app, &LaneScope::All, LaneChange::Resume).await?;
    Ok(Json(LanesView::from(&lanes)))
}

/// The counts, and the pending jobs no live runner can run (among the
/// first [`slothqueue_core::serving::UNSERVED_SCAN`] in claim order), by
/// queue and kind.
async fn stats(State(app): State<AppState>) -> Result<Json<StatsAnswer>, HttpError> {
    let now = app.api.clock.now();
    let stats = app.store.stats(now).await?;
    let live = serving::live_runners(app.store.as_ref(), now).await?;
    let unserved = serving::unserved(app.store.as_ref(), &live).await?;
    Ok(Json(StatsAnswer { stats, unserved }))
}

async fn openapi(State(app): State<AppState>) -> Json<Value> {
    Json(openapi_document(app.api.server_addr))
}

async fn healthz() -> Json<Value> {
    Json(json!({ "ok": true }))
}

/// The answer for a path no route serves.
pub(crate) async fn no_route() -> HttpError {
    HttpError::NotFound("no such route".to_owned())
}

/// The answer for a served path with the wrong method.
pub(crate) async fn wrong_method(method: axum::http::Method) -> HttpError {
    HttpError::MethodNotAllowed { method: method.to_string() }
}

/// The OpenAPI 3.1 document describing exactly [`ROUTES`], served from
/// `addr` (the bound address; the default one when not known).
pub(crate) fn openapi_document(addr: Option<std::net::SocketAddr>) -> Value {
    let addr = addr.unwrap_or(crate::DEFAULT_ADDR);
    let mut paths = serde_json::Map::new();
    for route in ROUTES {
        let entry = paths.entry(route.path).or_insert_with(|| json!({}));
        if let Value::Object(ops) = entry {
            ops.insert(route.method.to_ascii_lowercase(), (route.operation)());
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "slothqueue",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A durable background-job queue for one machine. Every route but /healthz needs `Authorization: Bearer <token>` (the token is in `<queue>.token` beside the queue file unless given), a loopback Host header, and for bodies `Content-Type: application/json`. Errors are `{\"error\": \"...\", \"status\": N}`. Timestamps are UTC milliseconds since the epoch.",
        },
        "servers": [{ "url": format!("http://{addr}") }],
        "security": [{ "bearer": [] }],
        "paths": paths,
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": schemas(),
            "responses": {
                "Error": {
                    "description": "the request was refused",
                    "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
                }
            }
        }
    })
}

fn ok_json(description: &str, schema: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": format!("#/components/schemas/{schema}") } } }
    })
}

fn errors(codes: &[&str]) -> serde_json::Map<String, Value> {
    codes
        .iter()
        .map(|c| ((*c).to_owned(), json!({ "$ref": "#/components/responses/Error" })))
        .collect()
}

fn responses(ok: &[(&str, Value)], codes: &[&str]) -> Value {
    let mut map = errors(codes);
    for (code, v) in ok {
        map.insert((*code).to_owned(), v.clone());
    }
    Value::Object(map)
}

fn id_param() -> Value {
    json!({
        "name": "id", "in": "path", "required": true,
        "schema": { "type": "integer", "minimum": 1, "format": "int64" }
    })
}

fn op_enqueue() -> Value {
    json!({
        "operationId": "enqueue",
        "summary": "add a job; with an idempotency key, the same payload is deduplicated and a different one supersedes a pending job",
        "requestBody": {
            "required": true,
            "content": { "application/json": { "schema": { "$ref": "#/components/schemas/EnqueueRequest" } } }
        },
        "responses": responses(
            &[
                ("201", ok_json("a new job was created", "EnqueueResponse")),
                ("200", ok_json("an identical job with this idempotency key already exists", "EnqueueResponse")),
            ],
            &["400", "401", "403", "405", "408", "413", "415", "503"],
        )
    })
}

fn op_enqueue_batch() -> Value {
    json!({
        "operationId": "enqueueBatch",
        "summary": "add many jobs in one transaction, all or none; a job's `after` may name a job earlier in the batch by its idempotency key",
        "requestBody": {
            "required": true,
            "content": { "application/json": { "schema": {
                "type": "array", "maxItems": MAX_BATCH,
                "items": { "$ref": "#/components/schemas/EnqueueRequest" }
            } } }
        },
        "responses": responses(
            &[
                ("201", json!({
                    "description": "the batch was written (at least one job created); one answer per job, in order",
                    "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/EnqueueResponse" } } } }
                })),
                ("200", json!({
                    "description": "every job already existed with its idempotency key: nothing was written",
                    "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/EnqueueResponse" } } } }
                })),
                ("400", json!({
                    "description": "the batch was refused and nothing was written; a refused job is named by its `index` (from 0)",
                    "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
                })),
            ],
            &["401", "403", "405", "408", "413", "415", "503"],
        )
    })
}

/// What a route behind the token can answer besides its own results:
/// malformed headers, no token, a foreign host, a wrong method, a declared
/// body too large or not JSON, a busy queue.
const AUTHED: &[&str] = &["400", "401", "403", "405", "413", "415", "503"];

/// The rule of a queue or kind name (`machine::is_plain_name`).
const PLAIN_NAME: &str = "^[A-Za-z0-9_-][A-Za-z0-9._-]*$";

fn plain_name(description: &str) -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": machine::MAX_NAME_LEN, "pattern": PLAIN_NAME, "description": description })
}

fn op_list() -> Value {
    let q = |name: &str, schema: Value, description: &str| json!({ "name": name, "in": "query", "required": false, "schema": schema, "description": description });
    json!({
        "operationId": "listJobs",
        "summary": "jobs, newest first, a page at a time",
        "parameters": [
            q("state", json!({ "$ref": "#/components/schemas/JobState" }), "only jobs in this state"),
            q("kind", plain_name("a kind"), "only jobs of this kind"),
            q("queue", plain_name("a queue"), "only jobs in this queue"),
            q("limit", json!({ "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT }), "page size"),
            q("cursor", json!({ "type": "integer", "format": "int64", "minimum": 1, "maximum": i64::MAX }), "the next_cursor of the previous page"),
            q("show_secrets", json!({ "type": "boolean", "default": false }), "a shell job's secret-looking env values as stored, not `<secret>`"),
        ],
        "responses": responses(&[("200", ok_json("a page of jobs", "JobPage"))], AUTHED)
    })
}

fn op_stats() -> Value {
    json!({
        "operationId": "stats",
        "summary": "counts per state, how many are due now, when the next one is due, and the pending jobs no live runner can run",
        "responses": responses(&[("200", ok_json("the counts", "Stats"))], AUTHED)
    })
}

fn op_show() -> Value {
    json!({
        "operationId": "showJob",
        "summary": "one job with its event trail; with `wait`, once the job is finished (done, failed or cancelled) or the seconds are up, whichever comes first (200 either way: the job's state says which)",
        "parameters": [
            id_param(),
            {
                "name": "wait", "in": "query", "required": false,
                "schema": { "type": "number", "minimum": 0, "maximum": MAX_WAIT_SECS },
                "description": "seconds to wait for the job to finish, at most 120 (a decimal such as 0.5 is allowed); the wait sees runners in other processes"
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

fn op_cancel() -> Value {
    json!({
        "operationId": "cancelJob",
        "summary": "cancel a pending job, or ask the runner to stop a running one (it then ends cancelled)",
        "parameters": [id_param()],
        "responses": responses(&[("200", ok_json("the job after the cancel", "Job"))], &["400", "401", "403", "404", "405", "409", "413", "415", "503"])
    })
}

fn op_retry() -> Value {
    json!({
        "operationId": "retryJob",
        "summary": "run a failed or cancelled job again: pending now, with its attempts counted afresh; the jobs its failure cancelled come back with it (409 for a pending, running or done job)",
        "parameters": [id_param()],
        "responses": responses(&[("200", ok_json("the job after the retry", "Job"))], &["400", "401", "403", "404", "405", "409", "413", "415", "503"])
    })
}

fn op_edit() -> Value {
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

fn op_clone() -> Value {
    json!({
        "operationId": "cloneJob",
        "summary": "add a new pending job from any job (a failed one, say), with the body's changes (the body may be absent: none); without the idempotency key and the parents; the trails gain `cloned_as` and `cloned_from`",
        "parameters": [id_param()],
        "requestBody": {
            "required": false,
            "content": { "application/json": { "schema": { "$ref": "#/components/schemas/EditRequest" } } }
        },
        "responses": responses(&[("201", ok_json("the new job", "Job"))], &["400", "401", "403", "404", "405", "408", "413", "415", "503"])
    })
}

fn op_hold() -> Value {
    json!({
        "operationId": "holdJob",
        "summary": "hold a pending job: it stays pending and no runner starts it until released; a held job is left as it is; the hold is stamped `http <client address>`",
        "parameters": [id_param()],
        "responses": responses(&[("200", ok_json("the job after the hold", "Job"))], &["400", "401", "403", "404", "405", "409", "413", "415", "503"])
    })
}

fn op_release() -> Value {
    json!({
        "operationId": "releaseJob",
        "summary": "release a held job: it is due again when its time and parents say; a pending job not held is left as it is",
        "parameters": [id_param()],
        "responses": responses(&[("200", ok_json("the job after the release", "Job"))], &["400", "401", "403", "404", "405", "409", "413", "415", "503"])
    })
}

fn op_queues() -> Value {
    json!({
        "operationId": "queues",
        "summary": "every queue with a pending or running job or with settings: its counts, its limit, its pause; and the pause of every queue",
        "responses": responses(&[("200", ok_json("the lanes", "QueuesReport"))], AUTHED)
    })
}

fn queue_param() -> Value {
    json!({ "name": "queue", "in": "path", "required": true, "schema": plain_name("a queue") })
}

/// What a per-queue lane route can answer besides the lane.
const LANE_ERRORS: &[&str] = &["400", "401", "403", "405", "413", "415", "503"];

fn op_set_limit() -> Value {
    json!({
        "operationId": "setQueueLimit",
        "summary": "at most `limit` jobs of the queue run at once, across every runner on the queue file; 0 lifts the limit",
        "parameters": [queue_param()],
        "requestBody": {
            "required": true,
            "content": { "application/json": { "schema": { "$ref": "#/components/schemas/LimitRequest" } } }
        },
        "responses": responses(&[("200", ok_json("the lane after the change", "QueueLane"))], &["400", "401", "403", "405", "408", "413", "415", "503"])
    })
}

fn op_pause_queue() -> Value {
    json!({
        "operationId": "pauseQueue",
        "summary": "no job of the queue starts until it is resumed; running jobs go on; a paused queue keeps its first pause's stamp",
        "parameters": [queue_param()],
        "responses": responses(&[("200", ok_json("the lane after the pause", "QueueLane"))], LANE_ERRORS)
    })
}

fn op_resume_queue() -> Value {
    json!({
        "operationId": "resumeQueue",
        "summary": "lifts the queue's own pause (a pause of every queue still holds it: see `all_paused`)",
        "parameters": [queue_param()],
        "responses": responses(&[("200", ok_json("the lane after the resume", "QueueLane"))], LANE_ERRORS)
    })
}

fn op_pause_all() -> Value {
    json!({
        "operationId": "pauseAll",
        "summary": "no job of any queue starts until `POST /api/resume`; running jobs go on",
        "responses": responses(&[("200", ok_json("every lane's settings after the pause", "Lanes"))], AUTHED)
    })
}

fn op_resume_all() -> Value {
    json!({
        "operationId": "resumeAll",
        "summary": "lifts the pause of every queue (a queue paused on its own stays paused)",
        "responses": responses(&[("200", ok_json("every lane's settings after the resume", "Lanes"))], AUTHED)
    })
}

fn op_openapi() -> Value {
    json!({
        "operationId": "openapi",
        "summary": "this document",
        "responses": responses(
            &[("200", json!({ "description": "the OpenAPI document", "content": { "application/json": {} } }))],
            &["400", "401", "403", "405", "413", "415"],
        )
    })
}

fn op_healthz() -> Value {
    json!({
        "operationId": "healthz",
        "summary": "liveness; needs no token",
        "security": [],
        "responses": {
            "200": {
                "description": "the server is up",
                "content": { "application/json": { "schema": {
                    "type": "object", "properties": { "ok": { "const": true } }, "required": ["ok"]
                } } }
            },
            "400": { "$ref": "#/components/responses/Error" },
            "403": { "$ref": "#/components/responses/Error" },
            "405": { "$ref": "#/components/responses/Error" }
        }
    })
}

fn schemas() -> Value {
    let ts = json!({ "type": "integer", "format": "int64", "description": "UTC milliseconds since the epoch" });
    let opt_ts = json!({ "type": ["integer", "null"], "format": "int64", "description": "UTC milliseconds since the epoch" });
    let opt_str = json!({ "type": ["string", "null"] });
    let mut all = json!({
        "Error": {
            "type": "object",
            "properties": {
                "error": { "type": "string" },
                "status": { "type": "integer" },
                "index": { "type": "integer", "description": "batch enqueue only: the refused job's place in the batch, from 0" }
            },
            "required": ["error", "status"]
        },
        "JobState": { "type": "string", "enum": ["pending", "running", "done", "failed", "cancelled"] },
        "EnqueueRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["kind", "payload"],
            "properties": {
                "kind": plain_name("`shell` for a command (its payload is a ShellPayload); any other name runs the handler of that name"),
                "payload": { "description": "any JSON; for kind `shell` a ShellPayload" },
                "idempotency_key": {
                    "type": ["string", "null"], "minLength": 1, "maxLength": machine::MAX_NAME_LEN,
                    "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$",
                    "description": "1 to 128 bytes of printable characters"
                },
                "priority": { "type": ["integer", "null"], "format": "int32", "default": 0 },
                "scheduled_for": { "type": ["string", "null"], "format": "date-time", "description": "RFC 3339, in the years 1970 to 9999; the job is not run before" },
                "max_attempts": { "type": ["integer", "null"], "minimum": 1, "maximum": machine::MAX_ATTEMPTS, "default": 3 },
                "max_runtime": {
                    "type": ["number", "null"],
                    "minimum": machine::MIN_MAX_RUNTIME.as_secs_f64(),
                    "maximum": machine::MAX_MAX_RUNTIME.as_secs(),
                    "default": DEFAULT_MAX_RUNTIME.as_secs(),
                    "description": "seconds (at least 0.001, at most 100 years); null for no limit"
                },
                "queue": {
                    "oneOf": [plain_name("a queue"), { "type": "null" }],
                    "default": DEFAULT_QUEUE
                },
                "after": {
                    "type": ["array", "null"],
                    "maxItems": machine::MAX_PARENTS,
                    "items": { "oneOf": [
                        { "type": "integer", "format": "int64", "minimum": 1, "description": "a job id" },
                        { "type": "string", "minLength": 1, "maxLength": machine::MAX_NAME_LEN, "description": "the idempotency key of a job" }
                    ] },
                    "description": "the jobs this one runs after: it is not run until each is done, and is cancelled when one fails or is cancelled; each must exist (in a batch: earlier in it)"
                }
            }
        },
        "ShellPayload": {
            "type": "object",
            "additionalProperties": false,
            "required": ["command"],
            "properties": {
                "command": {
                    "type": "string", "minLength": 1, "maxLength": machine::MAX_ARG_LEN - 1,
                    "pattern": "^[^\\u0000]*\\S[^\\u0000]*$",
                    "description": "run with `sh -c`; not blank, no NUL, under Linux's 128 KiB argument limit (in bytes)"
                },
                "cwd": { "type": "string", "pattern": "^/[^\\u0000]*$", "description": "an absolute path; the server's working directory when absent" },
                "env": {
                    "type": "object",
                    "propertyNames": { "minLength": 1, "pattern": "^[^=\\u0000]+$" },
                    "additionalProperties": { "type": "string", "pattern": "^[^\\u0000]*$" },
                    "description": "variables for the command, laid over the runner's environment, or with `env_mode` exact the whole environment (plus the job's SLOTHQUEUE_*); names non-empty without `=` or NUL; secret-looking ones are masked in answers unless `show_secrets=true`"
                },
                "env_mode": {
                    "type": "string", "enum": ["inherit", "exact"], "default": "inherit",
                    "description": "`exact`: the job gets exactly `env` (what `slothqueue add` records); `inherit`: the runner's environment with `env` over it"
                },
                "limits": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "nice": { "type": "integer", "minimum": -20, "maximum": 19 },
                        "ionice": { "type": "string", "pattern": "^(idle|best-effort(:[0-7])?)$" },
                        "memory_max": { "type": "integer", "minimum": 1048576, "description": "bytes" },
                        "cpu_weight": { "type": "integer", "minimum": 1, "maximum": 10000 }
                    },
                    "description": "the job's own niceness, I/O class and ceilings; what it leaves out, the runner's defaults (docs/limits.md)"
                }
            }
        },
        "EnqueueResponse": {
            "type": "object",
            "properties": {
                "job": { "$ref": "#/components/schemas/Job" },
                "created": { "type": "boolean" },
                "superseded": { "type": ["integer", "null"], "description": "the id of the pending job this one replaced" }
            },
            "required": ["job", "created", "superseded"]
        },
        "Lease": {
            "type": "object",
            "properties": {
                "owner": { "type": "object" },
                "attempt": { "type": "integer" },
                "until": ts,
                "child_pgid": { "type": ["integer", "null"] }
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
                "held": { "$ref": "#/components/schemas/Stamp", "description": "who held this pending job and when; absent when not held" }
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
                    "waiting": { "type": "string", "description": "why no live runner takes this pending job: `no handler for kind download` (the runners of its queue have no handler for its kind) or `no live runner serves queue Q`; absent when one can, and for a job held or waiting on parents" }
                }, "required": ["events"] }
            ]
        },
        "JobPage": {
            "type": "object",
            "properties": {
                "jobs": { "type": "array", "items": { "$ref": "#/components/schemas/Job" } },
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
                }
            },
            "required": ["pending", "running", "done", "failed", "cancelled", "due_now", "next_due", "unserved"]
        }
    });
    let schedule_schemas = schedules::schemas(&all["EnqueueRequest"]);
    for more in [lane_schemas(), edit_schemas(), schedule_schemas] {
        if let (Value::Object(all), Value::Object(more)) = (&mut all, more) {
            all.extend(more);
        }
    }
    all
}

/// The schemas of `PATCH /api/tasks/outbox/{id}` and of the clone route.
fn edit_schemas() -> Value {
    json!({
        "EditRequest": {
            "type": "object",
            "additionalProperties": false,
            "description": "what to change; a field left out stays as the job has it",
            "properties": {
                "command": { "type": "string", "description": "a new shell command (shell jobs only)" },
                "payload": { "description": "a new payload, whole (not with command, env or limits); for a shell job a ShellPayload" },
                "priority": { "type": "integer", "format": "int32" },
                "max_runtime": { "type": ["integer", "null"], "minimum": 1, "description": "milliseconds; null for no limit" },
                "max_attempts": { "type": "integer", "minimum": 1, "maximum": machine::MAX_ATTEMPTS, "description": "above the attempts already made" },
                "not_before": { "type": "integer", "format": "int64", "description": "due at: UTC milliseconds since the epoch (not with delay)" },
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
                        "ionice": { "type": "string", "description": "`idle`, `best-effort` or `best-effort:0` to `:7`" },
                        "memory_max": { "type": "integer", "minimum": slothqueue_core::shell::MIN_MEMORY_MAX, "description": "bytes" },
                        "cpu_weight": { "type": "integer", "minimum": 1, "maximum": 10000 }
                    }
                }
            }
        }
    })
}

/// The schemas of the lane routes (apart: one `json!` of all of them
/// passes the macro's recursion limit).
fn lane_schemas() -> Value {
    let ts = json!({ "type": "integer", "format": "int64", "description": "UTC milliseconds since the epoch" });
    let stamp = json!({ "$ref": "#/components/schemas/Stamp" });
    let lane_properties = json!({
        "queue": { "type": "string" },
        "limit": { "type": "integer", "format": "int64", "minimum": 0, "maximum": u32::MAX, "description": "at most this many of the queue's jobs run at once; 0 is no limit" },
        "paused": { "oneOf": [stamp, { "type": "null" }], "description": "set while the queue itself is paused" }
    });
    let count =
        |description: &str| json!({ "type": "integer", "minimum": 0, "description": description });
    json!({
        "Stamp": {
            "type": "object",
            "properties": {
                "since": ts,
                "by": { "type": "string", "description": "who: `http <client address>` over this API, `user@host` from the CLI" }
            },
            "required": ["since", "by"]
        },
        "LimitRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["limit"],
            "properties": {
                "limit": { "type": "integer", "format": "int64", "minimum": 0, "maximum": u32::MAX, "description": "0 lifts the limit" }
            }
        },
        "Lane": {
            "type": "object",
            "properties": lane_properties,
            "required": ["queue", "limit", "paused"]
        },
        "QueueLane": {
            "allOf": [
                { "$ref": "#/components/schemas/Lane" },
                {
                    "type": "object",
                    "properties": { "all_paused": { "oneOf": [stamp, { "type": "null" }], "description": "set while every queue is paused: this one too, whatever its own settings" } },
                    "required": ["all_paused"]
                }
            ]
        },
        "Lanes": {
            "type": "object",
            "properties": {
                "all_paused": { "oneOf": [stamp, { "type": "null" }], "description": "set while every queue is paused" },
                "queues": { "type": "array", "items": { "$ref": "#/components/schemas/Lane" }, "description": "the queues with a limit or a pause of their own, by name" }
            },
            "required": ["all_paused", "queues"]
        },
        "QueueInfo": {
            "type": "object",
            "properties": {
                "queue": { "type": "string" },
                "pending": count("pending jobs: due or not, held, or waiting on parents"),
                "due": count("of pending, those a runner could start now if the lane let it"),
                "held": count("of pending, those held"),
                "waiting_on_parents": count("of pending, those waiting on parents not yet done"),
                "running": count("running jobs"),
                "limit": lane_properties["limit"],
                "paused": { "$ref": "#/components/schemas/Stamp", "description": "set while the queue itself is paused; absent otherwise" }
            },
            "required": ["queue", "pending", "due", "held", "waiting_on_parents", "running", "limit"]
        },
        "QueuesReport": {
            "type": "object",
            "properties": {
                "all_paused": { "$ref": "#/components/schemas/Stamp", "description": "set while every queue is paused; absent otherwise" },
                "queues": { "type": "array", "items": { "$ref": "#/components/schemas/QueueInfo" }, "description": "by name" }
            },
            "required": ["queues"]
        }
    })
}
