//! `slothqueue run` and signals, as a user's shell or supervisor sends
//! them: HUP and QUIT stop the run like TERM (the job's processes, escapees
//! included, killed; the job back to pending, its attempt not charged; exit
//! 130); a HUP inherited as ignored (`nohup`) stays ignored; Ctrl-Z stops
//! the job's processes with the runner, CONT continues them, and the time
//! stopped does not count against the max runtime.

use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::process::Signal;
use slothqueue::JobState;

use crate::both_backends;
use crate::support::{TestContext, group_alive, signal, wait_child, wait_for};

const PATIENCE: Duration = Duration::from_secs(60);

/// A job that starts an escapee in a session of its own (its pid in
/// `esc`) and runs on.
const ESCAPING: &str = "setsid sh -c 'echo $$ > esc; exec sleep 300' & exec sleep 300";

/// The state letter of `pid` (`R`, `S`, `T`, `Z`…), `None` when gone.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn alive(pid: i32) -> bool {
    state(pid).is_some_and(|s| !matches!(s, 'Z' | 'X'))
}

/// Whether this test process ignores `sig` (and so passes it on ignored).
fn ignored_by_us(sig: Signal) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:")).unwrap().trim();
    let mask = u64::from_str_radix(mask, 16).unwrap();
    mask & (1 << (sig.as_raw() - 1)) != 0
}

/// Waits for the job to run with its group recorded and its escapee
/// written; returns (group, escapee).
fn started(ctx: &TestContext) -> (i32, i32) {
    wait_for("the job to start", PATIENCE, || {
        ctx.job(1).lease.is_some_and(|l| l.child_pgid.is_some())
            && std::fs::read_to_string(ctx.path("esc")).is_ok_and(|s| s.ends_with('\n'))
    });
    let pgid = ctx.job(1).lease.unwrap().child_pgid.unwrap();
    let esc = std::fs::read_to_string(ctx.path("esc")).unwrap().trim().parse().unwrap();
    (pgid, esc)
}

/// Lets `d` pass: what a test checks here is that nothing happens meanwhile
/// (a runner that must not die, a runner stopped longer than a max runtime).
#[expect(
    clippy::disallowed_methods,
    reason = "the test waits for time itself to pass, not for an event"
)]
fn hold(d: Duration) {
    std::thread::sleep(d);
}

/// Kills a leftover escapee when a test fails midway.
struct Reap(i32);

impl Drop for Reap {
    fn drop(&mut self) {
        let sleep = std::fs::read_to_string(format!("/proc/{}/comm", self.0))
            .is_ok_and(|c| c.trim() == "sleep");
        if sleep && alive(self.0) {
            signal(self.0 as u32, Signal::KILL);
        }
    }
}

/// `slothqueue run …` under `sh -c "<prefix>; exec …"`.
fn run_under(ctx: &TestContext, prefix: &str, args: &[&str]) -> std::process::Child {
    let inner = ctx.command(args);
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(format!("{prefix}; exec \"$0\" \"$@\"")).arg(inner.get_program());
    cmd.args(inner.get_args());
    cmd.env_clear();
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.current_dir(ctx.path(""))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

both_backends! {
    fn sighup_and_sigquit_stop_run_like_sigterm(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", ESCAPING]);
        for sig in [Signal::HUP, Signal::QUIT] {
            if ignored_by_us(sig) {
                // Under `nohup` (or a `cmd &` for SIGQUIT) the runner
                // inherits the signal ignored and rightly keeps it so: the
                // next test checks exactly that.
                continue;
            }
            let _ = std::fs::remove_file(ctx.path("esc"));
            let mut runner = ctx.spawn(&["run", "--load-file", load]);
            let (pgid, esc) = started(&ctx);
            let _reap = Reap(esc);
            signal(runner.id(), sig);
            let status = wait_child(&mut runner, PATIENCE);
            assert_eq!(status.code(), Some(130), "{sig:?}");
            let job = ctx.job(1);
            assert_eq!((job.state, job.attempts), (JobState::Pending, 0), "{sig:?}: not charged");
            assert!(!group_alive(pgid), "{sig:?}: the job's group survived");
            assert!(!alive(esc), "{sig:?}: the job's escapee {esc} survived");
        }
    }

    fn a_sighup_inherited_as_ignored_stays_ignored(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", ESCAPING]);
        let mut runner = run_under(&ctx, "trap '' HUP", &["run", "--load-file", load]);
        let (pgid, esc) = started(&ctx);
        let _reap = Reap(esc);
        signal(runner.id(), Signal::HUP);
        hold(Duration::from_millis(500));
        assert!(runner.try_wait().unwrap().is_none(), "a nohup'ed runner died of HUP");
        let job = ctx.job(1);
        assert_eq!((job.state, job.attempts), (JobState::Running, 1));
        assert!(group_alive(pgid) && alive(esc));
        signal(runner.id(), Signal::TERM);
        assert_eq!(wait_child(&mut runner, PATIENCE).code(), Some(130));
        assert_eq!(ctx.job(1).state, JobState::Pending);
        assert!(!alive(esc));
    }

    fn ctrl_z_stops_the_jobs_processes_and_cont_continues_them(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", ESCAPING, "--max-runtime", "3", "--max-attempts", "1"]);
        let mut runner = ctx.spawn(&["run", "--load-file", load]);
        let (pgid, esc) = started(&ctx);
        let _reap = Reap(esc);
        let pid = runner.id() as i32;
        signal(runner.id(), Signal::TSTP);
        wait_for("the runner and its job to stop", PATIENCE, || {
            state(pid) == Some('T') && state(pgid) == Some('T') && state(esc) == Some('T')
        });
        // Stopped longer than the max runtime: it must not count.
        hold(Duration::from_secs(4));
        signal(runner.id(), Signal::CONT);
        wait_for("the job to continue", PATIENCE, || {
            state(pgid).is_some_and(|s| s != 'T') && state(esc).is_some_and(|s| s != 'T')
        });
        hold(Duration::from_millis(700));
        assert_eq!(ctx.job(1).state, JobState::Running, "the time stopped counted as runtime");
        let status = wait_child(&mut runner, PATIENCE);
        assert_eq!(status.code(), Some(1));
        let job = ctx.job(1);
        assert_eq!(job.state, JobState::Failed);
        let error = job.last_error.unwrap_or_default();
        assert!(error.starts_with("timeout: exceeded max runtime of 3s"), "{error}");
        assert!(!alive(esc), "the escapee survived the timeout");
    }
}
