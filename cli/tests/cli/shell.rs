//! The command line as scripts use it (issue 37, "The shell"): `retry`
//! and `cancel` take many ids (`… | xargs slothqueue retry`), `list`
//! says when it cut the list and `--all` lifts the cut, errors under
//! `--json` are JSON on stderr with the same exit code, and `help --help`
//! works.

use std::process::Stdio;

use crate::both_backends;
use crate::support::{Backend, TestContext};

/// The ids of a JSON array of jobs, in order.
fn ids(json: &str) -> Vec<i64> {
    let jobs: serde_json::Value = serde_json::from_str(json).unwrap();
    jobs.as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect()
}

/// stdout, stderr and the exit code.
fn run(ctx: &TestContext, args: &[&str]) -> (String, String, i32) {
    let out = ctx.run(args);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap(),
    )
}

both_backends! {
    fn retry_and_cancel_take_many_ids(ctx) {
        for n in 1..=4 {
            ctx.ok(&["add", &format!("echo {n}")]);
        }
        let (out, err, code) = run(&ctx, &["cancel", "1", "#2", "99", "3"]);
        assert_eq!(out, "cancelled job #1\ncancelled job #2\ncancelled job #3\n");
        assert_eq!(err, "error: no job #99\n");
        assert_eq!(code, 3, "the refusal's code, the others done all the same");

        // As xargs hands them over: ids on stdin, one call.
        let mut xargs = std::process::Command::new("xargs");
        xargs
            .arg(env!("CARGO_BIN_EXE_slothqueue"))
            .args(["--db", ctx.db.to_str().unwrap(), "retry"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("HOME", ctx.dir.path())
            .current_dir(ctx.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = xargs.spawn().unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"1\n2\n3\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "job #1 is pending again (attempts reset)\n\
             job #2 is pending again (attempts reset)\n\
             job #3 is pending again (attempts reset)\n"
        );

        // A refused id in the middle: the others go on, the exit is its code.
        let (out, err, code) = run(&ctx, &["retry", "1", "4"]);
        assert_eq!(out, "");
        assert!(err.lines().count() == 2 && err.contains("#1") && err.contains("#4"), "{err}");
        assert_eq!(code, 4);

        // A flag after the ids is a flag; a negative number an id refused.
        let (out, _, code) = run(&ctx, &["cancel", "4", "--json"]);
        assert_eq!(code, 0);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["id"], 4);
        let (_, err, code) = run(&ctx, &["retry", "-1"]);
        assert!(code == 2 && err.contains("not a job id"), "{err}");

        // --json: one line per job, each as a single id's answer was.
        let (out, _, code) = run(&ctx, &["--json", "cancel", "1", "2"]);
        assert_eq!(code, 0);
        let states: Vec<(i64, String)> = out
            .lines()
            .map(|l| {
                let j: serde_json::Value = serde_json::from_str(l).unwrap();
                (j["id"].as_i64().unwrap(), j["state"].as_str().unwrap().to_owned())
            })
            .collect();
        assert_eq!(states, [(1, "cancelled".to_owned()), (2, "cancelled".to_owned())]);
    }

    fn list_says_when_it_is_cut_and_all_lifts_the_cut(ctx) {
        for n in 1..=5 {
            ctx.ok(&["add", &format!("echo {n}")]);
        }
        let table = ctx.ok(&["list", "--limit", "2"]);
        assert_eq!(table.lines().last(), Some("… 3 more; --all or --limit"), "{table}");
        assert_eq!(table.lines().count(), 4, "header, two rows, the note:\n{table}");
        let whole = ctx.ok(&["list", "--limit", "5"]);
        assert!(!whole.contains("more;"), "nothing was cut:\n{whole}");
        let due = ctx.ok(&["list", "--limit", "4", "--order", "due"]);
        assert_eq!(due.lines().last(), Some("… 1 more; --all or --limit"), "{due}");

        assert_eq!(ids(&ctx.ok(&["--json", "list", "--all"])), [5, 4, 3, 2, 1]);
        assert_eq!(ids(&ctx.ok(&["--json", "list", "--limit", "0"])), [5, 4, 3, 2, 1]);
        assert!(!ctx.ok(&["list", "--all"]).contains("more;"));

        // --json: the array as before, the sign beside it on stderr.
        let (out, err, code) = run(&ctx, &["--json", "list", "-n", "2"]);
        assert_eq!((ids(&out), code), (vec![5, 4], 0));
        let sign: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
        assert_eq!(sign["more"], 3, "{err}");
        assert_eq!(sign["at_least"], false, "{err}");
        assert_eq!(sign["warning"], "… 3 more; --all or --limit", "{err}");
        let (_, err, _) = run(&ctx, &["--json", "list", "-n", "5"]);
        assert_eq!(err, "", "a whole list has no sign");

        let (_, err, code) = run(&ctx, &["list", "--all", "--limit", "3"]);
        assert_eq!(code, 2, "{err}");
    }

    fn errors_under_json_are_json_with_the_same_code(ctx) {
        ctx.ok(&["add", "true"]);
        let cases: [(&[&str], i32, &str); 5] = [
            (&["--json", "show", "9"], 3, "no job #9"),
            (&["show", "9", "--json"], 3, "no job #9"),
            (&["--json", "show", "nine"], 2, "not a job id"),
            (&["--json", "list", "--frobnicate"], 2, "--frobnicate"),
            (&["--json", "hold", "1", "9"], 3, "no job #9"),
        ];
        for (args, code, says) in cases {
            let (_, err, got) = run(&ctx, args);
            assert_eq!(got, code, "{args:?}: {err}");
            let lines: Vec<&str> = err.lines().collect();
            assert_eq!(lines.len(), 1, "{args:?}: one line: {err}");
            let v: serde_json::Value = serde_json::from_str(lines[0])
                .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {err}"));
            assert_eq!(v["code"], code, "{args:?}: {err}");
            assert!(v["error"].as_str().unwrap().contains(says), "{args:?}: {err}");
            assert!(!v["error"].as_str().unwrap().starts_with("error:"), "{args:?}: {err}");
        }
        // Without --json, as before; a job's own `--json` is not ours.
        let (_, err, code) = run(&ctx, &["show", "9"]);
        assert_eq!((err.as_str(), code), ("error: no job #9\n", 3));
        let (_, err, _) = run(&ctx, &["add", "--at", "soon", "--", "jq", "--json"]);
        assert!(err.starts_with("error: "), "{err}");
    }
}

#[test]
fn help_of_help_says_what_help_does() {
    let ctx = TestContext::new(Backend::Sqlite);
    for args in [&["help", "--help"][..], &["help", "-h"], &["--json", "help", "--help"]] {
        let (out, err, code) = run(&ctx, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(out.contains("Usage: slothqueue help"), "{args:?}:\n{out}");
        assert!(out.contains("the help of the given subcommand"), "{args:?}:\n{out}");
    }
    // `help add` still prints add's help.
    let out = ctx.ok(&["help", "add"]);
    assert!(out.contains("Usage: slothqueue add"), "{out}");
}
