//! The routes the page steers the queue with, on both backends: search
//! and the held/waiting filters of the list with each row's shown state,
//! what a cancel takes with it, the bulk actions, and the history. Every
//! answer is checked against its OpenAPI schema too.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]

mod common;

use std::sync::Arc;

use common::{Backend, Server, assert_documented, start};
use reqwest::StatusCode;
use serde_json::{Value, json};
use slothqueue_core::{ClaimRequest, Clock, ClockOnly, Completion, Failure, Owner, SystemClock};

on_both_backends!(
    search_and_shown_states_in_the_list,
    dependents_name_what_a_cancel_takes,
    retry_failed_and_cancel_pending_of_a_queue,
    clear_removes_finished_jobs,
    history_counts_the_last_hour,
);

fn shell(cmd: &str) -> Value {
    json!({ "kind": "shell", "payload": { "command": cmd } })
}

async fn add(s: &Server, body: Value) -> i64 {
    s.enqueue(body).await["job"]["id"].as_i64().unwrap()
}

async fn doc(s: &Server) -> Value {
    s.get("/api/openapi.json").await.1
}

/// The ids of a list answer, in its order.
fn ids(page: &Value) -> Vec<i64> {
    page["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect()
}

async fn list(s: &Server, query: &str) -> Value {
    let (status, page) = s.get(&format!("/api/tasks/outbox?{query}")).await;
    assert_eq!(status, StatusCode::OK, "{query}: {page}");
    page
}

/// Claims the next due job, which must be `id`, and ends it as `end` says.
async fn claim(s: &Server, id: i64) -> slothqueue_core::Claimed {
    let claim = ClaimRequest::new(Owner::named("test"), Arc::new(ClockOnly));
    let c = s.store.claim(&claim, SystemClock.now()).await.unwrap().unwrap();
    assert_eq!(c.job.id, id);
    c
}

async fn fail(s: &Server, id: i64) {
    let c = claim(s, id).await;
    s.store.fail(id, &c.fence, Failure::default(), SystemClock.now()).await.unwrap();
}

async fn complete(s: &Server, id: i64) {
    let c = claim(s, id).await;
    s.store.complete(id, &c.fence, Completion::default(), SystemClock.now()).await.unwrap();
}

async fn search_and_shown_states_in_the_list(backend: Backend) {
    let s = start(backend).await;
    let doc = doc(&s).await;
    let parent = add(&s, shell("make backup-needle")).await;
    let waiting = add(
        &s,
        json!({ "kind": "shell", "payload": { "command": "echo one" }, "after": [parent] }),
    )
    .await;
    let two = add(&s, json!({ "kind": "shell", "payload": { "command": "echo two" }, "after": [parent, waiting] })).await;
    let held = add(&s, shell("echo held needle")).await;
    let (status, _) = s.post_empty(&format!("/api/tasks/outbox/{held}/hold")).await;
    assert_eq!(status, StatusCode::OK);
    let keyed =
        add(&s, json!({ "kind": "mail", "payload": {}, "idempotency_key": "needle-7" })).await;

    let page = list(&s, "search=needle").await;
    assert_eq!(ids(&page), [keyed, held, parent], "command, key; not the others");
    let page = list(&s, "search=Needle").await;
    assert_eq!(ids(&page), Vec::<i64>::new(), "case-sensitive");
    let page = list(&s, "search=needle&limit=1").await;
    assert_eq!(ids(&page), [keyed]);
    let next = page["next_cursor"].as_i64().unwrap();
    assert_eq!(ids(&list(&s, &format!("search=needle&limit=1&cursor={next}")).await), [held]);
    assert_eq!(ids(&list(&s, "search=needle&kind=shell").await), [held, parent]);

    assert_eq!(ids(&list(&s, "state=held").await), [held]);
    assert_eq!(ids(&list(&s, "state=waiting").await), [two, waiting]);
    assert_eq!(ids(&list(&s, "state=pending").await), [keyed, held, two, waiting, parent]);
    assert_eq!(ids(&list(&s, "state=waiting&search=two").await), [two]);

    let page = list(&s, "").await;
    let rows: Vec<(i64, &str, Option<&str>)> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_i64().unwrap(),
                j["shown_state"].as_str().unwrap(),
                j["waiting_on"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (keyed, "pending", None),
            (held, "held", None),
            (two, "waiting", Some("after 2 jobs")),
            (waiting, "waiting", Some(&*format!("after #{parent}"))),
            (parent, "pending", None),
        ]
    );
    assert_eq!(page["jobs"][2]["state"], "pending", "the state itself stays");
    assert_documented(&doc, "JobPage", &page);
    for job in page["jobs"].as_array().unwrap() {
        assert_documented(&doc, "ListedJob", job);
    }

    let (status, err) = s.get("/api/tasks/outbox?state=sleeping").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(err["error"].as_str().unwrap().contains("held or waiting"), "{err}");
    s.stop().await.unwrap();
}

