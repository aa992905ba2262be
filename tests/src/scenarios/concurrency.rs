//! Many claimers and pushers at once: handles in one process, and separate
//! OS processes on one file.

use std::collections::BTreeSet;
use std::sync::Arc;

use slothqueue_core::{
    Completion, EventKind, Failure, JobId, JobState, ListFilter, Settlement, Store,
};

use crate::child::{Role, Work, run_workers};
use crate::{Harness, event_kinds, secs, shell};

const RACE_JOBS: usize = 500;
const RACE_HANDLES: usize = 8;
const PROCESSES: usize = 4;
const PROCESS_JOBS: usize = 200;

/// Checks that `claimed` (per worker) covers `all` exactly once.
fn assert_each_exactly_once(all: &[JobId], claimed: &[Vec<JobId>]) {
    let mut seen = BTreeSet::new();
    for (worker, ids) in claimed.iter().enumerate() {
        for id in ids {
            assert!(seen.insert(*id), "job #{id} was handed out twice (again to worker {worker})");
        }
    }
    let expected: BTreeSet<JobId> = all.iter().copied().collect();
    let missing: Vec<_> = expected.difference(&seen).collect();
    let extra: Vec<_> = seen.difference(&expected).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing {missing:?}, unexpected {extra:?}");
}

async fn all_done_once(s: &dyn Store, ids: &[JobId]) {
    let stats = s.stats(slothqueue_core::Timestamp::EPOCH).await.expect("stats");
    assert_eq!((stats.done, stats.pending, stats.running), (ids.len() as u64, 0, 0));
    for &id in ids {
        assert_eq!(
            event_kinds(s, id).await,
            [EventKind::Pushed, EventKind::Claimed, EventKind::Completed],
            "#{id}"
        );
    }
}

/// 8 handles on one file, each claiming and completing in its own task
/// until nothing is due, over 500 jobs: every job is handed out exactly
/// once, each ends `done` after one attempt, nothing is lost.
pub async fn claim_race_across_handles_hands_each_job_once(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let batch = (0..RACE_JOBS).map(|i| shell(&format!("echo {i}"))).collect();
    let pushed = s.push_many(batch, t).await.expect("push_many");
    let all: Vec<JobId> = pushed.iter().map(|p| p.job.id).collect();
    assert_eq!(all.len(), RACE_JOBS);

    let mut tasks = Vec::new();
    for w in 0..RACE_HANDLES {
        let store: Arc<dyn Store> = if w == 0 { s.clone() } else { h.open_second() };
        let request = h.request(&format!("racer-{w}"));
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some(c) = store.claim(&request, t).await.expect("claim") {
                assert_eq!(c.job.attempts, 1, "#{} was claimed before", c.job.id);
                store
                    .complete(c.job.id, &c.fence, Completion::default(), t)
                    .await
                    .expect("complete");
                mine.push(c.job.id);
            }
            mine
        }));
    }
    let mut claimed = Vec::new();
    for task in tasks {
        claimed.push(task.await.expect("a racer panicked"));
    }
    assert_each_exactly_once(&all, &claimed);
    all_done_once(&*s, &all).await;
}

/// 8 handles settle parents that share children, at once: 60 parents
/// (every tenth fails for good), 60 children each waiting on 3 of them,
/// 60 grandchildren each waiting on 2 children. Each racer claims, checks
/// the job's parents are all `done` as committed (a child handed out early
/// would be a count of parents decremented twice), then completes it, or
/// fails it when it is a failing parent, some racers through
/// `settle_and_claim`. In the end every job whose ancestors all completed
/// is `done` after one attempt, every other one `cancelled` without a
/// claim, and nothing waits (a decrement lost would leave a job waiting).
pub async fn settles_across_handles_release_each_child_once(h: &Harness) {
    const N: usize = 60;
    let s = h.store();
    let t = h.start();
    let parents: Vec<_> =
        (0..N).map(|i| shell(&format!("echo p{i}")).key(format!("p{i}"))).collect();
    let parents: Vec<JobId> =
        s.push_many(parents, t).await.expect("parents").iter().map(|p| p.job.id).collect();
    let children: Vec<_> = (0..N)
        .map(|i| {
            let mut c = shell(&format!("echo c{i}")).key(format!("c{i}"));
            for k in 0..3 {
                c = c.after(parents[(i + k * 7) % N]);
            }
            c
        })
        .collect();
    let children: Vec<JobId> =
        s.push_many(children, t).await.expect("children").iter().map(|p| p.job.id).collect();
    let grandchildren: Vec<_> = (0..N)
        .map(|i| shell(&format!("echo g{i}")).after(children[i]).after(children[(i + 11) % N]))
        .collect();
    s.push_many(grandchildren, t).await.expect("grandchildren");
    let failing: BTreeSet<JobId> = parents.iter().copied().step_by(10).collect();

    let mut tasks = Vec::new();
    for w in 0..RACE_HANDLES {
        let store: Arc<dyn Store> = if w == 0 { s.clone() } else { h.open_second() };
        let request = h.request(&format!("settler-{w}"));
        let failing = failing.clone();
        tasks.push(tokio::spawn(async move {
            let mut next = store.claim(&request, t).await.expect("claim");
            while let Some(c) = next {
                for p in &c.job.after {
                    let parent = store.get(*p).await.expect("get a parent");
                    assert_eq!(
                        parent.state,
                        JobState::Done,
                        "#{} handed out before #{p}",
                        c.job.id
                    );
                }
                let settlement = if failing.contains(&c.job.id) {
                    Settlement::Fail(Failure {
                        error: "boom".into(),
                        exit_code: Some(1),
                        permanent: true,
                    })
                } else {
                    Settlement::Complete(Completion::default())
                };
                next = if w % 2 == 0 {
                    store
                        .settle_and_claim(c.job.id, &c.fence, settlement, &request, t)
                        .await
                        .expect("settle_and_claim")
                        .next
                } else {
                    match settlement {
                        Settlement::Complete(done) => {
                            store.complete(c.job.id, &c.fence, done, t).await.map(drop)
                        }
                        Settlement::Fail(failure) => {
                            store.fail(c.job.id, &c.fence, failure, t).await.map(drop)
                        }
                    }
                    .expect("settle");
                    store.claim(&request, t).await.expect("claim")
                };
            }
        }));
    }
    for task in tasks {
        task.await.expect("a settler panicked");
    }
    let jobs = s.list(&ListFilter::default()).await.expect("list");
    assert_eq!(jobs.len(), 3 * N);
    let state: std::collections::BTreeMap<JobId, JobState> =
        jobs.iter().map(|j| (j.id, j.state)).collect();
    for j in &jobs {
        let kinds = event_kinds(&*s, j.id).await;
        if failing.contains(&j.id) {
            assert_eq!(j.state, JobState::Failed, "#{}", j.id);
            continue;
        }
        let doomed = j.after.iter().any(|p| state[p] != JobState::Done);
        if doomed {
            assert_eq!(
                j.state,
                JobState::Cancelled,
                "#{} waits on a job that did not complete",
                j.id
            );
            assert!(!kinds.contains(&EventKind::Claimed), "#{}: {kinds:?}", j.id);
        } else {
            assert_eq!(
                kinds,
                [EventKind::Pushed, EventKind::Claimed, EventKind::Completed],
                "#{} (its parents {:?} all done)",
                j.id,
                j.after
            );
        }
    }
    let stats = s.stats(t).await.expect("stats");
    assert_eq!((stats.pending, stats.running), (0, 0), "nothing left waiting");
}

