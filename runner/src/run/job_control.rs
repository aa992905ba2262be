//! Ctrl-Z for a runner that handles SIGTSTP ([`Runner::job_control`]):
//! one task owns the [`Suspension`]; on `Suspend` it stops every running
//! attempt's processes (all of them, through each one's [`Containment`]),
//! stops the runner itself, and on being continued continues them. The
//! time the runner was stopped is added up, so that a max runtime (counted
//! on the monotonic clock, which runs on while stopped) excludes it.
//!
//! Also the per-attempt [`PauseClock`] of `--suspend-when-gated`, and the
//! flag that keeps a Ctrl-Z's continue from continuing attempts a closed
//! gate keeps stopped.
//!
//! [`Runner::job_control`]: crate::Runner::job_control

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::contain::Containment;
use crate::signal::{JobControl, Suspension, suspend_self};

/// What the job-control task and the attempts share.
#[derive(Debug, Default)]
pub(crate) struct Suspended {
    /// The running attempts' processes.
    current: Mutex<Vec<Arc<Containment>>>,
    /// How long the runner has been stopped in all, so far.
    total: Mutex<Duration>,
    /// A closed gate keeps the attempts stopped (`--suspend-when-gated`):
    /// continuing the runner must not continue them.
    gated: AtomicBool,
}

impl Suspended {
    /// Adds a running attempt.
    pub(crate) fn add(&self, c: Arc<Containment>) {
        if let Ok(mut cur) = self.current.lock() {
            cur.push(c);
        }
    }

    /// Removes an attempt that ended.
    pub(crate) fn remove(&self, c: &Arc<Containment>) {
        if let Ok(mut cur) = self.current.lock() {
            cur.retain(|x| !Arc::ptr_eq(x, c));
        }
    }

    /// How long the runner has been stopped in all, so far.
    pub(crate) fn total(&self) -> Duration {
        self.total.lock().map_or(Duration::ZERO, |t| *t)
    }

    /// Says whether a closed gate keeps the attempts stopped.
    pub(crate) fn set_gated(&self, gated: bool) {
        self.gated.store(gated, Ordering::SeqCst);
    }

    fn current(&self) -> Vec<Arc<Containment>> {
        self.current.lock().map(|c| c.clone()).unwrap_or_default()
    }

    fn resume_unless_gated(&self, jobs: &[Arc<Containment>]) {
        if !self.gated.load(Ordering::SeqCst) {
            for c in jobs {
                c.resume();
            }
        }
    }

    fn add_time(&self, d: Duration) {
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
                    let jobs = shared.current();
                    for c in &jobs {
                        c.suspend();
                    }
                    let stopped_at = Instant::now();
                    // Returns once the runner is continued (`fg`, `bg`, CONT).
                    let _ = suspend_self();
                    shared.add_time(stopped_at.elapsed());
                    shared.resume_unless_gated(&jobs);
                }
                JobControl::Resume => shared.resume_unless_gated(&shared.current()),
            }
        }
    })
}

/// One attempt's time stopped by `--suspend-when-gated`, so far: its max
/// runtime counts only the time it ran.
#[derive(Debug, Default)]
pub(crate) struct PauseClock {
    /// (since when it is stopped, if it is; the stopped time before).
    state: Mutex<(Option<Instant>, Duration)>,
}

impl PauseClock {
    /// It is stopped from `now`.
    pub(crate) fn stop(&self, now: Instant) {
        if let Ok(mut s) = self.state.lock() {
            s.0.get_or_insert(now);
        }
    }

    /// It runs again from `now`; returns how long it was stopped this time.
    pub(crate) fn go(&self, now: Instant) -> Duration {
        let Ok(mut s) = self.state.lock() else { return Duration::ZERO };
        let Some(since) = s.0.take() else { return Duration::ZERO };
        let this_time = now.saturating_duration_since(since);
        s.1 += this_time;
        this_time
    }

    /// The stopped time up to `now`, the current stop included.
    pub(crate) fn total(&self, now: Instant) -> Duration {
        self.state.lock().map_or(Duration::ZERO, |s| {
            s.1 + s.0.map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
        })
    }
}
