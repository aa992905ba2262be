//! Self-fencing (issue 31, finding 4; `docs/reliability.md` S26): a
//! runner cut off from its PostgreSQL server stops its job before the
//! lease runs out, so the runner that takes the job over after the lease
//! expired never runs it beside the first.
//!
//! Runner A reaches the server through a relay **process** (this test
//! binary started again as its ignored `relay_process` test, which runs
//! `slothqueue_store_postgres::testing::serve_relay`); the test freezes it
//! with SIGSTOP, which cuts A off the way a partition does: nothing is
//! closed, nothing answers. Runner B is on another "host" (an owner whose
//! liveness nobody here can judge), with a direct connection, and takes
//! the job over once the lease expired. Every execution records its start
//! and end, and holds a lock that a second live execution would find
//! taken. Needs a server: `cargo xtask pg -- cargo test -p
//! slothqueue-runner --test fence` (skipped, loudly, without one).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail the test loudly; clippy exempts only #[test] bodies"
)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{Clock, JobId, JobState, NewJob, Owner, Policy, Store, SystemClock};
use slothqueue_runner::{Mode, RunSummary, Runner, RunnerConfig, RunnerEvent, ShutdownSignal};
use slothqueue_store_postgres::testing::{
    schema_url_for_path, serve_relay, url_from_env, via_relay,
};
use slothqueue_store_postgres::{PgOptions, PgStore};
use tokio::sync::mpsc;

/// The variable that makes `relay_process` a relay to this URL.
const RELAY_TO: &str = "SLOTHQUEUE_TEST_RELAY_TO";

/// Short, so the scenario takes seconds: A fences 2.2 s after its last
/// renewal was sent (a third of the lease apart), its kill grace 300 ms.
const LEASE: Duration = Duration::from_secs(4);

/// How long any wait may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(40);

/// Not a test: the relay process the fence test starts (this binary, with
/// `relay_process --exact --ignored` and [`RELAY_TO`] set). Prints its
/// port, then relays until killed.
#[test]
#[ignore = "a helper process of `a_runner_cut_off_from_the_server_stops_its_job_before_its_lease_runs_out`"]
fn relay_process() {
    let to = std::env::var(RELAY_TO).expect("started by the fence test, with the URL to relay to");
    serve_relay(&to).expect("the relay failed");
}

/// The relay process, killed (and reaped) when dropped.
struct RelayProcess {
    child: Child,
    port: u16,
    /// Kept open: a relay writing to a closed pipe would fail.
    _out: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl RelayProcess {
    fn start(url: &str) -> RelayProcess {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["relay_process", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(RELAY_TO, url)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        // The harness prints its own words first, the port last on a line
        // (after `test relay_process ... `).
        let port = out
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| l.split_whitespace().last()?.parse::<u16>().ok())
            .expect("the relay printed no port");
        RelayProcess { child, port, _out: out }
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A runner's events as they come, and its end.
struct Running {
    rx: mpsc::UnboundedReceiver<RunnerEvent>,
    seen: Vec<RunnerEvent>,
    handle: tokio::task::JoinHandle<Result<RunSummary, slothqueue_runner::RunnerError>>,
    _trigger: slothqueue_runner::ShutdownTrigger,
}

impl Running {
    fn start(store: Arc<dyn Store>, cfg: RunnerConfig) -> Running {
        let (tx, rx) = mpsc::unbounded_channel();
        let (trigger, shutdown) = ShutdownSignal::new();
        let handle = tokio::spawn(Runner::new(store, cfg).run(tx, shutdown));
        Running { rx, seen: Vec::new(), handle, _trigger: trigger }
    }

    /// Waits for an event `f` accepts (seen earlier or coming).
    async fn wait_for(&mut self, what: &str, f: impl Fn(&RunnerEvent) -> bool) -> RunnerEvent {
        if let Some(e) = self.seen.iter().find(|e| f(e)) {
            return e.clone();
        }
        let got = tokio::time::timeout(DEADLINE, async {
            while let Some(e) = self.rx.recv().await {
                self.seen.push(e.clone());
                if f(&e) {
                    return Some(e);
                }
            }
            None
        })
        .await;
        match got {
            Ok(Some(e)) => e,
            _ => panic!("no {what} within {DEADLINE:?}; saw: {:#?}", self.seen),
        }
    }
}

fn owner(name: &str) -> Owner {
    // A host nobody here can judge: only the lease's expiry lets the other
    // runner take the job, as between two machines.
    Owner { host: format!("host-{name}"), ..Owner::named(format!("runner-{name}")) }
}

fn config(dir: &Path, name: &str, mode: Mode) -> RunnerConfig {
    let mut cfg = RunnerConfig::new(dir.join(format!("logs-{name}")));
    cfg.mode = mode;
    cfg.owner = owner(name);
    cfg.kill_grace = Duration::from_millis(300);
    cfg.busy_pause = Duration::from_millis(100);
    cfg.cancel_check_interval = Duration::from_millis(200);
    cfg.poll_interval = Duration::from_millis(100);
    cfg
}

fn store(url: &str) -> Arc<dyn Store> {
    let options = PgOptions {
        policy: Policy { lease_ttl: LEASE, ..Policy::default() },
        call_timeout: Duration::from_secs(2),
        ..PgOptions::default()
    };
    Arc::new(PgStore::open(url, options).unwrap())
}

/// One execution's record: `(kind, attempt, wall ms)` with kind `S`
/// (started), `E` (ended) or `X` (found another execution alive).
fn runs(file: &Path) -> Vec<(String, u32, i64)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let kind = w.next()?.to_owned();
            let attempt = w.next()?.parse().ok()?;
            let ns: i64 = w.next()?.parse().ok()?;
            Some((kind, attempt, ns / 1_000_000))
        })
        .collect()
}

