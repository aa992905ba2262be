//! The suite's self-test: a deliberately naive reference `Store` built
//! straight from `slothqueue_core::machine` (an append-only JSON-lines log,
//! appended under an exclusive file lock by every call) must pass every scenario,
//! including the multi-process ones. A scenario that fails here is a bug in
//! the scenario (or in core), not in a backend.
//!
//! Dependencies follow core's rule the way a backend must: the in-memory
//! state is a [`machine::Graph`], parents are resolved at push, and every
//! transition written goes through [`machine::plan_with_dependents`], whose
//! writes (the job's own, then its dependents') are applied in order, each
//! checked against the job as planned from.
//!
//! Lanes follow the rule every store follows: one log line per scope key
//! (the defaults written as a deletion), and every claim builds its
//! [`LaneCheck`] from the lanes and every running job under the same lock
//! that writes the claim. Holds and attempt notes go through the same one
//! write path as every other transition.
//!
//! Schedules are one log line each under their key (a removal written as
//! `null`); `fire_schedules` plans every schedule with
//! [`schedule::plan_tick`] under the same lock, reading its last tick's
//! job there, and pushes a tick's job through the one push path every
//! `push` and `clone` takes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use slothqueue_core::machine::{self, Graph, PlannedWrite, PushPlan, Transition};
use slothqueue_core::schedule::{self, PutPlan, TickAction};
use slothqueue_core::{
    AttemptNote, ClaimRequest, Claimed, Completion, Event, Failure, Fence, HeartbeatAck, Job,
    JobId, JobState, LaneChange, LaneCheck, LaneScope, LaneSettings, Lanes, ListFilter, ListOrder,
    NewJob, NewSchedule, Policy, PurgeFilter, Pushed, PutSchedule, QueueCounts, RunnerRecord,
    Schedule, ScheduleChange, SettledAndClaimed, Settlement, Stamp, Stats, Store, StoreError,
    Ticks, Timestamp,
};

/// One line of the append-only log: a job written whole with the events
/// it gained, a deletion, the id counter, the runner table, a lane or a
/// schedule.
#[derive(Clone)]
enum Record {
    Job(Box<Job>, Vec<Event>),
    Delete(JobId),
    NextId(JobId),
    Runners(Vec<RunnerRecord>),
    /// One lane's settings under its scope key (`""` for every queue);
    /// `None` when they went back to the defaults, which are not kept.
    Lane(String, Option<LaneSettings>),
    /// One schedule written whole under its key; `None` when removed.
    Schedule(String, Option<Box<Schedule>>),
}

impl Record {
    fn to_line(&self) -> String {
        let v = match self {
            Record::Job(j, e) => serde_json::json!({ "job": j, "events": e }),
            Record::Delete(id) => serde_json::json!({ "delete": id }),
            Record::NextId(id) => serde_json::json!({ "next_id": id }),
            Record::Runners(r) => serde_json::json!({ "runners": r }),
            Record::Lane(key, settings) => serde_json::json!({ "lane": key, "settings": settings }),
            Record::Schedule(key, s) => serde_json::json!({ "schedule": key, "as": s }),
        };
        let mut line = v.to_string();
        line.push('\n');
        line
    }

    fn parse(line: &str) -> Record {
        let mut v: serde_json::Value = serde_json::from_str(line).expect("a log line");
        let mut take = |k: &str| v.get_mut(k).map(serde_json::Value::take);
        if let Some(j) = take("job") {
            let events = take("events").expect("events");
            Record::Job(
                serde_json::from_value(j).expect("job"),
                serde_json::from_value(events).expect("events"),
            )
        } else if let Some(id) = take("delete") {
            Record::Delete(serde_json::from_value(id).expect("id"))
        } else if let Some(id) = take("next_id") {
            Record::NextId(serde_json::from_value(id).expect("id"))
        } else if let Some(key) = take("lane") {
            let settings = take("settings").expect("settings");
            Record::Lane(
                serde_json::from_value(key).expect("a scope key"),
                serde_json::from_value(settings).expect("lane settings"),
            )
        } else if let Some(key) = take("schedule") {
            let s = take("as").expect("a schedule or null");
            Record::Schedule(
                serde_json::from_value(key).expect("a schedule key"),
                serde_json::from_value(s).expect("a schedule"),
            )
        } else {
            Record::Runners(
                serde_json::from_value(take("runners").expect("runners")).expect("runners"),
            )
        }
    }
}

