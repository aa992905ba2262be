//! The [`Queue`] handle a program pushes typed jobs through and runs them
//! from: a store, its file, its clock, and the wakers of this process's
//! workers on it. Pushing is `push.rs`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use slothqueue_core::{Clock, JobId, Store, SystemClock, Timestamp};
use slothqueue_runner::QueueWatch;
use slothqueue_runner::wait::{WaitOutcome, WaitTarget, wait};
use tokio::sync::Notify;

use super::QueueError;
use crate::{OpenOptions, open};

/// How often [`Queue::wait`] looks at a queue that has no file to watch.
const BARE_STORE_POLL: Duration = Duration::from_secs(1);

/// A queue a program pushes typed jobs to and runs them from: a queue file
/// ([`Queue::open`]) or any store ([`Queue::from_store`]). Cheap to clone;
/// every clone is the same queue.
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    path: Option<PathBuf>,
    clock: Arc<dyn Clock>,
    /// The follow-mode workers of this process on this queue, woken by
    /// every push through it (others see the file change).
    wakers: Mutex<Vec<Weak<Notify>>>,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue").field("path", &self.inner.path).finish_non_exhaustive()
    }
}

impl Queue {
    /// Opens (or creates) the queue file at `path`, its backend chosen as
    /// [`open()`] chooses it.
    pub fn open(path: impl AsRef<Path>) -> Result<Queue, QueueError> {
        Queue::open_with(path, OpenOptions::default())
    }

    /// Opens the queue file at `path` with `options`.
    pub fn open_with(path: impl AsRef<Path>, options: OpenOptions) -> Result<Queue, QueueError> {
        let path = path.as_ref();
        let store = open(path, options)?;
        Ok(Queue::build(store, Some(path.to_owned())))
    }

    /// A queue over a store opened by the caller. Without a file, a
    /// following worker hears only the pushes made through this handle
    /// (and its clones) at once; others at its poll.
    pub fn from_store(store: Arc<dyn Store>) -> Queue {
        Queue::build(store, None)
    }

    fn build(store: Arc<dyn Store>, path: Option<PathBuf>) -> Queue {
        Queue {
            inner: Arc::new(Inner {
                store,
                path,
                clock: Arc::new(SystemClock),
                wakers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The same queue read with another clock (tests use a
    /// [`ManualClock`](slothqueue_core::ManualClock)); workers made from
    /// it with [`Worker::new`](super::Worker::new) run with that clock too.
    /// A new handle: pushes through it wake only the workers made from it.
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Queue {
        let inner = &self.inner;
        Queue {
            inner: Arc::new(Inner {
                store: inner.store.clone(),
                path: inner.path.clone(),
                clock,
                wakers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The store, for everything the typed API does not cover (`list`,
    /// `cancel`, `retry`, lanes, schedules, …).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The queue file, when the queue was opened from one.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// The clock pushes and workers read.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The time now, by the queue's clock.
    pub(crate) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// The job's record (state, attempts, result, last error, …).
    pub async fn get(&self, id: JobId) -> Result<slothqueue_core::Job, QueueError> {
        Ok(self.inner.store.get(id).await?)
    }

    /// Waits until each job of `ids` is finished (done, failed or
    /// cancelled), whichever process runs them, or until `timeout` passes
    /// (`None`: no limit); [`WaitOutcome`] says which and holds each job's
    /// state as last seen (read a job itself with [`Queue::get`]). A queue
    /// opened from a file is looked at again when the file changes; one
    /// over a bare store ([`Queue::from_store`]) every second.
    pub async fn wait(
        &self,
        ids: &[JobId],
        timeout: Option<Duration>,
    ) -> Result<WaitOutcome, QueueError> {
        let watch = match self.path() {
            Some(path) => QueueWatch::for_store(path, self.inner.store.as_ref()),
            None => QueueWatch::polling(BARE_STORE_POLL),
        };
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let target = WaitTarget::Jobs(ids.to_vec());
        Ok(wait(self.inner.store.as_ref(), &watch, &target, deadline).await?)
    }

    /// Wakes this process's following workers on the queue.
    pub(super) fn wake(&self) {
        let mut wakers = self.inner.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        wakers.retain(|w| match w.upgrade() {
            Some(n) => {
                n.notify_one();
                true
            }
            None => false,
        });
    }

    /// Adds a worker's waker to those a push wakes.
    pub(crate) fn add_waker(&self, waker: &Arc<Notify>) {
        let mut wakers = self.inner.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        wakers.retain(|w| w.strong_count() > 0);
        wakers.push(Arc::downgrade(waker));
    }
}
