//! The reads that are not operations — `list`, `stats`, the per-queue
//! counts, `next_due`, a job's trail, the runner records — each from one
//! read transaction (one snapshot), served by the indexes `rows.rs` keeps
//! where one answers the question, so `status` costs no scan of the jobs.

use std::collections::{BTreeMap, BinaryHeap};
use std::ops::Bound;

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata};
use slothqueue_core::{
    Event, Job, JobId, JobState, ListFilter, ListOrder, QueueCounts, RunnerRecord, Stats,
    StoreError, Timestamp,
};

use crate::error::Failure;
use crate::rows::{decode_event, decode_job, load, out_of_step};
use crate::schema::{COUNTS, EVENTS, HELD, JOBS, PENDING, RUNNERS, RUNNING, WAITING};

/// Job `id`, or [`StoreError::NotFound`].
pub(crate) fn get_in(txn: &ReadTransaction, id: JobId) -> Result<Job, Failure> {
    load(&txn.open_table(JOBS)?, id)?.ok_or(Failure::Store(StoreError::NotFound(id)))
}

/// Job `id`'s trail, oldest first, by one range scan; [`StoreError::NotFound`]
/// when there is no such job.
pub(crate) fn events_in(txn: &ReadTransaction, id: JobId) -> Result<Vec<Event>, Failure> {
    if txn.open_table(JOBS)?.get(id)?.is_none() {
        return Err(Failure::Store(StoreError::NotFound(id)));
    }
    let events = txn.open_table(EVENTS)?;
    let mut out = Vec::new();
    for entry in events.range((id, 0)..=(id, u32::MAX))? {
        out.push(decode_event(entry?.1.value())?);
    }
    Ok(out)
}

/// Every runner record, by owner id.
pub(crate) fn runners_in(txn: &ReadTransaction) -> Result<Vec<RunnerRecord>, Failure> {
    let table = txn.open_table(RUNNERS)?;
    let mut out = Vec::new();
    for entry in table.iter()? {
        let (k, v) = entry?;
        let record: RunnerRecord = serde_json::from_slice(v.value()).map_err(|e| {
            Failure::Damaged(format!("runner `{}` does not decode: {e}", k.value()))
        })?;
        out.push(record);
    }
    Ok(out)
}

