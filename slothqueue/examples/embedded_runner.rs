//! A runner inside a program: a follow-mode worker with typed handlers
//! runs beside the program's own work, on the same tokio runtime. The
//! program pushes jobs and waits for them; a handler pushes a follow-up
//! job of its own; a long job is cancelled and stops through its
//! context; then the program shuts the worker down and exits.
//!
//! ```sh
//! cargo run -p slothqueue --example embedded_runner
//! ```
//!
//! Everything happens in a temporary folder, deleted at the end.

#![allow(clippy::print_stdout, reason = "an example says what it does")]

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use slothqueue::JobId;
use slothqueue::typed::{Job, JobContext, JobError, Queue, RunnerEvent, Worker};
use tokio::sync::oneshot;

/// Counts the words of a file, then queues a report about it.
#[derive(Debug, Serialize, Deserialize)]
struct CountWords {
    path: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
struct Counted {
    words: usize,
    /// The report job this count queued.
    report: JobId,
}

impl Job for CountWords {
    const KIND: &'static str = "count-words";
    type Output = Counted;

    async fn run(self, ctx: JobContext) -> Result<Counted, JobError> {
        let text = tokio::fs::read_to_string(&self.path).await?;
        let words = text.split_whitespace().count();
        // A job can push jobs; the key makes a rerun of this attempt (a
        // crash after the push) push nothing new.
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned());
        let report = Report { name: name.unwrap_or_default(), words };
        let report = ctx.queue().push(report).key(format!("report-{}", ctx.id())).await?;
        Ok(Counted { words, report: report.id })
    }
}

/// Says what a count found (its output is a plain string).
#[derive(Debug, Serialize, Deserialize)]
struct Report {
    name: String,
    words: usize,
}

impl Job for Report {
    const KIND: &'static str = "report";
    type Output = String;

    async fn run(self, _ctx: JobContext) -> Result<String, JobError> {
        Ok(format!("{} has {} words", self.name, self.words))
    }
}

/// Long work that watches for the runner asking it to stop.
#[derive(Debug, Serialize, Deserialize)]
struct Crunch {
    seconds: u64,
}

impl Job for Crunch {
    const KIND: &'static str = "crunch";
    type Output = ();

    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(self.seconds)) => Ok(()),
            why = ctx.stopped() => Err(JobError::new(format!("stopped early ({why:?})"))),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let dir = tempfile::tempdir()?;
    let queue = Queue::open(dir.path().join("queue.db"))?;

    // The worker: two jobs at once, until `stop` is sent.
    let (stop, stopped) = oneshot::channel::<()>();
    let worker = Worker::new(&queue)
        .handle::<CountWords>()
        .handle::<Report>()
        .handle::<Crunch>()
        .configure(|config| config.slots = 2)
        .on_event(|event: RunnerEvent| println!("runner: {event}"))
        .follow(async {
            let _ = stopped.await;
        });
    let worker = tokio::spawn(worker);

    // The program's own work: files to count, and a long crunch.
    let crunch = queue.push(Crunch { seconds: 3600 }).await?;
    let mut counts = Vec::new();
    for (name, text) in [("a.txt", "one two three"), ("b.txt", "the quick brown fox jumps")] {
        let path = dir.path().join(name);
        std::fs::write(&path, text)?;
        counts.push(queue.push(CountWords { path }).await?.id);
    }
    let waited = queue.wait(&counts, Some(Duration::from_secs(30))).await?;
    if !waited.all_done() {
        return Err(format!("the counts did not finish: {:?}", waited.end).into());
    }
    let mut reports = Vec::new();
    for id in counts {
        let counted = queue.output::<CountWords>(id).await?.ok_or("no output")?;
        println!("#{id} counted {} words; report is #{}", counted.words, counted.report);
        reports.push(counted.report);
    }
    let waited = queue.wait(&reports, Some(Duration::from_secs(30))).await?;
    for waited in &waited.jobs {
        let job = queue.get(waited.id).await?;
        println!("#{} {}: {}", job.id, job.state, job.result.as_deref().unwrap_or(""));
    }

    // Cancel the crunch: the runner asks it to stop, it does.
    queue.store().cancel(crunch.id, queue.clock().now()).await?;
    let waited = queue.wait(&[crunch.id], Some(Duration::from_secs(30))).await?;
    for waited in &waited.jobs {
        let job = queue.get(waited.id).await?;
        println!("#{} {}: {}", job.id, job.state, job.last_error.as_deref().unwrap_or(""));
    }

    let _ = stop.send(());
    let summary = worker.await??;
    println!("worker stopped: {} done, {} cancelled", summary.done, summary.cancelled);
    if summary.done != 4 {
        return Err(format!("expected 4 jobs done, got {summary:?}").into());
    }
    Ok(())
}
