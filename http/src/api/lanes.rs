//! The lane routes: every queue's counts and settings, a queue's limit,
//! and the pauses of one queue or of all, with their answers' schemas.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::{Value, json};
use slothqueue_core::{LaneChange, LaneScope, Lanes, QueuesReport, Stamp};

use super::doc::{AUTHED, ok_json, plain_name, responses};
use super::{bad, refusal};
use crate::extract::{JsonBody, QueueParam, Who};
use crate::{AppState, HttpError};

/// The limit in the body of `PUT /api/queues/{queue}/limit`: an object
/// with one field, `limit`, a whole number from 0 (no limit) to `u32::MAX`.
/// Read by hand rather than derived: serde would also take `[2]` for the
/// object, and name `-1`'s fault in its own words.
pub(super) fn lane_limit(body: serde_json::Map<String, Value>) -> Result<u32, HttpError> {
    if let Some(key) = body.keys().find(|k| *k != "limit") {
        return Err(bad(format!("invalid json body: unknown field `{key}`, expected `limit`")));
    }
    let v = body.get("limit").ok_or_else(|| bad("invalid json body: missing field `limit`"))?;
    let whole = match v {
        Value::Number(n) => crate::numbers::whole(n),
        _ => None,
    };
    whole.and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
        bad(format!(
            "invalid json body: limit: expected a whole number from 0 (no limit) to {}, got {v}",
            u32::MAX
        ))
    })
}

/// One lane's settings as the lane routes answer them.
#[derive(Debug, Serialize)]
pub(super) struct LaneView {
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
pub(super) struct QueueLane {
    #[serde(flatten)]
    lane: LaneView,
    all_paused: Option<Stamp>,
}

/// The answer of `POST /api/pause` and `/api/resume`: every lane with
/// settings, after the change.
#[derive(Debug, Serialize)]
pub(super) struct LanesView {
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

/// Every lane with its counts and settings.
pub(super) async fn queues(State(app): State<AppState>) -> Result<Json<QueuesReport>, HttpError> {
    Ok(Json(app.store.queues(app.api.clock.now()).await?))
}

/// One write of one lane's settings, then the worker is woken: a raised
/// limit or a resume lets it start jobs now, not at its next look.
pub(super) async fn change_lane(
    app: &AppState,
    scope: &LaneScope,
    change: LaneChange,
) -> Result<Lanes, HttpError> {
    let lanes = app.store.change_lane(scope, &change).await.map_err(refusal)?;
    app.api.wake_worker();
    Ok(lanes)
}

pub(super) fn queue_lane(lanes: &Lanes, queue: &str) -> Json<QueueLane> {
    Json(QueueLane { lane: LaneView::of(lanes, queue), all_paused: lanes.all_paused.clone() })
}

pub(super) async fn set_limit(
    State(app): State<AppState>,
    QueueParam(queue): QueueParam,
    JsonBody(body): JsonBody<serde_json::Map<String, Value>>,
) -> Result<Json<QueueLane>, HttpError> {
    let limit = lane_limit(body)?;
    let scope = LaneScope::Queue(queue);
    let lanes = change_lane(&app, &scope, LaneChange::Limit(limit)).await?;
    Ok(queue_lane(&lanes, scope.key()))
}

pub(super) async fn pause_queue(
    State(app): State<AppState>,
    QueueParam(queue): QueueParam,
    Who(by): Who,
) -> Result<Json<QueueLane>, HttpError> {
    let scope = LaneScope::Queue(queue);
    let stamp = Stamp::new(by, app.api.clock.now());
    let lanes = change_lane(&app, &scope, LaneChange::Pause(stamp)).await?;
    Ok(queue_lane(&lanes, scope.key()))
}

pub(super) async fn resume_queue(
    State(app): State<AppState>,
    QueueParam(queue): QueueParam,
) -> Result<Json<QueueLane>, HttpError> {
    let scope = LaneScope::Queue(queue);
    let lanes = change_lane(&app, &scope, LaneChange::Resume).await?;
    Ok(queue_lane(&lanes, scope.key()))
}

pub(super) async fn pause_all(
    State(app): State<AppState>,
    Who(by): Who,
) -> Result<Json<LanesView>, HttpError> {
    let stamp = Stamp::new(by, app.api.clock.now());
    let lanes = change_lane(&app, &LaneScope::All, LaneChange::Pause(stamp)).await?;
    Ok(Json(LanesView::from(&lanes)))
}

pub(super) async fn resume_all(State(app): State<AppState>) -> Result<Json<LanesView>, HttpError> {
    let lanes = change_lane(&app, &LaneScope::All, LaneChange::Resume).await?;
    Ok(Json(LanesView::from(&lanes)))
}

pub(super) fn op_queues() -> Value {
    json!({
        "operationId": "queues",
        "summary": "every queue with a pending or running job or with settings: its counts, its limit, its pause; and the pause of every queue",
        "responses": responses(&[("200", ok_json("the lanes", "QueuesReport"))], AUTHED)
    })
}

pub(super) fn queue_param() -> Value {
    json!({ "name": "queue", "in": "path", "required": true, "schema": plain_name("a queue") })
}

/// What a per-queue lane route can answer besides the lane.
pub(super) const LANE_ERRORS: &[&str] = &["400", "401", "403", "405", "413", "415", "503"];

pub(super) fn op_set_limit() -> Value {
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

pub(super) fn op_pause_queue() -> Value {
    json!({
        "operationId": "pauseQueue",
        "summary": "no job of the queue starts until it is resumed; running jobs go on; a paused queue keeps its first pause's stamp",
        "parameters": [queue_param()],
        "responses": responses(&[("200", ok_json("the lane after the pause", "QueueLane"))], LANE_ERRORS)
    })
}

pub(super) fn op_resume_queue() -> Value {
    json!({
        "operationId": "resumeQueue",
        "summary": "lifts the queue's own pause (a pause of every queue still holds it: see `all_paused`)",
        "parameters": [queue_param()],
        "responses": responses(&[("200", ok_json("the lane after the resume", "QueueLane"))], LANE_ERRORS)
    })
}

pub(super) fn op_pause_all() -> Value {
    json!({
        "operationId": "pauseAll",
        "summary": "no job of any queue starts until `POST /api/resume`; running jobs go on",
        "responses": responses(&[("200", ok_json("every lane's settings after the pause", "Lanes"))], AUTHED)
    })
}

pub(super) fn op_resume_all() -> Value {
    json!({
        "operationId": "resumeAll",
        "summary": "lifts the pause of every queue (a queue paused on its own stays paused)",
        "responses": responses(&[("200", ok_json("every lane's settings after the resume", "Lanes"))], AUTHED)
    })
}

/// The schemas of the lane routes (apart: one `json!` of all of them
/// passes the macro's recursion limit).
pub(super) fn schemas() -> Value {
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
