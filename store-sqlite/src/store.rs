//! [`SqliteStore`]: the core's [`Store`] on one SQLite connection.
//!
//! Every write is one of core's operations ([`ops`]) run as one
//! transaction on the blocking pool, over the row verbs of [`SqliteTx`]
//! (`verbs.rs`): each row written with its old state, owner and attempt in
//! the `UPDATE`'s condition. Nothing here decides a rule; it opens
//! transactions and stores.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{Connection, params};
use slothqueue_core::ops;
use slothqueue_core::{
    Event, Fence, HeartbeatAck, Job, JobId, Lanes, ListFilter, Policy, QueueCounts, RunnerRecord,
    Schedule, Stats, StoreError, Timestamp,
};

use crate::error::{Context, Error};
use crate::open;
use crate::reads::{events_tx, list_tx, next_due_tx, queue_counts_tx, runners_tx, stats_tx};
use crate::rows::{dependents, load, read_lanes, read_schedules};
use crate::txn::{Journal, SqliteOptions, Synchronous, read_tx, write_tx, write_tx_unsynced};
use crate::verbs::SqliteTx;

/// A queue in one SQLite file. One connection per store, behind a mutex;
/// any number of stores, in this process or others, may share the file.
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Mutex<Connection>,
    ctx: Context,
    policy: Policy,
    /// Why a read-only store was opened immutable (see
    /// [`SqliteStore::read_only_note`]).
    note: Option<String>,
    /// A call failed for lack of space and the WAL has not been
    /// checkpointed since (see [`Inner::run`]).
    disk_was_full: AtomicBool,
    /// WAL with `synchronous=FULL`: writes that need no fsync may skip it
    /// (see [`write_tx_unsynced`]).
    can_skip_sync: bool,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.inner.ctx.path).finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens the queue at `path`, creating it (and its directory, with the
    /// file private to the user) when it is missing or empty, and migrating
    /// an older layout. A file that is not a queue, is damaged, or comes
    /// from a newer slothqueue is refused before anything is written to it.
    ///
    /// A file that exists but is empty (0 bytes, or a SQLite database with
    /// no tables) is made a queue only if another slothqueue is making it
    /// one right now (waited for, up to the busy timeout); else it is
    /// refused untouched with [`StoreError::Corrupt`]: only a file this
    /// open created itself becomes a new queue.
    pub fn open(path: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        let conn = open::open(path, &options)?;
        Ok(SqliteStore::on(path, conn, options, None))
    }

    /// Opens the existing queue at `path` for commands that only look
    /// (`status`, `list`, `show`, `logs`): nothing is created and nothing
    /// written, and every write through the store answers
    /// [`StoreError::Io`] of kind [`std::io::ErrorKind::ReadOnlyFilesystem`].
    /// A missing file is [`StoreError::Io`] of kind `NotFound`; an empty
    /// one (0 bytes, or a SQLite database with no tables) is refused
    /// untouched with [`StoreError::Corrupt`]; foreign, damaged and newer
    /// files as by [`SqliteStore::open`]. An older layout is migrated
    /// first (the one write this open may make).
    ///
    /// Where SQLite cannot create its shared-memory file beside the queue
    /// (a read-only folder or filesystem, a full disk) the file is read
    /// immutable, and [`SqliteStore::read_only_note`] says so and what is
    /// not seen then.
    pub fn open_read_only(path: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        let (conn, note) = open::open_read_only(path, &options)?;
        Ok(SqliteStore::on(path, conn, options, note))
    }

    fn on(
        path: &Path,
        conn: Connection,
        options: SqliteOptions,
        note: Option<String>,
    ) -> SqliteStore {
        let ctx = Context { path: path.to_path_buf(), busy_timeout: options.busy_timeout };
        SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                ctx,
                policy: options.policy,
                note,
                disk_was_full: AtomicBool::new(false),
                can_skip_sync: options.journal == Journal::Wal
                    && options.synchronous == Synchronous::Full,
            }),
        }
    }

    /// Set when [`SqliteStore::open_read_only`] had to open the file
    /// immutable, e.g. "opened immutable: its folder cannot be written, so
    /// SQLite cannot make its shared-memory file; this look does not see
    /// the commits still in q.db-wal (…), nor anything committed after it
    /// opened": for the CLI to show beside what it reads. `None` for every
    /// other store.
    pub fn read_only_note(&self) -> Option<&str> {
        self.inner.note.as_deref()
    }

    /// The queue file.
    pub fn path(&self) -> &Path {
        &self.inner.ctx.path
    }

    /// Runs SQLite's full consistency check (`PRAGMA integrity_check`, and
    /// `foreign_key_check` for trails without a job). Reads every page, so
    /// it is for `doctor`-style commands, not every open.
    pub fn check_integrity(&self) -> Result<(), StoreError> {
        self.inner.run(|conn| {
            let mut problems: Vec<String> = Vec::new();
            let mut stmt = conn.prepare("PRAGMA integrity_check")?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let line: String = row.get(0)?;
                if line != "ok" {
                    problems.push(line);
                }
            }
            let orphans: i64 =
                conn.query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| r.get(0))?;
            if orphans > 0 {
                problems.push(format!("{orphans} row(s) refer to a missing job"));
            }
            // Edges have no foreign key (see `schema::v4`): checked here.
            let loose: i64 = conn.query_row(
                "SELECT COUNT(*) FROM edges WHERE child NOT IN (SELECT id FROM jobs)",
                [],
                |r| r.get(0),
            )?;
            if loose > 0 {
                problems.push(format!("{loose} dependency edge(s) of a missing job"));
            }
            if problems.is_empty() {
                return Ok(());
            }
            let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
            Err(Error::Decode(format!("integrity check failed: {}", shown.join("; "))))
        })
    }

    /// Runs `f` on the connection on tokio's blocking pool.
    async fn with<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &Policy) -> Result<T, Error> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.run(|conn| f(conn, &inner.policy)))
            .await
            .map_err(|e| StoreError::Backend(format!("the storage task failed: {e}")))?
    }

    #[cfg(test)]
    pub(crate) fn lock_for_test(&self) -> MutexGuard<'_, Connection> {
        self.inner.lock()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-written change:
        // the open transaction is rolled back below before the next use.
        self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn run<T>(&self, f: impl FnOnce(&Connection) -> Result<T, Error>) -> Result<T, StoreError> {
        let conn = self.lock();
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        let out = f(&conn).map_err(|e| self.ctx.map(e));
        match &out {
            Err(StoreError::DiskFull(_)) => self.disk_was_full.store(true, Ordering::Relaxed),
            Ok(_) if self.disk_was_full.swap(false, Ordering::Relaxed) => {
                // Space is back. On a small disk the WAL may be what filled
                // it, and writes would eat the freed space again before the
                // next checkpoint: move it into the database file while it
                // fits, and truncate it (S15).
                let truncated = conn
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get::<_, i64>(0))
                    .is_ok_and(|busy| busy == 0);
                if !truncated {
                    self.disk_was_full.store(true, Ordering::Relaxed);
                }
            }
            _ => {}
        }
        out
    }
}

