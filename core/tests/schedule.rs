//! Schedules through the public core API (`schedule::create`,
//! `Schedule::next_after`, `plan_tick`): cron slots across daylight-saving
//! gaps and folds in several zones (a civil slot that does not exist is
//! skipped, one that happens twice fires once, at its first occurrence),
//! calendar corners (month ends, leap days, Sunday as 0 and 7, day of month
//! OR day of week), intervals, and properties over an injected sequence of
//! `now`s (sleeps, long gaps, backward jumps) checked against an oracle
//! written from the rule's words: which instants are slots is decided
//! minute by minute from the wall clock in the zone, not by the code under
//! test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a broken expectation in a test is a failure"
)]

use std::time::Duration;

use proptest::prelude::*;
use slothqueue_core::machine::validate;
use slothqueue_core::schedule::{
    self, CatchUp, MAX_KEY_LEN, MAX_ON_TIME_GRACE, MISSED_COUNT_LIMIT, NewSchedule, Overlap,
    PutPlan, Schedule, Spec, TickAction, on_time_grace, plan_tick, tick_key,
};
use slothqueue_core::{JobState, NewJob, Timestamp};

fn at(s: &str) -> Timestamp {
    let t: jiff::Timestamp = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
    Timestamp::from_millis(t.as_millisecond())
}

fn utc(t: Timestamp) -> String {
    jiff::Timestamp::from_millisecond(t.as_millis()).unwrap().to_string()
}

fn new_schedule(spec: Spec, zone: &str) -> NewSchedule {
    NewSchedule {
        key: "s".into(),
        spec,
        zone: zone.into(),
        catch_up: CatchUp::Once,
        overlap: Overlap::Queue,
        job: NewJob::shell("true", "/"),
    }
}

fn created(new: &NewSchedule, now: Timestamp) -> Schedule {
    match schedule::create(new, None, now).unwrap() {
        PutPlan::Insert(s) => s,
        PutPlan::Unchanged(_) => unreachable!("no schedule was there"),
    }
}

fn cron(text: &str, zone: &str, created_at: &str) -> Schedule {
    created(&new_schedule(Spec::cron(text).unwrap(), zone), at(created_at))
}

fn every(period: Duration, zone: &str, created_at: &str) -> Schedule {
    created(&new_schedule(Spec::every(period).unwrap(), zone), at(created_at))
}

/// The next `n` slots after `from`, each as UTC and as read in the zone.
fn slots(s: &Schedule, from: &str, n: usize) -> Vec<(String, String)> {
    let mut t = at(from);
    let mut out = Vec::new();
    for _ in 0..n {
        t = s.next_after(t).unwrap_or_else(|| panic!("a slot after {}", utc(t)));
        out.push((utc(t), s.local(t)));
    }
    out
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected.iter().map(|(u, l)| ((*u).to_owned(), (*l).to_owned())).collect()
}

fn next_utc(s: &Schedule, from: &str) -> String {
    utc(s.next_after(at(from)).unwrap())
}

// --- Europe/Berlin: 2026-03-29 02:00 CET → 03:00 CEST; 2026-10-25 03:00 CEST → 02:00 CET ---

#[test]
fn berlin_spring_forward_skips_the_daily_slot_in_the_gap() {
    let s = cron("30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z");
    assert_eq!(
        slots(&s, "2026-03-27T12:00:00Z", 3),
        pairs(&[
            ("2026-03-28T01:30:00Z", "2026-03-28 02:30:00 CET"),
            ("2026-03-30T00:30:00Z", "2026-03-30 02:30:00 CEST"),
            ("2026-03-31T00:30:00Z", "2026-03-31 02:30:00 CEST"),
        ])
    );
}

#[test]
fn berlin_hourly_cron_across_the_gap_has_no_0200() {
    let s = cron("0 * * * *", "Europe/Berlin", "2026-03-28T23:30:00Z");
    assert_eq!(
        slots(&s, "2026-03-28T23:30:00Z", 3),
        pairs(&[
            ("2026-03-29T00:00:00Z", "2026-03-29 01:00:00 CET"),
            ("2026-03-29T01:00:00Z", "2026-03-29 03:00:00 CEST"),
            ("2026-03-29T02:00:00Z", "2026-03-29 04:00:00 CEST"),
        ])
    );
}

