//! What a due schedule's tick does ([`plan_tick`]): fire, skip behind an
//! unfinished job, or drop a late slot; the cursor moved and the missed
//! slots counted, for the store to write ([`TickPlan`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::slots::Due;
use super::{CatchUp, LastFire, MAX_ON_TIME_GRACE, Missed, Overlap, Schedule, tick_key};
use crate::job::{Event, EventKind, JobId, JobState, NewJob};
use crate::time::Timestamp;

/// What a tick did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TickOutcome {
    /// A job was enqueued for the slot (`created: false`: a job already
    /// held the tick's key).
    Enqueued {
        /// The job.
        job: JobId,
        /// Whether this tick created it.
        created: bool,
    },
    /// The previous tick's job was unfinished ([`Overlap::Skip`]).
    Skipped {
        /// That job.
        unfinished: JobId,
        /// Whether the skip went on that job's trail (`tick_skipped`): the
        /// first tick it holds back does, later ones skip quietly.
        #[serde(default)]
        noted: bool,
    },
    /// The slot was late and the schedule catches up on nothing
    /// ([`CatchUp::None`]).
    Dropped,
}

/// One decided tick, as [`crate::Store::fire_schedules`] reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick {
    /// The schedule.
    pub key: String,
    /// The slot decided (the latest due one).
    pub slot: Timestamp,
    /// Slots before it passed over in the same decision.
    pub missed: u64,
    /// What was done.
    pub outcome: TickOutcome,
}

/// What [`Store::fire_schedules`](crate::Store::fire_schedules) did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticks {
    /// The ticks decided, in key order.
    pub ticks: Vec<Tick>,
    /// The earliest next slot among the schedules not paused, after the
    /// write.
    pub next: Option<Timestamp>,
}

/// What a due schedule's tick writes, as [`plan_tick`] decides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TickPlan {
    /// The schedule as it is after the tick (cursor moved, last fire,
    /// missed, skipped), but for the job id of an enqueue, which
    /// [`TickPlan::enqueued`] fills in.
    pub schedule: Schedule,
    /// The slot decided.
    pub slot: Timestamp,
    /// Slots passed over with it.
    pub missed: u64,
    /// What to do.
    pub action: TickAction,
}

/// What a tick does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TickAction {
    /// Push this job (its key is the tick's), then call
    /// [`TickPlan::enqueued`] with the job the push returned.
    Enqueue(NewJob),
    /// Enqueue nothing; append the event, if any, to the unfinished job.
    Skip {
        /// The previous tick's unfinished job.
        unfinished: JobId,
        /// The `tick_skipped` event for it: only for the first tick it
        /// holds back, so a job a gate or a paused lane keeps pending for
        /// an hour under `every 1s` gains one event, not 3,600.
        event: Option<Event>,
    },
    /// Enqueue nothing: the slot was late under [`CatchUp::None`].
    Drop,
}

impl TickPlan {
    /// After the push of [`TickAction::Enqueue`]: the schedule with its
    /// last fire naming `job`, the `scheduled` event for the job (when the
    /// push created it), and the report.
    pub fn enqueued(
        mut self,
        job: JobId,
        created: bool,
        now: Timestamp,
    ) -> (Schedule, Vec<Event>, Tick) {
        self.schedule.last_fire = Some(LastFire { slot: self.slot, at: now, job });
        let mut events = Vec::new();
        if created {
            let mut message = format!(
                "tick of schedule `{}` for {} ({})",
                self.schedule.key,
                self.schedule.local(self.slot),
                self.schedule.spec
            );
            if self.missed > 0 {
                let missed = self
                    .schedule
                    .last_missed
                    .as_ref()
                    .map_or_else(|| format!("{} slots", self.missed), |m| m.to_string());
                message.push_str(&format!("; catching up: {missed} missed before it"));
            }
            events.push(Event::new(job, EventKind::Scheduled, now).saying(message));
        }
        let tick = Tick {
            key: self.schedule.key.clone(),
            slot: self.slot,
            missed: self.missed,
            outcome: TickOutcome::Enqueued { job, created },
        };
        (self.schedule, events, tick)
    }

