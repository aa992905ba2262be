//! The file's layout: the schema version and application id that mark a
//! queue, the DDL of every version as its migration (`MIGRATIONS`, keyed on
//! SQLite's `user_version`), and the exact `sqlite_schema` each version must
//! have, which the open compares a file with (see `open.rs`).
//!
//! Migrations are frozen history: a released one never changes; a new
//! version is a new function appended to `MIGRATIONS`.

use rusqlite::Connection;

/// The newest layout this build reads and writes. Files record theirs in
/// SQLite's `user_version`; older ones are migrated on open, newer ones
/// refused.
pub const SCHEMA_VERSION: u32 = 7;

/// SQLite's `application_id` for slothqueue queues (`"SLTQ"`): how a file
/// says it is a queue and not some other program's database.
pub const APPLICATION_ID: i32 = 0x534C_5451;

/// One step of the layout's history: brings a file from version `i` to
/// `i + 1` where `i` is the step's index. Runs inside the opening write
/// transaction, so a crash leaves the old version intact.
pub(crate) type Migration = fn(&Connection) -> rusqlite::Result<()>;

/// Every migration, in order; `MIGRATIONS[i]` upgrades version `i` to `i + 1`.
/// A new version is a new function appended here and `SCHEMA_VERSION` bumped.
pub(crate) const MIGRATIONS: &[Migration] = &[v1, v2, v3, v4, v5, v6, v7];

const _: () = assert!(MIGRATIONS.len() == SCHEMA_VERSION as usize);

/// The tables a queue of each version has (index: version - 1).
pub(crate) const TABLES: [&[&str]; 7] = [
    &["jobs", "events", "runners"],
    &["jobs", "events", "runners", "meta"],
    &["jobs", "events", "runners", "meta"],
    &["jobs", "events", "runners", "meta", "edges"],
    &["jobs", "events", "runners", "meta", "edges", "lanes"],
    &["jobs", "events", "runners", "meta", "edges", "lanes", "schedules"],
    &["jobs", "events", "runners", "meta", "edges", "lanes", "schedules"],
];

/// The `meta` row holding the highest job id ever handed out and since
/// purged (see [`v2`]).
pub(crate) const ID_HIGH_WATER: &str = "job_id_high_water";

/// Version 1: jobs as columns, the event trail, runner records.
///
/// The partial indexes are what keep a claim O(log n) under a backlog of a
/// million jobs: the claim walks `jobs_pending` (or the per-queue one) one
/// priority level at a time, and `stats`/`next_due` read `jobs_pending_due`
/// and `jobs_running` instead of the table.
fn v1(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE jobs (
            id               INTEGER PRIMARY KEY AUTOINCREMENT,
            queue            TEXT    NOT NULL,
            kind             TEXT    NOT NULL,
            payload          TEXT    NOT NULL,
            priority         INTEGER NOT NULL,
            state            TEXT    NOT NULL
                CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
            attempts         INTEGER NOT NULL,
            max_attempts     INTEGER NOT NULL,
            max_runtime_ms   INTEGER,
            not_before       INTEGER NOT NULL,
            lease_owner      TEXT,
            lease_host       TEXT,
            lease_boot_id    TEXT,
            lease_pid        INTEGER,
            lease_pid_start  INTEGER,
            lease_attempt    INTEGER,
            lease_until      INTEGER,
            lease_child_pgid INTEGER,
            idempotency_key  TEXT    UNIQUE,
            payload_hash     TEXT    NOT NULL,
            cancel_requested INTEGER NOT NULL,
            last_error       TEXT,
            result           TEXT,
            exit_code        INTEGER,
            created_at       INTEGER NOT NULL,
            started_at       INTEGER,
            finished_at      INTEGER,
            CHECK ((state = 'running') = (lease_owner IS NOT NULL)),
            CHECK (lease_owner IS NULL OR (lease_host IS NOT NULL AND lease_attempt IS NOT NULL
                                           AND lease_until IS NOT NULL)),
            CHECK (lease_owner IS NOT NULL OR (lease_host IS NULL AND lease_boot_id IS NULL
                AND lease_pid IS NULL AND lease_pid_start IS NULL AND lease_attempt IS NULL
                AND lease_until IS NULL AND lease_child_pgid IS NULL))
        ) STRICT;
        CREATE INDEX jobs_pending ON jobs (priority DESC, not_before, id)
            WHERE state = 'pending';
        CREATE INDEX jobs_pending_queue ON jobs (queue, priority DESC, not_before, id)
            WHERE state = 'pending';
        CREATE INDEX jobs_pending_due ON jobs (not_before) WHERE state = 'pending';
        CREATE INDEX jobs_running ON jobs (lease_until) WHERE state = 'running';
        CREATE INDEX jobs_state ON jobs (state, id);
        CREATE TABLE events (
            job_id   INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
            seq      INTEGER NOT NULL,
            at       INTEGER NOT NULL,
            kind     TEXT    NOT NULL,
            owner    TEXT,
            attempt  INTEGER,
            message  TEXT,
            retry_at INTEGER,
            PRIMARY KEY (job_id, seq)
        ) STRICT, WITHOUT ROWID;
        CREATE TABLE runners (
            owner_id TEXT PRIMARY KEY,
            record   TEXT NOT NULL
        ) STRICT, WITHOUT ROWID;",
    )
}