/// 8 handles pushing 25 jobs each at the same time get 200 distinct ids,
/// and all 200 jobs are there.
pub async fn pushes_across_handles_get_distinct_ids(h: &Harness) {
    let t = h.start();
    let mut tasks = Vec::new();
    for w in 0..RACE_HANDLES {
        let store = h.open_second();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for i in 0..25 {
                let p = store.push(shell(&format!("echo {w} {i}")), t).await.expect("push");
                assert!(p.created);
                mine.push(p.job.id);
            }
            mine
        }));
    }
    let mut pushed = Vec::new();
    for task in tasks {
        pushed.push(task.await.expect("a pusher panicked"));
    }
    for ids in &pushed {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "one handle's ids must increase: {ids:?}");
    }
    let s = h.store();
    let listed: Vec<JobId> =
        s.list(&ListFilter::default()).await.expect("list").iter().map(|j| j.id).collect();
    assert_each_exactly_once(&listed, &pushed);
    assert_eq!(listed.len(), 8 * 25);
}

/// 4 separate OS processes open the same file and claim and complete
/// until nothing is due, over 200 jobs, while this process keeps its own
/// handle open: each job is claimed exactly once, nothing is lost. (Under
/// [`crate::run_all`] the workers are threads with their own handles.)
pub async fn claim_race_across_processes_hands_each_job_once(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let batch = (0..PROCESS_JOBS).map(|i| shell(&format!("echo {i}"))).collect();
    let all: Vec<JobId> =
        s.push_many(batch, t).await.expect("push_many").iter().map(|p| p.job.id).collect();

    let now = h.at(secs(1));
    let works: Vec<Work> = (0..PROCESSES)
        .map(|i| Work {
            role: Role::Claim,
            path: h.path().to_owned(),
            owner: format!("proc-{i}"),
            now,
        })
        .collect();
    let (open, child, dir) = (h.open_fn(), h.child_test().map(str::to_owned), h.dir().to_owned());
    let claimed =
        tokio::task::spawn_blocking(move || run_workers(open, child.as_deref(), &dir, &works))
            .await
            .expect("the workers");
    assert_each_exactly_once(&all, &claimed);
    all_done_once(&*s, &all).await;
    for (i, ids) in claimed.iter().enumerate() {
        for &id in ids.iter().take(3) {
            let j = crate::job(&*s, id).await;
            assert_eq!(j.state, JobState::Done);
            assert_eq!(j.result, Some(format!("proc-{i}")), "#{id} completed by its claimer");
        }
    }
}

/// 4 separate OS processes pushing 50 jobs each into one file at once get
/// 200 distinct ids, and every job is there with its `pushed` event.
pub async fn pushes_across_processes_get_distinct_ids(h: &Harness) {
    let s = h.store();
    let now = h.start();
    let works: Vec<Work> = (0..PROCESSES)
        .map(|i| Work {
            role: Role::Push { count: 50 },
            path: h.path().to_owned(),
            owner: format!("pusher-{i}"),
            now,
        })
        .collect();
    let (open, child, dir) = (h.open_fn(), h.child_test().map(str::to_owned), h.dir().to_owned());
    let pushed =
        tokio::task::spawn_blocking(move || run_workers(open, child.as_deref(), &dir, &works))
            .await
            .expect("the workers");
    let listed: Vec<JobId> =
        s.list(&ListFilter::default()).await.expect("list").iter().map(|j| j.id).collect();
    assert_eq!(listed.len(), PROCESSES * 50);
    assert_each_exactly_once(&listed, &pushed);
    for ids in &pushed {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "one process's ids must increase: {ids:?}");
    }
    let first = pushed[0][0];
    assert_eq!(event_kinds(&*s, first).await, [EventKind::Pushed]);
    assert_eq!(crate::job(&*s, first).await.command(), Some("echo pusher-0 0"));
}
