//! A job, an event or a runner record as rows of the `jobs`, `events` and
//! `runners` tables, and back, a job's parents as rows of `edges`, the
//! lanes' settings as rows of `lanes`, schedules as rows of `schedules`;
//! the queries that read them (a job by id or key, its dependents, the
//! running jobs), the buffer of new jobs written by binary `COPY`
//! ([`NewJobs`]), and the writes of a transition, conditional on the row it
//! was computed from. The row verbs core's operations run on are
//! `verbs.rs`, built from these.

use std::collections::HashSet;
use std::sync::LazyLock;
use std::time::Duration;

use slothqueue_core::machine::Transition;
use slothqueue_core::{
    Event, EventKind, Job, JobId, JobState, LaneScope, LaneSettings, Lanes, Lease, Owner, Schedule,
    Stamp, StoreError, Timestamp,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::error::Error;
use crate::txn::Db;

/// The job columns, in the order [`JobValues`] and [`job_from_row`] use.
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
    let marks: Vec<String> = (1..=JOB_COLUMNS.len()).map(|i| format!("${i}")).collect();
    format!("INSERT INTO jobs ({}) VALUES ({})", *COLUMNS, marks.join(", "))
});

/// [`INSERT_JOB`]'s columns as one binary `COPY`: its types are
/// `INSERT_JOB`'s parameters ([`Db::copy_in`]).
static COPY_JOBS: LazyLock<String> =
    LazyLock::new(|| format!("COPY jobs ({}) FROM STDIN (FORMAT binary)", *COLUMNS));

/// One event, in the order of [`EventValues::params`].
const INSERT_EVENT: &str =
    "INSERT INTO events (job_id, seq, at, kind, owner, attempt, message, retry_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// [`INSERT_EVENT`]'s columns as one binary `COPY`.
const COPY_EVENTS: &str = "COPY events (job_id, seq, at, kind, owner, attempt, message, retry_at)
     FROM STDIN (FORMAT binary)";

/// The edges of a batch of new jobs in one statement: every (parent,
/// child) pair side by side in two arrays. An imported job may name a
/// parent twice, hence `ON CONFLICT DO NOTHING`, as for one edge.
const INSERT_EDGES: &str = "INSERT INTO edges (parent, child)
     SELECT * FROM UNNEST($1::BIGINT[], $2::BIGINT[]) ON CONFLICT DO NOTHING";

/// Below this many new jobs a [`NewJobs::flush`] writes each with its own
/// statements, as a lone push always did. Row by row is two round trips a
/// job (its row, its event); the bulk path is about four whatever the
/// count (each `COPY` waits for the server to start it and to end it).
/// Measured on a local server (median `push_many` of n plain jobs): one
/// job 0.52–0.55 ms row by row against 0.64–0.88 ms by COPY, two even,
/// three 0.88–0.90 against 0.77–0.80, eight 1.8 against 0.75. A farther
/// server only widens the gap past three.
pub(crate) const COPY_MIN: usize = 3;

/// At most this many new jobs are held before they are written: a long
/// push (`push_stream` of 200,000 lines, each job's row a few KB with its
/// recorded environment) then holds a bounded batch, not all of it until
/// the commit. A thousand keeps the `COPY`'s fixed cost (about four round
/// trips) well below a millisecond a job and the batch at a few MB.
pub(crate) const HOLD_MAX: usize = 1_000;

/// Every column but the id, with the old state, owner and attempt in the
/// condition: the write lands only on the row the transition was computed
/// from (the fence).
static UPDATE_JOB: LazyLock<String> = LazyLock::new(|| {
    let n = JOB_COLUMNS.len();
    let sets: Vec<String> =
        JOB_COLUMNS.iter().enumerate().skip(1).map(|(i, c)| format!("{c} = ${}", i + 1)).collect();
    format!(
        "UPDATE jobs SET {} WHERE id = $1 AND state = ${} \
         AND lease_owner IS NOT DISTINCT FROM ${} AND lease_attempt IS NOT DISTINCT FROM ${}",
        sets.join(", "),
        n + 1,
        n + 2,
        n + 3
    )
});

