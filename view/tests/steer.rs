//! Steering against a real store: what a cancel takes with it is what the
//! cancel then takes; the bulk actions change every job of their queue and
//! state through the single-job operation, and no other; the history
//! counts what the store says ended in the hour.

#![allow(clippy::unwrap_used, reason = "a test's unwrap is its assertion")]

use std::time::Duration;

use slothqueue_core::{
    ClaimRequest, ClockOnly, Completion, Failure, JobId, JobState, NewJob, Owner, Stamp, Store,
    Timestamp,
};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};
use slothqueue_view::{history, steer};

const NOW: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn open(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(&dir.path().join("q.db"), SqliteOptions::default()).unwrap()
}

async fn push(store: &dyn Store, new: NewJob) -> JobId {
    store.push(new, NOW).await.unwrap().job.id
}

fn shell(cmd: &str) -> NewJob {
    NewJob::shell(cmd, "/tmp")
}

/// Claims the next due job for `w1`, which must be `id`.
async fn claim(store: &dyn Store, id: JobId, at: Timestamp) -> slothqueue_core::Claimed {
    let c = store
        .claim(&ClaimRequest::new(Owner::named("w1"), std::sync::Arc::new(ClockOnly)), at)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.job.id, id);
    c
}

fn ids(jobs: &[slothqueue_core::Job]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

#[tokio::test]
async fn a_cancel_takes_the_unfinished_jobs_waiting_on_it_transitively() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let s: &dyn Store = &store;
    let root = push(s, shell("echo root")).await;
    let child = push(s, shell("echo child").after(root)).await;
    let grandchild = push(s, shell("echo grandchild").after(child)).await;
    let other = push(s, shell("echo other")).await;
    let both = push(s, shell("echo both").after(other).after(child)).await;
    let lone = push(s, shell("echo lone")).await;

    let takes = steer::cancel_takes(s, root, NOW).await.unwrap();
    assert_eq!(ids(&takes), [child, grandchild, both]);
    assert!(takes.iter().all(|j| j.state == JobState::Pending), "as they are now");
    assert_eq!(
        steer::cancel_takes_words(&takes),
        format!("#{child} (waiting), #{grandchild} (waiting) and #{both} (waiting)")
    );
    assert_eq!(steer::cancel_takes(s, lone, NOW).await.unwrap(), []);
    assert_eq!(steer::cancel_takes_words(&[]), "");

    // A running job takes the same, once its runner stops it.
    claim(s, root, NOW).await;
    assert_eq!(ids(&steer::cancel_takes(s, root, NOW).await.unwrap()), [child, grandchild, both]);

    // The preview is what the cancel does: cancel the child.
    let preview = ids(&steer::cancel_takes(s, child, NOW).await.unwrap());
    assert_eq!(preview, [grandchild, both]);
    s.cancel(child, NOW).await.unwrap();
    for id in preview {
        assert_eq!(s.get(id).await.unwrap().state, JobState::Cancelled);
    }
    assert_eq!(steer::cancel_takes(s, child, NOW).await.unwrap(), [], "finished: nothing");
    assert!(steer::cancel_takes(s, 999, NOW).await.is_err(), "no such job");
}

#[tokio::test]
async fn retry_failed_retries_each_failed_job_of_the_queue_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let s: &dyn Store = &store;
    let mut failed = Vec::new();
    for (cmd, queue) in [("a", "web"), ("b", "web"), ("c", "backups")] {
        let id = push(s, shell(cmd).queue(queue).max_attempts(1)).await;
        let c = claim(s, id, NOW).await;
        s.fail(id, &c.fence, Failure::default(), NOW).await.unwrap();
        failed.push(id);
    }
    let after_a = push(s, shell("after a").queue("web").after(failed[0])).await;
    let done = push(s, shell("done").queue("web")).await;
    let c = claim(s, done, NOW).await;
    s.complete(done, &c.fence, Completion::default(), NOW).await.unwrap();

    let bulk = steer::retry_failed(s, "web", NOW).await.unwrap();
    assert_eq!(bulk.ids, [failed[0], failed[1]]);
    assert_eq!(bulk.count, 2);
    assert!(bulk.skipped.is_empty());
    for id in &failed[..2] {
        assert_eq!(s.get(*id).await.unwrap().state, JobState::Pending);
    }
    assert_eq!(s.get(failed[2]).await.unwrap().state, JobState::Failed, "another queue");
    assert_eq!(s.get(done).await.unwrap().state, JobState::Done);
    assert!(s.get(after_a).await.unwrap().is_waiting_on_parents(), "back with its parent");
    assert_eq!(steer::retry_failed(s, "web", NOW).await.unwrap().count, 0, "none left");
}

#[tokio::test]
async fn cancel_pending_cancels_held_and_waiting_jobs_of_the_queue_too() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let s: &dyn Store = &store;
    let running = push(s, shell("running").queue("web")).await;
    claim(s, running, NOW).await;
    let parent = push(s, shell("parent").queue("web")).await;
    let waiting = push(s, shell("waiting").queue("web").after(parent)).await;
    let held = push(s, shell("held").queue("web")).await;
    s.hold(held, Stamp::new("ana", NOW), NOW).await.unwrap();
    let elsewhere = push(s, shell("elsewhere").queue("backups")).await;
    let downstream = push(s, shell("downstream").queue("backups").after(parent)).await;

    let bulk = steer::cancel_pending(s, "web", NOW).await.unwrap();
    assert_eq!(bulk.ids, [parent, waiting, held], "the waiting one went with its parent");
    assert_eq!(bulk.count, 3);
    for id in [parent, waiting, held, downstream] {
        assert_eq!(s.get(id).await.unwrap().state, JobState::Cancelled, "#{id}");
    }
    assert_eq!(s.get(running).await.unwrap().state, JobState::Running, "not pending");
    assert!(!s.get(running).await.unwrap().cancel_requested);
    assert_eq!(s.get(elsewhere).await.unwrap().state, JobState::Pending, "another queue");
}

#[tokio::test]
async fn the_history_counts_the_jobs_that_ended_in_each_minute() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let s: &dyn Store = &store;
    let at = |secs: u64| NOW.saturating_add(Duration::from_secs(secs));
    let done = push(s, shell("done")).await;
    let failed = push(s, shell("failed").max_attempts(1)).await;
    let cancelled = push(s, shell("cancelled").not_before(at(3600))).await;
    let c = claim(s, done, NOW).await;
    s.complete(done, &c.fence, Completion::default(), at(60)).await.unwrap();
    let c = claim(s, failed, at(60)).await;
    s.fail(failed, &c.fence, Failure::default(), at(125)).await.unwrap();
    s.cancel(cancelled, at(130)).await.unwrap();

    let now = at(150);
    let h = history::read(s, now).await.unwrap();
    assert_eq!(h.since, history::since(now).as_millis());
    assert_eq!(h.minutes.len(), 60);
    let counted: Vec<(i64, u64, u64)> = h
        .minutes
        .iter()
        .filter(|m| m.done + m.failed > 0)
        .map(|m| (m.at, m.done, m.failed))
        .collect();
    let minute = |t: Timestamp| t.as_millis() / 60_000 * 60_000;
    assert_eq!(counted, [(minute(at(60)), 1, 0), (minute(at(125)), 0, 1)]);
    let later = history::read(s, at(3 * 3600)).await.unwrap();
    assert!(later.minutes.iter().all(|m| m.done + m.failed == 0), "an hour later: none");
}
