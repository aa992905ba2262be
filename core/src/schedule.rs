//! Schedules: recurring jobs stored in the queue file, and the one rule of
//! when each tick fires. Everything here is pure: a schedule, the last slot
//! it decided, and `now` in; the next slot, or the tick to write, out.
//!
//! **Slots.** A cron schedule's slots are *civil* times in its zone (the
//! five fields read as a wall clock, POSIX/Vixie meaning: day of week 0–7
//! with 0 and 7 Sunday, day of month and day of week OR-ed when both are
//! restricted). A civil slot that does not exist that day (inside a
//! spring-forward gap) is skipped; one that happens twice (inside a
//! fall-back fold) fires once, at its first occurrence. An interval
//! schedule's slots are `created_at + k × period` (k ≥ 1), in absolute
//! time, whatever the zone.
//!
//! **The cursor.** A schedule remembers the latest slot it has decided
//! ([`Schedule::cursor`]; at creation, its creation time). A tick is decided
//! only for slots after the cursor and at or before `now`, and deciding it
//! moves the cursor to the latest such slot, so a clock that jumps back, a
//! leap second or a second runner never decides a slot twice. The tick's
//! job carries the idempotency key `KEY@SLOT` ([`tick_key`]), so even two
//! writers that both decided the same slot would make one job.
//!
//! **Catch-up.** When more than one slot passed since the cursor (the
//! machine slept, no runner ran), [`CatchUp::Once`] enqueues the latest of
//! them and counts the others as missed; [`CatchUp::None`] enqueues only a
//! slot a runner reached on time ([`on_time_grace`]) and counts the rest.
//!
//! **Overlap.** With [`Overlap::Skip`] (the default) a tick whose previous
//! tick's job is still pending or running enqueues nothing: the skip is an
//! event on that job, so a slow job does not pile up behind itself.

use std::sync::OnceLock;
use std::time::Duration;

use chrono::TimeZone as _;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::civil;
use jiff::tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase};
use serde::{Deserialize, Serialize};

use crate::job::{Event, EventKind, JobId, JobState, NewJob};
use crate::lane::Stamp;
use crate::machine::TransitionError;
use crate::machine::{MAX_NAME_LEN, is_plain_name, validate};
use crate::time::Timestamp;

/// Shortest interval accepted: slots are decided by a runner's loop, and a
/// queue file is not a timer wheel.
pub const MIN_PERIOD: Duration = Duration::from_secs(1);

/// Longest interval accepted (about 100 years, the CLI's longest duration).
pub const MAX_PERIOD: Duration = Duration::from_secs(100 * 366 * 24 * 3600);

/// Longest schedule key: the key of a tick, `KEY@` and an RFC 3339 UTC
/// time (20 characters, 24 with milliseconds, which an interval's slots
/// have when it was created at a time with milliseconds), must fit a job's
/// idempotency key, or the tick's push would be refused.
pub const MAX_KEY_LEN: usize = MAX_NAME_LEN - 25;

/// Most missed slots counted one by one; beyond, the count says "at least"
/// ([`Missed::at_least`]) and the latest slot is found by searching back.
pub const MISSED_COUNT_LIMIT: u64 = 100_000;

/// The longest grace a late slot gets under [`CatchUp::None`].
pub const MAX_ON_TIME_GRACE: Duration = Duration::from_secs(60);

/// When a schedule fires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Spec {
    /// A cron expression as given: five fields, or a name (`@daily`,
    /// `@hourly`, `@weekly`, `@monthly`, `@yearly`).
    Cron(String),
    /// Every `period` since the schedule was created (milliseconds in
    /// JSON).
    Every(#[serde(with = "millis")] Duration),
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

impl Spec {
    /// A cron expression, checked: five fields (or a name), and at least
    /// one slot in the years to come.
    pub fn cron(text: &str) -> Result<Spec, TransitionError> {
        let text = text.trim();
        parse_cron(text)?;
        Ok(Spec::Cron(text.to_owned()))
    }

    /// An interval, checked against [`MIN_PERIOD`] and [`MAX_PERIOD`].
    pub fn every(period: Duration) -> Result<Spec, TransitionError> {
        if period < MIN_PERIOD || period > MAX_PERIOD {
            return Err(bad(format!(
                "an interval must be from {} to 100 years",
                format_period(MIN_PERIOD)
            )));
        }
        Ok(Spec::Every(period))
    }
}

impl std::fmt::Display for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Spec::Cron(text) => write!(f, "{text}"),
            Spec::Every(period) => write!(f, "every {}", format_period(*period)),
        }
    }
}

