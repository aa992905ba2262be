//! Lanes from the command line (issue #16): `parallel`, `pause`,
//! `resume`, `hold`, `release`, `queues`, and `run --slots` with the
//! gates beyond the load.
//!
//! What needs only the CLI (gates read from fake files, what a missing
//! queue says) runs now. The scenarios that need the stores' lane methods
//! or the runner's slots are `both_backends_with_lanes!` (ignored until
//! those land). Concurrency is checked from what the jobs themselves
//! recorded (their start and end times, lock directories they take), never
//! from how long a run took.

use std::process::Child;
use std::time::Duration;

use slothqueue::JobState;

use crate::support::{TestContext, stdout_of, wait_child, wait_for};
use crate::{both_backends, both_backends_with_lanes};

/// Generous: CI machines are small and shared.
const PATIENCE: Duration = Duration::from_secs(60);

/// A PSI file with `some avg10` at `pct`.
fn write_pressure(ctx: &TestContext, pct: f64) -> &'static str {
    std::fs::write(
        ctx.path("cpu"),
        format!("some avg10={pct:.2} avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
    )
    .unwrap();
    "cpu"
}

/// A power-supply folder with one mains adapter, online or not, and a
/// battery discharging when it is not.
fn write_power(ctx: &TestContext, online: bool) -> &'static str {
    let ac = ctx.path("power/AC");
    let bat = ctx.path("power/BAT0");
    std::fs::create_dir_all(&ac).unwrap();
    std::fs::create_dir_all(&bat).unwrap();
    std::fs::write(ac.join("type"), "Mains\n").unwrap();
    std::fs::write(ac.join("online"), if online { "1\n" } else { "0\n" }).unwrap();
    std::fs::write(bat.join("type"), "Battery\n").unwrap();
    std::fs::write(bat.join("status"), if online { "Charging\n" } else { "Discharging\n" })
        .unwrap();
    "power"
}

/// Stderr of a finished command.
fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

both_backends! {
    fn a_missing_queue_has_no_queues(ctx) {
        assert_eq!(
            ctx.ok(&["queues"]),
            format!("no queue at {} yet: no queues\n", ctx.db.display())
        );
        assert_eq!(ctx.ok(&["--json", "queues"]), "{\"queues\":[]}\n");
        assert!(!ctx.db.exists(), "looking created nothing");
    }

    fn status_without_lane_settings_says_nothing_of_lanes(ctx) {
        ctx.ok(&["add", "true"]);
        let status = ctx.ok(&["status"]);
        assert!(!status.contains("lanes:"), "{status}");
        let json: serde_json::Value = serde_json::from_str(&ctx.ok(&["--json", "status"])).unwrap();
        assert_eq!(json["lanes"], serde_json::json!({}));
        assert_eq!(json["held"], 0);
    }

    fn the_pressure_and_power_gates_hold_a_run_until_they_open(ctx) {
        let load = ctx.calm_load();
        let cpu = write_pressure(&ctx, 42.0);
        let power = write_power(&ctx, true);
        ctx.ok(&["add", "echo ran"]);
        let mut run = ctx.spawn(&[
            "run", "--load-file", load, "--max-cpu-pressure", "30", "--pressure-file", cpu,
            "--require-ac-power", "--power-supply-dir", power, "--check-interval", "100ms",
        ]);
        wait_for("the first check of the pressure gate", PATIENCE, || {
            ctx.job(1).state == JobState::Pending && gated_runner(&ctx, "cpu pressure 42.0% >= ceiling 30.0%")
        });
        // Pressure calms down, but the machine is now on battery.
        write_power(&ctx, false);
        write_pressure(&ctx, 1.0);
        wait_for("the power gate", PATIENCE, || gated_runner(&ctx, "on battery"));
        assert_eq!(ctx.job(1).state, JobState::Pending);
        write_power(&ctx, true);
        let status = wait_child(&mut run, PATIENCE);
        let out = stdout_of(&mut run);
        assert!(status.success(), "{out}");
        assert!(out.contains("cpu pressure 42.0% >= ceiling 30.0% — waiting"), "{out}");
        assert!(out.contains("on battery — waiting"), "{out}");
        assert_eq!(ctx.job(1).state, JobState::Done);
    }

    fn run_takes_slots_and_suspend_when_gated(ctx) {
        let load = ctx.calm_load();
        for i in 1..=3 {
            ctx.ok(&["add", &format!("echo {i}")]);
        }
        let out = ctx.run(&["run", "--load-file", load, "--slots", "3", "--suspend-when-gated"]);
        assert!(out.status.success(), "{}", stderr(&out));
        for id in 1..=3 {
            assert_eq!(ctx.job(id).state, JobState::Done);
        }
    }
}

