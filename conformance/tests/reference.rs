//! The suite's self-test: a deliberately naive reference `Store` built
//! straight from `slothqueue_core::machine` (an append-only JSON-lines log,
//! appended under an exclusive file lock by every call) must pass every scenario,
//! including the multi-process ones. A scenario that fails here is a bug in
//! the scenario (or in core), not in a backend.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use slothqueue_core::machine::{self, PushPlan, Transition};
use slothqueue_core::{
    ClaimRequest, Claimed, Completion, Event, Failure, Fence, HeartbeatAck, Job, JobId, JobState,
    ListFilter, ListOrder, NewJob, Policy, PurgeFilter, Pushed, RunnerRecord, Stats, Store,
    StoreError, Timestamp,
};

/// One line of the append-only log: a job written whole with the events
/// it gained, a deletion, the id counter, or the runner table.
#[derive(Clone)]
enum Record {
    Job(Box<Job>, Vec<Event>),
    Delete(JobId),
    NextId(JobId),
    Runners(Vec<RunnerRecord>),
}

impl Record {
    fn to_line(&self) -> String {
        let v = match self {
            Record::Job(j, e) => serde_json::json!({ "job": j, "events": e }),
            Record::Delete(id) => serde_json::json!({ "delete": id }),
            Record::NextId(id) => serde_json::json!({ "next_id": id }),
            Record::Runners(r) => serde_json::json!({ "runners": r }),
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
        }
    }

    fn record(&mut self, r: Record) {
        self.dirty.push(r.clone());
        self.replay(r);
    }

    fn apply(&mut self, t: Transition) {
        self.record(Record::Job(Box::new(t.job), t.events));
    }

    fn job(&self, id: JobId) -> Result<&Job, StoreError> {
        self.jobs.get(&id).ok_or(StoreError::NotFound(id))
    }