impl SqliteStore {
    /// Runs `f` on the blocking pool as one write transaction (begun
    /// `IMMEDIATE`: see [`write_tx`]), with the row verbs core's operations
    /// need ([`SqliteTx`]).
    async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteTx<'_>, &Policy) -> Result<T, Error> + Send + 'static,
    {
        self.with(move |conn, policy| write_tx(conn, |conn| f(&mut SqliteTx::new(conn), policy)))
            .await
    }

    /// As [`SqliteStore::write`], without the fsync where that is safe
    /// ([`write_tx_unsynced`]): heartbeats and runner records.
    async fn write_unsynced<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteTx<'_>, &Policy) -> Result<T, Error> + Send + 'static,
    {
        let skip_sync = self.inner.can_skip_sync;
        self.with(move |conn, policy| {
            write_tx_unsynced(conn, skip_sync, |conn| f(&mut SqliteTx::new(conn), policy))
        })
        .await
    }

    /// Runs `f` in one read transaction (one snapshot).
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Error> + Send + 'static,
    {
        self.with(move |conn, _| read_tx(conn, f)).await
    }
}

// Every write is one of core's operations ([`ops`]) in one write
// transaction, the glue written by `store_ops!`; a heartbeat commits
// without the fsync; the reads are `reads.rs`.
slothqueue_core::store_ops! {
    impl Store for SqliteStore {
        ops [
            push, push_many, push_stream, claim, complete, fail, settle_and_claim, release, note_attempt,
            hold, release_hold, edit, clone_job, change_lane, put_schedule, change_schedule,
            fire_schedules, restore_schedules, cancel, retry, reclaim_dead, purge, restore,
            restore_many,
        ];

        async fn heartbeat(
            &self,
            id: JobId,
            fence: &Fence,
            child_pgid: Option<i32>,
            now: Timestamp,
        ) -> Result<HeartbeatAck, StoreError> {
            let fence = fence.clone();
            self.write_unsynced(move |tx, policy| {
                ops::heartbeat(tx, id, &fence, child_pgid, now, policy)
            })
            .await
        }

        async fn lanes(&self) -> Result<Lanes, StoreError> {
            self.with(|conn, _| read_lanes(conn)).await
        }

        async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
            self.read(read_schedules).await
        }

        async fn queue_counts(&self, now: Timestamp) -> Result<Vec<QueueCounts>, StoreError> {
            self.read(move |conn| queue_counts_tx(conn, now)).await
        }

        async fn get(&self, id: JobId) -> Result<Job, StoreError> {
            self.with(move |conn, _| load(conn, id)).await
        }

        async fn dependents(&self, id: JobId) -> Result<Vec<JobId>, StoreError> {
            self.with(move |conn, _| dependents(conn, id)).await
        }

        async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
            self.read(move |conn| events_tx(conn, id)).await
        }

        async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
            let filter = filter.clone();
            self.with(move |conn, _| list_tx(conn, &filter)).await
        }

        async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError> {
            self.read(move |conn| stats_tx(conn, now)).await
        }

        async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
            self.read(next_due_tx).await
        }

        async fn put_runner(&self, record: &RunnerRecord) -> Result<(), StoreError> {
            let json = serde_json::to_string(record).map_err(|e| {
                StoreError::InvalidInput(format!("the runner record cannot be stored: {e}"))
            })?;
            let owner_id = record.owner.id.clone();
            let skip_sync = self.inner.can_skip_sync;
            self.with(move |conn, _| {
                write_tx_unsynced(conn, skip_sync, |conn| {
                    conn.prepare_cached(
                        "INSERT INTO runners (owner_id, record) VALUES (?1, ?2)
                         ON CONFLICT (owner_id) DO UPDATE SET record = excluded.record",
                    )?
                    .execute(params![owner_id, json])?;
                    Ok(())
                })
            })
            .await
        }

        async fn remove_runner(&self, owner_id: &str) -> Result<(), StoreError> {
            let owner_id = owner_id.to_owned();
            self.with(move |conn, _| {
                write_tx(conn, |conn| {
                    conn.execute("DELETE FROM runners WHERE owner_id = ?1", [owner_id])?;
                    Ok(())
                })
            })
            .await
        }

        async fn runners(&self) -> Result<Vec<RunnerRecord>, StoreError> {
            self.with(|conn, _| runners_tx(conn)).await
        }

        /// The file and its write-ahead log, which every commit appends to
        /// (checkpoints write the file). A watch on a symlinked file also
        /// watches these names beside the file it resolves to, where SQLite
        /// writes its log.
        fn watched_files(&self) -> Vec<std::path::PathBuf> {
            let mut wal = self.path().as_os_str().to_owned();
            wal.push("-wal");
            vec![self.path().to_owned(), wal.into()]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reads::{
        FIRST_DUE_SQL, HELD_WAITING_SQL, NEXT_NOT_DUE_SQL, NOT_DUE_SQL, QUEUE_HELD_SQL,
        QUEUE_READY_SQL, QUEUE_RUNNING_SQL, QUEUE_WAITING_SQL, list_sql,
    };
    use crate::rows::{COLUMNS, millis, text};
    use crate::schema::{APPLICATION_ID, SCHEMA_VERSION};
    use crate::verbs::{NEXT_QUEUE_SQL, due_at_priority_sql, top_priority_sql};
    use rusqlite::params_from_iter;
    use rusqlite::types::Value;
    use slothqueue_core::{ClaimFilter, ClockOnly, Owner};
    use slothqueue_core::{ClaimRequest, Completion, Failure, JobState, NewJob, Settlement, Store};
    use std::time::Duration;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
    }

    fn open(dir: &tempfile::TempDir, options: SqliteOptions) -> SqliteStore {
        SqliteStore::open(&dir.path().join("q.db"), options).unwrap()
    }

    fn pragma<T: rusqlite::types::FromSql>(conn: &Connection, name: &str) -> T {
        conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn the_store_can_be_shared_across_tasks() {
        fn shareable<T: Send + Sync + 'static>() {}
        shareable::<SqliteStore>();
    }

    #[test]
    fn default_pragmas_are_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        assert_eq!(pragma::<String>(&conn, "journal_mode"), "wal");
        assert_eq!(pragma::<i64>(&conn, "synchronous"), 2, "FULL");
        assert_eq!(pragma::<i64>(&conn, "foreign_keys"), 1);
        assert_eq!(pragma::<i32>(&conn, "application_id"), APPLICATION_ID);
        assert_eq!(pragma::<i64>(&conn, "user_version"), i64::from(SCHEMA_VERSION));
    }

    #[test]
    fn variant_pragmas_are_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions {
            synchronous: Synchronous::Normal,
            journal: Journal::Rollback,
            busy_timeout: Duration::from_millis(200),
            ..SqliteOptions::default()
        };
        let store = open(&dir, options);
        let conn = store.lock_for_test();
        assert_eq!(pragma::<String>(&conn, "journal_mode"), "delete");
        assert_eq!(pragma::<i64>(&conn, "synchronous"), 1, "NORMAL");
        assert_eq!(pragma::<i64>(&conn, "foreign_keys"), 1);
    }

    fn plan(conn: &Connection, sql: &str, params: &[Value]) -> Vec<String> {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt.query_map(params_from_iter(params), |r| r.get::<_, String>(3)).unwrap();
        rows.map(Result::unwrap).collect()
    }

    /// Each plan step searches the named index: no table scan, no sort.
    fn assert_uses(conn: &Connection, sql: &str, params: &[Value], index: &str) {
        let steps = plan(conn, sql, params);
        assert!(!steps.is_empty(), "no plan for {sql}");
        for step in &steps {
            assert!(step.starts_with("SEARCH jobs USING"), "{step:?} in {steps:?} for {sql}");
            assert!(step.contains(&format!("INDEX {index} (")), "{step:?} for {sql}");
            assert!(!step.contains("TEMP B-TREE"), "{step:?} for {sql}");
        }
    }

    #[test]
    fn claim_queries_seek_the_pending_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        let (p, now, q) = (Value::Integer(0), millis(t(0)), text("mail"));
        assert_uses(&conn, top_priority_sql(false), std::slice::from_ref(&p), "jobs_pending");
        assert_uses(&conn, top_priority_sql(true), &[p.clone(), q.clone()], "jobs_pending_queue");
        let (limit, id) = (Value::Integer(1), Value::Integer(7));
        assert_uses(
            &conn,
            &due_at_priority_sql(false, false, 0),
            &[p.clone(), now.clone(), limit.clone()],
            "jobs_pending",
        );
        assert_uses(
            &conn,
            &due_at_priority_sql(true, false, 2),
            &[p.clone(), now.clone(), limit.clone(), q.clone(), text("a"), text("b")],
            "jobs_pending_queue",
        );
        // The rest of a priority level after a cursor: a range of the index
        // from the cursor's `not_before` (the jobs before the cursor at that
        // very time, all handed out already, are stepped over).
        for (by_queue, index) in [(false, "jobs_pending"), (true, "jobs_pending_queue")] {
            let mut params = vec![p.clone(), now.clone(), limit.clone(), now.clone(), id.clone()];
            if by_queue {
                params.push(q.clone());
            }
            params.push(text("a"));
            let sql = due_at_priority_sql(by_queue, true, 1);
            assert_uses(&conn, &sql, &params, index);
            let steps = plan(&conn, &sql, &params);
            assert!(steps[0].contains("not_before>?"), "{steps:?}");
        }
        let running = format!(
            "SELECT {} FROM jobs INDEXED BY jobs_running WHERE state = 'running' ORDER BY lease_until",
            *COLUMNS
        );
        let steps = plan(&conn, &running, &[]);
        assert!(steps.iter().all(|s| s.contains("INDEX jobs_running") && !s.contains("TEMP")));
    }

    #[test]
    fn stats_and_next_due_read_indexes_not_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        for sql in [NOT_DUE_SQL, NEXT_NOT_DUE_SQL] {
            assert_uses(&conn, sql, &[millis(t(0))], "jobs_pending_due");
        }
        // No bound to seek to: the index walked in order, stopping at the
        // first entry (LIMIT 1), never the table, never a sort.
        let steps = plan(&conn, FIRST_DUE_SQL, &[]);
        assert_eq!(steps, ["SCAN jobs USING COVERING INDEX jobs_pending_due"], "{FIRST_DUE_SQL}");
    }

    /// Every query through a claim or due index names the index's whole
    /// condition, `pending_parents = 0` included: without it SQLite
    /// refuses the `INDEXED BY` (so the plan tests above would fail), and
    /// the indexes do exclude waiting jobs.
    #[test]
    fn the_claim_indexes_leave_waiting_jobs_out() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        let without = "SELECT not_before FROM jobs INDEXED BY jobs_pending_due
             WHERE state = 'pending' AND not_before > ?1";
        let err = conn.prepare(without).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("no query solution"), "{err}");
        for index in ["jobs_pending", "jobs_pending_queue", "jobs_pending_due"] {
            let sql: String = conn
                .query_row("SELECT sql FROM sqlite_schema WHERE name = ?1", [index], |r| r.get(0))
                .unwrap();
            assert!(
                sql.ends_with("WHERE state = 'pending' AND (pending_parents = 0 AND held = 0)"),
                "{sql}"
            );
        }
        for sql in [
            top_priority_sql(false).to_owned(),
            top_priority_sql(true).to_owned(),
            due_at_priority_sql(false, false, 0),
            due_at_priority_sql(true, true, 1),
        ] {
            assert!(
                sql.contains("state = 'pending' AND pending_parents = 0 AND held = 0"),
                "{sql}"
            );
        }
    }

    /// What lanes and holds added reads indexes only: the skip-scan of
    /// queues a claim walks when a lane is closed seeks the per-queue
    /// claim index; every per-queue count reads its partial index, never
    /// the table (running jobs, few, aside).
    #[test]
    fn lane_queries_read_their_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        let steps = plan(&conn, NEXT_QUEUE_SQL, &[text("a")]);
        assert_eq!(steps, ["SEARCH jobs USING COVERING INDEX jobs_pending_queue (queue>?)"]);
        for (sql, params, index) in [
            (QUEUE_READY_SQL, vec![millis(t(0))], "jobs_pending_queue"),
            (QUEUE_WAITING_SQL, vec![], "jobs_waiting"),
            (QUEUE_HELD_SQL, vec![], "jobs_held"),
            (HELD_WAITING_SQL, vec![], "jobs_held"),
        ] {
            let steps = plan(&conn, sql, &params);
            assert_eq!(steps, [format!("SCAN jobs USING COVERING INDEX {index}")], "{sql}");
        }
        let steps = plan(&conn, QUEUE_RUNNING_SQL, &[]);
        assert!(steps.iter().any(|s| s.contains("INDEX jobs_running")), "{steps:?}");
        let steps = plan(&conn, "SELECT scope, settings FROM lanes ORDER BY scope", &[]);
        assert_eq!(steps, ["SCAN lanes"], "the table's own order");
        let steps = plan(&conn, "SELECT key, schedule FROM schedules ORDER BY key", &[]);
        assert_eq!(steps, ["SCAN schedules"], "the table's own order");
        let steps = plan(&conn, "SELECT schedule FROM schedules WHERE key = ?1", &[text("k")]);
        assert_eq!(steps, ["SEARCH schedules USING PRIMARY KEY (key=?)"]);
    }

    /// The VM steps of the queries one claim reads its candidates with
    /// (from the statement cache after it; the claim is rolled back).
    fn claim_steps(store: &SqliteStore, now: Timestamp) -> (i32, Option<JobId>) {
        use rusqlite::StatementStatus::VmStep;
        let sqls = [
            top_priority_sql(false).to_owned(),
            top_priority_sql(true).to_owned(),
            due_at_priority_sql(false, false, 0),
            due_at_priority_sql(true, false, 0),
            NEXT_QUEUE_SQL.to_owned(),
            "SELECT scope, settings FROM lanes ORDER BY scope".to_owned(),
        ];
        let conn = store.lock_for_test();
        for sql in &sqls {
            conn.prepare_cached(sql).unwrap().reset_status(VmStep);
        }
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        let request = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly));
        let claimed =
            ops::claim(&mut SqliteTx::new(&conn), &request, now, &Policy::default()).unwrap();
        conn.execute_batch("ROLLBACK").unwrap();
        let steps = sqls.iter().map(|sql| conn.prepare_cached(sql).unwrap().get_status(VmStep));
        (steps.sum(), claimed.map(|c| c.job.id))
    }

    /// A paused lane's backlog costs a claim nothing per job: the claim
    /// skips the lane in the per-queue index, so it runs as many steps
    /// with 5,000 jobs behind the pause as with 50. And a file with no
    /// lane settings claims from the one all-queue index as before.
    #[tokio::test]
    async fn a_paused_backlog_costs_a_claim_nothing_per_job() {
        use slothqueue_core::{LaneChange, LaneScope, Stamp};
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let bulk = |n: usize| (0..n).map(|_| NewJob::shell("true", "/").queue("bulk").priority(5));
        store.push_many(bulk(50).collect(), t(0)).await.unwrap();
        let web = store.push(NewJob::shell("true", "/").queue("web"), t(0)).await.unwrap().job;
        let (open_steps, taken) = claim_steps(&store, t(1));
        assert_eq!(taken, Some(1));
        let pause = LaneChange::Pause(Stamp::new("ana", t(0)));
        store.change_lane(&LaneScope::Queue("bulk".into()), &pause).await.unwrap();
        let (few, taken) = claim_steps(&store, t(1));
        assert_eq!(taken, Some(web.id));
        store.push_many(bulk(5_000).collect(), t(0)).await.unwrap();
        let (many, taken) = claim_steps(&store, t(1));
        assert_eq!(taken, Some(web.id));
        assert!(few > 0 && open_steps > 0, "{few} {open_steps}");
        assert_eq!(many, few, "steps with 5,000 paused jobs against 50");
    }

    #[test]
    fn key_lookups_and_lists_by_state_seek_partial_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let conn = store.lock_for_test();
        let by_key = format!("SELECT {} FROM jobs WHERE idempotency_key = ?1", *COLUMNS);
        assert_uses(&conn, &by_key, &[text("k")], "jobs_key");
        // A job's dependents: one range of the edges' key, already in order.
        let steps = plan(&conn, crate::rows::DEPENDENTS_SQL, &[Value::Integer(1)]);
        assert_eq!(steps, ["SEARCH edges USING PRIMARY KEY (parent=?)"]);
        for (state, index) in [
            (JobState::Running, "jobs_running"),
            (JobState::Done, "jobs_done"),
            (JobState::Failed, "jobs_failed"),
            (JobState::Cancelled, "jobs_cancelled"),
        ] {
            let mut sql = format!("SELECT {} FROM jobs WHERE 1", *COLUMNS);
            sql.push_str(&format!(" AND state = '{}' ORDER BY id DESC LIMIT 50", state.as_str()));
            let steps = plan(&conn, &sql, &[]);
            if state == JobState::Running {
                // Few rows, sorted by id: the lease-ordered index, not a scan.
                let filter =
                    ListFilter { state: Some(state), limit: Some(50), ..ListFilter::default() };
                let (sql, params) = list_sql(&filter).unwrap();
                let steps = plan(&conn, &sql, &params);
                assert!(steps[0].contains("INDEX jobs_running"), "{steps:?}");
                continue;
            }
            assert!(
                steps.iter().all(|s| s.contains(&format!("INDEX {index}")) && !s.contains("TEMP")),
                "{steps:?}"
            );
        }
    }

    /// The counts `stats` reads from `dbstat` agree with `COUNT(*)`, also
    /// once the indexes are deep enough to have interior pages (whose cells
    /// are entries too in an index b-tree) and after deletes.
    #[tokio::test]
    async fn index_sizes_are_exact_counts() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let jobs: Vec<NewJob> = (0..30_000)
            .map(|i| NewJob::shell("true", "/").not_before(t(i % 7 - 3)).priority((i % 3) as i32))
            .collect();
        store.push_many(jobs, t(0)).await.unwrap();
        let owner = Owner::named("w");
        for i in 0..300 {
            let c = store.claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), t(1)).await;
            let c = c.unwrap().unwrap();
            match i % 4 {
                0 => {}
                1 => drop(store.complete(c.job.id, &c.fence, Completion::default(), t(2)).await),
                2 => drop(store.cancel(c.job.id, t(2)).await),
                _ => drop(
                    store
                        .fail(
                            c.job.id,
                            &c.fence,
                            Failure { error: "x".into(), exit_code: None, permanent: false },
                            t(2),
                        )
                        .await,
                ),
            }
        }
        for id in (1..=30_000).step_by(97) {
            let _ = store.cancel(id, t(3)).await;
        }
        let want = {
            let conn = store.lock_for_test();
            let n = |state: &str| -> u64 {
                conn.query_row(
                    &format!("SELECT COUNT(*) FROM jobs NOT INDEXED WHERE state = '{state}'"),
                    [],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap()
                .try_into()
                .unwrap()
            };
            let due: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM jobs NOT INDEXED WHERE state = 'pending' AND not_before <= ?1",
                    [t(1).as_millis()],
                    |r| r.get(0),
                )
                .unwrap();
            let deep: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM dbstat WHERE name = 'jobs_pending_due' AND pagetype = 'internal'",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(deep > 0, "the pending index has interior pages");
            Stats {
                pending: n("pending"),
                waiting_on_parents: 0,
                held: 0,
                running: n("running"),
                done: n("done"),
                failed: n("failed"),
                cancelled: n("cancelled"),
                due_now: due.try_into().unwrap(),
                next_due: Some(t(2)),
            }
        };
        assert!(want.done > 0 && want.cancelled > 0 && want.running > 0, "{want:?}");
        assert_eq!(store.stats(t(1)).await.unwrap(), want);
    }

    #[tokio::test]
    async fn heartbeats_and_runner_records_leave_synchronous_as_configured() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        store.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        let owner = Owner::named("w");
        let c = store
            .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), t(1))
            .await
            .unwrap();
        let c = c.unwrap();
        store.heartbeat(c.job.id, &c.fence, Some(42), t(2)).await.unwrap();
        let record = RunnerRecord {
            owner: owner.clone(),
            queues: vec![],
            kinds: None,
            refused: Vec::new(),
            started_at: t(0),
            updated_at: t(2),
            activity: slothqueue_core::RunnerActivity::Starting,
            slots: 1,
            running: Vec::new(),
            gpus: None,
        };
        store.put_runner(&record).await.unwrap();
        assert_eq!(pragma::<i64>(&store.lock_for_test(), "synchronous"), 2, "FULL again");
        assert_eq!(store.get(c.job.id).await.unwrap().lease.unwrap().child_pgid, Some(42));
        assert_eq!(store.runners().await.unwrap(), vec![record]);
    }

    #[tokio::test]
    async fn claim_skips_a_priority_level_with_nothing_due() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let later = NewJob::shell("later", "/").priority(9).not_before(t(60));
        let mail = NewJob::new("send", serde_json::json!({})).queue("mail").priority(1);
        let now = NewJob::shell("now", "/").priority(0);
        for j in [later, mail, now] {
            store.push(j, t(0)).await.unwrap();
        }
        let owner = Owner::named("w");
        let any = ClaimFilter::default();
        let first = store
            .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(any.clone()), t(1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.job.id, 2, "priority 9 is not due yet; priority 1 is");
        let shell_only =
            ClaimFilter { queues: vec!["default".into()], kinds: Some(vec!["shell".into()]) };
        let second = store
            .claim(
                &ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(shell_only.clone()),
                t(1),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(second.job.id, 3);
        assert!(
            store
                .claim(
                    &ClaimRequest::new(owner.clone(), Arc::new(ClockOnly))
                        .filter(shell_only.clone()),
                    t(1)
                )
                .await
                .unwrap()
                .is_none()
        );
        let third = store
            .claim(
                &ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(any.clone()),
                t(61),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(third.job.id, 1);
    }

    /// A claim that passes over many jobs (here, refused) pulls them from
    /// a cursor in growing batches, across priority levels and, with a lane
    /// closed, queue by queue (merged in claim order), and takes the first
    /// it may: what the reference store, reading every due job, takes too.
    #[tokio::test]
    async fn a_claim_passing_over_many_jobs_walks_on_in_claim_order() {
        use slothqueue_core::{LaneChange, LaneScope, Stamp};
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        let jobs: Vec<NewJob> = (0..120)
            .map(|i| {
                let queue = if i % 3 == 0 { "a" } else { "b" };
                NewJob::shell("true", "/")
                    .queue(queue)
                    .priority(i % 2)
                    .not_before(t(i64::from(i % 4) - 4))
            })
            .collect();
        let pushed = store.push_many(jobs, t(0)).await.unwrap();
        let mut order: Vec<Job> = pushed.into_iter().map(|p| p.job).collect();
        order.sort_by_key(Job::claim_order);
        let closed = NewJob::shell("true", "/").queue("c").priority(9);
        store.push(closed, t(0)).await.unwrap();
        let pause = LaneChange::Pause(Stamp::new("ana", t(0)));
        store.change_lane(&LaneScope::Queue("c".into()), &pause).await.unwrap();

        let owner = Owner::named("w");
        for skip in [0, 1, 9, 80, 119] {
            let refused = order[..skip].iter().map(|j| j.id);
            let request = ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).refusing(refused);
            let conn = store.lock_for_test();
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            let claimed =
                ops::claim(&mut SqliteTx::new(&conn), &request, t(1), &Policy::default()).unwrap();
            conn.execute_batch("ROLLBACK").unwrap();
            assert_eq!(claimed.map(|c| c.job.id), Some(order[skip].id), "after {skip} refused");
        }
        let everything =
            ClaimRequest::new(owner, Arc::new(ClockOnly)).refusing(order.iter().map(|j| j.id));
        assert!(store.claim(&everything, t(1)).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_full_disk_rolls_back_and_the_next_call_works() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        store.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        {
            // SQLite answers SQLITE_FULL when the page limit is reached,
            // exactly as when the disk is.
            let conn = store.lock_for_test();
            let pages: i64 = pragma(&conn, "page_count");
            conn.execute_batch(&format!("PRAGMA max_page_count = {pages}")).unwrap();
        }
        let big = NewJob::new("big", serde_json::json!({ "data": "x".repeat(200_000) }));
        let err = store.push(big.clone(), t(1)).await.unwrap_err();
        assert!(matches!(&err, StoreError::DiskFull(p) if p == store.path()), "{err:?}");
        assert!(err.is_temporary());
        assert!(store.lock_for_test().is_autocommit(), "the failed transaction was rolled back");
        assert_eq!(store.stats(t(1)).await.unwrap().pending, 1, "nothing half-written");
        store.lock_for_test().execute_batch("PRAGMA max_page_count = 1000000").unwrap();
        assert_eq!(store.push(big, t(2)).await.unwrap().job.id, 2);
        store.check_integrity().unwrap();
    }

    #[tokio::test]
    async fn a_row_edited_by_another_tool_reads_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
        store.push(NewJob::shell("true", "/"), t(0)).await.unwrap();
        store.lock_for_test().execute_batch("UPDATE jobs SET payload = 'not json'").unwrap();
        let err = store.get(1).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    }

    /// The settle and the claim are one transaction: when the claim half
    /// fails (here on a job whose stored row does not decode), the settle
    /// is rolled back with it and the finished job is still running under
    /// its lease.
    #[tokio::test]
    async fn a_failing_claim_half_rolls_the_settle_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, SqliteOptions::default());
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

    /// Overwrites job `id`'s stored payload with text that is not JSON, as a
    /// tool outside slothqueue might.
    fn garble(store: &SqliteStore, id: JobId) {
        store
            .lock_for_test()
            .execute("UPDATE jobs SET payload = 'not json' WHERE id = ?1", [id])
            .unwrap();
    }
}
