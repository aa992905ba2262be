//! What ran lately: jobs done and failed per minute over the last hour,
//! counted from the jobs' own `finished_at` (the queue's trail; nothing is
//! written per job for it, and no second store keeps it). [`read`] asks
//! the store for the jobs that finished since the hour began
//! (`ListFilter::finished_since`, answered in each store's query);
//! [`per_minute`] buckets them, a pure function of the jobs and `now`.
//! A job purged (`clear`) leaves the history with its row.

use serde::Serialize;
use slothqueue_core::{Job, JobState, ListFilter, ListOrder, Store, StoreError, Timestamp};

/// Minutes a history covers: the last hour.
pub const MINUTES: usize = 60;

const MINUTE_MS: i64 = 60_000;

/// The history answer: `since` is the start of the oldest minute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct History {
    /// UTC milliseconds: the start of the first minute counted.
    pub since: i64,
    /// [`MINUTES`] entries, oldest first; the last is the minute `now` is
    /// in, counted so far.
    pub minutes: Vec<Minute>,
}

/// One minute of a [`History`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Minute {
    /// UTC milliseconds: the start of the minute.
    pub at: i64,
    /// Jobs that ended done in it.
    pub done: u64,
    /// Jobs that ended failed in it (out of attempts, or failed for good).
    pub failed: u64,
}

/// The start of the oldest minute a history at `now` counts: whole UTC
/// minutes, the last the one `now` falls in.
pub fn since(now: Timestamp) -> Timestamp {
    let this_minute = now.as_millis().div_euclid(MINUTE_MS) * MINUTE_MS;
    Timestamp::from_millis(this_minute - (MINUTES as i64 - 1) * MINUTE_MS)
}

/// `jobs` done and failed per minute over the hour before `now`: a job
/// counts in the minute its `finished_at` falls in; cancelled jobs,
/// unfinished ones and those outside the hour (or ahead of `now`) are
/// not counted.
pub fn per_minute(jobs: &[Job], now: Timestamp) -> History {
    let since = since(now).as_millis();
    let mut minutes: Vec<Minute> = (0..MINUTES as i64)
        .map(|i| Minute { at: since + i * MINUTE_MS, done: 0, failed: 0 })
        .collect();
    for job in jobs {
        let Some(at) = job.finished_at.map(Timestamp::as_millis) else { continue };
        if at < since || at > now.as_millis() {
            continue;
        }
        let Some(m) =
            usize::try_from((at - since) / MINUTE_MS).ok().and_then(|i| minutes.get_mut(i))
        else {
            continue;
        };
        match job.state {
            JobState::Done => m.done += 1,
            JobState::Failed => m.failed += 1,
            JobState::Pending | JobState::Running | JobState::Cancelled => {}
        }
    }
    History { since, minutes }
}

/// The last hour's history of the queue behind `store`, at `now`.
pub async fn read(store: &dyn Store, now: Timestamp) -> Result<History, StoreError> {
    let mut jobs = Vec::new();
    for state in [JobState::Done, JobState::Failed] {
        let filter = ListFilter {
            state: Some(state),
            finished_since: Some(since(now)),
            order: ListOrder::Newest,
            ..ListFilter::default()
        };
        jobs.extend(store.list(&filter).await?);
    }
    Ok(per_minute(&jobs, now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use slothqueue_core::{NewJob, Policy, machine};

    /// 2023-11-14 22:13:20.000 UTC plus 30.5 s: inside a minute.
    const NOW: Timestamp = Timestamp::from_millis(1_700_000_030_500);

    fn ended(id: i64, state: JobState, at: i64) -> Job {
        let new = NewJob::shell("true", "/");
        let mut j = machine::create(id, &new, &[], NOW, &Policy::default()).job;
        j.state = state;
        j.finished_at = Some(Timestamp::from_millis(at));
        j
    }

    #[test]
    fn an_hour_is_sixty_whole_minutes_ending_with_the_one_now_is_in() {
        let h = per_minute(&[], NOW);
        assert_eq!(h.minutes.len(), 60);
        let this_minute = 1_699_999_980_000;
        assert_eq!(h.minutes[59].at, this_minute);
        assert_eq!(h.since, this_minute - 59 * 60_000);
        assert_eq!(h.minutes[0].at, h.since);
        assert!(h.minutes.windows(2).all(|w| w[1].at - w[0].at == 60_000), "oldest first");
        assert!(h.minutes.iter().all(|m| m.done == 0 && m.failed == 0));
    }

    #[test]
    fn each_end_counts_once_in_its_minute() {
        let this_minute = 1_699_999_980_000;
        let since = this_minute - 59 * 60_000;
        let jobs = [
            ended(1, JobState::Done, this_minute),
            ended(2, JobState::Done, NOW.as_millis()),
            ended(3, JobState::Failed, this_minute - 1),
            ended(4, JobState::Done, since),
            ended(5, JobState::Cancelled, this_minute),
            ended(6, JobState::Done, since - 1),
            ended(7, JobState::Done, NOW.as_millis() + 1),
            ended(8, JobState::Failed, since + 60_000 * 30 + 59_999),
        ];
        let h = per_minute(&jobs, NOW);
        assert_eq!(h.minutes[59], Minute { at: this_minute, done: 2, failed: 0 });
        assert_eq!(h.minutes[58], Minute { at: this_minute - 60_000, done: 0, failed: 1 });
        assert_eq!(h.minutes[0], Minute { at: since, done: 1, failed: 0 }, "the hour's start");
        assert_eq!(h.minutes[30].failed, 1);
        let total: u64 = h.minutes.iter().map(|m| m.done + m.failed).sum();
        assert_eq!(total, 5, "cancelled, before the hour and after now are not counted");
    }

    #[test]
    fn an_unfinished_job_is_not_counted() {
        let mut j = ended(1, JobState::Running, NOW.as_millis());
        j.finished_at = None;
        assert!(per_minute(&[j], NOW).minutes.iter().all(|m| m.done == 0));
    }
}
