//! The file format: table definitions, their keys, the meta table and its
//! schema version, and the migrations (run by [`initialise_in`] inside the
//! opening write transaction; see `open.rs` for the vetting around it).
//!
//! Table definitions are part of the file format: a name, key type or value
//! type changed here is a new schema version with a migration.

use std::path::Path;

use redb::{ReadableTable, TableDefinition, TableHandle, WriteTransaction};
use slothqueue_core::StoreError;

use crate::error::Failure;

/// The schema this build writes. A file with a higher version is refused
/// ([`StoreError::SchemaTooNew`]); a lower one is migrated on open.
///
/// - 1: the first.
/// - 2: job dependencies: the `dependency_edges` and `waiting_on_parents`
///   tables, and jobs waiting on parents kept out of `pending_by_time` and
///   `ready` (no v1 job has parents, so the migration only adds tables).
/// - 3: lanes: the `lanes` table (limits and pauses) and the `held` table,
///   with held jobs kept out of `pending_by_time` and `ready` (no v2 job is
///   held, so the migration only adds tables).
/// - 4: schedules: the `schedules` table (no v3 file has a schedule, so
///   the migration only adds it, empty).
/// - 5: GPUs: a job's GPU request and its attempt's GPU holds, inside the
///   job's JSON (no table changes, so the migration only marks the file).
///   The mark is the point: a v4 build would read a GPU job as a job that
///   needs no GPU and hand it out beside another on the same card, so it
///   must refuse the file, as SQLite's v7 and PostgreSQL's V2 are refused.
pub const SCHEMA_VERSION: u32 = 5;

/// Name → value; the schema version, the next id and the ready watermark.
/// Its name doubles as slothqueue's mark on the file.
pub(crate) const META: TableDefinition<'static, &str, u64> =
    TableDefinition::new("slothqueue_meta");
/// Job id → the [`slothqueue_core::Job`] as JSON.
pub(crate) const JOBS: TableDefinition<'static, i64, &[u8]> = TableDefinition::new("jobs");
/// (queue, kind, [`priority_key`], not_before, id) → (): the pending jobs
/// with `not_before <= watermark`, in claim order under each (queue, kind).
pub(crate) const READY: TableDefinition<'static, ReadyKey, ()> = TableDefinition::new("ready");
/// (not_before, id) → (queue, kind, priority): every pending job, by due
/// time, with what its `READY` key needs.
pub(crate) const PENDING: TableDefinition<'static, (i64, i64), (&str, &str, i32)> =
    TableDefinition::new("pending_by_time");
/// Job id → lease end (ms): the running jobs.
pub(crate) const RUNNING: TableDefinition<'static, i64, i64> = TableDefinition::new("running");
/// Idempotency key → the id of the job holding it.
pub(crate) const KEYS: TableDefinition<'static, &str, i64> =
    TableDefinition::new("idempotency_keys");
/// (job id, seq) → the [`slothqueue_core::Event`] as JSON.
pub(crate) const EVENTS: TableDefinition<'static, (i64, u32), &[u8]> =
    TableDefinition::new("events");
/// (parent id, child id) → (): one entry per parent each job names in
/// `Job::after`, for "who waits on this job" in one range scan (a parent's
/// transition ripples to them, a purge keeps a parent someone waits on).
/// The entry belongs to the child: written with it, deleted with it; a
/// parent purged first leaves its children's entries in place (they still
/// name it, and a restore may bring it back). Since schema 2.
pub(crate) const EDGES: TableDefinition<'static, (i64, i64), ()> =
    TableDefinition::new("dependency_edges");
/// Job id → (): the pending jobs waiting on parents not yet done, which
/// are in neither `pending_by_time` nor `ready` (no claim may see them);
/// its length is `Stats::waiting_on_parents`. Since schema 2.
pub(crate) const WAITING: TableDefinition<'static, i64, ()> =
    TableDefinition::new("waiting_on_parents");
/// Job id → its queue: the held pending jobs (`Job::held`), which are in
/// neither `pending_by_time` nor `ready` (no claim may see them), whether
/// or not they also wait on parents (then they are in `waiting_on_parents`
/// too); its length is `Stats::held`, and the queue counts them per lane
/// without reading the rows. Since schema 3.
pub(crate) const HELD: TableDefinition<'static, i64, &str> = TableDefinition::new("held");
/// Lane scope key ([`slothqueue_core::LaneScope::key`]: a queue's name, or
/// `""` for every queue) → its [`slothqueue_core::LaneSettings`] as JSON;
/// only settings other than the defaults are stored, so a file nobody
/// configured has it empty and a claim reads nothing more. Since schema 3.
pub(crate) const LANES: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("lanes");
/// Schedule key → the [`slothqueue_core::Schedule`] as JSON (definition,
/// cursor, last fire; JSON like the jobs, so a new field is a serde
/// default, not a migration), in key order, the order `fire_schedules`
/// decides them in. A tick's job is an ordinary job (its key `KEY@SLOT`
/// in `idempotency_keys`); nothing else indexes schedules. Since schema 4.
pub(crate) const SCHEDULES: TableDefinition<'static, &str, &[u8]> =
    TableDefinition::new("schedules");
