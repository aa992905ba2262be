//! What `--db` may point at (the hardening issue, points 1 and 2): only a
//! regular file (or a symlink to one) of this user's that nobody else can
//! change, refused at once otherwise with exit 6 and a line saying what it
//! is; a missing folder is never created (but the default data folder);
//! `~/` is `$HOME`.

use std::os::unix::fs::PermissionsExt;
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::support::{Backend, TestContext, wait_child};

fn output_within(mut cmd: std::process::Command, within: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_child(&mut child, within);
    child.wait_with_output().unwrap()
}

fn assert_refused(out: &Output, code: i32, fragment: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert!(stderr.contains(fragment), "expected `{fragment}` in: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
}

fn with_db(ctx: &TestContext, db: &std::path::Path, args: &[&str]) -> std::process::Command {
    let mut cmd = ctx.bare_command();
    cmd.arg("--db").arg(db).args(args);
    cmd
}

#[test]
fn a_fifo_as_the_queue_is_refused_without_being_opened() {
    let ctx = TestContext::new(Backend::Sqlite);
    let fifo = ctx.path("q.db");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    for args in [&["add", "echo hi"][..], &["status"], &["list"], &["run"]] {
        let out = output_within(with_db(&ctx, &fifo, args), Duration::from_secs(10));
        assert_refused(&out, 6, "is a FIFO");
    }
}

#[test]
fn a_directory_or_a_device_as_the_queue_is_refused() {
    let ctx = TestContext::new(Backend::Sqlite);
    let dir = ctx.path("adir");
    std::fs::create_dir(&dir).unwrap();
    for (db, what) in [
        (dir.as_path(), "is a directory"),
        (std::path::Path::new("/dev/null"), "is a character device"),
        // The tests' stdin is /dev/null.
        (std::path::Path::new("/dev/stdin"), "is a character device"),
    ] {
        for args in [&["add", "echo hi"][..], &["status"]] {
            let out = output_within(with_db(&ctx, db, args), Duration::from_secs(10));
            assert_refused(&out, 6, what);
        }
    }
}

#[test]
fn a_queue_in_a_missing_folder_creates_no_folder() {
    let ctx = TestContext::new(Backend::Sqlite);
    let db = ctx.path("typo/dir/q.db");
    let out = with_db(&ctx, &db, &["add", "echo hi"]).output().unwrap();
    assert_refused(&out, 3, "does not exist");
    assert!(!ctx.path("typo").exists(), "a folder was created");
}

#[test]
fn the_default_queue_folder_is_still_created() {
    let ctx = TestContext::new(Backend::Sqlite);
    let out = ctx.bare_command().args(["add", "echo hi"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(ctx.path(".local/share/slothqueue/queue.db").is_file());
}

#[test]
fn a_tilde_in_slothqueue_db_is_home() {
    let ctx = TestContext::new(Backend::Sqlite);
    let out = ctx.bare_command().env("SLOTHQUEUE_DB", "~/q.db").args(["add", "echo hi"]).output();
    let out = out.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // HOME is the temp dir.
    assert!(ctx.path("q.db").is_file());
    assert!(!ctx.path("~").exists(), "a folder named ~ was created");
}

#[test]
fn a_queue_others_can_write_is_refused() {
    let ctx = TestContext::new(Backend::Sqlite);
    ctx.ok(&["add", "echo hi"]);
    std::fs::set_permissions(&ctx.db, std::fs::Permissions::from_mode(0o666)).unwrap();
    let before = std::fs::read(&ctx.db).unwrap();
    for args in [&["run"][..], &["status"], &["add", "echo again"]] {
        let out = ctx.run(args);
        assert_refused(&out, 6, "mode 0666 lets other users change it");
        assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"));
    }
    assert_eq!(std::fs::read(&ctx.db).unwrap(), before);
    std::fs::set_permissions(&ctx.db, std::fs::Permissions::from_mode(0o620)).unwrap();
    assert_refused(&ctx.run(&["status"]), 6, "mode 0620");
    std::fs::set_permissions(&ctx.db, std::fs::Permissions::from_mode(0o600)).unwrap();
    ctx.ok(&["status"]);
}

#[test]
fn a_wal_others_can_write_is_refused() {
    let ctx = TestContext::new(Backend::Sqlite);
    ctx.ok(&["add", "echo hi"]);
    let wal = ctx.path("queue.db-wal");
    std::fs::write(&wal, b"").unwrap();
    std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o646)).unwrap();
    assert_refused(&ctx.run(&["run"]), 6, "queue.db-wal: mode 0646");
}

#[test]
fn a_queue_of_another_user_is_refused() {
    if !rustix::process::geteuid().is_root() {
        // Only root can hand a file to someone else.
        return;
    }
    for backend in [Backend::Sqlite, Backend::Redb] {
        let ctx = TestContext::new(backend);
        ctx.ok(&["add", "echo hi"]);
        std::os::unix::fs::chown(&ctx.db, Some(4242), None).unwrap();
        assert_refused(&ctx.run(&["run"]), 6, "owned by uid 4242, not by you");
    }
}

/// `--backend` chooses the engine of a *new* queue; an existing file's own
/// header wins, as `--help` says: a healthy queue of the other backend is
/// opened as what it is, never called damaged.
#[cfg(all(feature = "sqlite", feature = "redb"))]
#[test]
fn backend_flag_on_an_existing_queue_of_the_other_backend_lets_the_header_win() {
    let ctx = TestContext::new(Backend::Sqlite);
    for (name, own, other) in [("q.redb", "redb", "sqlite"), ("q.db", "sqlite", "redb")] {
        let db = ctx.path(name);
        let out = with_db(&ctx, &db, &["add", "echo hi"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let out = with_db(&ctx, &db, &["--backend", other, "status"]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(&format!("({own})")), "{stdout}");
        assert!(stdout.contains("pending: 1"), "{stdout}");
    }
}
