//! `GET /metrics` read back by a Prometheus text parser, and a job no
//! runner has a handler for named as such in the job and stats answers.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::{Backend, Server, start_with};
use reqwest::{Method, StatusCode};
use serde_json::json;
use slothqueue_core::NewJob;
use slothqueue_http::{DrainWorker, HttpError, ServeConfig, Token};
use slothqueue_runner::{HandlerDirExecutor, Runner};

on_both_backends!(
    metrics_parse_and_count_a_small_queue,
    a_kind_without_a_handler_is_named,
    a_metrics_addr_serves_metrics_alone_without_the_token,
    each_format_is_what_prometheus_tools_read,
);

/// A handlers folder with an executable `download` that reads its payload
/// and prints what it fetched.
fn handlers() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("download");
    std::fs::write(&script, "#!/bin/sh\nread payload\necho \"fetched $payload\"\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A server whose drain worker runs shell jobs and the handlers in `dir`.
async fn start_with_handlers(backend: Backend, dir: &Path) -> Server {
    let dir = dir.to_owned();
    start_with(backend, move |store, queue| {
        let mut config = DrainWorker::config(&queue);
        config.poll_interval = Duration::from_secs(60);
        let mut runner = Runner::new(store, config);
        runner.register_handlers(HandlerDirExecutor::open(&dir).unwrap());
        Some(DrainWorker::from_runner(runner, |_event| {}))
    })
    .await
}

/// One sample: the metric's name and its labels, sorted.
type Key = (String, Vec<(String, String)>);

/// What Prometheus 2.42 sends as its `Accept`.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition's content type and body for an `Accept` (none: `None`).
async fn exposition(s: &Server, accept: Option<&str>) -> (String, String) {
    let mut req = s.req(Method::GET, "/metrics");
    if let Some(accept) = accept {
        req = req.header(reqwest::header::ACCEPT, accept);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let ct = resp.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap().to_owned();
    (ct, resp.text().await.unwrap())
}

/// The exposition as Prometheus scrapes it: every sample by name and labels.
async fn scrape(s: &Server) -> (String, BTreeMap<Key, f64>) {
    let (ct, text) = exposition(s, Some(PROMETHEUS_ACCEPT)).await;
    assert_eq!(ct, OPENMETRICS);
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let mut samples = BTreeMap::new();
    for sample in scrape.samples {
        let value = match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            other => panic!("{}: not a counter or gauge: {other:?}", sample.metric),
        };
        let mut labels: Vec<(String, String)> =
            sample.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        labels.sort();
        let key = (sample.metric.clone(), labels);
        assert!(samples.insert(key, value).is_none(), "{} twice", sample.metric);
    }
    (text, samples)
}

fn get(samples: &BTreeMap<Key, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut labels: Vec<(String, String)> =
        labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    labels.sort();
    let key = (name.to_owned(), labels);
    *samples.get(&key).unwrap_or_else(|| panic!("no sample {key:?} in {samples:#?}"))
}

async fn metrics_parse_and_count_a_small_queue(backend: Backend) {
    let dir = handlers();
    let s = start_with_handlers(backend, dir.path()).await;
    let (_, before) = scrape(&s).await;
    assert_eq!(get(&before, "slothqueue_attempts_total", &[("outcome", "done")]), 0.0);
    assert_eq!(get(&before, "slothqueue_jobs", &[("state", "pending")]), 0.0);

    let done = s.enqueue(json!({"kind": "download", "payload": {"url": "u"}})).await;
    let done = done["job"]["id"].as_i64().unwrap();
    let failing = s
        .enqueue(json!({"kind": "shell", "payload": {"command": "exit 3"}, "max_attempts": 2}))
        .await;
    let failing = failing["job"]["id"].as_i64().unwrap();
    let (status, _) = s
        .post(
            "/api/schedules",
            &json!({"key": "hourly", "spec": {"every": 3600},
                    "job": {"kind": "shell", "payload": {"command": "true"}}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    s.enqueue(json!({"kind": "resize", "payload": {}, "queue": "media"})).await;
    let job = s.wait_for(done, Duration::from_secs(20), |j| j["state"] == "done").await;
    assert_eq!(job["result"], "fetched {\"url\":\"u\"}");
    // One retry (2 s of backoff), then out of attempts.
    s.wait_for(failing, Duration::from_secs(30), |j| j["state"] == "failed").await;

    let (text, m) = scrape(&s).await;
    assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF: {text}");
    // Every sample belongs to a family with HELP and TYPE (a counter's
    // samples end in `_total`).
    for (name, _) in m.keys() {
        let family = name.strip_suffix("_total").unwrap_or(name);
        assert!(text.contains(&format!("# TYPE {family} ")), "{name} has no TYPE: {text}");
        assert!(text.contains(&format!("# HELP {family} ")), "{name} has no HELP: {text}");
    }
    let state = |s: &'static str| [("state", s)];
    assert_eq!(get(&m, "slothqueue_jobs", &state("pending")), 1.0, "{text}");
    assert_eq!(get(&m, "slothqueue_jobs", &state("done")), 1.0);
    assert_eq!(get(&m, "slothqueue_jobs", &state("failed")), 1.0);
    assert_eq!(get(&m, "slothqueue_jobs", &state("running")), 0.0);
    assert_eq!(get(&m, "slothqueue_jobs", &state("cancelled")), 0.0);
    assert_eq!(get(&m, "slothqueue_jobs_due", &[]), 1.0);
    let media = |s: &'static str| [("queue", "media"), ("state", s)];
    assert_eq!(get(&m, "slothqueue_queue_jobs", &media("pending")), 1.0);
    assert_eq!(get(&m, "slothqueue_queue_jobs", &media("due")), 1.0);
    assert_eq!(get(&m, "slothqueue_queue_jobs", &media("running")), 0.0);
    assert_eq!(get(&m, "slothqueue_unserved_jobs", &[("queue", "media"), ("kind", "resize")]), 1.0);
    assert_eq!(get(&m, "slothqueue_runners_alive", &[]), 1.0, "the worker");
    let age = get(&m, "slothqueue_oldest_pending_age_seconds", &[]);
    assert!((0.0..60.0).contains(&age), "{age}");
    assert_eq!(get(&m, "slothqueue_schedule_lag_seconds", &[("schedule", "hourly")]), 0.0);
    let outcome = |o: &'static str| [("outcome", o)];
    assert_eq!(get(&m, "slothqueue_attempts_total", &outcome("done")), 1.0);
    assert_eq!(get(&m, "slothqueue_attempts_total", &outcome("failed")), 2.0);
    assert_eq!(get(&m, "slothqueue_attempts_total", &outcome("cancelled")), 0.0);
    assert_eq!(get(&m, "slothqueue_retries_total", &[]), 1.0);
    assert_eq!(get(&m, "slothqueue_failures_total", &[]), 1.0);

    // Behind the token like every route but /healthz.
    let anonymous = s.client.get(format!("{}/metrics", s.url)).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    // And in the OpenAPI document.
    let (_, doc) = s.get("/api/openapi.json").await;
    assert_eq!(doc["paths"]["/metrics"]["get"]["operationId"], "metrics");
    s.stop().await.unwrap();
}

async fn a_kind_without_a_handler_is_named(backend: Backend) {
    let dir = handlers();
    let s = start_with_handlers(backend, dir.path()).await;
    let lonely = s.enqueue(json!({"kind": "resize", "payload": {}})).await;
    let lonely = lonely["job"]["id"].as_i64().unwrap();
    let served = s.enqueue(json!({"kind": "download", "payload": {}})).await;
    let served = served["job"]["id"].as_i64().unwrap();
    // The worker ran the later job: it passed over the earlier one.
    s.wait_for(served, Duration::from_secs(20), |j| j["state"] == "done").await;
    let (_, job) = s.get(&format!("/api/tasks/outbox/{lonely}")).await;
    assert_eq!(job["state"], "pending");
    assert_eq!(job["waiting"], "no handler for kind resize", "{job}");
    let (_, done) = s.get(&format!("/api/tasks/outbox/{served}")).await;
    assert!(done.get("waiting").is_none(), "{done}");
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!(
        stats["unserved"],
        json!([{"queue": "default", "kind": "resize", "pending": 1, "why": "no handler for kind resize"}]),
        "{stats}"
    );
    // A held job says so by `held`, not by `waiting`.
    let (status, _) = s.post_empty(&format!("/api/tasks/outbox/{lonely}/hold")).await;
    assert_eq!(status, StatusCode::OK);
    let (_, held) = s.get(&format!("/api/tasks/outbox/{lonely}")).await;
    assert!(held.get("waiting").is_none(), "{held}");
    s.stop().await.unwrap();
}

async fn a_metrics_addr_serves_metrics_alone_without_the_token(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, queue) = common::open_store(backend, dir.path());
    let mut config = ServeConfig::new(Token::Generate { beside_queue: queue.clone() });
    config.addr = "127.0.0.1:0".parse().unwrap();
    config.metrics_addr = Some("10.1.2.3:9100".parse().unwrap());
    let refused = slothqueue_http::bind(store.clone(), config.clone()).await.unwrap_err();
    assert!(matches!(refused, HttpError::NotLoopback { .. }), "{refused}");
    assert!(
        !dir.path().join("queue.db.token").exists()
            && !dir.path().join("queue.redb.token").exists()
    );
    // A loopback address of its own: once this listener closes, a port
    // the kernel hands to another test's `127.0.0.1:0` (this binary's
    // other servers bind there) cannot answer the closing check below; nor
    // can this same test running in another process at once (another
    // checkout's `cargo test`), whose address differs by its process id.
    let backend_octet = match backend {
        Backend::Sqlite => 2,
        Backend::Redb => 3,
        Backend::Postgres => 4,
    };
    let pid = std::process::id();
    let own_ip = format!("127.{backend_octet}.{}.{}", (pid / 254) % 256, 1 + pid % 254);
    config.metrics_addr = Some(format!("{own_ip}:0").parse().unwrap());
    let bound = slothqueue_http::bind(store.clone(), config).await.unwrap();
    let (api, metrics) = (bound.local_addr(), bound.metrics_addr().unwrap());
    assert_ne!(api, metrics);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(bound.run(None, async move {
        let _ = stopped.await;
    }));
    store.push(NewJob::new("resize", json!({})), store_now()).await.unwrap();
    let get = |addr: std::net::SocketAddr, path: &str, host: &str| {
        let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        common::raw_request(addr, request.into_bytes())
    };
    let (status, text) = get(metrics, "/metrics", "127.0.0.1").await;
    assert_eq!(status, 200, "{text}");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let pending = scrape
        .samples
        .iter()
        .find(|s| s.metric == "slothqueue_jobs" && s.labels.get("state") == Some("pending"))
        .unwrap();
    assert_eq!(pending.value, prometheus_parse::Value::Gauge(1.0));
    // Nothing else is open there (the token rule holds for the rest, and
    // no other route is served), and the Host rule still holds.
    let (status, body) = get(metrics, "/api/tasks/outbox/stats", "127.0.0.1").await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = get(metrics, "/metrics", "evil.example").await;
    assert_eq!(status, 403, "{body}");
    // On the API's address /metrics still needs the token.
    let (status, body) = get(api, "/metrics", "127.0.0.1").await;
    assert_eq!(status, 401, "{body}");
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), task).await.unwrap().unwrap().unwrap();
    // The metrics listener closed with the server.
    assert!(tokio::net::TcpStream::connect(metrics).await.is_err());
}

/// Whether promtool (Debian's `prometheus` package) can be run; under `CI`
/// it must be.
fn have_promtool() -> bool {
    let ran = std::process::Command::new("promtool").arg("--version").output();
    if ran.is_ok_and(|o| o.status.success()) {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but promtool cannot be run: install Debian's prometheus package"
    );
    #[expect(clippy::print_stderr, reason = "a skipped test says so loudly")]
    let () = eprintln!(
        "SKIPPED: promtool's checks of /metrics, for want of promtool (install Debian's prometheus package)"
    );
    false
}

/// Runs promtool with `args`, `input` on its stdin; its exit status and
/// what it printed.
fn promtool(args: &[&str], input: &str) -> (bool, String) {
    use std::io::Write as _;
    let mut child = std::process::Command::new("promtool")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said)
}