/// State name → how many jobs are in it.
pub(crate) const COUNTS: TableDefinition<'static, &str, u64> = TableDefinition::new("state_counts");
/// Owner id → the [`slothqueue_core::RunnerRecord`] as JSON.
pub(crate) const RUNNERS: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("runners");

/// The `READY` key: queue, kind, priority (flipped), not_before, id.
pub(crate) type ReadyKey = (&'static str, &'static str, u32, i64, i64);

/// Meta: the schema version.
pub(crate) const META_SCHEMA_VERSION: &str = "schema_version";
/// Meta: the id the next push gets; only ever grows.
pub(crate) const META_NEXT_ID: &str = "next_id";
/// Meta: every pending job with `not_before` at or below this is in `READY`.
pub(crate) const META_WATERMARK: &str = "ready_watermark";

/// The tables of schema 1.
const TABLES_V1: [&str; 9] = [
    "slothqueue_meta",
    "jobs",
    "ready",
    "pending_by_time",
    "running",
    "idempotency_keys",
    "events",
    "state_counts",
    "runners",
];

/// The tables of schema 2.
const TABLES_V2: [&str; 11] = [
    "slothqueue_meta",
    "jobs",
    "ready",
    "pending_by_time",
    "running",
    "idempotency_keys",
    "events",
    "state_counts",
    "runners",
    "dependency_edges",
    "waiting_on_parents",
];

/// The tables of schema 3.
const TABLES_V3: [&str; 13] = [
    "slothqueue_meta",
    "jobs",
    "ready",
    "pending_by_time",
    "running",
    "idempotency_keys",
    "events",
    "state_counts",
    "runners",
    "dependency_edges",
    "waiting_on_parents",
    "held",
    "lanes",
];

/// Every table slothqueue writes (schema [`SCHEMA_VERSION`]): a table
/// outside this list is another program's.
pub(crate) const TABLE_NAMES: [&str; 14] = [
    "slothqueue_meta",
    "jobs",
    "ready",
    "pending_by_time",
    "running",
    "idempotency_keys",
    "events",
    "state_counts",
    "runners",
    "dependency_edges",
    "waiting_on_parents",
    "held",
    "lanes",
    "schedules",
];

/// The tables a file of schema `version` must have, for the open check;
/// `None` for a version this build never wrote.
pub(crate) fn tables_of(version: u64) -> Option<&'static [&'static str]> {
    match version {
        1 => Some(&TABLES_V1),
        2 => Some(&TABLES_V2),
        3 => Some(&TABLES_V3),
        4 | 5 => Some(&TABLE_NAMES),
        _ => None,
    }
}

/// Priority as a key that sorts the highest priority first: the sign bit
/// flipped makes `i32` order unsigned, and the complement reverses it.
pub(crate) fn priority_key(priority: i32) -> u32 {
    !((priority as u32) ^ 0x8000_0000)
}

/// An `i64` stored in a `u64` meta value, order-preserving.
pub(crate) fn i64_to_meta(v: i64) -> u64 {
    (v as u64) ^ (1 << 63)
}

/// The inverse of [`i64_to_meta`].
pub(crate) fn i64_from_meta(v: u64) -> i64 {
    (v ^ (1 << 63)) as i64
}

