//! **The dependency rule**: jobs that run after other jobs. A job's parents
//! are fixed at push ([`resolve_parents`], [`create`](super::create)); it
//! is due only once every parent is `done` (`Job::pending_parents` counts
//! the others). What one job's transition means for the jobs waiting on it,
//! transitively, is decided here once ([`plan_with_dependents`]), from what
//! a store reads through [`Graph`] inside the same transaction:
//!
//! - a parent **done**: each dependent waits on one parent fewer, and is
//!   due when that was the last;
//! - a parent **failed or cancelled**: each pending dependent ends
//!   `cancelled` ("dependency #12 failed"), remembering the root of the
//!   failure (`Job::cancelled_by`), and so on down;
//! - a **retry** of that root: the dependents it cancelled come back
//!   pending, waiting again, and so on down — unless another parent of
//!   theirs has failed meanwhile, which then becomes their root.
//!
//! Parents always have lower ids than their dependents (they must exist
//! first), so the plan visits jobs in id order and sees each parent's final
//! state before its dependents are decided.

use std::collections::{BTreeMap, BTreeSet};

use super::{PlannedWrite, Transition, TransitionError};
use crate::job::{Event, EventKind, Job, JobId, JobState, NewJob, Parent};
use crate::time::Timestamp;

/// Most parents one job may name.
pub const MAX_PARENTS: usize = 1_000;

/// What the dependency rule reads from a store, inside the transaction
/// that writes the plan (so it sees that transaction's earlier writes,
/// e.g. the jobs pushed before it in one batch). Every
/// [`crate::ops::Tx`] is one; a store implements it directly only until it
/// runs `core::ops`.
pub trait Graph {
    /// The store's error; a refusal of the rule becomes one.
    type Error: From<TransitionError>;
    /// The job with this id, if any.
    fn job(&mut self, id: JobId) -> Result<Option<Job>, Self::Error>;
    /// The job holding this idempotency key, if any.
    fn key_holder(&mut self, key: &str) -> Result<Option<Job>, Self::Error>;
    /// The ids of the jobs that named `id` as a parent, in any order.
    fn dependents(&mut self, id: JobId) -> Result<Vec<JobId>, Self::Error>;
}

/// The parents a new job names, looked up: each must exist (by id, or as
/// the holder of a key), so no cycle can form, and none may hold the new
/// job's own idempotency key. Refused, naming the first bad one, with
/// [`TransitionError::InvalidJob`]. Duplicates count once. A store calls it
/// before [`plan_push`](super::plan_push), on the queue as it is before
/// this push.
pub fn resolve_parents<G: Graph>(g: &mut G, new: &NewJob) -> Result<Vec<Job>, G::Error> {
    if new.after.len() > MAX_PARENTS {
        return Err(invalid(format!("a job may wait on at most {MAX_PARENTS} jobs")).into());
    }
    let mut parents: Vec<Job> = Vec::with_capacity(new.after.len());
    for p in &new.after {
        let found = match p {
            Parent::Id(id) => g.job(*id)?,
            Parent::Key(key) => g.key_holder(key)?,
        };
        let Some(job) = found else {
            return Err(invalid(match p {
                Parent::Id(id) => format!("--after {id}: no job #{id}"),
                Parent::Key(key) => format!("--after {key}: no job holds the key `{key}`"),
            })
            .into());
        };
        // The holder of this job's own key is the job this push would
        // replace (or return, unchanged): waiting on it would wait on a job
        // the push itself cancels.
        if new.idempotency_key.is_some() && job.idempotency_key == new.idempotency_key {
            return Err(invalid(format!(
                "--after {p}: job #{} holds this job's own key; a job cannot wait on the job it replaces",
                job.id
            ))
            .into());
        }
        if !parents.iter().any(|j| j.id == job.id) {
            parents.push(job);
        }
    }
    Ok(parents)
}

