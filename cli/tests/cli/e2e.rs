//! Separate processes on one queue file, as users run them: persistence
//! across invocations, the seed's transcript, two runners at once, a
//! runner killed with SIGKILL mid-job, SIGTERM, and the demo.

use std::collections::BTreeMap;
use std::time::Duration;

use rustix::process::Signal;
use slothqueue::{Clock, JobState, NewJob, SystemClock};

use crate::both_backends;
use crate::support::{block_on, group_alive, signal, stdout_of, wait_child, wait_for};

/// Generous: CI machines are small and shared.
const PATIENCE: Duration = Duration::from_secs(60);

fn elapsed_free(line: &str) -> String {
    // `job #2 done in 0.05s` → `job #2 done in …s`
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find(" in ") {
        out.push_str(&rest[..i + 4]);
        rest = &rest[i + 4..];
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if n > 0 && rest[n..].starts_with('s') {
            out.push('…');
        } else {
            out.push_str(&rest[..n]);
        }
        rest = &rest[n..];
    }
    out.push_str(rest);
    // The mechanism holding a job's processes depends on the machine
    // (a writable cgroup or not).
    for m in ["cgroup", "subreaper+proc", "group only"] {
        out = out.replace(&format!("contained by {m})"), "contained by …)");
    }
    out
}

both_backends! {
    fn the_queue_persists_across_invocations(ctx) {
        assert_eq!(ctx.ok(&["add", "echo kept"]), "added job #1 (priority 0, max runtime 300s)\n");
        assert_eq!(ctx.ok(&["add", "echo also kept", "-p", "4"]), "added job #2 (priority 4, max runtime 300s)\n");
        let status = ctx.ok(&["status"]);
        assert!(status.contains("pending: 2\n"), "{status}");
        assert!(status.contains("due now: 2\n"), "{status}");
        let list: serde_json::Value = serde_json::from_str(&ctx.ok(&["list", "--json"])).unwrap();
        let ids: Vec<i64> = list.as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect();
        assert_eq!(ids, [2, 1]);
        let job = ctx.job(1);
        assert_eq!(job.payload["cwd"], ctx.dir.path().to_str().unwrap());
        // What `add` records of its (cleared) environment: the allowlist's.
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
        assert_eq!(
            job.payload["env"],
            serde_json::json!({"HOME": ctx.dir.path().to_str().unwrap(), "PATH": path, "TZ": "UTC"})
        );
        assert_eq!(job.payload["env_mode"], "exact");
    }

    fn the_seed_transcript(ctx) {
        let load = ctx.calm_load();
        assert_eq!(
            ctx.ok(&["add", "sleep 5", "--priority", "9", "--max-runtime", "2", "--max-attempts", "1"]),
            "added job #1 (priority 9, max runtime 2s)\n"
        );
        assert_eq!(
            ctx.ok(&["add", "echo \"rebuilt search index: 412 documents\"", "--priority", "5"]),
            "added job #2 (priority 5, max runtime 300s)\n"
        );
        assert_eq!(
            ctx.ok(&["add", "exit 3", "--priority", "1", "--max-attempts", "1"]),
            "added job #3 (priority 1, max runtime 300s)\n"
        );
        let out = ctx.run(&["run", "--load-file", load, "--load-ceiling", "25"]);
        assert_eq!(out.status.code(), Some(1));
        let lines: Vec<String> =
            String::from_utf8(out.stdout).unwrap().lines().map(elapsed_free).collect();
        assert_eq!(lines, [
            "  job #1 FAILED in …s (timeout: exceeded max runtime of 2s (all its processes killed, contained by …))",
            "  job #2 done in …s",
            "  job #3 FAILED in …s (exit code 3)",
            "finished: 1 done, 2 failed",
        ]);
    }

    fn two_runners_share_one_file_and_run_each_job_once(ctx) {
        let load = ctx.calm_load();
        let ids = ctx.path("ids");
        let jobs: Vec<NewJob> = (1..=100)
            .map(|i| NewJob::shell(format!("echo {i} >> ids"), ctx.dir.path().to_str().unwrap()))
            .collect();
        {
            let store = slothqueue::open(&ctx.db, slothqueue::OpenOptions::default()).unwrap();
            let pushed = block_on(store.push_many(jobs, SystemClock.now())).unwrap();
            assert_eq!(pushed.len(), 100);
        }
        let mut a = ctx.spawn(&["run", "--load-file", load]);
        let mut b = ctx.spawn(&["run", "--load-file", load]);
        let (sa, sb) = (wait_child(&mut a, PATIENCE), wait_child(&mut b, PATIENCE));
        assert!(sa.success() && sb.success(), "{sa} {sb}");
        let text = std::fs::read_to_string(&ids).unwrap();
        let mut seen: BTreeMap<u32, u32> = BTreeMap::new();
        for line in text.lines() {
            *seen.entry(line.trim().parse().unwrap()).or_default() += 1;
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n != 1).collect();
        assert!(twice.is_empty(), "ran more than once: {twice:?}");
        assert_eq!(seen.len(), 100, "every job ran");
        let status = ctx.ok(&["status"]);
        assert!(status.contains("done: 100\n"), "{status}");
        let (out_a, out_b) = (stdout_of(&mut a), stdout_of(&mut b));
        let done = |s: &str| s.lines().filter(|l| l.contains(" done in ")).count();
        assert_eq!(done(&out_a) + done(&out_b), 100);
    }

    fn a_runner_killed_mid_job_is_reclaimed_by_the_next(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "sleep 3; echo ok >> marker"]);
        let mut runner = ctx.spawn(&["run", "--load-file", load]);
        // Running, with the child's process group recorded in the lease.
        wait_for("the job to start", PATIENCE, || {
            ctx.job(1).lease.is_some_and(|l| l.child_pgid.is_some())
        });
        let pgid = ctx.job(1).lease.unwrap().child_pgid.unwrap();
        signal(runner.id(), Signal::KILL);
        let _ = wait_child(&mut runner, PATIENCE);
        assert!(ctx.ok(&["status"]).contains("running: 1\n"));
        let out = ctx.run(&["run", "--load-file", load]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(stdout.starts_with("reclaimed 1 stale job(s): #1\n"), "{stdout}");
        assert!(stdout.contains("  job #1 done in "), "{stdout}");
        let job = ctx.job(1);
        assert_eq!((job.state, job.attempts), (JobState::Done, 2));
        assert_eq!(std::fs::read_to_string(ctx.path("marker")).unwrap(), "ok\n", "the orphan was killed");
        assert!(!group_alive(pgid), "the first attempt's group is gone");
        let trail: Vec<String> = block_on(ctx.store().events(1))
            .unwrap()
            .iter()
            .map(|e| e.kind.to_string())
            .collect();
        assert_eq!(trail, ["pushed", "claimed", "reclaimed", "claimed", "completed"]);
    }

    fn cancel_of_a_dead_runners_job_promises_no_heartbeat(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "sleep 30"]);
        let mut runner = ctx.spawn(&["run", "--load-file", load]);
        wait_for("the job to start", PATIENCE, || {
            ctx.job(1).lease.is_some_and(|l| l.child_pgid.is_some())
        });
        let pgid = ctx.job(1).lease.unwrap().child_pgid.unwrap();
        signal(runner.id(), Signal::KILL);
        let _ = wait_child(&mut runner, PATIENCE);
        let said = ctx.ok(&["cancel", "1"]);
        assert!(said.contains("its runner is gone"), "{said}");
        assert!(!said.contains("heartbeat"), "{said}");
        let shown = ctx.ok(&["show", "1"]);
        assert!(shown.contains("the next runner ends it (cancelled)"), "{shown}");
        let out = ctx.run(&["run", "--load-file", load]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(ctx.job(1).state, JobState::Cancelled);
        assert!(!group_alive(pgid), "the orphaned group was killed");
    }

    fn sigterm_releases_the_job_and_exits_130(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "sleep 30"]);
        let mut runner = ctx.spawn(&["run", "--load-file", load]);
        wait_for("the job to start", PATIENCE, || {
            ctx.job(1).lease.is_some_and(|l| l.child_pgid.is_some())
        });
        let pgid = ctx.job(1).lease.unwrap().child_pgid.unwrap();
        signal(runner.id(), Signal::TERM);
        let status = wait_child(&mut runner, PATIENCE);
        assert_eq!(status.code(), Some(130));
        let job = ctx.job(1);
        assert_eq!(job.state, JobState::Pending);
        assert!(!group_alive(pgid), "the job's group was killed");
        let stdout = stdout_of(&mut runner);
        assert!(stdout.contains("returned to pending"), "{stdout}");
    }

    fn looking_never_creates_a_queue(ctx) {
        for args in [&["status"][..], &["list"], &["export"], &["status", "--json"], &["list", "--json"]] {
            let out = ctx.run(args);
            assert!(out.status.success(), "{args:?}");
        }
        for args in [&["show", "1"][..], &["logs", "1"], &["cancel", "1"], &["retry", "1"]] {
            assert_eq!(ctx.run(args).status.code(), Some(3), "{args:?}");
        }
        assert!(!ctx.db.exists());
    }

    fn the_default_queue_lives_in_the_data_dir(ctx) {
        let data = ctx.path("data");
        let out = ctx.bare_command().env("XDG_DATA_HOME", &data).args(["add", "true"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let db = data.join("slothqueue/queue.db");
        assert!(db.is_file());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&db).unwrap().permissions().mode() & 0o777, 0o600);
        let out = ctx.bare_command().env("SLOTHQUEUE_DB", &ctx.db).args(["add", "true"]).output().unwrap();
        assert!(out.status.success());
        assert!(ctx.db.is_file(), "SLOTHQUEUE_DB is honoured");
    }
}

