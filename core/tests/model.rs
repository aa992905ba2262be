//! Property test: random sequences of every operation, by several owners,
//! with the clock moving forwards, applied to the real transitions and to a
//! deliberately naive reference model written from the design's words. After
//! every step the two must agree, and the invariants must hold.
//!
//! Jobs may be pushed after earlier ones. The model of the dependency rule
//! is written from its words, not from `machine::after`: a job is not due
//! until every parent is done; when a job ends failed or cancelled, every
//! pending job waiting on it, transitively, is cancelled naming the root;
//! a retry of the root brings back those it cancelled, unless another
//! parent of theirs has ended, which then becomes their root. The real
//! side writes every transition through `plan_with_dependents`, as a store
//! does.
//!
//! Jobs go to one of two lanes (queues). The model of lanes and holds is
//! written from their words too: a held job is pending but never taken,
//! and a cancel (its own or a parent's failure) ends its hold; a lane's
//! limit and pause are settings of their own (a pause keeps its first
//! stamp, resuming every queue leaves a lane's own pause, a limit is one
//! lane's); a claim starts no job of a paused lane (or while every queue
//! is paused) nor of a lane with `limit` jobs running, takes an expired job
//! back only when its lane would let it start besides itself, and retires
//! abandoned jobs whatever their lane says. The real side keeps
//! `Lanes` as a store does (through `Lanes::apply`) and claims as a store
//! does (a `LaneCheck` from every running job, the best due job of an open
//! lane). An edit changes a pending (or held) job's priority, lane or due
//! time, which the next claim must follow; any other state refuses it.

#![allow(clippy::expect_used, reason = "a broken expectation in a test is a failure")]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use slothqueue_core::machine::{self, ClaimRequest, Graph, TransitionError};
use slothqueue_core::{
    Completion, Event, EventKind, Failure, Fence, Job, JobEdit, JobId, JobState, LaneChange,
    LaneScope, Lanes, Lease, Liveness, LivenessJudge, NewJob, Owner, Policy, Stamp, Timestamp,
};

/// The model's judge: the owners it declared dead are gone, the rest
/// cannot be checked (their leases decide).
struct DeadSet(BTreeSet<String>);

impl LivenessJudge for DeadSet {
    fn judge(&self, lease: &Lease) -> Liveness {
        if self.0.contains(&lease.owner.id) { Liveness::Gone } else { Liveness::Unknown }
    }
}

/// The jobs as the real side has them, read by the dependency rule as a
/// store's transaction would.
struct Jobs<'a>(&'a [(Job, Vec<Event>)]);

impl Graph for Jobs<'_> {
    type Error = TransitionError;
    fn job(&mut self, id: JobId) -> Result<Option<Job>, TransitionError> {
        Ok(usize::try_from(id - 1).ok().and_then(|i| self.0.get(i)).map(|(j, _)| j.clone()))
    }
    fn key_holder(&mut self, key: &str) -> Result<Option<Job>, TransitionError> {
        Ok(self
            .0
            .iter()
            .map(|(j, _)| j)
            .find(|j| j.idempotency_key.as_deref() == Some(key))
            .cloned())
    }
    fn dependents(&mut self, id: JobId) -> Result<Vec<JobId>, TransitionError> {
        Ok(self.0.iter().map(|(j, _)| j).filter(|j| j.after.contains(&id)).map(|j| j.id).collect())
    }
}

const OWNERS: usize = 3;
const T0: i64 = 1_700_000_000_000;
/// The lanes jobs go to, by index.
const LANES: [&str; 2] = ["default", "disk"];

#[derive(Clone, Debug)]
enum Op {
    Push {
        priority: i32,
        delay_s: u8,
        max_attempts: u8,
        parents: Vec<usize>,
        lane: usize,
    },
    Claim {
        owner: usize,
    },
    Heartbeat {
        owner: usize,
        job: usize,
        stale: bool,
    },
    Complete {
        owner: usize,
        job: usize,
        stale: bool,
    },
    Fail {
        owner: usize,
        job: usize,
        stale: bool,
        permanent: bool,
    },
    Release {
        owner: usize,
        job: usize,
        stale: bool,
    },
    Cancel {
        job: usize,
    },
    Retry {
        job: usize,
    },
    Advance {
        secs: u16,
    },
    Die {
        owner: usize,
    },
    ReclaimDead,
    Hold {
        job: usize,
    },
    ReleaseHold {
        job: usize,
    },
    /// Each field `None` is left as it is.
    Edit {
        job: usize,
        priority: Option<i32>,
        lane: Option<usize>,
        delay_s: Option<u8>,
    },
    /// `lane: None` is every queue.
    Pause {
        lane: Option<usize>,
    },
    Resume {
        lane: Option<usize>,
    },
    /// `lane: None` (every queue) must be refused.
    Limit {
        lane: Option<usize>,
        limit: u32,
    },
}

