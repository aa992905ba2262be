//! [`SqliteTx`]: the row verbs `slothqueue_core::ops` runs on, over one
//! open SQLite transaction, and the search for due jobs in claim order that
//! the claim pulls from, pushed down to the claim indexes.
//!
//! Nothing here decides: every operation is core's, run inside the
//! transaction `store.rs` opens; a verb reads or writes rows (`rows.rs`).

use std::collections::BTreeSet;
use std::sync::LazyLock;

use rusqlite::Connection;
use rusqlite::types::Value;
use slothqueue_core::ops::{ClaimCursor, DueScope, Tx, TxError};
use slothqueue_core::{
    Event, Job, JobId, JobState, LaneScope, LaneSettings, Lanes, Schedule, StoreError, Timestamp,
    Transition,
};

use crate::error::Error;
use crate::rows::{
    COLUMNS, append_events, append_events_from, apply, delete_job, delete_schedule, dependents,
    find, find_schedule, insert_job, key_holder, millis, query_jobs, read_lanes, read_schedules,
    running_jobs, text, write_lane, write_schedule,
};
use crate::schema;

/// The open transaction of one operation. Every read sees the
/// transaction's earlier writes (a batch sees the jobs pushed before in
/// it; a plan, the rows it wrote).
pub(crate) struct SqliteTx<'c> {
    conn: &'c Connection,
}

impl<'c> SqliteTx<'c> {
    /// Reads and writes through `conn`, which must be inside the
    /// transaction the operation runs in.
    pub(crate) fn new(conn: &'c Connection) -> Self {
        SqliteTx { conn }
    }
}

impl TxError for Error {
    /// Only what is already a store error is a refusal; a SQLite failure
    /// or a damaged row is the store's.
    fn refusal(self) -> Result<StoreError, Self> {
        match self {
            Error::Store(e) => Ok(e),
            other => Err(other),
        }
    }
}

/// The id the next job gets: above every id ever used, including purged and
/// restored ones (`purge` raises the high water in `meta` before it
/// deletes; see `schema::v2`).
static NEXT_ID_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT MAX(COALESCE((SELECT value FROM meta WHERE name = '{}'), 0),
                COALESCE((SELECT MAX(id) FROM jobs), 0)) + 1",
        schema::ID_HIGH_WATER
    )
});

/// Keeps the next id above every job there is now, before some are
/// deleted.
static RAISE_HIGH_WATER_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE meta SET value = MAX(value, COALESCE((SELECT MAX(id) FROM jobs), 0))
         WHERE name = '{}'",
        schema::ID_HIGH_WATER
    )
});

