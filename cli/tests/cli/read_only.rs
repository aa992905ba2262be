//! Looking changes nothing (torture S16): the commands that only look (`status`, `list`,
//! `show`, `export`, `logs`) leave a redb queue byte-for-byte as they found
//! it — a good file, a damaged one they refuse or read, and one a crash
//! left needing repair — where a writable open rewrites redb's header.

#![cfg(feature = "redb")]

use slothqueue::{NewJob, OpenOptions};

use crate::support::{Backend, TestContext, block_on};

/// The commands that must not write, as the torture suite runs them.
const LOOKS: &[&[&str]] = &[
    &["status"],
    &["status", "--json"],
    &["list"],
    &["list", "--json"],
    &["show", "1"],
    &["show", "2", "--json"],
    &["export"],
    &["logs", "1"],
];

/// Runs every look at `db` and lists what changed it or ended badly.
fn looks_at(ctx: &TestContext, db: &std::path::Path, what: &str) -> Vec<String> {
    let before = std::fs::read(db).unwrap();
    let mut problems = Vec::new();
    for args in LOOKS {
        let out = ctx.bare_command().arg("--db").arg(db).args(*args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code().is_none_or(|c| !(0..=6).contains(&c)) || stderr.contains("panicked") {
            problems.push(format!("{what}: {args:?} ended badly: {:?} {stderr}", out.status));
        }
        if std::fs::read(db).unwrap() != before {
            problems.push(format!("{what}: {args:?} changed the file ({:?})", out.status));
        }
    }
    problems
}

#[test]
fn s16_read_only_commands_leave_redb_bytes_identical() {
    let ctx = TestContext::new(Backend::Redb);
    let load = ctx.calm_load();
    ctx.ok(&["add", "echo hi"]);
    ctx.ok(&["run", "--load-file", load]);
    for i in 0..5 {
        ctx.ok(&["add", &format!("echo later {i}"), "--delay", "1h"]);
    }
    let good = std::fs::read(&ctx.db).unwrap();
    let mut problems = looks_at(&ctx, &ctx.db, "good file");
    // They answered from the file, too.
    assert!(ctx.ok(&["list"]).contains("echo later 4"));
    assert!(ctx.ok(&["logs", "1"]).ends_with("\nhi\n"));

    // Damaged copies: cut short, and bytes flipped (header included).
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for cut in [1, 16, 100, 5000, good.len() / 2, good.len() - 1] {
        cases.push((format!("cut at {cut}"), good[..cut].to_vec()));
    }
    for at in [0, 9, 12, 40, 64, 300, 4096, good.len() / 3, good.len() / 2, good.len() - 10] {
        let mut bad = good.clone();
        bad[at] ^= 0x5a;
        cases.push((format!("flip at {at}"), bad));
    }
    for (n, (what, bytes)) in cases.iter().enumerate() {
        let db = ctx.path(&format!("damaged-{n}.redb"));
        std::fs::write(&db, bytes).unwrap();
        problems.extend(looks_at(&ctx, &db, what));
    }

    // A crash image: the file as a process that died with it open left it
    // (redb will not open it read-only without a repair).
    let crashed = ctx.path("crashed.redb");
    {
        let store = slothqueue::open(&ctx.db, OpenOptions::default()).unwrap();
        block_on(
            store.push(NewJob::shell("echo after", "/tmp"), slothqueue::Timestamp::from_millis(1)),
        )
        .unwrap();
        std::fs::copy(&ctx.db, &crashed).unwrap();
    }
    problems.extend(looks_at(&ctx, &crashed, "crash image"));
    let out = ctx.bare_command().arg("--db").arg(&crashed).arg("list").output().unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(list.contains("echo after"), "the crash image's last commit is missing:\n{list}");

    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}
