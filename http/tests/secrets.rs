//! Secrets in the answers: a shell job's secret-looking environment values
//! read `<secret>` in every answer that carries the job, unless a route
//! that looks is asked `?show_secrets=true`; what is stored is untouched.
//! And the shell payload takes `env_mode` and `limits` (checked at the door).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]

mod common;

use common::{Backend, start};
use reqwest::StatusCode;
use serde_json::{Value, json};

on_both_backends!(secrets_are_masked_unless_asked, env_mode_and_limits_pass_the_door);

fn with_token() -> Value {
    json!({ "kind": "shell", "payload": {
        "command": "deploy", "env": {"API_TOKEN": "t0k3n", "PATH": "/bin"}, "env_mode": "exact",
    }})
}

async fn secrets_are_masked_unless_asked(backend: Backend) {
    let s = start(backend).await;
    let pushed = s.enqueue(with_token()).await;
    assert_eq!(pushed["job"]["payload"]["env"], json!({"API_TOKEN": "<secret>", "PATH": "/bin"}));
    let id = pushed["job"]["id"].as_i64().unwrap();

    let (status, shown) = s.get(&format!("/api/tasks/outbox/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["payload"]["env"]["API_TOKEN"], "<secret>");
    assert_eq!(shown["payload"]["env_mode"], "exact");
    let (_, shown) = s.get(&format!("/api/tasks/outbox/{id}?show_secrets=true")).await;
    assert_eq!(shown["payload"]["env"]["API_TOKEN"], "t0k3n", "asked, and stored as given");

    let (_, page) = s.get("/api/tasks/outbox").await;
    assert_eq!(page["jobs"][0]["payload"]["env"]["API_TOKEN"], "<secret>");
    let (_, page) = s.get("/api/tasks/outbox?show_secrets=true").await;
    assert_eq!(page["jobs"][0]["payload"]["env"]["API_TOKEN"], "t0k3n");

    // A handler's payload is its own: an `env` in it is not the shell's.
    let handler =
        s.enqueue(json!({"kind": "report", "payload": {"env": {"API_TOKEN": "mine"}}})).await;
    assert_eq!(handler["job"]["payload"]["env"]["API_TOKEN"], "mine");

    let (status, held) = s.post_empty(&format!("/api/tasks/outbox/{id}/hold")).await;
    assert_eq!(status, StatusCode::OK, "{held}");
    assert_eq!(held["payload"]["env"]["API_TOKEN"], "<secret>");
    let (_, cancelled) = s.post_empty(&format!("/api/tasks/outbox/{id}/cancel")).await;
    assert_eq!(cancelled["payload"]["env"]["API_TOKEN"], "<secret>");

    for bad in ["yes", "1", ""] {
        let (status, err) = s.get(&format!("/api/tasks/outbox/{id}?show_secrets={bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {err}");
        assert_eq!(err["error"], "show_secrets must be true or false");
    }
    s.stop().await.unwrap();
}

async fn env_mode_and_limits_pass_the_door(backend: Backend) {
    let s = start(backend).await;
    let pushed = s
        .enqueue(json!({ "kind": "shell", "payload": {
            "command": "make", "limits": {"nice": 5, "memory_max": 52_428_800},
        }}))
        .await;
    assert_eq!(pushed["job"]["payload"]["limits"], json!({"nice": 5, "memory_max": 52_428_800}));
    assert!(pushed["job"]["payload"].get("env_mode").is_none(), "nothing named, nothing added");
    for payload in [
        json!({"command": "make", "env_mode": "sometimes"}),
        json!({"command": "make", "limits": {"nice": 99}}),
        json!({"command": "make", "limits": {"swap": 1}}),
    ] {
        let (status, err) =
            s.post("/api/tasks/enqueue", &json!({"kind": "shell", "payload": payload})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{payload}: {err}");
    }
    s.stop().await.unwrap();
}