#[test]
fn berlin_fall_back_fires_the_repeated_daily_slot_once() {
    let s = cron("30 2 * * *", "Europe/Berlin", "2026-10-23T12:00:00Z");
    assert_eq!(
        slots(&s, "2026-10-23T12:00:00Z", 3),
        pairs(&[
            ("2026-10-24T00:30:00Z", "2026-10-24 02:30:00 CEST"),
            ("2026-10-25T00:30:00Z", "2026-10-25 02:30:00 CEST"),
            ("2026-10-26T01:30:00Z", "2026-10-26 02:30:00 CET"),
        ])
    );
    // From inside the fold's second pass (02:15 CET) and from just after
    // the first 02:30: the repeated 02:30 CET is not a slot.
    assert_eq!(next_utc(&s, "2026-10-25T01:15:00Z"), "2026-10-26T01:30:00Z");
    assert_eq!(next_utc(&s, "2026-10-25T00:30:00Z"), "2026-10-26T01:30:00Z");
    // From just before the first 02:30 (02:29 CEST): it is the next.
    assert_eq!(next_utc(&s, "2026-10-25T00:29:00Z"), "2026-10-25T00:30:00Z");
}

#[test]
fn berlin_hourly_cron_across_the_fold_fires_0200_once() {
    let s = cron("0 * * * *", "Europe/Berlin", "2026-10-24T22:30:00Z");
    assert_eq!(
        slots(&s, "2026-10-24T22:30:00Z", 4),
        pairs(&[
            ("2026-10-24T23:00:00Z", "2026-10-25 01:00:00 CEST"),
            ("2026-10-25T00:00:00Z", "2026-10-25 02:00:00 CEST"),
            // 02:00 CET (01:00Z) is the same wall time again: no slot.
            ("2026-10-25T02:00:00Z", "2026-10-25 03:00:00 CET"),
            ("2026-10-25T03:00:00Z", "2026-10-25 04:00:00 CET"),
        ])
    );
    // A tick decided across the fold counts the one slot it passed over.
    let mut s = s;
    s.cursor = at("2026-10-24T23:00:00Z");
    let p = plan_tick(&s, at("2026-10-25T02:00:00Z"), None).unwrap();
    assert_eq!((utc(p.slot), p.missed), ("2026-10-25T02:00:00Z".into(), 1));
    let missed = p.schedule.last_missed.unwrap();
    assert_eq!(utc(missed.latest), "2026-10-25T00:00:00Z");
}

#[test]
fn berlin_interval_is_absolute_across_the_fold() {
    let s = every(Duration::from_secs(3600), "Europe/Berlin", "2026-10-24T23:00:00Z");
    assert_eq!(
        slots(&s, "2026-10-24T23:00:00Z", 3),
        pairs(&[
            ("2026-10-25T00:00:00Z", "2026-10-25 02:00:00 CEST"),
            ("2026-10-25T01:00:00Z", "2026-10-25 02:00:00 CET"),
            ("2026-10-25T02:00:00Z", "2026-10-25 03:00:00 CET"),
        ])
    );
}

// --- America/New_York: 2026-03-08 02:00 EST → 03:00 EDT; 2026-11-01 02:00 EDT → 01:00 EST ---

#[test]
fn new_york_spring_forward_skips_0230() {
    let s = cron("30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z");
    assert_eq!(
        slots(&s, "2026-03-07T00:00:00Z", 2),
        pairs(&[
            ("2026-03-07T07:30:00Z", "2026-03-07 02:30:00 EST"),
            ("2026-03-09T06:30:00Z", "2026-03-09 02:30:00 EDT"),
        ])
    );
}

#[test]
fn new_york_fall_back_fires_0130_once_and_hourly_skips_the_repeat() {
    let s = cron("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z");
    assert_eq!(
        slots(&s, "2026-10-31T12:00:00Z", 2),
        pairs(&[
            ("2026-11-01T05:30:00Z", "2026-11-01 01:30:00 EDT"),
            ("2026-11-02T06:30:00Z", "2026-11-02 01:30:00 EST"),
        ])
    );
    assert_eq!(next_utc(&s, "2026-11-01T06:15:00Z"), "2026-11-02T06:30:00Z");
    let h = cron("0 * * * *", "America/New_York", "2026-11-01T04:30:00Z");
    assert_eq!(
        slots(&h, "2026-11-01T04:30:00Z", 2),
        pairs(&[
            ("2026-11-01T05:00:00Z", "2026-11-01 01:00:00 EDT"),
            ("2026-11-01T07:00:00Z", "2026-11-01 02:00:00 EST"),
        ])
    );
}

