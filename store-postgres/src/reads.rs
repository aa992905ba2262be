//! The reads that are not operations: `list`, `stats`, `queue_counts`,
//! `next_due`, a job's trail, the runner records. Each runs in one
//! read-only transaction (one snapshot) or on a plain connection, and
//! answers from SQL aggregates over the job indexes.

use slothqueue_core::{
    Event, Job, JobId, ListFilter, ListOrder, PendingShown, QueueCounts, RunnerRecord, Stats,
    Timestamp,
};
use tokio_postgres::types::ToSql;

use crate::error::Error;
use crate::rows::{COLUMNS, READY, event_from_row, load, query_jobs, ts};
use crate::txn::Db;

/// The `SELECT` behind `list`, and its parameters.
pub(crate) fn list_sql(
    filter: &ListFilter,
) -> Result<(String, Vec<Box<dyn ToSql + Sync + Send>>), Error> {
    filter.check()?;
    let mut sql = format!("SELECT {} FROM jobs WHERE TRUE", *COLUMNS);
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    let mut bind = |sql: &mut String, cond: &str, v: Box<dyn ToSql + Sync + Send>| {
        params.push(v);
        sql.push_str(&format!(" AND {cond} ${}", params.len()));
    };
    if let Some(s) = filter.state {
        // A literal: the planner picks a partial index only for a state it
        // can see.
        sql.push_str(&format!(" AND state = '{}'", s.as_str()));
    }
    if let Some(q) = &filter.queue {
        bind(&mut sql, "queue =", Box::new(q.clone()));
    }
    if let Some(k) = &filter.kind {
        bind(&mut sql, "kind =", Box::new(k.clone()));
    }
    // Literals, so the planner may pick `jobs_held` or `jobs_waiting`
    // (`ListFilter::admits` is the rule).
    match filter.shown {
        Some(PendingShown::Held) => sql.push_str(" AND state = 'pending' AND held"),
        Some(PendingShown::Waiting) => {
            sql.push_str(" AND state = 'pending' AND pending_parents > 0 AND NOT held");
        }
        None => {}
    }
    if let Some(since) = filter.finished_since {
        bind(&mut sql, "finished_at >=", Box::new(since.as_millis()));
    }
    match (filter.order, filter.cursor) {
        (ListOrder::Newest, Some(c)) => bind(&mut sql, "id <", Box::new(c)),
        (ListOrder::Oldest, Some(c)) => bind(&mut sql, "id >", Box::new(c)),
        // `ListFilter::check` refused a cursor with the due-first order.
        (ListOrder::DueFirst, Some(_)) | (_, None) => {}
    }
    if let Some(t) = &filter.search {
        // `strpos`, not `LIKE`: case-sensitive, and no wildcard in `t`.
        params.push(Box::new(t.clone()));
        let n = params.len();
        sql.push_str(&format!(
            " AND (strpos(kind, ${n}) > 0 OR strpos(idempotency_key, ${n}) > 0 \
             OR strpos(payload, ${n}) > 0)"
        ));
    }
    sql.push_str(match filter.order {
        ListOrder::Newest => " ORDER BY id DESC",
        ListOrder::Oldest => " ORDER BY id",
        ListOrder::DueFirst => " ORDER BY priority DESC, not_before, id",
    });
    if let Some(limit) = filter.limit {
        params.push(Box::new(i64::try_from(limit).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT ${}", params.len()));
    }
    Ok((sql, params))
}

pub(crate) fn list_tx(db: &Db<'_>, filter: &ListFilter) -> Result<Vec<Job>, Error> {
    let (sql, params) = list_sql(filter)?;
    let refs: Vec<&(dyn ToSql + Sync)> =
        params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
    query_jobs(db, &sql, &refs)
}

fn count(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Every count in one pass over the jobs.
pub(crate) fn stats_tx(db: &Db<'_>, now: Timestamp) -> Result<Stats, Error> {
    let sql = format!(
        "SELECT
            COUNT(*) FILTER (WHERE state = 'pending'),
            COUNT(*) FILTER (WHERE state = 'pending' AND pending_parents > 0),
            COUNT(*) FILTER (WHERE state = 'pending' AND held),
            COUNT(*) FILTER (WHERE state = 'running'),
            COUNT(*) FILTER (WHERE state = 'done'),
            COUNT(*) FILTER (WHERE state = 'failed'),
            COUNT(*) FILTER (WHERE state = 'cancelled'),
            COUNT(*) FILTER (WHERE {READY} AND not_before <= $1),
            MIN(not_before) FILTER (WHERE {READY} AND not_before > $1)
         FROM jobs"
    );
    let Some(row) = db.query_opt(&sql, &[&now.as_millis()])? else {
        return Ok(Stats::default());
    };
    Ok(Stats {
        pending: count(row.try_get(0)?),
        waiting_on_parents: count(row.try_get(1)?),
        held: count(row.try_get(2)?),
        running: count(row.try_get(3)?),
        done: count(row.try_get(4)?),
        failed: count(row.try_get(5)?),
        cancelled: count(row.try_get(6)?),
        due_now: count(row.try_get(7)?),
        next_due: row.try_get::<_, Option<i64>>(8)?.map(ts),
    })
}

/// What every queue with a pending or running job holds, by name.
pub(crate) fn queue_counts_tx(db: &Db<'_>, now: Timestamp) -> Result<Vec<QueueCounts>, Error> {
    let sql = format!(
        "SELECT queue,
            COUNT(*) FILTER (WHERE state = 'pending'),
            COUNT(*) FILTER (WHERE {READY} AND not_before <= $1),
            COUNT(*) FILTER (WHERE state = 'pending' AND held),
            COUNT(*) FILTER (WHERE state = 'pending' AND pending_parents > 0),
            COUNT(*) FILTER (WHERE state = 'running')
         FROM jobs WHERE state IN ('pending', 'running')
         GROUP BY queue ORDER BY queue COLLATE \"C\""
    );
    db.query(&sql, &[&now.as_millis()])?
        .iter()
        .map(|row| {
            Ok(QueueCounts {
                queue: row.try_get(0)?,
                pending: count(row.try_get(1)?),
                due: count(row.try_get(2)?),
                held: count(row.try_get(3)?),
                waiting_on_parents: count(row.try_get(4)?),
                running: count(row.try_get(5)?),
            })
        })
        .collect()
}

/// The earliest `not_before` of a claimable pending job, or lease end.
pub(crate) fn next_due_tx(db: &Db<'_>) -> Result<Option<Timestamp>, Error> {
    let sql = format!(
        "SELECT LEAST(
            (SELECT MIN(not_before) FROM jobs WHERE {READY}),
            (SELECT MIN(lease_until) FROM jobs WHERE state = 'running'))"
    );
    let row = db.query_opt(&sql, &[])?;
    Ok(row.map(|r| r.try_get::<_, Option<i64>>(0)).transpose()?.flatten().map(ts))
}

fn decode_runner(json: &str) -> Result<RunnerRecord, Error> {
    serde_json::from_str(json).map_err(|e| Error::Decode(format!("a runner record: {e}")))
}

/// Job `id`'s trail, oldest first; `NotFound` when there is no job.
pub(crate) fn events_tx(db: &Db<'_>, id: JobId) -> Result<Vec<Event>, Error> {
    load(db, id)?;
    db.query(
        "SELECT job_id, at, kind, owner, attempt, message, retry_at
         FROM events WHERE job_id = $1 ORDER BY seq",
        &[&id],
    )?
    .iter()
    .map(event_from_row)
    .collect()
}

/// Every runner record, by owner id (byte order).
pub(crate) fn runners_tx(db: &Db<'_>) -> Result<Vec<RunnerRecord>, Error> {
    db.query("SELECT record FROM runners ORDER BY owner_id COLLATE \"C\"", &[])?
        .iter()
        .map(|row| decode_runner(&row.try_get::<_, String>(0)?))
        .collect()
}