/// Looks with `f` every 20 ms until it answers, or fails the test.
async fn until<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match within(DEADLINE, f).await {
        Some(v) => v,
        None => panic!("no {what} within {DEADLINE:?}"),
    }
}

/// Looks with `f` every 20 ms until it answers or `limit` has passed.
async fn within<T, F, Fut>(limit: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn alive(pid: i32) -> bool {
    // A zombie is gone for this purpose: it runs nothing.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_cut_off_from_the_server_stops_its_job_before_its_lease_runs_out() {
    let Some(base) = url_from_env() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = schema_url_for_path(&base, &dir.path().join("queue"));
    let relay = RelayProcess::start(&url);
    let direct = store(&url);
    let store_a = store(&via_relay(&url, relay.port).unwrap());
    let file = dir.path().join("runs");
    let lock = dir.path().join("lock");
    // Attempt 1 runs long (it must be stopped); the takeover is short.
    let command = format!(
        "exec 9>>'{lock}'; flock -n 9 || echo \"X $SLOTHQUEUE_ATTEMPT $(date +%s%N)\" >>'{file}'; \
         echo $$ >'{dir}/pid.'$SLOTHQUEUE_ATTEMPT; \
         echo \"S $SLOTHQUEUE_ATTEMPT $(date +%s%N)\" >>'{file}'; \
         if [ \"$SLOTHQUEUE_ATTEMPT\" = 1 ]; then sleep 30; else sleep 0.2; fi; \
         echo \"E $SLOTHQUEUE_ATTEMPT $(date +%s%N)\" >>'{file}'",
        lock = lock.display(),
        file = file.display(),
        dir = dir.path().display(),
    );
    let now = SystemClock.now();
    let id: JobId = direct
        .push(NewJob::shell(command, dir.path().to_string_lossy()), now)
        .await
        .unwrap()
        .job
        .id;

    let mut a = Running::start(store_a, config(dir.path(), "a", Mode::Drain));
    let pid_file = dir.path().join("pid.1");
    let pid: i32 = until("attempt 1's start", || async {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    })
    .await;
    // A renews at least once through the relay before it is cut off.
    let first_until = direct.get(id).await.unwrap().lease.unwrap().until;
    until("a renewal through the relay", || async {
        let job = direct.get(id).await.ok()?;
        job.lease.filter(|l| l.until > first_until).map(|_| ())
    })
    .await;

    relay.signal(rustix::process::Signal::STOP);
    let frozen_at = SystemClock.now();
    // Without the fence A's job runs on; its lease ends within LEASE.
    let gone = within(LEASE * 2, || async { (!alive(pid)).then(|| SystemClock.now()) }).await;
    // Every renewal A sent before the freeze has landed by now.
    let job = direct.get(id).await.unwrap();
    let lease = job.lease.clone().expect("still A's lease: nobody took it yet");
    assert_eq!(lease.owner.id, "runner-a");
    let Some(gone_at) = gone else {
        panic!(
            "A's job still runs {:?} after the freeze, its lease ran until {} ms after it",
            LEASE * 2,
            lease.until.as_millis() - frozen_at.as_millis()
        )
    };
    assert!(
        gone_at < lease.until,
        "A's job must be gone before its lease runs out: gone {} ms after the freeze, \
         the lease ran until {} ms after it",
        gone_at.as_millis() - frozen_at.as_millis(),
        lease.until.as_millis() - frozen_at.as_millis()
    );
    a.wait_for("A's fence", |e| matches!(e, RunnerEvent::Fenced { job, .. } if *job == id)).await;

    // B takes the job over once the lease expired, and runs it to the end.
    let mut b = Running::start(direct.clone(), config(dir.path(), "b", Mode::Follow));
    b.wait_for("B's run", |e| matches!(e, RunnerEvent::Done { job, .. } if *job == id)).await;
    let taken = direct.get(id).await.unwrap();
    assert_eq!(taken.state, JobState::Done);
    assert_eq!(taken.attempts, 2);

    // Overlapping runs: none.
    let runs = runs(&file);
    let start = |n: u32| runs.iter().find(|r| r.0 == "S" && r.1 == n).map(|r| r.2);
    assert_eq!(runs.iter().filter(|r| r.0 == "X").count(), 0, "two executions at once: {runs:?}");
    let second = start(2).expect("attempt 2 started");
    assert!(
        start(1).is_some() && second >= gone_at.as_millis(),
        "attempt 2 began after 1 was gone: {runs:?}"
    );
    assert!(
        second >= lease.until.as_millis(),
        "B took the job only after the lease expired: {runs:?}, lease until {}",
        lease.until.as_millis()
    );

    // The link heals: A reports the lost attempt (B holds the job now).
    relay.signal(rustix::process::Signal::CONT);
    a.wait_for(
        "A's report of the lost attempt",
        |e| matches!(e, RunnerEvent::LeaseLost { job, .. } if *job == id),
    )
    .await;
    let summary = tokio::time::timeout(DEADLINE, &mut a.handle)
        .await
        .expect("A ends once it reported")
        .unwrap()
        .unwrap();
    assert_eq!(summary.lost, 1, "{summary:?}");
    b.handle.abort();
}
