//! What the runner tells its user, one line per event.
//!
//! The library never prints; the CLI prints each event's `Display`, which is
//! exactly the line users see (see the seed transcript). Keeping the words
//! here, next to the data, means every front end says the same thing.

use std::fmt;
use std::time::Duration;

use slothqueue_core::JobId;
use slothqueue_core::schedule::{self, Tick, TickOutcome};

use crate::fmt::format_duration;

/// When a failed job will run again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPlan {
    /// The attempt that just failed (1-based).
    pub attempt: u32,
    /// The most attempts the job may have.
    pub max_attempts: u32,
    /// How long until it is due again.
    pub delay: Duration,
}

/// One thing the runner did or saw.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RunnerEvent {
    /// Schedules' ticks were decided: jobs enqueued, ticks skipped over an
    /// unfinished job, late slots dropped.
    Ticks {
        /// What each tick did.
        ticks: Vec<Tick>,
    },
    /// Jobs of dead owners went back to pending (their orphaned process
    /// groups killed first).
    Reclaimed {
        /// The jobs, by id.
        jobs: Vec<JobId>,
        /// `(job, pgid)` of every orphaned group that was killed.
        killed_groups: Vec<(JobId, i32)>,
    },
    /// A gate holds; the runner waits `wait` and checks again.
    Gated {
        /// The gate's reading, e.g. `load 26.59 >= ceiling 25.00`.
        reading: String,
        /// The wait before the next check.
        wait: Duration,
    },
    /// Jobs that need GPUs wait for them: said once, and again when what
    /// the runner sees changes (`crate::gpu::wait_line`).
    GpuWait {
        /// The line.
        line: String,
    },
    /// A gate that held has opened; the job starts.
    GateOpened {
        /// The reading, e.g. `load 24.42 < ceiling 25.00`.
        reading: String,
    },
    /// A job completed.
    Done {
        /// The job.
        job: JobId,
        /// How long the attempt took (awake time).
        elapsed: Duration,
    },
    /// An attempt failed.
    Failed {
        /// The job.
        job: JobId,
        /// How long the attempt took.
        elapsed: Duration,
        /// The short reason: `exit code 3`, or the error; a permanent
        /// failure's ends with `; permanent failure, not retried`.
        reason: String,
        /// Set when the job will be tried again.
        retry: Option<RetryPlan>,
    },
    /// A job was cancelled while it ran; its process group was killed.
    Cancelled {
        /// The job.
        job: JobId,
        /// How long it ran.
        elapsed: Duration,
    },
    /// Another owner took the job (or it ended) while it ran here: it was
    /// killed and not recorded as completed.
    LeaseLost {
        /// The job.
        job: JobId,
        /// How long it ran.
        elapsed: Duration,
    },
    /// No renewal of the job's lease reached the store for `silent` (the
    /// runner is cut off from the queue): its processes are being stopped
    /// (TERM, KILL after `grace`) before the lease can run out and another
    /// runner take the job. The attempt is recorded as failed once the
    /// store answers again, or reported lost if the job moved on.
    Fenced {
        /// The job.
        job: JobId,
        /// Since the last renewal that the store answered was sent.
        silent: Duration,
        /// TERM to KILL in this stop (shorter than the kill grace when the
        /// lease leaves no room for it).
        grace: Duration,
    },
    /// The runner was told to stop: the job was killed and handed back to
    /// pending without charging the attempt.
    Released {
        /// The job.
        job: JobId,
        /// How long it ran.
        elapsed: Duration,
    },
    /// A shutdown was requested while a job ran: its group gets TERM now
    /// and KILL after `grace`, unless another request comes first.
    ShuttingDown {
        /// The running job.
        job: JobId,
        /// Time between TERM and KILL.
        grace: Duration,
    },
    /// Something went wrong that the runner survives (a busy queue file, a
    /// failing `--on-finish`, a missed heartbeat).
    Warning {
        /// What happened, in one line.
        message: String,
    },
    /// Due jobs wait because their lanes hold them: paused, or at their
    /// limit (`parallel`). Reported at every check while it lasts, like a
    /// gate: `queue backups paused — 3 due jobs waiting`.
    LanesWaiting {
        /// Each lane holding due jobs, by name (every queue first).
        lanes: Vec<LaneBlock>,
    },
    /// A gate closed while jobs ran (`--suspend-when-gated`): their
    /// processes were stopped (SIGSTOP); their leases are kept.
    Suspended {
        /// The jobs, oldest start first.
        jobs: Vec<JobId>,
        /// The reading that closed the gate.
        reading: String,
    },
    /// The gates opened again: the suspended jobs' processes were
    /// continued (SIGCONT). The stopped time does not count against their
    /// max runtime.
    Resumed {
        /// The jobs, oldest start first.
        jobs: Vec<JobId>,
        /// How long they were stopped.
        after: Duration,
    },
    /// A job started with a limit it asked for (or its runner's default)
    /// not in force: it runs anyway, without it.
    LimitNotEnforced {
        /// The job.
        job: JobId,
        /// The limit, e.g. `memory-max 50 MiB`.
        limit: String,
        /// Why, e.g. `no delegated cgroup`.
        why: String,
    },
    /// A drain is ending with due jobs this runner does not take.
    Skipped {
        /// The jobs, in claim order, with why each was passed over.
        jobs: Vec<SkippedJob>,
    },
    /// The run ended.
    Finished(RunSummary),
}