#[derive(Default)]
struct State {
    next_id: JobId,
    jobs: BTreeMap<JobId, Job>,
    events: BTreeMap<JobId, Vec<Event>>,
    runners: Vec<RunnerRecord>,
    lanes: Lanes,
    schedules: BTreeMap<String, Schedule>,
    /// Changes made by the current call, to append on success.
    dirty: Vec<Record>,
}

impl State {
    fn replay(&mut self, r: Record) {
        match r {
            Record::Job(j, e) => {
                self.events.entry(j.id).or_default().extend(e);
                self.jobs.insert(j.id, *j);
            }
            Record::Delete(id) => {
                self.jobs.remove(&id);
                self.events.remove(&id);
            }
            Record::NextId(id) => self.next_id = id,
            Record::Runners(r) => self.runners = r,
            Record::Lane(key, settings) => {
                self.lanes.insert(LaneScope::from_key(&key), settings.unwrap_or_default());
            }
            Record::Schedule(key, Some(s)) => {
                self.schedules.insert(key, *s);
            }
            Record::Schedule(key, None) => {
                self.schedules.remove(&key);
            }
        }
    }

    fn record(&mut self, r: Record) {
        self.dirty.push(r.clone());
        self.replay(r);
    }

    fn apply(&mut self, t: Transition) {
        self.record(Record::Job(Box::new(t.job), t.events));
    }

    fn existing(&self, id: JobId) -> Result<&Job, StoreError> {
        self.jobs.get(&id).ok_or(StoreError::NotFound(id))
    }

    /// Writes the plan of `before → t`: the job's own write and every
    /// dependent's, in order, each only if the job is still as planned from
    /// (it always is here, under the lock; a backend's write is conditional
    /// the same way). Returns the job as written.
    fn write(&mut self, before: Job, t: Transition, now: Timestamp) -> Result<Job, StoreError> {
        let id = before.id;
        let plan = machine::plan_with_dependents(self, before, t, now)?;
        self.write_plan(plan);
        self.existing(id).cloned()
    }

    fn write_plan(&mut self, plan: Vec<PlannedWrite>) {
        for w in plan {
            assert_eq!(
                self.jobs.get(&w.before.id),
                Some(&w.before),
                "a write planned from a stale job"
            );
            self.apply(w.after);
        }
    }

    fn push(
        &mut self,
        new: &NewJob,
        now: Timestamp,
        policy: &Policy,
    ) -> Result<Pushed, StoreError> {
        let parents = machine::resolve_parents(self, new)?;
        let id = self.next_id.max(1);
        let holder = match &new.idempotency_key {
            Some(k) => self.key_holder(k)?,
            None => None,
        };
        match machine::plan_push(new, holder.as_ref(), id, now) {
            PushPlan::Duplicate(old) => {
                Ok(Pushed { job: self.existing(old)?.clone(), created: false, superseded: None })
            }
            PushPlan::Insert { displaced, superseded } => {
                if let (Some(d), Some(before)) = (displaced, holder) {
                    self.write(before, *d, now)?;
                }
                // The displaced holder may be one of the parents, and may
                // have just been cancelled: create from them as they are now.
                let parents: Vec<Job> = parents
                    .iter()
                    .map(|p| self.existing(p.id).cloned())
                    .collect::<Result<_, _>>()?;
                let t = machine::create(id, new, &parents, now, policy);
                let job = t.job.clone();
                self.apply(t);
                self.record(Record::NextId(id + 1));
                Ok(Pushed { job, created: true, superseded })
            }
        }
    }