// --- Australia/Lord_Howe (30-minute DST): 2026-10-04 02:00 +1030 → 02:30 +11;
// 2027-04-04 02:00 +11 → 01:30 +1030 ---

#[test]
fn lord_howe_spring_forward_skips_the_half_hour_gap() {
    let s = cron("15 2 * * *", "Australia/Lord_Howe", "2026-10-02T00:00:00Z");
    assert_eq!(
        slots(&s, "2026-10-02T00:00:00Z", 2),
        pairs(&[
            ("2026-10-02T15:45:00Z", "2026-10-03 02:15:00 +1030"),
            ("2026-10-04T15:15:00Z", "2026-10-05 02:15:00 +11"),
        ])
    );
    // 02:30 exists that day: the gap is only half an hour.
    let s = cron("30 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z");
    assert_eq!(next_utc(&s, "2026-10-03T00:00:00Z"), "2026-10-03T15:30:00Z");
    // Every half hour: 01:30 +1030, (02:00 missing), 02:30 +11: thirty
    // minutes apart in absolute time.
    let s = cron("*/30 * * * *", "Australia/Lord_Howe", "2026-10-03T14:40:00Z");
    assert_eq!(
        slots(&s, "2026-10-03T14:40:00Z", 3),
        pairs(&[
            ("2026-10-03T15:00:00Z", "2026-10-04 01:30:00 +1030"),
            ("2026-10-03T15:30:00Z", "2026-10-04 02:30:00 +11"),
            ("2026-10-03T16:00:00Z", "2026-10-04 03:00:00 +11"),
        ])
    );
}

#[test]
fn lord_howe_fall_back_fires_the_repeated_half_hour_once() {
    let s = cron("45 1 * * *", "Australia/Lord_Howe", "2027-04-02T00:00:00Z");
    assert_eq!(
        slots(&s, "2027-04-02T00:00:00Z", 3),
        pairs(&[
            ("2027-04-02T14:45:00Z", "2027-04-03 01:45:00 +11"),
            ("2027-04-03T14:45:00Z", "2027-04-04 01:45:00 +11"),
            ("2027-04-04T15:15:00Z", "2027-04-05 01:45:00 +1030"),
        ])
    );
    // Every quarter hour: 01:30 and 01:45 +11, then 02:00 +1030; the
    // second 01:30 and 01:45 (15:00Z, 15:15Z) are no slots.
    let s = cron("*/15 * * * *", "Australia/Lord_Howe", "2027-04-03T14:20:00Z");
    assert_eq!(
        slots(&s, "2027-04-03T14:20:00Z", 3),
        pairs(&[
            ("2027-04-03T14:30:00Z", "2027-04-04 01:30:00 +11"),
            ("2027-04-03T14:45:00Z", "2027-04-04 01:45:00 +11"),
            ("2027-04-03T15:30:00Z", "2027-04-04 02:00:00 +1030"),
        ])
    );
}

// --- Australia/Sydney (southern hemisphere): 2026-10-04 02:00 AEST → 03:00 AEDT;
// 2027-04-04 03:00 AEDT → 02:00 AEST ---

#[test]
fn sydney_spring_forward_in_october_and_fall_back_in_april() {
    let s = cron("30 2 * * *", "Australia/Sydney", "2026-10-02T00:00:00Z");
    assert_eq!(
        slots(&s, "2026-10-02T00:00:00Z", 2),
        pairs(&[
            ("2026-10-02T16:30:00Z", "2026-10-03 02:30:00 AEST"),
            ("2026-10-04T15:30:00Z", "2026-10-05 02:30:00 AEDT"),
        ])
    );
    let s = cron("30 2 * * *", "Australia/Sydney", "2027-04-02T00:00:00Z");
    assert_eq!(
        slots(&s, "2027-04-02T00:00:00Z", 3),
        pairs(&[
            ("2027-04-02T15:30:00Z", "2027-04-03 02:30:00 AEDT"),
            ("2027-04-03T15:30:00Z", "2027-04-04 02:30:00 AEDT"),
            ("2027-04-04T16:30:00Z", "2027-04-05 02:30:00 AEST"),
        ])
    );
}

