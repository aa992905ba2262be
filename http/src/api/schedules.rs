//! The schedule routes: recurring jobs stored in the queue file
//! (`slothqueue_core::schedule`). A schedule's job is built by the enqueue
//! route's code ([`EnqueueRequest::into_new_job`]: the same fields, the
//! same defaults, the server's working directory recorded for a shell
//! job), the schedule is checked by `schedule::create` inside the store's
//! write, and every answer shows it as stored with its next fire, its
//! job's secrets masked as a job's are.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use slothqueue_core::schedule::{self, MAX_KEY_LEN, MAX_PERIOD, MIN_PERIOD};
use slothqueue_core::{
    CatchUp, NewSchedule, Overlap, Schedule, ScheduleChange, Spec, Stamp, StoreError, Timestamp,
};

use super::{AUTHED, EnqueueRequest, bad, ok_json, refusal, responses};
use crate::extract::{JsonBody, QueryParams, ScheduleKeyParam, Who};
use crate::mask::{self, Secrets};
use crate::{AppState, HttpError};

/// The zone a schedule's cron fields are read in when the body names
/// none: the server's own zone would make the same request mean other
/// instants on another machine.
const DEFAULT_ZONE: &str = "UTC";

/// The body of `POST /api/schedules`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ScheduleRequest {
    key: String,
    spec: SpecRequest,
    #[serde(default)]
    zone: Option<String>,
    #[serde(default)]
    catch_up: Option<CatchUp>,
    #[serde(default)]
    overlap: Option<Overlap>,
    /// The enqueue body's job fields; a key, parents and a due time are
    /// refused by `schedule::create` (each tick gives its own).
    job: EnqueueRequest,
}

/// The common forms of a cron spec as a JSON Schema pattern, so that a
/// client generated from the document knows an empty or blank one is
/// refused: per field `*`, `*/N` (N from 1 to 9) or a list of values in
/// the field's range (days of the month to 28); or an `@` name. The parser (`Spec::cron`) takes
/// more (ranges, names, bigger steps) and says what it refuses.
fn cron_pattern() -> String {
    let field = |value: &str| format!("(\\*(/[1-9])?|{value}(,{value})*)");
    let fields = [
        field("[0-5]?[0-9]"),
        field("([01]?[0-9]|2[0-3])"),
        // Days 29 to 31 are left out: with February alone they never match.
        field("([1-9]|1[0-9]|2[0-8])"),
        field("([1-9]|1[0-2])"),
        field("[0-7]"),
    ];
    format!("^({}|@(hourly|daily|weekly|monthly|yearly))$", fields.join(" "))
}

/// The zones a schedule may name: the IANA database the core reads them
/// from (`schedule::zone`, jiff's bundled copy).
fn zone_names() -> Vec<String> {
    let db = jiff::tz::TimeZoneDatabase::bundled();
    let mut names: Vec<String> = db.available().map(|n| n.as_str().to_owned()).collect();
    names.sort();
    names
}

/// When a schedule fires, as a request says it: `{"cron": "0 3 * * *"}`
/// or `{"every": SECONDS}` (seconds, as the enqueue body's deprecated
/// `max_runtime_secs`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum SpecRequest {
    Cron(String),
    Every(f64),
}

impl ScheduleRequest {
    /// The schedule this body asks for; its rules are checked by the
    /// core (`Spec::cron`, `Spec::every`, and `schedule::create` in the
    /// store's write).
    fn into_new_schedule(self, app: &AppState) -> Result<NewSchedule, HttpError> {
        let spec = match self.spec {
            SpecRequest::Cron(text) => Spec::cron(&text),
            SpecRequest::Every(secs) => {
                let period = Duration::try_from_secs_f64(secs).map_err(|_| {
                    bad("spec.every must be a number of seconds from 1 to 100 years")
                })?;
                // `schedule::create` keeps whole milliseconds, as JSON
                // does: the same body twice is the same definition.
                Spec::every(period)
            }
        }
        .map_err(|e| bad(format!("spec: {e}")))?;
        let job = self.job.into_new_job(app).map_err(|e| match e {
            HttpError::BadRequest(m) => bad(format!("job: {m}")),
            other => other,
        })?;
        Ok(NewSchedule {
            key: self.key,
            spec,
            zone: self.zone.unwrap_or_else(|| DEFAULT_ZONE.to_owned()),
            catch_up: self.catch_up.unwrap_or_default(),
            overlap: self.overlap.unwrap_or_default(),
            job,
        })
    }
}

