//! Jobs as Rust types: define a job as a serde type implementing [`Job`],
//! push it through a [`Queue`], run it with a [`Worker`].
//!
//! It is a layer over the rest of the crate, not a second queue: a typed
//! job is an ordinary job whose kind is [`Job::KIND`] and whose payload is
//! the value's JSON, so the CLI (`list`, `show`, `cancel`, `retry`), the
//! HTTP API and every runner rule (leases, retries with backoff, max
//! runtime, lanes, `after`) apply to it unchanged, and a job pushed as JSON
//! by another program (`POST /api/tasks/enqueue` with that kind) runs in
//! the same handler.
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use slothqueue::typed::{Job, JobContext, JobError, Queue, Worker};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Resize {
//!     path: std::path::PathBuf,
//!     width: u32,
//! }
//!
//! impl Job for Resize {
//!     const KIND: &'static str = "resize";
//!     type Output = String;
//!
//!     async fn run(self, ctx: JobContext) -> Result<String, JobError> {
//!         let bytes = std::fs::metadata(&self.path)?.len(); // any error converts
//!         Ok(format!("{} ({bytes} bytes) at {} px, attempt {}", self.path.display(), self.width, ctx.attempt()))
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let queue = Queue::open("queue.db")?;
//! let fetch = queue.push(Resize { path: "a.png".into(), width: 640 }).key("a-640").await?;
//! let thumb = queue.push(Resize { path: "a.png".into(), width: 64 }).after(fetch.id).await?;
//! Worker::new(&queue).handle::<Resize>().run_until_idle().await?;
//! println!("{:?}", queue.output::<Resize>(thumb.id).await?);
//! # Ok(()) }
//! ```
//!
//! How an attempt ends: `Ok(output)` completes the job with the output as
//! its result; `Err(JobError)` fails the attempt with the error's message,
//! retried after a backoff until the job's attempts are used up, or not at
//! all when the handler says the error is permanent
//! ([`JobError::permanent`]); a panic is a failure naming the kind; a
//! payload that no longer decodes as the type fails the job at once, not
//! retried, with serde's message (it stays readable in `slothqueue show`);
//! a stop the runner asks for (shutdown, cancel, max runtime) reaches the
//! handler through [`JobContext::stopped`].
//! Delivery is at least once, as for every job: an attempt whose program
//! died runs again.

mod data;
mod job;
mod push;
mod queue;
mod worker;

pub use job::{Job, JobContext, JobError};
pub use push::{Enqueued, Push};
pub use queue::Queue;
pub use slothqueue_runner::{
    Mode, RunSummary, RunnerConfig, RunnerEvent, StopReason, WaitEnd, WaitOutcome, Waited,
};
pub use worker::Worker;

use slothqueue_core::{JobId, StoreError};
use slothqueue_runner::RunnerError;

use crate::OpenError;

/// Why a typed queue operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The queue file could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The store refused (a bad key, a parent that does not exist, a busy
    /// or damaged file, no such job, …).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run could not go on (see [`RunnerError`]).
    #[error(transparent)]
    Runner(#[from] RunnerError),
    /// A job's value could not be encoded as JSON.
    #[error("cannot encode a `{kind}` job as JSON: {source}")]
    Encode {
        /// The job's kind.
        kind: &'static str,
        /// serde's message.
        #[source]
        source: serde_json::Error,
    },
    /// A done job's stored result does not decode as the type's output.
    #[error("cannot read the result of job #{id} as a `{kind}` output: {source}")]
    Output {
        /// The job.
        id: JobId,
        /// The kind it was read as.
        kind: &'static str,
        /// serde's message.
        #[source]
        source: serde_json::Error,
    },
    /// A job was read as a type of another kind.
    #[error("job #{id} is a `{kind}` job, not `{expected}`")]
    WrongKind {
        /// The job.
        id: JobId,
        /// Its kind.
        kind: String,
        /// The kind of the type it was read as.
        expected: &'static str,
    },
    /// A worker's registrations are not usable (a kind twice, `shell`, not
    /// a plain name); nothing was run.
    #[error("{0}")]
    Kind(String),
}

#[cfg(test)]
mod tests;
