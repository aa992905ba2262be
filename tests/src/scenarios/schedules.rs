//! Schedules: recurring jobs stored in the queue file ([`Store::put_schedule`],
//! [`Store::schedules`], [`Store::change_schedule`],
//! [`Store::restore_schedules`]) and the ticks they fire
//! ([`Store::fire_schedules`]).
//!
//! The rule is `slothqueue_core::schedule`'s ([`slothqueue_core::schedule::create`],
//! [`slothqueue_core::schedule::change`], [`slothqueue_core::schedule::plan_tick`]); these scenarios check
//! that a store reads each schedule and the state of its last tick's job
//! inside the transaction that writes the tick, pushes the tick's job
//! through its ordinary push path (id, idempotency key `KEY@SLOT`,
//! `pushed` event), moves the cursor in the same write, so that racing
//! callers, a clock that goes back and a reopen never decide a slot twice,
//! and keeps all of it durably.
//!
//! Time here starts at [`T0`], 2026-12-01T00:00:00Z (a Tuesday, on the
//! hour), so interval and cron slots line up on round instants.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::schedule::{Missed, parse_tick_key, tick_key};
use slothqueue_core::{
    CatchUp, Completion, EventKind, Failure, Job, JobId, JobState, ListFilter, ListOrder,
    NewSchedule, Overlap, PurgeFilter, Schedule, ScheduleChange, Spec, Stamp, Store, StoreError,
    Tick, TickOutcome, Ticks, Timestamp,
};

use crate::child::{FIRE_STEP, Role, Work, run_workers};
use crate::{Harness, event_kinds, job, shell, snapshot};

/// 2026-12-01T00:00:00Z.
pub const T0: Timestamp = Timestamp::from_millis(1_796_083_200_000);

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// `d` after [`T0`].
fn t(d: Duration) -> Timestamp {
    T0.saturating_add(d)
}

fn hours(n: u32) -> Duration {
    HOUR * n
}

fn minutes(n: u32) -> Duration {
    MINUTE * n
}

/// A schedule `key` enqueueing `echo tick`, catching up `once` (the
/// default) and with overlap `queue`, so that the jobs the scenarios leave
/// pending do not turn later ticks into skips (the overlap scenarios set
/// `skip` themselves).
fn new_schedule(key: &str, spec: Spec, zone: &str) -> NewSchedule {
    NewSchedule {
        key: key.to_owned(),
        spec,
        zone: zone.to_owned(),
        catch_up: CatchUp::Once,
        overlap: Overlap::Queue,
        job: shell("echo tick"),
    }
}

fn every(key: &str, period: Duration) -> NewSchedule {
    new_schedule(key, Spec::every(period).expect("a valid interval"), "UTC")
}

fn cron(key: &str, text: &str) -> NewSchedule {
    new_schedule(key, Spec::cron(text).expect("a valid cron expression"), "UTC")
}

/// Puts `new` at `now`, insisting it is created, and returns it as stored.
async fn put(s: &dyn Store, new: &NewSchedule, now: Timestamp) -> Schedule {
    let put = s
        .put_schedule(new, now)
        .await
        .unwrap_or_else(|e| panic!("put_schedule({}) at {now}: {e}", new.key));
    assert!(put.created, "the first put of schedule {} creates it", new.key);
    put.schedule
}

async fn fire(s: &dyn Store, now: Timestamp) -> Ticks {
    s.fire_schedules(now).await.unwrap_or_else(|e| panic!("fire_schedules at {now}: {e}"))
}

async fn all_schedules(s: &dyn Store) -> Vec<Schedule> {
    s.schedules().await.expect("schedules")
}

/// The schedule `key` as stored.
async fn stored(s: &dyn Store, key: &str) -> Schedule {
    all_schedules(s)
        .await
        .into_iter()
        .find(|x| x.key == key)
        .unwrap_or_else(|| panic!("schedule {key} is listed"))
}

async fn change(s: &dyn Store, key: &str, c: ScheduleChange, now: Timestamp) -> Option<Schedule> {
    s.change_schedule(key, &c, now)
        .await
        .unwrap_or_else(|e| panic!("change_schedule({key}, {c:?}) at {now}: {e}"))
}

async fn all_jobs(s: &dyn Store) -> Vec<Job> {
    s.list(&ListFilter { order: ListOrder::Oldest, ..ListFilter::default() })
        .await
        .expect("list every job")
}

/// The jobs ticks of schedule `key` made, by slot (each slot at most once,
/// checked).
async fn tick_jobs(s: &dyn Store, key: &str) -> BTreeMap<Timestamp, Job> {
    let mut by_slot = BTreeMap::new();
    for j in all_jobs(s).await {
        let Some((name, slot)) = j.idempotency_key.as_deref().and_then(parse_tick_key) else {
            continue;
        };
        if name != key {
            continue;
        }
        let id = j.id;
        if let Some(other) = by_slot.insert(slot, j) {
            panic!("slot {slot} of {key} has two jobs: #{} and #{id}", other.id);
        }
    }
    by_slot
}

/// The one tick of `key` among `ticks`, insisting there is exactly one.
fn the_tick<'a>(ticks: &'a Ticks, key: &str) -> &'a Tick {
    let mine: Vec<&Tick> = ticks.ticks.iter().filter(|x| x.key == key).collect();
    assert_eq!(mine.len(), 1, "one tick of {key} in {ticks:?}");
    mine[0]
}

/// The job a tick enqueued (and created), insisting it did.
fn created_job(tick: &Tick) -> JobId {
    match tick.outcome {
        TickOutcome::Enqueued { job, created: true } => job,
        ref other => {
            panic!("tick of {} for {}: expected a created job, got {other:?}", tick.key, tick.slot)
        }
    }
}

