//! A job, an event or a runner record as rows of the `jobs`, `events` and
//! `runners` tables, and back, a job's parents as rows of `edges`, the
//! lanes' settings as rows of `lanes`, schedules as rows of `schedules`;
//! the queries that read them by key, and the writes of a transition,
//! conditional on the row it was computed from. The claim's search in
//! claim order is `verbs.rs`.

use std::sync::LazyLock;
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, Row, params, params_from_iter};
use slothqueue_core::machine::Transition;
use slothqueue_core::{
    Event, EventKind, Job, JobId, JobState, LaneScope, LaneSettings, Lanes, Lease, Owner, Schedule,
    Stamp, StoreError, Timestamp,
};

use crate::error::Error;

/// The job columns, in the order [`job_values`] and [`job_from_row`] use.
const JOB_COLUMNS: [&str; 35] = [
    "id",
    "queue",
    "kind",
    "payload",
    "priority",
    "state",
    "attempts",
    "max_attempts",
    "max_runtime_ms",
    "not_before",
    "lease_owner",
    "lease_host",
    "lease_boot_id",
    "lease_pid",
    "lease_pid_start",
    "lease_attempt",
    "lease_until",
    "lease_child_pgid",
    "idempotency_key",
    "payload_hash",
    "cancel_requested",
    "last_error",
    "result",
    "exit_code",
    "created_at",
    "started_at",
    "finished_at",
    "lease_pid_ns",
    "parents",
    "pending_parents",
    "cancelled_by",
    "held",
    "held_at",
    "held_by",
    "gpus",
];

pub(crate) static COLUMNS: LazyLock<String> = LazyLock::new(|| JOB_COLUMNS.join(", "));

static INSERT_JOB: LazyLock<String> = LazyLock::new(|| {
    let marks: Vec<String> = (1..=JOB_COLUMNS.len()).map(|i| format!("?{i}")).collect();
    format!("INSERT INTO jobs ({}) VALUES ({})", *COLUMNS, marks.join(", "))
});

/// Every column but the id, with the old state, owner and attempt in the
/// condition: the write lands only on the row the transition was computed
/// from.
static UPDATE_JOB: LazyLock<String> = LazyLock::new(|| {
    let n = JOB_COLUMNS.len();
    let sets: Vec<String> =
        JOB_COLUMNS.iter().enumerate().skip(1).map(|(i, c)| format!("{c} = ?{}", i + 1)).collect();
    format!(
        "UPDATE jobs SET {} WHERE id = ?1 AND state = ?{} AND lease_owner IS ?{} AND lease_attempt IS ?{}",
        sets.join(", "),
        n + 1,
        n + 2,
        n + 3
    )
});

pub(crate) fn millis(t: Timestamp) -> Value {
    Value::Integer(t.as_millis())
}

fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> Value) -> Value {
    v.map_or(Value::Null, f)
}

pub(crate) fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

