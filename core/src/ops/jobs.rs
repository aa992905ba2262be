//! The operations on jobs other than the claim: the push path (and the
//! clone that goes through it), the one-job transitions of owners and
//! users, the sweep's reclaim, purge and restore. Each runs inside one
//! write transaction of the backend ([`Tx`]).

use std::collections::BTreeMap;

use crate::job::{Event, Fence, Job, JobId, JobState, NewJob};
use crate::lane::Stamp;
use crate::machine::{
    self, AttemptNote, Completion, Failure, HeartbeatAck, JobEdit, PushPlan, Settlement, Transition,
};
use crate::policy::Policy;
use crate::store::{JobSource, PurgeFilter, Pushed, PushedId, StoreError};
use crate::time::Timestamp;

use super::{Tx, get, in_batch, write};

/// Adds jobs, all or none: each checked ([`machine::validate`]), then
/// pushed in order, so a job may name as parents jobs earlier in the
/// batch. A refused element is [`StoreError::InBatch`] naming it.
pub fn push_many<T: Tx>(
    tx: &mut T,
    jobs: &[NewJob],
    now: Timestamp,
    policy: &Policy,
) -> Result<Vec<Pushed>, T::Error> {
    for (index, job) in jobs.iter().enumerate() {
        machine::validate(job)
            .map_err(|e| StoreError::InBatch { index, error: Box::new(e.into()) })?;
    }
    tx.catch_up(now)?;
    let mut next = tx.next_id()?;
    jobs.iter()
        .enumerate()
        .map(|(i, j)| push_one(tx, j, now, policy, &mut next).map_err(in_batch(i)))
        .collect()
}

/// Adds the jobs `source` makes, all or none, one at a time: each checked
/// ([`machine::validate`]) and pushed as it comes, so a job may name as
/// parents jobs earlier in the stream, and only its [`PushedId`] is kept.
/// A refused element, or an `Err` of the source, is
/// [`StoreError::InBatch`] naming it; the caller's transaction then
/// writes nothing.
///
/// Unlike [`push_many`], an element is checked when it comes, so the
/// refusal named is the first element that fails any check (push_many
/// checks every element before pushing any).
pub fn push_stream<T: Tx>(
    tx: &mut T,
    source: &dyn JobSource,
    now: Timestamp,
    policy: &Policy,
) -> Result<Vec<PushedId>, T::Error> {
    tx.catch_up(now)?;
    let mut next = tx.next_id()?;
    let mut pushed = Vec::new();
    for (index, job) in source.jobs().enumerate() {
        let refused = |e: StoreError| StoreError::InBatch { index, error: Box::new(e) };
        let job = job.map_err(refused)?;
        machine::validate(&job).map_err(|e| refused(e.into()))?;
        let one = push_one(tx, &job, now, policy, &mut next).map_err(in_batch(index))?;
        pushed.push(PushedId::from(&one));
    }
    Ok(pushed)
}

/// One job of a push (every push, clone and schedule tick goes through
/// here): its parents looked up (refused when one is unknown, also for a
/// duplicate), the key's holder displaced if need be (a pending holder
/// that jobs wait on is not: [`machine::check_supersede`] refuses the
/// push, naming them), then the job created
/// from its parents **as they are after that** (the displaced holder may
/// be one of them, just cancelled). `next` is the id it gets if created,
/// counted up.
pub(super) fn push_one<T: Tx>(
    tx: &mut T,
    new: &NewJob,
    now: Timestamp,
    policy: &Policy,
    next: &mut JobId,
) -> Result<Pushed, T::Error> {
    let mut parents = machine::resolve_parents(tx, new)?;
    let holder = match &new.idempotency_key {
        Some(key) => tx.key_holder(key)?,
        None => None,
    };
    let id = *next;
    match machine::plan_push(new, holder.as_ref(), id, now) {
        PushPlan::Duplicate(existing) => {
            let job = match holder.filter(|h| h.id == existing) {
                Some(h) => h,
                None => get(tx, existing)?,
            };
            Ok(Pushed { job, created: false, superseded: None })
        }
        PushPlan::Insert { displaced, superseded } => {
            if let (Some(_), Some(old)) = (superseded, holder.as_ref()) {
                machine::check_supersede(tx, old)?;
            }
            if let (Some(t), Some(old)) = (displaced, holder) {
                write(tx, old, *t, now)?;
                parents = parents.iter().map(|p| get(tx, p.id)).collect::<Result<_, _>>()?;
            }
            let t = machine::create(id, new, &parents, now, policy);
            tx.insert(&t.job, &t.events)?;
            *next += 1;
            Ok(Pushed { job: t.job, created: true, superseded })
        }
    }
}

