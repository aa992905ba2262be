//! Escapes through the real runner: a shell job starts a process that
//! leaves its process group by one route, then the job is stopped by one
//! path (max runtime, cancel, lost lease, shutdown) or exits 0 leaving the
//! escapee behind. The escapee must be dead before the runner writes the
//! attempt's ending (a hook on the store checks it at the write), so that
//! nothing of an attempt runs once the job can be claimed again. Every
//! cell runs with the attempt's cgroup and without one (group, lease
//! marker and parent chain under the subreaper).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slothqueue_core::{ClaimRequest, JobId, JobState, Owner};
use slothqueue_runner::{Runner, RunnerEvent};

use crate::support::{AlwaysGone, Env, Intercepted, alive, env, read_when_written};

/// How a job's process leaves its group. Each writes the escapee's pid
/// into `esc` once it has left (not before).
#[derive(Clone, Copy, Debug)]
enum Route {
    /// `setsid`: a new session and group.
    Setsid,
    /// bash job control: `set -m` gives a background job its own group.
    BashSetM,
    /// A program calling `setpgid(0, 0)`.
    Setpgid,
    /// A double-forked daemon in a new session, re-parented away.
    Daemon,
    /// A process that moves into the runner's own group.
    RunnerGroup,
}

/// How the attempt ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    MaxRuntime,
    Cancel,
    LeaseLost,
    Shutdown,
    /// The leader exits 0 and leaves the escapee running.
    ExitZero,
}

fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" }
}

impl Route {
    fn script(self) -> String {
        let py = python();
        match self {
            Route::Setsid => "setsid sh -c 'echo $$ > esc; exec sleep 300' &".to_owned(),
            Route::BashSetM => "bash -c 'set -m; sleep 300 & echo $! > esc' 2>/dev/null".to_owned(),
            Route::Setpgid => format!(
                "{py} -c 'import os,time; os.setpgid(0,0); \
                 open(\"esc\",\"w\").write(\"%d\\n\" % os.getpid()); time.sleep(300)' &"
            ),
            Route::Daemon => "(setsid sh -c 'sleep 300 & echo $! > esc' &)".to_owned(),
            Route::RunnerGroup => {
                let ours = rustix::process::getpgrp().as_raw_nonzero().get();
                format!(
                    "{py} -c 'import os,time; os.setpgid(0,{ours}); \
                     open(\"esc\",\"w\").write(\"%d\\n\" % os.getpid()); time.sleep(300)' &"
                )
            }
        }
    }
}

/// KILLs the escapee when the test ends, so a failing test leaves nothing.
struct Reap(PathBuf);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(pid) = read_pid(&self.0) {
            let ours = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.starts_with("sleep") || c.starts_with("python"));
            if ours && alive(pid) {
                if let Some(p) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                }
            }
        }
    }
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Runs one cell: `route` × `stop`, with or without cgroups. Returns the
/// mechanism the attempt's log header names.
async fn escape(route: Route, stop: Stop, cgroups: bool) -> String {
    let env = env();
    let esc = env.path("esc");
    let _reap = Reap(esc.clone());
    let tail = match stop {
        // The leader waits until the escape happened, then exits 0.
        Stop::ExitZero => "while [ ! -s esc ]; do sleep 0.02; done; echo done",
        _ => "sleep 300",
    };
    let command = format!("{}\n{tail}", route.script());
    let id = env
        .add(&command, |j| {
            let j = j.max_attempts(3);
            if stop == Stop::MaxRuntime { j.max_runtime(Some(Duration::from_secs(2))) } else { j }
        })
        .await;
    // Whether the escapee was alive when the attempt's ending was written.
    let alive_at_write: Arc<Mutex<Vec<i32>>> = Arc::default();
    let mut store = Intercepted::new(env.store.clone());
    let (seen, path) = (alive_at_write.clone(), esc.clone());
    store.before_ending = Box::new(move || {
        if let Some(pid) = read_pid(&path).filter(|&p| alive(p)) {
            seen.lock().unwrap().push(pid);
        }
        Ok(())
    });
    let mut cfg = env.config();
    cfg.cgroups = cgroups;
    let mut running = env.start(Runner::new(Arc::new(store), cfg));
    let pid: i32 = read_when_written(&esc).await.trim().parse().unwrap();
    // It wrote its pid, so it ran; with exit 0 the leader ends as soon as
    // it did, and the runner may already have killed it by now.
    if stop != Stop::ExitZero {
        assert!(alive(pid), "{route:?}: the escapee is not running");
    }
    match stop {
        Stop::MaxRuntime | Stop::ExitZero => {}
        Stop::Cancel => {
            env.store.cancel(id, env.now()).await.unwrap();
        }
        Stop::Shutdown => running.trigger.trigger(),
        Stop::LeaseLost => {
            let thief = Owner::named("thief");
            let request = ClaimRequest::new(thief, Arc::new(AlwaysGone));
            let stolen = env.store.claim(&request, env.now()).await.unwrap();
            assert_eq!(stolen.map(|s| s.job.id), Some(id));
            running
                .events
                .wait_for("the lost lease", |e| matches!(e, RunnerEvent::LeaseLost { .. }))
                .await;
            assert!(!alive(pid), "{route:?} × {stop:?}: escapee {pid} outlived the lost lease");
        }
    }
    running.finish().await.unwrap();
    assert_eq!(
        alive_at_write.lock().unwrap().as_slice(),
        &[] as &[i32],
        "{route:?} × {stop:?} (cgroups {cgroups}): the escapee was alive when the ending was written"
    );
    assert!(!alive(pid), "{route:?} × {stop:?} (cgroups {cgroups}): escapee {pid} survived");
    check_ending(&env, id, stop).await;
    mechanism(&env, id)
}

