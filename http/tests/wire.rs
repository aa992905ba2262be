//! The wire formats held to the code: every key of a job has its row in
//! docs/json.md's job table and its property in the OpenAPI `Job` schema,
//! and what the job, enqueue and stats routes answer is what the document
//! says (the `assert_documented` helper, as the schedule routes use it).
//! A field added to `core::Job` without its docs fails here.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{Backend, assert_documented, start};
use serde_json::{Value, json};
use slothqueue_core::{
    ClaimRequest, Clock, ClockOnly, GpuHold, GpuRequest, Job, JobState, Lease, Owner, Stamp,
    SystemClock, Timestamp,
};

on_both_backends!(answers_match_the_documented_schemas);

/// A job with every field set: a struct literal, so that a field added to
/// `Job` does not compile here until it is given a value (and so a key).
fn fully_set_job() -> Job {
    let at = Timestamp::from_millis(1_796_120_529_284);
    Job {
        id: 3,
        queue: "default".into(),
        kind: "shell".into(),
        payload: json!({ "command": "true", "cwd": "/", "env": {} }),
        priority: 1,
        state: JobState::Running,
        attempts: 1,
        max_attempts: 3,
        max_runtime: Some(Duration::from_secs(300)),
        not_before: at,
        lease: Some(Lease {
            owner: Owner::named("box:1:2:ff"),
            attempt: 1,
            until: at,
            child_pgid: Some(7),
            gpus: vec![GpuHold { index: 0, uuid: "GPU-8d2f4c1a".into() }],
        }),
        idempotency_key: Some("k".into()),
        payload_hash: "00".into(),
        cancel_requested: true,
        last_error: Some("exit code 1".into()),
        result: Some("ok".into()),
        exit_code: Some(0),
        created_at: at,
        started_at: Some(at),
        finished_at: Some(at),
        after: vec![1, 2],
        pending_parents: 1,
        cancelled_by: Some(2),
        held: Some(Stamp::new("ana@laptop", at)),
        gpus: Some(GpuRequest { count: 1, memory: Some(1 << 30) }),
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// The field names in the first column of docs/json.md's job table (the
/// table under `## The job`).
fn documented_job_fields() -> BTreeSet<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/json.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let section = text.split("\n## The job\n").nth(1).expect("docs/json.md has `## The job`");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|row| row.split('|').nth(1))
        .filter_map(|cell| cell.trim().strip_prefix('`')?.strip_suffix('`').map(str::to_owned))
        .collect()
}

#[test]
fn every_key_of_a_job_has_its_row_in_docs_json_md() {
    let job = serde_json::to_value(fully_set_job()).unwrap();
    let documented = documented_job_fields();
    assert!(documented.contains("id") && documented.contains("held"), "{documented:?}");
    let missing: Vec<String> = keys(&job).difference(&documented).cloned().collect();
    assert!(
        missing.is_empty(),
        "job fields without a row in docs/json.md's job table: {missing:?}"
    );
    let stale: Vec<String> = documented.difference(&keys(&job)).cloned().collect();
    assert!(stale.is_empty(), "rows of docs/json.md's job table that no job has: {stale:?}");
}

#[test]
fn every_key_of_a_job_is_in_the_openapi_job_schema() {
    let doc = slothqueue_http::openapi();
    assert_documented(&doc, "Job", &serde_json::to_value(fully_set_job()).unwrap());
}

/// What the routes answer, each held to its schema: the enqueue answer,
/// a job with parents and a hold, one cancelled by its parent, a running
/// one with its lease, the job with its events and why, the stats.
async fn answers_match_the_documented_schemas(backend: Backend) {
    let s = start(backend).await;
    let (_, doc) = s.get("/api/openapi.json").await;
    let shell = |cmd: &str| json!({ "kind": "shell", "payload": { "command": cmd } });
    let (_, parent) = s.post("/api/tasks/enqueue", &shell("true")).await;
    assert_documented(&doc, "EnqueueResponse", &parent);
    let parent = parent["job"]["id"].as_i64().unwrap();
    let mut child = shell("echo child");
    child["after"] = json!([parent]);
    let (_, child) = s.post("/api/tasks/enqueue", &child).await;
    let child = child["job"]["id"].as_i64().unwrap();
    let (_, held) = s.post_empty(&format!("/api/tasks/outbox/{child}/hold")).await;
    assert!(held["held"].is_object() && held["pending_parents"] == 1, "{held}");
    assert_documented(&doc, "Job", &held);
    let (_, shown) = s.get(&format!("/api/tasks/outbox/{child}")).await;
    assert!(shown["why"].as_str().unwrap().starts_with("held since "), "{shown}");
    assert_documented(&doc, "JobWithEvents", &shown);

    // A running job, with its lease.
    let owner = Owner::named("test");
    let claim = ClaimRequest::new(owner, Arc::new(ClockOnly));
    let claimed = s.store.claim(&claim, SystemClock.now()).await.unwrap().unwrap();
    assert_eq!(claimed.job.id, parent);
    let (_, running) = s.get(&format!("/api/tasks/outbox/{parent}")).await;
    assert!(running["lease"].is_object() && running["why"].is_string(), "{running}");
    assert_documented(&doc, "JobWithEvents", &running);

    // The parent cancelled: the child with it, naming it.
    s.post_empty(&format!("/api/tasks/outbox/{child}/release")).await;
    let (_, cancelled) = s.post_empty(&format!("/api/tasks/outbox/{parent}/cancel")).await;
    assert_documented(&doc, "Job", &cancelled);
    let lonely = s.post("/api/tasks/enqueue", &json!({ "kind": "resize", "payload": {} })).await.1;
    let (_, waiting) = s.get(&format!("/api/tasks/outbox/{}", lonely["job"]["id"])).await;
    assert_documented(&doc, "JobWithEvents", &waiting);

    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert!(!stats["unserved"].as_array().unwrap().is_empty(), "{stats}");
    assert_documented(&doc, "Stats", &stats);
    let (_, page) = s.get("/api/tasks/outbox").await;
    assert_documented(&doc, "JobPage", &page);
    for job in page["jobs"].as_array().unwrap() {
        assert_documented(&doc, "ListedJob", job);
    }
    s.stop().await.unwrap();
}