    /// For a tick that pushes nothing ([`TickAction::Skip`] and
    /// [`TickAction::Drop`]): the schedule to write, the events to append
    /// (a skip's `tick_skipped` on the unfinished job, when it is noted),
    /// and the report. So every store writes what a tick decided the same
    /// way: push when the plan says [`TickAction::Enqueue`] and call
    /// [`TickPlan::enqueued`], else call this; append the events, write the
    /// schedule.
    pub fn without_push(self) -> (Schedule, Vec<Event>, Tick) {
        let (outcome, events) = match self.action {
            TickAction::Skip { unfinished, event } => (
                TickOutcome::Skipped { unfinished, noted: event.is_some() },
                event.into_iter().collect(),
            ),
            TickAction::Drop | TickAction::Enqueue(_) => (TickOutcome::Dropped, Vec::new()),
        };
        let tick =
            Tick { key: self.schedule.key.clone(), slot: self.slot, missed: self.missed, outcome };
        (self.schedule, events, tick)
    }
}

/// How late a slot may be reached and still fire under
/// [`CatchUp::None`]: a quarter of the time to the slot after it, at most
/// [`MAX_ON_TIME_GRACE`]. A runner that sleeps until the slot reaches it
/// within milliseconds; one that was stopped or asleep does not.
pub fn on_time_grace(s: &Schedule, slot: Timestamp) -> Duration {
    let gap = s.next_after(slot).map_or(MAX_ON_TIME_GRACE, |n| n.duration_since(slot));
    (gap / 4).min(MAX_ON_TIME_GRACE)
}

/// The tick a schedule fires at `now`, if one is due: `None` while paused
/// or before its next slot. `previous` is the state of the job the last
/// tick enqueued ([`Schedule::last_fire`]), read by the store in the same
/// transaction (`None` when there is none or it was purged).
pub fn plan_tick(s: &Schedule, now: Timestamp, previous: Option<JobState>) -> Option<TickPlan> {
    if s.paused.is_some() {
        return None;
    }
    let Due { slot, before, at_least, previous: before_slot } = s.latest_due(s.cursor, now)?;
    let mut next = s.clone();
    next.cursor = slot;
    let on_time = now.duration_since(slot) <= on_time_grace(s, slot);
    let fires = match s.catch_up {
        CatchUp::Once => true,
        CatchUp::None => on_time,
    };
    let missed = if fires { before } else { before + 1 };
    if missed > 0 {
        let latest = if fires {
            // The slot before the one that fires.
            before_slot.unwrap_or(slot)
        } else {
            slot
        };
        next.last_missed = Some(Missed { count: missed, at_least, at: now, latest });
    }
    let unfinished = s
        .last_fire
        .as_ref()
        .filter(|_| s.overlap == Overlap::Skip)
        .filter(|_| matches!(previous, Some(JobState::Pending | JobState::Running)))
        .map(|f| f.job);
    let action = match (fires, unfinished) {
        (false, _) => TickAction::Drop,
        (true, Some(job)) => {
            next.last_skipped = Some(slot);
            let state = match previous {
                Some(JobState::Running) => "running",
                _ => "pending",
            };
            // The first skip since this job was queued goes on its trail.
            let since_fire =
                s.last_fire.as_ref().map_or(Timestamp::from_millis(i64::MIN), |f| f.slot);
            let first = s.last_skipped.is_none_or(|t| t <= since_fire);
            let event = first.then(|| {
                Event::new(job, EventKind::TickSkipped, now).saying(format!(
                    "schedule `{}` skipped its tick for {}: this job is still {state} (later ticks skip quietly until it finishes)",
                    s.key,
                    s.local(slot)
                ))
            });
            TickAction::Skip { unfinished: job, event }
        }
        (true, None) => {
            let mut job = s.job.clone();
            job.idempotency_key = Some(tick_key(&s.key, slot));
            TickAction::Enqueue(job)
        }
    };
    Some(TickPlan { schedule: next, slot, missed, action })
}

/// The earliest next fire among `schedules` (paused ones left out).
pub fn next_fire<'a>(schedules: impl IntoIterator<Item = &'a Schedule>) -> Option<Timestamp> {
    schedules.into_iter().filter_map(Schedule::next_fire).min()
}
