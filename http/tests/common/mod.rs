//! A served instance on a free loopback port, on either backend, and a
//! client that speaks to it.

#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use slothqueue_core::Store;
use slothqueue_http::{ApiState, Bound, DrainWorker, HttpError, ServeConfig, Token};
use slothqueue_store_redb::{RedbOptions, RedbStore};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Which store a test runs on: a file backend (the server is started on
/// a queue file).
pub use slothqueue::Backend;

/// Generates one test per backend for each scenario function `f(Backend)`;
/// attributes before a name (`#[ignore = "why"]`) go on both of its tests.
#[macro_export]
macro_rules! on_both_backends {
    ($($(#[$attr:meta])* $name:ident),* $(,)?) => {
        mod sqlite {
            $(
                $(#[$attr])*
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Sqlite).await
                }
            )*
        }
        mod redb {
            $(
                $(#[$attr])*
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Redb).await
                }
            )*
        }
    };
}

pub fn open_store(backend: Backend, dir: &std::path::Path) -> (Arc<dyn Store>, PathBuf) {
    match backend {
        Backend::Sqlite => {
            let path = dir.join("queue.db");
            let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
            (Arc::new(store), path)
        }
        Backend::Redb => {
            let path = dir.join("queue.redb");
            let store = RedbStore::open(&path, RedbOptions::default()).unwrap();
            (Arc::new(store), path)
        }
        Backend::Postgres => unreachable!("the HTTP tests run on queue files"),
    }
}

/// A running server; dropping it without [`Server::stop`] aborts it.
pub struct Server {
    pub url: String,
    pub addr: std::net::SocketAddr,
    pub token: String,
    pub token_path: PathBuf,
    /// A one-time login link for the web page, issued at the start.
    pub login_link: String,
    pub queue_path: PathBuf,
    pub store: Arc<dyn Store>,
    pub client: reqwest::Client,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), HttpError>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

pub async fn start(backend: Backend) -> Server {
    start_with(backend, |_, _| None).await
}

/// Starts a server whose worker (if any) `make_worker` builds from the
/// store and the queue file.
pub async fn start_with(
    backend: Backend,
    make_worker: impl FnOnce(Arc<dyn Store>, PathBuf) -> Option<DrainWorker>,
) -> Server {
    start_configured(backend, make_worker, |state, _| state).await
}

/// As [`start_with`], with the route settings changed by `configure`
/// (given the queue file).
pub async fn start_configured(
    backend: Backend,
    make_worker: impl FnOnce(Arc<dyn Store>, PathBuf) -> Option<DrainWorker>,
    configure: impl FnOnce(ApiState, &std::path::Path) -> ApiState,
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let (store, queue_path) = open_store(backend, dir.path());
    let mut config = ServeConfig::new(Token::Generate { beside_queue: queue_path.clone() });
    config.addr = "127.0.0.1:0".parse().unwrap();
    let bound: Bound = slothqueue_http::bind(store.clone(), config).await.unwrap();
    let cwd = dir.path().to_owned();
    let bound = bound.configure(|s| configure(s.with_default_cwd(cwd), &queue_path));
    let addr = bound.local_addr();
    let token_path = bound.token_path().to_owned();
    let token = std::fs::read_to_string(&token_path).unwrap().trim().to_owned();
    let login_link = bound.login_link().unwrap();
    let worker = make_worker(store.clone(), queue_path.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(bound.run(worker, async move {
        let _ = stopped.await;
    }));
    Server {
        url: format!("http://{addr}"),
        addr,
        token,
        token_path,
        login_link,
        queue_path,
        store,
        client: reqwest::Client::builder().no_proxy().build().unwrap(),
        dir,
        stop: Some(stop),
        task: Some(task),
    }
}

impl Server {
    /// Asks for a clean shutdown and waits for it (bounded).
    pub async fn stop(mut self) -> Result<(), HttpError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("server did not stop within 30 s")
            .unwrap()
    }

    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client.request(method, format!("{}{path}", self.url)).bearer_auth(&self.token)
    }

    /// Sends `req` and returns the status and the JSON body; every answer
    /// must be JSON, and every error must be `{error, status}` matching.
    pub async fn send(&self, req: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let ct = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let text = resp.text().await.unwrap();
        assert!(ct.starts_with("application/json"), "{status}: content-type {ct:?}, body {text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        if !status.is_success() {
            assert_eq!(body["status"], status.as_u16(), "{body}");
            assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{body}");
        }
        (status, body)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.req(reqwest::Method::GET, path)).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(self.req(reqwest::Method::POST, path).json(body)).await
    }

    /// A POST without a body (cancel, hold, pause, …).
    pub async fn post_empty(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.req(reqwest::Method::POST, path)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(self.req(reqwest::Method::PUT, path).json(body)).await
    }

    /// Enqueues and returns the response, which must be 201.
    pub async fn enqueue(&self, body: Value) -> Value {
        let (status, resp) = self.post("/api/tasks/enqueue", &body).await;
        assert_eq!(status, StatusCode::CREATED, "{resp}");
        resp
    }

    /// Polls the job until `done(job)` holds, or panics after `within`.
    pub async fn wait_for(
        &self,
        id: i64,
        within: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let (status, job) = self.get(&format!("/api/tasks/outbox/{id}")).await;
            assert_eq!(status, StatusCode::OK, "{job}");
            if done(&job) {
                return job;
            }
            assert!(tokio::time::Instant::now() < deadline, "job #{id} never got there: {job}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends raw bytes and returns the status line's code and the body.
    pub async fn raw(&self, request: Vec<u8>) -> (u16, String) {
        raw_request(self.addr, request).await
    }
}

/// Nothing that knows `token` answers at `addr` any more: the connection
/// is refused, or (the kernel may hand a freed port to another test's
/// server at once) whatever listens there now refuses the token.
pub async fn assert_not_serving(addr: std::net::SocketAddr, token: &str) {
    if tokio::net::TcpStream::connect(addr).await.is_err() {
        return;
    }
    let request = format!(
        "GET /api/tasks/outbox/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    let (status, body) = raw_request(addr, request.into_bytes()).await;
    assert_ne!(status, 200, "still served at {addr}: {body}");
}

/// Writes `request` (while reading, so a server that answers early is
/// heard) and parses the first response.
pub async fn raw_request(addr: std::net::SocketAddr, request: Vec<u8>) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        // The server may stop reading (and close) once it has refused us.
        let _ = wr.write_all(&request).await;
        let _ = wr.flush().await;
        wr
    });
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let read = async {
        loop {
            match rd.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if let Some(parsed) = parse_response(&buf) {
                return Some(parsed);
            }
        }
        parse_response(&buf)
    };
    let parsed = tokio::time::timeout(Duration::from_secs(20), read).await.expect("no response");
    drop(writer);
    parsed.unwrap_or_else(|| panic!("no complete response: {:?}", String::from_utf8_lossy(&buf)))
}

