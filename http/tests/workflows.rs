//! Jobs that run after others, over HTTP: `after` on the enqueue route,
//! the batch route (all or none, a refused job named by its index), and
//! `GET /api/tasks/outbox/{id}?wait=SECONDS`, released by a writer on its
//! own handle to the queue file (as a runner in another process is).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Backend, Server, open_store, start, start_configured, within};
use reqwest::StatusCode;
use serde_json::{Value, json};
use slothqueue_core::{ClaimRequest, Clock, ClockOnly, Completion, Owner, SystemClock};
use slothqueue_runner::QueueWatch;

on_both_backends!(
    enqueue_names_parents_by_id_and_key,
    a_batch_is_written_whole_or_not_at_all,
    wait_answers_when_another_writer_finishes_the_job,
    wait_values_are_checked,
    shutdown_answers_long_polls,
);

fn shell(cmd: &str) -> Value {
    json!({ "kind": "shell", "payload": { "command": cmd } })
}

fn with(mut v: Value, field: &str, value: Value) -> Value {
    v[field] = value;
    v
}

async fn enqueue_names_parents_by_id_and_key(backend: Backend) {
    let s = start(backend).await;
    let build = s.enqueue(with(shell("make"), "idempotency_key", json!("build"))).await;
    let build_id = build["job"]["id"].as_i64().unwrap();
    let test = s.enqueue(with(shell("make test"), "after", json!(["build"]))).await;
    assert_eq!(test["job"]["after"], json!([build_id]), "{test}");
    assert_eq!(test["job"]["pending_parents"], 1);
    let both = s.enqueue(with(shell("ship"), "after", json!([build_id, test["job"]["id"]]))).await;
    assert_eq!(both["job"]["pending_parents"], 2);
    let plain = s.enqueue(with(shell("true"), "after", Value::Null)).await;
    assert!(plain["job"].get("after").is_none(), "{plain}");

    // A parent that is not there is the queue's state (409: the same body
    // passes once it is); a malformed `after` is the request's (400).
    for (after, says, code) in [
        (json!([999]), "after 999", StatusCode::CONFLICT),
        (json!(["nobody-has-this-key"]), "nobody-has-this-key", StatusCode::CONFLICT),
        (json!([1.5]), "after[0]", StatusCode::BAD_REQUEST),
        (json!([build_id, true]), "after[1]", StatusCode::BAD_REQUEST),
        (json!("build"), "after", StatusCode::BAD_REQUEST),
    ] {
        let (status, body) =
            s.post("/api/tasks/enqueue", &with(shell("x"), "after", after.clone())).await;
        assert_eq!(status, code, "{after}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(says), "{after}: {error}");
        assert!(!error.contains("--after"), "the CLI's flag in the API's answer: {error}");
    }
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!(stats["pending"], 4, "a refused enqueue wrote nothing: {stats}");
}

async fn a_batch_is_written_whole_or_not_at_all(backend: Backend) {
    let s = start(backend).await;
    let batch = |jobs: Vec<Value>| {
        let body = Value::Array(jobs);
        let s = &s;
        async move { s.post("/api/tasks/enqueue/batch", &body).await }
    };
    // The third job names a parent nobody has: nothing of the batch is written.
    let (status, body) = batch(vec![
        with(shell("a"), "idempotency_key", json!("a")),
        with(shell("b"), "after", json!(["a"])),
        with(shell("c"), "after", json!([12345])),
    ])
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["index"], 2, "{body}");
    assert!(body["error"].as_str().unwrap().starts_with("job 3 of the batch"), "{body}");
    // A job the door refuses is named the same way, before the store is asked.
    let (status, body) = batch(vec![shell("a"), with(shell("b"), "priority", json!("high"))]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].as_str().unwrap().contains("[1]"), "{body}");
    let (status, body) =
        batch(vec![shell("a"), json!({"kind": "shell", "payload": {"command": " "}})]).await;
    assert_eq!((status, body["index"].as_i64()), (StatusCode::BAD_REQUEST, Some(1)), "{body}");
    let (status, body) = s.post("/api/tasks/enqueue/batch", &shell("not an array")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (_, page) = s.get("/api/tasks/outbox").await;
    assert_eq!(page["jobs"], json!([]), "a refused batch wrote something");

    // A later job names an earlier one's key.
    let (status, body) = batch(vec![
        with(shell("a"), "idempotency_key", json!("a")),
        with(shell("b"), "after", json!(["a"])),
    ])
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let pushed = body.as_array().unwrap();
    assert_eq!(pushed.len(), 2);
    let a = pushed[0]["job"]["id"].as_i64().unwrap();
    assert_eq!(pushed[1]["job"]["after"], json!([a]));
    assert_eq!(pushed[1]["job"]["pending_parents"], 1);
    assert!(pushed.iter().all(|p| p["created"] == true));
    let (status, body) = batch(vec![]).await;
    assert_eq!((status, body), (StatusCode::OK, json!([])));
}

