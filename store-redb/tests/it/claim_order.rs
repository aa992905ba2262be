//! The `ready` index hands out jobs in exactly [`Job::claim_order`] among
//! the due ones, whatever the priorities, due times, queues, kinds and
//! clock steps (backwards too), checked against a plain model.

#![allow(clippy::unwrap_used, reason = "a test failure is a panic")]

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use slothqueue_core::{
    ClaimFilter, ClaimRequest, Job, JobState, Lease, Liveness, LivenessJudge, NewJob, Owner, Store,
    Timestamp,
};
use slothqueue_store_redb::{RedbOptions, RedbStore};

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

/// Every owner is alive: a claimed job stays claimed, so the model only
/// has to know about pending jobs.
struct AllAlive;

impl LivenessJudge for AllAlive {
    fn judge(&self, _: &Lease) -> Liveness {
        Liveness::Alive
    }
}

#[derive(Clone, Debug)]
struct Spec {
    priority: i32,
    due_in_s: u64,
    queue: &'static str,
    kind: &'static str,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop_oneof![3 => -2i32..3, 1 => any::<i32>()],
        0u64..100,
        prop_oneof![Just("a"), Just("b"), Just("c")],
        prop_oneof![Just("shell"), Just("mail")],
    )
        .prop_map(|(priority, due_in_s, queue, kind)| Spec { priority, due_in_s, queue, kind })
}

fn filter() -> impl Strategy<Value = ClaimFilter> {
    prop_oneof![
        3 => Just(ClaimFilter::default()),
        1 => Just(ClaimFilter { queues: vec!["a".into(), "c".into()], kinds: None }),
        1 => Just(ClaimFilter { queues: vec![], kinds: Some(vec!["mail".into()]) }),
        1 => Just(ClaimFilter { queues: vec!["b".into()], kinds: Some(vec!["shell".into()]) }),
    ]
}

fn new_job(s: &Spec, n: usize) -> NewJob {
    let payload = if s.kind == "shell" {
        serde_json::json!({ "command": format!("echo {n}"), "cwd": "/tmp", "env": {} })
    } else {
        serde_json::json!({ "n": n })
    };
    NewJob::new(s.kind, payload)
        .queue(s.queue)
        .priority(s.priority)
        .not_before(T0.saturating_add(Duration::from_secs(s.due_in_s)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn claims_follow_claim_order_among_due_jobs(
        specs in prop::collection::vec(spec(), 1..16),
        claims in prop::collection::vec((0u64..120, filter()), 1..20),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let store = RedbStore::open(&dir.path().join("q.redb"), RedbOptions::default()).unwrap();
            let batch = specs.iter().enumerate().map(|(n, s)| new_job(s, n)).collect();
            let mut model: Vec<Job> =
                store.push_many(batch, T0).await.unwrap().into_iter().map(|p| p.job).collect();
            let owner = Owner::named("claimer");
            // Claim times are not sorted: the clock steps back as often as forward.
            for (at_s, filter) in claims {
                let now = T0.saturating_add(Duration::from_secs(at_s));
                let expected = model
                    .iter()
                    .filter(|j| j.state == JobState::Pending && j.is_due(now) && filter.admits(j))
                    .min_by_key(|j| j.claim_order())
                    .map(|j| j.id);
                let got = store.claim(&ClaimRequest::new(owner.clone(), Arc::new(AllAlive)).filter(filter.clone()), now).await.unwrap();
                prop_assert_eq!(got.as_ref().map(|c| c.job.id), expected, "at +{}s with {:?}", at_s, filter);
                if let Some(c) = got {
                    let m = model.iter_mut().find(|j| j.id == c.job.id).unwrap();
                    m.state = JobState::Running;
                }
            }
            store.check_integrity().unwrap();
            Ok(())
        })?;
    }
}

/// A due job behind many higher-priority jobs that are not due yet is
/// found at once, before and after the watermark passes them.
#[tokio::test(flavor = "multi_thread")]
async fn future_jobs_do_not_hide_a_due_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(&dir.path().join("q.redb"), RedbOptions::default()).unwrap();
    let later = T0.saturating_add(Duration::from_secs(3600));
    let mut batch: Vec<NewJob> = (0..300)
        .map(|p| NewJob::shell(format!("echo {p}"), "/tmp").priority(p).not_before(later))
        .collect();
    batch.push(NewJob::shell("echo due", "/tmp").priority(-1).not_before(T0));
    let due = store.push_many(batch, T0).await.unwrap().last().unwrap().job.id;
    let owner = Owner::named("w");
    let f = ClaimFilter::default();
    // Pass the watermark over every job, then step the clock back.
    let none = store
        .claim(
            &ClaimRequest::new(owner.clone(), Arc::new(AllAlive)).filter(f.clone()),
            T0.saturating_sub(Duration::from_secs(1)),
        )
        .await;
    assert!(none.unwrap().is_none());
    let top = store
        .claim(&ClaimRequest::new(owner.clone(), Arc::new(AllAlive)).filter(f.clone()), later)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(top.job.priority, 299);
    let c = store
        .claim(&ClaimRequest::new(owner.clone(), Arc::new(AllAlive)).filter(f.clone()), T0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.job.id, due, "the clock stepped back: only the due job may go");
    assert!(
        store
            .claim(&ClaimRequest::new(owner.clone(), Arc::new(AllAlive)).filter(f.clone()), T0)
            .await
            .unwrap()
            .is_none()
    );
    store.check_integrity().unwrap();
}
