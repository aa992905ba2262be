//! The claim as an operation: the running jobs and the lanes read, the due
//! jobs pulled from the store in claim order only as far as
//! [`machine::plan_claim_in_order`] needs them, and its plan written; and
//! the settle that claims the next job in the same transaction.

use std::collections::{BTreeSet, VecDeque};

use crate::job::{Fence, Job, JobId};
use crate::machine::{self, ClaimRequest, Claimed, LaneCheck, Settlement};
use crate::policy::Policy;
use crate::store::SettledAndClaimed;
use crate::time::Timestamp;

use super::{ClaimCursor, DueScope, Tx, jobs, write};

/// How many due jobs the first pull asks for: the first admitted job is
/// almost always the first the store finds (what it pushes down), so a
/// claim costs what one `LIMIT 1` search does. Later pulls ask for
/// [`BATCH_GROWTH`] times more, up to [`MAX_BATCH`].
const FIRST_BATCH: usize = 1;
const BATCH_GROWTH: usize = 8;
const MAX_BATCH: usize = 256;

/// One claim, as [`machine::plan_claim_in_order`] decides it from the
/// running jobs, the lanes and the due jobs, all read inside this
/// transaction, so a limit holds across every claimer (the backend's
/// transaction makes claims one after the other, or locks what they read).
/// A retired job's end reaches the jobs waiting on it ([`write()`]); the job
/// taken is due, so it waits on nobody whom a retirement could end.
pub fn claim<T: Tx>(
    tx: &mut T,
    request: &ClaimRequest,
    now: Timestamp,
    policy: &Policy,
) -> Result<Option<Claimed>, T::Error> {
    tx.catch_up(now)?;
    let running = tx.running()?;
    let lanes = LaneCheck::new(tx.lanes()?, &running);
    let plan = {
        let due = match scope(request, &lanes, now) {
            Some(scope) => DueJobs::new(tx, scope),
            None => DueJobs::none(tx),
        };
        machine::plan_claim_in_order(request, &lanes, running, due, now, policy)?
    };
    let claimed = plan.claimed();
    for w in plan.retire.into_iter().chain(plan.take) {
        write(tx, w.before, w.after, now)?;
    }
    Ok(claimed)
}

/// Settles the attempt held under `fence` ([`jobs::settle`]) and claims
/// the next job for `next.owner` ([`claim`]) in the same transaction: the
/// claim sees the settle's writes, so a dependent it made due may be
/// taken. A refused settle refuses the whole.
pub fn settle_and_claim<T: Tx>(
    tx: &mut T,
    id: JobId,
    fence: &Fence,
    settlement: &Settlement,
    next: &ClaimRequest,
    now: Timestamp,
    policy: &Policy,
) -> Result<SettledAndClaimed, T::Error> {
    tx.catch_up(now)?;
    let settled = jobs::settle(tx, id, fence, settlement, now, policy)?;
    let next = claim(tx, next, now, policy)?;
    Ok(SettledAndClaimed { settled, next })
}

/// What the store may push down, or `None` when no pending job can be
/// taken at all: every queue paused, a filter of no kinds, or only queues
/// whose lanes are closed.
fn scope<'a>(
    request: &'a ClaimRequest,
    lanes: &'a LaneCheck,
    now: Timestamp,
) -> Option<DueScope<'a>> {
    if lanes.all_paused() {
        return None;
    }
    let kinds = match &request.filter.kinds {
        Some(ks) if ks.is_empty() => return None,
        Some(ks) => Some(ks.as_slice()),
        None => None,
    };
    let closed: BTreeSet<&str> = lanes.closed_queues().collect();
    let queues = if request.filter.queues.is_empty() {
        None
    } else {
        let mut qs: Vec<&str> = request.filter.queues.iter().map(String::as_str).collect();
        qs.sort_unstable();
        qs.dedup();
        qs.retain(|q| !closed.contains(q));
        if qs.is_empty() {
            return None;
        }
        Some(qs)
    };
    Some(DueScope { now, queues, closed, kinds })
}

/// The due jobs in claim order, pulled from the store in growing batches
/// as the claim rule asks for the next one.
struct DueJobs<'t, 's, T: Tx> {
    tx: &'t mut T,
    scope: Option<DueScope<'s>>,
    buffer: VecDeque<Job>,
    last: Option<ClaimCursor>,
    batch: usize,
    exhausted: bool,
}

impl<'t, 's, T: Tx> DueJobs<'t, 's, T> {
    fn new(tx: &'t mut T, scope: DueScope<'s>) -> Self {
        DueJobs {
            tx,
            scope: Some(scope),
            buffer: VecDeque::new(),
            last: None,
            batch: FIRST_BATCH,
            exhausted: false,
        }
    }

    fn none(tx: &'t mut T) -> Self {
        DueJobs { tx, scope: None, buffer: VecDeque::new(), last: None, batch: 0, exhausted: true }
    }
}

impl<T: Tx> Iterator for DueJobs<'_, '_, T> {
    type Item = Result<Job, T::Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(job) = self.buffer.pop_front() {
                // A store that went backwards would loop: skip what is not
                // after the last job handed out.
                if self.last.is_some_and(|c| !c.precedes(&job)) {
                    continue;
                }
                self.last = Some(ClaimCursor::after(&job));
                return Some(Ok(job));
            }
            if self.exhausted {
                return None;
            }
            let scope = self.scope.as_ref()?;
            let got = match self.tx.due(scope, self.last.as_ref(), self.batch) {
                Ok(got) => got,
                Err(e) => {
                    self.exhausted = true;
                    return Some(Err(e));
                }
            };
            self.exhausted = got.len() < self.batch;
            self.batch = (self.batch * BATCH_GROWTH).min(MAX_BATCH);
            self.buffer.extend(got);
        }
    }
}
