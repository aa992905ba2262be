//! Follow mode: sleeps until work is due or a wake-up, never busy.

use std::time::Duration;

use slothqueue_core::{JobState, NewJob, RunnerActivity};
use slothqueue_runner::{Mode, RunnerEvent};

use crate::support::{DEADLINE, drain_mode, env, eventually};

#[tokio::test]
async fn follow_wakes_on_the_waker_and_at_the_next_due_time() {
    let env = env();
    let runner = env.runner(drain_mode(env.config(), Mode::Follow));
    let waker = runner.waker();
    let mut running = env.start(runner);

    // Idle, and recorded as such (the poll interval is an hour).
    let store = env.store.clone();
    let mut idle = false;
    for _ in 0..3000 {
        let records = store.runners().await.unwrap();
        if records.iter().any(|r| matches!(r.activity, RunnerActivity::Idle { .. })) {
            idle = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(idle, "the runner never recorded itself idle");

    let now_job = env.add("echo now", |j| j).await;
    waker.notify_one();
    running
        .events
        .wait_for(
            "the woken job",
            |e| matches!(e, RunnerEvent::Done { job, .. } if *job == now_job),
        )
        .await;

    // A job due shortly is run when due, without a wake-up.
    let due = env.now().saturating_add(Duration::from_millis(300));
    let later = env
        .store
        .push(
            NewJob::shell("echo later", env.dir.path().to_string_lossy()).not_before(due),
            env.now(),
        )
        .await
        .unwrap()
        .job
        .id;
    // Wake once so the runner learns of it; it then sleeps until it is due.
    waker.notify_one();
    running
        .events
        .wait_for(
            "the delayed job",
            |e| matches!(e, RunnerEvent::Done { job, .. } if *job == later),
        )
        .await;
    let finished = env.job(later).await;
    assert!(finished.started_at.unwrap() >= due, "started before it was due");

    running.trigger.trigger();
    let summary = running.finish().await.unwrap();
    assert_eq!((summary.done, summary.exit_code()), (2, 130));
    assert_eq!(running.events.lines().last().unwrap(), "interrupted: 2 done, 0 failed");
    eventually("the record removed", || true).await;
    assert!(env.store.runners().await.unwrap().is_empty());
    assert_eq!(env.job(now_job).await.state, JobState::Done);
}

/// Without a wake-up, a job another program added is found by the next
/// poll. The idle wait is a kernel timer, so this takes real time: a poll
/// interval of 100 ms.
#[tokio::test]
async fn follow_finds_unannounced_jobs_at_the_next_poll() {
    let env = env();
    let mut cfg = drain_mode(env.config(), Mode::Follow);
    cfg.poll_interval = Duration::from_millis(100);
    let mut running = env.start(env.runner(cfg));
    let mut since = env.now();
    for round in 0..3 {
        // Wait until the runner sleeps again (an idle record newer than the
        // last job), so that the job arrives unannounced.
        let asleep = tokio::time::timeout(DEADLINE, async {
            loop {
                let records = env.store.runners().await.unwrap();
                if records.iter().any(
                    |r| matches!(r.activity, RunnerActivity::Idle { until: Some(t) } if t > since),
                ) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        assert!(asleep.await.is_ok(), "the runner never went idle");
        let id = env.add(&format!("echo poll {round}"), |j| j).await;
        running
            .events
            .wait_for(
                "the polled job",
                |e| matches!(e, RunnerEvent::Done { job, .. } if *job == id),
            )
            .await;
        since = env.now();
    }
    running.trigger.trigger();
    let summary = running.finish().await.unwrap();
    assert_eq!(summary.done, 3);
}