/// A clone: the original read (`NotFound` if gone), the new job built by
/// [`machine::clone_of`] and pushed through the path every push takes,
/// then the two events tying the trails together. It has no key and no
/// parents, so the push always creates.
pub fn clone_job<T: Tx>(
    tx: &mut T,
    id: JobId,
    edit: &JobEdit,
    now: Timestamp,
    policy: &Policy,
) -> Result<Job, T::Error> {
    let original = get(tx, id)?;
    let new = machine::clone_of(&original, edit)?;
    let mut next = tx.next_id()?;
    let pushed = push_one(tx, &new, now, policy, &mut next)?;
    tx.append(&machine::cloned_events(original.id, pushed.job.id, now))?;
    Ok(pushed.job)
}

/// One user- or owner-side transition on one job: read, decided by
/// `decide` (which may read the graph, as a retry its parents), written
/// with what it causes to the jobs waiting on it.
fn transition<T: Tx>(
    tx: &mut T,
    id: JobId,
    now: Timestamp,
    decide: impl FnOnce(&mut T, &Job) -> Result<Transition, T::Error>,
) -> Result<Job, T::Error> {
    let job = get(tx, id)?;
    let t = decide(tx, &job)?;
    let written = write(tx, job, t, now)?;
    if written.state == JobState::Done {
        crate::failpoint::hit("mid_complete"); // written, not committed
    }
    Ok(written)
}

/// Extends the lease held under `fence` ([`machine::heartbeat`]).
pub fn heartbeat<T: Tx>(
    tx: &mut T,
    id: JobId,
    fence: &Fence,
    child_pgid: Option<i32>,
    now: Timestamp,
    policy: &Policy,
) -> Result<HeartbeatAck, T::Error> {
    let job = get(tx, id)?;
    let (t, ack) = machine::heartbeat(&job, fence, now, policy, child_pgid)?;
    write(tx, job, t, now)?;
    Ok(ack)
}

/// The owner's end of an attempt, as `complete` or `fail`
/// ([`machine::settle`]).
pub fn settle<T: Tx>(
    tx: &mut T,
    id: JobId,
    fence: &Fence,
    settlement: &Settlement,
    now: Timestamp,
    policy: &Policy,
) -> Result<Job, T::Error> {
    transition(tx, id, now, |_, job| Ok(machine::settle(job, fence, settlement, now, policy)?))
}

/// Marks the job done ([`machine::complete`]).
pub fn complete<T: Tx>(
    tx: &mut T,
    id: JobId,
    fence: &Fence,
    done: &Completion,
    now: Timestamp,
) -> Result<Job, T::Error> {
    transition(tx, id, now, |_, job| Ok(machine::complete(job, fence, done, now)?))
}

/// Records a failed attempt ([`machine::fail`]).
pub fn fail<T: Tx>(
    tx: &mut T,
    id: JobId,
    fence: &Fence,
    failure: &Failure,
    now: Timestamp,
    policy: &Policy,
) -> Result<Job, T::Error> {
    transition(tx, id, now, |_, job| Ok(machine::fail(job, fence, failure, now, policy)?))
}

/// Hands the job back without charging the attempt ([`machine::release`]).
pub fn release<T: Tx>(
    tx: &mut T,
    id: JobId,
    fence: &Fence,
    now: Timestamp,
) -> Result<Job, T::Error> {
    transition(tx, id, now, |_, job| Ok(machine::release(job, fence, now)?))
}

/// Notes a suspend or resume on the attempt ([`machine::note_attempt`]).
pub fn note_attempt<T: Tx>(
    tx: &mut T,
    id: JobId,
    fence: &Fence,
    note: &AttemptNote,
    now: Timestamp,
) -> Result<Job, T::Error> {
    transition(tx, id, now, |_, job| Ok(machine::note_attempt(job, fence, note, now)?))
}

/// Holds a pending job ([`machine::hold`]).
pub fn hold<T: Tx>(tx: &mut T, id: JobId, stamp: Stamp, now: Timestamp) -> Result<Job, T::Error> {
    transition(tx, id, now, |_, job| Ok(machine::hold(job, stamp, now)?))
}

/// Releases a held job ([`machine::release_hold`]).
pub fn release_hold<T: Tx>(
    tx: &mut T,
    id: JobId,
    by: &str,
    now: Timestamp,
) -> Result<Job, T::Error> {
    transition(tx, id, now, |_, job| Ok(machine::release_hold(job, by, now)?))
}

/// Changes a pending job in one fenced write ([`machine::edit`]).
pub fn edit<T: Tx>(tx: &mut T, id: JobId, edit: &JobEdit, now: Timestamp) -> Result<Job, T::Error> {
    transition(tx, id, now, |_, job| Ok(machine::edit(job, edit, now)?))
}

/// Cancels a pending job or flags a running one ([`machine::cancel`]).
pub fn cancel<T: Tx>(tx: &mut T, id: JobId, now: Timestamp) -> Result<Job, T::Error> {
    transition(tx, id, now, |_, job| Ok(machine::cancel(job, now)?))
}

