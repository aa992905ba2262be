//! The loop's decision, as a pure function: what the run knows now
//! ([`View`]) in, the one next step ([`Step`]) out. No I/O, no clock read,
//! nothing async: the loop in `run/mod.rs` reads what a step needs, carries
//! it out, writes what it learned back into the view, and asks again. So
//! every rule of the loop (slots, shutdown, gates before every start,
//! cooldown, sweeps, lane waits, suspend-when-gated, drain's end) is here,
//! and tested as one table.
//!
//! Knowledge goes stale: the loop forgets the next due time after every
//! wait, the gates' reading after every start, the claim's answer when an
//! attempt ends or a wake-up comes; this function asks again for what it
//! needs ([`Step::ReadNextDue`], [`Step::ReadGates`], [`Step::ReadLanes`]).

use std::time::Duration;

use slothqueue_core::Timestamp;
use tokio::time::Instant;

use crate::config::Mode;

/// The gates as last read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gates {
    /// Not read since the last start (or ever).
    Unread,
    /// All open at `at`.
    Open { at: Instant },
    /// One held at `at`.
    Closed { at: Instant },
}

/// Why the lanes kept the last claim from taking anything, as the
/// read-only report after it said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// No lane holds a due job of ours: what is due is not for us, or
    /// another runner took it (or the report could not be read).
    None,
    /// Some lane with due jobs is full (its jobs run, here or elsewhere):
    /// it opens when one of them ends.
    Full,
    /// Only paused lanes hold due jobs: they open only when resumed.
    PausedOnly,
    /// A lane that held due jobs has opened since the last report.
    Opened,
}

/// What the last claim gave, since nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClaimState {
    /// No claim tried since the last change: claim when the rest allows.
    Fresh,
    /// The last claim took nothing; the lanes were not read yet.
    Nothing,
    /// The last claim took nothing, and the lanes read at `at` say why.
    Lanes { at: Instant, blocked: Blocked },
    /// A drain found nothing to claim and the sweep after it took nothing
    /// back: the drain is over.
    Swept,
}

/// What the run knows now: everything the decision depends on.
#[derive(Clone, Debug)]
pub(crate) struct View {
    pub mode: Mode,
    /// At least 1.
    pub slots: usize,
    /// Attempts running now.
    pub running: usize,
    /// Attempts started in this run (once mode starts one).
    pub started: u32,
    /// A shutdown was requested.
    pub shutdown: bool,
    /// A step failed for good: start nothing more, let the running
    /// attempts end, then end with the error.
    pub failed: bool,
    /// A job claimed together with the last settlement waits to start.
    pub chained: bool,
    /// Monotonic now.
    pub now: Instant,
    /// Wall now.
    pub wall_now: Timestamp,
    /// The next due time as read (`Some(None)`: nothing pending); `None`
    /// when not read since the last change.
    pub next_due: Option<Option<Timestamp>>,
    /// No start before this (the cooldown).
    pub cooldown_until: Option<Instant>,
    pub gates: Gates,
    pub check_interval: Duration,
    pub poll_interval: Duration,
    /// Dead owners' jobs are due to be looked for.
    pub sweep_due: bool,
    pub claim: ClaimState,
    pub suspend_when_gated: bool,
    /// The running attempts are stopped (SIGSTOP) because a gate closed.
    pub suspended: bool,
    /// The next schedule tick as read (`Some(None)`: none to come); `None`
    /// when not read yet or read longer than a poll ago (another process
    /// may have added a schedule since).
    pub next_tick: Option<Option<Timestamp>>,
    /// When the next tick must be read again, while it is known.
    pub tick_recheck: Option<Instant>,
    /// Read with the lanes after a claim took nothing though jobs were
    /// due (jobs of a kind this runner has no handler for, of a queue it
    /// does not serve): when the next pending job not yet due becomes due,
    /// the next chance a claim takes something. Without it a follow runner
    /// would sleep to its next poll past another job's retry.
    pub later_due: Option<Timestamp>,
}

