//! The environment `add` records (issue #17): the allowlist of the adding
//! shell, what `--env-pass`/`--env-all` add, a job that runs with exactly
//! that under a runner started with almost nothing, secrets masked by every
//! look unless asked, kept and marked by `export`, and round-tripped by
//! `import`.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Output;

use crate::both_backends;
use crate::support::{TestContext, succeeded};

/// `slothqueue ARGS` with `vars` added to the test's cleared environment.
fn with_env(ctx: &TestContext, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = ctx.command(args);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn ok_with_env(ctx: &TestContext, vars: &[(&str, &str)], args: &[&str]) -> String {
    succeeded(args, with_env(ctx, vars, args))
}

/// A fake activated virtualenv: `DIR/venv/bin/python`, a script that says
/// which python it is, which `VIRTUAL_ENV` it sees, and whether a runner's
/// own variable `LEAK` reached it. Returns the venv's path.
fn fake_venv(ctx: &TestContext) -> String {
    let bin = ctx.path("venv/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let python = bin.join("python");
    std::fs::write(
        &python,
        "#!/bin/sh\necho \"venv python, VIRTUAL_ENV=$VIRTUAL_ENV, LEAK=${LEAK:-unset}\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    ctx.path("venv").to_str().unwrap().to_owned()
}

/// The runner with a nearly empty environment, as a systemd unit or cron
/// would start it: no venv on its PATH, and one variable of its own.
fn clean_run(ctx: &TestContext) {
    let load = ctx.calm_load();
    let out = ctx
        .command(&["run", "--load-file", load])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LEAK", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "run failed: {}", String::from_utf8_lossy(&out.stderr));
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

both_backends! {
    fn a_job_runs_the_python_of_the_virtualenv_it_was_added_in(ctx) {
        let venv = fake_venv(&ctx);
        let path = format!("{venv}/bin:/usr/bin:/bin");
        ok_with_env(&ctx, &[("VIRTUAL_ENV", &venv), ("PATH", &path)], &["add", "python"]);
        clean_run(&ctx);
        let log = ctx.ok(&["logs", "1"]);
        assert!(log.contains(&format!("venv python, VIRTUAL_ENV={venv},")), "{log}");
        assert_eq!(ctx.job(1).state, slothqueue::JobState::Done);
    }

    fn the_payload_holds_the_allowlist_and_what_was_named(ctx) {
        let vars = [("VIRTUAL_ENV", "/venv"), ("MY_TOKEN", "s3cret"), ("EDITOR", "vi"), ("LC_ALL", "C")];
        ok_with_env(&ctx, &vars, &["add", "make"]);
        let env = &ctx.job(1).payload["env"];
        assert_eq!(env["VIRTUAL_ENV"], "/venv");
        assert_eq!(env["LC_ALL"], "C");
        assert!(env["PATH"].is_string(), "{env}");
        assert!(env.get("MY_TOKEN").is_none() && env.get("EDITOR").is_none(), "{env}");
        assert_eq!(ctx.job(1).payload["env_mode"], "exact");

        ok_with_env(&ctx, &vars, &["add", "make", "--env-pass", "MY_TOKEN", "-e", "LC_ALL=fr_FR.UTF-8"]);
        let env = &ctx.job(2).payload["env"];
        assert_eq!(env["MY_TOKEN"], "s3cret");
        assert_eq!(env["LC_ALL"], "fr_FR.UTF-8", "-e wins over what was recorded");

        let out = with_env(&ctx, &vars, &["add", "make", "--env-pass", "NOT_SET"]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--env-pass NOT_SET: NOT_SET is not set"), "{stderr}");
        assert!(ctx.run(&["show", "3"]).status.code() == Some(3), "nothing was added");

        let out = with_env(&ctx, &vars, &["add", "make", "--env-all"]);
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let recorded = ctx.job(3).payload["env"].as_object().map_or(0, |e| e.len());
        assert_eq!(stderr, format!("--env-all recorded {recorded} variables and left out MY_TOKEN (names that look secret); --env-pass NAME records one\n"));
        let env = &ctx.job(3).payload["env"];
        assert_eq!(env["EDITOR"], "vi");
        assert!(env.get("MY_TOKEN").is_none());
    }

    fn every_look_masks_secrets_unless_asked_and_export_keeps_them(ctx) {
        let vars = [("MY_TOKEN", "s3cret")];
        ok_with_env(&ctx, &vars, &["add", "make", "--env-pass", "MY_TOKEN", "--nice", "5", "--memory-max", "50M"]);
        ok_with_env(&ctx, &vars, &["add", "make"]);

        let show = ctx.ok(&["show", "1"]);
        assert!(show.contains("env (exactly, plus SLOTHQUEUE_*):\n"), "{show}");
        assert!(show.contains("\n  MY_TOKEN=<secret>\n"), "{show}");
        assert!(!show.contains("s3cret"), "{show}");
        assert!(show.contains("\nlimits:       asked: nice 5, memory-max 50 MiB\n"), "{show}");
        assert!(ctx.ok(&["show", "1", "--show-secrets"]).contains("\n  MY_TOKEN=s3cret\n"));
        assert!(ctx.ok(&["show", "2"]).contains("\nlimits:       the runner's defaults\n"));

        assert_eq!(json(&ctx.ok(&["--json", "show", "1"]))["payload"]["env"]["MY_TOKEN"], "<secret>");
        assert_eq!(json(&ctx.ok(&["--json", "show", "1", "--show-secrets"]))["payload"]["env"]["MY_TOKEN"], "s3cret");
        let list = json(&ctx.ok(&["--json", "list"]));
        assert_eq!(list[1]["payload"]["env"]["MY_TOKEN"], "<secret>");
        let list = json(&ctx.ok(&["--json", "list", "--show-secrets"]));
        assert_eq!(list[1]["payload"]["env"]["MY_TOKEN"], "s3cret");
        let cancelled = json(&ctx.ok(&["--json", "cancel", "1"]));
        assert_eq!(cancelled["payload"]["env"]["MY_TOKEN"], "<secret>", "job_json masks by default");

        let export = ctx.ok(&["export"]);
        let lines: Vec<serde_json::Value> = export.lines().map(json).collect();
        assert_eq!(lines[0]["payload"]["env"]["MY_TOKEN"], "s3cret", "an export restores the queue");
        assert_eq!(lines[0]["secrets"], serde_json::json!(["MY_TOKEN"]));
        assert!(lines[1].get("secrets").is_none(), "{}", lines[1]);

        let other = TestContext::new(ctx.backend);
        std::fs::write(other.path("dump.jsonl"), &export).unwrap();
        other.ok(&["import", "dump.jsonl"]);
        assert_eq!(other.job(1).payload, ctx.job(1).payload);
        assert_eq!(other.ok(&["export"]), export, "export → import → export is lossless");
    }

    fn a_batch_is_recorded_once_and_a_line_sets_its_own_limits(ctx) {
        let mut child = ctx
            .command(&["add", "--stdin", "--nice", "3"])
            .env("VIRTUAL_ENV", "/venv")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write as _;
            let mut stdin = child.stdin.take().unwrap();
            stdin
                .write_all(b"make\n{\"command\": \"test\", \"env\": {\"A\": \"1\"}, \"limits\": {\"memory_max\": \"1G\"}}\n")
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let (one, two) = (ctx.job(1).payload, ctx.job(2).payload);
        assert_eq!(one["env"]["VIRTUAL_ENV"], "/venv");
        assert_eq!((&two["env"]["VIRTUAL_ENV"], &two["env"]["A"]), (&"/venv".into(), &"1".into()));
        assert_eq!(one["limits"], serde_json::json!({"nice": 3}));
        assert_eq!(two["limits"], serde_json::json!({"memory_max": 1u64 << 30}), "a line's limits replace the flags'");
    }
}

/// The runner's own environment stays out of a job `add` recorded. This
/// needs the runner to honour `"env_mode": "exact"` (helper LIMITS's
/// `runner/src/exec.rs`, branch f17-limits): on a branch without it the
/// job still inherits the runner's variables under its own, and this test
/// fails with `LEAK=1` in the log.
#[cfg(feature = "sqlite")]
#[test]
fn a_recorded_job_sees_none_of_the_runners_own_variables() {
    let ctx = TestContext::new(crate::support::Backend::Sqlite);
    let venv = fake_venv(&ctx);
    let path = format!("{venv}/bin:/usr/bin:/bin");
    ok_with_env(&ctx, &[("VIRTUAL_ENV", &venv), ("PATH", &path)], &["add", "python"]);
    clean_run(&ctx);
    let log = ctx.ok(&["logs", "1"]);
    assert!(
        log.contains("LEAK=unset"),
        "the runner's LEAK reached an exact job (is the exact-environment runner merged?): {log}"
    );
}