/// Puts a failed or cancelled job back, and the jobs its failure
/// cancelled ([`machine::retry`], from its parents as they are now).
pub fn retry<T: Tx>(tx: &mut T, id: JobId, now: Timestamp) -> Result<Job, T::Error> {
    transition(tx, id, now, |tx, job| {
        let parents = machine::load_parents(tx, job)?;
        Ok(machine::retry(job, &parents, now)?)
    })
}

/// Takes back exactly these attempts ([`machine::reclaim_dead`]); jobs
/// gone or moved on are skipped. Returns the jobs as they were before.
pub fn reclaim_dead<T: Tx>(
    tx: &mut T,
    attempts: &[(JobId, Fence)],
    now: Timestamp,
) -> Result<Vec<Job>, T::Error> {
    let mut taken = Vec::new();
    for (id, attempt) in attempts {
        let Some(job) = tx.job(*id)? else { continue };
        if let Some(t) = machine::reclaim_dead(&job, attempt, now) {
            write(tx, job.clone(), t, now)?;
            taken.push(job);
        }
    }
    Ok(taken)
}

/// Deletes the jobs the filter names ([`PurgeFilter::admits`]) that
/// [`machine::plan_purge`] lets go (not a pending job that a job left
/// behind still waits on), each with its trail. Returns their ids, lowest
/// first.
pub fn purge<T: Tx>(tx: &mut T, filter: &PurgeFilter) -> Result<Vec<JobId>, T::Error> {
    let mut candidates = tx.jobs_in(filter.states())?;
    candidates.retain(|j| filter.admits(j));
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let ids = machine::plan_purge(tx, &candidates)?;
    // Both lists are in id order.
    let mut deleting = ids.iter().peekable();
    candidates.retain(|j| deleting.next_if_eq(&&j.id).is_some());
    if !candidates.is_empty() {
        tx.delete(&candidates)?;
    }
    Ok(ids)
}

/// Writes every job of an import with its trail, all or nothing, each
/// checked on its own ([`machine::check_restore`]) and then against the
/// queue as this transaction sees it, so an id or key restored earlier in
/// the same batch counts as taken. A refusal is [`StoreError::InBatch`]
/// naming the element.
///
/// **Dependency counts are recomputed, never trusted**: each job's
/// `pending_parents` is the count of its parents not `done`, each parent
/// as the file has it (in any order) or else as the queue has it. A file
/// saying `0` for a child whose parent is pending would otherwise import
/// it due now, to run before its parent. A pending or running job naming a
/// parent in neither the file nor the queue is refused (it would wait
/// forever); a finished job's parents no longer matter, and are left as
/// named.
pub fn restore_many<T: Tx>(tx: &mut T, jobs: &[(Job, Vec<Event>)]) -> Result<(), T::Error> {
    let in_file: BTreeMap<JobId, &Job> = jobs.iter().map(|(j, _)| (j.id, j)).collect();
    jobs.iter().enumerate().try_for_each(|(i, (job, events))| {
        restore_one(tx, job, events, &in_file).map_err(in_batch(i))
    })
}

/// **The restore conflicts**: the id free, the key held by no job; then
/// the job as its parents stand ([`machine::restored`]): its count of
/// parents not done from the parents themselves, and a pending job whose
/// parent failed or was cancelled cancelled with it.
fn restore_one<T: Tx>(
    tx: &mut T,
    job: &Job,
    events: &[Event],
    in_file: &BTreeMap<JobId, &Job>,
) -> Result<(), T::Error> {
    machine::check_restore(job, events)?;
    let invalid = |m: String| Err(StoreError::InvalidInput(m).into());
    if tx.job(job.id)?.is_some() {
        return invalid(format!("job #{} already exists", job.id));
    }
    if let Some(key) = &job.idempotency_key {
        if let Some(holder) = tx.key_holder(key)? {
            return invalid(format!(
                "job #{}: idempotency key `{key}` is already held by job #{}",
                job.id, holder.id
            ));
        }
    }
    // A parent named twice is waited on once, as at push.
    let ids: std::collections::BTreeSet<JobId> = job.after.iter().copied().collect();
    let mut parents = Vec::with_capacity(ids.len());
    for p in ids {
        match in_file.get(&p) {
            Some(parent) => parents.push((*parent).clone()),
            None => match tx.job(p)? {
                Some(parent) => parents.push(parent),
                None if job.state.is_terminal() => {}
                None => {
                    return invalid(format!(
                        "job #{}: it waits on job #{p}, which is in neither the file nor the queue \
                         (it would wait forever); add #{p} to the file, or import into the queue that holds it",
                        job.id
                    ));
                }
            },
        }
    }
    let mut trail = events.to_vec();
    let restored = machine::restored(job, &mut trail, &parents);
    tx.insert(&restored, &trail)
}
