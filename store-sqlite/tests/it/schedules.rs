//! Schedules as SQLite stores them (the behaviour every store shares is in
//! the conformance scenarios): a schedule is its JSON in the `schedules`
//! table, so everything a tick decided (the cursor, the last fire, the
//! missed and skipped slots, a pause) survives a reopen, and the reopened
//! file decides no slot twice; a tick's job is an ordinary job of the file;
//! two handles firing at once decide a slot once; a damaged schedule row
//! is refused as damage, with nothing fired.

#![expect(clippy::unwrap_used, reason = "helpers of tests: a failure is a panic")]

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;
use slothqueue_core::{
    CatchUp, EventKind, JobState, NewJob, NewSchedule, Overlap, ScheduleChange, Spec, Stamp, Store,
    StoreError, TickOutcome, Timestamp,
};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

/// 2026-12-01T00:00:00Z plus `secs`.
fn t(secs: i64) -> Timestamp {
    Timestamp::from_millis(1_796_083_200_000 + secs * 1000)
}

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default()).unwrap()
}

fn every(key: &str, secs: u64) -> NewSchedule {
    NewSchedule {
        key: key.into(),
        spec: Spec::every(Duration::from_secs(secs)).unwrap(),
        zone: "UTC".into(),
        catch_up: CatchUp::Once,
        overlap: Overlap::Skip,
        job: NewJob::shell(format!("echo {key}"), "/"),
    }
}

/// Three schedules in every condition a tick leaves: `beat` fired after
/// missing slots and then skipped a tick behind its unfinished job, `hourly`
/// (cron, in Berlin, catching up on nothing) dropped a late slot, `paused`
/// is paused. Closed and reopened, the file holds them exactly; the same
/// `now` decides nothing again, and the next slot fires from where the
/// cursor was, with a job id above every one used.
#[tokio::test]
async fn schedules_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let s = open(&path);
    s.put_schedule(&every("beat", 10), t(0)).await.unwrap();
    let hourly = NewSchedule {
        key: "hourly".into(),
        spec: Spec::cron("0 * * * *").unwrap(),
        zone: "Europe/Berlin".into(),
        catch_up: CatchUp::None,
        overlap: Overlap::Queue,
        job: NewJob::shell("date", "/tmp").queue("clock"),
    };
    s.put_schedule(&hourly, t(0)).await.unwrap();
    s.put_schedule(&every("paused", 5), t(0)).await.unwrap();
    let ana = Stamp::new("ana@laptop", t(1));
    s.change_schedule("paused", &ScheduleChange::Pause(ana.clone()), t(1)).await.unwrap();

    // 35 s late for beat (slots at 10, 20, 30: the latest fires, two
    // missed); hourly's first slot is an hour away.
    let first = s.fire_schedules(t(35)).await.unwrap();
    assert_eq!(first.ticks.len(), 1, "{first:?}");
    let tick = &first.ticks[0];
    assert_eq!((tick.key.as_str(), tick.slot, tick.missed), ("beat", t(30), 2));
    let TickOutcome::Enqueued { job, created: true } = tick.outcome else {
        panic!("{tick:?}");
    };
    // Its job is still pending at 40: beat skips; hourly's slot at 3600 is
    // reached two minutes late and dropped.
    let second = s.fire_schedules(t(3720)).await.unwrap();
    let outcomes: Vec<_> = second.ticks.iter().map(|k| (k.key.as_str(), &k.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            ("beat", &TickOutcome::Skipped { unfinished: job, noted: true }),
            ("hourly", &TickOutcome::Dropped)
        ]
    );
    let before = s.schedules().await.unwrap();
    assert_eq!(
        before.iter().map(|x| x.key.as_str()).collect::<Vec<_>>(),
        ["beat", "hourly", "paused"]
    );
    let beat = &before[0];
    assert_eq!(beat.last_fire.as_ref().map(|f| (f.slot, f.job)), Some((t(30), job)));
    assert_eq!(beat.last_skipped, Some(t(3720)));
    assert_eq!(beat.last_missed.as_ref().map(|m| m.count), Some(368), "slots 40 to 3710");
    assert_eq!(before[1].last_missed.as_ref().map(|m| (m.count, m.latest)), Some((1, t(3600))));
    assert_eq!(before[2].paused, Some(ana));
    drop(s);

    let s = open(&path);
    assert_eq!(s.schedules().await.unwrap(), before);
    let again = s.fire_schedules(t(3720)).await.unwrap();
    assert!(again.ticks.is_empty(), "decided before the reopen: {again:?}");
    assert_eq!(again.next, Some(t(3730)));
    let j = s.get(job).await.unwrap();
    assert_eq!(
        (j.state, j.idempotency_key.as_deref()),
        (JobState::Pending, Some("beat@2026-12-01T00:00:30Z"))
    );
    let kinds: Vec<_> = s.events(job).await.unwrap().iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Pushed, EventKind::Scheduled, EventKind::TickSkipped]);

    // The job finished, the next slot fires a new one.
    s.cancel(job, t(3725)).await.unwrap();
    let next = s.fire_schedules(t(3730)).await.unwrap();
    assert_eq!(next.ticks.len(), 1, "{next:?}");
    let TickOutcome::Enqueued { job: second_job, created: true } = next.ticks[0].outcome else {
        panic!("{next:?}");
    };
    assert!(second_job > job);
    s.change_schedule("paused", &ScheduleChange::Remove, t(3731)).await.unwrap();
    drop(s);
    let s = open(&path);
    let keys: Vec<_> = s.schedules().await.unwrap().into_iter().map(|x| x.key).collect();
    assert_eq!(keys, ["beat", "hourly"]);
    s.check_integrity().unwrap();
}

