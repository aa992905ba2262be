//! Extractors whose every rejection is an [`HttpError`], so that no request,
//! however malformed, gets axum's plain-text errors or a panic.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use slothqueue_core::{JobId, machine, schedule};

use crate::guard::is_json_content_type;
use crate::numbers;
use crate::{AppState, HttpError};

/// How long a client may take to send a body once its headers arrived; a
/// client dripping bytes must not hold a connection forever.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// A JSON body, read up to the body limit (also when chunked, with no
/// `Content-Length`), then parsed with the target's serde rules (which
/// reject unknown fields).
pub(crate) struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(is_json_content_type);
        if !json {
            return Err(HttpError::UnsupportedMediaType(
                "the body must be application/json".to_owned(),
            ));
        }
        let limit = state.api.body_limit;
        // `Bytes` reads through axum's `DefaultBodyLimit`, which the router
        // sets to the same limit; it wraps the body in a length-limited one,
        // so a chunked body fails as soon as it passes the limit.
        let bytes = match tokio::time::timeout(BODY_TIMEOUT, Bytes::from_request(req, state)).await
        {
            Err(_) => return Err(HttpError::Timeout),
            Ok(Ok(bytes)) => bytes,
            Ok(Err(BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(
                _,
            )))) => return Err(HttpError::PayloadTooLarge { limit }),
            Ok(Err(e)) => {
                return Err(HttpError::BadRequest(format!(
                    "cannot read the request body: {}",
                    e.body_text().to_lowercase()
                )));
            }
        };
        if bytes.len() > limit {
            return Err(HttpError::PayloadTooLarge { limit });
        }
        // Parsed whole first (trailing bytes after the object are as
        // malformed as missing ones), then read into the request by the
        // API's number rules (`numbers`): an integral float is an integer
        // where one is asked; an integer past 64 bits is refused, not
        // rounded.
        let parsed: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| HttpError::BadRequest(format!("invalid json body: {e}")))?;
        numbers::check_big_integers(&bytes)
            .map_err(|e| HttpError::BadRequest(format!("invalid json body: {e}")))?;
        let value =
            serde_path_to_error::deserialize(numbers::Integral(parsed)).map_err(json_error)?;
        Ok(JsonBody(value))
    }
}

/// A JSON body that may be left out: a request that declares no body (no
/// `Content-Type`, no `Content-Length` above 0, no `Transfer-Encoding`)
/// reads as `T::default()`; any other is a [`JsonBody`], with its rules.
pub(crate) struct MaybeJsonBody<T>(pub T);

impl<T: DeserializeOwned + Default> FromRequest<AppState> for MaybeJsonBody<T> {
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let headers = req.headers();
        let declared = headers.contains_key(header::CONTENT_TYPE)
            || headers.contains_key(header::TRANSFER_ENCODING)
            || headers.get(header::CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0");
        if !declared {
            return Ok(MaybeJsonBody(T::default()));
        }
        JsonBody::from_request(req, state).await.map(|JsonBody(v)| MaybeJsonBody(v))
    }
}

/// Names the field at fault (`priority: invalid type …`) when there is one.
fn json_error(e: serde_path_to_error::Error<serde_json::Error>) -> HttpError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    if path.is_empty() || path == "." {
        HttpError::BadRequest(format!("invalid json body: {inner}"))
    } else {
        HttpError::BadRequest(format!("invalid json body: {path}: {inner}"))
    }
}

/// A query string parsed with the target's serde rules.
pub(crate) struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        serde_urlencoded::from_str(query)
            .map(QueryParams)
            .map_err(|e| HttpError::BadRequest(format!("invalid query string: {e}")))
    }
}

/// The `{id}` path segment: a positive decimal integer that fits a job id.
/// Anything else (`abc`, `..`, `%2f`, twenty digits) is a 400 before the
/// store is asked.
pub(crate) struct IdParam(pub JobId);

impl<S: Send + Sync> FromRequestParts<S> for IdParam {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw) =
            Path::<String>::from_request_parts(parts, state).await.map_err(|_| bad_id())?;
        parse_id(&raw).map(IdParam).ok_or_else(bad_id)
    }
}

