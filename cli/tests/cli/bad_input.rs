//! A table of invalid invocations (S18 in docs/reliability.md). Each must
//! exit with its documented code, say what was wrong in one line on stderr,
//! never panic, and leave the queue file byte-for-byte as it was (and
//! create no other file).

use std::path::PathBuf;

use crate::both_backends;
use crate::support::{Backend, TestContext, read};

/// Which file `--db` points at.
#[derive(Clone, Copy, Debug)]
enum Db {
    /// The test's queue (one job done, one pending).
    Queue,
    /// A text file that is no queue.
    Foreign,
    /// A copy of the queue with its pages overwritten.
    Corrupt,
    /// A queue file that does not exist.
    Missing,
}

struct Case {
    args: &'static [&'static str],
    db: Db,
    code: i32,
    fragment: &'static str,
}

const fn case(args: &'static [&'static str], code: i32, fragment: &'static str) -> Case {
    Case { args, db: Db::Queue, code, fragment }
}

const CASES: &[Case] = &[
    case(&["add", "x", "--delay", "-1s"], 2, "`-1s` is negative"),
    case(&["add", "x", "--delay", "1e9h"], 2, "unknown unit `e`"),
    case(&["add", "x", "--delay", "18446744073709551616s"], 2, "too long"),
    case(&["add", "x", "--delay", "1000000000h"], 2, "too long"),
    case(&["add", "x", "--delay", ""], 2, "empty duration"),
    case(&["add", "x", "--delay", "1h30"], 2, "ambiguous"),
    case(&["add", "x", "--delay", "٣s"], 2, "not a duration"),
    case(&["add", "x", "--max-runtime", "forever"], 2, "or none"),
    case(&["add", "x", "--priority", "2147483648"], 2, "not a priority"),
    case(&["add", "x", "--priority", "1.5"], 2, "not a priority"),
    case(&["add", "x", "--priority", "high"], 2, "not a priority"),
    case(&["add", "x", "--max-attempts", "0"], 2, "at least 1"),
    case(&["add", "x", "--max-attempts", "99999999999"], 2, "number of attempts"),
    case(&["add", ""], 2, "the command is empty"),
    case(&["add", "   "], 2, "the command is empty"),
    case(&["add"], 2, "add needs a command"),
    case(&["add", "x", "--at", "tomorrow"], 2, "not a time"),
    case(&["add", "x", "--at", "1969-07-20T20:17:00Z"], 2, "is before 1970-01-01 (the epoch)"),
    case(&["add", "x", "--at", "10000-01-01T00:00:00Z"], 2, "in the years 1970 to 9999"),
    case(&["add", "x", "--max-runtime", "0"], 2, "max runtime must be at least 1ms"),
    case(&["add", "x", "--max-runtime", "0s"], 2, "max runtime must be at least 1ms"),
    case(&["add", "x", "--at", "2030-01-01 00:00", "--delay", "5m"], 2, "cannot be used with"),
    case(&["add", "--kind", "resize", "--payload", "{nope"], 2, "--payload is not valid JSON"),
    case(&["add", "--kind", "../x", "--payload", "{}"], 2, "--kind `../x` is not a plain name"),
    case(&["add", "--kind", "shell", "--payload", "{}"], 2, "--kind shell"),
    case(&["add", "echo", "--kind", "k", "--payload", "{}"], 2, "not both"),
    case(&["add", "x", "--queue", "a b"], 2, "--queue `a b`"),
    case(&["add", "x", "--env", "NOEQUALS"], 2, "--env `NOEQUALS`"),
    case(&["add", "x", "--key", ""], 2, "--key must be"),
    case(&["add", "x", "--after", "99"], 2, "--after 99: no job #99"),
    case(&["add", "x", "--after", "1,no-such-key"], 2, "no job holds the key `no-such-key`"),
    case(&["add", "x", "--after", "0"], 2, "`0` is not a job id"),
    case(&["add", "x", "--stdin"], 2, "cannot be used with"),
    case(&["add", "--stdin", "--key", "k"], 2, "cannot be used with"),
    case(&["add", "--stdin", "--queue", "a b"], 2, "--queue `a b`"),
    case(&["retry", "1", "--after", "2"], 2, "unexpected argument '--after'"),
    case(&["--backend", "foo", "status"], 2, "[possible values: sqlite, redb]"),
    case(
        &["list", "--state", "nope"],
        2,
        "[possible values: pending, running, done, failed, cancelled, held, waiting]",
    ),
    case(&["list", "--limit", "ten"], 2, "not a limit"),
    case(&["list", "--order", "random"], 2, "invalid value 'random'"),
    case(&["show", "0"], 2, "not a job id"),
    case(&["show", "abc"], 2, "not a job id"),
    case(&["show", "-3"], 2, "not a job id"),
    case(&["show", "999"], 3, "no job #999"),
    case(&["logs", "999"], 3, "no job #999"),
    case(&["logs", "2"], 3, "it has not run yet"),
    case(&["cancel", "1"], 4, "cannot cancel job #1: it is done"),
    case(&["retry", "2"], 4, "cannot retry job #2: it is pending"),
    case(&["retry", "999"], 3, "no job #999"),
    case(&["clear", "--older-than", "soon"], 2, "not a duration"),
    case(&["run", "--load-ceiling", "-1"], 2, "not a load ceiling"),
    case(&["run", "--load-ceiling", "NaN"], 2, "not a load ceiling"),
    case(&["run", "--check-interval", "0s"], 2, "--check-interval must be more than 0s"),
    case(&["run", "--once", "--follow"], 2, "cannot be used with"),
    case(&["run", "--handlers", "/nonexistent/handlers"], 2, "is not a directory"),
    case(&["run", "--load-file", "/nonexistent/loadavg"], 2, "is not a file"),
    case(&["run", "--slots", "0"], 2, "not a number of slots from 1 to 64"),
    case(&["run", "--slots", "65"], 2, "not a number of slots from 1 to 64"),
    case(&["run", "--slots", "2", "--once"], 2, "--once runs one job"),
    case(&["run", "--max-cpu-pressure", "0"], 2, "not a cpu pressure ceiling"),
    case(&["run", "--max-cpu-pressure", "high"], 2, "not a cpu pressure ceiling"),
    case(&["run", "--pressure-file", "load"], 2, "--max-cpu-pressure"),
    case(
        &["run", "--max-cpu-pressure", "30", "--pressure-file", "/nonexistent/cpu"],
        2,
        "cannot read it",
    ),
    case(&["run", "--max-cpu-pressure", "30", "--pressure-file", "load"], 2, "not in PSI format"),
    case(&["run", "--power-supply-dir", "/nonexistent"], 2, "--require-ac-power"),
    case(
        &["run", "--require-ac-power", "--power-supply-dir", "/nonexistent"],
        2,
        "is not a directory",
    ),
    case(&["serve", "--slots", "100"], 2, "not a number of slots"),
    case(&["parallel", "-1"], 2, "not a limit"),
    case(&["parallel", "two"], 2, "not a limit"),
    case(&["parallel"], 2, "<N>"),
    case(&["parallel", "2", "--queue", "a b"], 2, "--queue `a b`"),
    case(&["pause", "--queue", "../x"], 2, "--queue `../x`"),
    case(&["resume", "--queue", ""], 2, "--queue"),
    case(&["hold"], 2, "<ID>..."),
    case(&["hold", "0"], 2, "not a job id"),
    case(&["release", "x"], 2, "not a job id"),
    case(&["queues", "extra"], 2, "unexpected argument"),
    case(&["every", "5x", "make"], 2, "SPEC `5x` is neither an interval"),
    case(&["every", "0 25 * * *", "make"], 2, "cron expression `0 25 * * *`"),
    case(&["every", "2h"], 2, "every 2h needs a command"),
    case(&["every", "2h", "make", "--tz", "Mars/Olympus"], 2, "unknown time zone `Mars/Olympus`"),
    case(&["every", "2h", "make", "--delay", "5m"], 2, "every takes no --delay"),
    case(&["every", "2h", "make", "--overlap", "pile"], 2, "[possible values: skip, queue]"),
    case(&["every", "--pause", "k", "--remove", "k"], 2, "cannot be used with"),
    case(&["schedules", "extra"], 2, "unexpected argument"),
    Case { args: &["every", "--pause", "k"], db: Db::Missing, code: 3, fragment: "no queue at" },
    case(&["import", "/nonexistent/dump.jsonl"], 2, "cannot read /nonexistent/dump.jsonl"),
    case(&["completions", "cmd.exe"], 2, "invalid value 'cmd.exe'"),
    case(&["frobnicate"], 2, "unrecognized subcommand"),
    #[cfg(feature = "http")]
    case(&["serve", "--addr", "10.1.2.3:7878"], 2, "not a loopback address"),
    #[cfg(feature = "http")]
    case(
        &["serve", "--metrics-addr", "10.1.2.3:9100"],
        2,
        "--metrics-addr 10.1.2.3:9100: not a loopback",
    ),
    #[cfg(not(feature = "http"))]
    case(&["serve"], 2, "built without the \"http\" feature"),
    case(&["serve", "--addr", "localhost"], 2, "invalid value 'localhost'"),
    Case { args: &["status"], db: Db::Foreign, code: 6, fragment: "not a slothqueue queue" },
    Case { args: &["add", "x"], db: Db::Foreign, code: 6, fragment: "not a slothqueue queue" },
    Case { args: &["list"], db: Db::Corrupt, code: 6, fragment: "damaged" },
    Case { args: &["add", "x"], db: Db::Corrupt, code: 6, fragment: "damaged" },
    Case { args: &["show", "1"], db: Db::Missing, code: 3, fragment: "no queue at" },
    Case { args: &["cancel", "1"], db: Db::Missing, code: 3, fragment: "no queue at" },
    Case { args: &["resume"], db: Db::Missing, code: 3, fragment: "no queue at" },
    Case { args: &["hold", "1"], db: Db::Missing, code: 3, fragment: "no queue at" },
    Case { args: &["release", "1"], db: Db::Missing, code: 3, fragment: "no queue at" },
];

