//! Lanes and holds as SQLite stores them (the behaviour every store shares
//! is in the conformance scenarios): a lane's limit and pause are read by
//! every claim inside its transaction, so they hold across handles and
//! processes on one file and survive a reopen; a held job is in no claim or
//! due index and is counted once however it waits; every per-queue count
//! agrees with the table; a damaged lane row is refused as damage.

#![expect(clippy::unwrap_used, reason = "helpers of tests: a failure is a panic")]

use std::path::Path;
use std::sync::Arc;

use rusqlite::Connection;
use slothqueue_core::{
    AttemptNote, ClaimFilter, ClaimRequest, ClockOnly, Completion, EventKind, Job, JobState,
    LaneChange, LaneScope, NewJob, Owner, QueueCounts, Settlement, Stamp, Store, StoreError,
    Timestamp,
};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

fn t(secs: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + secs * 1000)
}

fn request(owner: &str) -> ClaimRequest {
    ClaimRequest::new(Owner::named(owner), Arc::new(ClockOnly))
}

fn only(queue: &str) -> ClaimFilter {
    ClaimFilter { queues: vec![queue.into()], kinds: None }
}

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default()).unwrap()
}

fn q(name: &str) -> LaneScope {
    LaneScope::Queue(name.into())
}

fn ana(at: Timestamp) -> Stamp {
    Stamp::new("ana@laptop", at)
}

async fn push(s: &SqliteStore, queue: &str, priority: i32) -> Job {
    s.push(NewJob::shell("true", "/").queue(queue).priority(priority), t(0)).await.unwrap().job
}

/// Claims what `owner` may take now, if anything: the job's id and queue.
async fn claim(s: &SqliteStore, owner: &str, now: Timestamp) -> Option<(i64, String)> {
    let c = s.claim(&request(owner), now).await.unwrap()?;
    Some((c.job.id, c.job.queue))
}

/// A limit of 2 on `disk` holds across two handles on one file (two
/// runners): their claims take two disk jobs between them, higher in
/// priority than anything else, then only other lanes' jobs, then nothing;
/// a completion frees a slot, and lifting the limit opens the lane.
#[tokio::test]
async fn a_limit_holds_across_two_handles_on_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let (a, b) = (open(&path), open(&path));
    for _ in 0..4 {
        push(&a, "disk", 9).await;
    }
    push(&a, "web", 0).await;
    a.change_lane(&q("disk"), &LaneChange::Limit(2)).await.unwrap();

    let first = a.claim(&request("ra"), t(1)).await.unwrap().unwrap();
    assert_eq!(claim(&b, "rb", t(1)).await, Some((2, "disk".into())));
    assert_eq!(claim(&a, "ra", t(1)).await, Some((5, "web".into())), "disk is full");
    assert_eq!(claim(&b, "rb", t(1)).await, None);
    assert_eq!(b.stats(t(1)).await.unwrap().due_now, 2, "a full lane's jobs are still due");

    a.complete(first.job.id, &first.fence, Completion::default(), t(2)).await.unwrap();
    assert_eq!(claim(&b, "rb", t(2)).await, Some((3, "disk".into())));
    assert_eq!(claim(&a, "ra", t(2)).await, None);
    let lanes = b.change_lane(&q("disk"), &LaneChange::Limit(0)).await.unwrap();
    assert!(lanes.is_default(), "{lanes:?}");
    assert_eq!(claim(&a, "ra", t(3)).await, Some((4, "disk".into())));
}

/// settle_and_claim reads the running jobs after its settle: the settled
/// job's slot is free for the chained claim, in the same transaction.
#[tokio::test]
async fn settle_and_claim_takes_the_slot_it_frees() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.db"));
    push(&s, "disk", 0).await;
    push(&s, "disk", 0).await;
    s.change_lane(&q("disk"), &LaneChange::Limit(1)).await.unwrap();
    let c = s.claim(&request("r"), t(1)).await.unwrap().unwrap();
    assert!(s.claim(&request("other"), t(1)).await.unwrap().is_none());
    let out = s
        .settle_and_claim(
            c.job.id,
            &c.fence,
            Settlement::Complete(Completion::default()),
            &request("r"),
            t(2),
        )
        .await
        .unwrap();
    assert_eq!(out.settled.state, JobState::Done);
    assert_eq!(out.next.map(|n| n.job.id), Some(2));
}

