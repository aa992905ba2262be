//! Gates hold a job while the machine is busy, and say so at every check.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use slothqueue_core::{JobState, NewJob};
use slothqueue_runner::{ExecOutcome, LoadGate, RunnerEvent, handler_fn};

use crate::support::env;

#[tokio::test]
async fn the_load_gate_waits_while_the_load_file_is_high() {
    let env = env();
    let load = env.path("loadavg");
    std::fs::write(&load, "26.59 20.00 18.00 3/200 4242\n").unwrap();
    let marker = env.path("ran");
    let id = env.add(&format!("touch {}", marker.display()), |j| j).await;
    let mut cfg = env.config();
    cfg.gates.push(Box::new(LoadGate::from_file(&load, Some(25.0)).unwrap()));
    let mut running = env.start(env.runner(cfg));

    for _ in 0..3 {
        let e = running
            .events
            .wait_for("a gate check", |e| matches!(e, RunnerEvent::Gated { .. }))
            .await;
        assert_eq!(e.to_string(), "load 26.59 >= ceiling 25.00 — waiting 20ms");
    }
    assert!(!marker.exists(), "the job must not start while the gate holds");
    assert_eq!(env.job(id).await.state, JobState::Pending, "nor be claimed");

    std::fs::write(&load, "24.42 20.00 18.00 3/200 4242\n").unwrap();
    let opened = running
        .events
        .wait_for("the gate to open", |e| matches!(e, RunnerEvent::GateOpened { .. }))
        .await;
    assert_eq!(opened.to_string(), "load 24.42 < ceiling 25.00 — starting");
    let summary = running.finish().await.unwrap();
    assert_eq!(summary.done, 1);
    assert!(marker.exists());
    let lines = running.events.lines();
    let opened_at = lines.iter().position(|l| l.ends_with("— starting")).unwrap();
    assert!(lines[..opened_at].iter().all(|l| l.ends_with("— waiting 20ms")), "{lines:?}");
    assert!(lines[opened_at + 1].starts_with(&format!("job #{id} done in ")), "{lines:?}");
}

#[tokio::test]
async fn an_open_gate_says_nothing() {
    let env = env();
    env.add("true", |j| j).await;
    let mut cfg = env.config();
    cfg.gates.push(Box::new(LoadGate::new(|| Ok(0.5), 4.0)));
    let (_, lines) = env.drain(env.runner(cfg)).await;
    assert_eq!(lines.len(), 2, "{lines:?}");
}

/// Gate intervals are tokio time: with time paused, a one-second check
/// interval costs nothing, and the job starts when the probe says so.
#[tokio::test(start_paused = true)]
async fn gate_intervals_follow_tokio_time() {
    let env = env();
    let id =
        env.store.push(NewJob::new("note", serde_json::json!({})), env.now()).await.unwrap().job.id;
    let load = Arc::new(AtomicU64::new(900));
    let probe = load.clone();
    let mut cfg = env.config();
    cfg.check_interval = Duration::from_secs(1);
    cfg.heartbeat_interval = Some(Duration::from_secs(3600));
    cfg.gates.push(Box::new(LoadGate::new(
        move || Ok(probe.load(Ordering::SeqCst) as f64 / 100.0),
        2.0,
    )));
    let mut runner = env.runner(cfg);
    runner.register("note", handler_fn(|_, _| async { ExecOutcome::success("noted") }));
    let mut running = env.start(runner);
    for _ in 0..5 {
        let e = running
            .events
            .wait_for("a gate check", |e| matches!(e, RunnerEvent::Gated { .. }))
            .await;
        assert_eq!(e.to_string(), "load 9.00 >= ceiling 2.00 — waiting 1s");
    }
    load.store(150, Ordering::SeqCst);
    let summary = running.finish().await.unwrap();
    assert_eq!(summary.done, 1);
    assert!(running.events.lines().contains(&"load 1.50 < ceiling 2.00 — starting".to_owned()));
    assert_eq!(env.job(id).await.result.as_deref(), Some("noted"));
}
