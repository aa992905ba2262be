//! The runner as a process of its own, stopped by real signals.
//!
//! Each test re-runs this test binary as a helper (`helper_runner_process`,
//! selected by an environment variable) under `sh -c "trap '' TERM INT
//! QUIT; exec …"`, so the helper starts with those signals *ignored*, as a
//! runner started in the background or by some supervisors does (the
//! runner catches all three from then on: TERM and INT to stop, QUIT to
//! drop, so that its jobs do not inherit an ignored QUIT). The
//! helper drains the queue with `unix_signals()` and exits with the run's
//! exit code.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail the test loudly; clippy exempts only #[test] bodies"
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slothqueue_core::{Clock, JobState, NewJob, Store, SystemClock};
use slothqueue_runner::{Runner, RunnerConfig, RunnerEvent, unix_signals};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

const HELPER: &str = "SLOTHQUEUE_RUNNER_TEST_HELPER";
const GRACE_MS: &str = "SLOTHQUEUE_RUNNER_TEST_GRACE_MS";
const BACKOFF_MS: &str = "SLOTHQUEUE_RUNNER_TEST_BACKOFF_MS";
const SLOTS: &str = "SLOTHQUEUE_RUNNER_TEST_SLOTS";
const DEADLINE: Duration = Duration::from_secs(30);

fn open(dir: &Path) -> SqliteStore {
    let mut options = SqliteOptions::default();
    if let Some(ms) = std::env::var(BACKOFF_MS).ok().and_then(|v| v.parse().ok()) {
        options.policy.backoff_base = Duration::from_millis(ms);
    }
    SqliteStore::open(&dir.join("queue.db"), options).unwrap()
}

/// The helper process's body; a no-op when run as an ordinary test.
#[tokio::test]
async fn helper_runner_process() {
    let Some(dir) = std::env::var_os(HELPER).map(PathBuf::from) else { return };
    let shutdown = unix_signals().unwrap();
    let mut cfg = RunnerConfig::new(dir.join("logs"));
    cfg.heartbeat_interval = Some(Duration::from_millis(100));
    if let Some(ms) = std::env::var(GRACE_MS).ok().and_then(|v| v.parse().ok()) {
        cfg.kill_grace = Duration::from_millis(ms);
    }
    if let Some(n) = std::env::var(SLOTS).ok().and_then(|v| v.parse().ok()) {
        cfg.slots = n;
    }
    let events = Mutex::new(std::fs::File::create(dir.join("events")).unwrap());
    let reporter = move |e: RunnerEvent| {
        let mut f = events.lock().unwrap();
        writeln!(f, "{e}").unwrap();
    };
    let summary = Runner::new(Arc::new(open(&dir)), cfg).run(reporter, shutdown).await.unwrap();
    std::process::exit(i32::from(summary.exit_code()));
}

/// Starts the helper with TERM, INT and QUIT ignored.
fn start_helper(dir: &Path, grace: Duration) -> tokio::process::Child {
    start_helper_with(dir, grace, 1)
}

/// Starts the helper with TERM, INT and QUIT ignored, running `slots` jobs
/// at once.
fn start_helper_with(dir: &Path, grace: Duration, slots: usize) -> tokio::process::Child {
    tokio::process::Command::new("sh")
        .arg("-c")
        .arg("trap '' TERM INT QUIT; exec \"$0\" helper_runner_process --exact --nocapture")
        .arg(std::env::current_exe().unwrap())
        .env(HELPER, dir)
        .env(GRACE_MS, grace.as_millis().to_string())
        .env(BACKOFF_MS, "50")
        .env(SLOTS, slots.to_string())
        .env("SLOTHQUEUE_TOKEN", "secret-the-job-must-not-see")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(DEADLINE, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for {what}");
}

fn status_field(status: &str, name: &str) -> u64 {
    let v = status.lines().find_map(|l| l.strip_prefix(name)).unwrap().trim();
    u64::from_str_radix(v, 16).unwrap()
}

const fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !matches!(
            s.rsplit_once(')').and_then(|(_, r)| r.trim_start().chars().next()),
            Some('Z' | 'X')
        )
    })
}