fn parse_response(buf: &[u8]) -> Option<(u16, String)> {
    let text = std::str::from_utf8(buf).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split(' ').nth(1)?.parse().ok()?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    (body.len() >= len).then(|| (code, body[..len].to_owned()))
}

/// Runs `f` with a deadline so a hung test fails instead of hanging.
pub async fn within<T>(secs: u64, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f).await.expect("test timed out")
}

/// Every field an answer carries is documented in its schema of the
/// OpenAPI document `doc`, and every field the schema requires is there.
/// A schema made of parts (`allOf`, `$ref`s into `components/schemas`)
/// is read as the union of its parts.
pub fn assert_documented(doc: &Value, schema: &str, value: &Value) {
    let (props, required) = schema_fields(doc, &doc["components"]["schemas"][schema]);
    assert!(!props.is_empty(), "no schema {schema} with properties");
    for field in value.as_object().unwrap().keys() {
        assert!(props.contains(field), "{schema} does not document `{field}`: {value}");
    }
    for field in required {
        assert!(value.get(&field).is_some(), "{schema} requires `{field}`: {value}");
    }
}

/// The properties and required fields of `node`, following `$ref` and
/// `allOf`.
fn schema_fields(doc: &Value, node: &Value) -> (Vec<String>, Vec<String>) {
    if let Some(name) = node["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/schemas/"))
    {
        return schema_fields(doc, &doc["components"]["schemas"][name]);
    }
    let mut props: Vec<String> =
        node["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default();
    let mut required: Vec<String> = node["required"]
        .as_array()
        .map(|r| r.iter().filter_map(|f| f.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    for part in node["allOf"].as_array().into_iter().flatten() {
        let (p, r) = schema_fields(doc, part);
        props.extend(p);
        required.extend(r);
    }
    (props, required)
}
