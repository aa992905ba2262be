//! A full stdout ends the command with one line on stderr, never a panic
//! (issue 31, item 10f): `run --follow > /dev/full` once exited 101 with
//! no message, and a runner that cannot say what it does must not go on.

use std::fs::File;
use std::process::Stdio;
use std::time::Duration;

use crate::support::{Backend, TestContext, wait_child};

/// `run --follow` with its events going to `/dev/full`: stdout and stderr.
fn run_follow_into_dev_full(ctx: &TestContext, stderr: Stdio) -> std::process::Child {
    let load = ctx.calm_load();
    ctx.ok(&["add", "echo hi"]);
    ctx.command(&["run", "--follow", "--load-file", load])
        .stdout(File::create("/dev/full").unwrap())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

#[test]
fn run_follow_with_a_full_stdout_ends_with_one_line_on_stderr() {
    let ctx = TestContext::new(Backend::Sqlite);
    let mut child = run_follow_into_dev_full(&ctx, Stdio::piped());
    let status = wait_child(&mut child, Duration::from_secs(60));
    let stderr = crate::support::stderr_of(&mut child);
    assert_eq!(status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("error: cannot write to stdout"), "{stderr}");
    assert!(lines[0].contains("No space left on device"), "{stderr}");
}

#[test]
fn run_follow_with_stdout_and_stderr_full_exits_non_zero_without_a_panic() {
    let ctx = TestContext::new(Backend::Sqlite);
    let mut child = run_follow_into_dev_full(&ctx, File::create("/dev/full").unwrap().into());
    let status = wait_child(&mut child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{status:?}");
}

#[test]
fn an_error_with_stderr_full_exits_with_its_code_without_a_panic() {
    let ctx = TestContext::new(Backend::Sqlite);
    let out =
        ctx.command(&["show", "99"]).stderr(File::create("/dev/full").unwrap()).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}
