//! A job, an event, a schedule or a runner record as entries of the
//! tables, and back: [`RedbTx`], the tables of one write transaction,
//! keeps every index (`ready`, `pending_by_time`, `waiting_on_parents`,
//! `dependency_edges`, `running`, `idempotency_keys`, `state_counts`) in
//! step with the row in one function ([`RedbTx::put`]) and moves due jobs
//! into `ready`; JSON encode and decode; and the check that every index
//! agrees with the rows. The row verbs core's operations run on are
//! `verbs.rs`, over these.

use std::collections::HashMap;
use std::ops::Bound;

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, Table, WriteTransaction};
use slothqueue_core::machine;
use slothqueue_core::{
    Event, Job, JobId, JobState, LaneScope, LaneSettings, Lanes, Lease, Schedule, StoreError,
    Timestamp,
};

use crate::error::Failure;
use crate::schema::{
    COUNTS, EDGES, EVENTS, HELD, JOBS, KEYS, LANES, META, META_NEXT_ID, META_SCHEMA_VERSION,
    META_WATERMARK, PENDING, READY, RUNNERS, RUNNING, ReadyKey, SCHEDULES, WAITING, i64_from_meta,
    i64_to_meta, priority_key,
};

/// The tables of one write transaction, and the index bookkeeping.
pub(crate) struct RedbTx<'t> {
    pub(crate) meta: Table<'t, &'static str, u64>,
    pub(crate) jobs: Table<'t, i64, &'static [u8]>,
    pub(crate) ready: Table<'t, ReadyKey, ()>,
    pub(crate) pending: Table<'t, (i64, i64), (&'static str, &'static str, i32)>,
    pub(crate) running: Table<'t, i64, i64>,
    pub(crate) keys: Table<'t, &'static str, i64>,
    pub(crate) events: Table<'t, (i64, u32), &'static [u8]>,
    pub(crate) counts: Table<'t, &'static str, u64>,
    pub(crate) runners: Table<'t, &'static str, &'static [u8]>,
    pub(crate) edges: Table<'t, (i64, i64), ()>,
    pub(crate) waiting: Table<'t, i64, ()>,
    pub(crate) held: Table<'t, i64, &'static str>,
    pub(crate) lanes: Table<'t, &'static str, &'static [u8]>,
    pub(crate) schedules: Table<'t, &'static str, &'static [u8]>,
    /// Pending jobs with `not_before` at or below this are in `ready`.
    pub(crate) watermark: i64,
    /// The file's schema version as this transaction reads it.
    pub(crate) version: u64,
}

impl<'t> RedbTx<'t> {
    pub(crate) fn open(txn: &'t WriteTransaction) -> Result<Self, Failure> {
        let meta = txn.open_table(META)?;
        let watermark = meta
            .get(META_WATERMARK)?
            .map(|v| i64_from_meta(v.value()))
            .ok_or_else(|| Failure::Damaged("the meta table has no ready watermark".to_owned()))?;
        let version = meta
            .get(META_SCHEMA_VERSION)?
            .map(|v| v.value())
            .ok_or_else(|| Failure::Damaged("the meta table has no schema version".to_owned()))?;
        Ok(RedbTx {
            meta,
            jobs: txn.open_table(JOBS)?,
            ready: txn.open_table(READY)?,
            pending: txn.open_table(PENDING)?,
            running: txn.open_table(RUNNING)?,
            keys: txn.open_table(KEYS)?,
            events: txn.open_table(EVENTS)?,
            counts: txn.open_table(COUNTS)?,
            runners: txn.open_table(RUNNERS)?,
            edges: txn.open_table(EDGES)?,
            waiting: txn.open_table(WAITING)?,
            held: txn.open_table(HELD)?,
            lanes: txn.open_table(LANES)?,
            schedules: txn.open_table(SCHEDULES)?,
            watermark,
            version,
        })
    }

    pub(crate) fn job(&self, id: JobId) -> Result<Option<Job>, Failure> {
        load(&self.jobs, id)
    }

    pub(crate) fn next_id(&self) -> Result<JobId, Failure> {
        let n = self.meta.get(META_NEXT_ID)?.map(|v| v.value()).unwrap_or(1);
        i64::try_from(n).map_err(|_| Failure::Damaged(format!("next id {n} out of range")))
    }

    pub(crate) fn set_next_id(&mut self, id: JobId) -> Result<(), Failure> {
        let id =
            u64::try_from(id).map_err(|_| Failure::Damaged(format!("id {id} out of range")))?;
        self.meta.insert(META_NEXT_ID, id)?;
        Ok(())
    }