impl Tx for SqliteTx<'_> {
    type Error = Error;

    fn job(&mut self, id: JobId) -> Result<Option<Job>, Error> {
        find(self.conn, id)
    }

    fn key_holder(&mut self, key: &str) -> Result<Option<Job>, Error> {
        key_holder(self.conn, key)
    }

    fn dependents(&mut self, id: JobId) -> Result<Vec<JobId>, Error> {
        dependents(self.conn, id)
    }

    fn running(&mut self) -> Result<Vec<Job>, Error> {
        running_jobs(self.conn)
    }

    fn due(
        &mut self,
        scope: &DueScope<'_>,
        after: Option<&ClaimCursor>,
        limit: usize,
    ) -> Result<Vec<Job>, Error> {
        let jobs = due_jobs(self.conn, scope, after, limit)?;
        // The claim indexes hold pending jobs only; anything else is a row
        // and its indexes out of step.
        if let Some(j) = jobs.iter().find(|j| j.state != JobState::Pending) {
            return Err(Error::Decode(format!(
                "the pending indexes are out of step: job #{} is {}",
                j.id, j.state
            )));
        }
        Ok(jobs)
    }

    fn jobs_in(&mut self, states: &[JobState]) -> Result<Vec<Job>, Error> {
        // Literals, not parameters: the planner picks the partial indexes
        // (`jobs_done`, ...) only for states it can see.
        let states: Vec<String> = states.iter().map(|s| format!("'{}'", s.as_str())).collect();
        let sql = format!(
            "SELECT {} FROM jobs WHERE state IN ({}) ORDER BY id",
            *COLUMNS,
            states.join(", ")
        );
        query_jobs(self.conn, &sql, &[])
    }

    fn lanes(&mut self) -> Result<Lanes, Error> {
        read_lanes(self.conn)
    }

    fn put_lane(&mut self, scope: &LaneScope, settings: &LaneSettings) -> Result<(), Error> {
        write_lane(self.conn, scope, settings)
    }

    fn schedule(&mut self, key: &str) -> Result<Option<Schedule>, Error> {
        find_schedule(self.conn, key)
    }

    fn schedules(&mut self) -> Result<Vec<Schedule>, Error> {
        read_schedules(self.conn)
    }

    fn put_schedule(&mut self, s: &Schedule) -> Result<(), Error> {
        write_schedule(self.conn, s)
    }

    fn delete_schedule(&mut self, key: &str) -> Result<(), Error> {
        delete_schedule(self.conn, key)
    }

    fn next_id(&mut self) -> Result<JobId, Error> {
        Ok(self.conn.prepare_cached(&NEXT_ID_SQL)?.query_row([], |r| r.get(0))?)
    }

    fn insert(&mut self, job: &Job, events: &[Event]) -> Result<(), Error> {
        insert_job(self.conn, job)?;
        // A new id has no trail yet: number from 1 without a lookup.
        append_events_from(self.conn, events, Some(1))
    }

    fn update(&mut self, before: &Job, after: &Transition) -> Result<(), Error> {
        apply(self.conn, before, after)
    }

    fn append(&mut self, events: &[Event]) -> Result<(), Error> {
        append_events(self.conn, events)
    }

    fn delete(&mut self, jobs: &[Job]) -> Result<(), Error> {
        // Ids are never reused: the next id stays above the ones deleted.
        self.conn.prepare_cached(&RAISE_HIGH_WATER_SQL)?.execute([])?;
        jobs.iter().try_for_each(|job| delete_job(self.conn, job))
    }
}

// ---------------------------------------------------------------------------
// The due jobs, in claim order

/// The highest priority below `?1` that has a pending job (in queue `?2`)
/// waiting on no parent and not held. One index seek each, so a claim
/// walks priority levels, not jobs. Every query through a claim or due
/// index names its whole condition (`pending_parents = 0 AND held = 0`
/// too): `INDEXED BY` a partial index is refused for a `WHERE` that does
/// not imply it.
pub(crate) fn top_priority_sql(by_queue: bool) -> &'static str {
    if by_queue {
        "SELECT priority FROM jobs INDEXED BY jobs_pending_queue
         WHERE state = 'pending' AND pending_parents = 0 AND held = 0
           AND queue = ?2 AND priority < ?1
         ORDER BY priority DESC LIMIT 1"
    } else {
        "SELECT priority FROM jobs INDEXED BY jobs_pending
         WHERE state = 'pending' AND pending_parents = 0 AND held = 0 AND priority < ?1
         ORDER BY priority DESC LIMIT 1"
    }
}

/// The first queue after `?1` (in name order) with a job a claim could
/// take: one seek of `jobs_pending_queue`, so the queues are walked one
/// per seek (a skip-scan), however many jobs each has.
pub(crate) const NEXT_QUEUE_SQL: &str = "SELECT queue FROM jobs INDEXED BY jobs_pending_queue
     WHERE state = 'pending' AND pending_parents = 0 AND held = 0 AND queue > ?1
     ORDER BY queue LIMIT 1";

/// The first `?3` due jobs at priority `?1` (`not_before <= ?2`), after
/// the cursor `(?4, ?5)` (`not_before`, id) when `after`, in the queue
/// bound next when `by_queue`, of one of `kinds` kinds (bound last).
pub(crate) fn due_at_priority_sql(by_queue: bool, after: bool, kinds: usize) -> String {
    let index = if by_queue { "jobs_pending_queue" } else { "jobs_pending" };
    let mut n = 3;
    let mut cond = String::new();
    if after {
        cond.push_str(" AND (not_before, id) > (?4, ?5)");
        n = 5;
    }
    if by_queue {
        n += 1;
        cond.push_str(&format!(" AND queue = ?{n}"));
    }
    if kinds > 0 {
        let marks: Vec<String> = (1..=kinds).map(|i| format!("?{}", n + i)).collect();
        cond.push_str(&format!(" AND kind IN ({})", marks.join(", ")));
    }
    format!(
        "SELECT {} FROM jobs INDEXED BY {index}
         WHERE state = 'pending' AND pending_parents = 0 AND held = 0
           AND priority = ?1 AND not_before <= ?2{cond}
         ORDER BY not_before, id LIMIT ?3",
        *COLUMNS
    )
}