/// A lane, or (one time in four) every queue.
fn lane() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![3 => (0..LANES.len()).prop_map(Some), 1 => Just(None)]
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0..OWNERS;
    let job = 0usize..8;
    prop_oneof![
        4 => (-2i32..3, 0u8..20, 1u8..4, prop::collection::vec(0usize..8, 0..3), 0..LANES.len()).prop_map(|(priority, delay_s, max_attempts, parents, lane)| Op::Push { priority, delay_s, max_attempts, parents, lane }),
        3 => owner.clone().prop_map(|owner| Op::Claim { owner }),
        2 => (owner.clone(), job.clone(), prop::bool::weighted(0.2)).prop_map(|(owner, job, stale)| Op::Heartbeat { owner, job, stale }),
        2 => (owner.clone(), job.clone(), prop::bool::weighted(0.2)).prop_map(|(owner, job, stale)| Op::Complete { owner, job, stale }),
        2 => (owner.clone(), job.clone(), prop::bool::weighted(0.2), prop::bool::weighted(0.2)).prop_map(|(owner, job, stale, permanent)| Op::Fail { owner, job, stale, permanent }),
        1 => (owner.clone(), job.clone(), prop::bool::weighted(0.2)).prop_map(|(owner, job, stale)| Op::Release { owner, job, stale }),
        1 => job.clone().prop_map(|job| Op::Cancel { job }),
        1 => job.clone().prop_map(|job| Op::Retry { job }),
        2 => (0u16..200).prop_map(|secs| Op::Advance { secs }),
        1 => owner.prop_map(|owner| Op::Die { owner }),
        1 => Just(Op::ReclaimDead),
        1 => job.clone().prop_map(|job| Op::Hold { job }),
        1 => job.clone().prop_map(|job| Op::ReleaseHold { job }),
        1 => (job, prop::option::of(-2i32..3), prop::option::of(0..LANES.len()), prop::option::of(0u8..20))
            .prop_map(|(job, priority, lane, delay_s)| Op::Edit { job, priority, lane, delay_s }),
        1 => lane().prop_map(|lane| Op::Pause { lane }),
        1 => lane().prop_map(|lane| Op::Resume { lane }),
        1 => (lane(), 0u32..3).prop_map(|(lane, limit)| Op::Limit { lane, limit }),
    ]
}

/// The reference model: one line of the design per rule, no shared code.
#[derive(Clone, Debug, PartialEq)]
struct Model {
    id: i64,
    priority: i32,
    state: JobState,
    attempts: u32,
    max_attempts: u32,
    not_before: i64,
    holder: Option<(String, u32, i64)>, // owner id, attempt, lease until
    cancel_requested: bool,
    /// The jobs it runs after, by index, each once.
    parents: Vec<usize>,
    /// The job (by index) whose failure cancelled it.
    cancelled_by: Option<usize>,
    /// Its lane, by index into [`LANES`].
    lane: usize,
    /// Held by a user (only while pending).
    held: bool,
}

impl Model {
    fn ended(&self) -> bool {
        matches!(self.state, JobState::Failed | JobState::Cancelled)
    }
}

/// The model of the lanes' settings: each lane's limit and the time of its
/// first pause, and the time of the first pause of every queue.
#[derive(Clone, Debug, Default)]
struct LaneModel {
    limit: [u32; LANES.len()],
    paused: [Option<i64>; LANES.len()],
    all_paused: Option<i64>,
}

impl LaneModel {
    /// Whether a job of `lane` may start with `besides` of its running
    /// jobs not counted (1 for a job taken back: it is one of them).
    fn lets_start(&self, lane: usize, running: u32, besides: u32) -> bool {
        self.all_paused.is_none()
            && self.paused[lane].is_none()
            && (self.limit[lane] == 0 || running - besides < self.limit[lane])
    }
}