/// **A supersede never strands a workflow.** A push that would supersede
/// `holder` (pending, holding the pushed job's key, with another job) is
/// refused while jobs still wait on it: superseding cancels the holder,
/// and with it, silently, every job waiting on it. The refusal names them
/// and says what to do instead: change the holder in place (`edit`; they
/// keep waiting on it), or cancel it first (they are cancelled with it,
/// and a push with the key is then a new job). A holder that is not
/// pending is not superseded (a running one keeps running and its
/// dependents keep waiting on it), so nothing is refused.
pub fn check_supersede<G: Graph>(g: &mut G, holder: &Job) -> Result<(), G::Error> {
    if holder.state != JobState::Pending {
        return Ok(());
    }
    let mut waiting = Vec::new();
    for child in g.dependents(holder.id)? {
        if g.job(child)?.is_some_and(|c| !c.state.is_terminal()) && !waiting.contains(&child) {
            waiting.push(child);
        }
    }
    if waiting.is_empty() {
        return Ok(());
    }
    waiting.sort_unstable();
    let key = holder.idempotency_key.as_deref().unwrap_or_default();
    let mut names: Vec<String> = waiting.iter().take(5).map(|id| format!("#{id}")).collect();
    if waiting.len() > 5 {
        names.push(format!("{} more", waiting.len() - 5));
    }
    let jobs = names.join(", ");
    let (wait, they, keep, are) = if waiting.len() == 1 {
        ("waits", jobs.as_str(), "keeps", "is")
    } else {
        ("wait", "they", "keep", "are")
    };
    Err(invalid(format!(
        "job #{id} holds the key `{key}` and {jobs} {wait} on it: replacing it would cancel {they}, \
         so nothing was changed. Change #{id} in place (slothqueue edit {id}; {they} {keep} waiting on it), \
         or cancel #{id} first ({they} {are} cancelled with it)",
        id = holder.id,
    ))
    .into())
}

/// The parents of `job` as the store has them now; a parent that is gone
/// (purged after it finished) is left out: it no longer holds anyone up.
pub fn load_parents<G: Graph>(g: &mut G, job: &Job) -> Result<Vec<Job>, G::Error> {
    let mut parents = Vec::with_capacity(job.after.len());
    for id in &job.after {
        if let Some(p) = g.job(*id)? {
            parents.push(p);
        }
    }
    Ok(parents)
}

/// How a job with these parents starts: the count of parents not `done`,
/// and, when one has already failed or been cancelled, the root and the
/// reason it is cancelled at once.
pub(super) fn start_state(parents: &[Job]) -> (u32, Option<(JobId, String)>) {
    let waiting = count_not_done(parents);
    let ended = parents.iter().find(|p| ended(p)).map(|p| (root_of(p), why(p)));
    (waiting, ended)
}

/// An imported job as its parents stand now, never as its file says: its
/// count of parents not `done` recomputed, and a pending one cancelled
/// when a parent has failed or been cancelled, as a push after that parent
/// would be ([`crate::machine::create`]): otherwise it would wait forever.
/// The cancel is a `Cancelled` event on its trail, dated when that parent
/// ended (an import has no clock of its own), and a retry of the root
/// brings the job back as it brings back every job it cancelled.
pub fn restored(job: &Job, events: &mut Vec<Event>, parents: &[Job]) -> Job {
    let (waiting, first_ended) = start_state(parents);
    let mut next = job.clone();
    next.pending_parents = waiting;
    let Some((root, reason)) = first_ended.filter(|_| job.state == JobState::Pending) else {
        return next;
    };
    // The parent `start_state` named, the first ended one.
    let cause = parents.iter().find(|p| ended(p));
    let last = events.iter().map(|e| e.at).max();
    let at =
        cause.and_then(|p| p.finished_at).into_iter().chain(last).max().unwrap_or(job.created_at);
    next.state = JobState::Cancelled;
    next.cancelled_by = Some(root);
    next.last_error = Some(reason.clone());
    next.finished_at = Some(at);
    next.held = None;
    events.push(Event::new(job.id, EventKind::Cancelled, at).saying(reason));
    next
}

/// Whether a user may retry `job` now: not while one of its parents is
/// failed or cancelled (it would only be cancelled again). The refusal
/// names that parent.
pub fn check_retry(job: &Job, parents: &[Job]) -> Result<(), TransitionError> {
    match parents.iter().find(|p| ended(p)) {
        Some(p) => Err(invalid(format!(
            "cannot retry job #{}: it waits on #{}, which is {}; retry #{} instead",
            job.id,
            p.id,
            p.state,
            root_of(p)
        ))),
        None => Ok(()),
    }
}