    /// The claim's transaction: the running jobs and the best due pending
    /// job to `plan_claim`, its retired jobs written with their dependents,
    /// then the job it takes.
    fn claim(
        &mut self,
        request: &ClaimRequest,
        now: Timestamp,
        policy: &Policy,
    ) -> Result<Option<Claimed>, StoreError> {
        let running: Vec<Job> =
            self.jobs.values().filter(|j| j.state == JobState::Running).cloned().collect();
        let check = LaneCheck::new(self.lanes.clone(), &running);
        // While every queue is paused no pending job is read at all; else
        // the best due one of a lane that lets it start.
        let best_due = if check.all_paused() {
            None
        } else {
            self.jobs
                .values()
                .filter(|j| j.is_due(now) && request.filter.admits(j) && check.may_start(&j.queue))
                .min_by_key(|j| j.claim_order())
                .cloned()
        };
        let plan = machine::plan_claim(request, &check, running, best_due, now, policy)?;
        let claimed = plan.claimed();
        for w in plan.retire.into_iter().chain(plan.take) {
            self.write(w.before, w.after, now)?;
        }
        Ok(claimed)
    }

    /// Changes one lane's settings as [`Lanes::apply`] says, writing the
    /// scope's settings (or their deletion, when back to the defaults).
    fn change_lane(&mut self, scope: &LaneScope, change: &LaneChange) -> Result<Lanes, StoreError> {
        let mut lanes = self.lanes.clone();
        let after = lanes.apply(scope, change)?;
        let kept = (!after.is_default()).then_some(after);
        self.record(Record::Lane(scope.key().to_owned(), kept));
        debug_assert_eq!(self.lanes, lanes, "the record replays to what apply made");
        Ok(self.lanes.clone())
    }

    fn write_schedule(&mut self, s: Schedule) {
        self.record(Record::Schedule(s.key.clone(), Some(Box::new(s))));
    }

    /// One transaction of `fire_schedules`: every stored schedule in key
    /// order to [`schedule::plan_tick`] with the state of its last tick's
    /// job as it is now, and the plan written: an enqueue through the one
    /// push path (id, key, `pushed`), then the plan's events and the
    /// schedule; a skip's event on the unfinished job; a drop's cursor.
    fn fire_schedules(&mut self, now: Timestamp, policy: &Policy) -> Result<Ticks, StoreError> {
        let due: Vec<Schedule> = self.schedules.values().cloned().collect();
        let mut ticks = Vec::new();
        for s in due {
            let previous =
                s.last_fire.as_ref().and_then(|f| self.jobs.get(&f.job)).map(|j| j.state);
            let Some(plan) = schedule::plan_tick(&s, now, previous) else { continue };
            let (after, events, tick) = match plan.action.clone() {
                TickAction::Enqueue(new) => {
                    machine::validate(&new)?;
                    let pushed = self.push(&new, now, policy)?;
                    plan.enqueued(pushed.job.id, pushed.created, now)
                }
                TickAction::Skip { .. } | TickAction::Drop => plan.without_push(),
            };
            // Each event's job, unchanged, written again with it (the new
            // job's `scheduled`, a skip's `tick_skipped` on the unfinished one).
            for event in events {
                let job = self.existing(event.job_id)?.clone();
                self.record(Record::Job(Box::new(job), vec![event]));
            }
            self.write_schedule(after);
            ticks.push(tick);
        }
        Ok(Ticks { ticks, next: schedule::next_fire(self.schedules.values()) })
    }

    /// Every queue with a pending or running job, counted, by name.
    fn queue_counts(&self, now: Timestamp) -> Vec<QueueCounts> {
        let mut by_queue: BTreeMap<&str, QueueCounts> = BTreeMap::new();
        for j in self.jobs.values() {
            if !matches!(j.state, JobState::Pending | JobState::Running) {
                continue;
            }
            let c = by_queue.entry(&j.queue).or_insert_with(|| QueueCounts {
                queue: j.queue.clone(),
                ..QueueCounts::default()
            });
            if j.state == JobState::Running {
                c.running += 1;
                continue;
            }
            c.pending += 1;
            c.due += u64::from(j.is_due(now));
            c.held += u64::from(j.is_held());
            c.waiting_on_parents += u64::from(j.is_waiting_on_parents());
        }
        by_queue.into_values().collect()
    }

    /// Settles the attempt held under `fence`, as `complete` or `fail`.
    fn settle(
        &mut self,
        id: JobId,
        fence: &Fence,
        settlement: &Settlement,
        now: Timestamp,
        policy: &Policy,
    ) -> Result<Job, StoreError> {
        let before = self.existing(id)?.clone();
        let t = machine::settle(&before, fence, settlement, now, policy)?;
        self.write(before, t, now)
    }
}

