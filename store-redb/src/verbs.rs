//! The row verbs `slothqueue_core::ops` runs on, over [`RedbTx`] (the
//! tables of one open write transaction), and the search for due jobs in
//! claim order that the claim pulls from, pushed down to the `ready`
//! index.
//!
//! Nothing here decides: every operation is core's, run inside the write
//! transaction `store.rs` opens; a verb reads or writes entries through
//! `rows.rs`, which keeps every index in step with the row.

use std::ops::Bound;

use redb::ReadableTable;

use slothqueue_core::ops::{ClaimCursor, DueScope, Tx, TxError};
use slothqueue_core::{
    Event, Job, JobId, JobState, LaneScope, LaneSettings, Lanes, Schedule, StoreError, Timestamp,
    Transition,
};

use crate::error::Failure;
use crate::rows::{RedbTx, decode_job, dependents_in, out_of_step};
use crate::schema::priority_key;

/// Only what is already a store error is a refusal (a batch pins it on
/// its element); redb's failures and damaged rows are the store's.
impl TxError for Failure {
    fn refusal(self) -> Result<StoreError, Self> {
        match self {
            Failure::Store(e) => Ok(e),
            other => Err(other),
        }
    }
}

/// Every read sees the transaction's earlier writes (a batch sees the jobs
/// pushed before in it; a plan, the rows it wrote).
impl Tx for RedbTx<'_> {
    type Error = Failure;

    fn catch_up(&mut self, now: Timestamp) -> Result<(), Failure> {
        self.advance(now)
    }

    fn job(&mut self, id: JobId) -> Result<Option<Job>, Failure> {
        RedbTx::job(self, id)
    }

    fn key_holder(&mut self, key: &str) -> Result<Option<Job>, Failure> {
        RedbTx::key_holder(self, key)
    }

    fn dependents(&mut self, id: JobId) -> Result<Vec<JobId>, Failure> {
        // A parent purged before its children still lists them: an edge
        // lives as long as its child.
        dependents_in(&self.edges, id)
    }

    fn running(&mut self) -> Result<Vec<Job>, Failure> {
        self.running_jobs()
    }

    fn due(
        &mut self,
        scope: &DueScope<'_>,
        after: Option<&ClaimCursor>,
        limit: usize,
    ) -> Result<Vec<Job>, Failure> {
        // What became due since the last push or claim moves into `ready`
        // first (a no-op when the store already did at this `now`).
        self.advance(scope.now)?;
        let mut jobs = Vec::new();
        for id in ready_ids(self, scope, after, limit)? {
            let job = RedbTx::job(self, id)?.ok_or_else(|| out_of_step("ready", id))?;
            // `ready` holds claimable pending jobs only; anything else is
            // a row and its indexes out of step.
            if job.state != JobState::Pending || !job.is_claimable() {
                return Err(Failure::Damaged(format!(
                    "the ready index is out of step: job #{id} is {} and not claimable",
                    job.state
                )));
            }
            jobs.push(job);
        }
        Ok(jobs)
    }

    fn jobs_in(&mut self, states: &[JobState]) -> Result<Vec<Job>, Failure> {
        // The jobs table iterates in id order.
        let mut out = Vec::new();
        for entry in self.jobs.iter()? {
            let (k, v) = entry?;
            let job = decode_job(k.value(), v.value())?;
            if states.contains(&job.state) {
                out.push(job);
            }
        }
        Ok(out)
    }

    fn lanes(&mut self) -> Result<Lanes, Failure> {
        RedbTx::lanes(self)
    }

    fn put_lane(&mut self, scope: &LaneScope, settings: &LaneSettings) -> Result<(), Failure> {
        RedbTx::put_lane(self, scope, settings)
    }

    fn schedule(&mut self, key: &str) -> Result<Option<Schedule>, Failure> {
        RedbTx::schedule(self, key)
    }

    fn schedules(&mut self) -> Result<Vec<Schedule>, Failure> {
        self.all_schedules()
    }

    fn put_schedule(&mut self, s: &Schedule) -> Result<(), Failure> {
        RedbTx::put_schedule(self, s)
    }

    fn delete_schedule(&mut self, key: &str) -> Result<(), Failure> {
        self.remove_schedule(key)
    }

    fn next_id(&mut self) -> Result<JobId, Failure> {
        RedbTx::next_id(self)
    }

    fn insert(&mut self, job: &Job, events: &[Event]) -> Result<(), Failure> {
        self.put(None, Some(job))?;
        RedbTx::append(self, events)?;
        // The counter in `meta` never goes down, so ids are never reused,
        // also after a purge.
        if RedbTx::next_id(self)? <= job.id {
            let next = job.id.checked_add(1).ok_or_else(|| {
                Failure::Store(StoreError::InvalidInput("job ids are exhausted".to_owned()))
            })?;
            self.set_next_id(next)?;
        }
        Ok(())
    }

    fn update(&mut self, before: &Job, after: &Transition) -> Result<(), Failure> {
        self.apply(before, after)
    }

    fn append(&mut self, events: &[Event]) -> Result<(), Failure> {
        RedbTx::append(self, events)
    }

    fn delete(&mut self, jobs: &[Job]) -> Result<(), Failure> {
        for job in jobs {
            // The job's own edges (to its parents) go with it; edges naming
            // it as a parent belong to the children that remain.
            self.put(Some(job), None)?;
            self.events.retain_in((job.id, 0)..=(job.id, u32::MAX), |_, _| false)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// The due jobs, in claim order

/// A `ready` key, owned: (queue, kind, priority flipped, `not_before`, id).
type Key = (String, String, u32, i64, i64);

/// The least key of every queue after `queue` in name order.
fn past_queue(queue: &str) -> Bound<Key> {
    Bound::Included((format!("{queue}\0"), String::new(), 0, i64::MIN, i64::MIN))
}

/// Up to `limit` ids of due jobs after `after`, in claim order, of the
/// queues and kinds `scope` admits, from `ready` (keyed in claim order per
/// (queue, kind)): the first `limit` after the cursor of each (queue,
/// kind) group merged. A closed queue is skipped at its first key, one
/// seek however many of its jobs are due; a kind not asked for is skipped
/// a group at a time; a head not due at `now` (the clock stepped back
/// below the watermark) is skipped with the rest of its priority level,
/// whose other jobs are due no earlier. Named queues are looked in one by
/// one. With a limit of 1 and no cursor (a claim's first pull) this is one
/// seek per (queue, kind) group, as many as a single best-job search.
fn ready_ids(
    t: &RedbTx<'_>,
    scope: &DueScope<'_>,
    after: Option<&ClaimCursor>,
    limit: usize,
) -> Result<Vec<JobId>, Failure> {
    let mut found: Vec<(u32, i64, i64)> = Vec::new();
    if limit == 0 {
        return Ok(Vec::new());
    }
    let only: Vec<Option<&str>> = match &scope.queues {
        Some(qs) => qs.iter().map(|q| Some(*q)).collect(),
        None => vec![None],
    };
    for only in only {
        walk_ready(t, scope, only, after, limit, &mut found)?;
    }
    found.sort_unstable();
    found.truncate(limit);
    Ok(found.into_iter().map(|(_, _, id)| id).collect())
}

/// [`ready_ids`] for one queue (or all), each group's due jobs after the
/// cursor pushed onto `found` as (priority flipped, `not_before`, id),
/// at most `limit` a group. Each pass opens a range at `lower` and reads
/// on until it must seek elsewhere (another queue, group or level).
fn walk_ready(
    t: &RedbTx<'_>,
    scope: &DueScope<'_>,
    only: Option<&str>,
    after: Option<&ClaimCursor>,
    limit: usize,
    found: &mut Vec<(u32, i64, i64)>,
) -> Result<(), Failure> {
    let now = scope.now.as_millis();
    let cursor = after.map(|c| (priority_key(c.priority), c.not_before.as_millis(), c.id));
    let admits_kind = |k: &str| scope.kinds.is_none_or(|ks| ks.iter().any(|x| x == k));
    let mut lower: Bound<Key> =
        Bound::Included((only.unwrap_or("").to_owned(), String::new(), 0, i64::MIN, i64::MIN));
    // The (queue, kind) group being read, and how many of it were taken.
    let mut group: Option<(String, String)> = None;
    let mut taken = 0;
    loop {
        let mut seek: Option<Bound<Key>> = None;
        let from = match &lower {
            Bound::Included(k) => Bound::Included(borrow_key(k)),
            Bound::Excluded(k) => Bound::Excluded(borrow_key(k)),
            Bound::Unbounded => Bound::Unbounded,
        };
        for entry in t.ready.range::<(&str, &str, u32, i64, i64)>((from, Bound::Unbounded))? {
            let (key, _) = entry?;
            let (q, k, p, nb, id) = key.value();
            if only.is_some_and(|o| o != q) {
                break;
            }
            let in_group = group.as_ref().is_some_and(|(gq, gk)| gq == q && gk == k);
            if !in_group {
                if scope.closed.contains(q) {
                    seek = Some(past_queue(q));
                    break;
                }
                if !admits_kind(k) {
                    seek = Some(Bound::Excluded(group_end(q, k)));
                    break;
                }
                group = Some((q.to_owned(), k.to_owned()));
                taken = 0;
                if let Some(c) = cursor.filter(|c| (p, nb, id) <= *c) {
                    seek = Some(Bound::Excluded((q.to_owned(), k.to_owned(), c.0, c.1, c.2)));
                    break;
                }
            }
            if nb > now {
                seek = Some(Bound::Excluded((q.to_owned(), k.to_owned(), p, i64::MAX, i64::MAX)));
                break;
            }
            found.push((p, nb, id));
            taken += 1;
            if taken == limit {
                seek = Some(Bound::Excluded(group_end(q, k)));
                break;
            }
        }
        match seek {
            Some(next) => lower = next,
            None => return Ok(()),
        }
    }
}

/// The greatest key of the group (`queue`, `kind`).
fn group_end(queue: &str, kind: &str) -> Key {
    (queue.to_owned(), kind.to_owned(), u32::MAX, i64::MAX, i64::MAX)
}

fn borrow_key(k: &Key) -> (&str, &str, u32, i64, i64) {
    (k.0.as_str(), k.1.as_str(), k.2, k.3, k.4)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use proptest::prelude::*;
    use slothqueue_core::{NewJob, Policy, Stamp, Timestamp, ops};

    use super::*;
    use crate::txn::{self, Gate};

    const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);
    const QUEUES: [&str; 3] = ["a", "b", "c"];

    fn at(secs: u64) -> Timestamp {
        T0.saturating_add(Duration::from_secs(secs))
    }

    /// (priority, due in s, queue, kind is `mail` (else `sms`), held)
    type Spec = (i32, u64, usize, bool, bool);

    fn spec() -> impl Strategy<Value = Spec> {
        (
            prop_oneof![3 => -2i32..3, 1 => any::<i32>()],
            0u64..100,
            0usize..3,
            any::<bool>(),
            prop::bool::weighted(0.15),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Paged through from a cursor, `due` hands out exactly the due,
        /// claimable jobs the scope admits, in claim order, whatever the
        /// page size, the queues named or closed, the kinds, and a clock
        /// stepped back below the watermark.
        #[test]
        fn due_pages_through_the_admitted_due_jobs_in_claim_order(
            specs in prop::collection::vec(spec(), 0..24),
            named in prop::option::of(prop::sample::subsequence(QUEUES.to_vec(), 0..=3)),
            closed in prop::sample::subsequence(QUEUES.to_vec(), 0..=2),
            mail_only in prop::option::of(any::<bool>()),
            (watermark_s, now_s) in (0u64..120, 0u64..120),
            limit in 1usize..5,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let timeout = Duration::from_secs(5);
            let db = crate::open::open_database(&dir.path().join("q.redb"), timeout, false).unwrap();
            let kinds: Option<Vec<String>> =
                mail_only.map(|m| vec![if m { "mail" } else { "sms" }.to_owned()]);
            let closed: BTreeSet<&str> = closed.into_iter().collect();
            let queues = named.map(|qs| qs.into_iter().filter(|q| !closed.contains(q)).collect());
            let scope = DueScope { now: at(now_s), queues, closed, kinds: kinds.as_deref() };
            let (got, want) = txn::write(&db, &Gate::default(), timeout, |t| {
                let news: Vec<NewJob> = specs
                    .iter()
                    .map(|&(priority, due_in, q, mail, _)| {
                        let kind = if mail { "mail" } else { "sms" };
                        NewJob::new(kind, serde_json::json!({}))
                            .queue(QUEUES[q])
                            .priority(priority)
                            .not_before(at(due_in))
                    })
                    .collect();
                let mut jobs: Vec<Job> = ops::push_many(t, &news, T0, &Policy::default())?
                    .into_iter()
                    .map(|p| p.job)
                    .collect();
                for (job, spec) in jobs.iter_mut().zip(&specs) {
                    if spec.4 {
                        *job = ops::hold(t, job.id, Stamp::new("ana", T0), T0)?;
                    }
                }
                t.advance(at(watermark_s))?;
                let mut want: Vec<&Job> = jobs
                    .iter()
                    .filter(|j| j.is_claimable() && j.is_due(scope.now))
                    .filter(|j| scope.queues.as_ref().is_none_or(|qs| qs.contains(&j.queue.as_str())))
                    .filter(|j| !scope.closed.contains(j.queue.as_str()))
                    .filter(|j| scope.kinds.is_none_or(|ks| ks.contains(&j.kind)))
                    .collect();
                want.sort_by_key(|j| j.claim_order());
                let mut got = Vec::new();
                let mut cursor = None;
                for _ in 0..100 {
                    let page = Tx::due(t, &scope, cursor.as_ref(), limit)?;
                    got.extend(page.iter().map(|j| j.id));
                    match page.last() {
                        Some(last) if page.len() == limit => cursor = Some(ClaimCursor::after(last)),
                        _ => break,
                    }
                }
                Ok((got, want.iter().map(|j| j.id).collect::<Vec<_>>()))
            })
            .unwrap();
            prop_assert_eq!(got, want);
        }
    }
}
