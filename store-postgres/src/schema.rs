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
pub const SCHEMA_VERSION: u32 = 3;

/// The `meta` row holding the schema version.
pub(crate) const VERSION_ROW: &str = "schema_version";

/// The `meta` row holding the highest job id ever handed out and since
/// purged: ids are never reused.
pub(crate) const ID_HIGH_WATER: &str = "job_id_high_water";

/// Every migration, in order; `MIGRATIONS[i]` upgrades version `i` to
/// `i + 1`. Each runs with `search_path` set to the queue's schema.
pub(crate) const MIGRATIONS: &[&str] = &[V1, V2, V3];

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

/// Version 3: a schema a DBA can read. `COMMENT ON` every table and
/// column (what `\d+` shows: times in milliseconds, which columns are
/// JSON text), the CHECKs named for what they hold (PostgreSQL named them
/// `jobs_check1`…), the events' foreign key `events_job`, and
/// **`edges_child`**: a job's parents (a cancel walking up, a purge) were a
/// scan of `edges` without it.
const V3: &str = r#"
-- The CHECKs of version 1, named: dropped whatever the server called them
-- and made again (one scan of jobs to validate them, once); the events'
-- foreign key renamed whatever it is called.
DO $$
DECLARE c record;
BEGIN
    FOR c IN SELECT conname FROM pg_constraint
             WHERE conrelid = 'jobs'::regclass AND contype = 'c' LOOP
        EXECUTE format('ALTER TABLE jobs DROP CONSTRAINT %I', c.conname);
    END LOOP;
    FOR c IN SELECT conname FROM pg_constraint
             WHERE conrelid = 'events'::regclass AND contype = 'f'
               AND conname <> 'events_job' LOOP
        EXECUTE format('ALTER TABLE events RENAME CONSTRAINT %I TO events_job', c.conname);
    END LOOP;
END $$;
ALTER TABLE jobs
    ADD CONSTRAINT jobs_state_known
        CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    ADD CONSTRAINT jobs_pending_parents_not_negative CHECK (pending_parents >= 0),
    ADD CONSTRAINT jobs_running_iff_leased CHECK ((state = 'running') = (lease_owner IS NOT NULL)),
    ADD CONSTRAINT jobs_lease_complete
        CHECK (lease_owner IS NULL OR (lease_host IS NOT NULL AND lease_attempt IS NOT NULL
                                       AND lease_until IS NOT NULL)),
    ADD CONSTRAINT jobs_lease_cleared
        CHECK (lease_owner IS NOT NULL OR (lease_host IS NULL AND lease_boot_id IS NULL
            AND lease_pid IS NULL AND lease_pid_start IS NULL AND lease_attempt IS NULL
            AND lease_until IS NULL AND lease_child_pgid IS NULL AND lease_pid_ns IS NULL)),
    ADD CONSTRAINT jobs_held_stamped
        CHECK ((held_at IS NOT NULL) = held AND (held_by IS NOT NULL) = held);