/// A schedule row that does not decode, or holds another key than its
/// row's, is damage: listing and firing refuse it as corrupt, and nothing
/// is pushed.
#[tokio::test]
async fn a_damaged_schedule_row_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let s = open(&path);
    let stored = s.put_schedule(&every("beat", 10), t(0)).await.unwrap().schedule;
    let other = serde_json::to_string(&slothqueue_core::Schedule { key: "other".into(), ..stored })
        .unwrap();
    for json in ["not json", r#"{"key":"beat"}"#, other.as_str()] {
        let raw = Connection::open(&path).unwrap();
        raw.execute("UPDATE schedules SET schedule = ?1 WHERE key = 'beat'", [json]).unwrap();
        let err = s.fire_schedules(t(60)).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{json}: {err:?}");
        let err = s.schedules().await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{json}: {err:?}");
        let err = s.change_schedule("beat", &ScheduleChange::Resume, t(60)).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{json}: {err:?}");
    }
    assert_eq!(s.stats(t(60)).await.unwrap().pending, 0, "nothing fired");
}

/// Two handles on one file firing at once (as two runners would) decide
/// each slot once: the second reads the cursor the first wrote, under the
/// same write lock, and one job is enqueued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_decide_a_slot_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let (a, b) = (open(&path), open(&path));
    a.put_schedule(&every("beat", 10), t(0)).await.unwrap();
    for round in 1..=20 {
        let now = t(round * 10);
        let (x, y) = tokio::join!(a.fire_schedules(now), b.fire_schedules(now));
        let ticks: Vec<_> = x.unwrap().ticks.into_iter().chain(y.unwrap().ticks).collect();
        assert_eq!(ticks.len(), 1, "round {round}: {ticks:?}");
        assert_eq!(ticks[0].slot, now);
        let TickOutcome::Enqueued { job, created: true } = ticks[0].outcome else {
            panic!("round {round}: {ticks:?}");
        };
        // Finished before the next slot, so the next tick enqueues again.
        a.cancel(job, now).await.unwrap();
    }
    assert_eq!(a.stats(t(300)).await.unwrap().cancelled, 20);
}
