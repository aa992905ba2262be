//! The human output of every command, snapshotted. Both backends share
//! each snapshot, so they must print exactly the same words.

use crate::support::{Backend, TestContext, format_output};
use crate::{both_backends, slothqueue_snapshot};

/// [`crate::support::json_snapshot`] with the central filters only.
fn json_snapshot(ctx: &TestContext, name: &str, args: &[&str]) {
    crate::support::json_snapshot(ctx, name, args, &[]);
}

#[test]
fn help_lists_the_commands_and_the_exit_codes() {
    let ctx = TestContext::new(Backend::Sqlite);
    slothqueue_snapshot!(ctx, "help", ["--help"]);
    slothqueue_snapshot!(ctx, "add_help", ["add", "--help"]);
    slothqueue_snapshot!(ctx, "every_help", ["every", "--help"]);
}

#[test]
fn completions_are_generated_for_every_shell() {
    let ctx = TestContext::new(Backend::Sqlite);
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = ctx.ok(&["completions", shell]);
        assert!(out.contains("slothqueue"), "{shell}");
    }
    assert!(!ctx.db.exists(), "completions must not create a queue");
}

both_backends! {
    fn the_seed_story(ctx) {
        let load = ctx.calm_load();
        slothqueue_snapshot!(ctx, "add_seed_1", ["add", "sleep 5", "--priority", "9", "--max-runtime", "2", "--max-attempts", "1"]);
        slothqueue_snapshot!(ctx, "add_seed_2", ["add", "echo \"rebuilt search index: 412 documents\"", "--priority", "5"]);
        slothqueue_snapshot!(ctx, "add_seed_3", ["add", "exit 3", "--priority", "1", "--max-attempts", "1"]);
        slothqueue_snapshot!(ctx, "status_before_run", ["status"]);
        slothqueue_snapshot!(ctx, "run_seed", ["run", "--load-file", load]);
        slothqueue_snapshot!(ctx, "status_after_run", ["status"]);
        slothqueue_snapshot!(ctx, "list_after_run", ["list"]);
        slothqueue_snapshot!(ctx, "list_failed", ["list", "--state", "failed"]);
        slothqueue_snapshot!(ctx, "list_cancelled_none", ["list", "--state", "cancelled"]);
        slothqueue_snapshot!(ctx, "show_done", ["show", "2"]);
        slothqueue_snapshot!(ctx, "show_timeout", ["show", "#1"]);
        slothqueue_snapshot!(ctx, "logs_done", ["logs", "2"]);
        slothqueue_snapshot!(ctx, "retry", ["retry", "3"]);
        slothqueue_snapshot!(ctx, "show_retried", ["show", "3"]);
        slothqueue_snapshot!(ctx, "cancel_pending", ["cancel", "3"]);
        slothqueue_snapshot!(ctx, "cancel_done", ["cancel", "2"]);
        slothqueue_snapshot!(ctx, "clear", ["clear"]);
        slothqueue_snapshot!(ctx, "list_after_clear", ["list"]);
    }

    fn a_missing_queue_is_reported_not_created(ctx) {
        slothqueue_snapshot!(ctx, "status_missing", ["status"]);
        slothqueue_snapshot!(ctx, "list_missing", ["list"]);
        slothqueue_snapshot!(ctx, "show_missing", ["show", "1"]);
        slothqueue_snapshot!(ctx, "logs_missing", ["logs", "1"]);
        slothqueue_snapshot!(ctx, "export_missing", ["export"]);
        slothqueue_snapshot!(ctx, "cancel_missing", ["cancel", "1"]);
        slothqueue_snapshot!(ctx, "clear_missing", ["clear"]);
        assert!(!ctx.db.exists());
        assert_eq!(std::fs::read_dir(ctx.dir.path()).unwrap().count(), 0, "nothing was created");
    }

    fn delays_handlers_keys_and_order(ctx) {
        slothqueue_snapshot!(ctx, "add_delayed", ["add", "make backup", "--delay", "5m"]);
        slothqueue_snapshot!(ctx, "show_delayed", ["show", "1"]);
        slothqueue_snapshot!(ctx, "add_handler", ["add", "--kind", "resize", "--payload", r#"{"width": 640}"#, "--queue", "images", "--priority", "-2"]);
        slothqueue_snapshot!(ctx, "add_at", ["add", "true", "--at", "2099-01-02T03:04:05Z", "--max-runtime", "none"]);
        slothqueue_snapshot!(ctx, "add_key", ["add", "make docs", "--key", "docs"]);
        slothqueue_snapshot!(ctx, "add_key_again", ["add", "make docs", "--key", "docs"]);
        slothqueue_snapshot!(ctx, "add_key_newer", ["add", "make docs --full", "--key", "docs", "--priority", "3"]);
        slothqueue_snapshot!(ctx, "list_due_order", ["list", "--order", "due"]);
        slothqueue_snapshot!(ctx, "list_queue", ["list", "--queue", "images"]);
        slothqueue_snapshot!(ctx, "list_limit", ["list", "--limit", "2"]);
        slothqueue_snapshot!(ctx, "show_pending_no_runner", ["show", "5"]);
        slothqueue_snapshot!(ctx, "show_superseded", ["show", "4"]);
        slothqueue_snapshot!(ctx, "clear_all", ["clear", "--all"]);
    }

    fn json_output_uses_the_job_table_names(ctx) {
        let load = ctx.calm_load();
        json_snapshot(&ctx, "add_json", &["add", "echo hi", "--priority", "2", "--json"]);
        ctx.ok(&["run", "--load-file", load]);
        json_snapshot(&ctx, "show_json", &["show", "1", "--json"]);
        json_snapshot(&ctx, "list_json", &["--json", "list"]);
        json_snapshot(&ctx, "status_json", &["status", "--json"]);
    }

    fn a_narrow_terminal_truncates_the_command(ctx) {
        ctx.ok(&["add", "echo this command is far too long to fit in a narrow terminal window"]);
        let args = ["list"];
        let out = ctx.command(&args).env("COLUMNS", "60").output().unwrap();
        let text = format_output(&args, &out);
        let mut settings = insta::Settings::clone_current();
        settings.set_prepend_module_to_snapshot(false);
        settings.set_omit_expression(true);
        for (re, rep) in ctx.filters() {
            settings.add_filter(&re, rep);
        }
        settings.bind(|| insta::assert_snapshot!("list_narrow", text));
        let widest = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.chars().count()).max();
        assert!(widest.unwrap() <= 60, "{widest:?}");
    }

    fn export_then_import(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "echo one"]);
        ctx.ok(&["add", "exit 4", "--max-attempts", "1"]);
        ctx.ok(&["add", "echo later", "--delay", "1h"]);
        let _ = ctx.run(&["run", "--load-file", load]);
        let exported = slothqueue_snapshot!(ctx, "export", ["export"]);
        // Into a fresh queue of the other backend where the build has it.
        let other = match ctx.backend {
            Backend::Sqlite if cfg!(feature = "redb") => Backend::Redb,
            Backend::Redb if cfg!(feature = "sqlite") => Backend::Sqlite,
            same => same,
        };
        let target = TestContext::new(other);
        std::fs::write(target.path("dump.jsonl"), &exported.stdout).unwrap();
        slothqueue_snapshot!(target, "import", ["import", "dump.jsonl"]);
        let again = target.ok(&["export"]);
        assert_eq!(again.as_bytes(), exported.stdout.as_slice(), "export → import → export is lossless");
        slothqueue_snapshot!(target, "import_again_refused", ["import", "dump.jsonl"]);
        // New jobs get ids above the imported ones.
        assert!(target.ok(&["add", "true"]).starts_with("added job #4 "));
    }
}
