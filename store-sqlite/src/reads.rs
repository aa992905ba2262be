//! The reads that are not operations: `list`, `stats`, the per-queue
//! counts, `next_due`, a job's trail and the runner records, each answered
//! from the partial indexes (a count is the size of one index) rather than
//! by walking the table.

use std::collections::BTreeMap;

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};
use slothqueue_core::{
    Event, Job, JobId, JobState, ListFilter, ListOrder, PendingShown, QueueCounts, RunnerRecord,
    Stats, StoreError, Timestamp,
};

use crate::error::Error;
use crate::rows::{COLUMNS, event_from_row, find, millis, query_jobs, text, ts};

pub(crate) fn list_tx(conn: &Connection, filter: &ListFilter) -> Result<Vec<Job>, Error> {
    let (sql, params) = list_sql(filter)?;
    query_jobs(conn, &sql, &params)
}

/// The `SELECT` behind `list`, and its parameters.
pub(crate) fn list_sql(filter: &ListFilter) -> Result<(String, Vec<Value>), Error> {
    filter.check()?;
    // Running jobs are few and their index is by lease: without the hint
    // the planner walks the whole table in id order to find them.
    let hint =
        if filter.state == Some(JobState::Running) { " INDEXED BY jobs_running" } else { "" };
    let mut sql = format!("SELECT {} FROM jobs{hint} WHERE 1", *COLUMNS);
    let mut params: Vec<Value> = Vec::new();
    let mut bind = |sql: &mut String, cond: &str, v: Value| {
        params.push(v);
        sql.push_str(&format!(" AND {cond} ?{}", params.len()));
    };
    if let Some(s) = filter.state {
        // A literal, not a parameter: the planner picks a partial index
        // (`jobs_done`, `jobs_pending`, ...) only for a state it can see.
        sql.push_str(&format!(" AND state = '{}'", s.as_str()));
    }
    if let Some(q) = &filter.queue {
        bind(&mut sql, "queue =", text(q));
    }
    if let Some(k) = &filter.kind {
        bind(&mut sql, "kind =", text(k));
    }
    // The held and waiting refinements and their state as literals, so
    // the planner may pick `jobs_held` or `jobs_waiting`
    // (`ListFilter::admits` is the rule).
    match filter.shown {
        Some(PendingShown::Held) => sql.push_str(" AND state = 'pending' AND held = 1"),
        Some(PendingShown::Waiting) => {
            sql.push_str(" AND state = 'pending' AND pending_parents > 0 AND held = 0");
        }
        None => {}
    }
    if let Some(since) = filter.finished_since {
        bind(&mut sql, "finished_at >=", Value::Integer(since.as_millis()));
    }
    match (filter.order, filter.cursor) {
        (ListOrder::Newest, Some(c)) => bind(&mut sql, "id <", Value::Integer(c)),
        (ListOrder::Oldest, Some(c)) => bind(&mut sql, "id >", Value::Integer(c)),
        // `ListFilter::check` refused a cursor with the due-first order.
        (ListOrder::DueFirst, Some(_)) | (_, None) => {}
    }
    if let Some(t) = &filter.search {
        // `instr`, not `LIKE`: case-sensitive, and no wildcard in `t`.
        params.push(text(t));
        let n = params.len();
        sql.push_str(&format!(
            " AND (instr(kind, ?{n}) > 0 OR instr(idempotency_key, ?{n}) > 0 \
             OR instr(payload, ?{n}) > 0)"
        ));
    }
    sql.push_str(match filter.order {
        ListOrder::Newest => " ORDER BY id DESC",
        ListOrder::Oldest => " ORDER BY id",
        ListOrder::DueFirst => " ORDER BY priority DESC, not_before, id",
    });
    if let Some(limit) = filter.limit {
        params.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT ?{}", params.len()));
    }
    Ok((sql, params))
}

