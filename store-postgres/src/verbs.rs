//! [`PgTx`]: the row verbs `slothqueue_core::ops` runs on, over one open
//! PostgreSQL transaction; the binary-`COPY` buffering of new jobs behind
//! its insert verb; the search for due jobs in claim order that the claim
//! pulls from, pushed down to the claim indexes with
//! `FOR UPDATE SKIP LOCKED`; and the shared-lock transaction mode a claim
//! and an owner's settle run in ([`shared_or_exclusive`]).
//!
//! Nothing here decides: every operation is core's, run inside the
//! transaction `store.rs` opens, in the lock mode it chooses; a verb reads
//! or writes rows (`rows.rs`). The one thing a verb may answer besides is
//! [`Error::Escalate`]: under the queue's shared lock, a claim that needs
//! the exclusive one says so at the verb that shows it (the lanes read
//! configured, an abandoned job about to be ended).

use std::collections::HashSet;

use slothqueue_core::ops::{ClaimCursor, DueScope, Tx, TxError};
use slothqueue_core::{
    Event, Job, JobId, JobState, LaneScope, LaneSettings, Lanes, Schedule, StoreError, Timestamp,
    Transition,
};
use tokio_postgres::types::ToSql;

use crate::error::Error;
use crate::rows::{
    COLUMNS, HOLD_MAX, NewJobs, READY, append_events, apply, delete_job, delete_schedule,
    dependents, find, find_schedule, key_holder, query_jobs, read_lanes, read_schedules,
    running_jobs, write_lane, write_schedule,
};
use crate::schema;
use crate::txn::{Db, Keys, Lock};

/// The open transaction of one operation. Every read sees the
/// transaction's earlier writes: new jobs held for one `COPY`
/// ([`NewJobs`]) are flushed before any read whose answer they could
/// change, and before any other write.
pub(crate) struct PgTx<'a, 'c> {
    db: &'a Db<'c>,
    /// Begun under the queue's shared lock: the running jobs are read
    /// skipping the rows other transactions hold, and a claim that needs a
    /// view of them all (lanes configured) or would end abandoned jobs
    /// answers [`Error::Escalate`].
    shared: bool,
    held: NewJobs,
    /// The lanes as read in this transaction (read once, dropped when one
    /// is written).
    lanes: Option<Lanes>,
    /// Set once the running jobs are read: a claim is under way.
    claiming: bool,
    /// A claim ended an abandoned job (its end may make work claimable).
    retired: bool,
    /// What a restore's batch reads, read for the whole batch at once
    /// ([`PgTx::prime_restore`]).
    known: Option<Known>,
}

/// Ids and keys asked about in one query for a whole batch: the ones
/// found, and every one asked. A verb answers "none" without a query for
/// one asked and not found, unless this transaction has written it since.
#[derive(Default)]
struct Known {
    asked_ids: HashSet<JobId>,
    taken_ids: HashSet<JobId>,
    asked_keys: HashSet<String>,
    held_keys: HashSet<String>,
}

impl Known {
    /// `job` is now in the queue (inserted, or written with its key).
    fn note(&mut self, job: &Job) {
        self.taken_ids.insert(job.id);
        if let Some(key) = &job.idempotency_key {
            self.held_keys.insert(key.clone());
        }
    }
}

impl<'a, 'c> PgTx<'a, 'c> {
    /// Reads and writes through `db`, which must be inside the transaction
    /// the operation runs in, begun under the shared lock when `shared`.
    pub(crate) fn new(db: &'a Db<'c>, shared: bool) -> Self {
        PgTx {
            db,
            shared,
            held: NewJobs::default(),
            lanes: None,
            claiming: false,
            retired: false,
            known: None,
        }
    }

    /// Writes what is still held. Called after the operation, before the
    /// commit.
    pub(crate) fn finish(&mut self) -> Result<(), Error> {
        self.flush()
    }

    /// Whether the transaction runs under the queue's shared lock.
    #[cfg(test)]
    pub(crate) fn is_shared(&self) -> bool {
        self.shared
    }

    /// How many new jobs are held, not written yet.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    /// Whether a claim in this transaction ended an abandoned job.
    pub(crate) fn retired(&self) -> bool {
        self.retired
    }

