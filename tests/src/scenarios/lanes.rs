//! Lanes and holds: a queue's concurrency limit and pause, stored in the
//! file so every claimer on it sees them ([`Store::change_lane`],
//! [`Store::lanes`]), and a user's hold on one pending job
//! ([`Store::hold`], [`Store::release_hold`]); with them the counts per
//! queue ([`Store::queue_counts`]) and the notes a runner writes on an
//! attempt it suspends ([`Store::note_attempt`]).
//!
//! The rules are `slothqueue_core`'s ([`slothqueue_core::Lanes::apply`],
//! [`slothqueue_core::LaneCheck`], [`slothqueue_core::machine::hold`]);
//! these scenarios check that a store reads the lanes and the running jobs
//! inside every claim (`claim` and `settle_and_claim`), keeps held jobs out
//! of its claim and due indexes, and writes all of it durably.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use slothqueue_core::{
    AttemptNote, ClaimFilter, Completion, EventKind, Failure, Fence, JobId, JobState, LaneChange,
    LaneScope, Lanes, ListFilter, ListOrder, NewJob, QueueCounts, Settlement, Stamp, Stats, Store,
    StoreError, Timestamp,
};

use crate::{Harness, assert_trail_consistent, event_kinds, job, secs, shell, snapshot};

fn q(name: &str) -> LaneScope {
    LaneScope::Queue(name.to_owned())
}

/// A shell job in `queue`.
fn on(queue: &str, command: &str) -> NewJob {
    shell(command).queue(queue)
}

fn stamp(by: &str, at: Timestamp) -> Stamp {
    Stamp::new(by, at)
}

/// Changes a lane, insisting the store accepts it and that what it returns
/// is what it then reads back.
async fn change(s: &dyn Store, scope: &LaneScope, change: LaneChange) -> Lanes {
    let lanes = s
        .change_lane(scope, &change)
        .await
        .unwrap_or_else(|e| panic!("change_lane({scope}, {change:?}): {e}"));
    assert_eq!(s.lanes().await.expect("lanes"), lanes, "change_lane returns the lanes after");
    lanes
}

/// Every job claimable at `now`, claimed by `owner_id` one after the other
/// (and left running).
async fn claim_all(h: &Harness, s: &dyn Store, owner_id: &str, now: Timestamp) -> Vec<JobId> {
    let mut ids = Vec::new();
    while let Some(c) = h.claim(s, owner_id, now).await {
        ids.push(c.job.id);
    }
    ids
}

fn only(queues: &[&str]) -> ClaimFilter {
    ClaimFilter { queues: queues.iter().map(|&q| q.to_owned()).collect(), kinds: None }
}

async fn counts_of(s: &dyn Store, queue: &str, now: Timestamp) -> QueueCounts {
    s.queue_counts(now)
        .await
        .expect("queue_counts")
        .into_iter()
        .find(|c| c.queue == queue)
        .unwrap_or_else(|| panic!("queue {queue} is listed by queue_counts"))
}

fn is_invalid_transition<T: std::fmt::Debug>(
    out: &Result<T, StoreError>,
    id: JobId,
    state: JobState,
) -> bool {
    matches!(out, Err(StoreError::InvalidTransition { id: i, state: st, .. }) if *i == id && *st == state)
}

/// A lane with a limit of 2 runs at most 2 of its jobs at once: the first
/// two claims take its jobs, the third claim skips its third due job
/// (though it comes first in claim order) and takes another queue's job,
/// and then nothing is left to take. `due_now` still counts the waiting
/// job (it is due; its lane holds it) and `queues` reports the lane full.
/// When one of the two ends, the next claim takes the waiting job, and the
/// lane is full again.
pub async fn a_limit_closes_its_lane_at_the_boundary(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let lanes = change(&*s, &q("disk"), LaneChange::Limit(2)).await;
    assert_eq!(lanes.of("disk").limit, 2);
    assert_eq!(lanes.all_paused, None);
    let mut disk = Vec::new();
    for i in 0..3 {
        disk.push(h.push(&*s, on("disk", &format!("echo disk {i}")).priority(5), t).await.id);
    }
    let web = h.push(&*s, on("web", "echo web"), t).await.id;

    let first = h.claim_expect(&*s, "w1", t, disk[0]).await;
    h.claim_expect(&*s, "w2", t, disk[1]).await; // one running: still open
    h.claim_expect(&*s, "w3", t, web).await; // two running: full, web goes first
    assert_eq!(h.claim(&*s, "w4", t).await, None, "the lane is at its limit");
    assert_eq!(h.claim_filtered(&*s, "w4", &only(&["disk"]), t).await, None);
    let stats = s.stats(t).await.expect("stats");
    assert_eq!((stats.pending, stats.running, stats.due_now), (1, 3, 1), "due, held by its lane");
    let report = s.queues(t).await.expect("queues");
    let info = report.get("disk").expect("disk is listed");
    assert_eq!((info.limit, info.counts.running, info.counts.due), (2, 2, 1));

    let now = h.at(secs(5));
    s.complete(disk[0], &first.fence, Completion::default(), now).await.expect("complete");
    h.claim_expect(&*s, "w4", now, disk[2]).await;
    assert_eq!(h.claim(&*s, "w5", now).await, None);
}