// --- America/Santiago (changes at midnight): 2026-09-06 00:00 -04 → 01:00 -03;
// 2026-04-05 00:00 -03 → 2026-04-04 23:00 -04 ---

#[test]
fn santiago_daily_midnight_is_skipped_the_day_midnight_does_not_exist() {
    let s = cron("@daily", "America/Santiago", "2026-09-04T12:00:00Z");
    assert_eq!(
        slots(&s, "2026-09-04T12:00:00Z", 2),
        pairs(&[
            ("2026-09-05T04:00:00Z", "2026-09-05 00:00:00 -04"),
            ("2026-09-07T03:00:00Z", "2026-09-07 00:00:00 -03"),
        ])
    );
    let s = cron("30 23 * * *", "America/Santiago", "2026-04-03T12:00:00Z");
    assert_eq!(
        slots(&s, "2026-04-03T12:00:00Z", 3),
        pairs(&[
            ("2026-04-04T02:30:00Z", "2026-04-03 23:30:00 -03"),
            ("2026-04-05T02:30:00Z", "2026-04-04 23:30:00 -03"),
            ("2026-04-06T03:30:00Z", "2026-04-05 23:30:00 -04"),
        ])
    );
}

// --- Calendar ---

#[test]
fn day_31_skips_the_months_without_one() {
    let s = cron("0 0 31 * *", "UTC", "2027-01-01T00:00:00Z");
    let got: Vec<String> = slots(&s, "2027-01-01T00:00:00Z", 7).into_iter().map(|x| x.0).collect();
    assert_eq!(
        got,
        [
            "2027-01-31T00:00:00Z",
            "2027-03-31T00:00:00Z",
            "2027-05-31T00:00:00Z",
            "2027-07-31T00:00:00Z",
            "2027-08-31T00:00:00Z",
            "2027-10-31T00:00:00Z",
            "2027-12-31T00:00:00Z",
        ]
    );
}

#[test]
fn leap_day_fires_only_in_leap_years() {
    let s = cron("0 12 29 2 *", "UTC", "2026-12-01T00:00:00Z");
    let got: Vec<String> = slots(&s, "2026-12-01T00:00:00Z", 3).into_iter().map(|x| x.0).collect();
    assert_eq!(got, ["2028-02-29T12:00:00Z", "2032-02-29T12:00:00Z", "2036-02-29T12:00:00Z"]);
    // 2100 is no leap year: after 2096 the next is 2104.
    assert_eq!(next_utc(&s, "2096-03-01T00:00:00Z"), "2104-02-29T12:00:00Z");
    // A day that never comes is refused.
    assert!(Spec::cron("0 0 30 2 *").is_err());
    assert!(Spec::cron("0 0 31 4 *").is_err());
}

#[test]
fn sunday_is_0_and_7_and_ranges_of_days_work() {
    let zero = cron("0 0 * * 0", "UTC", "2026-12-01T00:00:00Z");
    let seven = cron("0 0 * * 7", "UTC", "2026-12-01T00:00:00Z");
    let sundays = slots(&zero, "2026-12-01T00:00:00Z", 5);
    assert_eq!(sundays, slots(&seven, "2026-12-01T00:00:00Z", 5));
    assert_eq!(sundays[0].0, "2026-12-06T00:00:00Z");
    assert_eq!(sundays[1].0, "2026-12-13T00:00:00Z");
    // Weekdays, Monday to Friday: Tue 1 … Fri 4, then Mon 7.
    let weekdays = cron("0 9 * * 1-5", "UTC", "2026-12-01T00:00:00Z");
    let got: Vec<String> =
        slots(&weekdays, "2026-12-01T00:00:00Z", 5).into_iter().map(|x| x.0).collect();
    assert_eq!(
        got,
        [
            "2026-12-01T09:00:00Z",
            "2026-12-02T09:00:00Z",
            "2026-12-03T09:00:00Z",
            "2026-12-04T09:00:00Z",
            "2026-12-07T09:00:00Z",
        ]
    );
    // Names: @weekly is Sunday midnight.
    let weekly = cron("@weekly", "UTC", "2026-12-01T00:00:00Z");
    assert_eq!(next_utc(&weekly, "2026-12-01T00:00:00Z"), "2026-12-06T00:00:00Z");
}

