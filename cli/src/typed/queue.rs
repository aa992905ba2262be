//! The [`Queue`] handle a program pushes typed jobs through, and the
//! [`Push`] builder a push is (awaited to write the job).

use std::fmt;
use std::future::{Future, IntoFuture};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use serde::de::DeserializeOwned;
use slothqueue_core::{Clock, JobId, NewJob, Parent, Store, SystemClock, Timestamp};
use tokio::sync::Notify;

use super::QueueError;
use super::job::{Job, decode_output};
use crate::{OpenOptions, open};

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
    /// it run with that clock too.
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

    /// Pushes `job`: set options on the returned [`Push`], then `.await`
    /// it to write the job.
    ///
    /// ```no_run
    /// # use slothqueue::typed::{Job, JobContext, JobError, Queue};
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct Resize { width: u32 }
    /// # impl Job for Resize { const KIND: &'static str = "resize"; type Output = ();
    /// #   async fn run(self, _: JobContext) -> Result<(), JobError> { Ok(()) } }
    /// # async fn demo(queue: Queue) -> Result<(), slothqueue::typed::QueueError> {
    /// let first = queue.push(Resize { width: 640 }).key("thumb-640").await?;
    /// let second = queue.push(Resize { width: 320 }).after(first.id).priority(5).await?;
    /// println!("#{} runs after #{}", second.id, first.id);
    /// # Ok(()) }
    /// ```
    pub fn push<J: Job>(&self, job: J) -> Push<'_, J> {
        let mut options = NewJob::new(J::KIND, serde_json::Value::Null).queue(J::QUEUE);
        options.max_attempts = J::MAX_ATTEMPTS;
        options.max_runtime = J::MAX_RUNTIME;
        Push { queue: self, job, options, delay: None }
    }

    /// The job's record (state, attempts, result, last error, …).
    pub async fn get(&self, id: JobId) -> Result<slothqueue_core::Job, QueueError> {
        Ok(self.inner.store.get(id).await?)
    }

    /// The output of a done job of type `J`, read back from its stored
    /// result; `None` while the job is not done (see
    /// [`Queue::get`] for its state and error).
    pub async fn output<J: Job>(&self, id: JobId) -> Result<Option<J::Output>, QueueError>
    where
        J::Output: DeserializeOwned,
    {
        let job = self.get(id).await?;
        if job.kind != J::KIND {
            return Err(QueueError::WrongKind { id, kind: job.kind, expected: J::KIND });
        }
        if job.state != slothqueue_core::JobState::Done {
            return Ok(None);
        }
        decode_output(job.result.as_deref()).map(Some).map_err(|source| QueueError::Output {
            id,
            kind: J::KIND,
            source,
        })
    }

    /// Wakes this process's following workers on the queue.
    fn wake(&self) {
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

/// What a push wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// The job holding the push's idempotency key: the new job, or the one
    /// that already had the key with the same payload.
    pub id: JobId,
    /// `false` when an identical job with the key existed and nothing was
    /// written.
    pub created: bool,
    /// The pending job with the key that this push replaced (its payload
    /// differed), if any.
    pub superseded: Option<JobId>,
}

impl From<Enqueued> for Parent {
    fn from(e: Enqueued) -> Parent {
        Parent::Id(e.id)
    }
}

impl From<&Enqueued> for Parent {
    fn from(e: &Enqueued) -> Parent {
        Parent::Id(e.id)
    }
}

/// A push being set up; `.await` it to write the job
/// ([`Queue::push`]). Every option is one of [`NewJob`]'s.
#[must_use = "a push writes nothing until it is awaited"]
pub struct Push<'q, J> {
    queue: &'q Queue,
    job: J,
    /// Everything but the payload, which is encoded when awaited.
    options: NewJob,
    delay: Option<Duration>,
}

impl<J> fmt::Debug for Push<'_, J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Push").field("options", &self.options).finish_non_exhaustive()
    }
}

impl<J: Job> Push<'_, J> {
    /// The idempotency key: pushing the same job with the same key again
    /// writes nothing; a different job with the key replaces it while it
    /// is pending.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.options.idempotency_key = Some(key.into());
        self
    }

    /// A parent, by id ([`Enqueued`] or a [`JobId`]) or by idempotency key
    /// (`"build-7"`): the job runs once every parent is done, and is
    /// cancelled when one fails for good or is cancelled. Call again for
    /// more parents.
    pub fn after(mut self, parent: impl Into<Parent>) -> Self {
        self.options.after.push(parent.into());
        self
    }

    /// Higher runs first (default 0).
    pub fn priority(mut self, priority: i32) -> Self {
        self.options.priority = priority;
        self
    }

    /// The queue (lane) instead of [`Job::QUEUE`].
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.options.queue = queue.into();
        self
    }

    /// The most attempts instead of [`Job::MAX_ATTEMPTS`].
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.options.max_attempts = Some(n);
        self
    }

    /// The longest one attempt may run instead of [`Job::MAX_RUNTIME`]
    /// (`None`: unlimited).
    pub fn max_runtime(mut self, limit: Option<Duration>) -> Self {
        self.options.max_runtime = limit;
        self
    }

    /// Not due before `at`.
    pub fn not_before(mut self, at: Timestamp) -> Self {
        self.options.not_before = Some(at);
        self.delay = None;
        self
    }

    /// Not due before this long after the push.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self.options.not_before = None;
        self
    }
}

impl<'q, J: Job> IntoFuture for Push<'q, J> {
    type Output = Result<Enqueued, QueueError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'q>>;

    fn into_future(self) -> Self::IntoFuture {
        let Push { queue, job, mut options, delay } = self;
        // Encoded here, so the future holds no `J` (which need not be `Sync`).
        let payload = serde_json::to_value(&job);
        Box::pin(async move {
            options.payload =
                payload.map_err(|source| QueueError::Encode { kind: J::KIND, source })?;
            let now = queue.now();
            if let Some(delay) = delay {
                options.not_before = Some(now.saturating_add(delay));
            }
            let pushed = queue.inner.store.push(options, now).await?;
            queue.wake();
            Ok(Enqueued {
                id: pushed.job.id,
                created: pushed.created,
                superseded: pushed.superseded,
            })
        })
    }
}