/// A paused lane starts nothing, whatever its jobs' priority and however a
/// claim names it, while its running job goes on; the pause of every queue
/// stops every lane and its resume leaves a lane paused on its own paused.
/// Pauses are in the file: a reopened store sees them.
#[tokio::test]
async fn a_pause_stops_starts_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let s = open(&path);
    let running = push(&s, "backups", 9).await;
    let c = s.claim(&request("r"), t(1)).await.unwrap().unwrap();
    assert_eq!(c.job.id, running.id);
    push(&s, "backups", 9).await;
    push(&s, "web", 0).await;
    let lanes = s.change_lane(&q("backups"), &LaneChange::Pause(ana(t(2)))).await.unwrap();
    assert_eq!(lanes.pause_of("backups"), Some(&ana(t(2))));
    drop(s);

    let s = open(&path);
    assert_eq!(s.lanes().await.unwrap(), lanes, "the pause is in the file");
    let by_name = s.claim(&request("r2").filter(only("backups")), t(3)).await.unwrap();
    assert!(by_name.is_none(), "{by_name:?}");
    s.heartbeat(c.job.id, &c.fence, None, t(3)).await.unwrap();
    assert_eq!(claim(&s, "r2", t(3)).await, Some((3, "web".into())));
    s.complete(c.job.id, &c.fence, Completion::default(), t(4)).await.unwrap();
    assert_eq!(s.stats(t(4)).await.unwrap().due_now, 1, "a paused lane's job is still due");

    s.change_lane(&LaneScope::All, &LaneChange::Pause(ana(t(5)))).await.unwrap();
    push(&s, "web", 0).await;
    assert_eq!(claim(&s, "r2", t(5)).await, None, "every queue is paused");
    s.change_lane(&LaneScope::All, &LaneChange::Resume).await.unwrap();
    assert_eq!(claim(&s, "r2", t(6)).await, Some((4, "web".into())));
    assert_eq!(claim(&s, "r2", t(6)).await, None, "backups is still paused on its own");
    s.change_lane(&q("backups"), &LaneChange::Resume).await.unwrap();
    assert_eq!(claim(&s, "r2", t(7)).await, Some((2, "backups".into())));
    assert!(s.lanes().await.unwrap().is_default());
    let rows: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM lanes", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0, "default settings are deleted, not stored");
}

/// With some lane closed a claim of every queue walks the queues, not the
/// one all-queue index: the best job of the open lanes still wins, in claim
/// order across them (priority, then time, then id).
#[tokio::test]
async fn with_a_lane_closed_the_best_of_the_open_lanes_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.db"));
    for (queue, priority) in [("a", 1), ("closed", 9), ("b", 5), ("c", 5), ("a", 7), ("b", 7)] {
        push(&s, queue, priority).await;
    }
    s.change_lane(&q("closed"), &LaneChange::Pause(ana(t(0)))).await.unwrap();
    s.change_lane(&q("idle"), &LaneChange::Limit(1)).await.unwrap();
    let mut order = Vec::new();
    while let Some((id, _)) = claim(&s, "r", t(1)).await {
        order.push(id);
    }
    assert_eq!(order, [5, 6, 3, 4, 1]);
}

/// change_lane refuses a limit for every queue at once and a bad queue
/// name, and writes nothing then.
#[tokio::test]
async fn a_refused_lane_change_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.db"));
    s.change_lane(&q("disk"), &LaneChange::Limit(3)).await.unwrap();
    let before = s.lanes().await.unwrap();
    for (scope, change) in
        [(LaneScope::All, LaneChange::Limit(2)), (q("../x"), LaneChange::Limit(2))]
    {
        let err = s.change_lane(&scope, &change).await.unwrap_err();
        assert!(matches!(err, StoreError::InvalidInput(_)), "{err:?}");
    }
    assert_eq!(s.lanes().await.unwrap(), before);
}

