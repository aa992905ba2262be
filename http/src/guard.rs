//! The checks every request passes before a handler sees it: a loopback
//! `Host` and `Origin` (no DNS rebinding, no cross-site requests), the bearer
//! token, a JSON content type for bodies, and the declared body size.
//!
//! They run in that order so that a client without the token learns nothing
//! but "401" about the rest of the request.
//!
//! The web page's session stands in for the token (`web::session`): a
//! request that carries no bearer token but a live session's cookie **and**
//! that session's key (`X-Session-Key`) is let through, whatever its
//! method. The cookie alone is no key: browsers send it to every port of
//! the host (issue 31, finding 3), so a request with it but not the key is
//! a 401 like one with neither. The page's own paths (`/`, `/login`, its
//! assets) pass the `Host` and `Origin` checks here and check the session
//! themselves (they serve nothing secret to the cookie alone).
//!
//! Every answer, the API's JSON as the page's HTML, says
//! `X-Content-Type-Options: nosniff` ([`no_sniffing`], the router's
//! outermost layer): a browser never reads a job's output in a JSON answer
//! as a script or a page.
//!
//! (This file uses `web/session.rs` alone, never the page's handlers,
//! which use the extractors that use this file.)

use std::net::{Ipv4Addr, Ipv6Addr};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::metrics::PATH as METRICS;
use crate::token::constant_time_eq;
use crate::{AppState, HttpError};

/// The one route anyone on the machine may call without the token.
pub(crate) const HEALTHZ: &str = "/healthz";

/// Runs the checks; the handler runs only if all pass.
pub(crate) async fn guard(State(app): State<AppState>, req: Request, next: Next) -> Response {
    match check(&app, &req) {
        Ok(()) => next.run(req).await,
        Err(e) => {
            if matches!(e, HttpError::Unauthorized) {
                // The same pause after every wrong token: guessing is slow,
                // and how far a guess got cannot be timed.
                tokio::time::sleep(FAILED_TOKEN_DELAY).await;
            }
            e.into_response()
        }
    }
}

/// How long a request with a missing or wrong token waits for its 401.
pub(crate) const FAILED_TOKEN_DELAY: std::time::Duration = std::time::Duration::from_millis(75);

fn check(app: &AppState, req: &Request) -> Result<(), HttpError> {
    let api = &app.api;
    for (name, what) in [(header::HOST, "host"), (header::ORIGIN, "origin")] {
        if req.headers().get_all(&name).iter().nth(1).is_some() {
            return Err(HttpError::BadRequest(format!("more than one {what} header")));
        }
    }
    if !api.allow_remote {
        let not_loopback = || {
            HttpError::Forbidden(
                "the host header must name a loopback address (localhost, 127.0.0.1 or [::1])"
                    .to_owned(),
            )
        };
        let host = req.headers().get(header::HOST).map(|h| h.to_str().ok());
        // An absolute-form target (`GET http://evil.example/… HTTP/1.1`)
        // names a host too, and is judged like the header.
        let authority = req.uri().authority().map(|a| a.as_str());
        match (host, authority) {
            (None, None) => return Err(not_loopback()),
            (Some(h), _) if !h.is_some_and(is_loopback_host) => return Err(not_loopback()),
            (_, Some(a)) if !is_loopback_host(a) => return Err(not_loopback()),
            _ => {}
        }
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        if !origin.to_str().is_ok_and(is_loopback_origin) {
            return Err(HttpError::Forbidden("cross-origin requests are not allowed".to_owned()));
        }
    }
    if req.uri().path() == HEALTHZ || (api.metrics_public && req.uri().path() == METRICS) {
        return Ok(());
    }
    if crate::web::session::is_page(req.uri().path()) {
        // The login form posts JSON like the API; the rest are GETs.
        return check_body_headers(req.headers(), api.body_limit);
    }
    if !authorized(req.headers(), &api.token) {
        let session = crate::web::session::session_of(api, req.headers());
        if !session.is_some_and(|s| s.key_ok(req.headers())) {
            return Err(HttpError::Unauthorized);
        }
    }
    check_body_headers(req.headers(), api.body_limit)
}

/// `X-Content-Type-Options: nosniff` on every answer that does not already
/// say it: the router's outermost layer, so refusals, panics and the
/// fallback's answers have it too.
pub(crate) async fn no_sniffing(mut response: Response) -> Response {
    response
        .headers_mut()
        .entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(HeaderValue::from_static("nosniff"));
    response
}