/// Whether a live runner records that it waits on a gate reading `text`.
fn gated_runner(ctx: &TestContext, text: &str) -> bool {
    let json: serde_json::Value =
        serde_json::from_str(&ctx.ok(&["--json", "status"])).unwrap_or_default();
    json["runners"].as_array().is_some_and(|rs| {
        rs.iter().any(|r| {
            r["activity"]["activity"] == "gated"
                && r["activity"]["reading"].as_str().is_some_and(|s| s.contains(text))
        })
    })
}

both_backends_with_lanes! {
    fn hold_and_release_one_line_each(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "echo one"]);
        ctx.ok(&["add", "echo two"]);
        assert_eq!(ctx.ok(&["hold", "1"]), "held #1\n");
        let again = ctx.ok(&["hold", "#1"]);
        assert!(again.starts_with("#1 was already held since "), "{again}");
        let by = ctx.job(1).held.expect("held").by;
        assert!(by.ends_with(&format!("@{}", rustix::system::uname().nodename().to_string_lossy())), "{by}");
        let list = ctx.ok(&["list"]);
        assert!(list.lines().any(|l| l.starts_with("#1  held")), "{list}");
        let show = ctx.ok(&["show", "1"]);
        assert!(show.contains("why:          held since "), "{show}");
        assert!(show.contains("`slothqueue release 1` lets it run"), "{show}");
        let json: serde_json::Value = serde_json::from_str(&ctx.ok(&["--json", "show", "1"])).unwrap();
        assert_eq!(json["state"], "pending");
        assert!(json["held"]["since"].is_i64() && json["held"]["by"].is_string(), "{json}");
        let status = ctx.ok(&["status"]);
        assert!(status.contains("pending: 2 (1 held)\n"), "{status}");
        ctx.ok(&["run", "--load-file", load]);
        assert_eq!(ctx.job(1).state, JobState::Pending, "a held job does not run");
        assert_eq!(ctx.job(2).state, JobState::Done);
        assert!(ctx.ok(&["status"]).contains("pending: 1 (1 held)\n"));
        assert_eq!(ctx.ok(&["release", "1"]), "released #1\n");
        assert_eq!(ctx.ok(&["release", "1"]), "#1 was not held\n");
        ctx.ok(&["run", "--load-file", load]);
        assert_eq!(ctx.job(1).state, JobState::Done);
        let kinds: Vec<String> =
            ctx.store_events(1).iter().map(|e| e.kind.to_string()).collect();
        assert!(kinds.contains(&"held".to_owned()) && kinds.contains(&"hold_released".to_owned()), "{kinds:?}");
    }

    fn hold_says_which_failed_and_goes_on(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "true"]);
        ctx.ok(&["run", "--load-file", load]);
        ctx.ok(&["add", "true"]);
        let out = ctx.run(&["hold", "1", "99", "2"]);
        assert_eq!(out.status.code(), Some(4), "the first refusal's code: {}", stderr(&out));
        assert_eq!(stdout(&out), "held #2\n");
        assert_eq!(
            stderr(&out),
            "error: cannot hold job #1: it is done\nerror: no job #99\n"
        );
        let out = ctx.run(&["hold", "99"]);
        assert_eq!(out.status.code(), Some(3));
        let out = ctx.run(&["release", "1"]);
        assert_eq!(out.status.code(), Some(4));
        assert_eq!(stderr(&out), "error: cannot release job #1: it is done\n");
        let json: serde_json::Value = serde_json::from_str(&ctx.ok(&["--json", "release", "2"])).unwrap();
        assert_eq!(json[0]["id"], 2);
        assert!(json[0].get("held").is_none(), "{json}");
    }

    fn a_paused_queue_starts_nothing_until_resumed(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "echo backup", "--queue", "backups"]);
        ctx.ok(&["add", "echo web"]);
        assert_eq!(
            ctx.ok(&["pause", "--queue", "backups"]),
            "queue backups paused (1 due job waits; running jobs go on)\n"
        );
        let again = ctx.ok(&["pause", "--queue", "backups"]);
        assert!(again.starts_with("queue backups was already paused since "), "{again}");
        let show = ctx.ok(&["show", "1"]);
        assert!(show.contains("why:          its queue backups is paused since "), "{show}");
        let status = ctx.ok(&["status"]);
        assert!(status.contains("lanes:\n  backups: paused since "), "{status}");
        let out = ctx.run(&["run", "--load-file", load]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(ctx.job(1).state, JobState::Pending);
        assert_eq!(ctx.job(2).state, JobState::Done);
        assert_eq!(ctx.ok(&["resume", "--queue", "backups"]), "queue backups resumed (1 due job may start)\n");
        assert_eq!(ctx.ok(&["resume", "--queue", "backups"]), "queue backups was not paused\n");
        ctx.ok(&["run", "--load-file", load]);
        assert_eq!(ctx.job(1).state, JobState::Done);
    }

    fn pausing_every_queue_and_resuming_it(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "true", "--queue", "a"]);
        ctx.ok(&["add", "true", "--queue", "b"]);
        ctx.ok(&["pause", "--queue", "b"]);
        assert_eq!(ctx.ok(&["pause"]), "every queue paused (2 due jobs wait; running jobs go on)\n");
        let queues = ctx.ok(&["queues"]);
        assert!(queues.contains("\nevery queue is paused since "), "{queues}");
        ctx.ok(&["run", "--load-file", load]);
        assert_eq!((ctx.job(1).state, ctx.job(2).state), (JobState::Pending, JobState::Pending));
        assert_eq!(
            ctx.ok(&["resume"]),
            "every queue resumed (2 due jobs may start); still paused on their own: b (`slothqueue resume --queue Q`)\n"
        );
        ctx.ok(&["run", "--load-file", load]);
        assert_eq!((ctx.job(1).state, ctx.job(2).state), (JobState::Done, JobState::Pending));
        let json: serde_json::Value = serde_json::from_str(&ctx.ok(&["--json", "resume", "--queue", "b"])).unwrap();
        assert_eq!(json, serde_json::json!({"queue": "b", "limit": 0}));
    }

    fn parallel_sets_and_lifts_a_limit(ctx) {
        assert_eq!(ctx.ok(&["parallel", "2", "--queue", "disk"]), "queue disk: at most 2 at once\n");
        let json: serde_json::Value = serde_json::from_str(&ctx.ok(&["--json", "parallel", "3", "-q", "disk"])).unwrap();
        assert_eq!(json, serde_json::json!({"queue": "disk", "limit": 3}));
        ctx.ok(&["add", "true", "--queue", "disk"]);
        ctx.ok(&["add", "true", "--queue", "disk"]);
        ctx.ok(&["hold", "2"]);
        ctx.ok(&["add", "true", "--delay", "1h"]);
        assert_eq!(
            ctx.ok(&["queues"]),
            "\
QUEUE    PENDING  DUE  HELD  RUNNING  LIMIT  PAUSED
default        1    0     0        0      -  -
disk           2    1     1        0      3  -
"
        );
        let json: serde_json::Value = serde_json::from_str(&ctx.ok(&["--json", "queues"])).unwrap();
        assert_eq!(json["queues"][1], serde_json::json!({
            "queue": "disk", "pending": 2, "due": 1, "held": 1, "waiting_on_parents": 0,
            "running": 0, "limit": 3
        }));
        assert_eq!(ctx.ok(&["parallel", "0", "--queue", "disk"]), "queue disk: no limit\n");
        assert!(ctx.ok(&["queues"]).contains("\ndisk           2    1     1        0      -  -\n"));
    }

    fn pause_stops_new_starts_while_a_running_job_finishes(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "while [ ! -e go ]; do sleep 0.05; done", "--queue", "q"]);
        let mut runner = ctx.spawn(&["run", "--follow", "--load-file", load, "--check-interval", "100ms"]);
        wait_for("job #1 to run", PATIENCE, || ctx.job(1).state == JobState::Running);
        ctx.ok(&["pause", "--queue", "q"]);
        ctx.ok(&["add", "true", "--queue", "q"]);
        std::fs::write(ctx.path("go"), "").unwrap();
        wait_for("the running job to finish under the pause", PATIENCE, || ctx.job(1).state == JobState::Done);
        // A job of another queue, added after: once it is done the runner
        // has looked again since the pause, and still left #2 alone.
        ctx.ok(&["add", "true", "--queue", "other"]);
        wait_for("job #3 of an open queue", PATIENCE, || ctx.job(3).state == JobState::Done);
        assert_eq!(ctx.job(2).state, JobState::Pending, "a paused queue starts nothing new");
        ctx.ok(&["resume", "--queue", "q"]);
        wait_for("job #2 once resumed", PATIENCE, || ctx.job(2).state == JobState::Done);
        stop(&ctx, &mut runner);
    }

    fn slots_run_jobs_at_the_same_time(ctx) {
        let load = ctx.calm_load();
        for _ in 0..3 {
            ctx.ok(&["add", "sleep 2"]);
        }
        let out = ctx.run(&["run", "--load-file", load, "--slots", "3"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let jobs: Vec<_> = (1..=3).map(|id| ctx.job(id)).collect();
        assert!(jobs.iter().all(|j| j.state == JobState::Done));
        // They overlapped: the last to start started before the first to
        // finish finished (one at a time, each would start after the one
        // before it ended).
        let last_start = jobs.iter().map(|j| j.started_at.unwrap()).max().unwrap();
        let first_end = jobs.iter().map(|j| j.finished_at.unwrap()).min().unwrap();
        assert!(last_start < first_end, "the three jobs did not all run at once: {jobs:#?}");
    }

    fn a_lane_limit_holds_across_runners_and_slots(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["parallel", "2", "--queue", "disk"]);
        // Each job takes one of two slot directories or fails: a third job
        // of the lane running at once would find both taken. It frees its
        // slot before it exits, so before the store frees the lane's.
        let job = "if mkdir slot.a 2>/dev/null; then s=a; elif mkdir slot.b 2>/dev/null; then s=b; \
                   else echo third >> overlap; exit 1; fi; sleep 0.3; rmdir slot.$s";
        for _ in 0..12 {
            ctx.ok(&["add", job, "--queue", "disk", "--max-attempts", "1"]);
        }
        let mut runners: Vec<Child> = (0..4)
            .map(|_| ctx.spawn(&["run", "--load-file", load, "--slots", "4", "--check-interval", "100ms"]))
            .collect();
        for r in &mut runners {
            let status = wait_child(r, PATIENCE);
            assert!(status.success(), "a runner failed: {}", stdout_of(r));
        }
        assert!(!ctx.path("overlap").exists(), "a third job of the lane ran at once");
        for id in 1..=12 {
            assert_eq!(ctx.job(id).state, JobState::Done, "job #{id}");
        }
    }

    fn export_and_import_carry_the_lanes(ctx) {
        ctx.ok(&["add", "true", "--queue", "disk"]);
        ctx.ok(&["add", "true", "--queue", "backups"]);
        ctx.ok(&["hold", "1"]);
        ctx.ok(&["parallel", "2", "--queue", "disk"]);
        ctx.ok(&["pause", "--queue", "backups"]);
        let dump = ctx.ok(&["export"]);
        let first: serde_json::Value = serde_json::from_str(dump.lines().next().unwrap()).unwrap();
        assert_eq!(first["lanes"]["queues"]["disk"]["limit"], 2);
        assert!(first["lanes"]["queues"]["backups"]["paused"]["by"].is_string());
        let file = ctx.path("dump.jsonl");
        std::fs::write(&file, &dump).unwrap();
        let other = TestContext::new(ctx.backend);
        assert_eq!(
            other.ok(&["import", file.to_str().unwrap()]),
            "imported 2 job(s) and 2 lane setting(s)\n"
        );
        assert_eq!(other.ok(&["queues"]), ctx.ok(&["queues"]));
        assert!(other.job(1).held.is_some());
        assert_eq!(other.ok(&["export"]), dump, "what was imported exports the same");
    }
}

