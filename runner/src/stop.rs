//! The stop protocol between the runner and whatever runs a job.
//!
//! The runner decides *that* and *why* a job stops (max runtime, cancel,
//! lost lease, shutdown) through a [`Stopper`]; an executor learns it
//! through a [`StopListener`] and decides *how* (signal a process group,
//! drop a future). One watch channel carries the request, so a late
//! listener still sees it and a request can only grow more urgent.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// How long past its kill grace an executor may take to stop before the
/// runner drops it (a KILLed group is waited for up to 5 s, its last output
/// up to 2 s).
const ABANDON_MARGIN: Duration = Duration::from_secs(10);

/// Why the runner wants a job to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The job exceeded its max runtime.
    Timeout,
    /// A user cancelled the job.
    Cancelled,
    /// Another owner took the job; its results would be refused.
    LeaseLost,
    /// The runner is shutting down; the job goes back to pending.
    Shutdown,
}

/// A request to stop the current job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StopRequest {
    /// Why.
    pub reason: StopReason,
    /// Skip the grace period: kill now (a second Ctrl-C).
    pub immediate: bool,
}

/// Tells an executor when to stop. Cheap to clone.
#[derive(Clone, Debug)]
pub struct StopListener {
    rx: watch::Receiver<Option<StopRequest>>,
}

impl StopListener {
    /// A listener nobody will ever stop.
    pub fn never() -> Self {
        let (_tx, rx) = watch::channel(None);
        StopListener { rx }
    }

    /// The request so far, if any.
    pub fn current(&self) -> Option<StopRequest> {
        *self.rx.borrow()
    }

    /// Resolves when a stop is requested (at once if it already was).
    pub async fn requested(&mut self) -> StopRequest {
        let got = self.rx.wait_for(Option::is_some).await.ok().and_then(|r| *r);
        match got {
            Some(r) => r,
            None => std::future::pending().await,
        }
    }

    /// Resolves when the stop became immediate: kill without grace.
    pub async fn immediate(&mut self) {
        if self.rx.wait_for(|r| r.is_some_and(|r| r.immediate)).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The runner's side of a stop: the first reason wins (it decides how the
/// attempt is recorded); a later request can only make it immediate. Also
/// keeps the time by which an executor that was asked must have stopped.
pub(crate) struct Stopper {
    tx: watch::Sender<Option<StopRequest>>,
    request: Option<StopRequest>,
    abandon_at: Option<Instant>,
    grace: Duration,
}

impl Stopper {
    /// A stopper and the listener it speaks to; a graceful stop leaves the
    /// executor `grace` (plus a margin) before it is abandoned.
    pub(crate) fn new(grace: Duration) -> (Stopper, StopListener) {
        let (tx, rx) = watch::channel(None);
        (Stopper { tx, request: None, abandon_at: None, grace }, StopListener { rx })
    }

    /// Asks for a stop (see the type's doc for which request wins).
    pub(crate) fn stop(&mut self, reason: StopReason, immediate: bool) {
        let req = match self.request {
            Some(r) if r.immediate || !immediate => return,
            Some(r) => StopRequest { immediate: true, ..r },
            None => StopRequest { reason, immediate },
        };
        self.request = Some(req);
        self.tx.send_replace(Some(req));
        let by =
            Instant::now() + if immediate { Duration::ZERO } else { self.grace } + ABANDON_MARGIN;
        self.abandon_at = Some(self.abandon_at.map_or(by, |a| a.min(by)));
    }

    /// Whether a stop was asked for.
    pub(crate) fn is_stopping(&self) -> bool {
        self.request.is_some()
    }

    /// Why the first stop was asked for, if one was.
    pub(crate) fn reason(&self) -> Option<StopReason> {
        self.request.map(|r| r.reason)
    }

    /// When the executor is given up on, once a stop was asked for.
    pub(crate) fn abandon_at(&self) -> Option<Instant> {
        self.abandon_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_first_reason_wins_and_only_urgency_grows() {
        let (mut stopper, listener) = Stopper::new(Duration::from_secs(2));
        assert!(!stopper.is_stopping());
        stopper.stop(StopReason::Timeout, false);
        stopper.stop(StopReason::Shutdown, false);
        assert_eq!(
            listener.current(),
            Some(StopRequest { reason: StopReason::Timeout, immediate: false })
        );
        let graceful = stopper.abandon_at().unwrap();
        stopper.stop(StopReason::Shutdown, true);
        assert_eq!(
            listener.current(),
            Some(StopRequest { reason: StopReason::Timeout, immediate: true })
        );
        assert_eq!(stopper.reason(), Some(StopReason::Timeout));
        assert!(
            stopper.abandon_at().unwrap() < graceful,
            "an immediate stop is given up on sooner"
        );
    }
}
