//! **What a lane lets start**: a lane's limit and pause as a claim reads
//! them ([`LaneCheck`]), a user's hold on one job ([`hold`],
//! [`release_hold`]), and the notes a runner writes on an attempt it
//! suspends ([`note_attempt`]). Every store builds one [`LaneCheck`]
//! inside each claim's transaction, from the lanes and running jobs it
//! read there, so a limit holds across every runner on the file.

use std::collections::BTreeMap;
use std::time::Duration;

use super::is_plain_name;
use super::{Transition, TransitionError, check_owner, invalid};
use crate::job::{Event, EventKind, Fence, Job, JobState};
use crate::lane::{LaneChange, LaneScope, LaneSettings, Lanes, Stamp};
use crate::time::Timestamp;

/// Whether a lane lets a job of it start, and if not, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaneVerdict {
    /// It may start.
    Open,
    /// The lane is paused (by itself, or with every queue).
    Paused(Stamp),
    /// The lane is at its limit.
    Full {
        /// Its jobs running now.
        running: u32,
        /// Its limit.
        limit: u32,
    },
}

impl LaneVerdict {
    /// Whether a job may start.
    pub fn is_open(&self) -> bool {
        matches!(self, LaneVerdict::Open)
    }
}

/// The lanes as one claim sees them: their settings and how many of each
/// lane's jobs run now. Built by a store inside the claim's transaction
/// from every running job (whatever its owner, expired or not: a job
/// counts against its lane until it stops running), and handed to
/// [`super::plan_claim_in_order`], which takes nothing a lane would not let
/// start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneCheck {
    lanes: Lanes,
    running: BTreeMap<String, u32>,
}

impl LaneCheck {
    /// The check for `lanes` with `running` the jobs running now (jobs in
    /// another state are skipped).
    pub fn new<'a>(lanes: Lanes, running: impl IntoIterator<Item = &'a Job>) -> LaneCheck {
        let mut counts = BTreeMap::new();
        if !lanes.is_default() {
            for job in running.into_iter().filter(|j| j.state == JobState::Running) {
                *counts.entry(job.queue.clone()).or_insert(0u32) += 1;
            }
        }
        LaneCheck { lanes, running: counts }
    }

    /// The check of a file with no lane settings: everything is open.
    pub fn open() -> LaneCheck {
        LaneCheck::default()
    }

    /// Whether no lane has any setting (a store may then skip every test).
    pub fn is_open_everywhere(&self) -> bool {
        self.lanes.is_default()
    }

    /// Whether every queue is paused: a claim takes nothing new, and a
    /// store need not read any pending job.
    pub fn all_paused(&self) -> bool {
        self.lanes.all_paused.is_some()
    }

    /// Whether a new job of `queue` may start.
    pub fn may_start(&self, queue: &str) -> bool {
        self.verdict(queue).is_open()
    }

    /// What `queue`'s lane says of a new start.
    pub fn verdict(&self, queue: &str) -> LaneVerdict {
        self.verdict_besides(queue, 0)
    }

    /// Whether the running `job` (an expired lease) may be taken back and
    /// run again: not while its lane is paused, and only while the lane's
    /// other running jobs are fewer than its limit (the job itself is
    /// already counted, so taking it back adds nothing).
    pub fn may_take_back(&self, job: &Job) -> bool {
        self.verdict_besides(&job.queue, 1).is_open()
    }

    /// The queues a store may skip when it looks for the best due job: those
    /// paused or full. (A queue not listed may still be closed by the pause
    /// of every queue: see [`LaneCheck::all_paused`].)
    pub fn closed_queues(&self) -> impl Iterator<Item = &str> {
        self.lanes.queues.keys().map(String::as_str).filter(|q| !self.may_start(q))
    }

    /// How many of `queue`'s jobs run now (counted only when some lane has
    /// a setting).
    fn running_in(&self, queue: &str) -> u32 {
        self.running.get(queue).copied().unwrap_or(0)
    }

    fn verdict_besides(&self, queue: &str, itself: u32) -> LaneVerdict {
        if let Some(stamp) = self.lanes.pause_of(queue) {
            return LaneVerdict::Paused(stamp.clone());
        }
        let limit = self.lanes.of(queue).limit;
        let running = self.running_in(queue);
        if crate::lane::is_full(limit, u64::from(running.saturating_sub(itself))) {
            return LaneVerdict::Full { running, limit };
        }
        LaneVerdict::Open
    }
}

