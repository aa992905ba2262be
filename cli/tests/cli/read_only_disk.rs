//! Commands that only look work when the disk cannot be written (the
//! hardening issue, point 10): on a read-only filesystem and on a full one,
//! SQLite cannot make its `-shm` beside the queue, and `status`, `list`,
//! `show` and `export` fall back to an immutable open and say so on stderr.
//! Needs `mount` (root); says loudly when it cannot run.

#![cfg(feature = "sqlite")]
#![allow(clippy::print_stderr, reason = "a test that cannot run says so loudly")]

use std::process::Command;

use crate::support::{Backend, TestContext};

/// A tmpfs mounted at `dir`, unmounted on drop.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &std::path::Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_owned()))
    }

    fn remount_read_only(&self) -> bool {
        Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn looks(ctx: &TestContext, db: &std::path::Path) -> Vec<String> {
    let mut problems = Vec::new();
    for args in [&["status"][..], &["list"], &["show", "1"], &["export"]] {
        let out = ctx.bare_command().arg("--db").arg(db).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            problems.push(format!("{args:?}: {:?} {stderr}", out.status));
        } else if !stderr.contains("opened immutable") {
            problems.push(format!("{args:?} did not say it opened immutable: {stderr}"));
        }
    }
    problems
}

#[test]
fn looks_work_on_a_read_only_filesystem() {
    let ctx = TestContext::new(Backend::Sqlite);
    let Some(fs) = Tmpfs::mount(&ctx.path("ro"), "4m") else {
        eprintln!(
            "SKIPPED looks_work_on_a_read_only_filesystem: cannot mount a tmpfs here (needs root)"
        );
        return;
    };
    let db = fs.0.join("q.db");
    let out = ctx.bare_command().arg("--db").arg(&db).args(["add", "echo hi"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(fs.remount_read_only(), "remount read-only");
    let problems = looks(&ctx, &db);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn looks_work_on_a_full_disk() {
    let ctx = TestContext::new(Backend::Sqlite);
    let Some(fs) = Tmpfs::mount(&ctx.path("full"), "1m") else {
        eprintln!("SKIPPED looks_work_on_a_full_disk: cannot mount a tmpfs here (needs root)");
        return;
    };
    let db = fs.0.join("q.db");
    let out = ctx.bare_command().arg("--db").arg(&db).args(["add", "echo hi"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Fill the disk to the last byte.
    let filler = fs.0.join("filler");
    let mut size = 1 << 20;
    while size > 0 {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&filler).unwrap();
        if std::io::Write::write_all(&mut f, &vec![1u8; size]).is_err() {
            size /= 2;
        }
    }
    let problems = looks(&ctx, &db);
    assert!(problems.is_empty(), "{problems:#?}");
}
