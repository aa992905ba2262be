//! The typed layer against a real queue file: pushes with their options,
//! outputs stored and read back, failures (an error, a panic, a payload
//! that no longer decodes), stops, and the registrations a worker refuses.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use slothqueue_core::{JobState, ManualClock, NewJob, Timestamp};
use tokio::sync::{Notify, mpsc, oneshot};

use super::*;

fn queue_in(dir: &tempfile::TempDir) -> Queue {
    Queue::open(dir.path().join("q.db")).unwrap()
}

/// Adds two numbers: an output that is JSON, not a string.
#[derive(Debug, Serialize, Deserialize)]
struct Add {
    a: i64,
    b: i64,
}

impl Job for Add {
    const KIND: &'static str = "add";
    type Output = i64;

    async fn run(self, _ctx: JobContext) -> Result<i64, JobError> {
        Ok(self.a + self.b)
    }
}

/// Says hello: a string output, and a struct one.
#[derive(Debug, Serialize, Deserialize)]
struct Greet {
    name: String,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Greeting {
    text: String,
    attempt: u32,
}

impl Job for Greet {
    const KIND: &'static str = "greet";
    const QUEUE: &'static str = "mail";
    type Output = Greeting;

    async fn run(self, ctx: JobContext) -> Result<Greeting, JobError> {
        Ok(Greeting { text: format!("hello {}", self.name), attempt: ctx.attempt() })
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Shout {
    word: String,
}

impl Job for Shout {
    const KIND: &'static str = "shout";
    type Output = String;

    async fn run(self, _ctx: JobContext) -> Result<String, JobError> {
        Ok(self.word.to_uppercase())
    }
}

#[tokio::test]
async fn a_typed_job_runs_and_its_output_is_stored_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let queue = queue_in(&dir);
    let sum = queue.push(Add { a: 2, b: 3 }).await.unwrap();
    let hi = queue.push(Greet { name: "ada".into() }).await.unwrap();
    let loud = queue.push(Shout { word: "quiet".into() }).await.unwrap();
    assert_eq!(queue.output::<Add>(sum.id).await.unwrap(), None, "not run yet");

    let summary = Worker::new(&queue)
        .handle::<Add>()
        .handle::<Greet>()
        .handle::<Shout>()
        .run_until_idle()
        .await
        .unwrap();
    assert_eq!((summary.done, summary.failed), (3, 0));

    let job = queue.get(sum.id).await.unwrap();
    assert_eq!((job.kind.as_str(), job.state), ("add", JobState::Done));
    assert_eq!(job.payload, serde_json::json!({"a": 2, "b": 3}));
    assert_eq!(job.result.as_deref(), Some("5"));
    assert_eq!(queue.output::<Add>(sum.id).await.unwrap(), Some(5));

    let job = queue.get(hi.id).await.unwrap();
    assert_eq!(job.queue, "mail", "Job::QUEUE is the push's default");
    assert_eq!(job.result.as_deref(), Some(r#"{"attempt":1,"text":"hello ada"}"#));
    let greeting = queue.output::<Greet>(hi.id).await.unwrap();
    assert_eq!(greeting, Some(Greeting { text: "hello ada".into(), attempt: 1 }));

    // A string is stored as it is, for `slothqueue show`.
    assert_eq!(queue.get(loud.id).await.unwrap().result.as_deref(), Some("QUIET"));
    assert_eq!(queue.output::<Shout>(loud.id).await.unwrap().as_deref(), Some("QUIET"));

    let wrong = queue.output::<Add>(loud.id).await.unwrap_err();
    assert!(matches!(wrong, QueueError::WrongKind { .. }), "{wrong}");
}

/// Records the order its jobs ran in.
#[derive(Debug, Serialize, Deserialize)]
struct Step {
    name: String,
}

static STEPS: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl Job for Step {
    const KIND: &'static str = "step";
    type Output = ();

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        STEPS.lock().unwrap().push(self.name);
        Ok(())
    }
}

#[tokio::test]
async fn a_push_takes_a_key_parents_a_priority_a_queue_and_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let queue = queue_in(&dir);
    let fetch = queue.push(Step { name: "fetch".into() }).key("fetch").await.unwrap();
    assert!(fetch.created);
    let again = queue.push(Step { name: "fetch".into() }).key("fetch").await.unwrap();
    assert_eq!((again.id, again.created), (fetch.id, false), "the same key and payload");
    // Higher priority than its parents, yet it runs after both.
    let publish = queue
        .push(Step { name: "publish".into() })
        .after("convert")
        .after(fetch)
        .priority(9)
        .queue("web")
        .max_attempts(7)
        .max_runtime(Some(Duration::from_secs(30)))
        .await;
    assert!(publish.is_err(), "a parent that does not exist yet is refused");
    let convert = queue.push(Step { name: "convert".into() }).key("convert").after(fetch.id);
    let convert = convert.priority(5).await.unwrap();
    let publish = queue
        .push(Step { name: "publish".into() })
        .after("convert")
        .after(fetch)
        .priority(9)
        .queue("web")
        .max_attempts(7)
        .max_runtime(Some(Duration::from_secs(30)))
        .await
        .unwrap();
    let later = queue.push(Step { name: "later".into() }).delay(Duration::from_secs(3600));
    let later = later.gpus(2, Some(1 << 30)).await.unwrap();

    let job = queue.get(publish.id).await.unwrap();
    assert_eq!(job.after, vec![convert.id, fetch.id]);
    assert_eq!((job.priority, job.queue.as_str(), job.max_attempts), (9, "web", 7));
    assert_eq!(job.max_runtime, Some(Duration::from_secs(30)));
    assert_eq!(job.result, None);

    let summary = Worker::new(&queue).handle::<Step>().run_until_idle().await.unwrap();
    assert_eq!(summary.done, 3);
    assert_eq!(*STEPS.lock().unwrap(), ["fetch", "convert", "publish"]);
    let later = queue.get(later.id).await.unwrap();
    assert_eq!(later.state, JobState::Pending, "delayed an hour");
    assert_eq!(later.gpus.map(|g| (g.count, g.memory)), Some((2, Some(1 << 30))));
    assert!(later.not_before > queue.get(publish.id).await.unwrap().finished_at.unwrap());
}

/// Fails on purpose, in the way its payload says.
#[derive(Debug, Serialize, Deserialize)]
struct Fail {
    how: String,
}

impl Job for Fail {
    const KIND: &'static str = "fail";
    const MAX_ATTEMPTS: Option<u32> = Some(1);
    type Output = ();

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        match self.how.as_str() {
            "io" => {
                std::fs::read("/nonexistent/slothqueue/file")?;
                Ok(())
            }
            "panic" => panic!("kaboom"),
            "for good" => Err(JobError::new("asked to fail for good").permanent()),
            other => Err(JobError::new(format!("asked to fail: {other}"))),
        }
    }
}

#[tokio::test]
async fn an_error_or_a_panic_is_the_attempts_failure() {
    let dir = tempfile::tempdir().unwrap();
    let queue = queue_in(&dir);
    let io = queue.push(Fail { how: "io".into() }).await.unwrap();
    let panic = queue.push(Fail { how: "panic".into() }).await.unwrap();
    let said = queue.push(Fail { how: "politely".into() }).await.unwrap();
    let summary = Worker::new(&queue).handle::<Fail>().run_until_idle().await.unwrap();
    assert_eq!((summary.done, summary.failed), (0, 3));
    let error = |id| {
        let queue = queue.clone();
        async move {
            let job = queue.get(id).await.unwrap();
            assert_eq!((job.state, job.attempts), (JobState::Failed, 1), "MAX_ATTEMPTS");
            job.last_error.unwrap()
        }
    };
    assert!(error(io.id).await.contains("No such file or directory"));
    assert_eq!(error(panic.id).await, "the `fail` handler panicked: kaboom");
    assert_eq!(error(said.id).await, "asked to fail: politely");
}

#[tokio::test]
async fn a_permanent_error_ends_the_job_at_once_and_a_plain_one_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let queue = queue_in(&dir);
    let good = queue.push(Fail { how: "for good".into() }).max_attempts(3).await.unwrap();
    let again = queue.push(Fail { how: "again".into() }).max_attempts(3).await.unwrap();
    let summary = Worker::new(&queue).handle::<Fail>().run_until_idle().await.unwrap();
    assert_eq!((summary.done, summary.failed), (0, 2));
    let job = queue.get(good.id).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Failed, 1), "not retried");
    assert_eq!(job.last_error.as_deref(), Some("asked to fail for good"));
    let trail = queue.store().events(good.id).await.unwrap();
    let last = trail.last().unwrap();
    assert_eq!(last.retry_at, None);
    assert!(last.message.as_deref().unwrap().ends_with("; permanent failure, not retried"));
    let job = queue.get(again.id).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Pending, 1), "retried after a backoff");
}