/// The one rule for changing a lane's settings (here rather than in
/// `lane.rs`, which holds only data, so that `lane.rs` needs nothing of the
/// machine).
impl Lanes {
    /// Applies `change` to `scope`'s settings, as a store does inside the
    /// write that stores them. Refuses a limit for every queue at once (a
    /// limit is a lane's) and a queue name that `add` would refuse.
    /// Returns the scope's settings after the change, for the store to
    /// write (or, when they are the defaults, to delete).
    pub fn apply(
        &mut self,
        scope: &LaneScope,
        change: &LaneChange,
    ) -> Result<LaneSettings, TransitionError> {
        let queue = match scope {
            LaneScope::All => {
                match change {
                    LaneChange::Limit(_) => {
                        return Err(TransitionError::InvalidJob(
                            "a limit is set for one queue (--queue NAME)".to_owned(),
                        ));
                    }
                    LaneChange::Pause(stamp) => {
                        self.all_paused.get_or_insert_with(|| stamp.clone());
                    }
                    LaneChange::Resume => self.all_paused = None,
                }
                return Ok(LaneSettings { limit: 0, paused: self.all_paused.clone() });
            }
            LaneScope::Queue(q) => q,
        };
        if !is_plain_name(queue) {
            return Err(TransitionError::InvalidJob(format!(
                "queue `{queue}` is not a valid name (letters, digits, '-', '_' and '.')"
            )));
        }
        let mut settings = self.of(queue);
        match change {
            LaneChange::Limit(n) => settings.limit = *n,
            LaneChange::Pause(stamp) => {
                settings.paused.get_or_insert_with(|| stamp.clone());
            }
            LaneChange::Resume => settings.paused = None,
        }
        if settings.is_default() {
            self.queues.remove(queue);
        } else {
            self.queues.insert(queue.clone(), settings.clone());
        }
        Ok(settings)
    }
}

/// How a store reads its lanes back: the one rule for what a stored row
/// may say, so that every backend refuses the same damage.
impl Lanes {
    /// Puts back the settings a store read under `key` ([`LaneScope::key`]).
    /// A key that names no scope (not `""`, not a name `add` accepts), or a
    /// limit filed for every queue (no change writes one), is damage: the
    /// error says what, and the store reports the file as corrupt. A row of
    /// defaults is no setting.
    pub fn insert_stored(&mut self, key: &str, settings: LaneSettings) -> Result<(), String> {
        let scope = LaneScope::from_key(key);
        match &scope {
            LaneScope::All if settings.limit != 0 => {
                return Err("the lane of every queue has a limit".to_owned());
            }
            LaneScope::Queue(q) if !is_plain_name(q) => {
                return Err(format!("a lane is filed under {q:?}, not a queue name"));
            }
            _ => {}
        }
        self.insert(scope, settings);
        Ok(())
    }
}

/// A user holds a pending job (`hold`): it stays pending but is not due
/// until released. Holding a held job changes nothing (no event); any
/// other state refuses.
pub fn hold(job: &Job, stamp: Stamp, now: Timestamp) -> Result<Transition, TransitionError> {
    if job.state != JobState::Pending {
        return Err(invalid(job, "hold"));
    }
    if job.held.is_some() {
        return Ok(Transition { job: job.clone(), events: Vec::new() });
    }
    let mut next = job.clone();
    let event = Event::new(job.id, EventKind::Held, now).saying(format!("held by {}", stamp.by));
    next.held = Some(stamp);
    Ok(Transition { job: next, events: vec![event] })
}

/// A user releases a held job (`release`): it is pending as before, due
/// when its time and parents say. A pending job not held changes nothing;
/// any other state refuses.
pub fn release_hold(job: &Job, by: &str, now: Timestamp) -> Result<Transition, TransitionError> {
    if job.state != JobState::Pending {
        return Err(invalid(job, "release"));
    }
    if job.held.is_none() {
        return Ok(Transition { job: job.clone(), events: Vec::new() });
    }
    let mut next = job.clone();
    next.held = None;
    let event =
        Event::new(job.id, EventKind::HoldReleased, now).saying(format!("released by {by}"));
    Ok(Transition { job: next, events: vec![event] })
}

/// What a runner notes on an attempt it holds, without changing its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptNote {
    /// It stopped the attempt's processes (SIGSTOP) because a gate closed.
    Suspended {
        /// The reading that closed it, e.g. `load 3.20 >= ceiling 1.50`.
        reading: String,
    },
    /// It continued them (SIGCONT).
    Resumed {
        /// How long they were stopped (not counted against max runtime).
        after: Duration,
    },
}

