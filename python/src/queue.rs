//! `NativeQueue`: one queue (a file or a `postgres://` URL) opened through
//! [`slothqueue::open`], each method one call of the library's
//! [`Store`], and `NativeChanges`, the queue's change notifications
//! ([`QueueWatch`]) for a worker that follows it.
//!
//! What a Python call names by an owner's string, the store wants as a
//! [`Fence`] (owner and attempt): the fence of each claim made through
//! this queue is kept until the job is settled, so a write after the job
//! was taken back (even by an owner of the same name) is refused as the
//! store refuses a stale fence. A job claimed elsewhere is looked up.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use pyo3::prelude::*;
use serde::Deserialize;
use slothqueue::core::job::Parent;
use slothqueue::core::machine::{ClaimRequest, Completion, Failure, Settlement};
use slothqueue::core::{ClockOnly, Fence, LivenessJudge, ManualClock};
use slothqueue::runner::wait::{WaitTarget, wait};
use slothqueue::runner::watch::QueueChanges;
use slothqueue::runner::{ProcJudge, QueueWatch, this_process_owner};
use slothqueue::{
    ClaimFilter, Clock, JobId, JobState, ListFilter, ListOrder, NewJob, OpenOptions, Owner, Store,
    StoreError, SystemClock, Timestamp,
};

use crate::clock::NativeClock;
use crate::error::{self, Error, InvalidInputError};
use crate::{block, runtime};

/// This process's identity with `id` as its name: a claim records host,
/// boot, pid and the pid's start time, so that another process on this
/// host takes the job back at once when this one dies.
///
/// The identity is read from `/proc` once per process (again in a child
/// after a `fork`, whose pid differs), not at every claim.
fn owner_named(id: &str) -> Owner {
    static ME: Mutex<Option<(u32, Owner)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut me = lock(&ME);
    let identity = match &*me {
        Some((known, owner)) if *known == pid => owner.clone(),
        _ => {
            let owner = this_process_owner();
            *me = Some((pid, owner.clone()));
            owner
        }
    };
    Owner { id: id.to_owned(), ..identity }
}

/// A name unique to this process and its lifetime (host, pid, start time,
/// a random part): a worker's owner when none is given.
#[pyfunction]
pub fn default_owner() -> String {
    this_process_owner().id
}

/// One job of a push, as the Python layer sends it (JSON).
#[derive(Deserialize)]
struct PushSpec {
    kind: String,
    payload: serde_json::Value,
    queue: String,
    priority: i32,
    key: Option<String>,
    #[serde(default)]
    after: Vec<Parent>,
    max_attempts: Option<u32>,
    max_runtime_ms: Option<u64>,
    delay_ms: Option<u64>,
}

impl PushSpec {
    fn into_job(self, now: Timestamp) -> NewJob {
        let mut job =
            NewJob::new(self.kind, self.payload).queue(self.queue).priority(self.priority);
        job.idempotency_key = self.key;
        job.after = self.after;
        job.max_attempts = self.max_attempts;
        job.max_runtime = self.max_runtime_ms.map(Duration::from_millis);
        job.not_before = self.delay_ms.map(|d| now.saturating_add(Duration::from_millis(d)));
        job
    }
}

/// A claim's fence, and the handle it was made through.
type Held = (Fence, Arc<dyn Store>);

/// A store handle and the lease its claims hand out.
struct Handle {
    lease_ms: u64,
    store: Arc<dyn Store>,
}

/// A queue, open (`slothqueue.Queue` wraps it).
#[pyclass(frozen, module = "slothqueue._native")]
pub struct NativeQueue {
    db: PathBuf,
    clock: Arc<dyn Clock>,
    judge: Arc<dyn LivenessJudge>,
    /// The first is the default lease's; another is opened for each other
    /// lease a claim asks for (the lease is a store handle's setting, so
    /// that its heartbeats extend it by the same time). Empty once closed.
    handles: Mutex<Vec<Handle>>,
    /// The fence of each claim made here and not yet settled, and the
    /// handle it was made through.
    fences: Mutex<HashMap<JobId, Held>>,
    watch: OnceLock<Arc<QueueWatch>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn json<T: serde::Serialize>(value: &T) -> PyResult<String> {
    serde_json::to_string(value).map_err(|e| Error::new_err(format!("cannot encode: {e}")))
}

fn millis(seconds: f64, what: &str) -> PyResult<u64> {
    if !(seconds.is_finite() && seconds >= 0.0) {
        return Err(InvalidInputError::new_err(format!("{what} must be a time of 0 s or more")));
    }
    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "checked above")]
    Ok((seconds * 1000.0).round() as u64)
}

