//! The fixtures, `tests/data/v1.sqlite`, `v3.sqlite`, `v4.sqlite`,
//! `v5.sqlite` and `v6.sqlite`: the same small queue written by this crate
//! at schema versions 1, 3, 4, 5 and 6, with jobs in every state and their trails. Every
//! later version must open a copy of each and read it back exactly,
//! forever; that is what "an older file is migrated" means in practice. (v3
//! is the last layout before jobs could wait on others: its pending jobs
//! must still be due after the claim indexes were rebuilt for
//! dependencies. v4 is the last before lanes and holds, and adds a chapter
//! of jobs waiting on parents: they must still wait, and the due one stay
//! due, after the claim indexes were rebuilt to leave held jobs out. v5 is
//! the last before schedules, and adds a chapter of a held job and lane
//! settings: they must survive the schedules' table being added. v6 adds a
//! chapter of schedules, one that fired and one paused: what a tick decided
//! must read back, and decide nothing twice.)
//!
//! `build` below is how the files were made. It is run again only with
//! `SLOTHQUEUE_WRITE_FIXTURE=<version>`, and refuses unless the schema is
//! that version, since a vN fixture can only be written by a vN build.

#![expect(clippy::unwrap_used, reason = "helpers of tests: a failure is a panic")]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use slothqueue_core::schedule::{LastFire, Missed};
use slothqueue_core::{
    CatchUp, ClaimFilter, ClaimRequest, ClockOnly, Completion, EventKind, Failure, JobState,
    LaneChange, LaneScope, LaneSettings, NewJob, NewSchedule, Overlap, Owner, RunnerActivity,
    RunnerRecord, Schedule, ScheduleChange, Spec, Stamp, Stats, Store, TickOutcome, Timestamp,
};
use slothqueue_store_sqlite::{APPLICATION_ID, SCHEMA_VERSION, SqliteOptions, SqliteStore};

fn t(secs: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
}

fn fixture(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/v{version}.sqlite"))
}

fn owner_a() -> Owner {
    Owner {
        id: "runner-a-4242-1".into(),
        host: "laptop".into(),
        boot_id: Some("0f1e2d3c-boot".into()),
        pid: Some(4242),
        pid_start_time: Some(123_456_789),
        pid_ns: None,
    }
}

fn runner_record() -> RunnerRecord {
    RunnerRecord {
        owner: owner_a(),
        queues: vec!["default".into()],
        kinds: None,
        refused: Vec::new(),
        started_at: t(0),
        updated_at: t(2),
        activity: RunnerActivity::Running { job: 1, also: Vec::new() },
        slots: 1,
        running: Vec::new(),
        gpus: None,
    }
}

fn only(queue: &str) -> ClaimFilter {
    ClaimFilter { queues: vec![queue.into()], kinds: None }
}

/// The first version whose fixture has the dependencies chapter
/// ([`build_after`]).
const AFTER: u32 = 4;

/// The first version whose fixture has the lanes and holds chapter
/// ([`build_lanes`]).
const LANES: u32 = 5;

/// The first version whose fixture has the schedules chapter
/// ([`build_schedules`]).
const SCHEDULES: u32 = 6;

