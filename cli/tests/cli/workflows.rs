//! Jobs that run after others (issue #15), through the binary: `add
//! --after`, `add --stdin`, what `show`, `list` and `status` say of them,
//! a failure cancelling what waits on it and a `retry` bringing it back,
//! and export/import keeping the edges.

use std::process::Output;

use slothqueue::JobState;

use crate::support::{TestContext, format_output, stdout_of, wait_child};
use crate::{both_backends, slothqueue_snapshot};

/// Runs `args` with `file` (in the temp dir) as stdin.
fn with_stdin(ctx: &TestContext, args: &[&str], file: &str) -> Output {
    let input = std::fs::File::open(ctx.path(file)).unwrap();
    ctx.command(args).stdin(input).output().unwrap()
}

/// Snapshots a `--stdin` run through the central filters, like
/// `slothqueue_snapshot!` does for the others.
fn stdin_snapshot(ctx: &TestContext, name: &str, args: &[&str], file: &str) -> Output {
    let out = with_stdin(ctx, args, file);
    let text = format_output(args, &out).replacen('\n', &format!(" < {file}\n"), 1);
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    for (re, rep) in ctx.filters() {
        settings.add_filter(&re, rep);
    }
    settings.bind(|| insta::assert_snapshot!(name, text));
    out
}

/// The lines of a file in the temp dir.
fn lines(ctx: &TestContext, name: &str) -> Vec<String> {
    std::fs::read_to_string(ctx.path(name)).unwrap().lines().map(str::to_owned).collect()
}