fn is_invalid<T: std::fmt::Debug>(out: &Result<T, StoreError>) -> bool {
    matches!(out, Err(StoreError::InvalidInput(_)))
}

/// `put_schedule` stores a new key with its cursor at `now` (created at
/// `now`, not paused, nothing fired yet) and `schedules` lists it, in key
/// order; the same definition again changes nothing and says so
/// (`created: false`, the stored schedule returned as it was); another
/// definition under the key is `InvalidInput` with nothing written; so is
/// bad input (a cron expression that does not parse or never fires, an
/// unknown zone, a bad key, an interval under a second, a job with a key,
/// parents or a due time of its own). No put enqueues anything.
pub async fn put_schedule_stores_lists_and_refuses(h: &Harness) {
    let s = h.store();
    assert!(all_schedules(&*s).await.is_empty(), "a fresh queue has no schedules");

    let b = put(&*s, &cron("b-nightly", "0 3 * * *"), T0).await;
    assert_eq!(b.key, "b-nightly");
    assert_eq!(b.spec, Spec::Cron("0 3 * * *".into()));
    assert_eq!(b.zone, "UTC");
    assert_eq!((b.created_at, b.cursor), (T0, T0), "created with its cursor at now");
    assert_eq!((b.paused.clone(), b.last_fire.clone(), b.last_missed.clone()), (None, None, None));
    assert_eq!(b.last_skipped, None);
    assert_eq!(b.job, shell("echo tick"));
    assert_eq!(b.next_fire(), Some(t(hours(3))));

    let later = t(minutes(5));
    let a = put(&*s, &every("a-hourly", HOUR), later).await;
    assert_eq!(a.cursor, later);
    assert_eq!(all_schedules(&*s).await, [a.clone(), b.clone()], "listed in key order");

    // The same definition again: unchanged, cursor and all.
    let again = s.put_schedule(&cron("b-nightly", "0 3 * * *"), t(hours(1))).await.expect("put");
    assert!(!again.created, "the same definition again is not created");
    assert_eq!(again.schedule, b, "the stored schedule is returned as it was");

    // Another definition under the key: refused, nothing written.
    let mut other = cron("b-nightly", "0 4 * * *");
    assert!(is_invalid(&s.put_schedule(&other, t(hours(1))).await), "another spec");
    other = cron("b-nightly", "0 3 * * *");
    other.overlap = Overlap::Skip;
    assert!(is_invalid(&s.put_schedule(&other, t(hours(1))).await), "another overlap");
    other = cron("b-nightly", "0 3 * * *");
    other.catch_up = CatchUp::None;
    assert!(is_invalid(&s.put_schedule(&other, t(hours(1))).await), "another catch-up");
    other = cron("b-nightly", "0 3 * * *");
    other.zone = "Europe/Berlin".into();
    assert!(is_invalid(&s.put_schedule(&other, t(hours(1))).await), "another zone");
    other = cron("b-nightly", "0 3 * * *");
    other.job = shell("echo other");
    assert!(is_invalid(&s.put_schedule(&other, t(hours(1))).await), "another job");

    // Bad input.
    let mut bad: Vec<(&str, NewSchedule)> = vec![
        ("a cron that does not parse", new_schedule("c", Spec::Cron("61 * * * *".into()), "UTC")),
        ("a cron of four fields", new_schedule("c", Spec::Cron("0 * * *".into()), "UTC")),
        ("a cron that never fires", new_schedule("c", Spec::Cron("0 0 30 2 *".into()), "UTC")),
        ("an unknown zone", new_schedule("c", Spec::Every(HOUR), "Mars/Olympus_Mons")),
        ("an interval under a second", new_schedule("c", Spec::Every(Duration::ZERO), "UTC")),
        ("a key with a space", every("two words", HOUR)),
        ("an empty key", every("", HOUR)),
    ];
    let mut keyed = every("c", HOUR);
    keyed.job = shell("echo tick").key("mine");
    bad.push(("a job with its own key", keyed));
    let mut due = every("c", HOUR);
    due.job = shell("echo tick").not_before(t(DAY));
    bad.push(("a job with its own due time", due));
    let mut parented = every("c", HOUR);
    parented.job = shell("echo tick").after(1);
    bad.push(("a job with parents", parented));
    for (what, new) in &bad {
        let out = s.put_schedule(new, t(hours(1))).await;
        assert!(is_invalid(&out), "{what}: expected InvalidInput, got {out:?}");
    }
    assert_eq!(all_schedules(&*s).await, [a, b], "nothing refused was written");
    assert!(all_jobs(&*s).await.is_empty(), "a put enqueues nothing");
}