    /// Reads, in two queries, which of the ids and keys of an import's
    /// jobs the queue holds, so that checking each job against the queue
    /// costs no round trip (`ops::restore_many` asks job by job).
    pub(crate) fn prime_restore(&mut self, jobs: &[(Job, Vec<Event>)]) -> Result<(), Error> {
        if jobs.is_empty() {
            return Ok(());
        }
        let ids: Vec<JobId> = jobs.iter().map(|(j, _)| j.id).collect();
        let mut known = Known::default();
        for row in self.db.query("SELECT id FROM jobs WHERE id = ANY($1)", &[&ids])? {
            known.taken_ids.insert(row.try_get(0)?);
        }
        known.asked_ids = ids.into_iter().collect();
        let keys: Vec<&str> =
            jobs.iter().filter_map(|(j, _)| j.idempotency_key.as_deref()).collect();
        if !keys.is_empty() {
            let sql = "SELECT idempotency_key FROM jobs
                 WHERE idempotency_key IS NOT NULL AND idempotency_key = ANY($1)";
            for row in self.db.query(sql, &[&keys])? {
                known.held_keys.insert(row.try_get(0)?);
            }
        }
        known.asked_keys = keys.into_iter().map(str::to_owned).collect();
        self.known = Some(known);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        if self.held.is_empty() {
            return Ok(());
        }
        self.held.flush(self.db)
    }
}

impl TxError for Error {
    /// Only what is already a store error is a refusal; a server failure,
    /// a damaged row or a claim asking for the exclusive lock is the
    /// store's.
    fn refusal(self) -> Result<StoreError, Self> {
        match self {
            Error::Store(e) => Ok(e),
            other => Err(other),
        }
    }
}

impl Tx for PgTx<'_, '_> {
    type Error = Error;

    fn job(&mut self, id: JobId) -> Result<Option<Job>, Error> {
        if self.held.holds(id) {
            self.flush()?;
        } else if self
            .known
            .as_ref()
            .is_some_and(|k| k.asked_ids.contains(&id) && !k.taken_ids.contains(&id))
        {
            return Ok(None);
        }
        find(self.db, id)
    }

    fn key_holder(&mut self, key: &str) -> Result<Option<Job>, Error> {
        if self.held.holds_key(key) {
            self.flush()?;
        } else if self
            .known
            .as_ref()
            .is_some_and(|k| k.asked_keys.contains(key) && !k.held_keys.contains(key))
        {
            return Ok(None);
        }
        key_holder(self.db, key)
    }

    fn dependents(&mut self, id: JobId) -> Result<Vec<JobId>, Error> {
        if self.held.holds_child_of(id) {
            self.flush()?;
        }
        dependents(self.db, id)
    }

    fn running(&mut self) -> Result<Vec<Job>, Error> {
        self.flush()?;
        self.claiming = true;
        running_jobs(self.db, self.shared)
    }

    fn due(
        &mut self,
        scope: &DueScope<'_>,
        after: Option<&ClaimCursor>,
        limit: usize,
    ) -> Result<Vec<Job>, Error> {
        self.flush()?;
        let jobs = due_jobs(self.db, scope, after, limit)?;
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
        self.flush()?;
        // Literals, not parameters: the planner picks an index for a state
        // it can see. No row locks: its one reader, a purge, holds the
        // queue's exclusive lock, beside which nothing writes a job in
        // these states (a heartbeat writes a running job only), and the
        // rows it deletes its `DELETE` locks; locking every row read would
        // write each one's header, where a purge deletes a few.
        let states: Vec<String> = states.iter().map(|s| format!("'{}'", s.as_str())).collect();
        let sql = format!(
            "SELECT {} FROM jobs WHERE state IN ({}) ORDER BY id",
            *COLUMNS,
            states.join(", ")
        );
        query_jobs(self.db, &sql, &[])
    }

    fn lanes(&mut self) -> Result<Lanes, Error> {
        let lanes = match &self.lanes {
            Some(lanes) => lanes.clone(),
            None => read_lanes(self.db)?,
        };
        self.lanes = Some(lanes.clone());
        if self.shared && !lanes.is_default() {
            // A limit counts a lane's running jobs across every claimer,
            // and a pause must be seen whole: only the exclusive lock
            // shows them all.
            return Err(Error::Escalate);
        }
        Ok(lanes)
    }

    fn put_lane(&mut self, scope: &LaneScope, settings: &LaneSettings) -> Result<(), Error> {
        self.lanes = None;
        write_lane(self.db, scope, settings)
    }

    fn schedule(&mut self, key: &str) -> Result<Option<Schedule>, Error> {
        find_schedule(self.db, key)
    }

    fn schedules(&mut self) -> Result<Vec<Schedule>, Error> {
        read_schedules(self.db)
    }

    fn put_schedule(&mut self, s: &Schedule) -> Result<(), Error> {
        write_schedule(self.db, s)
    }

