//! Lane waits: a claim that takes nothing because a lane is paused or full
//! makes the runner read the queues report, say which lanes hold due jobs,
//! and look again every check interval; a drain ends on paused lanes but
//! waits on full ones.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use slothqueue_core::{
    ClaimRequest, ClockOnly, Completion, JobState, LaneChange, LaneScope, RunnerActivity, Stamp,
    Store, WaitCause,
};
use slothqueue_runner::{Mode, Runner, RunnerEvent, this_process_owner};

use crate::support::{DEADLINE, Intercepted, env};

fn q(name: &str) -> LaneScope {
    LaneScope::Queue(name.to_owned())
}

fn pause(env: &crate::support::Env) -> LaneChange {
    LaneChange::Pause(Stamp::new("ana@laptop", env.now()))
}

#[tokio::test]
async fn a_paused_lane_waits_and_says_so_and_a_resume_starts_it_within_a_check() {
    let env = env();
    let store = Arc::new(Intercepted::new(env.store.clone()));
    store.change_lane(&q("backups"), &pause(&env)).await.unwrap();
    let a = env.add("true", |j| j.queue("backups")).await;
    let b = env.add("true", |j| j.queue("backups")).await;
    let mut cfg = env.config();
    cfg.mode = Mode::Follow;
    let mut running = env.start(Runner::new(store.clone(), cfg));
    let mut records = 0;
    for check in 0..4 {
        let e = running
            .events
            .wait_for("the lane wait", |e| matches!(e, RunnerEvent::LanesWaiting { .. }))
            .await;
        assert_eq!(e.to_string(), "queue backups paused — 2 due jobs waiting");
        if check == 0 {
            records = store.put_runners.load(Ordering::Relaxed);
        }
    }
    // Said at each check, recorded once: an unchanged wait costs no write.
    assert_eq!(store.put_runners.load(Ordering::Relaxed), records);
    assert_eq!(env.job(a).await.state, JobState::Pending);
    let record = env.store.runners().await.unwrap().remove(0);
    assert!(
        matches!(&record.activity, RunnerActivity::Gated { reading, .. }
            if reading == "queue backups paused — 2 due jobs waiting"),
        "{record:?}"
    );
    store.change_lane(&q("backups"), &LaneChange::Resume).await.unwrap();
    for _ in 0..2 {
        running.events.wait_for("a job done", |e| matches!(e, RunnerEvent::Done { .. })).await;
    }
    running.trigger.trigger();
    running.finish().await.unwrap();
    for id in [a, b] {
        assert_eq!(env.job(id).await.state, JobState::Done);
    }
}

#[tokio::test]
async fn a_drain_ends_when_only_paused_lanes_are_left_and_names_them() {
    let env = env();
    let store = Arc::new(Intercepted::new(env.store.clone()));
    store.change_lane(&q("backups"), &pause(&env)).await.unwrap();
    let held_back = env.add("true", |j| j.queue("backups")).await;
    let ran = env.add("true", |j| j).await;
    let mut cfg = env.config();
    cfg.slots = 2;
    let (summary, lines) = env.drain(Runner::new(store.clone(), cfg)).await;
    assert_eq!(summary.done, 1, "{lines:?}");
    assert_eq!(env.job(ran).await.state, JobState::Done);
    assert_eq!(env.job(held_back).await.state, JobState::Pending);
    assert!(lines.contains(&"queue backups paused — 1 due job waiting".to_owned()), "{lines:?}");
    let skipped = format!(
        "skipped 1 due job(s) this runner cannot run: #{held_back} (queue `backups` paused)"
    );
    assert!(lines.contains(&skipped), "{lines:?}");
    assert_eq!(lines.last().map(String::as_str), Some("finished: 1 done, 0 failed"));
}

#[tokio::test]
async fn a_drain_ends_when_every_queue_is_paused() {
    let env = env();
    let store = Arc::new(Intercepted::new(env.store.clone()));
    store.change_lane(&LaneScope::All, &pause(&env)).await.unwrap();
    let id = env.add("true", |j| j).await;
    let (summary, lines) = env.drain(Runner::new(store.clone(), env.config())).await;
    assert_eq!(summary.done, 0);
    assert_eq!(lines[0], "every queue paused — 1 due job waiting");
    assert_eq!(
        lines[1],
        format!("skipped 1 due job(s) this runner cannot run: #{id} (queue `default` paused)")
    );
}

