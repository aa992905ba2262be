//! `GET /api/runners`: the runners recorded in the queue file, each judged
//! alive or not as `status` judges them (the process on this host, or a
//! record heard from lately on another).

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::{Value, json};
use slothqueue_view::{RunnerView, words};

use crate::{AppState, HttpError, serving};

/// The answer: every recorded runner, judged (the read model's
/// `RunnerView`: the record and `live`), with what it does in the words
/// `status` prints.
#[derive(Debug, Serialize)]
pub(crate) struct Runners {
    runners: Vec<RunnerAnswer>,
}

/// One runner: its view and `doing`, `view::words::activity`'s sentence
/// (`running job #15; its other slot is waiting: queue backups paused …`),
/// so that no client words a record of its own.
#[derive(Debug, Serialize)]
pub(crate) struct RunnerAnswer {
    #[serde(flatten)]
    view: RunnerView,
    doing: String,
}

/// The handler.
pub(crate) async fn runners(State(app): State<AppState>) -> Result<Json<Runners>, HttpError> {
    let (judge, host) = (serving::judge(), serving::this_host());
    let look = serving::look(&app, &judge, &host);
    let runners = look.runners().await.map_err(serving::view_error)?;
    let runners = runners
        .into_iter()
        .map(|view| RunnerAnswer { doing: words::activity(&view.record, look.now), view })
        .collect();
    Ok(Json(Runners { runners }))
}

/// The OpenAPI operation.
pub(crate) fn op_runners() -> Value {
    json!({
        "operationId": "runners",
        "summary": "the runners recorded in the queue file (this server's worker among them), each with `live`: its process runs on this host, or (on another host) it was heard from in the last five minutes",
        "responses": super::responses(
            &[("200", json!({
                "description": "the runners",
                "content": { "application/json": { "schema": {
                    "type": "object",
                    "properties": { "runners": { "type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "owner": { "type": "object", "description": "host, pid, boot id and process start time" },
                            "queues": { "type": "array", "items": { "type": "string" }, "description": "the queues it serves; empty for all" },
                            "kinds": { "type": ["array", "null"], "items": { "type": "string" } },
                            "started_at": { "type": "integer", "format": "int64" },
                            "updated_at": { "type": "integer", "format": "int64" },
                            "activity": {
                                "type": "object",
                                "description": "what it does (with free slots, what they do): `activity` is `starting`, `running` (with `job`, and `also` for more slots), `gated` (with `reading`, `since` and `cause`: `lanes` for a paused or full queue, absent for one of the runner's gates) or `idle` (with `until`)",
                                "properties": {
                                    "activity": { "type": "string", "enum": ["starting", "running", "gated", "idle"] },
                                    "cause": { "type": "string", "enum": ["gate", "lanes"] }
                                },
                                "required": ["activity"]
                            },
                            "slots": { "type": "integer", "minimum": 1, "description": "how many jobs it may run at once; absent for 1" },
                            "running": { "type": "array", "items": { "type": "integer", "format": "int64" }, "description": "the jobs it runs now, whatever `activity` says; absent when none" },
                            "doing": { "type": "string", "description": "what it does, in the words `slothqueue status` prints" },
                            "live": { "type": "boolean" }
                        },
                        "required": ["owner", "queues", "started_at", "updated_at", "activity", "live", "doing"]
                    } } },
                    "required": ["runners"]
                } } }
            }))],
            super::AUTHED,
        )
    })
}