/// The job table's columns from version 2 on (version 1 differs only in
/// `AUTOINCREMENT` and the `UNIQUE` on `idempotency_key`).
const JOBS_V2: &str = "
        CREATE TABLE jobs_v2 (
            id               INTEGER PRIMARY KEY,
            queue            TEXT    NOT NULL,
            kind             TEXT    NOT NULL,
            payload          TEXT    NOT NULL,
            priority         INTEGER NOT NULL,
            state            TEXT    NOT NULL
                CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
            attempts         INTEGER NOT NULL,
            max_attempts     INTEGER NOT NULL,
            max_runtime_ms   INTEGER,
            not_before       INTEGER NOT NULL,
            lease_owner      TEXT,
            lease_host       TEXT,
            lease_boot_id    TEXT,
            lease_pid        INTEGER,
            lease_pid_start  INTEGER,
            lease_attempt    INTEGER,
            lease_until      INTEGER,
            lease_child_pgid INTEGER,
            idempotency_key  TEXT,
            payload_hash     TEXT    NOT NULL,
            cancel_requested INTEGER NOT NULL,
            last_error       TEXT,
            result           TEXT,
            exit_code        INTEGER,
            created_at       INTEGER NOT NULL,
            started_at       INTEGER,
            finished_at      INTEGER,
            CHECK ((state = 'running') = (lease_owner IS NOT NULL)),
            CHECK (lease_owner IS NULL OR (lease_host IS NOT NULL AND lease_attempt IS NOT NULL
                                           AND lease_until IS NOT NULL)),
            CHECK (lease_owner IS NOT NULL OR (lease_host IS NULL AND lease_boot_id IS NULL
                AND lease_pid IS NULL AND lease_pid_start IS NULL AND lease_attempt IS NULL
                AND lease_until IS NULL AND lease_child_pgid IS NULL))
        ) STRICT;";

/// Version 2: a push writes 5 b-tree pages instead of 8 (the row, two claim
/// indexes, the due index, the event), and every count `stats` reports is
/// the size of one partial index.
///
/// - **No `AUTOINCREMENT`**: it rewrote `sqlite_sequence` on every insert.
///   Ids stay above every id ever used because the next id is
///   `max(MAX(id), high water)`, and `purge` raises the high water in
///   `meta` before it deletes: a page written per purge, not per push.
/// - **The idempotency key's unique index is partial** (`IS NOT NULL`):
///   the `UNIQUE` column indexed every keyless job's NULL too.
/// - **`jobs_state` is gone**; one partial index per other state
///   (`jobs_running`, `jobs_done`, `jobs_failed`, `jobs_cancelled`) lets a
///   pending job touch none of them, serves `list` by state in id order,
///   and makes each count a page walk (`dbstat`), not a step per job.
///
/// The table is rebuilt (SQLite cannot drop `AUTOINCREMENT` or a column's
/// `UNIQUE` in place) the way SQLite's documentation prescribes: a new
/// table renamed over the old one (renaming the old one instead would point
/// `events`' foreign key at it), with foreign keys off so that dropping the
/// old table does not cascade into the trails (`open::migrate` turns them off).
fn v2(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE meta (
            name  TEXT    PRIMARY KEY,
            value INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID;
        INSERT INTO meta (name, value)
            SELECT '{ID_HIGH_WATER}', COALESCE(MAX(seq), 0) FROM sqlite_sequence WHERE name = 'jobs';
        {JOBS_V2}
        INSERT INTO jobs_v2 SELECT * FROM jobs;
        DROP TABLE jobs;
        ALTER TABLE jobs_v2 RENAME TO jobs;
        CREATE UNIQUE INDEX jobs_key ON jobs (idempotency_key)
            WHERE idempotency_key IS NOT NULL;
        CREATE INDEX jobs_pending ON jobs (priority DESC, not_before, id)
            WHERE state = 'pending';
        CREATE INDEX jobs_pending_queue ON jobs (queue, priority DESC, not_before, id)
            WHERE state = 'pending';
        CREATE INDEX jobs_pending_due ON jobs (not_before) WHERE state = 'pending';
        CREATE INDEX jobs_running ON jobs (lease_until) WHERE state = 'running';
        CREATE INDEX jobs_done ON jobs (id) WHERE state = 'done';
        CREATE INDEX jobs_failed ON jobs (id) WHERE state = 'failed';
        CREATE INDEX jobs_cancelled ON jobs (id) WHERE state = 'cancelled';"
    ))
}

