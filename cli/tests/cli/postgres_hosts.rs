//! Runners on several hosts sharing one queue on PostgreSQL (issue #20).
//!
//! Each "host" is a runner process in a UTS namespace of its own
//! (`unshare --uts`: a hostname of its own) with a home folder of its
//! own, on the one test server. Its liveness judge reads `/proc` only for
//! owners of its own hostname, so another host's lease is judged by its
//! clock alone, as between real machines. Three contracts:
//!
//! - a runner killed with `kill -9` on host A has its job reclaimed by
//!   host B only once the lease has expired, never before;
//! - a live but slow host A (SIGSTOP shorter than the lease) is not
//!   robbed;
//! - with the lease expired (SIGSTOP longer than it), B takes the job, and
//!   A's late heartbeat and completion are refused by the fence: the job
//!   ends as B finished it.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::Signal;
use slothqueue::{Clock, EventKind, JobId, JobState, SystemClock, Timestamp};

use crate::support::{TestContext, block_on, signal, wait_child, wait_for};

/// Generous: CI machines are small and shared.
const PATIENCE: Duration = Duration::from_secs(60);

/// A runner on a host of its own, and what it printed so far.
struct Host {
    child: Child,
    output: Arc<Mutex<String>>,
}

impl Host {
    /// `slothqueue --db <queue> run --follow --lease <lease>` on host
    /// `name`: its own hostname (a UTS namespace), its own home (its job
    /// logs).
    fn start(ctx: &TestContext, name: &str, lease: &str) -> Host {
        let home = ctx.path(name);
        std::fs::create_dir_all(&home).unwrap();
        // Never wait on this machine's real load.
        let load = ctx.calm_load();
        let plain = ctx.bare_command();
        let mut cmd = Command::new("unshare");
        if !rustix::process::geteuid().is_root() {
            // An unprivileged user may make a UTS namespace inside a user
            // namespace of its own.
            cmd.args(["--user", "--map-root-user"]);
        }
        cmd.env_clear()
            .envs(plain.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .env("HOME", &home)
            .current_dir(ctx.dir.path())
            .args(["--uts", "--", "sh", "-c", r#"hostname "$0" && exec "$@""#, name])
            .arg(plain.get_program())
            .arg("--db")
            .arg(&ctx.db)
            .args(["run", "--follow", "--load-file", load, "--lease", lease])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let output = Arc::new(Mutex::new(String::new()));
        for pipe in [
            child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
            child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let output = output.clone();
            std::thread::spawn(move || {
                let mut pipe = pipe;
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    output.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        Host { child, output }
    }

    fn said(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    fn signal(&self, sig: Signal) {
        signal(self.child.id(), sig);
    }

    /// SIGTERM, and waits for it to exit.
    fn stop(mut self) -> String {
        self.signal(Signal::TERM);
        let _ = wait_child(&mut self.child, PATIENCE);
        self.said()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A job that notes which host ran it in `runs`, then sleeps `secs` on
/// host `slow` only.
fn add_job(ctx: &TestContext, slow: &str, secs: u32) -> JobId {
    let runs = ctx.path("runs");
    let command = format!(
        r#"hostname >> '{}'; if [ "$(hostname)" = {slow} ]; then sleep {secs}; fi"#,
        runs.display()
    );
    assert_eq!(ctx.ok(&["add", &command]), "added job #1 (priority 0, max runtime 300s)\n");
    1
}

fn runs(ctx: &TestContext) -> Vec<String> {
    std::fs::read_to_string(ctx.path("runs"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The host holding the job's lease, and when the lease expires.
fn holder(ctx: &TestContext, id: JobId) -> Option<(String, Timestamp)> {
    ctx.job(id).lease.map(|l| (l.owner.host, l.until))
}

/// Kills what is left of a job's process group (the job of a host that
/// was killed goes on here; on a real host it would die with it).
fn kill_group(pgid: Option<i32>) {
    if let Some(pgid) = pgid.and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
    }
}

fn count(ctx: &TestContext, id: JobId, kind: EventKind) -> usize {
    ctx.store_events(id).iter().filter(|e| e.kind == kind).count()
}

#[test]
fn a_runner_killed_on_one_host_is_taken_over_by_another_only_after_its_lease() {
    let Some(ctx) = TestContext::postgres() else { return };
    let id = add_job(&ctx, "hosta", 120);
    let a = Host::start(&ctx, "hosta", "4s");
    wait_for("host A to start the job", PATIENCE, || runs(&ctx) == ["hosta"]);
    wait_for("host A's heartbeat with the job's group", PATIENCE, || {
        ctx.job(id).lease.is_some_and(|l| l.child_pgid.is_some())
    });
    a.signal(Signal::KILL);
    drop(a);
    let pgid = ctx.job(id).lease.and_then(|l| l.child_pgid);
    let (host, expires_at) = holder(&ctx, id).unwrap();
    assert_eq!(host, "hosta");
    let b = Host::start(&ctx, "hostb", "4s");
    // Until A's lease expires, the job stays A's, whatever B does.
    wait_for("host A's lease to expire", PATIENCE, || {
        let job = ctx.job(id);
        // Read before this instant: if the lease had not expired by then,
        // the job must still be A's.
        if SystemClock.now() >= expires_at {
            return true;
        }
        assert_eq!(job.state, JobState::Running, "taken before the lease expired");
        assert_eq!(job.lease.map(|l| l.owner.host).as_deref(), Some("hosta"));
        false
    });
    wait_for("host B to run the job", PATIENCE, || ctx.job(id).state == JobState::Done);
    assert_eq!(runs(&ctx), ["hosta", "hostb"]);
    let events = ctx.store_events(id);
    let reclaimed =
        events.iter().find(|e| e.kind == EventKind::Reclaimed).expect("a reclaimed event");
    assert!(
        reclaimed.at >= expires_at,
        "reclaimed at {} before the lease expired at {expires_at}",
        reclaimed.at
    );
    b.stop();
    kill_group(pgid);
}

#[test]
fn a_host_stopped_for_less_than_its_lease_is_not_robbed() {
    let Some(ctx) = TestContext::postgres() else { return };
    let id = add_job(&ctx, "hosta", 8);
    let a = Host::start(&ctx, "hosta", "9s");
    wait_for("host A to start the job", PATIENCE, || runs(&ctx) == ["hosta"]);
    let b = Host::start(&ctx, "hostb", "9s");
    wait_for("host B to look for work", PATIENCE, || {
        block_on(ctx.store().runners()).unwrap().iter().any(|r| r.owner.host == "hostb")
    });
    // Heartbeats every 3s, lease 9s: A stopped until it has missed a
    // heartbeat (5s after its last) is late, not gone.
    a.signal(Signal::STOP);
    let (_, until) = holder(&ctx, id).unwrap();
    let late = Timestamp::from_millis(until.as_millis() - 4_000);
    wait_for("host A to miss a heartbeat", PATIENCE, || SystemClock.now() >= late);
    a.signal(Signal::CONT);
    wait_for("host A to finish the job", PATIENCE, || ctx.job(id).state == JobState::Done);
    assert_eq!(runs(&ctx), ["hosta"], "only host A ran it");
    assert_eq!(count(&ctx, id, EventKind::Claimed), 1);
    assert_eq!(count(&ctx, id, EventKind::Reclaimed), 0);
    a.stop();
    b.stop();
}

#[test]
fn a_host_stopped_past_its_lease_loses_the_job_and_its_late_writes_are_refused() {
    let Some(ctx) = TestContext::postgres() else { return };
    let id = add_job(&ctx, "hosta", 6);
    let a = Host::start(&ctx, "hosta", "3s");
    wait_for("host A to start the job", PATIENCE, || runs(&ctx) == ["hosta"]);
    a.signal(Signal::STOP);
    let b = Host::start(&ctx, "hostb", "3s");
    wait_for("host B to take the job and finish it", PATIENCE, || {
        ctx.job(id).state == JobState::Done
    });
    assert_eq!(runs(&ctx), ["hosta", "hostb"]);
    let done = ctx.job(id);
    // A wakes: its heartbeat meets B's fence, and it says so.
    a.signal(Signal::CONT);
    wait_for("host A to find its lease lost", PATIENCE, || a.said().contains("lost its lease"));
    let said = a.stop();
    assert!(said.contains("job #1 lost its lease"), "{said}");
    assert_eq!(ctx.job(id), done, "A's late writes changed the job");
    assert_eq!(count(&ctx, id, EventKind::Completed), 1);
    assert_eq!(count(&ctx, id, EventKind::Claimed), 2);
    b.stop();
}
