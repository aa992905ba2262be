//! Unit tests of the store on a live server (skipped, loudly, without
//! `SLOTHQUEUE_PG_URL`): the claim's plan, the open's refusals, the
//! read-only store, notifications, errors.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use slothqueue_core::{ClaimFilter, ClockOnly, JobState, Owner};
use tokio_postgres::types::ToSql;

use super::*;
use crate::testing::{schema_url_for_path, url_from_env};
use crate::verbs::{Search, due_sql};

fn t(secs: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
}

/// A fresh queue's URL, and the directory whose path names it.
fn fresh(name: &str) -> Option<(String, tempfile::TempDir)> {
    let base = url_from_env()?;
    let dir = tempfile::tempdir().unwrap();
    Some((schema_url_for_path(&base, &dir.path().join(name)), dir))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// The plan of `sql` (with `params`), one line per step, on the
/// statistics the store left (no `ANALYZE` here: a large `push_many`
/// runs one itself).
fn explain(store: &PgStore, sql: &str, params: Vec<Box<dyn ToSql + Sync + Send>>) -> String {
    let sql = format!("EXPLAIN {sql}");
    store
        .inner
        .run(false, move |db, _| {
            let refs: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
            let rows = db.query(&sql, &refs)?;
            rows.iter().map(|r| Ok(r.try_get::<_, String>(0)?)).collect::<Result<Vec<_>, Error>>()
        })
        .unwrap()
        .join("\n")
}

/// A claim reads its candidate through the claim index, in claim order,
/// never by scanning the jobs: O(log n) in the backlog.
#[test]
fn the_claim_reads_its_candidate_through_the_index() {
    let Some((url, _dir)) = fresh("explain") else { return };
    let store = PgStore::open(&url, PgOptions::default()).unwrap();
    let jobs: Vec<NewJob> = (0..5_000)
        .map(|i| {
            NewJob::shell("true", "/")
                .queue(["a", "b", "c"][i % 3])
                .priority((i % 5) as i32)
                .not_before(t((i % 7) as i64 - 3))
        })
        .collect();
    runtime().block_on(store.push_many(jobs, t(0))).unwrap();
    let now = || Box::new(t(1).as_millis()) as Box<dyn ToSql + Sync + Send>;
    let all = explain(&store, &due_sql(Search::Start, false, false, false, 1), vec![now()]);
    assert!(!all.contains("Seq Scan on jobs"), "{all}");
    assert!(all.contains("Index Scan using jobs_pending on jobs"), "{all}");
    assert!(all.contains("LockRows"), "{all}");
    let by_queue = explain(
        &store,
        &due_sql(Search::Start, true, false, false, 1),
        vec![now(), Box::new("b".to_owned())],
    );
    assert!(!by_queue.contains("Seq Scan on jobs"), "{by_queue}");
    assert!(by_queue.contains("jobs_pending_queue"), "{by_queue}");
    let kinds: Vec<String> = vec!["shell".into()];
    let closed: Vec<String> = vec!["a".into()];
    let filtered = explain(
        &store,
        &due_sql(Search::Start, false, true, true, 1),
        vec![now(), Box::new(kinds), Box::new(closed)],
    );
    assert!(!filtered.contains("Seq Scan on jobs"), "{filtered}");
    // The later pulls, after a cursor: the rest of its priority level, a
    // range of the index from the cursor on, then the levels below it; the
    // cursor bounds the index search, no scan of what comes before it.
    for by_queue in [false, true] {
        let index = if by_queue { "jobs_pending_queue" } else { "jobs_pending " };
        let queue = || Box::new("b".to_owned()) as Box<dyn ToSql + Sync + Send>;
        let mut rest: Vec<Box<dyn ToSql + Sync + Send>> =
            vec![now(), Box::new(2_i32), Box::new(t(-1).as_millis()), Box::new(7_i64)];
        let mut below: Vec<Box<dyn ToSql + Sync + Send>> = vec![now(), Box::new(2_i32)];
        if by_queue {
            rest.push(queue());
            below.push(queue());
        }
        let bounds = [
            (Search::RestOfLevel, rest, "(ROW(not_before, id) > ROW("),
            (Search::LevelsBelow, below, "(priority < 2)"),
        ];
        for (from, params, bound) in bounds {
            let plan = explain(&store, &due_sql(from, by_queue, false, false, 64), params);
            assert!(!plan.contains("Seq Scan on jobs"), "{from:?}: {plan}");
            assert!(plan.contains(index), "{from:?}: {plan}");
            let cond = plan.lines().find(|l| l.trim_start().starts_with("Index Cond:"));
            assert!(cond.is_some_and(|c| c.contains(bound)), "{from:?}: {plan}");
        }
    }
    let request = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly));
    let claimed = runtime().block_on(store.claim(&request, t(1))).unwrap().unwrap();
    assert_eq!(claimed.job.priority, 4, "the highest priority due first");
}