/// A schedule as the routes answer it: as stored (its job's secrets
/// masked unless asked), with when it fires next, and its times as a
/// person in its zone reads them.
#[derive(Debug, Serialize)]
pub(super) struct ScheduleView {
    #[serde(flatten)]
    schedule: Schedule,
    /// `Schedule::next_fire`: `null` while paused (or when no slot is left).
    next_fire: Option<Timestamp>,
    /// `next_fire` in the schedule's zone: `2026-12-02 03:00:00 CET`.
    next_fire_local: Option<String>,
    /// The slot of the last fire in the schedule's zone, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_fire_local: Option<String>,
}

impl ScheduleView {
    fn of(mut schedule: Schedule, secrets: Secrets) -> ScheduleView {
        let next_fire = schedule.next_fire();
        let next_fire_local = next_fire.map(|t| schedule.local(t));
        let last_fire_local = schedule.last_fire.as_ref().map(|f| schedule.local(f.slot));
        schedule.job = mask::new_job(schedule.job, secrets);
        ScheduleView { schedule, next_fire, next_fire_local, last_fire_local }
    }
}

/// The answer of `POST /api/schedules`.
#[derive(Debug, Serialize)]
pub(super) struct SchedulePut {
    schedule: ScheduleView,
    /// `false`: the same definition was stored already; nothing written.
    created: bool,
}

/// The answer of `GET /api/schedules`.
#[derive(Debug, Serialize)]
pub(super) struct ScheduleList {
    schedules: Vec<ScheduleView>,
    /// The earliest next fire among them (`schedule::next_fire`).
    next_fire: Option<Timestamp>,
}

/// The answer of `DELETE /api/schedules/{key}`.
#[derive(Debug, Serialize)]
pub(super) struct ScheduleRemoved {
    key: String,
    removed: bool,
}

/// The query of the routes that answer with a schedule as stored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SecretsQuery {
    show_secrets: Option<String>,
}

/// Stores a schedule: 201 when new, 200 when the same definition was
/// stored already, 409 when the key holds another one.
pub(super) async fn put(
    State(app): State<AppState>,
    JsonBody(req): JsonBody<ScheduleRequest>,
) -> Result<(StatusCode, Json<SchedulePut>), HttpError> {
    let new = req.into_new_schedule(&app)?;
    let now = app.api.clock.now();
    let put = match app.store.put_schedule(&new, now).await {
        Ok(put) => put,
        // The store answers `InvalidInput` both for a schedule the core
        // refuses and for another definition under the key. The first is
        // refused by `create` on an empty key too; so a schedule that
        // would be stored on an empty key was refused for what the key
        // holds: a conflict with the stored state, not a bad request.
        // Asking after the store's refusal, not reading before the put,
        // leaves no window in which another writer's schedule would turn
        // the 409 into a 400; nothing was written either way.
        Err(StoreError::InvalidInput(_)) if schedule::create(&new, None, now).is_ok() => {
            return Err(conflict(&app, &new.key).await);
        }
        Err(e) => return Err(refusal(e)),
    };
    if put.created {
        // The runner beside the server sleeps until its next due job or
        // fire: a new schedule may fire sooner.
        app.api.wake_worker();
    }
    let status = if put.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((
        status,
        Json(SchedulePut {
            schedule: ScheduleView::of(put.schedule, Secrets::Masked),
            created: put.created,
        }),
    ))
}

/// The 409 of a put whose key holds another definition, naming that one
/// when it can still be read.
async fn conflict(app: &AppState, key: &str) -> HttpError {
    let stored = match app.store.schedules().await {
        Ok(all) => all.into_iter().find(|s| s.key == key),
        Err(_) => None,
    };
    let held = stored.map_or_else(String::new, |s| format!(" ({} in {})", s.spec, s.zone));
    HttpError::Conflict(format!(
        "schedule `{key}` exists with another definition{held}; remove it first (DELETE /api/schedules/{key})"
    ))
}

/// Every schedule, in key order, and the earliest next fire.
pub(super) async fn list(
    State(app): State<AppState>,
    QueryParams(q): QueryParams<SecretsQuery>,
) -> Result<Json<ScheduleList>, HttpError> {
    let secrets = Secrets::from_query(q.show_secrets.as_deref())?;
    let all = app.store.schedules().await?;
    let next_fire = schedule::next_fire(&all);
    let schedules = all.into_iter().map(|s| ScheduleView::of(s, secrets)).collect();
    Ok(Json(ScheduleList { schedules, next_fire }))
}

