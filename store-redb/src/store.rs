//! [`RedbStore`]: the [`Store`] trait on redb tables (see the crate docs for
//! the table design). Each operation is one transaction run on tokio's
//! blocking pool; every state change goes through a
//! [`slothqueue_core::machine`] function and [`Tx::put`], which keeps the
//! indexes in step with the row.

use std::collections::HashMap;
use std::ops::Bound;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redb::{
    Durability, ReadTransaction, ReadableTable, ReadableTableMetadata, Table, WriteTransaction,
};
use slothqueue_core::machine::{self, PushPlan};
use slothqueue_core::{
    ClaimFilter, ClaimRequest, Claimed, Completion, Event, Failure as JobFailure, Fence,
    HeartbeatAck, Job, JobId, JobState, Lease, ListFilter, ListOrder, NewJob, Policy, PurgeFilter,
    Pushed, RunnerRecord, SettledAndClaimed, Settlement, Stats, Store, StoreError, Timestamp,
};

use crate::error::{Failure, corrupt, panic_message};
use crate::schema::{
    self, COUNTS, EVENTS, Handle, JOBS, KEYS, META, META_NEXT_ID, META_WATERMARK, PENDING, READY,
    RUNNERS, RUNNING, ReadyKey, guarded, i64_from_meta, i64_to_meta, priority_key,
};

/// How hard a commit tries to reach the disk before returning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DurabilityMode {
    /// Every commit is fsynced (redb's 2-phase commit) before the call
    /// returns: an acknowledged push survives a power cut.
    #[default]
    Immediate,
    /// Asks for speed over durability. redb's only faster setting,
    /// `Durability::None`, keeps the commit in this process's memory until
    /// a later durable one, and redb 4.6 refuses it on a file shared
    /// between processes (`NonDurableCommitUnsupported`), which every
    /// slothqueue file is. So today this commits exactly like
    /// [`DurabilityMode::Immediate`] and risks nothing; it is kept so that
    /// callers can state the wish, and a later redb can grant it (at the
    /// risk of losing the last commits, never of a damaged file).
    Eventual,
}

/// How [`RedbStore::open`] opens a queue.
#[derive(Clone, Debug)]
pub struct RedbOptions {
    /// Lease, backoff and attempt settings for every transition.
    pub policy: Policy,
    /// What a commit waits for.
    pub durability: DurabilityMode,
    /// How long a call waits for another process's write before answering
    /// [`StoreError::Busy`].
    pub lock_timeout: Duration,
}

impl Default for RedbOptions {
    fn default() -> Self {
        RedbOptions {
            policy: Policy::default(),
            durability: DurabilityMode::Immediate,
            lock_timeout: Duration::from_secs(5),
        }
    }
}

/// A queue in one redb file. Cheap to share (`Arc`); several handles, in
/// one process or many, may hold the same file.
#[derive(Debug)]
pub struct RedbStore {
    inner: Arc<Inner>,
}

/// The open database. Closing it, when the store is dropped or a handle
/// is replaced after a latched I/O error, never panics out of the store:
/// redb writes its allocator state on close, and on a file damaged where
/// nothing has read yet, that can panic inside redb (S16: the torture
/// suite's fuzzing found `add` on a bit-flipped file ending in exit 101).
#[derive(Debug)]
struct Db(Option<Handle>);

impl Db {
    fn new(handle: Handle) -> Self {
        Db(Some(handle))
    }

    fn handle(&self) -> &Handle {
        match &self.0 {
            Some(h) => h,
            None => unreachable!("the database is taken out only when dropped"),
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || handle.close()));
        }
    }
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    options: RedbOptions,
    /// Write-locked only to reopen after a latched I/O error and for the
    /// integrity check, which need the handle to themselves.
    db: RwLock<Db>,
    /// One write transaction at a time among every handle of this process
    /// on this file, handed over in turn rather than polled for, so
    /// threads of one process do not starve each other; other processes
    /// are polled for (see [`patiently`]).
    gate: Arc<Gate>,
    /// Opened from a file (not a test backend), so it can be reopened.
    on_file: bool,
    /// Opened with [`RedbStore::open_read_only`]: every write is refused.
    read_only: bool,
}