/// A limit holds across claimers and handles: with a limit of 1, a job of
/// the lane running for one owner (claimed through one handle) keeps every
/// other owner, on any handle and with any filter, from starting another
/// (a claimer of another kind too: every running job counts, not only
/// those its filter admits); a change made through the second handle is
/// seen by the next claim through the first.
pub async fn a_limit_holds_across_claimers_and_handles(h: &Harness) {
    let a = h.store();
    let b = h.open_second();
    let t = h.start();
    change(&*b, &q("disk"), LaneChange::Limit(1)).await;
    assert_eq!(a.lanes().await.expect("lanes").of("disk").limit, 1, "one file, one setting");
    let d1 = h.push(&*a, on("disk", "echo 1"), t).await;
    let d2 = h.push(&*a, on("disk", "echo 2"), t).await;
    h.claim_expect(&*a, "w1", t, d1.id).await;
    assert_eq!(h.claim(&*b, "w2", t).await, None, "another owner on another handle");
    assert_eq!(h.claim(&*a, "w3", t).await, None, "another owner on the same handle");
    assert_eq!(h.claim_filtered(&*b, "w2", &only(&["disk"]), t).await, None);
    assert_eq!(h.claim(&*a, "w1", t).await, None, "the same owner too");
    let rsync = NewJob::new("rsync", serde_json::json!({"from": "/srv"})).queue("disk");
    let d3 = h.push(&*a, rsync, t).await;
    let rsync_only = ClaimFilter { queues: vec![], kinds: Some(vec!["rsync".to_owned()]) };
    assert_eq!(h.claim_filtered(&*b, "w4", &rsync_only, t).await, None, "a shell job runs");

    change(&*b, &q("disk"), LaneChange::Limit(2)).await;
    h.claim_expect(&*a, "w3", t, d2.id).await;
    let running = ListFilter { state: Some(JobState::Running), ..ListFilter::default() };
    assert_eq!(b.list(&running).await.expect("list").len(), 2);
    assert_eq!(h.claim_filtered(&*b, "w4", &rsync_only, t).await, None, "full at 2");
    change(&*a, &q("disk"), LaneChange::Limit(3)).await;
    let got = h.claim_filtered(&*b, "w4", &rsync_only, t).await.map(|c| c.job.id);
    assert_eq!(got, Some(d3.id));
}

/// A limit holds under a race: 8 handles on one file claim and complete at
/// once over 60 jobs of a lane limited to 2 and 40 of an unlimited one,
/// each yielding while it holds a job; no racer ever sees more than 2 of
/// the lane's jobs running (by its own count, which never exceeds the
/// store's, and by `list`), every job is handed out once, and all end done.
pub async fn a_limit_holds_under_a_claim_race_across_handles(h: &Harness) {
    const HANDLES: usize = 8;
    let s = h.store();
    let t = h.start();
    change(&*s, &q("disk"), LaneChange::Limit(2)).await;
    let batch = (0..100)
        .map(|i| if i % 5 < 3 { on("disk", &format!("echo {i}")) } else { shell("echo web") })
        .collect();
    let pushed = s.push_many(batch, t).await.expect("push_many");
    let in_disk = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for w in 0..HANDLES {
        let store: Arc<dyn Store> = if w == 0 { s.clone() } else { h.open_second() };
        let request = h.request(&format!("racer-{w}"));
        let (in_disk, most) = (in_disk.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            let running = ListFilter {
                state: Some(JobState::Running),
                queue: Some("disk".to_owned()),
                ..ListFilter::default()
            };
            let mut idle = 0u32;
            loop {
                let Some(c) = store.claim(&request, t).await.expect("claim") else {
                    if store.stats(t).await.expect("stats").pending == 0 {
                        break;
                    }
                    // Only a full lane's jobs are left: another racer's
                    // job ends soon. A store that never hands them out
                    // fails here rather than spinning forever.
                    idle += 1;
                    assert!(idle < 20_000, "pending jobs never claimed");
                    tokio::task::yield_now().await;
                    continue;
                };
                idle = 0;
                let disk = c.job.queue == "disk";
                if disk {
                    let now_in = in_disk.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now_in, Ordering::SeqCst);
                    let listed = store.list(&running).await.expect("list").len();
                    assert!(listed <= 2, "{listed} disk jobs running under a limit of 2");
                }
                tokio::task::yield_now().await;
                if disk {
                    in_disk.fetch_sub(1, Ordering::SeqCst);
                }
                let done = store.complete(c.job.id, &c.fence, Completion::default(), t);
                done.await.expect("complete");
                mine.push(c.job.id);
            }
            mine
        }));
    }
    let mut seen = Vec::new();
    for task in tasks {
        seen.extend(task.await.expect("a racer panicked"));
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} disk jobs ran at once under a limit of 2");
    seen.sort_unstable();
    let all: Vec<JobId> = pushed.iter().map(|p| p.job.id).collect();
    assert_eq!(seen, all, "every job handed out exactly once");
    assert_eq!(s.stats(t).await.expect("stats").done, 100);
}

/// A limit of 0 lifts the limit: the lane's settings go back to the
/// defaults (not kept: `lanes` is empty again) and the next claim takes the
/// job the limit held back.
pub async fn a_limit_of_zero_lifts_it(h: &Harness) {
    let s = h.store();
    let t = h.start();
    change(&*s, &q("disk"), LaneChange::Limit(1)).await;
    let d1 = h.push(&*s, on("disk", "echo 1"), t).await;
    let d2 = h.push(&*s, on("disk", "echo 2"), t).await;
    h.claim_expect(&*s, "w1", t, d1.id).await;
    assert_eq!(h.claim(&*s, "w2", t).await, None);

    let lanes = change(&*s, &q("disk"), LaneChange::Limit(0)).await;
    assert_eq!(lanes, Lanes::default(), "default settings are not kept");
    assert_eq!(s.queues(t).await.expect("queues").get("disk").map(|i| i.limit), Some(0));
    h.claim_expect(&*s, "w2", t, d2.id).await;
}

