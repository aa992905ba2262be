//! Lanes on redb (schema 3): what this backend's tables could get wrong
//! about limits, pauses and holds. A limit is counted inside the claim's
//! transaction, so it holds across handles (processes); a closed queue is
//! skipped at its first `ready` key, which must not skip a queue whose
//! name merely starts with it; a held job is out of `pending_by_time` and
//! `ready` (and stays out when its parents finish), and back in when
//! released; a lane row that does not decode is damage. The claims are
//! also checked against a model (proptest) with holds, pauses and limits
//! changing between them. The shared contract is the conformance suite's.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test failure is a panic")]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use slothqueue_core::{
    ClaimFilter, ClaimRequest, Claimed, Completion, Job, JobState, LaneChange, LaneCheck,
    LaneScope, Lanes, Lease, Liveness, LivenessJudge, NewJob, Owner, Settlement, Stamp, Store,
    StoreError, Timestamp,
};
use slothqueue_store_redb::{RedbOptions, RedbStore};

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn at(s: u64) -> Timestamp {
    T.saturating_add(Duration::from_secs(s))
}

fn open(path: &Path) -> RedbStore {
    RedbStore::open(path, RedbOptions::default()).unwrap()
}

/// Every owner is alive: a claimed job stays claimed.
struct AllAlive;

impl LivenessJudge for AllAlive {
    fn judge(&self, _: &Lease) -> Liveness {
        Liveness::Alive
    }
}

fn request(who: &str) -> ClaimRequest {
    ClaimRequest::new(Owner::named(who), Arc::new(AllAlive))
}

async fn claim(s: &RedbStore, who: &str, now: Timestamp) -> Option<Claimed> {
    s.claim(&request(who), now).await.unwrap()
}

fn job(queue: &str, n: u32) -> NewJob {
    NewJob::shell(format!("echo {n}"), "/tmp").queue(queue)
}

fn q(name: &str) -> LaneScope {
    LaneScope::Queue(name.to_owned())
}