#[test]
fn a_newer_schema_is_refused_untouched() {
    let Some((url, _dir)) = fresh("newer") else { return };
    let store = PgStore::open(&url, PgOptions::default()).unwrap();
    store
        .inner
        .run(true, |db, _| db.batch("UPDATE meta SET value = 99 WHERE name = 'schema_version'"))
        .unwrap();
    let err = PgStore::open(&url, PgOptions::default()).unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaTooNew { found: 99, supported, .. } if supported == crate::schema::SCHEMA_VERSION),
        "{err:?}"
    );
    let err = PgStore::open_read_only(&url, PgOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::SchemaTooNew { found: 99, .. }), "{err:?}");
    let version = store
        .inner
        .run(false, |db, _| {
            let row = db.query_opt("SELECT value FROM meta WHERE name = 'schema_version'", &[])?;
            Ok(row.map(|r| r.get::<_, i64>(0)))
        })
        .unwrap();
    assert_eq!(version, Some(99), "untouched");
}

/// A version-1 queue (the layout before GPUs: version 2 only adds the
/// `gpus` column, so dropping it and marking the schema 1 makes one) is
/// migrated by the next open: its jobs read as asking for no GPU, and a
/// GPU job's request and holds are kept.
#[test]
fn a_version_1_queue_is_migrated_to_keep_gpus() {
    use slothqueue_core::gpu::{Gpu, GpuLook, GpuOffer, GpuRequest, GpuSight};
    struct OneGpu;
    impl GpuSight for OneGpu {
        fn look(&self) -> GpuLook {
            let gpu = Gpu {
                index: 0,
                uuid: "GPU-pg".into(),
                name: "L4".into(),
                memory_used: 0,
                memory_total: 24 << 30,
                utilization: Some(0),
                processes: Vec::new(),
            };
            GpuLook { gpus: vec![gpu], error: None }
        }
    }
    let Some((url, _dir)) = fresh("v1") else { return };
    let store = PgStore::open(&url, PgOptions::default()).unwrap();
    let rt = runtime();
    let old = rt.block_on(store.push(NewJob::shell("old", "/"), t(0))).unwrap().job.id;
    store
        .inner
        .run(true, |db, _| {
            db.batch(
                "ALTER TABLE jobs DROP COLUMN gpus; \
                 UPDATE meta SET value = 1 WHERE name = 'schema_version'",
            )
        })
        .unwrap();
    drop(store);
    let store = PgStore::open(&url, PgOptions::default()).unwrap();
    let version = store
        .inner
        .run(false, |db, _| {
            let row = db.query_opt("SELECT value FROM meta WHERE name = 'schema_version'", &[])?;
            Ok(row.map(|r| r.get::<_, i64>(0)))
        })
        .unwrap();
    assert_eq!(version, Some(i64::from(crate::schema::SCHEMA_VERSION)));
    assert!(rt.block_on(store.get(old)).unwrap().gpus.is_none());
    let want = GpuRequest { count: 1, memory: None };
    let id = rt.block_on(store.push(NewJob::shell("gpu", "/").gpus(want.clone()), t(1))).unwrap();
    let mut owner = Owner::named("r");
    owner.host = "box".into();
    let request = ClaimRequest::new(owner, Arc::new(ClockOnly))
        .gpus(GpuOffer::new(Arc::new(OneGpu)))
        .refusing([old]);
    let claimed = rt.block_on(store.claim(&request, t(2))).unwrap().unwrap();
    assert_eq!(claimed.job.id, id.job.id);
    let back = rt.block_on(store.get(id.job.id)).unwrap();
    assert_eq!(back.gpus, Some(want));
    assert_eq!(back.lease.unwrap().gpus[0].uuid, "GPU-pg");
}

