//! The page's login: one-time login codes, and sessions in two halves, a
//! cookie and a key.
//!
//! The API token never travels in a URL. `serve` prints a link with a
//! **login code** instead: random, good for one use within
//! [`LOGIN_CODE_TTL`], and unrelated to the token. Opening it (or pasting
//! the token into the login form) starts a **session**: a random id in an
//! `HttpOnly`, `SameSite=Strict` cookie that the page's scripts cannot
//! read and that no other site's page makes the browser send, and a random
//! **key** handed once, in the answer to the login itself, which the page
//! keeps in its origin's `localStorage` and sends in `X-Session-Key` with
//! every request.
//!
//! Why two halves: a browser sends the cookies of `127.0.0.1` to every
//! port of it, so any other local user's server on another port receives
//! the cookie (issue 31, finding 3). `localStorage` is per origin, port
//! included: no other port's page can read the key, and nothing this
//! server serves to the cookie alone contains it. A request with the
//! cookie but not its key is treated as one with neither (401). The
//! key in a custom header is also what a CSRF token would be: another
//! site's page can neither read it nor make the browser send the header.
//!
//! Sessions live in the server's memory only: a restarted server has
//! none, and the page asks to log in again.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use axum::http::HeaderMap;
use axum::http::header;
use slothqueue_core::Timestamp;

use crate::ApiState;
use crate::token::{constant_time_eq, random_hex};

/// How long a login code printed by `serve` can be used (once).
pub(crate) const LOGIN_CODE_TTL: Duration = Duration::from_secs(10 * 60);
/// How long a session lasts from its login.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// The most sessions kept at once; a new login past it ends the oldest.
const MAX_SESSIONS: usize = 32;
/// The most unused login codes kept at once; a new one past it voids the
/// oldest.
const MAX_CODES: usize = 8;
/// The header that carries a session's key.
pub(crate) const KEY_HEADER: &str = "x-session-key";

/// One logged-in browser.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    /// The cookie's value.
    pub id: String,
    /// The half every request of this session carries in [`KEY_HEADER`],
    /// never in a cookie; handed out only in the answer to the login.
    pub key: String,
    /// When it ends.
    expires: Timestamp,
}

#[derive(Debug, Default)]
struct Inner {
    /// Unused login codes and when each stops working.
    codes: Vec<(String, Timestamp)>,
    /// Live sessions, oldest first.
    sessions: Vec<Session>,
}

/// The server's login codes and sessions.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    inner: Mutex<Inner>,
}

/// Why a login code was not accepted (the page says which).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CodeRefused {
    /// Never issued, or already used.
    Unknown,
    /// Issued, but older than [`LOGIN_CODE_TTL`] (it is gone now).
    Expired,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing in here can be left half-changed by a panic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new login code, good once until `now + LOGIN_CODE_TTL`.
    pub(crate) fn issue_code(&self, now: Timestamp) -> std::io::Result<String> {
        let code = random_hex(16)?;
        let mut inner = self.lock();
        inner.codes.retain(|(_, until)| *until > now);
        if inner.codes.len() >= MAX_CODES {
            inner.codes.remove(0);
        }
        inner.codes.push((code.clone(), now.saturating_add(LOGIN_CODE_TTL)));
        Ok(code)
    }

    /// Exchanges a login code for a new session. The code is spent
    /// whatever the outcome: it never works twice.
    pub(crate) fn redeem(&self, code: &str, now: Timestamp) -> Result<Session, CodeRefused> {
        let found = {
            let mut inner = self.lock();
            let at = inner
                .codes
                .iter()
                .position(|(c, _)| constant_time_eq(code.as_bytes(), c.as_bytes()));
            at.map(|i| inner.codes.remove(i))
        };
        match found {
            None => Err(CodeRefused::Unknown),
            Some((_, until)) if until <= now => Err(CodeRefused::Expired),
            Some(_) => self.start(now).map_err(|_| CodeRefused::Unknown),
        }
    }

    /// A new session from now.
    pub(crate) fn start(&self, now: Timestamp) -> std::io::Result<Session> {
        let session = Session {
            id: random_hex(32)?,
            key: random_hex(32)?,
            expires: now.saturating_add(SESSION_TTL),
        };
        let mut inner = self.lock();
        inner.sessions.retain(|s| s.expires > now);
        if inner.sessions.len() >= MAX_SESSIONS {
            inner.sessions.remove(0);
        }
        inner.sessions.push(session.clone());
        Ok(session)
    }

    /// The live session whose id is `id`, compared in constant time.
    pub(crate) fn find(&self, id: &str, now: Timestamp) -> Option<Session> {
        let inner = self.lock();
        // Every session is compared, found or not: no early exit to time.
        let mut hit = None;
        for s in &inner.sessions {
            if constant_time_eq(id.as_bytes(), s.id.as_bytes()) && s.expires > now {
                hit = Some(s.clone());
            }
        }
        hit
    }

    /// Ends the session `id` (logout).
    pub(crate) fn end(&self, id: &str) {
        self.lock().sessions.retain(|s| !constant_time_eq(id.as_bytes(), s.id.as_bytes()));
    }
}

