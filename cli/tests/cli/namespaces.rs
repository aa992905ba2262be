//! A live owner is never robbed from another PID namespace (the hardening
//! issue, point 3): a runner under `unshare -p` records its namespace, and
//! a runner outside it judges that owner "unknown" (its lease decides),
//! never "dead" because its pid is not in this `/proc`. Needs root and
//! `unshare`; says loudly when it cannot run.

#![allow(clippy::print_stderr, reason = "a test that cannot run says so loudly")]

use std::process::{Command, Stdio};

use slothqueue::JobState;

use std::time::Duration;

use crate::support::{Backend, TestContext, signal, wait_child, wait_for};

const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn a_runner_in_another_pid_namespace_is_not_robbed() {
    for backend in [Backend::Sqlite, Backend::Redb] {
        let ctx = TestContext::new(backend);
        let load = ctx.calm_load();
        ctx.ok(&["add", "sleep 30"]);
        let inner = ctx.command(&["run", "--load-file", load]);
        let mut unshare = Command::new("unshare");
        unshare.args(["--pid", "--fork", "--kill-child", "--mount-proc"]);
        unshare.arg(inner.get_program()).args(inner.get_args());
        unshare.env_clear().envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))));
        if let Some(dir) = inner.get_current_dir() {
            unshare.current_dir(dir);
        }
        let Ok(mut runner) = unshare.stdin(Stdio::null()).stdout(Stdio::null()).spawn() else {
            eprintln!("SKIPPED a_runner_in_another_pid_namespace_is_not_robbed: no unshare");
            return;
        };
        let mut exited = false;
        wait_for("the namespaced runner to start the job", PATIENCE, || {
            exited = runner.try_wait().ok().flatten().is_some();
            exited || ctx.job(1).lease.is_some_and(|l| l.child_pgid.is_some())
        });
        if exited {
            eprintln!(
                "SKIPPED a_runner_in_another_pid_namespace_is_not_robbed: unshare -p is not permitted here (needs root)"
            );
            return;
        }
        let lease = ctx.job(1).lease.unwrap();
        assert!(lease.owner.pid_ns.is_some(), "the owner records its PID namespace");
        // Its pid means nothing in this /proc: a judge that trusted it would
        // call the owner dead and take the job at once.
        let out = ctx.run(&["run", "--load-file", load]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let job = ctx.job(1);
        assert_eq!(job.state, JobState::Running, "{backend:?}: the live owner kept its job");
        assert_eq!(job.attempts, 1, "{backend:?}: nobody reclaimed it");
        assert_eq!(job.lease.map(|l| l.owner.id), Some(lease.owner.id));
        let shown = ctx.ok(&["show", "1"]);
        assert!(shown.contains("cannot be checked from here"), "{shown}");
        // SIGTERM to the namespaced runner (unshare's child, pid 1 inside):
        // it stops its job and hands it back, though its own process group
        // has no number in its namespace.
        let children = format!("/proc/{0}/task/{0}/children", runner.id());
        let inner: u32 = std::fs::read_to_string(children).unwrap().trim().parse().unwrap();
        signal(inner, rustix::process::Signal::TERM);
        let status = wait_child(&mut runner, PATIENCE);
        assert_eq!(status.code(), Some(130), "{backend:?}: the runner exits as on SIGTERM");
        let job = ctx.job(1);
        assert_eq!((job.state, job.attempts), (JobState::Pending, 0), "{backend:?}");
    }
}