/// `2h`, `15m`, `90s`, `1500ms`: the largest unit that divides the period.
pub fn format_period(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [("d", 86_400_000u128), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms >= size && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// What happens to slots that passed with nobody there to fire them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// None runs: only a slot reached on time fires.
    None,
    /// The latest missed slot runs once (systemd's `Persistent=true`).
    #[default]
    Once,
}

impl CatchUp {
    /// The name used by the CLI and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::None => "none",
            CatchUp::Once => "once",
        }
    }
}

/// What a tick does while the previous tick's job has not finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Enqueue nothing; the skip is an event on the unfinished job.
    #[default]
    Skip,
    /// Enqueue anyway.
    Queue,
}

impl Overlap {
    /// The name used by the CLI and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Queue => "queue",
        }
    }
}

/// What a user asks for: `every SPEC CMD` with its flags, or the HTTP
/// equivalent. [`create`] checks it into a [`Schedule`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSchedule {
    /// The schedule's name: letters, digits, `-`, `_`, `.`.
    pub key: String,
    /// When it fires.
    pub spec: Spec,
    /// The IANA zone its cron fields are read in (`Europe/Berlin`, `UTC`).
    pub zone: String,
    /// What happens to missed slots.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// What a tick does while the previous one's job is unfinished.
    #[serde(default)]
    pub overlap: Overlap,
    /// The job each tick enqueues (its idempotency key, parents and due
    /// time are the tick's: they must be unset here).
    pub job: NewJob,
}

/// A stored schedule: what was asked, and where it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// The schedule's name.
    pub key: String,
    /// When it fires.
    pub spec: Spec,
    /// The IANA zone its cron fields are read in.
    pub zone: String,
    /// What happens to missed slots.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// What a tick does while the previous one's job is unfinished.
    #[serde(default)]
    pub overlap: Overlap,
    /// The job each tick enqueues.
    pub job: NewJob,
    /// When it was created: an interval's anchor.
    pub created_at: Timestamp,
    /// Set while paused: no tick fires, and the slots passed meanwhile are
    /// not run on resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Stamp>,
    /// The latest slot decided (fired, skipped or missed); only slots after
    /// it are still to come. At creation, the creation time.
    pub cursor: Timestamp,
    /// The latest tick that enqueued a job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fire: Option<LastFire>,
    /// The latest time slots were passed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_missed: Option<Missed>,
    /// The latest slot skipped because the previous tick's job was
    /// unfinished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_skipped: Option<Timestamp>,
}

/// A tick that enqueued a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastFire {
    /// Its slot.
    pub slot: Timestamp,
    /// When it was decided.
    pub at: Timestamp,
    /// The job it enqueued (or found under its key).
    pub job: JobId,
}

/// Slots passed over at once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missed {
    /// How many.
    pub count: u64,
    /// More may have been: counting stopped at [`MISSED_COUNT_LIMIT`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_least: bool,
    /// When it was decided.
    pub at: Timestamp,
    /// The latest of them.
    pub latest: Timestamp,
}

impl std::fmt::Display for Missed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = if self.count == 1 { "" } else { "s" };
        if self.at_least {
            write!(f, "at least {} slot{plural}", self.count)
        } else {
            write!(f, "{} slot{plural}", self.count)
        }
    }
}

/// A change to a stored schedule (`every --pause/--resume/--remove`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleChange {
    /// No tick fires until resumed.
    Pause(Stamp),
    /// Ticks fire again from the next slot after now.
    Resume,
    /// The schedule is deleted; its jobs stay.
    Remove,
}

/// What [`create`] made of a put, for the store to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutPlan {
    /// No schedule had the key: insert this.
    Insert(Schedule),
    /// The same definition is stored already: nothing to write.
    Unchanged(Schedule),
}

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

fn bad(m: String) -> TransitionError {
    TransitionError::InvalidSchedule(m)
}