/// The pending-and-claimable condition every claim and due index has.
pub(crate) const READY: &str = "state = 'pending' AND pending_parents = 0 AND NOT held";

/// A job's columns as statement parameters, owned.
struct JobValues {
    id: i64,
    queue: String,
    kind: String,
    payload: String,
    priority: i32,
    state: &'static str,
    attempts: i64,
    max_attempts: i64,
    max_runtime_ms: Option<i64>,
    not_before: i64,
    lease_owner: Option<String>,
    lease_host: Option<String>,
    lease_boot_id: Option<String>,
    lease_pid: Option<i64>,
    lease_pid_start: Option<i64>,
    lease_attempt: Option<i64>,
    lease_until: Option<i64>,
    lease_child_pgid: Option<i64>,
    idempotency_key: Option<String>,
    payload_hash: String,
    cancel_requested: bool,
    last_error: Option<String>,
    result: Option<String>,
    exit_code: Option<i64>,
    created_at: i64,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    lease_pid_ns: Option<i64>,
    parents: Option<String>,
    pending_parents: i64,
    cancelled_by: Option<i64>,
    held: bool,
    held_at: Option<i64>,
    held_by: Option<String>,
    gpus: Option<String>,
}

impl JobValues {
    fn of(job: &Job) -> Result<JobValues, Error> {
        let payload = serde_json::to_string(&job.payload)
            .map_err(|e| StoreError::InvalidInput(format!("the payload cannot be stored: {e}")))?;
        let lease = job.lease.as_ref();
        let owner = lease.map(|l| &l.owner);
        Ok(JobValues {
            id: job.id,
            queue: job.queue.clone(),
            kind: job.kind.clone(),
            payload,
            priority: job.priority,
            state: job.state.as_str(),
            attempts: i64::from(job.attempts),
            max_attempts: i64::from(job.max_attempts),
            max_runtime_ms: job
                .max_runtime
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            not_before: job.not_before.as_millis(),
            lease_owner: owner.map(|o| o.id.clone()),
            lease_host: owner.map(|o| o.host.clone()),
            lease_boot_id: owner.and_then(|o| o.boot_id.clone()),
            lease_pid: owner.and_then(|o| o.pid).map(i64::from),
            // Stored bit for bit: PostgreSQL integers are signed.
            lease_pid_start: owner
                .and_then(|o| o.pid_start_time)
                .map(|s| i64::from_ne_bytes(s.to_ne_bytes())),
            lease_attempt: lease.map(|l| i64::from(l.attempt)),
            lease_until: lease.map(|l| l.until.as_millis()),
            lease_child_pgid: lease.and_then(|l| l.child_pgid).map(i64::from),
            idempotency_key: job.idempotency_key.clone(),
            payload_hash: job.payload_hash.clone(),
            cancel_requested: job.cancel_requested,
            last_error: job.last_error.clone(),
            result: job.result.clone(),
            exit_code: job.exit_code.map(i64::from),
            created_at: job.created_at.as_millis(),
            started_at: job.started_at.map(Timestamp::as_millis),
            finished_at: job.finished_at.map(Timestamp::as_millis),
            lease_pid_ns: owner.and_then(|o| o.pid_ns).map(|n| i64::from_ne_bytes(n.to_ne_bytes())),
            parents: parents_value(&job.after)?,
            pending_parents: i64::from(job.pending_parents),
            cancelled_by: job.cancelled_by,
            held: job.held.is_some(),
            held_at: job.held.as_ref().map(|h| h.since.as_millis()),
            held_by: job.held.as_ref().map(|h| h.by.clone()),
            gpus: slothqueue_core::gpu::column_of(job),
        })
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.id,
            &self.queue,
            &self.kind,
            &self.payload,
            &self.priority,
            &self.state,
            &self.attempts,
            &self.max_attempts,
            &self.max_runtime_ms,
            &self.not_before,
            &self.lease_owner,
            &self.lease_host,
            &self.lease_boot_id,
            &self.lease_pid,
            &self.lease_pid_start,
            &self.lease_attempt,
            &self.lease_until,
            &self.lease_child_pgid,
            &self.idempotency_key,
            &self.payload_hash,
            &self.cancel_requested,
            &self.last_error,
            &self.result,
            &self.exit_code,
            &self.created_at,
            &self.started_at,
            &self.finished_at,
            &self.lease_pid_ns,
            &self.parents,
            &self.pending_parents,
            &self.cancelled_by,
            &self.held,
            &self.held_at,
            &self.held_by,
            &self.gpus,
        ]
    }
}