/// Writes the fixture's story into a new queue at `path`, as a build of
/// schema `version` tells it (the chapters that version could store).
async fn build(path: &Path, version: u32) {
    let s = SqliteStore::open(path, SqliteOptions::default()).unwrap();
    let a = owner_a();
    let b = Owner::named("runner-b");
    let any = ClaimFilter::default();
    let failure =
        |e: &str, code| Failure { error: e.into(), exit_code: Some(code), permanent: false };

    // #1 running under a's lease, with its child's process group.
    s.push(NewJob::shell("sleep 600", "/home/u"), t(0)).await.unwrap();
    let c = s
        .claim(&ClaimRequest::new(a.clone(), Arc::new(ClockOnly)).filter(any.clone()), t(1))
        .await
        .unwrap()
        .unwrap();
    s.heartbeat(c.job.id, &c.fence, Some(777), t(2)).await.unwrap();
    s.put_runner(&runner_record()).await.unwrap();
    // #2 done, holding key k1.
    s.push(NewJob::shell("echo ok", "/home/u").key("k1"), t(10)).await.unwrap();
    let c = s
        .claim(&ClaimRequest::new(b.clone(), Arc::new(ClockOnly)).filter(only("default")), t(11))
        .await
        .unwrap()
        .unwrap();
    let done = Completion { result: Some("ok".into()), exit_code: Some(0) };
    s.complete(c.job.id, &c.fence, done, t(12)).await.unwrap();
    // #3 failed, out of attempts.
    s.push(NewJob::shell("exit 3", "/").max_attempts(1), t(20)).await.unwrap();
    let c = s
        .claim(&ClaimRequest::new(b.clone(), Arc::new(ClockOnly)).filter(any.clone()), t(21))
        .await
        .unwrap()
        .unwrap();
    s.fail(c.job.id, &c.fence, failure("exit code 3", 3), t(22)).await.unwrap();
    // #4 pending again after a failure, retrying 2 s later.
    s.push(NewJob::shell("flaky", "/"), t(30)).await.unwrap();
    let c = s
        .claim(&ClaimRequest::new(b.clone(), Arc::new(ClockOnly)).filter(any.clone()), t(31))
        .await
        .unwrap()
        .unwrap();
    s.fail(c.job.id, &c.fence, failure("exit code 1", 1), t(32)).await.unwrap();
    // #5 cancelled while pending.
    s.push(NewJob::shell("never", "/"), t(40)).await.unwrap();
    s.cancel(5, t(41)).await.unwrap();
    // #6 superseded by #7, which takes its key.
    s.push(NewJob::shell("v1", "/").key("k2"), t(50)).await.unwrap();
    s.push(NewJob::shell("v2", "/").key("k2"), t(51)).await.unwrap();
    // #8 a delayed handler job in another queue.
    let mail = NewJob::new("send", serde_json::json!({"to": "a@example.org", "n": [1, 2]}))
        .queue("mail")
        .priority(5)
        .max_runtime(Some(Duration::from_secs(2)))
        .not_before(t(3600));
    s.push(mail, t(60)).await.unwrap();
    // #9 running with a cancel requested.
    s.push(NewJob::shell("long", "/").queue("slow"), t(70)).await.unwrap();
    let c = s
        .claim(&ClaimRequest::new(b.clone(), Arc::new(ClockOnly)).filter(only("slow")), t(71))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.job.id, 9);
    s.cancel(9, t(72)).await.unwrap();
    // #10 failed, then retried.
    s.push(NewJob::shell("again", "/").queue("slow").max_attempts(1), t(80)).await.unwrap();
    let c = s
        .claim(&ClaimRequest::new(b.clone(), Arc::new(ClockOnly)).filter(only("slow")), t(81))
        .await
        .unwrap()
        .unwrap();
    s.fail(c.job.id, &c.fence, failure("exit code 2", 2), t(82)).await.unwrap();
    s.retry(10, t(83)).await.unwrap();
    if version >= AFTER {
        build_after(&s).await;
    }
    if version >= LANES {
        build_lanes(&s).await;
    }
    if version >= SCHEDULES {
        build_schedules(&s).await;
    }
    drop(s);
    // Compact, and in rollback-journal mode so that reading the committed
    // file read-only leaves no `-wal`/`-shm` beside it in the repository.
    let conn = Connection::open(path).unwrap();
    conn.execute_batch("VACUUM").unwrap();
    conn.query_row("PRAGMA journal_mode = DELETE", [], |_| Ok(())).unwrap();
}

/// The dependencies chapter (v4 on): #11 waits on #1 (running), #12 is
/// after #2 (done) and so due, #13 waits on #11 and #2.
async fn build_after(s: &SqliteStore) {
    s.push(NewJob::shell("after one", "/").after(1), t(90)).await.unwrap();
    s.push(NewJob::shell("after two", "/").queue("slow").after(2), t(91)).await.unwrap();
    s.push(NewJob::shell("after both", "/").after(11).after(2), t(92)).await.unwrap();
}

fn ana(secs: i64) -> Stamp {
    Stamp::new("ana@laptop", t(secs))
}

/// The lanes and holds chapter (v5 on): #14 held, the `slow` lane limited
/// to one job at a time, the `mail` lane paused.
async fn build_lanes(s: &SqliteStore) {
    s.push(NewJob::shell("on hold", "/").queue("slow"), t(93)).await.unwrap();
    s.hold(14, ana(94), t(94)).await.unwrap();
    s.change_lane(&LaneScope::Queue("slow".into()), &LaneChange::Limit(1)).await.unwrap();
    s.change_lane(&LaneScope::Queue("mail".into()), &LaneChange::Pause(ana(95))).await.unwrap();
}

