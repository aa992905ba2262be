//! The drain worker beside the server: jobs enqueued over HTTP run at once,
//! cancels stop running jobs, and shutdown hands the running job back.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{Backend, Server, start_with};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use slothqueue_http::DrainWorker;

on_both_backends!(
    lifecycle,
    cancel_running,
    shutdown_releases_running_job,
    slots_and_limits,
    pauses,
);

/// A server with a drain worker that would poll only once a minute: a job
/// that starts sooner was started by the enqueue's wake-up.
async fn start_draining(backend: Backend) -> Server {
    start_draining_with(backend, 1).await
}

/// As [`start_draining`], the worker running up to `slots` jobs at once.
async fn start_draining_with(backend: Backend, slots: usize) -> Server {
    start_with(backend, move |store, queue| {
        let mut config = DrainWorker::config(&queue);
        config.slots = slots;
        config.poll_interval = Duration::from_secs(60);
        config.kill_grace = Duration::from_millis(500);
        Some(DrainWorker::new(store, config, |_event| {}))
    })
    .await
}

fn events(job: &Value) -> Vec<String> {
    job["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

async fn lifecycle(backend: Backend) {
    let s = start_draining(backend).await;
    // Let the worker find the queue empty and go to sleep first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resp = s.enqueue(json!({"kind": "shell", "payload": {"command": "echo hello"}})).await;
    let id = resp["job"]["id"].as_i64().unwrap();
    let job = s.wait_for(id, Duration::from_secs(20), |j| j["state"] == "done").await;
    assert_eq!(job["result"], "hello");
    assert_eq!(job["exit_code"], 0);
    assert_eq!(job["attempts"], 1);
    assert_eq!(events(&job), ["pushed", "claimed", "completed"]);
    for e in job["events"].as_array().unwrap() {
        assert!(e["at"].as_i64().unwrap() > 0);
    }
    // The output went to the CLI's log directory beside the queue.
    let log = slothqueue_http::log_dir_beside(&s.queue_path).join(format!("{id}.log"));
    assert!(std::fs::read_to_string(&log).unwrap().contains("hello"));

    // A failing command ends failed once its attempts are used up.
    let resp = s
        .enqueue(json!({"kind": "shell", "payload": {"command": "echo oops >&2; exit 3"}, "max_attempts": 1}))
        .await;
    let id = resp["job"]["id"].as_i64().unwrap();
    let job = s.wait_for(id, Duration::from_secs(20), |j| j["state"] == "failed").await;
    assert_eq!(job["exit_code"], 3);
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!((stats["done"].as_u64(), stats["failed"].as_u64()), (Some(1), Some(1)), "{stats}");
    s.stop().await.unwrap();
}

/// The pids a job wrote to `file` (its shell, then a grandchild), once both are there.
async fn pids_in(file: &Path) -> Vec<i32> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.len() == 2 {
                return pids;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "the job never wrote its pids");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        }
        Err(_) => false,
    }
}