/// As time steps through the slots (every ten minutes over five hours),
/// each slot of an hourly interval and of an hourly cron fires exactly once,
/// when reached and not before: one job per slot with the idempotency key
/// `KEY@SLOT` ([`tick_key`]), the schedule's job as asked, a `pushed` then a
/// `scheduled` event; the tick reports the slot, no missed slot and the job
/// created; the cursor and last fire move to it; and `Ticks::next` is the
/// earliest next slot.
pub async fn each_slot_fires_exactly_once_as_time_steps(h: &Harness) {
    let s = h.store();
    put(&*s, &every("every-hour", HOUR), T0).await;
    put(&*s, &cron("cron-hour", "0 * * * *"), T0).await;

    let mut fired: Vec<Tick> = Vec::new();
    for step in 0..=30u32 {
        let now = t(minutes(10 * step));
        let ticks = fire(&*s, now).await;
        let expected_next = t(hours(step / 6 + 1));
        assert_eq!(ticks.next, Some(expected_next), "Ticks::next at {now}");
        if step > 0 && step % 6 == 0 {
            assert_eq!(ticks.ticks.len(), 2, "both fire at {now}: {ticks:?}");
            for key in ["cron-hour", "every-hour"] {
                let tick = the_tick(&ticks, key);
                assert_eq!((tick.slot, tick.missed), (now, 0), "{key} at {now}");
                created_job(tick);
            }
            assert_eq!(ticks.ticks[0].key, "cron-hour", "ticks in key order");
        } else {
            assert!(ticks.ticks.is_empty(), "no slot is due at {now}: {ticks:?}");
        }
        fired.extend(ticks.ticks);
    }
    assert_eq!(fired.len(), 10);

    for key in ["cron-hour", "every-hour"] {
        let jobs = tick_jobs(&*s, key).await;
        let slots: Vec<Timestamp> = jobs.keys().copied().collect();
        assert_eq!(
            slots,
            (1..=5).map(|n| t(hours(n))).collect::<Vec<_>>(),
            "{key}: one job per slot"
        );
        for (slot, j) in &jobs {
            assert_eq!(j.idempotency_key.as_deref(), Some(tick_key(key, *slot).as_str()));
            assert_eq!(j.command(), Some("echo tick"));
            assert_eq!(j.state, JobState::Pending);
            assert_eq!(j.created_at, *slot, "pushed when the slot was reached");
            assert_eq!(event_kinds(&*s, j.id).await, [EventKind::Pushed, EventKind::Scheduled]);
            let reported = fired.iter().find(|x| x.key == key && x.slot == *slot).expect("tick");
            assert_eq!(created_job(reported), j.id, "the tick reports its job");
        }
        let after = stored(&*s, key).await;
        assert_eq!(after.cursor, t(hours(5)));
        let last = after.last_fire.expect("a last fire");
        assert_eq!((last.slot, last.at), (t(hours(5)), t(hours(5))));
        assert_eq!(last.job, jobs[&t(hours(5))].id);
        assert_eq!(after.last_missed, None, "no slot was missed");
    }
}

const RACE_HANDLES: usize = 4;
const RACE_STEPS: u32 = 20;

/// Handles racing `fire_schedules` at the same `now`, step after step (a
/// minute apart, over twenty minutes), decide each slot once: over all
/// handles, exactly one tick per slot of a per-minute interval and of a
/// per-minute cron, none with a missed slot, and one job per slot.
pub async fn handles_racing_fire_decide_each_slot_once(h: &Harness) {
    let s = h.store();
    put(&*s, &every("every-minute", MINUTE), T0).await;
    put(&*s, &cron("cron-minute", "* * * * *"), T0).await;

    let barrier = Arc::new(tokio::sync::Barrier::new(RACE_HANDLES));
    let mut tasks = Vec::new();
    for w in 0..RACE_HANDLES {
        let store: Arc<dyn Store> = if w == 0 { s.clone() } else { h.open_second() };
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for step in 1..=RACE_STEPS {
                barrier.wait().await;
                let ticks = store.fire_schedules(t(minutes(step))).await.expect("fire_schedules");
                mine.extend(ticks.ticks);
            }
            mine
        }));
    }
    let mut ticks = Vec::new();
    for task in tasks {
        ticks.extend(task.await.expect("a racer panicked"));
    }
    for key in ["cron-minute", "every-minute"] {
        let mut slots: Vec<Timestamp> =
            ticks.iter().filter(|x| x.key == key).map(|x| x.slot).collect();
        slots.sort_unstable();
        let expected: Vec<Timestamp> = (1..=RACE_STEPS).map(|n| t(minutes(n))).collect();
        assert_eq!(slots, expected, "{key}: each slot decided exactly once over all handles");
        for x in ticks.iter().filter(|x| x.key == key) {
            assert_eq!(x.missed, 0, "{key}: no slot missed at {}", x.slot);
            created_job(x);
        }
        let jobs = tick_jobs(&*s, key).await;
        assert_eq!(jobs.keys().copied().collect::<Vec<_>>(), expected, "{key}: one job per slot");
        assert_eq!(stored(&*s, key).await.cursor, t(minutes(RACE_STEPS)));
    }
}

const FIRE_PROCESSES: usize = 4;
const FIRE_STEPS: usize = 30;

/// Separate OS processes, each stepping `fire_schedules` through the same
/// thirty minutes one minute at a time, interleaved however they run,
/// decide each slot once: every slot of a per-minute interval and a
/// per-minute cron has exactly one job, and each job was reported by
/// exactly one process. (Under [`crate::run_all`] the workers are threads
/// with their own handles.)
pub async fn processes_racing_fire_decide_each_slot_once(h: &Harness) {
    let s = h.store();
    put(&*s, &every("every-minute", MINUTE), T0).await;
    put(&*s, &cron("cron-minute", "* * * * *"), T0).await;
    let works: Vec<Work> = (0..FIRE_PROCESSES)
        .map(|i| Work {
            role: Role::Fire { count: FIRE_STEPS },
            path: h.path().to_owned(),
            owner: format!("firer-{i}"),
            now: T0,
        })
        .collect();
    let (open, child, dir) = (h.open_fn(), h.child_test().map(str::to_owned), h.dir().to_owned());
    let reported =
        tokio::task::spawn_blocking(move || run_workers(open, child.as_deref(), &dir, &works))
            .await
            .expect("the workers");
    let mut seen = BTreeSet::new();
    for (worker, ids) in reported.iter().enumerate() {
        for id in ids {
            assert!(seen.insert(*id), "job #{id} was enqueued by two ticks (again by {worker})");
        }
    }
    let mut all = BTreeSet::new();
    let last = T0.saturating_add(FIRE_STEP * u32::try_from(FIRE_STEPS).expect("steps"));
    for key in ["cron-minute", "every-minute"] {
        let jobs = tick_jobs(&*s, key).await;
        let expected: Vec<Timestamp> =
            (1..=FIRE_STEPS).map(|n| T0.saturating_add(FIRE_STEP * n as u32)).collect();
        assert_eq!(jobs.keys().copied().collect::<Vec<_>>(), expected, "{key}: one job per slot");
        for j in jobs.values() {
            assert_eq!(event_kinds(&*s, j.id).await, [EventKind::Pushed, EventKind::Scheduled]);
        }
        all.extend(jobs.values().map(|j| j.id));
        assert_eq!(stored(&*s, key).await.cursor, last);
    }
    assert_eq!(seen, all, "the processes reported exactly the jobs there are");
}

