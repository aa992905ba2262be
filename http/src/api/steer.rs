//! The routes a person steering the queue from the page uses beyond one
//! job: what a cancel takes with it (asked before the cancel is offered),
//! the bulk actions (retry a queue's failed jobs, cancel its pending jobs,
//! clear the finished ones), and the history of the last hour. Each is a
//! thin face over `slothqueue_view::steer` / `history` or one store
//! operation: the loops and the rules live there, once.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use slothqueue_core::{JobId, PurgeFilter};
use slothqueue_view::history::History;
use slothqueue_view::steer::{self, Bulk};

use super::bad;
use super::doc::{AUTHED, id_param, ok_json, responses};
use super::lanes::queue_param;
use crate::extract::{IdParam, MaybeJsonBody, QueueParam};
use crate::{AppState, HttpError};

/// One job a cancel would take with it.
#[derive(Debug, Serialize)]
pub(super) struct TakenJob {
    id: JobId,
    /// `waiting`, `held`, `pending` or `running` (`state_word`).
    shown_state: &'static str,
    /// A shell job's command, else its kind.
    command_or_kind: String,
}

/// The answer of `GET /api/tasks/outbox/{id}/dependents`.
#[derive(Debug, Serialize)]
pub(super) struct CancelTakes {
    jobs: Vec<TakenJob>,
    /// `#17 (waiting) and #18 (waiting)`; empty when none.
    words: String,
}

/// The unfinished jobs a cancel of job `id` would end with it, by the
/// cancel's own rule; none for a finished job.
pub(super) async fn dependents(
    State(app): State<AppState>,
    IdParam(id): IdParam,
) -> Result<Json<CancelTakes>, HttpError> {
    let taken = steer::cancel_takes(app.store.as_ref(), id, app.api.clock.now()).await?;
    let words = steer::cancel_takes_words(&taken);
    let jobs = taken
        .iter()
        .map(|j| TakenJob {
            id: j.id,
            shown_state: slothqueue_view::words::state_word(j),
            command_or_kind: slothqueue_view::listing::command_or_kind(j),
        })
        .collect();
    Ok(Json(CancelTakes { jobs, words }))
}

/// Retries every failed job of the queue, each as `POST …/{id}/retry`.
pub(super) async fn retry_failed(
    State(app): State<AppState>,
    QueueParam(queue): QueueParam,
) -> Result<Json<Bulk>, HttpError> {
    let bulk = steer::retry_failed(app.store.as_ref(), &queue, app.api.clock.now()).await?;
    app.api.wake_worker();
    Ok(Json(bulk))
}

/// Cancels every pending job of the queue (held and waiting ones too),
/// each as `POST …/{id}/cancel`, with the jobs waiting on them.
pub(super) async fn cancel_pending(
    State(app): State<AppState>,
    QueueParam(queue): QueueParam,
) -> Result<Json<Bulk>, HttpError> {
    let bulk = steer::cancel_pending(app.store.as_ref(), &queue, app.api.clock.now()).await?;
    app.api.wake_worker();
    Ok(Json(bulk))
}

/// The optional body of `POST /api/clear`: a `queue` field is read only
/// to refuse it in words (a purge is of every queue).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClearRequest {
    #[serde(default)]
    queue: Option<Value>,
}

/// Removes the finished jobs (done, failed, cancelled) of every queue
/// with their trails and logs, as `slothqueue clear` does by default:
/// one purge, which keeps a finished job no rule lets go.
pub(super) async fn clear(
    State(app): State<AppState>,
    MaybeJsonBody(req): MaybeJsonBody<ClearRequest>,
) -> Result<Json<Bulk>, HttpError> {
    if req.queue.is_some() {
        return Err(bad(
            "clear removes the finished jobs of every queue; it cannot be limited to one (leave out `queue`)",
        ));
    }
    let ids = app.store.purge(&PurgeFilter::default()).await?;
    if let Some(dir) = &app.api.log_dir {
        slothqueue_runner::remove_logs(dir, &ids);
    }
    Ok(Json(Bulk { count: ids.len(), ids, skipped: Vec::new() }))
}

/// Jobs done and failed per minute over the last hour.
pub(super) async fn history(State(app): State<AppState>) -> Result<Json<History>, HttpError> {
    Ok(Json(slothqueue_view::history::read(app.store.as_ref(), app.api.clock.now()).await?))
}

