//! One job's end and the next job's claim in one store call: used exactly
//! when the runner would claim right after anyway.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use slothqueue_core::{EventKind, JobState};
use slothqueue_runner::{Mode, ShutdownSignal};

use crate::support::{DEADLINE, Env, Intercepted, env};

/// Drains three jobs (one failing) under `cfg_edit`; returns how many
/// `settle_and_claim` calls the store saw.
async fn drain_three(
    env: &Env,
    cfg_edit: impl FnOnce(&mut slothqueue_runner::RunnerConfig),
) -> u32 {
    let ids = [
        env.add("true", |j| j).await,
        env.add("exit 3", |j| j.max_attempts(1)).await,
        env.add("true", |j| j).await,
    ];
    let store = Arc::new(Intercepted::new(env.store.clone()));
    let mut cfg = env.config();
    cfg_edit(&mut cfg);
    let once = cfg.mode == Mode::Once;
    let (summary, lines) = env.drain(slothqueue_runner::Runner::new(store.clone(), cfg)).await;
    if once {
        assert_eq!(summary.done, 1, "{lines:?}");
    } else {
        assert_eq!((summary.done, summary.failed), (2, 1), "{lines:?}");
        let states = [JobState::Done, JobState::Failed, JobState::Done];
        for (id, state) in ids.into_iter().zip(states) {
            assert_eq!(env.job(id).await.state, state, "job #{id}: {lines:?}");
        }
    }
    store.settle_and_claims.load(Ordering::SeqCst)
}

#[tokio::test]
async fn a_drain_settles_and_claims_in_one_call() {
    let env = env();
    // Every settle chains unless the once-a-second sweep falls due in
    // between, which a slow machine may make happen once or twice.
    let calls = drain_three(&env, |_| {}).await;
    assert!(calls >= 1, "no settle was combined with the next claim");
}

#[tokio::test]
async fn a_cooldown_an_on_finish_command_or_once_mode_keeps_the_calls_apart() {
    let env = env();
    let calls = drain_three(&env, |cfg| cfg.cooldown = Duration::from_millis(1)).await;
    assert_eq!(calls, 0, "combined across a cooldown");
    let env = crate::support::env();
    let calls = drain_three(&env, |cfg| cfg.on_finish = Some("true".to_owned())).await;
    assert_eq!(calls, 0, "combined across an on-finish command");
    let env = crate::support::env();
    let calls = drain_three(&env, |cfg| cfg.mode = Mode::Once).await;
    assert_eq!(calls, 0, "combined in once mode");
}

#[tokio::test]
async fn a_chained_claim_overtaken_by_a_shutdown_is_released_unrun() {
    let env = env();
    let first = env.add("true", |j| j).await;
    let second = env.add("touch ran", |j| j).await;
    let (trigger, shutdown) = ShutdownSignal::new();
    let mut store = Intercepted::new(env.store.clone());
    // The shutdown arrives while the first job's end and the second's
    // claim are being written together.
    store.before_settle_and_claim = Box::new(move || {
        trigger.trigger();
        Ok(())
    });
    let runner = slothqueue_runner::Runner::new(Arc::new(store), env.config());
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let summary = tokio::time::timeout(DEADLINE, runner.run(tx, shutdown))
        .await
        .expect("the runner stops")
        .unwrap();
    assert!(summary.interrupted);
    assert_eq!(summary.done, 1);
    assert_eq!(env.job(first).await.state, JobState::Done);
    let job = env.job(second).await;
    assert_eq!((job.state, job.attempts), (JobState::Pending, 0), "{job:?}");
    let kinds: Vec<EventKind> =
        env.store.events(second).await.unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Pushed, EventKind::Claimed, EventKind::Released]);
    assert!(!env.path("ran").exists(), "the released job ran");
}