/// The count of `parents` not `done`, for a job that is (again) pending.
pub fn count_not_done(parents: &[Job]) -> u32 {
    let n = parents.iter().filter(|p| p.state != JobState::Done).count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Every write the transition `before → after` of one job causes: its own
/// first, then the jobs waiting on it, transitively, in id order, each
/// once with its final state and every event it gained. A transition that
/// does not change what dependents see (a heartbeat, a claim, a failure
/// that will be retried) reads nothing and writes only itself.
pub fn plan_with_dependents<G: Graph>(
    g: &mut G,
    before: Job,
    after: Transition,
    now: Timestamp,
) -> Result<Vec<PlannedWrite>, G::Error> {
    if ripple(&before, &after.job).is_none() {
        return Ok(vec![PlannedWrite { before, after }]);
    }
    let mut plan = Plan { writes: BTreeMap::new(), read: BTreeMap::new() };
    let mut todo: BTreeSet<JobId> = BTreeSet::new();
    todo.insert(before.id);
    plan.writes.insert(before.id, PlannedWrite { before, after });
    while let Some(id) = todo.pop_first() {
        let Some(w) = plan.writes.get(&id) else { continue };
        let Some(kind) = ripple(&w.before, &w.after.job) else { continue };
        let parent = w.after.job.clone();
        let mut children = g.dependents(id)?;
        children.sort_unstable();
        children.dedup();
        for child_id in children {
            plan.load(g, child_id)?;
            let Some(child) = plan.get(child_id) else { continue };
            let next = match &kind {
                Ripple::Done => parent_done(child),
                Ripple::Ended { root, old_root } => {
                    parent_ended(child, &parent, *root, *old_root, now)
                }
                // A child's parents are read only when this root's retry
                // brings it back, which happens once: afterwards it is
                // pending, or cancelled under another root. Reading them on
                // every edge into it made a wide fan-in quadratic.
                Ripple::Revived { root } if revivable(child, *root) => {
                    let after = child.after.clone();
                    for p in &after {
                        plan.load(g, *p)?;
                    }
                    let parents: Vec<&Job> = after.iter().filter_map(|p| plan.get(*p)).collect();
                    match plan.get(child_id) {
                        Some(child) => parent_revived(child, &parents, *root, now),
                        None => None,
                    }
                }
                Ripple::Revived { .. } => None,
            };
            if let Some(t) = next {
                plan.record(child_id, t);
                todo.insert(child_id);
            }
        }
    }
    // The job itself first (stores may key their own bookkeeping on it),
    // then its dependents in id order.
    let mut writes: Vec<PlannedWrite> = plan.writes.into_values().collect();
    writes.sort_by_key(|w| w.before.id);
    Ok(writes)
}

/// The writes planned so far, by job (the job as read and as it will be),
/// and the jobs read but not (yet) written. Each job is read from the
/// store at most once per plan and never copied to be looked at, so a plan
/// costs reads and work linear in the jobs and edges it visits.
struct Plan {
    writes: BTreeMap<JobId, PlannedWrite>,
    read: BTreeMap<JobId, Option<Job>>,
}

impl Plan {
    /// Reads job `id` from the store unless the plan has it already.
    fn load<G: Graph>(&mut self, g: &mut G, id: JobId) -> Result<(), G::Error> {
        if !self.writes.contains_key(&id) && !self.read.contains_key(&id) {
            self.read.insert(id, g.job(id)?);
        }
        Ok(())
    }

    /// A loaded job as the plan has it so far: planned, or as read.
    fn get(&self, id: JobId) -> Option<&Job> {
        match self.writes.get(&id) {
            Some(w) => Some(&w.after.job),
            None => self.read.get(&id).and_then(Option::as_ref),
        }
    }

    /// Records `t` (computed from the loaded job's current planned state).
    fn record(&mut self, id: JobId, t: Transition) {
        match self.writes.get_mut(&id) {
            Some(w) => {
                w.after.job = t.job;
                w.after.events.extend(t.events);
            }
            None => {
                if let Some(before) = self.read.remove(&id).flatten() {
                    self.writes.insert(id, PlannedWrite { before, after: t });
                }
            }
        }
    }
}

/// What a job's change means for the jobs waiting on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ripple {
    /// It is done: they wait on one parent fewer.
    Done,
    /// It ended failed or cancelled (or, already cancelled, its root
    /// changed from `old_root`): pending dependents end too, and those
    /// cancelled under `old_root` now name `root`.
    Ended { root: JobId, old_root: Option<JobId> },
    /// It came back from failed or cancelled under `root`: the dependents
    /// `root` cancelled come back too.
    Revived { root: JobId },
}