fn ana() -> Stamp {
    Stamp::new("ana@laptop", T)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_limit_holds_across_two_handles_and_a_settle_frees_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let (one, two) = (open(&path), open(&path));
    let batch = (0..5).map(|n| job("disk", n)).chain([job("web", 9)]).collect();
    one.push_many(batch, T).await.unwrap();
    let lanes = two.change_lane(&q("disk"), &LaneChange::Limit(2)).await.unwrap();
    assert_eq!(lanes.of("disk").limit, 2);

    let a = claim(&one, "w1", at(1)).await.unwrap();
    let b = claim(&two, "w2", at(1)).await.unwrap();
    assert_eq!((a.job.queue.as_str(), b.job.queue.as_str()), ("disk", "disk"));
    let c = claim(&one, "w1", at(1)).await.unwrap();
    assert_eq!(c.job.queue, "web", "disk is full: the other lane's job");
    assert!(claim(&two, "w2", at(1)).await.is_none(), "disk is full for every handle");
    let stats = one.stats(at(1)).await.unwrap();
    assert_eq!(stats.due_now, 3, "disk's jobs are due; the lane holds them");

    // The settle and the chained claim are one transaction: the settled
    // job's slot is free for the next job of its lane.
    let done = Settlement::Complete(Completion::default());
    let next = two.settle_and_claim(b.job.id, &b.fence, done, &request("w2"), at(2)).await.unwrap();
    let next = next.next.expect("the slot the settle freed");
    assert_eq!(next.job.queue, "disk");
    assert!(claim(&one, "w1", at(2)).await.is_none(), "full again");

    // Lifting the limit opens the lane.
    one.change_lane(&q("disk"), &LaneChange::Limit(0)).await.unwrap();
    assert!(one.lanes().await.unwrap().is_default(), "no limit is not stored");
    assert!(claim(&two, "w2", at(3)).await.is_some());
    let counts = one.queue_counts(at(3)).await.unwrap();
    let disk = counts.iter().find(|c| c.queue == "disk").unwrap();
    assert_eq!((disk.pending, disk.due, disk.running), (1, 1, 3));
    one.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_queue_is_skipped_whole_but_not_the_queues_its_name_starts() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.redb"));
    // Higher priority in the paused queue, so a claim that did not skip it
    // would take it; "a-b", "a.b" and "a_b" sort right after "a".
    let mut batch: Vec<NewJob> = (0..200).map(|n| job("a", n).priority(5)).collect();
    batch.extend(["a-b", "a.b", "a_b", "b"].iter().map(|name| job(name, 0)));
    s.push_many(batch, T).await.unwrap();
    s.change_lane(&q("a"), &LaneChange::Pause(ana())).await.unwrap();

    let mut taken = Vec::new();
    while let Some(c) = claim(&s, "w", at(1)).await {
        taken.push(c.job.queue);
    }
    assert_eq!(taken, ["a-b", "a.b", "a_b", "b"]);
    // A filter naming only the paused queue reads nothing of it.
    let only_a = request("w").filter(ClaimFilter { queues: vec!["a".into()], kinds: None });
    assert!(s.claim(&only_a, at(1)).await.unwrap().is_none());

    // Pausing every queue closes them all; resuming it leaves `a`'s own
    // pause, and resuming `a` opens it.
    s.push(job("b", 1), at(1)).await.unwrap();
    let lanes = s.change_lane(&LaneScope::All, &LaneChange::Pause(ana())).await.unwrap();
    assert!(lanes.all_paused.is_some());
    assert!(claim(&s, "w", at(2)).await.is_none());
    s.change_lane(&LaneScope::All, &LaneChange::Resume).await.unwrap();
    assert_eq!(claim(&s, "w", at(2)).await.unwrap().job.queue, "b");
    assert!(claim(&s, "w", at(2)).await.is_none(), "a is still paused on its own");
    s.change_lane(&q("a"), &LaneChange::Resume).await.unwrap();
    assert_eq!(claim(&s, "w", at(3)).await.unwrap().job.queue, "a");
    s.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_lane_change_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.redb"));
    s.change_lane(&q("disk"), &LaneChange::Limit(3)).await.unwrap();
    let before = s.lanes().await.unwrap();
    for (scope, change) in
        [(LaneScope::All, LaneChange::Limit(2)), (q("../x"), LaneChange::Pause(ana()))]
    {
        let err = s.change_lane(&scope, &change).await.unwrap_err();
        assert!(matches!(err, StoreError::InvalidInput(_)), "{err:?}");
    }
    assert_eq!(s.lanes().await.unwrap(), before);
    s.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_job_is_out_of_every_claim_index_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.redb"));
    let parent = s.push(job("default", 0), T).await.unwrap().job;
    let child = s.push(job("default", 1).after(parent.id), T).await.unwrap().job;
    let plain = s.push(job("other", 2).priority(9), T).await.unwrap().job;
    let later = s.push(job("other", 3).not_before(at(50)), T).await.unwrap().job;

    // Hold the waiting child, the best due job and a future one.
    for id in [child.id, plain.id, later.id] {
        let held = s.hold(id, ana(), at(1)).await.unwrap();
        assert_eq!(held.held, Some(ana()));
    }
    let again = s.hold(plain.id, Stamp::new("bo", at(2)), at(2)).await.unwrap();
    assert_eq!(again.held, Some(ana()), "holding a held job changes nothing");
    assert_eq!(s.events(plain.id).await.unwrap().len(), 2, "one held event");
    s.check_integrity().unwrap();

    let stats = s.stats(at(1)).await.unwrap();
    assert_eq!((stats.pending, stats.held, stats.waiting_on_parents, stats.due_now), (4, 3, 1, 1));
    assert_eq!(stats.next_due, None, "a held job's time is not what it waits for");
    assert_eq!(s.next_due().await.unwrap(), Some(T), "the parent");
    let counts = s.queue_counts(at(1)).await.unwrap();
    let brief: Vec<_> = counts
        .iter()
        .map(|c| (c.queue.as_str(), c.pending, c.due, c.held, c.waiting_on_parents))
        .collect();
    assert_eq!(brief, [("default", 2, 1, 1, 1), ("other", 2, 0, 2, 0)]);

    // The parent runs and finishes: the child stays held.
    let c = claim(&s, "w", at(2)).await.unwrap();
    assert_eq!(c.job.id, parent.id, "the held job of priority 9 is passed over");
    s.complete(c.job.id, &c.fence, Completion::default(), at(3)).await.unwrap();
    let child_now = s.get(child.id).await.unwrap();
    assert_eq!((child_now.pending_parents, child_now.is_held()), (0, true));
    assert!(claim(&s, "w", at(3)).await.is_none());
    s.check_integrity().unwrap();

    // Released, each is due as its time says.
    for id in [child.id, plain.id, later.id] {
        assert!(!s.release_hold(id, "ana@laptop", at(4)).await.unwrap().is_held());
    }
    let unchanged = s.release_hold(plain.id, "ana@laptop", at(4)).await.unwrap();
    assert!(!unchanged.is_held());
    assert_eq!(claim(&s, "w", at(4)).await.unwrap().job.id, plain.id);
    assert_eq!(claim(&s, "w", at(4)).await.unwrap().job.id, child.id);
    assert!(claim(&s, "w", at(4)).await.is_none(), "#later is not due yet");
    assert_eq!(s.stats(at(4)).await.unwrap().next_due, Some(at(50)));

    // A running job cannot be held; a held job can be cancelled.
    let err = s.hold(plain.id, ana(), at(5)).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err:?}");
    s.hold(later.id, ana(), at(5)).await.unwrap();
    let cancelled = s.cancel(later.id, at(6)).await.unwrap();
    assert_eq!((cancelled.state, cancelled.held.as_ref()), (JobState::Cancelled, None));
    assert_eq!(s.stats(at(6)).await.unwrap().held, 0);
    s.check_integrity().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_note_is_written_only_under_its_fence() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.redb"));
    s.push(job("default", 0), T).await.unwrap();
    let c = claim(&s, "w", at(1)).await.unwrap();
    let note = slothqueue_core::AttemptNote::Suspended { reading: "load 3.20 >= 1.50".into() };
    let job = s.note_attempt(c.job.id, &c.fence, &note, at(2)).await.unwrap();
    assert_eq!(job.state, JobState::Running);
    let other = slothqueue_core::Fence { owner: "x".into(), attempt: c.fence.attempt };
    let err = s.note_attempt(c.job.id, &other, &note, at(2)).await.unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost { .. }), "{err:?}");
    let kinds: Vec<_> = s.events(c.job.id).await.unwrap().iter().map(|e| e.kind).collect();
    use slothqueue_core::EventKind as E;
    assert_eq!(kinds, [E::Pushed, E::Claimed, E::Suspended]);
    s.check_integrity().unwrap();
}

