//! The OpenAPI document: the paths from the route table, the schemas from
//! the room of each route (`jobs`, `enqueue`, `lanes`, `schedules`,
//! `steer`).

use super::doc::responses;
use super::{ROUTES, enqueue, jobs, lanes, schedules, steer};
use crate::AppState;
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

pub(super) async fn openapi(State(app): State<AppState>) -> Json<Value> {
    Json(openapi_document(app.api.server_addr))
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
    let mut doc = json!({
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
    });
    crate::numbers::bound_integers(&mut doc);
    doc
}

pub(super) fn op_openapi() -> Value {
    json!({
        "operationId": "openapi",
        "summary": "this document",
        "responses": responses(
            &[("200", json!({ "description": "the OpenAPI document", "content": { "application/json": {} } }))],
            &["400", "401", "403", "405", "413", "415"],
        )
    })
}

pub(super) fn op_healthz() -> Value {
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

/// Every schema: the error's here, the others from their routes' rooms.
pub(super) fn schemas() -> Value {
    let mut all = json!({
        "Error": {
            "type": "object",
            "properties": {
                "error": { "type": "string" },
                "status": { "type": "integer" },
                "index": { "type": "integer", "description": "batch enqueue only: the refused job's place in the batch, from 0" }
            },
            "required": ["error", "status"]
        }
    });
    let enqueue = enqueue::schemas();
    let schedule_schemas = schedules::schemas(&enqueue["EnqueueRequest"]);
    for more in [enqueue, jobs::schemas(), lanes::schemas(), schedule_schemas, steer::schemas()] {
        if let (Value::Object(all), Value::Object(more)) = (&mut all, more) {
            all.extend(more);
        }
    }
    all
}