fn job_values(job: &Job) -> Result<Vec<Value>, Error> {
    let payload = serde_json::to_string(&job.payload)
        .map_err(|e| StoreError::InvalidInput(format!("the payload cannot be stored: {e}")))?;
    let lease = job.lease.as_ref();
    let owner = lease.map(|l| &l.owner);
    Ok(vec![
        Value::Integer(job.id),
        text(&job.queue),
        text(&job.kind),
        Value::Text(payload),
        Value::Integer(i64::from(job.priority)),
        text(job.state.as_str()),
        Value::Integer(i64::from(job.attempts)),
        Value::Integer(i64::from(job.max_attempts)),
        opt(job.max_runtime, |d| Value::Integer(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))),
        millis(job.not_before),
        opt(owner, |o| text(&o.id)),
        opt(owner, |o| text(&o.host)),
        opt(owner.and_then(|o| o.boot_id.as_deref()), text),
        opt(owner.and_then(|o| o.pid), |p| Value::Integer(i64::from(p))),
        // Stored bit for bit: SQLite integers are signed.
        opt(owner.and_then(|o| o.pid_start_time), |s| {
            Value::Integer(i64::from_ne_bytes(s.to_ne_bytes()))
        }),
        opt(lease, |l| Value::Integer(i64::from(l.attempt))),
        opt(lease, |l| millis(l.until)),
        opt(lease.and_then(|l| l.child_pgid), |g| Value::Integer(i64::from(g))),
        opt(job.idempotency_key.as_deref(), text),
        text(&job.payload_hash),
        Value::Integer(i64::from(job.cancel_requested)),
        opt(job.last_error.as_deref(), text),
        opt(job.result.as_deref(), text),
        opt(job.exit_code, |c| Value::Integer(i64::from(c))),
        millis(job.created_at),
        opt(job.started_at, millis),
        opt(job.finished_at, millis),
        opt(owner.and_then(|o| o.pid_ns), |n| Value::Integer(i64::from_ne_bytes(n.to_ne_bytes()))),
        parents_value(&job.after)?,
        Value::Integer(i64::from(job.pending_parents)),
        opt(job.cancelled_by, Value::Integer),
        Value::Integer(i64::from(job.held.is_some())),
        opt(job.held.as_ref(), |h| millis(h.since)),
        opt(job.held.as_ref(), |h| text(&h.by)),
        opt(slothqueue_core::gpu::column_of(job), Value::Text),
    ])
}

/// A job's parents as stored: a JSON array of ids, NULL for none (most
/// jobs), so a job without parents costs no bytes.
fn parents_value(after: &[JobId]) -> Result<Value, Error> {
    if after.is_empty() {
        return Ok(Value::Null);
    }
    let json = serde_json::to_string(after)
        .map_err(|e| StoreError::InvalidInput(format!("the parents cannot be stored: {e}")))?;
    Ok(Value::Text(json))
}

fn parents_from(id: JobId, v: Option<String>) -> Result<Vec<JobId>, Error> {
    match v {
        None => Ok(Vec::new()),
        Some(json) => serde_json::from_str(&json).map_err(|e| {
            Error::Decode(format!("job #{id}: its parents are not a list of ids: {e}"))
        }),
    }
}

pub(crate) fn ts(v: i64) -> Timestamp {
    Timestamp::from_millis(v)
}

fn job_from_row(row: &Row<'_>) -> Result<Job, Error> {
    let id: i64 = row.get(0)?;
    let state: String = row.get(5)?;
    let state = state.parse::<JobState>().map_err(|e| Error::Decode(format!("job #{id}: {e}")))?;
    let payload: String = row.get(3)?;
    let payload = serde_json::from_str(&payload)
        .map_err(|e| Error::Decode(format!("job #{id}: the payload is not JSON: {e}")))?;
    let max_runtime = match row.get::<_, Option<i64>>(8)? {
        None => None,
        Some(ms) => Some(Duration::from_millis(
            u64::try_from(ms)
                .map_err(|_| Error::Decode(format!("job #{id}: negative max runtime {ms}")))?,
        )),
    };
    let lease = match row.get::<_, Option<String>>(10)? {
        None => None,
        Some(owner_id) => Some(Lease {
            owner: Owner {
                id: owner_id,
                host: row.get(11)?,
                boot_id: row.get(12)?,
                pid: row.get(13)?,
                pid_start_time: row
                    .get::<_, Option<i64>>(14)?
                    .map(|s| u64::from_ne_bytes(s.to_ne_bytes())),
                pid_ns: row.get::<_, Option<i64>>(27)?.map(|n| u64::from_ne_bytes(n.to_ne_bytes())),
            },
            attempt: row.get(15)?,
            until: ts(row.get(16)?),
            child_pgid: row.get(17)?,
            gpus: Vec::new(),
        }),
    };
    let (gpus, holds) =
        slothqueue_core::gpu::from_column(row.get::<_, Option<String>>(34)?.as_deref())
            .map_err(|e| Error::Decode(format!("job #{id}: {e}")))?;
    let mut lease = lease;
    if let Some(l) = lease.as_mut() {
        l.gpus = holds;
    }
    Ok(Job {
        id,
        queue: row.get(1)?,
        kind: row.get(2)?,
        payload,
        priority: row.get(4)?,
        state,
        attempts: row.get(6)?,
        max_attempts: row.get(7)?,
        max_runtime,
        not_before: ts(row.get(9)?),
        lease,
        idempotency_key: row.get(18)?,
        payload_hash: row.get(19)?,
        cancel_requested: row.get::<_, i64>(20)? != 0,
        last_error: row.get(21)?,
        result: row.get(22)?,
        exit_code: row.get(23)?,
        created_at: ts(row.get(24)?),
        started_at: row.get::<_, Option<i64>>(25)?.map(ts),
        finished_at: row.get::<_, Option<i64>>(26)?.map(ts),
        after: parents_from(id, row.get(28)?)?,
        pending_parents: row.get(29)?,
        cancelled_by: row.get(30)?,
        held: held_from(id, row.get(31)?, row.get(32)?, row.get(33)?)?,
        gpus,
    })
}

