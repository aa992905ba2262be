//! slothqueue's HTTP API: the outbox routes other programs on this machine
//! use to enqueue and watch jobs, and a drain worker that runs them.
//!
//! The routes (JSON in and out; see `GET /api/openapi.json`):
//!
//! | route | does |
//! |---|---|
//! | `POST /api/tasks/enqueue` | adds a job (201), or finds the identical one with the same idempotency key (200); `after` names the jobs it runs after |
//! | `POST /api/tasks/enqueue/batch` | adds an array of such jobs in one transaction, all or none (a refused one is named by `index`) |
//! | `GET /api/tasks/outbox` | jobs, newest first, filtered by `state`, `kind`, `queue`, paged by `limit` and `cursor`; secret-looking env values masked unless `?show_secrets=true` |
//! | `GET /api/tasks/outbox/{id}` | one job with its event trail, and `waiting` when no live runner can run it (`no handler for kind download`); `?wait=SECONDS` (at most 120) answers once it is finished or the time is up; `?show_secrets=true` as for the list |
//! | `POST /api/tasks/outbox/{id}/cancel` | cancels a job |
//! | `POST /api/tasks/outbox/{id}/retry` | runs a failed or cancelled job again |
//! | `GET /api/tasks/outbox/{id}/log` | a piece of the job's log from `?offset=` (its tail without), to follow it as it grows |
//! | `POST /api/tasks/outbox/{id}/hold` | holds a pending job: no runner starts it until released |
//! | `POST /api/tasks/outbox/{id}/release` | releases a held job |
//! | `PATCH /api/tasks/outbox/{id}` | changes a pending or held job (only the fields given; 409 once a runner took it) |
//! | `POST /api/tasks/outbox/{id}/clone` | adds a new pending job from any job, with changes (201) |
//! | `GET /api/tasks/outbox/stats` | counts per state, `due_now`, `next_due`, and `unserved`: pending jobs no live runner can run (`no handler for kind download`) |
//! | `GET /api/queues` | every queue's counts, limit and pause |
//! | `GET /api/runners` | the runners recorded in the queue file, each judged alive or not |
//! | `PUT /api/queues/{queue}/limit` | `{"limit": N}`: at most N of the queue's jobs run at once (0 lifts it) |
//! | `POST /api/queues/{queue}/pause`, `.../resume` | pauses (no job of it starts) or resumes one queue |
//! | `POST /api/pause`, `POST /api/resume` | pauses or resumes every queue |
//! | `GET /api/schedules` | every schedule (recurring job) with its next fire; `?show_secrets=true` as for the outbox |
//! | `POST /api/schedules` | stores a schedule: `key`, `spec` (`{"cron": "0 3 * * *"}` or `{"every": SECONDS}`), `zone` (default `UTC`), `catch_up`, `overlap`, `job` (the enqueue body's fields); 201, 200 for the same definition again, 409 for another one under the key |
//! | `GET /api/schedules/{key}`, `DELETE /api/schedules/{key}` | one schedule; removes it (its jobs stay) |
//! | `POST /api/schedules/{key}/pause`, `.../resume` | no tick fires until resumed; resumed, it fires from its next slot after now |
//! | `GET /api/openapi.json` | the OpenAPI 3.1 document |
//! | `GET /metrics` | the queue in the Prometheus text format (OpenMetrics 1.0); also alone and without the token on [`ServeConfig::metrics_addr`] |
//! | `GET /healthz` | `{"ok": true}`, without a token |
//!
//! Beside them, the web page (module `web`): `GET /` for a person at the
//! same machine, its login at `/login` (a one-time code from
//! [`Bound::login_link`], or the token pasted in), which sets an
//! `HttpOnly`, `SameSite=Strict` session cookie and hands the page the
//! session's key. The API routes take that cookie with the key in
//! `X-Session-Key` in place of the bearer token (the cookie alone is not
//! enough: browsers send it to every port). The loopback `Host` and
//! `Origin` checks apply to the page as to the API.
//!
//! # Why it is this strict
//!
//! A queue that runs shell commands is remote code execution for anyone who
//! can enqueue. So the server binds loopback unless told otherwise, wants a
//! bearer token on every route (compared in constant time), and refuses
//! what a web page in a browser on the same machine could send: a `Host`
//! header that is not a loopback name (DNS rebinding makes `evil.example`
//! resolve to 127.0.0.1), a non-loopback `Origin`, and any body that is not
//! `application/json` (form and `text/plain` posts need no CORS preflight).
//! Bodies are limited (also chunked ones), slow clients are cut off, and
//! every refusal is JSON `{"error": "...", "status": N}` with its status.
//!
//! # Use
//!
//! [`router`] gives the routes without a socket (for tests and embedding);
//! [`bind`] then [`Bound::run`] (or [`serve`] in one call) listen, run the
//! optional [`DrainWorker`] beside the server, and stop cleanly when the
//! shutdown future resolves.