    fn delete_schedule(&mut self, key: &str) -> Result<(), Error> {
        delete_schedule(self.db, key)
    }

    /// Above every id ever used, including purged and restored ones (a
    /// purge raises the high water in `meta` before it deletes). Read
    /// under the exclusive lock, once per operation.
    fn next_id(&mut self) -> Result<JobId, Error> {
        self.flush()?;
        let sql = format!(
            "SELECT GREATEST(COALESCE((SELECT value FROM meta WHERE name = '{}'), 0),
                             COALESCE((SELECT MAX(id) FROM jobs), 0)) + 1",
            schema::ID_HIGH_WATER
        );
        let row = self.db.query_opt(&sql, &[])?;
        Ok(row.map(|r| r.try_get::<_, i64>(0)).transpose()?.unwrap_or(1))
    }

    /// Held, to go with the others in one `COPY` ([`NewJobs::flush`]),
    /// written once [`HOLD_MAX`] are held.
    fn insert(&mut self, job: &Job, events: &[Event]) -> Result<(), Error> {
        self.held.add(job, events.to_vec())?;
        if let Some(known) = &mut self.known {
            known.note(job);
        }
        if self.held.len() >= HOLD_MAX {
            self.flush()?;
        }
        Ok(())
    }

    fn update(&mut self, before: &Job, after: &Transition) -> Result<(), Error> {
        self.flush()?;
        if self.claiming
            && before.state == JobState::Running
            && after.job.state != JobState::Running
        {
            // A claim ending an abandoned job: its end reaches the jobs
            // waiting on it, which the shared lock does not serialize.
            if self.shared {
                return Err(Error::Escalate);
            }
            self.retired = true;
        }
        apply(self.db, before, after)?;
        if let Some(known) = &mut self.known {
            known.note(&after.job);
        }
        Ok(())
    }

    fn append(&mut self, events: &[Event]) -> Result<(), Error> {
        self.flush()?;
        append_events(self.db, events)
    }

    fn delete(&mut self, jobs: &[Job]) -> Result<(), Error> {
        self.flush()?;
        // Ids are never reused: the next id stays above the ones deleted.
        self.db.execute(
            &format!(
                "UPDATE meta SET value = GREATEST(value, COALESCE((SELECT MAX(id) FROM jobs), 0))
                 WHERE name = '{}'",
                schema::ID_HIGH_WATER
            ),
            &[],
        )?;
        jobs.iter().try_for_each(|job| delete_job(self.db, job))
    }
}

// ---------------------------------------------------------------------------
// The shared lock

/// Tells the queue's listeners, when this transaction commits, that it
/// changed.
fn notify(db: &Db<'_>, keys: &Keys) -> Result<(), Error> {
    db.execute("SELECT 1 FROM pg_notify($1, '')", &[&keys.channel])?;
    Ok(())
}

/// Runs `op` (a claim, an owner's settle, or both) under the queue's
/// **shared** lock, and once more, whole, under the exclusive lock when a
/// verb answers [`Error::Escalate`] (see the crate docs, "The queue's
/// lock", for why each is sound). Under the shared lock every row written
/// is one the transaction holds locked: the settled job (its owner's), the
/// jobs waiting on it (read `FOR UPDATE` before their count of parents
/// goes down; a deadlock between two settles is the server's to break,
/// and retried), the running and due jobs a claim reads (`FOR UPDATE SKIP
/// LOCKED`). When `claims`, the lanes are read before anything else, so
/// with lanes configured the escalation comes before anything is written
/// or locked. A claim that ended an abandoned job notifies the listeners
/// even when `notifies` is off.
pub(crate) fn shared_or_exclusive<T>(
    db: &Db<'_>,
    keys: &Keys,
    notifies: bool,
    claims: bool,
    op: &mut dyn FnMut(&mut PgTx<'_, '_>) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut attempt = |lock: Lock| {
        db.transaction(keys, lock, notifies, &mut |db| {
            let mut tx = PgTx::new(db, lock == Lock::Shared);
            if claims {
                tx.lanes()?;
            }
            let out = op(&mut tx)?;
            tx.finish()?;
            if tx.retired() && !notifies {
                notify(db, keys)?;
            }
            Ok(out)
        })
    };
    match attempt(Lock::Shared) {
        Err(Error::Escalate) => attempt(Lock::Exclusive),
        other => other,
    }
}

// ---------------------------------------------------------------------------
// The due jobs, in claim order