impl State {
    /// One job of an import, checked on its own and against the queue.
    fn restore_one(&mut self, job: Job, events: Vec<Event>) -> Result<(), StoreError> {
        machine::check_restore(&job, &events)?;
        if self.jobs.contains_key(&job.id) {
            return Err(StoreError::InvalidInput(format!("job #{} exists", job.id)));
        }
        let key = job.idempotency_key.as_ref();
        if key.is_some() && self.jobs.values().any(|j| j.idempotency_key.as_ref() == key) {
            return Err(StoreError::InvalidInput(format!("job #{}: key held", job.id)));
        }
        self.record(Record::NextId(self.next_id.max(job.id + 1)));
        self.record(Record::Job(Box::new(job), events));
        Ok(())
    }
}

/// What the dependency rule reads: the state as this call has it so far
/// (a batch sees its earlier jobs).
impl Graph for State {
    type Error = StoreError;

    fn job(&mut self, id: JobId) -> Result<Option<Job>, StoreError> {
        Ok(self.jobs.get(&id).cloned())
    }

    fn key_holder(&mut self, key: &str) -> Result<Option<Job>, StoreError> {
        Ok(self.jobs.values().find(|j| j.idempotency_key.as_deref() == Some(key)).cloned())
    }

    fn dependents(&mut self, id: JobId) -> Result<Vec<JobId>, StoreError> {
        Ok(self.jobs.values().filter(|j| j.after.contains(&id)).map(|j| j.id).collect())
    }
}

/// A batch's refusal, naming the element (from 0).
fn in_batch(index: usize) -> impl FnOnce(StoreError) -> StoreError {
    move |e| StoreError::InBatch { index, error: Box::new(e) }
}

struct RefStore {
    path: PathBuf,
    lock: PathBuf,
    policy: Policy,
    /// The log as read so far: how many bytes, and the state they make.
    cache: Mutex<(u64, State)>,
}

impl RefStore {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut State) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let io = |context: &str| {
            let context = context.to_owned();
            move |source| StoreError::Io { context, source }
        };
        let mut cache = self.cache.lock().expect("cache");
        let lock =
            OpenOptions::new().create(true).append(true).open(&self.lock).map_err(io("lock"))?;
        lock_exclusive(&lock).map_err(io("lock"))?;
        let mut log = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(io("open"))?;
        log.seek(SeekFrom::Start(cache.0)).map_err(io("seek"))?;
        let mut tail = String::new();
        log.read_to_string(&mut tail).map_err(io("read"))?;
        cache.0 += tail.len() as u64;
        for line in tail.lines() {
            cache.1.replay(Record::parse(line));
        }
        match f(&mut cache.1) {
            Ok(out) => {
                let dirty = std::mem::take(&mut cache.1.dirty);
                let text: String = dirty.iter().map(Record::to_line).collect();
                if !text.is_empty() {
                    log.write_all(text.as_bytes()).map_err(io("append"))?;
                    log.sync_data().map_err(io("sync"))?;
                    cache.0 += text.len() as u64;
                }
                Ok(out)
            }
            Err(e) => {
                // Forget the half-applied call: replay the log from scratch next time.
                *cache = (0, State::default());
                Err(e)
            }
        }
    }
}

#[expect(clippy::incompatible_msrv, reason = "a test-only reference store; the toolchain is newer")]
fn lock_exclusive(f: &File) -> std::io::Result<()> {
    f.lock()
}

fn open(path: &Path, policy: Policy) -> Result<Arc<dyn Store>, StoreError> {
    let path = path.with_extension("log");
    let lock = path.with_extension("lock");
    Ok(Arc::new(RefStore { path, lock, policy, cache: Mutex::new((0, State::default())) }))
}

#[async_trait]
impl Store for RefStore {
    async fn put_schedule(
        &self,
        new: &NewSchedule,
        now: Timestamp,
    ) -> Result<PutSchedule, StoreError> {
        self.with(|st| match schedule::create(new, st.schedules.get(&new.key), now)? {
            PutPlan::Insert(s) => {
                st.write_schedule(s.clone());
                Ok(PutSchedule { schedule: s, created: true })
            }
            PutPlan::Unchanged(s) => Ok(PutSchedule { schedule: s, created: false }),
        })
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        // The map is in key order.
        self.with(|st| Ok(st.schedules.values().cloned().collect()))
    }