async fn exit_code(mut helper: tokio::process::Child) -> Option<i32> {
    let status =
        tokio::time::timeout(DEADLINE, helper.wait()).await.expect("the runner did not exit");
    status.unwrap().code()
}

#[tokio::test]
async fn sigterm_releases_the_job_even_when_term_was_ignored_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = open(d);
    let command = format!(
        "env > {d}/env; echo $$ > {d}/pid.tmp; mv {d}/pid.tmp {d}/pid; exec sleep 100",
        d = d.display()
    );
    let id = store
        .push(NewJob::shell(command, d.to_string_lossy()), SystemClock.now())
        .await
        .unwrap()
        .job
        .id;
    let helper = start_helper(d, Duration::from_millis(500));
    let helper_pid = helper.id().unwrap() as i32;
    eventually("the job to start", || d.join("pid").exists()).await;
    let job_pid: i32 = std::fs::read_to_string(d.join("pid")).unwrap().trim().parse().unwrap();
    eventually("the job to exec sleep", || {
        std::fs::read_to_string(format!("/proc/{job_pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
    })
    .await;

    // The helper started with TERM, INT and QUIT ignored (the `trap`). It
    // catches TERM and INT now, and QUIT too, dropping it: still ignored by
    // the runner, but not inherited by its jobs, which therefore spawn
    // without a fork of the whole runner (about 1 ms a job).
    let own = std::fs::read_to_string(format!("/proc/{helper_pid}/status")).unwrap();
    assert_eq!(status_field(&own, "SigIgn:") & bit(3), 0, "QUIT still ignored: a fork per job");
    let caught = bit(15) | bit(2) | bit(3);
    assert_eq!(status_field(&own, "SigCgt:") & caught, caught);
    // A QUIT now is still ignored: the shutdown below ends the run as if
    // it never came (the default action would have ended the process).
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(helper_pid).unwrap(),
        rustix::process::Signal::QUIT,
    )
    .unwrap();

    // S22: the job has nothing blocked or ignored that would keep it from
    // stopping.
    let job_status = std::fs::read_to_string(format!("/proc/{job_pid}/status")).unwrap();
    assert_eq!(status_field(&job_status, "SigBlk:"), 0);
    assert_eq!(status_field(&job_status, "SigIgn:") & (bit(15) | bit(2) | bit(3)), 0);
    // Nor does it see the runner's slothqueue variables, only its own.
    let env = std::fs::read_to_string(d.join("env")).unwrap();
    assert!(!env.contains("SLOTHQUEUE_TOKEN"), "{env}");
    assert!(env.lines().any(|l| l == format!("SLOTHQUEUE_JOB_ID={id}")), "{env}");

    rustix::process::kill_process(
        rustix::process::Pid::from_raw(helper_pid).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert_eq!(exit_code(helper).await, Some(130));
    let job = store.get(id).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Pending, 0), "released, attempt not charged");
    assert!(!alive(job_pid), "the job survived the runner's shutdown");
    let events = std::fs::read_to_string(d.join("events")).unwrap();
    let lines: Vec<&str> = events.lines().collect();
    assert_eq!(lines.len(), 3, "{events}");
    assert!(lines[0].starts_with(&format!("shutting down: stopping job #{id}")), "{events}");
    assert!(lines[1].starts_with(&format!("job #{id} interrupted after ")), "{events}");
    assert_eq!(lines[2], "interrupted: 0 done, 0 failed");
    assert!(store.runners().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_second_signal_kills_a_job_that_ignores_term_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = open(d);
    let command = format!("trap '' TERM; echo $$ > {d}/pid; exec sleep 100", d = d.display());
    let id = store
        .push(NewJob::shell(command, d.to_string_lossy()), SystemClock.now())
        .await
        .unwrap()
        .job
        .id;
    // An hour of grace: only the second signal can end this in time.
    let helper = start_helper(d, Duration::from_secs(3600));
    let helper_pid = rustix::process::Pid::from_raw(helper.id().unwrap() as i32).unwrap();
    eventually("the job to start", || {
        std::fs::read_to_string(d.join("pid")).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    let job_pid: i32 = std::fs::read_to_string(d.join("pid")).unwrap().trim().parse().unwrap();
    rustix::process::kill_process(helper_pid, rustix::process::Signal::INT).unwrap();
    eventually("the first signal to be seen", || {
        std::fs::read_to_string(d.join("events")).is_ok_and(|s| s.contains("shutting down"))
    })
    .await;
    assert!(alive(job_pid), "the job ignores TERM and must still be in its grace");
    rustix::process::kill_process(helper_pid, rustix::process::Signal::TERM).unwrap();
    assert_eq!(exit_code(helper).await, Some(130));
    assert!(!alive(job_pid));
    let job = store.get(id).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Pending, 0), "still released, not lost");
}