#[test]
fn a_schema_of_other_tables_is_refused() {
    let Some((url, _dir)) = fresh("foreign") else { return };
    let schema = url.rsplit_once("schema=").unwrap().1.to_owned();
    let other = crate::testing::with_schema(&url, "public");
    let store = PgStore::open(&other, PgOptions::default());
    // Make a schema with a table of someone else's, through any store.
    let store = store.unwrap();
    store
        .inner
        .run(true, move |db, _| {
            db.batch(&format!("CREATE SCHEMA {schema}; CREATE TABLE {schema}.theirs (x INT)"))
        })
        .unwrap();
    drop(store);
    let err = PgStore::open(&url, PgOptions::default()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { detail, .. } if detail.contains("theirs")),
        "{err:?}"
    );
}

#[test]
fn a_read_only_store_creates_nothing_and_writes_nothing() {
    let Some((url, _dir)) = fresh("read-only") else { return };
    let err = PgStore::open_read_only(&url, PgOptions::default()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    let rt = runtime();
    let writer = PgStore::open(&url, PgOptions::default()).unwrap();
    rt.block_on(writer.push(NewJob::shell("true", "/"), t(0))).unwrap();
    let reader = PgStore::open_read_only(&url, PgOptions::default()).unwrap();
    assert_eq!(rt.block_on(reader.stats(t(1))).unwrap().pending, 1);
    let err = rt.block_on(reader.push(NewJob::shell("true", "/"), t(0))).unwrap_err();
    assert!(
        matches!(&err, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::ReadOnlyFilesystem),
        "{err:?}"
    );
}

#[test]
fn many_openers_of_a_fresh_schema_all_succeed() {
    let Some((url, _dir)) = fresh("racing-open") else { return };
    std::thread::scope(|s| {
        let opens: Vec<_> =
            (0..6).map(|_| s.spawn(|| PgStore::open(&url, PgOptions::default()))).collect();
        for o in opens {
            o.join().unwrap().unwrap();
        }
    });
}

#[test]
fn a_server_not_there_is_unreachable() {
    let err = PgStore::open(
        "postgres://nobody@localhost/db?host=/nonexistent-socket-dir&schema=q",
        PgOptions { connect_timeout: Duration::from_secs(1), ..PgOptions::default() },
    )
    .unwrap_err();
    assert!(
        matches!(&err, StoreError::Unreachable(m) if m.contains("/nonexistent-socket-dir")),
        "{err:?}"
    );
    assert!(err.is_temporary());
}

#[test]
fn a_bad_schema_name_is_refused() {
    for bad in ["Upper", "1x", "a-b", "pg_x", ""] {
        let url = format!("postgres://u@localhost/db?schema={bad}");
        let err = PgStore::open(&url, PgOptions::default()).unwrap_err();
        assert!(matches!(err, StoreError::InvalidInput(_)), "{bad}: {err:?}");
    }
}

/// A push through one handle wakes a listener on another, and the
/// listener is called once when it starts listening.
#[test]
fn a_commit_elsewhere_wakes_a_listener() {
    let Some((url, _dir)) = fresh("listen") else { return };
    let rt = runtime();
    let listener = PgStore::open(&url, PgOptions::default()).unwrap();
    let writer = PgStore::open(&url, PgOptions::default()).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let _guard = listener.on_change(Box::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
    }));
    let wait_for = |n: usize| {
        for _ in 0..500 {
            if calls.load(Ordering::SeqCst) >= n {
                return true;
            }
            crate::txn::nap_blocking(Duration::from_millis(10));
        }
        false
    };
    assert!(wait_for(1), "called once when listening starts");
    let before = calls.load(Ordering::SeqCst);
    rt.block_on(writer.push(NewJob::shell("true", "/"), t(0))).unwrap();
    assert!(wait_for(before + 1), "woken by the push");
    // A heartbeat-free claim of nothing wakes nobody, and never errs.
    let request = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly));
    assert!(rt.block_on(writer.claim(&request, t(1))).unwrap().is_some());
}

