//! Stopping a running job: max runtime, cancel, lost lease, shutdown. Each
//! one kills the whole process group and leaves no process behind.

use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{ClaimRequest, JobState, Owner};
use slothqueue_runner::RunnerEvent;
use slothqueue_runner::group_members;

use crate::support::{AlwaysGone, alive, env, eventually, read_when_written};

/// A job that records its pids: the shell (the group's leader), a
/// background `sleep`, and a child shell that ignores TERM.
fn stubborn_job(pids: &std::path::Path) -> String {
    format!(
        "echo $$ >> {p}; sleep 100 & echo $! >> {p}; \
         sh -c 'trap \"\" TERM; while :; do sleep 1; done' & echo $! >> {p}; wait",
        p = pids.display()
    )
}

async fn pids_of(path: &std::path::Path) -> Vec<i32> {
    eventually("all pids recorded", || {
        std::fs::read_to_string(path).is_ok_and(|s| s.lines().count() == 3)
    })
    .await;
    std::fs::read_to_string(path).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect()
}

#[tokio::test]
async fn max_runtime_kills_the_whole_group_and_no_grandchild_survives() {
    let env = env();
    let pids = env.path("pids");
    let id = env
        .add(&stubborn_job(&pids), |j| j.max_runtime(Some(Duration::from_secs(1))).max_attempts(1))
        .await;
    let mut running = env.start(env.runner(env.config()));
    let recorded = pids_of(&pids).await;
    let summary = running.finish().await.unwrap();
    let lines = running.events.lines();
    assert!(
        lines[0].contains(
            "(timeout: exceeded max runtime of 1s (all its processes killed, contained by "
        ),
        "{lines:?}"
    );
    assert_eq!(summary.failed, 1);
    let leader = recorded[0];
    for pid in &recorded {
        assert!(!alive(*pid), "pid {pid} of job #{id} survived");
    }
    assert!(group_members(leader).is_empty(), "group {leader} still has members");
}

#[tokio::test]
async fn a_leftover_background_process_ends_with_its_job() {
    let env = env();
    let pids = env.path("pids");
    env.add(&format!("sleep 100 & echo $! > {}; echo started", pids.display()), |j| j).await;
    let (summary, _) = env.drain(env.runner(env.config())).await;
    assert_eq!(summary.done, 1);
    let pid: i32 = std::fs::read_to_string(&pids).unwrap().trim().parse().unwrap();
    assert!(!alive(pid), "the job's background sleep survived it");
}

#[tokio::test]
async fn cancel_of_a_running_job_kills_its_group_and_ends_it_cancelled() {
    let env = env();
    let pids = env.path("pids");
    let id = env.add(&stubborn_job(&pids), |j| j).await;
    let mut running = env.start(env.runner(env.config()));
    let recorded = pids_of(&pids).await;
    env.store.cancel(id, env.now()).await.unwrap();
    let e =
        running.events.wait_for("the cancel", |e| matches!(e, RunnerEvent::Cancelled { .. })).await;
    assert!(e.to_string().starts_with(&format!("job #{id} cancelled in ")));
    let summary = running.finish().await.unwrap();
    assert_eq!((summary.cancelled, summary.failed, summary.exit_code()), (1, 0, 0));
    assert_eq!(env.job(id).await.state, JobState::Cancelled);
    for pid in &recorded {
        assert!(!alive(*pid), "pid {pid} survived the cancel");
    }
}

#[tokio::test]
async fn a_cancel_lands_between_heartbeats_through_the_read_check() {
    // Heartbeats an hour apart: only the cheap read between beats can see
    // the cancel, so the job must not run on to completion.
    let env = env();
    let pids = env.path("pids");
    let id = env.add(&stubborn_job(&pids), |j| j).await;
    let mut cfg = env.config();
    cfg.heartbeat_interval = Some(Duration::from_secs(3600));
    cfg.cancel_check_interval = Duration::from_millis(50);
    let mut running = env.start(env.runner(cfg));
    let recorded = pids_of(&pids).await;
    env.store.cancel(id, env.now()).await.unwrap();
    running.events.wait_for("the cancel", |e| matches!(e, RunnerEvent::Cancelled { .. })).await;
    let summary = running.finish().await.unwrap();
    assert_eq!((summary.cancelled, summary.done), (1, 0));
    assert_eq!(env.job(id).await.state, JobState::Cancelled);
    for pid in &recorded {
        assert!(!alive(*pid), "pid {pid} survived the cancel");
    }
}

#[tokio::test]
async fn a_lost_lease_kills_the_job_and_does_not_complete_it() {
    let env = env();
    let pids = env.path("pids");
    let id = env.add(&stubborn_job(&pids), |j| j).await;
    let mut running = env.start(env.runner(env.config()));
    let recorded = pids_of(&pids).await;
    // Another runner decides this one is dead and takes the job.
    let thief = Owner::named("thief");
    let stolen = env
        .store
        .claim(&ClaimRequest::new(thief.clone(), Arc::new(AlwaysGone)), env.now())
        .await
        .unwrap()
        .expect("the thief gets the job");
    assert_eq!((stolen.job.id, stolen.fence.attempt), (id, 2));
    let e = running
        .events
        .wait_for("the lost lease", |e| matches!(e, RunnerEvent::LeaseLost { .. }))
        .await;
    let line = e.to_string();
    assert!(line.starts_with(&format!("job #{id} lost its lease after ")), "{line}");
    assert!(line.ends_with("s — killed, not completed"), "{line}");
    let summary = running.finish().await.unwrap();
    assert_eq!((summary.lost, summary.done, summary.exit_code()), (1, 0, 1));
    let job = env.job(id).await;
    assert_eq!(job.state, JobState::Running, "still the thief's");
    assert_eq!(job.lease.unwrap().owner.id, "thief");
    for pid in &recorded {
        assert!(!alive(*pid), "pid {pid} survived the lost lease");
    }
}