#[tokio::test]
async fn a_payload_that_no_longer_decodes_fails_the_job_at_once_with_the_kind_and_serdes_message() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_700_000_000_000)));
    let queue = queue_in(&dir).with_clock(clock.clone());
    // Pushed by an older build whose `Add` had no `b`.
    let old = NewJob::new("add", serde_json::json!({"a": 1})).max_attempts(2);
    let old = queue.store().push(old, queue.clock().now()).await.unwrap().job.id;
    let good = queue.push(Add { a: 1, b: 1 }).await.unwrap();

    let summary = Worker::new(&queue).handle::<Add>().run_until_idle().await.unwrap();
    assert_eq!((summary.done, summary.failed), (1, 1), "the next job still ran");
    let job = queue.get(old).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Failed, 1), "not retried");
    let error = job.last_error.unwrap();
    assert!(error.contains("`add` job"), "{error}");
    assert!(error.contains("missing field `b`"), "{error}");
    let trail = queue.store().events(old).await.unwrap();
    let last = trail.last().unwrap();
    assert_eq!(last.retry_at, None);
    assert_eq!(
        last.message.as_deref(),
        Some(format!("{error}; permanent failure, not retried").as_str())
    );
    assert_eq!(queue.output::<Add>(good.id).await.unwrap(), Some(2));

    // Nothing is left to run, however long one waits.
    clock.advance(Duration::from_secs(3600));
    let summary = Worker::new(&queue).handle::<Add>().run_until_idle().await.unwrap();
    assert_eq!((summary.done, summary.failed), (0, 0));
    assert_eq!(queue.get(old).await.unwrap().attempts, 1);
}