/// A wait: until `until` (if any), a wake-up (if `wake`), an attempt's end
/// (always, while some run) or a shutdown request, whichever comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wait {
    pub until: Option<Instant>,
    pub wake: bool,
}

/// The next step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Release the chained job (a shutdown: it will not run).
    HandBack,
    /// Start the chained job.
    StartChained,
    /// Read the next due time.
    ReadNextDue,
    /// Read when the next schedule tick fires.
    ReadTicks,
    /// Fire the schedules' due ticks (enqueue their jobs).
    FireTicks,
    /// Read the gates; `report` when a start waits on them (a reading that
    /// only decides a suspend is not reported as a wait).
    ReadGates { report: bool },
    /// Stop every running attempt's processes: a gate closed.
    Suspend,
    /// Continue them: the gates opened (or no attempt is left).
    Resume,
    /// Look for dead owners' jobs.
    Sweep,
    /// Claim a job and start it.
    Claim,
    /// Read the lanes (read-only) to say why nothing was claimed.
    ReadLanes,
    /// A drain with nothing to claim: sweep once more; it ends unless the
    /// sweep took something back.
    SweepBeforeEnd,
    /// Wait (see [`Wait`]).
    Wait(Wait),
    /// Follow mode with nothing running and nothing due: the idle wait
    /// (its record, its kernel timer) until the next due time, the next
    /// tick or a poll.
    Idle { next_due: Option<Timestamp>, next_tick: Option<Timestamp> },
    /// The run is over; `skipped`: due jobs were left (say which).
    End { skipped: bool },
}

impl View {
    fn is_due(&self) -> Option<bool> {
        self.next_due.map(|d| d.is_some_and(|t| t <= self.wall_now))
    }

    /// When the gates must be read again while attempts run and
    /// suspend-when-gated watches them.
    fn gate_recheck(&self) -> Option<Instant> {
        match self.gates {
            Gates::Unread => Some(self.now),
            Gates::Open { at } | Gates::Closed { at } => Some(at + self.check_interval),
        }
    }

    fn gates_stale(&self) -> bool {
        self.gate_recheck().is_some_and(|t| t <= self.now)
    }

    /// Whether the gates watch running attempts (suspend-when-gated).
    fn watching(&self) -> bool {
        self.suspend_when_gated && self.running > 0
    }

    /// A wait until `until` (if any), cut short for the gates' next
    /// reading when they watch running attempts, for the next tick, and
    /// for the next look at the schedules.
    fn wait(&self, until: Option<Instant>, wake: bool) -> Step {
        let recheck = if self.watching() { self.gate_recheck() } else { None };
        let tick = self.next_tick.flatten().map(|t| self.instant_of(t));
        let until = [until, recheck, tick, self.tick_recheck].into_iter().flatten().min();
        Step::Wait(Wait { until, wake })
    }

    /// Follow mode's idle wait.
    fn idle(&self, next_due: Option<Timestamp>) -> Step {
        Step::Idle { next_due, next_tick: self.next_tick.flatten() }
    }

    fn follow(&self) -> bool {
        self.mode == Mode::Follow
    }

    /// The wall time `t` on the monotonic clock.
    fn instant_of(&self, t: Timestamp) -> Instant {
        self.now + t.duration_since(self.wall_now)
    }
}

