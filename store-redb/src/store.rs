//! [`RedbStore`]: the [`Store`] trait on redb tables (see the crate docs
//! for the table design and the mechanism). The handle: the snapshot
//! refresh of a read-only look, the write transaction behind the write
//! gate, the reopen after a latched I/O error. Every write of
//! `impl Store` is one of core's operations ([`ops`]) run in one write
//! transaction on tokio's blocking pool, over the row verbs of
//! [`RedbTx`] (`verbs.rs`), which keeps every index in step with the row;
//! the reads are `reads.rs`'s. Nothing here decides a rule.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use redb::ReadTransaction;
use slothqueue_core::{
    Event, Job, JobId, Lanes, ListFilter, Policy, QueueCounts, RunnerRecord, Schedule, Stats,
    StoreError, Timestamp,
};

use crate::error::{Failure, corrupt, guarded, panic_message};
use crate::reads::{
    events_in, get_in, list_in, next_due_in, queue_counts_in, runners_in, stats_in,
};
use crate::rows::{RedbTx, dependents_in, lanes_in, schedules_in, verify_indexes};
use crate::schema::{EDGES, LANES, SCHEDULES, SCHEMA_VERSION};
use crate::txn::{self, Db, Gate, Handle, RedbOptions, gate_for, read_only};
use crate::{open, seal};

/// A queue in one redb file. Cheap to share (`Arc`); several handles, in
/// one process or many, may hold the same file.
#[derive(Debug)]
pub struct RedbStore {
    inner: Arc<Inner>,
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
    /// are polled for (see [`txn::patiently`]).
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
        let db = open::open_database(path, options.lock_timeout, options.full_check)?;
        Ok(RedbStore::on(path, options, Handle::Writable(db), gate_for(path)?, true))
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
        let handle = open::open_read_only(path, options.lock_timeout)?;
        Ok(RedbStore::on(path, options, handle, gate_for(path)?, true))
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
        let db = open::open_backend(backend, label, options.lock_timeout)?;
        Ok(RedbStore::on(label, options, Handle::Writable(db), Arc::new(Gate::default()), false))
    }

    /// A store on an opened handle; read-only unless the handle is writable.
    fn on(
        path: &Path,
        options: RedbOptions,
        handle: Handle,
        gate: Arc<Gate>,
        on_file: bool,
    ) -> RedbStore {
        let read_only = !matches!(handle, Handle::Writable(_));
        let db = RwLock::new(if on_file && !read_only {
            Db::sealed(handle, path)
        } else {
            Db::new(handle)
        });
        RedbStore {
            inner: Arc::new(Inner { path: path.to_owned(), options, db, gate, on_file, read_only }),
        }
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
        if let Ok(Some(ro)) = open::open_current_read_only(&self.path, Duration::ZERO) {
            *self.db.write().unwrap_or_else(PoisonError::into_inner) =
                Db::new(Handle::ReadOnly(ro));
        }
    }

    /// Runs `f` in a write transaction and commits it, or aborts it if `f`
    /// fails (nothing is written then).
    ///
    /// A file a newer slothqueue migrated while this handle was open (a
    /// runner left going across an upgrade) is refused as
    /// [`StoreError::SchemaTooNew`] before `f` runs: this build would write
    /// rows and indexes in its own layout, out of step with the new one.
    fn write<T>(&self, f: impl Fn(&mut RedbTx<'_>) -> Result<T, Failure>) -> Result<T, StoreError> {
        if self.read_only {
            return Err(read_only(&self.path));
        }
        let committed = self.with_db(|h| {
            let Handle::Writable(db) = h else {
                return Err(Failure::Store(read_only(&self.path)));
            };
            txn::write(db, &self.gate, self.options.lock_timeout, |t| {
                if t.version > u64::from(SCHEMA_VERSION) {
                    return Err(Failure::Store(StoreError::SchemaTooNew {
                        path: self.path.clone(),
                        found: u32::try_from(t.version).unwrap_or(u32::MAX),
                        supported: SCHEMA_VERSION,
                    }));
                }
                f(t)
            })
        })?;
        self.db.read().unwrap_or_else(PoisonError::into_inner).renew_seal();
        Ok(committed)
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
                    open::open_read_only(&self.path, self.options.lock_timeout)?
                } else {
                    let check = !seal::holds(&self.path);
                    Handle::Writable(open::open_writable(
                        &self.path,
                        self.options.lock_timeout,
                        check,
                    )?)
                };
                let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
                *db = if self.read_only { Db::new(fresh) } else { Db::sealed(fresh, &self.path) };
                guarded(|| f(db.handle())).map_err(|e| e.into_store(&self.path))
            }
            r => r.map_err(|e| e.into_store(&self.path)),
        }
    }
}