impl RedbStore {
    /// Opens the queue at `path`, creating it (and its directory, file mode
    /// 0600) when the file is missing or empty. A foreign, damaged or newer
    /// file is refused with [`StoreError::Corrupt`] or
    /// [`StoreError::SchemaTooNew`] and left unchanged.
    pub fn open(path: &Path, options: RedbOptions) -> Result<RedbStore, StoreError> {
        let db = schema::open_database(path, options.lock_timeout)?;
        let gate = gate_for(path)?;
        Ok(RedbStore {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                options,
                db: RwLock::new(Db::new(Handle::Writable(db))),
                gate,
                on_file: true,
                read_only: false,
            }),
        })
    }

    /// Opens the existing queue at `path` for reading only: nothing is
    /// written to the file, not even redb's header (a writable open
    /// rewrites it on opening and closing), so commands that only look
    /// leave the file byte-for-byte as they found it. Vetted like
    /// [`RedbStore::open`]; a missing file is [`StoreError::Io`].
    ///
    /// It shares the file with writers in other processes and sees their
    /// commits. A file a crash left needing repair, with no live writer to
    /// repair it, is repaired in memory and read as a snapshot until a
    /// writer has repaired the real file. Every write through the store
    /// answers [`StoreError::Io`] of kind
    /// [`std::io::ErrorKind::ReadOnlyFilesystem`].
    pub fn open_read_only(path: &Path, options: RedbOptions) -> Result<RedbStore, StoreError> {
        let handle = schema::open_read_only(path, options.lock_timeout)?;
        let gate = gate_for(path)?;
        Ok(RedbStore {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                options,
                db: RwLock::new(Db::new(handle)),
                gate,
                on_file: true,
                read_only: true,
            }),
        })
    }

    /// Opens a queue on a redb storage backend rather than a file, for
    /// storage-fault tests (power loss, failing writes) that must see every
    /// write and sync. `label` names it in errors. The backend must keep
    /// redb's lock contract; an image private to one handle may grant
    /// every lock. None of the file checks of [`RedbStore::open`] apply,
    /// and a latched I/O error is not recovered by reopening.
    #[doc(hidden)]
    pub fn open_backend(
        backend: impl redb::StorageBackend,
        label: &Path,
        options: RedbOptions,
    ) -> Result<RedbStore, StoreError> {
        let db = schema::open_backend(backend, label, options.lock_timeout)?;
        Ok(RedbStore {
            inner: Arc::new(Inner {
                path: label.to_owned(),
                options,
                db: RwLock::new(Db::new(Handle::Writable(db))),
                gate: Arc::new(Gate::default()),
                on_file: false,
                read_only: false,
            }),
        })
    }

    /// The queue file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs redb's integrity check (every page checksum, the allocator
    /// state) and then checks that every index agrees with the job rows.
    /// Slow: it reads the whole file. Blocks; call it from a blocking
    /// context. `Corrupt` names what was wrong; if redb found damage it
    /// could repair, it has repaired the file and still says so.
    pub fn check_integrity(&self) -> Result<(), StoreError> {
        let path = &self.inner.path;
        {
            let mut db = self.inner.db.write().unwrap_or_else(PoisonError::into_inner);
            let Some(Handle::Writable(db)) = db.0.as_mut() else {
                // redb's check repairs what it finds: it writes.
                return Err(read_only(path));
            };
            match guarded(|| Ok(db.check_integrity()?)) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(corrupt(
                        path,
                        "redb's integrity check found damage and repaired it; check the jobs",
                    ));
                }
                Err(e) => return Err(e.into_store(path)),
            }
        }
        self.inner.read(verify_indexes)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = Arc::clone(&self.inner);
        match tokio::task::spawn_blocking(move || f(&inner)).await {
            Ok(r) => r,
            Err(e) => Err(StoreError::Backend(match e.try_into_panic() {
                Ok(p) => format!("the storage task panicked: {}", panic_message(&*p)),
                Err(e) => format!("the storage task failed: {e}"),
            })),
        }
    }
}

#[derive(Debug, Default)]
struct Gate {
    held: Mutex<bool>,
    free: Condvar,
}

/// The gates of the files this process has open, by (device, inode), so
/// that every handle on one file shares one, however the path was spelt.
static GATES: Mutex<Vec<(FileId, Weak<Gate>)>> = Mutex::new(Vec::new());

/// A file's (device, inode).
type FileId = (u64, u64);

fn gate_for(path: &Path) -> Result<Arc<Gate>, StoreError> {
    let meta = std::fs::metadata(path).map_err(|e| crate::error::io(path, "reading", e))?;
    let id = (meta.dev(), meta.ino());
    let mut gates = GATES.lock().unwrap_or_else(PoisonError::into_inner);
    gates.retain(|(_, g)| g.strong_count() > 0);
    if let Some(gate) = gates.iter().find(|(k, _)| *k == id).and_then(|(_, g)| g.upgrade()) {
        return Ok(gate);
    }
    let gate = Arc::new(Gate::default());
    gates.push((id, Arc::downgrade(&gate)));
    Ok(gate)
}

/// Holds [`Gate`] until dropped.
struct GateGuard<'a>(&'a Gate);

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        *self.0.held.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.0.free.notify_one();
    }
}

/// The longest pause between two tries for another process's lock.
const MAX_PAUSE: Duration = Duration::from_millis(10);

/// Retries `attempt` while another process holds the file or its write
/// lock, pausing 1, 2, 4 … up to 10 ms, for at most `timeout`; then
/// [`StoreError::Busy`]. Any other outcome is returned at once.
#[expect(
    clippy::disallowed_methods,
    reason = "waiting out another process's write lock is a real wait, bounded by lock_timeout"
)]
pub(crate) fn patiently<T>(
    timeout: Duration,
    mut attempt: impl FnMut() -> Result<T, Failure>,
) -> Result<T, Failure> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match attempt() {
            Err(e) if e.is_would_block() => {
                let waited = start.elapsed();
                if waited >= timeout {
                    return Err(Failure::Store(StoreError::Busy { waited }));
                }
                std::thread::sleep(pause.min(timeout - waited));
                pause = (pause * 2).min(MAX_PAUSE);
            }
            r => return r,
        }
    }
}

impl Inner {
    /// Runs `f` in a read transaction.
    fn read<T>(&self, f: impl Fn(&ReadTransaction) -> Result<T, Failure>) -> Result<T, StoreError> {
        self.refresh_snapshot();
        self.with_db(|h| {
            let txn = h.begin_read()?;
            f(&txn)
        })
    }

    /// Swaps a snapshot (see [`Handle::Snapshot`]) for redb's read-only
    /// handle once the file opens as one, so that a long look (`logs
    /// --follow`) sees what writers do after a crash. Until then the
    /// snapshot answers; a failed try changes nothing.
    fn refresh_snapshot(&self) {
        if !self.on_file {
            return;
        }
        let stale = matches!(
            self.db.read().unwrap_or_else(PoisonError::into_inner).0,
            Some(Handle::Snapshot(_))
        );
        if !stale {
            return;
        }
        if let Ok(Some(ro)) = schema::open_current_read_only(&self.path, Duration::ZERO) {
            *self.db.write().unwrap_or_else(PoisonError::into_inner) =
                Db::new(Handle::ReadOnly(ro));
        }
    }

