//! Schedules from the command line (issue #19): `every SPEC CMD`, `every
//! --pause/--resume/--remove KEY`, `schedules`, what `show` says of a
//! tick's job, and schedules through `export`/`import`.
//!
//! No CLI command fires a tick (a runner does), so these check what is
//! stored and said, never a firing; a tick's job is made by hand with the
//! idempotency key a tick gives (`KEY@SLOT`). Every scenario runs on
//! both backends.

use crate::both_backends;
use crate::support::{TestContext, json_snapshot, snapshot_with};

/// Who paused (`uid N@host`, `ana@laptop`) and a derived key's hash
/// (the command's directory, a temp dir, is part of it).
const FILTERS: &[(&str, &str)] = &[
    (r"by (uid \d+|\S+)@\S+", "by [WHO]"),
    (r#""by": "[^"]*""#, r#""by": "[WHO]""#),
    (r"\b(echo|make)-[0-9a-f]{6}\b", "$1-[HASH]"),
];

/// JSON lines as values.
fn lines_of(text: &str) -> Vec<serde_json::Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Writes JSON lines to a file in the context's dir; returns its path.
fn write_lines(ctx: &TestContext, name: &str, lines: &[serde_json::Value]) -> String {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let path = ctx.path(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Asserts `args` exits with `code`, one line on stderr holding
/// `fragment`, and the queue's export unchanged.
fn refused(ctx: &TestContext, args: &[&str], code: i32, fragment: &str) {
    let before = ctx.ok(&["export"]);
    let out = ctx.run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(stderr.contains(fragment), "{args:?}: expected `{fragment}` in: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert_eq!(ctx.ok(&["export"]), before, "{args:?} wrote something");
}

/// The one schedule under `key`, as `schedules --json` prints it.
fn schedule(ctx: &TestContext, key: &str) -> serde_json::Value {
    let all = lines_of(&ctx.ok(&["--json", "schedules"]));
    let list = all[0].as_array().unwrap();
    list.iter().find(|s| s["key"] == key).cloned().unwrap_or_else(|| panic!("no {key}: {list:?}"))
}

both_backends! {
    fn every_stores_lists_and_refuses_another_definition(ctx) {
        snapshot_with(&ctx, "schedules_missing", &["schedules"], FILTERS);
        assert!(!ctx.db.exists(), "looking created nothing");
        snapshot_with(&ctx, "every_interval", &["every", "2h", "make backup", "--key", "backup"], FILTERS);
        snapshot_with(&ctx, "every_unchanged", &["every", "2h", "make backup", "--key", "backup"], FILTERS);
        snapshot_with(
            &ctx,
            "every_cron",
            &["every", "0 3 * * *", "make nightly", "--key", "nightly", "--tz", "Asia/Tokyo", "--catch-up", "none", "--overlap", "queue", "-q", "night", "-p", "5"],
            FILTERS,
        );
        snapshot_with(&ctx, "every_other_definition", &["every", "1h", "make backup", "--key", "backup"], FILTERS);
        snapshot_with(&ctx, "schedules_table", &["schedules"], FILTERS);
        json_snapshot(&ctx, "schedules_json", &["--json", "schedules"], FILTERS);
        let nightly = schedule(&ctx, "nightly");
        assert_eq!(nightly["spec"], serde_json::json!({"cron": "0 3 * * *"}));
        assert_eq!(nightly["zone"], "Asia/Tokyo");
        assert_eq!(nightly["catch_up"], "none");
        assert_eq!(nightly["overlap"], "queue");
        assert_eq!(nightly["job"]["queue"], "night");
        assert_eq!(nightly["job"]["priority"], 5);
        assert!(nightly["next_fire"].as_i64().unwrap() > nightly["created_at"].as_i64().unwrap());
        let backup = schedule(&ctx, "backup");
        assert_eq!(backup["spec"], serde_json::json!({"every": 7_200_000}));
        assert_eq!(
            backup["next_fire"].as_i64().unwrap(),
            backup["created_at"].as_i64().unwrap() + 7_200_000,
            "an interval counts from its creation"
        );
        let status = ctx.ok(&["status"]);
        assert!(status.contains("\nschedules: 2 (next tick "), "{status}");
        let status = lines_of(&ctx.ok(&["--json", "status"])).remove(0);
        assert_eq!(status["schedules"], 2);
        let first = [&backup, &nightly].into_iter().min_by_key(|s| s["next_fire"].as_i64()).unwrap();
        assert_eq!(status["next_tick"], serde_json::json!({"key": first["key"], "at": first["next_fire"]}));
        let again = lines_of(&ctx.ok(&["--json", "every", "2h", "make backup", "--key", "backup"])).remove(0);
        assert_eq!(again["created"], false);
        assert_eq!(again["created_at"], backup["created_at"], "the same definition is not stored again");
    }

    fn the_tick_job_is_the_job_add_queues(ctx) {
        let flags = ["-q", "disk", "-p", "-3", "--max-attempts", "2", "--max-runtime", "90s", "-e", "API_TOKEN=hunter2", "--nice", "5"];
        let mut every = vec!["every", "@daily", "make x", "--key", "x"];
        every.extend_from_slice(&flags);
        ctx.ok(&every);
        let mut add = vec!["--json", "add", "make x"];
        add.extend_from_slice(&flags);
        let job = lines_of(&ctx.ok(&add)).remove(0);
        let tick = schedule(&ctx, "x")["job"].clone();
        for field in ["kind", "payload", "queue", "priority", "max_attempts", "max_runtime"] {
            assert_eq!(tick[field], job[field], "{field}");
        }
        assert_eq!(tick["payload"]["env"]["API_TOKEN"], "<secret>", "masked as a job's are");
        assert_eq!(tick["idempotency_key"], serde_json::Value::Null, "each tick gives its own");
        assert_eq!(tick["not_before"], serde_json::Value::Null, "each tick is due at its slot");
    }

    fn a_key_is_derived_from_the_command_when_none_is_given(ctx) {
        let first = ctx.run(&["every", "15m", "echo hi"]);
        let stdout = String::from_utf8(first.stdout).unwrap();
        let stderr = String::from_utf8(first.stderr).unwrap();
        assert!(first.status.success(), "{stderr}");
        let key = stdout.strip_prefix("schedule ").and_then(|r| r.split(':').next()).unwrap().to_owned();
        assert!(key.starts_with("echo-") && key.len() == "echo-".len() + 6, "{stdout}");
        assert!(stderr.contains(&format!("key {key} derived from SPEC")), "{stderr}");
        let second = ctx.ok(&["every", "15m", "echo hi"]);
        assert!(second.starts_with(&format!("schedule {key}: every 15m in UTC, next ")), "{second}");
        assert!(second.contains("(unchanged"), "the same line names the same schedule: {second}");
        let other = ctx.ok(&["every", "15m", "echo bye"]);
        assert!(!other.starts_with(&format!("schedule {key}:")), "{other}");
        assert_eq!(lines_of(&ctx.ok(&["--json", "schedules"]))[0].as_array().unwrap().len(), 2);
    }

    fn pause_resume_and_remove(ctx) {
        ctx.ok(&["every", "0 3 * * *", "make nightly", "--key", "nightly", "--tz", "Asia/Tokyo"]);
        snapshot_with(&ctx, "every_pause", &["every", "--pause", "nightly"], FILTERS);
        snapshot_with(&ctx, "every_pause_again", &["every", "--pause", "nightly"], FILTERS);
        snapshot_with(&ctx, "schedules_paused", &["schedules"], FILTERS);
        assert!(ctx.ok(&["status"]).contains("\nschedules: 1 (all paused)\n"));
        assert_eq!(lines_of(&ctx.ok(&["--json", "status"]))[0]["next_tick"], serde_json::Value::Null);
        let paused = schedule(&ctx, "nightly");
        assert!(paused["paused"]["by"].as_str().unwrap().contains('@'), "{paused}");
        assert_eq!(paused["next_fire"], serde_json::Value::Null, "no tick while paused");
        snapshot_with(&ctx, "every_resume", &["every", "--resume", "nightly"], FILTERS);
        snapshot_with(&ctx, "every_resume_again", &["every", "--resume", "nightly"], FILTERS);
        let resumed = schedule(&ctx, "nightly");
        assert!(resumed.get("paused").is_none(), "{resumed}");
        assert!(resumed["cursor"].as_i64().unwrap() >= paused["paused"]["since"].as_i64().unwrap(), "slots passed while paused are not run");
        json_snapshot(&ctx, "every_pause_json", &["--json", "every", "--pause", "nightly"], FILTERS);
        refused(&ctx, &["every", "--pause", "nope"], 3, "every --pause nope: no schedule `nope`");
        refused(&ctx, &["every", "--resume", "nope"], 3, "no schedule `nope`");
        refused(&ctx, &["every", "--remove", "nope"], 3, "no schedule `nope`");
        refused(&ctx, &["every", "@daily", "other", "--key", "nightly"], 2, "exists with another definition");
        snapshot_with(&ctx, "every_remove", &["every", "--remove", "nightly"], FILTERS);
        assert_eq!(ctx.ok(&["--json", "schedules"]), "[]\n");
    }

    fn bad_input_writes_nothing(ctx) {
        ctx.ok(&["every", "2h", "make backup", "--key", "backup"]);
        for (args, fragment) in [
            (&["every", "5x", "make"][..], "SPEC `5x` is neither an interval"),
            (&["every", "0s", "make"][..], "an interval must be from 1s"),
            (&["every", "0 25 * * *", "make"][..], "cron expression `0 25 * * *`"),
            (&["every", "0 0 30 2 *", "make"][..], "never fires"),
            (&["every", "2h", "make", "--tz", "Mars/Olympus"][..], "unknown time zone `Mars/Olympus`"),
            (&["every", "2h", "make", "--key", "a b"][..], "schedule key `a b`"),
            (&["every", "2h", "make", "--delay", "5m"][..], "every takes no --delay"),
            (&["every", "2h", "make", "--after", "1"][..], "every takes no --after"),
            (&["every", "2h"][..], "every 2h needs a command"),
            (&["every", "2h", "make", "--catch-up", "twice"][..], "invalid value 'twice'"),
            (&["every", "--pause", "backup", "--resume", "backup"][..], "cannot be used with"),
            (&["every", "--pause", "backup", "2h"][..], "cannot be used with"),
            (&["every", "--remove", "backup", "--queue", "q"][..], "takes nothing else (got --queue)"),
        ] {
            refused(&ctx, args, 2, fragment);
        }
        let missing = TestContext::new(ctx.backend);
        let out = missing.run(&["every", "--pause", "backup"]);
        assert_eq!(out.status.code(), Some(3));
        assert!(String::from_utf8_lossy(&out.stderr).contains("no queue at"));
        assert!(!missing.db.exists(), "a change creates no queue");
    }

    fn show_names_the_schedule_and_slot_of_a_tick_job(ctx) {
        ctx.ok(&["add", "make nightly", "--key", "nightly@2026-12-02T03:00:00Z"]);
        ctx.ok(&["add", "make other", "--key", "plain-key"]);
        let gone = ctx.ok(&["show", "1"]);
        assert!(
            gone.contains("schedule:     nightly, slot 2026-12-02 03:00:00 UTC (no schedule nightly is stored now)\n"),
            "{gone}"
        );
        ctx.ok(&["every", "0 3 * * *", "make nightly", "--key", "nightly", "--tz", "Europe/Berlin"]);
        let stored = ctx.ok(&["show", "1"]);
        assert!(stored.contains("schedule:     nightly, slot 2026-12-02 04:00:00 CET\n"), "{stored}");
        let json = lines_of(&ctx.ok(&["--json", "show", "1"])).remove(0);
        assert_eq!(json["schedule"], serde_json::json!({"key": "nightly", "slot": 1_796_180_400_000_i64}));
        assert!(!ctx.ok(&["show", "2"]).contains("schedule:"), "a plain key is no tick's");
        assert!(lines_of(&ctx.ok(&["--json", "show", "2"]))[0].get("schedule").is_none());
    }

    fn export_and_import_carry_schedules(ctx) {
        ctx.ok(&["every", "2h", "make backup", "--key", "backup", "-e", "GITHUB_TOKEN=ghp_x"]);
        ctx.ok(&["every", "0 3 * * *", "make nightly", "--key", "nightly", "--tz", "Europe/Berlin", "--catch-up", "none"]);
        ctx.ok(&["every", "--pause", "nightly"]);
        ctx.ok(&["add", "make nightly", "--key", "nightly@2026-12-02T03:00:00Z"]);
        ctx.ok(&["parallel", "2", "--queue", "disk"]);
        let dump = ctx.ok(&["export"]);
        let lines = lines_of(&dump);
        assert!(lines[0].get("lanes").is_some(), "the lanes first: {dump}");
        assert_eq!(lines[1]["schedule"]["key"], "backup", "then the schedules, in key order");
        assert_eq!(lines[1]["schedule"]["job"]["payload"]["env"]["GITHUB_TOKEN"], "ghp_x", "as stored");
        assert_eq!(lines[1]["secrets"], serde_json::json!(["GITHUB_TOKEN"]), "and said");
        assert_eq!(lines[2]["schedule"]["key"], "nightly");
        assert!(lines[2]["schedule"]["paused"].is_object());
        assert!(lines[2].get("secrets").is_none());
        assert_eq!(lines[3]["id"], 1, "then the jobs");

        let target = TestContext::new(ctx.backend);
        std::fs::write(target.path("dump.jsonl"), &dump).unwrap();
        snapshot_with(&target, "import_schedules", &["import", "dump.jsonl"], FILTERS);
        assert_eq!(target.ok(&["export"]), dump, "export → import → export is lossless");
        assert!(target.ok(&["show", "1"]).contains("schedule:     nightly, slot 2026-12-02 04:00:00 CET\n"));

        // Refused whole, nothing written: a key already in the queue, twice
        // in the file, or a schedule no `every` could have made.
        let fresh = TestContext::new(ctx.backend);
        fresh.ok(&["add", "true"]);
        let only_schedules = write_lines(&fresh, "schedules.jsonl", &lines[1..3]);
        fresh.ok(&["every", "1h", "other", "--key", "nightly"]);
        refused(&fresh, &["import", &only_schedules], 2, "line 2: schedule `nightly` already exists in the queue");
        let twice = write_lines(&fresh, "twice.jsonl", &[lines[1].clone(), lines[1].clone()]);
        refused(&fresh, &["import", &twice], 2, "line 2: schedule `backup` is also on line 1");
        let mut bad_zone = lines[1].clone();
        bad_zone["schedule"]["zone"] = "Mars/Olympus".into();
        let bad_zone = write_lines(&fresh, "zone.jsonl", &[bad_zone]);
        refused(&fresh, &["import", &bad_zone], 2, "line 1: schedule `backup`: unknown time zone `Mars/Olympus`");
        let mut keyed = lines[1].clone();
        keyed["schedule"]["job"]["idempotency_key"] = "k".into();
        let keyed = write_lines(&fresh, "keyed.jsonl", &[keyed]);
        refused(&fresh, &["import", &keyed], 2, "line 1: schedule `backup`: a schedule's job has no key");
        let mut shape = lines[1].clone();
        shape["schedule"]["spec"] = serde_json::json!({"hourly": true});
        let shape = write_lines(&fresh, "shape.jsonl", &[shape]);
        refused(&fresh, &["import", &shape], 2, "line 1: bad `schedule`");
        let backup_only = write_lines(&fresh, "backup.jsonl", &lines[1..2]);
        let out = lines_of(&fresh.ok(&["--json", "import", &backup_only])).remove(0);
        assert_eq!(out, serde_json::json!({"imported": 0, "schedules": 1, "lane_settings": 0}));
        assert_eq!(schedule(&fresh, "backup")["created_at"], lines[1]["schedule"]["created_at"]);
    }
}