/// What the lanes and holds chapter holds.
async fn check_lanes(s: &SqliteStore) {
    let j14 = s.get(14).await.unwrap();
    assert_eq!(
        (j14.state, j14.held, j14.queue.as_str()),
        (JobState::Pending, Some(ana(94)), "slow")
    );
    let trail = s.events(14).await.unwrap();
    assert_eq!(
        trail.iter().map(|e| e.kind).collect::<Vec<_>>(),
        [EventKind::Pushed, EventKind::Held]
    );
    let lanes = s.lanes().await.unwrap();
    assert_eq!(lanes.all_paused, None);
    let want = [
        ("mail".to_owned(), LaneSettings { limit: 0, paused: Some(ana(95)) }),
        ("slow".to_owned(), LaneSettings { limit: 1, paused: None }),
    ];
    assert_eq!(lanes.queues.into_iter().collect::<Vec<_>>(), want);
}

/// The definitions of the schedules chapter.
fn beat() -> NewSchedule {
    NewSchedule {
        key: "beat".into(),
        spec: Spec::every(Duration::from_secs(1)).unwrap(),
        zone: "UTC".into(),
        catch_up: CatchUp::Once,
        overlap: Overlap::Skip,
        job: NewJob::shell("date", "/home/u"),
    }
}

fn nightly() -> NewSchedule {
    NewSchedule {
        key: "nightly".into(),
        spec: Spec::cron("0 3 * * *").unwrap(),
        zone: "Europe/Berlin".into(),
        catch_up: CatchUp::None,
        overlap: Overlap::Queue,
        job: NewJob::new("send", serde_json::json!({"report": "daily"})).queue("mail").priority(2),
    }
}

/// The schedules chapter (v6 on): `beat` (every second from t(96)) fired
/// at t(98), one slot missed before it, and enqueued #15; `nightly` (cron,
/// in Berlin) was paused before its first slot.
async fn build_schedules(s: &SqliteStore) {
    s.put_schedule(&beat(), t(96)).await.unwrap();
    s.put_schedule(&nightly(), t(96)).await.unwrap();
    s.change_schedule("nightly", &ScheduleChange::Pause(ana(97)), t(97)).await.unwrap();
    let fired = s.fire_schedules(t(98)).await.unwrap();
    assert_eq!(fired.ticks.len(), 1, "{fired:?}");
}

/// What the schedules chapter holds.
async fn check_schedules(s: &SqliteStore) {
    let stored = |new: NewSchedule| Schedule {
        key: new.key,
        spec: new.spec,
        zone: new.zone,
        catch_up: new.catch_up,
        overlap: new.overlap,
        job: new.job,
        created_at: t(96),
        paused: None,
        cursor: t(96),
        last_fire: None,
        last_missed: None,
        last_skipped: None,
    };
    let beat = Schedule {
        cursor: t(98),
        last_fire: Some(LastFire { slot: t(98), at: t(98), job: 15 }),
        last_missed: Some(Missed { count: 1, at_least: false, at: t(98), latest: t(97) }),
        ..stored(beat())
    };
    let nightly = Schedule { paused: Some(ana(97)), ..stored(nightly()) };
    assert_eq!(s.schedules().await.unwrap(), [beat, nightly]);
    let j15 = s.get(15).await.unwrap();
    assert_eq!(j15.idempotency_key.as_deref(), Some("beat@2023-11-14T22:14:58Z"));
    assert_eq!(
        (j15.state, j15.command(), j15.created_at),
        (JobState::Pending, Some("date"), t(98))
    );
    let trail = s.events(15).await.unwrap();
    assert_eq!(
        trail.iter().map(|e| e.kind).collect::<Vec<_>>(),
        [EventKind::Pushed, EventKind::Scheduled]
    );
    // Decided: the same time fires nothing again.
    let again = s.fire_schedules(t(98)).await.unwrap();
    assert_eq!((again.ticks.len(), again.next), (0, Some(t(99))));
}

/// What the dependencies chapter holds.
async fn check_after(s: &SqliteStore) {
    let expected = [(11, vec![1], 1), (12, vec![2], 0), (13, vec![11, 2], 1)];
    for (id, after, pending_parents) in expected {
        let job = s.get(id).await.unwrap();
        assert_eq!(job.state, JobState::Pending, "#{id}");
        assert_eq!((job.after, job.pending_parents), (after, pending_parents), "#{id}");
        assert_eq!(s.events(id).await.unwrap().len(), 1, "#{id}: pushed");
    }
    assert_eq!(s.dependents(1).await.unwrap(), vec![11]);
    assert_eq!(s.dependents(2).await.unwrap(), vec![12, 13]);
    assert_eq!(s.dependents(11).await.unwrap(), vec![13]);
}

