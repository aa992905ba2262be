//! Issue 31, findings 2 and 9: no secret leaves by default. direnv's
//! `DIRENV_DIFF` (and every tool's bookkeeping like it) is never recorded
//! unless named; a value holding a password (`DATABASE_URL`, a proxy's
//! `user:pass@`) is left out by `--env-all`, which says so, and masked by
//! every look when named: `show` (its environment and its trail), `list`,
//! `--json`; `export` keeps it and names it.

use std::process::Output;

use crate::both_backends;
use crate::support::{TestContext, succeeded};

/// What direnv packs into `DIRENV_DIFF`: base64 of zlib of JSON of the old
/// and new values of everything an `.envrc` exported. A marker stands for
/// it here: what matters is that it appears nowhere.
const DIFF: &str = "eJzUkE1vgkAQhv9KM2cPLCoFbk1MU9oeTJpeDTA7ws1-ZHeJIcb_3gVFQPXoxfvzzDszO4fGcsF0LVhMHGRwQmkCGV4Ky60PHWYoLIYkeCAq9f2y3KQ1RcQQGOYj4M1RjMvTBbC5_Ln__";
const DB: &str = "postgres://app:PASSWORD@db/app";
const PROXY: &str = "http://u:pr0xypass@proxy:3128";
const DSN: &str = "https://dsnkey123@o1.ingest.sentry.io/2";

