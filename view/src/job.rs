//! `show`'s facts about one job, read once: the job and its trail, its
//! parents and dependents, its schedule's tick, its lane, the runners,
//! how many jobs are ahead of it, and why it is not running
//! ([`crate::why`]). Every face presents a [`JobView`]; none reads the
//! store while it prints.

use serde::Serialize;
use slothqueue_core::schedule::parse_tick_key;
use slothqueue_core::{
    Event, Job, JobId, JobState, LaneCheck, LaneVerdict, Lanes, ListFilter, ListOrder, Liveness,
    RunnerRecord, Schedule, Stamp, Store, StoreError, Timestamp,
};

use crate::why::{Situation, why};
use crate::{Look, RunnerView, ViewError, read};

/// Dependents named (as jobs) before the rest are only counted.
pub const DEPENDENTS_LISTED: usize = 10;

/// The most pending or running jobs read to count what is ahead of a job
/// or running in its lane: a look stays cheap on a long queue.
const SCAN: usize = 10_000;

/// Everything `show` says of one job.
#[derive(Clone, Debug, Serialize)]
pub struct JobView {
    /// The job as stored.
    pub job: Job,
    /// Its trail, oldest first.
    pub events: Vec<Event>,
    /// Its parents as the store has them now (those purged left out).
    pub parents: Vec<Job>,
    /// The ids of the jobs that run after it.
    pub dependents: Vec<JobId>,
    /// The first [`DEPENDENTS_LISTED`] of them, as jobs (those gone left
    /// out), for a face that names them.
    pub listed_dependents: Vec<Job>,
    /// The schedule tick that made it, when a schedule did.
    pub schedule: Option<TickView>,
    /// What its lane says of a new start (read for a pending job only).
    pub lane: LaneState,
    /// Every recorded runner, judged (read for an unfinished job only).
    pub runners: Vec<RunnerView>,
    /// Due pending jobs a runner able to take this one takes first.
    pub ahead: usize,
    /// Why it is not running yet, or who runs it; for a job a
    /// dependency's failure cancelled, why and which retry brings it back;
    /// `None` for other finished jobs.
    pub why: Option<String>,
}

/// The schedule and slot of a tick's job.
#[derive(Clone, Debug, Serialize)]
pub struct TickView {
    /// The schedule's key.
    pub key: String,
    /// The slot this tick fired for.
    pub slot: Timestamp,
    /// The schedule as stored now (`None`: removed since).
    pub stored: Option<Schedule>,
}

/// A lane's verdict on a new start, as the wire has it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "lane")]
pub enum LaneState {
    /// A job of it may start.
    Open,
    /// Paused, by itself or with every queue.
    Paused {
        /// Who paused it, and when.
        stamp: Stamp,
    },
    /// At its limit.
    Full {
        /// Its jobs running now.
        running: u32,
        /// Its limit.
        limit: u32,
    },
}

impl From<&LaneVerdict> for LaneState {
    fn from(v: &LaneVerdict) -> Self {
        match v {
            LaneVerdict::Open => LaneState::Open,
            LaneVerdict::Paused(stamp) => LaneState::Paused { stamp: stamp.clone() },
            LaneVerdict::Full { running, limit } => {
                LaneState::Full { running: *running, limit: *limit }
            }
        }
    }
}

impl JobView {
    /// The label a face gives [`JobView::why`]: `now` for a running job
    /// (who runs it), `why` for any other.
    pub fn why_label(&self) -> &'static str {
        if self.job.state == JobState::Running { "now" } else { "why" }
    }
}