/// A claim commits under the queue's shared lock unless it must not: one
/// that would end an abandoned job, or that finds lanes configured, runs
/// again under the exclusive lock. Ending the abandoned job wakes the
/// listeners, as any write that may make work claimable does; a plain
/// claim wakes nobody.
#[test]
fn a_claim_escalates_only_when_it_must_and_wakes_when_it_ends_a_job() {
    let Some((url, _dir)) = fresh("escalate") else { return };
    let rt = runtime();
    let store = PgStore::open(&url, PgOptions::default()).unwrap();
    let push = |job: NewJob| rt.block_on(store.push(job, t(0))).unwrap().job;
    let doomed = push(NewJob::shell("doomed", "/").max_attempts(1).priority(1));
    let next = push(NewJob::shell("next", "/"));
    // The lock each attempt of one claim ran under (shared: true).
    let claim = |who: &str, now: Timestamp| {
        let request = ClaimRequest::new(Owner::named(who), Arc::new(ClockOnly));
        store
            .inner
            .run(true, |db, inner| {
                let mut shared = Vec::new();
                let claimed = shared_or_exclusive(db, &inner.keys, false, true, &mut |tx| {
                    shared.push(tx.is_shared());
                    ops::claim(tx, &request, now, &inner.policy)
                })?;
                Ok((shared, claimed.map(|c| c.job.id)))
            })
            .unwrap()
    };
    assert_eq!(claim("w1", t(1)), (vec![true], Some(doomed.id)));

    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let _guard = store.on_change(Box::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
    }));
    let wait_for = |n: usize| {
        for _ in 0..500 {
            if calls.load(Ordering::SeqCst) >= n {
                return true;
            }
            crate::txn::nap_blocking(Duration::from_millis(10));
        }
        false
    };
    assert!(wait_for(1), "called once when listening starts");
    // The lease (60 s) has run out with no attempt left: the claim ends
    // the job, and takes the next.
    assert_eq!(claim("w2", t(200)), (vec![true, false], Some(next.id)));
    assert_eq!(rt.block_on(store.get(doomed.id)).unwrap().state, JobState::Failed);
    assert!(wait_for(2), "woken by the job the claim ended");

    let pause = LaneChange::Pause(Stamp::new("ana", t(0)));
    rt.block_on(store.change_lane(&LaneScope::Queue("paused".into()), &pause)).unwrap();
    let third = push(NewJob::shell("third", "/"));
    // With lanes configured the lanes read first escalates, before the
    // claim runs at all.
    assert_eq!(claim("w3", t(201)), (vec![false], Some(third.id)), "lanes configured");
}

/// A claim that passes over many jobs (here, refused) pulls them from a
/// cursor in growing batches, across priority levels, from the all-queue
/// index leaving out a closed lane's queue, or queue by queue (merged in
/// claim order) when it names queues, and takes the first it may: the
/// first in claim order of every due job. Run in a transaction rolled
/// back, so each claim sees the same queue.
#[test]
fn a_claim_passing_over_many_jobs_walks_on_in_claim_order() {
    let Some((url, _dir)) = fresh("cursor") else { return };
    let rt = runtime();
    let store = PgStore::open(&url, PgOptions::default()).unwrap();
    let jobs: Vec<NewJob> = (0..120)
        .map(|i| {
            let queue = if i % 3 == 0 { "a" } else { "b" };
            NewJob::shell("true", "/")
                .queue(queue)
                .priority(i % 2)
                .not_before(t(i64::from(i % 4) - 4))
        })
        .collect();
    let pushed = rt.block_on(store.push_many(jobs, t(0))).unwrap();
    let mut order: Vec<Job> = pushed.into_iter().map(|p| p.job).collect();
    order.sort_by_key(Job::claim_order);
    rt.block_on(store.push(NewJob::shell("true", "/").queue("c").priority(9), t(0))).unwrap();
    let pause = LaneChange::Pause(Stamp::new("ana", t(0)));
    rt.block_on(store.change_lane(&LaneScope::Queue("c".into()), &pause)).unwrap();

    let claim = |request: &ClaimRequest| {
        store
            .inner
            .run(true, |db, inner| {
                db.batch("BEGIN")?;
                let claimed = ops::claim(&mut PgTx::new(db, false), request, t(1), &inner.policy);
                db.batch("ROLLBACK")?;
                Ok(claimed?.map(|c| c.job.id))
            })
            .unwrap()
    };
    let named = ClaimFilter { queues: vec!["b".into(), "a".into()], kinds: None };
    for filter in [ClaimFilter::default(), named] {
        for skip in [0, 1, 9, 80, 119] {
            let refused = order[..skip].iter().map(|j| j.id);
            let request = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly))
                .filter(filter.clone())
                .refusing(refused);
            assert_eq!(claim(&request), Some(order[skip].id), "{filter:?}, {skip} refused");
        }
        let everything = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly))
            .filter(filter.clone())
            .refusing(order.iter().map(|j| j.id));
        assert_eq!(claim(&everything), None, "{filter:?}");
    }
}

