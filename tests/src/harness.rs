//! The harness a scenario runs in, the injected liveness judge, and the
//! assertions shared by every scenario.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slothqueue_core::machine::replay;
use slothqueue_core::{
    ClaimFilter, ClaimRequest, Claimed, Event, EventKind, Fence, Job, JobId, JobState, Lease,
    ListFilter, ListOrder, Liveness, LivenessJudge, NewJob, Owner, Policy, Reclaim, Store,
    StoreError, Timestamp,
};

use crate::OpenFn;

/// Where every scenario's clock starts: 2023-11-14T22:13:20Z.
pub const START: Timestamp = Timestamp::from_millis(1_700_000_000_000);

/// A liveness judge a scenario controls: `Unknown` for every owner unless
/// marked `Alive` or `Gone`.
#[derive(Debug, Default)]
pub struct TestJudge {
    verdicts: Mutex<HashMap<String, Liveness>>,
}

impl TestJudge {
    /// From now on, answers `verdict` for leases held by `owner_id`.
    pub fn set(&self, owner_id: &str, verdict: Liveness) {
        self.verdicts.lock().expect("judge lock").insert(owner_id.to_owned(), verdict);
    }
}

impl LivenessJudge for TestJudge {
    fn judge(&self, lease: &Lease) -> Liveness {
        self.verdicts
            .lock()
            .expect("judge lock")
            .get(&lease.owner.id)
            .copied()
            .unwrap_or(Liveness::Unknown)
    }
}