fn ripple(before: &Job, after: &Job) -> Option<Ripple> {
    use JobState::*;
    match (before.state, after.state) {
        (Pending | Running, Done) => Some(Ripple::Done),
        (Pending | Running, Failed | Cancelled) => {
            Some(Ripple::Ended { root: root_of(after), old_root: None })
        }
        (Cancelled, Cancelled) if before.cancelled_by != after.cancelled_by => {
            Some(Ripple::Ended { root: root_of(after), old_root: Some(root_of(before)) })
        }
        (Failed | Cancelled, Pending) => Some(Ripple::Revived { root: root_of(before) }),
        _ => None,
    }
}

/// The job whose failure a failed or cancelled job stands for: the one
/// that cancelled it, or itself.
fn root_of(job: &Job) -> JobId {
    job.cancelled_by.unwrap_or(job.id)
}

fn ended(job: &Job) -> bool {
    matches!(job.state, JobState::Failed | JobState::Cancelled)
}

/// Why a dependent of `parent` (failed or cancelled) is cancelled: the
/// parent's own reason when it was cancelled for a dependency, so every
/// job down a chain names the root.
fn why(parent: &Job) -> String {
    match (parent.cancelled_by, &parent.last_error) {
        (Some(_), Some(reason)) => reason.clone(),
        _ => format!("dependency #{} {}", parent.id, parent.state),
    }
}

fn parent_done(child: &Job) -> Option<Transition> {
    if child.state != JobState::Pending || child.pending_parents == 0 {
        return None;
    }
    let mut next = child.clone();
    next.pending_parents -= 1;
    Some(Transition { job: next, events: Vec::new() })
}

fn parent_ended(
    child: &Job,
    parent: &Job,
    root: JobId,
    old_root: Option<JobId>,
    now: Timestamp,
) -> Option<Transition> {
    let reason = why(parent);
    let mut next = child.clone();
    match child.state {
        JobState::Pending => {
            next.state = JobState::Cancelled;
            next.cancelled_by = Some(root);
            next.last_error = Some(reason.clone());
            next.finished_at = Some(now);
            // Only a pending job is held (`check_restore` refuses any other).
            next.held = None;
            let event = Event::new(child.id, EventKind::Cancelled, now).saying(reason);
            Some(Transition { job: next, events: vec![event] })
        }
        JobState::Cancelled if old_root.is_some() && child.cancelled_by == old_root => {
            next.cancelled_by = Some(root);
            next.last_error = Some(reason);
            Some(Transition { job: next, events: Vec::new() })
        }
        _ => None,
    }
}

/// Whether `root`'s retry brings `child` back (it was cancelled by it).
fn revivable(child: &Job, root: JobId) -> bool {
    child.state == JobState::Cancelled && child.cancelled_by == Some(root)
}

fn parent_revived(
    child: &Job,
    parents: &[&Job],
    root: JobId,
    now: Timestamp,
) -> Option<Transition> {
    if !revivable(child, root) {
        return None;
    }
    let mut next = child.clone();
    // A parent cancelled under the same root is being revived by this very
    // plan (it is an ancestor's dependent too); any other ended parent
    // holds the job back, and becomes its root.
    let blocker = parents.iter().find(|p| ended(p) && p.cancelled_by != Some(root));
    if let Some(p) = blocker {
        next.cancelled_by = Some(root_of(p));
        next.last_error = Some(why(p));
        return Some(Transition { job: next, events: Vec::new() });
    }
    next.state = JobState::Pending;
    let waiting = parents.iter().filter(|p| p.state != JobState::Done).count();
    next.pending_parents = u32::try_from(waiting).unwrap_or(u32::MAX);
    next.attempts = 0;
    next.cancelled_by = None;
    next.last_error = None;
    next.finished_at = None;
    next.not_before = now;
    let event =
        Event::new(child.id, EventKind::Retried, now).saying(format!("dependency #{root} retried"));
    Some(Transition { job: next, events: vec![event] })
}