/// A hold as stored: the flag, and the stamp's two columns, all three or
/// none (the table's CHECK says so too, but a file edited without it must
/// not read as half a hold).
fn held_from(
    id: JobId,
    flag: i64,
    at: Option<i64>,
    by: Option<String>,
) -> Result<Option<Stamp>, Error> {
    match (flag, at, by) {
        (0, None, None) => Ok(None),
        (1, Some(at), Some(by)) => Ok(Some(Stamp { since: ts(at), by })),
        _ => {
            Err(Error::Decode(format!("job #{id}: half a hold (held, held_at, held_by disagree)")))
        }
    }
}

/// Runs a `SELECT` of [`JOB_COLUMNS`] and decodes every row.
pub(crate) fn query_jobs(
    conn: &Connection,
    sql: &str,
    params: &[Value],
) -> Result<Vec<Job>, Error> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params_from_iter(params))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(job_from_row(row)?);
    }
    Ok(out)
}

fn query_job(conn: &Connection, sql: &str, params: &[Value]) -> Result<Option<Job>, Error> {
    Ok(query_jobs(conn, sql, params)?.into_iter().next())
}

pub(crate) fn find(conn: &Connection, id: JobId) -> Result<Option<Job>, Error> {
    let sql = format!("SELECT {} FROM jobs WHERE id = ?1", *COLUMNS);
    query_job(conn, &sql, &[Value::Integer(id)])
}

pub(crate) fn load(conn: &Connection, id: JobId) -> Result<Job, Error> {
    find(conn, id)?.ok_or(Error::Store(StoreError::NotFound(id)))
}

pub(crate) fn key_holder(conn: &Connection, key: &str) -> Result<Option<Job>, Error> {
    let sql = format!("SELECT {} FROM jobs WHERE idempotency_key = ?1", *COLUMNS);
    query_job(conn, &sql, &[text(key)])
}

/// Inserts a new job, and an edge from each of its parents to it.
pub(crate) fn insert_job(conn: &Connection, job: &Job) -> Result<(), Error> {
    conn.prepare_cached(&INSERT_JOB)?.execute(params_from_iter(job_values(job)?))?;
    if !job.after.is_empty() {
        // `OR IGNORE`: an imported job may name a parent twice.
        let mut edge =
            conn.prepare_cached("INSERT OR IGNORE INTO edges (parent, child) VALUES (?1, ?2)")?;
        for parent in &job.after {
            edge.execute([*parent, job.id])?;
        }
    }
    Ok(())
}

/// Deletes a job with its trail and its edges (one per parent: an edge
/// lives as long as its child; see `schema::v4`).
pub(crate) fn delete_job(conn: &Connection, job: &Job) -> Result<(), Error> {
    // Trails go explicitly, not only by the cascade, so a file opened
    // without `foreign_keys` by another tool cannot leave orphans behind.
    conn.prepare_cached("DELETE FROM events WHERE job_id = ?1")?.execute([job.id])?;
    let mut edge = conn.prepare_cached("DELETE FROM edges WHERE parent = ?1 AND child = ?2")?;
    for parent in &job.after {
        edge.execute([*parent, job.id])?;
    }
    conn.prepare_cached("DELETE FROM jobs WHERE id = ?1")?.execute([job.id])?;
    Ok(())
}

