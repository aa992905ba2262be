//! What a typed job is: the [`Job`] trait a program implements for each of
//! its job types, the [`JobContext`] an attempt runs with, the [`JobError`]
//! it fails with, and how its output becomes the job's stored result.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use slothqueue_core::{DEFAULT_QUEUE, JobId};
use slothqueue_runner::{StopListener, StopReason};

use super::data::SharedData;
use super::queue::Queue;

/// A job a program defines as a type: its fields are the payload (stored
/// as JSON), [`Job::KIND`] names it in the queue, and [`Job::run`] does
/// the work in the program that registered it
/// ([`Worker::handle`](super::Worker::handle)).
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use slothqueue::typed::{Job, JobContext, JobError};
///
/// #[derive(Serialize, Deserialize)]
/// struct Resize {
///     path: std::path::PathBuf,
///     width: u32,
/// }
///
/// impl Job for Resize {
///     const KIND: &'static str = "resize";
///     type Output = String;
///
///     async fn run(self, ctx: JobContext) -> Result<String, JobError> {
///         if self.width == 0 {
///             return Err(JobError::new("width must be positive"));
///         }
///         Ok(format!("{} resized to {} px (attempt {})", self.path.display(), self.width, ctx.attempt()))
///     }
/// }
/// ```
///
/// The payload outlives the program that pushed it: a job pushed by an
/// older build is decoded by the newer one that runs it. A payload that
/// no longer decodes (a field added without `#[serde(default)]`, a renamed
/// one) fails the job at once, not retried (another attempt would read the
/// same bytes), with an error naming the kind and serde's message; add
/// serde defaults to keep old payloads readable (`slothqueue retry` runs
/// such a job again once a build reads it).
pub trait Job: Serialize + DeserializeOwned + Send + 'static {
    /// The job's kind in the queue: a plain name (letters, digits, `-`,
    /// `_`, `.`), unique among the program's job types, not `shell`.
    const KIND: &'static str;

    /// The queue (lane) a push puts it in unless the push names another.
    const QUEUE: &'static str = DEFAULT_QUEUE;

    /// How many attempts a push gives it unless the push says; `None`
    /// takes the queue's policy (3 by default).
    const MAX_ATTEMPTS: Option<u32> = None;

    /// How long one attempt may run unless the push says; `None` is
    /// unlimited. Past it the runner stops the attempt (see
    /// [`JobContext::stopped`]) and records a timeout.
    const MAX_RUNTIME: Option<Duration> = None;

    /// What a successful run returns. It is stored as the job's result
    /// (shown by `slothqueue show`): a string as it is, `()` (or any value
    /// that serializes to `null`) as no result, anything else as its JSON.
    /// [`Queue::output`] reads it back.
    type Output: Serialize + Send + 'static;

    /// Runs one attempt. An `Ok` completes the job with its output as the
    /// result; an `Err` fails the attempt with the error's message, and
    /// the job is retried after a backoff until its attempts are used up,
    /// unless the error is [`permanent`](JobError::permanent): then the
    /// job ends `failed` at once.
    ///
    /// Implement it as an `async fn`; the future must be `Send` (it runs
    /// on the runner's tokio runtime). Watch [`JobContext::stopped`] in
    /// long work: when the runner asks (shutdown, cancel, max runtime), an
    /// attempt that does not end within the runner's kill grace is
    /// dropped.
    fn run(self, ctx: JobContext) -> impl Future<Output = Result<Self::Output, JobError>> + Send;
}

/// What one attempt of a typed job knows besides its payload.
#[derive(Debug, Clone)]
pub struct JobContext {
    pub(crate) job: slothqueue_core::Job,
    pub(crate) attempt: u32,
    pub(crate) stop: StopListener,
    pub(crate) queue: Queue,
    pub(crate) data: SharedData,
}

impl JobContext {
    /// The job's id in the queue.
    pub fn id(&self) -> JobId {
        self.job.id
    }

    /// This attempt's number, 1-based (a retry or a job taken back from a
    /// runner that died counts up).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The most attempts the job gets.
    pub fn max_attempts(&self) -> u32 {
        self.job.max_attempts
    }

    /// The job's record as the claim saw it: queue, priority, parents,
    /// payload and the rest.
    pub fn job(&self) -> &slothqueue_core::Job {
        &self.job
    }

