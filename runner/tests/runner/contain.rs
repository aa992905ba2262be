//! Containment against real escapes: each job is spawned the way the
//! runner spawns it (its own process group, the lease marker in its
//! environment), starts a process that leaves the group by one route, its
//! leader exits or is killed, and `stop_all` must leave nothing of the
//! attempt alive — checked by the escapee's pid, by a marker scan of
//! `/proc`, and by the attempt's cgroup being gone.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use slothqueue_runner::LEASE_VAR;
use slothqueue_runner::{Containment, Mechanism, StopReport};

use crate::support::{alive, eventually, read_when_written};

const GRACE: Duration = Duration::from_millis(300);

struct Attempt {
    containment: Containment,
    marker: String,
    dir: tempfile::TempDir,
    leader: tokio::process::Child,
    /// The escapees seen, with their command names: KILLed when the test
    /// ends, so that a failing test leaves nothing behind.
    escapees: Vec<(i32, String)>,
}

impl Drop for Attempt {
    fn drop(&mut self) {
        for (pid, comm) in &self.escapees {
            let same = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim().starts_with(comm.as_str()));
            if same && alive(*pid) {
                kill(*pid);
            }
        }
    }
}

/// A Python without pyenv's shim in front when there is one (faster).
fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" }
}

fn runner_pgid() -> i32 {
    rustix::process::getpgrp().as_raw_nonzero().get()
}

/// Spawns `sh -c script` like the runner: own group, marker set, stdio
/// closed, placed in the attempt's cgroup before exec.
fn spawn(name: &str, script: &str, cgroup: bool) -> Attempt {
    spawn_with(name, script, cgroup, Stdio::null())
}

fn spawn_with(name: &str, script: &str, cgroup: bool, stdin: Stdio) -> Attempt {
    static N: AtomicU32 = AtomicU32::new(0);
    let marker =
        format!("contain-test/{name}/{}/{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    let containment = if cgroup {
        Containment::new(9000, 1, &marker)
    } else {
        Containment::without_cgroup(&marker)
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new("sh");
    cmd.args(["-c", script])
        .current_dir(dir.path())
        .env(LEASE_VAR, &marker)
        .env("PY", python())
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    containment.join_before_exec(&mut cmd);
    let leader = cmd.spawn().unwrap();
    containment.spawned(leader.id().unwrap());
    Attempt { containment, marker, dir, leader, escapees: Vec::new() }
}

fn stat_fields(pid: i32) -> Option<(char, i32, i32, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
    // state, ppid, pgrp, session
    Some((
        rest.first()?.chars().next()?,
        rest.get(1)?.parse().ok()?,
        rest.get(2)?.parse().ok()?,
        rest.get(3)?.parse().ok()?,
    ))
}

/// Live processes carrying `marker`.
fn marked(marker: &str) -> Vec<i32> {
    let needle = format!("{LEASE_VAR}={marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| alive(pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .collect()
}

impl Attempt {
    /// Waits for the job to write its escapee's pid into `name`, and for
    /// that process to have run `comm`.
    async fn escapee(&mut self, file: &str, comm: &str) -> i32 {
        let pid: i32 = read_when_written(&self.dir.path().join(file)).await.trim().parse().unwrap();
        eventually(&format!("pid {pid} to run {comm}"), || {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim().starts_with(comm))
        })
        .await;
        self.escapees.push((pid, comm.to_owned()));
        pid
    }

    async fn leader_exits(&mut self) {
        let status = tokio::time::timeout(crate::support::DEADLINE, self.leader.wait()).await;
        assert!(status.unwrap().unwrap().success(), "the job's leader failed");
    }

    /// `stop_all`, then: nothing of the attempt alive by pid, marker and
    /// cgroup; the leader still reaped by its own `wait`.
    async fn stop_and_check(mut self, escapees: &[i32]) -> StopReport {
        let cgroup = self.containment.cgroup_dir().map(Path::to_path_buf);
        let report = self.containment.stop_all(GRACE).await;
        assert!(report.is_clean(), "survivors: {report}");
        for &pid in escapees {
            assert!(!alive(pid), "escapee {pid} survived: {report}");
        }
        assert_eq!(marked(&self.marker), Vec::<i32>::new(), "marked processes survived");
        if let Some(dir) = cgroup {
            assert!(report.cgroup_removed && !dir.exists(), "cgroup {} left", dir.display());
            // No adopted zombie of the attempt is left unreaped (a zombie
            // keeps its cgroup path in /proc/<pid>/cgroup).
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let me = std::process::id() as i32;
            let leader = self.leader.id().map(|p| p as i32);
            let zombies: Vec<i32> = std::fs::read_dir("/proc")
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                .filter(|&pid| Some(pid) != leader)
                .filter(|&pid| {
                    stat_fields(pid).is_some_and(|(st, ppid, ..)| st == 'Z' && ppid == me)
                })
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                        .is_ok_and(|c| c.contains(&name))
                })
                .collect();
            assert_eq!(zombies, Vec::<i32>::new(), "adopted zombies left: {report}");
        }
        // tokio still reaps its own child: containment never took it.
        let waited = tokio::time::timeout(crate::support::DEADLINE, self.leader.wait()).await;
        assert!(waited.unwrap().is_ok(), "the leader was reaped behind tokio's back");
        report
    }
}