async fn each_format_is_what_prometheus_tools_read(backend: Backend) {
    let dir = handlers();
    let s = start_with_handlers(backend, dir.path()).await;
    let done = s.enqueue(json!({"kind": "download", "payload": {}})).await;
    s.wait_for(done["job"]["id"].as_i64().unwrap(), Duration::from_secs(20), |j| {
        j["state"] == "done"
    })
    .await;
    s.enqueue(json!({"kind": "resize", "payload": {}, "queue": "media"})).await;

    // The text format for a plain client, for `text/plain` and whenever
    // text/plain is preferred; OpenMetrics for Prometheus and whoever asks.
    for accept in [None, Some("*/*"), Some("text/plain;version=0.0.4"), Some("text/plain")] {
        assert_eq!(exposition(&s, accept).await.0, TEXT, "{accept:?}");
    }
    for accept in [Some(PROMETHEUS_ACCEPT), Some("application/openmetrics-text")] {
        assert_eq!(exposition(&s, accept).await.0, OPENMETRICS, "{accept:?}");
    }
    let (_, text) = exposition(&s, Some("text/plain;version=0.0.4")).await;
    let (_, open_metrics) = exposition(&s, Some(PROMETHEUS_ACCEPT)).await;
    assert!(!text.contains("# EOF"), "{text}");
    assert!(text.contains("# HELP slothqueue_attempts_total "), "{text}");
    assert!(text.contains("# TYPE slothqueue_attempts_total counter"), "{text}");
    assert!(open_metrics.ends_with("# EOF\n"), "{open_metrics}");
    assert!(open_metrics.contains("# TYPE slothqueue_attempts counter"), "{open_metrics}");
    // Both parse, to the same series (the age moves between the two);
    // the text format types the counters for a 0.0.4 parser.
    let series = |body: &str| {
        let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned())));
        let mut all: Vec<(String, Vec<(String, String)>)> = scrape
            .unwrap()
            .samples
            .iter()
            .map(|s| {
                let mut labels: Vec<(String, String)> =
                    s.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                labels.sort();
                (s.metric.clone(), labels)
            })
            .collect();
        all.sort();
        all
    };
    assert_eq!(series(&text), series(&open_metrics));
    let parsed = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let done = parsed
        .samples
        .iter()
        .find(|s| {
            s.metric == "slothqueue_attempts_total" && s.labels.get("outcome") == Some("done")
        })
        .unwrap();
    assert_eq!(done.value, prometheus_parse::Value::Counter(1.0));
    s.stop().await.unwrap();

    if !have_promtool() {
        return;
    }
    // The text format: promtool's linter has nothing to say.
    let (ok, said) = promtool(&["check", "metrics"], &text);
    assert!(ok && said.is_empty(), "promtool check metrics: {said}\n{text}");
    // OpenMetrics: `check metrics` reads the text format only (a counter's
    // `_total` series would be a family without HELP there), so this one
    // goes through Prometheus' OpenMetrics parser, the one a scrape uses:
    // promtool's backfill, which wants a timestamp on every sample.
    let stamped: String = open_metrics
        .lines()
        .map(|l| if l.starts_with('#') { format!("{l}\n") } else { format!("{l} 1700000000\n") })
        .collect();
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), &stamped).unwrap();
    let blocks = tempfile::tempdir().unwrap();
    let (ok, said) = promtool(
        &[
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            &input.path().to_string_lossy(),
            &blocks.path().to_string_lossy(),
        ],
        "",
    );
    assert!(ok, "promtool's OpenMetrics parser: {said}\n{stamped}");
}

/// Now, as the stores take it.
fn store_now() -> slothqueue_core::Timestamp {
    use slothqueue_core::Clock as _;
    slothqueue_core::SystemClock.now()
}