both_backends! {
    fn a_second_lanes_line_or_a_bad_one_writes_nothing(ctx) {
        ctx.ok(&["add", "true"]);
        let before = ctx.ok(&["export"]);
        let file = ctx.path("dump.jsonl");
        let lanes = r#"{"lanes":{"queues":{"disk":{"limit":2}}}}"#;
        std::fs::write(&file, format!("{lanes}\n{lanes}\n")).unwrap();
        let out = ctx.run(&["import", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(stderr(&out), "error: line 2: a second `lanes` line (the first is line 1); nothing was written\n");
        std::fs::write(&file, "{\"lanes\":{\"queues\":{\"a b\":{\"limit\":2}}}}\n").unwrap();
        let out = ctx.run(&["import", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).starts_with("error: line 1: bad `lanes`: queue `a b` is not a valid name"), "{}", stderr(&out));
        std::fs::write(&file, "{\"lanes\":{\"queues\":{\"disk\":{\"limit\":\"two\"}}}}\n").unwrap();
        let out = ctx.run(&["import", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).starts_with("error: line 1: bad `lanes` ("), "{}", stderr(&out));
        assert_eq!(ctx.ok(&["export"]), before);
    }
}

/// Stops a background runner with SIGTERM and waits for it.
fn stop(ctx: &TestContext, child: &mut Child) {
    let _ = ctx;
    crate::support::signal(child.id(), rustix::process::Signal::TERM);
    wait_child(child, PATIENCE);
}
