//! Runs slothqueue jobs, politely and safely: one at a time, or up to
//! [`RunnerConfig::slots`] at once.
//!
//! The [`Runner`] loop is: pick (is anything due?) → gates (is the machine
//! quiet enough?) → claim → execute with heartbeats → record → cooldown,
//! each attempt a task of its own beside the loop; what the loop does next
//! is a pure decision from what it knows (`run/decide.rs`). A claim that
//! takes nothing because a queue's lane is paused or full is explained
//! from the queues report and waited on like a gate.
//! Around it sit the pieces that make a job queue on one machine
//! trustworthy:
//!
//! - **Process groups.** Every command runs as the leader of its own group,
//!   and every stop (max runtime, cancel, lost lease, shutdown) signals the
//!   whole group — TERM, a grace period, then KILL — so no grandchild
//!   survives its job.
//! - **Owners that can be judged.** A runner's [`Owner`](slothqueue_core::Owner)
//!   records host, boot id, pid and process start time, and [`ProcJudge`]
//!   reads `/proc` to tell a slow owner (alive, never robbed) from a dead
//!   one (its job is reclaimed at once, its orphaned group killed first).
//! - **Signals.** SIGTERM and SIGINT, also when inherited as ignored, stop the
//!   running jobs' groups and hand the jobs back without charging the attempts
//!   ([`unix_signals`]).
//! - **Gates.** Load average, CPU pressure and AC power, each reading
//!   reported while the runner waits ([`gate`]).
//! - **Waiting on jobs.** [`wait::wait`] blocks until jobs (or a whole
//!   queue) are finished, woken by the queue file's change notifications
//!   ([`QueueWatch`]) whichever process ran them, with a long fallback poll.
//!
//! The library never prints: everything a user should see arrives as a
//! [`RunnerEvent`] through a [`Reporter`], whose `Display` is the exact line
//! the CLI shows. Time is injected: wall time through the
//! [`Clock`](slothqueue_core::Clock) in [`RunnerConfig`], awake time
//! (max runtime, heartbeats, gate intervals) through tokio's timers, so tests
//! can pause it. Follow mode's idle wait is the one exception: a kernel
//! timer, one wake-up per poll where tokio's wheel took three.
//!
//! ```no_run
//! # use std::{path::Path, sync::Arc, time::Duration};
//! # async fn demo(store: Arc<dyn slothqueue_core::Store>, db: &Path) -> Result<(), slothqueue_runner::RunnerError> {
//! use slothqueue_runner::{LoadGate, Runner, RunnerConfig, RunnerEvent, log_dir_for, unix_signals};
//!
//! let shutdown = unix_signals()?; // first: Ctrl-C must work from the start
//! let mut config = RunnerConfig::new(log_dir_for(db));
//! config.gates.push(Box::new(LoadGate::system(Some(25.0))));
//! config.cooldown = Duration::from_secs(1);
//! let runner = Runner::new(store, config); // runs `shell` jobs
//! let summary = runner
//!     .run(|event: RunnerEvent| { /* the CLI prints `event` */ }, shutdown)
//!     .await?;
//! std::process::exit(summary.exit_code().into()); // 130, 1 or 0
//! # }
//! ```

#![deny(missing_docs)]

mod config;
mod contain;
mod error;
mod event;
pub mod exec;
mod fmt;
pub mod gate;
pub mod gpu;
mod idle;
mod limits;
mod logfile;
mod logread;
mod owner;
pub mod private;
mod process;
mod run;
mod runner;
mod signal;
mod stop;
pub mod wait;
pub mod watch;

pub use config::{Mode, RunnerConfig, WATCHED_POLL};
pub use contain::{
    CeilingReport, Containment, LEASE_VAR, Mechanism, SignalSender, StopReport, SweepReport,
    lease_marker, sweep_orphan_cgroups,
};
pub use error::RunnerError;
pub use event::{
    LaneBlock, LaneHold, Reporter, RetryPlan, RunSummary, RunnerEvent, SkipReason, SkippedJob,
};
pub use exec::{
    ExecContext, ExecOutcome, Executor, HandlerDirExecutor, RefusedHandler, ShellExecutor,
    handler_fn,
};
pub use fmt::{format_duration, format_timestamp};
pub use gate::{AcPowerGate, Gate, GateReading, LoadGate, LoadProbe, PressureGate};
pub use logfile::{log_dir_for, log_file_name, log_path, remove_logs};
pub use logread::{LogPiece, read_log_piece};
pub use owner::{ProcJudge, this_process_owner};
pub use process::group::group_members;
pub use runner::Runner;
pub use signal::{
    JobControl, SHUTDOWN_SIGNALS, ShutdownRequest, ShutdownSignal, ShutdownTrigger, SignalSet,
    Suspension, SuspensionTrigger, UnixSignals, inherited_ignores, suspend_self, unix_signals,
    unix_signals_with,
};
pub use stop::{StopListener, StopReason, StopRequest};
pub use wait::{WaitEnd, WaitOutcome, WaitTarget, Waited};
pub use watch::QueueWatch;