/// Creates the tables and records the schema version in a new queue, or
/// migrates an older one; whichever process gets the write lock first does
/// it, the others find it done.
///
/// Runs in `txn`, which the caller commits: all or nothing.
pub(crate) fn initialise_in(txn: &WriteTransaction, path: &Path) -> Result<(), StoreError> {
    let step = || -> Result<(), Failure> {
        let others: Vec<String> = txn
            .list_tables()?
            .map(|t| t.name().to_owned())
            .filter(|n| !TABLE_NAMES.contains(&n.as_str()))
            .collect();
        let mut meta = txn.open_table(META)?;
        let version = meta.get(META_SCHEMA_VERSION)?.map(|v| v.value());
        match version {
            None if !others.is_empty() => {
                return Err(Failure::Damaged(format!(
                    "a redb database of another program (tables: {})",
                    others.join(", ")
                )));
            }
            None => {
                meta.insert(META_SCHEMA_VERSION, u64::from(SCHEMA_VERSION))?;
                meta.insert(META_NEXT_ID, 1)?;
                meta.insert(META_WATERMARK, i64_to_meta(i64::MIN))?;
            }
            Some(v) if v > u64::from(SCHEMA_VERSION) => {
                return Err(Failure::Store(StoreError::SchemaTooNew {
                    path: path.to_owned(),
                    found: u32::try_from(v).unwrap_or(u32::MAX),
                    supported: SCHEMA_VERSION,
                }));
            }
            Some(v) => {
                let mut v = v;
                while v < u64::from(SCHEMA_VERSION) {
                    let Some(migrate) = usize::try_from(v).ok().and_then(|i| MIGRATIONS.get(i))
                    else {
                        return Err(Failure::Damaged(format!("no migration from schema {v}")));
                    };
                    migrate(txn)?;
                    v += 1;
                    meta.insert(META_SCHEMA_VERSION, v)?;
                }
            }
        }
        drop(meta);
        // Opening a table in a write transaction creates it.
        txn.open_table(JOBS)?;
        txn.open_table(READY)?;
        txn.open_table(PENDING)?;
        txn.open_table(RUNNING)?;
        txn.open_table(KEYS)?;
        txn.open_table(EVENTS)?;
        txn.open_table(COUNTS)?;
        txn.open_table(RUNNERS)?;
        txn.open_table(EDGES)?;
        txn.open_table(WAITING)?;
        txn.open_table(HELD)?;
        txn.open_table(LANES)?;
        txn.open_table(SCHEDULES)?;
        Ok(())
    };
    step().map_err(|e| e.into_store(path))
}

/// `MIGRATIONS[v]` turns schema `v` into `v + 1`, inside the opening write
/// transaction (all or nothing). Version 1 is the first, so index 0 is
/// never used.
type Migration = fn(&WriteTransaction) -> Result<(), Failure>;
const MIGRATIONS: &[Migration] = &[no_migration, v1_to_v2, v2_to_v3, v3_to_v4, v4_to_v5];

fn no_migration(_: &WriteTransaction) -> Result<(), Failure> {
    Err(Failure::Damaged("schema version 0 was never written".to_owned()))
}

/// Schema 2 adds the dependency tables. A v1 build never wrote a job with
/// parents (it has no such field), so no job moves out of
/// `pending_by_time`/`ready` and no edge is to be written: the tables are
/// made empty, and the integrity check would find a v1 row naming parents.
fn v1_to_v2(txn: &WriteTransaction) -> Result<(), Failure> {
    txn.open_table(EDGES)?;
    txn.open_table(WAITING)?;
    Ok(())
}

/// Schema 3 adds lanes and holds. A v2 build never wrote a held job (its
/// `Job` has no `held`, and a v3 file is refused by it as too new), so no
/// job moves out of `pending_by_time`/`ready`: the tables are made empty,
/// no lane has a setting, and the integrity check would find a held row
/// outside `held`.
fn v2_to_v3(txn: &WriteTransaction) -> Result<(), Failure> {
    txn.open_table(HELD)?;
    txn.open_table(LANES)?;
    Ok(())
}

/// Schema 4 adds schedules. A v3 build never wrote one (it has no such
/// table, and a v4 file is refused by it as too new), and a schedule's
/// ticks are ordinary jobs, so no job or index changes: the table is made
/// empty.
fn v3_to_v4(txn: &WriteTransaction) -> Result<(), Failure> {
    txn.open_table(SCHEDULES)?;
    Ok(())
}

/// Schema 5 keeps GPU requests and holds in the job's JSON: no v4 job has
/// any, and no table changes, so only the version moves (which keeps v4
/// builds out of a file that may hold GPU jobs).
fn v4_to_v5(_: &WriteTransaction) -> Result<(), Failure> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_key_puts_the_highest_priority_first() {
        let ps = [i32::MIN, -5, -1, 0, 1, 9, i32::MAX];
        for w in ps.windows(2) {
            assert!(priority_key(w[0]) > priority_key(w[1]), "{} vs {}", w[0], w[1]);
        }
    }

    #[test]
    fn meta_i64_round_trips_in_order() {
        let vs = [i64::MIN, -1, 0, 1, i64::MAX];
        for w in vs.windows(2) {
            assert!(i64_to_meta(w[0]) < i64_to_meta(w[1]));
        }
        for v in vs {
            assert_eq!(i64_from_meta(i64_to_meta(v)), v);
        }
    }
}