#[test]
fn day_of_month_or_day_of_week_when_both_are_restricted() {
    // The 13th, or any Friday (Vixie cron): Fri 4, 11, Sun 13, Fri 18, 25.
    let s = cron("0 0 13 * 5", "UTC", "2026-12-01T00:00:00Z");
    let got: Vec<String> = slots(&s, "2026-12-01T00:00:00Z", 6).into_iter().map(|x| x.0).collect();
    assert_eq!(
        got,
        [
            "2026-12-04T00:00:00Z",
            "2026-12-11T00:00:00Z",
            "2026-12-13T00:00:00Z",
            "2026-12-18T00:00:00Z",
            "2026-12-25T00:00:00Z",
            "2027-01-01T00:00:00Z",
        ]
    );
    // Only one restricted: that one alone.
    let dom = cron("0 0 13 * *", "UTC", "2026-12-01T00:00:00Z");
    assert_eq!(next_utc(&dom, "2026-12-13T00:00:00Z"), "2027-01-13T00:00:00Z");
    let dow = cron("0 0 * * 5", "UTC", "2026-12-01T00:00:00Z");
    assert_eq!(next_utc(&dow, "2026-12-11T00:00:00Z"), "2026-12-18T00:00:00Z");
}

#[test]
fn cron_expressions_are_checked() {
    for bad in ["", "* * * *", "* * * * * *", "61 * * * *", "* 24 * * *", "@sometimes", "0 0 0 * *"]
    {
        assert!(Spec::cron(bad).is_err(), "{bad:?} must be refused");
    }
    for good in ["*/5 * * * *", "@hourly", "@daily", "@monthly", "@yearly", "0 3 * * mon-fri"] {
        assert!(Spec::cron(good).is_ok(), "{good:?} must be accepted");
    }
    let unknown = new_schedule(Spec::cron("0 3 * * *").unwrap(), "Mars/Olympus_Mons");
    assert!(schedule::create(&unknown, None, at("2026-12-01T00:00:00Z")).is_err());
}

// --- Intervals ---

#[test]
fn intervals_count_from_creation_with_milliseconds() {
    let s = every(Duration::from_millis(1500), "UTC", "2026-12-01T00:00:00.250Z");
    let got: Vec<String> =
        slots(&s, "2026-12-01T00:00:00.250Z", 3).into_iter().map(|x| x.0).collect();
    assert_eq!(
        got,
        ["2026-12-01T00:00:01.75Z", "2026-12-01T00:00:03.25Z", "2026-12-01T00:00:04.75Z"]
    );
    // Before creation the first slot is still one period after it.
    assert_eq!(next_utc(&s, "2026-11-01T00:00:00Z"), "2026-12-01T00:00:01.75Z");
    assert!(Spec::every(Duration::from_millis(999)).is_err());
    assert!(Spec::every(Duration::from_secs(101 * 366 * 86_400)).is_err());
}

#[test]
fn a_tick_of_the_longest_key_at_a_slot_with_milliseconds_is_a_valid_job() {
    // An interval created at a time with milliseconds has slots with
    // milliseconds: the tick's key `KEY@…​.123Z` must still be a valid
    // idempotency key, or every fire of the store would be refused.
    let mut new = new_schedule(Spec::every(Duration::from_secs(60)).unwrap(), "UTC");
    new.key = "k".repeat(MAX_KEY_LEN);
    let s = created(&new, at("2026-12-01T00:00:00.123Z"));
    let p = plan_tick(&s, at("2026-12-01T00:01:00.123Z"), None).unwrap();
    let TickAction::Enqueue(job) = &p.action else { panic!("{:?}", p.action) };
    assert_eq!(job.idempotency_key.as_deref(), Some(tick_key(&new.key, p.slot).as_str()));
    validate(job).unwrap();
    assert_eq!(
        schedule::parse_tick_key(job.idempotency_key.as_deref().unwrap()),
        Some((new.key.as_str(), p.slot))
    );
    new.key.push('k');
    assert!(schedule::create(&new, None, at("2026-12-01T00:00:00Z")).is_err());
}

// --- Counting very many missed slots ---