/// New jobs go to the server in a few statements however many they are
/// (one binary `COPY` of the jobs, one of their events), where row by row
/// is two a job: a push of plain jobs, and an import, whose check of each
/// job against the queue reads the batch's ids and keys in two queries
/// first (core asks job by job) and flushes nothing before its end.
#[test]
fn a_batch_of_new_jobs_costs_a_few_statements() {
    let Some((url, _dir)) = fresh("bulk") else { return };
    let Some((other, _other_dir)) = fresh("bulk_import") else { return };
    let rt = runtime();
    let one = PgOptions { pool_size: 1, ..PgOptions::default() };
    let store = PgStore::open(&url, one.clone()).unwrap();
    let statements = |store: &PgStore| store.inner.run(false, |db, _| Ok(db.statements())).unwrap();
    let jobs: Vec<NewJob> = (0..100).map(|_| NewJob::shell("true", "/")).collect();
    let before = statements(&store);
    rt.block_on(store.push_many(jobs, t(0))).unwrap();
    let pushed = statements(&store) - before;
    assert!(pushed <= 6, "100 jobs pushed in {pushed} statements");

    let export: Vec<(Job, Vec<Event>)> = (1..=100)
        .map(|id| {
            let job = rt.block_on(store.get(id)).unwrap();
            (job, rt.block_on(store.events(id)).unwrap())
        })
        .collect();
    let dst = PgStore::open(&other, one).unwrap();
    let before = statements(&dst);
    rt.block_on(dst.restore_many(export.clone())).unwrap();
    let imported = statements(&dst) - before;
    assert!(imported <= 7, "100 jobs imported in {imported} statements");
    assert_eq!(rt.block_on(dst.get(100)).unwrap(), export[99].0);
}

/// A long push (`push_stream` of 200,000 lines, each job a few KB with its
/// recorded environment) holds at most [`HOLD_MAX`] new jobs before
/// writing them, not every one until the commit; all are written.
#[test]
fn a_long_push_holds_a_bounded_batch_of_new_jobs() {
    use slothqueue_core::machine;
    use slothqueue_core::ops::Tx;

    use crate::rows::HOLD_MAX;

    let Some((url, _dir)) = fresh("long_push") else { return };
    let rt = runtime();
    let store = PgStore::open(&url, PgOptions::default()).unwrap();
    let jobs = 2 * HOLD_MAX + 500;
    let most = rt
        .block_on(store.write(Lock::Exclusive, false, move |tx, policy| {
            let (first, mut most) = (tx.next_id()?, 0);
            for id in first..first + jobs as i64 {
                let t = machine::create(id, &NewJob::shell("true", "/"), &[], t(0), policy);
                tx.insert(&t.job, &t.events)?;
                most = most.max(tx.held());
            }
            Ok(most)
        }))
        .unwrap();
    assert!(most <= HOLD_MAX, "held {most} new jobs at once");
    assert_eq!(rt.block_on(store.stats(t(0))).unwrap().pending, jobs as u64);
}