impl NativeQueue {
    fn open_handle(&self, lease_ms: u64) -> PyResult<Arc<dyn Store>> {
        let options = OpenOptions {
            lease_ttl: Some(Duration::from_millis(lease_ms)),
            ..OpenOptions::default()
        };
        slothqueue::open(&self.db, options).map_err(error::open)
    }

    /// The handle whose claims hand out `lease_ms`, opened on first use.
    fn handle(&self, py: Python<'_>, lease_ms: Option<u64>) -> PyResult<Arc<dyn Store>> {
        let mut handles = lock(&self.handles);
        let Some(first) = handles.first() else {
            return Err(Error::new_err("the queue is closed"));
        };
        let lease_ms = lease_ms.unwrap_or(first.lease_ms);
        if let Some(h) = handles.iter().find(|h| h.lease_ms == lease_ms) {
            return Ok(h.store.clone());
        }
        let store = py.detach(|| self.open_handle(lease_ms))?;
        handles.push(Handle { lease_ms, store: store.clone() });
        Ok(store)
    }

    fn store(&self, py: Python<'_>) -> PyResult<Arc<dyn Store>> {
        self.handle(py, None)
    }

    /// The fence (and handle) of `owner`'s attempt at `id`: the claim's,
    /// when it was made here; else the job's lease when `owner` holds it;
    /// else a fence the store will refuse as it refuses any stale one.
    fn fence(&self, py: Python<'_>, id: JobId, owner: &str) -> PyResult<(Fence, Arc<dyn Store>)> {
        if let Some((fence, store)) = lock(&self.fences).get(&id) {
            if fence.owner == owner {
                return Ok((fence.clone(), store.clone()));
            }
        }
        let store = self.store(py)?;
        let job = block(py, store.get(id))?.map_err(error::store)?;
        let fence = match &job.lease {
            Some(lease) if lease.owner.id == owner => lease.fence(),
            _ => Fence { owner: owner.to_owned(), attempt: job.attempts },
        };
        Ok((fence, store))
    }

    /// Forgets the fence of `id` once its attempt is over: settled, or
    /// found taken back.
    fn settle<T>(&self, id: JobId, outcome: Result<T, StoreError>) -> PyResult<T> {
        if matches!(outcome, Ok(_) | Err(StoreError::LeaseLost { .. })) {
            lock(&self.fences).remove(&id);
        }
        outcome.map_err(error::store)
    }