/// What the fixture of `version` holds; true of the committed file forever.
async fn check(s: &SqliteStore, version: u32) {
    use EventKind::{CancelRequested, Claimed, Completed, Pushed, Retried, Superseded};
    use JobState::{Done, Pending, Running};
    s.check_integrity().unwrap();
    let expected = [
        (1, Running, vec![Pushed, Claimed]),
        (2, Done, vec![Pushed, Claimed, Completed]),
        (3, JobState::Failed, vec![Pushed, Claimed, EventKind::Failed]),
        (4, Pending, vec![Pushed, Claimed, EventKind::Failed]),
        (5, JobState::Cancelled, vec![Pushed, EventKind::Cancelled]),
        (6, JobState::Cancelled, vec![Pushed, Superseded]),
        (7, Pending, vec![Pushed]),
        (8, Pending, vec![Pushed]),
        (9, Running, vec![Pushed, Claimed, CancelRequested]),
        (10, Pending, vec![Pushed, Claimed, EventKind::Failed, Retried]),
    ];
    for (id, state, kinds) in expected {
        let job = s.get(id).await.unwrap();
        assert_eq!(job.state, state, "#{id}");
        let trail = s.events(id).await.unwrap();
        assert_eq!(trail.iter().map(|e| e.kind).collect::<Vec<_>>(), kinds, "#{id}");
        assert!(trail.iter().all(|e| e.job_id == id));
        assert_eq!(slothqueue_core::machine::replay(&trail), Some(state), "#{id} trail replays");
    }

    let j1 = s.get(1).await.unwrap();
    let lease = j1.lease.clone().unwrap();
    assert_eq!(lease.owner, owner_a());
    assert_eq!((lease.attempt, lease.until, lease.child_pgid), (1, t(62), Some(777)));
    assert_eq!(j1.command(), Some("sleep 600"));
    assert_eq!(j1.payload["cwd"], "/home/u");
    assert_eq!((j1.attempts, j1.max_attempts, j1.started_at), (1, 3, Some(t(1))));

    let j2 = s.get(2).await.unwrap();
    assert_eq!(j2.idempotency_key.as_deref(), Some("k1"));
    assert_eq!(
        (j2.result.as_deref(), j2.exit_code, j2.finished_at),
        (Some("ok"), Some(0), Some(t(12)))
    );
    assert!(j2.lease.is_none());

    let j3 = s.get(3).await.unwrap();
    assert_eq!((j3.last_error.as_deref(), j3.exit_code), (Some("exit code 3"), Some(3)));
    assert_eq!((j3.attempts, j3.max_attempts), (1, 1));

    let j4 = s.get(4).await.unwrap();
    assert_eq!((j4.not_before, j4.attempts), (t(34), 1));
    let failed = &s.events(4).await.unwrap()[2];
    assert_eq!(failed.retry_at, Some(t(34)));
    assert_eq!(failed.owner.as_deref(), Some("runner-b"));
    assert_eq!((failed.attempt, failed.message.as_deref()), (Some(1), Some("exit code 1")));

    let (j6, j7) = (s.get(6).await.unwrap(), s.get(7).await.unwrap());
    assert_eq!((j6.idempotency_key, j7.idempotency_key.as_deref()), (None, Some("k2")));
    assert_eq!(s.events(6).await.unwrap()[1].message.as_deref(), Some("superseded by #7"));

    let j8 = s.get(8).await.unwrap();
    assert_eq!((j8.queue.as_str(), j8.kind.as_str(), j8.priority), ("mail", "send", 5));
    assert_eq!(j8.payload, serde_json::json!({"to": "a@example.org", "n": [1, 2]}));
    assert_eq!(
        (j8.max_runtime, j8.not_before, j8.created_at),
        (Some(Duration::from_secs(2)), t(3600), t(60))
    );

    assert!(s.get(9).await.unwrap().cancel_requested);
    let j10 = s.get(10).await.unwrap();
    assert_eq!((j10.attempts, j10.not_before, j10.finished_at), (0, t(83), None));

    assert_eq!(s.runners().await.unwrap(), vec![runner_record()]);
    let stats = s.stats(t(100)).await.unwrap();
    let mut want = Stats {
        pending: 4,
        waiting_on_parents: 0,
        held: 0,
        running: 2,
        done: 1,
        failed: 1,
        cancelled: 2,
        due_now: 3,
        next_due: Some(t(3600)),
    };
    if version >= AFTER {
        check_after(s).await;
        (want.pending, want.waiting_on_parents, want.due_now) = (7, 2, 4);
    }
    if version >= LANES {
        check_lanes(s).await;
        (want.pending, want.held) = (8, 1);
    }
    if version >= SCHEDULES {
        check_schedules(s).await;
        (want.pending, want.due_now) = (9, 5);
    }
    assert_eq!(stats, want);
    assert_eq!(s.next_due().await.unwrap(), Some(t(34)));
}

