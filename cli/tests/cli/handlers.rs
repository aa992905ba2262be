//! Issue 31 finding 1 through the binary: `run --handlers DIR` refuses a
//! handler another user could change (it would run their commands as
//! you), says so once, and leaves its job pending (never claimed), where
//! `show` says what would run it, and while that runner lives, its exact
//! reason.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use rustix::process::Signal;

use crate::support::{Backend, TestContext, signal, wait_child, wait_for};

#[test]
fn run_refuses_a_world_writable_handler_and_leaves_its_job_pending() {
    let ctx = TestContext::new(Backend::Sqlite);
    let load = ctx.calm_load();
    let dir = ctx.path("handlers");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ran = ctx.path("ran");
    let handler = dir.join("resize");
    std::fs::write(&handler, format!("#!/bin/sh\ntouch {}\n", ran.display())).unwrap();
    std::fs::set_permissions(&handler, std::fs::Permissions::from_mode(0o777)).unwrap();
    ctx.ok(&["add", "--kind", "resize", "--payload", "{}"]);

    let out = ctx.run(&["run", "--handlers", dir.to_str().unwrap(), "--load-file", load]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!ran.exists(), "the world-writable handler ran");
    let said: Vec<&str> =
        stderr.lines().filter(|l| l.contains("refusing to run handler")).collect();
    assert_eq!(said.len(), 1, "said once: {stderr}");
    assert!(said[0].contains("is writable by other users (mode 0777)"), "{}", said[0]);
    assert!(said[0].contains("(kind `resize`) stay pending"), "{}", said[0]);

    let show = ctx.ok(&["show", "1"]);
    assert!(show.starts_with("job #1: pending"), "{show}");
    assert!(show.contains("attempts:     0 of"), "never claimed: {show}");
    assert!(
        show.contains("it runs when one with a handler for kind resize starts (slothqueue run --handlers DIR, where DIR/resize is an executable of yours that nobody else can write)"),
        "{show}"
    );
}

/// Deliver 1: while the refusing runner lives, `show` gives its exact
/// reason (the handler and what is wrong with it), from its record.
#[test]
fn show_gives_the_live_runners_exact_refusal() {
    let ctx = TestContext::new(Backend::Sqlite);
    let load = ctx.calm_load();
    let dir = ctx.path("handlers");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let handler = dir.join("resize");
    std::fs::write(&handler, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&handler, std::fs::Permissions::from_mode(0o777)).unwrap();
    ctx.ok(&["add", "--kind", "resize", "--payload", "{}"]);
    let mut runner =
        ctx.spawn(&["run", "--follow", "--handlers", dir.to_str().unwrap(), "--load-file", load]);
    let expected = format!(
        "no handler for kind resize: runner pid {} on this host refused it: handler {} is writable by other users (mode 0777)",
        runner.id(),
        handler.display()
    );
    let mut show = String::new();
    wait_for("show to give the runner's reason", Duration::from_secs(60), || {
        show = ctx.ok(&["show", "1"]);
        show.contains(&expected)
    });
    assert!(show.contains("fix that and restart the runner"), "{show}");
    signal(runner.id(), Signal::TERM);
    wait_child(&mut runner, Duration::from_secs(30));
}