/// A claim costs what one `LIMIT 1` seek of the claim index does, in one
/// transaction whose lock rides on `BEGIN` and whose notification rides
/// on `COMMIT`: the lanes, the running jobs, the best due job, the claimed
/// row and its event. A settle that claims the next job adds the settled
/// row, its event and the jobs waiting on it, nothing more.
#[test]
fn a_claim_and_a_settle_cost_their_few_statements() {
    let Some((url, _dir)) = fresh("statements") else { return };
    let rt = runtime();
    let store = PgStore::open(&url, PgOptions { pool_size: 1, ..PgOptions::default() }).unwrap();
    let statements = || store.inner.run(false, |db, _| Ok(db.statements())).unwrap();
    let jobs: Vec<NewJob> = (0..50).map(|_| NewJob::shell("true", "/")).collect();
    rt.block_on(store.push_many(jobs, t(0))).unwrap();
    let request = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly));
    let before = statements();
    let c = rt.block_on(store.claim(&request, t(1))).unwrap().unwrap();
    let claim = statements() - before;
    let before = statements();
    let done = Settlement::Complete(Completion::default());
    let next = rt.block_on(store.settle_and_claim(c.job.id, &c.fence, done, &request, t(2)));
    let settle_and_claim = statements() - before;
    assert!(next.unwrap().next.is_some());
    assert_eq!(claim, 8, "BEGIN, lanes, running, due, the row, its event (2), COMMIT");
    assert_eq!(settle_and_claim, 13, "and the settled row, its event (2), its dependents");
}

/// A large batch leaves the planner's statistics of `jobs` up to date: a
/// queue just filled with 100,000 jobs and not yet analyzed by autovacuum
/// was claimed from at 334 ms a job (PostgreSQL planned on a table it
/// believed empty), about a millisecond once analyzed.
#[test]
fn a_large_batch_is_analyzed_for_the_claims_after_it() {
    let Some((url, _dir)) = fresh("analyze") else { return };
    let store = PgStore::open(&url, PgOptions::default()).unwrap();
    let jobs: Vec<NewJob> = (0..1_500).map(|_| NewJob::shell("true", "/")).collect();
    runtime().block_on(store.push_many(jobs, t(0))).unwrap();
    let believed: f32 = store
        .inner
        .run(false, |db, _| {
            let row =
                db.query("SELECT reltuples FROM pg_class WHERE oid = 'jobs'::regclass", &[])?;
            Ok(row[0].try_get::<_, f32>(0)?)
        })
        .unwrap();
    assert!(believed >= 1_500.0, "the planner believes jobs holds {believed} rows");
}

/// A call that waits for the queue's lock longer than `busy_timeout` is
/// `Busy` and writes nothing, and the connection it waited on (the lock
/// is taken in `BEGIN`'s round trip, so the failed `BEGIN` left an aborted
/// transaction open) is rolled back and serves the next call.
#[test]
fn a_lock_held_too_long_is_busy_and_its_connection_serves_on() {
    let Some((url, _dir)) = fresh("busy") else { return };
    let rt = runtime();
    let options = PgOptions {
        busy_timeout: Duration::from_millis(200),
        pool_size: 1,
        ..PgOptions::default()
    };
    let waiter = PgStore::open(&url, options).unwrap();
    let holder = PgStore::open(&url, PgOptions::default()).unwrap();
    let refused = holder
        .inner
        .run(true, |db, inner| {
            db.transaction(&inner.keys, Lock::Exclusive, false, &mut |_| {
                Ok(rt.block_on(waiter.push(NewJob::shell("true", "/"), t(0))))
            })
        })
        .unwrap();
    assert!(matches!(refused, Err(StoreError::Busy { .. })), "{refused:?}");
    // One connection in the pool: the refused call's own.
    let pushed = rt.block_on(waiter.push(NewJob::shell("true", "/"), t(1))).unwrap();
    assert_eq!(pushed.job.id, 1, "the refused push wrote nothing");
}

