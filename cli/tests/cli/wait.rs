//! `slothqueue wait` as a separate process: each exit code, its lines and
//! its JSON, and a wait released by a `run` in another process.

use std::time::Duration;

use crate::both_backends;
use crate::support::{TestContext, stdout_of, wait_child, wait_for};

/// How long any process here may take; slow is fine, hanging is not.
const DEADLINE: Duration = Duration::from_secs(60);

fn code(ctx: &TestContext, args: &[&str]) -> (Option<i32>, String, String) {
    let out = ctx.run(args);
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Whether process `pid` holds an inotify instance: `QueueWatch` made
/// its watch, which it does before its first look at the queue.
fn watching(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:inotify")
    })
}

both_backends! {
    fn each_exit_code(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "true"]);
        ctx.ok(&["add", "exit 3", "--max-attempts", "1"]);
        let (status, _, _) = code(&ctx, &["run", "--load-file", load]);
        assert_eq!(status, Some(1));

        assert_eq!(code(&ctx, &["wait", "1"]), (Some(0), "1 job finished: 1 done\n".into(), String::new()));
        assert_eq!(
            code(&ctx, &["wait", "#1", "2"]),
            (Some(1), "#2 failed: exit 3\n2 jobs finished: 1 done, 1 failed\n".into(), String::new())
        );
        let (status, out, err) = code(&ctx, &["wait", "1", "99"]);
        assert_eq!((status, out.as_str()), (Some(3), ""), "{err}");
        assert!(err.contains("no job #99"), "{err}");

        ctx.ok(&["add", "true", "--delay", "1h"]);
        assert_eq!(
            code(&ctx, &["wait", "1", "3", "--timeout", "200ms"]),
            (
                Some(124),
                "#3 still pending\ntimed out after 200ms: 1 of 2 jobs not finished (1 done)\n".into(),
                String::new()
            )
        );
        let (status, out, _) = code(&ctx, &["wait", "--queue", "default", "--timeout", "0"]);
        assert_eq!(status, Some(124), "{out}");
        ctx.ok(&["cancel", "3"]);
        assert_eq!(
            code(&ctx, &["wait", "3"]),
            (Some(1), "#3 cancelled\n1 job finished: 0 done, 1 cancelled\n".into(), String::new())
        );
        // Everything that was ever pending has ended: nothing to wait for,
        // and failures from before the wait do not count.
        assert_eq!(
            code(&ctx, &["wait", "--all"]),
            (Some(0), "nothing to wait for: no job pending or running\n".into(), String::new())
        );

        let (status, out, _) = code(&ctx, &["--json", "wait", "1", "2"]);
        assert_eq!(status, Some(1));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["outcome"], "failed");
        let states: Vec<(i64, &str)> = v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| (j["id"].as_i64().unwrap(), j["state"].as_str().unwrap()))
            .collect();
        assert_eq!(states, [(1, "done"), (2, "failed")]);
        assert_eq!(v["gone"], serde_json::json!([]));
        assert_eq!(v["jobs"][1]["exit_code"], 3);
    }

    fn bad_invocations_and_a_missing_queue(ctx) {
        for args in [
            &["wait"][..],
            &["wait", "1", "--all"],
            &["wait", "--queue", "q", "--all"],
            &["wait", "0"],
            &["wait", "1", "--timeout", "soon"],
            &["wait", "--queue", "a/b"],
        ] {
            let (status, _, err) = code(&ctx, args);
            assert_eq!(status, Some(2), "{args:?}: {err}");
        }
        let (status, _, err) = code(&ctx, &["wait", "1"]);
        assert_eq!(status, Some(3), "{err}");
        assert!(!ctx.db.exists(), "a wait created the queue");
    }

    fn a_run_in_another_process_releases_a_wait(ctx) {
        let load = ctx.calm_load();
        // The job holds until the test opens the FIFO for writing.
        let fifo = ctx.path("gate");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        ctx.ok(&["add", "cat gate >/dev/null"]);
        ctx.ok(&["add", "true", "--queue", "later"]);
        let mut runner = ctx.spawn(&["run", "--load-file", load]);
        wait_for("job #1 to run", DEADLINE, || ctx.job(1).state == slothqueue::JobState::Running);
        let mut one = ctx.spawn(&["wait", "1"]);
        let mut queue = ctx.spawn(&["--json", "wait", "--queue", "later"]);
        // A wait that times out while the job runs; meanwhile the waits
        // above most likely had their first look and found it running
        // (either way, they must end as asserted below).
        let (status, out, _) = code(&ctx, &["wait", "1", "--timeout", "300ms"]);
        assert_eq!(status, Some(124), "{out}");
        wait_for("the waits to watch the queue", DEADLINE, || {
            watching(one.id()) && watching(queue.id())
        });
        assert!(one.try_wait().unwrap().is_none(), "the wait ended while its job ran");
        // Blocks until the job's `cat` opens it; closing it ends the job.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
        assert_eq!(wait_child(&mut one, DEADLINE).code(), Some(0));
        assert_eq!(stdout_of(&mut one), "1 job finished: 1 done\n");
        assert_eq!(wait_child(&mut queue, DEADLINE).code(), Some(0));
        let v: serde_json::Value = serde_json::from_str(&stdout_of(&mut queue)).unwrap();
        assert_eq!(v["outcome"], "done");
        assert_eq!(v["jobs"][0]["id"], 2);
        assert_eq!(wait_child(&mut runner, DEADLINE).code(), Some(0));
    }
}