/// Every count is the size of one partial index, read with `dbstat`: it
/// walks the index's pages and sums their cells, so 100,000 pending jobs
/// cost a few hundred page reads, where `COUNT(*)` steps through every
/// entry (SQLite's own page-count shortcut skips partial indexes). Pending
/// is the jobs in the due index (waiting on no parent, not held), those
/// waiting on parents (`jobs_waiting`, held or not) and those held
/// (`jobs_held`, waiting or not), less the held ones that wait (counted
/// twice; held jobs are few, so counting them is cheap); due now is the
/// due index less the jobs not yet due, which are few unless many are
/// scheduled ahead.
pub(crate) fn stats_tx(conn: &Connection, now: Timestamp) -> Result<Stats, Error> {
    let count = |index: &str| -> Result<u64, Error> {
        let n: Option<i64> = conn
            .prepare_cached("SELECT ncell FROM dbstat WHERE name = ?1 AND aggregate = 1")?
            .query_row([index], |r| r.get(0))
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        match n {
            Some(n) => Ok(u64::try_from(n).unwrap_or(0)),
            None => Err(Error::Decode(format!("the index `{index}` is missing"))),
        }
    };
    let ready = count("jobs_pending_due")?;
    let waiting = count("jobs_waiting")?;
    let held = count("jobs_held")?;
    let held_waiting: i64 = conn.prepare_cached(HELD_WAITING_SQL)?.query_row([], |r| r.get(0))?;
    let held_waiting = u64::try_from(held_waiting).unwrap_or(0);
    let not_due: i64 =
        conn.prepare_cached(NOT_DUE_SQL)?.query_row([now.as_millis()], |r| r.get(0))?;
    let next_due = first_value(conn, NEXT_NOT_DUE_SQL, &[millis(now)])?.map(ts);
    Ok(Stats {
        pending: (ready + waiting + held).saturating_sub(held_waiting),
        waiting_on_parents: waiting,
        held,
        running: count("jobs_running")?,
        done: count("jobs_done")?,
        failed: count("jobs_failed")?,
        cancelled: count("jobs_cancelled")?,
        due_now: ready.saturating_sub(u64::try_from(not_due).unwrap_or(0)),
        next_due,
    })
}

/// The held jobs also waiting on parents (in `jobs_waiting` too).
pub(crate) const HELD_WAITING_SQL: &str = "SELECT COUNT(*) FROM jobs INDEXED BY jobs_held
     WHERE state = 'pending' AND held = 1 AND pending_parents > 0";

/// Per queue: the jobs a claim could take (waiting on no parent, not
/// held), and of them those due at `?1`; from the covering per-queue
/// claim index, in queue order, without reading the table.
pub(crate) const QUEUE_READY_SQL: &str = "SELECT queue, COUNT(*), SUM(not_before <= ?1)
     FROM jobs INDEXED BY jobs_pending_queue
     WHERE state = 'pending' AND pending_parents = 0 AND held = 0
     GROUP BY queue";

/// Per queue: the jobs waiting on parents, held or not.
pub(crate) const QUEUE_WAITING_SQL: &str =
    "SELECT queue, COUNT(*) FROM jobs INDEXED BY jobs_waiting
     WHERE state = 'pending' AND pending_parents > 0 GROUP BY queue";

/// Per queue: the held jobs, and of them those also waiting on parents.
pub(crate) const QUEUE_HELD_SQL: &str = "SELECT queue, COUNT(*), SUM(pending_parents > 0)
     FROM jobs INDEXED BY jobs_held
     WHERE state = 'pending' AND held = 1 GROUP BY queue";

/// Per queue: the running jobs (few; their index is by lease).
pub(crate) const QUEUE_RUNNING_SQL: &str =
    "SELECT queue, COUNT(*) FROM jobs INDEXED BY jobs_running
     WHERE state = 'running' GROUP BY queue";