/// The children of parent `?1`, lowest first.
pub(crate) const DEPENDENTS_SQL: &str = "SELECT child FROM edges WHERE parent = ?1 ORDER BY child";

/// The ids of the jobs that named `id` as a parent, lowest first: one
/// range of `edges`' key.
pub(crate) fn dependents(conn: &Connection, id: JobId) -> Result<Vec<JobId>, Error> {
    let mut stmt = conn.prepare_cached(DEPENDENTS_SQL)?;
    let ids = stmt.query_map([id], |r| r.get(0))?;
    Ok(ids.collect::<rusqlite::Result<_>>()?)
}

/// Writes `new` over `old`, on condition that the row still is `old`.
fn update_job(conn: &Connection, old: &Job, new: &Job) -> Result<(), Error> {
    let mut values = job_values(new)?;
    values[0] = Value::Integer(old.id);
    values.push(text(old.state.as_str()));
    values.push(opt(old.lease.as_ref(), |l| text(&l.owner.id)));
    values.push(opt(old.lease.as_ref(), |l| Value::Integer(i64::from(l.attempt))));
    let changed = conn.prepare_cached(&UPDATE_JOB)?.execute(params_from_iter(values))?;
    if changed != 1 {
        // Impossible under the write lock unless something outside
        // slothqueue edits the file; refuse rather than guess.
        return Err(Error::Store(StoreError::Backend(format!(
            "job #{} changed under a write transaction ({changed} rows matched)",
            old.id
        ))));
    }
    Ok(())
}

pub(crate) fn append_events(conn: &Connection, events: &[Event]) -> Result<(), Error> {
    append_events_from(conn, events, None)
}