#[cfg(feature = "sqlite")]
#[test]
fn the_demo_tells_its_stories_and_cleans_up() {
    let ctx = crate::support::TestContext::new(crate::support::Backend::Sqlite);
    let tmp = ctx.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out = ctx.bare_command().env("TMPDIR", &tmp).arg("demo").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for expected in [
        "$ slothqueue add 'sleep 5' --priority 9 --max-runtime 2 --max-attempts 1",
        "added job #1 (priority 9, max runtime 2s)",
        "  load 26.59 >= ceiling 25.00 — waiting 1s",
        "  load 24.42 < ceiling 25.00 — starting",
        "(timeout: exceeded max runtime of 2s (all its processes killed, contained by ",
        "  job #3 FAILED in ",
        "finished: 1 done, 2 failed",
        "rebuilt search index: 412 documents",
        "  job #4 failed in ",
        "— retry 1/3 in 2s",
        "why:          retrying: not due until",
        "running: 1",
        "reclaimed 1 stale job(s): #5",
        "attempts:     2 of 3",
        "backup finished",
        "waiting on key fetch (#6, pending)",
        "[1]+  Exit 1 ",
        "dependency #6 failed",
        "published report.pdf",
    ] {
        assert!(stdout.contains(expected), "demo output lacks {expected:?}:\n{stdout}");
    }
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "the demo removed its temp dir");
}