/// A running job counts against its lane until it stops running, expired
/// or not: with a limit of 1 and the lane's one job's lease expired, a
/// claim takes that job back (`reclaimed_from` its old owner) rather than
/// start the lane's other due job, though that one has a higher priority;
/// after that nothing of the lane starts. A paused lane takes nothing back:
/// an expired job with attempts left stays running under its old owner
/// until the lane is resumed. Retiring is not starting: an expired job of
/// a paused lane with no attempts left still ends (`failed`, `expired`).
pub async fn an_expired_job_of_a_full_lane_is_taken_back_but_no_new_one_starts(h: &Harness) {
    let s = h.store();
    let t = h.start();
    change(&*s, &q("disk"), LaneChange::Limit(1)).await;
    let d1 = h.push(&*s, on("disk", "echo 1").max_attempts(2), t).await;
    h.claim_expect(&*s, "gone", t, d1.id).await;
    let d2 = h.push(&*s, on("disk", "echo 2").priority(9), t).await;

    let expired = h.at(secs(61));
    let back = h.claim_expect(&*s, "w2", expired, d1.id).await;
    assert_eq!(back.reclaimed_from, Some(h.owner("gone")));
    assert_eq!(back.job.attempts, 2);
    assert_eq!(h.claim(&*s, "w3", expired).await, None, "the lane is full with #1 again");
    assert_eq!(job(&*s, d2.id).await.state, JobState::Pending);

    // A paused lane: nothing is taken back, but an attempt out of tries ends.
    change(&*s, &q("disk"), LaneChange::Pause(stamp("ana", expired))).await;
    let tape = h.push(&*s, on("tape", "echo tape"), expired).await;
    h.claim_expect(&*s, "gone", expired, tape.id).await;
    change(&*s, &q("tape"), LaneChange::Pause(stamp("ana", expired))).await;
    let later = h.at(secs(300)); // both leases expired
    assert_eq!(h.claim(&*s, "w3", later).await, None, "paused lanes start nothing, not even again");
    let d1_now = job(&*s, d1.id).await;
    assert_eq!(d1_now.state, JobState::Failed, "an expired job out of attempts is retired");
    assert_eq!(event_kinds(&*s, d1.id).await.last(), Some(&EventKind::Expired));
    let tape_now = job(&*s, tape.id).await;
    assert_eq!(tape_now.state, JobState::Running, "not taken back while its lane is paused");
    assert_eq!(tape_now.lease.map(|l| l.owner.id), Some("gone".to_owned()));
    assert_eq!(job(&*s, d2.id).await.state, JobState::Pending);

    change(&*s, &q("tape"), LaneChange::Resume).await;
    let again = h.claim_expect(&*s, "w3", later, tape.id).await;
    assert_eq!(again.reclaimed_from, Some(h.owner("gone")));
}

/// `settle_and_claim` reads the running jobs after its settle: with a
/// limit of 1, the owner of the lane's running job settling it gets the
/// lane's next job in the same call (the settled job's place is free),
/// while another owner settling a job of another lane gets a job of its
/// own lane, not one of the full lane's.
pub async fn settle_and_claim_honours_a_limit(h: &Harness) {
    let s = h.store();
    let t = h.start();
    change(&*s, &q("disk"), LaneChange::Limit(1)).await;
    let d1 = h.push(&*s, on("disk", "echo d1").priority(5), t).await;
    let d2 = h.push(&*s, on("disk", "echo d2").priority(5), t).await;
    let o1 = h.push(&*s, shell("echo o1"), t).await;
    let o2 = h.push(&*s, shell("echo o2"), t).await;
    let held_d = h.claim_expect(&*s, "a", t, d1.id).await;
    let held_o = h.claim_expect(&*s, "b", t, o1.id).await;

    let now = h.at(secs(1));
    let done = || Settlement::Complete(Completion::default());
    let got = s
        .settle_and_claim(o1.id, &held_o.fence, done(), &h.request("b"), now)
        .await
        .expect("settle o1");
    assert_eq!(got.settled.state, JobState::Done);
    assert_eq!(got.next.map(|c| c.job.id), Some(o2.id), "disk is full: o2, not d2");

    let got = s
        .settle_and_claim(d1.id, &held_d.fence, done(), &h.request("a"), now)
        .await
        .expect("settle d1");
    assert_eq!(got.settled.state, JobState::Done);
    let next = got.next.expect("d1's place is free for d2");
    assert_eq!(next.job.id, d2.id);
    assert_eq!(next.job, job(&*s, d2.id).await);

    let failed =
        Settlement::Fail(Failure { error: "boom".into(), exit_code: Some(1), permanent: false });
    let got = s
        .settle_and_claim(d2.id, &next.fence, failed, &h.request("a"), h.at(secs(2)))
        .await
        .expect("settle d2");
    assert_eq!(got.settled.state, JobState::Pending, "retried later");
    assert_eq!(got.next, None, "nothing else is due");
}

/// A paused lane starts nothing, whatever the claimer's filter, while the
/// other lanes go on; its due job still counts in `due_now` and in
/// `next_due` (it is due; its lane holds it), and `queues` shows who paused
/// it since when. A second pause keeps the first stamp.
pub async fn a_paused_lane_starts_nothing_while_others_go_on(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let b1 = h.push(&*s, on("backups", "echo b1").priority(9), t).await;
    h.push(&*s, on("backups", "echo b2").priority(9).not_before(h.at(secs(10))), t).await;
    let other = h.push(&*s, shell("echo other"), t).await;

    let ana = stamp("ana@laptop", t);
    let lanes = change(&*s, &q("backups"), LaneChange::Pause(ana.clone())).await;
    assert_eq!(lanes.pause_of("backups"), Some(&ana));
    assert_eq!(lanes.pause_of("default"), None);
    let lanes = change(&*s, &q("backups"), LaneChange::Pause(stamp("bo", h.at(secs(1))))).await;
    assert_eq!(lanes.of("backups").paused, Some(ana.clone()), "the first pause's stamp stays");

    assert_eq!(claim_all(h, &*s, "w1", t).await, [other.id]);
    assert_eq!(h.claim_filtered(&*s, "w2", &only(&["backups"]), h.at(secs(20))).await, None);
    assert_eq!(h.claim(&*s, "w2", h.at(secs(20))).await, None);
    assert_eq!(job(&*s, b1.id).await.state, JobState::Pending);

    let stats = s.stats(t).await.expect("stats");
    assert_eq!((stats.pending, stats.due_now, stats.next_due), (2, 1, Some(h.at(secs(10)))));
    assert_eq!(s.next_due().await.expect("next_due"), Some(t), "b1 is due; its lane holds it");
    let report = s.queues(h.at(secs(10))).await.expect("queues");
    assert_eq!(report.all_paused, None);
    let info = report.get("backups").expect("backups is listed");
    assert_eq!((info.counts.pending, info.counts.due), (2, 2));
    assert_eq!(info.paused, Some(ana));
}

