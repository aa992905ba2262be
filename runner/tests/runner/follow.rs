//! Follow mode: sleeps until work is due or a wake-up, never busy.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use slothqueue_core::{JobState, NewJob, RunnerActivity, Store, Timestamp};
use slothqueue_runner::{Mode, Runner, RunnerEvent};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

use crate::support::{DEADLINE, Env, Intercepted, drain_mode, env, eventually};

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

/// Waits until the runner sleeps again: an idle record written since
/// `since` (the runner writes one after each job), so that a job added
/// next arrives unannounced.
async fn asleep_since(env: &Env, since: Timestamp) {
    let asleep = tokio::time::timeout(DEADLINE, async {
        loop {
            let records = env.store.runners().await.unwrap();
            if records
                .iter()
                .any(|r| matches!(r.activity, RunnerActivity::Idle { .. }) && r.updated_at >= since)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    assert!(asleep.await.is_ok(), "the runner never went idle");
}

/// Without a wake-up, a job another program added is found by the next
/// poll. The idle wait is a kernel timer, so this takes real time: a poll
/// interval of 100 ms.
#[tokio::test]
async fn follow_finds_unannounced_jobs_at_the_next_poll() {
    let env = env();
    let mut cfg = drain_mode(env.config(), Mode::Follow);
    cfg.poll_interval = Duration::from_millis(100);
    let mut since = env.now();
    let mut running = env.start(env.runner(cfg));
    for round in 0..3 {
        asleep_since(&env, since).await;
        since = env.now();
        let id = env.add(&format!("echo poll {round}"), |j| j).await;
        running
            .events
            .wait_for(
                "the polled job",
                |e| matches!(e, RunnerEvent::Done { job, .. } if *job == id),
            )
            .await;
    }
    running.trigger.trigger();
    let summary = running.finish().await.unwrap();
    assert_eq!(summary.done, 3);
}

/// A follow runner watching its queue file starts a job another handle
/// added without any wake-up call and long before its next poll (an hour
/// here): the file's change woke it. Done three times, so that its own
/// commits (which wake it too) do not swallow a later notification.
#[tokio::test]
async fn a_watched_runner_starts_an_unannounced_job_at_once() {
    let env = env();
    let mut cfg = drain_mode(env.config(), Mode::Follow);
    cfg.watch_file = Some(env.path("queue.db"));
    let other = SqliteStore::open(&env.path("queue.db"), SqliteOptions::default()).unwrap();
    let mut since = env.now();
    let mut running = env.start(env.runner(cfg));
    for round in 0..3 {
        asleep_since(&env, since).await;
        since = env.now();
        let job = NewJob::shell(format!("echo watched {round}"), env.dir.path().to_string_lossy());
        let id = other.push(job, env.now()).await.unwrap().job.id;
        running
            .events
            .wait_for(
                "the job the change announced",
                |e| matches!(e, RunnerEvent::Done { job, .. } if *job == id),
            )
            .await;
    }
    running.trigger.trigger();
    assert_eq!(running.finish().await.unwrap().done, 3);
}

/// A queue file whose folder cannot be watched (the store names a file
/// in a folder that does not exist): the runner says so and finds jobs at
/// its poll, as without a watch.
#[tokio::test]
async fn an_unwatchable_queue_file_is_said_and_polled() {
    let env = env();
    let mut cfg = drain_mode(env.config(), Mode::Follow);
    cfg.watch_file = Some(env.path("queue.db"));
    cfg.poll_interval = Duration::from_millis(100);
    let mut store = Intercepted::new(env.store.clone());
    store.watched_files = Some(vec![env.path("no-such-folder/queue.db")]);
    let mut running = env.start(Runner::new(Arc::new(store), cfg));
    running
        .events
        .wait_for("the warning", |e| {
            matches!(e, RunnerEvent::Warning { message }
                if message.starts_with("cannot watch") && message.contains("start within 100ms"))
        })
        .await;
    let id = env.add("echo polled", |j| j).await;
    running
        .events
        .wait_for("the polled job", |e| matches!(e, RunnerEvent::Done { job, .. } if *job == id))
        .await;
    running.trigger.trigger();
    assert_eq!(running.finish().await.unwrap().done, 1);
}

/// Waiting costs nothing: an idle runner looks at the queue every poll but
/// rewrites its unchanged idle record only once a minute (on redb every
/// record is an fsync), and writes a new one after each job.
#[tokio::test]
async fn an_idle_runner_does_not_rewrite_its_record_every_poll() {
    let env = env();
    let store = Arc::new(Intercepted::new(env.store.clone()));
    let mut cfg = drain_mode(env.config(), Mode::Follow);
    cfg.poll_interval = Duration::from_millis(20);
    let mut running = env.start(slothqueue_runner::Runner::new(store.clone(), cfg));
    let polls = |n| {
        let store = store.clone();
        move || store.next_dues.load(Ordering::Relaxed) >= n
    };
    eventually("ten polls", polls(10)).await;
    // Starting, then one idle record.
    assert_eq!(store.put_runners.load(Ordering::Relaxed), 2);

    let id = env.add("echo one", |j| j).await;
    running
        .events
        .wait_for("the job", |e| matches!(e, RunnerEvent::Done { job, .. } if *job == id))
        .await;
    let after_job = store.next_dues.load(Ordering::Relaxed);
    eventually("ten more polls", polls(after_job + 10)).await;
    // The job's end is news: one more idle record, then silence again.
    assert_eq!(store.put_runners.load(Ordering::Relaxed), 3);
    running.trigger.trigger();
    running.finish().await.unwrap();
}