/// The idempotency key of a tick: `KEY@2026-12-02T03:00:00Z`.
pub fn tick_key(key: &str, slot: Timestamp) -> String {
    format!("{key}@{}", utc(slot))
}

/// The schedule key and slot a tick's idempotency key names, if it is one.
pub fn parse_tick_key(key: &str) -> Option<(&str, Timestamp)> {
    let (name, time) = key.rsplit_once('@')?;
    let t: jiff::Timestamp = time.parse().ok()?;
    Some((name, Timestamp::from_millis(t.as_millisecond())))
}

fn utc(t: Timestamp) -> String {
    match jiff::Timestamp::from_millisecond(t.as_millis()) {
        Ok(ts) => ts.to_string(),
        Err(_) => t.as_millis().to_string(),
    }
}

/// The zones schedules are read in: the tz database compiled into the
/// binary, so the same schedule means the same instants on every machine
/// and reading it is no I/O.
fn zones() -> &'static TimeZoneDatabase {
    static ZONES: OnceLock<TimeZoneDatabase> = OnceLock::new();
    ZONES.get_or_init(TimeZoneDatabase::bundled)
}

/// The zone named `name` (an IANA name, or `UTC`).
pub fn zone(name: &str) -> Result<TimeZone, TransitionError> {
    zones().get(name).map_err(|_| {
        bad(format!("unknown time zone `{name}` (an IANA name like Europe/Berlin, or UTC)"))
    })
}

/// A cron expression checked at the door ([`Spec::cron`], [`create`]):
/// it compiles, and it matches at least once.
fn parse_cron(text: &str) -> Result<Cron, TransitionError> {
    let cron = compile_cron(text)?;
    // Some expressions parse but never match (`0 0 30 2 *`).
    let start = chrono::Utc.from_utc_datetime(&chrono::NaiveDateTime::default());
    if cron.find_next_occurrence(&start, false).is_err() {
        return Err(bad(format!("cron expression `{text}` never fires")));
    }
    Ok(cron)
}