/// Which of `candidates` (terminal jobs, and pending ones when asked) a
/// purge may delete: every terminal one; a pending one only if no job
/// still pending or running, and not deleted with it, waits on it (it
/// would wait forever). Returns their ids.
pub fn plan_purge<G: Graph>(g: &mut G, candidates: &[Job]) -> Result<Vec<JobId>, G::Error> {
    // Dependents have higher ids: deciding from the highest down, each
    // pending job's dependents are already decided.
    let mut order: Vec<&Job> = candidates.iter().collect();
    order.sort_by_key(|j| std::cmp::Reverse(j.id));
    let mut deleting: BTreeSet<JobId> = BTreeSet::new();
    for job in order {
        if job.state == JobState::Pending {
            let mut held = false;
            for child in g.dependents(job.id)? {
                if deleting.contains(&child) {
                    continue;
                }
                if g.job(child)?.is_some_and(|c| !c.state.is_terminal()) {
                    held = true;
                    break;
                }
            }
            if held {
                continue;
            }
        } else if job.state == JobState::Running {
            continue;
        }
        deleting.insert(job.id);
    }
    Ok(deleting.into_iter().collect())
}

/// The unfinished jobs a cancel of `job` ends with it, transitively, as
/// they are now, lowest id first: the dependents [`plan_with_dependents`]
/// cancels when `job` ends cancelled. A pending job ends at the cancel
/// ([`super::cancel`]); a running one only when its runner has stopped it,
/// and then as cancelled, which this plans now. A finished job takes
/// nothing (its cancel is refused). Nothing is written: a face asks this
/// before it offers the cancel.
pub fn cancel_takes<G: Graph>(g: &mut G, job: &Job, now: Timestamp) -> Result<Vec<Job>, G::Error> {
    let ending = match job.state {
        JobState::Pending => super::cancel(job, now)?,
        JobState::Running => {
            let mut ended = job.clone();
            ended.state = JobState::Cancelled;
            ended.lease = None;
            ended.finished_at = Some(now);
            Transition { job: ended, events: Vec::new() }
        }
        JobState::Done | JobState::Failed | JobState::Cancelled => return Ok(Vec::new()),
    };
    let writes = plan_with_dependents(g, job.clone(), ending, now)?;
    Ok(writes
        .into_iter()
        .filter(|w| {
            w.before.id != job.id
                && !w.before.state.is_terminal()
                && w.after.job.state == JobState::Cancelled
        })
        .map(|w| w.before)
        .collect())
}

