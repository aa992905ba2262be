//! The routes and their guards, against a served instance on a free
//! loopback port, on both backends (no drain worker: jobs stay pending
//! unless a test moves them through the store).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]

mod common;
#[path = "api/schedules.rs"]
mod schedules;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use common::{Backend, Server, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use slothqueue_core::{ClaimRequest, Clock, ClockOnly, Completion, Owner, SystemClock};

on_both_backends!(
    enqueue_show_list_stats,
    dedup_and_supersede,
    cancel_pending_and_conflict_on_done,
    token_required,
    host_and_origin_must_be_loopback,
    bodies_must_be_json,
    body_limit,
    unknown_field_and_bad_json,
    bad_ids,
    healthz_and_routing_errors,
    openapi_matches_routes,
    token_file_is_private,
    paging,
    lane_routes_refuse_bad_requests,
    hold_and_release,
    limits_and_pauses,
    edit_and_clone,
    edit_and_clone_refuse_bad_bodies,
);

/// The text of a refusal.
fn error_of(body: &Value) -> &str {
    body["error"].as_str().unwrap_or("")
}

fn shell(cmd: &str) -> Value {
    json!({ "kind": "shell", "payload": { "command": cmd } })
}

async fn enqueue_show_list_stats(backend: Backend) {
    let s = start(backend).await;
    let resp = s.enqueue(shell("echo hello")).await;
    assert_eq!(resp["created"], true);
    assert_eq!(resp["superseded"], Value::Null);
    let job = &resp["job"];
    let id = job["id"].as_i64().unwrap();
    assert_eq!(job["state"], "pending");
    assert_eq!(job["kind"], "shell");
    assert_eq!(job["queue"], "default");
    assert_eq!(job["max_runtime"], 300_000);
    // The server's working directory is recorded, as `add` does.
    assert_eq!(job["payload"]["cwd"], s.dir.path().to_str().unwrap());
    assert_eq!(job["payload"]["env"], json!({}));

    let (status, shown) = s.get(&format!("/api/tasks/outbox/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["id"], id);
    assert_eq!(shown["events"][0]["kind"], "pushed");
    assert!(shown["events"][0]["at"].is_i64());

    let later = s
        .enqueue(json!({
            "kind": "report", "payload": {"x": 1}, "priority": 5, "queue": "slow",
            "max_attempts": 2, "max_runtime": null, "scheduled_for": "2999-01-01T00:00:00Z",
        }))
        .await;
    assert_eq!(later["job"]["priority"], 5);
    assert_eq!(later["job"]["max_attempts"], 2);
    assert_eq!(later["job"]["max_runtime"], Value::Null);
    assert_eq!(later["job"]["queue"], "slow");
    let nb = later["job"]["not_before"].as_i64().unwrap();
    assert_eq!(nb, "2999-01-01T00:00:00Z".parse::<jiff::Timestamp>().unwrap().as_millisecond());

    let (status, page) = s.get("/api/tasks/outbox").await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<i64> =
        page["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![later["job"]["id"].as_i64().unwrap(), id], "newest first");
    assert_eq!(page["next_cursor"], Value::Null);
    let (_, page) = s.get("/api/tasks/outbox?kind=report").await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1);
    let (_, page) = s.get("/api/tasks/outbox?queue=default&state=pending").await;
    assert_eq!(page["jobs"][0]["id"], id);
    let (_, page) = s.get("/api/tasks/outbox?state=done").await;
    assert_eq!(page["jobs"], json!([]));
    let (status, err) = s.get("/api/tasks/outbox?state=bogus").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    let (status, err) = s.get("/api/tasks/outbox?colour=red").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(err["error"].as_str().unwrap().contains("colour"), "{err}");

    let (status, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(stats["pending"], 2);
    assert_eq!(stats["due_now"], 1);
    assert_eq!(stats["next_due"], nb);
    for k in ["running", "done", "failed", "cancelled"] {
        assert_eq!(stats[k], 0, "{k}");
    }

    // Validation happens before anything is written.
    for (body, needle) in [
        (json!({"kind": "shell", "payload": {"cwd": "/"}}), "command"),
        (json!({"kind": "shell", "payload": "echo"}), "command"),
        (json!({"kind": "shell", "payload": {"command": "true", "cwd": "rel"}}), "cwd"),
        (json!({"kind": "shell", "payload": {"command": "true", "env": {"A": 1}}}), "env"),
        (json!({"kind": "shell", "payload": {"command": "true", "shell": "zsh"}}), "shell"),
        (json!({"kind": "../x", "payload": {}}), "kind"),
        (json!({"kind": "x", "payload": {}, "max_attempts": 0}), "attempts"),
        (json!({"kind": "x", "payload": {}, "max_runtime": -1}), "max_runtime"),
        (json!({"kind": "x", "payload": {}, "scheduled_for": "tomorrow"}), "scheduled_for"),
        (json!({"kind": "x", "payload": {}, "priority": 1e10}), "priority"),
    ] {
        let (status, err) = s.post("/api/tasks/enqueue", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} → {err}");
        assert!(err["error"].as_str().unwrap().contains(needle), "{body} → {err}");
    }
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!(stats["pending"], 2);
    s.stop().await.unwrap();
}

async fn dedup_and_supersede(backend: Backend) {
    let s = start(backend).await;
    let body = json!({
        "kind": "shell", "payload": {"command": "echo one", "cwd": "/"},
        "idempotency_key": "k1", "scheduled_for": "2999-01-01T00:00:00Z",
    });
    let first = s.enqueue(body.clone()).await;
    let id = first["job"]["id"].as_i64().unwrap();

    let (status, again) = s.post("/api/tasks/enqueue", &body).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["created"], false);
    assert_eq!(again["job"]["id"], id);

    let mut newer = body.clone();
    newer["payload"]["command"] = json!("echo two");
    let second = s.enqueue(newer).await;
    let new_id = second["job"]["id"].as_i64().unwrap();
    assert_ne!(new_id, id);
    assert_eq!(second["superseded"], id);
    let (_, old) = s.get(&format!("/api/tasks/outbox/{id}")).await;
    assert_eq!(old["state"], "cancelled");
    let kinds: Vec<&str> =
        old["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"superseded"), "{kinds:?}");
    s.stop().await.unwrap();
}

async fn cancel_pending_and_conflict_on_done(backend: Backend) {
    let s = start(backend).await;
    let id = s.enqueue(shell("true")).await["job"]["id"].as_i64().unwrap();
    let (status, job) = s.post(&format!("/api/tasks/outbox/{id}/cancel"), &json!(null)).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["state"], "cancelled");
    // Cancelling again: the job is finished.
    let (status, err) =
        s.send(s.req(Method::POST, &format!("/api/tasks/outbox/{id}/cancel"))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");

    // A job the store ran to completion cannot be cancelled either.
    let done = s.enqueue(shell("true")).await["job"]["id"].as_i64().unwrap();
    let now = SystemClock.now();
    let claimed = s
        .store
        .claim(&ClaimRequest::new(Owner::named("test"), Arc::new(ClockOnly)), now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.job.id, done);
    s.store
        .complete(
            done,
            &claimed.fence,
            Completion { result: Some("ok".into()), exit_code: Some(0) },
            now,
        )
        .await
        .unwrap();
    let (status, err) =
        s.send(s.req(Method::POST, &format!("/api/tasks/outbox/{done}/cancel"))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert!(err["error"].as_str().unwrap().contains("done"), "{err}");

    let (status, _) = s.send(s.req(Method::POST, "/api/tasks/outbox/424242/cancel")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    s.stop().await.unwrap();
}

async fn token_required(backend: Backend) {
    let s = start(backend).await;
    let routes = [
        (Method::POST, "/api/tasks/enqueue"),
        (Method::GET, "/api/tasks/outbox"),
        (Method::GET, "/api/tasks/outbox/1"),
        (Method::POST, "/api/tasks/outbox/1/cancel"),
        (Method::GET, "/api/tasks/outbox/stats"),
        (Method::GET, "/api/schedules"),
        (Method::POST, "/api/schedules"),
        (Method::DELETE, "/api/schedules/nightly"),
        (Method::GET, "/api/openapi.json"),
        (Method::GET, "/no/such/route"),
    ];
    let wrong_same_length = "0".repeat(s.token.len());
    for (method, path) in routes {
        let url = format!("{}{path}", s.url);
        let body = shell("echo sneaky");
        let attempts = [
            s.client.request(method.clone(), &url).json(&body),
            s.client.request(method.clone(), &url).json(&body).bearer_auth("wrong"),
            s.client.request(method.clone(), &url).json(&body).bearer_auth(&wrong_same_length),
            s.client.request(method.clone(), &url).json(&body).bearer_auth(format!("{}x", s.token)),
            s.client.request(method.clone(), &url).json(&body).basic_auth("user", Some(&s.token)),
            s.client
                .request(method.clone(), &url)
                .json(&body)
                .header("authorization", s.token.clone()),
        ];
        for req in attempts {
            let (status, err) = s.send(req).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {err}");
            assert!(!err.to_string().contains(&s.token), "the token is never echoed");
        }
    }
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!(stats["pending"], 0, "nothing was enqueued without the token");
    s.stop().await.unwrap();
}

async fn host_and_origin_must_be_loopback(backend: Backend) {
    let s = start(backend).await;
    let port = s.addr.port();
    for host in
        ["evil.example", &format!("evil.example:{port}"), "localhost.evil.example", "10.0.0.1"]
    {
        for path in ["/api/tasks/outbox/stats", "/healthz"] {
            let (status, err) = s.send(s.req(Method::GET, path).header("host", host)).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{host} {path}: {err}");
        }
        let (status, _) = s
            .send(
                s.req(Method::POST, "/api/tasks/enqueue").header("host", host).json(&shell("true")),
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "[::1]".to_owned(),
        "localhost".to_owned(),
    ] {
        let (status, _) =
            s.send(s.req(Method::GET, "/api/tasks/outbox/stats").header("host", &host)).await;
        assert_eq!(status, StatusCode::OK, "{host}");
    }
    for origin in ["http://evil.example", "null", "https://localhost.evil.example"] {
        let (status, _) = s
            .send(
                s.req(Method::POST, "/api/tasks/enqueue")
                    .header("origin", origin)
                    .json(&shell("true")),
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{origin}");
    }
    let (status, _) = s
        .send(
            s.req(Method::POST, "/api/tasks/enqueue")
                .header("origin", format!("http://localhost:{port}"))
                .json(&shell("true")),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    // A raw HTTP/1.0 request without any Host header is refused too.
    let (code, _) = s
        .raw(
            format!(
                "GET /api/tasks/outbox/stats HTTP/1.0\r\nAuthorization: Bearer {}\r\n\r\n",
                s.token
            )
            .into_bytes(),
        )
        .await;
    assert_eq!(code, 403);
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!(stats["pending"], 1, "only the loopback-origin enqueue landed");
    s.stop().await.unwrap();
}

async fn bodies_must_be_json(backend: Backend) {
    let s = start(backend).await;
    let body = shell("echo hi").to_string();
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let mut req = s.req(Method::POST, "/api/tasks/enqueue").body(body.clone());
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        let (status, err) = s.send(req).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}: {err}");
    }
    let (status, _) = s
        .send(
            s.req(Method::POST, "/api/tasks/enqueue")
                .header("content-type", "text/plain")
                .form(&[("kind", "shell")]),
        )
        .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // A form-encoded cancel is refused as well.
    let id = s.enqueue(shell("true")).await["job"]["id"].as_i64().unwrap();
    let (status, _) = s
        .send(s.req(Method::POST, &format!("/api/tasks/outbox/{id}/cancel")).form(&[("a", "b")]))
        .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (status, _) = s
        .send(
            s.req(Method::POST, "/api/tasks/enqueue")
                .header("content-type", "application/json; charset=utf-8")
                .body(body),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!(stats["pending"], 2);
    s.stop().await.unwrap();
}

/// A valid enqueue body of exactly `len` bytes (padding inside the payload).
fn body_of_len(len: usize) -> Vec<u8> {
    let head = r#"{"kind":"blob","payload":{"pad":""#;
    let tail = r#""}}"#;
    let mut body = head.as_bytes().to_vec();
    body.resize(len - tail.len(), b'a');
    body.extend_from_slice(tail.as_bytes());
    assert_eq!(body.len(), len);
    body
}

async fn body_limit(backend: Backend) {
    let s = start(backend).await;
    let limit = slothqueue_http::DEFAULT_BODY_LIMIT;
    assert_eq!(limit, 1024 * 1024);

    let (status, _) = s
        .send(
            s.req(Method::POST, "/api/tasks/enqueue")
                .header("content-type", "application/json")
                .body(body_of_len(limit)),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "exactly the limit is accepted");
    let (status, err) = s
        .send(
            s.req(Method::POST, "/api/tasks/enqueue")
                .header("content-type", "application/json")
                .body(body_of_len(limit + 1)),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{err}");

    // Chunked, without Content-Length: the limit holds while reading.
    for (len, want) in [(limit + 1, 413), (4 * limit, 413), (limit, 201)] {
        let body = body_of_len(len);
        let mut req = format!(
            "POST /api/tasks/enqueue HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            s.token
        )
        .into_bytes();
        for chunk in body.chunks(64 * 1024) {
            req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            req.extend_from_slice(chunk);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"0\r\n\r\n");
        let (code, text) = s.raw(req).await;
        assert_eq!(code, want, "chunked {len}: {text}");
        let err: Value = serde_json::from_str(&text).unwrap();
        if want == 413 {
            assert_eq!(err["status"], 413);
        }
    }
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!(stats["pending"], 2, "only the bodies within the limit were enqueued");
    s.stop().await.unwrap();
}

async fn unknown_field_and_bad_json(backend: Backend) {
    let s = start(backend).await;
    let (status, err) = s
        .post(
            "/api/tasks/enqueue",
            &json!({"kind": "shell", "payload": {"command": "true"}, "prio": 3}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(err["error"].as_str().unwrap().contains("unknown field `prio`"), "{err}");
    let json_req = |body: &str| {
        s.req(Method::POST, "/api/tasks/enqueue")
            .header("content-type", "application/json")
            .body(body.to_owned())
    };
    for bad in [
        "",
        "{",
        "{\"kind\": \"shell\"",
        "[1,2]",
        "null",
        "\"str\"",
        "{\"kind\": 5, \"payload\": {}}",
        "\u{0}\u{1}",
        "{\"payload\": {}}",
    ] {
        let (status, err) = s.send(json_req(bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}: {err}");
    }
    let (status, _) =
        s.send(json_req("{\"kind\":\"shell\",\"payload\":{\"command\":\"true\"}}")).await;
    assert_eq!(status, StatusCode::CREATED);
    // Bytes that are not UTF-8.
    let (status, _) = s
        .send(
            s.req(Method::POST, "/api/tasks/enqueue")
                .header("content-type", "application/json")
                .body(vec![0xff, 0xfe, b'{']),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    s.stop().await.unwrap();
}

async fn bad_ids(backend: Backend) {
    let s = start(backend).await;
    for id in ["abc", "99999999999999999999", "0", "-1", "1.5", "%2f", "1%2f2", "%00", "1%20"] {
        let (status, err) = s.get(&format!("/api/tasks/outbox/{id}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{id}: {err}");
        let (status, err) =
            s.send(s.req(Method::POST, &format!("/api/tasks/outbox/{id}/cancel"))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "cancel {id}: {err}");
    }
    // Sent raw: an HTTP client would resolve the dots before sending.
    for path in [
        "/api/tasks/outbox/..",
        "/api/tasks/outbox/%2e%2e",
        "/api/tasks/outbox/%2E%2E%2F1",
        "/api/tasks/outbox/../../etc/passwd",
        "/api/tasks/outbox//etc/passwd",
    ] {
        let (code, body) = s
            .raw(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n", s.token).into_bytes())
            .await;
        assert!(code == 400 || code == 404, "{path}: {code} {body}");
        let err: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(err["status"], code);
    }
    let (status, err) = s.get("/api/tasks/outbox/12345").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    let (status, _) = s.get("/api/tasks/outbox?cursor=abc").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    for limit in ["0", "501", "-1", "x"] {
        let (status, _) = s.get(&format!("/api/tasks/outbox?limit={limit}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "limit {limit}");
    }
    s.stop().await.unwrap();
}

async fn healthz_and_routing_errors(backend: Backend) {
    let s = start(backend).await;
    let (status, body) = s.send(s.client.get(format!("{}/healthz", s.url))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"ok": true}));
    let (status, _) = s.get("/api/tasks/nothing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, err) = s.send(s.req(Method::DELETE, "/api/tasks/outbox/1")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{err}");
    let (status, _) = s.send(s.req(Method::GET, "/api/tasks/enqueue")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    s.stop().await.unwrap();
}

async fn openapi_matches_routes(backend: Backend) {
    let s = start(backend).await;
    let (status, doc) = s.get("/api/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let mut expected_doc = slothqueue_http::openapi();
    expected_doc["servers"] = json!([{ "url": format!("http://{}", s.addr) }]);
    assert_eq!(doc, expected_doc);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let mut documented = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let served: BTreeSet<(String, String)> =
        slothqueue_http::routes().into_iter().map(|(m, p)| (m.to_owned(), p.to_owned())).collect();
    assert_eq!(documented, served);
    let expected: BTreeSet<(String, String)> = [
        ("POST", "/api/tasks/enqueue"),
        ("POST", "/api/tasks/enqueue/batch"),
        ("GET", "/api/tasks/outbox"),
        ("GET", "/api/tasks/outbox/{id}"),
        ("POST", "/api/tasks/outbox/{id}/cancel"),
        ("POST", "/api/tasks/outbox/{id}/retry"),
        ("GET", "/api/tasks/outbox/{id}/log"),
        ("GET", "/api/tasks/outbox/stats"),
        ("POST", "/api/tasks/outbox/{id}/hold"),
        ("POST", "/api/tasks/outbox/{id}/release"),
        ("PATCH", "/api/tasks/outbox/{id}"),
        ("POST", "/api/tasks/outbox/{id}/clone"),
        ("GET", "/api/tasks/outbox/{id}/dependents"),
        ("POST", "/api/queues/{queue}/retry-failed"),
        ("POST", "/api/queues/{queue}/cancel-pending"),
        ("POST", "/api/clear"),
        ("GET", "/api/history"),
        ("GET", "/api/queues"),
        ("GET", "/api/runners"),
        ("PUT", "/api/queues/{queue}/limit"),
        ("POST", "/api/queues/{queue}/pause"),
        ("POST", "/api/queues/{queue}/resume"),
        ("POST", "/api/pause"),
        ("POST", "/api/resume"),
        ("GET", "/api/schedules"),
        ("POST", "/api/schedules"),
        ("GET", "/api/schedules/{key}"),
        ("DELETE", "/api/schedules/{key}"),
        ("POST", "/api/schedules/{key}/pause"),
        ("POST", "/api/schedules/{key}/resume"),
        ("GET", "/api/openapi.json"),
        ("GET", "/metrics"),
        ("GET", "/healthz"),
    ]
    .into_iter()
    .map(|(m, p)| (m.to_owned(), p.to_owned()))
    .collect();
    assert_eq!(served, expected);
    // Every documented route is really served (not the "no such route" fallback),
    // and its path with the method swapped is not.
    for (method, path) in &documented {
        let path =
            path.replace("{id}", "1").replace("{queue}", "default").replace("{key}", "nightly");
        let method: Method = method.parse().unwrap();
        if path == "/metrics" {
            // Prometheus text, not JSON (tests/metrics.rs reads it).
            let resp = s.req(method.clone(), &path).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "{method} {path}");
            continue;
        }
        let mut req = s.req(method.clone(), &path);
        if method == Method::POST {
            req = req.json(&shell("true"));
        }
        let (status, body) = s.send(req).await;
        assert!(body["error"] != "no such route", "{method} {path}: {status} {body}");
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
    }
    // Every $ref points at something defined.
    let text = doc.to_string();
    for part in text.split("\"$ref\":\"#/").skip(1) {
        let target = &part[..part.find('"').unwrap()];
        let mut node = &doc;
        for seg in target.split('/') {
            node = &node[seg];
        }
        assert!(!node.is_null(), "dangling $ref {target}");
    }
    s.stop().await.unwrap();
}

async fn token_file_is_private(backend: Backend) {
    let s = start(backend).await;
    let mode = std::fs::metadata(&s.token_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(
        s.token_path.file_name().unwrap().to_str().unwrap(),
        format!("{}.token", s.queue_path.file_name().unwrap().to_str().unwrap())
    );
    assert_eq!(s.token.len(), 64);
    s.stop().await.unwrap();
}

async fn paging(backend: Backend) {
    let s = start(backend).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(s.enqueue(shell(&format!("echo {i}"))).await["job"]["id"].as_i64().unwrap());
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut cursor: Option<i64> = None;
    loop {
        let path = match cursor {
            Some(c) => format!("/api/tasks/outbox?limit=3&cursor={c}"),
            None => "/api/tasks/outbox?limit=3".to_owned(),
        };
        let (status, page) = s.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let jobs = page["jobs"].as_array().unwrap();
        assert!(jobs.len() <= 3);
        seen.extend(jobs.iter().map(|j| j["id"].as_i64().unwrap()));
        match page["next_cursor"].as_i64() {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn non_loopback_bind_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, queue) = common::open_store(Backend::Sqlite, dir.path());
    let mut config = slothqueue_http::ServeConfig::new(slothqueue_http::Token::Generate {
        beside_queue: queue.clone(),
    });
    for addr in ["0.0.0.0:0", "[::]:0", "192.0.2.1:7878"] {
        config.addr = addr.parse().unwrap();
        let err = slothqueue_http::bind(store.clone(), config.clone()).await.unwrap_err();
        assert!(matches!(err, slothqueue_http::HttpError::NotLoopback { .. }), "{addr}: {err}");
    }
    assert!(
        !slothqueue_http::token_path_beside(&queue).exists(),
        "refused before the token was made"
    );
    config.addr = "0.0.0.0:0".parse().unwrap();
    config.allow_remote = true;
    let bound = slothqueue_http::bind(store.clone(), config.clone()).await.unwrap();
    assert!(bound.local_addr().ip().is_unspecified());
    drop(bound);
    config.addr = "127.0.0.1:0".parse().unwrap();
    config.allow_remote = false;
    let bound = slothqueue_http::bind(store, config).await.unwrap();
    assert!(bound.local_addr().ip().is_loopback());
    assert_ne!(bound.local_addr().port(), 0);
}

#[tokio::test]
async fn allow_remote_accepts_other_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = common::open_store(Backend::Sqlite, dir.path());
    let app = slothqueue_http::router(
        store,
        slothqueue_http::ApiState::new("0123456789abcdef0123").with_allow_remote(true),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (code, body) = common::raw_request(
        addr,
        b"GET /api/tasks/outbox/stats HTTP/1.1\r\nHost: queue.example\r\nAuthorization: Bearer 0123456789abcdef0123\r\nConnection: close\r\n\r\n".to_vec(),
    )
    .await;
    assert_eq!(code, 200, "{body}");
}

/// A reminder that the test helpers assert JSON for every answer.
#[allow(dead_code)]
fn _uses(_: &Server) {}

#[tokio::test]
async fn silent_clients_are_cut_off() {
    let s = start(Backend::Sqlite).await;
    let mut stream = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Half a request line, then nothing: the connection must not stay open forever.
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: local").await.unwrap();
    let mut buf = Vec::new();
    let read =
        tokio::time::timeout(std::time::Duration::from_secs(30), stream.read_to_end(&mut buf))
            .await;
    assert!(read.is_ok(), "the server held a silent connection for 30 s");
    // Other clients were served meanwhile, and still are.
    let (status, _) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    s.stop().await.unwrap();
}

/// Every lane and hold route wants the token, a valid id or queue name and
/// (for a limit) one whole number, and says so in one clear 400 before the
/// store is asked.
async fn lane_routes_refuse_bad_requests(backend: Backend) {
    let s = start(backend).await;
    let routes = [
        (Method::GET, "/api/queues"),
        (Method::PUT, "/api/queues/default/limit"),
        (Method::POST, "/api/queues/default/pause"),
        (Method::POST, "/api/queues/default/resume"),
        (Method::POST, "/api/pause"),
        (Method::POST, "/api/resume"),
        (Method::POST, "/api/tasks/outbox/1/hold"),
        (Method::POST, "/api/tasks/outbox/1/release"),
    ];
    for (method, path) in &routes {
        let url = format!("{}{path}", s.url);
        let (status, _) = s.send(s.client.request(method.clone(), &url)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path} without a token");
        let (status, _) =
            s.send(s.client.request(method.clone(), &url).bearer_auth("not-the-token")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path} with a wrong token");
        let (status, _) = s.send(s.req(method.clone(), path).header("host", "evil.example")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path} through a foreign host");
        let (status, _) = s.send(s.req(method.clone(), path).form(&[("limit", "2")])).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{method} {path} with a form");
    }

    let long = "q".repeat(129);
    for queue in [".hidden", "a%20b", "..%2fetc", "a%2fb", long.as_str(), "%c3%a9", "%ff"] {
        for (method, suffix) in
            [(Method::POST, "pause"), (Method::POST, "resume"), (Method::PUT, "limit")]
        {
            let path = format!("/api/queues/{queue}/{suffix}");
            let (status, err) =
                s.send(s.req(method.clone(), &path).json(&json!({ "limit": 1 }))).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {err}");
            assert!(error_of(&err).contains("not a valid name"), "{path}: {err}");
        }
    }

    for body in [
        json!({}),
        json!({ "limit": -1 }),
        json!({ "limit": 2.5 }),
        json!({ "limit": "2" }),
        json!({ "limit": null }),
        json!({ "limit": 4_294_967_296_u64 }),
        json!({ "limit": 2, "queue": "x" }),
        json!([2]),
        json!(2),
    ] {
        let (status, err) = s.put("/api/queues/default/limit", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {err}");
        assert!(error_of(&err).starts_with("invalid json body"), "{body}: {err}");
    }
    let (status, err) = s.put("/api/queues/default/limit", &json!({ "limit": -1 })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        error_of(&err),
        "invalid json body: limit: expected a whole number from 0 (no limit) to 4294967295, got -1"
    );
    let (status, err) = s
        .send(
            s.req(Method::PUT, "/api/queues/default/limit")
                .header("content-type", "application/json")
                .body("{\"limit\": 2"),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    let (status, _) = s.send(s.req(Method::PUT, "/api/queues/default/limit")).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "a limit needs a body");

    for id in ["abc", "0", "-1", "99999999999999999999", "1.5"] {
        for action in ["hold", "release"] {
            let (status, err) = s.post_empty(&format!("/api/tasks/outbox/{id}/{action}")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{action} {id}: {err}");
        }
    }
    for (method, path) in [
        (Method::GET, "/api/pause"),
        (Method::GET, "/api/queues/default/limit"),
        (Method::POST, "/api/queues/default/limit"),
        (Method::DELETE, "/api/queues"),
        (Method::GET, "/api/tasks/outbox/1/hold"),
    ] {
        let (status, err) = s.send(s.req(method.clone(), path)).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {err}");
    }
    let (status, _) = s.get("/api/queues/default").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(s.store.lanes().await.unwrap().is_default(), "nothing was written");
    s.stop().await.unwrap();
}

/// A hold keeps a pending job from being claimed, stamped with who held it;
/// a release lets it be claimed again; a wrong state is a 409, an unknown
/// job a 404, as for a cancel.
async fn hold_and_release(backend: Backend) {
    let s = start(backend).await;
    let id = s.enqueue(shell("true")).await["job"]["id"].as_i64().unwrap();
    let (status, job) = s.post_empty(&format!("/api/tasks/outbox/{id}/hold")).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["state"], "pending");
    assert_eq!(job["held"]["by"], "http 127.0.0.1", "{job}");
    let since = job["held"]["since"].as_i64().unwrap();
    assert!(since > 0);
    // A second hold leaves the first stamp and writes no event.
    let (status, again) = s.post_empty(&format!("/api/tasks/outbox/{id}/hold")).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["held"]["since"], since);
    let (_, shown) = s.get(&format!("/api/tasks/outbox/{id}")).await;
    let kinds: Vec<&str> =
        shown["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["pushed", "held"], "{shown}");
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!((stats["held"].as_u64(), stats["due_now"].as_u64()), (Some(1), Some(0)), "{stats}");
    let owner = Owner::named("test");
    let claim = ClaimRequest::new(owner.clone(), Arc::new(ClockOnly));
    assert!(s.store.claim(&claim, SystemClock.now()).await.unwrap().is_none(), "held: not claimed");

    let (status, job) = s.post_empty(&format!("/api/tasks/outbox/{id}/release")).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert!(job.get("held").is_none(), "{job}");
    let (status, again) = s.post_empty(&format!("/api/tasks/outbox/{id}/release")).await;
    assert_eq!(status, StatusCode::OK, "releasing a job not held changes nothing: {again}");
    let claimed = s.store.claim(&claim, SystemClock.now()).await.unwrap().unwrap();
    assert_eq!(claimed.job.id, id);
    for action in ["hold", "release"] {
        let (status, err) = s.post_empty(&format!("/api/tasks/outbox/{id}/{action}")).await;
        assert_eq!(status, StatusCode::CONFLICT, "{action} of a running job: {err}");
    }
    let done = Completion { result: None, exit_code: Some(0) };
    s.store.complete(id, &claimed.fence, done, SystemClock.now()).await.unwrap();
    for action in ["hold", "release"] {
        let (status, err) = s.post_empty(&format!("/api/tasks/outbox/{id}/{action}")).await;
        assert_eq!(status, StatusCode::CONFLICT, "{action} of a done job: {err}");
        assert!(error_of(&err).contains("done"), "{err}");
        let (status, err) = s.post_empty(&format!("/api/tasks/outbox/12345/{action}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{action} of no job: {err}");
    }
    s.stop().await.unwrap();
}

/// A limit, a pause of one queue and a pause of all, as the routes answer
/// them and as `GET /api/queues` reports them.
async fn limits_and_pauses(backend: Backend) {
    let s = start(backend).await;
    let (status, lane) = s.put("/api/queues/disk/limit", &json!({ "limit": 2 })).await;
    assert_eq!(status, StatusCode::OK, "{lane}");
    assert_eq!(lane, json!({ "queue": "disk", "limit": 2, "paused": null, "all_paused": null }));

    let (status, lane) = s.post_empty("/api/queues/disk/pause").await;
    assert_eq!(status, StatusCode::OK, "{lane}");
    assert_eq!(lane["limit"], 2);
    assert_eq!(lane["paused"]["by"], "http 127.0.0.1", "{lane}");
    let paused_since = lane["paused"]["since"].clone();
    let (_, again) = s.post_empty("/api/queues/disk/pause").await;
    assert_eq!(again["paused"]["since"], paused_since, "a second pause keeps the first stamp");

    let mut job = shell("true");
    job["queue"] = json!("disk");
    s.enqueue(job).await;
    s.enqueue(shell("true")).await;
    let (status, report) = s.get("/api/queues").await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert!(report.get("all_paused").is_none(), "{report}");
    let names: Vec<&str> =
        report["queues"].as_array().unwrap().iter().map(|q| q["queue"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "disk"], "{report}");
    let disk = &report["queues"][1];
    assert_eq!((disk["pending"].as_u64(), disk["due"].as_u64()), (Some(1), Some(1)), "{disk}");
    assert_eq!(disk["limit"], 2);
    assert_eq!(disk["paused"]["by"], "http 127.0.0.1");
    assert_eq!(report["queues"][0]["limit"], 0);

    let (status, lanes) = s.post_empty("/api/pause").await;
    assert_eq!(status, StatusCode::OK, "{lanes}");
    assert_eq!(lanes["all_paused"]["by"], "http 127.0.0.1", "{lanes}");
    assert_eq!(lanes["queues"][0]["queue"], "disk");
    let owner = Owner::named("test");
    let claim = ClaimRequest::new(owner, Arc::new(ClockOnly));
    assert!(
        s.store.claim(&claim, SystemClock.now()).await.unwrap().is_none(),
        "every queue is paused"
    );
    let (_, lane) = s.post_empty("/api/queues/disk/resume").await;
    assert_eq!(lane["paused"], Value::Null);
    assert_eq!(lane["all_paused"]["by"], "http 127.0.0.1", "the pause of all still holds: {lane}");
    let (status, lanes) = s.post_empty("/api/resume").await;
    assert_eq!(status, StatusCode::OK, "{lanes}");
    assert_eq!(
        lanes,
        json!({ "all_paused": null, "queues": [{ "queue": "disk", "limit": 2, "paused": null }] })
    );
    let (_, lane) = s.put("/api/queues/disk/limit", &json!({ "limit": 0 })).await;
    assert_eq!(lane["limit"], 0);
    let (_, lanes) = s.post_empty("/api/resume").await;
    assert_eq!(lanes["queues"], json!([]), "default settings are not kept");
    assert!(s.store.lanes().await.unwrap().is_default());
    s.stop().await.unwrap();
}

fn kinds_of(shown: &Value) -> Vec<String> {
    shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

/// `PATCH` changes a pending job (only the fields given; the trail says
/// which) and is refused with 409, nothing changed, once a runner took it;
/// `POST …/clone` adds a new pending job (201), with or without a body,
/// the trails naming each other.
async fn edit_and_clone(backend: Backend) {
    let s = start(backend).await;
    let id = s.enqueue(shell("ehco hi")).await["job"]["id"].as_i64().unwrap();
    let path = format!("/api/tasks/outbox/{id}");
    let body = json!({
        "command": "echo hi",
        "priority": 4,
        "max_runtime": 1500,
        "queue": "slow",
        "env": { "CI": "1" },
        "limits": { "nice": 5, "ionice": "idle" },
        "delay": 3_600_000
    });
    let (status, job) = s.send(s.req(Method::PATCH, &path).json(&body)).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["payload"]["command"], "echo hi");
    assert_eq!(job["payload"]["env"]["CI"], "1");
    assert_eq!(job["payload"]["limits"], json!({ "nice": 5, "ionice": "idle" }));
    assert_eq!((job["priority"].as_i64(), job["max_runtime"].as_i64()), (Some(4), Some(1500)));
    assert_eq!(job["queue"], "slow");
    assert!(job["not_before"].as_i64().unwrap() > SystemClock.now().as_millis() + 3_000_000);
    let (_, shown) = s.get(&path).await;
    assert_eq!(kinds_of(&shown), ["pushed", "edited"], "{shown}");
    let message = shown["events"][1]["message"].as_str().unwrap();
    assert_eq!(
        message,
        "changed command, priority, max-runtime, due time, queue, nice, ionice, env CI"
    );

    // Due now again, with no limit on its runtime.
    let body = json!({ "not_before": 0, "max_runtime": null });
    let (status, job) = s.send(s.req(Method::PATCH, &path).json(&body)).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!((job["not_before"].as_i64(), &job["max_runtime"]), (Some(0), &Value::Null));

    let claim = ClaimRequest::new(Owner::named("test"), Arc::new(ClockOnly));
    let claimed = s.store.claim(&claim, SystemClock.now()).await.unwrap().unwrap();
    assert_eq!(claimed.job.id, id);
    let (_, before) = s.get(&path).await;
    let (status, err) = s.send(s.req(Method::PATCH, &path).json(&json!({ "priority": 9 }))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert!(error_of(&err).contains("running"), "{err}");
    assert_eq!(s.get(&path).await.1, before, "nothing was changed");

    // A clone of the running job, with an empty body: the same work again.
    let (status, twin) = s.post_empty(&format!("{path}/clone")).await;
    assert_eq!(status, StatusCode::CREATED, "{twin}");
    let twin_id = twin["id"].as_i64().unwrap();
    assert_ne!(twin_id, id);
    assert_eq!((&twin["state"], &twin["payload"]), (&json!("pending"), &before["payload"]));
    // And with changes.
    let body = json!({ "command": "echo fixed", "queue": "fast" });
    let (status, fixed) = s.post(&format!("{path}/clone"), &body).await;
    assert_eq!(status, StatusCode::CREATED, "{fixed}");
    assert_eq!(
        (&fixed["payload"]["command"], &fixed["queue"]),
        (&json!("echo fixed"), &json!("fast"))
    );
    let fixed_id = fixed["id"].as_i64().unwrap();
    let (_, original) = s.get(&path).await;
    let last: Vec<&str> = original["events"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .take(2)
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(last, [format!("cloned as #{fixed_id}"), format!("cloned as #{twin_id}")]);
    let (_, shown) = s.get(&format!("/api/tasks/outbox/{fixed_id}")).await;
    assert_eq!(kinds_of(&shown), ["pushed", "cloned_from"], "{shown}");
    assert_eq!(shown["events"][1]["message"], format!("cloned from #{id}"));

    let (status, err) = s.post_empty("/api/tasks/outbox/424242/clone").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    let (status, err) = s
        .send(s.req(Method::PATCH, "/api/tasks/outbox/424242").json(&json!({ "priority": 1 })))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    s.stop().await.unwrap();
}

/// Unknown fields, wrong types, a bad queue, an empty command, both due
/// times, a limit out of range: 400, and nothing changed or added.
async fn edit_and_clone_refuse_bad_bodies(backend: Backend) {
    let s = start(backend).await;
    let id = s.enqueue(shell("true")).await["job"]["id"].as_i64().unwrap();
    let path = format!("/api/tasks/outbox/{id}");
    let (_, before) = s.get(&path).await;
    let bad = [
        json!({ "colour": "red" }),
        json!({ "priority": "high" }),
        json!({ "queue": "../etc" }),
        json!({ "command": "" }),
        json!({ "not_before": 0, "delay": 5 }),
        json!({ "max_runtime": 0 }),
        json!({ "limits": { "nice": 40 } }),
        json!({ "limits": { "swap": 1 } }),
        json!({ "command": "x", "payload": { "command": "y" } }),
        json!([1]),
    ];
    for body in &bad {
        let (status, err) = s.send(s.req(Method::PATCH, &path).json(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "PATCH {body}: {err}");
        let (status, err) = s.post(&format!("{path}/clone"), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "clone {body}: {err}");
    }
    let (status, err) = s.send(s.req(Method::PATCH, &path).body("{}")).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "a body that is not JSON: {err}");
    assert_eq!(s.get(&path).await.1, before, "nothing was changed");
    let (_, page) = s.get("/api/tasks/outbox").await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1, "nothing was added: {page}");
    s.stop().await.unwrap();
}