#[test]
fn too_many_missed_slots_say_at_least_and_find_the_latest_across_a_fold() {
    // Per minute in Berlin, with more than MISSED_COUNT_LIMIT minutes
    // since the cursor, decided at 02:45:30 CET in the fold's second pass:
    // the latest slot is 02:59 CEST (00:59Z), since the repeated wall
    // times are no slots.
    let mut s = cron("* * * * *", "Europe/Berlin", "2026-08-01T00:00:00Z");
    let now = at("2026-10-25T01:45:30Z");
    let limit = i64::try_from(MISSED_COUNT_LIMIT).unwrap();
    s.cursor = Timestamp::from_millis(now.as_millis() - (limit + 500) * 60_000);
    let p = plan_tick(&s, now, None).unwrap();
    assert_eq!(utc(p.slot), "2026-10-25T00:59:00Z");
    assert_eq!(p.missed, MISSED_COUNT_LIMIT);
    let missed = p.schedule.last_missed.clone().unwrap();
    assert!(missed.at_least);
    assert_eq!(utc(missed.latest), "2026-10-25T00:58:00Z");
    assert_eq!(missed.to_string(), format!("at least {MISSED_COUNT_LIMIT} slots"));
    assert!(plan_tick(&p.schedule, now, None).is_none());
}

// --- Properties over injected time ---

/// The oracle's reading of a cron expression: whether a wall clock's hour
/// and minute match it.
type Fields = fn(i8, i8) -> bool;

/// The cron expressions of the properties, each with the oracle's reading
/// of its fields (hour, minute of the wall clock).
const CRONS: &[(&str, Fields)] = &[
    ("0 * * * *", |_, m| m == 0),
    ("30 * * * *", |_, m| m == 30),
    ("*/15 * * * *", |_, m| m % 15 == 0),
    ("30 2 * * *", |h, m| h == 2 && m == 30),
    ("15 2 * * *", |h, m| h == 2 && m == 15),
    ("45 1 * * *", |h, m| h == 1 && m == 45),
    ("0 0 * * *", |h, m| h == 0 && m == 0),
    ("30 23 * * *", |h, m| h == 23 && m == 30),
];

/// Zones with a transition each near the start times below.
const ZONES: &[&str] = &[
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Australia/Sydney",
    "America/Santiago",
    "UTC",
];

/// Start times near transitions of the zones above (spring and fall).
const STARTS: &[&str] = &[
    "2026-03-28T12:00:00Z",
    "2026-10-24T12:00:00Z",
    "2026-03-07T12:00:00Z",
    "2026-10-31T12:00:00Z",
    "2026-10-03T00:00:00Z",
    "2027-04-03T00:00:00Z",
    "2026-09-05T00:00:00Z",
    "2026-04-04T00:00:00Z",
];

const PERIODS_MS: &[i64] = &[1_000, 1_500, 60_000, 90_000, 420_000, 900_000, 3_600_000];

/// What the oracle knows of a schedule: which instants are its slots.
#[derive(Clone, Debug)]
enum Oracle {
    Every { anchor: i64, period: i64 },
    Cron { zone: &'static str, fields: Fields },
}

const MINUTE_MS: i64 = 60_000;

impl Oracle {
    /// Whether `t` is a slot: for a cron, a whole minute whose wall time
    /// matches and is the first instant with that wall time (a fold's
    /// second pass is no slot; a gap's wall times have no instant at all).
    fn is_slot(&self, t: i64) -> bool {
        match self {
            Oracle::Every { anchor, period } => t > *anchor && (t - anchor) % period == 0,
            Oracle::Cron { zone, fields } => {
                if t % MINUTE_MS != 0 {
                    return false;
                }
                let tz = schedule::zone(zone).unwrap();
                let ts = jiff::Timestamp::from_millisecond(t).unwrap();
                let wall = tz.to_datetime(ts);
                let first = tz.to_ambiguous_timestamp(wall).compatible().unwrap();
                fields(wall.hour(), wall.minute()) && first == ts
            }
        }
    }