/// One schedule; 404 for an unknown key.
pub(super) async fn show(
    State(app): State<AppState>,
    ScheduleKeyParam(key): ScheduleKeyParam,
    QueryParams(q): QueryParams<SecretsQuery>,
) -> Result<Json<ScheduleView>, HttpError> {
    let secrets = Secrets::from_query(q.show_secrets.as_deref())?;
    let found = app.store.schedules().await?.into_iter().find(|s| s.key == key);
    let schedule = found.ok_or(StoreError::NoSchedule(key))?;
    Ok(Json(ScheduleView::of(schedule, secrets)))
}

/// One change in one write; the schedule as it is after (404 for an
/// unknown key).
async fn change(
    app: &AppState,
    key: String,
    change: ScheduleChange,
    now: Timestamp,
) -> Result<Json<ScheduleView>, HttpError> {
    let changed = app.store.change_schedule(&key, &change, now).await.map_err(refusal)?;
    // A pause or resume keeps the schedule; `None` would mean it was gone.
    let schedule = changed.ok_or(StoreError::NoSchedule(key))?;
    // The runner's sleep may now end sooner (resume) or need not (pause).
    app.api.wake_worker();
    Ok(Json(ScheduleView::of(schedule, Secrets::Masked)))
}

/// Pauses a schedule, stamped `http <client address>`: no tick fires until
/// it is resumed. A paused schedule keeps its first pause's stamp.
pub(super) async fn pause(
    State(app): State<AppState>,
    ScheduleKeyParam(key): ScheduleKeyParam,
    Who(by): Who,
) -> Result<Json<ScheduleView>, HttpError> {
    let now = app.api.clock.now();
    change(&app, key, ScheduleChange::Pause(Stamp::new(by, now)), now).await
}

/// Resumes a schedule: it fires from its next slot after now (the slots
/// passed while paused are not run).
pub(super) async fn resume(
    State(app): State<AppState>,
    ScheduleKeyParam(key): ScheduleKeyParam,
) -> Result<Json<ScheduleView>, HttpError> {
    let now = app.api.clock.now();
    change(&app, key, ScheduleChange::Resume, now).await
}

/// Removes a schedule; the jobs its ticks enqueued stay.
pub(super) async fn remove(
    State(app): State<AppState>,
    ScheduleKeyParam(key): ScheduleKeyParam,
) -> Result<Json<ScheduleRemoved>, HttpError> {
    let now = app.api.clock.now();
    match app.store.change_schedule(&key, &ScheduleChange::Remove, now).await.map_err(refusal)? {
        None => Ok(Json(ScheduleRemoved { key, removed: true })),
        // A store that kept it would break `change_schedule`'s promise.
        Some(_) => Err(HttpError::Internal),
    }
}

// --- The OpenAPI document -----------------------------------------------

fn key_param() -> Value {
    json!({
        "name": "key", "in": "path", "required": true,
        "schema": schedule_key("the schedule's key")
    })
}

fn show_secrets_param() -> Value {
    json!({
        "name": "show_secrets", "in": "query", "required": false,
        "schema": { "type": "boolean", "default": false },
        "description": "a shell job's secret-looking env values as stored, not `<secret>`"
    })
}

/// What a route on one schedule can answer besides the schedule.
const KEY_ERRORS: &[&str] = &["400", "401", "403", "404", "405", "413", "415", "503"];

pub(super) fn op_list() -> Value {
    json!({
        "operationId": "listSchedules",
        "summary": "every schedule, by key, each with its next fire; and the earliest next fire",
        "parameters": [show_secrets_param()],
        "responses": responses(&[("200", ok_json("the schedules", "ScheduleList"))], AUTHED)
    })
}

pub(super) fn op_put() -> Value {
    json!({
        "operationId": "putSchedule",
        "summary": "store a schedule: each slot of `spec` enqueues `job` once (its idempotency key is `KEY@SLOT`); the same definition again changes nothing (200); another definition under the key is refused (409): remove it first",
        "requestBody": {
            "required": true,
            "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ScheduleRequest" } } }
        },
        "responses": responses(
            &[
                ("201", ok_json("the schedule was stored", "SchedulePut")),
                ("200", ok_json("the same definition was stored already: nothing was written", "SchedulePut")),
            ],
            &["400", "401", "403", "405", "408", "409", "413", "415", "503"],
        )
    })
}

