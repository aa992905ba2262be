//! The read model against a real store: what `show` and `status` say is
//! read once, and the jobs counted ahead of a job are only those a runner
//! able to take it would take first.

#![allow(clippy::unwrap_used, reason = "a test's unwrap is its assertion")]

use slothqueue_core::{
    LaneChange, LaneScope, Liveness, NewJob, Owner, RunnerActivity, RunnerRecord, Stamp, Store,
    Timestamp,
};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};
use slothqueue_view::{LaneState, Look};

const NOW: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn alive(_: &Owner) -> Liveness {
    Liveness::Alive
}

fn look(store: &dyn Store) -> Look<'_> {
    Look { store, now: NOW, judge: &alive, this_host: "box" }
}

/// A live runner on `box` serving `queues` (all when empty) with
/// handlers for `kinds`.
fn runner(id: &str, queues: &[&str], kinds: &[&str]) -> RunnerRecord {
    RunnerRecord {
        owner: Owner { pid: Some(42), host: "box".into(), ..Owner::named(id) },
        queues: queues.iter().map(|q| (*q).to_owned()).collect(),
        kinds: Some(kinds.iter().map(|k| (*k).to_owned()).collect()),
        refused: Vec::new(),
        started_at: NOW,
        updated_at: NOW,
        activity: RunnerActivity::Idle { until: None },
        slots: 1,
        running: Vec::new(),
        gpus: None,
    }
}

async fn push(store: &dyn Store, new: NewJob) -> i64 {
    store.push(new.not_before(NOW), NOW).await.unwrap().job.id
}

#[tokio::test]
async fn only_jobs_a_capable_runner_takes_first_are_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("q.db"), SqliteOptions::default()).unwrap();
    let store: &dyn Store = &store;
    // Ahead in claim order: two shell jobs of `default`, one `resize` job
    // (no live runner has its handler), one shell job of `other` (no
    // runner of `default` serves it).
    push(store, NewJob::shell("true", "/").priority(5)).await;
    push(store, NewJob::shell("true", "/").priority(5)).await;
    push(store, NewJob::new("resize", serde_json::json!({})).priority(5)).await;
    push(store, NewJob::shell("true", "/").priority(5).queue("other")).await;
    let mine = push(store, NewJob::shell("true", "/")).await;

    let view = slothqueue_view::job(&look(store), mine).await.unwrap();
    assert_eq!(view.ahead, 4, "no runner recorded: every due job before it");

    store.put_runner(&runner("box:42:1:aa", &["default"], &["shell"])).await.unwrap();
    let view = slothqueue_view::job(&look(store), mine).await.unwrap();
    assert_eq!(view.ahead, 2, "only the shell jobs of `default`");
    assert_eq!(view.why.as_deref(), Some("waiting behind 2 due job(s) of higher priority"));
    assert_eq!(view.why_label(), "why");
    assert_eq!(view.runners.len(), 1);
    assert!(view.runners[0].live);
}

#[tokio::test]
async fn jobs_ahead_of_the_same_priority_are_not_called_of_a_higher_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("q.db"), SqliteOptions::default()).unwrap();
    let store: &dyn Store = &store;
    store.put_runner(&runner("box:42:1:aa", &["default"], &["shell"])).await.unwrap();
    push(store, NewJob::shell("true", "/")).await;
    let mine = push(store, NewJob::shell("true", "/")).await;
    let view = slothqueue_view::job(&look(store), mine).await.unwrap();
    assert_eq!(
        view.why.as_deref(),
        Some(
            "waiting behind 1 due job(s) ahead of it in the queue (the same priority, due or added earlier)"
        )
    );
    push(store, NewJob::shell("true", "/").priority(3)).await;
    let view = slothqueue_view::job(&look(store), mine).await.unwrap();
    assert_eq!(
        view.why.as_deref(),
        Some(
            "waiting behind 2 due job(s): 1 of higher priority, 1 of the same priority due or added earlier"
        )
    );
}

#[tokio::test]
async fn a_paused_lane_is_the_reason_and_the_status_counts_its_lane() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("q.db"), SqliteOptions::default()).unwrap();
    let store: &dyn Store = &store;
    let id = push(store, NewJob::shell("true", "/")).await;
    let stamp = Stamp::new("ana@laptop", NOW);
    let scope = LaneScope::Queue("default".into());
    store.change_lane(&scope, &LaneChange::Pause(stamp.clone())).await.unwrap();

    let view = slothqueue_view::job(&look(store), id).await.unwrap();
    assert_eq!(view.lane, LaneState::Paused { stamp });
    let why = view.why.unwrap();
    assert!(why.starts_with("its queue default is paused since "), "{why}");

    let status = slothqueue_view::status(&look(store)).await.unwrap();
    assert!(status.exists);
    assert_eq!(status.stats.pending, 1);
    let lane = status.queues.as_ref().and_then(|q| q.get("default")).unwrap();
    assert!(lane.paused.is_some() && !lane.is_full());
    assert_eq!(status.unserved.len(), 1, "no runner alive: the pending job is unserved");
    assert!(status.live.is_empty());
}

#[tokio::test]
async fn a_missing_job_is_the_stores_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("q.db"), SqliteOptions::default()).unwrap();
    let err = slothqueue_view::job(&look(&store), 9).await.unwrap_err();
    assert!(
        matches!(err.into_store(), slothqueue_core::StoreError::NotFound(9)),
        "a face maps it as it maps the store's refusals"
    );
}
