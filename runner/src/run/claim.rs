//! The loop's claim: the best due job this runner may run, started at
//! once; and, when the claim looked at the GPUs and handed none out, the
//! GPU wait it reveals, said once per change ([`RunnerEvent::GpuWait`]).

use tokio::time::Instant;

use super::heartbeat::Taken;
use super::worker::Retried;
use super::{ClaimState, Run};
use crate::error::RunnerError;
use crate::event::RunnerEvent;

impl Run {
    /// Claim: the best due job this runner may run, started at once.
    pub(super) async fn claim(&mut self) -> Result<(), RunnerError> {
        let request = self.w.claim_request();
        let store = self.w.store.clone();
        let clock = self.w.cfg.clock.clone();
        // The lease is dated no earlier than this (a retried claim's later).
        let asked = Instant::now();
        let looks = self.w.gpu_sight.as_ref().map(|s| s.looks());
        match self.w.retrying("claim a job", || store.claim(&request, clock.now())).await? {
            Retried::Done(Some(claimed)) => {
                let got_gpus = claimed.job.lease.as_ref().is_some_and(|l| !l.gpus.is_empty());
                self.note_gpu_wait(looks, got_gpus).await;
                self.begin(Taken { claimed, asked }).await?;
            }
            Retried::Done(None) => {
                self.note_gpu_wait(looks, false).await;
                self.claim = ClaimState::Nothing;
            }
            Retried::ShutDown => {}
        }
        Ok(())
    }

    /// After a claim: when it looked at the GPUs (a job that needs them was
    /// a candidate) and handed none out, a GPU job waits: said once per
    /// change of what the runner sees, and recorded for `show`. A claim
    /// that handed GPUs out ends the wait.
    async fn note_gpu_wait(&mut self, looks_before: Option<u64>, got_gpus: bool) {
        let Some(sight) = self.w.gpu_sight.clone() else { return };
        if got_gpus {
            self.gpu_wait = None;
            return;
        }
        if looks_before == Some(sight.looks()) {
            return;
        }
        let Some(look) = sight.last() else { return };
        let busy = self.w.cfg.gpus.as_ref().map_or(0, |o| o.busy_above_pct);
        let line = crate::gpu::wait_line(&look, busy);
        if self.gpu_wait.as_deref() != Some(line.as_str()) {
            self.w.report(RunnerEvent::GpuWait { line: line.clone() });
            self.gpu_wait = Some(line);
            // The record carries the look `show` explains the wait with
            // (an idle runner's next record, written as it goes idle, does).
            self.w.record_running().await;
        }
    }
}
