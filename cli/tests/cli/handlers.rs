//! Issue 31 finding 1 through the binary: `run --handlers DIR` refuses a
//! handler another user could change (it would run their commands as
//! you), says so once, and leaves its job pending (never claimed), where
//! `show` says what would run it.

use std::os::unix::fs::PermissionsExt;

use crate::support::{Backend, TestContext};

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