/// A due job a runner passed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedJob {
    /// The job.
    pub job: JobId,
    /// Why.
    pub reason: SkipReason,
}

/// Why a runner passes over a due job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The runner has no executor for the job's kind (no handler file).
    NoHandler {
        /// The kind.
        kind: String,
    },
    /// The job's queue is not among the runner's `--queue`s.
    QueueNotServed {
        /// The queue.
        queue: String,
    },
    /// The job's queue is paused (by itself or with every queue): a drain
    /// does not wait for a `resume`.
    Paused {
        /// The queue.
        queue: String,
    },
}

/// One lane holding due jobs back, as [`RunnerEvent::LanesWaiting`] says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneBlock {
    /// The queue; `None` for every queue at once (`pause` without
    /// `--queue`).
    pub queue: Option<String>,
    /// Why it holds them.
    pub hold: LaneHold,
    /// How many due jobs it holds.
    pub due: u64,
}

/// Why a lane holds its due jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneHold {
    /// It is paused; it opens on `resume`.
    Paused,
    /// It is at its limit; it opens when one of its jobs ends.
    Full {
        /// Its jobs running now (on every runner).
        running: u64,
        /// Its limit.
        limit: u32,
    },
}

impl fmt::Display for LaneBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.queue {
            None => f.write_str("every queue")?,
            Some(q) => write!(f, "queue {q}")?,
        }
        match self.hold {
            LaneHold::Paused => f.write_str(" paused")?,
            LaneHold::Full { running, limit } => write!(f, " full: {running} of {limit} running")?,
        }
        let jobs = if self.due == 1 { "job" } else { "jobs" };
        write!(f, " — {} due {jobs} waiting", self.due)
    }
}

/// `#3, #4`.
fn ids(jobs: &[JobId]) -> String {
    jobs.iter().map(|id| format!("#{id}")).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The words every presenter uses for it (`core::serving`).
            SkipReason::NoHandler { kind } => {
                let words = slothqueue_core::Coverage::NoHandler { kind: kind.clone() };
                fmt::Display::fmt(&words, f)
            }
            SkipReason::QueueNotServed { queue } => write!(f, "queue `{queue}` not served"),
            SkipReason::Paused { queue } => write!(f, "queue `{queue}` paused"),
        }
    }
}

impl RunnerEvent {
    /// Warnings belong on stderr; everything else on stdout.
    pub fn is_warning(&self) -> bool {
        matches!(self, RunnerEvent::Warning { .. })
    }
}