/// The queue: job #1 done, job #2 pending an hour from now.
fn seeded(ctx: &TestContext) {
    let load = ctx.calm_load();
    ctx.ok(&["add", "true"]);
    ctx.ok(&["run", "--load-file", load]);
    ctx.ok(&["add", "true", "--delay", "1h"]);
}

/// Every file in the temp dir with its bytes; for a redb queue under a
/// command that may write, its content (an export) instead of its bytes.
///
/// redb rewrites its header when a writable handle opens and closes, so a
/// writing command that the store refuses (`retry` of a pending job)
/// changes bytes though not content. Commands that only look open redb
/// read-only and are held to byte-identity like SQLite.
fn snapshot_dir(ctx: &TestContext, args: &[&str]) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let looks = matches!(
        args.first(),
        Some(&("status" | "list" | "show" | "logs" | "export" | "schedules"))
    );
    let redb_queue = (ctx.backend == Backend::Redb && !looks).then_some(&ctx.db);
    // A writable redb open renews the queue's seal (the file's times as it
    // left them, which its header rewrite changes): only its presence counts.
    let redb_seal = redb_queue.map(|q| {
        let mut name = q.as_os_str().to_owned();
        name.push(".seal");
        PathBuf::from(name)
    });
    let mut files: Vec<(PathBuf, Option<Vec<u8>>)> = std::fs::read_dir(ctx.dir.path())
        .unwrap()
        .flatten()
        .map(|e| {
            let p = e.path();
            let bytes = if Some(&p) == redb_queue {
                Some(ctx.ok(&["export"]).into_bytes())
            } else if Some(&p) == redb_seal.as_ref() {
                Some(Vec::new())
            } else if p.is_file() {
                read(&p)
            } else {
                None
            };
            (p, bytes)
        })
        .collect();
    files.sort();
    files
}

