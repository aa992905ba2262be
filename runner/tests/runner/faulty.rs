//! A store that answers `Busy` for a while: the runner waits it out, warns
//! once, and carries on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use slothqueue_core::{JobState, StoreError};

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