/// A pause of every queue (`LaneScope::All`) starts nothing at all, also
/// for a claimer of one queue; it is its own setting: resuming every queue
/// leaves a lane paused on its own paused, and resuming that lane lets its
/// job start.
pub async fn a_pause_of_every_queue_starts_nothing(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let a = h.push(&*s, shell("echo a"), t).await;
    let d = h.push(&*s, on("disk", "echo d").priority(3), t).await;
    change(&*s, &q("disk"), LaneChange::Pause(stamp("ana", t))).await;
    let bo = stamp("bo", h.at(secs(1)));
    let lanes = change(&*s, &LaneScope::All, LaneChange::Pause(bo.clone())).await;
    assert_eq!(lanes.all_paused, Some(bo.clone()));
    assert_eq!(lanes.get(&LaneScope::All).paused, Some(bo.clone()));

    let now = h.at(secs(2));
    assert_eq!(h.claim(&*s, "w1", now).await, None, "every queue is paused");
    assert_eq!(h.claim_filtered(&*s, "w1", &only(&["default"]), now).await, None);
    let report = s.queues(now).await.expect("queues");
    assert_eq!(report.all_paused, Some(bo));
    assert_eq!(s.stats(now).await.expect("stats").due_now, 2, "both are due; the pause holds them");

    let lanes = change(&*s, &LaneScope::All, LaneChange::Resume).await;
    assert_eq!(lanes.all_paused, None);
    assert!(lanes.pause_of("disk").is_some(), "disk's own pause stays");
    assert_eq!(claim_all(h, &*s, "w1", now).await, [a.id]);
    change(&*s, &q("disk"), LaneChange::Resume).await;
    assert_eq!(claim_all(h, &*s, "w1", now).await, [d.id]);
}

/// `resume` lifts a lane's pause (its settings, back to the defaults, are
/// no longer kept) and the next claims take its jobs in claim order, ahead
/// of other lanes' lower-priority jobs; resuming a lane that is not paused
/// changes nothing.
pub async fn resume_lets_a_paused_lane_start_again(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let b1 = h.push(&*s, on("backups", "echo b1").priority(2), t).await;
    let b2 = h.push(&*s, on("backups", "echo b2").priority(7), t).await;
    let o = h.push(&*s, shell("echo o"), t).await;
    change(&*s, &q("backups"), LaneChange::Pause(stamp("ana", t))).await;
    assert_eq!(h.claim(&*s, "w1", t).await.map(|c| c.job.id), Some(o.id));

    let lanes = change(&*s, &q("backups"), LaneChange::Resume).await;
    assert_eq!(lanes, Lanes::default());
    assert_eq!(change(&*s, &q("backups"), LaneChange::Resume).await, Lanes::default());
    assert_eq!(change(&*s, &q("never-paused"), LaneChange::Resume).await, Lanes::default());
    assert_eq!(claim_all(h, &*s, "w1", t).await, [b2.id, b1.id]);
}

/// A pause stops new starts, not what runs: the paused lane's running
/// jobs heartbeat, note a suspend, complete (also through
/// `settle_and_claim`, whose claim then takes nothing of the paused lane)
/// and fail as before; a job that goes back to pending (a failure with
/// attempts left, a release) is not started again while the lane is
/// paused, and is once it is resumed.
pub async fn running_jobs_of_a_paused_lane_go_on(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j1 = h.push(&*s, on("backups", "echo 1"), t).await;
    let j2 = h.push(&*s, on("backups", "echo 2"), t).await;
    let j3 = h.push(&*s, on("backups", "echo 3"), t).await;
    let c1 = h.claim_expect(&*s, "w1", t, j1.id).await;
    let c2 = h.claim_expect(&*s, "w2", t, j2.id).await;
    let c3 = h.claim_expect(&*s, "w3", t, j3.id).await;
    let j4 = h.push(&*s, on("backups", "echo 4").priority(1), t).await;
    change(&*s, &q("backups"), LaneChange::Pause(stamp("ana", t))).await;
    let counts = counts_of(&*s, "backups", t).await;
    assert_eq!((counts.running, counts.pending, counts.due), (3, 1, 1));

    let ack = s.heartbeat(j1.id, &c1.fence, None, h.at(secs(30))).await.expect("heartbeat");
    assert_eq!(ack.lease_until, h.at(secs(90)));
    let note = AttemptNote::Suspended { reading: "load 3.20 >= ceiling 1.50".into() };
    s.note_attempt(j1.id, &c1.fence, &note, h.at(secs(31))).await.expect("note_attempt");
    let done = Settlement::Complete(Completion::default());
    let next = h.request("w1");
    let got = s.settle_and_claim(j1.id, &c1.fence, done, &next, h.at(secs(32)));
    let got = got.await.expect("settle_and_claim");
    assert_eq!(got.settled.state, JobState::Done);
    assert_eq!(got.next, None, "j4 is due, but its lane is paused");

    let failure = Failure { error: "boom".into(), exit_code: Some(1), permanent: false };
    let retried = s.fail(j2.id, &c2.fence, failure, h.at(secs(33))).await.expect("fail");
    assert_eq!(retried.state, JobState::Pending);
    let released = s.release(j3.id, &c3.fence, h.at(secs(34))).await.expect("release");
    assert_eq!(released.state, JobState::Pending);
    let later = h.at(secs(100)); // past j2's backoff
    assert_eq!(h.claim(&*s, "w1", later).await, None, "the lane is still paused");
    let counts = counts_of(&*s, "backups", later).await;
    assert_eq!((counts.pending, counts.due, counts.running), (3, 3, 0));

    change(&*s, &q("backups"), LaneChange::Resume).await;
    let mut got = claim_all(h, &*s, "w1", later).await;
    got.sort_unstable();
    assert_eq!(got, [j2.id, j3.id, j4.id]);
}