    /// Runs `f` in a write transaction and commits it, or aborts it if `f`
    /// fails (nothing is written then).
    fn write<T>(&self, f: impl Fn(&mut Tx<'_>) -> Result<T, Failure>) -> Result<T, StoreError> {
        if self.read_only {
            return Err(read_only(&self.path));
        }
        self.with_db(|h| {
            let Handle::Writable(db) = h else {
                return Err(Failure::Store(read_only(&self.path)));
            };
            // One budget of `lock_timeout` for both waits.
            let (_gate, waited) = self.enter_gate()?;
            let left = self.options.lock_timeout.saturating_sub(waited);
            let mut txn = patiently(left, || Ok(db.try_begin_write()?)).map_err(|e| match e {
                Failure::Store(StoreError::Busy { waited: w }) => {
                    Failure::Store(StoreError::Busy { waited: w.saturating_add(waited) })
                }
                e => e,
            })?;
            txn.set_durability(durability(self.options.durability))?;
            let out = {
                let mut tx = Tx::open(&txn)?;
                f(&mut tx)
            };
            match out {
                Ok(v) => {
                    txn.commit()?;
                    Ok(v)
                }
                Err(e) => {
                    // The abort only discards; the error that caused it matters.
                    let _ = txn.abort();
                    Err(e)
                }
            }
        })
    }

    /// Waits for this process's other writers to this file, at most
    /// `lock_timeout`; answers how long it waited.
    #[expect(
        clippy::disallowed_methods,
        reason = "the wait for this process's other writers is bounded by lock_timeout"
    )]
    fn enter_gate(&self) -> Result<(GateGuard<'_>, Duration), Failure> {
        let start = Instant::now();
        let timeout = self.options.lock_timeout;
        let mut held = self.gate.held.lock().unwrap_or_else(PoisonError::into_inner);
        while *held {
            let waited = start.elapsed();
            let Some(left) = timeout.checked_sub(waited).filter(|d| !d.is_zero()) else {
                return Err(Failure::Store(StoreError::Busy { waited }));
            };
            held =
                self.gate.free.wait_timeout(held, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        *held = true;
        Ok((GateGuard(&self.gate), start.elapsed()))
    }

    /// Runs `f` on the database, mapping errors; after an I/O error redb
    /// has latched (a full disk, say) the file is opened again and `f`
    /// tried once more, so the queue recovers without a restart.
    fn with_db<T>(&self, f: impl Fn(&Handle) -> Result<T, Failure>) -> Result<T, StoreError> {
        let first = {
            let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
            guarded(|| f(db.handle()))
        };
        match first {
            Err(e) if e.is_previous_io() && self.on_file => {
                let fresh = if self.read_only {
                    schema::open_read_only(&self.path, self.options.lock_timeout)?
                } else {
                    Handle::Writable(schema::open_writable(&self.path, self.options.lock_timeout)?)
                };
                let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
                *db = Db::new(fresh);
                guarded(|| f(db.handle())).map_err(|e| e.into_store(&self.path))
            }
            r => r.map_err(|e| e.into_store(&self.path)),
        }
    }
}

/// The answer to a write through a read-only handle: an I/O error of kind
/// `ReadOnlyFilesystem`, the kind the OS gives for the same mistake.
fn read_only(path: &Path) -> StoreError {
    StoreError::Io {
        context: format!("cannot write to {}", path.display()),
        source: std::io::Error::new(
            std::io::ErrorKind::ReadOnlyFilesystem,
            "the queue was opened read-only",
        ),
    }
}

fn durability(_mode: DurabilityMode) -> Durability {
    // Both modes: redb refuses `Durability::None` in multi-writer mode.
    Durability::Immediate
}

/// The tables of one write transaction, and the index bookkeeping.
struct Tx<'t> {
    meta: Table<'t, &'static str, u64>,
    jobs: Table<'t, i64, &'static [u8]>,
    ready: Table<'t, ReadyKey, ()>,
    pending: Table<'t, (i64, i64), (&'static str, &'static str, i32)>,
    running: Table<'t, i64, i64>,
    keys: Table<'t, &'static str, i64>,
    events: Table<'t, (i64, u32), &'static [u8]>,
    counts: Table<'t, &'static str, u64>,
    runners: Table<'t, &'static str, &'static [u8]>,
    /// Pending jobs with `not_before` at or below this are in `ready`.
    watermark: i64,
}