#[tokio::test]
async fn contain_mechanism_in_force_here() {
    let a = spawn("mechanism", "exit 0", true);
    let m = a.containment.mechanism();
    if m != Mechanism::Cgroup {
        #[expect(clippy::print_stderr, reason = "a test that cannot use a cgroup says so")]
        {
            eprintln!(
                "NOTE: no cgroup on this machine ({}); mechanism {m}",
                a.containment.not_contained().unwrap_or_default()
            );
        }
        assert!(a.containment.not_contained().is_some());
    } else {
        assert_eq!(a.containment.not_contained(), None);
    }
    assert_ne!(m, Mechanism::GroupOnly, "the runner could not become a child subreaper");
    a.stop_and_check(&[]).await;
}

#[tokio::test]
async fn contain_setsid_background() {
    let mut a = spawn("setsid", "setsid sleep 300 & echo $! > pid", true);
    let pid = a.escapee("pid", "sleep").await;
    a.leader_exits().await;
    let (_, _, pgrp, sid) = stat_fields(pid).unwrap();
    assert!(pgrp == pid && sid == pid, "sleep did not leave the group and session");
    assert!(a.containment.contains(pid));
    let report = a.stop_and_check(&[pid]).await;
    assert!(report.stopped() >= 1, "{report}");
}

#[tokio::test]
async fn contain_bash_job_control() {
    let mut a =
        spawn("set-m", "exec bash -c 'set -m; sleep 300 & echo $! > pid; wait' 2>/dev/null", true);
    let pid = a.escapee("pid", "sleep").await;
    let leader = a.leader.id().unwrap() as i32;
    let (_, _, pgrp, _) = stat_fields(pid).unwrap();
    assert_ne!(pgrp, leader, "set -m did not give the job its own group");
    // The leader (bash, waiting) is still alive: stopped with the rest.
    let report = a.stop_and_check(&[pid, leader]).await;
    assert!(report.stopped() >= 2, "{report}");
}

#[tokio::test]
async fn contain_setpgid_program() {
    let mut a = spawn(
        "setpgid",
        "\"$PY\" -c 'import os,time; os.setpgid(0,0); time.sleep(300)' & echo $! > pid",
        true,
    );
    let pid = a.escapee("pid", "python").await;
    eventually("python to lead its own group", || {
        stat_fields(pid).is_some_and(|(_, _, pgrp, _)| pgrp == pid)
    })
    .await;
    a.leader_exits().await;
    a.stop_and_check(&[pid]).await;
}

#[tokio::test]
async fn contain_double_forked_daemon() {
    let mut a = spawn("daemon", "(setsid sh -c 'sleep 300 & echo $! > pid' &)", true);
    let pid = a.escapee("pid", "sleep").await;
    a.leader_exits().await;
    let me = std::process::id() as i32;
    eventually("the daemon's sleep to be re-parented to the runner", || {
        stat_fields(pid).is_some_and(|(_, ppid, _, _)| ppid == me)
    })
    .await;
    a.stop_and_check(&[pid]).await;
}

#[tokio::test]
async fn contain_process_in_the_runners_own_group() {
    let ours = runner_pgid();
    let script = format!(
        "\"$PY\" -c 'import os,time; os.setpgid(0, {ours}); time.sleep(300)' & echo $! > pid"
    );
    let mut a = spawn("runner-group", &script, true);
    let pid = a.escapee("pid", "python").await;
    eventually("python to join the runner's group", || {
        stat_fields(pid).is_some_and(|(_, _, pgrp, _)| pgrp == ours)
    })
    .await;
    a.leader_exits().await;
    // Killed by pid: this test process (in that group) is still here.
    a.stop_and_check(&[pid]).await;
    assert!(alive(std::process::id() as i32));
}

#[tokio::test]
async fn contain_cleared_environment() {
    let mut a = spawn("env-i", "env -i setsid sleep 300 & echo $! > pid", true);
    let pid = a.escapee("pid", "sleep").await;
    a.leader_exits().await;
    assert!(std::fs::read(format!("/proc/{pid}/environ")).unwrap().is_empty());
    if a.containment.mechanism() == Mechanism::Cgroup {
        assert!(a.containment.contains(pid), "the cgroup holds it");
        let report = a.stop_and_check(&[pid]).await;
        assert_eq!(report.by_cgroup, 1, "{report}");
    } else {
        #[expect(clippy::print_stderr, reason = "a test that cannot use a cgroup says so")]
        {
            eprintln!(
                "NOTE: NO CGROUP ({}): a process with a cleared environment escapes; \
                 checking that the report says so",
                a.containment.not_contained().unwrap_or_default()
            );
        }
        let report = a.containment.stop_all(GRACE).await;
        assert!(report.not_contained.is_some(), "{report}");
        kill(pid);
    }
}