/// Works until the runner asks it to stop.
#[derive(Debug, Serialize, Deserialize)]
struct Wait;

static WAITING: Notify = Notify::const_new();

impl Job for Wait {
    const KIND: &'static str = "wait";
    type Output = ();

    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        assert_eq!(ctx.stop_requested(), None);
        WAITING.notify_one();
        let why = ctx.stopped().await;
        assert_eq!(ctx.stop_requested(), Some(why));
        Err(JobError::new(format!("stopped: {why:?}")))
    }
}

#[tokio::test]
async fn a_shutdown_reaches_the_handler_and_hands_its_job_back_uncharged() {
    let dir = tempfile::tempdir().unwrap();
    let queue = queue_in(&dir);
    let job = queue.push(Wait).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let worker = Worker::new(&queue).handle::<Wait>().follow(async {
        let _ = stopped.await;
    });
    let run = tokio::spawn(worker);
    tokio::time::timeout(Duration::from_secs(30), WAITING.notified())
        .await
        .expect("the job did not start");
    stop.send(()).unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the worker did not stop")
        .unwrap()
        .unwrap();
    assert_eq!((summary.released, summary.failed, summary.interrupted), (1, 0, true));
    let job = queue.get(job.id).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Pending, 0));
}

/// Ignores every stop; says when its future is dropped.
#[derive(Debug, Serialize, Deserialize)]
struct Stubborn;

static STUBBORN_STARTED: Notify = Notify::const_new();
static STUBBORN_DROPPED: Notify = Notify::const_new();

struct SaysWhenDropped;

impl Drop for SaysWhenDropped {
    fn drop(&mut self) {
        STUBBORN_DROPPED.notify_one();
    }
}

impl Job for Stubborn {
    const KIND: &'static str = "stubborn";
    type Output = ();

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        let _guard = SaysWhenDropped;
        STUBBORN_STARTED.notify_one();
        std::future::pending::<()>().await;
        Ok(())
    }
}

#[tokio::test]
async fn a_handler_that_ignores_a_stop_is_dropped_after_the_grace_and_its_job_handed_back() {
    let dir = tempfile::tempdir().unwrap();
    let queue = queue_in(&dir);
    let job = queue.push(Stubborn).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let worker = Worker::new(&queue)
        .handle::<Stubborn>()
        .configure(|c| c.kill_grace = Duration::ZERO)
        .follow(async {
            let _ = stopped.await;
        });
    let run = tokio::spawn(worker);
    tokio::time::timeout(Duration::from_secs(30), STUBBORN_STARTED.notified())
        .await
        .expect("the job did not start");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), STUBBORN_DROPPED.notified())
        .await
        .expect("the handler's task was left running");
    let summary = run.await.unwrap().unwrap();
    assert_eq!(summary.released, 1);
    let job = queue.get(job.id).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Pending, 0));
}