#[tokio::test]
async fn a_drain_waits_on_a_full_lane_until_its_job_ends_elsewhere() {
    let env = env();
    let store = Arc::new(Intercepted::new(env.store.clone()));
    store.change_lane(&q("disk"), &LaneChange::Limit(1)).await.unwrap();
    let theirs = env.add("true", |j| j.queue("disk")).await;
    // Another runner (alive: this process) runs the lane's one job.
    let other = slothqueue_core::Owner { id: "other-runner".into(), ..this_process_owner() };
    let claimed = env
        .store
        .claim(&ClaimRequest::new(other, Arc::new(ClockOnly)), env.now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.job.id, theirs);
    let ours = env.add("true", |j| j.queue("disk")).await;
    let mut running = env.start(Runner::new(store.clone(), env.config()));
    for _ in 0..2 {
        let e = running
            .events
            .wait_for("the lane wait", |e| matches!(e, RunnerEvent::LanesWaiting { .. }))
            .await;
        assert_eq!(e.to_string(), "queue disk full: 1 of 1 running — 1 due job waiting");
    }
    assert_eq!(env.job(ours).await.state, JobState::Pending);
    let done = Completion { result: None, exit_code: Some(0) };
    env.store.complete(theirs, &claimed.fence, done, env.now()).await.unwrap();
    let summary = tokio::time::timeout(DEADLINE, running.finish())
        .await
        .expect("the drain did not end")
        .unwrap();
    assert_eq!(summary.done, 1, "{:?}", running.events.lines());
    assert_eq!(env.job(ours).await.state, JobState::Done);
}

#[tokio::test]
async fn a_limit_holds_across_this_runners_slots() {
    let env = env();
    let store = Arc::new(Intercepted::new(env.store.clone()));
    store.change_lane(&q("disk"), &LaneChange::Limit(1)).await.unwrap();
    for _ in 0..3 {
        // Fails if two of them run at once.
        env.add("mkdir slot && sleep 0.1 && rmdir slot", |j| j.queue("disk").max_attempts(1)).await;
    }
    let mut cfg = env.config();
    cfg.slots = 3;
    let (summary, lines) = env.drain(Runner::new(store.clone(), cfg)).await;
    assert_eq!((summary.done, summary.failed), (3, 0), "{lines:?}");
}

/// With two slots, one running a job and the other held by a paused queue,
/// the record says both: the job it runs and the wait, caused by the lanes
/// (`status` used to say only "waiting on its gate: queue backups paused").
/// The running job's own record, written once it has run a little, keeps
/// the wait rather than replacing it.
#[tokio::test]
async fn a_slot_held_by_a_paused_queue_beside_a_running_one_is_recorded_as_both() {
    let env = env();
    let store = Arc::new(Intercepted::new(env.store.clone()));
    store.change_lane(&q("backups"), &pause(&env)).await.unwrap();
    let runs = env.add("touch started; until [ -e go ]; do sleep 0.05; done", |j| j).await;
    env.add("true", |j| j.queue("backups")).await;
    let mut cfg = env.config();
    cfg.mode = Mode::Follow;
    cfg.slots = 2;
    let mut running = env.start(Runner::new(store.clone(), cfg));
    running
        .events
        .wait_for("the lane wait", |e| matches!(e, RunnerEvent::LanesWaiting { .. }))
        .await;
    // Past the running job's own record (its process group in its lease
    // is written at the same moment).
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let job = env.job(runs).await;
        if job.lease.as_ref().is_some_and(|l| l.child_pgid.is_some()) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job #{runs}'s process group never recorded"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let record = loop {
        let record = env.store.runners().await.unwrap().remove(0);
        if record.running == [runs] || tokio::time::Instant::now() >= deadline {
            break record;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(record.slots, 2);
    assert_eq!(record.running, [runs], "{record:?}");
    assert!(
        matches!(&record.activity, RunnerActivity::Gated { reading, cause: WaitCause::Lanes, .. }
            if reading == "queue backups paused — 1 due job waiting"),
        "{record:?}"
    );
    std::fs::write(env.path("go"), "").unwrap();
    running.events.wait_for("the job done", |e| matches!(e, RunnerEvent::Done { .. })).await;
    // The record no longer names the job that ended.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !env.store.runners().await.unwrap()[0].running.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the record still names #{runs}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    running.trigger.trigger();
    running.finish().await.unwrap();
}