/// A job's parents as stored: a JSON array of ids, NULL for none.
fn parents_value(after: &[JobId]) -> Result<Option<String>, Error> {
    if after.is_empty() {
        return Ok(None);
    }
    let json = serde_json::to_string(after)
        .map_err(|e| StoreError::InvalidInput(format!("the parents cannot be stored: {e}")))?;
    Ok(Some(json))
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

/// A stored integer as the narrower type the job has.
fn narrow<T: TryFrom<i64>>(id: JobId, column: &str, v: i64) -> Result<T, Error> {
    T::try_from(v).map_err(|_| Error::Decode(format!("job #{id}: {column} {v} is out of range")))
}

fn narrow_opt<T: TryFrom<i64>>(
    id: JobId,
    column: &str,
    v: Option<i64>,
) -> Result<Option<T>, Error> {
    v.map(|v| narrow(id, column, v)).transpose()
}

fn job_from_row(row: &Row) -> Result<Job, Error> {
    let id: i64 = row.try_get(0)?;
    let state: String = row.try_get(5)?;
    let state = state.parse::<JobState>().map_err(|e| Error::Decode(format!("job #{id}: {e}")))?;
    let payload: String = row.try_get(3)?;
    let payload = serde_json::from_str(&payload)
        .map_err(|e| Error::Decode(format!("job #{id}: the payload is not JSON: {e}")))?;
    let max_runtime = match row.try_get::<_, Option<i64>>(8)? {
        None => None,
        Some(ms) => Some(Duration::from_millis(
            u64::try_from(ms)
                .map_err(|_| Error::Decode(format!("job #{id}: negative max runtime {ms}")))?,
        )),
    };
    let lease = match row.try_get::<_, Option<String>>(10)? {
        None => None,
        Some(owner_id) => {
            let until: Option<i64> = row.try_get(16)?;
            let attempt: Option<i64> = row.try_get(15)?;
            let (Some(until), Some(attempt)) = (until, attempt) else {
                return Err(Error::Decode(format!(
                    "job #{id}: a lease without its attempt or end"
                )));
            };
            Some(Lease {
                owner: Owner {
                    id: owner_id,
                    host: row.try_get::<_, Option<String>>(11)?.unwrap_or_default(),
                    boot_id: row.try_get(12)?,
                    pid: narrow_opt(id, "lease_pid", row.try_get(13)?)?,
                    pid_start_time: row
                        .try_get::<_, Option<i64>>(14)?
                        .map(|s| u64::from_ne_bytes(s.to_ne_bytes())),
                    pid_ns: row
                        .try_get::<_, Option<i64>>(27)?
                        .map(|n| u64::from_ne_bytes(n.to_ne_bytes())),
                },
                attempt: narrow(id, "lease_attempt", attempt)?,
                until: ts(until),
                child_pgid: narrow_opt(id, "lease_child_pgid", row.try_get(17)?)?,
                gpus: Vec::new(),
            })
        }
    };
    let (gpus, holds) =
        slothqueue_core::gpu::from_column(row.try_get::<_, Option<String>>(34)?.as_deref())
            .map_err(|e| Error::Decode(format!("job #{id}: {e}")))?;
    let mut lease = lease;
    if let Some(l) = lease.as_mut() {
        l.gpus = holds;
    }
    Ok(Job {
        id,
        queue: row.try_get(1)?,
        kind: row.try_get(2)?,
        payload,
        priority: row.try_get(4)?,
        state,
        attempts: narrow(id, "attempts", row.try_get(6)?)?,
        max_attempts: narrow(id, "max_attempts", row.try_get(7)?)?,
        max_runtime,
        not_before: ts(row.try_get(9)?),
        lease,
        idempotency_key: row.try_get(18)?,
        payload_hash: row.try_get(19)?,
        cancel_requested: row.try_get(20)?,
        last_error: row.try_get(21)?,
        result: row.try_get(22)?,
        exit_code: narrow_opt(id, "exit_code", row.try_get(23)?)?,
        created_at: ts(row.try_get(24)?),
        started_at: row.try_get::<_, Option<i64>>(25)?.map(ts),
        finished_at: row.try_get::<_, Option<i64>>(26)?.map(ts),
        after: parents_from(id, row.try_get(28)?)?,
        pending_parents: narrow(id, "pending_parents", row.try_get(29)?)?,
        cancelled_by: row.try_get(30)?,
        held: held_from(id, row.try_get(31)?, row.try_get(32)?, row.try_get(33)?)?,
        gpus,
    })
}

/// A hold as stored: the flag and the stamp's two columns, all or none.
fn held_from(
    id: JobId,
    flag: bool,
    at: Option<i64>,
    by: Option<String>,
) -> Result<Option<Stamp>, Error> {
    match (flag, at, by) {
        (false, None, None) => Ok(None),
        (true, Some(at), Some(by)) => Ok(Some(Stamp { since: ts(at), by })),
        _ => {
            Err(Error::Decode(format!("job #{id}: half a hold (held, held_at, held_by disagree)")))
        }
    }
}

/// Runs a `SELECT` of [`JOB_COLUMNS`] and decodes every row.
pub(crate) fn query_jobs(
    db: &Db<'_>,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Job>, Error> {
    db.query(sql, params)?.iter().map(job_from_row).collect()
}

fn query_job(db: &Db<'_>, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<Job>, Error> {
    Ok(query_jobs(db, sql, params)?.into_iter().next())
}

/// Job `id`, locked for the transaction when it writes.
pub(crate) fn find(db: &Db<'_>, id: JobId) -> Result<Option<Job>, Error> {
    let sql = format!("SELECT {} FROM jobs WHERE id = $1{}", *COLUMNS, db.for_update());
    query_job(db, &sql, &[&id])
}

pub(crate) fn load(db: &Db<'_>, id: JobId) -> Result<Job, Error> {
    find(db, id)?.ok_or(Error::Store(StoreError::NotFound(id)))
}

pub(crate) fn key_holder(db: &Db<'_>, key: &str) -> Result<Option<Job>, Error> {
    let sql =
        format!("SELECT {} FROM jobs WHERE idempotency_key = $1{}", *COLUMNS, db.for_update());
    query_job(db, &sql, &[&key])
}

/// Inserts a new job, and an edge from each of its parents to it.
fn insert_job(db: &Db<'_>, values: &JobValues, parents: &[JobId]) -> Result<(), Error> {
    db.execute(&INSERT_JOB, &values.params())?;
    for parent in parents {
        // An imported job may name a parent twice.
        db.execute(
            "INSERT INTO edges (parent, child) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[parent, &values.id],
        )?;
    }
    Ok(())
}

/// New jobs (pushed, or restored by an import) with their first events,
/// not written yet: a batch of them goes to the server in a few
/// statements ([`NewJobs::flush`]) instead of two or more round trips a
/// job.
///
/// Nothing in the transaction can see a held job until it is flushed, so
/// the transaction flushes before any read whose answer a held job could
/// change (its id, its key, a parent it names: [`NewJobs::holds`],
/// [`NewJobs::holds_key`], [`NewJobs::holds_child_of`]), before any other
/// write, and at the end. Each job's values are taken when it is added,
/// so a job that cannot be stored is refused as itself, at its place in
/// the batch, not at the flush.
#[derive(Default)]
pub(crate) struct NewJobs {
    jobs: Vec<NewRows>,
    ids: HashSet<JobId>,
    keys: HashSet<String>,
    parents: HashSet<JobId>,
}

/// One held job: its row, its parents (the `edges` rows) and its trail.
struct NewRows {
    values: JobValues,
    parents: Vec<JobId>,
    events: Vec<Event>,
}

impl NewJobs {
    /// Holds `job`, which is not in the queue, with its trail `events`
    /// (all of them its own): numbered from 1 when written.
    pub fn add(&mut self, job: &Job, events: Vec<Event>) -> Result<(), Error> {
        let values = JobValues::of(job)?;
        self.ids.insert(job.id);
        if let Some(key) = &job.idempotency_key {
            self.keys.insert(key.clone());
        }
        self.parents.extend(job.after.iter().copied());
        self.jobs.push(NewRows { values, parents: job.after.clone(), events });
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// How many jobs are held.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether job `id` is held.
    pub fn holds(&self, id: JobId) -> bool {
        self.ids.contains(&id)
    }

    /// Whether a held job carries the idempotency key `key`.
    pub fn holds_key(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    /// Whether a held job names `id` as a parent.
    pub fn holds_child_of(&self, id: JobId) -> bool {
        self.parents.contains(&id)
    }

    /// Writes every held job, its edges and its trail, and holds none
    /// after. Fewer than [`COPY_MIN`] go row by row; more go as one `COPY`
    /// of the jobs, one `INSERT` of every edge, one `COPY` of the events.
    pub fn flush(&mut self, db: &Db<'_>) -> Result<(), Error> {
        let jobs = std::mem::take(&mut self.jobs);
        self.ids.clear();
        self.keys.clear();
        self.parents.clear();
        if jobs.len() < COPY_MIN {
            for j in &jobs {
                insert_job(db, &j.values, &j.parents)?;
                append_events_from(db, &j.events, Some(1))?;
            }
            return Ok(());
        }
        db.copy_in(&COPY_JOBS, &INSERT_JOB, jobs.iter().map(|j| j.values.params()))?;
        let (mut parents, mut children) = (Vec::new(), Vec::new());
        for j in &jobs {
            parents.extend_from_slice(&j.parents);
            children.extend(std::iter::repeat_n(j.values.id, j.parents.len()));
        }
        if !parents.is_empty() {
            db.execute(INSERT_EDGES, &[&parents, &children])?;
        }
        // The jobs are new, so their trails are empty: each numbered from
        // 1, as `append_events_from` numbers a new job's.
        let events: Vec<EventValues<'_>> = jobs
            .iter()
            .flat_map(|j| j.events.iter().zip(1..).map(|(e, seq)| EventValues::of(e, seq)))
            .collect();
        if !events.is_empty() {
            db.copy_in(COPY_EVENTS, INSERT_EVENT, events.iter().map(EventValues::params))?;
        }
        Ok(())
    }
}

/// Deletes a job with its trail and its edges (one per parent: an edge
/// lives as long as its child).
pub(crate) fn delete_job(db: &Db<'_>, job: &Job) -> Result<(), Error> {
    db.execute("DELETE FROM events WHERE job_id = $1", &[&job.id])?;
    for parent in &job.after {
        db.execute("DELETE FROM edges WHERE parent = $1 AND child = $2", &[parent, &job.id])?;
    }
    db.execute("DELETE FROM jobs WHERE id = $1", &[&job.id])?;
    Ok(())
}

/// The ids of the jobs that named `id` as a parent, lowest first: one
/// range of `edges`' key.
pub(crate) fn dependents(db: &Db<'_>, id: JobId) -> Result<Vec<JobId>, Error> {
    let rows = db.query("SELECT child FROM edges WHERE parent = $1 ORDER BY child", &[&id])?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

/// Writes `new` over `old`, on condition that the row still is `old`.
fn update_job(db: &Db<'_>, old: &Job, new: &Job) -> Result<(), Error> {
    let mut values = JobValues::of(new)?;
    values.id = old.id;
    let old_state = old.state.as_str();
    let old_owner = old.lease.as_ref().map(|l| l.owner.id.clone());
    let old_attempt = old.lease.as_ref().map(|l| i64::from(l.attempt));
    let mut params = values.params();
    params.push(&old_state);
    params.push(&old_owner);
    params.push(&old_attempt);
    let changed = db.execute(&UPDATE_JOB, &params)?;
    if changed != 1 {
        // The row was read locked in this transaction: only something
        // outside slothqueue can have changed it. Refuse rather than guess.
        return Err(Error::Store(StoreError::Backend(format!(
            "job #{} changed under a write transaction ({changed} rows matched)",
            old.id
        ))));
    }
    Ok(())
}

pub(crate) fn append_events(db: &Db<'_>, events: &[Event]) -> Result<(), Error> {
    append_events_from(db, events, None)
}

/// Appends `events`, numbering a job's from `first_seq` when the caller
/// knows its trail is empty (a job just created), else after its last one.
pub(crate) fn append_events_from(
    db: &Db<'_>,
    events: &[Event],
    first_seq: Option<i64>,
) -> Result<(), Error> {
    let mut last: Option<(JobId, i64)> = None;
    for e in events {
        let seq: i64 = match (last, first_seq) {
            (Some((job, seq)), _) if job == e.job_id => seq + 1,
            (None, Some(first)) => first,
            _ => db
                .query_opt(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE job_id = $1",
                    &[&e.job_id],
                )?
                .map(|r| r.try_get(0))
                .transpose()?
                .unwrap_or(1),
        };
        last = Some((e.job_id, seq));
        db.execute(INSERT_EVENT, &EventValues::of(e, seq).params())?;
    }
    Ok(())
}

/// An event's columns as statement parameters, numbered `seq`.
struct EventValues<'a> {
    job_id: JobId,
    seq: i64,
    at: i64,
    kind: &'static str,
    owner: &'a Option<String>,
    attempt: Option<i64>,
    message: &'a Option<String>,
    retry_at: Option<i64>,
}

impl<'a> EventValues<'a> {
    fn of(e: &'a Event, seq: i64) -> EventValues<'a> {
        EventValues {
            job_id: e.job_id,
            seq,
            at: e.at.as_millis(),
            kind: e.kind.as_str(),
            owner: &e.owner,
            attempt: e.attempt.map(i64::from),
            message: &e.message,
            retry_at: e.retry_at.map(Timestamp::as_millis),
        }
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.job_id,
            &self.seq,
            &self.at,
            &self.kind,
            self.owner,
            &self.attempt,
            self.message,
            &self.retry_at,
        ]
    }
}

/// Writes a transition computed from `old`: the row, then its events.
pub(crate) fn apply(db: &Db<'_>, old: &Job, t: &Transition) -> Result<(), Error> {
    update_job(db, old, &t.job)?;
    append_events(db, &t.events)
}

pub(crate) fn event_from_row(row: &Row) -> Result<Event, Error> {
    let job_id: i64 = row.try_get(0)?;
    let kind: String = row.try_get(2)?;
    let kind =
        kind.parse::<EventKind>().map_err(|e| Error::Decode(format!("job #{job_id}: {e}")))?;
    Ok(Event {
        job_id,
        at: ts(row.try_get(1)?),
        kind,
        owner: row.try_get(3)?,
        attempt: narrow_opt(job_id, "attempt", row.try_get(4)?)?,
        message: row.try_get(5)?,
        retry_at: row.try_get::<_, Option<i64>>(6)?.map(ts),
    })
}

// ---------------------------------------------------------------------------
// The running jobs

/// The running jobs, locked: waiting for each row (`skip_locked` false)
/// under the exclusive lock, or skipping those another transaction holds
/// (a claimer under the shared lock, an owner's heartbeat).
pub(crate) fn running_jobs(db: &Db<'_>, skip_locked: bool) -> Result<Vec<Job>, Error> {
    let lock = if !db.writes {
        ""
    } else if skip_locked {
        " FOR UPDATE SKIP LOCKED"
    } else {
        " FOR UPDATE"
    };
    let sql = format!(
        "SELECT {} FROM jobs WHERE state = 'running' ORDER BY lease_until, id{lock}",
        *COLUMNS
    );
    query_jobs(db, &sql, &[])
}

// ---------------------------------------------------------------------------
// Lanes

/// Every lane's settings, as stored. A row that does not decode, names no
/// valid queue, or gives every queue at once a limit is damage.
pub(crate) fn read_lanes(db: &Db<'_>) -> Result<Lanes, Error> {
    let rows = db.query("SELECT scope, settings FROM lanes ORDER BY scope", &[])?;
    let mut lanes = Lanes::default();
    for row in rows {
        let key: String = row.try_get(0)?;
        let json: String = row.try_get(1)?;
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
    db: &Db<'_>,
    scope: &LaneScope,
    settings: &LaneSettings,
) -> Result<(), Error> {
    if settings.is_default() {
        db.execute("DELETE FROM lanes WHERE scope = $1", &[&scope.key()])?;
        return Ok(());
    }
    let json = serde_json::to_string(settings)
        .map_err(|e| StoreError::InvalidInput(format!("the lane cannot be stored: {e}")))?;
    db.execute(
        "INSERT INTO lanes (scope, settings) VALUES ($1, $2)
         ON CONFLICT (scope) DO UPDATE SET settings = excluded.settings",
        &[&scope.key(), &json],
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Schedules

/// A `schedules` row back as the schedule it holds.
fn schedule_from(key: &str, json: &str) -> Result<Schedule, Error> {
    let s: Schedule = serde_json::from_str(json)
        .map_err(|e| Error::Decode(format!("the schedule `{key}`: {e}")))?;
    if s.key != key {
        return Err(Error::Decode(format!("the row of schedule `{key}` holds `{}`", s.key)));
    }
    Ok(s)
}

/// Every schedule, in key order (byte order, as the other stores sort).
pub(crate) fn read_schedules(db: &Db<'_>) -> Result<Vec<Schedule>, Error> {
    let rows = db.query("SELECT key, schedule FROM schedules ORDER BY key COLLATE \"C\"", &[])?;
    rows.iter()
        .map(|row| {
            let key: String = row.try_get(0)?;
            let json: String = row.try_get(1)?;
            schedule_from(&key, &json)
        })
        .collect()
}

/// The schedule stored under `key`, if any.
pub(crate) fn find_schedule(db: &Db<'_>, key: &str) -> Result<Option<Schedule>, Error> {
    match db.query_opt("SELECT schedule FROM schedules WHERE key = $1", &[&key])? {
        Some(row) => {
            let json: String = row.try_get(0)?;
            schedule_from(key, &json).map(Some)
        }
        None => Ok(None),
    }
}

/// Stores `s` under its key, replacing what the key held.
pub(crate) fn write_schedule(db: &Db<'_>, s: &Schedule) -> Result<(), Error> {
    let json = serde_json::to_string(s)
        .map_err(|e| StoreError::InvalidInput(format!("the schedule cannot be stored: {e}")))?;
    db.execute(
        "INSERT INTO schedules (key, schedule) VALUES ($1, $2)
         ON CONFLICT (key) DO UPDATE SET schedule = excluded.schedule",
        &[&s.key, &json],
    )?;
    Ok(())
}

/// Deletes the schedule `key` (its jobs stay).
pub(crate) fn delete_schedule(db: &Db<'_>, key: &str) -> Result<(), Error> {
    db.execute("DELETE FROM schedules WHERE key = $1", &[&key])?;
    Ok(())
}