/// Version 3: the lease owner's PID namespace (`Owner::pid_ns`, the inode
/// of `/proc/<pid>/ns/pid`), so that a judge can tell a pid of its own
/// namespace from one of another container's.
///
/// Added in place (`ADD COLUMN` rewrites no row, so the migration costs
/// nothing on a large queue); the price is that the table's CHECKs, frozen
/// in v2, do not cover it: a row without a lease must have it NULL by the
/// store's writes ([`crate::rows`] writes the owner's fields together),
/// not by a constraint.
fn v3(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("ALTER TABLE jobs ADD COLUMN lease_pid_ns INTEGER;")
}

/// Version 4: jobs that run after others (`Job::after`,
/// `Job::pending_parents`, `Job::cancelled_by`; the rule is
/// `slothqueue_core::machine::plan_with_dependents`).
///
/// - **Three columns added in place** (no row rewritten, as in [`v3`]):
///   `parents`, the job's parents as a JSON array of ids (NULL for none;
///   `after` is an SQL keyword); `pending_parents`, how many of them are
///   not `done` (0 for every existing job, which had none); `cancelled_by`,
///   the root whose failure cancelled the job.
/// - **`edges`** (parent, child), keyed by parent: the dependents of a job
///   are one range seek, which every transition that ends a parent needs.
///   An edge lives exactly as long as its child (written with it, deleted
///   with it by `purge`, from the child's own `parents`), so it needs no
///   index by child and no foreign key: a parent may be purged (after it
///   finished) or absent from an import while its dependents stay.
/// - **The claim and due indexes are rebuilt** with `pending_parents = 0`
///   in their condition: a job waiting on its parents is in no index a
///   claim, `stats` or `next_due` walks, so a backlog of waiting jobs costs
///   them nothing, and `jobs_waiting` counts those jobs instead. Existing
///   pending jobs have no parents, so they stay due: the rebuild reads each
///   pending job once, a one-off cost on open.
fn v4(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "ALTER TABLE jobs ADD COLUMN parents TEXT;
        ALTER TABLE jobs ADD COLUMN pending_parents INTEGER NOT NULL DEFAULT 0
            CHECK (pending_parents >= 0);
        ALTER TABLE jobs ADD COLUMN cancelled_by INTEGER;
        CREATE TABLE edges (
            parent INTEGER NOT NULL,
            child  INTEGER NOT NULL,
            PRIMARY KEY (parent, child)
        ) STRICT, WITHOUT ROWID;
        DROP INDEX jobs_pending;
        DROP INDEX jobs_pending_queue;
        DROP INDEX jobs_pending_due;
        CREATE INDEX jobs_pending ON jobs (priority DESC, not_before, id)
            WHERE state = 'pending' AND pending_parents = 0;
        CREATE INDEX jobs_pending_queue ON jobs (queue, priority DESC, not_before, id)
            WHERE state = 'pending' AND pending_parents = 0;
        CREATE INDEX jobs_pending_due ON jobs (not_before)
            WHERE state = 'pending' AND pending_parents = 0;
        CREATE INDEX jobs_waiting ON jobs (id) WHERE state = 'pending' AND pending_parents > 0;",
    )
}