CREATE INDEX IF NOT EXISTS edges_child ON edges (child);
COMMENT ON TABLE meta IS 'slothqueue: the layout''s version (schema_version) and the id high water. Never edit by hand.';
COMMENT ON TABLE jobs IS 'slothqueue: one row per job. Times are bigint milliseconds since 1970-01-01 UTC; JSON columns are text. Change only through slothqueue (the CHECKs and the partial claim indexes hold its invariants).';
COMMENT ON TABLE events IS 'slothqueue: each job''s history, one row per event (deleted with the job).';
COMMENT ON TABLE runners IS 'slothqueue: the runners that announced themselves (`status` shows them).';
COMMENT ON TABLE edges IS 'slothqueue: job dependencies, one row per (parent, child) pair; lives as long as the child.';
COMMENT ON TABLE lanes IS 'slothqueue: per-queue limits and pauses (`lane`).';
COMMENT ON TABLE schedules IS 'slothqueue: recurring jobs (`every`).';
COMMENT ON COLUMN jobs.id IS 'The job''s number: increasing, never reused (see meta.job_id_high_water).';
COMMENT ON COLUMN jobs.queue IS 'The queue it is in (`add --queue`; `default` unless named).';
COMMENT ON COLUMN jobs.kind IS 'What runs it: `shell` for a command (the CLI''s jobs).';
COMMENT ON COLUMN jobs.payload IS 'JSON text, kept byte for byte as given: for `shell`, {"command", "cwd", "env", ...}.';
COMMENT ON COLUMN jobs.priority IS 'Higher runs first.';
COMMENT ON COLUMN jobs.state IS 'pending, running, done, failed or cancelled.';
COMMENT ON COLUMN jobs.attempts IS 'Attempts started so far.';
COMMENT ON COLUMN jobs.max_attempts IS 'The most attempts allowed.';
COMMENT ON COLUMN jobs.max_runtime_ms IS 'How long one attempt may run, in milliseconds of awake time; NULL: unlimited.';
COMMENT ON COLUMN jobs.not_before IS 'Due time: milliseconds since 1970-01-01 UTC (to_timestamp(not_before / 1000.0)).';
COMMENT ON COLUMN jobs.lease_owner IS 'The running attempt''s owner (a runner''s id); NULL unless running.';
COMMENT ON COLUMN jobs.lease_host IS 'The owner''s host name.';
COMMENT ON COLUMN jobs.lease_boot_id IS 'The owner host''s boot id (a reboot ends its processes).';
COMMENT ON COLUMN jobs.lease_pid IS 'The owner''s process id.';
COMMENT ON COLUMN jobs.lease_pid_start IS 'The owner process''s start time (tells a reused pid apart).';
COMMENT ON COLUMN jobs.lease_attempt IS 'The attempt the lease is for (the fence with lease_owner).';
COMMENT ON COLUMN jobs.lease_until IS 'The lease''s end, ms since the epoch: past it and not renewed, another runner may take the job back.';
COMMENT ON COLUMN jobs.lease_child_pgid IS 'The process group of the job''s command, once started.';
COMMENT ON COLUMN jobs.idempotency_key IS 'Pushing the same key twice makes one job; NULL: none.';
COMMENT ON COLUMN jobs.payload_hash IS 'SHA-256 of the canonical payload: tells a duplicate push from a newer job.';
COMMENT ON COLUMN jobs.cancel_requested IS 'A cancel asked of a running job: its owner stops it at its next heartbeat.';
COMMENT ON COLUMN jobs.last_error IS 'Why the last attempt failed.';
COMMENT ON COLUMN jobs.result IS 'A short summary of a successful run (its last line of output).';
COMMENT ON COLUMN jobs.exit_code IS 'The last attempt''s exit code, if it was a process.';
COMMENT ON COLUMN jobs.created_at IS 'When it was pushed, ms since the epoch.';
COMMENT ON COLUMN jobs.started_at IS 'When the last attempt started, ms since the epoch.';
COMMENT ON COLUMN jobs.finished_at IS 'When it reached done, failed or cancelled, ms since the epoch.';
COMMENT ON COLUMN jobs.lease_pid_ns IS 'The owner''s pid namespace (a container''s pids are its own).';
COMMENT ON COLUMN jobs.parents IS 'JSON array of the ids it runs after, as given; NULL: none. The same pairs are rows of edges.';
COMMENT ON COLUMN jobs.pending_parents IS 'How many of its parents are not done: a pending job with any waits, and no claim sees it.';
COMMENT ON COLUMN jobs.cancelled_by IS 'Cancelled because this job (a parent, transitively) failed or was cancelled: retrying that one revives this one.';
COMMENT ON COLUMN jobs.held IS 'Held by a user (`hold`): pending but not claimable until released.';
COMMENT ON COLUMN jobs.held_at IS 'When it was held, ms since the epoch; NULL unless held.';
COMMENT ON COLUMN jobs.held_by IS 'Who held it; NULL unless held.';
COMMENT ON COLUMN jobs.gpus IS 'JSON text: the GPUs it needs and, while running, the ones its attempt holds; NULL: none.';
COMMENT ON COLUMN events.job_id IS 'The job (deleted with it).';
COMMENT ON COLUMN events.seq IS 'Its place in the job''s history, from 1.';
COMMENT ON COLUMN events.at IS 'When, ms since the epoch.';
COMMENT ON COLUMN events.kind IS 'What happened: pushed, claimed, reclaimed, released, failed, completed, cancel_requested, cancelled, superseded, expired, retried, held, hold_released, edited, ...';
COMMENT ON COLUMN events.owner IS 'The runner involved, for events of an attempt.';
COMMENT ON COLUMN events.attempt IS 'The attempt involved.';
COMMENT ON COLUMN events.message IS 'Detail: an error, why a lease was taken back.';
COMMENT ON COLUMN events.retry_at IS 'After a failure: when the job runs again, ms since the epoch.';
COMMENT ON COLUMN runners.owner_id IS 'A runner''s id (its owner name).';
COMMENT ON COLUMN runners.record IS 'JSON text: where it runs, its pid, what it may take, when it was last seen.';
COMMENT ON COLUMN edges.parent IS 'The job waited on.';
COMMENT ON COLUMN edges.child IS 'The job that waits (runs after parent).';
COMMENT ON COLUMN lanes.scope IS 'What the settings apply to: a queue''s name, or the whole queue''s scope.';
COMMENT ON COLUMN lanes.settings IS 'JSON text: the lane''s limit, pause and other settings.';
COMMENT ON COLUMN schedules.key IS 'The schedule''s key (`every --key`).';
COMMENT ON COLUMN schedules.schedule IS 'JSON text: the schedule (its cron or interval, the job it makes, its cursor).';
COMMENT ON COLUMN meta.name IS 'schema_version (this layout''s number) or job_id_high_water (the highest id ever purged).';
COMMENT ON COLUMN meta.value IS 'The number.';
"#;

/// Every column the layout has, by table, with its comment: the test
/// holds them to the catalog's (no column without one).
#[cfg(test)]
pub(crate) const COMMENTED_COLUMNS: usize = 53;

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
