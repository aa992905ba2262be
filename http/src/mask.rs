//! Secrets in the jobs the API answers with: a shell job's environment
//! values that hold a secret (a secret-looking name, a tool's bookkeeping
//! such as `DIRENV_DIFF`, a URL's password inside a value:
//! `slothqueue_core::shell::masked`) read as
//! [`slothqueue_core::shell::MASK`] unless the client asks for them
//! (`?show_secrets=true` on the routes that look). Every route that answers
//! with a job passes it through [`job`] (a schedule's job through
//! [`new_job`]), so no route can forget.
//!
//! Why mask at all when the client holds the token: answers end up in
//! logs, dashboards and terminals; a token in a job's environment should
//! appear only where someone asked for it.

use slothqueue_core::{Job, NewJob, Pushed};

use crate::HttpError;

/// Whether secret-looking values are shown as stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Secrets {
    /// As the mask: the default of every route.
    #[default]
    Masked,
    /// As stored: `?show_secrets=true`.
    Shown,
}

impl Secrets {
    /// The `show_secrets` query parameter: absent or `false` masks, `true`
    /// shows; anything else is a 400.
    pub(crate) fn from_query(raw: Option<&str>) -> Result<Secrets, HttpError> {
        match raw {
            None | Some("false") => Ok(Secrets::Masked),
            Some("true") => Ok(Secrets::Shown),
            Some(_) => Err(HttpError::BadRequest("show_secrets must be true or false".to_owned())),
        }
    }
}

/// The job as the API shows it (shell jobs only have secrets to mask:
/// `core::shell::masked_payload`).
pub(crate) fn job(mut job: Job, secrets: Secrets) -> Job {
    if secrets == Secrets::Masked {
        job.payload = slothqueue_core::shell::masked_payload(&job);
    }
    job
}

/// A job not pushed yet (the job a schedule's ticks enqueue) as the API
/// shows it, by the rule a queued job is masked by
/// (`core::shell::masked_payload_of`).
pub(crate) fn new_job(mut job: NewJob, secrets: Secrets) -> NewJob {
    if secrets == Secrets::Masked {
        job.payload = slothqueue_core::shell::masked_payload_of(&job.kind, &job.payload);
    }
    job
}

/// A push's answer with its job masked.
pub(crate) fn pushed(mut pushed: Pushed) -> Pushed {
    pushed.job = job(pushed.job, Secrets::Masked);
    pushed
}
