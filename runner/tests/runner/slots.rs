//! Slots: a runner with `slots = N` runs up to N attempts at once, each
//! checked against the gates before it starts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use slothqueue_core::{JobState, RunnerActivity};
use slothqueue_runner::gate::LoadFile;
use slothqueue_runner::{LoadGate, LoadProbe, RunnerEvent};

use crate::support::{DEADLINE, env, eventually};

/// A job that says it started, then waits until `n` jobs have (each
/// checks the others run: a runner with fewer slots never gets them all
/// started, and the job fails after its own 30 s) and `go` exists.
fn waits_for_the_others(n: usize) -> String {
    let all: Vec<String> = (1..=n).map(|i| format!("[ -e started.{i} ]")).collect();
    format!(
        "touch started.$SLOTHQUEUE_JOB_ID; i=0; \
         until {{ {}; }} && [ -e go ]; do i=$((i+1)); [ $i -gt 600 ] && exit 9; sleep 0.05; done",
        all.join(" && ")
    )
}

#[tokio::test]
async fn three_slots_run_three_jobs_at_once_and_the_record_names_them() {
    let env = env();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(env.add(&waits_for_the_others(3), |j| j.max_attempts(1)).await);
    }
    let mut cfg = env.config();
    cfg.slots = 3;
    let mut running = env.start(env.runner(cfg));
    eventually("three jobs to start", || {
        ids.iter().all(|id| env.path(&format!("started.{id}")).exists())
    })
    .await;
    // All three run at once: the record says so (written once each has
    // run a little).
    let recorded = tokio::time::timeout(DEADLINE, async {
        loop {
            let records = env.store.runners().await.unwrap();
            if let Some(RunnerActivity::Running { job, also }) =
                records.first().map(|r| r.activity.clone())
            {
                if also.len() == 2 {
                    return (job, also);
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the record never named three running jobs");
    let mut named = vec![recorded.0];
    named.extend(recorded.1);
    named.sort_unstable();
    assert_eq!(named, ids);
    for id in &ids {
        assert_eq!(env.job(*id).await.state, JobState::Running);
    }
    std::fs::write(env.path("go"), "").unwrap();
    let summary = running.finish().await.unwrap();
    assert_eq!((summary.done, summary.failed), (3, 0), "{:?}", running.events.lines());
}

#[tokio::test]
async fn one_slot_runs_one_job_at_a_time() {
    let env = env();
    let a = env.add("mkdir slot && sleep 0.2 && rmdir slot", |j| j.max_attempts(1)).await;
    let b = env.add("mkdir slot && sleep 0.2 && rmdir slot", |j| j.max_attempts(1)).await;
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    assert_eq!(summary.done, 2, "{lines:?}");
    for id in [a, b] {
        assert_eq!(env.job(id).await.state, JobState::Done);
    }
}

/// A load probe: the first `open_for` readings are low, the later ones
/// read a loadavg file.
struct LowThenFile {
    readings: AtomicUsize,
    open_for: usize,
    file: LoadFile,
}

impl LoadProbe for LowThenFile {
    fn load(&self) -> Result<f64, String> {
        if self.readings.fetch_add(1, Ordering::SeqCst) < self.open_for {
            return Ok(0.5);
        }
        self.file.load()
    }
}

#[tokio::test]
async fn the_gates_are_read_before_every_start() {
    let env = env();
    let load = env.path("loadavg");
    std::fs::write(&load, "2.00 1.00 1.00 1/100 1\n").unwrap();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(env.add(&waits_for_the_others(4), |j| j.max_attempts(1)).await);
    }
    let mut cfg = env.config();
    cfg.slots = 4;
    let probe = Arc::new(LowThenFile {
        readings: AtomicUsize::new(0),
        open_for: 3,
        file: LoadFile::new(&load),
    });
    let readings = probe.clone();
    cfg.gates.push(Box::new(LoadGate::new(move || readings.load(), 1.5)));
    let mut running = env.start(env.runner(cfg));
    // Three starts, three open readings; the fourth reading holds.
    for _ in 0..3 {
        let e = running
            .events
            .wait_for("the gate before the fourth start", |e| {
                matches!(e, RunnerEvent::Gated { .. })
            })
            .await;
        assert_eq!(e.to_string(), "load 2.00 >= ceiling 1.50 — waiting 20ms");
    }
    eventually("three jobs to start", || {
        ids[..3].iter().all(|id| env.path(&format!("started.{id}")).exists())
    })
    .await;
    assert!(!env.path(&format!("started.{}", ids[3])).exists(), "the fourth started gated");
    assert_eq!(env.job(ids[3]).await.state, JobState::Pending);
    std::fs::write(&load, "0.20 1.00 1.00 1/100 1\n").unwrap();
    let opened = running
        .events
        .wait_for("the gate to open", |e| matches!(e, RunnerEvent::GateOpened { .. }))
        .await;
    assert_eq!(opened.to_string(), "load 0.20 < ceiling 1.50 — starting");
    eventually("the fourth job to start", || env.path(&format!("started.{}", ids[3])).exists())
        .await;
    std::fs::write(env.path("go"), "").unwrap();
    let summary = running.finish().await.unwrap();
    assert_eq!(summary.done, 4, "{:?}", running.events.lines());
    assert!(probe.readings.load(Ordering::SeqCst) >= 5, "one reading per start at least");
}

#[tokio::test]
async fn once_mode_runs_one_job_whatever_the_slots() {
    let env = env();
    for _ in 0..3 {
        env.add("true", |j| j).await;
    }
    let mut cfg = env.config();
    cfg.slots = 3;
    cfg.mode = slothqueue_runner::Mode::Once;
    let (summary, lines) = env.drain(env.runner(cfg)).await;
    assert_eq!(summary.done, 1, "{lines:?}");
}

/// With slots the cooldown spaces starts: it counts from the later of the
/// last start and the last end, so a second job starts a cooldown after
/// the first started, while the first still runs. Tokio time: paused.
#[tokio::test(start_paused = true)]
async fn the_cooldown_spaces_starts_across_slots() {
    use slothqueue_core::NewJob;
    use slothqueue_runner::{ExecOutcome, handler_fn};
    use std::time::Duration;
    let env = env();
    for _ in 0..2 {
        env.store.push(NewJob::new("note", serde_json::json!({})), env.now()).await.unwrap();
    }
    let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = starts.clone();
    let mut cfg = env.config();
    cfg.slots = 2;
    cfg.cooldown = Duration::from_secs(2);
    cfg.heartbeat_interval = Some(Duration::from_secs(3600));
    let mut runner = env.runner(cfg);
    runner.register(
        "note",
        handler_fn(move |_, _| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(tokio::time::Instant::now());
                tokio::time::sleep(Duration::from_secs(5)).await;
                ExecOutcome::success("noted")
            }
        }),
    );
    let (summary, lines) = env.drain(runner).await;
    assert_eq!(summary.done, 2, "{lines:?}");
    let starts = starts.lock().unwrap().clone();
    assert_eq!(starts.len(), 2);
    let gap = starts[1] - starts[0];
    assert!(gap >= Duration::from_secs(2), "started {gap:?} apart");
    assert!(gap < Duration::from_secs(5), "the second waited for the first's end: {gap:?}");
}