/// `slothqueue ARGS` with `vars` added to the test's cleared environment.
fn with_env(ctx: &TestContext, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = ctx.command(args);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// The shell of a direnv user in a project whose `.envrc` exported secrets.
fn direnv_shell() -> Vec<(&'static str, &'static str)> {
    vec![
        ("DIRENV_DIFF", DIFF),
        ("DIRENV_WATCHES", "eJyszkFqwzAQheG7zNoHSJFOwatchesblob"),
        ("DIRENV_DIR", "-/home/ana/app"),
        ("DIRENV_FILE", "/home/ana/app/.envrc"),
        ("__MISE_DIFF", "eAFrYWBmisediffblob"),
        ("VIRTUAL_ENV", "/home/ana/app/.venv"),
        ("DATABASE_URL", DB),
        ("https_proxy", PROXY),
        ("SENTRY_DSN", DSN),
        ("EDITOR", "vi"),
    ]
}

/// The secret values of this file, none of which may appear in `text`.
fn assert_clean(route: &str, text: &str) {
    for secret in [DIFF, "watchesblob", "misediffblob", "PASSWORD", "pr0xypass", "dsnkey123"] {
        assert!(!text.contains(secret), "{route} shows {secret}: {text}");
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

both_backends! {
    fn direnv_bookkeeping_is_not_recorded_by_add_nor_by_env_all(ctx) {
        let shell = direnv_shell();
        succeeded(&["add"], with_env(&ctx, &shell, &["add", "make"]));
        let env = ctx.job(1).payload["env"].clone();
        assert_eq!(env["VIRTUAL_ENV"], "/home/ana/app/.venv", "{env}");
        assert_clean("the stored payload", &env.to_string());
        assert!(env.as_object().unwrap().keys().all(|k| !k.starts_with("DIRENV_")), "{env}");

        let out = with_env(&ctx, &shell, &["add", "make", "--env-all"]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let env = ctx.job(2).payload["env"].clone();
        assert_eq!(env["EDITOR"], "vi", "{env}");
        assert_clean("--env-all's payload", &env.to_string());
        let recorded = env.as_object().unwrap().len();
        assert_eq!(
            stderr,
            format!(
                "--env-all recorded {recorded} variables and left out DATABASE_URL, SENTRY_DSN, https_proxy (values holding a password); DIRENV_DIFF, DIRENV_DIR, DIRENV_FILE, DIRENV_WATCHES, __MISE_DIFF (other tools' bookkeeping, which packs their values); --env-pass NAME records one\n"
            ),
        );
    }

    fn show_masks_a_named_secret(ctx) {
        named_secrets(&ctx);
        let show = ctx.ok(&["show", "1"]);
        assert_clean("show", &show);
        assert!(show.contains("\n  DATABASE_URL=postgres://app:<secret>@db/app\n"), "{show}");
        assert!(show.contains("\n  https_proxy=http://u:<secret>@proxy:3128\n"), "{show}");
        assert!(show.contains("\n  SENTRY_DSN=https://<secret>@o1.ingest.sentry.io/2\n"), "{show}");
        assert!(show.contains("\n  DIRENV_DIFF=<secret>\n"), "{show}");
        assert!(show.contains("\n  REDIS_URL=redis://:<secret>@cache:6379/0\n"), "{show}");
        let asked = ctx.ok(&["show", "1", "--show-secrets"]);
        assert!(asked.contains(&format!("\n  DATABASE_URL={DB}\n")), "{asked}");
    }

    fn list_masks_a_named_secret(ctx) {
        named_secrets(&ctx);
        assert_clean("list", &ctx.ok(&["list"]));
        let list = ctx.ok(&["--json", "list"]);
        assert_clean("--json list", &list);
        assert_eq!(json(&list)[0]["payload"]["env"]["https_proxy"], "http://u:<secret>@proxy:3128");
    }

    fn json_masks_a_named_secret(ctx) {
        named_secrets(&ctx);
        let shown = ctx.ok(&["--json", "show", "1"]);
        assert_clean("--json show", &shown);
        assert_eq!(json(&shown)["payload"]["env"]["DATABASE_URL"], "postgres://app:<secret>@db/app");
        assert_clean("--json hold", &ctx.ok(&["--json", "hold", "1"]));
        let vars = [("DATABASE_URL", DB)];
        let added = with_env(&ctx, &vars, &["--json", "add", "x", "--env-pass", "DATABASE_URL"]);
        assert_clean("add --json", &succeeded(&["add"], added));
    }

    // The trail names what an edit changed, never a value: this held
    // before issue 31 too, and keeps holding.
    fn the_trail_carries_no_value(ctx) {
        named_secrets(&ctx);
        let shown = json(&ctx.ok(&["--json", "show", "1"]));
        let events = shown["events"].as_array().unwrap();
        assert_eq!(events.len(), 2, "{shown}");
        assert_clean("the trail", &serde_json::Value::Array(events.clone()).to_string());
    }

    fn export_keeps_a_named_secret_and_names_it(ctx) {
        named_secrets(&ctx);
        let export = ctx.ok(&["export"]);
        let line = json(export.lines().next().unwrap());
        assert_eq!(line["payload"]["env"]["DATABASE_URL"], DB, "an export restores the queue");
        assert_eq!(line["payload"]["env"]["DIRENV_DIFF"], DIFF);
        assert_eq!(
            line["secrets"],
            serde_json::json!(["DATABASE_URL", "DIRENV_DIFF", "REDIS_URL", "SENTRY_DSN", "https_proxy"])
        );
    }
}

/// Job 1, holding secrets because they were named (`--env-pass`, `-e`,
/// an edit's `-e`): stored as given, the job needs them.
fn named_secrets(ctx: &TestContext) {
    let shell = direnv_shell();
    let sentry = format!("SENTRY_DSN={DSN}");
    let args = [
        "add",
        "deploy",
        "--env-pass",
        "DATABASE_URL",
        "--env-pass",
        "https_proxy",
        "--env-pass",
        "DIRENV_DIFF",
        "-e",
        &sentry,
    ];
    succeeded(&args, with_env(ctx, &shell, &args));
    ctx.ok(&["edit", "1", "-e", "REDIS_URL=redis://:PASSWORD@cache:6379/0"]);
    let env = ctx.job(1).payload["env"].clone();
    assert_eq!((&env["DATABASE_URL"], &env["DIRENV_DIFF"]), (&DB.into(), &DIFF.into()), "{env}");
}

/// Issue 31 item 10c: a password in `--db` is in every local user's `ps`:
/// one warning line says so and where else to put it; the same URL from
/// `SLOTHQUEUE_DB` (not in `ps`) draws none, nor does one without a
/// password.
#[cfg(feature = "postgres")]
#[test]
fn a_password_on_the_command_line_draws_one_warning() {
    let ctx = TestContext::new(crate::support::Backend::Sqlite);
    // Nothing listens on port 1: the command fails fast after the warning.
    let url = "postgres://jobs:hunter2@127.0.0.1:1/jobs";
    let warned = |out: &Output| {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("hunter2"), "{stderr}");
        stderr.lines().filter(|l| l.starts_with("warning: the password in --db")).count()
    };
    let out = ctx.bare_command().args(["--db", url, "status"]).output().unwrap();
    assert_eq!(warned(&out), 1, "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("PGPASSFILE") && stderr.contains("PGPASSWORD"), "{stderr}");
    let out = ctx.bare_command().arg(format!("--db={url}")).arg("status").output().unwrap();
    assert_eq!(warned(&out), 1, "{out:?}");
    let out = ctx.bare_command().env("SLOTHQUEUE_DB", url).arg("status").output().unwrap();
    assert_eq!(warned(&out), 0, "{out:?}");
    let out = ctx
        .bare_command()
        .args(["--db", "postgres://jobs@127.0.0.1:1/jobs", "status"])
        .output()
        .unwrap();
    assert_eq!(warned(&out), 0, "{out:?}");
}