/// After a two-week gap (the machine slept), catch-up `once` enqueues
/// exactly one job per schedule, for the latest slot due, and records the
/// others as missed: on a 1-hour interval and on an hourly and a daily
/// cron, the tick reports the count, the schedule's `last_missed` holds it
/// (with the latest missed slot and when it was decided), and the job's
/// `scheduled` event says it is catching up. Firing again at the same time
/// does nothing; the next slot fires normally.
pub async fn catch_up_once_after_a_gap_enqueues_the_latest_slot_once(h: &Harness) {
    let s = h.store();
    put(&*s, &every("every-hour", HOUR), T0).await;
    put(&*s, &cron("cron-hour", "0 * * * *"), T0).await;
    put(&*s, &cron("cron-daily", "30 3 * * *"), T0).await;

    let woke = t(DAY * 14 + minutes(30));
    let ticks = fire(&*s, woke).await;
    assert_eq!(ticks.ticks.len(), 3, "one tick per schedule: {ticks:?}");
    // Daily at 03:30: Dec 1 … Dec 14 are 14 slots, the latest on Dec 14.
    let cases = [
        (
            "cron-daily",
            t(DAY * 13 + hours(3) + minutes(30)),
            13,
            t(DAY * 12 + hours(3) + minutes(30)),
        ),
        ("cron-hour", t(DAY * 14), 14 * 24 - 1, t(DAY * 14 - HOUR)),
        ("every-hour", t(DAY * 14), 14 * 24 - 1, t(DAY * 14 - HOUR)),
    ];
    for (key, slot, missed, latest_missed) in cases {
        let tick = the_tick(&ticks, key);
        assert_eq!((tick.slot, tick.missed), (slot, missed), "{key}");
        let id = created_job(tick);
        let jobs = tick_jobs(&*s, key).await;
        assert_eq!(jobs.len(), 1, "{key}: exactly one job after the gap");
        assert_eq!(jobs[&slot].id, id, "{key}: the job is the latest slot's");
        let after = stored(&*s, key).await;
        assert_eq!(after.cursor, slot);
        assert_eq!(
            after.last_missed,
            Some(Missed { count: missed, at_least: false, at: woke, latest: latest_missed }),
            "{key}: the missed slots are recorded"
        );
        assert_eq!(after.last_fire.map(|f| (f.slot, f.job)), Some((slot, id)));
        let events = s.events(id).await.expect("events");
        let scheduled = events.iter().find(|e| e.kind == EventKind::Scheduled).expect("scheduled");
        let message = scheduled.message.as_deref().unwrap_or_default();
        assert!(
            message.contains("catching up") && message.contains(&missed.to_string()),
            "{key}: the event says what was missed: {message:?}"
        );
    }
    assert!(fire(&*s, woke).await.ticks.is_empty(), "nothing is due again at the same time");

    let next = t(DAY * 14 + HOUR);
    let ticks = fire(&*s, next).await;
    assert_eq!(ticks.ticks.len(), 2, "the hourly ones fire their next slot: {ticks:?}");
    for key in ["cron-hour", "every-hour"] {
        let tick = the_tick(&ticks, key);
        assert_eq!((tick.slot, tick.missed), (next, 0), "{key}");
        created_job(tick);
    }
}

/// With catch-up `none`, slots passed over during a gap enqueue nothing:
/// the tick that finds them is `dropped`, counting every one of them as
/// missed, and moves the cursor past them; a slot reached on time (at it,
/// or a few seconds late) fires; one reached well late is dropped too.
pub async fn catch_up_none_drops_late_slots_and_fires_on_time(h: &Harness) {
    let s = h.store();
    for (key, spec) in
        [("cron-hour", Spec::cron("0 * * * *").expect("cron")), ("every-hour", Spec::Every(HOUR))]
    {
        let mut new = new_schedule(key, spec, "UTC");
        new.catch_up = CatchUp::None;
        put(&*s, &new, T0).await;
    }

    let woke = t(DAY * 14 + minutes(30));
    let ticks = fire(&*s, woke).await;
    for key in ["cron-hour", "every-hour"] {
        let tick = the_tick(&ticks, key);
        assert_eq!(
            (tick.slot, tick.missed, &tick.outcome),
            (t(DAY * 14), 14 * 24, &TickOutcome::Dropped),
            "{key}"
        );
        let after = stored(&*s, key).await;
        assert_eq!(after.cursor, t(DAY * 14));
        let missed = after.last_missed.expect("missed recorded");
        assert_eq!((missed.count, missed.at, missed.latest), (14 * 24, woke, t(DAY * 14)));
        assert_eq!(after.last_fire, None);
    }
    assert!(all_jobs(&*s).await.is_empty(), "nothing enqueued after the gap");

    // On time: exactly at the slot, and a few seconds after the next.
    let on_time = t(DAY * 14 + HOUR);
    let ticks = fire(&*s, on_time).await;
    let late_ok = t(DAY * 14 + hours(2) + Duration::from_secs(5));
    let ticks2 = fire(&*s, late_ok).await;
    for key in ["cron-hour", "every-hour"] {
        let tick = the_tick(&ticks, key);
        assert_eq!((tick.slot, tick.missed), (on_time, 0), "{key}");
        created_job(tick);
        let tick = the_tick(&ticks2, key);
        assert_eq!((tick.slot, tick.missed), (t(DAY * 14 + hours(2)), 0), "{key}");
        created_job(tick);
    }
    // Ten minutes late: dropped.
    let late = t(DAY * 14 + hours(3) + minutes(10));
    let ticks = fire(&*s, late).await;
    for key in ["cron-hour", "every-hour"] {
        let tick = the_tick(&ticks, key);
        assert_eq!((tick.missed, &tick.outcome), (1, &TickOutcome::Dropped), "{key}");
        let jobs = tick_jobs(&*s, key).await;
        let slots: Vec<Timestamp> = jobs.keys().copied().collect();
        assert_eq!(slots, [on_time, t(DAY * 14 + hours(2))], "{key}: only on-time slots");
    }
}

