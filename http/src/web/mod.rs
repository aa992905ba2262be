//! The web page at `/`: the queue for a person at the same machine. Plain
//! HTML, CSS and a little JavaScript compiled into the binary
//! (`include_str!`), no build step and nothing fetched from elsewhere.
//!
//! The page is a client of the JSON API: its script calls the same routes
//! a program does, authenticated by the session cookie and the session's
//! key in `X-Session-Key` instead of the bearer token (the guard checks
//! both, see `guard.rs`). The key is handed out once, in the answer to the
//! login, and the page keeps it in `localStorage`; nothing served to the
//! cookie alone contains it. How a browser logs in is `session.rs`.
//!
//! | path | does |
//! |---|---|
//! | `GET /` | the page (nothing secret in it); without a session's cookie, a redirect to `/login` |
//! | `GET /login` | the login form (paste the token); with `?code=`, spends a one-time login code and starts a session: the cookie, and the key in a `<meta>` of the answer, which its script stores and goes on to `/` |
//! | `POST /login` | `{"token": "…"}`: starts a session for the right token: the cookie, and `{"key": "…"}` (401 otherwise) |
//! | `POST /logout` | ends the session (with its key) |
//! | `GET /app.css`, `GET /app.js` | the page's style and script |

pub(crate) mod session;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

pub(crate) use session::Sessions;
use session::{CodeRefused, cookie_name, session_of};

use crate::extract::{JsonBody, QueryParams};
use crate::token::constant_time_eq;
use crate::{AppState, HttpError};

const INDEX_HTML: &str = include_str!("index.html");
const LOGIN_HTML: &str = include_str!("login.html");
const APP_CSS: &str = include_str!("app.css");
const APP_JS: &str = include_str!("app.js");

/// Where a new session's key goes in `login.html` (the answer to a login
/// code, and only that).
const KEY_SLOT: &str = "<!--key-->";
/// Where a message to the person goes in `login.html`.
const NOTICE_SLOT: &str = "{{notice}}";

/// What the browser may do with the page: run only its own script and
/// style, talk only to this server, never be framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The page's routes added to `router`.
pub(crate) fn routes(router: Router<AppState>) -> Router<AppState> {
    router
        .route("/", get(index))
        .route("/login", get(login_page).post(login_with_token))
        .route("/logout", post(logout))
        .route("/app.css", get(|| async { asset("text/css; charset=utf-8", APP_CSS) }))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
}

/// Headers every page response has: its policy, no framing, no sniffing,
/// no referrer (a login link's code must not leave in one), and no copy
/// kept in a cache.
fn secured(mut response: Response, cache: &'static str) -> Response {
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    secured(response, "no-cache")
}

fn html(status: StatusCode, body: String) -> Response {
    let response =
        (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response();
    secured(response, "no-store")
}

fn see_other(to: &'static str) -> Response {
    let response = (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response();
    secured(response, "no-store")
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

fn login_html(notice: &str) -> String {
    LOGIN_HTML.replace(NOTICE_SLOT, notice)
}

/// `GET /`: the page for a session's cookie, else the login. The page
/// holds nothing secret: the cookie alone may reach any other port's
/// server, and its script finds the session's key in `localStorage` (or
/// goes to the login).
async fn index(State(app): State<AppState>, headers: HeaderMap) -> Response {
    match session_of(&app.api, &headers) {
        Some(_) => html(StatusCode::OK, INDEX_HTML.to_owned()),
        None => see_other("/login"),
    }
}

/// The query of `GET /login`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginQuery {
    code: Option<String>,
}

/// `GET /login`: the form (also to a session's cookie: the tab asking may
/// not hold the key), or with `?code=` the exchange of a login code for a
/// session.
async fn login_page(
    State(app): State<AppState>,
    QueryParams(q): QueryParams<LoginQuery>,
) -> Response {
    let api = &app.api;
    let Some(code) = q.code else {
        return html(StatusCode::OK, login_html(""));
    };
    match api.sessions.redeem(&code, api.clock.now()) {
        Ok(session) => {
            // The key in the answer to the code, which only its holder
            // sees (`no-store`: no cache keeps it); the page's script keeps
            // it in `localStorage` and goes on to `/` by itself rather than
            // by a redirect: opened from another site's page, a redirect
            // would be that site's navigation, and the browser would not
            // send the new `SameSite=Strict` cookie along; this page's own
            // is this site's. The spent code stays in the history, useless.
            // The key is hex: nothing in it needs escaping in an attribute.
            let meta = format!(r#"<meta name="session-key" content="{}">"#, session.key);
            let body = LOGIN_HTML
                .replace(NOTICE_SLOT, "Logged in; opening the queue…")
                .replace(KEY_SLOT, &meta);
            let cookie = session::set_cookie(&cookie_name(api), &session);
            with_cookie(html(StatusCode::OK, body), &cookie)
        }
        Err(why) => {
            tokio::time::sleep(crate::guard::FAILED_TOKEN_DELAY).await;
            let notice = match why {
                CodeRefused::Expired => {
                    "This login link has expired (links work for ten minutes). Paste the token below."
                }
                CodeRefused::Unknown => {
                    "This login link was already used, or is not this server's (each link works once). Paste the token below."
                }
            };
            html(StatusCode::FORBIDDEN, login_html(notice))
        }
    }
}

/// The body of `POST /login`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenLogin {
    token: String,
}

/// What `POST /login` answers: the session's key, for the page to keep
/// (the cookie comes beside it).
#[derive(Debug, serde::Serialize)]
struct LoginAnswer {
    key: String,
}

/// `POST /login`: a session for whoever knows the token.
async fn login_with_token(
    State(app): State<AppState>,
    JsonBody(body): JsonBody<TokenLogin>,
) -> Result<Response, HttpError> {
    let api = &app.api;
    if !constant_time_eq(body.token.trim().as_bytes(), api.token.as_bytes()) {
        tokio::time::sleep(crate::guard::FAILED_TOKEN_DELAY).await;
        return Err(HttpError::Unauthorized);
    }
    let session = api.sessions.start(api.clock.now()).map_err(HttpError::Random)?;
    let cookie = session::set_cookie(&cookie_name(api), &session);
    let answer = axum::Json(LoginAnswer { key: session.key }).into_response();
    Ok(with_cookie(secured(answer, "no-store"), &cookie))
}

/// `POST /logout`: ends the session (it needs its key, so another page
/// cannot log a person out).
async fn logout(State(app): State<AppState>, headers: HeaderMap) -> Result<Response, HttpError> {
    let api = &app.api;
    if let Some(session) = session_of(api, &headers) {
        if !session.key_ok(&headers) {
            return Err(HttpError::Forbidden("missing or wrong x-session-key header".to_owned()));
        }
        api.sessions.end(&session.id);
    }
    let response = secured(StatusCode::NO_CONTENT.into_response(), "no-store");
    Ok(with_cookie(response, &session::clear_cookie(&cookie_name(api))))
}