    async fn change_schedule(
        &self,
        key: &str,
        change: &ScheduleChange,
        now: Timestamp,
    ) -> Result<Option<Schedule>, StoreError> {
        self.with(|st| {
            let s = st.schedules.get(key).ok_or_else(|| StoreError::NoSchedule(key.to_owned()))?;
            let after = schedule::change(s, change, now);
            st.record(Record::Schedule(key.to_owned(), after.clone().map(Box::new)));
            Ok(after)
        })
    }

    async fn fire_schedules(&self, now: Timestamp) -> Result<Ticks, StoreError> {
        self.with(|st| st.fire_schedules(now, &self.policy))
    }

    async fn restore_schedules(&self, schedules: Vec<Schedule>) -> Result<(), StoreError> {
        for s in &schedules {
            schedule::check_restore(s)?;
        }
        self.with(|st| {
            for s in schedules {
                st.write_schedule(s);
            }
            Ok(())
        })
    }

    async fn note_attempt(
        &self,
        id: JobId,
        fence: &Fence,
        note: &AttemptNote,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        self.with(|st| {
            let before = st.existing(id)?.clone();
            let t = machine::note_attempt(&before, fence, note, now)?;
            st.write(before, t, now)
        })
    }

    async fn hold(&self, id: JobId, stamp: Stamp, now: Timestamp) -> Result<Job, StoreError> {
        self.with(|st| {
            let before = st.existing(id)?.clone();
            let t = machine::hold(&before, stamp, now)?;
            st.write(before, t, now)
        })
    }

    async fn release_hold(&self, id: JobId, by: &str, now: Timestamp) -> Result<Job, StoreError> {
        self.with(|st| {
            let before = st.existing(id)?.clone();
            let t = machine::release_hold(&before, by, now)?;
            st.write(before, t, now)
        })
    }

    async fn edit(
        &self,
        id: JobId,
        edit: &slothqueue_core::JobEdit,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        self.with(|st| {
            let before = st.existing(id)?.clone();
            let t = machine::edit(&before, edit, now)?;
            st.write(before, t, now)
        })
    }

    async fn clone_job(
        &self,
        id: JobId,
        edit: &slothqueue_core::JobEdit,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        self.with(|st| {
            let original = st.existing(id)?.clone();
            let new = machine::clone_of(&original, edit)?;
            let pushed = st.push(&new, now, &self.policy)?;
            let [on_original, on_clone] = machine::cloned_events(original.id, pushed.job.id, now);
            // Each job written as it is, with the one event it gains.
            let original = st.existing(original.id)?.clone();
            st.record(Record::Job(Box::new(original), vec![on_original]));
            st.record(Record::Job(Box::new(pushed.job.clone()), vec![on_clone]));
            Ok(pushed.job)
        })
    }

    async fn lanes(&self) -> Result<Lanes, StoreError> {
        self.with(|st| Ok(st.lanes.clone()))
    }

    async fn change_lane(
        &self,
        scope: &LaneScope,
        change: &LaneChange,
    ) -> Result<Lanes, StoreError> {
        self.with(|st| st.change_lane(scope, change))
    }

    async fn queue_counts(&self, now: Timestamp) -> Result<Vec<QueueCounts>, StoreError> {
        self.with(|st| Ok(st.queue_counts(now)))
    }

    async fn push(&self, new: NewJob, now: Timestamp) -> Result<Pushed, StoreError> {
        machine::validate(&new)?;
        self.with(|st| st.push(&new, now, &self.policy))
    }

    async fn push_many(
        &self,
        jobs: Vec<NewJob>,
        now: Timestamp,
    ) -> Result<Vec<Pushed>, StoreError> {
        for (i, new) in jobs.iter().enumerate() {
            machine::validate(new).map_err(StoreError::from).map_err(in_batch(i))?;
        }
        self.with(|st| {
            let mut pushed = Vec::with_capacity(jobs.len());
            for (i, new) in jobs.iter().enumerate() {
                pushed.push(st.push(new, now, &self.policy).map_err(in_batch(i))?);
            }
            Ok(pushed)
        })
    }