/// Overlap `skip`: while the previous tick's job is pending, and then
/// while it is running, a due slot enqueues nothing; the tick reports the
/// unfinished job, which gains a `tick_skipped` event for the first tick
/// it holds back only (later ones skip quietly: a job a gate keeps pending
/// under `every 1s` must not gain an event a second), and is otherwise
/// unchanged; the schedule records the skipped slot and moves its cursor
/// past it. Once the job has finished, the next slot fires again, and the
/// next job's first skip is noted again.
pub async fn overlap_skip_enqueues_nothing_while_the_previous_job_is_unfinished(h: &Harness) {
    let s = h.store();
    let mut new = every("hourly", HOUR);
    new.overlap = Overlap::Skip;
    put(&*s, &new, T0).await;
    let first = created_job(the_tick(&fire(&*s, t(hours(1))).await, "hourly"));

    let before = job(&*s, first).await;
    let ticks = fire(&*s, t(hours(2))).await;
    let tick = the_tick(&ticks, "hourly");
    assert_eq!(tick.slot, t(hours(2)));
    assert_eq!(tick.outcome, TickOutcome::Skipped { unfinished: first, noted: true });
    assert_eq!(job(&*s, first).await, before, "the pending job itself is unchanged");
    assert_eq!(
        event_kinds(&*s, first).await,
        [EventKind::Pushed, EventKind::Scheduled, EventKind::TickSkipped]
    );
    let after = stored(&*s, "hourly").await;
    assert_eq!((after.cursor, after.last_skipped), (t(hours(2)), Some(t(hours(2)))));
    assert_eq!(after.last_fire.map(|f| f.job), Some(first), "the last fire is still the first");

    let c = h.claim_expect(&*s, "worker", t(hours(2) + minutes(1)), first).await;
    let ticks = fire(&*s, t(hours(3))).await;
    assert_eq!(
        the_tick(&ticks, "hourly").outcome,
        TickOutcome::Skipped { unfinished: first, noted: false },
        "a second skip of the same job is quiet"
    );
    assert_eq!(
        event_kinds(&*s, first).await,
        [EventKind::Pushed, EventKind::Scheduled, EventKind::TickSkipped, EventKind::Claimed]
    );
    assert_eq!(stored(&*s, "hourly").await.last_skipped, Some(t(hours(3))));
    assert_eq!(job(&*s, first).await.state, JobState::Running, "still running");
    assert_eq!(tick_jobs(&*s, "hourly").await.len(), 1, "no job while the first is unfinished");

    s.complete(first, &c.fence, Completion::default(), t(hours(3) + minutes(1)))
        .await
        .expect("complete");
    let ticks = fire(&*s, t(hours(4))).await;
    let tick = the_tick(&ticks, "hourly");
    assert_eq!((tick.slot, tick.missed), (t(hours(4)), 0), "skipped slots are not missed ones");
    let second = created_job(tick);
    assert_ne!(second, first);
    let slots: Vec<Timestamp> = tick_jobs(&*s, "hourly").await.keys().copied().collect();
    assert_eq!(slots, [t(hours(1)), t(hours(4))]);

    // The new job's first skip (while it runs) is noted, and says so.
    h.claim_expect(&*s, "worker", t(hours(4) + minutes(1)), second).await;
    let ticks = fire(&*s, t(hours(5))).await;
    assert_eq!(
        the_tick(&ticks, "hourly").outcome,
        TickOutcome::Skipped { unfinished: second, noted: true }
    );
    let events = s.events(second).await.expect("events");
    assert_eq!(events.last().map(|e| e.kind), Some(EventKind::TickSkipped));
    assert!(
        events.last().and_then(|e| e.message.as_deref()).is_some_and(|m| m.contains("running")),
        "the skip says the job is running: {:?}",
        events.last()
    );
}

/// Overlap `queue`: a due slot enqueues its job even while the previous
/// tick's job is pending or running, and no job gets a `tick_skipped`
/// event.
pub async fn overlap_queue_enqueues_while_the_previous_job_is_unfinished(h: &Harness) {
    let s = h.store();
    let mut new = every("hourly", HOUR);
    new.overlap = Overlap::Queue;
    put(&*s, &new, T0).await;
    let first = created_job(the_tick(&fire(&*s, t(hours(1))).await, "hourly"));
    let second = created_job(the_tick(&fire(&*s, t(hours(2))).await, "hourly"));
    h.claim_expect(&*s, "worker", t(hours(2) + minutes(1)), first).await;
    let third = created_job(the_tick(&fire(&*s, t(hours(3))).await, "hourly"));
    assert_eq!(BTreeSet::from([first, second, third]).len(), 3);
    assert_eq!(tick_jobs(&*s, "hourly").await.len(), 3);
    for id in [first, second, third] {
        assert!(!event_kinds(&*s, id).await.contains(&EventKind::TickSkipped), "#{id}");
    }
    assert_eq!(stored(&*s, "hourly").await.last_skipped, None);
}

