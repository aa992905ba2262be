//! `import` restores data, never live authority (the hardening issue,
//! point 3): a job exported while running comes back pending with an event
//! saying so, and a file that clashes anywhere writes nothing.

use std::time::Duration;

use rustix::process::Signal;
use slothqueue::JobState;

use crate::both_backends;
use crate::support::{TestContext, signal, wait_child, wait_for};

fn lines_of(export: &str) -> Vec<serde_json::Value> {
    export.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn write_lines(ctx: &TestContext, name: &str, lines: &[serde_json::Value]) -> String {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let path = ctx.path(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Two jobs: #1 with key `k1`, #2 without.
fn two_jobs(ctx: &TestContext) -> Vec<serde_json::Value> {
    ctx.ok(&["add", "echo one", "--key", "k1"]);
    ctx.ok(&["add", "echo two"]);
    lines_of(&ctx.ok(&["export"]))
}

fn refused_untouched(ctx: &TestContext, file: &str, fragment: &str) {
    let before = ctx.ok(&["export"]);
    let out = ctx.run(&["import", file]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(fragment), "expected `{fragment}` in: {stderr}");
    assert_eq!(ctx.ok(&["export"]), before, "the import wrote something");
}

both_backends! {
    fn an_imported_running_job_comes_back_pending(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "sleep 30"]);
        let mut runner = ctx.spawn(&["run", "--load-file", load]);
        wait_for("the job to run", Duration::from_secs(60), || ctx.job(1).state == JobState::Running);
        let dump = ctx.ok(&["export"]);
        signal(runner.id(), Signal::TERM);
        wait_child(&mut runner, Duration::from_secs(60));
        let running = lines_of(&dump);
        assert_eq!(running[0]["state"], "running");
        assert!(running[0]["lease"].is_object());

        let other = TestContext::new(ctx.backend);
        let file = write_lines(&other, "dump.jsonl", &running);
        other.ok(&["import", &file]);
        let job = other.job(1);
        assert_eq!(job.state, JobState::Pending);
        assert!(job.lease.is_none(), "a lease was restored as live: {:?}", job.lease);
        let show = lines_of(&other.ok(&["--json", "show", "1"]));
        let events = show[0]["events"].as_array().unwrap();
        let last = events.last().unwrap();
        assert_eq!(last["kind"], "reclaimed");
        assert_eq!(last["message"], "imported while running: back to pending");
        assert_eq!(slothqueue::core::machine::replay(&other.store_events(1)), Some(JobState::Pending));
    }

    fn a_clashing_import_writes_nothing(ctx) {
        let source = TestContext::new(ctx.backend);
        let jobs = two_jobs(&source);
        // Ids 11 and 12, free in ctx's queue, but 12 twice.
        let renumber = |job: &serde_json::Value, id: i64| {
            let mut j = job.clone();
            j["id"] = id.into();
            for e in j["events"].as_array_mut().unwrap() {
                e["job_id"] = id.into();
            }
            j
        };
        ctx.ok(&["add", "echo mine", "--key", "mine"]);
        let twice = write_lines(&ctx, "twice.jsonl", &[renumber(&jobs[0], 11), renumber(&jobs[1], 12), renumber(&jobs[1], 12)]);
        refused_untouched(&ctx, &twice, "line 3: job #12 is also on line 2");
        let mut keyed = renumber(&jobs[1], 12);
        keyed["idempotency_key"] = "k1".into();
        let same_key = write_lines(&ctx, "key.jsonl", &[renumber(&jobs[0], 11), keyed.clone()]);
        refused_untouched(&ctx, &same_key, "line 2: idempotency key `k1` is also on line 1");
        keyed["idempotency_key"] = "mine".into();
        let held = write_lines(&ctx, "held.jsonl", &[renumber(&jobs[0], 11), keyed]);
        refused_untouched(&ctx, &held, "line 2: cannot import (nothing was imported): job #12: idempotency key `mine` is already held by job #1");
        let taken = write_lines(&ctx, "taken.jsonl", &[renumber(&jobs[0], 11), renumber(&jobs[1], 1)]);
        refused_untouched(&ctx, &taken, "line 2: cannot import (nothing was imported): job #1 already exists");
        let mut long = renumber(&jobs[1], 12);
        long["payload"]["command"] = "a".repeat(131_072).into();
        let long = write_lines(&ctx, "long.jsonl", &[renumber(&jobs[0], 11), long]);
        refused_untouched(&ctx, &long, "Linux passes at most 131071 bytes as one argument");
        let mut env = renumber(&jobs[1], 12);
        env["payload"]["env"] = serde_json::json!({ "A=B": "x" });
        let env = write_lines(&ctx, "env.jsonl", &[renumber(&jobs[0], 11), env]);
        refused_untouched(&ctx, &env, "env name `A=B` must be non-empty, without `=` or NUL");
        // `add` and HTTP refuse a relative `cwd` (where would it run?); so does import.
        let mut relative = renumber(&jobs[1], 12);
        relative["payload"]["cwd"] = "build/out".into();
        let relative = write_lines(&ctx, "relative.jsonl", &[renumber(&jobs[0], 11), relative]);
        refused_untouched(&ctx, &relative, "line 2: job #12: invalid job: the `cwd` `build/out` is not an absolute path");
        let good = write_lines(&ctx, "good.jsonl", &[renumber(&jobs[0], 11), renumber(&jobs[1], 12)]);
        ctx.ok(&["import", &good]);
        assert_eq!(ctx.job(12).payload["command"], "echo two");
    }

    fn an_export_filtered_of_a_parent_is_refused_naming_the_line(ctx) {
        let source = TestContext::new(ctx.backend);
        source.ok(&["add", "make", "--queue", "build"]);
        source.ok(&["add", "make test", "--after", "1"]);
        let mut lines = lines_of(&source.ok(&["export"]));
        lines.retain(|l| l["queue"] != "build");
        let file = write_lines(&ctx, "filtered.jsonl", &lines);
        refused_untouched(&ctx, &file, "line 1: cannot import");
        let out = ctx.run(&["import", &file]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("job #1, which is in neither the file nor the queue"), "{stderr}");

        let mut trusting = lines_of(&source.ok(&["export"]));
        trusting[1]["pending_parents"] = 0.into();
        let file = write_lines(&ctx, "trusting.jsonl", &trusting);
        ctx.ok(&["import", &file]);
        assert_eq!(ctx.job(2).pending_parents, 1, "recomputed, not the file's 0");
    }
}