impl RedbStore {
    /// Runs `f` on the blocking pool in one write transaction with the
    /// store's policy: committed if it succeeds, else nothing is written.
    async fn write<T: Send + 'static>(
        &self,
        f: impl Fn(&mut RedbTx<'_>, &Policy) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.blocking(move |i| i.write(|t| f(t, &i.options.policy))).await
    }

    /// Runs `f` on the blocking pool in one read transaction (one
    /// snapshot).
    async fn read<T: Send + 'static>(
        &self,
        f: impl Fn(&ReadTransaction) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.blocking(move |i| i.read(&f)).await
    }
}

// Every write is core's operation ([`ops`]) in one write transaction
// (`store_ops!` writes those methods); a push and a claim first move what
// became due into `ready` (`RedbTx::catch_up`, the watermark rule). The
// reads are `reads.rs`.
slothqueue_core::store_ops! {
impl Store for RedbStore {
    ops [
        push, push_many, push_stream, claim, heartbeat, complete, fail, settle_and_claim,
        release, note_attempt, hold, release_hold, edit, clone_job, cancel, retry,
        reclaim_dead, purge, restore, restore_many, put_schedule, change_schedule,
        fire_schedules, restore_schedules, change_lane,
    ];

    async fn dependents(&self, id: JobId) -> Result<Vec<JobId>, StoreError> {
        // A parent purged before its children still lists them: an edge
        // lives as long as its child.
        self.read(move |txn| dependents_in(&txn.open_table(EDGES)?, id)).await
    }

    async fn get(&self, id: JobId) -> Result<Job, StoreError> {
        self.read(move |txn| get_in(txn, id)).await
    }

    async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        self.read(move |txn| events_in(txn, id)).await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
        filter.check()?;
        let filter = filter.clone();
        self.read(move |txn| list_in(txn, &filter)).await
    }

    async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError> {
        self.read(move |txn| stats_in(txn, now)).await
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.read(next_due_in).await
    }

    async fn queue_counts(&self, now: Timestamp) -> Result<Vec<QueueCounts>, StoreError> {
        self.read(move |txn| queue_counts_in(txn, now)).await
    }





    async fn put_runner(&self, record: &RunnerRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(record)
            .map_err(|e| StoreError::Backend(format!("cannot encode a runner record: {e}")))?;
        let owner = record.owner.id.clone();
        self.write(move |t, _| {
            t.runners.insert(owner.as_str(), bytes.as_slice())?;
            Ok(())
        })
        .await
    }

    async fn remove_runner(&self, owner_id: &str) -> Result<(), StoreError> {
        let owner = owner_id.to_owned();
        self.write(move |t, _| {
            t.runners.remove(owner.as_str())?;
            Ok(())
        })
        .await
    }

    async fn runners(&self) -> Result<Vec<RunnerRecord>, StoreError> {
        self.read(runners_in).await
    }


    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        self.read(|txn| schedules_in(&txn.open_table(SCHEDULES)?)).await
    }




    async fn lanes(&self) -> Result<Lanes, StoreError> {
        self.read(|txn| lanes_in(&txn.open_table(LANES)?)).await
    }


    /// redb writes every commit into the file itself.
    fn watched_files(&self) -> Vec<PathBuf> {
        vec![self.inner.path.clone()]
    }
}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::JOBS;
    use slothqueue_core::{
        ClaimFilter, ClaimRequest, ClockOnly, Completion, JobEdit, JobState, NewJob, Owner,
        Settlement, Stamp, Store,
    };

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
    }

    fn open(dir: &tempfile::TempDir, options: RedbOptions) -> RedbStore {
        RedbStore::open(&dir.path().join("q.redb"), options).unwrap()
    }

    /// A writable handle seals the file as it leaves it: after opening,
    /// after each commit while another handle (a runner) keeps it open,
    /// and after closing; a write from outside breaks the seal, and the
    /// next open (which checks the whole file then) seals it again.
    #[tokio::test]
    async fn every_writer_leaves_the_file_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.redb");
        let runner = open(&dir, RedbOptions::default());
        assert!(seal::holds(&path), "sealed as the open left it");
        let add = open(&dir, RedbOptions::default());
        add.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        assert!(seal::holds(&path), "sealed after a commit");
        drop(add);
        assert!(seal::holds(&path), "sealed after the close");
        runner.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        assert!(seal::holds(&path), "sealed after the runner's commit");
        drop(runner);
        assert!(seal::holds(&path));

        // A write from outside gives the file another modification time.
        let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(old).unwrap();
        assert!(!seal::holds(&path), "touched from outside");
        let again = open(&dir, RedbOptions::default());
        assert!(seal::holds(&path), "checked in full, then sealed");
        assert_eq!(again.stats(t(1)).await.unwrap().pending, 2);
    }

    /// An edit rewrites every index entry keyed by what it changed (the
    /// ready index by queue, priority and due time, the due-time index, the
    /// held index by queue) from the job as it was: the integrity check,
    /// which compares each index with the rows, finds them in step after
    /// edits of due jobs (already in the ready index), of jobs not yet due
    /// and of a held job, and after a clone.
    #[tokio::test]
    async fn an_edit_moves_the_job_in_every_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, RedbOptions::default());
        let due = store.push(NewJob::shell("true", "/"), t(0)).await.unwrap().job;
        let later = NewJob::shell("true", "/").not_before(t(100));
        let later = store.push(later, t(0)).await.unwrap().job;
        let held = store.push(NewJob::shell("true", "/"), t(0)).await.unwrap().job;
        store.hold(held.id, Stamp::new("ana", t(0)), t(0)).await.unwrap();
        // A claim of nothing in queue `x` moves the watermark past `due`.
        let none = ClaimFilter { queues: vec!["x".to_owned()], kinds: None };
        let request = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly)).filter(none);
        assert!(store.claim(&request, t(1)).await.unwrap().is_none());

        let moved = JobEdit {
            queue: Some("x".into()),
            priority: Some(7),
            not_before: Some(t(50)),
            ..JobEdit::default()
        };
        store.edit(due.id, &moved, t(2)).await.unwrap();
        store.check_integrity().unwrap();
        let forward = JobEdit { not_before: Some(t(0)), priority: Some(-3), ..JobEdit::default() };
        store.edit(later.id, &forward, t(2)).await.unwrap();
        store.check_integrity().unwrap();
        store
            .edit(held.id, &JobEdit { queue: Some("y".into()), ..JobEdit::default() }, t(2))
            .await
            .unwrap();
        store.check_integrity().unwrap();
        let clone = store.clone_job(due.id, &JobEdit::default(), t(3)).await.unwrap();
        store.check_integrity().unwrap();

        // The clone (priority 7, due now), then the job brought forward;
        // the one put off and the held one are not taken.
        let any = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly));
        let mut order = Vec::new();
        while let Some(c) = store.claim(&any, t(3)).await.unwrap() {
            order.push(c.job.id);
        }
        assert_eq!(order, [clone.id, later.id]);
        store.check_integrity().unwrap();
    }

    /// The settle and the claim are one transaction: when the claim half
    /// fails (here on a job whose stored row does not decode), the settle
    /// is rolled back with it and the finished job is still running under
    /// its lease.
    #[tokio::test]
    async fn a_failing_claim_half_rolls_the_settle_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, RedbOptions::default());
        let owner = Owner::named("w");
        let any = ClaimFilter::default();
        store.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        let held = store
            .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(any.clone()), t(1))
            .await
            .unwrap()
            .unwrap();
        let next = store.push(NewJob::shell("true", "/"), t(1)).await.unwrap().job;
        garble(&store, next.id);

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

    /// Overwrites job `id`'s stored row with bytes that are not JSON, as a
    /// tool outside slothqueue might.
    fn garble(store: &RedbStore, id: JobId) {
        store
            .inner
            .with_db(|h| {
                let Handle::Writable(db) = h else { panic!("a writable handle") };
                let txn = db.begin_write()?;
                txn.open_table(JOBS)?.insert(id, b"not json".as_slice())?;
                txn.commit()?;
                Ok(())
            })
            .unwrap();
    }
}