/// A call on a connection gone silent (a frozen link: nothing is closed,
/// nothing answers) ends within the call timeout as `Unreachable`, and
/// once the link is back the next call goes through on a new connection
/// (S26). Without the timeout, tokio-postgres waits for the answer
/// forever.
#[test]
fn a_call_on_a_frozen_link_ends_in_time_and_the_next_one_reconnects() {
    let Some((url, _dir)) = fresh("frozen") else { return };
    let relay = crate::testing::Relay::start(&url).unwrap();
    let via = relay.url(&url).unwrap();
    let limit = Duration::from_millis(800);
    let store =
        PgStore::open(&via, PgOptions { call_timeout: limit, ..PgOptions::default() }).unwrap();
    let rt = runtime();
    let id = rt.block_on(store.push(NewJob::shell("true", "/"), t(0))).unwrap().job.id;
    relay.freeze();
    let asked = tokio::time::Instant::now();
    let got = rt.block_on(async {
        // A bound of the test's own, so a store that waits forever fails
        // here instead of hanging the suite.
        tokio::time::timeout(limit * 10, store.get(id)).await
    });
    let took = asked.elapsed();
    let Ok(answer) = got else { panic!("a call on a frozen link did not end in {took:?}") };
    assert!(
        matches!(answer, Err(StoreError::Unreachable(_))),
        "a silent server is unreachable: {answer:?}"
    );
    assert!(took < limit * 3, "it ended within about the call timeout: {took:?}");
    relay.thaw();
    let job = rt.block_on(store.get(id)).expect("the next call, on a new connection, goes through");
    assert_eq!(job.id, id);
}

/// A store cut off inside a transaction (the link frozen after it took the
/// queue's lock) does not hold the queue: the server ends its session
/// after the idle-in-transaction timeout, and another store's write that
/// waits on the lock goes through. Without the timeout, the lock is held
/// until the server's TCP keepalive gives up, and the write is `Busy`
/// (S26's rare takeover that never came).
#[test]
fn a_store_cut_off_inside_a_transaction_does_not_hold_the_queue() {
    let Some((url, _dir)) = fresh("cutoff") else { return };
    let relay = crate::testing::Relay::start(&url).unwrap();
    let via = relay.url(&url).unwrap();
    let rt = runtime();
    let idle = Duration::from_millis(500);
    let cut_off = PgStore::open(
        &via,
        PgOptions {
            idle_in_transaction_timeout: idle,
            call_timeout: Duration::from_secs(2),
            pool_size: 1,
            ..PgOptions::default()
        },
    )
    .unwrap();
    // Waits on the lock three times as long as the server takes to end
    // the frozen session.
    let other = PgStore::open(
        &url,
        PgOptions { busy_timeout: Duration::from_millis(1500), ..PgOptions::default() },
    )
    .unwrap();
    let mut answer = None;
    let _whatever_it_became = cut_off.inner.run(true, |db, inner| {
        db.transaction(&inner.keys, Lock::Exclusive, false, &mut |_| {
            // Holding the queue's lock, the link goes silent.
            relay.freeze();
            answer = Some(rt.block_on(other.push(NewJob::shell("true", "/"), t(0))));
            Ok(())
        })
    });
    relay.thaw();
    let answer = answer.expect("the transaction ran");
    assert!(answer.is_ok(), "the other store's push waited on a frozen session: {answer:?}");
    // Whatever the cut-off store's transaction became, the push went through
    // once, and the cut-off store serves again on a new connection.
    let jobs = rt.block_on(other.list(&slothqueue_core::ListFilter::default())).unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    rt.block_on(cut_off.get(jobs[0].id)).expect("the cut-off store reconnects");
}

/// The constraint names of a queue's `jobs` CHECKs, sorted.
fn check_names(store: &PgStore) -> Vec<String> {
    store
        .inner
        .run(false, |db, _| {
            let rows = db.query(
                "SELECT conname::TEXT FROM pg_constraint
                 WHERE conrelid = 'jobs'::regclass AND contype = 'c' ORDER BY 1",
                &[],
            )?;
            rows.iter().map(|r| Ok(r.try_get(0)?)).collect::<Result<Vec<String>, Error>>()
        })
        .unwrap()
}

