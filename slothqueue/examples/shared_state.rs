//! Handlers with shared state: a database pool made once, at start, and
//! given to every handler of a worker with `Worker::data`, read in each
//! attempt with `JobContext::data` (as apalis's `Data<T>` does). Two job
//! types write through the same pool; a third worker, given no pool,
//! fails its job at once with an error naming what is missing.
//!
//! ```sh
//! cargo run -p slothqueue --example shared_state
//! ```
//!
//! The "pool" stands in for a real one (sqlx's `PgPool`, deadpool, r2d2):
//! cheap to share, costly to make, so made once and never per job.
//! Everything happens in a temporary folder, deleted at the end.

#![allow(clippy::print_stdout, reason = "an example says what it does")]

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use slothqueue::typed::{Job, JobContext, JobError, Queue, Worker};

/// How many pools this program made: a handler that made its own would
/// show here.
static POOLS_MADE: AtomicUsize = AtomicUsize::new(0);

/// A pool-like object: connections handed out and counted, rows kept in a
/// table behind a lock (a real pool locks inside too).
struct Pool {
    url: String,
    checkouts: AtomicUsize,
    table: Mutex<Vec<String>>,
}

impl Pool {
    fn connect(url: &str) -> Pool {
        POOLS_MADE.fetch_add(1, Ordering::SeqCst);
        Pool { url: url.to_owned(), checkouts: AtomicUsize::new(0), table: Mutex::new(Vec::new()) }
    }

    /// "Runs a query": one checkout, one row.
    fn insert(&self, row: String) -> Result<usize, JobError> {
        self.checkouts.fetch_add(1, Ordering::SeqCst);
        let mut table = self.table.lock().map_err(|_| JobError::new("the pool is poisoned"))?;
        table.push(row);
        Ok(table.len())
    }
}

/// Signs a user up: one row in `users`.
#[derive(Serialize, Deserialize)]
struct SignUp {
    email: String,
}

impl Job for SignUp {
    const KIND: &'static str = "sign-up";
    type Output = String;

    async fn run(self, ctx: JobContext) -> Result<String, JobError> {
        let pool = ctx.data::<Pool>()?;
        let n = pool.insert(format!("users: {}", self.email))?;
        Ok(format!("{} signed up (row {n} on {})", self.email, pool.url))
    }
}

/// Sends the welcome mail, and records it through the same pool.
#[derive(Serialize, Deserialize)]
struct Welcome {
    email: String,
}

impl Job for Welcome {
    const KIND: &'static str = "welcome";
    type Output = String;

    async fn run(self, ctx: JobContext) -> Result<String, JobError> {
        let pool = ctx.data::<Pool>()?;
        let n = pool.insert(format!("mails: welcome {}", self.email))?;
        Ok(format!("welcomed {} (row {n})", self.email))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let dir = tempfile::tempdir()?;
    let queue = Queue::open(dir.path().join("queue.db"))?;
    for email in ["ana@example.org", "bo@example.org", "cy@example.org"] {
        let signed = queue.push(SignUp { email: email.into() }).await?;
        queue.push(Welcome { email: email.into() }).after(signed.id).await?;
    }

    // The pool is made once, here; the worker hands it to every attempt.
    let summary = Worker::new(&queue)
        .data(Pool::connect("postgres://db.internal/app"))
        .handle::<SignUp>()
        .handle::<Welcome>()
        .run_until_idle()
        .await?;
    println!("{} done, {} failed", summary.done, summary.failed);
    if (summary.done, summary.failed) != (6, 0) {
        return Err(format!("expected 6 done, got {summary:?}").into());
    }
    for id in 1..=6 {
        println!("#{id}: {}", queue.get(id).await?.result.unwrap_or_default());
    }
    let made = POOLS_MADE.load(Ordering::SeqCst);
    println!("pools made: {made}");
    if made != 1 {
        return Err(
            format!("{made} pools were made for 6 jobs: the handlers did not share one").into()
        );
    }

    // A worker given no pool: the job fails at once (not retried), saying
    // which value it lacked.
    let orphan = queue.push(SignUp { email: "dee@example.org".into() }).await?;
    let summary = Worker::new(&queue).handle::<SignUp>().run_until_idle().await?;
    let job = queue.get(orphan.id).await?;
    let error = job.last_error.unwrap_or_default();
    println!("#{} {} after {} attempt(s): {error}", orphan.id, job.state, job.attempts);
    if summary.failed != 1 || job.attempts != 1 || !error.contains("shared_state::Pool") {
        return Err(format!("the pool-less worker's job: {summary:?}, {error}").into());
    }
    Ok(())
}