/// A job that stops its own runner (`kill -TERM $PPID`: the job's shell's
/// parent is the runner) is charged for it: a failure that says so, with
/// backoff and max attempts, so that under a supervisor restarting the
/// runner it ends `failed` instead of rerunning forever.
#[tokio::test]
async fn a_job_that_signals_its_own_runner_is_charged_and_ends_failed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = open(d);
    let command = "kill -TERM $PPID; exec sleep 30";
    let id = store
        .push(NewJob::shell(command, d.to_string_lossy()).max_attempts(3), SystemClock.now())
        .await
        .unwrap()
        .job
        .id;
    let mut codes = Vec::new();
    for _ in 0..4 {
        // The supervisor's loop: start the runner again once the job is due.
        let due = tokio::time::timeout(DEADLINE, async {
            loop {
                let job = store.get(id).await.unwrap();
                if job.state.is_terminal() || job.not_before <= SystemClock.now() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        due.await.expect("the job never came due again");
        let helper = start_helper(d, Duration::from_millis(300));
        codes.push(exit_code(helper).await);
    }
    let job = store.get(id).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Failed, 3), "{codes:?}");
    let error = job.last_error.unwrap_or_default();
    assert!(error.starts_with("stopped its own runner (SIGTERM from pid "), "{error}");
    assert!(error.contains(", a process of this job) ("), "{error}");
    assert_eq!(codes, [Some(130), Some(130), Some(130), Some(0)]);
    let failed = store.events(id).await.unwrap();
    let messages: Vec<_> = failed
        .iter()
        .filter(|e| e.kind.as_str() == "failed")
        .filter_map(|e| e.message.clone())
        .collect();
    assert_eq!(messages.len(), 3, "{failed:?}");
    assert!(
        messages.iter().all(|m| m.starts_with("stopped its own runner (SIGTERM")),
        "{messages:?}"
    );
}

const ORDER_HELPER: &str = "SLOTHQUEUE_RUNNER_TEST_ORDER_HELPER";

/// The helper for the test below: a run first (which catches the signals
/// it inherited as ignored), the shutdown signals after; exits 0 when an
/// inherited-ignored QUIT is still left out of them.
#[tokio::test]
async fn helper_run_before_signals() {
    let Some(dir) = std::env::var_os(ORDER_HELPER).map(PathBuf::from) else { return };
    let cfg = RunnerConfig::new(dir.join("logs"));
    let runner = Runner::new(Arc::new(open(&dir)), cfg);
    runner.run(|_: RunnerEvent| {}, slothqueue_runner::ShutdownSignal::never()).await.unwrap();
    let signals =
        slothqueue_runner::unix_signals_with(slothqueue_runner::inherited_ignores()).unwrap();
    let quit = signal_hook::consts::signal::SIGQUIT;
    std::process::exit(if signals.listening.contains(quit) { 3 } else { 0 });
}

/// A QUIT inherited as ignored stays out of the shutdown signals even when
/// the runner caught it (so that jobs do not inherit it) before they were
/// set up: the ignored set is read before anything is caught.
#[tokio::test]
async fn an_inherited_ignored_quit_stays_ignored_whatever_starts_first() {
    let dir = tempfile::tempdir().unwrap();
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg("trap '' QUIT; exec \"$0\" helper_run_before_signals --exact --nocapture")
        .arg(std::env::current_exe().unwrap())
        .env(ORDER_HELPER, dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "QUIT counted as a shutdown signal after the run caught it");
}