impl<'t> Tx<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self, Failure> {
        let meta = txn.open_table(META)?;
        let watermark = meta
            .get(META_WATERMARK)?
            .map(|v| i64_from_meta(v.value()))
            .ok_or_else(|| Failure::Damaged("the meta table has no ready watermark".to_owned()))?;
        Ok(Tx {
            meta,
            jobs: txn.open_table(JOBS)?,
            ready: txn.open_table(READY)?,
            pending: txn.open_table(PENDING)?,
            running: txn.open_table(RUNNING)?,
            keys: txn.open_table(KEYS)?,
            events: txn.open_table(EVENTS)?,
            counts: txn.open_table(COUNTS)?,
            runners: txn.open_table(RUNNERS)?,
            watermark,
        })
    }

    fn job(&self, id: JobId) -> Result<Option<Job>, Failure> {
        load(&self.jobs, id)
    }

    fn must(&self, id: JobId) -> Result<Job, Failure> {
        self.job(id)?.ok_or(Failure::Store(StoreError::NotFound(id)))
    }

    fn next_id(&self) -> Result<JobId, Failure> {
        let n = self.meta.get(META_NEXT_ID)?.map(|v| v.value()).unwrap_or(1);
        i64::try_from(n).map_err(|_| Failure::Damaged(format!("next id {n} out of range")))
    }

    fn set_next_id(&mut self, id: JobId) -> Result<(), Failure> {
        let id =
            u64::try_from(id).map_err(|_| Failure::Damaged(format!("id {id} out of range")))?;
        self.meta.insert(META_NEXT_ID, id)?;
        Ok(())
    }

    /// Replaces `old` (as read in this transaction) with `new` (or deletes
    /// it), index entries and state counts included.
    ///
    /// The write's condition, as the SQL backend's `WHERE`: the stored row
    /// must still have `old`'s state, attempts and lease (owner and
    /// attempt), else nothing is written and the caller gets `LeaseLost`.
    /// redb admits one write transaction at a time and starts it from the
    /// latest commit, so this holds by construction; checking it costs one
    /// lookup and keeps a future change from writing over a row it did not
    /// read.
    fn put(&mut self, old: Option<&Job>, new: Option<&Job>) -> Result<(), Failure> {
        if let Some(o) = old {
            let stored = self.job(o.id)?.ok_or(Failure::Store(StoreError::NotFound(o.id)))?;
            let fence = |j: &Job| (j.state, j.attempts, j.lease.as_ref().map(Lease::fence));
            if fence(&stored) != fence(o) {
                return Err(Failure::Store(StoreError::LeaseLost { id: o.id }));
            }
            self.unindex(o)?;
        }
        match (old, new) {
            (_, Some(n)) => {
                let bytes = encode(n)?;
                self.jobs.insert(n.id, bytes.as_slice())?;
                self.index(n)?;
            }
            (Some(o), None) => {
                self.jobs.remove(o.id)?;
            }
            (None, None) => {}
        }
        Ok(())
    }

    fn index(&mut self, job: &Job) -> Result<(), Failure> {
        self.count(job.state, 1)?;
        match job.state {
            JobState::Pending => {
                let nb = job.not_before.as_millis();
                self.pending
                    .insert((nb, job.id), (job.queue.as_str(), job.kind.as_str(), job.priority))?;
                if nb <= self.watermark {
                    self.ready.insert(ready_key(job), ())?;
                }
            }
            JobState::Running => {
                let Some(lease) = &job.lease else {
                    return Err(Failure::Damaged(format!("running job #{} has no lease", job.id)));
                };
                self.running.insert(job.id, lease.until.as_millis())?;
            }
            JobState::Done | JobState::Failed | JobState::Cancelled => {}
        }
        if let Some(k) = &job.idempotency_key {
            self.keys.insert(k.as_str(), job.id)?;
        }
        Ok(())
    }

    fn unindex(&mut self, job: &Job) -> Result<(), Failure> {
        self.count(job.state, -1)?;
        match job.state {
            JobState::Pending => {
                self.pending.remove((job.not_before.as_millis(), job.id))?;
                self.ready.remove(ready_key(job))?;
            }
            JobState::Running => {
                self.running.remove(job.id)?;
            }
            JobState::Done | JobState::Failed | JobState::Cancelled => {}
        }
        if let Some(k) = &job.idempotency_key {
            let holds = self.keys.get(k.as_str())?.map(|v| v.value()) == Some(job.id);
            if holds {
                self.keys.remove(k.as_str())?;
            }
        }
        Ok(())
    }

    fn count(&mut self, state: JobState, delta: i64) -> Result<(), Failure> {
        let n = self.counts.get(state.as_str())?.map(|v| v.value()).unwrap_or(0);
        let n = n.saturating_add_signed(delta);
        if n == 0 {
            self.counts.remove(state.as_str())?;
        } else {
            self.counts.insert(state.as_str(), n)?;
        }
        Ok(())
    }

    /// Appends to each event's job trail.
    fn append(&mut self, events: &[Event]) -> Result<(), Failure> {
        for e in events {
            let seq = match self.events.range((e.job_id, 0)..=(e.job_id, u32::MAX))?.next_back() {
                Some(last) => last?.0.value().1.checked_add(1).ok_or_else(|| {
                    Failure::Damaged(format!("job #{} has too many events", e.job_id))
                })?,
                None => 0,
            };
            let bytes = serde_json::to_vec(e).map_err(encode_failed)?;
            self.events.insert((e.job_id, seq), bytes.as_slice())?;
        }
        Ok(())
    }

    /// Applies a transition's result to the row it was computed from.
    fn apply(&mut self, old: &Job, t: &machine::Transition) -> Result<(), Failure> {
        self.put(Some(old), Some(&t.job))?;
        self.append(&t.events)
    }

    /// Moves the pending jobs that became due since the last call into
    /// `ready` and raises the watermark to `now`. Each job moves once; the
    /// watermark never goes down (a clock stepping back is handled by the
    /// claim skipping heads that are not due yet).
    fn advance(&mut self, now: Timestamp) -> Result<(), Failure> {
        let now = now.as_millis();
        if now <= self.watermark {
            return Ok(());
        }
        let lower = (self.watermark, i64::MAX);
        let upper = (now, i64::MAX);
        let mut due: Vec<(String, String, i32, i64, i64)> = Vec::new();
        for entry in self.pending.range((Bound::Excluded(lower), Bound::Included(upper)))? {
            let (k, v) = entry?;
            let (nb, id) = k.value();
            let (q, kind, p) = v.value();
            due.push((q.to_owned(), kind.to_owned(), p, nb, id));
        }
        for (q, kind, p, nb, id) in &due {
            self.ready.insert((q.as_str(), kind.as_str(), priority_key(*p), *nb, *id), ())?;
        }
        self.watermark = now;
        self.meta.insert(META_WATERMARK, i64_to_meta(now))?;
        Ok(())
    }

    /// The best due pending job `filter` admits: the head of each
    /// (queue, kind) in `ready`, the best of those by claim order. A head
    /// not due at `now` (the clock stepped back below the watermark) is
    /// skipped with its whole priority level, whose other jobs are due no
    /// earlier.
    fn best_ready(&self, filter: &ClaimFilter, now: Timestamp) -> Result<Option<JobId>, Failure> {
        let now = now.as_millis();
        let mut best: Option<(u32, i64, i64)> = None;
        let queues: Vec<Option<&str>> = if filter.queues.is_empty() {
            vec![None]
        } else {
            filter.queues.iter().map(|q| Some(q.as_str())).collect()
        };
        for only in queues {
            let mut lower: Bound<(String, String, u32, i64, i64)> = Bound::Included((
                only.unwrap_or("").to_owned(),
                String::new(),
                0,
                i64::MIN,
                i64::MIN,
            ));
            loop {
                let head = {
                    let from = match &lower {
                        Bound::Included(k) => Bound::Included(borrow_key(k)),
                        Bound::Excluded(k) => Bound::Excluded(borrow_key(k)),
                        Bound::Unbounded => Bound::Unbounded,
                    };
                    match self
                        .ready
                        .range::<(&str, &str, u32, i64, i64)>((from, Bound::Unbounded))?
                        .next()
                    {
                        Some(entry) => {
                            let (key, _) = entry?;
                            let (q, k, p, nb, id) = key.value();
                            Some((q.to_owned(), k.to_owned(), p, nb, id))
                        }
                        None => None,
                    }
                };
                let Some((q, kind, p, nb, id)) = head else { break };
                if only.is_some_and(|o| o != q) {
                    break;
                }
                let kind_ok = filter.kinds.as_ref().is_none_or(|ks| ks.contains(&kind));
                if kind_ok && nb > now {
                    // Skip the rest of this priority level.
                    lower = Bound::Excluded((q, kind, p, i64::MAX, i64::MAX));
                    continue;
                }
                if kind_ok && best.is_none_or(|b| (p, nb, id) < b) {
                    best = Some((p, nb, id));
                }
                // On to the next (queue, kind).
                lower = Bound::Excluded((q, kind, u32::MAX, i64::MAX, i64::MAX));
            }
        }
        Ok(best.map(|(_, _, id)| id))
    }
}