/// A lane row another tool garbled is damage: the claim that reads it and
/// `lanes` refuse it as corrupt, and nothing is claimed; so is a job row
/// with half a hold.
#[tokio::test]
async fn a_damaged_lane_row_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let s = open(&path);
    push(&s, "disk", 0).await;
    for (scope, settings) in
        [("disk", "not json"), ("", r#"{"limit":2}"#), ("../x", r#"{"limit":2}"#)]
    {
        let raw = Connection::open(&path).unwrap();
        raw.execute("DELETE FROM lanes", []).unwrap();
        raw.execute("INSERT INTO lanes (scope, settings) VALUES (?1, ?2)", [scope, settings])
            .unwrap();
        let err = s.claim(&request("r"), t(1)).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{scope}: {err:?}");
        assert!(matches!(s.lanes().await.unwrap_err(), StoreError::Corrupt { .. }), "{scope}");
    }
    assert_eq!(s.get(1).await.unwrap().state, JobState::Pending);
    // Half a hold, written past the table's CHECK, is damage too.
    let raw = Connection::open(&path).unwrap();
    raw.execute_batch("PRAGMA ignore_check_constraints = ON; UPDATE jobs SET held = 1").unwrap();
    assert!(matches!(s.get(1).await.unwrap_err(), StoreError::Corrupt { .. }));
}

/// A held job is in no claim or due index: a claim passes it by, `stats`
/// and `next_due` leave it out of what is due, and it is counted once in
/// `pending` and `held` (in `waiting_on_parents` too while it also waits).
/// Its parent's completion leaves it held; releasing it makes it due.
/// Holding twice writes one event; holding a running job is refused.
#[tokio::test]
async fn a_held_job_stays_out_of_claims_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.db"));
    let parent = push(&s, "default", 0).await;
    let child =
        s.push(NewJob::shell("after", "/").priority(5).after(parent.id), t(0)).await.unwrap().job;
    let later = s.push(NewJob::shell("later", "/").not_before(t(60)), t(0)).await.unwrap().job;
    for id in [child.id, later.id] {
        let held = s.hold(id, ana(t(1)), t(1)).await.unwrap();
        assert_eq!(held.held, Some(ana(t(1))));
    }
    assert_eq!(s.hold(child.id, Stamp::new("bo", t(2)), t(2)).await.unwrap().held, Some(ana(t(1))));
    let kinds: Vec<_> = s.events(child.id).await.unwrap().iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Pushed, EventKind::Held], "the second hold changed nothing");

    let stats = s.stats(t(2)).await.unwrap();
    assert_eq!(
        (stats.pending, stats.held, stats.waiting_on_parents, stats.due_now, stats.next_due),
        (3, 2, 1, 1, None),
        "{stats:?}"
    );
    assert_eq!(s.next_due().await.unwrap(), Some(t(0)), "the parent, not the held one");

    let c = s.claim(&request("r"), t(2)).await.unwrap().unwrap();
    assert_eq!(c.job.id, parent.id);
    let err = s.hold(parent.id, ana(t(2)), t(2)).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { .. }), "{err:?}");
    assert!(matches!(s.hold(99, ana(t(2)), t(2)).await, Err(StoreError::NotFound(99))));

    let out = s
        .settle_and_claim(
            c.job.id,
            &c.fence,
            Settlement::Complete(Completion::default()),
            &request("r"),
            t(100),
        )
        .await
        .unwrap();
    assert!(out.next.is_none(), "both left are held: {:?}", out.next);
    let child_now = s.get(child.id).await.unwrap();
    assert_eq!((child_now.pending_parents, child_now.is_held()), (0, true));
    let stats = s.stats(t(100)).await.unwrap();
    assert_eq!((stats.pending, stats.held, stats.waiting_on_parents, stats.due_now), (2, 2, 0, 0));

    let released = s.release_hold(child.id, "ana@laptop", t(101)).await.unwrap();
    assert!(released.held.is_none() && released.is_due(t(101)));
    let same = s.release_hold(child.id, "ana@laptop", t(102)).await.unwrap();
    assert_eq!(same, released, "releasing a job not held leaves it");
    assert_eq!(s.events(child.id).await.unwrap().len(), 3);
    assert_eq!(s.next_due().await.unwrap(), Some(t(0)), "the released child's time");
    assert_eq!(claim(&s, "r", t(103)).await, Some((child.id, "default".into())));
    assert_eq!(claim(&s, "r", t(103)).await, None, "#3 is still held");
    let cancelled = s.cancel(later.id, t(104)).await.unwrap();
    assert_eq!((cancelled.state, cancelled.held), (JobState::Cancelled, None));
    assert_eq!(s.stats(t(104)).await.unwrap().held, 0);
}