async fn dependents_name_what_a_cancel_takes(backend: Backend) {
    let s = start(backend).await;
    let doc = doc(&s).await;
    let root = add(&s, shell("make all")).await;
    let child =
        add(&s, json!({ "kind": "shell", "payload": { "command": "make test" }, "after": [root] }))
            .await;
    let grandchild = add(&s, json!({ "kind": "deploy", "payload": {}, "after": [child] })).await;
    let lone = add(&s, shell("echo lone")).await;

    let (status, takes) = s.get(&format!("/api/tasks/outbox/{root}/dependents")).await;
    assert_eq!(status, StatusCode::OK, "{takes}");
    assert_eq!(
        takes,
        json!({
            "jobs": [
                { "id": child, "shown_state": "waiting", "command_or_kind": "make test" },
                { "id": grandchild, "shown_state": "waiting", "command_or_kind": "deploy" },
            ],
            "words": format!("#{child} (waiting) and #{grandchild} (waiting)"),
        })
    );
    assert_documented(&doc, "CancelTakes", &takes);
    let (_, none) = s.get(&format!("/api/tasks/outbox/{lone}/dependents")).await;
    assert_eq!(none, json!({ "jobs": [], "words": "" }));

    // Running: the same jobs, which go once its runner has stopped it.
    claim(&s, root).await;
    let (_, running) = s.get(&format!("/api/tasks/outbox/{root}/dependents")).await;
    assert_eq!(running["jobs"], takes["jobs"]);

    let (status, _) = s.post_empty(&format!("/api/tasks/outbox/{child}/cancel")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(s.store.get(grandchild).await.unwrap().state, slothqueue_core::JobState::Cancelled);
    let (_, after) = s.get(&format!("/api/tasks/outbox/{root}/dependents")).await;
    assert_eq!(after, json!({ "jobs": [], "words": "" }), "nothing unfinished is left to take");

    let (status, _) = s.get("/api/tasks/outbox/999/dependents").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    s.stop().await.unwrap();
}

async fn retry_failed_and_cancel_pending_of_a_queue(backend: Backend) {
    let s = start(backend).await;
    let doc = doc(&s).await;
    let on = |cmd: &str, queue: &str| json!({ "kind": "shell", "payload": { "command": cmd }, "queue": queue, "max_attempts": 1 });
    let web_a = add(&s, on("a", "web")).await;
    let web_b = add(&s, on("b", "web")).await;
    let backups = add(&s, on("c", "backups")).await;
    for id in [web_a, web_b, backups] {
        fail(&s, id).await;
    }
    let (status, bulk) = s.post_empty("/api/queues/web/retry-failed").await;
    assert_eq!(status, StatusCode::OK, "{bulk}");
    assert_eq!(bulk, json!({ "count": 2, "ids": [web_a, web_b] }));
    assert_documented(&doc, "Bulk", &bulk);
    let (_, failed) = s.get("/api/tasks/outbox?state=failed").await;
    assert_eq!(ids(&failed), [backups], "another queue's failed job stays failed");
    let (_, again) = s.post_empty("/api/queues/web/retry-failed").await;
    assert_eq!(again, json!({ "count": 0, "ids": [] }));

    let held = add(&s, on("held", "web")).await;
    s.post_empty(&format!("/api/tasks/outbox/{held}/hold")).await;
    let waiting = add(
        &s,
        json!({ "kind": "shell", "payload": { "command": "w" }, "queue": "web", "after": [web_a] }),
    )
    .await;
    let running = claim(&s, web_a).await.job.id;
    let (status, bulk) = s.post_empty("/api/queues/web/cancel-pending").await;
    assert_eq!(status, StatusCode::OK, "{bulk}");
    assert_eq!(bulk, json!({ "count": 3, "ids": [web_b, held, waiting] }));
    let (_, pending) = s.get("/api/tasks/outbox?state=pending&queue=web").await;
    assert_eq!(ids(&pending), Vec::<i64>::new());
    let job = s.store.get(running).await.unwrap();
    assert_eq!(job.state, slothqueue_core::JobState::Running, "a running job is not pending");
    assert!(!job.cancel_requested);

    let (status, err) = s.post_empty("/api/queues/no%20such/retry-failed").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    s.stop().await.unwrap();
}

async fn clear_removes_finished_jobs(backend: Backend) {
    let s = start(backend).await;
    let done = add(&s, shell("done")).await;
    complete(&s, done).await;
    let failed =
        add(&s, json!({ "kind": "shell", "payload": { "command": "f" }, "max_attempts": 1 })).await;
    fail(&s, failed).await;
    let cancelled = add(&s, shell("cancelled")).await;
    s.post_empty(&format!("/api/tasks/outbox/{cancelled}/cancel")).await;
    let pending = add(&s, shell("pending")).await;

    let (status, err) = s.post("/api/clear", &json!({ "queue": "default" })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert!(err["error"].as_str().unwrap().contains("every queue"), "{err}");
    assert_eq!(ids(&list(&s, "").await).len(), 4, "a refused clear removes nothing");

    // The cleared jobs' logs go with them; a kept job's log stays.
    let logs = slothqueue_http::log_dir_beside(&s.queue_path);
    std::fs::create_dir_all(&logs).unwrap();
    for id in [done, pending] {
        std::fs::write(logs.join(format!("{id}.log")), "out\n").unwrap();
    }
    let (status, bulk) = s.post_empty("/api/clear").await;
    assert_eq!(status, StatusCode::OK, "{bulk}");
    assert_eq!(bulk, json!({ "count": 3, "ids": [done, failed, cancelled] }));
    assert_eq!(ids(&list(&s, "").await), [pending]);
    assert!(!logs.join(format!("{done}.log")).exists(), "a cleared job's log is removed");
    assert!(logs.join(format!("{pending}.log")).exists(), "a kept job's log stays");
    let (status, bulk) = s.post("/api/clear", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{bulk}");
    assert_eq!(bulk, json!({ "count": 0, "ids": [] }));
    s.stop().await.unwrap();
}

async fn history_counts_the_last_hour(backend: Backend) {
    let s = start(backend).await;
    let doc = doc(&s).await;
    let (status, empty) = s.get("/api/history").await;
    assert_eq!(status, StatusCode::OK, "{empty}");
    assert_documented(&doc, "History", &empty);
    let minutes = empty["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 60);
    assert_eq!(empty["since"], minutes[0]["at"]);
    assert!(minutes.iter().all(|m| m["done"] == 0 && m["failed"] == 0));

    for _ in 0..2 {
        let id = add(&s, shell("ok")).await;
        complete(&s, id).await;
    }
    let id =
        add(&s, json!({ "kind": "shell", "payload": { "command": "f" }, "max_attempts": 1 })).await;
    fail(&s, id).await;
    let id = add(&s, shell("cancelled")).await;
    s.post_empty(&format!("/api/tasks/outbox/{id}/cancel")).await;

    let (_, h) = s.get("/api/history").await;
    let sum = |field: &str| -> u64 {
        h["minutes"].as_array().unwrap().iter().map(|m| m[field].as_u64().unwrap()).sum()
    };
    assert_eq!((sum("done"), sum("failed")), (2, 1), "{h}");
    let last = &h["minutes"][59];
    let now = SystemClock.now().as_millis();
    assert!(last["at"].as_i64().unwrap() <= now && now - last["at"].as_i64().unwrap() < 61_000);
    s.stop().await.unwrap();
}