/// A cron expression compiled, for the slots of a schedule already
/// checked when it was stored.
fn compile_cron(text: &str) -> Result<Cron, TransitionError> {
    let fields = text.split_whitespace().count();
    if !(text.starts_with('@') && fields == 1) && fields != 5 {
        return Err(bad(format!(
            "cron expression `{text}`: expected five fields (minute hour day-of-month month day-of-week) or a name like @daily"
        )));
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(text)
        .map_err(|e| bad(format!("cron expression `{text}`: {e}")))
}

/// Checks a put of `new` at `now` against what the store holds under its
/// key: a new schedule to insert, the same one already there, or a refusal
/// (another definition under the key: remove it first).
pub fn create(
    new: &NewSchedule,
    existing: Option<&Schedule>,
    now: Timestamp,
) -> Result<PutPlan, TransitionError> {
    let new = &normalized(new);
    if !is_plain_name(&new.key) || new.key.len() > MAX_KEY_LEN {
        return Err(bad(format!(
            "schedule key `{}` must be 1 to {MAX_KEY_LEN} characters of letters, digits, `-`, `_` or `.`, not starting with `.`",
            new.key
        )));
    }
    match &new.spec {
        Spec::Cron(text) => {
            parse_cron(text)?;
        }
        Spec::Every(period) => {
            Spec::every(*period)?;
        }
    }
    zone(&new.zone)?;
    if new.job.idempotency_key.is_some()
        || !new.job.after.is_empty()
        || new.job.not_before.is_some()
    {
        return Err(bad(
            "a schedule's job has no key, parents or due time of its own: each tick gives its own"
                .into(),
        ));
    }
    validate(&new.job).map_err(|e| match e {
        TransitionError::InvalidJob(m) => bad(m),
        other => other,
    })?;
    if let Some(old) = existing {
        if old.definition() == *new {
            return Ok(PutPlan::Unchanged(old.clone()));
        }
        return Err(bad(format!(
            "schedule `{}` exists with another definition ({}); remove it first (every --remove {})",
            new.key, old.spec, new.key
        )));
    }
    Ok(PutPlan::Insert(Schedule {
        key: new.key.clone(),
        spec: new.spec.clone(),
        zone: new.zone.clone(),
        catch_up: new.catch_up,
        overlap: new.overlap,
        job: new.job.clone(),
        created_at: now,
        paused: None,
        cursor: now,
        last_fire: None,
        last_missed: None,
        last_skipped: None,
    }))
}

/// `new` as it will be stored and read back: the cron text trimmed, and
/// the period and the job's max runtime in whole milliseconds (what JSON
/// keeps), so the same request twice is the same definition.
fn normalized(new: &NewSchedule) -> NewSchedule {
    let ms = |d: Duration| Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut new = new.clone();
    new.spec = match new.spec {
        Spec::Cron(text) => Spec::Cron(text.trim().to_owned()),
        Spec::Every(period) => Spec::Every(ms(period)),
    };
    new.job.max_runtime = new.job.max_runtime.map(ms);
    new
}

/// Checks a schedule read back from an export before a store restores it
/// as it is (cursor, last fire and all).
pub fn check_restore(s: &Schedule) -> Result<(), TransitionError> {
    create(&s.definition(), None, s.created_at).map(|_| ())
}

/// A change applied: the schedule after it, or `None` when removed.
pub fn change(s: &Schedule, change: &ScheduleChange, now: Timestamp) -> Option<Schedule> {
    let mut s = s.clone();
    match change {
        ScheduleChange::Pause(stamp) => {
            if s.paused.is_none() {
                s.paused = Some(stamp.clone());
            }
        }
        ScheduleChange::Resume => {
            if s.paused.take().is_some() {
                // The slots passed while paused are not run.
                s.cursor = s.cursor.max(now);
            }
        }
        ScheduleChange::Remove => return None,
    }
    Some(s)
}

/// The slots due in a span, as [`Schedule::latest_due`] finds them.
struct Due {
    /// The latest.
    slot: Timestamp,
    /// How many come before it in the span (at least this many when
    /// `at_least`).
    before: u64,
    /// Counting stopped at [`MISSED_COUNT_LIMIT`].
    at_least: bool,
    /// The one just before it in the span, if any.
    previous: Option<Timestamp>,
}

/// The last millisecond before `t`.
fn before_instant(t: Timestamp) -> Option<Timestamp> {
    t.as_millis().checked_sub(1).map(Timestamp::from_millis)
}

impl Schedule {
    /// What was asked, without where it is.
    pub fn definition(&self) -> NewSchedule {
        NewSchedule {
            key: self.key.clone(),
            spec: self.spec.clone(),
            zone: self.zone.clone(),
            catch_up: self.catch_up,
            overlap: self.overlap,
            job: self.job.clone(),
        }
    }

    /// The first slot strictly after `t`, if any (a cron expression may
    /// have no slot left before the year 2100; an unknown zone has none).
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        match &self.spec {
            Spec::Every(period) => {
                let p = i64::try_from(period.as_millis()).ok()?.max(1);
                let anchor = self.created_at.as_millis();
                let k = if t.as_millis() < anchor { 0 } else { (t.as_millis() - anchor) / p };
                Some(Timestamp::from_millis(anchor.checked_add(k.checked_add(1)?.checked_mul(p)?)?))
            }
            Spec::Cron(text) => {
                let cron = compile_cron(text).ok()?;
                let tz = zone(&self.zone).ok()?;
                next_cron_slot(&cron, &tz, t)
            }
        }
    }

    /// The slots after `after` and at or before `t`: the latest of them,
    /// how many come before it, and the one just before it.
    fn latest_due(&self, after: Timestamp, t: Timestamp) -> Option<Due> {
        match &self.spec {
            Spec::Every(period) => {
                let p = i64::try_from(period.as_millis()).ok()?.max(1);
                let anchor = self.created_at.as_millis();
                let index = |x: i64| if x < anchor { 0 } else { (x - anchor) / p };
                let (first, last) = (index(after.as_millis()), index(t.as_millis()));
                if last <= first {
                    return None;
                }
                let slot = Timestamp::from_millis(anchor + last * p);
                let before = u64::try_from(last - first - 1).unwrap_or(0);
                let previous =
                    (before > 0).then(|| Timestamp::from_millis(anchor + (last - 1) * p));
                Some(Due { slot, before, at_least: false, previous })
            }
            Spec::Cron(text) => {
                let cron = compile_cron(text).ok()?;
                let tz = zone(&self.zone).ok()?;
                // One walk through the slots, each step one cron occurrence.
                let mut slots = CronSlots::after(&cron, &tz, after)?;
                let (mut latest, mut previous) = (None, None);
                let mut count = 0u64;
                while let Some(next) = slots.next().filter(|n| *n <= t) {
                    previous = latest;
                    latest = Some(next);
                    count += 1;
                    if count > MISSED_COUNT_LIMIT {
                        // Too many to count: the latest is found by
                        // searching back from `t`, and the one before it
                        // from there.
                        let slot =
                            prev_cron_slot(&cron, &tz, t).filter(|s| *s > next).unwrap_or(next);
                        let previous = prev_cron_slot(&cron, &tz, before_instant(slot)?)
                            .filter(|s| *s > after);
                        return Some(Due {
                            slot,
                            before: MISSED_COUNT_LIMIT,
                            at_least: true,
                            previous,
                        });
                    }
                }
                let slot = latest?;
                Some(Due { slot, before: count - 1, at_least: false, previous })
            }
        }
    }

    /// When the next tick fires: the first slot after the cursor; `None`
    /// while paused (or when no slot is left).
    pub fn next_fire(&self) -> Option<Timestamp> {
        if self.paused.is_some() {
            return None;
        }
        self.next_after(self.cursor)
    }

    /// A slot as a person in the schedule's zone reads it:
    /// `2026-12-02 03:00:00 CET`.
    pub fn local(&self, t: Timestamp) -> String {
        let Ok(ts) = jiff::Timestamp::from_millisecond(t.as_millis()) else {
            return t.as_millis().to_string();
        };
        match zone(&self.zone) {
            Ok(tz) => ts.to_zoned(tz).strftime("%Y-%m-%d %H:%M:%S %Z").to_string(),
            Err(_) => ts.to_string(),
        }
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

// --- Cron slots in a zone ---------------------------------------------------

/// How far before `t`'s wall time the search for the next slot starts
/// (and after it, the search back for the latest): a fall-back fold
/// repeats up to this much wall time, and a slot inside it whose first
/// occurrence is on the other side of `t` must not be passed over.
const FOLD_MARGIN_HOURS: i64 = 3;

/// Wall times are handed to croner as UTC (a calendar without gaps or
/// folds); jiff maps each back to an instant in the zone.
fn to_chrono(dt: civil::DateTime) -> Option<chrono::DateTime<chrono::Utc>> {
    let date =
        chrono::NaiveDate::from_ymd_opt(i32::from(dt.year()), dt.month() as u32, dt.day() as u32)?;
    let time =
        chrono::NaiveTime::from_hms_opt(dt.hour() as u32, dt.minute() as u32, dt.second() as u32)?;
    Some(chrono::Utc.from_utc_datetime(&date.and_time(time)))
}

fn from_chrono(dt: &chrono::DateTime<chrono::Utc>) -> Option<civil::DateTime> {
    use chrono::{Datelike, Timelike};
    let year = i16::try_from(dt.year()).ok()?;
    civil::DateTime::new(
        year,
        i8::try_from(dt.month()).ok()?,
        i8::try_from(dt.day()).ok()?,
        i8::try_from(dt.hour()).ok()?,
        i8::try_from(dt.minute()).ok()?,
        i8::try_from(dt.second()).ok()?,
        0,
    )
    .ok()
}

/// The instant a wall-time slot fires at in `tz`: `None` inside a gap
/// (the slot does not exist that day), the first occurrence inside a fold.
fn instant_of(tz: &TimeZone, dt: civil::DateTime) -> Option<Timestamp> {
    let ambiguous = tz.to_ambiguous_timestamp(dt);
    if matches!(ambiguous.offset(), AmbiguousOffset::Gap { .. }) {
        return None;
    }
    let ts = ambiguous.compatible().ok()?;
    Some(Timestamp::from_millis(ts.as_millisecond()))
}

fn wall_time(tz: &TimeZone, t: Timestamp) -> Option<civil::DateTime> {
    let ts = jiff::Timestamp::from_millisecond(t.as_millis()).ok()?;
    Some(tz.to_datetime(ts))
}

/// The slots of a cron expression in a zone after an instant, in order.
///
/// Slots are visited in wall-time order, and among the slots that exist
/// their instants increase with it (a fold's wall times map to their first
/// occurrence), so once past the start each cron occurrence that exists is
/// the next slot: a walk through many slots is one step per slot.
struct CronSlots<'a> {
    cron: &'a Cron,
    tz: &'a TimeZone,
    /// The wall time (as chrono's UTC) the search goes on from.
    wall: chrono::DateTime<chrono::Utc>,
    /// The latest instant returned (or the start): every slot returned is
    /// after it.
    after: Timestamp,
}

impl<'a> CronSlots<'a> {
    /// The slots after `t`. The search starts [`FOLD_MARGIN_HOURS`] of wall
    /// time before `t`'s, so that a slot in a fold whose first occurrence
    /// is after `t` is not passed over.
    fn after(cron: &'a Cron, tz: &'a TimeZone, t: Timestamp) -> Option<Self> {
        let start =
            wall_time(tz, t)?.checked_sub(jiff::Span::new().hours(FOLD_MARGIN_HOURS)).ok()?;
        Some(CronSlots { cron, tz, wall: to_chrono(start)?, after: t })
    }
}

impl Iterator for CronSlots<'_> {
    type Item = Timestamp;

    fn next(&mut self) -> Option<Timestamp> {
        // Bounded: the steps before a slot past `after` cover the margin,
        // and the occurrences inside gaps; croner itself stops at its last
        // year.
        for _ in 0..100_000 {
            let next = self.cron.find_next_occurrence(&self.wall, false).ok()?;
            self.wall = next;
            if let Some(instant) = instant_of(self.tz, from_chrono(&next)?) {
                if instant > self.after {
                    self.after = instant;
                    return Some(instant);
                }
            }
        }
        None
    }
}

