//! Start-up reclaim: a dead runner's job comes back, its orphaned process
//! group killed first; a live runner's job is never taken.

use std::os::unix::process::CommandExt;
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{ClaimRequest, ClockOnly, JobState, Owner};
use slothqueue_runner::group_members;
use slothqueue_runner::{RunnerEvent, this_process_owner};

use crate::support::{alive, env, eventually};

/// An owner on this host and boot whose process has exited.
fn dead_owner() -> Owner {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    Owner { id: format!("dead-runner-{pid}"), pid: Some(pid), ..this_process_owner() }
}

#[tokio::test]
async fn a_dead_owners_orphaned_group_is_killed_before_the_job_runs_again() {
    let env = env();
    let id = env.add("echo second run", |j| j).await;
    // The dead runner claimed the job and started its group...
    let dead = dead_owner();
    let claimed = env
        .store
        .claim(&ClaimRequest::new(dead.clone(), Arc::new(ClockOnly)), env.now())
        .await
        .unwrap()
        .unwrap();
    let mut orphan = std::process::Command::new("sh")
        .args(["-c", "sleep 100 & sleep 100 & wait"])
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = orphan.id() as i32;
    env.store.heartbeat(id, &claimed.fence, Some(pgid), env.now()).await.unwrap();
    // ...and then died, leaving it running.
    eventually("the orphan's sleeps to start", || group_members(pgid).len() == 3).await;
    let before = group_members(pgid);

    let (summary, lines) = env.drain(env.runner(env.config())).await;
    assert_eq!(lines[0], format!("reclaimed 1 stale job(s): #{id}"));
    assert!(lines[1].starts_with(&format!("job #{id} done in ")), "{lines:?}");
    assert_eq!(summary.done, 1);
    orphan.wait().unwrap();
    assert!(group_members(pgid).is_empty(), "the orphaned group survived");
    for pid in before {
        assert!(!alive(pid), "orphan {pid} survived");
    }
    let job = env.job(id).await;
    assert_eq!((job.state, job.attempts), (JobState::Done, 2));
    let kinds: Vec<_> =
        env.store.events(id).await.unwrap().iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["pushed", "claimed", "reclaimed", "claimed", "completed"]);
}

#[tokio::test]
async fn the_reclaim_event_names_the_killed_group() {
    let env = env();
    let id = env.add("true", |j| j).await;
    let dead = dead_owner();
    let claimed = env
        .store
        .claim(&ClaimRequest::new(dead.clone(), Arc::new(ClockOnly)), env.now())
        .await
        .unwrap()
        .unwrap();
    let mut orphan =
        std::process::Command::new("sleep").arg("100").process_group(0).spawn().unwrap();
    let pgid = orphan.id() as i32;
    env.store.heartbeat(id, &claimed.fence, Some(pgid), env.now()).await.unwrap();
    let mut running = env.start(env.runner(env.config()));
    let e = running
        .events
        .wait_for("the reclaim", |e| matches!(e, RunnerEvent::Reclaimed { .. }))
        .await;
    assert_eq!(e, RunnerEvent::Reclaimed { jobs: vec![id], killed_groups: vec![(id, pgid)] });
    running.finish().await.unwrap();
    orphan.wait().unwrap();
}

#[tokio::test]
async fn a_group_whose_leader_predates_the_claim_is_not_touched() {
    let env = env();
    // An unrelated process, started well before the job was claimed...
    let mut unrelated =
        std::process::Command::new("sleep").arg("100").process_group(0).spawn().unwrap();
    let pgid = unrelated.id() as i32;
    let id = env.add("true", |j| j).await;
    let dead = dead_owner();
    // ...claimed "an hour later" (the clock is the store's argument).
    let later = env.now().saturating_add(Duration::from_secs(3600));
    let claimed = env
        .store
        .claim(&ClaimRequest::new(dead.clone(), Arc::new(ClockOnly)), later)
        .await
        .unwrap()
        .unwrap();
    env.store.heartbeat(id, &claimed.fence, Some(pgid), later).await.unwrap();
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    assert_eq!(lines[0], format!("reclaimed 1 stale job(s): #{id}"));
    assert_eq!(summary.done, 1);
    assert!(alive(pgid), "a process that is not the job's was signalled");
    unrelated.kill().unwrap();
    unrelated.wait().unwrap();
}