fn borrow_key(k: &(String, String, u32, i64, i64)) -> (&str, &str, u32, i64, i64) {
    (k.0.as_str(), k.1.as_str(), k.2, k.3, k.4)
}

fn ready_key(job: &Job) -> (&str, &str, u32, i64, i64) {
    (
        job.queue.as_str(),
        job.kind.as_str(),
        priority_key(job.priority),
        job.not_before.as_millis(),
        job.id,
    )
}

fn encode(job: &Job) -> Result<Vec<u8>, Failure> {
    serde_json::to_vec(job).map_err(encode_failed)
}

fn encode_failed(e: serde_json::Error) -> Failure {
    Failure::Store(StoreError::Backend(format!("cannot encode a record: {e}")))
}

fn load(jobs: &impl ReadableTable<i64, &'static [u8]>, id: JobId) -> Result<Option<Job>, Failure> {
    match jobs.get(id)? {
        Some(bytes) => decode_job(id, bytes.value()).map(Some),
        None => Ok(None),
    }
}

fn decode_job(id: JobId, bytes: &[u8]) -> Result<Job, Failure> {
    let job: Job = serde_json::from_slice(bytes)
        .map_err(|e| Failure::Damaged(format!("job #{id} does not decode: {e}")))?;
    if job.id != id {
        return Err(Failure::Damaged(format!("row #{id} holds job #{}", job.id)));
    }
    Ok(job)
}

fn decode_event(bytes: &[u8]) -> Result<Event, Failure> {
    serde_json::from_slice(bytes)
        .map_err(|e| Failure::Damaged(format!("an event does not decode: {e}")))
}

fn out_of_step(index: &str, id: JobId) -> Failure {
    Failure::Damaged(format!("the {index} index names job #{id}, which is not there"))
}

/// One claim, as [`machine::plan_claim`] decides it from the running jobs
/// and the best ready job, judged inside this transaction.
fn claim_in(
    t: &mut Tx<'_>,
    request: &ClaimRequest,
    now: Timestamp,
    policy: &Policy,
) -> Result<Option<Claimed>, Failure> {
    t.advance(now)?;
    let mut ids = Vec::new();
    for entry in t.running.iter()? {
        ids.push(entry?.0.value());
    }
    let mut running = Vec::with_capacity(ids.len());
    for id in ids {
        running.push(t.job(id)?.ok_or_else(|| out_of_step("running", id))?);
    }
    let best_due = match t.best_ready(&request.filter, now)? {
        Some(id) => Some(t.job(id)?.ok_or_else(|| out_of_step("ready", id))?),
        None => None,
    };
    let plan = machine::plan_claim(request, running, best_due, now, policy)
        .map_err(|e| Failure::Damaged(format!("the ready index is out of step: {e}")))?;
    for w in plan.retire.iter().chain(&plan.take) {
        t.apply(&w.before, &w.after)?;
    }
    Ok(plan.claimed())
}

fn push_in(
    t: &mut Tx<'_>,
    new: &NewJob,
    now: Timestamp,
    policy: &Policy,
) -> Result<Pushed, Failure> {
    machine::validate(new)?;
    let holder = match &new.idempotency_key {
        Some(k) => match t.keys.get(k.as_str())?.map(|v| v.value()) {
            Some(id) => Some(t.job(id)?.ok_or_else(|| out_of_step("idempotency key", id))?),
            None => None,
        },
        None => None,
    };
    let id = t.next_id()?;
    match machine::plan_push(new, holder.as_ref(), id, now) {
        PushPlan::Duplicate(existing) => {
            Ok(Pushed { job: t.must(existing)?, created: false, superseded: None })
        }
        PushPlan::Insert { displaced, superseded } => {
            if let (Some(d), Some(old)) = (displaced, holder.as_ref()) {
                t.apply(old, &d)?;
            }
            let created = machine::create(id, new, now, policy);
            t.put(None, Some(&created.job))?;
            t.append(&created.events)?;
            t.set_next_id(id.checked_add(1).ok_or_else(|| {
                Failure::Store(StoreError::InvalidInput("job ids are exhausted".to_owned()))
            })?)?;
            Ok(Pushed { job: created.job, created: true, superseded })
        }
    }
}

fn restore_in(t: &mut Tx<'_>, job: &Job, events: &[Event]) -> Result<(), Failure> {
    let invalid = |m: String| Err(Failure::Store(StoreError::InvalidInput(m)));
    if job.id < 1 {
        return invalid(format!("job id {} is not positive", job.id));
    }
    if job.state == JobState::Running && job.lease.is_none() {
        return invalid(format!("running job #{} has no lease", job.id));
    }
    if let Some(e) = events.iter().find(|e| e.job_id != job.id) {
        return invalid(format!("an event of job #{} was given with job #{}", e.job_id, job.id));
    }
    if t.jobs.get(job.id)?.is_some() {
        return invalid(format!("job #{} already exists", job.id));
    }
    if let Some(k) = &job.idempotency_key {
        if let Some(holder) = t.keys.get(k.as_str())?.map(|v| v.value()) {
            return invalid(format!("idempotency key `{k}` is already held by job #{holder}"));
        }
    }
    t.put(None, Some(job))?;
    t.append(events)?;
    if t.next_id()? <= job.id {
        t.set_next_id(job.id.saturating_add(1))?;
    }
    Ok(())
}