/// The next step for what the run knows (see the module documentation).
pub(crate) fn decide(v: &View) -> Step {
    // A shutdown: hand back what has not started, let every attempt stop
    // (each one's driver stops its processes and releases it), then end.
    if v.shutdown {
        if v.chained {
            return Step::HandBack;
        }
        if v.running > 0 {
            return Step::Wait(Wait { until: None, wake: false });
        }
        return Step::End { skipped: false };
    }
    if v.failed {
        if v.running > 0 {
            return Step::Wait(Wait { until: None, wake: false });
        }
        return Step::End { skipped: false };
    }
    // Schedules fire whatever the slots, gates and lanes say: a tick is
    // only a job enqueued, and whichever runner is free runs it.
    match v.next_tick {
        None => return Step::ReadTicks,
        Some(Some(t)) if t <= v.wall_now => return Step::FireTicks,
        Some(_) => {}
    }
    let once_done = v.mode == Mode::Once && (v.started > 0 || v.chained);
    let room = v.running < v.slots && !once_done;
    // Suspend-when-gated: the gates are read every check interval while
    // attempts run, and decide whether they are stopped.
    if v.watching() {
        if v.gates_stale() {
            let report = room && v.is_due() == Some(true);
            return Step::ReadGates { report };
        }
        match v.gates {
            Gates::Closed { .. } if !v.suspended => return Step::Suspend,
            Gates::Open { .. } if v.suspended => return Step::Resume,
            _ => {}
        }
    }
    if v.suspended && v.running == 0 {
        return Step::Resume;
    }
    if v.chained && v.running < v.slots {
        return Step::StartChained;
    }
    if !room {
        if once_done && v.running == 0 && !v.chained {
            return Step::End { skipped: false };
        }
        return v.wait(None, false);
    }
    let Some(next_due) = v.next_due else { return Step::ReadNextDue };
    let due = next_due.filter(|t| *t <= v.wall_now);
    if due.is_none() {
        if v.running > 0 {
            // Drain waits for its attempts (their end may make more due);
            // follow also for a job's time or the next poll.
            if !v.follow() {
                return v.wait(None, false);
            }
            let poll = v.now + v.poll_interval;
            let until = next_due.map_or(poll, |t| v.instant_of(t).min(poll));
            return v.wait(Some(until), true);
        }
        if v.follow() {
            return v.idle(next_due);
        }
        return Step::End { skipped: false };
    }
    // Something is due and a slot is free.
    if let Some(until) = v.cooldown_until.filter(|t| *t > v.now) {
        return v.wait(Some(until), false);
    }
    match v.gates {
        Gates::Unread => return Step::ReadGates { report: true },
        Gates::Open { .. } | Gates::Closed { .. } if v.gates_stale() => {
            return Step::ReadGates { report: true };
        }
        Gates::Closed { at } => return v.wait(Some(at + v.check_interval), v.follow()),
        Gates::Open { .. } => {}
    }
    if v.sweep_due {
        return Step::Sweep;
    }
    match v.claim {
        ClaimState::Fresh => Step::Claim,
        ClaimState::Nothing => Step::ReadLanes,
        ClaimState::Lanes { blocked: Blocked::Opened, .. } => Step::Claim,
        ClaimState::Lanes { at, blocked: Blocked::None } => {
            if !v.follow() {
                if v.running > 0 {
                    return v.wait(None, false);
                }
                return Step::SweepBeforeEnd;
            }
            if v.running == 0 {
                return v.idle(v.later_due);
            }
            let poll = at + v.poll_interval;
            if poll <= v.now || v.later_due.is_some_and(|t| t <= v.wall_now) {
                return Step::Claim;
            }
            let until = v.later_due.map_or(poll, |t| v.instant_of(t).min(poll));
            v.wait(Some(until), true)
        }
        ClaimState::Lanes { at, blocked: blocked @ (Blocked::Full | Blocked::PausedOnly) } => {
            // A paused lane opens only when resumed: a drain with nothing
            // else to wait for ends (and says what it left).
            if blocked == Blocked::PausedOnly && !v.follow() && v.running == 0 {
                return Step::SweepBeforeEnd;
            }
            let recheck = at + v.check_interval;
            if recheck <= v.now {
                return Step::ReadLanes;
            }
            v.wait(Some(recheck), v.follow())
        }
        ClaimState::Swept => Step::End { skipped: true },
    }
}