/// A lane row that does not decode, is filed under a key that is no
/// queue's name, or gives every queue a limit, is damage: every claim, lane read and change says so and
/// nothing is claimed. A row of defaults is no setting.
#[tokio::test(flavor = "multi_thread")]
async fn a_lane_row_that_does_not_decode_is_damage() {
    const LANES: redb::TableDefinition<'static, &str, &[u8]> = redb::TableDefinition::new("lanes");
    let rows: [(&str, &[u8]); 3] = [
        ("default", b"{\"limit\": \"two\"}"),
        ("../x", b"{\"limit\": 2}"),
        ("", b"{\"limit\": 2}"),
    ];
    for (key, row) in rows {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.redb");
        let s = open(&path);
        s.push(job("default", 0), T).await.unwrap();
        drop(s);
        {
            let db = redb::Database::open(&path).unwrap();
            let txn = db.begin_write().unwrap();
            let mut lanes = txn.open_table(LANES).unwrap();
            lanes.insert(key, row).unwrap();
            lanes.insert("web", b"{}".as_slice()).unwrap();
            drop(lanes);
            txn.commit().unwrap();
        }
        let s = open(&path);
        let is_corrupt = |e: StoreError| matches!(e, StoreError::Corrupt { .. });
        assert!(is_corrupt(s.lanes().await.unwrap_err()), "{key}");
        assert!(is_corrupt(s.claim(&request("w"), at(1)).await.unwrap_err()), "{key}");
        let change = s.change_lane(&q("default"), &LaneChange::Resume).await.unwrap_err();
        assert!(is_corrupt(change), "{key}");
        assert!(is_corrupt(s.check_integrity().unwrap_err()), "{key}");
        assert_eq!(s.get(1).await.unwrap().state, JobState::Pending, "nothing was claimed");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    open(&path).push(job("web", 0), T).await.unwrap();
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(LANES).unwrap().insert("web", b"{}".as_slice()).unwrap();
        txn.commit().unwrap();
    }
    let s = open(&path);
    assert!(s.lanes().await.unwrap().is_default());
    assert!(claim(&s, "w", at(1)).await.is_some());
    s.check_integrity().unwrap();
}