/// Where a search of the claim index starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Search {
    /// At the start: the best due job first.
    Start,
    /// After a cursor `($3, $4, $5)` (priority, `not_before`, id), within
    /// its priority level.
    RestOfLevel,
    /// At the levels below priority `$3`.
    LevelsBelow,
}

/// Up to `limit` due claimable jobs from `from` (in the queue bound next
/// when `by_queue`, of the kinds bound next when `kinds`, outside the
/// queues bound next when `closed`), in claim order, locked and skipping
/// the rows other claimers hold. One walk of `jobs_pending` (or
/// `jobs_pending_queue`) from where `from` says: O(log n) in the backlog.
/// The limit is a literal (a few values): a generic plan must not be
/// planned for an unknown one.
pub(crate) fn due_sql(
    from: Search,
    by_queue: bool,
    kinds: bool,
    closed: bool,
    limit: usize,
) -> String {
    let mut sql = format!("SELECT {} FROM jobs WHERE {READY} AND not_before <= $1", *COLUMNS);
    let mut n = 1;
    match from {
        Search::Start => {}
        Search::RestOfLevel => {
            sql.push_str(" AND priority = $2 AND (not_before, id) > ($3, $4)");
            n = 4;
        }
        Search::LevelsBelow => {
            sql.push_str(" AND priority < $2");
            n = 2;
        }
    }
    if by_queue {
        n += 1;
        sql.push_str(&format!(" AND queue = ${n}"));
    }
    if kinds {
        n += 1;
        sql.push_str(&format!(" AND kind = ANY(${n})"));
    }
    if closed {
        n += 1;
        sql.push_str(&format!(" AND queue <> ALL(${n})"));
    }
    sql.push_str(&format!(
        " ORDER BY priority DESC, not_before, id LIMIT {limit} FOR UPDATE SKIP LOCKED"
    ));
    sql
}

/// Up to `limit` due jobs after `after`, in claim order, of the queues and
/// kinds `scope` names: a scope of every queue walks `jobs_pending` once,
/// leaving out the closed lanes' jobs; named queues are each walked in
/// `jobs_pending_queue` and the best `limit` of them kept.
fn due_jobs(
    db: &Db<'_>,
    scope: &DueScope<'_>,
    after: Option<&ClaimCursor>,
    limit: usize,
) -> Result<Vec<Job>, Error> {
    let kinds: Vec<String> = scope.kinds.map(<[String]>::to_vec).unwrap_or_default();
    let Some(queues) = &scope.queues else {
        let closed: Vec<String> = scope.closed.iter().map(|q| (*q).to_owned()).collect();
        return due_in(db, None, &kinds, &closed, scope.now, after, limit);
    };
    let mut out = Vec::new();
    for q in queues {
        out.extend(due_in(db, Some(q), &kinds, &[], scope.now, after, limit)?);
    }
    out.sort_by_key(Job::claim_order);
    out.truncate(limit);
    Ok(out)
}

/// Up to `limit` due jobs in one queue (or all) after `after`, in claim
/// order: the rest of the cursor's priority level, then the levels below.
/// The jobs read are locked until the transaction ends, the ones not
/// handed out too: a later pull reads them again (a transaction does not
/// skip its own locks).
fn due_in(
    db: &Db<'_>,
    queue: Option<&str>,
    kinds: &[String],
    closed: &[String],
    now: Timestamp,
    after: Option<&ClaimCursor>,
    limit: usize,
) -> Result<Vec<Job>, Error> {
    let now = now.as_millis();
    let search = |from: Search, limit: usize| {
        let (priority, not_before, id) = match after {
            Some(c) => (c.priority, c.not_before.as_millis(), c.id),
            None => (0, 0, 0),
        };
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&now];
        match from {
            Search::Start => {}
            Search::RestOfLevel => {
                params.push(&priority);
                params.push(&not_before);
                params.push(&id);
            }
            Search::LevelsBelow => params.push(&priority),
        }
        if let Some(q) = &queue {
            params.push(q);
        }
        if !kinds.is_empty() {
            params.push(&kinds);
        }
        if !closed.is_empty() {
            params.push(&closed);
        }
        let sql = due_sql(from, queue.is_some(), !kinds.is_empty(), !closed.is_empty(), limit);
        query_jobs(db, &sql, &params)
    };
    if after.is_none() {
        return search(Search::Start, limit);
    }
    // The same limit below (and the surplus dropped), so that a few
    // statements serve every pull.
    let mut out = search(Search::RestOfLevel, limit)?;
    if out.len() < limit {
        out.extend(search(Search::LevelsBelow, limit)?);
        out.truncate(limit);
    }
    Ok(out)
}