#[tokio::test]
async fn shutdown_releases_the_job_without_charging_the_attempt() {
    let env = env();
    let pids = env.path("pids");
    let id = env.add(&stubborn_job(&pids), |j| j).await;
    let mut running = env.start(env.runner(env.config()));
    let recorded = pids_of(&pids).await;
    running.trigger.trigger();
    let summary = running.finish().await.unwrap();
    let lines = running.events.lines();
    assert!(
        lines[0].starts_with(&format!("shutting down: stopping job #{id} (KILL in 300ms")),
        "{lines:?}"
    );
    assert!(lines[1].starts_with(&format!("job #{id} interrupted after ")), "{lines:?}");
    assert_eq!(lines[2], "interrupted: 0 done, 0 failed");
    assert!(summary.interrupted);
    assert_eq!(summary.exit_code(), 130);
    let job = env.job(id).await;
    assert_eq!((job.state, job.attempts), (JobState::Pending, 0));
    for pid in &recorded {
        assert!(!alive(*pid), "pid {pid} survived the shutdown");
    }
    assert!(env.store.runners().await.unwrap().is_empty(), "the runner's record is removed");
}

#[tokio::test]
async fn a_second_shutdown_request_skips_the_grace() {
    let env = env();
    let pids = env.path("pids");
    let id = env.add(&stubborn_job(&pids), |j| j).await;
    let mut cfg = env.config();
    cfg.kill_grace = Duration::from_secs(3600);
    let mut running = env.start(env.runner(cfg));
    pids_of(&pids).await;
    running.trigger.trigger();
    running
        .events
        .wait_for("shutting down", |e| matches!(e, RunnerEvent::ShuttingDown { .. }))
        .await;
    running.trigger.trigger();
    let summary = running.finish().await.unwrap();
    assert_eq!(summary.released, 1);
    let job = env.job(id).await;
    assert_eq!((job.state, job.attempts), (JobState::Pending, 0));
}

/// S22: a job starts clean — its own group's leader, stdin from /dev/null,
/// no queue file descriptors, no blocked or ignored TERM/INT.
#[tokio::test]
async fn the_child_inherits_nothing_of_the_runner() {
    let env = env();
    let pid_file = env.path("pid");
    env.add(&format!("echo $$ > {}; exec sleep 100", pid_file.display()), |j| j).await;
    let mut running = env.start(env.runner(env.config()));
    let pid: i32 = read_when_written(&pid_file).await.trim().parse().unwrap();
    // Wait for the exec: the leader is `sleep` now.
    eventually("exec sleep", || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
    })
    .await;
    // The dynamic loader briefly holds a descriptor of its own after the
    // exec; an inherited one would stay, and fail this wait.
    let fds = |pid: i32| {
        let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        fds.sort();
        fds
    };
    eventually("the child to hold only stdio", || fds(pid) == ["0", "1", "2"]).await;
    let stdin = std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap();
    assert_eq!(stdin, std::path::Path::new("/dev/null"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        let v = status.lines().find_map(|l| l.strip_prefix(name)).unwrap().trim();
        u64::from_str_radix(v, 16).unwrap()
    };
    assert_eq!(field("SigBlk:"), 0, "blocked signals");
    let term_int = (1 << (15 - 1)) | (1 << (2 - 1));
    assert_eq!(field("SigIgn:") & term_int, 0, "TERM or INT ignored");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let pgrp: i32 =
        stat.rsplit_once(')').unwrap().1.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert_eq!(pgrp, pid, "the job leads its own process group");
    running.trigger.trigger();
    running.finish().await.unwrap();
    assert!(!alive(pid));
}

/// The lease learns the job's process group as soon as it exists, so a
/// successor can kill it if this runner dies.
#[tokio::test]
async fn the_lease_records_the_jobs_process_group() {
    let env = env();
    let pid_file = env.path("pid");
    let id = env.add(&format!("echo $$ > {}; sleep 100", pid_file.display()), |j| j).await;
    let mut cfg = env.config();
    cfg.heartbeat_interval = Some(Duration::from_secs(3600));
    let mut running = env.start(env.runner(cfg));
    let pid: i32 = read_when_written(&pid_file).await.trim().parse().unwrap();
    let store = env.store.clone();
    let mut recorded = None;
    for _ in 0..3000 {
        recorded = store.get(id).await.unwrap().lease.and_then(|l| l.child_pgid);
        if recorded.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(recorded, Some(pid));
    running.trigger.trigger();
    running.finish().await.unwrap();
}