/// A paused schedule fires nothing and has no next fire (`Ticks::next`
/// leaves it out); pausing again keeps the first pause's stamp; resuming
/// does not run the slots passed while paused (the cursor moves to the
/// resume time): the next slot after it fires, with nothing missed.
pub async fn paused_schedule_fires_nothing_and_resume_skips_passed_slots(h: &Harness) {
    let s = h.store();
    put(&*s, &every("hourly", HOUR), T0).await;
    let stamp = Stamp::new("ana@laptop", t(minutes(30)));
    let paused = change(&*s, "hourly", ScheduleChange::Pause(stamp.clone()), t(minutes(30)))
        .await
        .expect("a paused schedule is kept");
    assert_eq!(paused.paused, Some(stamp.clone()));
    assert_eq!(stored(&*s, "hourly").await, paused, "change_schedule returns it as stored");
    assert_eq!(paused.next_fire(), None);

    let again = Stamp::new("bo@desk", t(minutes(40)));
    let still = change(&*s, "hourly", ScheduleChange::Pause(again), t(minutes(40))).await;
    assert_eq!(still.and_then(|x| x.paused), Some(stamp), "the first pause's stamp stays");

    for n in 1..=5 {
        let ticks = fire(&*s, t(hours(n))).await;
        assert!(ticks.ticks.is_empty(), "paused: nothing at {n}h: {ticks:?}");
        assert_eq!(ticks.next, None, "a paused schedule has no next fire");
    }
    let resumed_at = t(hours(5) + minutes(30));
    let resumed = change(&*s, "hourly", ScheduleChange::Resume, resumed_at)
        .await
        .expect("a resumed schedule is kept");
    assert_eq!((resumed.paused.clone(), resumed.cursor), (None, resumed_at));
    assert_eq!(stored(&*s, "hourly").await, resumed);
    let ticks = fire(&*s, resumed_at).await;
    assert!(ticks.ticks.is_empty(), "the slots passed while paused are not run: {ticks:?}");
    assert_eq!(ticks.next, Some(t(hours(6))));
    let ticks = fire(&*s, t(hours(6))).await;
    let tick = the_tick(&ticks, "hourly");
    assert_eq!((tick.slot, tick.missed), (t(hours(6)), 0));
    created_job(tick);
    assert_eq!(tick_jobs(&*s, "hourly").await.len(), 1);
}

/// A removed schedule is gone (`change_schedule` returns `None`, it is no
/// longer listed, a second removal is `NoSchedule`) and enqueues nothing
/// more; the jobs its ticks made stay, untouched. The key can then be put
/// again with another definition, as a new schedule.
pub async fn removed_schedule_enqueues_nothing_and_its_jobs_stay(h: &Harness) {
    let s = h.store();
    put(&*s, &every("hourly", HOUR), T0).await;
    put(&*s, &every("other", hours(24)), T0).await;
    let first = created_job(the_tick(&fire(&*s, t(hours(1))).await, "hourly"));
    let before = snapshot(&*s, first).await;

    assert_eq!(change(&*s, "hourly", ScheduleChange::Remove, t(hours(1))).await, None);
    let listed: Vec<String> = all_schedules(&*s).await.into_iter().map(|x| x.key).collect();
    assert_eq!(listed, ["other"]);
    let out = s.change_schedule("hourly", &ScheduleChange::Remove, t(hours(1))).await;
    assert!(matches!(&out, Err(StoreError::NoSchedule(k)) if k == "hourly"), "{out:?}");

    let ticks = fire(&*s, t(hours(5))).await;
    assert!(ticks.ticks.is_empty(), "a removed schedule fires nothing: {ticks:?}");
    assert_eq!(ticks.next, Some(t(hours(24))), "only the other schedule is left");
    assert_eq!(snapshot(&*s, first).await, before, "its job stays as it was");
    assert_eq!(all_jobs(&*s).await.len(), 1);

    let replaced = put(&*s, &every("hourly", hours(2)), t(hours(5))).await;
    assert_eq!((replaced.cursor, replaced.last_fire), (t(hours(5)), None), "a new schedule");
    let tick = created_job(the_tick(&fire(&*s, t(hours(7))).await, "hourly"));
    assert_ne!(tick, first);
}

/// A clock that goes backwards (or a caller behind another) fires
/// nothing twice: after a tick, firing at earlier times, and again at the
/// same time, decides nothing; the next slot after the cursor fires when
/// reached, once.
pub async fn a_clock_going_backwards_fires_nothing_twice(h: &Harness) {
    let s = h.store();
    put(&*s, &every("every-hour", HOUR), T0).await;
    put(&*s, &cron("cron-hour", "0 * * * *"), T0).await;
    let ticks = fire(&*s, t(hours(3))).await;
    assert_eq!(ticks.ticks.len(), 2);
    for now in [t(hours(1)), t(hours(2) + minutes(30)), t(hours(3)), T0, t(hours(3) + minutes(59))]
    {
        let ticks = fire(&*s, now).await;
        assert!(ticks.ticks.is_empty(), "nothing again at {now}: {ticks:?}");
        assert_eq!(ticks.next, Some(t(hours(4))));
    }
    let ticks = fire(&*s, t(hours(4))).await;
    assert_eq!(ticks.ticks.len(), 2);
    assert!(fire(&*s, t(hours(2))).await.ticks.is_empty());
    for key in ["cron-hour", "every-hour"] {
        let slots: Vec<Timestamp> = tick_jobs(&*s, key).await.keys().copied().collect();
        assert_eq!(slots, [t(hours(3)), t(hours(4))], "{key}");
        assert_eq!(stored(&*s, key).await.cursor, t(hours(4)));
    }
}