/// One step of the model run.
#[derive(Clone, Debug)]
enum Op {
    Claim { at_s: u64, filter: usize },
    Hold(usize),
    Release(usize),
    Lane(usize, LaneChange),
    Finish(usize),
}

const QUEUES: [&str; 3] = ["a", "a-b", "b"];

fn filters() -> [ClaimFilter; 4] {
    [
        ClaimFilter::default(),
        ClaimFilter { queues: vec!["a".into(), "b".into()], kinds: None },
        ClaimFilter { queues: vec![], kinds: Some(vec!["mail".into()]) },
        ClaimFilter { queues: vec!["a-b".into()], kinds: Some(vec!["shell".into()]) },
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let change = prop_oneof![
        (0u32..3).prop_map(LaneChange::Limit),
        Just(LaneChange::Pause(Stamp::new("p", T))),
        Just(LaneChange::Resume),
    ];
    prop_oneof![
        6 => (0u64..60, 0usize..4).prop_map(|(at_s, filter)| Op::Claim { at_s, filter }),
        2 => (0usize..64).prop_map(Op::Hold),
        2 => (0usize..64).prop_map(Op::Release),
        4 => (0usize..4, change).prop_map(|(lane, c)| Op::Lane(lane, c)),
        2 => (0usize..64).prop_map(Op::Finish),
    ]
}

fn spec() -> impl Strategy<Value = (i32, u64, usize, bool)> {
    (-2i32..3, 0u64..50, 0usize..3, any::<bool>())
}

fn new_job((priority, due_in_s, queue, mail): (i32, u64, usize, bool), n: usize) -> NewJob {
    let (kind, payload) = if mail {
        ("mail", serde_json::json!({ "n": n }))
    } else {
        ("shell", serde_json::json!({ "command": format!("echo {n}"), "cwd": "/tmp", "env": {} }))
    };
    NewJob::new(kind, payload)
        .queue(QUEUES[queue])
        .priority(priority)
        .not_before(T.saturating_add(Duration::from_secs(due_in_s)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every claim takes exactly the job the model says: the best due,
    /// admitted, unheld job whose lane lets it start, with the lanes and
    /// running jobs as they are; holds, pauses and limits change in
    /// between, and the clock steps back as often as forward.
    #[test]
    fn claims_follow_lanes_and_holds(
        specs in prop::collection::vec(spec(), 1..16),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let s = open(&dir.path().join("q.redb"));
            let batch = specs.iter().enumerate().map(|(n, sp)| new_job(*sp, n)).collect();
            let mut model: Vec<Job> =
                s.push_many(batch, T).await.unwrap().into_iter().map(|p| p.job).collect();
            let mut lanes = Lanes::default();
            let mut fences = std::collections::HashMap::new();
            let filters = filters();
            for op in ops {
                match op {
                    Op::Claim { at_s, filter } => {
                        let now = T.saturating_add(Duration::from_secs(at_s));
                        let f = &filters[filter];
                        let check = LaneCheck::new(lanes.clone(), &model);
                        let expected = model
                            .iter()
                            .filter(|j| j.is_due(now) && f.admits(j) && check.may_start(&j.queue))
                            .min_by_key(|j| j.claim_order())
                            .map(|j| j.id);
                        let got = s.claim(&request("w").filter(f.clone()), now).await.unwrap();
                        prop_assert_eq!(got.as_ref().map(|c| c.job.id), expected, "{:?} {:?}", f, lanes);
                        if let Some(c) = got {
                            let m = model.iter_mut().find(|j| j.id == c.job.id).unwrap();
                            *m = c.job.clone();
                            fences.insert(c.job.id, c.fence);
                        }
                    }
                    Op::Hold(i) | Op::Release(i) | Op::Finish(i) => {
                        let m = &mut model[i % specs.len()];
                        let r = match op {
                            Op::Hold(_) => s.hold(m.id, Stamp::new("h", T), T).await,
                            Op::Release(_) => s.release_hold(m.id, "h", T).await,
                            _ => match fences.remove(&m.id) {
                                Some(f) => s.complete(m.id, &f, Completion::default(), T).await,
                                None => continue,
                            },
                        };
                        match r {
                            Ok(job) => *m = job,
                            Err(StoreError::InvalidTransition { .. }) => {
                                prop_assert_ne!(m.state, JobState::Pending);
                            }
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                    Op::Lane(lane, change) => {
                        let scope = if lane == 3 { LaneScope::All } else { q(QUEUES[lane]) };
                        let want = lanes.clone().apply(&scope, &change).map(|_| ());
                        match s.change_lane(&scope, &change).await {
                            Ok(after) => {
                                prop_assert!(want.is_ok());
                                lanes.apply(&scope, &change).unwrap();
                                prop_assert_eq!(&after, &lanes);
                            }
                            Err(StoreError::InvalidInput(_)) => prop_assert!(want.is_err()),
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                }
            }
            s.check_integrity().unwrap();
            let held = model.iter().filter(|j| j.is_held()).count() as u64;
            prop_assert_eq!(s.stats(T).await.unwrap().held, held);
            Ok(())
        })?;
    }
}

/// How long a claim takes with 100,000 due jobs of a paused lane ahead of
/// the one it takes, against the same claim with no lane settings and a
/// filter that names the other queue (what skipping the lane at its first
/// key should cost: the same); and how long `queue_counts` and `stats`
/// read them. A measurement, not a check, so it does nothing unless asked:
/// `SLOTHQUEUE_MEASURE_LANES=1 cargo test -p slothqueue-store-redb --test it lanes::measure -- --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[expect(clippy::disallowed_methods, reason = "timing a measurement")]
#[expect(clippy::print_stderr, reason = "the measurement is the output")]
async fn measure_a_claim_past_a_paused_lane_of_100_000() {
    const N: u32 = 100_000;
    const CLAIMS: u32 = 20;
    if std::env::var_os("SLOTHQUEUE_MEASURE_LANES").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.redb"));
    let batch: Vec<NewJob> = (0..N).map(|n| job("a", n).priority(5)).collect();
    s.push_many(batch, T).await.unwrap();
    s.push_many((0..2 * CLAIMS).map(|n| job("b", n)).collect(), T).await.unwrap();
    let only_b = request("w").filter(ClaimFilter { queues: vec!["b".into()], kinds: None });
    let timed = |request: ClaimRequest| {
        let s = &s;
        async move {
            let start = std::time::Instant::now();
            for _ in 0..CLAIMS {
                let c = s.claim(&request, at(1)).await.unwrap().unwrap();
                assert_eq!(c.job.queue, "b");
            }
            start.elapsed() / CLAIMS
        }
    };
    let baseline = timed(only_b).await;
    s.change_lane(&q("a"), &LaneChange::Pause(ana())).await.unwrap();
    let paused = timed(request("w")).await;
    eprintln!("redb: a claim with no lane settings, filter b: {baseline:?}");
    eprintln!("redb: a claim past a paused lane of {N} due jobs: {paused:?}");
    let start = std::time::Instant::now();
    let counts = s.queue_counts(at(1)).await.unwrap();
    eprintln!("redb: queue_counts of {} queues: {:?}", counts.len(), start.elapsed());
    let start = std::time::Instant::now();
    s.stats(at(1)).await.unwrap();
    eprintln!("redb: stats: {:?}", start.elapsed());
}