/// The id the next job pushed onto the fixture of `version` gets.
fn next_id(version: u32) -> i64 {
    match version {
        v if v >= SCHEDULES => 16,
        v if v >= LANES => 15,
        v if v >= AFTER => 14,
        _ => 11,
    }
}

/// Rewrites the fixture of `version` when asked and this build is of it,
/// then checks the committed file is of that version, and that a copy
/// opens (migrated), reads back exactly and stays a working queue.
async fn reads_back(version: u32) {
    let asked = std::env::var("SLOTHQUEUE_WRITE_FIXTURE").ok();
    if asked.as_deref() == Some(version.to_string().as_str()) {
        assert_eq!(
            SCHEMA_VERSION, version,
            "a v{version} fixture can only be written by a v{version} build"
        );
        let _ = fs::remove_file(fixture(version));
        fs::create_dir_all(fixture(version).parent().unwrap()).unwrap();
        build(&fixture(version), version).await;
    }
    let raw =
        Connection::open_with_flags(fixture(version), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY);
    let raw = raw.unwrap();
    let app: i32 = raw.query_row("PRAGMA application_id", [], |r| r.get(0)).unwrap();
    let found: u32 = raw.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(
        (app, found),
        (APPLICATION_ID, version),
        "the committed fixture is schema v{version}"
    );
    drop(raw);

    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join(format!("v{version}.sqlite"));
    fs::copy(fixture(version), &copy).unwrap();
    let s = SqliteStore::open(&copy, SqliteOptions::default()).unwrap();
    check(&s, version).await;
    // And it stays a working queue: new ids go above the old ones.
    let id = next_id(version);
    assert_eq!(s.push(NewJob::shell("new", "/"), t(200)).await.unwrap().job.id, id);
    drop(s);
    let s = SqliteStore::open(&copy, SqliteOptions::default()).unwrap();
    assert_eq!(s.get(id).await.unwrap().created_at, t(200));
}

#[tokio::test]
async fn the_v1_fixture_reads_back() {
    reads_back(1).await;
}

#[tokio::test]
async fn the_v3_fixture_reads_back() {
    reads_back(3).await;
}

#[tokio::test]
async fn the_v4_fixture_reads_back() {
    reads_back(4).await;
}

#[tokio::test]
async fn the_v5_fixture_reads_back() {
    reads_back(5).await;
}

#[tokio::test]
async fn the_v6_fixture_reads_back() {
    reads_back(6).await;
}

#[tokio::test]
async fn the_builder_still_tells_the_same_story() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.sqlite");
    build(&path, SCHEMA_VERSION).await;
    check(&SqliteStore::open(&path, SqliteOptions::default()).unwrap(), SCHEMA_VERSION).await;
}

/// The v1 file's id sequence survives the rebuild: a v1 queue whose newest
/// job was purged still never hands its id out again.
#[tokio::test]
async fn a_purged_v1_id_is_not_reused_after_the_migration() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("v1.sqlite");
    fs::copy(fixture(1), &copy).unwrap();
    {
        let raw = Connection::open(&copy).unwrap();
        raw.execute_batch("DELETE FROM events WHERE job_id = 10; DELETE FROM jobs WHERE id = 10;")
            .unwrap();
        let seq: i64 = raw
            .query_row("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(seq, 10);
    }
    let s = SqliteStore::open(&copy, SqliteOptions::default()).unwrap();
    assert_eq!(s.push(NewJob::shell("new", "/"), t(200)).await.unwrap().job.id, 11);
    assert_eq!(s.events(4).await.unwrap().len(), 3, "the trails survived the table's rebuild");
    s.check_integrity().unwrap();
}