/// Lane settings and holds live in the file: closing and reopening it keeps
/// every limit and pause (with its stamp) and every hold, a second handle
/// reads the same, and claims after the reopen honour them.
pub async fn lanes_and_holds_survive_a_reopen(h: &Harness) {
    let s = h.store();
    let t = h.start();
    change(&*s, &q("disk"), LaneChange::Limit(2)).await;
    change(&*s, &q("backups"), LaneChange::Pause(stamp("ana", t))).await;
    change(&*s, &LaneScope::All, LaneChange::Pause(stamp("bo", h.at(secs(1))))).await;
    let b = h.push(&*s, on("backups", "echo b"), t).await;
    let mut disk = Vec::new();
    for i in 0..3 {
        disk.push(h.push(&*s, on("disk", &format!("echo {i}")), t).await.id);
    }
    let kept = h.push(&*s, shell("echo kept").priority(9), t).await;
    s.hold(kept.id, stamp("cy", t), t).await.expect("hold");
    let before = s.lanes().await.expect("lanes");
    let held = job(&*s, kept.id).await;

    let s = h.reopen(s);
    assert_eq!(s.lanes().await.expect("lanes after reopen"), before);
    assert_eq!(job(&*s, kept.id).await, held);
    assert_eq!(h.open_second().lanes().await.expect("lanes on a second handle"), before);
    assert_eq!(h.claim(&*s, "w1", t).await, None, "every queue is still paused");

    change(&*s, &LaneScope::All, LaneChange::Resume).await;
    let s = h.reopen(s);
    assert_eq!(claim_all(h, &*s, "w1", t).await, [disk[0], disk[1]], "limit 2; backups paused");
    assert_eq!(job(&*s, b.id).await.state, JobState::Pending);
    assert_eq!(job(&*s, kept.id).await.held, Some(stamp("cy", t)));
}

/// `change_lane` refuses, with `InvalidInput` and nothing written, a limit
/// for every queue at once (a limit is one lane's) and a queue name a push
/// would refuse, the empty name among them (it would be the key of every
/// queue's settings).
pub async fn change_lane_refuses_a_limit_for_every_queue_and_a_bad_name(h: &Harness) {
    let s = h.store();
    let t = h.start();
    change(&*s, &q("disk"), LaneChange::Limit(3)).await;
    let before = s.lanes().await.expect("lanes");
    let pause = || LaneChange::Pause(stamp("ana", t));
    let refused = [
        (LaneScope::All, LaneChange::Limit(2)),
        (LaneScope::All, LaneChange::Limit(0)),
        (q("../x"), LaneChange::Limit(2)),
        (q(""), pause()),
        (q(""), LaneChange::Limit(1)),
        (q("a b"), LaneChange::Resume),
        (q(".hidden"), pause()),
        (q("disk/../x"), pause()),
    ];
    for (scope, change) in &refused {
        let out = s.change_lane(scope, change).await;
        assert!(
            matches!(out, Err(StoreError::InvalidInput(_))),
            "change_lane({scope:?}, {change:?}) must be InvalidInput, got {out:?}"
        );
        assert_eq!(s.lanes().await.expect("lanes"), before, "nothing written for {scope:?}");
    }
    let s = h.reopen(s);
    assert_eq!(s.lanes().await.expect("lanes"), before);
    let j = h.push(&*s, shell("echo still open"), t).await;
    h.claim_expect(&*s, "w1", t, j.id).await;
}

/// A held job stays pending but no claim takes it: `hold` returns it with
/// the stamp (also as `get` reads it) and appends one `held` event naming
/// who; the next claim takes a lower-priority job instead, then nothing.
/// Holding it again changes nothing (the first stamp stays, no event).
pub async fn a_held_job_is_not_claimed(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let a = h.push(&*s, shell("echo a").priority(5), t).await;
    let b = h.push(&*s, shell("echo b"), t).await;
    let at = h.at(secs(1));
    let held = s.hold(a.id, stamp("ana", at), at).await.expect("hold");
    assert_eq!((held.state, held.held.clone()), (JobState::Pending, Some(stamp("ana", at))));
    assert_eq!(job(&*s, a.id).await, held);
    let events = s.events(a.id).await.expect("events");
    assert_eq!(
        events.iter().map(|e| e.kind).collect::<Vec<_>>(),
        [EventKind::Pushed, EventKind::Held]
    );
    assert_eq!((events[1].at, events[1].message.as_deref()), (at, Some("held by ana")));

    assert_eq!(claim_all(h, &*s, "w1", h.at(secs(2))).await, [b.id]);
    let before = snapshot(&*s, a.id).await;
    let again = s.hold(a.id, stamp("bo", h.at(secs(3))), h.at(secs(3))).await.expect("hold again");
    assert_eq!(again, held, "a held job is left as it is");
    assert_eq!(snapshot(&*s, a.id).await, before);
    let pending = ListFilter { state: Some(JobState::Pending), ..ListFilter::default() };
    let listed = s.list(&pending).await.expect("list");
    assert_eq!(listed, [held], "a held job is listed as pending, with its hold");
}

