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
    ClaimFilter, ClaimRequest, Completion, Failure, LaneChange, LaneScope, Liveness,
    LivenessJudge, NewJob, Owner, RunnerActivity, RunnerRecord, Stamp, Store, Timestamp,
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
    let boom = Failure { error: "boom".into(), exit_code: Some(2) };
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
        started_at: T,
        updated_at: at(8),
        activity: RunnerActivity::Running { job: 2, also: Vec::new() },
    })
    .await
    .unwrap();
    s.check_integrity().unwrap();
}