/// What every queue with a pending or running job holds, by name: four
/// `GROUP BY`s, one per partial index, in one read transaction.
pub(crate) fn queue_counts_tx(
    conn: &Connection,
    now: Timestamp,
) -> Result<Vec<QueueCounts>, Error> {
    let mut by_queue: BTreeMap<String, QueueCounts> = BTreeMap::new();
    let mut each = |sql: &str, params: &[Value], add: &dyn Fn(&mut QueueCounts, u64, u64)| {
        let mut stmt = conn.prepare_cached(sql)?;
        let mut rows = stmt.query(params_from_iter(params))?;
        while let Some(row) = rows.next()? {
            let queue: String = row.get(0)?;
            let n = u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0);
            let of_them = match row.as_ref().column_count() {
                3 => u64::try_from(row.get::<_, Option<i64>>(2)?.unwrap_or(0)).unwrap_or(0),
                _ => 0,
            };
            let counts = by_queue
                .entry(queue)
                .or_insert_with_key(|q| QueueCounts { queue: q.clone(), ..QueueCounts::default() });
            add(counts, n, of_them);
        }
        Ok::<(), Error>(())
    };
    each(QUEUE_READY_SQL, &[millis(now)], &|c, n, due| {
        c.pending += n;
        c.due += due;
    })?;
    each(QUEUE_WAITING_SQL, &[], &|c, n, _| {
        c.pending += n;
        c.waiting_on_parents += n;
    })?;
    each(QUEUE_HELD_SQL, &[], &|c, n, waiting| {
        // The held jobs that wait are in `jobs_waiting` too.
        c.pending += n.saturating_sub(waiting);
        c.held += n;
    })?;
    each(QUEUE_RUNNING_SQL, &[], &|c, n, _| c.running += n)?;
    Ok(by_queue.into_values().collect())
}

/// The pending jobs waiting on no parent and not held whose time has not
/// come (`?1`).
pub(crate) const NOT_DUE_SQL: &str = "SELECT COUNT(*) FROM jobs INDEXED BY jobs_pending_due
     WHERE state = 'pending' AND pending_parents = 0 AND held = 0 AND not_before > ?1";

/// The earliest time after `?1` a job waiting on no parent and not held
/// becomes due.
pub(crate) const NEXT_NOT_DUE_SQL: &str = "SELECT not_before FROM jobs INDEXED BY jobs_pending_due
     WHERE state = 'pending' AND pending_parents = 0 AND held = 0 AND not_before > ?1
     ORDER BY not_before LIMIT 1";

/// The earliest `not_before` of a job waiting on no parent and not held,
/// due or not.
pub(crate) const FIRST_DUE_SQL: &str = "SELECT not_before FROM jobs INDEXED BY jobs_pending_due
     WHERE state = 'pending' AND pending_parents = 0 AND held = 0 ORDER BY not_before LIMIT 1";

fn first_value(conn: &Connection, sql: &str, params: &[Value]) -> Result<Option<i64>, Error> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params_from_iter(params))?;
    Ok(match rows.next()? {
        Some(row) => Some(row.get(0)?),
        None => None,
    })
}

pub(crate) fn next_due_tx(conn: &Connection) -> Result<Option<Timestamp>, Error> {
    // A job waiting on parents or held is left out: no time makes it due.
    let pending = first_value(conn, FIRST_DUE_SQL, &[])?;
    let lease = first_value(
        conn,
        "SELECT lease_until FROM jobs INDEXED BY jobs_running
         WHERE state = 'running' ORDER BY lease_until LIMIT 1",
        &[],
    )?;
    Ok(match (pending, lease) {
        (Some(a), Some(b)) => Some(ts(a.min(b))),
        (a, b) => a.or(b).map(ts),
    })
}

/// The job's trail, oldest first; `NotFound` when there is no such job.
pub(crate) fn events_tx(conn: &Connection, id: JobId) -> Result<Vec<Event>, Error> {
    if find(conn, id)?.is_none() {
        return Err(Error::Store(StoreError::NotFound(id)));
    }
    let mut stmt = conn.prepare_cached(
        "SELECT job_id, at, kind, owner, attempt, message, retry_at
         FROM events WHERE job_id = ?1 ORDER BY seq",
    )?;
    let mut rows = stmt.query([id])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(event_from_row(row)?);
    }
    Ok(out)
}

/// Every runner record, by owner id.
pub(crate) fn runners_tx(conn: &Connection) -> Result<Vec<RunnerRecord>, Error> {
    let mut stmt = conn.prepare_cached("SELECT record FROM runners ORDER BY owner_id")?;
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let json: String = row.get(0)?;
        out.push(
            serde_json::from_str(&json)
                .map_err(|e| Error::Decode(format!("a runner record: {e}")))?,
        );
    }
    Ok(out)
}
