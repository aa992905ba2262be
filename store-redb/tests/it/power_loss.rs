//! RELIABILITY S06, power loss: the queue runs on an image that keeps what
//! a disk would keep, the bytes as of the last `sync_data`, and the power
//! is cut after the k-th sync, for every k over a workload. The durable
//! image must then open (redb repairs it), pass both integrity checks, and
//! hold exactly the state after some operation at or after the last one
//! acknowledged before the cut: nothing acknowledged is lost, nothing is
//! half-written. The workload includes a hold and lane changes (schema 3),
//! and the state compared includes the lanes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redb::{BackendError, StorageBackend};
use slothqueue_core::{
    ClaimFilter, ClaimRequest, Completion, Failure, LaneChange, LaneScope, Lease, ListFilter,
    ListOrder, Liveness, LivenessJudge, NewJob, Owner, PurgeFilter, RunnerActivity, RunnerRecord,
    Stamp, Store, Timestamp,
};
use slothqueue_store_redb::{RedbOptions, RedbStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

#[derive(Debug)]
struct State {
    live: Vec<u8>,
    durable: Vec<u8>,
    syncs: u64,
    /// Syncs after this many are lost: the power is cut.
    cut_after: u64,
}

/// A disk image private to one handle, so every lock is granted.
#[derive(Clone, Debug)]
struct Image(Arc<Mutex<State>>);

impl Image {
    fn new(bytes: Vec<u8>, cut_after: u64) -> Self {
        Image(Arc::new(Mutex::new(State {
            live: bytes.clone(),
            durable: bytes,
            syncs: 0,
            cut_after,
        })))
    }
    fn syncs(&self) -> u64 {
        self.0.lock().unwrap().syncs
    }
    fn live(&self) -> Vec<u8> {
        self.0.lock().unwrap().live.clone()
    }
    fn durable(&self) -> Vec<u8> {
        self.0.lock().unwrap().durable.clone()
    }
}

impl StorageBackend for Image {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.0.lock().unwrap().live.len() as u64)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let st = self.0.lock().unwrap();
        let start = offset as usize;
        let end = start + out.len();
        if end > st.live.len() {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "past the end"));
        }
        out.copy_from_slice(&st.live[start..end]);
        Ok(())
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.lock().unwrap().live.resize(len as usize, 0);
        Ok(())
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        let mut st = self.0.lock().unwrap();
        st.syncs += 1;
        if st.syncs <= st.cut_after {
            st.durable = st.live.clone();
        }
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut st = self.0.lock().unwrap();
        let start = offset as usize;
        if st.live.len() < start + data.len() {
            st.live.resize(start + data.len(), 0);
        }
        st.live[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn try_lock_range(&self, _: Bound<u64>, _: Bound<u64>) -> Result<bool, BackendError> {
        Ok(true)
    }
    fn try_lock_shared_range(&self, _: Bound<u64>, _: Bound<u64>) -> Result<bool, BackendError> {
        Ok(true)
    }
    fn lock_range(&self, _: Bound<u64>, _: Bound<u64>) -> Result<(), BackendError> {
        Ok(())
    }
    fn lock_shared_range(&self, _: Bound<u64>, _: Bound<u64>) -> Result<(), BackendError> {
        Ok(())
    }
    fn unlock_range(&self, _: Bound<u64>, _: Bound<u64>) -> Result<(), BackendError> {
        Ok(())
    }
    fn query_lock_range(&self, _: Bound<u64>, _: Bound<u64>) -> Result<bool, BackendError> {
        Ok(false)
    }
}

struct Judge;
impl LivenessJudge for Judge {
    fn judge(&self, lease: &Lease) -> Liveness {
        if lease.owner.id == "gone" { Liveness::Gone } else { Liveness::Unknown }
    }
}

fn open(image: &Image) -> RedbStore {
    RedbStore::open_backend(image.clone(), Path::new("image"), RedbOptions::default()).unwrap()
}

fn at(s: u64) -> Timestamp {
    T.saturating_add(Duration::from_secs(s))
}

fn sh(cmd: &str) -> NewJob {
    NewJob::shell(cmd, "/tmp")
}

/// Everything the queue holds, comparable.
async fn everything(s: &RedbStore) -> String {
    let jobs =
        s.list(&ListFilter { order: ListOrder::Oldest, ..ListFilter::default() }).await.unwrap();
    let mut out = format!("{:?}\n", s.stats(at(30)).await.unwrap());
    for j in jobs {
        let events = s.events(j.id).await.unwrap();
        out.push_str(&format!("{j:?}\n{events:?}\n"));
    }
    out.push_str(&format!("{:?}\n", s.lanes().await.unwrap()));
    out.push_str(&format!("{:?}", s.runners().await.unwrap()));
    out
}