/// Appends `events`, numbering a job's from `first_seq` when the caller
/// knows its trail is empty (a job just created), else after its last one:
/// one lookup per job, not per event.
pub(crate) fn append_events_from(
    conn: &Connection,
    events: &[Event],
    first_seq: Option<i64>,
) -> Result<(), Error> {
    let mut insert = conn.prepare_cached(
        "INSERT INTO events (job_id, seq, at, kind, owner, attempt, message, retry_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    let mut last: Option<(JobId, i64)> = None;
    for e in events {
        let seq = match (last, first_seq) {
            (Some((job, seq)), _) if job == e.job_id => seq + 1,
            (None, Some(first)) => first,
            _ => conn
                .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE job_id = ?1")?
                .query_row([e.job_id], |r| r.get(0))?,
        };
        last = Some((e.job_id, seq));
        insert.execute(params![
            e.job_id,
            seq,
            e.at.as_millis(),
            e.kind.as_str(),
            e.owner,
            e.attempt,
            e.message,
            e.retry_at.map(Timestamp::as_millis),
        ])?;
    }
    Ok(())
}

/// Writes a transition computed from `old`: the row, then its events.
pub(crate) fn apply(conn: &Connection, old: &Job, t: &Transition) -> Result<(), Error> {
    update_job(conn, old, &t.job)?;
    append_events(conn, &t.events)
}

pub(crate) fn event_from_row(row: &Row<'_>) -> Result<Event, Error> {
    let job_id: i64 = row.get(0)?;
    let kind: String = row.get(2)?;
    let kind =
        kind.parse::<EventKind>().map_err(|e| Error::Decode(format!("job #{job_id}: {e}")))?;
    Ok(Event {
        job_id,
        at: ts(row.get(1)?),
        kind,
        owner: row.get(3)?,
        attempt: row.get(4)?,
        message: row.get(5)?,
        retry_at: row.get::<_, Option<i64>>(6)?.map(ts),
    })
}

// ---------------------------------------------------------------------------
// Running jobs

/// Every running job, by lease expiry (few: their index is by lease).
pub(crate) fn running_jobs(conn: &Connection) -> Result<Vec<Job>, Error> {
    let sql = format!(
        "SELECT {} FROM jobs INDEXED BY jobs_running WHERE state = 'running' ORDER BY lease_until",
        *COLUMNS
    );
    query_jobs(conn, &sql, &[])
}

// ---------------------------------------------------------------------------
// Lanes

/// Every lane's settings, as stored: one row per lane with settings (see
/// `schema::v5`). A row that does not decode, names no valid queue, or
/// gives every queue at once a limit (which `Lanes::apply` never writes)
/// is damage.
pub(crate) fn read_lanes(conn: &Connection) -> Result<Lanes, Error> {
    let mut stmt = conn.prepare_cached("SELECT scope, settings FROM lanes ORDER BY scope")?;
    let mut rows = stmt.query([])?;
    let mut lanes = Lanes::default();
    while let Some(row) = rows.next()? {
        let key: String = row.get(0)?;
        let json: String = row.get(1)?;
        let settings: LaneSettings = serde_json::from_str(&json).map_err(|e| {
            Error::Decode(format!("the lane of {}: {e}", LaneScope::from_key(&key)))
        })?;
        lanes.insert_stored(&key, settings).map_err(Error::Decode)?;
    }
    Ok(lanes)
}

/// Stores `scope`'s settings as [`Lanes::apply`] returned them: the
/// defaults by deleting the row.
pub(crate) fn write_lane(
    conn: &Connection,
    scope: &LaneScope,
    settings: &LaneSettings,
) -> Result<(), Error> {
    if settings.is_default() {
        conn.prepare_cached("DELETE FROM lanes WHERE scope = ?1")?.execute([scope.key()])?;
        return Ok(());
    }
    let json = serde_json::to_string(settings)
        .map_err(|e| StoreError::InvalidInput(format!("the lane cannot be stored: {e}")))?;
    conn.prepare_cached(
        "INSERT INTO lanes (scope, settings) VALUES (?1, ?2)
         ON CONFLICT (scope) DO UPDATE SET settings = excluded.settings",
    )?
    .execute(params![scope.key(), json])?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Schedules

/// A `schedules` row back as the schedule it holds. A row that does not
/// decode, or whose schedule names another key than the row's, is damage.
fn schedule_from(key: &str, json: &str) -> Result<Schedule, Error> {
    let s: Schedule = serde_json::from_str(json)
        .map_err(|e| Error::Decode(format!("the schedule `{key}`: {e}")))?;
    if s.key != key {
        return Err(Error::Decode(format!("the row of schedule `{key}` holds `{}`", s.key)));
    }
    Ok(s)
}

/// Every schedule, in key order (the table's own; see `schema::v6`).
pub(crate) fn read_schedules(conn: &Connection) -> Result<Vec<Schedule>, Error> {
    let mut stmt = conn.prepare_cached("SELECT key, schedule FROM schedules ORDER BY key")?;
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let key: String = row.get(0)?;
        let json: String = row.get(1)?;
        out.push(schedule_from(&key, &json)?);
    }
    Ok(out)
}

/// The schedule stored under `key`, if any.
pub(crate) fn find_schedule(conn: &Connection, key: &str) -> Result<Option<Schedule>, Error> {
    let mut stmt = conn.prepare_cached("SELECT schedule FROM schedules WHERE key = ?1")?;
    let mut rows = stmt.query([key])?;
    match rows.next()? {
        Some(row) => {
            let json: String = row.get(0)?;
            schedule_from(key, &json).map(Some)
        }
        None => Ok(None),
    }
}

/// Stores `s` under its key, replacing what the key held.
pub(crate) fn write_schedule(conn: &Connection, s: &Schedule) -> Result<(), Error> {
    let json = serde_json::to_string(s)
        .map_err(|e| StoreError::InvalidInput(format!("the schedule cannot be stored: {e}")))?;
    conn.prepare_cached(
        "INSERT INTO schedules (key, schedule) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET schedule = excluded.schedule",
    )?
    .execute(params![s.key, json])?;
    Ok(())
}

/// Deletes the schedule `key` (its jobs stay).
pub(crate) fn delete_schedule(conn: &Connection, key: &str) -> Result<(), Error> {
    conn.prepare_cached("DELETE FROM schedules WHERE key = ?1")?.execute([key])?;
    Ok(())
}
