//! The schedule operations, each inside the one write transaction it is
//! handed: read what the `schedules` table holds, ask
//! [`slothqueue_core::schedule`] what to do, write that. Nothing here
//! decides when a schedule fires or what a tick does; that is the core's.
//!
//! A tick's job goes through the push path `fire_in` is handed (the
//! store's, the one `push` and `clone_job` take: id, indexes, the `pushed`
//! event, the idempotency key), so a tick's job is an ordinary job and its
//! key `KEY@SLOT` makes a second decision of the same slot find it.

use slothqueue_core::schedule::{self, PutPlan, TickAction};
use slothqueue_core::{
    NewJob, NewSchedule, Pushed, PutSchedule, Schedule, ScheduleChange, StoreError, Ticks,
    Timestamp,
};

use crate::error::Failure;
use crate::rows::Tx;

/// [`schedule::create`] on what the key holds: a new schedule is written,
/// the same definition again writes nothing, another one is refused.
pub(crate) fn put_in(
    t: &mut Tx<'_>,
    new: &NewSchedule,
    now: Timestamp,
) -> Result<PutSchedule, Failure> {
    let existing = t.schedule(&new.key)?;
    match schedule::create(new, existing.as_ref(), now)? {
        PutPlan::Insert(s) => {
            t.put_schedule(&s)?;
            Ok(PutSchedule { schedule: s, created: true })
        }
        PutPlan::Unchanged(s) => Ok(PutSchedule { schedule: s, created: false }),
    }
}

/// [`schedule::change`] on the schedule `key`: written back, or deleted
/// when removed (its jobs stay); `NoSchedule` when there is none.
pub(crate) fn change_in(
    t: &mut Tx<'_>,
    key: &str,
    change: &ScheduleChange,
    now: Timestamp,
) -> Result<Option<Schedule>, Failure> {
    let Some(before) = t.schedule(key)? else {
        return Err(Failure::Store(StoreError::NoSchedule(key.to_owned())));
    };
    let after = schedule::change(&before, change, now);
    match &after {
        // A pause of a paused schedule, a resume of a running one.
        Some(s) if *s == before => {}
        Some(s) => t.put_schedule(s)?,
        None => t.remove_schedule(key)?,
    }
    Ok(after)
}

/// Every due tick, in key order: [`schedule::plan_tick`] on each schedule
/// as stored, with the state of its last tick's job read here (`None` when
/// that job was purged), then what the plan says, and the schedule with
/// its cursor moved. `push` is the store's push path.
pub(crate) fn fire_in(
    t: &mut Tx<'_>,
    now: Timestamp,
    mut push: impl FnMut(&mut Tx<'_>, &NewJob) -> Result<Pushed, Failure>,
) -> Result<Ticks, Failure> {
    let stored = t.all_schedules()?;
    let mut ticks = Vec::new();
    let mut after = Vec::with_capacity(stored.len());
    for s in stored {
        let previous = match &s.last_fire {
            Some(fire) => t.job(fire.job)?.map(|j| j.state),
            None => None,
        };
        let Some(plan) = schedule::plan_tick(&s, now, previous) else {
            after.push(s);
            continue;
        };
        let (s, events, tick) = match &plan.action {
            TickAction::Enqueue(job) => {
                let pushed = push(t, job)?;
                plan.enqueued(pushed.job.id, pushed.created, now)
            }
            TickAction::Skip { .. } | TickAction::Drop => plan.without_push(),
        };
        // A skip's event goes on the unfinished job's trail, the job itself
        // unchanged.
        t.append(&events)?;
        t.put_schedule(&s)?;
        ticks.push(tick);
        after.push(s);
    }
    Ok(Ticks { ticks, next: schedule::next_fire(&after) })
}

/// Schedules as exported, each checked by [`schedule::check_restore`]
/// before any is written, then written as they are over any under the
/// same keys: all or nothing.
pub(crate) fn restore_in(t: &mut Tx<'_>, schedules: &[Schedule]) -> Result<(), Failure> {
    for s in schedules {
        schedule::check_restore(s)?;
    }
    for s in schedules {
        t.put_schedule(s)?;
    }
    Ok(())
}