/// `queue_counts` per queue, against the table counted by hand, for a mix
/// of due, scheduled, waiting, held (waiting or not) and running jobs.
#[tokio::test]
async fn queue_counts_agree_with_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let s = open(&path);
    let mut ids = Vec::new();
    for i in 0..60i64 {
        let queue = ["a", "b", "c"][(i % 3) as usize];
        let mut new = NewJob::shell("true", "/").queue(queue).not_before(t(i % 4 * 10));
        if i % 5 == 0 && i > 0 {
            new = new.after(ids[(i / 2) as usize]);
        }
        ids.push(s.push(new, t(0)).await.unwrap().job.id);
    }
    for id in ids.iter().step_by(7) {
        s.hold(*id, ana(t(1)), t(1)).await.unwrap();
    }
    for _ in 0..5 {
        s.claim(&request("r"), t(15)).await.unwrap().unwrap();
    }
    let now = t(15);
    let raw = Connection::open(&path).unwrap();
    let n = |queue: &str, cond: &str| -> u64 {
        let sql = format!("SELECT COUNT(*) FROM jobs NOT INDEXED WHERE queue = ?1 AND ({cond})");
        raw.query_row(&sql, rusqlite::params![queue, now.as_millis()], |r| r.get::<_, i64>(0))
            .unwrap()
            .try_into()
            .unwrap()
    };
    let want: Vec<QueueCounts> = ["a", "b", "c"]
        .iter()
        .map(|queue| QueueCounts {
            queue: (*queue).into(),
            pending: n(queue, "state = 'pending' AND ?2 = ?2"),
            due: n(
                queue,
                "state = 'pending' AND pending_parents = 0 AND held = 0 AND not_before <= ?2",
            ),
            held: n(queue, "state = 'pending' AND held = 1 AND ?2 = ?2"),
            waiting_on_parents: n(queue, "state = 'pending' AND pending_parents > 0 AND ?2 = ?2"),
            running: n(queue, "state = 'running' AND ?2 = ?2"),
        })
        .collect();
    assert!(want.iter().all(|c| c.held > 0 && c.running > 0 && c.due > 0), "{want:?}");
    assert_eq!(s.queue_counts(now).await.unwrap(), want);
    let stats = s.stats(now).await.unwrap();
    assert_eq!(stats.pending, want.iter().map(|c| c.pending).sum::<u64>());
    assert_eq!(stats.held, want.iter().map(|c| c.held).sum::<u64>());
    assert_eq!(stats.due_now, want.iter().map(|c| c.due).sum::<u64>());
    s.change_lane(&q("idle"), &LaneChange::Limit(2)).await.unwrap();
    let report = s.queues(now).await.unwrap();
    let names: Vec<_> = report.queues.iter().map(|q| q.counts.queue.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "idle"]);
}

/// A restored job keeps its hold (an import), out of the claim indexes
/// from the start.
#[tokio::test]
async fn a_restored_hold_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let from = open(&dir.path().join("from.db"));
    let job = push(&from, "default", 0).await;
    let held = from.hold(job.id, ana(t(1)), t(1)).await.unwrap();
    let events = from.events(job.id).await.unwrap();
    let to = open(&dir.path().join("to.db"));
    to.restore(held.clone(), events).await.unwrap();
    assert_eq!(to.get(job.id).await.unwrap(), held);
    assert_eq!(to.stats(t(2)).await.unwrap().held, 1);
    assert!(to.claim(&request("r"), t(2)).await.unwrap().is_none());
}