    /// The slots in `(after, upto]`, in order.
    fn slots_in(&self, after: i64, upto: i64) -> Vec<i64> {
        if upto <= after {
            return Vec::new();
        }
        match self {
            Oracle::Every { anchor, period } => {
                let mut k = if after < *anchor { 1 } else { (after - anchor) / period + 1 };
                let mut out = Vec::new();
                while anchor + k * period <= upto {
                    out.push(anchor + k * period);
                    k += 1;
                }
                out
            }
            Oracle::Cron { .. } => {
                let mut m = after.div_euclid(MINUTE_MS) + 1;
                let mut out = Vec::new();
                while m * MINUTE_MS <= upto {
                    if self.is_slot(m * MINUTE_MS) {
                        out.push(m * MINUTE_MS);
                    }
                    m += 1;
                }
                out
            }
        }
    }

    /// The first slot after `t` (within three days, which every
    /// expression here has).
    fn next_after(&self, t: i64) -> Option<i64> {
        match self {
            Oracle::Every { anchor, period } => {
                let k = if t < *anchor { 1 } else { (t - anchor) / period + 1 };
                Some(anchor + k * period)
            }
            Oracle::Cron { .. } => {
                let start = t.div_euclid(MINUTE_MS) + 1;
                (start..start + 3 * 24 * 60).map(|m| m * MINUTE_MS).find(|&x| self.is_slot(x))
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Case {
    schedule: Schedule,
    oracle: Oracle,
    /// Steps of the clock, in milliseconds (some backwards), each with the
    /// state of the previous tick's job as the store would read it.
    steps: Vec<(i64, Option<JobState>)>,
}

fn spec_and_oracle() -> impl Strategy<Value = (Spec, &'static str, Oracle, i64)> {
    let start = (0..STARTS.len(), 0i64..2 * 86_400_000)
        .prop_map(|(i, off)| at(STARTS[i]).as_millis() + off);
    let cron = (0..CRONS.len(), 0..ZONES.len(), start.clone()).prop_map(|(c, z, t)| {
        let (text, fields) = CRONS[c];
        (Spec::cron(text).unwrap(), ZONES[z], Oracle::Cron { zone: ZONES[z], fields }, t)
    });
    let interval = (0..PERIODS_MS.len(), start).prop_map(|(p, t)| {
        let period = PERIODS_MS[p];
        let spec = Spec::every(Duration::from_millis(u64::try_from(period).unwrap())).unwrap();
        (spec, "Europe/Berlin", Oracle::Every { anchor: t, period }, t)
    });
    prop_oneof![3 => cron, 1 => interval]
}

fn step() -> impl Strategy<Value = (i64, Option<JobState>)> {
    let delta = prop_oneof![
        6 => 0i64..=120_000,          // a runner awake: a few seconds to two minutes
        4 => 0i64..=6 * 3_600_000,    // a nap
        1 => 0i64..=3 * 86_400_000,   // a long sleep
        1 => -6 * 3_600_000..0i64,    // the clock set back
    ];
    let previous = prop_oneof![
        Just(None),
        Just(Some(JobState::Done)),
        Just(Some(JobState::Failed)),
        Just(Some(JobState::Pending)),
        Just(Some(JobState::Running)),
    ];
    (delta, previous)
}

fn case() -> impl Strategy<Value = Case> {
    (spec_and_oracle(), any::<bool>(), any::<bool>(), prop::collection::vec(step(), 1..30))
        .prop_map(|((spec, zone, oracle, start), once, skip, steps)| {
            let mut new = new_schedule(spec, zone);
            new.catch_up = if once { CatchUp::Once } else { CatchUp::None };
            new.overlap = if skip { Overlap::Skip } else { Overlap::Queue };
            let schedule = created(&new, Timestamp::from_millis(start));
            Case { schedule, oracle, steps }
        })
}

/// Runs a case like a runner would: at each `now`, `plan_tick`, and the
/// plan written back as a store writes it. Checks every tick against the
/// oracle.
fn run(case: &Case) -> Result<(), TestCaseError> {
    let mut s = case.schedule.clone();
    let oracle = &case.oracle;
    let mut now = s.created_at.as_millis();
    let mut decided: Vec<i64> = Vec::new();
    let mut next_job = 1;
    for &(delta, previous) in &case.steps {
        now += delta;
        let due = oracle.slots_in(s.cursor.as_millis(), now);
        let plan = plan_tick(&s, Timestamp::from_millis(now), previous);
        prop_assert_eq!(
            s.next_fire().map(Timestamp::as_millis),
            oracle.next_after(s.cursor.as_millis()),
            "next fire after the cursor {}",
            utc(s.cursor)
        );
        let Some(plan) = plan else {
            prop_assert!(due.is_empty(), "slots {:?} due at {} but no tick", due, now);
            continue;
        };
        let latest = *due
            .last()
            .ok_or_else(|| TestCaseError::fail(format!("a tick at {now} with no slot due")))?;
        let slot = plan.slot.as_millis();
        prop_assert!(oracle.is_slot(slot), "{} is no slot", utc(plan.slot));
        prop_assert_eq!(slot, latest, "the tick decides the latest slot due");
        prop_assert!(decided.last().is_none_or(|&d| d < slot), "slot {} decided again", slot);
        decided.push(slot);
        prop_assert_eq!(plan.schedule.cursor, plan.slot);
        let count = u64::try_from(due.len()).unwrap();
        let late = Duration::from_millis(u64::try_from(now - slot).unwrap());
        let unfinished = s.overlap == Overlap::Skip
            && s.last_fire.is_some()
            && matches!(previous, Some(JobState::Pending | JobState::Running));
        match (&plan.action, s.catch_up) {
            (TickAction::Drop, CatchUp::Once) => prop_assert!(false, "catch-up once drops nothing"),
            (TickAction::Drop, CatchUp::None) => {
                prop_assert!(late > on_time_grace(&s, plan.slot), "an on-time slot dropped");
                prop_assert_eq!(plan.missed, count);
            }
            (action, catch_up) => {
                // Fired (enqueued, or skipped for the unfinished job).
                prop_assert_eq!(plan.missed, count - 1);
                if catch_up == CatchUp::None {
                    prop_assert!(late <= MAX_ON_TIME_GRACE, "a late slot fired {:?} late", late);
                    prop_assert!(late <= on_time_grace(&s, plan.slot));
                }
                match action {
                    TickAction::Enqueue(job) => {
                        prop_assert!(!unfinished, "enqueued over an unfinished job");
                        prop_assert_eq!(
                            job.idempotency_key.clone(),
                            Some(tick_key("s", plan.slot))
                        );
                    }
                    TickAction::Skip { unfinished: id, .. } => {
                        prop_assert!(unfinished, "skipped with no unfinished job");
                        prop_assert_eq!(Some(*id), s.last_fire.as_ref().map(|f| f.job));
                    }
                    TickAction::Drop => unreachable!(),
                }
            }
        }
        if plan.missed > 0 {
            let m = plan.schedule.last_missed.clone().unwrap();
            prop_assert_eq!((m.count, m.at_least, m.at.as_millis()), (plan.missed, false, now));
            let expected =
                if matches!(plan.action, TickAction::Drop) { latest } else { due[due.len() - 2] };
            prop_assert_eq!(m.latest.as_millis(), expected, "the latest missed slot");
        }
        s = match plan.action {
            TickAction::Enqueue(_) => {
                next_job += 1;
                plan.enqueued(next_job, true, Timestamp::from_millis(now)).0
            }
            _ => plan.schedule,
        };
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// No slot is decided twice, every decided slot is a real slot and the
    /// latest due, catch-up once enqueues exactly one job for every gap of
    /// one slot or more (or skips it for an unfinished job), catch-up none
    /// fires no late slot, and the next fire is the oracle's.
    #[test]
    fn ticks_follow_the_rule_over_injected_time(case in case()) {
        run(&case)?;
    }

    /// A second decision at the same time, or at any earlier one, decides
    /// nothing: a clock that goes back never fires a slot twice.
    #[test]
    fn a_decided_tick_is_never_decided_again(
        (spec, zone, _oracle, start) in spec_and_oracle(),
        gap in 0i64..=3 * 86_400_000,
        back in prop::collection::vec(0i64..=4 * 86_400_000, 1..8),
    ) {
        let s = created(&new_schedule(spec, zone), Timestamp::from_millis(start));
        let now = start + gap;
        if let Some(plan) = plan_tick(&s, Timestamp::from_millis(now), None) {
            let after = plan.enqueued(1, true, Timestamp::from_millis(now)).0;
            for b in back {
                let earlier = Timestamp::from_millis(now - b);
                prop_assert!(plan_tick(&after, earlier, None).is_none(), "decided again at {}", utc(earlier));
            }
        }
    }
}
