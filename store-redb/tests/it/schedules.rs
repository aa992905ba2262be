//! Schedules on redb (schema 4): what this backend's `schedules` table
//! could get wrong. A schedule is stored as it is (cursor, last fire,
//! pause) and seen so by every handle on the file, by a read-only open
//! and after a reopen; a second handle firing at the same `now` decides
//! nothing again; a row that does not decode (or holds another key's
//! schedule) is damage, for every operation and the integrity check; and a
//! fire is one transaction: when one schedule's tick fails, the ticks
//! already decided for the others are rolled back with it. The rule itself
//! is the core's and the shared contract the conformance suite's.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::Path;
use std::time::Duration;

use slothqueue_core::schedule::{self, PutPlan};
use slothqueue_core::{
    CatchUp, EventKind, NewJob, NewSchedule, Overlap, ScheduleChange, Spec, Stamp, Store,
    StoreError, TickOutcome, Timestamp,
};
use slothqueue_store_redb::{RedbOptions, RedbStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn at(s: u64) -> Timestamp {
    T.saturating_add(Duration::from_secs(s))
}

fn open(path: &Path) -> RedbStore {
    RedbStore::open(path, RedbOptions::default()).unwrap()
}

fn every(key: &str, secs: u64, overlap: Overlap) -> NewSchedule {
    NewSchedule {
        key: key.into(),
        spec: Spec::every(Duration::from_secs(secs)).unwrap(),
        zone: "UTC".into(),
        catch_up: CatchUp::Once,
        overlap,
        job: NewJob::shell(format!("echo {key}"), "/tmp"),
    }
}

fn nightly() -> NewSchedule {
    NewSchedule {
        key: "nightly".into(),
        spec: Spec::cron("0 3 * * *").unwrap(),
        zone: "Europe/Berlin".into(),
        catch_up: CatchUp::None,
        overlap: Overlap::Queue,
        job: NewJob::shell("backup", "/srv"),
    }
}

/// Writes `row` under `key` in the `schedules` table of the closed queue
/// at `path`, as a tool outside slothqueue might.
fn write_row(path: &Path, key: &str, row: &[u8]) {
    const SCHEDULES: redb::TableDefinition<'static, &str, &[u8]> =
        redb::TableDefinition::new("schedules");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(SCHEDULES).unwrap().insert(key, row).unwrap();
    txn.commit().unwrap();
}

fn is_corrupt(err: &StoreError) -> bool {
    matches!(err, StoreError::Corrupt { .. })
}

#[tokio::test(flavor = "multi_thread")]
async fn schedules_are_stored_as_they_are_for_every_handle_and_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let a = open(&path);
    a.put_schedule(&every("tick", 2, Overlap::Skip), T).await.unwrap();
    a.put_schedule(&nightly(), T).await.unwrap();
    let b = open(&path);
    let keys: Vec<String> = b.schedules().await.unwrap().into_iter().map(|s| s.key).collect();
    assert_eq!(keys, ["nightly", "tick"], "key order, seen by another handle");

    // One handle decides the slot; the other, at the same now, reads its
    // cursor and decides nothing.
    let fired = b.fire_schedules(at(2)).await.unwrap();
    assert_eq!(fired.ticks.len(), 1);
    assert_eq!(fired.ticks[0].outcome, TickOutcome::Enqueued { job: 1, created: true });
    assert!(a.fire_schedules(at(2)).await.unwrap().ticks.is_empty());
    let trail: Vec<EventKind> = a.events(1).await.unwrap().iter().map(|e| e.kind).collect();
    assert_eq!(trail, [EventKind::Pushed, EventKind::Scheduled]);
    let ana = Stamp::new("ana@laptop", at(3));
    a.change_schedule("nightly", &ScheduleChange::Pause(ana.clone()), at(3)).await.unwrap();
    let stored = a.schedules().await.unwrap();
    assert_eq!(stored[0].paused, Some(ana));
    assert_eq!(stored[1].last_fire.as_ref().map(|f| (f.slot, f.job)), Some((at(2), 1)));
    a.check_integrity().unwrap();
    drop((a, b));

    let bytes = std::fs::read(&path).unwrap();
    let ro = RedbStore::open_read_only(&path, RedbOptions::default()).unwrap();
    assert_eq!(ro.schedules().await.unwrap(), stored);
    let err = ro.change_schedule("tick", &ScheduleChange::Remove, at(4)).await.unwrap_err();
    assert!(matches!(&err, StoreError::Io { .. }), "{err:?}");
    drop(ro);
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "a read-only look wrote");

    let s = open(&path);
    assert_eq!(s.schedules().await.unwrap(), stored, "as they were, after a reopen");
    assert_eq!(s.change_schedule("tick", &ScheduleChange::Remove, at(4)).await.unwrap(), None);
    let keys: Vec<String> = s.schedules().await.unwrap().into_iter().map(|s| s.key).collect();
    assert_eq!(keys, ["nightly"]);
    assert_eq!(s.get(1).await.unwrap().id, 1, "a removed schedule's jobs stay");

    // Restored elsewhere, they read back as exported.
    let other = open(&dir.path().join("other.redb"));
    other.restore_schedules(stored.clone()).await.unwrap();
    assert_eq!(other.schedules().await.unwrap(), stored);
    other.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_row_that_does_not_decode_is_damage() {
    let PutPlan::Insert(theirs) =
        schedule::create(&every("other", 2, Overlap::Skip), None, T).unwrap()
    else {
        panic!("a new schedule")
    };
    let rows: [(&str, Vec<u8>); 2] =
        [("tick", b"{\"spec\": 3}".to_vec()), ("tick", serde_json::to_vec(&theirs).unwrap())];
    for (key, row) in rows {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.redb");
        drop(open(&path));
        write_row(&path, key, &row);
        let s = open(&path);
        let errors = [
            s.schedules().await.unwrap_err(),
            s.fire_schedules(at(2)).await.unwrap_err(),
            s.change_schedule(key, &ScheduleChange::Resume, at(2)).await.unwrap_err(),
            s.put_schedule(&every(key, 2, Overlap::Skip), at(2)).await.unwrap_err(),
            s.check_integrity().unwrap_err(),
        ];
        for err in errors {
            assert!(is_corrupt(&err), "{err:?}");
            assert!(err.to_string().contains("tick"), "{err}");
        }
    }
}

