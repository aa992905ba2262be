//! PostgreSQL as operators run it, through the binary: the CLI and a
//! runner through a real PgBouncer in transaction mode (two server
//! connections in its pool, so each transaction runs on whichever is
//! free), and a real hot standby (`pg_basebackup -R`) refusing writers in
//! one line with exit code 7 while looking works. Skipped, loudly, without
//! `SLOTHQUEUE_PG_URL` (run them with `cargo xtask pg -- cargo test -p
//! slothqueue-cli --test postgres_ops`) or the binaries; under `CI` a
//! missing binary fails.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly on purpose; a panic is the test's report"
)]
#![allow(
    clippy::disallowed_methods,
    reason = "deadlines for real servers and processes to answer, not time made to pass"
)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use slothqueue_store_postgres::testing::servers::{PgBouncer, Standby, tool};
use slothqueue_store_postgres::testing::{schema_url_for_path, url_from_env};

const BIN: &str = env!("CARGO_BIN_EXE_slothqueue");

/// The binary on `db` with a clean environment, in `home`.
fn slothqueue(home: &Path, db: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", home)
        .env("TZ", "UTC")
        .env("NO_COLOR", "1")
        .current_dir(home)
        .stdin(Stdio::null())
        .arg("--db")
        .arg(db);
    cmd
}

fn run(home: &Path, db: &str, args: &[&str]) -> Output {
    slothqueue(home, db).args(args).output().unwrap()
}

/// Runs, asserts success, returns stdout.
fn ok(home: &Path, db: &str, args: &[&str]) -> String {
    let out = run(home, db, args);
    assert!(
        out.status.success(),
        "{args:?} failed ({:?}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn job_state(home: &Path, db: &str, id: u64) -> String {
    let show: serde_json::Value =
        serde_json::from_str(&ok(home, db, &["--json", "show", &id.to_string()])).unwrap();
    show["state"].as_str().unwrap_or_default().to_owned()
}

/// A load file below any ceiling: the runner never waits on this
/// machine's real load.
fn calm_load(home: &Path) -> String {
    let path = home.join("load");
    std::fs::write(&path, "0.01 0.01 0.01 1/100 1\n").unwrap();
    path.display().to_string()
}

/// The CLI through PgBouncer in transaction mode: `add`, `list`,
/// `status`, `show`, a runner draining the queue, and a waiting runner
/// (`run --follow`) woken by a new job.
#[test]
fn the_cli_and_a_runner_work_through_pgbouncer_in_transaction_mode() {
    let Some(base) = url_from_env() else { return };
    if tool("pgbouncer").is_none() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let cluster = schema_url_for_path(&base, &home.join("queue"));
    let bouncer = PgBouncer::start(&cluster, 2).unwrap();
    let db = bouncer.url(&cluster, "pooler=transaction");
    // Without the flag, the pooler's refusal says what to add.
    let refused = run(home, &bouncer.url(&cluster, ""), &["add", "true"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("pooler=transaction"), "{said}");
    for n in 1..=3 {
        assert_eq!(
            ok(home, &db, &["add", &format!("echo job{n}")]),
            format!("added job #{n} (priority 0, max runtime 300s)\n")
        );
    }
    let list: serde_json::Value =
        serde_json::from_str(&ok(home, &db, &["--json", "list"])).unwrap();
    assert_eq!(list.as_array().map(Vec::len), Some(3), "{list}");
    let status: serde_json::Value =
        serde_json::from_str(&ok(home, &db, &["--json", "status"])).unwrap();
    assert_eq!(status["pending"], 3, "{status}");
    assert!(ok(home, &db, &["show", "2"]).contains("echo job2"));
    let load = calm_load(home);
    let drained = run(home, &db, &["run", "--load-file", &load]);
    assert!(drained.status.success(), "{drained:?}\n{}", bouncer.log());
    for id in 1..=3 {
        assert_eq!(job_state(home, &db, id), "done");
    }
    // A runner waiting for work is woken (by polling: no LISTEN through a
    // pooler) and runs a job added after it started.
    let mut runner = slothqueue(home, &db)
        .args(["run", "--follow", "--load-file", &load])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Added once the runner says it is idle, so it is the wake-up that
    // starts it, not the runner's first look.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        let status: serde_json::Value =
            serde_json::from_str(&ok(home, &db, &["--json", "status"])).unwrap();
        if status["runners"][0]["activity"]["activity"] == "idle" {
            break;
        }
    }
    ok(home, &db, &["add", "echo woken"]);
    let start = Instant::now();
    let mut state = String::new();
    while start.elapsed() < Duration::from_secs(30) {
        state = job_state(home, &db, 4);
        if state == "done" {
            break;
        }
    }
    let _ = runner.kill();
    let out = runner.wait_with_output().unwrap();
    assert_eq!(state, "done", "{}\n{}", String::from_utf8_lossy(&out.stderr), bouncer.log());
}

/// Against a hot standby: a writer (`add`, `run`) says one line naming
/// the fix and exits 7; looking (`status`, `list`, `show`) works.
#[test]
fn a_standby_refuses_writers_with_their_own_exit_code() {
    let Some(base) = url_from_env() else { return };
    if tool("pg_basebackup").is_none() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let primary = schema_url_for_path(&base, &home.join("queue"));
    ok(home, &primary, &["add", "echo one"]);
    let standby = Standby::start(&primary).unwrap();
    let replica = standby.url(&primary);
    let load = calm_load(home);
    for args in [vec!["add", "echo two"], vec!["run", "--follow", "--load-file", &load]] {
        let out = run(home, &replica, &args);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(7), "{args:?}: {said}");
        assert_eq!(said.lines().count(), 1, "{said}");
        assert!(
            said.trim_end()
                .ends_with("this server is a read-only standby; point --db at the primary"),
            "{said}"
        );
    }
    // The standby replays what the primary wrote; looking works there.
    let start = Instant::now();
    let mut status = String::new();
    while start.elapsed() < Duration::from_secs(30) {
        status = ok(home, &replica, &["--json", "status"]);
        if status.contains("\"pending\":1") || status.contains("\"pending\": 1") {
            break;
        }
    }
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["pending"], 1, "{status}");
    assert!(ok(home, &replica, &["show", "1"]).contains("echo one"));
    assert!(ok(home, &replica, &["list"]).contains("echo one"));
}
