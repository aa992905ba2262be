//! A store that answers `Busy` for a while: the runner waits it out, warns
//! once, and carries on. A server that goes away mid-claim: the claim
//! stands but its answer is lost, and the runner hands the job back (S25).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use slothqueue_core::{EventKind, JobState, StoreError};

use crate::support::{Intercepted, env};

fn busy(counter: &AtomicU32) -> Result<(), StoreError> {
    let left = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    match left {
        Ok(_) => Err(StoreError::Busy { waited: Duration::from_secs(5) }),
        Err(_) => Ok(()),
    }
}

#[tokio::test]
async fn a_busy_queue_file_is_waited_out_not_fatal() {
    let env = env();
    let id = env.add("echo survived", |j| j).await;
    // The first 3 claims and 2 completions answer `Busy`.
    let (claims, completes) = (AtomicU32::new(3), AtomicU32::new(2));
    let mut faulty = Intercepted::new(env.store.clone());
    faulty.before_claim = Box::new(move || busy(&claims));
    faulty.before_complete = Box::new(move || busy(&completes));
    let faulty = Arc::new(faulty);
    let runner = slothqueue_runner::Runner::new(faulty, env.config());
    let (summary, lines) = env.drain(runner).await;
    assert_eq!(summary.done, 1, "{lines:?}");
    let warnings: Vec<&String> = lines.iter().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(warnings.len(), 2, "one warning per streak: {lines:?}");
    assert!(
        warnings[0].starts_with("warning: cannot claim a job: queue file is busy"),
        "{lines:?}"
    );
    assert!(warnings[0].ends_with("; retrying every 50ms"), "{lines:?}");
    assert!(warnings[1].starts_with("warning: cannot record a completed job: queue file is busy"));
    let job = env.job(id).await;
    assert_eq!((job.state, job.result.as_deref()), (JobState::Done, Some("survived")));
}

/// Answers `Unreachable` the first `n` times, after the call went through.
fn lost_answers(n: u32) -> crate::support::Hook {
    let left = AtomicU32::new(n);
    Box::new(move || {
        match left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) {
            Ok(_) => Err(StoreError::Unreachable("db:5432: connection closed".into())),
            Err(_) => Ok(()),
        }
    })
}

/// Two jobs that each append a line to `runs` when they run.
async fn two_counted_jobs(env: &crate::support::Env) -> [slothqueue_core::JobId; 2] {
    let runs = env.path("runs").to_string_lossy().into_owned();
    let a = env.add(&format!("echo a >> '{runs}'"), |j| j).await;
    let b = env.add(&format!("echo b >> '{runs}'"), |j| j).await;
    [a, b]
}

/// S25: a claim that went through on a server that then went away, so
/// the runner never heard of it and claimed again. The job is held under
/// this runner's own (live) lease, which no claim or sweep takes back:
/// without the hand-back it stays running until the runner exits. It is
/// handed back as soon as no attempt runs, and runs once.
#[tokio::test]
async fn a_claim_whose_answer_was_lost_is_handed_back_and_runs_once() {
    let env = env();
    let ids = two_counted_jobs(&env).await;
    let mut faulty = Intercepted::new(env.store.clone());
    faulty.after_claim = lost_answers(1);
    let runner = slothqueue_runner::Runner::new(Arc::new(faulty), env.config());
    let (summary, lines) = env.drain(runner).await;
    assert!(
        lines.iter().any(|l| l.starts_with("warning: cannot claim a job: cannot reach the database server")),
        "{lines:?}"
    );
    for id in ids {
        let job = env.job(id).await;
        assert_eq!(job.state, JobState::Done, "job #{id}: {lines:?}");
    }
    assert_eq!(summary.done, 2, "{lines:?}");
    let runs = std::fs::read_to_string(env.path("runs")).unwrap();
    assert_eq!(runs.lines().count(), 2, "each job ran once: {runs:?}");
    // The job whose claim was not heard of went back without running.
    let released = env.store.events(ids[0]).await.unwrap();
    assert!(released.iter().any(|e| e.kind == EventKind::Released), "{released:?}");
}

