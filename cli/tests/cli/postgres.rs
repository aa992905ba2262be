//! The commands on a queue on a PostgreSQL server (`--db postgres://…`,
//! issue #20): the same commands as on a file, and a queue moved from a
//! file to the server by `export` and `import`.

use std::time::Duration;

use slothqueue::JobState;

use crate::support::{TestContext, wait_for};

const PATIENCE: Duration = Duration::from_secs(60);

fn json(ctx: &TestContext, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ctx.ok(&all)).unwrap()
}

#[test]
fn every_day_commands_work_on_a_queue_on_the_server() {
    let Some(ctx) = TestContext::postgres() else { return };
    // Looking at a queue nobody made yet creates nothing.
    let status = ctx.ok(&["status"]);
    assert!(status.contains("no queue at"), "{status}");
    assert_eq!(ctx.ok(&["add", "echo hello"]), "added job #1 (priority 0, max runtime 300s)\n");
    assert_eq!(
        ctx.ok(&["add", "exit 3", "--max-attempts", "1"]),
        "added job #2 (priority 0, max runtime 300s)\n"
    );
    assert_eq!(
        ctx.ok(&["add", "echo later", "--after", "1"]).lines().next(),
        Some("added job #3 (priority 0, max runtime 300s)")
    );
    let status = json(&ctx, &["status"]);
    assert_eq!(status["pending"], 3, "{status}");
    let load = ctx.calm_load();
    let out = ctx.run(&["run", "--load-file", load]);
    assert!(out.status.code().is_some(), "{out:?}");
    assert_eq!(ctx.job(1).state, JobState::Done);
    assert_eq!(ctx.job(2).state, JobState::Failed);
    assert_eq!(ctx.job(3).state, JobState::Done);
    // This host wrote the log, in its data folder: `logs` finds it.
    let log = ctx.ok(&["logs", "1"]);
    assert!(
        log.starts_with("--- job #1 attempt 1/3 started ") && log.ends_with("---\nhello\n"),
        "{log}"
    );
    let list = json(&ctx, &["list"]);
    let ids: Vec<i64> =
        list.as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [3, 2, 1]);
    let show = ctx.ok(&["show", "2"]);
    assert!(show.contains("failed"), "{show}");
    ctx.ok(&["retry", "2"]);
    assert_eq!(ctx.job(2).state, JobState::Pending);
    ctx.ok(&["cancel", "2"]);
    assert_eq!(ctx.job(2).state, JobState::Cancelled);
    // `wait` on a finished job returns at once.
    ctx.ok(&["wait", "1"]);
    ctx.ok(&["clear"]);
    let status = json(&ctx, &["status"]);
    assert_eq!(status["done"], 0, "{status}");
}

#[test]
fn a_queue_moves_from_a_file_to_the_server_by_export_and_import() {
    let Some(server) = TestContext::postgres() else { return };
    let file = TestContext::new(crate::support::Backend::Sqlite);
    file.ok(&["add", "echo one", "--key", "k1"]);
    file.ok(&["add", "echo two", "--after", "1"]);
    file.ok(&["add", "echo three", "-p", "5"]);
    file.ok(&["cancel", "3"]);
    let dump = file.ok(&["export"]);
    let path = file.path("dump.jsonl");
    std::fs::write(&path, &dump).unwrap();
    server.ok(&["import", path.to_str().unwrap()]);
    assert_eq!(server.ok(&["export"]), dump, "the server's export differs from the file's");
    // And it runs there: the dependency holds, ids go on above.
    let load = server.calm_load();
    server.run(&["run", "--load-file", load]);
    assert_eq!(server.job(1).state, JobState::Done);
    assert_eq!(server.job(2).state, JobState::Done);
    assert_eq!(server.ok(&["add", "echo four"]), "added job #4 (priority 0, max runtime 300s)\n");
}

#[test]
fn a_runner_following_the_server_wakes_at_a_push_from_another_process() {
    let Some(ctx) = TestContext::postgres() else { return };
    let load = ctx.calm_load();
    ctx.ok(&["add", "true"]);
    let mut runner = ctx.spawn(&["run", "--follow", "--load-file", load]);
    wait_for("the first job", PATIENCE, || ctx.job(1).state == JobState::Done);
    // Waiting costs nothing: the runner sleeps on LISTEN, not a poll, and
    // a push from another process wakes it (its poll is minutes).
    ctx.ok(&["add", "true"]);
    wait_for("the second job, woken by NOTIFY", Duration::from_secs(5), || {
        ctx.job(2).state == JobState::Done
    });
    crate::support::signal(runner.id(), rustix::process::Signal::TERM);
    crate::support::wait_child(&mut runner, PATIENCE);
    // Without the server's notifications it would have said it polls.
    let out = std::io::read_to_string(runner.stdout.take().unwrap()).unwrap();
    let err = std::io::read_to_string(runner.stderr.take().unwrap()).unwrap();
    assert!(!format!("{out}{err}").contains("cannot watch"), "{out}{err}");
}
