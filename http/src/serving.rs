//! What a look of the read model (`slothqueue_view`) needs from this
//! server: its clock, the runner's judge, this host's name; and the job
//! answer's `waiting`, from the runners the look judged (the rule in
//! `slothqueue_core::serving`).

use slothqueue_core::serving::{self, Coverage};
use slothqueue_core::{Job, JobState, Liveness, Owner, RunnerRecord};
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