const NAMED_CHECKS: [&str; 6] = [
    "jobs_held_stamped",
    "jobs_lease_cleared",
    "jobs_lease_complete",
    "jobs_pending_parents_not_negative",
    "jobs_running_iff_leased",
    "jobs_state_known",
];

/// A DBA reads the layout from the catalog (`\d+`): every table and
/// column of a queue has a comment, every CHECK a name saying what it
/// holds, and a job's parents are found through `edges_child`.
#[test]
fn the_schema_is_described_in_the_catalog() {
    let Some((url, _dir)) = fresh("described") else { return };
    let store = PgStore::open(&url, PgOptions::default()).unwrap();
    let (bare, commented, tables, child_index) = store
        .inner
        .run(false, |db, _| {
            let bare = db.query(
                "SELECT c.relname || '.' || a.attname FROM pg_attribute a
                 JOIN pg_class c ON c.oid = a.attrelid
                 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
                   AND a.attnum > 0 AND NOT a.attisdropped
                   AND col_description(c.oid, a.attnum) IS NULL",
                &[],
            )?;
            let bare: Vec<String> = bare.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
            let commented = db.query(
                "SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
                   AND a.attnum > 0 AND col_description(c.oid, a.attnum) IS NOT NULL",
                &[],
            )?[0]
                .try_get::<_, i64>(0)?;
            let tables = db.query(
                "SELECT relname::TEXT FROM pg_class
                 WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'
                   AND obj_description(oid, 'pg_class') IS NULL",
                &[],
            )?;
            let tables: Vec<String> =
                tables.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
            let index = db.query("SELECT to_regclass('edges_child') IS NOT NULL", &[])?[0]
                .try_get::<_, bool>(0)?;
            Ok((bare, commented, tables, index))
        })
        .unwrap();
    assert!(bare.is_empty(), "columns without a comment: {bare:?}");
    assert_eq!(commented, crate::schema::COMMENTED_COLUMNS as i64);
    assert!(tables.is_empty(), "tables without a comment: {tables:?}");
    assert!(child_index, "edges_child");
    assert_eq!(check_names(&store), NAMED_CHECKS);
}

/// A version-2 queue (made by version 2's own DDL, so its CHECKs carry the
/// names PostgreSQL made up) is migrated by the next open: the CHECKs
/// renamed, the comments and `edges_child` added, and it works on.
#[test]
fn a_version_2_queue_is_migrated_to_a_described_schema() {
    let Some((url, _dir)) = fresh("v2") else { return };
    let Some((other, _other_dir)) = fresh("v2-maker") else { return };
    let schema = url.rsplit_once("schema=").unwrap().1.to_owned();
    let maker = PgStore::open(&other, PgOptions::default()).unwrap();
    let ddl = format!(
        "BEGIN; CREATE SCHEMA {schema}; SET LOCAL search_path TO {schema}; {} {} \
         INSERT INTO meta (name, value) VALUES ('schema_version', 2); COMMIT",
        crate::schema::MIGRATIONS[0],
        crate::schema::MIGRATIONS[1]
    );
    maker.inner.run(true, |db, _| db.batch(&ddl)).unwrap();
    let store = PgStore::open(&url, PgOptions::default()).unwrap();
    let version = store
        .inner
        .run(false, |db, _| {
            let row = db.query_opt("SELECT value FROM meta WHERE name = 'schema_version'", &[])?;
            Ok(row.map(|r| r.get::<_, i64>(0)))
        })
        .unwrap();
    assert_eq!(version, Some(3));
    assert_eq!(check_names(&store), NAMED_CHECKS);
    let rt = runtime();
    let parent = rt.block_on(store.push(NewJob::shell("p", "/"), t(0))).unwrap().job.id;
    let child = rt.block_on(store.push(NewJob::shell("c", "/").after(parent), t(0))).unwrap();
    assert_eq!(child.job.pending_parents, 1);
    let request = ClaimRequest::new(Owner::named("w"), Arc::new(ClockOnly));
    let claimed = rt.block_on(store.claim(&request, t(1))).unwrap().unwrap();
    assert_eq!(claimed.job.id, parent);
}