/// Pushes three jobs that write their pid to `pid.<id>` and sleep, unless
/// `second` exists (then they succeed at once: a second run).
async fn three_sleepers(store: &SqliteStore, d: &Path) -> Vec<slothqueue_core::JobId> {
    let command = format!(
        "[ -e {d}/second ] && exit 0; \
         echo $$ > {d}/pid.$SLOTHQUEUE_JOB_ID.tmp; mv {d}/pid.$SLOTHQUEUE_JOB_ID.tmp {d}/pid.$SLOTHQUEUE_JOB_ID; \
         exec sleep 100",
        d = d.display()
    );
    let mut ids = Vec::new();
    for _ in 0..3 {
        let job = NewJob::shell(command.clone(), d.to_string_lossy());
        ids.push(store.push(job, SystemClock.now()).await.unwrap().job.id);
    }
    ids
}

async fn pids_of(d: &Path, ids: &[slothqueue_core::JobId]) -> Vec<i32> {
    eventually("every job to start", || ids.iter().all(|id| d.join(format!("pid.{id}")).exists()))
        .await;
    ids.iter()
        .map(|id| {
            std::fs::read_to_string(d.join(format!("pid.{id}"))).unwrap().trim().parse().unwrap()
        })
        .collect()
}

#[tokio::test]
async fn sigterm_with_three_jobs_running_releases_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = open(d);
    let ids = three_sleepers(&store, d).await;
    let helper = start_helper_with(d, Duration::from_millis(500), 3);
    let helper_pid = rustix::process::Pid::from_raw(helper.id().unwrap() as i32).unwrap();
    let pids = pids_of(d, &ids).await;
    rustix::process::kill_process(helper_pid, rustix::process::Signal::TERM).unwrap();
    assert_eq!(exit_code(helper).await, Some(130));
    for (id, pid) in ids.iter().zip(&pids) {
        let job = store.get(*id).await.unwrap();
        assert_eq!((job.state, job.attempts), (JobState::Pending, 0), "job #{id} not released");
        assert!(!alive(*pid), "job #{id} survived the runner's shutdown");
    }
    let events = std::fs::read_to_string(d.join("events")).unwrap();
    let lines: Vec<&str> = events.lines().collect();
    assert_eq!(lines.len(), 7, "{events}");
    for id in &ids {
        let stopping = format!("shutting down: stopping job #{id} ");
        assert!(lines.iter().any(|l| l.starts_with(&stopping)), "{events}");
        let released = format!("job #{id} interrupted after ");
        assert!(lines.iter().any(|l| l.starts_with(&released)), "{events}");
    }
    assert_eq!(lines[6], "interrupted: 0 done, 0 failed");
    assert!(store.runners().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_runner_killed_with_three_jobs_running_leaves_them_to_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = open(d);
    let ids = three_sleepers(&store, d).await;
    let mut helper = start_helper_with(d, Duration::from_millis(500), 3);
    let pids = pids_of(d, &ids).await;
    helper.kill().await.unwrap(); // SIGKILL: no handback, no record removed
    for id in &ids {
        assert_eq!(store.get(*id).await.unwrap().state, JobState::Running);
    }
    for pid in &pids {
        assert!(alive(*pid), "the dead runner's job {pid} should still run");
    }
    std::fs::write(d.join("second"), "").unwrap();
    let next = start_helper_with(d, Duration::from_millis(500), 3);
    assert_eq!(exit_code(next).await, Some(0));
    for pid in &pids {
        assert!(!alive(*pid), "orphan {pid} of the dead runner survived the reclaim");
    }
    let events = std::fs::read_to_string(d.join("events")).unwrap();
    // The killed orphans are init's to reap; an init that reaps slowly (as
    // in some containers) leaves their zombies in the dead runner's attempt
    // cgroups past the sweep's wait, which warns: not this test's concern.
    let first = events.lines().find(|l| !l.starts_with("warning: cgroup ")).unwrap_or_default();
    assert!(first.starts_with("reclaimed 3 stale job(s): "), "{events}");
    assert!(events.lines().any(|l| l == "finished: 3 done, 0 failed"), "{events}");
    for id in &ids {
        let job = store.get(*id).await.unwrap();
        assert_eq!((job.state, job.attempts), (JobState::Done, 2), "job #{id}");
    }
}
