//! Secrets in the answers: a shell job's secret-looking environment values
//! read `<secret>` in every answer that carries the job, unless a route
//! that looks is asked `?show_secrets=true`; what is stored is untouched.
//! And the shell payload takes `env_mode` and `limits` (checked at the door).
//! Issue 31 (findings 2, 9): a password inside a value (a URL's, a proxy's
//! `user:pass@`) and a tool's bookkeeping (`DIRENV_DIFF`) are masked too, in
//! every answer: the job, its trail, the list the page reads, `/metrics`.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]

mod common;

use common::{Backend, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

on_both_backends!(
    secrets_are_masked_unless_asked,
    env_mode_and_limits_pass_the_door,
    a_job_answer_masks_secrets_inside_values,
    the_pages_list_and_schedules_mask_secrets_inside_values,
    the_trail_and_metrics_carry_no_value
);

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

/// A value the page must never show: what direnv packs every value an
/// `.envrc` exported into (base64 of zlib of JSON), and URLs with
/// passwords in them.
const DIFF: &str = "eJzUkE1vgkAQhv9KM2cPLCoFbk1MU9oeTJpeDTA7ws1";
const SECRETS: [&str; 4] = [DIFF, "PASSWORD", "pr0xypass", "dsnkey123"];

fn assert_clean(route: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{route} shows {secret}: {text}");
    }
}

/// The environment a client gave: secrets inside values, and direnv's
/// bookkeeping.
fn stored_env() -> Value {
    json!({
        "DATABASE_URL": "postgres://app:PASSWORD@db/app",
        "https_proxy": "http://u:pr0xypass@proxy:3128",
        "SENTRY_DSN": "https://dsnkey123@o1.ingest.sentry.io/2",
        "DIRENV_DIFF": DIFF,
        "PATH": "/bin",
    })
}

/// Enqueues a job holding [`stored_env`] and edits a password into it
/// (its trail: pushed, edited); returns the job's path.
async fn job_with_secrets(s: &common::Server) -> String {
    let body = json!({ "kind": "shell", "payload": {
        "command": "deploy", "env": stored_env(), "env_mode": "exact",
    }});
    let pushed = s.enqueue(body).await;
    assert_clean("the enqueue answer", &pushed.to_string());
    let path = format!("/api/tasks/outbox/{}", pushed["job"]["id"].as_i64().unwrap());
    let patch = json!({ "env": { "REDIS_URL": "redis://:PASSWORD@cache:6379/0" } });
    let (status, edited) = s.send(s.req(Method::PATCH, &path).json(&patch)).await;
    assert_eq!(status, StatusCode::OK, "{edited}");
    assert_clean("PATCH", &edited.to_string());
    path
}

/// Every answer carrying the job: enqueue, PATCH, GET (what the page
/// shows), clone, hold.
async fn a_job_answer_masks_secrets_inside_values(backend: Backend) {
    let s = start(backend).await;
    let path = job_with_secrets(&s).await;
    let (status, shown) = s.get(&path).await;
    assert_eq!(status, StatusCode::OK);
    assert_clean("GET job", &shown.to_string());
    let masked = json!({
        "DATABASE_URL": "postgres://app:<secret>@db/app",
        "https_proxy": "http://u:<secret>@proxy:3128",
        "SENTRY_DSN": "https://<secret>@o1.ingest.sentry.io/2",
        "DIRENV_DIFF": "<secret>",
        "REDIS_URL": "redis://:<secret>@cache:6379/0",
        "PATH": "/bin",
    });
    assert_eq!(shown["payload"]["env"], masked);
    let (_, asked) = s.get(&format!("{path}?show_secrets=true")).await;
    assert_eq!(asked["payload"]["env"]["DIRENV_DIFF"], DIFF, "asked, and stored as given");
    let (status, cloned) = s.post_empty(&format!("{path}/clone")).await;
    assert_eq!(status, StatusCode::CREATED, "{cloned}");
    assert_clean("clone", &cloned.to_string());
    let (_, held) = s.post_empty(&format!("{path}/hold")).await;
    assert_clean("hold", &held.to_string());
    s.stop().await.unwrap();
}

/// The list the page reads its rows from, and a schedule's job.
async fn the_pages_list_and_schedules_mask_secrets_inside_values(backend: Backend) {
    let s = start(backend).await;
    job_with_secrets(&s).await;
    let (_, page) = s.get("/api/tasks/outbox").await;
    assert_clean("the list", &page.to_string());
    assert_eq!(
        page["jobs"][0]["payload"]["env"]["SENTRY_DSN"],
        "https://<secret>@o1.ingest.sentry.io/2"
    );
    let schedule = json!({
        "key": "deploy", "spec": { "cron": "@daily" },
        "job": { "kind": "shell", "payload": {
            "command": "deploy", "env": stored_env(), "env_mode": "exact",
        } },
    });
    let (status, put) = s.post("/api/schedules", &schedule).await;
    assert_eq!(status, StatusCode::CREATED, "{put}");
    assert_clean("a schedule", &put.to_string());
    let (_, list) = s.get("/api/schedules").await;
    assert_clean("the schedules", &list.to_string());
    s.stop().await.unwrap();
}

/// The trail (events) and `/metrics` never carried a value; they keep not
/// carrying one.
async fn the_trail_and_metrics_carry_no_value(backend: Backend) {
    let s = start(backend).await;
    let path = job_with_secrets(&s).await;
    let (_, shown) = s.get(&path).await;
    let events = &shown["events"];
    assert_eq!(events.as_array().map(Vec::len), Some(2), "{shown}");
    assert_clean("the trail", &events.to_string());
    let metrics = s.req(Method::GET, "/metrics").send().await.unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    assert_clean("/metrics", &metrics.text().await.unwrap());
    s.stop().await.unwrap();
}
