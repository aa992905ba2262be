//! Schedules in the runner's loop: a drain fires what is due before it
//! drains, two runners racing fire each slot once, and follow mode sleeps
//! until the next tick (the poll interval is an hour here, so a tick that
//! fires proves the loop woke for it).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::schedule::{self, CatchUp, NewSchedule, Overlap, Spec};
use slothqueue_core::{JobState, ListFilter, NewJob, Store, StoreError, Timestamp};
use slothqueue_runner::{Mode, RunnerEvent};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

use crate::support::{Env, Intercepted, drain_mode, env};

fn every(env: &Env, key: &str, period: Duration, command: &str) -> NewSchedule {
    NewSchedule {
        key: key.into(),
        spec: Spec::every(period).unwrap(),
        zone: "UTC".into(),
        catch_up: CatchUp::Once,
        overlap: Overlap::Skip,
        job: NewJob::shell(command, env.dir.path().to_string_lossy()),
    }
}

async fn jobs(store: &dyn Store) -> Vec<slothqueue_core::Job> {
    store.list(&ListFilter::default()).await.unwrap()
}

#[tokio::test]
async fn a_drain_fires_the_due_tick_then_runs_its_job() {
    let env = env();
    // Created an hour ago, every ten minutes: six slots passed with no
    // runner; catch-up once runs the latest.
    let hour_ago = env.now().saturating_sub(Duration::from_secs(3600));
    let s = every(&env, "sync", Duration::from_secs(600), "echo synced");
    env.store.put_schedule(&s, hour_ago).await.unwrap();
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    let latest = Timestamp::from_millis(hour_ago.as_millis() + 3_600_000);
    let all = jobs(env.store.as_ref()).await;
    assert_eq!(all.len(), 1, "{lines:?}");
    let job = &all[0];
    assert_eq!(job.idempotency_key.as_deref(), Some(schedule::tick_key("sync", latest).as_str()));
    assert_eq!(job.state, JobState::Done, "{lines:?}");
    assert_eq!(job.result.as_deref(), Some("synced"));
    assert_eq!(
        lines[0],
        format!(
            "schedule sync, slot {}: queued job #{} (5 missed slots passed over)",
            schedule::tick_key("", latest).trim_start_matches('@'),
            job.id
        ),
        "{lines:?}"
    );
    assert_eq!(lines.last().unwrap(), "finished: 1 done, 0 failed");
    assert_eq!(summary.exit_code(), 0);

    // A second drain at once: that slot is decided, nothing fires again.
    let (_, lines) = env.drain(env.runner(env.config())).await;
    assert_eq!(jobs(env.store.as_ref()).await.len(), 1, "{lines:?}");
}

#[tokio::test]
async fn two_runners_draining_at_once_fire_each_slot_once() {
    let env = env();
    let day_ago = env.now().saturating_sub(Duration::from_secs(86_400));
    for key in ["a", "b", "c"] {
        let s = every(&env, key, Duration::from_secs(60), "true");
        env.store.put_schedule(&s, day_ago).await.unwrap();
    }
    // A second handle on the same file, as a second process would have.
    let other: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&env.path("queue.db"), SqliteOptions::default()).unwrap());
    let mut first = env.start(env.runner(env.config()));
    let mut second = env.start(slothqueue_runner::Runner::new(other.clone(), env.config()));
    first.finish().await.unwrap();
    second.finish().await.unwrap();
    let all = jobs(env.store.as_ref()).await;
    let keys: BTreeSet<String> = all.iter().filter_map(|j| j.idempotency_key.clone()).collect();
    assert_eq!(all.len(), 3, "one tick per schedule: {keys:?}");
    assert_eq!(keys.len(), 3);
    assert!(all.iter().all(|j| j.state == JobState::Done));
}

#[tokio::test]
async fn follow_sleeps_until_the_next_tick() {
    let env = env();
    let s = every(&env, "beat", Duration::from_secs(1), "true");
    env.store.put_schedule(&s, env.now()).await.unwrap();
    let mut running = env.start(env.runner(drain_mode(env.config(), Mode::Follow)));
    let mut done = Vec::new();
    while done.len() < 2 {
        if let RunnerEvent::Done { job, .. } = running
            .events
            .wait_for("a tick's job done", |e| matches!(e, RunnerEvent::Done { .. }))
            .await
        {
            done.push(job);
        }
    }
    running.trigger.trigger();
    running.finish().await.unwrap();
    let all = jobs(env.store.as_ref()).await;
    let slots: BTreeSet<Timestamp> = all
        .iter()
        .filter_map(|j| j.idempotency_key.as_deref().and_then(schedule::parse_tick_key))
        .map(|(_, slot)| slot)
        .collect();
    assert_eq!(slots.len(), all.len(), "one job per slot");
    assert!(slots.len() >= 2, "{slots:?}");
    // Each a real slot: a whole number of periods after creation.
    let created = env.store.schedules().await.unwrap()[0].created_at;
    for slot in &slots {
        let since = slot.as_millis() - created.as_millis();
        assert!(since > 0 && since % 1000 == 0, "{slot:?} after {created:?}");
    }
}

#[tokio::test]
async fn a_schedule_the_store_refuses_to_fire_never_stops_the_runner() {
    let env = env();
    let hour_ago = env.now().saturating_sub(Duration::from_secs(3600));
    let s = every(&env, "sync", Duration::from_secs(600), "echo synced");
    env.store.put_schedule(&s, hour_ago).await.unwrap();
    let job = env.add("echo other", |j| j).await;
    let mut store = Intercepted::new(env.store.clone());
    store.before_fire = Box::new(|| Err(StoreError::InvalidInput("a tick's job refused".into())));
    let runner = slothqueue_runner::Runner::new(Arc::new(store), env.config());
    let (summary, lines) = env.drain(runner).await;
    assert_eq!(env.job(job).await.state, JobState::Done, "{lines:?}");
    let warned: Vec<&String> =
        lines.iter().filter(|l| l.contains("cannot fire the schedules")).collect();
    assert_eq!(warned.len(), 1, "warned once: {lines:?}");
    assert!(warned[0].contains("a tick's job refused"), "{lines:?}");
    assert_eq!(lines.last().unwrap(), "finished: 1 done, 0 failed");
    assert_eq!(summary.exit_code(), 0);
}
