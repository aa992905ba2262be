//! A schedule's slots: an interval's, counted from its creation, and a
//! cron expression's, read as wall times in its zone (a slot inside a
//! spring-forward gap does not exist, one inside a fall-back fold fires at
//! its first occurrence), with the tz database compiled in.

use std::sync::OnceLock;

use chrono::TimeZone as _;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::civil;
use jiff::tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase};

use super::{MISSED_COUNT_LIMIT, Schedule, Spec, bad};
use crate::machine::TransitionError;
use crate::time::Timestamp;

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
pub(super) fn parse_cron(text: &str) -> Result<Cron, TransitionError> {
    // croner reads `5,,6` as `5,6`: a list with a hole is more likely a
    // typo than a wish, so it is refused here (stored schedules are not
    // re-checked, so one stored before this rule still fires).
    const NAMES: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
    for (field, name) in text.split_whitespace().zip(NAMES) {
        if field.split(',').any(str::is_empty) {
            return Err(bad(format!(
                "cron expression `{text}`: the {name} field `{field}` has an empty element (two commas, or a comma at an end)"
            )));
        }
    }
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

/// The slots due in a span, as [`Schedule::latest_due`] finds them.
pub(super) struct Due {
    /// The latest.
    pub(super) slot: Timestamp,
    /// How many come before it in the span (at least this many when
    /// `at_least`).
    pub(super) before: u64,
    /// Counting stopped at [`MISSED_COUNT_LIMIT`].
    pub(super) at_least: bool,
    /// The one just before it in the span, if any.
    pub(super) previous: Option<Timestamp>,
}

/// The last millisecond before `t`.
fn before_instant(t: Timestamp) -> Option<Timestamp> {
    t.as_millis().checked_sub(1).map(Timestamp::from_millis)
}

impl Schedule {
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
    pub(super) fn latest_due(&self, after: Timestamp, t: Timestamp) -> Option<Due> {
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