/// `hold` and `release_hold` of a job that is not pending (running, done,
/// failed, cancelled) are refused with `InvalidTransition` naming its
/// state, and change nothing; an unknown id is `NotFound`.
pub async fn hold_and_release_of_a_job_not_pending_are_refused(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let r = h.push(&*s, shell("echo r").priority(4), t).await.id;
    let d = h.push(&*s, shell("echo d").priority(3), t).await.id;
    let f = h.push(&*s, shell("echo f").priority(2).max_attempts(1), t).await.id;
    let c = h.push(&*s, shell("echo c"), t).await.id;
    h.claim_expect(&*s, "w1", t, r).await;
    let dc = h.claim_expect(&*s, "w1", t, d).await;
    s.complete(d, &dc.fence, Completion::default(), t).await.expect("complete");
    let fc = h.claim_expect(&*s, "w1", t, f).await;
    s.fail(f, &fc.fence, Failure::default(), t).await.expect("fail");
    s.cancel(c, t).await.expect("cancel");

    let now = h.at(secs(1));
    for (id, state) in [
        (r, JobState::Running),
        (d, JobState::Done),
        (f, JobState::Failed),
        (c, JobState::Cancelled),
    ] {
        let before = snapshot(&*s, id).await;
        let out = s.hold(id, stamp("ana", now), now).await;
        assert!(is_invalid_transition(&out, id, state), "hold of a {state} job: {out:?}");
        let out = s.release_hold(id, "ana", now).await;
        assert!(is_invalid_transition(&out, id, state), "release of a {state} job: {out:?}");
        assert_eq!(snapshot(&*s, id).await, before, "#{id} unchanged");
    }
    let missing = c + 100;
    assert!(
        matches!(s.hold(missing, stamp("ana", now), now).await, Err(StoreError::NotFound(i)) if i == missing)
    );
    assert!(
        matches!(s.release_hold(missing, "ana", now).await, Err(StoreError::NotFound(i)) if i == missing)
    );
}

/// `release_hold` makes a held job pending as before: the hold gone, one
/// `hold_released` event naming who, and the job claimable at its own time
/// (a delayed job is not due early). Releasing a job that is not held
/// changes nothing.
pub async fn release_makes_a_held_job_claimable(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let later = h.push(&*s, shell("echo later").not_before(h.at(secs(10))), t).await;
    let now_job = h.push(&*s, shell("echo now"), t).await;
    for id in [later.id, now_job.id] {
        s.hold(id, stamp("ana", t), t).await.expect("hold");
    }
    assert_eq!(h.claim(&*s, "w1", h.at(secs(20))).await, None);

    let at = h.at(secs(1));
    let released = s.release_hold(now_job.id, "bo", at).await.expect("release");
    assert_eq!((released.state, released.held.clone()), (JobState::Pending, None));
    assert_eq!(job(&*s, now_job.id).await, released);
    let events = s.events(now_job.id).await.expect("events");
    let last = events.last().expect("a trail");
    assert_eq!(
        (last.kind, last.at, last.message.as_deref()),
        (EventKind::HoldReleased, at, Some("released by bo"))
    );
    h.claim_expect(&*s, "w1", at, now_job.id).await;

    s.release_hold(later.id, "bo", h.at(secs(2))).await.expect("release");
    assert_eq!(h.claim(&*s, "w1", h.at(secs(2))).await, None, "not due before its time");
    assert_eq!(s.next_due().await.expect("next_due"), Some(h.at(secs(10))));
    h.claim_expect(&*s, "w1", h.at(secs(10)), later.id).await;

    let plain = h.push(&*s, shell("echo plain"), t).await;
    let before = snapshot(&*s, plain.id).await;
    assert_eq!(s.release_hold(plain.id, "bo", at).await.expect("release"), plain);
    assert_eq!(snapshot(&*s, plain.id).await, before, "no event for a job not held");
}

/// A held job waiting on its parent counts as held and as waiting; when
/// the parent is done it no longer waits but stays held (not claimable, not
/// due, not in `next_due`) until released, and is then claimed.
pub async fn a_held_job_waiting_on_parents_stays_held_after_they_finish(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let parent = h.push(&*s, shell("echo parent"), t).await;
    let child = h.push(&*s, shell("echo child").after(parent.id), t).await;
    s.hold(child.id, stamp("ana", t), t).await.expect("hold a waiting job");
    let stats = s.stats(t).await.expect("stats");
    assert_eq!((stats.pending, stats.waiting_on_parents, stats.held, stats.due_now), (2, 1, 1, 1));
    let counts = counts_of(&*s, "default", t).await;
    assert_eq!((counts.pending, counts.waiting_on_parents, counts.held, counts.due), (2, 1, 1, 1));

    let c = h.claim_expect(&*s, "w1", t, parent.id).await;
    let now = h.at(secs(1));
    s.complete(parent.id, &c.fence, Completion::default(), now).await.expect("complete");
    let j = job(&*s, child.id).await;
    assert_eq!((j.state, j.pending_parents, j.held), (JobState::Pending, 0, Some(stamp("ana", t))));
    assert_eq!(h.claim(&*s, "w1", now).await, None, "still held");
    let stats = s.stats(now).await.expect("stats");
    assert_eq!(
        stats,
        Stats { pending: 1, held: 1, done: 1, due_now: 0, next_due: None, ..Stats::default() }
    );
    assert_eq!(s.next_due().await.expect("next_due"), None, "a held job wakes nobody");

    s.release_hold(child.id, "ana", now).await.expect("release");
    h.claim_expect(&*s, "w1", now, child.id).await;
}