/// An attempt note is one event under the attempt's fence, nothing else;
/// anyone else's fence is refused and writes nothing.
#[tokio::test]
async fn an_attempt_note_needs_the_fence() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.db"));
    push(&s, "default", 0).await;
    let c = s.claim(&request("r"), t(1)).await.unwrap().unwrap();
    let note = AttemptNote::Suspended { reading: "load 3.20 >= ceiling 1.50".into() };
    let job = s.note_attempt(c.job.id, &c.fence, &note, t(2)).await.unwrap();
    assert_eq!(job, c.job, "the job is as it was");
    let mut other = c.fence.clone();
    other.attempt += 1;
    let err = s.note_attempt(c.job.id, &other, &note, t(3)).await.unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost { .. }), "{err:?}");
    let resumed = AttemptNote::Resumed { after: std::time::Duration::from_secs(7) };
    s.note_attempt(c.job.id, &c.fence, &resumed, t(9)).await.unwrap();
    let trail = s.events(c.job.id).await.unwrap();
    let kinds: Vec<_> = trail.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EventKind::Pushed, EventKind::Claimed, EventKind::Suspended, EventKind::Resumed]
    );
    assert_eq!(trail[2].owner.as_deref(), Some("r"));
}

/// How long a claim (and the release that puts the job back) takes on a
/// queue of 20,000 due jobs in lane `bulk` and one in `web`: with no lane
/// settings, with a limit that closes nothing, and with `bulk` paused (the
/// claim then walks the queues, skipping `bulk` in its index). A
/// measurement, not a check, so it does nothing unless asked:
/// `SLOTHQUEUE_MEASURE_CLAIM=1 cargo test -p slothqueue-store-sqlite --release --test it measure -- --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[expect(clippy::disallowed_methods, reason = "timing a measurement")]
#[expect(clippy::print_stderr, reason = "the measurement is the output")]
async fn measure_claim_with_and_without_lanes() {
    const N: usize = 20_000;
    const ROUNDS: u32 = 2_000;
    if std::env::var_os("SLOTHQUEUE_MEASURE_CLAIM").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        synchronous: slothqueue_store_sqlite::Synchronous::Normal,
        ..SqliteOptions::default()
    };
    let s = SqliteStore::open(&dir.path().join("q.db"), options).unwrap();
    let bulk = (0..N).map(|_| NewJob::shell("true", "/").queue("bulk").priority(5)).collect();
    s.push_many(bulk, t(0)).await.unwrap();
    push(&s, "web", 0).await;
    let cases: [(&str, &[(&str, LaneChange)]); 3] = [
        ("no lane settings", &[("web", LaneChange::Limit(0)), ("bulk", LaneChange::Resume)]),
        ("a limit, nothing closed", &[("web", LaneChange::Limit(5))]),
        ("bulk paused", &[("bulk", LaneChange::Pause(ana(t(0))))]),
    ];
    // Twice over, so that what the file has been through (its WAL, its
    // free pages) weighs on every case alike.
    for (name, changes) in cases.iter().chain(&cases) {
        for (queue, change) in *changes {
            s.change_lane(&q(queue), change).await.unwrap();
        }
        let start = std::time::Instant::now();
        for _ in 0..ROUNDS {
            let c = s.claim(&request("r"), t(1)).await.unwrap().unwrap();
            s.release(c.job.id, &c.fence, t(1)).await.unwrap();
        }
        let each = start.elapsed() / ROUNDS;
        eprintln!("sqlite: claim + release, {name}: {each:?}");
    }
}

/// A held job that its parent's failure cancels is no longer held, as a
/// cancel leaves it: else its export would not import (`check_restore`
/// refuses a hold on a job that is not pending). The core's fix in
/// `machine::after::parent_ended` (ln-conf's commit, cherry-picked).
#[tokio::test]
async fn a_held_job_cancelled_by_its_parent_is_no_longer_held() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("q.db"));
    s.push(NewJob::shell("parent", "/").max_attempts(1), t(0)).await.unwrap();
    let child = s.push(NewJob::shell("child", "/").after(1), t(0)).await.unwrap().job;
    s.hold(child.id, ana(t(1)), t(1)).await.unwrap();
    let c = s.claim(&request("r"), t(2)).await.unwrap().unwrap();
    let failure = slothqueue_core::Failure {
        error: "exit code 1".into(),
        exit_code: Some(1),
        permanent: false,
    };
    s.fail(c.job.id, &c.fence, failure, t(3)).await.unwrap();
    let cancelled = s.get(child.id).await.unwrap();
    assert_eq!((cancelled.state, cancelled.held.clone()), (JobState::Cancelled, None));
    let to = open(&dir.path().join("to.db"));
    to.restore(cancelled, s.events(child.id).await.unwrap()).await.unwrap();
}
