//! Property test: random sequences of every operation, by several owners,
//! with the clock moving forwards, applied to the real transitions and to a
//! deliberately naive reference model written from the design's words. After
//! every step the two must agree, and the invariants must hold.

#![allow(clippy::expect_used, reason = "a broken expectation in a test is a failure")]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use slothqueue_core::machine::{self, ClaimRequest};
use slothqueue_core::{
    Completion, Event, Failure, Fence, Job, JobState, Lease, Liveness, LivenessJudge, NewJob,
    Owner, Policy, Timestamp,
};

/// The model's judge: the owners it declared dead are gone, the rest
/// cannot be checked (their leases decide).
struct DeadSet(BTreeSet<String>);

impl LivenessJudge for DeadSet {
    fn judge(&self, lease: &Lease) -> Liveness {
        if self.0.contains(&lease.owner.id) { Liveness::Gone } else { Liveness::Unknown }
    }
}

const OWNERS: usize = 3;
const T0: i64 = 1_700_000_000_000;

#[derive(Clone, Debug)]
enum Op {
    Push { priority: i32, delay_s: u8, max_attempts: u8 },
    Claim { owner: usize },
    Heartbeat { owner: usize, job: usize, stale: bool },
    Complete { owner: usize, job: usize, stale: bool },
    Fail { owner: usize, job: usize, stale: bool },
    Release { owner: usize, job: usize, stale: bool },
    Cancel { job: usize },
    Retry { job: usize },
    Advance { secs: u16 },
    Die { owner: usize },
    ReclaimDead,
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0..OWNERS;
    let job = 0usize..8;
    prop_oneof![
        3 => (-2i32..3, 0u8..20, 1u8..4).prop_map(|(priority, delay_s, max_attempts)| Op::Push { priority, delay_s, max_attempts }),
        3 => owner.clone().prop_map(|owner| Op::Claim { owner }),
        2 => (owner.clone(), job.clone(), prop::bool::weighted(0.2)).prop_map(|(owner, job, stale)| Op::Heartbeat { owner, job, stale }),
        2 => (owner.clone(), job.clone(), prop::bool::weighted(0.2)).prop_map(|(owner, job, stale)| Op::Complete { owner, job, stale }),
        2 => (owner.clone(), job.clone(), prop::bool::weighted(0.2)).prop_map(|(owner, job, stale)| Op::Fail { owner, job, stale }),
        1 => (owner.clone(), job.clone(), prop::bool::weighted(0.2)).prop_map(|(owner, job, stale)| Op::Release { owner, job, stale }),
        1 => job.clone().prop_map(|job| Op::Cancel { job }),
        1 => job.prop_map(|job| Op::Retry { job }),
        2 => (0u16..200).prop_map(|secs| Op::Advance { secs }),
        1 => owner.prop_map(|owner| Op::Die { owner }),
        1 => Just(Op::ReclaimDead),
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
}

struct World {
    now: i64,
    policy: Policy,
    jobs: Vec<(Job, Vec<Event>)>,
    models: Vec<Model>,
    owners: Vec<Owner>,
    generation: Vec<u32>,
    dead: BTreeSet<String>,
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
            Op::Push { priority, delay_s, max_attempts } => {
                let id = self.jobs.len() as i64 + 1;
                let new = NewJob::shell("true", "/")
                    .priority(priority)
                    .max_attempts(u32::from(max_attempts))
                    .not_before(now.saturating_add(Duration::from_secs(u64::from(delay_s))));
                let t = machine::create(id, &new, &[], now, &self.policy);
                self.jobs.push((t.job, t.events));
                self.models.push(Model {
                    id,
                    priority,
                    state: JobState::Pending,
                    attempts: 0,
                    max_attempts: u32::from(max_attempts),
                    not_before: self.now + i64::from(delay_s) * 1000,
                    holder: None,
                    cancel_requested: false,
                });
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
            Op::Fail { owner, job, stale } if job < self.jobs.len() => {
                let fence = self.fence_of(owner, job, stale);
                let failure = Failure { error: "boom".into(), exit_code: Some(1) };
                let r = machine::fail(&self.jobs[job].0, &fence, &failure, now, &self.policy);
                let m = &self.models[job];
                let next = if m.cancel_requested {
                    JobState::Cancelled
                } else if m.attempts >= m.max_attempts {
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
                match m.state {
                    JobState::Pending => {
                        assert!(r.is_ok());
                        m.state = JobState::Cancelled;
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
            }
            Op::Retry { job } if job < self.jobs.len() => {
                let r = machine::retry(&self.jobs[job].0, &[], now);
                let m = &mut self.models[job];
                if matches!(m.state, JobState::Failed | JobState::Cancelled) {
                    assert!(r.is_ok());
                    m.state = JobState::Pending;
                    m.attempts = 0;
                    m.not_before = self.now;
                    m.cancel_requested = false;
                } else {
                    assert!(r.is_err(), "only failed or cancelled jobs retry");
                }
                if let Ok(t) = r {
                    self.commit(job, t);
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
                        self.commit(i, t);
                    }
                }
            }
            _ => {}
        }
    }

    /// Claim as a store does: the running jobs and the best due pending job
    /// go to `plan_claim`, and its plan is checked against the model's own
    /// reading of the design before it is written.
    fn claim(&mut self, owner: usize) {
        let now = self.now();
        let running: Vec<Job> = self
            .jobs
            .iter()
            .map(|(j, _)| j.clone())
            .filter(|j| j.state == JobState::Running)
            .collect();
        let best_due = self
            .jobs
            .iter()
            .map(|(j, _)| j)
            .filter(|j| j.is_due(now))
            .min_by_key(|j| j.claim_order())
            .cloned();
        let me = self.owners[owner].clone();
        let request = ClaimRequest::new(me.clone(), Arc::new(DeadSet(self.dead.clone())));
        let plan = machine::plan_claim(&request, running, best_due, now, &self.policy)
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
        let winner = (0..self.models.len())
            .filter(|&i| {
                let m = &self.models[i];
                (m.state == JobState::Pending && m.not_before <= self.now)
                    || (abandoned(m) && !retiring.contains(&i))
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
        }
        if let Some(w) = plan.take {
            let i = index(w.before.id).expect("taken job exists");
            let m = &mut self.models[i];
            m.state = JobState::Running;
            m.attempts += 1;
            m.holder = Some((me.id.clone(), m.attempts, self.now + 60_000));
            self.commit(i, w.after);
        }
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
            self.commit(job, t);
        }
    }

    fn commit(&mut self, job: usize, t: machine::Transition) {
        self.jobs[job].0 = t.job;
        self.jobs[job].1.extend(t.events);
    }

    fn check(&self) {
        for ((job, trail), m) in self.jobs.iter().zip(&self.models) {
            assert_eq!(job.id, m.id);
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
        }
    }
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