fn bad_id() -> HttpError {
    HttpError::BadRequest("the job id must be a positive integer".to_owned())
}

/// The `{queue}` path segment (percent-decoded): a queue name as `add`
/// accepts it ([`machine::is_plain_name`]). Anything else is a 400 before
/// the store is asked, with nothing written.
pub(crate) struct QueueParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for QueueParam {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        plain_segment(parts, state, "queue", machine::MAX_NAME_LEN).await.map(QueueParam)
    }
}

/// The `{key}` path segment of the schedule routes (percent-decoded): a
/// plain name ([`machine::is_plain_name`]) no longer than a schedule key
/// may be ([`schedule::MAX_KEY_LEN`]). Anything else is a 400 before the
/// store is asked.
pub(crate) struct ScheduleKeyParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ScheduleKeyParam {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        plain_segment(parts, state, "schedule key", schedule::MAX_KEY_LEN)
            .await
            .map(ScheduleKeyParam)
    }
}

/// The one path segment of a route, if it is a plain name of at most
/// `max` bytes; a 400 naming `what` otherwise.
async fn plain_segment<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    what: &str,
    max: usize,
) -> Result<String, HttpError> {
    let refused = |shown: &str| {
        HttpError::BadRequest(format!(
            "{what} `{shown}` is not a valid name (1 to {max} letters, digits, '-', '_' and '.', not starting with '.')"
        ))
    };
    let Path(raw) = Path::<String>::from_request_parts(parts, state)
        .await
        .map_err(|_| refused("(not utf-8)"))?;
    if !machine::is_plain_name(&raw) || raw.len() > max {
        // Echo a bounded, printable form of what was sent.
        let shown: String =
            raw.chars().take(40).map(|c| if c.is_control() { '?' } else { c }).collect();
        return Err(refused(&shown));
    }
    Ok(raw)
}

/// Who sent the request, as a stamp's `by` names it: `http <peer ip>`
/// when the connection's address is known (the server records it per
/// connection as axum's [`ConnectInfo`]), else `http` (routes served
/// without a socket, as in tests). The port is left out: on loopback it is
/// a random number that names nobody.
pub(crate) struct Who(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Who {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let peer = parts.extensions.get::<ConnectInfo<std::net::SocketAddr>>();
        Ok(Who(match peer {
            Some(ConnectInfo(addr)) => format!("http {}", addr.ip().to_canonical()),
            None => "http".to_owned(),
        }))
    }
}

/// A job id as written in a path or query: 1 to 19 ASCII digits, positive.
pub(crate) fn parse_id(raw: &str) -> Option<JobId> {
    if raw.is_empty() || raw.len() > 19 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse::<JobId>().ok().filter(|id| *id > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn who(peer: Option<&str>) -> String {
        let (mut parts, ()) = axum::http::Request::new(()).into_parts();
        if let Some(peer) = peer {
            parts.extensions.insert(ConnectInfo(peer.parse::<std::net::SocketAddr>().unwrap()));
        }
        let Ok(Who(by)) = Who::from_request_parts(&mut parts, &()).await;
        by
    }

    #[tokio::test]
    async fn who_is_named_by_the_peer_address_without_its_port() {
        assert_eq!(who(Some("127.0.0.1:54321")).await, "http 127.0.0.1");
        assert_eq!(who(Some("[::1]:7878")).await, "http ::1");
        assert_eq!(who(Some("[::ffff:127.0.0.2]:1")).await, "http 127.0.0.2");
        assert_eq!(who(None).await, "http");
    }

    #[test]
    fn ids() {
        assert_eq!(parse_id("1"), Some(1));
        assert_eq!(parse_id("9223372036854775807"), Some(i64::MAX));
        for bad in [
            "",
            "0",
            "-1",
            "+1",
            "abc",
            "1.0",
            " 1",
            "..",
            "9223372036854775808",
            "99999999999999999999",
        ] {
            assert_eq!(parse_id(bad), None, "{bad}");
        }
    }
}
