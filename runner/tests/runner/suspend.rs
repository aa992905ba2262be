//! Suspend when gated: a gate that closes while jobs run stops their
//! processes (SIGSTOP) and continues them (SIGCONT) when it opens; the
//! stopped time is not counted against max runtime, and a stopped job
//! can still be cancelled.
//!
//! The notes on the attempts are the job's `suspended`/`resumed` events,
//! as the store wrote them.

use std::time::Duration;

use slothqueue_core::{EventKind, JobState};
use slothqueue_runner::{LoadGate, Runner, RunnerEvent};

use crate::support::{alive, env, eventually, read_when_written};

fn stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('T')))
}

fn high(path: &std::path::Path) {
    std::fs::write(path, "3.20 1.00 1.00 1/100 1\n").unwrap();
}

fn low(path: &std::path::Path) {
    std::fs::write(path, "0.10 1.00 1.00 1/100 1\n").unwrap();
}

#[tokio::test]
async fn a_closing_gate_stops_the_job_and_its_max_runtime_counts_only_running_time() {
    let env = env();
    let load = env.path("loadavg");
    low(&load);
    // Waits for `go` (which the test writes while the job is stopped),
    // then works half a second: well within its max runtime of 2 s, though
    // its attempt lasts longer than that, stopped.
    let id = env
        .add(
            "echo $$ > pid.tmp && mv pid.tmp pid; \
             while [ ! -e go ]; do sleep 0.05; done; sleep 0.5",
            |j| j.max_runtime(Some(Duration::from_secs(2))).max_attempts(1),
        )
        .await;
    let store = env.store.clone();
    let mut cfg = env.config();
    cfg.suspend_when_gated = true;
    cfg.gates.push(Box::new(LoadGate::from_file(&load, Some(1.5)).unwrap()));
    let mut running = env.start(Runner::new(store.clone(), cfg));
    let pid: i32 = read_when_written(&env.path("pid")).await.trim().parse().unwrap();
    let started = tokio::time::Instant::now();
    high(&load);
    let e = running
        .events
        .wait_for("the suspend", |e| matches!(e, RunnerEvent::Suspended { .. }))
        .await;
    assert_eq!(e.to_string(), format!("suspended #{id}: load 3.20 >= ceiling 1.50"));
    eventually("the job's shell to be stopped", || stopped(pid)).await;
    std::fs::write(env.path("go"), "").unwrap();
    // Stopped past its max runtime: that time does not count.
    eventually("the max runtime to pass while stopped", || {
        started.elapsed() > Duration::from_millis(2500)
    })
    .await;
    assert!(stopped(pid), "continued while the gate held");
    assert_eq!(env.job(id).await.state, JobState::Running, "its lease is kept");
    low(&load);
    let e =
        running.events.wait_for("the resume", |e| matches!(e, RunnerEvent::Resumed { .. })).await;
    assert!(e.to_string().starts_with(&format!("resumed #{id} after ")), "{e}");
    let summary = running.finish().await.unwrap();
    let lines = running.events.lines();
    assert_eq!((summary.done, summary.failed), (1, 0), "{lines:?}");
    let notes: Vec<_> = env
        .store
        .events(id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::Suspended | EventKind::Resumed))
        .collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert_eq!(
        (notes[0].kind, notes[0].message.as_deref()),
        (EventKind::Suspended, Some("suspended: load 3.20 >= ceiling 1.50"))
    );
    let resumed = notes[1].message.as_deref().unwrap_or_default();
    let secs: u64 = resumed
        .strip_prefix("resumed after ")
        .and_then(|r| r.strip_suffix('s'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(notes[1].kind == EventKind::Resumed && secs >= 2, "{notes:?}");
}

#[tokio::test]
async fn a_suspended_job_is_still_cancelled() {
    let env = env();
    let load = env.path("loadavg");
    low(&load);
    let id = env.add("echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 100", |j| j).await;
    let store = env.store.clone();
    let mut cfg = env.config();
    cfg.suspend_when_gated = true;
    cfg.gates.push(Box::new(LoadGate::from_file(&load, Some(1.5)).unwrap()));
    let mut running = env.start(Runner::new(store.clone(), cfg));
    let pid: i32 = read_when_written(&env.path("pid")).await.trim().parse().unwrap();
    high(&load);
    running.events.wait_for("the suspend", |e| matches!(e, RunnerEvent::Suspended { .. })).await;
    eventually("the job to be stopped", || stopped(pid)).await;
    env.store.cancel(id, env.now()).await.unwrap();
    running.events.wait_for("the cancel", |e| matches!(e, RunnerEvent::Cancelled { .. })).await;
    assert!(!alive(pid), "the stopped job survived its cancel");
    // The gate still holds: nothing else to run, the drain ends.
    let summary = running.finish().await.unwrap();
    assert_eq!(summary.cancelled, 1);
    assert_eq!(env.job(id).await.state, JobState::Cancelled);
}

#[tokio::test]
async fn a_suspended_job_is_released_by_a_shutdown() {
    let env = env();
    let load = env.path("loadavg");
    low(&load);
    let id = env.add("echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 100", |j| j).await;
    let store = env.store.clone();
    let mut cfg = env.config();
    cfg.suspend_when_gated = true;
    cfg.gates.push(Box::new(LoadGate::from_file(&load, Some(1.5)).unwrap()));
    let mut running = env.start(Runner::new(store.clone(), cfg));
    let pid: i32 = read_when_written(&env.path("pid")).await.trim().parse().unwrap();
    high(&load);
    running.events.wait_for("the suspend", |e| matches!(e, RunnerEvent::Suspended { .. })).await;
    eventually("the job to be stopped", || stopped(pid)).await;
    running.trigger.trigger();
    let summary = running.finish().await.unwrap();
    assert!(summary.interrupted);
    assert!(!alive(pid), "the stopped job survived the shutdown");
    let job = env.job(id).await;
    assert_eq!((job.state, job.attempts), (JobState::Pending, 0));
}