/// Schedules are durable: after a reopen they are listed exactly as they
/// were (cursor, last fire, missed, skipped, pause), and firing goes on
/// from the cursor (the slot fired before the reopen is not fired again).
pub async fn schedules_persist_across_reopen(h: &Harness) {
    let s = h.store();
    let mut skipping = every("hourly", HOUR);
    skipping.overlap = Overlap::Skip;
    put(&*s, &skipping, T0).await;
    put(&*s, &cron("nightly", "0 3 * * *"), T0).await;
    put(&*s, &cron("paused", "*/5 * * * *"), T0).await;
    fire(&*s, t(hours(3))).await;
    fire(&*s, t(hours(4))).await;
    change(&*s, "paused", ScheduleChange::Pause(Stamp::new("ana", t(hours(4)))), t(hours(4))).await;
    let before = all_schedules(&*s).await;
    assert_eq!(before.len(), 3);
    assert!(before[0].last_skipped.is_some() && before[0].last_missed.is_some(), "{before:?}");

    let s = h.reopen(s);
    assert_eq!(all_schedules(&*s).await, before, "schedules survive a reopen as they were");
    let ticks = fire(&*s, t(hours(4))).await;
    assert!(ticks.ticks.is_empty(), "nothing fired twice after the reopen: {ticks:?}");
    assert_eq!(ticks.next, Some(t(hours(5))));
    let ticks = fire(&*s, t(hours(5))).await;
    assert_eq!(the_tick(&ticks, "hourly").slot, t(hours(5)));
    assert_eq!(ticks.ticks.len(), 1);
}

/// `restore_schedules` writes schedules exactly as exported (cursor, last
/// fire, missed, pause and all) into another queue, replacing any under
/// the same key, and fires from the restored cursor; it is all or nothing:
/// a batch with one schedule `check_restore` refuses is `InvalidInput` and
/// writes none of them.
pub async fn restore_schedules_writes_them_as_exported_all_or_nothing(h: &Harness) {
    let s = h.store();
    put(&*s, &every("hourly", HOUR), T0).await;
    put(&*s, &cron("nightly", "0 3 * * *"), T0).await;
    fire(&*s, t(hours(4))).await;
    change(&*s, "nightly", ScheduleChange::Pause(Stamp::new("ana", t(hours(4)))), t(hours(4)))
        .await;
    let exported = all_schedules(&*s).await;

    let other = h.open_other("restored");
    put(&*other, &every("hourly", hours(6)), T0).await;
    other.restore_schedules(exported.clone()).await.expect("restore_schedules");
    assert_eq!(all_schedules(&*other).await, exported, "restored as exported, replacing hourly");
    let ticks = fire(&*other, t(hours(5))).await;
    let tick = the_tick(&ticks, "hourly");
    assert_eq!((tick.slot, tick.missed), (t(hours(5)), 0), "fires from the restored cursor");

    let third = h.open_other("third");
    put(&*third, &every("kept", HOUR), T0).await;
    let before = all_schedules(&*third).await;
    let mut broken = exported[0].clone();
    broken.key = "broken".into();
    broken.zone = "Nowhere/Atlantis".into();
    let mut replacing = exported[0].clone();
    replacing.key = "kept".into();
    let batch = vec![exported[1].clone(), replacing, broken];
    let out = third.restore_schedules(batch).await;
    assert!(is_invalid(&out), "a bad schedule refuses the batch: {out:?}");
    assert_eq!(all_schedules(&*third).await, before, "none of the batch was written");
    let mut bad_key = exported[0].clone();
    bad_key.key = "no spaces allowed".into();
    assert!(is_invalid(&third.restore_schedules(vec![bad_key]).await), "a bad key");
    assert_eq!(all_schedules(&*third).await, before);
}

/// `change_schedule` of a key nobody stored (pause, resume or remove) is
/// `NoSchedule` naming it, and writes nothing.
pub async fn change_schedule_of_an_unknown_key_is_no_schedule(h: &Harness) {
    let s = h.store();
    put(&*s, &every("known", HOUR), T0).await;
    let before = all_schedules(&*s).await;
    for c in [
        ScheduleChange::Pause(Stamp::new("ana", T0)),
        ScheduleChange::Resume,
        ScheduleChange::Remove,
    ] {
        let out = s.change_schedule("unknown", &c, T0).await;
        assert!(
            matches!(&out, Err(StoreError::NoSchedule(k)) if k == "unknown"),
            "{c:?}: expected NoSchedule, got {out:?}"
        );
    }
    assert_eq!(all_schedules(&*s).await, before);
}

/// A tick whose key `KEY@SLOT` a job holds already (pushed by hand with the
/// same payload) makes no second job: the push path finds the duplicate,
/// the tick reports it with `created: false`, the last fire names it, and
/// it gains no `scheduled` event.
pub async fn a_tick_whose_key_is_held_makes_no_second_job(h: &Harness) {
    let s = h.store();
    put(&*s, &every("hourly", HOUR), T0).await;
    let held = h.push_keyed(&*s, "echo tick", &tick_key("hourly", t(hours(1))), T0).await;
    let ticks = fire(&*s, t(hours(1))).await;
    let tick = the_tick(&ticks, "hourly");
    assert_eq!(tick.outcome, TickOutcome::Enqueued { job: held.id, created: false });
    assert_eq!(all_jobs(&*s).await.len(), 1);
    assert_eq!(event_kinds(&*s, held.id).await, [EventKind::Pushed]);
    assert_eq!(stored(&*s, "hourly").await.last_fire.map(|f| f.job), Some(held.id));
}

