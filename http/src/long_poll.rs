//! How many `?wait=` long polls a server holds at once. Each holds a file
//! descriptor while it waits, its connection (its wait sleeps on tokio's
//! timers, `wait_briefly`, not a timerfd of its own as it once did), so
//! without a ceiling enough of them exhaust the process's limit on open
//! files: the server then cannot accept `/healthz` nor the worker read its
//! load (900 polls under a 1,024 limit stalled both for 8 s). The ceiling
//! is what the soft limit leaves after a reserve for everything else; a
//! poll beyond it is answered 503 at once, with `Retry-After`.
//!
//! The soft limit is read, not raised: the jobs the worker starts inherit
//! it, and a job that calls `select(2)` breaks past 1,024 descriptors.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::HttpError;

/// The descriptors one waiting long poll holds.
const FDS_PER_POLL: u64 = 1;

/// The descriptors kept for everything but long polls: the listeners, the
/// queue's files, the worker, its job's pipes, other requests.
const RESERVE_FDS: u64 = 64;

/// The most long polls at once however high the limit (their looks share
/// the store with everything else).
const MOST: u64 = 10_000;

/// The long polls a soft limit of `soft` open files leaves room for
/// (`None`: no limit).
pub(crate) fn ceiling_for(soft: Option<u64>) -> usize {
    let room = soft.map_or(MOST, |s| s.saturating_sub(RESERVE_FDS) / FDS_PER_POLL);
    usize::try_from(room.clamp(1, MOST)).unwrap_or(1)
}

/// This process's soft limit on open files, `None` when unlimited.
fn soft_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// The long polls in progress, at most a ceiling.
#[derive(Clone, Debug)]
pub(crate) struct LongPolls {
    permits: Arc<Semaphore>,
    ceiling: usize,
}

impl LongPolls {
    /// As many as this process's limit on open files leaves room for.
    pub(crate) fn for_this_process() -> LongPolls {
        LongPolls::at_most(ceiling_for(soft_limit()))
    }

    /// At most `ceiling` at once.
    pub(crate) fn at_most(ceiling: usize) -> LongPolls {
        LongPolls { permits: Arc::new(Semaphore::new(ceiling)), ceiling }
    }

    /// A place for one more, held until dropped; refused when all are taken.
    pub(crate) fn enter(&self) -> Result<OwnedSemaphorePermit, HttpError> {
        Arc::clone(&self.permits).try_acquire_owned().map_err(|_| {
            HttpError::Unavailable(format!(
                "too many long polls in progress ({}, as many as this server's limit on open \
                 files leaves room for): ask again shortly, or without `wait`",
                self.ceiling
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_leaves_the_reserve_and_a_descriptor_a_poll() {
        assert_eq!(ceiling_for(Some(1024)), 960);
        assert_eq!(ceiling_for(Some(128)), 64);
        assert_eq!(ceiling_for(Some(10)), 1);
        assert_eq!(ceiling_for(Some(1 << 20)), 10_000);
        assert_eq!(ceiling_for(None), 10_000);
    }

    #[test]
    fn a_poll_beyond_the_ceiling_is_refused_until_one_ends() {
        let polls = LongPolls::at_most(2);
        let first = polls.enter().unwrap();
        let _second = polls.enter().unwrap();
        let refused = polls.enter().unwrap_err();
        assert_eq!(refused.status(), axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.to_string().contains("too many long polls in progress (2"), "{refused}");
        drop(first);
        assert!(polls.enter().is_ok());
    }
}