/// Version 5: lanes and holds (`Job::held`, `slothqueue_core::Lanes`; the
/// rules are `slothqueue_core::machine::{hold, release_hold, LaneCheck}`).
///
/// - **`held`, `held_at`, `held_by`** added in place (no row rewritten, as
///   in [`v3`]): 1 and the hold's stamp for a held job, 0 and NULLs for
///   every other (every existing one); a CHECK keeps the three together
///   (SQLite tests a new column's CHECK on every existing row: one read of
///   the table, once, as v4's did).
///   A job's state is the core's business (`check_restore` refuses a hold
///   on a job that is not pending), so no CHECK ties the hold to it; the
///   indexes below name `state = 'pending'` besides.
/// - **The claim and due indexes are rebuilt** with `held = 0` in their
///   condition, as v4 did with `pending_parents = 0`: a held job is in no
///   index a claim, `stats` or `next_due` walks. Existing jobs are not
///   held, so the rebuild reads each pending job once and keeps it.
/// - **`jobs_waiting` is rebuilt on `(queue, pending_parents)`**, and
///   **`jobs_held`** (every held pending job, waiting or not, on the same
///   columns) is new: `queue_counts` groups each index by queue without
///   reading the table, and `stats` counts them by size (a held job
///   waiting on parents is in both, so `pending` subtracts the few held
///   ones that wait).
/// - **`lanes`**: one row per lane with settings, keyed on
///   `LaneScope::key` (the queue's name, `""` for every queue), the JSON
///   of its `LaneSettings`; a lane with the defaults has no row, so a claim
///   on a file nobody configured reads one empty table.
///
/// Every index's plan must stay covering (`store::tests` check each), and
/// SQLite (3.54) knows a column is covered by a partial index only where
/// the index's condition pins it to a constant:
///
/// - hence a flag, `held = 0`, and not `held_at IS NULL`, which pins
///   nothing (the due and count queries would read every row behind it);
/// - hence `pending_parents` among the waiting index's columns, since
///   `> 0` pins nothing either;
/// - and hence conditions of three terms written `a AND (b AND c)`: SQLite
///   finds the pinned columns of at most two terms at each level of the
///   `AND`'s tree, so `(a AND b) AND c`, as `a AND b AND c` parses, would
///   lose two of them.
fn v5(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "ALTER TABLE jobs ADD COLUMN held INTEGER NOT NULL DEFAULT 0 CHECK (held IN (0, 1));
        ALTER TABLE jobs ADD COLUMN held_at INTEGER;
        ALTER TABLE jobs ADD COLUMN held_by TEXT
            CHECK ((held_at IS NOT NULL) = (held = 1) AND (held_by IS NOT NULL) = (held = 1));
        CREATE TABLE lanes (
            scope    TEXT PRIMARY KEY,
            settings TEXT NOT NULL
        ) STRICT, WITHOUT ROWID;
        DROP INDEX jobs_pending;
        DROP INDEX jobs_pending_queue;
        DROP INDEX jobs_pending_due;
        DROP INDEX jobs_waiting;
        CREATE INDEX jobs_pending ON jobs (priority DESC, not_before, id)
            WHERE state = 'pending' AND (pending_parents = 0 AND held = 0);
        CREATE INDEX jobs_pending_queue ON jobs (queue, priority DESC, not_before, id)
            WHERE state = 'pending' AND (pending_parents = 0 AND held = 0);
        CREATE INDEX jobs_pending_due ON jobs (not_before)
            WHERE state = 'pending' AND (pending_parents = 0 AND held = 0);
        CREATE INDEX jobs_waiting ON jobs (queue, pending_parents)
            WHERE state = 'pending' AND pending_parents > 0;
        CREATE INDEX jobs_held ON jobs (queue, pending_parents)
            WHERE state = 'pending' AND held = 1;",
    )
}

/// Version 6: schedules (`slothqueue_core::Schedule`; the rule is
/// `slothqueue_core::schedule`).
///
/// - **`schedules`**: one row per schedule, keyed on its key, the JSON of
///   the whole `Schedule` (definition, cursor, last fire, missed, skipped,
///   pause), as `lanes` keeps its settings: a schedule is read and written
///   whole by every operation on it, and `fire_schedules` reads every row
///   in key order, which is the table's own order. Schedules are few, and
///   no query looks inside the JSON, so no column or index of its fields.
/// - **Nothing else changes**: a tick's job is an ordinary job (its key is
///   the tick's, `KEY@SLOT`, in `jobs_key`), so the table is only added,
///   and the migration reads and rewrites no row.
fn v6(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE schedules (
            key      TEXT PRIMARY KEY,
            schedule TEXT NOT NULL
        ) STRICT, WITHOUT ROWID;",
    )
}

/// Version 7: GPUs (`slothqueue_core::gpu`).
///
/// - **`gpus`** added in place (no row rewritten, as in [`v3`]): the JSON
///   of a job's GPU request and its running attempt's holds
///   (`slothqueue_core::gpu::column_of`), NULL for a job that asks for
///   none, which every existing job is. The claim rule reads it from the
///   rows it already reads (running jobs, due candidates), so no index
///   names it.
fn v7(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("ALTER TABLE jobs ADD COLUMN gpus TEXT;")
}