pub(super) fn op_show() -> Value {
    json!({
        "operationId": "showSchedule",
        "summary": "one schedule as stored, with its next fire",
        "parameters": [key_param(), show_secrets_param()],
        "responses": responses(&[("200", ok_json("the schedule", "Schedule"))], KEY_ERRORS)
    })
}

pub(super) fn op_remove() -> Value {
    json!({
        "operationId": "removeSchedule",
        "summary": "remove a schedule: no tick fires any more; the jobs its ticks enqueued stay",
        "parameters": [key_param()],
        "responses": responses(&[("200", ok_json("the schedule was removed", "ScheduleRemoved"))], KEY_ERRORS)
    })
}

pub(super) fn op_pause() -> Value {
    json!({
        "operationId": "pauseSchedule",
        "summary": "no tick of the schedule fires until it is resumed; a paused schedule keeps its first pause's stamp (`http <client address>`)",
        "parameters": [key_param()],
        "responses": responses(&[("200", ok_json("the schedule after the pause", "Schedule"))], KEY_ERRORS)
    })
}

pub(super) fn op_resume() -> Value {
    json!({
        "operationId": "resumeSchedule",
        "summary": "the schedule fires again from its next slot after now: the slots passed while paused are not run",
        "parameters": [key_param()],
        "responses": responses(&[("200", ok_json("the schedule after the resume", "Schedule"))], KEY_ERRORS)
    })
}

fn schedule_key(description: &str) -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": MAX_KEY_LEN, "pattern": super::PLAIN_NAME, "description": description })
}

/// The fields of the enqueue body a schedule's job may not have: each
/// tick gives its own key (`KEY@SLOT`), and has no parents or due time.
const TICK_FIELDS: [&str; 3] = ["idempotency_key", "scheduled_for", "after"];

/// The schemas of the schedule routes; `enqueue` is the enqueue body's,
/// which a schedule's job is without [`TICK_FIELDS`] (derived from it, so
/// the two cannot drift).
pub(super) fn schemas(enqueue: &Value) -> Value {
    let mut job = enqueue.clone();
    if let Some(Value::Object(props)) = job.get_mut("properties") {
        for field in TICK_FIELDS {
            props.remove(field);
        }
    }
    job["description"] = json!(
        "the job each tick enqueues: the enqueue body's fields, without `idempotency_key`, `scheduled_for` and `after` (each tick has its own key, `KEY@SLOT`, and is due at its slot)"
    );
    let ts = json!({ "type": "integer", "format": "int64", "description": "UTC milliseconds since the epoch" });
    let opt_ts = json!({ "type": ["integer", "null"], "format": "int64", "description": "UTC milliseconds since the epoch" });
    let period = json!({
        "type": "number",
        "minimum": MIN_PERIOD.as_secs(),
        "maximum": MAX_PERIOD.as_secs(),
        "description": "seconds, as the enqueue body's durations (at least 1, at most 100 years); kept in whole milliseconds"
    });
    let spec_request = json!({
        "oneOf": [
            {
                "type": "object", "additionalProperties": false, "required": ["cron"],
                "properties": { "cron": { "type": "string", "minLength": 1, "pattern": cron_pattern(), "description": "five fields (minute hour day-of-month month day-of-week, read as a wall clock in `zone`) or @hourly, @daily, @weekly, @monthly, @yearly; the pattern is the common forms (`*`, `*/N`, values and lists of them), and ranges (`1-5`) and names are accepted too" } }
            },
            {
                "type": "object", "additionalProperties": false, "required": ["every"],
                "properties": { "every": period }
            }
        ]
    });
    let spec_stored = json!({
        "oneOf": [
            { "type": "object", "required": ["cron"], "properties": { "cron": { "type": "string" } } },
            { "type": "object", "required": ["every"], "properties": { "every": { "type": "integer", "minimum": 1, "description": "milliseconds, as stored" } } }
        ]
    });
    let catch_up = json!({ "type": "string", "enum": [CatchUp::Once.as_str(), CatchUp::None.as_str()], "default": CatchUp::default().as_str(), "description": "`once`: after a sleep the latest missed slot runs once; `none`: only a slot reached on time runs" });
    let overlap = json!({ "type": "string", "enum": [Overlap::Skip.as_str(), Overlap::Queue.as_str()], "default": Overlap::default().as_str(), "description": "`skip`: a tick whose previous tick's job is unfinished enqueues nothing (a `tick_skipped` event on that job); `queue`: it enqueues anyway" });
    let stored = schedule_properties(&spec_stored, &catch_up, &overlap, &ts, &opt_ts);
    json!({
        "ScheduleRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["key", "spec", "job"],
            "properties": {
                "key": schedule_key("the schedule's name; its ticks' jobs have the idempotency key `KEY@SLOT` (the slot in RFC 3339 UTC)"),
                "spec": spec_request,
                "zone": { "type": "string", "enum": zone_names(), "default": DEFAULT_ZONE, "description": "the IANA zone the cron fields are read in (`Europe/Berlin`); an interval counts in absolute time from the schedule's creation" },
                "catch_up": catch_up,
                "overlap": overlap,
                "job": { "$ref": "#/components/schemas/ScheduleJob" }
            }
        },
        "ScheduleJob": job,
        "StoredJob": {
            "type": "object",
            "description": "a job as a schedule stores it (durations in milliseconds, as the job JSON has them)",
            "properties": {
                "queue": { "type": "string" },
                "kind": { "type": "string" },
                "payload": { "description": "for kind `shell`, secret-looking env values read `<secret>` unless `show_secrets=true`" },
                "priority": { "type": "integer" },
                "max_attempts": { "type": ["integer", "null"], "description": "null: the runner's default" },
                "max_runtime": { "type": ["integer", "null"], "description": "milliseconds; null for no limit" },
                "not_before": { "type": "null" },
                "idempotency_key": { "type": "null" }
            },
            "required": ["queue", "kind", "payload", "priority", "max_attempts", "max_runtime"]
        },
        "Schedule": {
            "type": "object",
            "properties": stored,
            "required": ["key", "spec", "zone", "catch_up", "overlap", "job", "created_at", "cursor", "next_fire", "next_fire_local"]
        },
        "SchedulePut": {
            "type": "object",
            "properties": {
                "schedule": { "$ref": "#/components/schemas/Schedule" },
                "created": { "type": "boolean", "description": "false: the same definition was stored already" }
            },
            "required": ["schedule", "created"]
        },
        "ScheduleList": {
            "type": "object",
            "properties": {
                "schedules": { "type": "array", "items": { "$ref": "#/components/schemas/Schedule" }, "description": "by key" },
                "next_fire": opt_ts
            },
            "required": ["schedules", "next_fire"]
        },
        "ScheduleRemoved": {
            "type": "object",
            "properties": { "key": { "type": "string" }, "removed": { "type": "boolean", "const": true } },
            "required": ["key", "removed"]
        }
    })
}

