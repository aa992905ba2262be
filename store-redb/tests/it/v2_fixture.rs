//! `tests/data/v2.redb` is a queue written by schema version 2 (by
//! `write_v2_fixture`, run once by hand on the last v2 build): a job in
//! every state, jobs waiting on parents and one cancelled with its failed
//! parent, two queues, keys and a runner record. Every later build must
//! open a copy of it, migrate it, and read back exactly this, forever.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{
    ClaimFilter, ClaimRequest, Completion, Failure, Liveness, LivenessJudge, NewJob, Owner,
    RunnerActivity, RunnerRecord, Store, Timestamp,
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
    let boom = Failure { error: "boom".into(), exit_code: Some(2) };
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
        started_at: T,
        updated_at: at(7),
        activity: RunnerActivity::Running { job: 2, also: Vec::new() },
    })
    .await
    .unwrap();
    s.check_integrity().unwrap();
}
