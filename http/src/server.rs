//! Listening: the loopback rule, the token, an accept loop with a header
//! timeout, and a shutdown that lets requests finish and the worker hand
//! its job back.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use slothqueue_core::Store;
use slothqueue_runner::QueueWatch;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::worker::{DrainWorker, WorkerStop};
use crate::{ApiState, DEFAULT_BODY_LIMIT, HttpError, Token, router};

/// Where `serve` listens unless told: loopback, port 7878.
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 7878);

/// A client must send its request headers within this time; a connection
/// that says nothing (or drips bytes) is closed instead of held forever.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long requests in flight may take to finish once shutdown began.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How the server listens.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The address to listen on; [`DEFAULT_ADDR`] by default. Port 0 picks
    /// a free port ([`Bound::local_addr`] tells which).
    pub addr: SocketAddr,
    /// Where the bearer token comes from.
    pub token: Token,
    /// Allow a non-loopback address and any `Host` header. Off by default:
    /// anyone who can enqueue can run commands as this user.
    pub allow_remote: bool,
    /// The largest request body in bytes; [`DEFAULT_BODY_LIMIT`] by default.
    pub body_limit: usize,
    /// The queue file the store serves, watched so that a `?wait=` long
    /// poll sees jobs finished by runners in other processes as they
    /// finish. [`ServeConfig::new`] takes it from a [`Token::Generate`];
    /// `None` polls every [`crate::UNWATCHED_POLL`].
    pub queue_file: Option<PathBuf>,
    /// Also answer `GET /metrics`, and nothing else, on this address
    /// without the token (for a Prometheus that scrapes without
    /// credentials); loopback unless `allow_remote`, like `addr`. `None`
    /// (the default): `/metrics` only on `addr`, behind the token.
    pub metrics_addr: Option<SocketAddr>,
}

impl ServeConfig {
    /// Loopback on port 7878, 1 MiB bodies, with the given token source.
    pub fn new(token: Token) -> Self {
        let queue_file = match &token {
            Token::Generate { beside_queue } => Some(beside_queue.clone()),
            Token::File(_) => None,
        };
        ServeConfig {
            addr: DEFAULT_ADDR,
            token,
            allow_remote: false,
            body_limit: DEFAULT_BODY_LIMIT,
            queue_file,
            metrics_addr: None,
        }
    }
}

/// A server whose socket is bound and whose token is loaded, not yet
/// answering: the caller can say where it listens before it runs.
pub struct Bound {
    listener: TcpListener,
    local_addr: SocketAddr,
    token_path: PathBuf,
    store: Arc<dyn Store>,
    state: ApiState,
    /// The `metrics_addr` listener and the address it is bound to.
    metrics: Option<(TcpListener, SocketAddr)>,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("local_addr", &self.local_addr)
            .field("token_path", &self.token_path)
            .finish_non_exhaustive()
    }
}

/// Binds `config.addr` and loads (or creates) the token.
///
/// Refuses a non-loopback address unless `config.allow_remote`, before
/// touching the token or the network.
pub async fn bind(store: Arc<dyn Store>, config: ServeConfig) -> Result<Bound, HttpError> {
    for addr in std::iter::once(config.addr).chain(config.metrics_addr) {
        if !config.allow_remote && !addr.ip().is_loopback() {
            return Err(HttpError::NotLoopback { addr });
        }
    }
    let (token, token_path) = config.token.load()?;
    let listener = TcpListener::bind(config.addr)
        .await
        .map_err(|source| HttpError::Bind { addr: config.addr, source })?;
    let local_addr =
        listener.local_addr().map_err(|source| HttpError::Bind { addr: config.addr, source })?;
    let mut state = ApiState::new(token)
        .with_allow_remote(config.allow_remote)
        .with_body_limit(config.body_limit)
        .with_server_addr(local_addr);
    if let Some(queue) = &config.queue_file {
        state = state
            .with_queue_watch(Arc::new(QueueWatch::for_store(queue, store.as_ref())))
            .with_log_dir(crate::log_dir_beside(queue));
    }
    let metrics = match config.metrics_addr {
        Some(addr) => {
            let listener =
                TcpListener::bind(addr).await.map_err(|source| HttpError::Bind { addr, source })?;
            let bound = listener.local_addr().map_err(|source| HttpError::Bind { addr, source })?;
            Some((listener, bound))
        }
        None => None,
    };
    Ok(Bound { listener, local_addr, token_path, store, state, metrics })
}