/// An owner notes a suspend or a resume on the attempt it holds under
/// `fence`: an event on the trail, nothing else changed. `LeaseLost` for
/// anyone else.
pub fn note_attempt(
    job: &Job,
    fence: &Fence,
    note: &AttemptNote,
    now: Timestamp,
) -> Result<Transition, TransitionError> {
    check_owner(job, fence)?;
    let (kind, message) = match note {
        AttemptNote::Suspended { reading } => {
            (EventKind::Suspended, format!("suspended: {reading}"))
        }
        AttemptNote::Resumed { after } => {
            (EventKind::Resumed, format!("resumed after {}s", after.as_secs()))
        }
    };
    let event = Event::new(job.id, kind, now).by(&fence.owner, fence.attempt).saying(message);
    Ok(Transition { job: job.clone(), events: vec![event] })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::NewJob;
    use crate::job::{Lease, Owner};
    use crate::lane::{LaneChange, LaneScope};
    use crate::machine::create;

    fn new_job() -> NewJob {
        NewJob::shell("true", "/")
    }

    const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

    fn lanes(changes: &[(&str, LaneChange)]) -> Lanes {
        let mut lanes = Lanes::default();
        for (q, c) in changes {
            let scope =
                if q.is_empty() { LaneScope::All } else { LaneScope::Queue((*q).to_owned()) };
            lanes.apply(&scope, c).unwrap();
        }
        lanes
    }

    fn running(id: i64, queue: &str) -> Job {
        let mut job = create(id, &new_job().queue(queue), &[], T0, &Default::default()).job;
        job.state = JobState::Running;
        job.attempts = 1;
        job.lease = Some(Lease {
            owner: Owner::named("r"),
            attempt: 1,
            until: T0,
            child_pgid: None,
            gpus: Vec::new(),
        });
        job
    }

    #[test]
    fn a_limit_closes_its_lane_at_the_boundary() {
        let l = lanes(&[("disk", LaneChange::Limit(2))]);
        let one = [running(1, "disk")];
        assert!(LaneCheck::new(l.clone(), &one).may_start("disk"));
        let two = [running(1, "disk"), running(2, "disk"), running(3, "web")];
        let check = LaneCheck::new(l, &two);
        assert_eq!(check.verdict("disk"), LaneVerdict::Full { running: 2, limit: 2 });
        assert!(check.may_start("web"), "another lane is not limited");
        assert_eq!(check.closed_queues().collect::<Vec<_>>(), ["disk"]);
    }

    #[test]
    fn an_expired_job_of_a_full_lane_may_be_taken_back_but_not_one_more() {
        let l = lanes(&[("disk", LaneChange::Limit(1))]);
        let jobs = [running(1, "disk")];
        let check = LaneCheck::new(l, &jobs);
        assert!(check.may_take_back(&jobs[0]));
        assert!(!check.may_start("disk"));
    }

    #[test]
    fn a_pause_closes_its_lane_and_the_pause_of_all_closes_every_lane() {
        let stamp = Stamp::new("ana", T0);
        let check = LaneCheck::new(lanes(&[("disk", LaneChange::Pause(stamp.clone()))]), &[]);
        assert_eq!(check.verdict("disk"), LaneVerdict::Paused(stamp.clone()));
        assert!(check.may_start("web"));
        let jobs = [running(1, "disk")];
        assert!(!check.may_take_back(&jobs[0]), "a paused lane starts nothing, not even again");
        let all = LaneCheck::new(lanes(&[("", LaneChange::Pause(stamp))]), &[]);
        assert!(all.all_paused() && !all.may_start("web"));
    }

    #[test]
    fn no_settings_means_open_everywhere() {
        let jobs = [running(1, "disk")];
        let check = LaneCheck::new(Lanes::default(), &jobs);
        assert!(check.is_open_everywhere() && check.may_start("disk"));
    }

    #[test]
    fn hold_and_release_mark_a_pending_job_and_nothing_else() {
        let job = create(1, &new_job(), &[], T0, &Default::default()).job;
        let held = hold(&job, Stamp::new("ana", T0), T0).unwrap();
        assert!(held.job.is_held() && !held.job.is_due(T0));
        assert_eq!(held.events[0].kind, EventKind::Held);
        assert!(hold(&held.job, Stamp::new("bo", T0), T0).unwrap().events.is_empty());
        let released = release_hold(&held.job, "ana", T0).unwrap();
        assert!(released.job.is_due(T0));
        assert_eq!(released.events[0].kind, EventKind::HoldReleased);
        assert!(release_hold(&job, "ana", T0).unwrap().events.is_empty());
        assert!(hold(&running(2, "default"), Stamp::new("ana", T0), T0).is_err());
    }

    #[test]
    fn a_note_needs_the_attempts_fence() {
        let job = running(1, "default");
        let fence = job.lease.as_ref().unwrap().fence();
        let note = AttemptNote::Suspended { reading: "load 3.2".into() };
        let t = note_attempt(&job, &fence, &note, T0).unwrap();
        assert_eq!((t.job.state, t.events[0].kind), (JobState::Running, EventKind::Suspended));
        let other = Fence { owner: "x".into(), attempt: 1 };
        assert!(note_attempt(&job, &other, &note, T0).is_err());
    }
}