    /// The queue the job came from, to push further jobs.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The value of type `T` given to the worker with
    /// [`Worker::data`](super::Worker::data): a pool, a client, a
    /// configuration, shared by every attempt of every handler of the
    /// worker (wrap what must change in a `Mutex` or use a type that is
    /// shared already, as a pool is). Without one, an error naming the
    /// type, which `?` turns into a permanent failure of the job.
    ///
    /// ```
    /// # use slothqueue::typed::{JobContext, JobError};
    /// struct Pool { url: String }
    ///
    /// async fn handler(ctx: JobContext) -> Result<String, JobError> {
    ///     let pool = ctx.data::<Pool>()?;
    ///     Ok(format!("job #{} on {}", ctx.id(), pool.url))
    /// }
    /// ```
    pub fn data<T: Send + Sync + 'static>(&self) -> Result<&T, JobError> {
        // Permanent: a retry in the same program would find the same map.
        self.data.get::<T>().ok_or_else(|| {
            JobError::new(format!(
                "no shared value of type {} was given to this worker (`Worker::data`)",
                std::any::type_name::<T>()
            ))
            .permanent()
        })
    }

    /// Why the runner wants this attempt stopped, if it asked yet.
    pub fn stop_requested(&self) -> Option<StopReason> {
        self.stop.current().map(|r| r.reason)
    }

    /// Resolves when the runner asks the attempt to stop: a shutdown (the
    /// job goes back to pending, the attempt not charged), a cancel, a max
    /// runtime passed, or a lost lease. Select on it in long work and
    /// return soon after; what the attempt returns then is recorded as
    /// the stop (an `Ok` still completes the job).
    pub async fn stopped(&self) -> StopReason {
        self.stop.clone().requested().await.reason
    }
}

/// Why an attempt of a typed job failed: its message is stored as the
/// job's error (`slothqueue show`, `list --state failed`).
///
/// Any error converts into it with `?` (its message is the error's
/// `Display` followed by its sources), so it does not implement
/// [`std::error::Error`] itself, as `anyhow::Error` does not.
///
/// An error is retried after a backoff while the job has attempts left,
/// unless it is [`permanent`](JobError::permanent): an input the handler
/// will never accept fails the job at once.
///
/// ```
/// use slothqueue::typed::JobError;
///
/// fn parse_width(text: &str) -> Result<u32, JobError> {
///     // A width that is not a number will not become one on retry.
///     text.parse::<u32>().map_err(|e| JobError::from(e).permanent())
/// }
/// assert!(parse_width("wide").unwrap_err().is_permanent());
/// assert!(!JobError::new("the server is busy").is_permanent());
/// ```
pub struct JobError {
    message: String,
    permanent: bool,
}

impl JobError {
    /// An error with this message, retried while attempts are left.
    pub fn new(message: impl Into<String>) -> Self {
        JobError { message: message.into(), permanent: false }
    }

    /// The same error, marked permanent: another attempt would fail the
    /// same way (a malformed input, a record that does not exist), so the
    /// job ends `failed` at once, whatever attempts it has left, and its
    /// trail says it was not retried. `slothqueue retry` still runs it
    /// again.
    #[must_use]
    pub fn permanent(mut self) -> Self {
        self.permanent = true;
        self
    }

    /// Whether the error is [`permanent`](JobError::permanent).
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// The message stored as the job's error.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl<E: std::error::Error> From<E> for JobError {
    fn from(error: E) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            let said = cause.to_string();
            if !message.ends_with(&said) {
                message.push_str(": ");
                message.push_str(&said);
            }
            source = cause.source();
        }
        JobError { message, permanent: false }
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_tuple("JobError");
        d.field(&self.message);
        if self.permanent {
            d.field(&"permanent");
        }
        d.finish()
    }
}

/// A job's output as its stored result: `null` is none, a string is
/// itself, anything else its JSON.
pub(crate) fn encode_output<T: Serialize>(output: &T) -> Result<Option<String>, serde_json::Error> {
    Ok(match serde_json::to_value(output)? {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s),
        other => Some(other.to_string()),
    })
}

/// A stored result read back as `T`, the inverse of [`encode_output`]: no
/// result is `null`; a result is first taken as a string (an output that
/// was one), then as JSON.
pub(crate) fn decode_output<T: DeserializeOwned>(
    result: Option<&str>,
) -> Result<T, serde_json::Error> {
    let Some(text) = result else {
        return serde_json::from_value(serde_json::Value::Null);
    };
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .or_else(|_| serde_json::from_str(text))
}
