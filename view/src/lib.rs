//! **The read model**: what `status` and `show` say about a queue and a
//! job, assembled once from a [`Store`] and presented by every face: the
//! CLI's text and `--json`, the HTTP answers, and the page (which shows the
//! server's words). Each face used to read the store and word "why is this
//! job not running" on its own; now [`job()`] and [`status()`] read once and
//! return plain serde types ([`JobView`], [`StatusView`]), and a face only
//! chooses which of their facts to print and how.
//!
//! A crate of its own rather than a module of `core` (which does no I/O
//! and reads no clock: the assembly awaits a store) or of `runner` (the
//! worker, which neither face should need for a read): it depends on
//! `core` alone. What it cannot know is injected like the clock in
//! `core`: `now`, the liveness judge (the runner's `ProcJudge` reads
//! `/proc`), and this host's name.
//!
//! Rooms: [`words`] the phrases every face shares (times, stamps, job
//! references, lane reasons); [`why`] the one explanation of a job's
//! situation, pure; [`mod@job`] and [`mod@status`] the assembly;
//! [`listing`] a job as a list's row; [`history`] what ran per minute
//! over the last hour; [`steer`] what a cancel takes with it and the
//! bulk actions (retry a queue's failed jobs, cancel its pending ones).

pub mod history;
pub mod job;
pub mod listing;
pub mod status;
pub mod steer;
pub mod why;
pub mod words;

pub use job::{DEPENDENTS_LISTED, JobView, LaneState, TickView, job};
pub use status::{GpuLine, HostGpus, NextTick, StatusView, status};
pub use why::Situation;

use slothqueue_core::{Liveness, Owner, RunnerRecord, Store, StoreError, Timestamp, serving};

/// What a look needs besides the store: the time, the judge of runners
/// and lease owners, and the name of this host (a runner here is named
/// `runner pid 42 on this host`).
pub struct Look<'a> {
    /// The queue file's store, read only.
    pub store: &'a dyn Store,
    /// Now, from the caller's clock.
    pub now: Timestamp,
    /// Whether an owner's process is alive; the runner's `ProcJudge`
    /// judges by `/proc` on this host.
    pub judge: &'a (dyn Fn(&Owner) -> Liveness + Sync),
    /// This host's name, as runners record it in their owner.
    pub this_host: &'a str,
}

/// A runner's record as a look sees it: judged alive or not.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RunnerView {
    /// What it recorded.
    #[serde(flatten)]
    pub record: RunnerRecord,
    /// Alive: its process runs (on this host), or it wrote its record
    /// lately (elsewhere): `core::serving::is_live`.
    pub live: bool,
}

impl RunnerView {
    /// `runner pid 4242 on this host`, `runner pid 4242 on box`.
    pub fn name(&self, this_host: &str) -> String {
        words::runner_name(&self.record.owner, this_host)
    }
}

impl Look<'_> {
    /// Every recorded runner, judged.
    pub async fn runners(&self) -> Result<Vec<RunnerView>, ViewError> {
        let records = self.store.runners().await.map_err(read("cannot read the runners"))?;
        Ok(self.judged(records))
    }

    /// `records`, judged now.
    pub fn judged(&self, records: Vec<RunnerRecord>) -> Vec<RunnerView> {
        records
            .into_iter()
            .map(|record| {
                let live = serving::is_live(&record, (self.judge)(&record.owner), self.now);
                RunnerView { record, live }
            })
            .collect()
    }
}

/// Why a look could not be assembled: always a store's refusal, either of
/// the thing asked for (the job does not exist) or of a read made on the
/// way, which is named.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The read of the job itself (its row, its events) failed: the
    /// store's error as it is (a missing job is `StoreError::NotFound`).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A read made on the way failed: which one, and the store's error.
    #[error("{what}")]
    Read {
        /// `cannot read the runners`.
        what: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}

impl ViewError {
    /// The store's error, whichever read it came from.
    pub fn into_store(self) -> StoreError {
        match self {
            ViewError::Store(e) | ViewError::Read { source: e, .. } => e,
        }
    }
}

/// Names a read's failure.
pub(crate) fn read(what: &'static str) -> impl Fn(StoreError) -> ViewError {
    move |source| ViewError::Read { what: what.to_owned(), source }
}
