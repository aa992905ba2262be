//! `tests/data/v3.redb` is a queue written by schema version 3 (by
//! `write_v3_fixture`, run once by hand on the last v3 build): a job in
//! every state, a held job with a child waiting on it, a paused lane and a
//! limited one, keys (one of them the key a schedule's tick would give)
//! and a runner record. Every later build must open a copy of it, migrate
//! it (schema 4 adds the `schedules` table), and read back exactly this,
//! forever.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::schedule::tick_key;
use slothqueue_core::{
    CatchUp, ClaimFilter, ClaimRequest, Completion, EventKind, Failure, JobState, LaneChange,
    LaneScope, ListFilter, ListOrder, Liveness, LivenessJudge, NewJob, NewSchedule, Overlap, Owner,
    RunnerActivity, RunnerRecord, ScheduleChange, Spec, Stamp, Store, StoreError, Tick,
    TickOutcome, Timestamp,
};
use slothqueue_store_redb::{RedbOptions, RedbStore, SCHEMA_VERSION};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn at(s: u64) -> Timestamp {
    T.saturating_add(Duration::from_secs(s))
}

fn owner(id: &str) -> Owner {
    Owner {
        id: id.to_owned(),
        host: "fixture-host".to_owned(),
        boot_id: Some("boot-3".to_owned()),
        pid: Some(4444),
        pid_start_time: Some(345_678),
        pid_ns: None,
    }
}

struct Unknown;
impl LivenessJudge for Unknown {
    fn judge(&self, _: &slothqueue_core::Lease) -> Liveness {
        Liveness::Unknown
    }
}

fn sh(cmd: &str) -> NewJob {
    NewJob::shell(cmd, "/tmp")
}

fn ana() -> Stamp {
    Stamp::new("ana@laptop", at(8))
}

pub(crate) fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v3.redb")
}

/// Writes the fixture when `SLOTHQUEUE_WRITE_V3_FIXTURE=1` is set (once,
/// by hand, on a schema-3 build: `SLOTHQUEUE_WRITE_V3_FIXTURE=1 cargo test
/// -p slothqueue-store-redb --test it v3_fixture::write_v3_fixture`);
/// otherwise does nothing, so the committed file is never rewritten by
/// accident (a later build would write its own schema).
#[tokio::test(flavor = "multi_thread")]
async fn write_v3_fixture() {
    if std::env::var_os("SLOTHQUEUE_WRITE_V3_FIXTURE").is_none() {
        return;
    }
    let path = fixture();
    let _ = std::fs::remove_file(&path);
    let s = RedbStore::open(&path, RedbOptions::default()).unwrap();
    let claim = |who: &'static str, queue: &'static str, now: Timestamp| {
        let s = &s;
        async move {
            let only = ClaimFilter { queues: vec![queue.to_owned()], kinds: None };
            let request = ClaimRequest::new(owner(who), Arc::new(Unknown)).filter(only);
            s.claim(&request, now).await.unwrap().unwrap()
        }
    };
    s.push(sh("echo later").key("nightly").not_before(at(100)), T).await.unwrap(); // #1
    s.push(sh("echo running").priority(9), T).await.unwrap(); // #2
    let c = claim("w1", "default", T).await;
    s.heartbeat(2, &c.fence, Some(77), at(1)).await.unwrap();
    s.push(sh("echo done").priority(8), at(1)).await.unwrap(); // #3
    let c = claim("w1", "default", at(1)).await;
    let ok = Completion { result: Some("ok".into()), exit_code: Some(0) };
    s.complete(3, &c.fence, ok, at(2)).await.unwrap();
    s.push(sh("echo failed").queue("build").max_attempts(1), at(2)).await.unwrap(); // #4
    let c = claim("w2", "build", at(2)).await;
    let boom = Failure { error: "boom".into(), exit_code: Some(2), permanent: false };
    s.fail(4, &c.fence, boom, at(3)).await.unwrap();
    s.push(sh("echo held parent").queue("build").key("parent"), at(3)).await.unwrap(); // #5
    s.hold(5, Stamp::new("ana@laptop", at(4)), at(4)).await.unwrap();
    s.push(sh("echo child").queue("build").after(5), at(4)).await.unwrap(); // #6
    s.push(sh("echo cancelled"), at(5)).await.unwrap(); // #7
    s.cancel(7, at(5)).await.unwrap();
    s.push(sh("echo backup a").queue("backups"), at(6)).await.unwrap(); // #8
    s.push(sh("echo backup b").queue("backups").priority(2), at(6)).await.unwrap(); // #9
    // The key the tick at `at(60)` of an every-40s schedule `report` made
    // at `at(20)` gives its job: that tick finds this job, not a new one.
    let report = sh("echo report").key(tick_key("report", at(60)));
    s.push(report, at(7)).await.unwrap(); // #10
    let backups = LaneScope::Queue("backups".into());
    s.change_lane(&backups, &LaneChange::Pause(ana())).await.unwrap();
    s.change_lane(&LaneScope::Queue("build".into()), &LaneChange::Limit(2)).await.unwrap();
    s.put_runner(&RunnerRecord {
        owner: owner("w1"),
        queues: vec![],
        kinds: None,
        refused: Vec::new(),
        started_at: T,
        updated_at: at(8),
        activity: RunnerActivity::Running { job: 2, also: Vec::new() },
        slots: 1,
        running: Vec::new(),
        gpus: None,
    })
    .await
    .unwrap();
    s.check_integrity().unwrap();
}