    /// Replaces `old` (as read in this transaction) with `new` (or deletes
    /// it), index entries and state counts included.
    ///
    /// The write's condition, as the SQL backend's `WHERE`: the stored row
    /// must still have `old`'s state, attempts and lease (owner and
    /// attempt), else nothing is written and the caller gets `LeaseLost`.
    /// redb admits one write transaction at a time and starts it from the
    /// latest commit, so this holds by construction; checking it costs one
    /// lookup and keeps a future change from writing over a row it did not
    /// read.
    pub(crate) fn put(&mut self, old: Option<&Job>, new: Option<&Job>) -> Result<(), Failure> {
        if let Some(o) = old {
            let stored = self.job(o.id)?.ok_or(Failure::Store(StoreError::NotFound(o.id)))?;
            let fence = |j: &Job| (j.state, j.attempts, j.lease.as_ref().map(Lease::fence));
            if fence(&stored) != fence(o) {
                return Err(Failure::Store(StoreError::LeaseLost { id: o.id }));
            }
            self.unindex(o)?;
        }
        self.link(old, new)?;
        match (old, new) {
            (_, Some(n)) => {
                let bytes = encode(n)?;
                self.jobs.insert(n.id, bytes.as_slice())?;
                self.index(n)?;
            }
            (Some(o), None) => {
                self.jobs.remove(o.id)?;
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// The child's entries in `dependency_edges`: added with a job, removed
    /// with it (`after` is fixed at push, so an update changes nothing).
    fn link(&mut self, old: Option<&Job>, new: Option<&Job>) -> Result<(), Failure> {
        if let (Some(o), Some(n)) = (old, new) {
            if o.id == n.id && o.after == n.after {
                return Ok(());
            }
        }
        if let Some(o) = old {
            for p in &o.after {
                self.edges.remove((*p, o.id))?;
            }
        }
        if let Some(n) = new {
            for p in &n.after {
                self.edges.insert((*p, n.id), ())?;
            }
        }
        Ok(())
    }

    fn index(&mut self, job: &Job) -> Result<(), Failure> {
        self.count(job.state, 1)?;
        match job.state {
            // Held, waiting on parents, or both: in no index a claim reads.
            JobState::Pending if !job.is_claimable() => {
                if job.is_waiting_on_parents() {
                    self.waiting.insert(job.id, ())?;
                }
                if job.is_held() {
                    self.held.insert(job.id, job.queue.as_str())?;
                }
            }
            JobState::Pending => {
                let nb = job.not_before.as_millis();
                self.pending
                    .insert((nb, job.id), (job.queue.as_str(), job.kind.as_str(), job.priority))?;
                if nb <= self.watermark {
                    self.ready.insert(ready_key(job), ())?;
                }
            }
            JobState::Running => {
                let Some(lease) = &job.lease else {
                    return Err(Failure::Damaged(format!("running job #{} has no lease", job.id)));
                };
                self.running.insert(job.id, lease.until.as_millis())?;
            }
            JobState::Done | JobState::Failed | JobState::Cancelled => {}
        }
        if let Some(k) = &job.idempotency_key {
            self.keys.insert(k.as_str(), job.id)?;
        }
        Ok(())
    }

    fn unindex(&mut self, job: &Job) -> Result<(), Failure> {
        self.count(job.state, -1)?;
        match job.state {
            JobState::Pending if !job.is_claimable() => {
                if job.is_waiting_on_parents() {
                    self.waiting.remove(job.id)?;
                }
                if job.is_held() {
                    self.held.remove(job.id)?;
                }
            }
            JobState::Pending => {
                self.pending.remove((job.not_before.as_millis(), job.id))?;
                self.ready.remove(ready_key(job))?;
            }
            JobState::Running => {
                self.running.remove(job.id)?;
            }
            JobState::Done | JobState::Failed | JobState::Cancelled => {}
        }
        if let Some(k) = &job.idempotency_key {
            let holds = self.keys.get(k.as_str())?.map(|v| v.value()) == Some(job.id);
            if holds {
                self.keys.remove(k.as_str())?;
            }
        }
        Ok(())
    }

    fn count(&mut self, state: JobState, delta: i64) -> Result<(), Failure> {
        let n = self.counts.get(state.as_str())?.map(|v| v.value()).unwrap_or(0);
        let n = n.saturating_add_signed(delta);
        if n == 0 {
            self.counts.remove(state.as_str())?;
        } else {
            self.counts.insert(state.as_str(), n)?;
        }
        Ok(())
    }

    /// Appends to each event's job trail.
    pub(crate) fn append(&mut self, events: &[Event]) -> Result<(), Failure> {
        for e in events {
            let seq = match self.events.range((e.job_id, 0)..=(e.job_id, u32::MAX))?.next_back() {
                Some(last) => last?.0.value().1.checked_add(1).ok_or_else(|| {
                    Failure::Damaged(format!("job #{} has too many events", e.job_id))
                })?,
                None => 0,
            };
            let bytes = serde_json::to_vec(e).map_err(encode_failed)?;
            self.events.insert((e.job_id, seq), bytes.as_slice())?;
        }
        Ok(())
    }

    /// Applies a transition's result to the row it was computed from.
    pub(crate) fn apply(&mut self, old: &Job, t: &machine::Transition) -> Result<(), Failure> {
        self.put(Some(old), Some(&t.job))?;
        self.append(&t.events)
    }

    /// The running jobs, from the `running` index: the claim's first
    /// candidates (expired or dead leases to take back).
    pub(crate) fn running_jobs(&self) -> Result<Vec<Job>, Failure> {
        let mut ids = Vec::new();
        for entry in self.running.iter()? {
            ids.push(entry?.0.value());
        }
        let mut running = Vec::with_capacity(ids.len());
        for id in ids {
            running.push(self.job(id)?.ok_or_else(|| out_of_step("running", id))?);
        }
        Ok(running)
    }

    /// Every lane's stored settings (see [`lanes_in`]).
    pub(crate) fn lanes(&self) -> Result<Lanes, Failure> {
        lanes_in(&self.lanes)
    }

    /// Writes one scope's settings as [`Lanes::apply`] returned them: the
    /// defaults are deleted, not stored.
    pub(crate) fn put_lane(
        &mut self,
        scope: &LaneScope,
        settings: &LaneSettings,
    ) -> Result<(), Failure> {
        if settings.is_default() {
            self.lanes.remove(scope.key())?;
        } else {
            let bytes = serde_json::to_vec(settings).map_err(encode_failed)?;
            self.lanes.insert(scope.key(), bytes.as_slice())?;
        }
        Ok(())
    }

    /// The schedule stored under `key`, if any.
    pub(crate) fn schedule(&self, key: &str) -> Result<Option<Schedule>, Failure> {
        match self.schedules.get(key)? {
            Some(bytes) => decode_schedule(key, bytes.value()).map(Some),
            None => Ok(None),
        }
    }

    /// Every schedule, in key order (see [`schedules_in`]).
    pub(crate) fn all_schedules(&self) -> Result<Vec<Schedule>, Failure> {
        schedules_in(&self.schedules)
    }

    /// Writes `s` under its key, replacing what was there.
    pub(crate) fn put_schedule(&mut self, s: &Schedule) -> Result<(), Failure> {
        let bytes = serde_json::to_vec(s).map_err(encode_failed)?;
        self.schedules.insert(s.key.as_str(), bytes.as_slice())?;
        Ok(())
    }

    /// Deletes the schedule under `key` (its jobs stay).
    pub(crate) fn remove_schedule(&mut self, key: &str) -> Result<(), Failure> {
        self.schedules.remove(key)?;
        Ok(())
    }

    /// Moves the pending jobs that became due since the last call into
    /// `ready` and raises the watermark to `now`. Each job moves once; the
    /// watermark never goes down (a clock stepping back is handled by the
    /// claim skipping heads that are not due yet).
    pub(crate) fn advance(&mut self, now: Timestamp) -> Result<(), Failure> {
        let now = now.as_millis();
        if now <= self.watermark {
            return Ok(());
        }
        let lower = (self.watermark, i64::MAX);
        let upper = (now, i64::MAX);
        let mut due: Vec<(String, String, i32, i64, i64)> = Vec::new();
        for entry in self.pending.range((Bound::Excluded(lower), Bound::Included(upper)))? {
            let (k, v) = entry?;
            let (nb, id) = k.value();
            let (q, kind, p) = v.value();
            due.push((q.to_owned(), kind.to_owned(), p, nb, id));
        }
        for (q, kind, p, nb, id) in &due {
            self.ready.insert((q.as_str(), kind.as_str(), priority_key(*p), *nb, *id), ())?;
        }
        self.watermark = now;
        self.meta.insert(META_WATERMARK, i64_to_meta(now))?;
        Ok(())
    }

    /// The job holding the idempotency key `key`, if any.
    pub(crate) fn key_holder(&self, key: &str) -> Result<Option<Job>, Failure> {
        match self.keys.get(key)?.map(|v| v.value()) {
            Some(id) => Ok(Some(self.job(id)?.ok_or_else(|| out_of_step("idempotency key", id))?)),
            None => Ok(None),
        }
    }
}

/// The children `dependency_edges` names for `parent`, lowest first.
pub(crate) fn dependents_in(
    edges: &impl ReadableTable<(i64, i64), ()>,
    parent: JobId,
) -> Result<Vec<JobId>, Failure> {
    let mut out = Vec::new();
    for entry in edges.range((parent, i64::MIN)..=(parent, i64::MAX))? {
        out.push(entry?.0.value().1);
    }
    Ok(out)
}

/// Every lane's settings as `table` stores them. A row that does not
/// decode is damage, and so is what [`Lanes::insert_stored`] refuses (a key
/// that names no scope, a limit filed for every queue); a row of defaults
/// is no setting.
pub(crate) fn lanes_in(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Lanes, Failure> {
    let mut lanes = Lanes::default();
    for entry in table.iter()? {
        let (k, v) = entry?;
        let key = k.value();
        let settings: LaneSettings = serde_json::from_slice(v.value())
            .map_err(|e| Failure::Damaged(format!("lane `{key}` does not decode: {e}")))?;
        lanes.insert_stored(key, settings).map_err(Failure::Damaged)?;
    }
    Ok(lanes)
}

/// Every schedule `table` stores, in key order. A row that does not
/// decode, or that holds another key's schedule, is damage.
pub(crate) fn schedules_in(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Vec<Schedule>, Failure> {
    let mut out = Vec::new();
    for entry in table.iter()? {
        let (k, v) = entry?;
        out.push(decode_schedule(k.value(), v.value())?);
    }
    Ok(out)
}

fn decode_schedule(key: &str, bytes: &[u8]) -> Result<Schedule, Failure> {
    let s: Schedule = serde_json::from_slice(bytes)
        .map_err(|e| Failure::Damaged(format!("schedule `{key}` does not decode: {e}")))?;
    if s.key != key {
        return Err(Failure::Damaged(format!("row `{key}` holds schedule `{}`", s.key)));
    }
    Ok(s)
}

fn ready_key(job: &Job) -> (&str, &str, u32, i64, i64) {
    (
        job.queue.as_str(),
        job.kind.as_str(),
        priority_key(job.priority),
        job.not_before.as_millis(),
        job.id,
    )
}

fn encode(job: &Job) -> Result<Vec<u8>, Failure> {
    serde_json::to_vec(job).map_err(encode_failed)
}

fn encode_failed(e: serde_json::Error) -> Failure {
    Failure::Store(StoreError::Backend(format!("cannot encode a record: {e}")))
}

pub(crate) fn load(
    jobs: &impl ReadableTable<i64, &'static [u8]>,
    id: JobId,
) -> Result<Option<Job>, Failure> {
    match jobs.get(id)? {
        Some(bytes) => decode_job(id, bytes.value()).map(Some),
        None => Ok(None),
    }
}

pub(crate) fn decode_job(id: JobId, bytes: &[u8]) -> Result<Job, Failure> {
    let job: Job = serde_json::from_slice(bytes)
        .map_err(|e| Failure::Damaged(format!("job #{id} does not decode: {e}")))?;
    if job.id != id {
        return Err(Failure::Damaged(format!("row #{id} holds job #{}", job.id)));
    }
    Ok(job)
}

pub(crate) fn decode_event(bytes: &[u8]) -> Result<Event, Failure> {
    serde_json::from_slice(bytes)
        .map_err(|e| Failure::Damaged(format!("an event does not decode: {e}")))
}

pub(crate) fn out_of_step(index: &str, id: JobId) -> Failure {
    Failure::Damaged(format!("the {index} index names job #{id}, which is not there"))
}

/// Every index agrees with the rows: what `check_integrity` adds to
/// redb's page-level check.
pub(crate) fn verify_indexes(txn: &ReadTransaction) -> Result<(), Failure> {
    let jobs = txn.open_table(JOBS)?;
    let meta = txn.open_table(META)?;
    let watermark = meta
        .get(META_WATERMARK)?
        .map(|v| i64_from_meta(v.value()))
        .ok_or_else(|| Failure::Damaged("the meta table has no ready watermark".to_owned()))?;
    let next_id = meta.get(META_NEXT_ID)?.map(|v| v.value()).unwrap_or(1);
    let mut counts: HashMap<JobState, u64> = HashMap::new();
    let (mut n_pending, mut n_ready, mut n_running, mut n_keys) = (0u64, 0u64, 0u64, 0u64);
    let (mut n_waiting, mut n_edges, mut n_held) = (0u64, 0u64, 0u64);
    let waiting = txn.open_table(WAITING)?;
    let held = txn.open_table(HELD)?;
    lanes_in(&txn.open_table(LANES)?)?;
    schedules_in(&txn.open_table(SCHEDULES)?)?;
    let edges = txn.open_table(EDGES)?;
    let pending = txn.open_table(PENDING)?;
    let ready = txn.open_table(READY)?;
    let running = txn.open_table(RUNNING)?;
    let keys = txn.open_table(KEYS)?;
    let bad = |m: String| Err(Failure::Damaged(m));
    for entry in jobs.iter()? {
        let (k, v) = entry?;
        let job = decode_job(k.value(), v.value())?;
        if u64::try_from(job.id).map_or(true, |id| id >= next_id) {
            return bad(format!("job #{} is at or above the next id {next_id}", job.id));
        }
        *counts.entry(job.state).or_default() += 1;
        // A restored job may name a parent twice; it has one edge.
        let parents: std::collections::BTreeSet<JobId> = job.after.iter().copied().collect();
        for p in &parents {
            n_edges += 1;
            if edges.get((*p, job.id))?.is_none() {
                return bad(format!(
                    "job #{}'s parent #{p} is missing from dependency_edges",
                    job.id
                ));
            }
        }
        match job.state {
            JobState::Pending if !job.is_claimable() => {
                if job.is_waiting_on_parents() {
                    n_waiting += 1;
                    if waiting.get(job.id)?.is_none() {
                        return bad(format!(
                            "waiting job #{} is missing from waiting_on_parents",
                            job.id
                        ));
                    }
                }
                if job.is_held() {
                    n_held += 1;
                    if held.get(job.id)?.map(|q| q.value() == job.queue) != Some(true) {
                        return bad(format!("held job #{} is missing from held", job.id));
                    }
                }
            }
            JobState::Pending => {
                n_pending += 1;
                let nb = job.not_before.as_millis();
                if pending.get((nb, job.id))?.is_none() {
                    return bad(format!("pending job #{} is missing from pending_by_time", job.id));
                }
                if nb <= watermark {
                    n_ready += 1;
                    if ready.get(ready_key(&job))?.is_none() {
                        return bad(format!("due job #{} is missing from ready", job.id));
                    }
                }
            }
            JobState::Running => {
                n_running += 1;
                let until = running.get(job.id)?.map(|v| v.value());
                if until != job.lease.as_ref().map(|l| l.until.as_millis()) {
                    return bad(format!(
                        "running job #{} disagrees with the running index",
                        job.id
                    ));
                }
            }
            JobState::Done | JobState::Failed | JobState::Cancelled => {}
        }
        if let Some(key) = &job.idempotency_key {
            n_keys += 1;
            if keys.get(key.as_str())?.map(|v| v.value()) != Some(job.id) {
                return bad(format!("job #{}'s idempotency key is not indexed", job.id));
            }
        }
    }
    let counted = txn.open_table(COUNTS)?;
    for s in JobState::ALL {
        let stored = counted.get(s.as_str())?.map(|v| v.value()).unwrap_or(0);
        let actual = counts.get(&s).copied().unwrap_or(0);
        if stored != actual {
            return bad(format!("{stored} {s} jobs counted, {actual} found"));
        }
    }
    for (what, indexed, actual) in [
        ("pending_by_time", pending.len()?, n_pending),
        ("ready", ready.len()?, n_ready),
        ("running", running.len()?, n_running),
        ("idempotency_keys", keys.len()?, n_keys),
        ("waiting_on_parents", waiting.len()?, n_waiting),
        ("held", held.len()?, n_held),
        ("dependency_edges", edges.len()?, n_edges),
    ] {
        if indexed != actual {
            return bad(format!("{what} has {indexed} entries for {actual} jobs"));
        }
    }
    let events = txn.open_table(EVENTS)?;
    for entry in events.iter()? {
        let (k, v) = entry?;
        let (id, _) = k.value();
        let e = decode_event(v.value())?;
        if e.job_id != id || jobs.get(id)?.is_none() {
            return bad(format!("an event filed under job #{id} belongs to no such job"));
        }
    }
    Ok(())
}