    fn push(&mut self, new: &NewJob, now: Timestamp, policy: &Policy) -> Pushed {
        let id = self.next_id.max(1);
        let holder = new.idempotency_key.as_ref().and_then(|k| {
            self.jobs.values().find(|j| j.idempotency_key.as_ref() == Some(k)).cloned()
        });
        match machine::plan_push(new, holder.as_ref(), id, now) {
            PushPlan::Duplicate(old) => {
                Pushed { job: self.jobs[&old].clone(), created: false, superseded: None }
            }
            PushPlan::Insert { displaced, superseded } => {
                if let Some(d) = displaced {
                    self.apply(*d);
                }
                let t = machine::create(id, new, &[], now, policy);
                let job = t.job.clone();
                self.apply(t);
                self.record(Record::NextId(id + 1));
                Pushed { job, created: true, superseded }
            }
        }
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

#[async_trait]
impl Store for RefStore {
    async fn push(&self, new: NewJob, now: Timestamp) -> Result<Pushed, StoreError> {
        machine::validate(&new)?;
        self.with(|st| Ok(st.push(&new, now, &self.policy)))
    }

    async fn push_many(
        &self,
        jobs: Vec<NewJob>,
        now: Timestamp,
    ) -> Result<Vec<Pushed>, StoreError> {
        for new in &jobs {
            machine::validate(new)?;
        }
        self.with(|st| Ok(jobs.iter().map(|n| st.push(n, now, &self.policy)).collect()))
    }

    async fn claim(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<Option<Claimed>, StoreError> {
        self.with(|st| {
            let running: Vec<Job> =
                st.jobs.values().filter(|j| j.state == JobState::Running).cloned().collect();
            let best_due = st
                .jobs
                .values()
                .filter(|j| j.is_due(now) && request.filter.admits(j))
                .min_by_key(|j| j.claim_order())
                .cloned();
            let plan = machine::plan_claim(request, running, best_due, now, &self.policy)?;
            let claimed = plan.claimed();
            for w in plan.retire.into_iter().chain(plan.take) {
                st.apply(w.after);
            }
            Ok(claimed)
        })
    }

    async fn heartbeat(
        &self,
        id: JobId,
        fence: &Fence,
        child_pgid: Option<i32>,
        now: Timestamp,
    ) -> Result<HeartbeatAck, StoreError> {
        self.with(|st| {
            let (t, ack) = machine::heartbeat(st.job(id)?, fence, now, &self.policy, child_pgid)?;
            st.apply(t);
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
        self.with(|st| {
            let t = machine::complete(st.job(id)?, fence, &done, now)?;
            let job = t.job.clone();
            st.apply(t);
            Ok(job)
        })
    }

    async fn fail(
        &self,
        id: JobId,
        fence: &Fence,
        failure: Failure,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        self.with(|st| {
            let t = machine::fail(st.job(id)?, fence, &failure, now, &self.policy)?;
            let job = t.job.clone();
            st.apply(t);
            Ok(job)
        })
    }

    async fn release(&self, id: JobId, fence: &Fence, now: Timestamp) -> Result<Job, StoreError> {
        self.with(|st| {
            let t = machine::release(st.job(id)?, fence, now)?;
            let job = t.job.clone();
            st.apply(t);
            Ok(job)
        })
    }

    async fn cancel(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.with(|st| {
            let t = machine::cancel(st.job(id)?, now)?;
            let job = t.job.clone();
            st.apply(t);
            Ok(job)
        })
    }

    async fn retry(&self, id: JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.with(|st| {
            let t = machine::retry(st.job(id)?, &[], now)?;
            let job = t.job.clone();
            st.apply(t);
            Ok(job)
        })
    }

    async fn dependents(&self, _id: JobId) -> Result<Vec<JobId>, StoreError> {
        Ok(Vec::new()) // PLACEHOLDER: edges not followed yet
    }

    async fn get(&self, id: JobId) -> Result<Job, StoreError> {
        self.with(|st| st.job(id).cloned())
    }

    async fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        self.with(|st| {
            st.job(id)?;
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
                match j.state {
                    JobState::Pending => s.pending += 1,
                    JobState::Running => s.running += 1,
                    JobState::Done => s.done += 1,
                    JobState::Failed => s.failed += 1,
                    JobState::Cancelled => s.cancelled += 1,
                }
                if j.is_due(now) {
                    s.due_now += 1;
                } else if j.state == JobState::Pending {
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
                    st.apply(t);
                    swept.push(job);
                }
            }
            Ok(swept)
        })
    }

    async fn purge(&self, f: &PurgeFilter) -> Result<Vec<JobId>, StoreError> {
        self.with(|st| {
            let doomed: Vec<JobId> = st
                .jobs
                .values()
                .filter(|j| match j.state {
                    JobState::Running => false,
                    JobState::Pending => {
                        f.include_pending && f.older_than.is_none_or(|o| j.created_at < o)
                    }
                    _ => f.older_than.is_none_or(|o| j.finished_at.unwrap_or(j.created_at) < o),
                })
                .map(|j| j.id)
                .collect();
            for id in &doomed {
                st.record(Record::Delete(*id));
            }
            Ok(doomed)
        })
    }

    async fn restore(&self, job: Job, events: Vec<Event>) -> Result<(), StoreError> {
        self.restore_many(vec![(job, events)]).await
    }

    async fn restore_many(&self, jobs: Vec<(Job, Vec<Event>)>) -> Result<(), StoreError> {
        self.with(|st| {
            for (job, events) in jobs {
                machine::check_restore(&job, &events)?;
                if st.jobs.contains_key(&job.id) {
                    return Err(StoreError::InvalidInput(format!("job #{} exists", job.id)));
                }
                let key = job.idempotency_key.as_ref();
                if key.is_some() && st.jobs.values().any(|j| j.idempotency_key.as_ref() == key) {
                    return Err(StoreError::InvalidInput(format!("job #{}: key held", job.id)));
                }
                st.record(Record::NextId(st.next_id.max(job.id + 1)));
                st.record(Record::Job(Box::new(job), events));
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