/// The schema version and table names of a closed queue file, read with
/// plain redb.
fn layout(path: &Path) -> (u64, Vec<String>) {
    use redb::{ReadableDatabase, TableHandle};
    const META: redb::TableDefinition<'static, &str, u64> =
        redb::TableDefinition::new("slothqueue_meta");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let names = txn.list_tables().unwrap().map(|t| t.name().to_owned()).collect();
    let version = txn.open_table(META).unwrap().get("schema_version").unwrap().unwrap().value();
    (version, names)
}

fn copy(dir: &Path) -> PathBuf {
    let path = dir.join("v3.redb");
    std::fs::copy(fixture(), &path).unwrap();
    path
}

fn every_40s() -> NewSchedule {
    NewSchedule {
        key: "report".into(),
        spec: Spec::every(Duration::from_secs(40)).unwrap(),
        zone: "UTC".into(),
        catch_up: CatchUp::Once,
        overlap: Overlap::Skip,
        job: sh("echo report"),
    }
}

fn enqueued(key: &str, slot: Timestamp, job: i64, created: bool) -> Tick {
    Tick { key: key.into(), slot, missed: 0, outcome: TickOutcome::Enqueued { job, created } }
}

#[tokio::test(flavor = "multi_thread")]
async fn v3_fixture_migrates_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy(dir.path());
    let (version, names) = layout(&path);
    assert_eq!(version, 3);
    assert!(names.iter().any(|n| n == "lanes"), "{names:?}");
    assert!(!names.iter().any(|n| n == "schedules"), "{names:?}");

    let s = RedbStore::open(&path, RedbOptions::default()).unwrap();
    s.check_integrity().unwrap();
    use EventKind as E;
    use JobState as S;
    /// Id, state, queue, command, attempts, parents waited on, trail.
    type Row = (i64, S, &'static str, &'static str, u32, u32, &'static [E]);
    let expected: [Row; 10] = [
        (1, S::Pending, "default", "echo later", 0, 0, &[E::Pushed]),
        (2, S::Running, "default", "echo running", 1, 0, &[E::Pushed, E::Claimed]),
        (3, S::Done, "default", "echo done", 1, 0, &[E::Pushed, E::Claimed, E::Completed]),
        (4, S::Failed, "build", "echo failed", 1, 0, &[E::Pushed, E::Claimed, E::Failed]),
        (5, S::Pending, "build", "echo held parent", 0, 0, &[E::Pushed, E::Held]),
        (6, S::Pending, "build", "echo child", 0, 1, &[E::Pushed]),
        (7, S::Cancelled, "default", "echo cancelled", 0, 0, &[E::Pushed, E::Cancelled]),
        (8, S::Pending, "backups", "echo backup a", 0, 0, &[E::Pushed]),
        (9, S::Pending, "backups", "echo backup b", 0, 0, &[E::Pushed]),
        (10, S::Pending, "default", "echo report", 0, 0, &[E::Pushed]),
    ];
    let jobs =
        s.list(&ListFilter { order: ListOrder::Oldest, ..ListFilter::default() }).await.unwrap();
    assert_eq!(jobs.len(), expected.len());
    for (job, (id, state, queue, command, attempts, parents, kinds)) in jobs.iter().zip(expected) {
        assert_eq!((job.id, job.state, job.queue.as_str()), (id, state, queue), "#{id}");
        assert_eq!((job.attempts, job.pending_parents), (attempts, parents), "#{id}");
        assert_eq!(job.command().unwrap_or(""), command, "#{id}");
        assert_eq!(job.is_held(), id == 5, "#{id}");
        let trail: Vec<E> = s.events(id).await.unwrap().iter().map(|e| e.kind).collect();
        assert_eq!(trail, kinds, "#{id}");
    }
    assert_eq!(s.get(5).await.unwrap().held, Some(Stamp::new("ana@laptop", at(4))));
    assert_eq!(s.dependents(5).await.unwrap(), [6]);
    let lease = s.get(2).await.unwrap().lease.unwrap();
    assert_eq!((lease.owner, lease.attempt, lease.child_pgid), (owner("w1"), 1, Some(77)));
    assert_eq!(s.get(1).await.unwrap().idempotency_key.as_deref(), Some("nightly"));
    let tick_of_60 = tick_key("report", at(60));
    assert_eq!(s.get(10).await.unwrap().idempotency_key, Some(tick_of_60.clone()));

    let stats = s.stats(at(10)).await.unwrap();
    assert_eq!(
        (stats.pending, stats.waiting_on_parents, stats.held, stats.running, stats.due_now),
        (6, 1, 1, 1, 3)
    );
    assert_eq!((stats.done, stats.failed, stats.cancelled), (1, 1, 1));
    assert_eq!(stats.next_due, Some(at(100)));
    let lanes = s.lanes().await.unwrap();
    assert_eq!(lanes.pause_of("backups"), Some(&ana()));
    assert_eq!((lanes.of("build").limit, lanes.pause_of("build")), (2, None));
    let runners = s.runners().await.unwrap();
    assert_eq!(runners.len(), 1);
    assert_eq!(runners[0].activity, RunnerActivity::Running { job: 2, also: Vec::new() });
    assert!(s.schedules().await.unwrap().is_empty(), "a v3 queue has no schedules");
    slothqueue_conformance::assert_all_trails_consistent(&s).await;

    // Now with schedules: `report`'s first tick finds the v3 job holding
    // its key (the same job: nothing new, no `scheduled` event); its next
    // is skipped while that job is pending; once it is cancelled, a tick
    // makes a new job with the next id.
    let put = s.put_schedule(&every_40s(), at(20)).await.unwrap();
    assert!(put.created);
    assert_eq!(s.schedules().await.unwrap(), [put.schedule]);
    let none = s.fire_schedules(at(59)).await.unwrap();
    assert_eq!((none.ticks, none.next), (vec![], Some(at(60))));
    let first = s.fire_schedules(at(60)).await.unwrap();
    assert_eq!(first.ticks, [enqueued("report", at(60), 10, false)]);
    assert_eq!(first.next, Some(at(100)));
    assert_eq!(s.events(10).await.unwrap().len(), 1, "an existing job gets no `scheduled`");
    let skipped = s.fire_schedules(at(100)).await.unwrap();
    assert_eq!(skipped.ticks[0].outcome, TickOutcome::Skipped { unfinished: 10, noted: true });
    let trail: Vec<E> = s.events(10).await.unwrap().iter().map(|e| e.kind).collect();
    assert_eq!(trail, [E::Pushed, E::TickSkipped]);
    s.cancel(10, at(101)).await.unwrap();
    let fired = s.fire_schedules(at(140)).await.unwrap();
    assert_eq!(fired.ticks, [enqueued("report", at(140), 11, true)]);
    let job = s.get(11).await.unwrap();
    assert_eq!(job.idempotency_key, Some(tick_key("report", at(140))));
    let trail: Vec<E> = s.events(11).await.unwrap().iter().map(|e| e.kind).collect();
    assert_eq!(trail, [E::Pushed, E::Scheduled]);
    s.check_integrity().unwrap();
    let paused = s.change_schedule("report", &ScheduleChange::Pause(ana()), at(141)).await;
    assert_eq!(paused.unwrap().and_then(|p| p.paused), Some(ana()));
    let stored = s.schedules().await.unwrap();
    assert_eq!(stored[0].last_fire.as_ref().map(|f| (f.slot, f.job)), Some((at(140), 11)));
    assert_eq!(stored[0].last_skipped, Some(at(100)));
    drop(s);

    let (version, names) = layout(&path);
    assert_eq!(version, u64::from(SCHEMA_VERSION));
    assert!(names.iter().any(|n| n == "schedules"), "schedules missing: {names:?}");
    let s = RedbStore::open(&path, RedbOptions::default()).unwrap();
    assert_eq!(s.schedules().await.unwrap(), stored, "the schedule is stored as it was");
    assert_eq!(s.list(&ListFilter::default()).await.unwrap().len(), 11);
    // Still paused: nothing fires. Resumed, the slots passed meanwhile are
    // not run; the next one is, once.
    let none = s.fire_schedules(at(180)).await.unwrap();
    assert_eq!((none.ticks, none.next), (vec![], None));
    s.change_schedule("report", &ScheduleChange::Resume, at(190)).await.unwrap();
    s.cancel(11, at(190)).await.unwrap();
    let fired = s.fire_schedules(at(220)).await.unwrap();
    assert_eq!(fired.ticks, [enqueued("report", at(220), 12, true)]);
    assert!(s.fire_schedules(at(220)).await.unwrap().ticks.is_empty());
    s.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn v3_fixture_reads_through_a_read_only_open_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let s = RedbStore::open_read_only(&path, RedbOptions::default()).unwrap();
    let stats = s.stats(at(10)).await.unwrap();
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.held), (6, 1, 1));
    assert!(s.schedules().await.unwrap().is_empty());
    let err = s.put_schedule(&every_40s(), at(20)).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::ReadOnlyFilesystem),
        "{err:?}"
    );
    drop(s);
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the migration was in memory only");
}
