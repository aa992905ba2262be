//! A typed job from start to end: define it, push a few (with a key, a
//! parent and a priority), run the queue until it is idle, print what each
//! job became. One asks for more than the image has and fails for good;
//! another was pushed by an "older build" with a payload this one no
//! longer reads, and fails saying so. Neither is retried: another attempt
//! would fail the same way.
//!
//! ```sh
//! cargo run -p slothqueue --example typed_job
//! ```
//!
//! Everything happens in a temporary folder, deleted at the end.

#![allow(clippy::print_stdout, reason = "an example says what it does")]

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use slothqueue::NewJob;
use slothqueue::typed::{Job, JobContext, JobError, Queue, RunnerEvent, Worker};

/// Resizes an "image" (a text file holding `WIDTHxHEIGHT`) to `width`,
/// keeping its aspect ratio, into `NAME-WIDTH.img` beside it.
#[derive(Debug, Serialize, Deserialize)]
struct Resize {
    path: PathBuf,
    width: u32,
}

/// What a resize made: stored as the job's result (JSON), read back typed.
#[derive(Debug, Serialize, Deserialize)]
struct Resized {
    path: PathBuf,
    width: u32,
    height: u32,
}

impl Job for Resize {
    const KIND: &'static str = "resize";
    // An error is retried after a backoff, 3 attempts in all (the queue's
    // default), unless it is permanent.
    type Output = Resized;

    async fn run(self, ctx: JobContext) -> Result<Resized, JobError> {
        let text = tokio::fs::read_to_string(&self.path).await?;
        let (w, h) = text
            .trim()
            .split_once('x')
            .and_then(|(w, h)| Some((w.parse::<u32>().ok()?, h.parse::<u32>().ok()?)))
            .ok_or_else(|| JobError::new(format!("{}: not WIDTHxHEIGHT", self.path.display())))?;
        if self.width == 0 || self.width > w {
            // The image will not grow: no point in trying again.
            return Err(JobError::new(format!(
                "cannot resize a {w} px wide image to {} px",
                self.width
            ))
            .permanent());
        }
        let height = u32::try_from(u64::from(h) * u64::from(self.width) / u64::from(w))?;
        let stem = self.path.file_stem().map(|s| s.to_string_lossy().into_owned());
        let out =
            self.path.with_file_name(format!("{}-{}.img", stem.unwrap_or_default(), self.width));
        tokio::fs::write(&out, format!("{}x{height}\n", self.width)).await?;
        println!("  (job #{} attempt {}: wrote {})", ctx.id(), ctx.attempt(), out.display());
        Ok(Resized { path: out, width: self.width, height })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let dir = tempfile::tempdir()?;
    let photo = dir.path().join("photo.img");
    std::fs::write(&photo, "4000x3000\n")?;
    let queue = Queue::open(dir.path().join("queue.db"))?;

    let large = queue.push(Resize { path: photo.clone(), width: 1024 }).key("photo-1024").await?;
    // The same job with the same key again: nothing new is written.
    let again = queue.push(Resize { path: photo.clone(), width: 1024 }).key("photo-1024").await?;
    assert_eq!((again.id, again.created), (large.id, false));
    // Runs after the large one, whatever its priority.
    let thumb =
        queue.push(Resize { path: photo.clone(), width: 64 }).after(large.id).priority(9).await?;
    let too_wide = queue.push(Resize { path: photo.clone(), width: 8000 }).await?;
    // What an older build pushed: its `Resize` called the field `size`.
    let old = NewJob::new("resize", serde_json::json!({ "path": photo, "size": 300 }));
    let old = queue.store().push(old, queue.clock().now()).await?.job.id;

    println!(
        "pushed #{}, #{} (after #{}), #{} and #{old}",
        large.id, thumb.id, large.id, too_wide.id
    );
    let summary = Worker::new(&queue)
        .handle::<Resize>()
        .on_event(|event: RunnerEvent| println!("runner: {event}"))
        .run_until_idle()
        .await?;
    println!("{} done, {} failed", summary.done, summary.failed);

    for id in [large.id, thumb.id, too_wide.id, old] {
        let job = queue.get(id).await?;
        match queue.output::<Resize>(id).await? {
            Some(out) => println!(
                "#{id} {}: {}x{} in {}",
                job.state,
                out.width,
                out.height,
                out.path.display()
            ),
            None => println!(
                "#{id} {} at attempt {} of {}: {}",
                job.state,
                job.attempts,
                job.max_attempts,
                job.last_error.unwrap_or_default()
            ),
        }
        if job.state == slothqueue::JobState::Failed && job.attempts != 1 {
            return Err(format!("#{id} was retried: {} attempts", job.attempts).into());
        }
    }
    if (summary.done, summary.failed) != (2, 2) {
        return Err(format!("expected 2 done and 2 failed, got {summary:?}").into());
    }
    Ok(())
}