impl Session {
    /// Whether `headers` carry this session's key (exactly once).
    pub(crate) fn key_ok(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(KEY_HEADER).iter();
        match (values.next(), values.next()) {
            (Some(v), None) => constant_time_eq(v.as_bytes(), self.key.as_bytes()),
            _ => false,
        }
    }
}

/// The page's own paths: the guard checks their `Host` and `Origin` (and a
/// JSON body's headers), their handlers the session.
const PAGES: &[&str] = &["/", "/login", "/logout", "/app.css", "/app.js"];

/// Whether `path` is one of the page's own.
pub(crate) fn is_page(path: &str) -> bool {
    PAGES.contains(&path)
}

/// The session cookie's name: with the port when it is known, since a
/// browser sends a cookie of `127.0.0.1` to every port of it, and two
/// servers on one machine must not log each other out.
pub(crate) fn cookie_name(api: &ApiState) -> String {
    match api.server_addr.map(|a| a.port()) {
        Some(p) => format!("slothqueue_session_{p}"),
        None => "slothqueue_session".to_owned(),
    }
}

/// The live session whose cookie the request carries, whether or not it
/// carries the key too (the page's own routes serve nothing secret to the
/// cookie alone; the API wants both, see `guard.rs`).
pub(crate) fn session_of(api: &ApiState, headers: &HeaderMap) -> Option<Session> {
    let id = cookie_value(headers, &cookie_name(api))?;
    api.sessions.find(id, api.clock.now())
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.trim())
}

/// The `Set-Cookie` value that stores `session`: `HttpOnly` (no script
/// reads it), `SameSite=Strict` (no other site's page sends it), for the
/// whole server, until the session ends. Not `Secure`: the server speaks
/// plain HTTP on loopback.
pub(crate) fn set_cookie(name: &str, session: &Session) -> String {
    format!(
        "{name}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        session.id,
        SESSION_TTL.as_secs()
    )
}

/// The `Set-Cookie` value that removes the cookie (logout).
pub(crate) fn clear_cookie(name: &str) -> String {
    format!("{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + (secs * 1000) as i64)
    }

    #[test]
    fn a_code_works_once_and_not_after_it_expires() {
        let s = Sessions::default();
        let code = s.issue_code(at(0)).unwrap();
        assert_eq!(code.len(), 32);
        let session = s.redeem(&code, at(1)).unwrap();
        assert!(s.find(&session.id, at(2)).is_some());
        assert_eq!(s.redeem(&code, at(2)).unwrap_err(), CodeRefused::Unknown, "used");
        let late = s.issue_code(at(0)).unwrap();
        let expired = at(LOGIN_CODE_TTL.as_secs());
        assert_eq!(s.redeem(&late, expired).unwrap_err(), CodeRefused::Expired);
        assert_eq!(s.redeem(&late, expired).unwrap_err(), CodeRefused::Unknown, "spent");
        assert_eq!(s.redeem("", at(0)).unwrap_err(), CodeRefused::Unknown);
    }

    #[test]
    fn sessions_end_on_logout_and_at_their_expiry() {
        let s = Sessions::default();
        let a = s.start(at(0)).unwrap();
        let b = s.start(at(0)).unwrap();
        assert_ne!(a.id, b.id);
        assert_ne!(a.key, b.key);
        assert_ne!(a.key, a.id);
        s.end(&a.id);
        assert!(s.find(&a.id, at(1)).is_none());
        assert!(s.find(&b.id, at(1)).is_some());
        assert!(s.find(&b.id, at(SESSION_TTL.as_secs())).is_none());
        assert!(s.find("", at(1)).is_none());
    }

    #[test]
    fn the_oldest_session_goes_past_the_limit() {
        let s = Sessions::default();
        let first = s.start(at(0)).unwrap();
        for _ in 1..MAX_SESSIONS {
            s.start(at(0)).unwrap();
        }
        assert!(s.find(&first.id, at(0)).is_some());
        s.start(at(0)).unwrap();
        assert!(s.find(&first.id, at(0)).is_none());
    }

    #[test]
    fn cookies_and_the_key_header_are_read_exactly() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=1; slothqueue_session_7878=abc ; b=2".parse().unwrap());
        assert_eq!(cookie_value(&h, "slothqueue_session_7878"), Some("abc"));
        assert_eq!(cookie_value(&h, "slothqueue_session"), None);
        let session = Sessions::default().start(at(0)).unwrap();
        assert!(!session.key_ok(&h));
        h.insert(KEY_HEADER, session.key.parse().unwrap());
        assert!(session.key_ok(&h));
        h.append(KEY_HEADER, session.key.parse().unwrap());
        assert!(!session.key_ok(&h), "two headers are one too many");
        let cookie = set_cookie("n", &session);
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
        assert!(!cookie.contains(&session.key), "the key is never in the cookie");
    }
}