    /// A claim's lease in milliseconds, when it names one.
    fn lease_ms(&self, lease: Option<f64>) -> PyResult<Option<u64>> {
        let lease_ms = lease.map(|l| millis(l, "lease")).transpose()?;
        if lease_ms == Some(0) {
            return Err(InvalidInputError::new_err("a lease must be longer than 0 s"));
        }
        Ok(lease_ms)
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

#[pymethods]
impl NativeQueue {
    /// Opens (or creates) the queue `db` as the CLI does; with `clock`,
    /// time is that manual clock's and leases are judged by it alone
    /// (a test's time is not the machine's), else by the system clock and
    /// this host's processes (a live owner is never robbed, a dead one is
    /// taken back at once).
    #[new]
    #[pyo3(signature = (db, clock=None, lease=60.0))]
    fn new(py: Python<'_>, db: PathBuf, clock: Option<&NativeClock>, lease: f64) -> PyResult<Self> {
        let lease_ms = millis(lease, "lease")?;
        if lease_ms == 0 {
            return Err(InvalidInputError::new_err("a lease must be longer than 0 s"));
        }
        let (clock, judge): (Arc<dyn Clock>, Arc<dyn LivenessJudge>) = match clock {
            Some(c) => (c.inner.clone() as Arc<ManualClock>, Arc::new(ClockOnly)),
            None => (Arc::new(SystemClock), Arc::new(ProcJudge::new())),
        };
        let queue = NativeQueue {
            db,
            clock,
            judge,
            handles: Mutex::new(Vec::new()),
            fences: Mutex::new(HashMap::new()),
            watch: OnceLock::new(),
        };
        let store = py.detach(|| queue.open_handle(lease_ms))?;
        lock(&queue.handles).push(Handle { lease_ms, store });
        Ok(queue)
    }

    /// The queue's time, in milliseconds since the epoch.
    fn now_ms(&self) -> i64 {
        self.now().as_millis()
    }

    /// Pushes the jobs of `specs` (a JSON list) all or nothing; returns a
    /// JSON list of `{job, created, superseded}`. One job is a `push`.
    fn push_many(&self, py: Python<'_>, specs: &str) -> PyResult<String> {
        let specs: Vec<PushSpec> = serde_json::from_str(specs)
            .map_err(|e| InvalidInputError::new_err(format!("a job to push: {e}")))?;
        let now = self.now();
        let mut jobs: Vec<NewJob> = specs.into_iter().map(|s| s.into_job(now)).collect();
        let store = self.store(py)?;
        let pushed = if jobs.len() == 1 {
            let job = jobs.remove(0);
            block(py, store.push(job, now))?.map(|p| vec![p])
        } else {
            block(py, store.push_many(jobs, now))?
        };
        json(&pushed.map_err(error::store)?)
    }

    /// Claims the best due job for `owner`; JSON `{job, reclaimed_from}`
    /// or `None`.
    #[pyo3(signature = (owner, kinds=None, queues=None, lease=None))]
    fn claim(
        &self,
        py: Python<'_>,
        owner: &str,
        kinds: Option<Vec<String>>,
        queues: Option<Vec<String>>,
        lease: Option<f64>,
    ) -> PyResult<Option<String>> {
        let store = self.handle(py, self.lease_ms(lease)?)?;
        let filter = ClaimFilter { queues: queues.unwrap_or_default(), kinds };
        let request = ClaimRequest::new(owner_named(owner), self.judge.clone()).filter(filter);
        let claimed = block(py, store.claim(&request, self.now()))?.map_err(error::store)?;
        let Some(claimed) = claimed else { return Ok(None) };
        lock(&self.fences).insert(claimed.job.id, (claimed.fence.clone(), store));
        let reclaimed_from = claimed.reclaimed_from.map(|o| o.id);
        json(&serde_json::json!({ "job": claimed.job, "reclaimed_from": reclaimed_from })).map(Some)
    }

    /// Extends `owner`'s lease on `id`: JSON `{lease_until,
    /// cancel_requested}`, or `None` when the lease is no longer this
    /// owner's (nothing changed).
    fn heartbeat(&self, py: Python<'_>, id: JobId, owner: &str) -> PyResult<Option<String>> {
        let (fence, store) = self.fence(py, id, owner)?;
        match block(py, store.heartbeat(id, &fence, None, self.now()))? {
            Ok(ack) => json(&serde_json::json!({
                "lease_until": ack.lease_until,
                "cancel_requested": ack.cancel_requested,
            }))
            .map(Some),
            Err(StoreError::LeaseLost { .. }) => Ok(None),
            Err(e) => Err(error::store(e)),
        }
    }

    /// Completes `owner`'s attempt at `id` with `result`; the job as JSON.
    #[pyo3(signature = (id, owner, result=None))]
    fn complete(
        &self,
        py: Python<'_>,
        id: JobId,
        owner: &str,
        result: Option<String>,
    ) -> PyResult<String> {
        let (fence, store) = self.fence(py, id, owner)?;
        let done = Completion { result, exit_code: None };
        let job = self.settle(id, block(py, store.complete(id, &fence, done, self.now()))?)?;
        json(&job)
    }

    /// Fails `owner`'s attempt at `id`: retried after the core's backoff
    /// while attempts are left (never when `permanent`); the job as JSON.
    #[pyo3(signature = (id, owner, error, permanent=false))]
    fn fail(
        &self,
        py: Python<'_>,
        id: JobId,
        owner: &str,
        error: String,
        permanent: bool,
    ) -> PyResult<String> {
        let (fence, store) = self.fence(py, id, owner)?;
        let failure = Failure { error, exit_code: None, permanent };
        let job = self.settle(id, block(py, store.fail(id, &fence, failure, self.now()))?)?;
        json(&job)
    }

    /// Settles `owner`'s attempt at `id` (failed with `error`, else
    /// completed with `result`) and claims the next job as `claim` would,
    /// in one transaction: one durable commit from one job to the next.
    /// JSON `{settled, next}`.
    #[pyo3(signature = (id, owner, error=None, result=None, permanent=false, kinds=None, queues=None, lease=None))]
    #[expect(clippy::too_many_arguments, reason = "Python's keyword arguments")]
    fn settle_and_claim(
        &self,
        py: Python<'_>,
        id: JobId,
        owner: &str,
        error: Option<String>,
        result: Option<String>,
        permanent: bool,
        kinds: Option<Vec<String>>,
        queues: Option<Vec<String>>,
        lease: Option<f64>,
    ) -> PyResult<String> {
        let (fence, _) = self.fence(py, id, owner)?;
        let store = self.handle(py, self.lease_ms(lease)?)?;
        let settlement = match error {
            Some(error) => Settlement::Fail(Failure { error, exit_code: None, permanent }),
            None => Settlement::Complete(Completion { result, exit_code: None }),
        };
        let filter = ClaimFilter { queues: queues.unwrap_or_default(), kinds };
        let request = ClaimRequest::new(owner_named(owner), self.judge.clone()).filter(filter);
        let outcome =
            block(py, store.settle_and_claim(id, &fence, settlement, &request, self.now()))?;
        let both = self.settle(id, outcome.map(|both| (both.settled.clone(), both)))?;
        let next = both.1.next.map(|claimed| {
            lock(&self.fences).insert(claimed.job.id, (claimed.fence, store.clone()));
            claimed.job
        });
        json(&serde_json::json!({ "settled": both.0, "next": next }))
    }

    /// Gives `owner`'s attempt at `id` back, not charged; the job as JSON.
    fn release(&self, py: Python<'_>, id: JobId, owner: &str) -> PyResult<String> {
        let (fence, store) = self.fence(py, id, owner)?;
        let job = self.settle(id, block(py, store.release(id, &fence, self.now()))?)?;
        json(&job)
    }

    /// Cancels a pending job, or asks a running one's owner to stop.
    fn cancel(&self, py: Python<'_>, id: JobId) -> PyResult<String> {
        let store = self.store(py)?;
        json(&block(py, store.cancel(id, self.now()))?.map_err(error::store)?)
    }

    /// Puts a failed or cancelled job back to pending, attempts reset.
    fn retry(&self, py: Python<'_>, id: JobId) -> PyResult<String> {
        let store = self.store(py)?;
        json(&block(py, store.retry(id, self.now()))?.map_err(error::store)?)
    }

    /// One job as JSON.
    fn get(&self, py: Python<'_>, id: JobId) -> PyResult<String> {
        let store = self.store(py)?;
        json(&block(py, store.get(id))?.map_err(error::store)?)
    }

    /// The job's trail, oldest first, as JSON.
    fn events(&self, py: Python<'_>, id: JobId) -> PyResult<String> {
        let store = self.store(py)?;
        json(&block(py, store.events(id))?.map_err(error::store)?)
    }

    /// Jobs, newest first unless `order` says `oldest` or `due_first`.
    #[pyo3(signature = (state=None, queue=None, kind=None, limit=None, order=None))]
    fn list(
        &self,
        py: Python<'_>,
        state: Option<&str>,
        queue: Option<String>,
        kind: Option<String>,
        limit: Option<usize>,
        order: Option<&str>,
    ) -> PyResult<String> {
        let state = state
            .map(str::parse::<JobState>)
            .transpose()
            .map_err(|e| InvalidInputError::new_err(e.to_string()))?;
        let order = match order.unwrap_or("newest") {
            "newest" => ListOrder::Newest,
            "oldest" => ListOrder::Oldest,
            "due_first" => ListOrder::DueFirst,
            other => {
                return Err(InvalidInputError::new_err(format!(
                    "unknown order `{other}` (expected newest, oldest or due_first)"
                )));
            }
        };
        let filter =
            ListFilter { state, queue, kind, limit, cursor: None, order, ..ListFilter::default() };
        let store = self.store(py)?;
        json(&block(py, store.list(&filter))?.map_err(error::store)?)
    }

    /// Counts per state, due now and next due, as JSON.
    fn stats(&self, py: Python<'_>) -> PyResult<String> {
        let store = self.store(py)?;
        json(&block(py, store.stats(self.now()))?.map_err(error::store)?)
    }

    /// When a sleeping worker should look again (ms), if ever.
    fn next_due_ms(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        let store = self.store(py)?;
        Ok(block(py, store.next_due())?.map_err(error::store)?.map(Timestamp::as_millis))
    }

    /// Waits until every job of `ids` is finished, or `timeout` seconds
    /// pass, woken by the queue's changes as `slothqueue wait` is: JSON
    /// `{timed_out, jobs: [{id, state}]}`. A signal (Ctrl-C) interrupts it.
    #[pyo3(signature = (ids, timeout=None))]
    fn wait(&self, py: Python<'_>, ids: Vec<JobId>, timeout: Option<f64>) -> PyResult<String> {
        let timeout = timeout.map(|t| millis(t, "timeout")).transpose()?;
        let store = self.store(py)?;
        let watch = self.watch(py)?;
        let target = WaitTarget::Jobs(ids);
        let deadline = timeout.map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
        let outcome =
            interruptible(py, async { wait(store.as_ref(), &watch, &target, deadline).await })?
                .map_err(error::runner)?;
        let jobs: Vec<_> = outcome
            .jobs
            .iter()
            .map(|w| serde_json::json!({ "id": w.id, "state": w.state }))
            .collect();
        json(&serde_json::json!({ "timed_out": outcome.timed_out(), "jobs": jobs }))
    }

    /// A view of the queue's changes from now on, for a worker that follows.
    fn changes(&self, py: Python<'_>) -> PyResult<NativeChanges> {
        let watch = self.watch(py)?;
        Ok(NativeChanges { changes: tokio::sync::Mutex::new(watch.changes()), _watch: watch })
    }

    /// Closes every handle; later calls raise.
    fn close(&self, py: Python<'_>) {
        let handles = std::mem::take(&mut *lock(&self.handles));
        lock(&self.fences).clear();
        py.detach(|| drop(handles));
    }
}

impl NativeQueue {
    /// The queue's change notifications, made once: the store's own
    /// (PostgreSQL) or a watch on its files, as `run --follow` has.
    fn watch(&self, py: Python<'_>) -> PyResult<Arc<QueueWatch>> {
        if let Some(w) = self.watch.get() {
            return Ok(w.clone());
        }
        let store = self.store(py)?;
        let made = py.detach(|| Arc::new(QueueWatch::for_store(&self.db, store.as_ref())));
        Ok(self.watch.get_or_init(|| made).clone())
    }
}

/// Runs `future` with the GIL released, giving Python's signal handlers a
/// chance every 100 ms: a Ctrl-C (or a handler that raises on SIGTERM)
/// ends the wait with its exception instead of after it.
fn interruptible<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    let rt = runtime()?;
    py.detach(|| {
        rt.block_on(async {
            tokio::pin!(future);
            loop {
                tokio::select! {
                    out = &mut future => return Ok(out),
                    () = tokio::time::sleep(Duration::from_millis(100)) => {
                        Python::attach(|py| py.check_signals())?;
                    }
                }
            }
        })
    })
}

/// One waiter's view of a queue's changes (`NativeQueue.changes`).
#[pyclass(frozen, module = "slothqueue._native")]
pub struct NativeChanges {
    changes: tokio::sync::Mutex<QueueChanges>,
    _watch: Arc<QueueWatch>,
}

#[pymethods]
impl NativeChanges {
    /// Forgets the changes so far: call it just before looking at the
    /// queue, so that a commit during the look ends the next `wait` at once.
    fn mark_seen(&self, py: Python<'_>) -> PyResult<()> {
        block(py, async { self.changes.lock().await.mark_seen() })
    }

    /// Sleeps until the queue changes (`True`) or `timeout` seconds pass
    /// (`False`); a signal interrupts it.
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        let ms = millis(timeout, "timeout")?;
        interruptible(py, async {
            let mut changes = self.changes.lock().await;
            tokio::time::timeout(Duration::from_millis(ms), changes.changed()).await.is_ok()
        })
    }
}
