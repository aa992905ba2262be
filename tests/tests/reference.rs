//! The suite's self-test: a deliberately naive reference `Store` (an
//! append-only JSON-lines log, appended under an exclusive file lock by
//! every call) must pass every scenario, including the multi-process ones.
//! A scenario that fails here is a bug in the scenario (or in core), not in
//! a backend.
//!
//! It is an in-memory [`Tx`]: the state replayed from the log, with row
//! verbs that append log records, and every write operation is
//! `slothqueue_core::ops` run on it under the lock, exactly as a backend
//! runs them inside its transaction. Its search for due jobs pushes down
//! nothing of the claim's request (every due job comes back, in claim
//! order), so core's claim rule applies the filter, the lanes and the
//! refusals on its own here. What is its own:
//! the log format, and the reads (`list`, `stats`, `next_due`, counts,
//! trails, runner records).
//!
//! Lanes are one log line per scope key (the defaults written as a
//! deletion); schedules one log line each under their key (a removal
//! written as `null`).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use slothqueue_core::ops::{self, ClaimCursor, DueScope, Tx};
use slothqueue_core::{
    Event, Job, JobId, JobState, LaneScope, LaneSettings, Lanes, ListFilter, ListOrder, Policy,
    QueueCounts, RunnerRecord, Schedule, Stats, Store, StoreError, Timestamp, Transition,
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

    fn existing(&self, id: JobId) -> Result<&Job, StoreError> {
        self.jobs.get(&id).ok_or(StoreError::NotFound(id))
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
}

/// The row verbs over the state as this call has it so far (a batch sees
/// its earlier jobs), each write a log record. The search for due jobs
/// pushes down only what every store's claim index holds (due jobs: not
/// held, no parent left, their time come), nothing of the request: every
/// due job comes back in claim order, so the suite proves that core
/// applies the filter, the lanes and the refusals itself.
impl Tx for State {
    type Error = StoreError;

    fn job(&mut self, id: JobId) -> Result<Option<Job>, StoreError> {
        Ok(self.jobs.get(&id).cloned())
    }

    fn key_holder(&mut self, key: &str) -> Result<Option<Job>, StoreError> {
        Ok(self.jobs.values().find(|j| j.idempotency_key.as_deref() == Some(key)).cloned())
    }

    fn dependents(&mut self, id: JobId) -> Result<Vec<JobId>, StoreError> {
        // The map is in id order, so they come lowest first.
        Ok(self.jobs.values().filter(|j| j.after.contains(&id)).map(|j| j.id).collect())
    }

    fn running(&mut self) -> Result<Vec<Job>, StoreError> {
        Ok(self.jobs.values().filter(|j| j.state == JobState::Running).cloned().collect())
    }

    fn due(
        &mut self,
        scope: &DueScope<'_>,
        after: Option<&ClaimCursor>,
        limit: usize,
    ) -> Result<Vec<Job>, StoreError> {
        let mut pending: Vec<&Job> = self
            .jobs
            .values()
            .filter(|j| j.is_due(scope.now) && after.is_none_or(|c| c.precedes(j)))
            .collect();
        pending.sort_by_key(|j| j.claim_order());
        Ok(pending.into_iter().take(limit).cloned().collect())
    }

    fn jobs_in(&mut self, states: &[JobState]) -> Result<Vec<Job>, StoreError> {
        Ok(self.jobs.values().filter(|j| states.contains(&j.state)).cloned().collect())
    }

    fn lanes(&mut self) -> Result<Lanes, StoreError> {
        Ok(self.lanes.clone())
    }

    fn put_lane(&mut self, scope: &LaneScope, settings: &LaneSettings) -> Result<(), StoreError> {
        let kept = (!settings.is_default()).then(|| settings.clone());
        self.record(Record::Lane(scope.key().to_owned(), kept));
        Ok(())
    }

    fn schedule(&mut self, key: &str) -> Result<Option<Schedule>, StoreError> {
        Ok(self.schedules.get(key).cloned())
    }

    fn schedules(&mut self) -> Result<Vec<Schedule>, StoreError> {
        // The map is in key order.
        Ok(self.schedules.values().cloned().collect())
    }

    fn put_schedule(&mut self, s: &Schedule) -> Result<(), StoreError> {
        self.record(Record::Schedule(s.key.clone(), Some(Box::new(s.clone()))));
        Ok(())
    }

    fn delete_schedule(&mut self, key: &str) -> Result<(), StoreError> {
        self.record(Record::Schedule(key.to_owned(), None));
        Ok(())
    }

    fn next_id(&mut self) -> Result<JobId, StoreError> {
        Ok(self.next_id.max(1))
    }

    fn insert(&mut self, job: &Job, events: &[Event]) -> Result<(), StoreError> {
        if self.jobs.contains_key(&job.id) {
            return Err(StoreError::Backend(format!("job #{} inserted twice", job.id)));
        }
        self.record(Record::Job(Box::new(job.clone()), events.to_vec()));
        self.record(Record::NextId(self.next_id.max(job.id + 1)));
        Ok(())
    }

    fn update(&mut self, before: &Job, after: &Transition) -> Result<(), StoreError> {
        // Always as planned from here, under the lock; a backend's write is
        // conditional the same way.
        if self.jobs.get(&before.id) != Some(before) {
            return Err(StoreError::Backend(format!("job #{} changed under a write", before.id)));
        }
        self.record(Record::Job(Box::new(after.job.clone()), after.events.clone()));
        Ok(())
    }

    fn append(&mut self, events: &[Event]) -> Result<(), StoreError> {
        // Each event's job, unchanged, written again with it.
        for event in events {
            let job = self.existing(event.job_id)?.clone();
            self.record(Record::Job(Box::new(job), vec![event.clone()]));
        }
        Ok(())
    }

    fn delete(&mut self, jobs: &[Job]) -> Result<(), StoreError> {
        for job in jobs {
            self.record(Record::Delete(job.id));
        }
        Ok(())
    }
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

impl RefStore {
    /// One write operation of `slothqueue_core::ops` under the lock, as
    /// [`slothqueue_core::store_ops!`] runs them.
    async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut State, &Policy) -> Result<T, StoreError>,
    {
        self.with(|st| f(st, &self.policy))
    }
}

slothqueue_core::store_ops! {
    impl Store for RefStore {
        ops [
            put_schedule, change_schedule, fire_schedules, restore_schedules, note_attempt, hold, release_hold, edit, clone_job, change_lane, push, push_many, push_stream, claim, heartbeat, complete, fail, settle_and_claim, release, cancel, retry, reclaim_dead, purge, restore, restore_many,
        ];

        async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
            self.with(Tx::schedules)
        }

        async fn lanes(&self) -> Result<Lanes, StoreError> {
            self.with(|st| Ok(st.lanes.clone()))
        }

        async fn queue_counts(&self, now: Timestamp) -> Result<Vec<QueueCounts>, StoreError> {
            self.with(|st| Ok(st.queue_counts(now)))
        }

        async fn dependents(&self, id: JobId) -> Result<Vec<JobId>, StoreError> {
            self.with(|st| Tx::dependents(st, id))
        }

        async fn get(&self, id: JobId) -> Result<Job, StoreError> {
            self.with(|st| ops::get(st, id))
        }

        async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
            self.with(|st| {
                st.existing(id)?;
                Ok(st.events.get(&id).cloned().unwrap_or_default())
            })
        }

        async fn list(&self, f: &ListFilter) -> Result<Vec<Job>, StoreError> {
            f.check()?;
            self.with(|st| {
                let mut jobs: Vec<Job> = st
                    .jobs
                    .values()
                    .filter(|j| f.admits(j))
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