/// `Authorization: Bearer <token>`, the scheme case-insensitive as RFC 9110
/// says, the token compared in constant time.
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let value = value.as_bytes();
    let scheme = b"bearer ";
    if value.len() < scheme.len() || !value[..scheme.len()].eq_ignore_ascii_case(scheme) {
        return false;
    }
    let presented = value[scheme.len()..].trim_ascii();
    constant_time_eq(presented, token.as_bytes())
}

/// A body must be declared JSON (browsers can send `text/plain` and form
/// bodies cross-site without a preflight; they cannot send JSON), and a
/// declared length over the limit is refused before anything is read. A
/// chunked body over the limit is caught while it is read.
pub(crate) fn check_body_headers(headers: &HeaderMap, limit: usize) -> Result<(), HttpError> {
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0");
    match headers.get(header::CONTENT_TYPE) {
        Some(ct) if !is_json_content_type(ct.to_str().unwrap_or("")) => {
            return Err(HttpError::UnsupportedMediaType(
                "the body must be application/json".to_owned(),
            ));
        }
        None if has_body => {
            return Err(HttpError::UnsupportedMediaType(
                "a request with a body needs content-type: application/json".to_owned(),
            ));
        }
        _ => {}
    }
    if let Some(len) = headers.get(header::CONTENT_LENGTH) {
        match len.to_str().ok().and_then(|l| l.trim().parse::<u64>().ok()) {
            Some(n) if n > limit as u64 => return Err(HttpError::PayloadTooLarge { limit }),
            Some(_) => {}
            None => return Err(HttpError::BadRequest("invalid content-length".to_owned())),
        }
    }
    Ok(())
}

/// `application/json`, with parameters such as `; charset=utf-8`.
pub(crate) fn is_json_content_type(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// `localhost`, `127.x.y.z` or `[::1]`, each with an optional port.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else {
            return false;
        };
        let port = match after {
            "" => None,
            p => match p.strip_prefix(':') {
                Some(p) => Some(p),
                None => return false,
            },
        };
        let Ok(ip) = inside.parse::<Ipv6Addr>() else {
            return false;
        };
        if !(ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())) {
            return false;
        }
        ("", port)
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if let Some(port) = port {
        if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
    }
    name.is_empty() && host.starts_with('[')
        || name.eq_ignore_ascii_case("localhost")
        || name.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// `http://localhost:7878` and the like; `null` and anything else is not.
fn is_loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    is_loopback_host(rest.strip_suffix('/').unwrap_or(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for ok in [
            "localhost",
            "LOCALHOST:7878",
            "127.0.0.1",
            "127.1.2.3:80",
            "[::1]",
            "[::1]:7878",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:7878",
            "localhost.evil.example",
            "localhost:",
            "localhost:abc",
            "localhost:123456",
            "127.0.0.1:80:80",
            "128.0.0.1",
            "[::2]",
            "[::1",
            "[::1]x",
            "0.0.0.0",
            "10.0.0.1:7878",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn loopback_origins() {
        assert!(is_loopback_origin("http://localhost:7878"));
        assert!(is_loopback_origin("https://127.0.0.1"));
        assert!(!is_loopback_origin("null"));
        assert!(!is_loopback_origin("http://evil.example"));
        assert!(!is_loopback_origin("localhost"));
        assert!(!is_loopback_origin("http://localhost/path"));
    }

    #[test]
    fn bearer_scheme_and_token() {
        let mut h = HeaderMap::new();
        assert!(!authorized(&h, "secret-token"));
        h.insert(header::AUTHORIZATION, "Bearer secret-token".parse().unwrap());
        assert!(authorized(&h, "secret-token"));
        h.insert(header::AUTHORIZATION, "bearer secret-token".parse().unwrap());
        assert!(authorized(&h, "secret-token"));
        h.insert(header::AUTHORIZATION, "Bearer secret-tokeN".parse().unwrap());
        assert!(!authorized(&h, "secret-token"));
        h.insert(header::AUTHORIZATION, "Basic secret-token".parse().unwrap());
        assert!(!authorized(&h, "secret-token"));
        h.insert(header::AUTHORIZATION, "Bearer".parse().unwrap());
        assert!(!authorized(&h, "secret-token"));
    }

    #[test]
    fn json_content_types() {
        assert!(is_json_content_type("application/json"));
        assert!(is_json_content_type("Application/JSON; charset=utf-8"));
        assert!(!is_json_content_type("text/plain"));
        assert!(!is_json_content_type("application/x-www-form-urlencoded"));
        assert!(!is_json_content_type("application/jsonx"));
    }
}