fn corrupt_copy(ctx: &TestContext) -> PathBuf {
    let mut bytes = std::fs::read(&ctx.db).unwrap();
    // Keep the header (so the backend is recognised), damage the rest.
    let keep = 100.min(bytes.len());
    for (i, b) in bytes.iter_mut().enumerate().skip(keep) {
        *b = (i as u8).wrapping_mul(37) ^ 0xA5;
    }
    let ext = ctx.db.extension().unwrap().to_str().unwrap().to_owned();
    let path = ctx.path(&format!("corrupt.{ext}"));
    std::fs::write(&path, bytes).unwrap();
    path
}

both_backends! {
    fn bad_input_is_refused_and_writes_nothing(ctx) {
        seeded(&ctx);
        let foreign = ctx.path("notes.txt");
        std::fs::write(&foreign, "shopping list: eggs, milk\n").unwrap();
        let corrupt = corrupt_copy(&ctx);
        assert!(CASES.len() >= 20);
        let mut failures = Vec::new();
        for case in CASES {
            let db = match case.db {
                Db::Queue => ctx.db.clone(),
                Db::Foreign => foreign.clone(),
                Db::Corrupt => corrupt.clone(),
                Db::Missing => ctx.path("missing.db"),
            };
            let before = snapshot_dir(&ctx, case.args);
            let out = ctx.bare_command().arg("--db").arg(&db).args(case.args).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            let after = snapshot_dir(&ctx, case.args);
            let problems = [
                (out.status.code() != Some(case.code))
                    .then(|| format!("exit {:?}, expected {}", out.status.code(), case.code)),
                (!stderr.contains(case.fragment))
                    .then(|| format!("stderr lacks `{}`", case.fragment)),
                (stderr.lines().count() != 1).then(|| "stderr is not one line".to_owned()),
                stderr.contains("panicked").then(|| "panicked".to_owned()),
                (before != after).then(|| "the temp dir changed".to_owned()),
            ];
            let problems: Vec<String> = problems.into_iter().flatten().collect();
            if !problems.is_empty() {
                failures.push(format!("{:?} on {:?}: {}\n    stderr: {stderr}", case.args, case.db, problems.join("; ")));
            }
        }
        assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n"));
    }

    fn a_malformed_import_writes_nothing(ctx) {
        seeded(&ctx);
        let mut dump = ctx.ok(&["export"]);
        dump.push_str("{\"id\": 7, \"not\": \"a job\"}\n");
        let file = ctx.path("dump.jsonl");
        std::fs::write(&file, dump).unwrap();
        let before = (read(&ctx.db), ctx.ok(&["export"]));
        let out = ctx.run(&["import", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("line 3: not a job"), "{stderr}");
        if ctx.backend == Backend::Sqlite {
            assert_eq!(read(&ctx.db), before.0);
        }
        assert_eq!(ctx.ok(&["export"]), before.1);
    }
}

both_backends! {
    fn non_utf8_arguments_are_refused_clearly(ctx) {
        use std::os::unix::ffi::OsStrExt;
        seeded(&ctx);
        let before = ctx.ok(&["export"]);
        let out = ctx
            .command(&["add"])
            .arg(std::ffi::OsStr::from_bytes(b"echo \xff\xfe"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("invalid UTF-8"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert_eq!(ctx.ok(&["export"]), before);
    }
}
