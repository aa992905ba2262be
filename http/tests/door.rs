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
    max_runtime_is_milliseconds_and_the_seconds_form_is_deprecated,
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
    // Milliseconds: whole, at least 1, at most 100 years.
    for bad in [json!(0.5), json!(0), json!(1e13), json!(1e300), json!(-1)] {
        let mut req = shell_with(json!({ "command": "true" }));
        req["max_runtime"] = bad.clone();
        let (status, body) = s.post("/api/tasks/enqueue", &req).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "max_runtime {bad}: {body}");
    }
    // The old seconds form, bounded as it was.
    for bad in [json!(0.0001), json!(0), json!(1e12), json!(1e300), json!(-1)] {
        let mut req = shell_with(json!({ "command": "true" }));
        req["max_runtime_secs"] = bad.clone();
        let (status, body) = s.post("/api/tasks/enqueue", &req).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "max_runtime_secs {bad}: {body}");
    }
    for at in ["1969-07-20T20:17:00Z", "10000-01-01T00:00:00Z"] {
        let mut req = shell_with(json!({ "command": "true" }));
        req["scheduled_for"] = json!(at);
        let (status, body) = s.post("/api/tasks/enqueue", &req).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "scheduled_for {at}: {body}");
    }
    let mut req = shell_with(json!({ "command": "true" }));
    req["max_runtime"] = json!(1);
    let (status, body) = s.post("/api/tasks/enqueue", &req).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["job"]["max_runtime"], 1);
    s.stop().await.unwrap();
}

/// `max_runtime` is milliseconds, as the job answers and the edit body
/// have it; the old seconds form is still taken under `max_runtime_secs`,
/// answered with a deprecation, and never together with the new one.
async fn max_runtime_is_milliseconds_and_the_seconds_form_is_deprecated(backend: Backend) {
    let s = start(backend).await;
    let send = |body: Value, path: &'static str| {
        let req = s.req(reqwest::Method::POST, path).json(&body);
        async move {
            let resp = req.send().await.unwrap();
            let (status, headers) = (resp.status(), resp.headers().clone());
            (status, headers, resp.json::<Value>().await.unwrap())
        }
    };
    let warning = |h: &reqwest::header::HeaderMap| {
        h.get(reqwest::header::WARNING).map(|v| v.to_str().unwrap().to_owned())
    };
    let mut ms = shell_with(json!({ "command": "true" }));
    ms["max_runtime"] = json!(2500);
    let (status, headers, body) = send(ms.clone(), "/api/tasks/enqueue").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["job"]["max_runtime"], 2500, "2500 ms, as the answer has it");
    assert!(headers.get("deprecation").is_none() && warning(&headers).is_none(), "{headers:?}");

    let mut secs = shell_with(json!({ "command": "false" }));
    secs["max_runtime_secs"] = json!(2.5);
    let (status, headers, body) = send(secs.clone(), "/api/tasks/enqueue").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["job"]["max_runtime"], 2500, "2.5 s, stored as 2500 ms");
    assert_eq!(headers.get("deprecation").map(|v| v.to_str().unwrap()), Some("true"));
    assert!(warning(&headers).unwrap().contains("give max_runtime in milliseconds"));
    let mut null = shell_with(json!({ "command": "true; true" }));
    null["max_runtime_secs"] = Value::Null;
    let (status, _, body) = send(null, "/api/tasks/enqueue").await;
    assert_eq!((status, &body["job"]["max_runtime"]), (StatusCode::CREATED, &Value::Null));

    // A batch with one body in the old form is answered with the deprecation.
    let mut again = secs.clone();
    again["payload"]["command"] = json!("echo batch");
    let (status, headers, body) = send(json!([ms, again]), "/api/tasks/enqueue/batch").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body[1]["job"]["max_runtime"], 2500);
    assert!(warning(&headers).is_some(), "{headers:?}");

    let mut both = shell_with(json!({ "command": "true" }));
    both["max_runtime"] = json!(2500);
    both["max_runtime_secs"] = json!(2.5);
    let (status, body) = s.post("/api/tasks/enqueue", &both).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].as_str().unwrap().contains("not both"), "{body}");
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