/// What [`serve`] tells its caller once it listens.
#[derive(Debug)]
#[non_exhaustive]
pub struct Listening<'a> {
    /// The address bound.
    pub addr: SocketAddr,
    /// The file the token was read from or written to.
    pub token_path: &'a Path,
    /// A one-time link that logs a browser in to the web page
    /// ([`Bound::login_link`]).
    pub login_link: &'a str,
    /// Where `GET /metrics` answers without the token
    /// ([`ServeConfig::metrics_addr`]), if asked for.
    pub metrics_addr: Option<SocketAddr>,
}

/// Binds, calls `on_listening` with the bound address, the token file and
/// a one-time login link for the web page (so the CLI can print
/// `listening on http://127.0.0.1:7878 (token in …)`), then runs as
/// [`Bound::run`] does.
pub async fn serve(
    store: Arc<dyn Store>,
    config: ServeConfig,
    worker: Option<DrainWorker>,
    shutdown: impl Future<Output = ()> + Send,
    on_listening: impl FnOnce(&Listening<'_>),
) -> Result<(), HttpError> {
    let bound = bind(store, config).await?;
    let login_link = bound.login_link()?;
    on_listening(&Listening {
        addr: bound.local_addr(),
        token_path: bound.token_path(),
        login_link: &login_link,
        metrics_addr: bound.metrics_addr(),
    });
    bound.run(worker, shutdown).await
}

impl Bound {
    /// The address actually bound (the port is known even when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The file the token was read from or written to.
    pub fn token_path(&self) -> &Path {
        &self.token_path
    }

    /// A link that logs a browser in to the web page once:
    /// `http://127.0.0.1:7878/login?code=…`, with a new random code that
    /// works one time within ten minutes (it is not the API token, and is
    /// useless once used). A server bound to every address (`0.0.0.0`)
    /// names loopback.
    pub fn login_link(&self) -> Result<String, HttpError> {
        let code = self.state.login_code()?;
        let mut addr = self.local_addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr.ip() {
                std::net::IpAddr::V4(_) => std::net::IpAddr::V4(Ipv4Addr::LOCALHOST),
                std::net::IpAddr::V6(_) => std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            });
        }
        Ok(format!("http://{addr}/login?code={code}"))
    }

    /// Where `GET /metrics` is served without the token, when
    /// [`ServeConfig::metrics_addr`] asked for it.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|(_, addr)| *addr)
    }

    /// Replaces the route settings (default `cwd`, clock, …); the token and
    /// the security settings from the [`ServeConfig`] are kept.
    pub fn configure(mut self, f: impl FnOnce(ApiState) -> ApiState) -> Self {
        let token = self.state.token.clone();
        let allow_remote = self.state.allow_remote;
        let body_limit = self.state.body_limit;
        let server_addr = self.state.server_addr;
        let sessions = self.state.sessions.clone();
        let mut state = f(self.state);
        // Login links already handed out keep working.
        state.sessions = sessions;
        state.server_addr = server_addr;
        state.token = token;
        state.allow_remote = allow_remote;
        state.body_limit = body_limit;
        self.state = state;
        self
    }

    /// Answers requests, with `worker` (if any) draining the queue beside
    /// them, until `shutdown` resolves; then stops accepting, lets requests
    /// in flight finish (for a bounded time), asks the worker to stop its
    /// job and hand it back, and waits for it.
    ///
    /// Returns early with an error if the worker stops by itself: a server
    /// that accepts jobs nobody will run would be lying.
    pub async fn run(
        self,
        worker: Option<DrainWorker>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), HttpError> {
        let Bound { listener, store, mut state, metrics, .. } = self;
        let mut worker_task: Option<(WorkerStop, JoinHandle<Result<(), HttpError>>)> = None;
        if let Some(worker) = worker {
            state = state.with_waker(worker.waker()).with_counters(worker.counters());
            let (stop, run) = worker.start();
            worker_task = Some((stop, tokio::spawn(run)));
        }
        let closing = state.clone();
        let metrics_task = metrics.map(|(listener, _)| {
            let app = crate::metrics_router(store.clone(), state.clone());
            tokio::spawn(serve_metrics(listener, app, state.closing.subscribe()))
        });
        let app = router(store, state);
        let graceful = GracefulShutdown::new();
        let mut shutdown = pin!(shutdown);
        let worker_ended = loop {
            let worker_done = async {
                match worker_task.as_mut() {
                    Some((_, task)) => task.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut shutdown => break None,
                joined = worker_done => break Some(match joined {
                    Ok(Ok(())) => Err(HttpError::WorkerStopped("stopped unexpectedly".to_owned())),
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(HttpError::WorkerStopped(format!("crashed: {e}"))),
                }),
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let mut builder = hyper::server::conn::http1::Builder::new();
                        builder.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
                        let routes = TowerToHyperService::new(app.clone());
                        // The peer's address, as axum's `ConnectInfo`, names
                        // who paused a lane or held a job (`http 127.0.0.1`).
                        let service = hyper::service::service_fn(
                            move |mut req: hyper::Request<hyper::body::Incoming>| {
                                req.extensions_mut().insert(ConnectInfo(peer));
                                hyper::service::Service::call(&routes, req)
                            },
                        );
                        let conn = builder.serve_connection(TokioIo::new(stream), service);
                        let conn = graceful.watch(conn);
                        tokio::spawn(async move {
                            // A client that hangs up mid-request is its own problem.
                            let _ = conn.await;
                        });
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: wait a little
                        // rather than spin; a connection-level error is the
                        // client's and needs no pause.
                        if !matches!(
                            e.kind(),
                            std::io::ErrorKind::ConnectionAborted
                                | std::io::ErrorKind::ConnectionReset
                                | std::io::ErrorKind::ConnectionRefused
                        ) {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                },
            }
        };
        drop(listener);
        // Long polls answer now rather than hold the shutdown up (and the
        // metrics listener closes).
        closing.close();
        if let Some(task) = metrics_task {
            let _ = task.await;
        }
        if worker_ended.is_some() {
            // Its task is finished and must not be awaited again.
            worker_task = None;
        }
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await;
        let stopped = match worker_task {
            Some((stop, task)) => {
                stop.stop();
                match task.await {
                    Ok(result) => result,
                    Err(e) => Err(HttpError::WorkerStopped(format!("crashed: {e}"))),
                }
            }
            None => Ok(()),
        };
        worker_ended.unwrap_or(stopped)
    }
}

/// Answers `GET /metrics` on its own listener until the server closes:
/// each connection as the API's are (HTTP/1.1, a header timeout).
async fn serve_metrics(
    listener: TcpListener,
    app: axum::Router,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = async { let _ = closing.wait_for(|closing| *closing).await; } => return,
            accepted = listener.accept() => {
                let Ok((stream, _peer)) = accepted else {
                    // Out of descriptors and the like: a scrape can wait.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
                let service = TowerToHyperService::new(app.clone());
                let conn = builder.serve_connection(TokioIo::new(stream), service);
                tokio::spawn(async move {
                    // A scraper that hangs up mid-request is its own problem.
                    let _ = conn.await;
                });
            }
        }
    }
}