    async fn claim(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<Option<Claimed>, StoreError> {
        self.with(|st| st.claim(request, now, &self.policy))
    }

    async fn heartbeat(
        &self,
        id: JobId,
        fence: &Fence,
        child_pgid: Option<i32>,
        now: Timestamp,
    ) -> Result<HeartbeatAck, StoreError> {
        self.with(|st| {
            let before = st.existing(id)?.clone();
            let (t, ack) = machine::heartbeat(&before, fence, now, &self.policy, child_pgid)?;
            st.write(before, t, now)?;
            Ok(ack)
        })
    }

    async fn complete(
        &self,
        id: JobId,
        fence: &Fence,
        done: Completion,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let settlement = Settlement::Complete(done);
        self.with(|st| st.settle(id, fence, &settlement, now, &self.policy))
    }

    async fn fail(
        &self,
        id: JobId,
        fence: &Fence,
        failure: Failure,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let settlement = Settlement::Fail(failure);
        self.with(|st| st.settle(id, fence, &settlement, now, &self.policy))
    }

    async fn settle_and_claim(
        &self,
        id: JobId,
        fence: &Fence,
        settlement: Settlement,
        next: &ClaimRequest,
        now: Timestamp,
    ) -> Result<SettledAndClaimed, StoreError> {
        self.with(|st| {
            let settled = st.settle(id, fence, &settlement, now, &self.policy)?;
            let next = st.claim(next, now, &self.policy)?;
            Ok(SettledAndClaimed { settled, next })
        })
    }

    async fn release(&self, id: JobId, fence: &Fence, now: Timestamp) -> Result<Job, StoreError> {
        self.with(|st| {
            let before = st.existing(id)?.clone();
            let t = machine::release(&before, fence, now)?;
            st.write(before, t, now)
        })
    }

    async fn cancel(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.with(|st| {
            let before = st.existing(id)?.clone();
            let t = machine::cancel(&before, now)?;
            st.write(before, t, now)
        })
    }

    async fn retry(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.with(|st| {
            let before = st.existing(id)?.clone();
            let parents = machine::load_parents(st, &before)?;
            let t = machine::retry(&before, &parents, now)?;
            st.write(before, t, now)
        })
    }

    async fn dependents(&self, id: JobId) -> Result<Vec<JobId>, StoreError> {
        // The state's map is in id order, so they come lowest first.
        self.with(|st| Graph::dependents(st, id))
    }

    async fn get(&self, id: JobId) -> Result<Job, StoreError> {
        self.with(|st| st.existing(id).cloned())
    }

    async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        self.with(|st| {
            st.existing(id)?;
            Ok(st.events.get(&id).cloned().unwrap_or_default())
        })
    }

    async fn list(&self, f: &ListFilter) -> Result<Vec<Job>, StoreError> {
        self.with(|st| {
            let mut jobs: Vec<Job> = st
                .jobs
                .values()
                .filter(|j| f.state.is_none_or(|s| j.state == s))
                .filter(|j| f.queue.as_ref().is_none_or(|q| &j.queue == q))
                .filter(|j| f.kind.as_ref().is_none_or(|k| &j.kind == k))
                .cloned()
                .collect();
            match f.order {
                ListOrder::Newest => {
                    jobs.reverse();
                    jobs.retain(|j| f.cursor.is_none_or(|c| j.id < c));
                }
                ListOrder::Oldest => jobs.retain(|j| f.cursor.is_none_or(|c| j.id > c)),
                ListOrder::DueFirst => jobs.sort_by_key(Job::claim_order),
            }
            jobs.truncate(f.limit.unwrap_or(usize::MAX));
            Ok(jobs)
        })
    }

    async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError> {
        self.with(|st| {
            let mut s = Stats::default();
            for j in st.jobs.values() {
                s.held += u64::from(j.is_held());
                match j.state {
                    JobState::Pending if j.is_waiting_on_parents() => {
                        s.pending += 1;
                        s.waiting_on_parents += 1;
                    }
                    JobState::Pending => s.pending += 1,
                    JobState::Running => s.running += 1,
                    JobState::Done => s.done += 1,
                    JobState::Failed => s.failed += 1,
                    JobState::Cancelled => s.cancelled += 1,
                }
                if j.is_due(now) {
                    s.due_now += 1;
                } else if j.is_claimable() {
                    s.next_due = Some(s.next_due.map_or(j.not_before, |n| n.min(j.not_before)));
                }
            }
            Ok(s)
        })
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.with(|st| {
            Ok(st
                .jobs
                .values()
                .filter_map(|j| match j.state {
                    // A job waiting on parents, or held, wakes nobody: its
                    // parents' ends or its release make it due, not its time.
                    JobState::Pending if !j.is_claimable() => None,
                    JobState::Pending => Some(j.not_before),
                    JobState::Running => j.lease.as_ref().map(|l| l.until),
                    _ => None,
                })
                .min())
        })
    }