/// A cron schedule's fields are read in its zone: a daily `30 2 * * *` in
/// Europe/Berlin fires at 02:30 local time (01:30 UTC in winter), skips
/// the day its 02:30 does not exist (spring forward, 2027-03-28) and
/// fires once, at the first, on the day 02:30 happens twice (fall back,
/// 2027-10-31).
pub async fn a_cron_schedule_fires_in_its_zone_across_dst(h: &Harness) {
    let s = h.store();
    put(&*s, &new_schedule("berlin", Spec::cron("30 2 * * *").expect("cron"), "Europe/Berlin"), T0)
        .await;
    // Winter: 02:30 CET is 01:30 UTC.
    let ticks = fire(&*s, t(hours(1) + minutes(30))).await;
    assert_eq!(the_tick(&ticks, "berlin").slot, t(hours(1) + minutes(30)));
    assert!(fire(&*s, t(hours(2) + minutes(30))).await.ticks.is_empty(), "not at 02:30 UTC");

    // Spring forward, 2027-03-28 (02:00 CET → 03:00 CEST). Stepping every
    // 15 minutes from 2027-03-27T01:30:00Z for three days.
    let mar27 = Timestamp::from_millis(1_806_111_000_000);
    assert_eq!(
        daily_slots_in_berlin(h, "spring", mar27).await,
        // 03-27 01:30Z (CET), 03-28 none, 03-29 and 03-30 00:30Z (CEST).
        [mar27, mar27.saturating_add(DAY * 2 - HOUR), mar27.saturating_add(DAY * 3 - HOUR)],
        "the 02:30 that does not exist on 2027-03-28 is skipped"
    );
    // Fall back, 2027-10-31 (03:00 CEST → 02:00 CET): 02:30 happens at
    // 00:30Z and again at 01:30Z; it fires at the first.
    let oct30 = Timestamp::from_millis(1_824_856_200_000);
    assert_eq!(
        daily_slots_in_berlin(h, "autumn", oct30).await,
        // 10-30 00:30Z (CEST), 10-31 00:30Z (CEST, the first 02:30), 11-01 01:30Z (CET).
        [oct30, oct30.saturating_add(DAY), oct30.saturating_add(DAY * 2 + HOUR)],
        "the 02:30 that happens twice on 2027-10-31 fires once"
    );
}

/// The slots a daily `30 2 * * *` Europe/Berlin schedule, put an hour
/// before `from` in a fresh queue `name`, fires as time steps every 15
/// minutes over three days from `from`; each tick missing nothing.
async fn daily_slots_in_berlin(h: &Harness, name: &str, from: Timestamp) -> Vec<Timestamp> {
    let s = h.open_other(name);
    let new = new_schedule("berlin", Spec::cron("30 2 * * *").expect("cron"), "Europe/Berlin");
    put(&*s, &new, from.saturating_sub(HOUR)).await;
    let mut slots = Vec::new();
    for n in 0..=(3 * 24 * 4) {
        let now = from.saturating_add(minutes(15) * n);
        for tick in fire(&*s, now).await.ticks {
            assert_eq!(tick.missed, 0, "stepping every 15 minutes misses nothing: {tick:?}");
            created_job(&tick);
            slots.push(tick.slot);
        }
    }
    slots
}

/// Overlap `skip` reads the previous tick's job in the fire's transaction:
/// one that ended (cancelled) does not block the next slot, nor one that
/// was purged since (no job to read); one waiting to retry after a failure
/// is still unfinished, and the slot is skipped with the event on it.
pub async fn overlap_skip_reads_the_previous_job_as_it_is_now(h: &Harness) {
    let s = h.store();
    let mut new = every("hourly", HOUR);
    new.overlap = Overlap::Skip;
    put(&*s, &new, T0).await;
    let first = created_job(the_tick(&fire(&*s, t(hours(1))).await, "hourly"));
    s.cancel(first, t(hours(1) + minutes(1))).await.expect("cancel");
    let second = created_job(the_tick(&fire(&*s, t(hours(2))).await, "hourly"));
    s.cancel(second, t(hours(2) + minutes(1))).await.expect("cancel");
    let purged =
        s.purge(&PurgeFilter { include_pending: false, older_than: None }).await.expect("purge");
    assert_eq!(BTreeSet::from_iter(purged), BTreeSet::from([first, second]));
    let third = created_job(the_tick(&fire(&*s, t(hours(3))).await, "hourly"));

    let c = h.claim_expect(&*s, "worker", t(hours(3) + minutes(1)), third).await;
    let failure = Failure { error: "exit 1".into(), exit_code: Some(1), permanent: false };
    let failed = s.fail(third, &c.fence, failure, t(hours(3) + minutes(2))).await.expect("fail");
    assert_eq!(failed.state, JobState::Pending, "attempts left: back to pending for a retry");
    let ticks = fire(&*s, t(hours(4))).await;
    assert_eq!(
        the_tick(&ticks, "hourly").outcome,
        TickOutcome::Skipped { unfinished: third, noted: true }
    );
    assert_eq!(event_kinds(&*s, third).await.last(), Some(&EventKind::TickSkipped));
    let slots: Vec<Timestamp> = tick_jobs(&*s, "hourly").await.keys().copied().collect();
    assert_eq!(slots, [t(hours(3))], "the purged jobs are gone, the third is the only one");
}

/// A tick's job is the schedule's job as it was put (command, queue,
/// priority, attempts) with the tick's key, due at once, claimable like
/// any pushed job.
pub async fn a_ticks_job_is_the_schedules_job_with_the_ticks_key(h: &Harness) {
    let s = h.store();
    let mut new = every("reports", HOUR);
    new.job = shell("make report").queue("reports").priority(5).max_attempts(7);
    put(&*s, &new, T0).await;
    let id = created_job(the_tick(&fire(&*s, t(hours(1) + minutes(1))).await, "reports"));
    let j = job(&*s, id).await;
    assert_eq!(j.command(), Some("make report"));
    assert_eq!((j.queue.as_str(), j.priority, j.max_attempts), ("reports", 5, 7));
    assert_eq!(j.idempotency_key, Some(tick_key("reports", t(hours(1)))));
    assert!(j.is_due(t(hours(1) + minutes(1))), "due at once");
    h.claim_expect(&*s, "worker", t(hours(1) + minutes(2)), id).await;
}