/// The same when the lost answer is the second claim's, which (unless
/// the once-a-second sweep falls due in between) is the first job's
/// settlement claiming the next in one transaction: the settlement stands
/// (its retry finds the lease gone), and the job it claimed is handed back
/// and runs once.
#[tokio::test]
async fn a_chained_claim_whose_answer_was_lost_is_handed_back_and_runs_once() {
    let env = env();
    let ids = two_counted_jobs(&env).await;
    let mut faulty = Intercepted::new(env.store.clone());
    let claims = AtomicU32::new(0);
    faulty.after_claim = Box::new(move || match claims.fetch_add(1, Ordering::SeqCst) {
        1 => Err(StoreError::Unreachable("db:5432: connection closed".into())),
        _ => Ok(()),
    });
    let faulty = Arc::new(faulty);
    let runner = slothqueue_runner::Runner::new(faulty.clone(), env.config());
    let (_, lines) = env.drain(runner).await;
    for id in ids {
        let job = env.job(id).await;
        assert_eq!(job.state, JobState::Done, "job #{id}: {lines:?}");
    }
    let runs = std::fs::read_to_string(env.path("runs")).unwrap();
    assert_eq!(runs.lines().count(), 2, "each job ran once: {runs:?}");
    assert!(faulty.settle_and_claims.load(Ordering::SeqCst) >= 1, "{lines:?}");
}

/// An ending that went through on a server that then went away: the
/// retried write finds the lease ended, by this runner's own write. The
/// attempt is reported as it ended (done; failed), not as a lease lost
/// ("killed, not completed"), and each job ran once.
#[tokio::test]
async fn an_ending_whose_answer_was_lost_is_reported_as_it_ended() {
    let env = env();
    let runs = env.path("runs").to_string_lossy().into_owned();
    let done = env.add(&format!("echo a >> '{runs}'"), |j| j).await;
    let failed = env.add(&format!("echo b >> '{runs}'; exit 3"), |j| j.max_attempts(1)).await;
    let mut faulty = Intercepted::new(env.store.clone());
    faulty.after_ending = lost_answers(2);
    let runner = slothqueue_runner::Runner::new(Arc::new(faulty), env.config());
    let (summary, lines) = env.drain(runner).await;
    let retried = "warning: cannot record a completed job: cannot reach the database server";
    assert!(lines.iter().any(|l| l.starts_with(retried)), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains("lost its lease")), "{lines:?}");
    assert_eq!((summary.done, summary.failed, summary.lost), (1, 1, 0), "{lines:?}");
    assert_eq!(env.job(done).await.state, JobState::Done);
    assert_eq!(env.job(failed).await.state, JobState::Failed);
    let runs = std::fs::read_to_string(env.path("runs")).unwrap();
    assert_eq!(runs.lines().count(), 2, "each job ran once: {runs:?}");
}

/// S26: a store that stops answering mid-run (a partition: nothing fails,
/// every call waits) past the fence. The runner stops the job before its
/// lease can run out (no store call can hold that up), says so at once,
/// and once the store answers records the attempt, still its own here,
/// as failed for being cut off, to be retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_whose_store_stops_answering_stops_its_job_before_its_lease_runs_out() {
    use slothqueue_core::{NewJob, Policy, Store};
    use slothqueue_runner::RunnerEvent;
    use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

    let env = env();
    // 3 s: the runner fences 1.5 s after its last renewal, KILL at once.
    let policy = Policy { lease_ttl: Duration::from_secs(3), ..Policy::default() };
    let options = SqliteOptions { policy, ..SqliteOptions::default() };
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&env.path("fence.db"), options).unwrap());
    let pid_file = env.path("pid");
    let command = format!("echo $$ >'{}'; exec sleep 30", pid_file.display());
    let job = NewJob::shell(command, env.dir.path().to_string_lossy());
    let id = store.push(job, env.now()).await.unwrap().job.id;
    let faulty = Arc::new(Intercepted::new(store.clone()));
    let mut running = env.start(slothqueue_runner::Runner::new(faulty.clone(), env.config()));
    let mut pid = 0;
    crate::support::eventually("the job's start", || {
        pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pid > 0
    })
    .await;
    faulty.frozen.send_replace(true);
    // Read past the frozen face: the lease as the runner last renewed it.
    let until = store.get(id).await.unwrap().lease.unwrap().until;
    running
        .events
        .wait_for("the fence", |e| matches!(e, RunnerEvent::Fenced { job, .. } if *job == id))
        .await;
    crate::support::eventually("the job's end", || !crate::support::alive(pid)).await;
    let gone = env.now();
    assert!(
        gone < until,
        "the job must be gone before its lease ends: {} ms late",
        gone.as_millis() - until.as_millis()
    );
    faulty.frozen.send_replace(false);
    let failed = running
        .events
        .wait_for(
            "the attempt's record",
            |e| matches!(e, RunnerEvent::Failed { job, .. } if *job == id),
        )
        .await;
    assert!(failed.to_string().contains("cut off from the queue"), "{failed}");
    let job = store.get(id).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Pending, 1), "retried as any failure is");
    assert!(job.last_error.as_deref().is_some_and(|e| e.contains("cut off from the queue")));
    running.finish().await.unwrap();
}
