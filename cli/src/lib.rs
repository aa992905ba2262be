//! slothqueue: a durable background-job queue for one machine.
//!
//! This crate is the facade a program embeds: it re-exports the job model
//! and the [`Store`] trait from [`core`], the storage backends the Cargo
//! features enable (`sqlite` and `redb`, both on by default), the
//! [`runner`], and [`open()`], which opens a queue file without the caller
//! knowing its backend. The `slothqueue` binary is built on exactly this.
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

pub use open::{Backend, OpenError, OpenOptions, detect, open};
pub use slothqueue_core as core;
pub use slothqueue_core::{
    ClaimFilter, Clock, Event, EventKind, Job, JobId, JobState, ListFilter, ListOrder, NewJob,
    Owner, Policy, PurgeFilter, RunnerActivity, RunnerRecord, Stats, Store, StoreError,
    SystemClock, Timestamp,
};
pub use slothqueue_runner as runner;
#[cfg(feature = "redb")]
pub use slothqueue_store_redb as redb;
#[cfg(feature = "sqlite")]
pub use slothqueue_store_sqlite as sqlite;