/// The job as each path leaves it.
async fn check_ending(env: &Env, id: JobId, stop: Stop) {
    let job = env.job(id).await;
    let expected = match stop {
        Stop::MaxRuntime => JobState::Pending, // failed, retried later
        Stop::Cancel => JobState::Cancelled,
        Stop::LeaseLost => JobState::Running, // the thief's
        Stop::Shutdown => JobState::Pending,
        Stop::ExitZero => JobState::Done,
    };
    assert_eq!(job.state, expected, "{stop:?}: {job:?}");
    match stop {
        Stop::Shutdown => assert_eq!(job.attempts, 0, "a shutdown charges nothing"),
        Stop::MaxRuntime | Stop::Cancel => {
            let error = job.last_error.unwrap_or_default();
            assert!(error.contains(", contained by "), "{error}");
        }
        _ => {}
    }
}

/// The mechanism the attempt's log header names.
fn mechanism(env: &Env, id: JobId) -> String {
    let log = std::fs::read_to_string(slothqueue_runner::log_path(&env.logs(), id)).unwrap();
    let header = log.lines().next().unwrap_or_default();
    let m = header
        .split(", contained by ")
        .nth(1)
        .and_then(|r| r.split(": ").next())
        .and_then(|r| r.split(", limits").next());
    m.unwrap_or_else(|| panic!("no mechanism in the log header: {header}")).to_owned()
}

macro_rules! cells {
    ($($name:ident: $route:ident, $stop:ident;)*) => {
        mod with_cgroup {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let m = escape(Route::$route, Stop::$stop, true).await;
                    assert!(m == "cgroup" || m == "subreaper+proc", "{m}");
                }
            )*
        }
        mod without_cgroup {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let m = escape(Route::$route, Stop::$stop, false).await;
                    assert_eq!(m, "subreaper+proc");
                }
            )*
        }
    };
}

cells! {
    max_runtime_setsid: Setsid, MaxRuntime;
    max_runtime_bash_set_m: BashSetM, MaxRuntime;
    max_runtime_setpgid: Setpgid, MaxRuntime;
    max_runtime_daemon: Daemon, MaxRuntime;
    max_runtime_runner_group: RunnerGroup, MaxRuntime;
    cancel_setsid: Setsid, Cancel;
    cancel_daemon: Daemon, Cancel;
    lease_lost_setsid: Setsid, LeaseLost;
    lease_lost_setpgid: Setpgid, LeaseLost;
    shutdown_setsid: Setsid, Shutdown;
    shutdown_bash_set_m: BashSetM, Shutdown;
    exit_zero_setsid: Setsid, ExitZero;
    exit_zero_daemon: Daemon, ExitZero;
    exit_zero_runner_group: RunnerGroup, ExitZero;
}

/// Where the machine gives a writable cgroup v2 (root here), the attempt
/// is contained by it.
#[tokio::test]
async fn the_mechanism_in_force_is_the_cgroup_where_one_can_be_written() {
    let probe = slothqueue_runner::Containment::new(1, 1, "escapes-probe");
    let expected = probe.mechanism().to_string();
    drop(probe);
    let m = escape(Route::Setsid, Stop::ExitZero, true).await;
    assert_eq!(m, expected);
}