/// One row of `sqlite_schema`: type, name, table, and the SQL that made it.
pub(crate) type SchemaEntry = (String, String, String, Option<String>);

/// Every entry of a database's `sqlite_schema`, in a fixed order. The root
/// pages are left out: they differ between two files of one layout. So are
/// SQLite's own tables (`sqlite_sequence`, `sqlite_stat1`), which come and
/// go with what SQLite has done to the file, not with its layout.
pub(crate) fn schema_entries(conn: &Connection) -> rusqlite::Result<Vec<SchemaEntry>> {
    let mut stmt = conn.prepare(
        "SELECT type, name, tbl_name, sql FROM sqlite_schema \
         WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY type, name",
    )?;
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?.collect()
}

/// The SHA-256 of [`expected_schema`] of [`SCHEMA_VERSION`], as
/// [`fingerprint`] computes it. An open compares the file's schema with
/// this first: a file of the current layout (every open but the first
/// after an upgrade) is then vetted without building the expected schema,
/// which runs every migration in memory (about a millisecond, more than
/// the rest of an `add`'s CPU). A unit test recomputes it: a new migration
/// changes it there.
pub(crate) const CURRENT_FINGERPRINT: &str =
    "0710ee4b4e1199bc65d8d7de03debf409375ea732b87e9092b825c6582de4276";

/// A hash of schema entries, each field length-prefixed so that no two
/// layouts give the same bytes.
pub(crate) fn fingerprint(entries: &[SchemaEntry]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (kind, name, table, sql) in entries {
        for field in [Some(kind), Some(name), Some(table), sql.as_ref()] {
            match field {
                Some(text) => {
                    h.update((text.len() as u64 + 1).to_le_bytes());
                    h.update(text.as_bytes());
                }
                None => h.update(0u64.to_le_bytes()),
            }
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The schema a queue of `version` has, made by running the migrations up
/// to it in memory, once per process.
///
/// Comparing a file's schema with it catches what a table-name check cannot:
/// a damaged schema page whose SQL still parses — a column renamed by a
/// flipped bit, a CHECK that now rejects every valid state — which would
/// otherwise surface as raw SQL errors half-way through a command, after it
/// had already written (torture S16).
pub(crate) fn expected_schema(version: u32) -> Option<&'static [SchemaEntry]> {
    static EXPECTED: std::sync::OnceLock<Vec<Vec<SchemaEntry>>> = std::sync::OnceLock::new();
    let all = EXPECTED.get_or_init(|| {
        // One in-memory database taken through every step, its layout
        // noted after each: each version costs its own step once (every
        // open pays this), not every step before it again.
        let build = || -> rusqlite::Result<Vec<Vec<SchemaEntry>>> {
            let conn = Connection::open_in_memory()?;
            conn.execute_batch("PRAGMA foreign_keys = OFF")?;
            let mut layouts = Vec::with_capacity(MIGRATIONS.len());
            for step in MIGRATIONS {
                step(&conn)?;
                layouts.push(schema_entries(&conn)?);
            }
            Ok(layouts)
        };
        // An in-memory database of our own DDL cannot fail to build; an
        // empty layout would only make every file look damaged.
        build().unwrap_or_default()
    });
    version.checked_sub(1).and_then(|i| all.get(i as usize)).map(Vec::as_slice)
}

/// The names of the tables of the database, but SQLite's own.
pub(crate) fn table_names(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
    )?;
    stmt.query_map([], |r| r.get(0))?.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_fingerprint_is_the_current_schemas() {
        let current = expected_schema(SCHEMA_VERSION).expect("the current schema builds");
        assert!(!current.is_empty());
        assert_eq!(
            fingerprint(current),
            CURRENT_FINGERPRINT,
            "a migration changed the schema: set CURRENT_FINGERPRINT to the value on the left"
        );
    }

    #[test]
    fn fingerprints_tell_layouts_apart() {
        let current = expected_schema(SCHEMA_VERSION).expect("the current schema builds");
        let older = expected_schema(SCHEMA_VERSION - 1).expect("the previous schema builds");
        assert_ne!(fingerprint(current), fingerprint(older));
        let mut renamed = current.to_vec();
        renamed[0].1.push('x');
        assert_ne!(fingerprint(current), fingerprint(&renamed));
        let mut no_sql = current.to_vec();
        no_sql[0].3 = None;
        assert_ne!(fingerprint(current), fingerprint(&no_sql));
    }
}
