//! `serve` runs what `run` runs (issue #18): `serve --handlers DIR` runs a
//! handler job enqueued over HTTP, a job of a kind no handler serves says
//! so (HTTP job and stats, `show`, `status`), and `/metrics` parses as
//! Prometheus text.

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use rustix::process::Signal;
use serde_json::{Value, json};

use crate::support::{Backend, TestContext, signal, wait_child, wait_for};

/// A served `slothqueue serve`: its address and token.
struct Served {
    addr: String,
    token: String,
}

impl Served {
    /// One request on its own connection; the status and the body.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        request(&self.addr, Some(&self.token), method, path, body)
    }

    fn json(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let (status, text) = self.request(method, path, body);
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")))
    }
}

/// One request to `addr` on its own connection, with the token if given;
/// the status and the body.
fn request(
    addr: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

fn serve_with_handlers(backend: Backend) {
    let ctx = TestContext::new(backend);
    let load = ctx.calm_load();
    let handlers = ctx.path("handlers");
    std::fs::create_dir(&handlers).unwrap();
    let download = handlers.join("download");
    std::fs::write(&download, "#!/bin/sh\nread payload\necho \"downloaded $payload\"\n").unwrap();
    std::fs::set_permissions(&download, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A `resize` handler anyone may change (issue 31 finding 1): refused,
    // so a `resize` job stays pending and unserved, as with no handler.
    let resize = handlers.join("resize");
    std::fs::write(&resize, "#!/bin/sh\necho resized\n").unwrap();
    std::fs::set_permissions(&resize, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut child = ctx.spawn(&[
        "serve",
        "--addr",
        "localhost:0",
        "--handlers",
        handlers.to_str().unwrap(),
        "--load-file",
        load,
        "--queue",
        "default",
        "--on-finish",
        "echo \"$SLOTHQUEUE_JOB_ID $SLOTHQUEUE_STATE\" >> finished",
        "--metrics-addr",
        "localhost:0",
    ]);
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    // Then the web page's login link, then where the metrics are.
    let mut metrics_line = String::new();
    while !metrics_line.starts_with("metrics on ") {
        metrics_line.clear();
        assert_ne!(stdout.read_line(&mut metrics_line).unwrap(), 0, "no metrics line");
    }
    // listening on http://127.0.0.1:PORT (token in PATH)
    let rest = line.strip_prefix("listening on http://").unwrap_or_else(|| panic!("{line:?}"));
    let (addr, token_file) =
        rest.trim_end().trim_end_matches(')').split_once(" (token in ").unwrap();
    let served = Served {
        addr: addr.to_owned(),
        token: std::fs::read_to_string(token_file).unwrap().trim().to_owned(),
    };

    let (status, lonely) =
        served.json("POST", "/api/tasks/enqueue", Some(&json!({"kind": "resize", "payload": {}})));
    assert_eq!(status, 201, "{lonely}");
    let (status, pushed) = served.json(
        "POST",
        "/api/tasks/enqueue",
        Some(&json!({"kind": "download", "payload": {"url": "https://example.invalid/a"}})),
    );
    assert_eq!(status, 201, "{pushed}");
    let id = pushed["job"]["id"].as_i64().unwrap();
    let (_, job) = served.json("GET", &format!("/api/tasks/outbox/{id}?wait=60"), None);
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["result"], r#"downloaded {"url":"https://example.invalid/a"}"#);

    let lonely = lonely["job"]["id"].as_i64().unwrap();
    let (_, job) = served.json("GET", &format!("/api/tasks/outbox/{lonely}"), None);
    assert_eq!(job["state"], "pending");
    assert_eq!(job["waiting"], "no handler for kind resize", "{job}");
    // `--queue default`: a job of another queue waits for a runner of it.
    let (_, other) = served.json(
        "POST",
        "/api/tasks/enqueue",
        Some(&json!({"kind": "download", "payload": {}, "queue": "other"})),
    );
    let other = other["job"]["id"].as_i64().unwrap();
    let (_, job) = served.json("GET", &format!("/api/tasks/outbox/{other}"), None);
    assert_eq!(job["waiting"], "no live runner serves queue other", "{job}");
    let (_, stats) = served.json("GET", "/api/tasks/outbox/stats", None);
    assert_eq!(stats["unserved"][0]["why"], "no handler for kind resize", "{stats}");
    assert_eq!(stats["unserved"][1]["why"], "no live runner serves queue other", "{stats}");
    // `--on-finish` runs after the job, as `run`'s does.
    let finished = || std::fs::read_to_string(ctx.path("finished")).unwrap_or_default();
    wait_for("the --on-finish command", Duration::from_secs(30), || !finished().is_empty());
    assert_eq!(finished(), format!("{id} done\n"));
    // Another process looking at the file says it too.
    let show = ctx.ok(&["show", &lonely.to_string()]);
    assert!(show.contains("why:          no handler for kind resize"), "{show}");
    // One why for every face: `show --json` and the HTTP job answer carry
    // the same words (the read model's) for the same job.
    for id in [lonely, other] {
        let (_, job) = served.json("GET", &format!("/api/tasks/outbox/{id}"), None);
        let shown: Value = serde_json::from_str(&ctx.ok(&["--json", "show", &id.to_string()]))
            .unwrap_or_else(|e| panic!("show --json: {e}"));
        assert!(job["why"].is_string(), "{job}");
        assert_eq!(shown["why"], job["why"], "show --json: {shown}\nHTTP: {job}");
    }
    let (_, job) = served.json("GET", &format!("/api/tasks/outbox/{other}"), None);
    assert!(
        job["why"].as_str().unwrap().ends_with(
            "no live runner serves queue other: it runs when one that does starts (slothqueue run --queue other --handlers DIR, where DIR/download is an executable of yours that nobody else can write)"
        ),
        "{job}"
    );
    let status = ctx.ok(&["status"]);
    assert!(
        status.contains("no handler for kind resize: 1 pending job in queue default"),
        "{status}"
    );

    let (status, text) = served.request("GET", "/metrics", None);
    assert_eq!(status, 200, "{text}");
    // The same exposition, without the token, on --metrics-addr.
    let metrics_addr = metrics_line
        .strip_prefix("metrics on http://")
        .and_then(|l| l.strip_suffix("/metrics (no token)\n"))
        .unwrap_or_else(|| panic!("{metrics_line:?}"));
    let (status, open) = request(metrics_addr, None, "GET", "/metrics", None);
    assert_eq!(status, 200, "{open}");
    assert!(open.contains("slothqueue_unserved_jobs{"), "{open}");
    let (status, _) = request(&served.addr, None, "GET", "/metrics", None);
    assert_eq!(status, 401, "the API's address wants the token");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let value = |name: &str, label: Option<(&str, &str)>| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => panic!("{name}: not a number"),
            })
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert_eq!(value("slothqueue_jobs", Some(("state", "done"))), 1.0);
    assert_eq!(value("slothqueue_jobs", Some(("state", "pending"))), 2.0);
    assert_eq!(value("slothqueue_unserved_jobs", Some(("kind", "resize"))), 1.0);
    assert_eq!(value("slothqueue_attempts_total", Some(("outcome", "done"))), 1.0);
    assert_eq!(value("slothqueue_runners_alive", None), 1.0);

    signal(child.id(), Signal::TERM);
    let exit = wait_child(&mut child, Duration::from_secs(60));
    assert_eq!(exit.code(), Some(0));
}

#[test]
fn serve_runs_handlers_and_names_a_kind_without_one_sqlite() {
    serve_with_handlers(Backend::Sqlite);
}

#[test]
fn serve_runs_handlers_and_names_a_kind_without_one_redb() {
    serve_with_handlers(Backend::Redb);
}
