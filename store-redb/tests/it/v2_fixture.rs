//! `tests/data/v2.redb` is a queue written by schema version 2 (by
//! `write_v2_fixture`, run once by hand on the last v2 build): a job in
//! every state, jobs waiting on parents and one cancelled with its failed
//! parent, two queues, keys and a runner record. Every later build must
//! open a copy of it, migrate it (through schema 3, lanes and holds, to the
//! current one), and read back exactly this, forever.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{
    ClaimFilter, ClaimRequest, Completion, EventKind, Failure, JobState, LaneChange, LaneScope,
    ListFilter, ListOrder, Liveness, LivenessJudge, NewJob, Owner, RunnerActivity, RunnerRecord,
    Stamp, Store, Timestamp,
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
        boot_id: Some("boot-2".to_owned()),
        pid: Some(4343),
        pid_start_time: Some(123_456),
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

pub(crate) fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v2.redb")
}

/// Writes the fixture when `SLOTHQUEUE_WRITE_V2_FIXTURE=1` is set (once,
/// by hand, on a schema-2 build: `SLOTHQUEUE_WRITE_V2_FIXTURE=1 cargo test
/// -p slothqueue-store-redb --test it v2_fixture::write_v2_fixture`);
/// otherwise does nothing, so the committed file is never rewritten by
/// accident (a later build would write its own schema).
#[tokio::test(flavor = "multi_thread")]
async fn write_v2_fixture() {
    if std::env::var_os("SLOTHQUEUE_WRITE_V2_FIXTURE").is_none() {
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
    let boom = Failure { error: "boom".into(), exit_code: Some(2), permanent: false };
    s.push(sh("echo later").key("nightly").not_before(at(100)), T).await.unwrap(); // #1
    s.push(sh("echo running").priority(9), T).await.unwrap(); // #2
    let c = claim("w1", "default", T).await;
    s.heartbeat(2, &c.fence, Some(77), at(1)).await.unwrap();
    s.push(sh("echo done").priority(8), at(1)).await.unwrap(); // #3
    let c = claim("w1", "default", at(1)).await;
    let ok = Completion { result: Some("ok".into()), exit_code: Some(0) };
    s.complete(3, &c.fence, ok, at(2)).await.unwrap();
    s.push(sh("echo parent").queue("build").key("parent"), at(2)).await.unwrap(); // #4
    s.push(sh("echo child").queue("build").after(4).after(3), at(2)).await.unwrap(); // #5
    s.push(sh("echo grandchild").queue("build").after(5), at(2)).await.unwrap(); // #6
    let doomed = sh("echo doomed").queue("build").priority(5).max_attempts(1);
    s.push(doomed, at(3)).await.unwrap(); // #7
    s.push(sh("echo after-doomed").queue("build").after(7), at(3)).await.unwrap(); // #8
    let c = claim("w2", "build", at(3)).await;
    assert_eq!(c.job.id, 7, "priority 5 first");
    // #7 fails for good and takes #8 with it.
    s.fail(7, &c.fence, boom, at(4)).await.unwrap();
    let c = claim("w2", "build", at(5)).await;
    assert_eq!(c.job.id, 4, "the parent, released once");
    s.release(4, &c.fence, at(5)).await.unwrap();
    s.push(sh("echo backup a").queue("backups"), at(6)).await.unwrap(); // #9
    s.push(sh("echo backup b").queue("backups").priority(2), at(6)).await.unwrap(); // #10
    s.push(sh("echo cancelled"), at(7)).await.unwrap(); // #11
    s.cancel(11, at(7)).await.unwrap();
    s.put_runner(&RunnerRecord {
        owner: owner("w1"),
        queues: vec![],
        kinds: None,
        refused: Vec::new(),
        started_at: T,
        updated_at: at(7),
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
    let path = dir.join("v2.redb");
    std::fs::copy(fixture(), &path).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn v2_fixture_migrates_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy(dir.path());
    let (version, names) = layout(&path);
    assert_eq!(version, 2);
    assert!(
        !names.iter().any(|n| ["lanes", "held", "schedules"].contains(&n.as_str())),
        "{names:?}"
    );

    let s = RedbStore::open(&path, RedbOptions::default()).unwrap();
    s.check_integrity().unwrap();
    use EventKind as E;
    use JobState as S;
    /// Id, state, queue, command, attempts, parents waited on, trail.
    type Row = (i64, S, &'static str, &'static str, u32, u32, &'static [E]);
    let expected: [Row; 11] = [
        (1, S::Pending, "default", "echo later", 0, 0, &[E::Pushed]),
        (2, S::Running, "default", "echo running", 1, 0, &[E::Pushed, E::Claimed]),
        (3, S::Done, "default", "echo done", 1, 0, &[E::Pushed, E::Claimed, E::Completed]),
        (4, S::Pending, "build", "echo parent", 0, 0, &[E::Pushed, E::Claimed, E::Released]),
        (5, S::Pending, "build", "echo child", 0, 1, &[E::Pushed]),
        (6, S::Pending, "build", "echo grandchild", 0, 1, &[E::Pushed]),
        (7, S::Failed, "build", "echo doomed", 1, 0, &[E::Pushed, E::Claimed, E::Failed]),
        (8, S::Cancelled, "build", "echo after-doomed", 0, 1, &[E::Pushed, E::Cancelled]),
        (9, S::Pending, "backups", "echo backup a", 0, 0, &[E::Pushed]),
        (10, S::Pending, "backups", "echo backup b", 0, 0, &[E::Pushed]),
        (11, S::Cancelled, "default", "echo cancelled", 0, 0, &[E::Pushed, E::Cancelled]),
    ];
    let jobs =
        s.list(&ListFilter { order: ListOrder::Oldest, ..ListFilter::default() }).await.unwrap();
    assert_eq!(jobs.len(), expected.len());
    for (job, (id, state, queue, command, attempts, parents, kinds)) in jobs.iter().zip(expected) {
        assert_eq!((job.id, job.state, job.queue.as_str()), (id, state, queue), "#{id}");
        assert_eq!((job.attempts, job.pending_parents), (attempts, parents), "#{id}");
        assert_eq!(job.command().unwrap_or(""), command, "#{id}");
        assert_eq!(job.held, None, "#{id}");
        let trail: Vec<E> = s.events(id).await.unwrap().iter().map(|e| e.kind).collect();
        assert_eq!(trail, kinds, "#{id}");
    }
    assert_eq!(s.get(8).await.unwrap().cancelled_by, Some(7));
    assert_eq!(s.get(5).await.unwrap().after, [4, 3]);
    assert_eq!(s.dependents(4).await.unwrap(), [5]);
    assert_eq!(s.dependents(3).await.unwrap(), [5]);
    assert_eq!(s.dependents(7).await.unwrap(), [8]);
    let lease = s.get(2).await.unwrap().lease.unwrap();
    assert_eq!((lease.owner, lease.attempt, lease.child_pgid), (owner("w1"), 1, Some(77)));
    assert_eq!(s.get(1).await.unwrap().idempotency_key.as_deref(), Some("nightly"));

    let stats = s.stats(at(10)).await.unwrap();
    assert_eq!(
        (stats.pending, stats.waiting_on_parents, stats.held, stats.running, stats.due_now),
        (6, 2, 0, 1, 3)
    );
    assert_eq!((stats.done, stats.failed, stats.cancelled), (1, 1, 2));
    assert_eq!(stats.next_due, Some(at(100)));
    assert!(s.lanes().await.unwrap().is_default());
    assert!(s.schedules().await.unwrap().is_empty());
    let counts = s.queue_counts(at(10)).await.unwrap();
    let brief: Vec<(&str, u64, u64, u64, u64, u64)> = counts
        .iter()
        .map(|c| (c.queue.as_str(), c.pending, c.due, c.held, c.waiting_on_parents, c.running))
        .collect();
    assert_eq!(
        brief,
        [("backups", 2, 2, 0, 0, 0), ("build", 3, 1, 0, 2, 0), ("default", 1, 0, 0, 0, 1)]
    );
    let runners = s.runners().await.unwrap();
    assert_eq!(runners.len(), 1);
    assert_eq!(runners[0].activity, RunnerActivity::Running { job: 2, also: Vec::new() });
    slothqueue_conformance::assert_all_trails_consistent(&s).await;

    // Still a working queue, now with lanes: hold the parent (its chain
    // waits on), pause backups; nothing is claimable until the hold is
    // released; then the chain runs in order.
    let ana = Stamp::new("ana@laptop", at(11));
    assert!(s.hold(4, ana.clone(), at(11)).await.unwrap().is_held());
    let backups = LaneScope::Queue("backups".into());
    s.change_lane(&backups, &LaneChange::Pause(ana.clone())).await.unwrap();
    let any = || ClaimRequest::new(owner("w9"), Arc::new(Unknown));
    assert!(s.claim(&any(), at(12)).await.unwrap().is_none());
    let stats = s.stats(at(12)).await.unwrap();
    assert_eq!((stats.held, stats.due_now), (1, 2), "backups' jobs are due; their lane holds them");
    s.check_integrity().unwrap();
    drop(s);

    let (version, names) = layout(&path);
    assert_eq!(version, u64::from(SCHEMA_VERSION));
    for table in ["lanes", "held", "schedules"] {
        assert!(names.iter().any(|n| n == table), "{table} missing: {names:?}");
    }
    let s = RedbStore::open(&path, RedbOptions::default()).unwrap();
    assert_eq!(s.lanes().await.unwrap().pause_of("backups"), Some(&ana), "the pause is stored");
    assert!(s.get(4).await.unwrap().is_held(), "the hold is stored");
    s.release_hold(4, "ana@laptop", at(13)).await.unwrap();
    let mut taken = Vec::new();
    while let Some(c) = s.claim(&any(), at(14)).await.unwrap() {
        taken.push(c.job.id);
        s.complete(c.job.id, &c.fence, Completion::default(), at(14)).await.unwrap();
    }
    assert_eq!(taken, [4, 5, 6], "backups stays paused; #1 is not due yet");
    s.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn v2_fixture_reads_through_a_read_only_open_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let s = RedbStore::open_read_only(&path, RedbOptions::default()).unwrap();
    let stats = s.stats(at(10)).await.unwrap();
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.held), (6, 2, 0));
    assert!(s.lanes().await.unwrap().is_default());
    assert!(s.schedules().await.unwrap().is_empty());
    assert_eq!(s.queue_counts(at(10)).await.unwrap().len(), 3);
    drop(s);
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the migration was in memory only");
}
