//! The one error type of this crate: what can go wrong starting the server,
//! and every refusal a request can get, each with its HTTP status.

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use slothqueue_core::StoreError;

/// Everything this crate can fail with.
///
/// Request-side variants turn into a JSON body `{"error": "...", "status": N}`
/// with the matching status (see [`HttpError::status`]), so a client never has
/// to parse text or HTML; start-up variants are returned by
/// [`crate::bind`] and [`crate::serve`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The request is malformed: bad JSON, an unknown field, a bad id.
    #[error("{0}")]
    BadRequest(String),
    /// No bearer token, or the wrong one. The presented token is never echoed.
    #[error("missing or wrong bearer token")]
    Unauthorized,
    /// The request came through a name or origin that is not loopback.
    #[error("{0}")]
    Forbidden(String),
    /// No such job or route.
    #[error("{0}")]
    NotFound(String),
    /// The route exists but not for this method.
    #[error("method {method} not allowed here")]
    MethodNotAllowed {
        /// The method the client used.
        method: String,
    },
    /// The job's state does not allow the operation (cancelling a finished job).
    #[error("{0}")]
    Conflict(String),
    /// The body did not arrive in time.
    #[error("timed out reading the request body")]
    Timeout,
    /// The body is larger than the limit.
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body is not `application/json`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The server is at a ceiling (the long polls its file limit allows):
    /// 503 with `Retry-After`.
    #[error("{0}")]
    Unavailable(String),
    /// The queue refused or failed.
    #[error(transparent)]
    Store(StoreError),
    /// One job of a batch enqueue was refused, so none was written; the
    /// body names it by `index` (from 0) beside the error.
    #[error("job {} of the batch (index {index}): {error}", index + 1)]
    InBatch {
        /// Its place in the batch, from 0.
        index: usize,
        /// Why it was refused.
        error: Box<HttpError>,
    },
    /// A handler panicked; the connection survives and the client gets JSON.
    #[error("internal error")]
    Internal,
    /// Binding a non-loopback address was asked for without `allow_remote`.
    #[error(
        "refusing to listen on {addr}: it is not a loopback address (pass --allow-remote to expose the queue to the network)"
    )]
    NotLoopback {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The token file could not be read or created.
    #[error("token file {path}: {source}")]
    TokenIo {
        /// The token file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The token file exists but cannot be trusted or used.
    #[error("token file {path}: {detail}")]
    TokenUnusable {
        /// The token file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// The kernel's random bytes (for a login code or a session) could
    /// not be read.
    #[error("cannot read random bytes: {0}")]
    Random(#[source] std::io::Error),
    /// Accepting connections failed.
    #[error("serving: {0}")]
    Serve(#[source] std::io::Error),
    /// The drain worker's runner stopped with an error.
    #[error("drain worker: {0}")]
    Worker(#[source] slothqueue_runner::RunnerError),
    /// The drain worker stopped without being asked, or crashed.
    #[error("drain worker {0}")]
    WorkerStopped(String),
}

impl HttpError {
    /// The status a client sees for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            HttpError::BadRequest(_) => StatusCode::BAD_REQUEST,
            HttpError::Unauthorized => StatusCode::UNAUTHORIZED,
            HttpError::Forbidden(_) => StatusCode::FORBIDDEN,
            HttpError::NotFound(_) => StatusCode::NOT_FOUND,
            HttpError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            HttpError::Conflict(_) => StatusCode::CONFLICT,
            HttpError::Timeout => StatusCode::REQUEST_TIMEOUT,
            HttpError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            HttpError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            HttpError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            HttpError::InBatch { error, .. } => error.status(),
            HttpError::Store(e) => match e {
                StoreError::NotFound(_) | StoreError::NoSchedule(_) => StatusCode::NOT_FOUND,
                StoreError::LeaseLost { .. } | StoreError::InvalidTransition { .. } => {
                    StatusCode::CONFLICT
                }
                StoreError::InvalidInput(_) => StatusCode::BAD_REQUEST,
                // The server cannot take this write now, and says why: a
                // busy or full queue, a PostgreSQL server gone or demoted
                // to a read-only standby under a running `serve`.
                StoreError::Busy { .. }
                | StoreError::DiskFull(_)
                | StoreError::Unreachable(_)
                | StoreError::ReadOnlyStandby(_) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            HttpError::Internal
            | HttpError::NotLoopback { .. }
            | HttpError::Bind { .. }
            | HttpError::TokenIo { .. }
            | HttpError::TokenUnusable { .. }
            | HttpError::Serve(_)
            | HttpError::Random(_)
            | HttpError::Worker(_)
            | HttpError::WorkerStopped(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<StoreError> for HttpError {
    fn from(e: StoreError) -> Self {
        HttpError::Store(e)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut body = serde_json::json!({ "error": self.to_string(), "status": status.as_u16() });
        if let HttpError::InBatch { index, .. } = &self {
            body["index"] = serde_json::json!(index);
        }
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// Gives a refusal that some layer below the routes made without a body
/// (or with a non-JSON one) the JSON body every refusal has, so a client
/// never parses text; responses that already are JSON pass unchanged.
pub(crate) async fn json_refusals(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(crate::guard::is_json_content_type);
    // The web page's own refusals (a spent login link) are HTML for a
    // person, and stay so.
    let is_html = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if !(status.is_client_error() || status.is_server_error()) || is_json || is_html {
        return response;
    }
    let reason = status.canonical_reason().unwrap_or("refused").to_lowercase();
    let (mut parts, _) = response.into_parts();
    let body = serde_json::json!({ "error": reason, "status": status.as_u16() });
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bare_refusal_gets_a_json_body() {
        let bare = (StatusCode::BAD_REQUEST, "").into_response();
        let mapped = json_refusals(bare).await;
        assert_eq!(mapped.status(), StatusCode::BAD_REQUEST);
        assert_eq!(mapped.headers()[axum::http::header::CONTENT_TYPE], "application/json");
        let bytes = axum::body::to_bytes(mapped.into_body(), 1024).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body, serde_json::json!({ "error": "bad request", "status": 400 }));
        let ours = HttpError::Conflict("it is done".to_owned()).into_response();
        let kept = json_refusals(ours).await;
        let bytes = axum::body::to_bytes(kept.into_body(), 1024).await.unwrap();
        assert_eq!(bytes, r#"{"error":"it is done","status":409}"#);
    }

    #[test]
    fn a_server_gone_or_a_standby_is_unavailable_and_says_which() {
        for e in [
            StoreError::ReadOnlyStandby("db:5432".to_owned()),
            StoreError::Unreachable("db:5432: connection refused".to_owned()),
        ] {
            let words = e.to_string();
            let error = HttpError::Store(e);
            assert_eq!(error.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert!(error.to_string().contains(&words), "{error}");
        }
    }

    #[test]
    fn a_busy_queue_says_when_to_retry() {
        let busy = HttpError::Store(StoreError::Busy { waited: std::time::Duration::from_secs(5) });
        let response = busy.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[axum::http::header::RETRY_AFTER], "1");
    }
}