/// Everything one scenario needs: a private temporary directory, the
/// backend's open function, the queue path inside it, a start time, a
/// controllable judge and the open store.
pub struct Harness {
    // Field order matters: the store handle is dropped before the directory.
    store: Mutex<Option<Arc<dyn Store>>>,
    open: OpenFn,
    path: PathBuf,
    policy: Policy,
    judge: Arc<TestJudge>,
    child_test: Option<String>,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Harness {
    /// A fresh directory with the queue `dir/queue` opened under the
    /// default [`Policy`]. `child_test` is the full name of the generated
    /// `__child_entry` test, when there is one.
    pub fn new(open: OpenFn, child_test: Option<String>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("slothqueue-conformance-")
            .tempdir()
            .expect("create a temporary directory");
        let path = dir.path().join("queue");
        let policy = Policy::default();
        let store = open(&path, policy.clone()).expect("open a fresh queue");
        Harness {
            store: Mutex::new(Some(store)),
            open,
            path,
            policy,
            judge: Arc::new(TestJudge::default()),
            child_test,
            dir,
        }
    }

    /// The store as the harness opened it.
    pub fn store(&self) -> Arc<dyn Store> {
        self.store.lock().expect("harness lock").clone().expect("the harness holds a store")
    }

    /// A second, independent handle on the same queue file.
    pub fn open_second(&self) -> Arc<dyn Store> {
        (self.open)(&self.path, self.policy.clone()).expect("open a second handle on the queue")
    }

    /// Closes the queue (dropping `old`, the caller's last handle, and the
    /// harness's own) and opens it again.
    pub fn reopen(&self, old: Arc<dyn Store>) -> Arc<dyn Store> {
        drop(old);
        let mut slot = self.store.lock().expect("harness lock");
        drop(slot.take());
        let store = (self.open)(&self.path, self.policy.clone()).expect("reopen the queue");
        *slot = Some(store.clone());
        store
    }

    /// A different, fresh queue in the same directory (for restore).
    pub fn open_other(&self, name: &str) -> Arc<dyn Store> {
        (self.open)(&self.dir.path().join(name), self.policy.clone()).expect("open another queue")
    }

    /// The backend's open function.
    pub fn open_fn(&self) -> OpenFn {
        self.open
    }

    /// The queue path every handle of this harness opens.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temporary directory (deleted with the harness).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The policy the queue was opened with.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The start of the scenario's time.
    pub fn start(&self) -> Timestamp {
        START
    }

    /// `d` after the start.
    pub fn at(&self, d: Duration) -> Timestamp {
        START.saturating_add(d)
    }

    /// The injected judge (every owner `Unknown` unless marked).
    pub fn judge(&self) -> Arc<TestJudge> {
        self.judge.clone()
    }

    /// Marks `owner_id` alive, gone or unknown for later claims and sweeps.
    pub fn set_liveness(&self, owner_id: &str, verdict: Liveness) {
        self.judge.set(owner_id, verdict);
    }

    /// The full name of the child-entry test to re-execute, when known.
    pub fn child_test(&self) -> Option<&str> {
        self.child_test.as_deref()
    }

    /// An owner with every field filled, so that a lease must round-trip
    /// all of them.
    pub fn owner(&self, id: &str) -> Owner {
        Owner {
            id: id.to_owned(),
            host: "conformance-host".to_owned(),
            boot_id: Some("6a0d6f1e-boot".to_owned()),
            pid: Some(4242),
            pid_start_time: Some(987_654),
            // Above i64::MAX, so a store that keeps it signed must do so bit for bit.
            pid_ns: Some(u64::MAX - 4_026_531_836),
        }
    }

    /// Claims any job for `owner_id` at `now` with the harness's judge.
    pub async fn claim(
        &self,
        store: &dyn Store,
        owner_id: &str,
        now: Timestamp,
    ) -> Option<Claimed> {
        self.claim_filtered(store, owner_id, &ClaimFilter::default(), now).await
    }

    /// Claims a job admitted by `filter`.
    pub async fn claim_filtered(
        &self,
        store: &dyn Store,
        owner_id: &str,
        filter: &ClaimFilter,
        now: Timestamp,
    ) -> Option<Claimed> {
        store
            .claim(&self.request(owner_id).filter(filter.clone()), now)
            .await
            .expect("claim must not error")
    }

    /// A claim request by `owner_id` for any job, judged by the harness's
    /// judge, taking gone owners' jobs at once ([`Reclaim::DeadOrExpired`]).
    pub fn request(&self, owner_id: &str) -> ClaimRequest {
        ClaimRequest::new(self.owner(owner_id), self.judge.clone()).reclaim(Reclaim::DeadOrExpired)
    }

    /// What a runner's sweep does: judges every running job's owner with
    /// the harness's judge and reclaims exactly the attempts found gone.
    pub async fn reclaim_gone(&self, store: &dyn Store, now: Timestamp) -> Vec<Job> {
        let running = ListFilter { state: Some(JobState::Running), ..ListFilter::default() };
        let attempts: Vec<(JobId, Fence)> = store
            .list(&running)
            .await
            .expect("list running jobs")
            .iter()
            .filter_map(|j| j.lease.as_ref().map(|l| (j, l)))
            .filter(|(_, l)| self.judge.judge(l) == Liveness::Gone)
            .map(|(j, l)| (j.id, l.fence()))
            .collect();
        store.reclaim_dead(&attempts, now).await.expect("reclaim_dead must not error")
    }

    /// Claims and insists on getting job `id`.
    pub async fn claim_expect(
        &self,
        store: &dyn Store,
        owner_id: &str,
        now: Timestamp,
        id: JobId,
    ) -> Claimed {
        let c = self.claim(store, owner_id, now).await.unwrap_or_else(|| {
            panic!("{owner_id} expected to claim job #{id} at {now}, got nothing")
        });
        assert_eq!(c.job.id, id, "{owner_id} claimed the wrong job at {now}");
        c
    }

    /// Pushes and returns the created job, checking the push reported it created.
    pub async fn push(&self, store: &dyn Store, new: NewJob, now: Timestamp) -> Job {
        let pushed = store.push(new, now).await.expect("push must succeed");
        assert!(pushed.created, "a push without a key creates a job");
        assert_eq!(pushed.superseded, None);
        pushed.job
    }

    /// Pushes a shell job with an idempotency key, insisting it is new.
    pub async fn push_keyed(&self, store: &dyn Store, cmd: &str, key: &str, now: Timestamp) -> Job {
        let pushed = store.push(shell(cmd).key(key), now).await.expect("push must succeed");
        assert!(pushed.created, "the first push of key {key} creates a job");
        pushed.job
    }
}

/// `n` seconds.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A shell job running `command` in `/tmp`.
pub fn shell(command: &str) -> NewJob {
    NewJob::shell(command, "/tmp")
}

/// The place and cause of a batch's refusal: `err` must be
/// [`StoreError::InBatch`] (`push_many` and `restore_many` name the element
/// they refused, from 0, so a caller can name the line), and the cause must
/// be `InvalidInput`. `what` names the case in the failure message.
pub fn refused_in_batch<T: std::fmt::Debug>(
    out: &Result<T, StoreError>,
    what: &str,
) -> (usize, String) {
    match out {
        Err(StoreError::InBatch { index, error }) => match &**error {
            StoreError::InvalidInput(m) => (*index, m.clone()),
            other => panic!("{what}: refused with {other:?}, not InvalidInput"),
        },
        other => panic!("{what}: expected InBatch {{ index, InvalidInput }}, got {other:?}"),
    }
}

/// Job `id` as the store has it now.
pub async fn job(store: &dyn Store, id: JobId) -> Job {
    store.get(id).await.unwrap_or_else(|e| panic!("get #{id}: {e}"))
}

/// The kinds of job `id`'s trail, oldest first.
pub async fn event_kinds(store: &dyn Store, id: JobId) -> Vec<EventKind> {
    store.events(id).await.expect("events of an existing job").iter().map(|e| e.kind).collect()
}

/// The job and its trail as bytes, to prove an operation changed nothing.
pub async fn snapshot(store: &dyn Store, id: JobId) -> Vec<u8> {
    let job = store.get(id).await.expect("get an existing job");
    let events = store.events(id).await.expect("events of an existing job");
    serde_json::to_vec(&(job, events)).expect("serialize a job")
}

/// Checks that job `id`'s trail is well formed and replays to its state:
/// it starts with `pushed`, every event names the job, time never goes
/// backwards, and [`replay`] ends in the job's current state.
pub async fn assert_trail_consistent(store: &dyn Store, id: JobId) {
    let job = store.get(id).await.expect("get an existing job");
    let events = store.events(id).await.expect("events of an existing job");
    check_trail(&job, &events);
}

fn check_trail(job: &Job, events: &[Event]) {
    let id = job.id;
    assert_eq!(events.first().map(|e| e.kind), Some(EventKind::Pushed), "#{id}: trail {events:?}");
    assert!(events.iter().all(|e| e.job_id == id), "#{id}: foreign event in {events:?}");
    assert!(events.windows(2).all(|w| w[0].at <= w[1].at), "#{id}: time goes back in {events:?}");
    assert_eq!(
        replay(events),
        Some(job.state),
        "#{id}: trail {:?} does not replay to {}",
        events.iter().map(|e| e.kind).collect::<Vec<_>>(),
        job.state
    );
    assert_eq!(
        job.lease.is_some(),
        job.state == slothqueue_core::JobState::Running,
        "#{id}: lease"
    );
}

/// [`assert_trail_consistent`] for every job in the store.
pub async fn assert_all_trails_consistent(store: &dyn Store) {
    let jobs = store
        .list(&ListFilter { order: ListOrder::Oldest, ..ListFilter::default() })
        .await
        .expect("list every job");
    for job in &jobs {
        let events = store.events(job.id).await.expect("events of a listed job");
        check_trail(job, &events);
    }
}
