//! One clock: two hosts on one queue, B's clock 90 s fast. Each passes its
//! own wall clock as `now`; the store judges both on the server's, so B
//! neither steals A's live lease nor runs a delayed job early, and a delay
//! B gives a job is 60 s of the server's time, not 150.

use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::{
    ClaimRequest, Clock, ClockOnly, Completion, NewJob, Owner, Policy, Reclaim, Store, SystemClock,
    Timestamp,
};
use slothqueue_store_postgres::testing::{schema_url_for_path, url_from_env};
use slothqueue_store_postgres::{PgOptions, PgStore};

const SKEW: Duration = Duration::from_secs(90);

fn real() -> Timestamp {
    SystemClock.now()
}

fn fast() -> Timestamp {
    SystemClock.now().saturating_add(SKEW)
}

fn request(owner: &str) -> ClaimRequest {
    ClaimRequest::new(Owner::named(owner), Arc::new(ClockOnly)).reclaim(Reclaim::DeadOrExpired)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_host_neither_steals_a_live_lease_nor_runs_early() {
    let Some(base) = url_from_env() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = schema_url_for_path(&base, &dir.path().join("skew"));
    let policy = Policy { lease_ttl: Duration::from_secs(30), ..Policy::default() };
    let a =
        PgStore::open(&url, PgOptions { policy: policy.clone(), ..PgOptions::default() }).unwrap();
    let b = PgStore::open(
        &url,
        PgOptions { policy, host_clock: Some(Arc::new(fast)), ..PgOptions::default() },
    )
    .unwrap();
    assert_eq!(a.clock_offset_ms(), 0, "the same host as the server");
    let offset = b.clock_offset_ms();
    assert!((offset + 90_000).abs() < 1_000, "B measured {offset} ms, not about -90 s");

    // A claims a job: its lease runs 30 s of the server's time.
    let job = a.push(NewJob::shell("true", "/"), real()).await.unwrap().job;
    let claimed = a.claim(&request("a"), real()).await.unwrap().expect("A claims");
    assert_eq!(claimed.job.id, job.id);
    let until = claimed.job.lease.as_ref().expect("a lease").until;
    assert!(until.duration_since(real()) > Duration::from_secs(25), "{until}");

    // B's own `now` is past the lease's end by its clock; not by the
    // server's: nothing for B.
    let stolen = b.claim(&request("b"), fast()).await.unwrap();
    assert!(stolen.is_none(), "B took A's live lease: {stolen:?}");
    let done = Completion::default();
    a.complete(job.id, &claimed.fence, done, real()).await.unwrap();

    // B pushes a job delayed by 60 s of its clock: due 60 s from now on
    // the server's, which A, whose clock is right, agrees with.
    let delayed = NewJob::shell("later", "/").not_before(fast().saturating_add(secs(60)));
    let by_b = b.push(delayed, fast()).await.unwrap().job;
    let due_in = by_b.not_before.duration_since(real());
    assert!(due_in > secs(55) && due_in <= secs(61), "due in {due_in:?}");
    let early = a.claim(&request("a"), real().saturating_add(secs(30))).await.unwrap();
    assert!(early.is_none(), "A ran B's delayed job early: {early:?}");
    let on_time = a.claim(&request("a"), real().saturating_add(secs(61))).await.unwrap();
    assert_eq!(on_time.map(|c| c.job.id), Some(by_b.id), "due after 60 s");

    // A pushes a job delayed 60 s: B, 90 s fast, does not run it early.
    let delayed = NewJob::shell("later too", "/").not_before(real().saturating_add(secs(60)));
    let by_a = a.push(delayed, real()).await.unwrap().job;
    let early = b.claim(&request("b"), fast().saturating_add(secs(30))).await.unwrap();
    assert!(early.is_none(), "B ran A's delayed job early: {early:?}");
    // And B's wake-up time is on B's clock: about 150 s from B's now.
    let next = b.next_due().await.unwrap().expect("a job is waiting");
    let wait = next.duration_since(fast());
    assert!(wait > secs(55) && wait <= secs(61), "B would sleep {wait:?}");
    let on_time = b.claim(&request("b"), fast().saturating_add(secs(61))).await.unwrap();
    assert_eq!(on_time.map(|c| c.job.id), Some(by_a.id), "due after 60 s");
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