struct World {
    now: i64,
    policy: Policy,
    jobs: Vec<(Job, Vec<Event>)>,
    models: Vec<Model>,
    owners: Vec<Owner>,
    generation: Vec<u32>,
    dead: BTreeSet<String>,
    /// The lanes as a store keeps them.
    lanes: Lanes,
    lane_model: LaneModel,
}

impl World {
    fn new() -> Self {
        let mut w = World {
            now: T0,
            policy: Policy::default(),
            jobs: Vec::new(),
            models: Vec::new(),
            owners: Vec::new(),
            generation: vec![0; OWNERS],
            dead: BTreeSet::new(),
            lanes: Lanes::default(),
            lane_model: LaneModel::default(),
        };
        w.owners = (0..OWNERS).map(|i| Owner::named(format!("owner-{i}-0"))).collect();
        w
    }

    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.now)
    }

    fn liveness(&self, job: &Job) -> Liveness {
        match &job.lease {
            Some(l) if self.dead.contains(&l.owner.id) => Liveness::Gone,
            _ => Liveness::Unknown,
        }
    }

    fn fence_of(&self, owner: usize, job: usize, stale: bool) -> Fence {
        // An owner presents the attempt it believes it holds: the current
        // one, or (stale) the one before, as after a reclaim.
        let j = &self.jobs[job].0;
        let attempt =
            j.lease.as_ref().map_or(j.attempts, |l| l.attempt).saturating_sub(u32::from(stale));
        Fence { owner: self.owners[owner].id.clone(), attempt }
    }

    fn apply(&mut self, op: &Op) {
        let now = self.now();
        match *op {
            Op::Push { priority, delay_s, max_attempts, ref parents, lane } => {
                let id = self.jobs.len() as i64 + 1;
                let mut new = NewJob::shell("true", "/")
                    .queue(LANES[lane])
                    .priority(priority)
                    .max_attempts(u32::from(max_attempts))
                    .not_before(now.saturating_add(Duration::from_secs(u64::from(delay_s))));
                let mut named: Vec<usize> = Vec::new();
                for &p in parents {
                    // Named by id; unknown ones are the push's refusal.
                    new = new.after(p as i64 + 1);
                    if p < self.jobs.len() && !named.contains(&p) {
                        named.push(p);
                    }
                }
                let resolved = machine::resolve_parents(&mut Jobs(&self.jobs), &new);
                if parents.iter().any(|&p| p >= self.jobs.len()) {
                    assert!(resolved.is_err(), "an unknown parent is refused");
                    return;
                }
                let resolved = resolved.expect("known parents resolve");
                let t = machine::create(id, &new, &resolved, now, &self.policy);
                self.jobs.push((t.job, t.events));
                // The model: cancelled at once, naming the root, when a
                // parent has already ended; otherwise waiting (or due).
                let first_ended = named.iter().copied().find(|&p| self.models[p].ended());
                let cancelled_by = first_ended.map(|p| self.root(p));
                self.models.push(Model {
                    id,
                    priority,
                    state: JobState::Pending,
                    attempts: 0,
                    max_attempts: u32::from(max_attempts),
                    not_before: self.now + i64::from(delay_s) * 1000,
                    holder: None,
                    cancel_requested: false,
                    parents: named,
                    cancelled_by,
                    lane,
                    held: false,
                });
                if cancelled_by.is_some() {
                    self.models[id as usize - 1].state = JobState::Cancelled;
                }
            }
            Op::Claim { owner } => self.claim(owner),
            Op::Heartbeat { owner, job, stale } if job < self.jobs.len() => {
                let fence = self.fence_of(owner, job, stale);
                let before = self.jobs[job].0.clone();
                let r = machine::heartbeat(&before, &fence, now, &self.policy, None);
                let m = &mut self.models[job];
                let owns = m.state == JobState::Running
                    && m.holder
                        .as_ref()
                        .is_some_and(|(o, a, _)| *o == fence.owner && *a == fence.attempt);
                assert_eq!(r.is_ok(), owns, "heartbeat acceptance");
                match r {
                    Ok((t, ack)) => {
                        assert_eq!(ack.cancel_requested, m.cancel_requested);
                        if let Some(h) = m.holder.as_mut() {
                            h.2 = self.now + 60_000;
                        }
                        self.jobs[job].0 = t.job;
                    }
                    Err(_) => {
                        assert_eq!(self.jobs[job].0, before, "a refused heartbeat changes nothing")
                    }
                }
            }
            Op::Complete { owner, job, stale } if job < self.jobs.len() => {
                let fence = self.fence_of(owner, job, stale);
                let r = machine::complete(&self.jobs[job].0, &fence, &Completion::default(), now);
                self.owner_write(job, &fence, r.map(|t| (t, JobState::Done)), None);
            }
            Op::Fail { owner, job, stale, permanent } if job < self.jobs.len() => {
                let fence = self.fence_of(owner, job, stale);
                let failure = Failure { error: "boom".into(), exit_code: Some(1), permanent };
                let r = machine::fail(&self.jobs[job].0, &fence, &failure, now, &self.policy);
                let m = &self.models[job];
                let next = if m.cancel_requested {
                    JobState::Cancelled
                } else if permanent || m.attempts >= m.max_attempts {
                    JobState::Failed
                } else {
                    JobState::Pending
                };
                let delay = (1000i64 << m.attempts).min(300_000);
                self.owner_write(job, &fence, r.map(|t| (t, next)), Some(delay));
            }
            Op::Release { owner, job, stale } if job < self.jobs.len() => {
                let fence = self.fence_of(owner, job, stale);
                let r = machine::release(&self.jobs[job].0, &fence, now);
                let next = if self.models[job].cancel_requested {
                    JobState::Cancelled
                } else {
                    JobState::Pending
                };
                let accepted = r.is_ok();
                self.owner_write(job, &fence, r.map(|t| (t, next)), Some(0));
                if accepted && next == JobState::Pending {
                    self.models[job].attempts -= 1;
                }
            }
            Op::Cancel { job } if job < self.jobs.len() => {
                let r = machine::cancel(&self.jobs[job].0, now);
                let m = &mut self.models[job];
                let mut ended = false;
                match m.state {
                    JobState::Pending => {
                        assert!(r.is_ok());
                        m.state = JobState::Cancelled;
                        m.held = false;
                        ended = true;
                    }
                    JobState::Running => {
                        assert!(r.is_ok());
                        m.cancel_requested = true;
                    }
                    _ => assert!(r.is_err(), "a terminal job refuses cancel"),
                }
                if let Ok(t) = r {
                    self.commit(job, t);
                }
                if ended {
                    self.on_ended(job);
                }
            }
            Op::Retry { job } if job < self.jobs.len() => {
                let parents = machine::load_parents(&mut Jobs(&self.jobs), &self.jobs[job].0)
                    .expect("parents");
                let r = machine::retry(&self.jobs[job].0, &parents, now);
                let parent_ended = self.models[job].parents.iter().any(|&p| self.models[p].ended());
                let root = self.root(job);
                let m = &mut self.models[job];
                if !m.ended() {
                    assert!(
                        matches!(r, Err(TransitionError::InvalidTransition { .. })),
                        "only failed or cancelled jobs retry"
                    );
                } else if parent_ended {
                    assert!(
                        matches!(r, Err(TransitionError::InvalidJob(_))),
                        "no retry while a parent is failed or cancelled: {r:?}"
                    );
                } else {
                    assert!(r.is_ok());
                    m.state = JobState::Pending;
                    m.attempts = 0;
                    m.not_before = self.now;
                    m.cancel_requested = false;
                    m.cancelled_by = None;
                }
                if let Ok(t) = r {
                    self.commit(job, t);
                    self.on_revived(root);
                }
            }
            Op::Hold { job } if job < self.jobs.len() => {
                let stamp = Stamp::new(format!("user@{}", self.now), now);
                let r = machine::hold(&self.jobs[job].0, stamp, now);
                self.hold_write(job, r, true);
            }
            Op::ReleaseHold { job } if job < self.jobs.len() => {
                let r = machine::release_hold(&self.jobs[job].0, "user", now);
                self.hold_write(job, r, false);
            }
            Op::Edit { job, priority, lane, delay_s } if job < self.jobs.len() => {
                let edit = JobEdit {
                    priority,
                    queue: lane.map(|l| LANES[l].to_owned()),
                    not_before: delay_s
                        .map(|d| now.saturating_add(Duration::from_secs(u64::from(d)))),
                    ..JobEdit::default()
                };
                let r = machine::edit(&self.jobs[job].0, &edit, now);
                let m = &mut self.models[job];
                if m.state != JobState::Pending {
                    assert!(
                        matches!(r, Err(TransitionError::InvalidTransition { .. })),
                        "only a pending job is edited: {r:?}"
                    );
                    return;
                }
                let t = r.expect("a pending job is edited");
                let kinds: Vec<EventKind> = t.events.iter().map(|e| e.kind).collect();
                let expected = if edit.is_empty() { vec![] } else { vec![EventKind::Edited] };
                assert_eq!(kinds, expected, "an edit writes one event when it names a field");
                m.priority = priority.unwrap_or(m.priority);
                m.lane = lane.unwrap_or(m.lane);
                if let Some(d) = delay_s {
                    m.not_before = self.now + i64::from(d) * 1000;
                }
                self.commit(job, t);
            }
            Op::Pause { lane } => {
                let stamp = Stamp::new("user", now);
                self.change_lane(lane, &LaneChange::Pause(stamp));
                let m = &mut self.lane_model;
                let paused = match lane {
                    Some(l) => &mut m.paused[l],
                    None => &mut m.all_paused,
                };
                paused.get_or_insert(self.now);
            }
            Op::Resume { lane } => {
                self.change_lane(lane, &LaneChange::Resume);
                match lane {
                    Some(l) => self.lane_model.paused[l] = None,
                    None => self.lane_model.all_paused = None,
                }
            }
            Op::Limit { lane, limit } => {
                let before = self.lanes.clone();
                let r = self.lanes.apply(&scope(lane), &LaneChange::Limit(limit));
                match lane {
                    Some(l) => {
                        assert!(r.is_ok(), "a lane's limit is set");
                        self.lane_model.limit[l] = limit;
                    }
                    None => {
                        assert!(r.is_err(), "a limit for every queue is refused");
                        assert_eq!(self.lanes, before, "a refused change changes nothing");
                    }
                }
            }
            Op::Advance { secs } => self.now += i64::from(secs) * 1000,
            Op::Die { owner } => {
                self.dead.insert(self.owners[owner].id.clone());
                self.generation[owner] += 1;
                self.owners[owner] =
                    Owner::named(format!("owner-{owner}-{}", self.generation[owner]));
            }
            Op::ReclaimDead => {
                for i in 0..self.jobs.len() {
                    // The sweep names each attempt it found dead.
                    let attempt = match &self.jobs[i].0.lease {
                        Some(l) if self.liveness(&self.jobs[i].0) == Liveness::Gone => l.fence(),
                        _ => Fence { owner: "nobody".into(), attempt: 0 },
                    };
                    let r = machine::reclaim_dead(&self.jobs[i].0, &attempt, now);
                    let m = &mut self.models[i];
                    let gone = m.state == JobState::Running
                        && m.holder.as_ref().is_some_and(|(o, _, _)| self.dead.contains(o));
                    assert_eq!(
                        r.is_some(),
                        gone,
                        "reclaim_dead takes exactly the gone owners' jobs"
                    );
                    if let Some(t) = r {
                        m.state = if m.cancel_requested {
                            JobState::Cancelled
                        } else if m.attempts >= m.max_attempts {
                            JobState::Failed
                        } else {
                            JobState::Pending
                        };
                        m.holder = None;
                        let ended = m.ended();
                        self.commit(i, t);
                        if ended {
                            self.on_ended(i);
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// Claim as a store does: the running jobs and every pending job, in
    /// claim order and unfiltered (a store may push nothing down), go to
    /// `plan_claim_in_order`, which applies every predicate itself; its
    /// plan is checked against the model's own reading of the design
    /// before it is written.
    fn claim(&mut self, owner: usize) {
        let now = self.now();
        let running: Vec<Job> = self
            .jobs
            .iter()
            .map(|(j, _)| j.clone())
            .filter(|j| j.state == JobState::Running)
            .collect();
        let check = machine::LaneCheck::new(self.lanes.clone(), &running);
        let mut pending: Vec<Job> = self
            .jobs
            .iter()
            .map(|(j, _)| j.clone())
            .filter(|j| j.state == JobState::Pending)
            .collect();
        pending.sort_by_key(|j| j.claim_order());
        let me = self.owners[owner].clone();
        let request = ClaimRequest::new(me.clone(), Arc::new(DeadSet(self.dead.clone())));
        let due = pending.into_iter().map(Ok::<Job, machine::TransitionError>);
        let plan = machine::plan_claim_in_order(&request, &check, running, due, now, &self.policy)
            .expect("a plan from consistent candidates");
        // The model: every abandoned job (owner dead, or lease expired) that
        // is cancelled or out of attempts retires; of the rest and the due
        // pending jobs, the first by priority, not_before, id is taken.
        let abandoned = |m: &Model| {
            m.state == JobState::Running
                && m.holder
                    .as_ref()
                    .is_some_and(|(o, _, until)| self.dead.contains(o) || *until < self.now)
        };
        let retiring: Vec<usize> = (0..self.models.len())
            .filter(|&i| {
                let m = &self.models[i];
                abandoned(m) && (m.cancel_requested || m.attempts >= m.max_attempts)
            })
            .collect();
        // A lane lets a job start unless paused (itself or with every
        // queue) or with `limit` of its jobs running, whoever runs them.
        // (Counted as the claim read them: a job it retires still counts
        // in this claim, as in the `LaneCheck` built before the plan.)
        let running_in = self.running_per_lane();
        let lanes = &self.lane_model;
        let winner = (0..self.models.len())
            .filter(|&i| {
                let m = &self.models[i];
                (m.state == JobState::Pending
                    && !m.held
                    && m.not_before <= self.now
                    && m.parents.iter().all(|&p| self.models[p].state == JobState::Done)
                    && lanes.lets_start(m.lane, running_in[m.lane], 0))
                    || (abandoned(m)
                        && !retiring.contains(&i)
                        && lanes.lets_start(m.lane, running_in[m.lane], 1))
            })
            .min_by_key(|&i| {
                let m = &self.models[i];
                (std::cmp::Reverse(m.priority), m.not_before, m.id)
            });
        let ids: Vec<i64> = self.jobs.iter().map(|(j, _)| j.id).collect();
        let index = |id: i64| ids.iter().position(|&j| j == id);
        let planned_retire: Vec<usize> =
            plan.retire.iter().filter_map(|w| index(w.before.id)).collect();
        assert_eq!(planned_retire, retiring, "the plan retires exactly the abandoned, ended jobs");
        assert_eq!(
            plan.take.as_ref().and_then(|w| index(w.before.id)),
            winner,
            "the plan takes the model's winner"
        );
        for w in plan.retire {
            let i = index(w.before.id).expect("retired job exists");
            let m = &mut self.models[i];
            m.state = if m.cancel_requested { JobState::Cancelled } else { JobState::Failed };
            m.holder = None;
            self.commit(i, w.after);
            self.on_ended(i);
        }
        if let Some(w) = plan.take {
            let i = index(w.before.id).expect("taken job exists");
            let lane = self.models[i].lane;
            let started = self.models[i].state == JobState::Pending;
            let running_after = running_in[lane] + u32::from(started);
            let limit = self.lane_model.limit[lane];
            assert!(
                limit == 0 || !started || running_after <= limit,
                "a claim never takes a lane past its limit: {running_after} > {limit}"
            );
            assert!(self.lane_model.paused[lane].is_none() && self.lane_model.all_paused.is_none());
            let m = &mut self.models[i];
            m.state = JobState::Running;
            m.attempts += 1;
            m.holder = Some((me.id.clone(), m.attempts, self.now + 60_000));
            self.commit(i, w.after);
        }
    }

    /// How many jobs of each lane run now, whoever runs them.
    fn running_per_lane(&self) -> [u32; LANES.len()] {
        let mut n = [0; LANES.len()];
        for m in self.models.iter().filter(|m| m.state == JobState::Running) {
            n[m.lane] += 1;
        }
        n
    }

    /// A hold (`hold`) or its release (`!hold`) as the model reads them: a
    /// pending job takes it, with one event when it changes the job and
    /// none when it is already so; any other state refuses.
    fn hold_write(
        &mut self,
        job: usize,
        r: Result<machine::Transition, TransitionError>,
        hold: bool,
    ) {
        let m = &mut self.models[job];
        if m.state != JobState::Pending {
            assert!(
                matches!(r, Err(TransitionError::InvalidTransition { .. })),
                "only a pending job is held or released: {r:?}"
            );
            return;
        }
        let t = r.expect("a pending job is held or released");
        let kinds: Vec<EventKind> = t.events.iter().map(|e| e.kind).collect();
        let expected = match (m.held, hold) {
            (false, true) => vec![EventKind::Held],
            (true, false) => vec![EventKind::HoldReleased],
            _ => vec![],
        };
        assert_eq!(kinds, expected, "a hold or release writes an event only when it changes");
        m.held = hold;
        self.commit(job, t);
    }

    /// A pause or resume of `lane` (every queue for `None`), as a store
    /// applies it: always accepted.
    fn change_lane(&mut self, lane: Option<usize>, change: &LaneChange) {
        let after = self.lanes.apply(&scope(lane), change).expect("a pause or resume is accepted");
        assert_eq!(after, self.lanes.get(&scope(lane)), "apply returns the scope's settings");
    }

    fn owner_write(
        &mut self,
        job: usize,
        fence: &Fence,
        r: Result<(machine::Transition, JobState), machine::TransitionError>,
        retry_delay_ms: Option<i64>,
    ) {
        let m = &mut self.models[job];
        let owns = m.state == JobState::Running
            && m.holder.as_ref().is_some_and(|(o, a, _)| *o == fence.owner && *a == fence.attempt);
        assert_eq!(r.is_ok(), owns, "only the holder of the current attempt may write");
        if let Ok((t, next)) = r {
            m.state = next;
            m.holder = None;
            if let (JobState::Pending, Some(delay)) = (next, retry_delay_ms) {
                m.not_before = self.now + delay;
            }
            let ended = m.ended();
            self.commit(job, t);
            if ended {
                self.on_ended(job);
            }
        }
    }

    /// Writes `t` as a store does: with every dependent's write the
    /// dependency rule plans for it, each from the job as it is.
    fn commit(&mut self, job: usize, t: machine::Transition) {
        let before = self.jobs[job].0.clone();
        let plan = machine::plan_with_dependents(&mut Jobs(&self.jobs), before, t, self.now())
            .expect("a plan over known jobs");
        assert_eq!(
            plan.first().map(|w| w.before.id),
            Some(self.jobs[job].0.id),
            "its own write first"
        );
        for w in plan {
            let i = usize::try_from(w.before.id - 1).expect("an id");
            assert_eq!(self.jobs[i].0, w.before, "a write planned from the job as it is");
            self.jobs[i].0 = w.after.job;
            self.jobs[i].1.extend(w.after.events);
        }
    }

    /// The job whose failure job `i` stands for: the one that cancelled
    /// it, or itself.
    fn root(&self, i: usize) -> usize {
        self.models[i].cancelled_by.unwrap_or(i)
    }

    /// The model of a failure: job `i` just ended failed or cancelled, so
    /// every pending job with an ended parent (all of them waiting on `i`,
    /// since none had one before) is cancelled, naming `i`'s root; in
    /// index order, so a chain follows its parents.
    fn on_ended(&mut self, i: usize) {
        let root = self.root(i);
        for j in 0..self.models.len() {
            let blocked = self.models[j].parents.iter().any(|&p| self.models[p].ended());
            let m = &mut self.models[j];
            if m.state == JobState::Pending && blocked {
                m.state = JobState::Cancelled;
                m.cancelled_by = Some(root);
                m.held = false;
            }
        }
    }

    /// The model of a retry of `root`: each job it cancelled comes back
    /// (pending, attempts reset, due now once its parents are done), unless
    /// one of its parents is still ended, whose root it then names.
    fn on_revived(&mut self, root: usize) {
        for j in 0..self.models.len() {
            if self.models[j].state != JobState::Cancelled
                || self.models[j].cancelled_by != Some(root)
            {
                continue;
            }
            let blocker = self.models[j].parents.iter().copied().find(|&p| self.models[p].ended());
            let new_root = blocker.map(|p| self.root(p));
            let m = &mut self.models[j];
            match new_root {
                Some(r) => m.cancelled_by = Some(r),
                None => {
                    m.state = JobState::Pending;
                    m.attempts = 0;
                    m.not_before = self.now;
                    m.cancelled_by = None;
                }
            }
        }
    }

    fn check(&self) {
        self.check_lanes();
        for ((job, trail), m) in self.jobs.iter().zip(&self.models) {
            assert_eq!(job.id, m.id);
            assert_eq!(job.queue, LANES[m.lane]);
            assert_eq!(job.held.is_some(), m.held, "hold of #{}", job.id);
            assert!(m.held <= (m.state == JobState::Pending), "only a pending job is held");
            assert_eq!(job.priority, m.priority);
            assert_eq!(job.state, m.state, "state of #{}", job.id);
            assert_eq!(job.attempts, m.attempts, "attempts of #{}", job.id);
            assert_eq!(
                job.cancel_requested && job.state == JobState::Running,
                m.cancel_requested && m.state == JobState::Running
            );
            if job.state == JobState::Pending {
                assert_eq!(job.not_before.as_millis(), m.not_before, "not_before of #{}", job.id);
            }
            assert_eq!(
                job.state == JobState::Running,
                job.lease.is_some(),
                "a running job always has a lease, no other"
            );
            if let (Some(l), Some((o, a, until))) = (&job.lease, &m.holder) {
                assert_eq!((&l.owner.id, l.attempt, l.until.as_millis()), (o, *a, *until));
            }
            assert!(job.attempts <= job.max_attempts, "attempts never exceed max_attempts");
            if job.state == JobState::Failed {
                assert!(job.last_error.is_some(), "a failed job has a last error");
            }
            assert_eq!(
                machine::replay(trail),
                Some(job.state),
                "the trail replays to the state of #{}",
                job.id
            );
            self.check_dependencies(job, m);
        }
    }

    /// The lanes as stored agree with the model's, and keep no defaults.
    fn check_lanes(&self) {
        let m = &self.lane_model;
        assert_eq!(self.lanes.all_paused.as_ref().map(|s| s.since.as_millis()), m.all_paused);
        for (i, name) in LANES.iter().enumerate() {
            let settings = self.lanes.of(name);
            assert_eq!(settings.limit, m.limit[i], "limit of {name}");
            assert_eq!(
                settings.paused.map(|s| s.since.as_millis()),
                m.paused[i],
                "pause of {name}"
            );
        }
        assert!(self.lanes.queues.values().all(|s| !s.is_default()), "defaults are not kept");
    }

    /// The dependency rule's agreement and invariants for one job.
    fn check_dependencies(&self, job: &Job, m: &Model) {
        let id = job.id;
        let ids = |ix: &[usize]| ix.iter().map(|&i| i as JobId + 1).collect::<Vec<_>>();
        assert_eq!(job.after, ids(&m.parents), "parents of #{id}");
        assert_eq!(job.cancelled_by, m.cancelled_by.map(|i| i as JobId + 1), "root of #{id}");
        let parents: Vec<&Model> = m.parents.iter().map(|&p| &self.models[p]).collect();
        let not_done = parents.iter().filter(|p| p.state != JobState::Done).count();
        if job.state == JobState::Pending {
            assert_eq!(job.pending_parents as usize, not_done, "#{id} counts its parents not done");
            assert!(
                parents.iter().all(|p| !p.ended()),
                "#{id} is pending on a failed or cancelled parent: it would wait forever"
            );
            assert_eq!(
                job.is_due(self.now()),
                not_done == 0 && m.not_before <= self.now && !m.held,
                "#{id} is due exactly when its time came, its parents are done and it is not held"
            );
        }
        if job.state == JobState::Running {
            assert_eq!(not_done, 0, "#{id} was claimed while waiting on a parent");
        }
        if let Some(r) = m.cancelled_by {
            let root = &self.models[r];
            assert_eq!(job.state, JobState::Cancelled, "only a cancelled job names a root");
            assert!(
                root.ended() && root.cancelled_by.is_none(),
                "#{id}'s root #{} ended itself",
                r + 1
            );
            let why = format!("dependency #{} {}", r + 1, root.state);
            assert_eq!(job.last_error.as_deref(), Some(why.as_str()), "why #{id} was cancelled");
        }
    }
}

fn scope(lane: Option<usize>) -> LaneScope {
    lane.map_or(LaneScope::All, |l| LaneScope::Queue(LANES[l].to_owned()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn transitions_agree_with_the_reference_model(ops in prop::collection::vec(op(), 1..80)) {
        let mut world = World::new();
        for op in &ops {
            world.apply(op);
            world.check();
        }
    }
}