#[tokio::test]
async fn a_push_through_the_handle_wakes_its_following_worker_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("q.db");
    let store = crate::open(&path, crate::OpenOptions::default()).unwrap();
    // No file to watch: only the handle's push can wake it before an hour.
    let queue = Queue::from_store(store);
    let (events, mut seen) = mpsc::unbounded_channel();
    let (stop, stopped) = oneshot::channel::<()>();
    let worker = Worker::new(&queue)
        .handle::<Add>()
        .configure(|c| c.poll_interval = Duration::from_secs(3600))
        .on_event(events)
        .follow(async {
            let _ = stopped.await;
        });
    let run = tokio::spawn(worker);
    for n in 0..2 {
        let pushed = queue.push(Add { a: n, b: n }).await.unwrap();
        let done = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(event) = seen.recv().await {
                if let RunnerEvent::Done { job, .. } = event {
                    return job;
                }
            }
            0
        });
        assert_eq!(done.await.expect("the push did not wake the worker"), pushed.id);
    }
    stop.send(()).unwrap();
    let summary = run.await.unwrap().unwrap();
    assert_eq!(summary.done, 2);
}

#[derive(Debug, Serialize, Deserialize)]
struct Sum {
    a: i64,
}

impl Job for Sum {
    const KIND: &'static str = "add";
    type Output = i64;

    async fn run(self, _ctx: JobContext) -> Result<i64, JobError> {
        Ok(self.a)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Sneaky;

impl Job for Sneaky {
    const KIND: &'static str = "shell";
    type Output = ();

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Spaced;

impl Job for Spaced {
    const KIND: &'static str = "two words";
    type Output = ();

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_worker_refuses_a_kind_twice_the_shell_kind_and_a_name_that_is_not_plain() {
    let dir = tempfile::tempdir().unwrap();
    let queue = queue_in(&dir);
    let shell = queue.store().push(NewJob::shell("true", "/"), queue.clock().now()).await.unwrap();
    let refused = |w: Worker| async move { w.run_until_idle().await.unwrap_err().to_string() };

    let twice = refused(Worker::new(&queue).handle::<Add>().handle::<Sum>()).await;
    assert!(twice.contains("kind `add` is registered twice"), "{twice}");
    assert!(refused(Worker::new(&queue).handle::<Sneaky>()).await.contains("`shell`"));
    assert!(refused(Worker::new(&queue).handle::<Spaced>()).await.contains("not a plain name"));

    // The same type twice is one registration; shell jobs are not claimed.
    let worker = Worker::new(&queue).handle::<Add>().handle::<Add>();
    assert_eq!(worker.kinds(), ["add"]);
    let summary = worker.run_until_idle().await.unwrap();
    assert_eq!(summary.done, 0);
    assert_eq!(queue.get(shell.job.id).await.unwrap().state, JobState::Pending);
}

/// Reads the worker's shared `Offset` and adds it: state that is not in
/// the payload.
#[derive(Debug, Serialize, Deserialize)]
struct Shift {
    n: i64,
}

struct Offset(i64);

impl Job for Shift {
    const KIND: &'static str = "shift";
    type Output = i64;

    async fn run(self, ctx: JobContext) -> Result<i64, JobError> {
        Ok(self.n + ctx.data::<Offset>()?.0)
    }
}

#[tokio::test]
async fn handlers_read_the_value_the_worker_was_given_whenever_it_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let queue = queue_in(&dir);
    let a = queue.push(Shift { n: 1 }).await.unwrap();
    // Given after the handler was registered, and replaced once: the last
    // value is the one every attempt reads.
    let summary = Worker::new(&queue)
        .handle::<Shift>()
        .data(Offset(10))
        .data(Offset(100))
        .run_until_idle()
        .await
        .unwrap();
    assert_eq!(summary.done, 1);
    assert_eq!(queue.output::<Shift>(a.id).await.unwrap(), Some(101));
    // Without it: failed at once, naming the type.
    let b = queue.push(Shift { n: 1 }).await.unwrap();
    Worker::new(&queue).handle::<Shift>().run_until_idle().await.unwrap();
    let job = queue.get(b.id).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Failed, 1));
    assert!(job.last_error.unwrap_or_default().contains("Offset"), "{:?}", job.id);
}
