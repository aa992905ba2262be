//! Pushing a typed job: [`Queue::push`] and the [`Push`] builder it
//! returns (awaited to write the job), and reading a done job's output
//! back as its type ([`Queue::output`]).

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use serde::de::DeserializeOwned;
use slothqueue_core::{JobId, NewJob, Parent, Timestamp};

use super::QueueError;
use super::job::{Job, decode_output};
use super::queue::Queue;

impl Queue {
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

    /// Needs `count` free GPUs on the worker's host (each with `memory`
    /// bytes free, when given), held for the whole attempt: the claim takes
    /// it only then, and the attempt's lease names them
    /// (`job().lease`'s `gpus`; docs/gpus.md).
    pub fn gpus(mut self, count: u32, memory: Option<u64>) -> Self {
        self.options.gpus = Some(slothqueue_core::GpuRequest { count, memory });
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
            let pushed = queue.store().push(options, now).await?;
            queue.wake();
            Ok(Enqueued {
                id: pushed.job.id,
                created: pushed.created,
                superseded: pushed.superseded,
            })
        })
    }
}
