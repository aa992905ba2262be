//! Snapshot tests of `top`'s frames, rendered on ratatui's `TestBackend`
//! at 80×24 and 160×48, over a queue made the same way every time: fixed
//! times (an injected `now`, every write at a fixed timestamp), fixed ids,
//! one runner record, one log. The frame is drawn from the model that
//! [`load::snapshot`] reads through the read model, so these pin what a
//! person sees of the queue, not only the layout.
//!
//! Local times are words of the machine's zone (`words::local`), so they
//! are masked as `hh:mm:ss` (the queue's times fall on one local day in
//! every zone, so no date appears).

#![allow(clippy::unwrap_used, reason = "a test's unwrap is its assertion")]

use std::path::Path;
use std::sync::Arc;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use slothqueue::core::{
    ClaimRequest, ClockOnly, Completion, Failure, LaneChange, LaneScope, Liveness, Stamp,
};
use slothqueue::{NewJob, OpenOptions, Owner, RunnerRecord, Store, Timestamp};
use slothqueue_top::keys::Key;
use slothqueue_top::load;
use slothqueue_top::model::{Model, Screen};
use slothqueue_view::Look;

/// 2026-01-15 15:00:00 UTC: far from midnight in every zone.
const T0: i64 = 1_768_489_200_000;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_millis(T0 + secs * 1000)
}

fn owner() -> Owner {
    Owner {
        id: "runner-a".to_owned(),
        host: "box".to_owned(),
        boot_id: None,
        pid: Some(4242),
        pid_start_time: None,
        pid_ns: None,
    }
}

fn shell(command: &str) -> NewJob {
    NewJob::shell(command, "/srv")
}

/// The queue every frame shows: a failed deploy, a done echo, a running
/// test run with a log, a backup in a paused queue, a report waiting on
/// the tests, a held rsync and a job due in an hour; one live runner.
async fn queue(dir: &Path) -> Arc<dyn Store> {
    let store = slothqueue::open(&dir.join("queue.db"), OpenOptions::default()).unwrap();
    let claim = async |s: &Arc<dyn Store>, t| {
        s.claim(&ClaimRequest::new(owner(), Arc::new(ClockOnly)), t).await.unwrap().unwrap()
    };
    store.push(shell("./deploy.sh --prod").max_attempts(1), at(0)).await.unwrap();
    let c = claim(&store, at(5)).await;
    let failure = Failure {
        error: "exit code 2: deploy target unreachable".to_owned(),
        exit_code: Some(2),
        permanent: false,
    };
    store.fail(c.job.id, &c.fence, failure, at(9)).await.unwrap();
    store.push(shell("echo hello"), at(10)).await.unwrap();
    let c = claim(&store, at(11)).await;
    let done = Completion { result: Some("hello".to_owned()), exit_code: Some(0) };
    store.complete(c.job.id, &c.fence, done, at(12)).await.unwrap();
    store.push(shell("make test"), at(20)).await.unwrap();
    let running = claim(&store, at(21)).await;
    assert_eq!(running.job.id, 3);
    store.push(shell("tar czf /backups/srv.tgz /srv").queue("backups"), at(30)).await.unwrap();
    let backups = LaneScope::Queue("backups".to_owned());
    store.change_lane(&backups, &LaneChange::Pause(Stamp::new("ana@box", at(40)))).await.unwrap();
    let default = LaneScope::Queue("default".to_owned());
    store.change_lane(&default, &LaneChange::Limit(2)).await.unwrap();
    store.push(shell("./report.sh").after(3), at(50)).await.unwrap();
    store.push(shell("rsync -a /data /mnt/data"), at(55)).await.unwrap();
    store.hold(6, Stamp::new("ana@box", at(56)), at(56)).await.unwrap();
    store.push(shell("sleep 600").not_before(at(3600)), at(57)).await.unwrap();
    // Written as a runner writes its record (JSON, the stored shape), so
    // that the record's fields can grow without this test changing.
    let record: RunnerRecord = serde_json::from_value(serde_json::json!({
        "owner": owner(),
        "queues": [],
        "started_at": at(1),
        "updated_at": at(58),
        "activity": { "activity": "running", "job": 3 },
    }))
    .unwrap();
    store.put_runner(&record).await.unwrap();
    let logs = dir.join("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::write(
        slothqueue::runner::log_path(&logs, 3),
        "--- job #3 attempt 1/3 started: sh -c make test ---\ncc -o app main.c\nrunning 12 tests\ntest parse ... ok\ntest render ... ok\n",
    )
    .unwrap();
    store
}