/// Up to `limit` due jobs after `after`, in claim order, of the queues and
/// kinds `scope` names, skipping closed lanes in the per-queue index
/// (never walked job by job): a scope of every queue reads the one
/// all-queue index while no lane is closed (the common case), and
/// otherwise walks the queues that have claimable jobs ([`NEXT_QUEUE_SQL`],
/// one seek per queue) and looks in each open one; named queues are looked
/// in one by one. Per queue, the best `limit` merged.
fn due_jobs(
    conn: &Connection,
    scope: &DueScope<'_>,
    after: Option<&ClaimCursor>,
    limit: usize,
) -> Result<Vec<Job>, Error> {
    let kinds = scope.kinds.unwrap_or(&[]);
    let queues: Vec<String> = match &scope.queues {
        Some(qs) => qs.iter().map(|q| (*q).to_owned()).collect(),
        None if scope.closed.is_empty() => {
            return due_in(conn, None, kinds, scope.now, after, limit);
        }
        None => open_queues(conn, &scope.closed)?,
    };
    let mut out = Vec::new();
    for q in &queues {
        out.extend(due_in(conn, Some(q), kinds, scope.now, after, limit)?);
    }
    out.sort_by_key(Job::claim_order);
    out.truncate(limit);
    Ok(out)
}

/// Up to `limit` due jobs in one queue (or all) after `after`, in claim
/// order: the rest of the cursor's priority level, then each lower level
/// that has pending jobs.
fn due_in(
    conn: &Connection,
    queue: Option<&str>,
    kinds: &[String],
    now: Timestamp,
    after: Option<&ClaimCursor>,
    limit: usize,
) -> Result<Vec<Job>, Error> {
    let by_queue = queue.is_some();
    let mut out: Vec<Job> = Vec::new();
    let level = |priority: i64, from: Option<&ClaimCursor>, out: &mut Vec<Job>| {
        let want = i64::try_from(limit - out.len()).unwrap_or(i64::MAX);
        let mut params = vec![Value::Integer(priority), millis(now), Value::Integer(want)];
        if let Some(c) = from {
            params.extend([millis(c.not_before), Value::Integer(c.id)]);
        }
        if let Some(q) = queue {
            params.push(text(q));
        }
        params.extend(kinds.iter().map(|k| text(k)));
        let sql = due_at_priority_sql(by_queue, from.is_some(), kinds.len());
        out.extend(query_jobs(conn, &sql, &params)?);
        Ok::<(), Error>(())
    };
    let mut below = i64::from(i32::MAX) + 1;
    if let Some(c) = after {
        level(i64::from(c.priority), Some(c), &mut out)?;
        below = i64::from(c.priority);
    }
    while out.len() < limit {
        let mut seek: Vec<Value> = vec![Value::Integer(below)];
        if let Some(q) = queue {
            seek.push(text(q));
        }
        let mut stmt = conn.prepare_cached(top_priority_sql(by_queue))?;
        let priority: Option<i64> = {
            let mut rows = stmt.query(rusqlite::params_from_iter(&seek))?;
            match rows.next()? {
                Some(row) => Some(row.get(0)?),
                None => None,
            }
        };
        let Some(priority) = priority else { break };
        level(priority, None, &mut out)?;
        below = priority;
    }
    Ok(out)
}

/// The queues with a job a claim could take, but those in `closed`, by
/// name. (No queue is named `""`, the first bound: see `LaneScope::key`.)
fn open_queues(conn: &Connection, closed: &BTreeSet<&str>) -> Result<Vec<String>, Error> {
    let mut stmt = conn.prepare_cached(NEXT_QUEUE_SQL)?;
    let mut out = Vec::new();
    let mut after = String::new();
    loop {
        let next: Option<String> = {
            let mut rows = stmt.query([&after])?;
            match rows.next()? {
                Some(row) => Some(row.get(0)?),
                None => None,
            }
        };
        let Some(queue) = next else { return Ok(out) };
        if !closed.contains(queue.as_str()) {
            out.push(queue.clone());
        }
        after = queue;
    }
}
