//! Regression tests for defects the torture suite (`cargo xtask torture`)
//! found, named after its scenarios.
//!
//! Both were "run twice at once": a dead runner's job ran again while the
//! processes of its first attempt were still alive.

use std::os::unix::process::CommandExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use slothqueue_core::{
    ClaimRequest, ClockOnly, Fence, JobId, JobState, Lease, Liveness, LivenessJudge, Owner,
};
use slothqueue_runner::this_process_owner;
use slothqueue_runner::{LEASE_VAR, group_members, lease_marker};

use crate::support::{Env, Intercepted, alive, env, eventually};

/// An owner on this host and boot whose process has exited.
fn dead_owner() -> Owner {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    Owner { id: format!("dead-runner-{pid}"), pid: Some(pid), ..this_process_owner() }
}

/// A job that records whether the orphan whose pid is in `orphan.pid` was
/// still alive (running, not a zombie waiting for the test to reap it)
/// when it started.
fn overlap_probe(env: &Env) -> String {
    let pid = env.path("orphan.pid");
    let overlap = env.path("overlap");
    format!(
        "s=$(cut -d' ' -f3 /proc/\"$(cat {})\"/stat 2>/dev/null); \
         if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo overlap >> {}; fi",
        pid.display(),
        overlap.display()
    )
}

/// Starts what a dead runner left running for `id`'s attempt `fence`:
/// a marked group of three processes, its group *not* recorded.
fn orphan(env: &Env, id: JobId, fence: &Fence) -> std::process::Child {
    let child = std::process::Command::new("sh")
        .args(["-c", "sleep 100 & sleep 100 & wait"])
        .env(LEASE_VAR, lease_marker(id, fence))
        .process_group(0)
        .spawn()
        .unwrap();
    std::fs::write(env.path("orphan.pid"), child.id().to_string()).unwrap();
    child
}

/// S05 `after_spawn`: the runner died after spawning the job and before
/// the heartbeat that records its process group. The next runner found no
/// group to kill and ran the job again beside the orphan.
#[tokio::test]
async fn s05_crash_after_spawn_the_orphan_is_found_by_its_lease_marker() {
    let env = env();
    let id = env.add(&overlap_probe(&env), |j| j).await;
    let dead = dead_owner();
    let claimed = env
        .store
        .claim(&ClaimRequest::new(dead.clone(), Arc::new(ClockOnly)), env.now())
        .await
        .unwrap();
    let fence = claimed.unwrap().fence;
    let mut orphan = orphan(&env, id, &fence);
    let pgid = orphan.id() as i32;
    eventually("the orphan's sleeps to start", || group_members(pgid).len() == 3).await;
    let members = group_members(pgid);

    let (summary, lines) = env.drain(env.runner(env.config())).await;
    assert_eq!(lines[0], format!("reclaimed 1 stale job(s): #{id}"), "{lines:?}");
    assert_eq!(summary.done, 1, "{lines:?}");
    assert!(!env.path("overlap").exists(), "the job ran again while its orphan was alive");
    orphan.wait().unwrap();
    for pid in members {
        assert!(!alive(pid), "orphan {pid} survived");
    }
    let job = env.job(id).await;
    assert_eq!((job.state, job.attempts), (JobState::Done, 2));
}

/// Says a given owner is alive until `dead` is set, then gone.
struct DiesOnCue {
    owner: String,
    dead: Arc<AtomicBool>,
}

impl LivenessJudge for DiesOnCue {
    fn judge(&self, lease: &Lease) -> Liveness {
        match (lease.owner.id == self.owner, self.dead.load(Ordering::SeqCst)) {
            (true, true) => Liveness::Gone,
            (true, false) => Liveness::Alive,
            (false, _) => Liveness::Unknown,
        }
    }
}

/// S04: the owner died after the runner's sweep and before its claim; the
/// claim took the job back at once (the owner was gone) without anything
/// killing the first attempt's processes.
#[tokio::test]
async fn s04_an_owner_dying_between_sweep_and_claim_is_not_rerun_over_its_orphan() {
    let env = env();
    let id = env.add(&overlap_probe(&env), |j| j.priority(9)).await;
    let other = env.add("true", |j| j).await;
    let doomed = Owner { id: "doomed-runner".into(), ..this_process_owner() };
    let claimed = env
        .store
        .claim(&ClaimRequest::new(doomed.clone(), Arc::new(ClockOnly)), env.now())
        .await
        .unwrap();
    let fence = claimed.unwrap().fence;
    let mut orphan = orphan(&env, id, &fence);
    let pgid = orphan.id() as i32;
    env.store.heartbeat(id, &fence, Some(pgid), env.now()).await.unwrap();
    eventually("the orphan's sleeps to start", || group_members(pgid).len() == 3).await;

    let dead = Arc::new(AtomicBool::new(false));
    let mut cfg = env.config();
    cfg.judge = Arc::new(DiesOnCue { owner: doomed.id.clone(), dead: dead.clone() });
    // The lease holder "dies" just before each claim, after the sweep looked.
    let mut store = Intercepted::new(env.store.clone());
    let dying = dead.clone();
    store.before_claim = Box::new(move || {
        dying.store(true, Ordering::SeqCst);
        Ok(())
    });
    let store = Arc::new(store);
    let (summary, lines) = env.drain(slothqueue_runner::Runner::new(store, cfg)).await;
    assert_eq!(summary.done, 1, "{lines:?}");
    assert_eq!(env.job(other).await.state, JobState::Done);
    // The next runner's sweep takes the job back, its orphan killed first.
    let mut cfg = env.config();
    cfg.judge = Arc::new(DiesOnCue { owner: doomed.id.clone(), dead });
    let (summary, lines) = env.drain(env.runner(cfg)).await;
    assert_eq!(lines[0], format!("reclaimed 1 stale job(s): #{id}"), "{lines:?}");
    assert_eq!(summary.done, 1, "{lines:?}");
    assert!(!env.path("overlap").exists(), "the job ran again while its orphan was alive");
    orphan.wait().unwrap();
    assert!(group_members(pgid).is_empty(), "the orphaned group survived");
    let job = env.job(id).await;
    assert_eq!((job.state, job.attempts), (JobState::Done, 2));
}