    async fn reclaim_dead(
        &self,
        attempts: &[(JobId, Fence)],
        now: Timestamp,
    ) -> Result<Vec<Job>, StoreError> {
        self.with(|st| {
            let mut swept = Vec::new();
            for (id, attempt) in attempts {
                let Some(job) = st.jobs.get(id).cloned() else { continue };
                if let Some(t) = machine::reclaim_dead(&job, attempt, now) {
                    st.write(job.clone(), t, now)?;
                    swept.push(job);
                }
            }
            Ok(swept)
        })
    }

    async fn purge(&self, f: &PurgeFilter) -> Result<Vec<JobId>, StoreError> {
        self.with(|st| {
            let candidates: Vec<Job> = st
                .jobs
                .values()
                .filter(|j| match j.state {
                    JobState::Running => false,
                    JobState::Pending => {
                        f.include_pending && f.older_than.is_none_or(|o| j.created_at < o)
                    }
                    _ => f.older_than.is_none_or(|o| j.finished_at.unwrap_or(j.created_at) < o),
                })
                .cloned()
                .collect();
            let doomed = machine::plan_purge(st, &candidates)?;
            for id in &doomed {
                st.record(Record::Delete(*id));
            }
            Ok(doomed)
        })
    }

    async fn restore(&self, job: Job, events: Vec<Event>) -> Result<(), StoreError> {
        // A batch of one, refused with the plain error (there is no batch
        // to name a place in).
        match self.restore_many(vec![(job, events)]).await {
            Err(StoreError::InBatch { error, .. }) => Err(*error),
            other => other,
        }
    }

    async fn restore_many(&self, jobs: Vec<(Job, Vec<Event>)>) -> Result<(), StoreError> {
        // The edges come with the jobs (`Job::after`): a parent restored
        // later in the batch, or not at all (purged before the export), is
        // found, or left out, by id like any other.
        self.with(|st| {
            for (i, (job, events)) in jobs.into_iter().enumerate() {
                st.restore_one(job, events).map_err(in_batch(i))?;
            }
            Ok(())
        })
    }

    async fn put_runner(&self, record: &RunnerRecord) -> Result<(), StoreError> {
        self.with(|st| {
            let mut runners = st.runners.clone();
            runners.retain(|r| r.owner.id != record.owner.id);
            runners.push(record.clone());
            st.record(Record::Runners(runners));
            Ok(())
        })
    }

    async fn remove_runner(&self, owner_id: &str) -> Result<(), StoreError> {
        self.with(|st| {
            let mut runners = st.runners.clone();
            runners.retain(|r| r.owner.id != owner_id);
            st.record(Record::Runners(runners));
            Ok(())
        })
    }

    async fn runners(&self) -> Result<Vec<RunnerRecord>, StoreError> {
        self.with(|st| Ok(st.runners.clone()))
    }
}

slothqueue_conformance::conformance_suite!(open);

/// The same suite again, as a backend's configuration variant would.
fn open_variant(path: &Path, policy: Policy) -> Result<Arc<dyn Store>, StoreError> {
    let mut name = path.file_name().expect("a file name").to_owned();
    name.push("-variant");
    open(&path.with_file_name(name), policy)
}

slothqueue_conformance::conformance_suite!(open_variant, variant);

#[test]
fn every_scenario_is_listed_once() {
    let mut names = slothqueue_conformance::SCENARIOS.to_vec();
    assert!(names.len() >= 30, "{} scenarios", names.len());
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), slothqueue_conformance::SCENARIOS.len());
}

#[test]
fn run_all_passes_on_the_reference_store() {
    slothqueue_conformance::run_all(open);
}