fn purge_in(t: &mut Tx<'_>, filter: &PurgeFilter) -> Result<Vec<JobId>, Failure> {
    let mut victims = Vec::new();
    for entry in t.jobs.iter()? {
        let (k, v) = entry?;
        let job = decode_job(k.value(), v.value())?;
        let (eligible, age) = match job.state {
            JobState::Running => (false, job.created_at),
            JobState::Pending => (filter.include_pending, job.created_at),
            JobState::Done | JobState::Failed | JobState::Cancelled => {
                (true, job.finished_at.unwrap_or(job.created_at))
            }
        };
        if eligible && filter.older_than.is_none_or(|t| age < t) {
            victims.push(job);
        }
    }
    let mut ids = Vec::with_capacity(victims.len());
    for job in victims {
        t.put(Some(&job), None)?;
        t.events.retain_in((job.id, 0)..=(job.id, u32::MAX), |_, _| false)?;
        ids.push(job.id);
    }
    Ok(ids)
}

fn list_in(txn: &ReadTransaction, filter: &ListFilter) -> Result<Vec<Job>, Failure> {
    let jobs = txn.open_table(JOBS)?;
    let limit = filter.limit.unwrap_or(usize::MAX);
    let admits = |j: &Job| {
        filter.state.is_none_or(|s| j.state == s)
            && filter.queue.as_ref().is_none_or(|q| &j.queue == q)
            && filter.kind.as_ref().is_none_or(|k| &j.kind == k)
    };
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    // The running jobs are few and indexed: no need to read every row.
    if filter.state == Some(JobState::Running) {
        let running = txn.open_table(RUNNING)?;
        for entry in running.iter()? {
            let id = entry?.0.value();
            let job = load(&jobs, id)?.ok_or_else(|| out_of_step("running", id))?;
            if admits(&job) {
                out.push(job);
            }
        }
        match filter.order {
            ListOrder::Newest => out.sort_by_key(|j| std::cmp::Reverse(j.id)),
            ListOrder::Oldest => out.sort_by_key(|j| j.id),
            ListOrder::DueFirst => out.sort_by_key(Job::claim_order),
        }
        out.retain(|j| match (filter.order, filter.cursor) {
            (ListOrder::Newest, Some(c)) => j.id < c,
            (ListOrder::Oldest, Some(c)) => j.id > c,
            _ => true,
        });
        out.truncate(limit);
        return Ok(out);
    }
    let rows = match (filter.order, filter.cursor) {
        (ListOrder::Newest, Some(c)) => jobs.range(..c)?,
        (ListOrder::Oldest, Some(c)) => jobs.range((Bound::Excluded(c), Bound::Unbounded))?,
        _ => jobs.range::<i64>(..)?,
    };
    let mut take = |entry: Result<
        (redb::AccessGuard<'_, i64>, redb::AccessGuard<'_, &'static [u8]>),
        redb::StorageError,
    >|
     -> Result<bool, Failure> {
        let (k, v) = entry?;
        let job = decode_job(k.value(), v.value())?;
        if admits(&job) {
            out.push(job);
        }
        Ok(filter.order == ListOrder::DueFirst || out.len() < limit)
    };
    match filter.order {
        ListOrder::Newest => {
            for entry in rows.rev() {
                if !take(entry)? {
                    break;
                }
            }
        }
        ListOrder::Oldest | ListOrder::DueFirst => {
            for entry in rows {
                if !take(entry)? {
                    break;
                }
            }
        }
    }
    if filter.order == ListOrder::DueFirst {
        out.sort_by_key(Job::claim_order);
        out.truncate(limit);
    }
    Ok(out)
}

fn stats_in(txn: &ReadTransaction, now: Timestamp) -> Result<Stats, Failure> {
    let counts = txn.open_table(COUNTS)?;
    let pending = txn.open_table(PENDING)?;
    let count = |s: JobState| -> Result<u64, Failure> {
        Ok(counts.get(s.as_str())?.map(|v| v.value()).unwrap_or(0))
    };
    let now_ms = now.as_millis();
    let mut due_now = 0u64;
    for entry in pending.range(..=(now_ms, i64::MAX))? {
        entry?;
        due_now += 1;
    }
    let next_due =
        match pending.range((Bound::Excluded((now_ms, i64::MAX)), Bound::Unbounded))?.next() {
            Some(entry) => Some(Timestamp::from_millis(entry?.0.value().0)),
            None => None,
        };
    Ok(Stats {
        pending: count(JobState::Pending)?,
        running: count(JobState::Running)?,
        done: count(JobState::Done)?,
        failed: count(JobState::Failed)?,
        cancelled: count(JobState::Cancelled)?,
        due_now,
        next_due,
    })
}

fn next_due_in(txn: &ReadTransaction) -> Result<Option<Timestamp>, Failure> {
    let pending = txn.open_table(PENDING)?;
    let running = txn.open_table(RUNNING)?;
    let mut earliest = pending.first()?.map(|(k, _)| k.value().0);
    for entry in running.iter()? {
        let until = entry?.1.value();
        earliest = Some(earliest.map_or(until, |e| e.min(until)));
    }
    Ok(earliest.map(Timestamp::from_millis))
}

/// Every index agrees with the rows: what `check_integrity` adds to
/// redb's page-level check.
fn verify_indexes(txn: &ReadTransaction) -> Result<(), Failure> {
    let jobs = txn.open_table(JOBS)?;
    let meta = txn.open_table(META)?;
    let watermark = meta
        .get(META_WATERMARK)?
        .map(|v| i64_from_meta(v.value()))
        .ok_or_else(|| Failure::Damaged("the meta table has no ready watermark".to_owned()))?;
    let next_id = meta.get(META_NEXT_ID)?.map(|v| v.value()).unwrap_or(1);
    let mut counts: HashMap<JobState, u64> = HashMap::new();
    let (mut n_pending, mut n_ready, mut n_running, mut n_keys) = (0u64, 0u64, 0u64, 0u64);
    let pending = txn.open_table(PENDING)?;
    let ready = txn.open_table(READY)?;
    let running = txn.open_table(RUNNING)?;
    let keys = txn.open_table(KEYS)?;
    let bad = |m: String| Err(Failure::Damaged(m));
    for entry in jobs.iter()? {
        let (k, v) = entry?;
        let job = decode_job(k.value(), v.value())?;
        if u64::try_from(job.id).map_or(true, |id| id >= next_id) {
            return bad(format!("job #{} is at or above the next id {next_id}", job.id));
        }
        *counts.entry(job.state).or_default() += 1;
        match job.state {
            JobState::Pending => {
                n_pending += 1;
                let nb = job.not_before.as_millis();
                if pending.get((nb, job.id))?.is_none() {
                    return bad(format!("pending job #{} is missing from pending_by_time", job.id));
                }
                if nb <= watermark {
                    n_ready += 1;
                    if ready.get(ready_key(&job))?.is_none() {
                        return bad(format!("due job #{} is missing from ready", job.id));
                    }
                }
            }
            JobState::Running => {
                n_running += 1;
                let until = running.get(job.id)?.map(|v| v.value());
                if until != job.lease.as_ref().map(|l| l.until.as_millis()) {
                    return bad(format!(
                        "running job #{} disagrees with the running index",
                        job.id
                    ));
                }
            }
            JobState::Done | JobState::Failed | JobState::Cancelled => {}
        }
        if let Some(key) = &job.idempotency_key {
            n_keys += 1;
            if keys.get(key.as_str())?.map(|v| v.value()) != Some(job.id) {
                return bad(format!("job #{}'s idempotency key is not indexed", job.id));
            }
        }
    }
    let counted = txn.open_table(COUNTS)?;
    for s in JobState::ALL {
        let stored = counted.get(s.as_str())?.map(|v| v.value()).unwrap_or(0);
        let actual = counts.get(&s).copied().unwrap_or(0);
        if stored != actual {
            return bad(format!("{stored} {s} jobs counted, {actual} found"));
        }
    }
    for (what, indexed, actual) in [
        ("pending_by_time", pending.len()?, n_pending),
        ("ready", ready.len()?, n_ready),
        ("running", running.len()?, n_running),
        ("idempotency_keys", keys.len()?, n_keys),
    ] {
        if indexed != actual {
            return bad(format!("{what} has {indexed} entries for {actual} jobs"));
        }
    }
    let events = txn.open_table(EVENTS)?;
    for entry in events.iter()? {
        let (k, v) = entry?;
        let (id, _) = k.value();
        let e = decode_event(v.value())?;
        if e.job_id != id || jobs.get(id)?.is_none() {
            return bad(format!("an event filed under job #{id} belongs to no such job"));
        }
    }
    Ok(())
}

fn pushed_many(
    t: &mut Tx<'_>,
    jobs: &[NewJob],
    now: Timestamp,
    policy: &Policy,
) -> Result<Vec<Pushed>, Failure> {
    // All or nothing: check every element before writing any.
    for j in jobs {
        machine::validate(j)?;
    }
    t.advance(now)?;
    jobs.iter().map(|j| push_in(t, j, now, policy)).collect()
}

#[async_trait]
impl Store for RedbStore {
    async fn push(&self, job: NewJob, now: Timestamp) -> Result<Pushed, StoreError> {
        let mut many = self.push_many(vec![job], now).await?;
        many.pop().ok_or_else(|| StoreError::Backend("a push returned nothing".to_owned()))
    }

    async fn push_many(
        &self,
        jobs: Vec<NewJob>,
        now: Timestamp,
    ) -> Result<Vec<Pushed>, StoreError> {
        self.blocking(move |i| {
            let policy = i.options.policy.clone();
            i.write(|t| pushed_many(t, &jobs, now, &policy))
        })
        .await
    }

    async fn claim(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<Option<Claimed>, StoreError> {
        let request = request.clone();
        self.blocking(move |i| {
            let policy = i.options.policy.clone();
            i.write(|t| claim_in(t, &request, now, &policy))
        })
        .await
    }

    async fn heartbeat(
        &self,
        id: JobId,
        fence: &Fence,
        child_pgid: Option<i32>,
        now: Timestamp,
    ) -> Result<HeartbeatAck, StoreError> {
        let fence = fence.clone();
        self.blocking(move |i| {
            let policy = i.options.policy.clone();
            i.write(|t| {
                let job = t.must(id)?;
                let (tr, ack) = machine::heartbeat(&job, &fence, now, &policy, child_pgid)?;
                t.apply(&job, &tr)?;
                Ok(ack)
            })
        })
        .await
    }

    async fn complete(
        &self,
        id: JobId,
        fence: &Fence,
        done: Completion,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let fence = fence.clone();
        self.blocking(move |i| {
            i.write(|t| {
                let job = t.must(id)?;
                let tr = machine::complete(&job, &fence, &done, now)?;
                t.apply(&job, &tr)?;
                crate::failpoint::hit("mid_complete"); // written, not committed
                Ok(tr.job)
            })
        })
        .await
    }

    async fn fail(
        &self,
        id: JobId,
        fence: &Fence,
        failure: JobFailure,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let fence = fence.clone();
        self.blocking(move |i| {
            let policy = i.options.policy.clone();
            i.write(|t| {
                let job = t.must(id)?;
                let tr = machine::fail(&job, &fence, &failure, now, &policy)?;
                t.apply(&job, &tr)?;
                Ok(tr.job)
            })
        })
        .await
    }

    async fn settle_and_claim(
        &self,
        id: JobId,
        fence: &Fence,
        settlement: Settlement,
        next: &ClaimRequest,
        now: Timestamp,
    ) -> Result<SettledAndClaimed, StoreError> {
        let (fence, request) = (fence.clone(), next.clone());
        self.blocking(move |i| {
            let policy = i.options.policy.clone();
            i.write(|t| {
                let job = t.must(id)?;
                let tr = machine::settle(&job, &fence, &settlement, now, &policy)?;
                t.apply(&job, &tr)?;
                if matches!(settlement, Settlement::Complete(_)) {
                    crate::failpoint::hit("mid_complete"); // written, not committed
                }
                let next = claim_in(t, &request, now, &policy)?;
                Ok(SettledAndClaimed { settled: tr.job, next })
            })
        })
        .await
    }

    async fn release(&self, id: JobId, fence: &Fence, now: Timestamp) -> Result<Job, StoreError> {
        let fence = fence.clone();
        self.blocking(move |i| {
            i.write(|t| {
                let job = t.must(id)?;
                let tr = machine::release(&job, &fence, now)?;
                t.apply(&job, &tr)?;
                Ok(tr.job)
            })
        })
        .await
    }

    async fn cancel(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.blocking(move |i| {
            i.write(|t| {
                let job = t.must(id)?;
                let tr = machine::cancel(&job, now)?;
                t.apply(&job, &tr)?;
                Ok(tr.job)
            })
        })
        .await
    }

    async fn retry(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.blocking(move |i| {
            i.write(|t| {
                let job = t.must(id)?;
                let tr = machine::retry(&job, now)?;
                t.apply(&job, &tr)?;
                Ok(tr.job)
            })
        })
        .await
    }

    async fn get(&self, id: JobId) -> Result<Job, StoreError> {
        self.blocking(move |i| {
            i.read(|txn| {
                load(&txn.open_table(JOBS)?, id)?.ok_or(Failure::Store(StoreError::NotFound(id)))
            })
        })
        .await
    }

    async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        self.blocking(move |i| {
            i.read(|txn| {
                if txn.open_table(JOBS)?.get(id)?.is_none() {
                    return Err(Failure::Store(StoreError::NotFound(id)));
                }
                let events = txn.open_table(EVENTS)?;
                let mut out = Vec::new();
                for entry in events.range((id, 0)..=(id, u32::MAX))? {
                    out.push(decode_event(entry?.1.value())?);
                }
                Ok(out)
            })
        })
        .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
        if filter.order == ListOrder::DueFirst && filter.cursor.is_some() {
            return Err(StoreError::InvalidInput(
                "a cursor cannot be used with the due-first order".to_owned(),
            ));
        }
        let filter = filter.clone();
        self.blocking(move |i| i.read(|txn| list_in(txn, &filter))).await
    }

    async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError> {
        self.blocking(move |i| i.read(|txn| stats_in(txn, now))).await
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.blocking(|i| i.read(next_due_in)).await
    }

    async fn reclaim_dead(
        &self,
        attempts: &[(JobId, Fence)],
        now: Timestamp,
    ) -> Result<Vec<Job>, StoreError> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        let attempts = attempts.to_vec();
        self.blocking(move |i| {
            i.write(|t| {
                let mut before = Vec::new();
                for (id, attempt) in &attempts {
                    let Some(job) = t.job(*id)? else { continue };
                    if let Some(tr) = machine::reclaim_dead(&job, attempt, now) {
                        t.apply(&job, &tr)?;
                        before.push(job);
                    }
                }
                Ok(before)
            })
        })
        .await
    }

    async fn purge(&self, filter: &PurgeFilter) -> Result<Vec<JobId>, StoreError> {
        let filter = filter.clone();
        self.blocking(move |i| i.write(|t| purge_in(t, &filter))).await
    }

    async fn restore(&self, job: Job, events: Vec<Event>) -> Result<(), StoreError> {
        self.blocking(move |i| i.write(|t| restore_in(t, &job, &events))).await
    }

    async fn put_runner(&self, record: &RunnerRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(record)
            .map_err(|e| StoreError::Backend(format!("cannot encode a runner record: {e}")))?;
        let owner = record.owner.id.clone();
        self.blocking(move |i| {
            i.write(|t| {
                t.runners.insert(owner.as_str(), bytes.as_slice())?;
                Ok(())
            })
        })
        .await
    }

    async fn remove_runner(&self, owner_id: &str) -> Result<(), StoreError> {
        let owner = owner_id.to_owned();
        self.blocking(move |i| {
            i.write(|t| {
                t.runners.remove(owner.as_str())?;
                Ok(())
            })
        })
        .await
    }

    async fn runners(&self) -> Result<Vec<RunnerRecord>, StoreError> {
        self.blocking(|i| {
            i.read(|txn| {
                let table = txn.open_table(RUNNERS)?;
                let mut out = Vec::new();
                for entry in table.iter()? {
                    let (k, v) = entry?;
                    let record: RunnerRecord = serde_json::from_slice(v.value()).map_err(|e| {
                        Failure::Damaged(format!("runner `{}` does not decode: {e}", k.value()))
                    })?;
                    out.push(record);
                }
                Ok(out)
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slothqueue_core::{ClockOnly, Owner};

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
    }

    /// The settle and the claim are one transaction: when the claim half
    /// fails (here on a job it cannot decode), the settle is rolled back
    /// with it and the finished job is still running under its lease.
    #[tokio::test]
    async fn a_failing_claim_half_rolls_the_settle_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(&dir.path().join("q.redb"), RedbOptions::default()).unwrap();
        let owner = Owner::named("w");
        let any = ClaimFilter::default();
        store.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        let held = store
            .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(any.clone()), t(1))
            .await
            .unwrap()
            .unwrap();
        let next = store.push(NewJob::shell("true", "/"), t(1)).await.unwrap().job;
        store
            .inner
            .with_db(|h| {
                let Handle::Writable(db) = h else { panic!("a writable handle") };
                let txn = db.begin_write()?;
                txn.open_table(JOBS)?.insert(next.id, b"not json".as_slice())?;
                txn.commit()?;
                Ok(())
            })
            .unwrap();

        let done = Settlement::Complete(Completion::default());
        let err = store
            .settle_and_claim(
                held.job.id,
                &held.fence,
                done,
                &ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(any.clone()),
                t(2),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
        let job = store.get(held.job.id).await.unwrap();
        assert_eq!(job.state, JobState::Running);
        assert_eq!(job.lease.map(|l| l.fence()), Some(held.fence));
    }
}