#[tokio::test]
async fn a_live_owner_on_this_host_is_never_robbed() {
    let env = env();
    // Claimed two hours ago by a live process (this one): the lease has
    // long expired, as after a laptop's sleep.
    let alive_owner = Owner { id: "sleepy-but-alive".into(), ..this_process_owner() };
    let long_ago = env.now().saturating_sub(Duration::from_secs(7200));
    let job = slothqueue_core::NewJob::shell("true", env.dir.path().to_string_lossy());
    let id = env.store.push(job, long_ago).await.unwrap().job.id;
    env.store
        .claim(&ClaimRequest::new(alive_owner.clone(), Arc::new(ClockOnly)), long_ago)
        .await
        .unwrap()
        .unwrap();
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    assert_eq!(lines, ["finished: 0 done, 0 failed"]);
    assert_eq!(summary.exit_code(), 0);
    let job = env.job(id).await;
    assert_eq!(job.state, JobState::Running);
    assert_eq!(job.lease.unwrap().owner.id, "sleepy-but-alive");
}

#[tokio::test]
async fn a_group_whose_leader_started_long_after_the_claim_is_not_touched() {
    let env = env();
    // Claimed an hour ago by a runner that died; its group ended long since
    // and the pid now leads an unrelated group.
    let long_ago = env.now().saturating_sub(Duration::from_secs(3600));
    let job = slothqueue_core::NewJob::shell("true", env.dir.path().to_string_lossy());
    let id = env.store.push(job, long_ago).await.unwrap().job.id;
    let dead = dead_owner();
    let claimed = env
        .store
        .claim(&ClaimRequest::new(dead.clone(), Arc::new(ClockOnly)), long_ago)
        .await
        .unwrap()
        .unwrap();
    let mut unrelated =
        std::process::Command::new("sleep").arg("100").process_group(0).spawn().unwrap();
    let pgid = unrelated.id() as i32;
    env.store.heartbeat(id, &claimed.fence, Some(pgid), long_ago).await.unwrap();
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    assert_eq!(lines[0], format!("reclaimed 1 stale job(s): #{id}"));
    assert_eq!(summary.done, 1);
    assert!(alive(pgid), "a process that is not the job's was signalled");
    unrelated.kill().unwrap();
    unrelated.wait().unwrap();
}

/// A dead owner's escapee that no group signal may reach (it sits in the
/// runner's own group, here this test's) but carries the attempt's lease
/// marker: killed by pid before the job is taken back and runs again.
#[tokio::test]
async fn a_dead_owners_escapee_outside_any_killable_group_dies_before_the_reclaim() {
    let env = env();
    let id = env.add("echo second run", |j| j).await;
    let dead = dead_owner();
    let claimed = env
        .store
        .claim(&ClaimRequest::new(dead.clone(), Arc::new(ClockOnly)), env.now())
        .await
        .unwrap()
        .unwrap();
    let marker = slothqueue_runner::lease_marker(id, &claimed.fence);
    // Not in a group of its own: in this process's group, which the
    // runner never signals as a group.
    let mut escapee = std::process::Command::new("sleep")
        .arg("300")
        .env(slothqueue_runner::LEASE_VAR, &marker)
        .spawn()
        .unwrap();
    let pid = escapee.id() as i32;
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    let survived = alive(pid);
    let _ = escapee.kill();
    let _ = escapee.wait();
    assert!(!survived, "the dead attempt's escapee {pid} survived the reclaim: {lines:?}");
    assert_eq!(lines[0], format!("reclaimed 1 stale job(s): #{id}"));
    assert_eq!(summary.done, 1);
}