/// A model after `keys`, read at `at(60)` as `top` reads, drawn at `w`×`h`.
async fn frame(keys: &[Key], w: u16, h: u16) -> String {
    let dir = tempfile::tempdir().unwrap();
    let store = queue(dir.path()).await;
    let judge = |_: &Owner| Liveness::Alive;
    let look = Look { store: store.as_ref(), now: at(60), judge: &judge, this_host: "box" };
    let mut model = Model::new("/home/ana/.local/share/slothqueue/queue.db", "box");
    let logs = dir.path().join("logs");
    model.take(load::snapshot(&look, Screen::List, &model.filters, &logs, None).await.unwrap());
    for key in keys {
        model.key(*key);
        model.take(load::snapshot(&look, model.screen, &model.filters, &logs, None).await.unwrap());
    }
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal.draw(|f| slothqueue_top::frame::draw(f, &model)).unwrap();
    terminal.backend().to_string()
}

fn check(name: &str, text: &str) {
    insta::with_settings!({ filters => vec![(r"\b\d\d:\d\d:\d\d\b", "hh:mm:ss")] }, {
        insta::assert_snapshot!(name, text);
    });
}

#[tokio::test]
async fn the_list_at_80x24() {
    check("list_80x24", &frame(&[], 80, 24).await);
}

#[tokio::test]
async fn the_list_at_160x48() {
    check("list_160x48", &frame(&[], 160, 48).await);
}

/// The running test run: who runs it, its trail, its log followed.
#[tokio::test]
async fn a_running_job_at_80x24() {
    let keys = [Key::Down, Key::Down, Key::Down, Key::Down, Key::Enter];
    check("job_running_80x24", &frame(&keys, 80, 24).await);
}

#[tokio::test]
async fn a_running_job_at_160x48() {
    let keys = [Key::Down, Key::Down, Key::Down, Key::Down, Key::Enter];
    check("job_running_160x48", &frame(&keys, 160, 48).await);
}

/// The backup in the paused queue: why it waits, in `show`'s words.
#[tokio::test]
async fn a_job_in_a_paused_queue_at_80x24() {
    let keys = [Key::Down, Key::Down, Key::Down, Key::Enter];
    check("job_paused_80x24", &frame(&keys, 80, 24).await);
}

/// The failed deploy, found by a search, with the cancel question asked.
#[tokio::test]
async fn a_search_and_a_question_at_80x24() {
    let mut keys = vec![Key::Char('/')];
    keys.extend("deploy".chars().map(Key::Char));
    keys.extend([Key::Enter, Key::Char('r')]);
    check("search_retry_question_80x24", &frame(&keys, 80, 24).await);
}

/// The state filter reads the held job alone.
#[tokio::test]
async fn the_held_filter_at_80x24() {
    let keys = [Key::Char('s'), Key::Char('s'), Key::Char('s')];
    let text = frame(&keys, 80, 24).await;
    assert!(text.contains("state held"), "{text}");
    assert!(text.contains("rsync -a /data") && !text.contains("make test  "), "{text}");
}

/// A job that is not there (cleared since it was opened) says so.
#[tokio::test]
async fn an_unknown_job_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = queue(dir.path()).await;
    let judge = |_: &Owner| Liveness::Alive;
    let look = Look { store: store.as_ref(), now: at(60), judge: &judge, this_host: "box" };
    let mut model = Model::new("q.db", "box");
    model.screen = Screen::Job(99);
    let logs = dir.path().join("logs");
    model.take(load::snapshot(&look, model.screen, &model.filters, &logs, None).await.unwrap());
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
    terminal.draw(|f| slothqueue_top::frame::draw(f, &model)).unwrap();
    let text = terminal.backend().to_string();
    assert!(text.contains("job #99 does not exist"), "{text}");
    assert_eq!(model.key(Key::Char('c')), slothqueue_top::model::Effect::Redraw);
    assert_eq!(model.message.as_deref(), Some("no job selected"));
}