/// Every job of the queue as `export` writes it.
fn exported(ctx: &TestContext) -> Vec<serde_json::Value> {
    ctx.ok(&["export"]).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// 1,000 job lines with a comment on line 2 and a blank line 3, so a
/// line's number is not its job's place: a chain by key, every tenth line
/// a plain command (waiting on nothing).
fn thousand_lines(bad_line_500: Option<&str>) -> String {
    let mut text = String::from("{\"command\": \"true\", \"key\": \"k1\"}\n# the chain\n\n");
    let mut number = 3;
    let mut k = 1;
    while number < 1_002 {
        number += 1;
        if number == 500 {
            if let Some(bad) = bad_line_500 {
                text.push_str(bad);
                text.push('\n');
                continue;
            }
        }
        if number % 10 == 0 {
            text.push_str("true\n");
        } else {
            text.push_str(&format!(
                "{{\"command\": \"true\", \"key\": \"k{}\", \"after\": \"k{k}\"}}\n",
                k + 1
            ));
            k += 1;
        }
    }
    text
}

both_backends! {
    fn a_chain_runs_in_order_in_one_drain(ctx) {
        let load = ctx.calm_load();
        // The priorities say the opposite of the chain: the edges win.
        slothqueue_snapshot!(ctx, "after_add_first", ["add", "echo first >> order", "--key", "build-7"]);
        slothqueue_snapshot!(ctx, "after_add_second", ["add", "echo second >> order", "--after", "build-7", "--priority", "5"]);
        slothqueue_snapshot!(ctx, "after_add_third", ["add", "echo third >> order", "--after", "#2,build-7", "--priority", "9"]);
        slothqueue_snapshot!(ctx, "after_show_waiting", ["show", "2"]);
        slothqueue_snapshot!(ctx, "after_show_parent", ["show", "1"]);
        slothqueue_snapshot!(ctx, "after_list_waiting", ["list"]);
        slothqueue_snapshot!(ctx, "after_status_waiting", ["status"]);
        let status: serde_json::Value = serde_json::from_str(&ctx.ok(&["--json", "status"])).unwrap();
        assert_eq!((status["pending"].as_u64(), status["waiting_on_parents"].as_u64(), status["due_now"].as_u64()), (Some(3), Some(2), Some(1)));
        let third = ctx.job(3);
        let mut parents = third.after.clone();
        parents.sort_unstable();
        assert_eq!((parents, third.pending_parents), (vec![1, 2], 2));

        let out = ctx.run(&["run", "--load-file", load]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(lines(&ctx, "order"), ["first", "second", "third"]);
        for id in 1..=3 {
            assert_eq!(ctx.job(id).state, JobState::Done, "job #{id}");
        }
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(stdout.ends_with("finished: 3 done, 0 failed\n"), "{stdout}");
    }

    fn a_failing_middle_step_cancels_the_last_and_a_retry_brings_it_back(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "echo one >> order", "--key", "one"]);
        ctx.ok(&["add", "test -f ready && echo two >> order", "--key", "two", "--after", "one", "--max-attempts", "1"]);
        ctx.ok(&["add", "echo three >> order", "--after", "two"]);
        let out = ctx.run(&["run", "--load-file", load]);
        assert_eq!(out.status.code(), Some(1), "the middle step failed");
        assert_eq!(lines(&ctx, "order"), ["one"]);
        let third = ctx.job(3);
        assert_eq!((third.state, third.cancelled_by), (JobState::Cancelled, Some(2)));
        assert_eq!(third.attempts, 0, "it never ran");
        slothqueue_snapshot!(ctx, "after_show_cancelled", ["show", "3"]);
        slothqueue_snapshot!(ctx, "after_list_cancelled", ["list"]);
        slothqueue_snapshot!(ctx, "after_retry_refused", ["retry", "3"]);
        slothqueue_snapshot!(ctx, "after_add_on_failed", ["add", "echo four >> order", "--after", "two"]);
        assert_eq!(ctx.job(4).cancelled_by, Some(2));

        std::fs::write(ctx.path("ready"), "").unwrap();
        slothqueue_snapshot!(ctx, "after_retry_root", ["retry", "2"]);
        assert!(ctx.job(3).is_waiting_on_parents());
        let out = ctx.run(&["run", "--load-file", load]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let mut order = lines(&ctx, "order");
        assert_eq!(order[..2], ["one", "two"]);
        order[2..].sort();
        assert_eq!(order[2..], ["four", "three"]);
        for id in 1..=4 {
            assert_eq!(ctx.job(id).state, JobState::Done, "job #{id}");
        }
    }

    fn cancelling_a_parent_takes_its_dependents_along_and_retry_brings_them_back(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "true", "--key", "a"]);
        ctx.ok(&["add", "true", "--after", "a"]);
        ctx.ok(&["add", "true", "--after", "2"]);
        assert_eq!(
            ctx.ok(&["cancel", "1"]),
            "cancelled job #1, and with it 2 jobs that waited on it: #2 (cancelled) and #3 (cancelled) (`slothqueue retry 1` brings them back)\n"
        );
        assert_eq!((ctx.job(3).state, ctx.job(3).cancelled_by), (JobState::Cancelled, Some(1)));
        assert_eq!(
            ctx.ok(&["retry", "1"]),
            "job #1 is pending again (attempts reset); back with it: 2 jobs it had cancelled, #2 (waiting) and #3 (waiting)\n"
        );
        ctx.ok(&["run", "--load-file", load]);
        assert_eq!(
            ctx.ok(&["add", "true", "--after", "a,3"]),
            "added job #4 (priority 0, max runtime 300s)\nafter key a (#1, done) and #3 (done): all done already\n"
        );
        assert!(ctx.job(4).is_due(slothqueue::Timestamp::from_millis(i64::MAX)));
    }

    fn an_unknown_parent_is_refused_and_writes_nothing(ctx) {
        ctx.ok(&["add", "true", "--key", "there"]);
        let before = ctx.ok(&["export"]);
        for (args, fragment) in [
            (&["add", "x", "--after", "99"][..], "cannot add the job: --after 99: no job #99"),
            (&["add", "x", "--after", "there,#99"][..], "no job #99"),
            (&["add", "x", "--after", "nope"][..], "no job holds the key `nope`"),
        ] {
            let out = ctx.run(args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(stderr.contains(fragment), "{args:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(out.stdout.is_empty());
            assert_eq!(ctx.ok(&["export"]), before, "{args:?} wrote something");
        }
    }

    fn a_thousand_lines_go_in_as_one_transaction(ctx) {
        std::fs::write(ctx.path("jobs.txt"), thousand_lines(None)).unwrap();
        let out = with_stdin(&ctx, &["add", "--stdin", "--queue", "batch"], "jobs.txt");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "added 1000 jobs (#1–#1000)\n");
        let status: serde_json::Value = serde_json::from_str(&ctx.ok(&["--json", "status"])).unwrap();
        assert_eq!(status["pending"], 1000);
        // Every line but the first and the plain ones waits on the line before.
        assert_eq!(status["waiting_on_parents"], 1000 - 1 - 100);
        let last = ctx.job(1000);
        assert_eq!(last.queue, "batch", "the flags are every line's defaults");
        assert_eq!(last.pending_parents, 1);
        let parent = ctx.job(last.after[0]);
        assert_eq!(parent.idempotency_key.as_deref(), Some("k899"));
    }

    fn a_bad_line_500_names_its_line_and_leaves_the_queue_empty(ctx) {
        for (bad, expected) in [
            ("{\"command\": \"true\", \"colour\": \"red\"}", "error: line 500: not a job (unknown field `colour`"),
            ("{\"command\": \"true\", \"after\": \"no-such-key\"}", "error: line 500: --after no-such-key: no job holds the key `no-such-key`; nothing was written"),
            ("{\"command\": \"true\", \"after\": 5000}", "error: line 500: --after 5000: no job #5000; nothing was written"),
        ] {
            std::fs::write(ctx.path("jobs.txt"), thousand_lines(Some(bad))).unwrap();
            let out = with_stdin(&ctx, &["add", "--stdin"], "jobs.txt");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{stderr}");
            assert!(stderr.starts_with(expected), "{stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(out.stdout.is_empty());
            if ctx.db.exists() {
                assert!(exported(&ctx).is_empty(), "line 500 let something in");
            }
        }
    }

    fn a_forward_reference_names_its_line(ctx) {
        std::fs::write(
            ctx.path("jobs.txt"),
            "make\n{\"command\": \"make test\", \"after\": [\"dist\"]}\n{\"command\": \"make dist\", \"key\": \"dist\"}\n",
        )
        .unwrap();
        stdin_snapshot(&ctx, "after_stdin_forward", &["add", "--stdin"], "jobs.txt");
        assert!(!ctx.db.exists(), "a refused batch is refused before the queue is opened");
    }

    fn stdin_lines_mix_commands_and_json(ctx) {
        ctx.ok(&["add", "echo setup", "--key", "setup"]);
        std::fs::write(
            ctx.path("jobs.txt"),
            "# build, then test and package\n\
             {\"command\": \"make\", \"key\": \"build\", \"priority\": 3}\n\
             \n\
             {\"command\": \"make test\", \"after\": [\"build\"], \"max_runtime\": \"none\"}\n\
             {\"kind\": \"upload\", \"payload\": {\"to\": \"s3\"}, \"after\": [\"build\", 1], \"delay\": \"5m\"}\n\
             echo plain\n",
        )
        .unwrap();
        stdin_snapshot(&ctx, "after_stdin_mixed", &["add", "--stdin", "--after", "setup"], "jobs.txt");
        let jobs = exported(&ctx);
        let after: Vec<&serde_json::Value> = jobs.iter().map(|j| &j["after"]).collect();
        assert_eq!(
            after,
            [&serde_json::Value::Null, &serde_json::json!([1]), &serde_json::json!([2]), &serde_json::json!([2, 1]), &serde_json::json!([1])],
            "--after is the default; a line's own `after` replaces it"
        );
        assert_eq!(jobs[2]["max_runtime"], serde_json::Value::Null);
        assert_eq!(jobs[3]["kind"], "upload");
        assert_eq!(jobs[4]["payload"]["command"], "echo plain");

        std::fs::write(ctx.path("two.txt"), "true\n{\"command\": \"false\", \"after\": 1}\n").unwrap();
        let out = with_stdin(&ctx, &["--json", "add", "--stdin"], "two.txt");
        assert!(out.status.success());
        let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let printed = printed.as_array().unwrap();
        assert_eq!(printed.len(), 2);
        assert_eq!((printed[0]["id"].as_i64(), printed[1]["after"].clone()), (Some(6), serde_json::json!([1])));
    }

    fn export_and_import_keep_the_edges(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "echo one >> order", "--key", "one"]);
        ctx.ok(&["add", "exit 3", "--after", "one", "--max-attempts", "1"]);
        ctx.ok(&["add", "echo three >> order", "--after", "2"]);
        ctx.ok(&["add", "echo four >> order", "--after", "one"]);
        let _ = ctx.run(&["run", "--once", "--load-file", load]);
        let dump = ctx.ok(&["export"]);

        let other = TestContext::new(ctx.backend);
        std::fs::write(other.path("dump.jsonl"), &dump).unwrap();
        other.ok(&["import", "dump.jsonl"]);
        assert_eq!(other.ok(&["export"]), dump, "the round trip changed a job");
        assert_eq!(other.job(3).after, [2]);
        assert_eq!(other.job(3).pending_parents, 1);
        let dependents = serde_json::from_str::<serde_json::Value>(&other.ok(&["--json", "show", "1"])).unwrap();
        assert_eq!(dependents["dependents"], serde_json::json!([2, 4]));

        let _ = other.run(&["run", "--load-file", other.calm_load()]);
        assert_eq!(other.job(3).cancelled_by, Some(2), "the imported edge still cancels");
        assert_eq!(other.job(4).state, JobState::Done);
    }

    fn an_import_refused_by_the_store_names_its_line(ctx) {
        ctx.ok(&["add", "true"]);
        ctx.ok(&["add", "true", "--after", "1"]);
        let dump = ctx.ok(&["export"]);
        let mut second: serde_json::Value = serde_json::from_str(dump.lines().nth(1).unwrap()).unwrap();
        // A parent after its dependent: the store's check, not import's.
        second["after"] = serde_json::json!([7]);
        let other = TestContext::new(ctx.backend);
        let first = dump.lines().next().unwrap();
        std::fs::write(other.path("dump.jsonl"), format!("{first}\n\n{second}\n")).unwrap();
        let out = other.run(&["import", "dump.jsonl"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.starts_with("error: line 3: cannot import (nothing was imported): "), "{stderr}");
        assert!(stderr.contains("parent #7"), "{stderr}");
        assert_eq!(other.ok(&["export"]), "", "nothing was imported");
    }

    fn a_chain_runs_in_order_with_four_runners_on_one_file(ctx) {
        let load = ctx.calm_load();
        // Each step logs its start and end; a step that started before its
        // parent ended, or two at once, shows in the log's order. Twenty
        // fillers keep all four runners busy, so the steps are taken by
        // whichever runner is free when their parent ends; their priorities
        // would start them first, with step 1, were it not for the edges.
        let step = |n: u32| format!("echo start-{n} >> steps; sleep 0.2; echo end-{n} >> steps");
        ctx.ok(&["add", &step(1), "--key", "step-1"]);
        for i in 0..20 {
            ctx.ok(&["add", &format!("sleep 0.1; echo filler-{i} >> fillers")]);
        }
        ctx.ok(&["add", &step(2), "--key", "step-2", "--after", "step-1", "--priority", "5"]);
        ctx.ok(&["add", &step(3), "--after", "step-2", "--priority", "9"]);
        let mut runners: Vec<_> = (0..4)
            .map(|_| ctx.spawn(&["run", "--load-file", load, "--cooldown", "0s"]))
            .collect();
        let mut done = 0;
        for r in &mut runners {
            let status = wait_child(r, std::time::Duration::from_secs(60));
            assert!(status.success(), "a runner failed: {}", stdout_of(r));
            done += stdout_of(r).matches(" done in ").count();
        }
        // The runners drain what is due and exit: the step that finished
        // last takes its child in the same transaction, so nothing is left.
        assert_eq!(done, 23, "every job ran exactly once");
        let steps = lines(&ctx, "steps");
        assert_eq!(steps, ["start-1", "end-1", "start-2", "end-2", "start-3", "end-3"]);
        assert_eq!(lines(&ctx, "fillers").len(), 20);
        for id in 1..=23 {
            assert_eq!(ctx.job(id).state, JobState::Done, "#{id}");
        }
    }

    fn a_supersede_with_waiting_jobs_is_refused_and_a_superseded_job_is_not_retried(ctx) {
        ctx.ok(&["add", "make convert", "--key", "convert"]);
        ctx.ok(&["add", "make publish", "--after", "convert"]);
        let before = ctx.ok(&["export"]);
        let out = ctx.run(&["add", "make convert --fast", "--key", "convert"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("#2 waits on it"), "{stderr}");
        assert!(stderr.contains("slothqueue edit 1"), "{stderr}");
        assert_eq!(ctx.ok(&["export"]), before, "the refused add wrote something");

        ctx.ok(&["cancel", "2"]);
        let added = ctx.ok(&["add", "make convert --fast", "--key", "convert"]);
        assert!(added.contains("superseded job #1"), "{added}");
        let out = ctx.run(&["retry", "1"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("superseded by #3"), "{stderr}");
        assert_eq!(ctx.job(1).state, JobState::Cancelled);
    }
}
