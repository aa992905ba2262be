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
//!
//! The model and its checks are here; `slots` finds a schedule's slots
//! (intervals, and cron fields read in a zone across its gaps and folds);
//! `tick` decides what a due schedule's tick does ([`plan_tick`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::job::{JobId, NewJob};
use crate::lane::Stamp;
use crate::machine::TransitionError;
use crate::machine::{MAX_NAME_LEN, is_plain_name, validate};
use crate::time::Timestamp;

mod slots;
mod tick;

use slots::parse_cron;
pub use slots::zone;
pub use tick::{
    Tick, TickAction, TickOutcome, TickPlan, Ticks, next_fire, on_time_grace, plan_tick,
};

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
    fn an_empty_list_element_is_refused_not_dropped() {
        for text in ["5,,6 * * * *", ",5 * * * *", "5, * * * *", "0 1,,2 * * *", "0 0 * * 1,,"] {
            let e = Spec::cron(text).unwrap_err().to_string();
            assert!(e.contains("empty element"), "{text}: {e}");
        }
        assert!(Spec::cron("5,6 * * * *").is_ok());
        assert!(Spec::cron("0 3 * * 1,5").is_ok());
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