#![deny(missing_docs)]

mod api;
mod error;
mod extract;
mod guard;
mod long_poll;
mod mask;
mod metrics;
mod numbers;
mod server;
mod serving;
mod token;
mod web;
mod worker;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use slothqueue_core::{Clock, Store, SystemClock};
use slothqueue_runner::QueueWatch;
use tokio::sync::{Notify, watch};

pub use error::HttpError;
pub use server::{Bound, DEFAULT_ADDR, Listening, ServeConfig, bind, serve};
pub use token::{Token, token_path_beside};
pub use worker::{DrainWorker, WORKER_HEARTBEAT, log_dir_beside};

/// The largest request body accepted unless configured: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// What the routes need besides the store: the token, the security knobs,
/// the worker to wake, the clock.
#[derive(Clone)]
pub struct ApiState {
    token: Arc<str>,
    allow_remote: bool,
    body_limit: usize,
    waker: Option<Arc<Notify>>,
    default_cwd: Option<PathBuf>,
    clock: Arc<dyn Clock>,
    server_addr: Option<std::net::SocketAddr>,
    /// What wakes a `?wait=` long poll: the queue file's changes.
    watch: Arc<QueueWatch>,
    /// Set when the server begins to shut down: long polls answer at once.
    closing: watch::Sender<bool>,
    /// The long polls in progress, at most what the file limit allows.
    long_polls: long_poll::LongPolls,
    /// The drain worker's counts, for `/metrics`.
    counters: metrics::WorkerCounters,
    /// `/metrics` needs no token: the routes of `--metrics-addr`, which
    /// serve nothing else.
    metrics_public: bool,
    /// Where the worker writes job logs (`GET .../log` reads there).
    log_dir: Option<PathBuf>,
    /// The web page's login codes and sessions.
    sessions: Arc<web::Sessions>,
}

/// How often a `?wait=` looks at a queue whose file is not known (routes
/// made with [`router`] and no [`ApiState::with_queue_watch`]).
pub const UNWATCHED_POLL: std::time::Duration = std::time::Duration::from_secs(1);

impl fmt::Debug for ApiState {
    // Never the token: a Debug print must not leak it into a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiState")
            .field("allow_remote", &self.allow_remote)
            .field("body_limit", &self.body_limit)
            .field("waker", &self.waker.is_some())
            .field("default_cwd", &self.default_cwd)
            .field("watch", &self.watch)
            .finish_non_exhaustive()
    }
}

impl ApiState {
    /// Routes guarded by `token`, loopback only, with a 1 MiB body limit,
    /// the system clock, no worker to wake, and this process's working
    /// directory as the default `cwd` of shell jobs.
    pub fn new(token: impl Into<String>) -> Self {
        ApiState {
            token: Arc::from(token.into()),
            allow_remote: false,
            body_limit: DEFAULT_BODY_LIMIT,
            waker: None,
            default_cwd: std::env::current_dir().ok(),
            clock: Arc::new(SystemClock),
            server_addr: None,
            watch: Arc::new(QueueWatch::polling(UNWATCHED_POLL)),
            closing: watch::channel(false).0,
            long_polls: long_poll::LongPolls::for_this_process(),
            counters: metrics::WorkerCounters::default(),
            metrics_public: false,
            log_dir: None,
            sessions: Arc::new(web::Sessions::default()),
        }
    }

