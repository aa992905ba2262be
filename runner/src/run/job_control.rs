//! Ctrl-Z for a runner that handles SIGTSTP ([`Runner::job_control`]):
//! one task owns the [`Suspension`]; on `Suspend` it stops the running
//! attempt's processes (all of them, through its [`Containment`]), stops the
//! runner itself, and on being continued continues them. The time the
//! runner was stopped is added up, so that a max runtime (counted on the
//! monotonic clock, which runs on while stopped) excludes it.
//!
//! [`Runner::job_control`]: crate::Runner::job_control

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::contain::Containment;
use crate::signal::{JobControl, Suspension, suspend_self};

/// What the job-control task and the attempt share.
#[derive(Debug, Default)]
pub(crate) struct Suspended {
    /// The running attempt's processes, while one runs.
    current: Mutex<Option<Arc<Containment>>>,
    /// How long the runner has been stopped in all, so far.
    total: Mutex<Duration>,
}

impl Suspended {
    /// Sets (or with `None` clears) the running attempt.
    pub(crate) fn set_current(&self, c: Option<Arc<Containment>>) {
        if let Ok(mut cur) = self.current.lock() {
            *cur = c;
        }
    }

    /// How long the runner has been stopped in all, so far.
    pub(crate) fn total(&self) -> Duration {
        self.total.lock().map_or(Duration::ZERO, |t| *t)
    }

    fn current(&self) -> Option<Arc<Containment>> {
        self.current.lock().ok().and_then(|c| c.clone())
    }

    fn add(&self, d: Duration) {
        if let Ok(mut t) = self.total.lock() {
            *t += d;
        }
    }
}

/// Spawns the task that answers `suspension` for the run's life.
pub(crate) fn spawn(
    mut suspension: Suspension,
    shared: Arc<Suspended>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match suspension.next().await {
                JobControl::Suspend => {
                    let job = shared.current();
                    if let Some(c) = &job {
                        c.suspend();
                    }
                    let stopped_at = Instant::now();
                    // Returns once the runner is continued (`fg`, `bg`, CONT).
                    let _ = suspend_self();
                    shared.add(stopped_at.elapsed());
                    if let Some(c) = &job {
                        c.resume();
                    }
                }
                JobControl::Resume => {
                    if let Some(c) = shared.current() {
                        c.resume();
                    }
                }
            }
        }
    })
}
