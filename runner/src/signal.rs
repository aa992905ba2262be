//! Asking a runner to stop: a counted shutdown signal.
//!
//! The first request stops the running job's group gracefully (TERM, grace,
//! KILL) and hands the job back; a second one skips the grace. So the signal
//! is a counter, not a flag.

use std::sync::Arc;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::error::RunnerError;

/// The receiving side: the runner watches it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ShutdownSignal {
    rx: watch::Receiver<u32>,
}

/// The sending side: each [`trigger`](ShutdownTrigger::trigger) counts as
/// one request (like one Ctrl-C).
#[derive(Clone, Debug)]
pub struct ShutdownTrigger {
    tx: Arc<watch::Sender<u32>>,
}

impl ShutdownTrigger {
    /// Requests a shutdown; a second call asks for it at once.
    pub fn trigger(&self) {
        self.tx.send_modify(|n| *n = n.saturating_add(1));
    }
}

impl ShutdownSignal {
    /// A connected trigger and signal, for embedding and tests.
    pub fn new() -> (ShutdownTrigger, ShutdownSignal) {
        let (tx, rx) = watch::channel(0);
        (ShutdownTrigger { tx: Arc::new(tx) }, ShutdownSignal { rx })
    }

    /// A signal that never fires (the runner stops only on its own).
    pub fn never() -> ShutdownSignal {
        let (_trigger, signal) = ShutdownSignal::new();
        signal
    }

    /// How many times shutdown was requested so far.
    pub fn count(&self) -> u32 {
        *self.rx.borrow()
    }

    /// Whether shutdown was requested at least once.
    pub fn is_requested(&self) -> bool {
        self.count() > 0
    }

    /// Resolves once shutdown has been requested at least `n` times; never
    /// when the trigger is gone without reaching `n`.
    pub async fn reached(&mut self, n: u32) {
        if self.rx.wait_for(|c| *c >= n).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves once shutdown has been requested.
    pub async fn requested(&mut self) {
        self.reached(1).await;
    }
}

/// Listens for SIGTERM and SIGINT; each one counts as a shutdown request.
///
/// Installing a handler replaces the disposition the process inherited, so
/// this works also when a supervisor or `nohup`-style launcher started the
/// runner with SIGINT or SIGTERM ignored (a plain background `&` job ignores
/// SIGINT). Must be called inside a tokio runtime; the handlers are in place
/// when it returns.
pub fn unix_signals() -> Result<ShutdownSignal, RunnerError> {
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| RunnerError::io("cannot listen for SIGTERM", e))?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| RunnerError::io("cannot listen for SIGINT", e))?;
    let (trigger, shutdown) = ShutdownSignal::new();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                got = term.recv() => if got.is_none() { break },
                got = int.recv() => if got.is_none() { break },
                () = trigger.tx.closed() => break,
            }
            trigger.trigger();
        }
    });
    Ok(shutdown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_requests() {
        let (trigger, mut signal) = ShutdownSignal::new();
        assert!(!signal.is_requested());
        trigger.trigger();
        signal.requested().await;
        trigger.trigger();
        signal.reached(2).await;
        assert_eq!(signal.count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn never_never_fires() {
        let mut signal = ShutdownSignal::never();
        let waited =
            tokio::time::timeout(std::time::Duration::from_secs(3600), signal.requested()).await;
        assert!(waited.is_err());
    }
}