/// `a` enqueues at every tick (overlap queue); `b`'s previous job has a
/// row that does not decode. The fire that reaches `b` fails, and `a`'s
/// tick decided before it in the same fire is not written either: no job,
/// cursor where it was.
#[tokio::test(flavor = "multi_thread")]
async fn a_fire_is_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let s = open(&path);
    s.put_schedule(&every("a", 2, Overlap::Queue), T).await.unwrap();
    s.put_schedule(&every("b", 2, Overlap::Skip), T).await.unwrap();
    let first = s.fire_schedules(at(2)).await.unwrap();
    let jobs: Vec<TickOutcome> = first.ticks.into_iter().map(|t| t.outcome).collect();
    assert_eq!(
        jobs,
        [
            TickOutcome::Enqueued { job: 1, created: true },
            TickOutcome::Enqueued { job: 2, created: true }
        ]
    );
    let before = s.schedules().await.unwrap();
    {
        // Job #2's row garbled by another program, the store still open.
        const JOBS: redb::TableDefinition<'static, i64, &[u8]> = redb::TableDefinition::new("jobs");
        let mut b = redb::Builder::new();
        b.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
        let db = b.open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(JOBS).unwrap().insert(2, b"not json".as_slice()).unwrap();
        txn.commit().unwrap();
    }
    let err = s.fire_schedules(at(4)).await.unwrap_err();
    assert!(is_corrupt(&err), "{err:?}");
    assert!(matches!(s.get(3).await, Err(StoreError::NotFound(3))), "a's tick was rolled back");
    assert_eq!(s.schedules().await.unwrap(), before);
    assert_eq!(s.stats(at(4)).await.unwrap().pending, 2);
}
