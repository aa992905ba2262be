//! PostgreSQL as operators run it, at the store's level: through a real
//! PgBouncer in transaction mode (a pool of 2 server connections, so a
//! store's transactions land on whichever is free), and against a real hot
//! standby made with `pg_basebackup -R`. Skipped, loudly, without
//! `SLOTHQUEUE_PG_URL` or the binaries; under `CI` a missing binary fails.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly on purpose; a panic is the test's report"
)]
#![allow(
    clippy::disallowed_methods,
    reason = "deadlines for real servers and processes to answer, not time made to pass"
)]

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use slothqueue_core::{
    ClaimRequest, ClockOnly, Completion, JobState, ListFilter, NewJob, Owner, Store, StoreError,
    Timestamp,
};
use slothqueue_store_postgres::testing::servers::{PgBouncer, Standby, tool};
use slothqueue_store_postgres::testing::{schema_url_for_path, url_from_env};
use slothqueue_store_postgres::{PgOptions, PgStore};

fn t(secs: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// The cluster's URL for a fresh queue, or `None` (skipped).
fn fresh(name: &str) -> Option<(String, tempfile::TempDir)> {
    let base = url_from_env()?;
    let dir = tempfile::tempdir().unwrap();
    Some((schema_url_for_path(&base, &dir.path().join(name)), dir))
}

/// Through PgBouncer without `pooler=transaction`, the store's startup
/// settings are refused by the pooler; the error says what to add.
#[test]
fn a_pooler_refusing_the_session_settings_is_told_how() {
    let Some((url, _dir)) = fresh("refused") else { return };
    if tool("pgbouncer").is_none() {
        return;
    }
    let bouncer = PgBouncer::start(&url, 2).unwrap();
    let err = PgStore::open(&bouncer.url(&url, ""), PgOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Unreachable(_)), "{err:?}");
    assert!(err.to_string().contains("pooler=transaction"), "{err}");
}

/// Three stores (three processes' worth) share a PgBouncer whose pool has
/// two server connections: every transaction of each may run on either.
/// The queue is created, jobs are pushed one by one and in bulk (`COPY`),
/// claimed and completed concurrently, each exactly once, and read back;
/// a change listener is woken by polling.
#[test]
fn the_store_works_through_pgbouncer_in_transaction_mode() {
    let Some((url, _dir)) = fresh("pooled") else { return };
    if tool("pgbouncer").is_none() {
        return;
    }
    let bouncer = PgBouncer::start(&url, 2).unwrap();
    let pooled = bouncer.url(&url, "pooler=transaction");
    let stores: Vec<Arc<PgStore>> =
        (0..3).map(|_| Arc::new(PgStore::open(&pooled, PgOptions::default()).unwrap())).collect();
    let rt = runtime();
    let one = rt.block_on(stores[0].push(NewJob::shell("one", "/"), t(0))).unwrap().job.id;
    let many: Vec<NewJob> = (0..40).map(|i| NewJob::shell(format!("job {i}"), "/")).collect();
    rt.block_on(stores[1].push_many(many, t(0))).unwrap();
    let woken = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&woken);
    let _listening = stores[2].on_change(Box::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    }));
    let workers: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(n, store)| {
            let store = Arc::clone(store);
            std::thread::spawn(move || {
                let rt = runtime();
                let request = ClaimRequest::new(Owner::named(format!("w{n}")), Arc::new(ClockOnly));
                let mut done = Vec::new();
                while let Some(c) = rt.block_on(store.claim(&request, t(1))).unwrap() {
                    let fence = c.fence.clone();
                    rt.block_on(store.complete(c.job.id, &fence, Completion::default(), t(2)))
                        .unwrap();
                    done.push(c.job.id);
                }
                done
            })
        })
        .collect();
    let mut ran = Vec::new();
    for w in workers {
        ran.extend(w.join().unwrap());
    }
    let unique: HashSet<_> = ran.iter().copied().collect();
    assert_eq!(ran.len(), 41, "every job once: {ran:?}\n{}", bouncer.log());
    assert_eq!(unique.len(), 41);
    let jobs = rt.block_on(stores[2].list(&ListFilter::default())).unwrap();
    assert!(jobs.iter().all(|j| j.state == JobState::Done), "{jobs:?}");
    assert_eq!(rt.block_on(stores[0].get(one)).unwrap().state, JobState::Done);
    assert!(rt.block_on(stores[1].events(one)).unwrap().len() >= 3);
    assert_eq!(rt.block_on(stores[2].stats(t(3))).unwrap().done, 41);
    // Polled wake-ups: once at once, then every second.
    let start = Instant::now();
    while woken.load(Ordering::SeqCst) < 2 && start.elapsed() < Duration::from_secs(10) {
        std::thread::yield_now();
    }
    assert!(woken.load(Ordering::SeqCst) >= 2, "the listener polls");
    // The read-only store goes through the pooler too.
    let look = PgStore::open_read_only(&pooled, PgOptions::default()).unwrap();
    assert_eq!(rt.block_on(look.get(one)).unwrap().state, JobState::Done);
}

/// A hot standby refuses a store that writes at open, in one line naming
/// the fix, and serves one that only looks.
#[test]
fn a_standby_refuses_a_writer_and_serves_a_reader() {
    let Some((url, _dir)) = fresh("standby") else { return };
    if tool("pg_basebackup").is_none() {
        return;
    }
    let rt = runtime();
    let primary = PgStore::open(&url, PgOptions::default()).unwrap();
    let id = rt.block_on(primary.push(NewJob::shell("x", "/"), t(0))).unwrap().job.id;
    let standby = Standby::start(&url).unwrap();
    let replica = standby.url(&url);
    let err = PgStore::open(&replica, PgOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::ReadOnlyStandby(_)), "{err:?}");
    assert!(
        err.to_string().ends_with("this server is a read-only standby; point --db at the primary"),
        "{err}"
    );
    let look = PgStore::open_read_only(&replica, PgOptions::default()).unwrap();
    assert_eq!(rt.block_on(look.get(id)).unwrap().id, id);
}
