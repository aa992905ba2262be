//! How long an import of 100,000 jobs takes in one `restore_many`: a
//! measurement, not a check, so it does nothing unless asked (as the
//! fixture writers: the tidy rules allow no switched-off test):
//! `SLOTHQUEUE_MEASURE_IMPORT=1 cargo test -p slothqueue-store-sqlite --test it import -- --nocapture`.

use slothqueue_core::machine;
use slothqueue_core::{JobState, NewJob, Policy, Stats, Store, Timestamp};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

#[tokio::test(flavor = "multi_thread")]
#[expect(clippy::disallowed_methods, reason = "timing a measurement")]
#[expect(clippy::print_stderr, reason = "the measurement is the output")]
async fn restore_many_of_100_000_jobs() {
    const N: i64 = 100_000;
    if std::env::var_os("SLOTHQUEUE_MEASURE_IMPORT").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("q.db"), SqliteOptions::default()).unwrap();
    let now = Timestamp::from_millis(1_700_000_000_000);
    let jobs = (1..=N)
        .map(|id| {
            let new = NewJob::shell(format!("echo {id}"), "/").key(format!("k{id}"));
            let mut t = machine::create(id, &new, &[], now, &Policy::default());
            t.job.state = JobState::Done;
            t.job.finished_at = Some(now);
            (t.job, t.events)
        })
        .collect();
    let start = std::time::Instant::now();
    store.restore_many(jobs).await.unwrap();
    let took = start.elapsed();
    eprintln!("sqlite: restore_many of {N} jobs took {took:?}");
    let stats = store.stats(now).await.unwrap();
    assert_eq!(stats, Stats { done: N as u64, ..Stats::default() });
}