/// Cancelling a held job ends it and clears the hold (a cancelled job is
/// not held); so do a supersede by a newer push of its key and a parent's
/// failure, which cancels the held child (and a retry of that parent brings
/// the child back, not held). None of them counts as held any more.
pub async fn cancel_of_a_held_job_ends_it_and_clears_the_hold(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let a = h.push(&*s, shell("echo a"), t).await;
    s.hold(a.id, stamp("ana", t), t).await.expect("hold");
    let cancelled = s.cancel(a.id, h.at(secs(1))).await.expect("cancel a held job");
    assert_eq!((cancelled.state, cancelled.held.clone()), (JobState::Cancelled, None));
    assert_eq!(job(&*s, a.id).await, cancelled);
    assert_eq!(
        event_kinds(&*s, a.id).await,
        [EventKind::Pushed, EventKind::Held, EventKind::Cancelled]
    );

    let old = h.push_keyed(&*s, "echo v1", "k", t).await;
    s.hold(old.id, stamp("ana", t), t).await.expect("hold");
    let pushed = s.push(shell("echo v2").key("k"), h.at(secs(2))).await.expect("push v2");
    assert_eq!(pushed.superseded, Some(old.id));
    assert_eq!(pushed.job.held, None, "the new job is not held");
    let old_now = job(&*s, old.id).await;
    assert_eq!((old_now.state, old_now.held), (JobState::Cancelled, None));

    let parent = h.push(&*s, shell("echo parent").max_attempts(1).priority(9), t).await;
    let child = h.push(&*s, shell("echo child").after(parent.id), t).await;
    s.hold(child.id, stamp("ana", t), t).await.expect("hold");
    let c = h.claim_expect(&*s, "w1", h.at(secs(3)), parent.id).await;
    let failure = Failure { error: "boom".into(), exit_code: Some(1), permanent: false };
    s.fail(parent.id, &c.fence, failure, h.at(secs(3))).await.expect("fail");
    let child_now = job(&*s, child.id).await;
    assert_eq!(
        (child_now.state, child_now.cancelled_by, child_now.held),
        (JobState::Cancelled, Some(parent.id), None),
        "a cancelled child is not held"
    );
    let stats = s.stats(h.at(secs(3))).await.expect("stats");
    assert_eq!((stats.held, stats.cancelled), (0, 3));

    s.retry(parent.id, h.at(secs(4))).await.expect("retry");
    let child_now = job(&*s, child.id).await;
    assert_eq!((child_now.state, child_now.held), (JobState::Pending, None));
}

/// Held jobs are pending, counted in `pending` and `held`, never in
/// `due_now`, never `Stats::next_due` nor `Store::next_due` (a runner woken
/// for one would find nothing to claim), whatever their time; released,
/// they count again.
pub async fn stats_and_next_due_leave_held_jobs_out(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let a = h.push(&*s, shell("echo a"), t).await;
    let b = h.push(&*s, shell("echo b").not_before(h.at(secs(10))), t).await;
    h.push(&*s, shell("echo c").not_before(h.at(secs(20))), t).await;
    s.hold(a.id, stamp("ana", t), t).await.expect("hold");
    s.hold(b.id, stamp("ana", t), t).await.expect("hold");

    let at =
        |due_now, next_due, held| Stats { pending: 3, held, due_now, next_due, ..Stats::default() };
    assert_eq!(s.stats(t).await.expect("stats"), at(0, Some(h.at(secs(20))), 2));
    assert_eq!(s.stats(h.at(secs(30))).await.expect("stats"), at(1, None, 2));
    assert_eq!(s.next_due().await.expect("next_due"), Some(h.at(secs(20))));

    s.release_hold(b.id, "ana", t).await.expect("release");
    assert_eq!(s.stats(t).await.expect("stats"), at(0, Some(h.at(secs(10))), 1));
    assert_eq!(s.next_due().await.expect("next_due"), Some(h.at(secs(10))));
    s.release_hold(a.id, "ana", t).await.expect("release");
    assert_eq!(s.stats(t).await.expect("stats"), at(1, Some(h.at(secs(10))), 0));
    assert_eq!(s.next_due().await.expect("next_due"), Some(t));
}

/// `queue_counts` lists every queue with a pending or running job, by
/// name, each counted: pending (due or not, held, waiting), of those due
/// as of `now`, held and waiting on parents, and running; a queue with
/// only finished jobs is not listed. `queues` adds the lanes with settings
/// but no jobs, with their settings.
pub async fn queue_counts_count_each_queue(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let alpha = h.push(&*s, on("alpha", "echo alpha").priority(10), t).await;
    h.claim_expect(&*s, "w1", t, alpha.id).await;
    let d1 = h.push(&*s, shell("echo d1").priority(5), t).await;
    h.push(&*s, shell("echo d2").not_before(h.at(secs(100))), t).await;
    let d3 = h.push(&*s, shell("echo d3"), t).await;
    s.hold(d3.id, stamp("ana", t), t).await.expect("hold");
    let d4 = h.push(&*s, shell("echo d4").priority(9), t).await;
    h.claim_expect(&*s, "w1", t, d4.id).await;
    h.push(&*s, on("b-queue", "echo b1").after(d1.id), t).await;
    let b2 = h.push(&*s, on("b-queue", "echo b2").after(d1.id), t).await;
    s.hold(b2.id, stamp("ana", t), t).await.expect("hold");
    let z = h.push(&*s, on("zeta", "echo z").priority(20), t).await;
    let zc = h.claim_expect(&*s, "w1", t, z.id).await;
    s.complete(z.id, &zc.fence, Completion::default(), t).await.expect("complete");
    change(&*s, &q("idle"), LaneChange::Limit(3)).await;

    let counts = |queue: &str, pending, due, held, waiting_on_parents, running| QueueCounts {
        queue: queue.to_owned(),
        pending,
        due,
        held,
        waiting_on_parents,
        running,
    };
    assert_eq!(
        s.queue_counts(t).await.expect("queue_counts"),
        [
            counts("alpha", 0, 0, 0, 0, 1),
            counts("b-queue", 2, 0, 1, 2, 0),
            counts("default", 3, 1, 1, 0, 1),
        ]
    );
    assert_eq!(
        s.queue_counts(h.at(secs(100))).await.expect("queue_counts")[2],
        counts("default", 3, 2, 1, 0, 1)
    );
    let report = s.queues(t).await.expect("queues");
    let names: Vec<&str> = report.queues.iter().map(|i| i.counts.queue.as_str()).collect();
    assert_eq!(names, ["alpha", "b-queue", "default", "idle"]);
    let idle = report.get("idle").expect("idle is listed");
    assert_eq!((idle.limit, idle.counts.pending, idle.counts.running), (3, 0, 0));
}