/// The proof that the cgroup is what catches it: without one, the same
/// escape survives `stop_all`, and the report says the attempt was not
/// contained.
#[tokio::test]
async fn contain_without_a_cgroup_a_cleared_environment_escapes() {
    let mut a = spawn("env-i-nocg", "env -i setsid sleep 300 & echo $! > pid", false);
    let pid = a.escapee("pid", "sleep").await;
    a.leader_exits().await;
    let report = a.containment.stop_all(GRACE).await;
    assert_eq!(report.mechanism, Mechanism::SubreaperProc);
    assert!(report.not_contained.is_some(), "{report}");
    assert!(alive(pid), "expected the escape to survive without a cgroup");
    assert!(!a.containment.contains(pid));
    kill(pid);
}

/// Without a cgroup, a process seen while it still descended from the job
/// (`observe`, on a heartbeat) stays the attempt's after it cut every tie.
#[tokio::test]
async fn contain_without_a_cgroup_an_observed_escape_dies() {
    let mut a = spawn_with(
        "observed",
        "env -i setsid sleep 300 & echo $! > pid; read x || true",
        false,
        Stdio::piped(),
    );
    let pid = a.escapee("pid", "sleep").await;
    assert!(a.containment.observe() >= 2, "the leader and its child");
    drop(a.leader.stdin.take()); // the leader's `read` ends: it exits
    a.leader_exits().await;
    let me = std::process::id() as i32;
    eventually("the sleep to be re-parented to the runner", || {
        stat_fields(pid).is_some_and(|(_, ppid, _, _)| ppid == me)
    })
    .await;
    assert!(a.containment.contains(pid));
    let report = a.stop_and_check(&[pid]).await;
    assert_eq!(report.by_descendant, 1, "{report}");
}

/// Without a cgroup the other routes are still caught: group, marker and
/// the parent chain under the subreaper.
#[tokio::test]
async fn contain_without_a_cgroup_marked_escapes_die() {
    let mut a = spawn(
        "nocg",
        "setsid sleep 300 & echo $! > a; (setsid sh -c 'sleep 300 & echo $! > b' &); \
         sleep 300 & echo $! > c",
        false,
    );
    let pids = [a.escapee("a", "sleep").await, a.escapee("b", "sleep").await];
    let in_group = a.escapee("c", "sleep").await;
    a.leader_exits().await;
    let report = a.stop_and_check(&[pids[0], pids[1], in_group]).await;
    assert_eq!(report.mechanism, Mechanism::SubreaperProc);
    assert_eq!(report.by_group, 1, "{report}");
    assert!(report.by_marker >= 2, "{report}");
}

/// A job that ignores TERM is KILLed after the grace, its escapees too.
#[tokio::test]
async fn contain_term_ignored_then_killed() {
    let mut a = spawn(
        "ignores-term",
        "trap '' TERM; setsid sh -c 'trap \"\" TERM; echo $$ > pid; while :; do sleep 1; done' &",
        true,
    );
    let pid = a.escapee("pid", "sh").await;
    a.leader_exits().await;
    a.stop_and_check(&[pid]).await;
}

/// Ctrl-Z: the attempt's processes, escapees included, stop and continue.
#[tokio::test]
async fn contain_suspend_and_resume() {
    let mut a = spawn("suspend", "setsid sleep 300 & echo $! > pid; wait", true);
    let pid = a.escapee("pid", "sleep").await;
    let leader = a.leader.id().unwrap() as i32;
    let state = |pid| stat_fields(pid).map(|s| s.0);
    assert!(a.containment.suspend() >= 2);
    eventually("the job to stop", || state(pid) == Some('T') && state(leader) == Some('T')).await;
    assert!(a.containment.resume() >= 2);
    eventually("the job to continue", || state(pid) != Some('T') && state(leader) != Some('T'))
        .await;
    a.stop_and_check(&[pid, leader]).await;
}

/// Stopping an attempt never reaps a child that is not the attempt's.
#[tokio::test]
async fn contain_leaves_other_children_to_their_owner() {
    let mut other = tokio::process::Command::new("true").spawn().unwrap();
    let other_pid = other.id().unwrap() as i32;
    eventually("the other child to exit", || !alive(other_pid)).await;
    let mut a = spawn("others", "setsid sleep 300 & echo $! > pid", true);
    let pid = a.escapee("pid", "sleep").await;
    a.leader_exits().await;
    a.stop_and_check(&[pid]).await;
    assert!(other.wait().await.unwrap().success(), "someone else reaped the other child");
}

fn kill(pid: i32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// A process that is not the attempt's (another job's, the user's) is
/// neither contained nor touched by the attempt's stop.
#[tokio::test]
async fn contain_strangers_are_left_alone() {
    let mut stranger = tokio::process::Command::new("sleep")
        .arg("300")
        .env(LEASE_VAR, "contain-test/someone-else")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = stranger.id().unwrap() as i32;
    let mut a = spawn("strangers", "setsid sleep 300 & echo $! > pid", true);
    let escapee = a.escapee("pid", "sleep").await;
    a.leader_exits().await;
    assert!(!a.containment.contains(pid));
    a.stop_and_check(&[escapee]).await;
    assert!(alive(pid), "a stranger was stopped");
    stranger.start_kill().unwrap();
    stranger.wait().await.unwrap();
}