    /// Where job logs are kept (`<queue>.logs`, [`log_dir_beside`]): `GET
    /// /api/tasks/outbox/{id}/log` reads `<id>.log` there. Without one that
    /// route answers 404. [`bind`] sets it beside the configured queue file.
    pub fn with_log_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.log_dir = Some(dir.into());
        self
    }

    /// A new one-time login code for the web page: good once, for ten
    /// minutes, and not the API token. The page's link is
    /// `http://ADDR/login?code=CODE` ([`Bound::login_link`] makes it).
    pub fn login_code(&self) -> Result<String, HttpError> {
        self.sessions.issue_code(self.clock.now()).map_err(HttpError::Random)
    }

    /// What wakes a `GET /api/tasks/outbox/{id}?wait=` long poll: a watch
    /// on the queue ([`QueueWatch::for_store`]), so that a job finished by
    /// a runner in another process answers it at once. Without one, such
    /// a request looks every [`UNWATCHED_POLL`].
    pub fn with_queue_watch(mut self, watch: Arc<QueueWatch>) -> Self {
        self.watch = watch;
        self
    }

    /// Accept any `Host` header (the server is reachable from the network
    /// on purpose, so names other than loopback are expected).
    pub fn with_allow_remote(mut self, allow: bool) -> Self {
        self.allow_remote = allow;
        self
    }

    /// The largest request body, in bytes.
    pub fn with_body_limit(mut self, limit: usize) -> Self {
        self.body_limit = limit;
        self
    }

    /// Notified after every enqueue, cancel and other change a runner acts
    /// on (a lane's settings, a schedule), so a following runner starts
    /// (or stops) a job, or fires a tick, at once instead of at its next
    /// poll.
    pub fn with_waker(mut self, waker: Arc<Notify>) -> Self {
        self.waker = Some(waker);
        self
    }

    /// The directory shell jobs run in when their payload has no `cwd`.
    pub fn with_default_cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.default_cwd = Some(cwd.into());
        self
    }

    /// The clock that stamps pushes and cancels (tests inject one).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The address the server is bound to, named in the OpenAPI
    /// document's `servers` ([`bind`] sets it).
    pub fn with_server_addr(mut self, addr: std::net::SocketAddr) -> Self {
        self.server_addr = Some(addr);
        self
    }

    /// The drain worker's counts that `/metrics` reports.
    pub(crate) fn with_counters(mut self, counters: metrics::WorkerCounters) -> Self {
        self.counters = counters;
        self
    }

    /// Answers every long poll now and every later one at once: the
    /// server is going away.
    pub(crate) fn close(&self) {
        self.closing.send_replace(true);
    }

    fn wake_worker(&self) {
        if let Some(w) = &self.waker {
            // `notify_one` keeps a permit when the worker is busy, so a push
            // that lands between two of its looks is not missed.
            w.notify_one();
        }
    }
}

/// The router's state: the store and the settings.
#[derive(Clone)]
pub(crate) struct AppState {
    store: Arc<dyn Store>,
    api: ApiState,
}

/// Every route of the API on `store`, guarded as described in the crate
/// documentation, without binding a socket.
pub fn router(store: Arc<dyn Store>, state: ApiState) -> Router {
    let limit = state.body_limit;
    let app = AppState { store, api: state };
    let mut router: Router<AppState> = Router::new();
    let mut seen: Vec<&str> = Vec::new();
    for spec in api::ROUTES {
        if seen.contains(&spec.path) {
            continue;
        }
        seen.push(spec.path);
        let mut methods = (spec.handler)();
        for other in api::ROUTES.iter().filter(|r| r.path == spec.path && r.method != spec.method) {
            methods = methods.merge((other.handler)());
        }
        router = router.route(spec.path, methods);
    }
    web::routes(router)
        .fallback(api::no_route)
        .method_not_allowed_fallback(api::wrong_method)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard::guard))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            axum::response::IntoResponse::into_response(HttpError::Internal)
        }))
        .layer(axum::middleware::map_response(error::json_refusals))
        .layer(axum::middleware::map_response(guard::no_sniffing))
        .with_state(app)
}

/// `GET /metrics` alone, without the token (the `Host` and `Origin`
/// checks still apply): what [`ServeConfig::metrics_addr`] serves.
pub(crate) fn metrics_router(store: Arc<dyn Store>, mut state: ApiState) -> Router {
    state.metrics_public = true;
    let app = AppState { store, api: state };
    Router::new()
        .route(metrics::PATH, axum::routing::get(metrics::metrics))
        .fallback(api::no_route)
        .method_not_allowed_fallback(api::wrong_method)
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard::guard))
        .layer(axum::middleware::map_response(error::json_refusals))
        .layer(axum::middleware::map_response(guard::no_sniffing))
        .with_state(app)
}

/// The `(method, path)` of every route [`router`] serves, in the syntax the
/// OpenAPI document uses; the CLI can show them, tests compare them.
pub fn routes() -> Vec<(&'static str, &'static str)> {
    api::ROUTES.iter().map(|r| (r.method, r.path)).collect()
}

/// The OpenAPI 3.1 document served at `/api/openapi.json` (naming the
/// default address; the served one names the bound address).
pub fn openapi() -> serde_json::Value {
    api::openapi_document(None)
}