/// A migrated file has exactly the schema of a queue created new, from
/// every fixture. (SQLite's own tables aside: `sqlite_sequence`, made by
/// v1's `AUTOINCREMENT`, is in some files and not others.)
#[tokio::test]
async fn a_migrated_file_has_the_schema_of_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("fresh.sqlite");
    drop(SqliteStore::open(&fresh, SqliteOptions::default()).unwrap());
    let schema = |p: &Path| -> Vec<(String, String)> {
        let c = Connection::open(p).unwrap();
        let mut stmt = c
            .prepare(
                "SELECT name, sql FROM sqlite_schema
                 WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
            )
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
    };
    for version in [1, 3, 4, 5, 6] {
        let copy = dir.path().join(format!("v{version}.sqlite"));
        fs::copy(fixture(version), &copy).unwrap();
        drop(SqliteStore::open(&copy, SqliteOptions::default()).unwrap());
        assert_eq!(schema(&copy), schema(&fresh), "from v{version}");
    }
}

/// The v4 file (the last before lanes and holds), migrated: no lane has
/// settings, every queue is counted from the rebuilt indexes, and its jobs
/// take holds and pauses: a held job (due, or waiting on a parent) leaves
/// what is due and what a claim takes, a paused lane's jobs (an expired
/// lease among them) are passed by, and a release brings the job back.
#[tokio::test]
async fn the_v4_fixture_takes_lanes_and_holds_after_the_migration() {
    use slothqueue_core::QueueCounts;
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("v4.sqlite");
    fs::copy(fixture(4), &copy).unwrap();
    let s = SqliteStore::open(&copy, SqliteOptions::default()).unwrap();
    let now = t(100);
    assert!(s.lanes().await.unwrap().is_default());
    let counts = |queue: &str, pending, due, waiting_on_parents, running| QueueCounts {
        queue: queue.into(),
        pending,
        due,
        held: 0,
        waiting_on_parents,
        running,
    };
    assert_eq!(
        s.queue_counts(now).await.unwrap(),
        [counts("default", 4, 2, 2, 1), counts("mail", 1, 0, 0, 0), counts("slow", 2, 2, 0, 1)]
    );
    let ana = Stamp::new("ana@laptop", now);
    for id in [12, 13] {
        assert_eq!(s.hold(id, ana.clone(), now).await.unwrap().held, Some(ana.clone()));
    }
    let stats = s.stats(now).await.unwrap();
    assert_eq!(
        (stats.pending, stats.held, stats.waiting_on_parents, stats.due_now),
        (7, 2, 2, 3),
        "{stats:?}"
    );
    s.change_lane(&LaneScope::Queue("default".into()), &LaneChange::Pause(ana)).await.unwrap();
    let any = || ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly));
    let c = s.claim(&any(), now).await.unwrap().unwrap();
    assert_eq!(c.job.id, 10, "default is paused (#1's expired lease too), #12 held");
    assert!(s.claim(&any(), now).await.unwrap().is_none());
    s.release_hold(12, "ana@laptop", now).await.unwrap();
    assert_eq!(s.claim(&any(), now).await.unwrap().unwrap().job.id, 12);
    s.check_integrity().unwrap();
}

/// The v5 file (the last before schedules), migrated: it has none, takes
/// one, and the tick's job gets the next id of the file, above its jobs.
#[tokio::test]
async fn the_v5_fixture_takes_schedules_after_the_migration() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("v5.sqlite");
    fs::copy(fixture(5), &copy).unwrap();
    let s = SqliteStore::open(&copy, SqliteOptions::default()).unwrap();
    assert!(s.schedules().await.unwrap().is_empty());
    assert!(s.fire_schedules(t(200)).await.unwrap().ticks.is_empty());
    assert!(s.put_schedule(&beat(), t(200)).await.unwrap().created);
    let fired = s.fire_schedules(t(201)).await.unwrap();
    let outcomes: Vec<_> = fired.ticks.into_iter().map(|k| k.outcome).collect();
    assert_eq!(outcomes, [TickOutcome::Enqueued { job: 15, created: true }]);
    drop(s);
    let s = SqliteStore::open(&copy, SqliteOptions::default()).unwrap();
    assert_eq!(s.schedules().await.unwrap()[0].last_fire.as_ref().map(|f| f.job), Some(15));
    let j15 = s.get(15).await.unwrap();
    assert_eq!(j15.idempotency_key.as_deref(), Some("beat@2023-11-14T22:16:41Z"));
    assert_eq!(s.get(14).await.unwrap().held, Some(ana(94)), "the v5 chapter is intact");
    s.check_integrity().unwrap();
}