/// Reads what `show` says of job `id`: a missing job is the store's
/// `NotFound`. A finished job reads no runners; only a pending one reads
/// the lanes, and only a due one the jobs ahead of it.
pub async fn job(look: &Look<'_>, id: JobId) -> Result<JobView, ViewError> {
    let store = look.store;
    let now = look.now;
    let job = store.get(id).await?;
    let events = store.events(id).await?;
    let dependents =
        store.dependents(id).await.map_err(read("cannot read the job's dependents"))?;
    let schedule = match job.idempotency_key.as_deref().and_then(parse_tick_key) {
        Some((key, slot)) => {
            let schedules = store.schedules().await.map_err(read("cannot read the schedules"))?;
            let stored = schedules.into_iter().find(|s| s.key == key);
            Some(TickView { key: key.to_owned(), slot, stored })
        }
        None => None,
    };
    let parents = jobs_by_id(store, &job.after).await?;
    let listed = &dependents[..dependents.len().min(DEPENDENTS_LISTED)];
    let listed_dependents = jobs_by_id(store, listed).await?;
    let runners = if job.state.is_terminal() { Vec::new() } else { look.runners().await? };
    let (ahead, ahead_higher) =
        if job.is_due(now) { jobs_ahead(store, &job, &runners, now).await? } else { (0, 0) };
    let lease_owner = job.lease.as_ref().map_or(Liveness::Unknown, |l| (look.judge)(&l.owner));
    let lanes = if job.state == JobState::Pending {
        store.lanes().await.map_err(read("cannot read the lanes"))?
    } else {
        Lanes::default()
    };
    let lane = lane_verdict(store, &lanes, &job.queue).await?;
    let running = if job.gpus.is_some() && job.state == JobState::Pending {
        store
            .list(&ListFilter {
                state: Some(JobState::Running),
                limit: Some(SCAN),
                ..ListFilter::default()
            })
            .await
            .map_err(read("cannot list running jobs"))?
    } else {
        Vec::new()
    };
    let why = why(&Situation {
        job: &job,
        now,
        ahead,
        ahead_higher,
        runners: &runners,
        lease_owner,
        this_host: look.this_host,
        parents: &parents,
        lanes: &lanes,
        lane: lane.clone(),
        running: &running,
    });
    Ok(JobView {
        job,
        events,
        parents,
        dependents,
        listed_dependents,
        schedule,
        lane: LaneState::from(&lane),
        runners,
        ahead,
        why,
    })
}

/// What `queue`'s lane says of a new start now: open when no lane has a
/// setting (nothing more is read), else counted from its running jobs as a
/// claim counts them.
async fn lane_verdict(
    store: &dyn Store,
    lanes: &Lanes,
    queue: &str,
) -> Result<LaneVerdict, ViewError> {
    if lanes.is_default() {
        return Ok(LaneVerdict::Open);
    }
    let running = store
        .list(&ListFilter {
            state: Some(JobState::Running),
            queue: Some(queue.to_owned()),
            limit: Some(SCAN),
            ..ListFilter::default()
        })
        .await
        .map_err(read("cannot list running jobs"))?;
    Ok(LaneCheck::new(lanes.clone(), &running).verdict(queue))
}

/// The jobs with these ids, in their order, leaving out those that are
/// gone (a parent purged after it finished holds nobody up).
pub async fn jobs_by_id(store: &dyn Store, ids: &[JobId]) -> Result<Vec<Job>, ViewError> {
    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids {
        match store.get(*id).await {
            Ok(j) => jobs.push(j),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => {
                return Err(ViewError::Read { what: format!("cannot read job #{id}"), source: e });
            }
        }
    }
    Ok(jobs)
}

/// How many due pending jobs a runner that could take `job` takes first:
/// only live runners that serve its queue and run its kind count, and of
/// the jobs before it in claim order only those such a runner would take
/// (its queues, its kinds). With no such runner, every due job before it.
/// Also how many of them are of a higher priority.
async fn jobs_ahead(
    store: &dyn Store,
    job: &Job,
    runners: &[RunnerView],
    now: Timestamp,
) -> Result<(usize, usize), ViewError> {
    let capable: Vec<&RunnerRecord> = runners
        .iter()
        .filter(|r| r.live && r.record.serves_queue(&job.queue) && r.record.runs_kind(&job.kind))
        .map(|r| &r.record)
        .collect();
    let all_queues = capable.is_empty() || capable.iter().any(|r| r.queues.is_empty());
    let filter = ListFilter {
        state: Some(JobState::Pending),
        order: ListOrder::DueFirst,
        limit: Some(SCAN),
        ..ListFilter::default()
    };
    let mine = job.claim_order();
    let ahead: Vec<Job> = store
        .list(&filter)
        .await
        .map_err(read("cannot list pending jobs"))?
        .into_iter()
        .filter(|j| j.id != job.id && j.is_due(now) && j.claim_order() < mine)
        .filter(|j| all_queues || capable.iter().any(|r| r.queues.contains(&j.queue)))
        .filter(|j| capable.is_empty() || capable.iter().any(|r| r.runs_kind(&j.kind)))
        .collect();
    let higher = ahead.iter().filter(|j| j.priority > job.priority).count();
    Ok((ahead.len(), higher))
}
