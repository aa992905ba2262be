//! Which runners are alive and which pending jobs none of them can run:
//! the store's runner records judged here, the rule in
//! `slothqueue_core::serving`; and what a look of the read model
//! (`slothqueue_view`) needs from this server: its clock, the runner's
//! judge, this host's name.

use slothqueue_core::serving::{self, Coverage, UNSERVED_SCAN, Unserved};
use slothqueue_core::{
    Job, JobState, ListFilter, ListOrder, Liveness, Owner, RunnerRecord, Store, Timestamp,
};
use slothqueue_runner::ProcJudge;
use slothqueue_view::{Look, ViewError};

use crate::{AppState, HttpError};

/// The judge of a look: the runner's, which reads `/proc` on this host
/// (a few small files a runner; a look judges a handful).
pub(crate) fn judge() -> impl Fn(&Owner) -> Liveness + Sync {
    let judge = ProcJudge::new();
    move |owner| judge.judge_owner(owner)
}

/// This host's name, as runners record it in their owner.
pub(crate) fn this_host() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// A look at the server's queue now.
pub(crate) fn look<'a>(
    app: &'a AppState,
    judge: &'a (dyn Fn(&Owner) -> Liveness + Sync),
    this_host: &'a str,
) -> Look<'a> {
    Look { store: app.store.as_ref(), now: app.api.clock.now(), judge, this_host }
}

/// A look's failure as the store's refusal it is.
pub(crate) fn view_error(e: ViewError) -> HttpError {
    HttpError::from(e.into_store())
}

/// The runner records of the queue file whose runners are alive now.
pub(crate) async fn live_runners(
    store: &dyn Store,
    now: Timestamp,
) -> Result<Vec<RunnerRecord>, HttpError> {
    let records = store.runners().await?;
    // The judge reads /proc: off the async workers.
    tokio::task::spawn_blocking(move || {
        let judge = ProcJudge::new();
        records
            .into_iter()
            .filter(|r| serving::is_live(r, judge.judge_owner(&r.owner), now))
            .collect()
    })
    .await
    .map_err(|_| HttpError::Internal)
}

/// Why no runner takes this pending job, when that is so: `no handler for
/// kind download`. `None` for a job in another state, one held or waiting
/// on parents (the job's `held` and `pending_parents` say so), and one a
/// live runner can run.
pub(crate) fn waiting(job: &Job, live: &[RunnerRecord]) -> Option<String> {
    if job.state != JobState::Pending || job.held.is_some() || job.is_waiting_on_parents() {
        return None;
    }
    match serving::coverage(&job.queue, &job.kind, live) {
        Coverage::Served => None,
        other => Some(other.to_string()),
    }
}

/// The pending jobs (the first [`UNSERVED_SCAN`] in claim order) that no
/// live runner can run, by queue and kind.
pub(crate) async fn unserved(
    store: &dyn Store,
    live: &[RunnerRecord],
) -> Result<Vec<Unserved>, HttpError> {
    let filter = ListFilter {
        state: Some(JobState::Pending),
        order: ListOrder::DueFirst,
        limit: Some(UNSERVED_SCAN),
        ..ListFilter::default()
    };
    let jobs = store.list(&filter).await?;
    let live: Vec<&RunnerRecord> = live.iter().collect();
    Ok(serving::unserved(&jobs, &live))
}