impl fmt::Display for RunnerEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunnerEvent::Ticks { ticks } => {
                let each: Vec<String> = ticks.iter().map(tick_line).collect();
                f.write_str(&each.join("; "))
            }
            RunnerEvent::Skipped { jobs } => {
                let each: Vec<String> =
                    jobs.iter().map(|s| format!("#{} ({})", s.job, s.reason)).collect();
                write!(
                    f,
                    "skipped {} due job(s) this runner cannot run: {}",
                    jobs.len(),
                    each.join(", ")
                )
            }
            RunnerEvent::Reclaimed { jobs, .. } => {
                let ids: Vec<String> = jobs.iter().map(|id| format!("#{id}")).collect();
                write!(f, "reclaimed {} stale job(s): {}", jobs.len(), ids.join(", "))
            }
            RunnerEvent::Gated { reading, wait } => {
                write!(f, "{reading} — waiting {}", format_duration(*wait))
            }
            RunnerEvent::GateOpened { reading } => write!(f, "{reading} — starting"),
            RunnerEvent::GpuWait { line } => f.write_str(line),
            RunnerEvent::LanesWaiting { lanes } => {
                let each: Vec<String> = lanes.iter().map(ToString::to_string).collect();
                f.write_str(&each.join("; "))
            }
            RunnerEvent::Suspended { jobs, reading } => {
                write!(f, "suspended {}: {reading}", ids(jobs))
            }
            RunnerEvent::Resumed { jobs, after } => {
                // Whole seconds past one: `12s`, not `12.034s`.
                let after = if *after < Duration::from_secs(1) {
                    *after
                } else {
                    Duration::from_secs(after.as_secs_f64().round() as u64)
                };
                write!(f, "resumed {} after {}", ids(jobs), format_duration(after))
            }
            RunnerEvent::Done { job, elapsed } => {
                write!(f, "job #{job} done in {:.2}s", elapsed.as_secs_f64())
            }
            RunnerEvent::Failed { job, elapsed, reason, retry: None } => {
                write!(f, "job #{job} FAILED in {:.2}s ({reason})", elapsed.as_secs_f64())
            }
            RunnerEvent::Failed { job, elapsed, reason, retry: Some(r) } => write!(
                f,
                "job #{job} failed in {:.2}s ({reason}) — retry {}/{} in {}",
                elapsed.as_secs_f64(),
                r.attempt,
                r.max_attempts,
                format_duration(r.delay)
            ),
            RunnerEvent::Cancelled { job, elapsed } => {
                write!(f, "job #{job} cancelled in {:.2}s", elapsed.as_secs_f64())
            }
            RunnerEvent::LeaseLost { job, elapsed } => write!(
                f,
                "job #{job} lost its lease after {:.1}s — killed, not completed",
                elapsed.as_secs_f64()
            ),
            RunnerEvent::Fenced { job, silent, grace } => write!(
                f,
                "job #{job}: no lease renewal got through for {:.1}s — stopping it before its \
                 lease runs out (KILL in {}); recorded when the queue answers again",
                silent.as_secs_f64(),
                format_duration(*grace)
            ),
            RunnerEvent::Released { job, elapsed } => write!(
                f,
                "job #{job} interrupted after {:.2}s — returned to pending",
                elapsed.as_secs_f64()
            ),
            RunnerEvent::ShuttingDown { job, grace } => write!(
                f,
                "shutting down: stopping job #{job} (KILL in {}; signal again to kill now)",
                format_duration(*grace)
            ),
            RunnerEvent::Warning { message } => write!(f, "warning: {message}"),
            RunnerEvent::LimitNotEnforced { job, limit, why } => {
                write!(f, "#{job}: {limit} not enforced: {why}")
            }
            RunnerEvent::Finished(s) => {
                let word = if s.interrupted { "interrupted" } else { "finished" };
                write!(f, "{word}: {} done, {} failed", s.done, s.failed)?;
                if s.cancelled > 0 {
                    write!(f, ", {} cancelled", s.cancelled)?;
                }
                if s.lost > 0 {
                    write!(f, ", {} lost", s.lost)?;
                }
                Ok(())
            }
        }
    }
}