/// The jobs `filter` asks for, in its order, from its cursor: the few
/// running ones from `running`, the others by one walk of the jobs in id
/// order (due-first sorts what it admits).
pub(crate) fn list_in(txn: &ReadTransaction, filter: &ListFilter) -> Result<Vec<Job>, Failure> {
    let jobs = txn.open_table(JOBS)?;
    let limit = filter.limit.unwrap_or(usize::MAX);
    let admits = |j: &Job| filter.admits(j);
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    // The running jobs are few and indexed: no need to read every row.
    if filter.state == Some(JobState::Running) {
        let running = txn.open_table(RUNNING)?;
        for entry in running.iter()? {
            let id = entry?.0.value();
            let job = load(&jobs, id)?.ok_or_else(|| out_of_step("running", id))?;
            if admits(&job) {
                out.push(job);
            }
        }
        match filter.order {
            ListOrder::Newest => out.sort_by_key(|j| std::cmp::Reverse(j.id)),
            ListOrder::Oldest => out.sort_by_key(|j| j.id),
            ListOrder::DueFirst => out.sort_by_key(Job::claim_order),
        }
        out.retain(|j| match (filter.order, filter.cursor) {
            (ListOrder::Newest, Some(c)) => j.id < c,
            (ListOrder::Oldest, Some(c)) => j.id > c,
            _ => true,
        });
        out.truncate(limit);
        return Ok(out);
    }
    let rows = match (filter.order, filter.cursor) {
        (ListOrder::Newest, Some(c)) => jobs.range(..c)?,
        (ListOrder::Oldest, Some(c)) => jobs.range((Bound::Excluded(c), Bound::Unbounded))?,
        _ => jobs.range::<i64>(..)?,
    };
    let mut best = Best::new(limit);
    let mut take = |entry: Result<
        (redb::AccessGuard<'_, i64>, redb::AccessGuard<'_, &'static [u8]>),
        redb::StorageError,
    >|
     -> Result<bool, Failure> {
        let (k, v) = entry?;
        let job = decode_job(k.value(), v.value())?;
        if admits(&job) {
            match filter.order {
                ListOrder::DueFirst => best.keep(job),
                ListOrder::Newest | ListOrder::Oldest => out.push(job),
            }
        }
        Ok(filter.order == ListOrder::DueFirst || out.len() < limit)
    };
    match filter.order {
        ListOrder::Newest => {
            for entry in rows.rev() {
                if !take(entry)? {
                    break;
                }
            }
        }
        ListOrder::Oldest | ListOrder::DueFirst => {
            for entry in rows {
                if !take(entry)? {
                    break;
                }
            }
        }
    }
    if filter.order == ListOrder::DueFirst {
        out = best.into_sorted();
    }
    Ok(out)
}

/// The first `limit` jobs in claim order among those offered, holding no
/// more than `limit` of them at a time: a due-first page of a queue of
/// 200,000 pending jobs (`status` reads one) decodes every row but keeps a
/// page, not the queue.
struct Best {
    limit: usize,
    heap: BinaryHeap<ByClaimOrder>,
}

/// A job ordered by [`Job::claim_order`] (the heap's top is the last).
struct ByClaimOrder(Job);

impl PartialEq for ByClaimOrder {
    fn eq(&self, other: &Self) -> bool {
        self.0.claim_order() == other.0.claim_order()
    }
}

impl Eq for ByClaimOrder {}

impl PartialOrd for ByClaimOrder {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByClaimOrder {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.claim_order().cmp(&other.0.claim_order())
    }
}

impl Best {
    fn new(limit: usize) -> Best {
        Best { limit, heap: BinaryHeap::new() }
    }

    /// Offers `job`: kept if it is among the first `limit` so far.
    fn keep(&mut self, job: Job) {
        if self.heap.len() < self.limit {
            self.heap.push(ByClaimOrder(job));
        } else if self.heap.peek().is_some_and(|last| job.claim_order() < last.0.claim_order()) {
            self.heap.pop();
            self.heap.push(ByClaimOrder(job));
        }
    }

    fn into_sorted(self) -> Vec<Job> {
        self.heap.into_sorted_vec().into_iter().map(|b| b.0).collect()
    }
}

/// The counts of `status`: per state from `state_counts`, waiting and held
/// from their indexes' lengths, due now and the next due time from
/// `pending_by_time`; no job row is read.
pub(crate) fn stats_in(txn: &ReadTransaction, now: Timestamp) -> Result<Stats, Failure> {
    let counts = txn.open_table(COUNTS)?;
    let pending = txn.open_table(PENDING)?;
    let waiting = txn.open_table(WAITING)?;
    let held = txn.open_table(HELD)?;
    let count = |s: JobState| -> Result<u64, Failure> {
        Ok(counts.get(s.as_str())?.map(|v| v.value()).unwrap_or(0))
    };
    let now_ms = now.as_millis();
    // Jobs waiting on parents or held are in neither `pending_by_time`
    // nor `ready`: not counted due, and their time is not `next_due`.
    let mut due_now = 0u64;
    for entry in pending.range(..=(now_ms, i64::MAX))? {
        entry?;
        due_now += 1;
    }
    let next_due =
        match pending.range((Bound::Excluded((now_ms, i64::MAX)), Bound::Unbounded))?.next() {
            Some(entry) => Some(Timestamp::from_millis(entry?.0.value().0)),
            None => None,
        };
    Ok(Stats {
        held: held.len()?,
        pending: count(JobState::Pending)?,
        waiting_on_parents: waiting.len()?,
        running: count(JobState::Running)?,
        done: count(JobState::Done)?,
        failed: count(JobState::Failed)?,
        cancelled: count(JobState::Cancelled)?,
        due_now,
        next_due,
    })
}

/// What each queue with a pending or running job holds: one pass over
/// `pending_by_time` (the claimable jobs, due or not), the rows of the jobs
/// waiting on parents (their queue is in the row), `held` (which names
/// each one's queue) and the few running jobs.
pub(crate) fn queue_counts_in(
    txn: &ReadTransaction,
    now: Timestamp,
) -> Result<Vec<QueueCounts>, Failure> {
    /// Counts one job of `queue` with `f` (the name is copied once per
    /// queue, not once per job).
    fn count(
        by_queue: &mut BTreeMap<String, QueueCounts>,
        queue: &str,
        f: impl FnOnce(&mut QueueCounts),
    ) {
        match by_queue.get_mut(queue) {
            Some(c) => f(c),
            None => {
                let mut c = QueueCounts { queue: queue.to_owned(), ..QueueCounts::default() };
                f(&mut c);
                by_queue.insert(queue.to_owned(), c);
            }
        }
    }
    let mut by_queue = BTreeMap::new();
    let now_ms = now.as_millis();
    for entry in txn.open_table(PENDING)?.iter()? {
        let (k, v) = entry?;
        let due = k.value().0 <= now_ms;
        count(&mut by_queue, v.value().0, |c| {
            c.pending += 1;
            c.due += u64::from(due);
        });
    }
    let jobs = txn.open_table(JOBS)?;
    let waiting = txn.open_table(WAITING)?;
    for entry in waiting.iter()? {
        let id = entry?.0.value();
        let job = load(&jobs, id)?.ok_or_else(|| out_of_step("waiting_on_parents", id))?;
        count(&mut by_queue, &job.queue, |c| {
            c.pending += 1;
            c.waiting_on_parents += 1;
        });
    }
    for entry in txn.open_table(HELD)?.iter()? {
        let (k, v) = entry?;
        // A job both held and waiting is counted pending once, above.
        let also_waiting = waiting.get(k.value())?.is_some();
        count(&mut by_queue, v.value(), |c| {
            c.held += 1;
            c.pending += u64::from(!also_waiting);
        });
    }
    for entry in txn.open_table(RUNNING)?.iter()? {
        let id = entry?.0.value();
        let job = load(&jobs, id)?.ok_or_else(|| out_of_step("running", id))?;
        count(&mut by_queue, &job.queue, |c| c.running += 1);
    }
    Ok(by_queue.into_values().collect())
}

/// When something next needs the runner: the earliest pending due time
/// or lease end, from the first key of `pending_by_time` and the few
/// entries of `running`.
pub(crate) fn next_due_in(txn: &ReadTransaction) -> Result<Option<Timestamp>, Failure> {
    let pending = txn.open_table(PENDING)?;
    let running = txn.open_table(RUNNING)?;
    let mut earliest = pending.first()?.map(|(k, _)| k.value().0);
    for entry in running.iter()? {
        let until = entry?.1.value();
        earliest = Some(earliest.map_or(until, |e| e.min(until)));
    }
    Ok(earliest.map(Timestamp::from_millis))
}