/// A server whose long polls are woken by the queue file's changes only
/// (their fallback poll is an hour), with the watch to see them wait.
async fn start_watched(backend: Backend) -> (Server, Arc<QueueWatch>) {
    let mut watch = None;
    let s = start_configured(
        backend,
        |_, _| None,
        |state, queue| {
            // The files the backend's store names (`Store::watched_files`).
            let mut files = vec![queue.to_owned()];
            if let Backend::Sqlite = backend {
                files.push(queue.with_extension("db-wal"));
            }
            let w = QueueWatch::on_files(queue, &files);
            let w = Arc::new(w.with_poll_interval(Duration::from_secs(3600)));
            watch = Some(w.clone());
            state.with_queue_watch(w)
        },
    )
    .await;
    let watch = watch.unwrap();
    assert!(watch.is_notified(), "{:?}", watch.notice());
    (s, watch)
}

async fn wait_answers_when_another_writer_finishes_the_job(backend: Backend) {
    let (s, watch) = start_watched(backend).await;
    let id = s.enqueue(shell("true")).await["job"]["id"].as_i64().unwrap();
    // Time up: the job as it is, still 200.
    let (status, job) = s.get(&format!("/api/tasks/outbox/{id}?wait=0.3")).await;
    assert_eq!((status, job["state"].as_str()), (StatusCode::OK, Some("pending")), "{job}");
    assert_eq!(job["events"][0]["kind"], "pushed");

    let path = format!("/api/tasks/outbox/{id}?wait=100");
    let long = tokio::spawn({
        let req = s.req(reqwest::Method::GET, &path);
        async move { req.send().await.unwrap() }
    });
    within(30, async {
        while watch.waiting() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Another handle on the file, as a runner in another process has.
    let other_dir = s.dir.path().to_owned();
    let (other, _) = open_store(backend, &other_dir);
    let now = SystemClock.now();
    let req = ClaimRequest::new(Owner::named("elsewhere"), Arc::new(ClockOnly));
    let claimed = other.claim(&req, now).await.unwrap().unwrap();
    let done = Completion { result: Some("ok".into()), exit_code: Some(0) };
    other.complete(claimed.job.id, &claimed.fence, done, now).await.unwrap();
    let resp = within(30, long).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let job: Value = resp.json().await.unwrap();
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["result"], "ok");
    let kinds: Vec<&str> =
        job["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["pushed", "claimed", "completed"]);
    // A finished job answers at once, whatever the wait.
    let (status, job) = within(5, s.get(&format!("/api/tasks/outbox/{id}?wait=120"))).await;
    assert_eq!((status, job["state"].as_str()), (StatusCode::OK, Some("done")));
}

async fn wait_values_are_checked(backend: Backend) {
    let s = start(backend).await;
    let id = s.enqueue(shell("true")).await["job"]["id"].as_i64().unwrap();
    for bad in
        ["-1", "abc", "121", "1e3", "inf", "NaN", "", "0.5.5", ".5", "5.", "+5", "1000000000000"]
    {
        let (status, body) = s.get(&format!("/api/tasks/outbox/{id}?wait={bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "wait={bad}: {body}");
        assert!(body["error"].as_str().unwrap().contains("120"), "{body}");
    }
    let (status, body) = s.get(&format!("/api/tasks/outbox/{id}?wait=1&later=2")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, job) = s.get(&format!("/api/tasks/outbox/{id}?wait=0")).await;
    assert_eq!((status, job["state"].as_str()), (StatusCode::OK, Some("pending")));
    let (status, body) = s.get("/api/tasks/outbox/999?wait=5").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

async fn shutdown_answers_long_polls(backend: Backend) {
    let (s, watch) = start_watched(backend).await;
    let id = s.enqueue(shell("true")).await["job"]["id"].as_i64().unwrap();
    let long = tokio::spawn({
        let req = s.req(reqwest::Method::GET, &format!("/api/tasks/outbox/{id}?wait=120"));
        async move { req.send().await.unwrap() }
    });
    within(30, async {
        while watch.waiting() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Answered as the server stops, not when the 120 s are up (nor cut
    // off after the server's 10 s grace for requests in flight).
    let stopping = tokio::spawn(s.stop());
    let resp = within(8, long).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let job: Value = resp.json().await.unwrap();
    assert_eq!(job["state"], "pending");
    within(30, stopping).await.unwrap().unwrap();
}
