//! What the hardening issue (point 5) found with schemathesis and plain
//! clients: the door refuses what the runner could not run, the headers a
//! proxy or a rebinding page could abuse, and says so in JSON.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]

mod common;

use common::{Backend, start};
use reqwest::StatusCode;
use serde_json::{Value, json};

on_both_backends!(
    enqueue_refuses_what_cannot_run,
    max_runtime_and_scheduled_for_are_bounded,
    duplicate_host_or_origin_is_refused,
    absolute_form_authority_is_judged_like_host,
    wrong_tokens_wait,
    openapi_names_the_bound_address_and_the_limits,
);

fn shell_with(payload: Value) -> Value {
    json!({ "kind": "shell", "payload": payload })
}

async fn enqueue_refuses_what_cannot_run(backend: Backend) {
    let s = start(backend).await;
    let long = "a".repeat(131_072);
    for (payload, fragment) in [
        (json!({ "command": long }), "Linux passes at most 131071 bytes"),
        (json!({ "command": "env", "env": { "A=B": "x" } }), "env name `A=B`"),
        (json!({ "command": "env", "env": { "": "x" } }), "env name ``"),
        (json!({ "command": "env", "env": { "A": "x\u{0}y" } }), "contains a NUL byte"),
        (json!({ "command": "pwd", "cwd": "/tmp/a\u{0}b" }), "`cwd` contains a NUL byte"),
    ] {
        let (status, body) = s.post("/api/tasks/enqueue", &shell_with(payload)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body["error"].as_str().unwrap().contains(fragment), "{fragment}: {body}");
        assert_eq!(body["status"], 400);
    }
    let (status, _) =
        s.post("/api/tasks/enqueue", &shell_with(json!({ "command": "a".repeat(131_071) }))).await;
    assert_eq!(status, StatusCode::CREATED, "the longest command is accepted");
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!(stats["pending"], 1);
    s.stop().await.unwrap();
}

async fn max_runtime_and_scheduled_for_are_bounded(backend: Backend) {
    let s = start(backend).await;
    for bad in [json!(0.0001), json!(0), json!(1e12), json!(1e300), json!(-1)] {
        let mut req = shell_with(json!({ "command": "true" }));
        req["max_runtime"] = bad.clone();
        let (status, body) = s.post("/api/tasks/enqueue", &req).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "max_runtime {bad}: {body}");
    }
    for at in ["1969-07-20T20:17:00Z", "10000-01-01T00:00:00Z"] {
        let mut req = shell_with(json!({ "command": "true" }));
        req["scheduled_for"] = json!(at);
        let (status, body) = s.post("/api/tasks/enqueue", &req).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "scheduled_for {at}: {body}");
    }
    let mut req = shell_with(json!({ "command": "true" }));
    req["max_runtime"] = json!(0.001);
    let (status, body) = s.post("/api/tasks/enqueue", &req).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["job"]["max_runtime"], 1);
    s.stop().await.unwrap();
}

async fn duplicate_host_or_origin_is_refused(backend: Backend) {
    let s = start(backend).await;
    let port = s.addr.port();
    for extra in [
        format!("Host: localhost:{port}\r\nHost: evil.example\r\n"),
        format!(
            "Host: localhost:{port}\r\nOrigin: http://localhost:{port}\r\nOrigin: http://evil.example\r\n"
        ),
    ] {
        let (code, body) = s
            .raw(
                format!(
                    "GET /api/tasks/outbox/stats HTTP/1.1\r\n{extra}Authorization: Bearer {}\r\nConnection: close\r\n\r\n",
                    s.token
                )
                .into_bytes(),
            )
            .await;
        assert_eq!(code, 400, "{extra}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["status"], 400);
        assert!(body["error"].as_str().unwrap().starts_with("more than one"), "{body}");
    }
    s.stop().await.unwrap();
}

async fn absolute_form_authority_is_judged_like_host(backend: Backend) {
    let s = start(backend).await;
    let port = s.addr.port();
    let request = |target: &str| {
        format!(
            "GET {target} HTTP/1.1\r\nHost: localhost:{port}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            s.token
        )
        .into_bytes()
    };
    let (code, body) = s.raw(request("http://evil.example/api/tasks/outbox/stats")).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["status"], 403);
    let (code, body) =
        s.raw(request(&format!("http://127.0.0.1:{port}/api/tasks/outbox/stats"))).await;
    assert_eq!(code, 200, "{body}");
    s.stop().await.unwrap();
}

#[expect(clippy::disallowed_methods, reason = "measuring the real delay of a 401")]
async fn wrong_tokens_wait(backend: Backend) {
    let s = start(backend).await;
    let started = std::time::Instant::now();
    let (status, body) = s
        .send(
            s.client
                .get(format!("{}/api/tasks/outbox/stats", s.url))
                .bearer_auth("0123456789abcdef0123456789abcdef"),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(started.elapsed() >= std::time::Duration::from_millis(50), "{:?}", started.elapsed());
    s.stop().await.unwrap();
}

async fn openapi_names_the_bound_address_and_the_limits(backend: Backend) {
    let s = start(backend).await;
    let (status, doc) = s.get("/api/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["servers"][0]["url"], format!("http://{}", s.addr));
    let list = &doc["paths"]["/api/tasks/outbox"]["get"];
    let param = |name: &str| {
        list["parameters"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap()["schema"]
            .clone()
    };
    assert_eq!(param("cursor")["maximum"], json!(i64::MAX));
    for name in ["kind", "queue"] {
        assert_eq!(param(name)["maxLength"], 128, "{name}");
        assert!(param(name)["pattern"].is_string(), "{name}");
    }
    let req = &doc["components"]["schemas"]["EnqueueRequest"]["properties"];
    assert_eq!(req["max_attempts"]["maximum"], 1_000_000);
    assert!(req["max_runtime"]["maximum"].is_number());
    assert_eq!(req["idempotency_key"]["maxLength"], 128);
    let shell = &doc["components"]["schemas"]["ShellPayload"];
    assert_eq!(shell["properties"]["command"]["maxLength"], 131_071);
    assert!(shell["properties"]["env"].is_object() && shell["properties"]["cwd"].is_object());
    let enqueue = &doc["paths"]["/api/tasks/enqueue"]["post"]["responses"];
    for code in ["405", "408", "415", "503"] {
        assert!(enqueue[code].is_object(), "enqueue lacks {code}");
    }
    assert!(doc["paths"]["/api/openapi.json"]["get"]["responses"]["401"].is_object());
    s.stop().await.unwrap();
}