/// One tick as a run line: `schedule nightly, slot 2026-12-02T02:00:00Z:
/// queued job #12 (3 missed slots passed over)`.
fn tick_line(t: &Tick) -> String {
    let slot = schedule::tick_key("", t.slot);
    let slot = slot.trim_start_matches('@');
    let what = match &t.outcome {
        TickOutcome::Enqueued { job, created: true } => format!("queued job #{job}"),
        TickOutcome::Enqueued { job, created: false } => format!("job #{job} already queued"),
        TickOutcome::Skipped { unfinished, .. } => {
            format!("skipped: its last job #{unfinished} is unfinished")
        }
        // The count includes the late slot itself.
        TickOutcome::Dropped => {
            let n = t.missed;
            let s = if n == 1 { "" } else { "s" };
            return format!(
                "schedule {}, slot {slot}: late; {n} missed slot{s} not run (catch-up none)",
                t.key
            );
        }
    };
    let missed = match t.missed {
        0 => String::new(),
        1 => " (1 missed slot passed over)".to_owned(),
        n => format!(" ({n} missed slots passed over)"),
    };
    format!("schedule {}, slot {slot}: {what}{missed}", t.key)
}

/// What a run did. Failed counts attempts, not jobs: a job that failed
/// twice and then succeeded counts two failed and one done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Jobs completed.
    pub done: u32,
    /// Attempts that failed (including timeouts), retried or not.
    pub failed: u32,
    /// Jobs cancelled while running.
    pub cancelled: u32,
    /// Attempts whose lease was lost (killed, not completed).
    pub lost: u32,
    /// Jobs handed back to pending by a shutdown.
    pub released: u32,
    /// The run ended because of a shutdown request.
    pub interrupted: bool,
}

impl RunSummary {
    /// The process exit code the CLI uses: 130 when interrupted, 1 when any
    /// attempt failed or lost its lease, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.interrupted {
            130
        } else if self.failed > 0 || self.lost > 0 {
            1
        } else {
            0
        }
    }
}

/// Where the runner's events go. The CLI prints them; tests collect them.
///
/// Implemented for closures `Fn(RunnerEvent)` and for an unbounded tokio
/// channel sender (a closed channel drops events: the runner must not stop
/// working because nobody listens).
pub trait Reporter: Send + Sync {
    /// Takes one event. Must not block for long: the runner calls it inline.
    fn report(&self, event: RunnerEvent);
}

impl<F: Fn(RunnerEvent) + Send + Sync> Reporter for F {
    fn report(&self, event: RunnerEvent) {
        self(event)
    }
}