fn invalid(m: String) -> TransitionError {
    TransitionError::InvalidJob(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{self, Completion, Failure};
    use crate::policy::Policy;
    use crate::{Lease, Owner};

    const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

    /// A store made of a map: what the rule reads, with the plan written
    /// back after each step, as a store's transaction would.
    #[derive(Default)]
    struct Mem {
        jobs: BTreeMap<JobId, Job>,
        /// Rows read through the graph (jobs and dependents lists).
        reads: usize,
    }

    impl Graph for Mem {
        type Error = TransitionError;
        fn job(&mut self, id: JobId) -> Result<Option<Job>, TransitionError> {
            self.reads += 1;
            Ok(self.jobs.get(&id).cloned())
        }
        fn key_holder(&mut self, key: &str) -> Result<Option<Job>, TransitionError> {
            Ok(self.jobs.values().find(|j| j.idempotency_key.as_deref() == Some(key)).cloned())
        }
        fn dependents(&mut self, id: JobId) -> Result<Vec<JobId>, TransitionError> {
            self.reads += 1;
            Ok(self.jobs.values().filter(|j| j.after.contains(&id)).map(|j| j.id).collect())
        }
    }

    impl Mem {
        fn push(&mut self, new: NewJob) -> JobId {
            let id = self.jobs.len() as JobId + 1;
            let parents = resolve_parents(self, &new).expect("parents exist");
            let t = machine::create(id, &new, &parents, T0, &Policy::default());
            self.jobs.insert(id, t.job);
            id
        }

        fn apply(&mut self, id: JobId, f: impl FnOnce(&Job) -> Transition) -> Vec<PlannedWrite> {
            let before = self.jobs[&id].clone();
            let t = f(&before);
            let plan = plan_with_dependents(self, before, t, T0).expect("plan");
            for w in &plan {
                self.jobs.insert(w.after.job.id, w.after.job.clone());
            }
            plan
        }

        fn run(&mut self, id: JobId, ok: bool) -> Vec<PlannedWrite> {
            let owner = Owner::named("w");
            let p = Policy::default();
            let running =
                match machine::claim(&self.jobs[&id], &owner, T0, &p, crate::Liveness::Unknown) {
                    Ok(crate::ClaimOutcome::Claimed(t)) => t.job,
                    other => panic!("#{id} not claimable: {other:?}"),
                };
            self.jobs.insert(id, running);
            let fence = self.jobs[&id].lease.as_ref().map(Lease::fence).expect("lease");
            self.apply(id, |j| {
                if ok {
                    machine::complete(j, &fence, &Completion::default(), T0).expect("complete")
                } else {
                    let mut j = j.clone();
                    j.attempts = j.max_attempts;
                    let f = Failure { error: "boom".into(), exit_code: Some(1), permanent: false };
                    machine::fail(&j, &fence, &f, T0, &p).expect("fail")
                }
            })
        }

        fn state(&self, id: JobId) -> (JobState, u32, Option<JobId>) {
            let j = &self.jobs[&id];
            (j.state, j.pending_parents, j.cancelled_by)
        }

        fn retry(&mut self, id: JobId) -> Vec<PlannedWrite> {
            let job = self.jobs[&id].clone();
            let parents = load_parents(self, &job).expect("parents");
            check_retry(&job, &parents).expect("retry allowed");
            self.apply(id, |j| machine::retry(j, &parents, T0).expect("retry"))
        }
    }

    fn shell(cmd: &str) -> NewJob {
        NewJob::shell(cmd, "/")
    }

    #[test]
    fn a_chain_becomes_due_step_by_step() {
        let mut m = Mem::default();
        let a = m.push(shell("a").key("a"));
        let b = m.push(shell("b").after("a"));
        let c = m.push(shell("c").after(b));
        assert_eq!(m.state(b), (JobState::Pending, 1, None));
        assert!(!m.jobs[&b].is_due(T0) && m.jobs[&a].is_due(T0));
        m.run(a, true);
        assert!(m.jobs[&b].is_due(T0));
        assert_eq!(m.state(c), (JobState::Pending, 1, None));
        m.run(b, true);
        assert!(m.jobs[&c].is_due(T0));
    }

    #[test]
    fn a_failure_cancels_down_the_chain_and_a_retry_brings_it_back() {
        let mut m = Mem::default();
        let a = m.push(shell("a"));
        let b = m.push(shell("b").after(a));
        let c = m.push(shell("c").after(b));
        let plan = m.run(a, false);
        assert_eq!(plan.iter().map(|w| w.before.id).collect::<Vec<_>>(), vec![a, b, c]);
        for id in [b, c] {
            assert_eq!(m.state(id), (JobState::Cancelled, 1, Some(a)));
            assert_eq!(m.jobs[&id].last_error.as_deref(), Some("dependency #1 failed"));
        }
        assert_eq!(plan[2].after.events[0].kind, EventKind::Cancelled);
        let err = check_retry(&m.jobs[&c], &[m.jobs[&b].clone()]).unwrap_err();
        assert!(err.to_string().contains("retry #1 instead"), "{err}");
        m.retry(a);
        assert_eq!(m.state(b), (JobState::Pending, 1, None));
        assert_eq!(m.state(c), (JobState::Pending, 1, None));
        assert_eq!(m.jobs[&c].last_error, None);
    }

    #[test]
    fn a_diamond_is_decided_once_its_parents_are() {
        let mut m = Mem::default();
        let p = m.push(shell("p"));
        let a = m.push(shell("a").after(p));
        let b = m.push(shell("b").after(p));
        let c = m.push(shell("c").after(a).after(b));
        assert_eq!(m.state(c).1, 2);
        m.run(p, false);
        assert_eq!(m.state(c), (JobState::Cancelled, 2, Some(p)));
        m.retry(p);
        assert_eq!(m.state(c), (JobState::Pending, 2, None));
        m.run(p, true);
        m.run(a, true);
        assert_eq!(m.state(c).1, 1);
        m.run(b, true);
        assert!(m.jobs[&c].is_due(T0));
    }

    #[test]
    fn another_failed_parent_becomes_the_root() {
        let mut m = Mem::default();
        let p = m.push(shell("p"));
        let q = m.push(shell("q"));
        let c = m.push(shell("c").after(p).after(q));
        let d = m.push(shell("d").after(c));
        m.run(p, false);
        m.run(q, false);
        assert_eq!(m.state(c), (JobState::Cancelled, 2, Some(p)), "already cancelled by #1");
        m.retry(p);
        assert_eq!(m.state(c), (JobState::Cancelled, 2, Some(q)), "#2 holds it back now");
        assert_eq!(m.state(d).2, Some(q), "and its dependents follow");
        m.retry(q);
        assert_eq!(m.state(c).0, JobState::Pending);
        assert_eq!(m.state(d), (JobState::Pending, 1, None));
    }

    #[test]
    fn a_job_added_after_a_failed_parent_starts_cancelled() {
        let mut m = Mem::default();
        let a = m.push(shell("a"));
        m.run(a, false);
        let b = m.push(shell("b").after(a));
        assert_eq!(m.state(b), (JobState::Cancelled, 1, Some(a)));
        let done = m.push(shell("d"));
        m.run(done, true);
        let e = m.push(shell("e").after(done));
        assert!(m.jobs[&e].is_due(T0), "a done parent holds nobody up");
    }

    #[test]
    fn unknown_parents_are_refused_by_name() {
        let mut m = Mem::default();
        let e = resolve_parents(&mut m, &shell("x").after(9)).unwrap_err();
        assert_eq!(e.to_string(), "invalid job: --after 9: no job #9");
        let e = resolve_parents(&mut m, &shell("x").after("build")).unwrap_err();
        assert!(e.to_string().contains("no job holds the key `build`"), "{e}");
    }

    #[test]
    fn a_job_cannot_wait_on_the_job_it_replaces() {
        let mut m = Mem::default();
        let old = m.push(shell("v1").key("k"));
        for parent in [Parent::Key("k".into()), Parent::Id(old)] {
            let e = resolve_parents(&mut m, &shell("v2").key("k").after(parent)).unwrap_err();
            assert!(e.to_string().contains("cannot wait on the job it replaces"), "{e}");
        }
        assert!(resolve_parents(&mut m, &shell("other").key("j").after("k")).is_ok());
    }

    #[test]
    fn a_user_cancel_is_not_undone_by_the_parents_retry() {
        let mut m = Mem::default();
        let a = m.push(shell("a"));
        let b = m.push(shell("b").after(a));
        m.apply(b, |j| machine::cancel(j, T0).expect("cancel"));
        m.run(a, false);
        m.retry(a);
        assert_eq!(m.state(b), (JobState::Cancelled, 1, None));
    }

    #[test]
    fn purge_keeps_a_pending_parent_someone_waits_on() {
        let mut m = Mem::default();
        let a = m.push(shell("a"));
        let b = m.push(shell("b").after(a));
        let c = m.push(shell("c"));
        let (ja, jb, jc) = (m.jobs[&a].clone(), m.jobs[&b].clone(), m.jobs[&c].clone());
        let only_c = plan_purge(&mut m, &[ja.clone(), jc]).unwrap();
        assert_eq!(only_c, vec![c]);
        let both = plan_purge(&mut m, &[ja, jb]).unwrap();
        assert_eq!(both, vec![a, b]);
    }

    /// A failed root whose dependents feed wide fan-ins, each also waiting
    /// on finished jobs: cancelling and retrying it reads each job and
    /// each dependents list a bounded number of times, however wide the
    /// fan-in (linear in jobs plus edges). Reading a fan-in's parents on
    /// every edge into it read n² rows.
    #[test]
    fn a_retry_through_wide_fan_ins_reads_linearly() {
        const FAN_INS: usize = 4;
        const WIDTH: usize = 200;
        let mut m = Mem::default();
        let root = m.push(shell("root"));
        let mut joins = Vec::new();
        for _ in 0..FAN_INS {
            let mut join = shell("join");
            for i in 0..WIDTH {
                let mid = m.push(shell(&format!("mid {i}")).after(root));
                let done = m.push(shell(&format!("done {i}")));
                m.run(done, true);
                join = join.after(mid).after(done);
            }
            joins.push(m.push(join));
        }
        let jobs = m.jobs.len();
        let edges: usize = m.jobs.values().map(|j| j.after.len()).sum();
        let bound = 4 * (jobs + edges);

        m.reads = 0;
        m.run(root, false);
        let cancelling = m.reads;
        m.reads = 0;
        m.retry(root);
        let retrying = m.reads;
        for &j in &joins {
            assert_eq!(m.state(j), (JobState::Pending, WIDTH as u32, None));
        }
        assert!(cancelling <= bound, "cancel read {cancelling} rows; bound {bound}");
        assert!(retrying <= bound, "retry read {retrying} rows; bound {bound}");
    }

    /// A pending key holder that jobs wait on is not superseded (the push
    /// is refused, naming them); once nothing waits on it, or it runs, the
    /// push goes through. A superseded job's retry is refused, naming its
    /// replacement.
    #[test]
    fn a_supersede_never_strands_a_workflow() {
        let mut m = Mem::default();
        let old = m.push(shell("v1").key("k"));
        let child = m.push(shell("notify").after("k"));
        let holder = m.jobs[&old].clone();
        let e = check_supersede(&mut m, &holder).unwrap_err();
        let e = e.to_string();
        assert!(e.contains(&format!("#{child} waits on it")), "{e}");
        assert!(e.contains(&format!("slothqueue edit {old}")), "{e}");
        m.apply(child, |j| machine::cancel(j, T0).expect("cancel"));
        assert!(check_supersede(&mut m, &holder).is_ok(), "nothing waits now");

        let holder = m.jobs[&old].clone();
        let new = shell("v2").key("k");
        let replaced = match machine::plan_push(&new, Some(&holder), 9, T0) {
            machine::PushPlan::Insert { displaced: Some(t), superseded: Some(_) } => t.job,
            other => panic!("{other:?}"),
        };
        assert_eq!(machine::superseded_by(&replaced), Some(9));
        let e = machine::retry(&replaced, &[], T0).unwrap_err().to_string();
        assert!(e.contains("superseded by #9") && e.contains("Retry #9"), "{e}");
    }

    #[test]
    fn a_cancel_takes_what_its_ending_cancels_and_writes_nothing() {
        let mut m = Mem::default();
        let a = m.push(shell("a"));
        let b = m.push(shell("b").after(a));
        let c = m.push(shell("c").after(b));
        let other = m.push(shell("other"));
        let d = m.push(shell("d").after(other).after(b));
        let before = m.jobs.clone();
        let ids = |jobs: Vec<Job>| jobs.into_iter().map(|j| j.id).collect::<Vec<_>>();
        assert_eq!(ids(cancel_takes(&mut m, &before[&a], T0).expect("plan")), [b, c, d]);
        assert_eq!(m.jobs, before, "nothing written");
        assert_eq!(ids(cancel_takes(&mut m, &before[&other], T0).expect("plan")), [d]);
        assert_eq!(ids(cancel_takes(&mut m, &before[&c], T0).expect("plan")), Vec::<JobId>::new());

        // Running: what its cancelled ending will take, the same jobs.
        let mut running = before[&a].clone();
        running.state = JobState::Running;
        assert_eq!(ids(cancel_takes(&mut m, &running, T0).expect("plan")), [b, c, d]);

        // What the cancel then does, and a finished job takes nothing.
        m.apply(a, |j| machine::cancel(j, T0).expect("cancel"));
        for id in [b, c, d] {
            assert_eq!(m.state(id).0, JobState::Cancelled, "#{id}");
        }
        let cancelled = m.jobs[&a].clone();
        assert_eq!(cancel_takes(&mut m, &cancelled, T0).expect("plan"), []);
    }
}
