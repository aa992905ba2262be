//! The routes: one table drives both the router and the OpenAPI document,
//! so the document cannot drift from what is served.

mod doc;
mod enqueue;
mod jobs;
mod lanes;
mod logs;
mod openapi;
mod runners;
mod schedules;
mod steer;

use axum::Json;
use axum::routing::{MethodRouter, delete, get, patch, post, put};
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use slothqueue_core::StoreError;

use crate::{AppState, HttpError};

use doc::{AUTHED, PLAIN_NAME, id_param, ok_json, responses};
use enqueue::EnqueueRequest;
pub(crate) use openapi::openapi_document;

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
        handler: || post(enqueue::enqueue),
        operation: enqueue::op_enqueue,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/enqueue/batch",
        handler: || post(enqueue::enqueue_batch),
        operation: enqueue::op_enqueue_batch,
    },
    RouteSpec {
        method: "GET",
        path: "/api/tasks/outbox",
        handler: || get(jobs::list),
        operation: jobs::op_list,
    },
    RouteSpec {
        method: "GET",
        path: "/api/tasks/outbox/stats",
        handler: || get(jobs::stats),
        operation: jobs::op_stats,
    },
    RouteSpec {
        method: "GET",
        path: "/api/tasks/outbox/{id}",
        handler: || get(jobs::show),
        operation: jobs::op_show,
    },
    RouteSpec {
        method: "PATCH",
        path: "/api/tasks/outbox/{id}",
        handler: || patch(jobs::edit),
        operation: jobs::op_edit,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/outbox/{id}/clone",
        handler: || post(jobs::clone),
        operation: jobs::op_clone,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/outbox/{id}/cancel",
        handler: || post(jobs::cancel),
        operation: jobs::op_cancel,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/outbox/{id}/retry",
        handler: || post(jobs::retry),
        operation: jobs::op_retry,
    },
    RouteSpec {
        method: "GET",
        path: "/api/tasks/outbox/{id}/log",
        handler: || get(logs::log),
        operation: logs::op_log,
    },
    RouteSpec {
        method: "GET",
        path: "/api/tasks/outbox/{id}/dependents",
        handler: || get(steer::dependents),
        operation: steer::op_dependents,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/outbox/{id}/hold",
        handler: || post(jobs::hold),
        operation: jobs::op_hold,
    },
    RouteSpec {
        method: "POST",
        path: "/api/tasks/outbox/{id}/release",
        handler: || post(jobs::release),
        operation: jobs::op_release,
    },
    RouteSpec {
        method: "GET",
        path: "/api/queues",
        handler: || get(lanes::queues),
        operation: lanes::op_queues,
    },
    RouteSpec {
        method: "GET",
        path: "/api/runners",
        handler: || get(runners::runners),
        operation: runners::op_runners,
    },
    RouteSpec {
        method: "PUT",
        path: "/api/queues/{queue}/limit",
        handler: || put(lanes::set_limit),
        operation: lanes::op_set_limit,
    },
    RouteSpec {
        method: "POST",
        path: "/api/queues/{queue}/pause",
        handler: || post(lanes::pause_queue),
        operation: lanes::op_pause_queue,
    },
    RouteSpec {
        method: "POST",
        path: "/api/queues/{queue}/resume",
        handler: || post(lanes::resume_queue),
        operation: lanes::op_resume_queue,
    },
    RouteSpec {
        method: "POST",
        path: "/api/queues/{queue}/retry-failed",
        handler: || post(steer::retry_failed),
        operation: steer::op_retry_failed,
    },
    RouteSpec {
        method: "POST",
        path: "/api/queues/{queue}/cancel-pending",
        handler: || post(steer::cancel_pending),
        operation: steer::op_cancel_pending,
    },
    RouteSpec {
        method: "POST",
        path: "/api/clear",
        handler: || post(steer::clear),
        operation: steer::op_clear,
    },
    RouteSpec {
        method: "GET",
        path: "/api/history",
        handler: || get(steer::history),
        operation: steer::op_history,
    },
    RouteSpec {
        method: "POST",
        path: "/api/pause",
        handler: || post(lanes::pause_all),
        operation: lanes::op_pause_all,
    },
    RouteSpec {
        method: "POST",
        path: "/api/resume",
        handler: || post(lanes::resume_all),
        operation: lanes::op_resume_all,
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
        handler: || get(openapi::openapi),
        operation: openapi::op_openapi,
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
        operation: openapi::op_healthz,
    },
];

/// Tells an explicit `null` (`Some(None)`) from an absent field (`None`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A field that may be left out but is never `null`: the document gives
/// it one type, and `null` would read as "left out" with no word said.
fn given<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

fn bad(msg: impl Into<String>) -> HttpError {
    HttpError::BadRequest(msg.into())
}

/// The core's messages name the CLI's flag (`--after 9: no job #9`); the
/// API's field is `after`.
fn api_words(message: &str) -> String {
    message.replace("--after", "after")
}

/// A store refusal in the API's words. The refusals that depend on what
/// the queue holds now, not on the request's form, are 409 (the request
/// conflicts with the queue's state; the same body may pass later): a
/// parent in `after` that is not there or cannot be waited on, a retry
/// while a parent is failed or cancelled. The rest of the store's invalid
/// input is the request's own fault: 400.
fn refusal(e: StoreError) -> HttpError {
    match e {
        StoreError::InvalidInput(m) if depends_on_the_queue(&m) => {
            HttpError::Conflict(api_words(&m))
        }
        StoreError::InvalidInput(m) => HttpError::Store(StoreError::InvalidInput(api_words(&m))),
        StoreError::InBatch { index, error } => {
            HttpError::InBatch { index, error: Box::new(refusal(*error)) }
        }
        e => HttpError::Store(e),
    }
}

/// Whether the store's refusal is about the jobs a request names as they
/// are now (`core::machine`'s words: `--after 9: no job #9`, `cannot
/// retry job #5: it waits on #4, which is cancelled; …`, `job #9 is a
/// `resize` job: its command, env and limits are its payload's`).
fn depends_on_the_queue(message: &str) -> bool {
    let message = message.strip_prefix("invalid job: ").unwrap_or(message);
    ["--after ", "cannot retry job #", "job #"].iter().any(|p| message.starts_with(p))
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