pub(super) fn op_dependents() -> Value {
    json!({
        "operationId": "cancelTakes",
        "summary": "the unfinished jobs a cancel of this job would end with it (the jobs waiting on it, transitively), by the cancel's own rule, to name them before the cancel; a running job's go when its runner has stopped it; none for a finished job",
        "parameters": [id_param()],
        "responses": responses(&[("200", ok_json("the jobs and their words", "CancelTakes"))], &["400", "401", "403", "404", "405", "413", "415", "503"])
    })
}

pub(super) fn op_retry_failed() -> Value {
    json!({
        "operationId": "retryFailedOfQueue",
        "summary": "retry every failed job of the queue, oldest first, each as `POST /api/tasks/outbox/{id}/retry` does (the jobs its failure cancelled come back with it); a job the retry refuses is in `skipped`",
        "parameters": [queue_param()],
        "responses": responses(&[("200", ok_json("the jobs retried", "Bulk"))], AUTHED)
    })
}

pub(super) fn op_cancel_pending() -> Value {
    json!({
        "operationId": "cancelPendingOfQueue",
        "summary": "cancel every pending job of the queue, held and waiting ones included, oldest first, each as `POST /api/tasks/outbox/{id}/cancel` does (the jobs waiting on it go with it, in other queues too, but only the queue's are in `ids`); running jobs are left running",
        "parameters": [queue_param()],
        "responses": responses(&[("200", ok_json("the jobs cancelled", "Bulk"))], AUTHED)
    })
}

pub(super) fn op_clear() -> Value {
    json!({
        "operationId": "clearFinished",
        "summary": "remove the finished jobs (done, failed, cancelled) of every queue, with their trails and logs, as `slothqueue clear` does; never a pending or running one. The body may be left out; it cannot name a queue (a clear is of every queue)",
        "requestBody": {
            "required": false,
            "content": { "application/json": { "schema": { "type": "object", "additionalProperties": false, "properties": {} } } }
        },
        "responses": responses(&[("200", ok_json("the jobs removed", "Bulk"))], AUTHED)
    })
}

pub(super) fn op_history() -> Value {
    json!({
        "operationId": "history",
        "summary": "jobs done and failed per minute over the last hour (60 whole UTC minutes, the last the current one, oldest first), from the jobs' own end times: a cleared job leaves it",
        "responses": responses(&[("200", ok_json("the minutes", "History"))], AUTHED)
    })
}

/// The schemas of these routes' answers.
pub(super) fn schemas() -> Value {
    let ms = json!({ "type": "integer", "format": "int64", "description": "UTC milliseconds since the epoch" });
    json!({
        "CancelTakes": {
            "type": "object",
            "properties": {
                "jobs": {
                    "type": "array",
                    "description": "lowest id first, as they are now",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": { "type": "integer", "format": "int64" },
                            "shown_state": { "type": "string", "description": "`waiting`, `held`, `pending` or `running`, as `slothqueue list` words it" },
                            "command_or_kind": { "type": "string", "description": "a shell job's command on one line, else its kind" }
                        },
                        "required": ["id", "shown_state", "command_or_kind"]
                    }
                },
                "words": { "type": "string", "description": "`#17 (waiting) and #18 (waiting)` (a keyed job as `key k (#17, waiting)`; past five, `and N more`); empty when none" }
            },
            "required": ["jobs", "words"]
        },
        "Bulk": {
            "type": "object",
            "properties": {
                "count": { "type": "integer", "minimum": 0, "description": "how many jobs it changed (the length of `ids`)" },
                "ids": { "type": "array", "items": { "type": "integer", "format": "int64" }, "description": "the jobs it changed, lowest first" },
                "skipped": {
                    "type": "array",
                    "description": "jobs found but refused by the single-job operation (they moved on meanwhile), with its words; absent when none",
                    "items": {
                        "type": "object",
                        "properties": { "id": { "type": "integer", "format": "int64" }, "why": { "type": "string" } },
                        "required": ["id", "why"]
                    }
                }
            },
            "required": ["count", "ids"]
        },
        "History": {
            "type": "object",
            "properties": {
                "since": ms,
                "minutes": {
                    "type": "array",
                    "minItems": 60,
                    "maxItems": 60,
                    "items": {
                        "type": "object",
                        "properties": {
                            "at": ms,
                            "done": { "type": "integer", "minimum": 0 },
                            "failed": { "type": "integer", "minimum": 0 }
                        },
                        "required": ["at", "done", "failed"]
                    }
                }
            },
            "required": ["since", "minutes"]
        }
    })
}
