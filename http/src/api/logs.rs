//! `GET /api/tasks/outbox/{id}/log`: a job's log from a byte offset, so a
//! client (the web page) can follow it while it grows.
//!
//! The log is the file the server's worker writes and `slothqueue logs`
//! reads, read by the runner's `read_log_piece` (no symlink followed, a
//! regular file only, no character split), which the MCP server's log
//! tool reads through too.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use slothqueue_core::JobId;

use crate::extract::{IdParam, QueryParams};
use crate::{AppState, HttpError};

/// The most bytes one answer holds unless the client asks for fewer.
pub(crate) const DEFAULT_LOG_CHUNK: u64 = 64 * 1024;
/// The most bytes one answer may hold.
pub(crate) const MAX_LOG_CHUNK: u64 = 1024 * 1024;

/// The query: where to start and how much at most.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogQuery {
    offset: Option<String>,
    limit: Option<String>,
}

/// A piece of a job's log.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct LogChunk {
    id: JobId,
    /// Whether the log file exists (no attempt has started, or it was
    /// purged, when not).
    exists: bool,
    /// The log's size now, in bytes.
    size: u64,
    /// The byte offset `text` starts at: the asked offset, or, without one
    /// (or past the end of a log that was since rewritten), the start of
    /// its last `limit` bytes.
    start: u64,
    /// Where the next request should start.
    next_offset: u64,
    /// The bytes read, as UTF-8 (invalid bytes replaced); a character cut
    /// by the end of the chunk is left for the next one.
    text: String,
}

/// A query number from `min` to `max`, by the API's number rule
/// (`numbers::query_integer`: `20.0` is 20).
fn number(raw: Option<&str>, what: &str, min: u64, max: u64) -> Result<Option<u64>, HttpError> {
    raw.map(|r| {
        crate::numbers::query_integer(r, i128::from(min), i128::from(max))
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| {
                HttpError::BadRequest(format!("{what} must be a whole number from {min} to {max}"))
            })
    })
    .transpose()
}

/// The handler.
pub(crate) async fn log(
    State(app): State<AppState>,
    IdParam(id): IdParam,
    QueryParams(q): QueryParams<LogQuery>,
) -> Result<Json<LogChunk>, HttpError> {
    let offset = number(q.offset.as_deref(), "offset", 0, i64::MAX as u64)?;
    let limit = number(q.limit.as_deref(), "limit", 1, MAX_LOG_CHUNK)?.unwrap_or(DEFAULT_LOG_CHUNK);
    // A job that does not exist is a 404, whatever files lie about.
    app.store.get(id).await?;
    let Some(dir) = app.api.log_dir.clone() else {
        return Err(HttpError::NotFound(
            "this server does not know where job logs are kept".to_owned(),
        ));
    };
    let read = tokio::task::spawn_blocking(move || {
        slothqueue_runner::read_log_piece(&dir, id, offset, limit)
    })
    .await;
    match read {
        Ok(Ok(piece)) => Ok(Json(LogChunk {
            id,
            exists: piece.exists,
            size: piece.size,
            start: piece.start,
            next_offset: piece.next_offset,
            text: piece.text,
        })),
        Ok(Err(e)) => Err(HttpError::Conflict(format!("cannot read the log of job #{id}: {e}"))),
        Err(_) => Err(HttpError::Internal),
    }
}

/// The OpenAPI operation.
pub(crate) fn op_log() -> Value {
    json!({
        "operationId": "jobLog",
        "summary": "a piece of a job's log (its stdout and stderr as the worker wrote them): from `offset`, or its last bytes; follow a running job by asking again from `next_offset`",
        "parameters": [
            super::id_param(),
            {
                "name": "offset", "in": "query", "required": false,
                "schema": { "type": "integer", "format": "int64", "minimum": 0, "maximum": i64::MAX },
                "description": "the byte to start at (a `next_offset`); absent, or past the end of a log that was rewritten: the last `limit` bytes"
            },
            {
                "name": "limit", "in": "query", "required": false,
                "schema": { "type": "integer", "minimum": 1, "maximum": MAX_LOG_CHUNK, "default": DEFAULT_LOG_CHUNK },
                "description": "the most bytes to answer with"
            }
        ],
        "responses": super::responses(
            &[("200", json!({
                "description": "the piece (empty, `exists` false, before the job's first attempt)",
                "content": { "application/json": { "schema": {
                    "type": "object",
                    "properties": {
                        "id": { "type": "integer", "format": "int64" },
                        "exists": { "type": "boolean" },
                        "size": { "type": "integer", "description": "the log's size now, in bytes" },
                        "start": { "type": "integer", "description": "the byte offset `text` starts at" },
                        "next_offset": { "type": "integer", "description": "where to ask next" },
                        "text": { "type": "string", "description": "the bytes as UTF-8, invalid ones replaced" }
                    },
                    "required": ["id", "exists", "size", "start", "next_offset", "text"]
                } } }
            }))],
            &["400", "401", "403", "404", "405", "409", "413", "415", "503"],
        )
    })
}
