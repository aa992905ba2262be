//! The operations on what is stored beside the jobs: schedules (put,
//! change, fire, restore) and lane settings. Each runs inside one write
//! transaction of the backend ([`Tx`]); a tick's job goes through the push
//! path every push takes.

use crate::job::JobId;
use crate::lane::{LaneChange, LaneScope, Lanes};
use crate::policy::Policy;
use crate::schedule::{self, NewSchedule, PutPlan, Schedule, ScheduleChange, TickAction, Ticks};
use crate::store::{PutSchedule, StoreError};
use crate::time::Timestamp;

use super::{Tx, jobs};

/// Stores a schedule as [`schedule::create`] decides from what the key
/// holds: a new one is inserted; the same definition again writes nothing.
pub fn put_schedule<T: Tx>(
    tx: &mut T,
    new: &NewSchedule,
    now: Timestamp,
) -> Result<PutSchedule, T::Error> {
    let existing = tx.schedule(&new.key)?;
    match schedule::create(new, existing.as_ref(), now)? {
        PutPlan::Insert(s) => {
            tx.put_schedule(&s)?;
            Ok(PutSchedule { schedule: s, created: true })
        }
        PutPlan::Unchanged(s) => Ok(PutSchedule { schedule: s, created: false }),
    }
}

/// A pause, resume or removal, as [`schedule::change`] decides it from the
/// schedule read here; `NoSchedule` for an unknown key. Returns the
/// schedule as it is after (`None` once removed).
pub fn change_schedule<T: Tx>(
    tx: &mut T,
    key: &str,
    change: &ScheduleChange,
    now: Timestamp,
) -> Result<Option<Schedule>, T::Error> {
    let Some(s) = tx.schedule(key)? else {
        return Err(StoreError::NoSchedule(key.to_owned()).into());
    };
    let after = schedule::change(&s, change, now);
    match &after {
        Some(next) if *next != s => tx.put_schedule(next)?,
        Some(_) => {}
        None => tx.delete_schedule(key)?,
    }
    Ok(after)
}

/// Every due tick: each schedule, in key order, as [`schedule::plan_tick`]
/// decides from it and the state of its last tick's job, both read here
/// (so a second caller reads the first's cursor and decides nothing
/// twice). An enqueue pushes through the path every push takes (id,
/// parents, key, `pushed` event), then the plan's events are appended (a
/// skip's on the unfinished job) and the schedule written with its cursor
/// moved.
pub fn fire_schedules<T: Tx>(
    tx: &mut T,
    now: Timestamp,
    policy: &Policy,
) -> Result<Ticks, T::Error> {
    let stored = tx.schedules()?;
    let mut next: Option<JobId> = None;
    let mut ticks = Vec::new();
    let mut after = Vec::with_capacity(stored.len());
    for s in stored {
        let previous = match &s.last_fire {
            Some(fire) => tx.job(fire.job)?.map(|job| job.state),
            None => None,
        };
        let Some(plan) = schedule::plan_tick(&s, now, previous) else {
            after.push(s);
            continue;
        };
        let (written, events, tick) = match &plan.action {
            TickAction::Enqueue(new) => {
                let next = match &mut next {
                    Some(id) => id,
                    None => next.insert(tx.next_id()?),
                };
                let pushed = jobs::push_one(tx, new, now, policy, next)?;
                plan.enqueued(pushed.job.id, pushed.created, now)
            }
            TickAction::Skip { .. } | TickAction::Drop => plan.without_push(),
        };
        tx.append(&events)?;
        ticks.push(tick);
        tx.put_schedule(&written)?;
        after.push(written);
    }
    Ok(Ticks { ticks, next: schedule::next_fire(&after) })
}

/// Writes schedules as they were exported, replacing any under the same
/// keys, all or nothing: each is checked ([`schedule::check_restore`])
/// before anything is written.
pub fn restore_schedules<T: Tx>(tx: &mut T, schedules: &[Schedule]) -> Result<(), T::Error> {
    for s in schedules {
        schedule::check_restore(s)?;
    }
    schedules.iter().try_for_each(|s| tx.put_schedule(s))
}

/// Changes one lane: the stored lanes, the change applied by the one rule
/// ([`Lanes::apply`]; a refusal writes nothing), the scope's settings
/// written (the defaults by forgetting the scope). Returns every lane's
/// settings after.
pub fn change_lane<T: Tx>(
    tx: &mut T,
    scope: &LaneScope,
    change: &LaneChange,
) -> Result<Lanes, T::Error> {
    let mut lanes = tx.lanes()?;
    let settings = lanes.apply(scope, change)?;
    tx.put_lane(scope, &settings)?;
    Ok(lanes)
}