/// The properties of a stored schedule as answered (apart: one `json!`
/// of all the schemas passes the macro's recursion limit).
fn schedule_properties(
    spec: &Value,
    catch_up: &Value,
    overlap: &Value,
    ts: &Value,
    opt_ts: &Value,
) -> Value {
    let local = |what: &str| json!({ "type": "string", "description": format!("{what} in the schedule's zone: `2026-12-02 03:00:00 CET`") });
    json!({
        "key": { "type": "string" },
        "spec": spec,
        "zone": { "type": "string" },
        "catch_up": catch_up,
        "overlap": overlap,
        "job": { "$ref": "#/components/schemas/StoredJob" },
        "created_at": ts,
        "paused": { "$ref": "#/components/schemas/Stamp", "description": "who paused it and when; absent when not paused" },
        "cursor": { "type": "integer", "format": "int64", "description": "the latest slot decided (fired, skipped or missed), UTC milliseconds; at creation the creation time" },
        "last_fire": {
            "type": "object",
            "description": "the latest tick that enqueued a job; absent before the first",
            "properties": { "slot": ts, "at": ts, "job": { "type": "integer", "format": "int64" } },
            "required": ["slot", "at", "job"]
        },
        "last_missed": {
            "type": "object",
            "description": "the latest time slots were passed over; absent when none was",
            "properties": {
                "count": { "type": "integer", "minimum": 1 },
                "at_least": { "type": "boolean", "description": "counting stopped: more may have been; absent when false" },
                "at": ts,
                "latest": ts
            },
            "required": ["count", "at", "latest"]
        },
        "last_skipped": { "type": "integer", "format": "int64", "description": "the latest slot skipped because the previous tick's job was unfinished; absent when none" },
        "next_fire": opt_ts,
        "next_fire_local": { "type": ["string", "null"], "description": "next_fire in the schedule's zone: `2026-12-02 03:00:00 CET`" },
        "last_fire_local": local("the last fire's slot")
    })
}