async fn assert_all_gone(pids: &[i32]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while pids.iter().any(|p| alive(*p)) {
        assert!(tokio::time::Instant::now() < deadline, "processes survived: {pids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A job whose shell and a grandchild `sleep 30` record their pids.
fn sleeper(pids: &Path) -> Value {
    let command = format!(
        "echo $$ > {p}.tmp; sleep 30 & echo $! >> {p}.tmp; mv {p}.tmp {p}; wait",
        p = pids.display()
    );
    json!({"kind": "shell", "payload": {"command": command}})
}

async fn cancel_running(backend: Backend) {
    let s = start_draining(backend).await;
    let pid_file = s.dir.path().join("pids");
    let id = s.enqueue(sleeper(&pid_file)).await["job"]["id"].as_i64().unwrap();
    s.wait_for(id, Duration::from_secs(20), |j| j["state"] == "running").await;
    let pids = pids_in(&pid_file).await;
    assert!(pids.iter().all(|p| alive(*p)));

    let (status, job) =
        s.send(s.req(Method::POST, &format!("/api/tasks/outbox/{id}/cancel"))).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["cancel_requested"], true);
    let job = s.wait_for(id, Duration::from_secs(20), |j| j["state"] == "cancelled").await;
    assert!(events(&job).contains(&"cancel_requested".to_owned()), "{job}");
    assert_all_gone(&pids).await;
    let (status, _) = s.send(s.req(Method::POST, &format!("/api/tasks/outbox/{id}/cancel"))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    s.stop().await.unwrap();
}

async fn shutdown_releases_running_job(backend: Backend) {
    let s = start_draining(backend).await;
    let pid_file = s.dir.path().join("pids");
    let id = s.enqueue(sleeper(&pid_file)).await["job"]["id"].as_i64().unwrap();
    s.wait_for(id, Duration::from_secs(20), |j| j["state"] == "running").await;
    let pids = pids_in(&pid_file).await;
    let store = Arc::clone(&s.store);
    let (addr, token) = (s.addr, s.token.clone());
    common::within(30, s.stop()).await.unwrap();
    assert_all_gone(&pids).await;
    let job = store.get(id).await.unwrap();
    assert_eq!(job.state, slothqueue_core::JobState::Pending, "handed back: {job:?}");
    assert_eq!(job.attempts, 0, "a shutdown is not charged as an attempt");
    common::assert_not_serving(addr, &token).await;
}

/// A shell job in `queue` with one attempt (a refusal inside it is final).
fn in_queue(queue: &str, command: &str) -> Value {
    json!({"kind": "shell", "queue": queue, "max_attempts": 1, "payload": {"command": command}})
}

/// serve's worker runs `slots` jobs at once (two jobs that each wait for
/// the other both finish) and keeps a lane's limit (two jobs of a lane
/// limited to 1, each taking a lock dir or failing, both finish).
async fn slots_and_limits(backend: Backend) {
    let s = start_draining_with(backend, 2).await;
    let (status, lane) = s.put("/api/queues/one/limit", &json!({"limit": 1})).await;
    assert_eq!(status, StatusCode::OK, "{lane}");

    let meet = |me: &str, other: &str| {
        format!(
            "touch {me}; i=0; while [ ! -e {other} ]; do i=$((i+1)); [ $i -gt 200 ] && exit 9; sleep 0.05; done"
        )
    };
    let a = s.enqueue(in_queue("two", &meet("a", "b"))).await["job"]["id"].as_i64().unwrap();
    let b = s.enqueue(in_queue("two", &meet("b", "a"))).await["job"]["id"].as_i64().unwrap();
    for id in [a, b] {
        let job = s
            .wait_for(id, Duration::from_secs(30), |j| {
                j["state"] != "pending" && j["state"] != "running"
            })
            .await;
        assert_eq!(job["state"], "done", "the two ran at once: {job}");
    }

    let locked = "mkdir slot || exit 9; sleep 0.5; rmdir slot";
    let ids = [
        s.enqueue(in_queue("one", locked)).await["job"]["id"].as_i64().unwrap(),
        s.enqueue(in_queue("one", locked)).await["job"]["id"].as_i64().unwrap(),
    ];
    for id in ids {
        let job = s
            .wait_for(id, Duration::from_secs(30), |j| {
                j["state"] != "pending" && j["state"] != "running"
            })
            .await;
        assert_eq!(job["state"], "done", "never two of lane `one` at once: {job}");
    }
    s.stop().await.unwrap();
}

/// serve's worker starts no job of a paused lane, runs the others, and
/// starts it once resumed (the resume wakes it).
async fn pauses(backend: Backend) {
    let s = start_draining_with(backend, 2).await;
    let (status, lane) = s.post_empty("/api/queues/p/pause").await;
    assert_eq!(status, StatusCode::OK, "{lane}");
    let held_back = s.enqueue(in_queue("p", "true")).await["job"]["id"].as_i64().unwrap();
    let other = s.enqueue(in_queue("default", "true")).await["job"]["id"].as_i64().unwrap();
    s.wait_for(other, Duration::from_secs(20), |j| j["state"] == "done").await;
    let (_, job) = s.get(&format!("/api/tasks/outbox/{held_back}")).await;
    assert_eq!(job["state"], "pending", "the older job of the paused lane was passed over: {job}");

    // Paused twice over: resuming the lane leaves the pause of all.
    let (status, _) = s.post_empty("/api/pause").await;
    assert_eq!(status, StatusCode::OK);
    let (_, lane) = s.post_empty("/api/queues/p/resume").await;
    assert_eq!(lane["paused"], Value::Null);
    let also = s.enqueue(in_queue("default", "true")).await["job"]["id"].as_i64().unwrap();
    let resumed_at = slothqueue_core::Clock::now(&slothqueue_core::SystemClock).as_millis();
    let (status, _) = s.post_empty("/api/resume").await;
    assert_eq!(status, StatusCode::OK);
    for id in [held_back, also] {
        let job = s.wait_for(id, Duration::from_secs(20), |j| j["state"] == "done").await;
        let claimed = job["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "claimed")
            .map(|e| e["at"].as_i64().unwrap());
        assert!(claimed >= Some(resumed_at), "#{id} started only after the resume: {job}");
    }
    s.stop().await.unwrap();
}
