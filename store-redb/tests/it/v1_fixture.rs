//! `tests/data/v1.redb` is a queue written by schema version 1 (by
//! `write_v1_fixture`, run once by hand): a job in every state, with
//! events, keys, a purged id and a runner record. Every later build must
//! open a copy of it and read back exactly this, forever; a schema change
//! migrates it.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{
    ClaimRequest, Completion, EventKind, Failure, JobState, ListFilter, ListOrder, Liveness,
    LivenessJudge, NewJob, Owner, PurgeFilter, RunnerActivity, RunnerRecord, Store, StoreError,
    Timestamp,
};
use slothqueue_store_redb::{RedbOptions, RedbStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn at(s: u64) -> Timestamp {
    T.saturating_add(Duration::from_secs(s))
}

fn owner(id: &str) -> Owner {
    Owner {
        id: id.to_owned(),
        host: "fixture-host".to_owned(),
        boot_id: Some("boot-1".to_owned()),
        pid: Some(4242),
        pid_start_time: Some(987_654),
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

/// Writes the fixture when `SLOTHQUEUE_WRITE_V1_FIXTURE=1` is set (once,
/// by hand: `SLOTHQUEUE_WRITE_V1_FIXTURE=1 cargo test -p
/// slothqueue-store-redb --test it v1_fixture::write_v1_fixture`); otherwise
/// does nothing, so the committed file is never rewritten by accident.
#[tokio::test(flavor = "multi_thread")]
async fn write_v1_fixture() {
    if std::env::var_os("SLOTHQUEUE_WRITE_V1_FIXTURE").is_none() {
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1.redb");
    let _ = std::fs::remove_file(&path);
    let s = RedbStore::open(&path, RedbOptions::default()).unwrap();
    let claim = |who: &'static str, now: Timestamp| {
        let s = &s;
        async move {
            s.claim(&ClaimRequest::new(owner(who), Arc::new(Unknown)), now).await.unwrap().unwrap()
        }
    };
    let delayed = sh("echo pending-later")
        .key("nightly")
        .priority(4)
        .max_runtime(Some(Duration::from_secs(2)));
    s.push(delayed.not_before(at(100)), T).await.unwrap(); // #1
    s.push(sh("echo running").priority(9), T).await.unwrap(); // #2
    let c = claim("w1", T).await;
    s.heartbeat(2, &c.fence, Some(77), at(1)).await.unwrap();
    s.push(sh("echo done").priority(8), at(1)).await.unwrap(); // #3
    let c = claim("w1", at(1)).await;
    let ok = Completion { result: Some("ok".into()), exit_code: Some(0) };
    s.complete(3, &c.fence, ok, at(2)).await.unwrap();
    s.push(sh("echo failed").priority(7).max_attempts(1), at(2)).await.unwrap(); // #4
    let c = claim("w1", at(2)).await;
    let boom = Failure { error: "boom".into(), exit_code: Some(2), permanent: false };
    s.fail(4, &c.fence, boom.clone(), at(3)).await.unwrap();
    s.push(sh("echo cancel-requested").priority(6), at(3)).await.unwrap(); // #5
    claim("w2", at(3)).await;
    s.cancel(5, at(4)).await.unwrap();
    s.push(sh("echo cancelled"), at(4)).await.unwrap(); // #6
    s.cancel(6, at(5)).await.unwrap();
    s.push(sh("echo retrying").priority(5), at(5)).await.unwrap(); // #7
    let c = claim("w3", at(5)).await;
    s.fail(7, &c.fence, boom.clone(), at(6)).await.unwrap();
    s.push(sh("echo report").key("report"), at(6)).await.unwrap(); // #8
    let v2 = s.push(sh("echo report-v2").key("report"), at(7)).await.unwrap(); // #9
    assert_eq!(v2.superseded, Some(8));
    s.push(sh("echo retried").priority(3).max_attempts(1), at(7)).await.unwrap(); // #10
    let c = claim("w1", at(7)).await;
    assert_eq!(c.job.id, 10);
    s.fail(10, &c.fence, boom, at(8)).await.unwrap();
    s.retry(10, at(9)).await.unwrap();
    s.push(sh("echo purged"), T).await.unwrap(); // #11
    s.cancel(11, T).await.unwrap();
    assert_eq!(
        s.purge(&PurgeFilter { include_pending: false, older_than: Some(at(1)) }).await.unwrap(),
        [11]
    );
    let mail =
        NewJob::new("mail", serde_json::json!({ "to": "ops@example.invalid" })).queue("lane2");
    s.push(mail, at(10)).await.unwrap(); // #12
    s.put_runner(&RunnerRecord {
        owner: owner("w1"),
        queues: vec!["default".into()],
        kinds: None,
        refused: Vec::new(),
        started_at: T,
        updated_at: at(9),
        activity: RunnerActivity::Running { job: 2, also: Vec::new() },
        slots: 1,
        running: Vec::new(),
        gpus: None,
    })
    .await
    .unwrap();
    s.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn v1_fixture_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.redb");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1.redb"), &path).unwrap();
    let s = RedbStore::open(&path, RedbOptions::default()).unwrap();
    s.check_integrity().unwrap();

    use EventKind as E;
    use JobState as S;
    let expected: [(i64, S, &str, u32, &[E]); 11] = [
        (1, S::Pending, "echo pending-later", 0, &[E::Pushed]),
        (2, S::Running, "echo running", 1, &[E::Pushed, E::Claimed]),
        (3, S::Done, "echo done", 1, &[E::Pushed, E::Claimed, E::Completed]),
        (4, S::Failed, "echo failed", 1, &[E::Pushed, E::Claimed, E::Failed]),
        (5, S::Running, "echo cancel-requested", 1, &[E::Pushed, E::Claimed, E::CancelRequested]),
        (6, S::Cancelled, "echo cancelled", 0, &[E::Pushed, E::Cancelled]),
        (7, S::Pending, "echo retrying", 1, &[E::Pushed, E::Claimed, E::Failed]),
        (8, S::Cancelled, "echo report", 0, &[E::Pushed, E::Superseded]),
        (9, S::Pending, "echo report-v2", 0, &[E::Pushed]),
        (10, S::Pending, "echo retried", 0, &[E::Pushed, E::Claimed, E::Failed, E::Retried]),
        (12, S::Pending, "", 0, &[E::Pushed]),
    ];
    let jobs =
        s.list(&ListFilter { order: ListOrder::Oldest, ..ListFilter::default() }).await.unwrap();
    assert_eq!(jobs.len(), expected.len());
    for (job, (id, state, command, attempts, kinds)) in jobs.iter().zip(expected) {
        assert_eq!((job.id, job.state, job.attempts), (id, state, attempts), "#{id}");
        assert_eq!(job.command().unwrap_or(""), command, "#{id}");
        let trail: Vec<E> = s.events(id).await.unwrap().iter().map(|e| e.kind).collect();
        assert_eq!(trail, kinds, "#{id}");
    }
    assert!(matches!(s.get(11).await, Err(StoreError::NotFound(11))));

    let j1 = s.get(1).await.unwrap();
    assert_eq!(
        (j1.idempotency_key.as_deref(), j1.priority, j1.not_before),
        (Some("nightly"), 4, at(100))
    );
    assert_eq!(j1.max_runtime, Some(Duration::from_secs(2)));
    let lease = s.get(2).await.unwrap().lease.unwrap();
    assert_eq!((lease.owner, lease.attempt, lease.child_pgid), (owner("w1"), 1, Some(77)));
    assert_eq!(lease.until, at(61));
    let j3 = s.get(3).await.unwrap();
    assert_eq!(
        (j3.result.as_deref(), j3.exit_code, j3.finished_at),
        (Some("ok"), Some(0), Some(at(2)))
    );
    let j4 = s.get(4).await.unwrap();
    assert_eq!((j4.last_error.as_deref(), j4.exit_code), (Some("boom"), Some(2)));
    assert!(s.get(5).await.unwrap().cancel_requested);
    assert_eq!(s.get(7).await.unwrap().not_before, at(8));
    assert_eq!(s.get(8).await.unwrap().idempotency_key, None);
    assert_eq!(s.get(9).await.unwrap().idempotency_key.as_deref(), Some("report"));
    let j12 = s.get(12).await.unwrap();
    assert_eq!((j12.kind.as_str(), j12.queue.as_str()), ("mail", "lane2"));
    assert_eq!(j12.payload, serde_json::json!({ "to": "ops@example.invalid" }));

    let stats = s.stats(at(10)).await.unwrap();
    assert_eq!(
        (stats.pending, stats.running, stats.done, stats.failed, stats.cancelled, stats.due_now),
        (5, 2, 1, 1, 2, 4)
    );
    assert_eq!(stats.next_due, Some(at(100)));
    assert_eq!(s.next_due().await.unwrap(), Some(at(7)), "#9 is the earliest pending");
    let runners = s.runners().await.unwrap();
    assert_eq!(runners.len(), 1);
    assert_eq!(runners[0].activity, RunnerActivity::Running { job: 2, also: Vec::new() });
    assert!(s.schedules().await.unwrap().is_empty(), "migrated with no schedules");
    slothqueue_conformance::assert_all_trails_consistent(&s).await;

    // Still a working queue: the key still deduplicates, ids go on past
    // the purged one, and claims take the due jobs in order.
    let dup = s.push(sh("echo report-v2").key("report"), at(11)).await.unwrap();
    assert_eq!((dup.created, dup.job.id), (false, 9));
    assert_eq!(s.push(sh("echo new"), at(11)).await.unwrap().job.id, 13);
    let c =
        s.claim(&ClaimRequest::new(owner("w9"), Arc::new(Unknown)), at(11)).await.unwrap().unwrap();
    assert_eq!(c.job.id, 7, "priority 5 first");
    s.check_integrity().unwrap();
}