fn next_cron_slot(cron: &Cron, tz: &TimeZone, t: Timestamp) -> Option<Timestamp> {
    CronSlots::after(cron, tz, t)?.next()
}

/// The latest slot at or before `t` (used only when too many slots passed
/// to count them one by one). The search back starts [`FOLD_MARGIN_HOURS`]
/// of wall time after `t`'s: inside a fold's second pass, slots of a later
/// wall time than `t`'s fired (at their first occurrence) before `t`.
fn prev_cron_slot(cron: &Cron, tz: &TimeZone, t: Timestamp) -> Option<Timestamp> {
    let start = wall_time(tz, t)?.checked_add(jiff::Span::new().hours(FOLD_MARGIN_HOURS)).ok()?;
    let mut cur = to_chrono(start)?;
    let mut inclusive = true;
    for _ in 0..100_000 {
        let prev = cron.find_previous_occurrence(&cur, inclusive).ok()?;
        inclusive = false;
        if let Some(instant) = instant_of(tz, from_chrono(&prev)?) {
            if instant <= t {
                return Some(instant);
            }
        }
        cur = prev;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        let t: jiff::Timestamp = s.parse().unwrap();
        Timestamp::from_millis(t.as_millisecond())
    }

    fn schedule(spec: Spec, zone: &str, created: &str) -> Schedule {
        let new = NewSchedule {
            key: "s".into(),
            spec,
            zone: zone.into(),
            catch_up: CatchUp::Once,
            overlap: Overlap::Skip,
            job: NewJob::shell("true", "/"),
        };
        match create(&new, None, at(created)).unwrap() {
            PutPlan::Insert(s) => s,
            PutPlan::Unchanged(_) => unreachable!(),
        }
    }

    fn slots(s: &Schedule, from: &str, n: usize) -> Vec<String> {
        let mut t = at(from);
        let mut out = Vec::new();
        for _ in 0..n {
            t = s.next_after(t).unwrap();
            out.push(s.local(t));
        }
        out
    }

    #[test]
    fn the_same_request_twice_is_the_same_definition() {
        let mut new = NewSchedule {
            key: "s".into(),
            spec: Spec::Every(Duration::from_micros(1_000_500)),
            zone: "UTC".into(),
            catch_up: CatchUp::Once,
            overlap: Overlap::Skip,
            job: NewJob::shell("true", "/"),
        };
        new.job.max_runtime = Some(Duration::from_micros(2_000_700));
        let PutPlan::Insert(stored) = create(&new, None, at("2026-12-01T00:00:00Z")).unwrap()
        else {
            unreachable!()
        };
        assert_eq!(stored.spec, Spec::Every(Duration::from_millis(1000)));
        // Stored, read back through JSON, and asked again.
        let json = serde_json::to_string(&stored).unwrap();
        let back: Schedule = serde_json::from_str(&json).unwrap();
        let again = create(&new, Some(&back), at("2026-12-01T00:00:01Z")).unwrap();
        assert!(matches!(again, PutPlan::Unchanged(_)), "{again:?}");
        new.spec = Spec::Cron("  @daily ".into());
        assert!(create(&new, None, at("2026-12-01T00:00:00Z")).is_ok());
    }

    #[test]
    fn cron_days_of_week_are_posix() {
        // 2026-12-06 is a Sunday: 0 and 7 are Sunday, 1 is Monday.
        let s = schedule(Spec::cron("0 3 * * 0").unwrap(), "UTC", "2026-12-01T00:00:00Z");
        assert_eq!(slots(&s, "2026-12-01T00:00:00Z", 1), ["2026-12-06 03:00:00 UTC"]);
        let s = schedule(Spec::cron("0 3 * * 7").unwrap(), "UTC", "2026-12-01T00:00:00Z");
        assert_eq!(slots(&s, "2026-12-01T00:00:00Z", 1), ["2026-12-06 03:00:00 UTC"]);
        let s = schedule(Spec::cron("0 3 * * 1").unwrap(), "UTC", "2026-12-01T00:00:00Z");
        assert_eq!(slots(&s, "2026-12-01T00:00:00Z", 1), ["2026-12-07 03:00:00 UTC"]);
    }

    #[test]
    fn spring_forward_skips_a_slot_that_does_not_exist() {
        // Europe/Berlin, 2026-03-29: 02:00 → 03:00.
        let s =
            schedule(Spec::cron("30 2 * * *").unwrap(), "Europe/Berlin", "2026-03-27T00:00:00Z");
        assert_eq!(
            slots(&s, "2026-03-27T00:00:00Z", 3),
            ["2026-03-27 02:30:00 CET", "2026-03-28 02:30:00 CET", "2026-03-30 02:30:00 CEST"]
        );
    }

    #[test]
    fn fall_back_fires_a_repeated_slot_once() {
        // Europe/Berlin, 2026-10-25: 03:00 → 02:00.
        let s =
            schedule(Spec::cron("30 2 * * *").unwrap(), "Europe/Berlin", "2026-10-24T00:00:00Z");
        assert_eq!(
            slots(&s, "2026-10-24T00:00:00Z", 3),
            ["2026-10-24 02:30:00 CEST", "2026-10-25 02:30:00 CEST", "2026-10-26 02:30:00 CET"]
        );
    }

    #[test]
    fn intervals_count_from_creation_and_catch_up_once() {
        let s =
            schedule(Spec::every(Duration::from_secs(2)).unwrap(), "UTC", "2026-12-01T00:00:00Z");
        assert_eq!(s.next_fire(), Some(at("2026-12-01T00:00:02Z")));
        assert!(plan_tick(&s, at("2026-12-01T00:00:01.999Z"), None).is_none());
        let p = plan_tick(&s, at("2026-12-01T00:00:11Z"), None).unwrap();
        assert_eq!(p.slot, at("2026-12-01T00:00:10Z"));
        assert_eq!(p.missed, 4);
        assert!(
            matches!(&p.action, TickAction::Enqueue(j) if j.idempotency_key.as_deref() == Some("s@2026-12-01T00:00:10Z"))
        );
        assert_eq!(p.schedule.cursor, p.slot);
        // Decided: the same now decides nothing again, nor an earlier one.
        assert!(plan_tick(&p.schedule, at("2026-12-01T00:00:11Z"), None).is_none());
        assert!(plan_tick(&p.schedule, at("2026-12-01T00:00:03Z"), None).is_none());
    }
}