/// What decides whether an attempt's settlement may claim the next job in
/// the same transaction ([`Store::settle_and_claim`], one commit instead of
/// two): only when the loop would claim right after with nothing in
/// between.
///
/// [`Store::settle_and_claim`]: slothqueue_core::Store::settle_and_claim
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChainView {
    pub mode: Mode,
    pub cooldown_zero: bool,
    pub on_finish: bool,
    pub shutdown: bool,
    pub sweep_due: bool,
    /// The gates, read at the attempt's end: open.
    pub gates_open: bool,
}

/// Whether an ending attempt may chain (see [`ChainView`]): not in once
/// mode, with a cooldown or an on-finish command (each comes between the
/// two), once a shutdown was asked for or the sweep is due (it must come
/// first), nor while a gate is closed (the loop then waits at the gates).
/// With several slots the freed slot is the one the chained job takes, so
/// the loop, which would claim next, claims less often.
pub(crate) fn may_chain(c: &ChainView) -> bool {
    c.mode != Mode::Once
        && c.cooldown_zero
        && !c.on_finish
        && !c.shutdown
        && !c.sweep_due
        && c.gates_open
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);
    const SEC: Duration = Duration::from_secs(1);

    fn base(now: Instant) -> View {
        View {
            mode: Mode::Drain,
            slots: 1,
            running: 0,
            started: 0,
            shutdown: false,
            failed: false,
            chained: false,
            now,
            wall_now: T0,
            next_due: None,
            cooldown_until: None,
            gates: Gates::Unread,
            check_interval: SEC,
            poll_interval: 5 * SEC,
            sweep_due: false,
            claim: ClaimState::Fresh,
            later_due: None,
            suspend_when_gated: false,
            suspended: false,
            next_tick: Some(None),
            tick_recheck: None,
        }
    }

    fn due() -> Option<Option<Timestamp>> {
        Some(Some(T0))
    }

    fn later(s: u64) -> Option<Option<Timestamp>> {
        Some(Some(T0.saturating_add(Duration::from_secs(s))))
    }

    fn wait(until: Option<Instant>, wake: bool) -> Step {
        Step::Wait(Wait { until, wake })
    }

    /// The table: (what the row is about, how the view differs from a
    /// fresh drain with one slot, the step).
    #[test]
    fn the_decision_table() {
        let now = Instant::now();
        let open = Gates::Open { at: now };
        let closed = Gates::Closed { at: now };
        let old_open = Gates::Open { at: now - 2 * SEC };
        let old_closed = Gates::Closed { at: now - 2 * SEC };
        let lanes =
            move |blocked, ago: u64| ClaimState::Lanes { at: now - SEC * ago as u32, blocked };
        type Edit = Box<dyn Fn(&mut View)>;
        let rows: Vec<(&str, Edit, Step)> = vec![
            // Shutdown.
            (
                "shutdown, idle: end",
                Box::new(move |v| v.shutdown = true),
                Step::End { skipped: false },
            ),
            (
                "shutdown with a chained job: hand it back",
                Box::new(move |v| {
                    v.shutdown = true;
                    v.chained = true;
                }),
                Step::HandBack,
            ),
            (
                "shutdown with attempts running: wait for them to stop",
                Box::new(move |v| {
                    v.shutdown = true;
                    v.running = 3;
                    v.slots = 3;
                }),
                wait(None, false),
            ),
            (
                "shutdown beats everything due",
                Box::new(move |v| {
                    v.shutdown = true;
                    v.next_due = due();
                    v.gates = open;
                }),
                Step::End { skipped: false },
            ),
            (
                "shutdown while suspended: wait (their stop continues them)",
                Box::new(move |v| {
                    v.shutdown = true;
                    v.running = 1;
                    v.suspended = true;
                    v.suspend_when_gated = true;
                }),
                wait(None, false),
            ),
            // A failure for good.
            (
                "failed, nothing running: end",
                Box::new(move |v| v.failed = true),
                Step::End { skipped: false },
            ),
            (
                "failed with attempts running: wait for them",
                Box::new(move |v| {
                    v.failed = true;
                    v.running = 2;
                    v.slots = 2;
                    v.next_due = due();
                }),
                wait(None, false),
            ),
            // The chained job.
            ("a chained job starts", Box::new(move |v| v.chained = true), Step::StartChained),
            (
                "a chained job starts with other slots busy",
                Box::new(move |v| {
                    v.chained = true;
                    v.slots = 3;
                    v.running = 2;
                }),
                Step::StartChained,
            ),
            (
                "a chained job waits while every slot is busy",
                Box::new(move |v| {
                    v.chained = true;
                    v.slots = 2;
                    v.running = 2;
                }),
                wait(None, false),
            ),
            // Reading the next due time.
            ("nothing known: read the next due time", Box::new(move |_| {}), Step::ReadNextDue),
            (
                "a free slot among running ones: read the next due time",
                Box::new(move |v| {
                    v.slots = 3;
                    v.running = 2;
                }),
                Step::ReadNextDue,
            ),
            (
                "every slot busy: wait for an attempt",
                Box::new(move |v| {
                    v.slots = 2;
                    v.running = 2;
                }),
                wait(None, false),
            ),
            (
                "every slot busy in follow: wait for an attempt, not a wake-up",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.running = 1;
                    v.next_due = due();
                }),
                wait(None, false),
            ),
            // Nothing due.
            (
                "drain, nothing pending: end",
                Box::new(move |v| v.next_due = Some(None)),
                Step::End { skipped: false },
            ),
            (
                "drain, a job due later: end",
                Box::new(move |v| v.next_due = later(60)),
                Step::End { skipped: false },
            ),
            (
                "once, nothing due: end",
                Box::new(move |v| {
                    v.mode = Mode::Once;
                    v.next_due = Some(None);
                }),
                Step::End { skipped: false },
            ),
            (
                "follow, nothing pending: idle",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.next_due = Some(None);
                }),
                Step::Idle { next_due: None, next_tick: None },
            ),
            (
                "follow, a job due later: idle until it",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.next_due = later(3);
                }),
                Step::Idle { next_due: later(3).flatten(), next_tick: None },
            ),
            (
                "drain with attempts running, nothing due: wait for them",
                Box::new(move |v| {
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = Some(None);
                }),
                wait(None, false),
            ),
            (
                "follow with attempts running, a job due in 3s: wait for it",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = later(3);
                }),
                wait(Some(now + 3 * SEC), true),
            ),
            (
                "follow with attempts running, a job due in 60s: wait a poll",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = later(60);
                }),
                wait(Some(now + 5 * SEC), true),
            ),
            (
                "follow with attempts running, nothing pending: wait a poll",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = Some(None);
                }),
                wait(Some(now + 5 * SEC), true),
            ),
            // Once mode.
            (
                "once, its job started and ended: end",
                Box::new(move |v| {
                    v.mode = Mode::Once;
                    v.started = 1;
                    v.next_due = due();
                }),
                Step::End { skipped: false },
            ),
            (
                "once, its job running: wait, claim no second one",
                Box::new(move |v| {
                    v.mode = Mode::Once;
                    v.slots = 3;
                    v.started = 1;
                    v.running = 1;
                    v.next_due = due();
                    v.gates = open;
                }),
                wait(None, false),
            ),
            (
                "once, nothing started yet: claim",
                Box::new(move |v| {
                    v.mode = Mode::Once;
                    v.next_due = due();
                    v.gates = open;
                }),
                Step::Claim,
            ),
            // Cooldown.
            (
                "due, in the cooldown: wait it out",
                Box::new(move |v| {
                    v.next_due = due();
                    v.cooldown_until = Some(now + 2 * SEC);
                }),
                wait(Some(now + 2 * SEC), false),
            ),
            (
                "due, the cooldown over: read the gates",
                Box::new(move |v| {
                    v.next_due = due();
                    v.cooldown_until = Some(now - SEC);
                }),
                Step::ReadGates { report: true },
            ),
            (
                "the cooldown spaces starts between running attempts",
                Box::new(move |v| {
                    v.slots = 3;
                    v.running = 1;
                    v.next_due = due();
                    v.cooldown_until = Some(now + SEC);
                    v.gates = open;
                }),
                wait(Some(now + SEC), false),
            ),
            (
                "every slot busy: the cooldown does not matter",
                Box::new(move |v| {
                    v.running = 1;
                    v.next_due = due();
                    v.cooldown_until = Some(now + SEC);
                }),
                wait(None, false),
            ),
            // Gates.
            (
                "due, gates unread: read them (a start waits on them)",
                Box::new(move |v| v.next_due = due()),
                Step::ReadGates { report: true },
            ),
            (
                "due, gates unread with attempts running: read them before this start too",
                Box::new(move |v| {
                    v.slots = 4;
                    v.running = 3;
                    v.next_due = due();
                }),
                Step::ReadGates { report: true },
            ),
            (
                "due, a gate closed just now: wait a check interval",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = closed;
                }),
                wait(Some(now + SEC), false),
            ),
            (
                "follow, a gate closed: a wake-up also ends the wait",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.next_due = due();
                    v.gates = closed;
                }),
                wait(Some(now + SEC), true),
            ),
            (
                "due, a gate closed a check ago: read again",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = old_closed;
                }),
                Step::ReadGates { report: true },
            ),
            (
                "due, gates open long ago: read again before the start",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = old_open;
                }),
                Step::ReadGates { report: true },
            ),
            (
                "due, gates open: claim",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = open;
                }),
                Step::Claim,
            ),
            (
                "nothing due: the gates are not read",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.next_due = later(1);
                    v.gates = Gates::Unread;
                }),
                Step::Idle { next_due: later(1).flatten(), next_tick: None },
            ),
            // Sweep.
            (
                "due, gates open, sweep due: sweep first",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = open;
                    v.sweep_due = true;
                }),
                Step::Sweep,
            ),
            (
                "sweep due but a gate closed: wait (the sweep comes before the claim)",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = closed;
                    v.sweep_due = true;
                }),
                wait(Some(now + SEC), false),
            ),
            // Nothing claimed: the lanes.
            (
                "nothing claimed: read the lanes",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = open;
                    v.claim = ClaimState::Nothing;
                }),
                Step::ReadLanes,
            ),
            (
                "drain, nothing claimed, no lane to blame: sweep, then end",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::None, 0);
                }),
                Step::SweepBeforeEnd,
            ),
            (
                "drain, swept and nothing: end, saying what was left",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = open;
                    v.claim = ClaimState::Swept;
                }),
                Step::End { skipped: true },
            ),
            (
                "drain with attempts running, nothing to claim: wait for them",
                Box::new(move |v| {
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::None, 0);
                }),
                wait(None, false),
            ),
            (
                "follow, nothing claimed, no lane to blame: idle until the poll",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::None, 0);
                }),
                Step::Idle { next_due: None, next_tick: None },
            ),
            (
                "follow, nothing claimed, another job due in 3s: idle until then",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::None, 0);
                    v.later_due = later(3).flatten();
                }),
                Step::Idle { next_due: later(3).flatten(), next_tick: None },
            ),
            (
                "follow with attempts running, nothing claimed, another job due in 3s: wait for it",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::None, 0);
                    v.later_due = later(3).flatten();
                }),
                wait(Some(now + 3 * SEC), true),
            ),
            (
                "follow with attempts running, nothing claimed, another job due since: claim",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::None, 0);
                    v.later_due = Some(T0);
                }),
                Step::Claim,
            ),
            (
                "follow with attempts running, nothing to claim: wait a poll",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::None, 0);
                }),
                wait(Some(now + 5 * SEC), true),
            ),
            (
                "follow with attempts running, a poll since: claim again",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::None, 6);
                }),
                Step::Claim,
            ),
            (
                "drain, a full lane: wait a check (its jobs end elsewhere)",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::Full, 0);
                }),
                wait(Some(now + SEC), false),
            ),
            (
                "drain, a full lane a check ago: read the lanes again, no claim",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::Full, 1);
                }),
                Step::ReadLanes,
            ),
            (
                "drain, only paused lanes: sweep, then end",
                Box::new(move |v| {
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::PausedOnly, 0);
                }),
                Step::SweepBeforeEnd,
            ),
            (
                "once, only paused lanes: end like a drain",
                Box::new(move |v| {
                    v.mode = Mode::Once;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::PausedOnly, 0);
                }),
                Step::SweepBeforeEnd,
            ),
            (
                "drain, paused lanes with our attempts running: wait",
                Box::new(move |v| {
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::PausedOnly, 0);
                }),
                wait(Some(now + SEC), false),
            ),
            (
                "follow, a paused lane: wait a check, or a wake-up",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::PausedOnly, 0);
                }),
                wait(Some(now + SEC), true),
            ),
            (
                "follow, a paused lane a check ago: read the lanes again",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::PausedOnly, 2);
                }),
                Step::ReadLanes,
            ),
            (
                "a blocked lane opened: claim",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.next_due = due();
                    v.gates = open;
                    v.claim = lanes(Blocked::Opened, 0);
                }),
                Step::Claim,
            ),
            (
                "lanes waiting, the gates read long ago: read them first",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.next_due = due();
                    v.gates = old_open;
                    v.claim = lanes(Blocked::Full, 2);
                }),
                Step::ReadGates { report: true },
            ),
            (
                "lanes waiting, nothing due any more: drain ends",
                Box::new(move |v| {
                    v.next_due = Some(None);
                    v.gates = open;
                    v.claim = lanes(Blocked::Full, 0);
                }),
                Step::End { skipped: false },
            ),
            // Suspend when gated.
            (
                "watching running attempts, gates unread: read them, not for a start",
                Box::new(move |v| {
                    v.suspend_when_gated = true;
                    v.running = 1;
                }),
                Step::ReadGates { report: false },
            ),
            (
                "watching, a slot free and a job due: the reading is reported",
                Box::new(move |v| {
                    v.suspend_when_gated = true;
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = due();
                }),
                Step::ReadGates { report: true },
            ),
            (
                "watching, a gate closed: suspend",
                Box::new(move |v| {
                    v.suspend_when_gated = true;
                    v.running = 2;
                    v.slots = 2;
                    v.gates = closed;
                }),
                Step::Suspend,
            ),
            (
                "watching, suspended, still closed: wait for the next reading",
                Box::new(move |v| {
                    v.suspend_when_gated = true;
                    v.running = 1;
                    v.gates = closed;
                    v.suspended = true;
                }),
                wait(Some(now + SEC), false),
            ),
            (
                "watching, suspended, closed a check ago: read again",
                Box::new(move |v| {
                    v.suspend_when_gated = true;
                    v.running = 1;
                    v.gates = old_closed;
                    v.suspended = true;
                }),
                Step::ReadGates { report: false },
            ),
            (
                "watching, suspended, the gates opened: resume",
                Box::new(move |v| {
                    v.suspend_when_gated = true;
                    v.running = 1;
                    v.gates = open;
                    v.suspended = true;
                }),
                Step::Resume,
            ),
            (
                "watching, open, not suspended, slots busy: wait for an end or a reading",
                Box::new(move |v| {
                    v.suspend_when_gated = true;
                    v.running = 1;
                    v.gates = open;
                }),
                wait(Some(now + SEC), false),
            ),
            (
                "watching, open, a job due and a slot free: claim",
                Box::new(move |v| {
                    v.suspend_when_gated = true;
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = due();
                    v.gates = open;
                }),
                Step::Claim,
            ),
            (
                "watching, suspended, a job due: no start while gated",
                Box::new(move |v| {
                    v.suspend_when_gated = true;
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = due();
                    v.gates = closed;
                    v.suspended = true;
                }),
                wait(Some(now + SEC), false),
            ),
            (
                "suspended, the last attempt ended: resume (nothing left to stop)",
                Box::new(move |v| {
                    v.suspend_when_gated = true;
                    v.gates = closed;
                    v.suspended = true;
                }),
                Step::Resume,
            ),
            (
                "not watching: a closed gate suspends nothing",
                Box::new(move |v| {
                    v.running = 1;
                    v.slots = 2;
                    v.gates = closed;
                    v.next_due = due();
                }),
                wait(Some(now + SEC), false),
            ),
            (
                "watching, suspended in follow with nothing due: wait for the reading",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.suspend_when_gated = true;
                    v.slots = 2;
                    v.running = 1;
                    v.next_due = later(60);
                    v.gates = closed;
                    v.suspended = true;
                }),
                wait(Some(now + SEC), true),
            ),
            // Schedules.
            (
                "the schedules not read: read them first",
                Box::new(move |v| {
                    v.next_tick = None;
                    v.next_due = due();
                }),
                Step::ReadTicks,
            ),
            (
                "a tick due: fire it before anything else",
                Box::new(move |v| {
                    v.next_tick = Some(Some(T0));
                    v.next_due = due();
                    v.gates = open;
                }),
                Step::FireTicks,
            ),
            (
                "a tick due with every slot busy: fire it anyway",
                Box::new(move |v| {
                    v.next_tick = Some(Some(T0));
                    v.running = 1;
                }),
                Step::FireTicks,
            ),
            (
                "shutdown: no tick fires",
                Box::new(move |v| {
                    v.shutdown = true;
                    v.next_tick = Some(Some(T0));
                }),
                Step::End { skipped: false },
            ),
            (
                "follow, idle: sleep until the next tick too",
                Box::new(move |v| {
                    v.mode = Mode::Follow;
                    v.next_due = Some(None);
                    v.next_tick = later(30);
                }),
                Step::Idle { next_due: None, next_tick: later(30).flatten() },
            ),
            (
                "busy: the wait for an attempt's end is cut at the next tick",
                Box::new(move |v| {
                    v.running = 1;
                    v.next_tick = later(7);
                    v.tick_recheck = Some(now + 5 * SEC);
                }),
                wait(Some(now + 5 * SEC), false),
            ),
            (
                "busy: and at the tick when it comes before the next look",
                Box::new(move |v| {
                    v.running = 1;
                    v.next_tick = later(2);
                    v.tick_recheck = Some(now + 5 * SEC);
                }),
                wait(Some(now + 2 * SEC), false),
            ),
        ];
        let mut failures = Vec::new();
        for (what, edit, want) in &rows {
            let mut v = base(now);
            edit(&mut v);
            let got = decide(&v);
            if got != *want {
                failures.push(format!("{what}: got {got:?}, want {want:?}"));
            }
        }
        assert!(failures.is_empty(), "{} of {} rows:\n{}", failures.len(), rows.len(), {
            failures.join("\n")
        });
        assert_eq!(rows.len(), ROWS, "the count the module's report quotes");
    }

    /// How many rows [`the_decision_table`] has.
    const ROWS: usize = 79;

    #[test]
    fn the_chain_table() {
        let yes = ChainView {
            mode: Mode::Drain,
            cooldown_zero: true,
            on_finish: false,
            shutdown: false,
            sweep_due: false,
            gates_open: true,
        };
        type Edit = fn(&mut ChainView);
        let rows: [(&str, Edit, bool); 8] = [
            ("drain, nothing in between", |_| {}, true),
            ("follow too", |c| c.mode = Mode::Follow, true),
            ("not once", |c| c.mode = Mode::Once, false),
            ("not with a cooldown", |c| c.cooldown_zero = false, false),
            ("not with an on-finish command", |c| c.on_finish = true, false),
            ("not after a shutdown request", |c| c.shutdown = true, false),
            ("not when the sweep is due", |c| c.sweep_due = true, false),
            ("not while a gate is closed", |c| c.gates_open = false, false),
        ];
        for (what, edit, want) in rows {
            let mut c = yes;
            edit(&mut c);
            assert_eq!(may_chain(&c), want, "{what}");
        }
    }
}
