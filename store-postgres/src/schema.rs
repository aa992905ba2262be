//! The queue's layout in its PostgreSQL schema: the version that marks a
//! queue (the `meta` row `schema_version`), and the DDL of every version as
//! its migration (`MIGRATIONS`).
//!
//! Migrations are frozen history: a released one never changes; a new
//! version is a new entry appended to `MIGRATIONS`. They run inside the
//! opening transaction under the schema's creation lock (`open.rs`), so a
//! crash leaves the old version intact and two openers never run one twice.
//!
//! Times are `BIGINT` milliseconds since the epoch (the core's
//! `Timestamp`), as in the other stores; the JSON of payloads, lanes and
//! schedules is `TEXT`, kept byte for byte (a `jsonb` would reorder keys
//! and reformat numbers).

/// The newest layout this build reads and writes. Queues record theirs in
/// `meta`; older ones are migrated on open, newer ones refused untouched.
pub const SCHEMA_VERSION: u32 = 2;

/// The `meta` row holding the schema version.
pub(crate) const VERSION_ROW: &str = "schema_version";

/// The `meta` row holding the highest job id ever handed out and since
/// purged: ids are never reused.
pub(crate) const ID_HIGH_WATER: &str = "job_id_high_water";

/// Every migration, in order; `MIGRATIONS[i]` upgrades version `i` to
/// `i + 1`. Each runs with `search_path` set to the queue's schema.
pub(crate) const MIGRATIONS: &[&str] = &[V1, V2];

const _: () = assert!(MIGRATIONS.len() == SCHEMA_VERSION as usize);

/// The tables a queue of the current version has.
pub(crate) const TABLES: &[&str] =
    &["edges", "events", "jobs", "lanes", "meta", "runners", "schedules"];

/// Version 1: the layout of the SQLite store's version 6, in PostgreSQL.
///
/// - **`jobs`**: one row per job, a column per field; the lease's owner
///   columns are set together or not at all (CHECKs).
/// - **Partial indexes** keep a claim O(log n) in the backlog: a claim
///   reads the first row of `jobs_pending` (or `jobs_pending_queue` for a
///   filter of queues) in claim order, `priority DESC, not_before, id`,
///   with `FOR UPDATE SKIP LOCKED`. A job waiting on parents or held is in
///   none of them (`pending_parents = 0 AND NOT held`), so a backlog of
///   those costs a claim nothing.
/// - **`edges`** (parent, child), keyed by parent: a job's dependents are
///   one range; an edge lives as long as its child.
/// - **`lanes`**, **`schedules`**, **`runners`**: one row each, JSON.
/// - **`meta`**: the schema version and the id high water.
const V1: &str = "
CREATE TABLE meta (
    name  TEXT   PRIMARY KEY,
    value BIGINT NOT NULL
);
CREATE TABLE jobs (
    id               BIGINT  PRIMARY KEY,
    queue            TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    priority         INTEGER NOT NULL,
    state            TEXT    NOT NULL
        CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    attempts         BIGINT  NOT NULL,
    max_attempts     BIGINT  NOT NULL,
    max_runtime_ms   BIGINT,
    not_before       BIGINT  NOT NULL,
    lease_owner      TEXT,
    lease_host       TEXT,
    lease_boot_id    TEXT,
    lease_pid        BIGINT,
    lease_pid_start  BIGINT,
    lease_attempt    BIGINT,
    lease_until      BIGINT,
    lease_child_pgid BIGINT,
    idempotency_key  TEXT,
    payload_hash     TEXT    NOT NULL,
    cancel_requested BOOLEAN NOT NULL,
    last_error       TEXT,
    result           TEXT,
    exit_code        BIGINT,
    created_at       BIGINT  NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    lease_pid_ns     BIGINT,
    parents          TEXT,
    pending_parents  BIGINT  NOT NULL CHECK (pending_parents >= 0),
    cancelled_by     BIGINT,
    held             BOOLEAN NOT NULL,
    held_at          BIGINT,
    held_by          TEXT,
    CHECK ((state = 'running') = (lease_owner IS NOT NULL)),
    CHECK (lease_owner IS NULL OR (lease_host IS NOT NULL AND lease_attempt IS NOT NULL
                                   AND lease_until IS NOT NULL)),
    CHECK (lease_owner IS NOT NULL OR (lease_host IS NULL AND lease_boot_id IS NULL
        AND lease_pid IS NULL AND lease_pid_start IS NULL AND lease_attempt IS NULL
        AND lease_until IS NULL AND lease_child_pgid IS NULL AND lease_pid_ns IS NULL)),
    CHECK ((held_at IS NOT NULL) = held AND (held_by IS NOT NULL) = held)
);
CREATE UNIQUE INDEX jobs_key ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_pending ON jobs (priority DESC, not_before, id)
    WHERE state = 'pending' AND pending_parents = 0 AND NOT held;
CREATE INDEX jobs_pending_queue ON jobs (queue, priority DESC, not_before, id)
    WHERE state = 'pending' AND pending_parents = 0 AND NOT held;
CREATE INDEX jobs_pending_due ON jobs (not_before)
    WHERE state = 'pending' AND pending_parents = 0 AND NOT held;
CREATE INDEX jobs_running ON jobs (lease_until) WHERE state = 'running';
CREATE INDEX jobs_waiting ON jobs (queue) WHERE state = 'pending' AND pending_parents > 0;
CREATE INDEX jobs_held ON jobs (queue) WHERE state = 'pending' AND held;
CREATE INDEX jobs_state ON jobs (state, id);
CREATE TABLE events (
    job_id   BIGINT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    seq      BIGINT NOT NULL,
    at       BIGINT NOT NULL,
    kind     TEXT   NOT NULL,
    owner    TEXT,
    attempt  BIGINT,
    message  TEXT,
    retry_at BIGINT,
    PRIMARY KEY (job_id, seq)
);
CREATE TABLE runners (
    owner_id TEXT PRIMARY KEY,
    record   TEXT NOT NULL
);
CREATE TABLE edges (
    parent BIGINT NOT NULL,
    child  BIGINT NOT NULL,
    PRIMARY KEY (parent, child)
);
CREATE TABLE lanes (
    scope    TEXT PRIMARY KEY,
    settings TEXT NOT NULL
);
CREATE TABLE schedules (
    key      TEXT PRIMARY KEY,
    schedule TEXT NOT NULL
);
INSERT INTO meta (name, value) VALUES ('job_id_high_water', 0);
";

/// Version 2: GPUs (`slothqueue_core::gpu`), as the SQLite store's
/// version 7: **`gpus`** added in place, the JSON of a job's GPU request
/// and its running attempt's holds (`slothqueue_core::gpu::column_of`),
/// NULL for a job that asks for none (every existing one). No index names
/// it: the claim rule reads it from the rows it already reads.
const V2: &str = "ALTER TABLE jobs ADD COLUMN gpus TEXT;";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_of_the_layout_is_listed() {
        let mut made: Vec<&str> = V1
            .lines()
            .filter_map(|l| l.strip_prefix("CREATE TABLE "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        made.sort_unstable();
        assert_eq!(made, TABLES);
    }
}
