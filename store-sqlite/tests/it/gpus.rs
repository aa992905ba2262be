//! GPUs in a migrated file: v7 adds the `gpus` column in place, so a v6
//! queue opened by this build (the committed v6 fixture) must then keep a
//! job's GPU request and the holds of its running attempt across a
//! reopen, and its old jobs must read as asking for none.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use rusqlite::Connection;
use slothqueue_core::gpu::{Gpu, GpuLook, GpuOffer, GpuRequest, GpuSight};
use slothqueue_core::{ClaimRequest, ClockOnly, NewJob, Owner, Store, Timestamp};
use slothqueue_store_sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore};

struct TwoGpus;

impl GpuSight for TwoGpus {
    fn look(&self) -> GpuLook {
        let gpu = |i: u32| Gpu {
            index: i,
            uuid: format!("GPU-{i}"),
            name: "A100".into(),
            memory_used: 0,
            memory_total: 1 << 36,
            utilization: Some(0),
            processes: Vec::new(),
        };
        GpuLook { gpus: vec![gpu(0), gpu(1)], error: None }
    }
}

#[tokio::test]
async fn a_migrated_v6_file_keeps_gpu_requests_and_holds() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("v6.sqlite");
    fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v6.sqlite"), &copy).unwrap();
    let now = Timestamp::from_millis(1_700_000_300_000);
    let s = SqliteStore::open(&copy, SqliteOptions::default()).unwrap();
    assert!(s.get(1).await.unwrap().gpus.is_none(), "an old job asks for no GPU");
    let want = GpuRequest { count: 2, memory: Some(1 << 30) };
    let id = s.push(NewJob::shell("train", "/").gpus(want.clone()), now).await.unwrap().job.id;
    let mut owner = Owner::named("r1");
    owner.host = "box".into();
    let request = ClaimRequest::new(owner, Arc::new(ClockOnly))
        .filter(slothqueue_core::ClaimFilter { queues: vec!["default".into()], kinds: None })
        .gpus(GpuOffer::new(Arc::new(TwoGpus)))
        .refusing((1..id).collect::<Vec<_>>());
    let claimed = s.claim(&request, now).await.unwrap().expect("the GPU job");
    assert_eq!(claimed.job.id, id);
    drop(s);

    let version: u32 = Connection::open(&copy)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let s = SqliteStore::open(&copy, SqliteOptions::default()).unwrap();
    let job = s.get(id).await.unwrap();
    assert_eq!(job.gpus, Some(want));
    let held: Vec<String> = job.lease.unwrap().gpus.into_iter().map(|h| h.uuid).collect();
    assert_eq!(held, ["GPU-0", "GPU-1"]);
}
