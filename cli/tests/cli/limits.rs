//! `run`'s limit flags are the defaults of jobs that set none, `show`
//! tells the limits in force (read back from the attempt's log header),
//! and a bad limit flag is refused before anything runs.

use crate::support::{Backend, TestContext};

#[test]
fn run_limits_reach_the_job_and_show_tells_them() {
    let ctx = TestContext::new(Backend::Sqlite);
    ctx.ok(&["add", "true"]);
    let load = ctx.calm_load();
    let out = ctx.ok(&[
        "run",
        "--load-file",
        load,
        "--nice",
        "7",
        "--ionice",
        "idle",
        "--memory-max",
        "64M",
    ]);
    let show = ctx.ok(&["show", "1"]);
    let line = show
        .lines()
        .find(|l| l.starts_with("in force:     "))
        .unwrap_or_else(|| panic!("no limits in force in show: {show}"));
    let said = line.trim_start_matches("in force:     ");
    assert!(said.starts_with("nice 7, ionice idle, memory-max 64 MiB"), "{said}");
    assert!(said.ends_with(" (attempt 1)"), "{said}");
    if said.contains("not enforced") {
        // Said at the start too, as a run line.
        assert!(out.contains("#1: memory-max 64 MiB not enforced: "), "{out}");
    } else {
        assert!(!out.contains("not enforced"), "{out}");
    }
}

#[test]
fn a_bad_limit_flag_is_a_usage_error() {
    let ctx = TestContext::new(Backend::Sqlite);
    for args in [
        ["run", "--nice", "40"],
        ["run", "--memory-max", "12 parsecs"],
        ["run", "--cpu-weight", "0"],
    ] {
        let out = ctx.run(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!ctx.db.exists(), "a refused run created the queue");
}
