//! A long queue (issue 31 finding 8): `wait --all` ends at its timeout
//! although one whole look at the queue takes longer, and neither `wait`
//! nor `add --stdin` holds the queue's jobs, only their ids.
//!
//! Memory is the child's `VmHWM` (its peak resident set) read from
//! `/proc` once the child has written its first byte of output and before
//! it may exit (its stdout is a pipe the test has not drained): both
//! commands write only after everything they keep of the jobs is in
//! memory, so the peak of what they hold is in that reading.
//!
//! The queue of 131,072 jobs is made in about a second by doubling the
//! rows of two `add`s in SQL (the store's own pushes would take minutes
//! in a debug build); the jobs' trails are not copied, which no look here
//! reads.

use std::io::Read;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::{Backend, TestContext, wait_child};

/// How long any process here may take; slow is fine, hanging is not.
const PATIENCE: Duration = Duration::from_secs(120);

/// Two jobs doubled this many times.
const DOUBLINGS: u32 = 16;

/// What a wait may take past its timeout.
const TIMEOUT_SLACK: Duration = Duration::from_millis(500);

/// The most a wait on the long queue may hold resident, in KiB: the
/// debug binary itself is about 20 MiB of it. Holding the jobs took over
/// 300 MiB.
const WAIT_PEAK_KB: u64 = 50 * 1024;

/// The most `add --stdin` of [`STDIN_LINES`] may hold resident, in KiB.
/// Holding the lines as jobs, and the pushed jobs, took over 150 MiB.
const ADD_PEAK_KB: u64 = 60 * 1024;

/// The lines of the `add --stdin` below.
const STDIN_LINES: usize = 20_000;

/// A queue of `2 << DOUBLINGS` pending jobs; returns their count.
fn long_queue(ctx: &TestContext) -> usize {
    ctx.ok(&["add", "true"]);
    ctx.ok(&["add", "true", "--queue", "other"]);
    let conn = rusqlite::Connection::open(&ctx.db).unwrap();
    for _ in 0..DOUBLINGS {
        conn.execute_batch(
            "BEGIN;
             CREATE TEMP TABLE copied AS SELECT * FROM jobs;
             UPDATE copied SET id = id + (SELECT max(id) FROM jobs);
             INSERT INTO jobs SELECT * FROM copied;
             DROP TABLE copied;
             COMMIT;",
        )
        .unwrap();
    }
    2 << DOUBLINGS
}

/// The child's peak resident set in KiB once it has written its first
/// byte of stdout; then its whole stdout (that byte included), and how it
/// exited.
fn peak_then_output(mut child: Child) -> (u64, String, Option<i32>) {
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"));
    let mut rest = Vec::from(first);
    stdout.read_to_end(&mut rest).unwrap();
    let code = wait_child(&mut child, PATIENCE).code();
    (peak, String::from_utf8(rest).unwrap(), code)
}

/// What `f` returned, and how long it took on the real clock.
#[expect(
    clippy::disallowed_methods,
    reason = "how long a real process took is what the test checks"
)]
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = std::time::Instant::now();
    let out = f();
    (out, started.elapsed())
}

#[test]
fn a_wait_on_a_long_queue_ends_at_its_timeout_and_holds_ids_not_jobs() {
    let ctx = TestContext::new(Backend::Sqlite);
    let jobs = long_queue(&ctx);

    // A deadline already past is one whole look: the measure of the
    // queue's length on this machine, and of what the look holds.
    let ((peak, out, code), look) =
        timed(|| peak_then_output(ctx.spawn(&["wait", "--all", "--timeout", "0"])));
    assert_eq!(code, Some(124), "{out}");
    assert!(
        out.ends_with(&format!(
            "timed out after 0s: {jobs} of {jobs} jobs not finished (0 done)\n"
        )),
        "{}",
        &out[out.len().saturating_sub(200)..]
    );
    assert!(peak < WAIT_PEAK_KB, "a wait on {jobs} jobs held {peak} KiB at its peak");

    let timeout = Duration::from_millis(100);
    assert!(
        look > timeout + TIMEOUT_SLACK,
        "the queue is too short for this machine to test the timeout (one look took {look:?}): \
         raise DOUBLINGS"
    );
    let (out, took) = timed(|| ctx.run(&["wait", "--all", "--timeout", "100ms"]));
    assert_eq!(out.status.code(), Some(124));
    assert!(
        took < timeout + TIMEOUT_SLACK,
        "a wait with --timeout 100ms took {took:?} (one whole look takes {look:?})"
    );
    let out = String::from_utf8(out.stdout).unwrap();
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("timed out after 100ms during its first look: "),
        "the count is of the jobs seen, and says so: {last}"
    );
}

#[test]
fn add_stdin_of_many_lines_holds_ids_not_jobs() {
    let ctx = TestContext::new(Backend::Sqlite);
    let lines: String = (0..STDIN_LINES).map(|i| format!("echo {i}\n")).collect();
    std::fs::write(ctx.path("lines"), lines).unwrap();
    // A recorded environment of a few KB, as a real shell's is.
    let note = format!("NOTE={}", "x".repeat(2_000));
    let child = ctx
        .command(&["--json", "add", "--stdin", "-e", &note])
        .stdin(std::fs::File::open(ctx.path("lines")).unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (peak, out, code) = peak_then_output(child);
    assert_eq!(code, Some(0));
    let added: serde_json::Value = serde_json::from_str(&out).unwrap();
    let added = added.as_array().unwrap();
    assert_eq!(added.len(), STDIN_LINES);
    assert_eq!(
        (added[0]["id"].as_i64(), added[STDIN_LINES - 1]["id"].as_i64()),
        (Some(1), Some(20_000))
    );
    assert_eq!(added[7]["payload"]["command"], "echo 7");
    assert!(peak < ADD_PEAK_KB, "add --stdin of {STDIN_LINES} lines held {peak} KiB at its peak");
}

/// The jobs of the redb queue below: enough that holding them, or a
/// 64 MiB page cache full of them, passes the bounds.
#[cfg(feature = "redb")]
const REDB_JOBS: usize = 20_000;

/// On redb, a wait's whole look and `status` (which reads the first page
/// of pending jobs in claim order) hold neither the jobs nor a cache of
/// the whole file: a read-only handle caches 8 MiB of pages, and a
/// due-first page keeps a page. Holding them took about 90 MiB for each.
#[cfg(feature = "redb")]
#[test]
fn on_redb_a_wait_and_status_hold_neither_the_jobs_nor_the_file() {
    let ctx = TestContext::new(Backend::Redb);
    let lines: String = (0..REDB_JOBS).map(|i| format!("echo {i}\n")).collect();
    std::fs::write(ctx.path("lines"), lines).unwrap();
    let note = format!("NOTE={}", "x".repeat(2_000));
    let out = ctx
        .command(&["add", "--stdin", "-e", &note])
        .stdin(std::fs::File::open(ctx.path("lines")).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let (peak, out, code) = peak_then_output(ctx.spawn(&["wait", "--all", "--timeout", "0"]));
    assert_eq!(code, Some(124), "{out}");
    assert!(out.contains(&format!("{REDB_JOBS} of {REDB_JOBS} jobs not finished")), "{out}");
    assert!(peak < WAIT_PEAK_KB, "a wait on {REDB_JOBS} redb jobs held {peak} KiB at its peak");

    let (peak, out, code) = peak_then_output(ctx.spawn(&["status"]));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("pending: {REDB_JOBS}")), "{out}");
    assert!(peak < WAIT_PEAK_KB, "status of {REDB_JOBS} redb jobs held {peak} KiB at its peak");
}
