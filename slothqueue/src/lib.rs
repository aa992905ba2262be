//! slothqueue: a durable background-job queue to embed in a program.
//!
//! This crate is the library a program depends on: it re-exports the job
//! model and the [`Store`] trait from [`core`], the storage backends the
//! Cargo features enable, the [`runner`], the HTTP API, [`open()`], which
//! opens a queue without the caller knowing its backend, [`typed`],
//! jobs as Rust types, and [`spec`], the one check that turns what `add`
//! (or an agent's `add_job`) says of a job into a `NewJob`. The `slothqueue` binary (package `slothqueue-cli`)
//! is built on exactly this; depending on this crate builds no part of
//! the command line.
//!
//! # Features
//!
//! All on by default; each backend's crate is re-exported under its
//! feature's name, and a build without one names the feature a queue
//! needs ([`OpenError::FileNeedsFeature`]).
//!
//! | feature | re-export | a queue |
//! |---|---|---|
//! | `sqlite` | `slothqueue::sqlite` | in one SQLite file, the default for a new file |
//! | `redb` | `slothqueue::redb` | in one redb file (a `.redb` name) |
//! | `postgres` | `slothqueue::postgres` | on a PostgreSQL server (a `postgres://` URL), shared by runners on several hosts |
//! | `http` | `slothqueue::http` | served over loopback HTTP, with a drain worker |
//!
//! A file queue is for the runners of one machine; a PostgreSQL queue for
//! runners on many.
//!
//! # Guide: jobs as Rust types
//!
//! A job is a serde type that implements [`typed::Job`]: its fields are
//! the payload, `KIND` names it in the queue, `run` does the work.
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
//!     type Output = String; // stored as the job's result
//!
//!     async fn run(self, ctx: JobContext) -> Result<String, JobError> {
//!         // `?` takes any error; its message becomes the job's error.
//!         let size = std::fs::metadata(&self.path)?.len();
//!         Ok(format!("{} ({size} bytes) resized to {} px", self.path.display(), self.width))
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let queue = Queue::open("queue.db")?;
//! // A push is a builder: `.key()`, `.after()`, `.priority()`, `.queue()`,
//! // `.max_attempts()`, `.max_runtime()`, `.delay()`, then `.await`.
//! let big = queue.push(Resize { path: "cat.png".into(), width: 1024 }).key("cat-1024").await?;
//! let small = queue.push(Resize { path: "cat.png".into(), width: 64 }).after(big.id).await?;
//!
//! // Run what is due, then return (or `.follow(shutdown)`, `.run_once()`).
//! let summary = Worker::new(&queue)
//!     .handle::<Resize>()
//!     .on_event(|event| println!("{event}"))
//!     .run_until_idle()
//!     .await?;
//! println!("{} done; #{} says {:?}", summary.done, small.id, queue.output::<Resize>(small.id).await?);
//! # Ok(()) }
//! ```
//!
//! - **Where it runs.** A [`typed::Worker`] is the crate's
//!   [`Runner`](runner::Runner) with one executor per registered kind, so
//!   every rule of a `slothqueue run` holds: leases and heartbeats, a
//!   retry after a backoff until the job's attempts are used up, max
//!   runtime, cancel, lanes, `after`. Run it in a program until idle, once,
//!   in follow mode until a shutdown future resolves
//!   ([`Worker::follow`](typed::Worker::follow)), or hand its runner to the
//!   HTTP server's drain worker (`http::DrainWorker::from_runner`).
//! - **How an attempt ends.** `Ok(output)` completes the job (the output
//!   is its result: a string as it is, anything else as JSON, read back
//!   with [`Queue::output`](typed::Queue::output)); `Err` fails the
//!   attempt with the error's message, retried while attempts are left,
//!   or not at all when it is [permanent](typed::JobError::permanent)
//!   (another attempt would fail the same way); a panic fails it naming
//!   the kind; a
//!   stop the runner asks for (shutdown, cancel, max runtime) is
//!   [`JobContext::stopped`](typed::JobContext::stopped).
//! - **Old payloads.** A job outlives the build that pushed it. A payload
//!   that no longer decodes fails the job at once, not retried (every
//!   attempt would read the same bytes), with an error naming the kind,
//!   the type and serde's message (`cannot decode the payload of this
//!   `resize` job as app::Resize: missing field `width``);
//!   `#[serde(default)]` on new fields keeps old jobs readable.
//! - **Everything else** is the [`Store`] ([`Queue::store`](typed::Queue::store)):
//!   list, cancel, retry, lanes, schedules. The CLI sees typed jobs like
//!   any other (`slothqueue show 3`), and another program can push one as
//!   JSON (`slothqueue add` takes shell commands; the HTTP enqueue takes
//!   `{"kind": "resize", "payload": {…}}`).
//!
//! This crate's `examples/` has three programs that run as they are:
//! `typed_job.rs` (define, push, run until idle, print the results),
//! `embedded_runner.rs` (a follow-mode worker inside a program, stopped
//! when its work is done) and `server_with_handler.rs` (the HTTP server
//! with a drain worker whose typed handler runs a job enqueued over HTTP).
//!
//! # The store directly
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use slothqueue::{NewJob, OpenOptions, Clock, SystemClock};
//!
//! let store = slothqueue::open("queue.db".as_ref(), OpenOptions::default())?;
//! let pushed = store.push(NewJob::shell("make test", "/src/app"), SystemClock.now()).await?;
//! println!("added job #{}", pushed.job.id);
//! # Ok(()) }
//! ```
//!
//! Delivery is at least once: a job whose runner died mid-run runs again.
//! Idempotency keys (`NewJob::key`) make pushes safe to repeat.

mod open;
pub mod spec;
pub mod typed;

pub use open::{Backend, OpenError, OpenOptions, detect, has_password, is_server_url, open, shown};
pub use slothqueue_core as core;
pub use slothqueue_core::{
    ClaimFilter, Clock, Event, EventKind, Job, JobId, JobState, ListFilter, ListOrder, NewJob,
    Owner, Policy, PurgeFilter, RunnerActivity, RunnerRecord, Stats, Store, StoreError,
    SystemClock, Timestamp,
};
#[cfg(feature = "http")]
pub use slothqueue_http as http;
pub use slothqueue_runner as runner;
#[cfg(feature = "postgres")]
pub use slothqueue_store_postgres as postgres;
#[cfg(feature = "redb")]
pub use slothqueue_store_redb as redb;
#[cfg(feature = "sqlite")]
pub use slothqueue_store_sqlite as sqlite;
