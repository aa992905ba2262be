//! One job's end and the next job's claim in one store call: used exactly
//! when the runner would claim right after anyway.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use slothqueue_core::JobState;
use slothqueue_runner::Mode;

use crate::support::{Env, Intercepted, env};

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