impl Reporter for tokio::sync::mpsc::UnboundedSender<RunnerEvent> {
    fn report(&self, event: RunnerEvent) {
        let _ = self.send(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn lines_match_the_transcript() {
        let cases = [
            (
                RunnerEvent::Gated {
                    reading: "load 26.59 >= ceiling 25.00".into(),
                    wait: ms(1000),
                },
                "load 26.59 >= ceiling 25.00 — waiting 1s",
            ),
            (
                RunnerEvent::GateOpened { reading: "load 24.42 < ceiling 25.00".into() },
                "load 24.42 < ceiling 25.00 — starting",
            ),
            (RunnerEvent::Done { job: 2, elapsed: ms(50) }, "job #2 done in 0.05s"),
            (
                RunnerEvent::LanesWaiting {
                    lanes: vec![LaneBlock {
                        queue: Some("backups".into()),
                        hold: LaneHold::Paused,
                        due: 3,
                    }],
                },
                "queue backups paused — 3 due jobs waiting",
            ),
            (
                RunnerEvent::LanesWaiting {
                    lanes: vec![
                        LaneBlock { queue: Some("backups".into()), hold: LaneHold::Paused, due: 1 },
                        LaneBlock {
                            queue: Some("disk".into()),
                            hold: LaneHold::Full { running: 2, limit: 2 },
                            due: 5,
                        },
                    ],
                },
                "queue backups paused — 1 due job waiting; \
                 queue disk full: 2 of 2 running — 5 due jobs waiting",
            ),
            (
                RunnerEvent::LanesWaiting {
                    lanes: vec![LaneBlock { queue: None, hold: LaneHold::Paused, due: 4 }],
                },
                "every queue paused — 4 due jobs waiting",
            ),
            (
                RunnerEvent::Suspended {
                    jobs: vec![3, 4],
                    reading: "load 3.20 >= ceiling 1.50".into(),
                },
                "suspended #3, #4: load 3.20 >= ceiling 1.50",
            ),
            (RunnerEvent::Resumed { jobs: vec![3], after: ms(12_000) }, "resumed #3 after 12s"),
            (
                RunnerEvent::Skipped {
                    jobs: vec![SkippedJob {
                        job: 7,
                        reason: SkipReason::Paused { queue: "backups".into() },
                    }],
                },
                "skipped 1 due job(s) this runner cannot run: #7 (queue `backups` paused)",
            ),
            (
                RunnerEvent::Failed {
                    job: 3,
                    elapsed: ms(70),
                    reason: "exit code 3".into(),
                    retry: None,
                },
                "job #3 FAILED in 0.07s (exit code 3)",
            ),
            (
                RunnerEvent::Failed {
                    job: 3,
                    elapsed: ms(70),
                    reason: "exit code 1".into(),
                    retry: Some(RetryPlan { attempt: 1, max_attempts: 3, delay: ms(2000) }),
                },
                "job #3 failed in 0.07s (exit code 1) — retry 1/3 in 2s",
            ),
            (
                RunnerEvent::Failed {
                    job: 1,
                    elapsed: ms(2040),
                    reason: "timeout: exceeded max runtime of 2s (process group killed)".into(),
                    retry: None,
                },
                "job #1 FAILED in 2.04s (timeout: exceeded max runtime of 2s (process group killed))",
            ),
            (RunnerEvent::Cancelled { job: 5, elapsed: ms(1200) }, "job #5 cancelled in 1.20s"),
            (
                RunnerEvent::LimitNotEnforced {
                    job: 3,
                    limit: "memory-max 50 MiB".into(),
                    why: "no delegated cgroup".into(),
                },
                "#3: memory-max 50 MiB not enforced: no delegated cgroup",
            ),
            (
                RunnerEvent::LeaseLost { job: 6, elapsed: ms(3100) },
                "job #6 lost its lease after 3.1s — killed, not completed",
            ),
            (
                RunnerEvent::Fenced { job: 6, silent: ms(56_600), grace: ms(2000) },
                "job #6: no lease renewal got through for 56.6s — stopping it before its lease \
                 runs out (KILL in 2s); recorded when the queue answers again",
            ),
            (
                RunnerEvent::Reclaimed { jobs: vec![4], killed_groups: vec![] },
                "reclaimed 1 stale job(s): #4",
            ),
            (
                RunnerEvent::Reclaimed { jobs: vec![4, 7], killed_groups: vec![(4, 99)] },
                "reclaimed 2 stale job(s): #4, #7",
            ),
            (
                RunnerEvent::Finished(RunSummary { done: 1, failed: 2, ..RunSummary::default() }),
                "finished: 1 done, 2 failed",
            ),
        ];
        for (event, line) in cases {
            assert_eq!(event.to_string(), line);
        }
    }

    #[test]
    fn closures_and_channels_are_reporters() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tx.report(RunnerEvent::Done { job: 1, elapsed: ms(1) });
        assert!(rx.try_recv().is_ok());
        let seen = std::sync::Mutex::new(Vec::new());
        let f = |e: RunnerEvent| seen.lock().unwrap().push(e.to_string());
        f.report(RunnerEvent::Warning { message: "x".into() });
        assert_eq!(seen.lock().unwrap().as_slice(), ["warning: x"]);
    }
}