/// `note_attempt` appends exactly one event (`suspended` or `resumed`, with
/// the owner, the attempt and the reading or the time) under the
/// attempt's fence and changes nothing else; anyone else's fence (another
/// owner, an older attempt, the attempt a reclaim took, a finished job)
/// gets `LeaseLost` and changes nothing.
pub async fn note_attempt_writes_its_event_only_under_the_right_fence(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let j = h.push(&*s, shell("echo j"), t).await;
    let c = h.claim_expect(&*s, "w1", t, j.id).await;

    let suspended = AttemptNote::Suspended { reading: "load 3.20 >= ceiling 1.50".into() };
    let noted = s.note_attempt(j.id, &c.fence, &suspended, h.at(secs(5))).await.expect("note");
    assert_eq!(noted, c.job, "the job itself is unchanged");
    assert_eq!(job(&*s, j.id).await, c.job);
    let resumed = AttemptNote::Resumed { after: Duration::from_secs(7) };
    s.note_attempt(j.id, &c.fence, &resumed, h.at(secs(12))).await.expect("note");
    let events = s.events(j.id).await.expect("events");
    let tail: Vec<_> = events[2..]
        .iter()
        .map(|e| (e.kind, e.at, e.owner.as_deref(), e.attempt, e.message.as_deref()))
        .collect();
    assert_eq!(
        tail,
        [
            (
                EventKind::Suspended,
                h.at(secs(5)),
                Some("w1"),
                Some(1),
                Some("suspended: load 3.20 >= ceiling 1.50")
            ),
            (EventKind::Resumed, h.at(secs(12)), Some("w1"), Some(1), Some("resumed after 7s")),
        ]
    );

    let before = snapshot(&*s, j.id).await;
    let wrong = [
        Fence { owner: "w2".into(), attempt: 1 },
        Fence { owner: "w1".into(), attempt: 0 },
        Fence { owner: "w1".into(), attempt: 2 },
    ];
    for fence in &wrong {
        let out = s.note_attempt(j.id, fence, &suspended, h.at(secs(13))).await;
        assert!(
            matches!(out, Err(StoreError::LeaseLost { id }) if id == j.id),
            "{fence:?}: {out:?}"
        );
        assert_eq!(snapshot(&*s, j.id).await, before);
    }

    let expired = h.at(secs(100));
    let c2 = h.claim_expect(&*s, "w2", expired, j.id).await;
    let out = s.note_attempt(j.id, &c.fence, &suspended, expired).await;
    assert!(matches!(out, Err(StoreError::LeaseLost { .. })), "the reclaimed attempt: {out:?}");
    s.complete(j.id, &c2.fence, Completion::default(), expired).await.expect("complete");
    let before = snapshot(&*s, j.id).await;
    let out = s.note_attempt(j.id, &c2.fence, &resumed, expired).await;
    assert!(matches!(out, Err(StoreError::LeaseLost { .. })), "a finished job: {out:?}");
    assert_eq!(snapshot(&*s, j.id).await, before);
    assert_trail_consistent(&*s, j.id).await;
}

/// An import keeps holds: a held job (waiting on parents or not) restored
/// from an export is held in the new queue, not claimed there, counted as
/// held, and released there like any other; a job that is not pending but
/// says it is held is refused with `InvalidInput`, nothing written.
pub async fn restore_keeps_held_jobs_held(h: &Harness) {
    let src = h.store();
    let t = h.start();
    let a = h.push(&*src, shell("echo a").priority(5), t).await;
    src.hold(a.id, stamp("ana@laptop", h.at(secs(1))), h.at(secs(1))).await.expect("hold");
    let parent = h.push(&*src, shell("echo parent"), t).await;
    let child = h.push(&*src, shell("echo child").after(parent.id), t).await;
    src.hold(child.id, stamp("bo", h.at(secs(2))), h.at(secs(2))).await.expect("hold");
    let done = h.push(&*src, shell("echo done"), t).await;
    // The parent left running: the exported child still waits on it.
    h.claim_expect(&*src, "w1", t, parent.id).await;
    let oldest = ListFilter { order: ListOrder::Oldest, ..ListFilter::default() };
    let jobs = src.list(&oldest).await.expect("list");
    let mut export = Vec::new();
    for j in &jobs {
        export.push((j.clone(), src.events(j.id).await.expect("events")));
    }

    let dst = h.open_other("restored");
    dst.restore_many(export.clone()).await.expect("restore_many");
    for (j, events) in &export {
        assert_eq!(job(&*dst, j.id).await, *j);
        assert_eq!(&dst.events(j.id).await.expect("events"), events);
    }
    assert_eq!(job(&*dst, a.id).await.held, Some(stamp("ana@laptop", h.at(secs(1)))));
    assert_eq!(claim_all(h, &*dst, "w2", h.at(secs(3))).await, [done.id], "a and child are held");
    assert_eq!(dst.stats(h.at(secs(3))).await.expect("stats").held, 2);
    dst.release_hold(a.id, "ana", h.at(secs(4))).await.expect("release in the new queue");
    h.claim_expect(&*dst, "w2", h.at(secs(4)), a.id).await;

    // A held job that is not pending is damage, refused.
    let dc = h.claim_expect(&*src, "w1", t, done.id).await;
    let mut bad =
        src.complete(done.id, &dc.fence, Completion::default(), t).await.expect("complete");
    let events = src.events(done.id).await.expect("events");
    bad.held = Some(stamp("ana", t));
    let other = h.open_other("refused");
    let out = other.restore(bad.clone(), events.clone()).await;
    assert!(matches!(out, Err(StoreError::InvalidInput(_))), "a done job cannot be held: {out:?}");
    assert!(matches!(other.get(bad.id).await, Err(StoreError::NotFound(_))), "nothing written");
    let out = other.restore_many(vec![(bad, events)]).await;
    assert!(matches!(out, Err(StoreError::InBatch { index: 0, .. })), "in a batch too: {out:?}");
    assert_eq!(other.stats(t).await.expect("stats"), Stats::default());
}