/// Runs the workload, returning after each step (and after the open) the
/// sync count when it returned and the state it left.
async fn workload(image: &Image) -> Vec<(u64, String)> {
    let s = open(image);
    let mut steps = vec![(image.syncs(), everything(&s).await)];
    let f = ClaimFilter::default();
    macro_rules! step {
        ($e:expr) => {{
            let r = $e;
            steps.push((image.syncs(), everything(&s).await));
            r
        }};
    }
    step!(s.push(sh("echo a").key("k1"), T).await.unwrap());
    step!(s.push(sh("echo b").priority(5), T).await.unwrap());
    step!(s.push_many(vec![sh("echo c"), sh("echo d"), sh("echo e")], T).await.unwrap());
    let b = step!(
        s.claim(&ClaimRequest::new(Owner::named("w1"), Arc::new(Judge)).filter(f.clone()), at(1))
            .await
            .unwrap()
            .unwrap()
    );
    step!(s.heartbeat(b.job.id, &b.fence, Some(9), at(2)).await.unwrap());
    step!(s.complete(b.job.id, &b.fence, Completion::default(), at(3)).await.unwrap());
    let a = step!(
        s.claim(&ClaimRequest::new(Owner::named("w1"), Arc::new(Judge)).filter(f.clone()), at(4))
            .await
            .unwrap()
            .unwrap()
    );
    let boom = Failure { error: "boom".into(), exit_code: Some(1), permanent: false };
    step!(s.fail(a.job.id, &a.fence, boom, at(5)).await.unwrap());
    step!(s.cancel(3, at(6)).await.unwrap());
    step!(s.push(sh("echo a2").key("k1"), at(7)).await.unwrap());
    let d = step!(
        s.claim(&ClaimRequest::new(Owner::named("gone"), Arc::new(Judge)).filter(f.clone()), at(8))
            .await
            .unwrap()
            .unwrap()
    );
    step!(s.reclaim_dead(&[(d.job.id, d.fence.clone())], at(9)).await.unwrap());
    let d2 = step!(
        s.claim(&ClaimRequest::new(Owner::named("w2"), Arc::new(Judge)).filter(f.clone()), at(10))
            .await
            .unwrap()
            .unwrap()
    );
    assert_eq!(d.job.id, d2.job.id);
    step!(s.release(d2.job.id, &d2.fence, at(11)).await.unwrap());
    let h = step!(s.push(sh("echo held"), at(11)).await.unwrap());
    step!(s.hold(h.job.id, Stamp::new("ana", at(11)), at(11)).await.unwrap());
    let default = LaneScope::Queue("default".into());
    step!(s.change_lane(&default, &LaneChange::Limit(1)).await.unwrap());
    step!(
        s.change_lane(&LaneScope::All, &LaneChange::Pause(Stamp::new("ana", at(12))))
            .await
            .unwrap()
    );
    step!(s.purge(&PurgeFilter::default()).await.unwrap());
    let record = RunnerRecord {
        owner: Owner::named("w2"),
        queues: vec![],
        kinds: None,
        refused: Vec::new(),
        started_at: T,
        updated_at: at(12),
        activity: RunnerActivity::Idle { until: None },
        slots: 1,
        running: Vec::new(),
        gpus: None,
    };
    step!(s.put_runner(&record).await.unwrap());
    drop(s);
    steps
}

#[tokio::test(flavor = "multi_thread")]
async fn every_acknowledged_commit_survives_a_power_cut_at_any_sync() {
    // A queue created and closed cleanly, as `open` leaves a new file.
    let base = {
        let image = Image::new(Vec::new(), u64::MAX);
        drop(open(&image));
        image.live()
    };
    let reference = workload(&Image::new(base.clone(), u64::MAX)).await;
    let total = Image::new(base.clone(), u64::MAX).syncs() + reference.last().unwrap().0 + 4;
    let states: Vec<&String> = reference.iter().map(|(_, s)| s).collect();
    for cut in 0..=total {
        let image = Image::new(base.clone(), cut);
        let steps = workload(&image).await;
        assert_eq!(
            steps.iter().map(|(_, s)| s).collect::<Vec<_>>(),
            states,
            "the workload is deterministic"
        );
        // The last step that returned with all its syncs before the cut.
        let acked = steps.iter().rposition(|(syncs, _)| *syncs <= cut).unwrap_or(0);
        let recovered = Image::new(image.durable(), u64::MAX);
        let s = RedbStore::open_backend(recovered, Path::new("image"), RedbOptions::default())
            .unwrap_or_else(|e| {
                panic!("cut after sync {cut}: the durable image does not open: {e}")
            });
        s.check_integrity().unwrap_or_else(|e| panic!("cut after sync {cut}: {e}"));
        let now = everything(&s).await;
        let matched = states.iter().position(|st| **st == now);
        assert!(
            matched.is_some_and(|m| m >= acked),
            "cut after sync {cut}: the state is step {matched:?}, but step {acked} was acknowledged"
        );
    }
}
