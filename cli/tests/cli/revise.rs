//! `edit` and `clone` from the command line (issue #17): a typo fixed
//! before the job runs, a failed job run again with a fixed command, and
//! an edit refused because a runner took the job first. Real processes on
//! both backends; a job is made running by claiming it through the
//! library, so nothing waits on a clock.

use std::sync::Arc;

use slothqueue::core::{ClaimRequest, ClockOnly};
use slothqueue::{Clock as _, EventKind, JobId, JobState, Owner, SystemClock};

use crate::both_backends;
use crate::support::{TestContext, block_on};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The job and its trail as JSON, to show a refused command changed nothing.
fn snapshot(ctx: &TestContext, id: JobId) -> String {
    serde_json::to_string(&(ctx.job(id), ctx.store_events(id))).unwrap()
}

both_backends! {
    fn edit_fixes_a_typo_and_the_job_runs_the_fixed_command(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "ehco fixed > out.txt", "-p", "1"]);
        let said = ctx.ok(&["edit", "1", "--command", "echo fixed > out.txt", "-p", "7"]);
        assert_eq!(said, "edited job #1: command, priority\n");
        let job = ctx.job(1);
        assert_eq!((job.command(), job.priority), (Some("echo fixed > out.txt"), 7));
        let out = ctx.run(&["run", "--once", "--load-file", load]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(ctx.job(1).state, JobState::Done);
        assert_eq!(std::fs::read_to_string(ctx.path("out.txt")).unwrap(), "fixed\n");
        let kinds: Vec<EventKind> = ctx.store_events(1).iter().map(|e| e.kind).collect();
        assert_eq!(kinds[..2], [EventKind::Pushed, EventKind::Edited]);
        let show = ctx.ok(&["show", "1"]);
        assert!(show.contains("changed command, priority"), "{show}");
    }

    fn clone_runs_a_failed_job_again_with_a_fixed_command(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "exit 3", "--max-attempts", "1", "--key", "nightly"]);
        let out = ctx.run(&["run", "--once", "--load-file", load]);
        assert_eq!(out.status.code(), Some(1), "the attempt failed: {}", stderr(&out));
        assert_eq!(ctx.job(1).state, JobState::Failed);

        let said = ctx.ok(&["clone", "1", "--command", "echo ok > ok.txt"]);
        assert_eq!(said, "cloned job #1 as #2\n");
        let clone = ctx.job(2);
        assert_eq!((clone.state, clone.attempts, clone.idempotency_key), (JobState::Pending, 0, None));
        let out = ctx.run(&["run", "--once", "--load-file", load]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(ctx.job(2).state, JobState::Done);
        assert_eq!(ctx.job(1).state, JobState::Failed, "the original stays as it ended");
        assert_eq!(std::fs::read_to_string(ctx.path("ok.txt")).unwrap(), "ok\n");
        let original = ctx.ok(&["show", "1"]);
        assert!(original.contains("cloned as #2"), "{original}");
        let copy = ctx.ok(&["show", "2"]);
        assert!(copy.contains("cloned from #1"), "{copy}");
    }

    fn edit_of_a_running_job_exits_4_and_changes_nothing(ctx) {
        ctx.ok(&["add", "sleep 30"]);
        let store = ctx.store();
        let request = ClaimRequest::new(Owner::named("elsewhere"), Arc::new(ClockOnly));
        let claimed = block_on(store.claim(&request, SystemClock.now())).unwrap();
        assert_eq!(claimed.map(|c| c.job.id), Some(1));
        drop(store);
        let before = snapshot(&ctx, 1);
        let out = ctx.run(&["edit", "1", "--command", "sleep 1", "-p", "5"]);
        assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
        assert_eq!(
            stderr(&out),
            "error: cannot edit job #1: it is running (edit changes only pending or held jobs; nothing was changed)\n"
        );
        assert!(out.stdout.is_empty());
        assert_eq!(snapshot(&ctx, 1), before, "nothing was changed");
    }

    fn edit_and_clone_refuse_bad_input_and_say_why(ctx) {
        ctx.ok(&["add", "true"]);
        let before = snapshot(&ctx, 1);
        let nothing = ctx.run(&["edit", "1"]);
        assert_eq!(nothing.status.code(), Some(2), "{}", stderr(&nothing));
        assert!(stderr(&nothing).contains("nothing to change"), "{}", stderr(&nothing));
        let unset = ctx.run(&["edit", "1", "--env-pass", "MY_TOKEN"]);
        assert_eq!(unset.status.code(), Some(2));
        assert!(stderr(&unset).contains("MY_TOKEN is not set"), "{}", stderr(&unset));
        let empty = ctx.run(&["edit", "1", "--command", ""]);
        assert_eq!(empty.status.code(), Some(2), "{}", stderr(&empty));
        assert_eq!(snapshot(&ctx, 1), before, "nothing was changed");
        let missing = ctx.run(&["clone", "9"]);
        assert_eq!(missing.status.code(), Some(3), "{}", stderr(&missing));
        assert_eq!(ctx.store_events(1).len(), before_events(&before));
    }

    fn env_pass_takes_the_value_from_the_editing_shell(ctx) {
        ctx.ok(&["add", "true"]);
        let out = ctx
            .command(&["--json", "edit", "1", "--env-pass", "MY_TOKEN", "-e", "CI=1", "--nice", "5"])
            .env("MY_TOKEN", "s3cret")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["id"], 1);
        let job = ctx.job(1);
        assert_eq!(job.payload["env"]["MY_TOKEN"], "s3cret");
        assert_eq!(job.payload["env"]["CI"], "1");
        assert_eq!(job.payload["limits"]["nice"], 5);

        let out = ctx.run(&["--json", "clone", "1", "-q", "other", "--delay", "1h"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((json["id"].as_u64(), json["queue"].as_str()), (Some(2), Some("other")));
        let clone = ctx.job(2);
        assert!(clone.not_before > SystemClock.now(), "due in an hour");
        assert_eq!(clone.payload["env"]["MY_TOKEN"], "s3cret", "a clone keeps the env");
    }
}

/// How many events the trail in a [`snapshot`] had.
fn before_events(snapshot: &str) -> usize {
    let v: serde_json::Value = serde_json::from_str(snapshot).unwrap();
    v[1].as_array().unwrap().len()
}
