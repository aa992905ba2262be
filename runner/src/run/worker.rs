//! A task's side of a run: [`Worker`], the store calls, records and
//! reports of one task (the loop, or one attempt), over the state the run
//! shares ([`Shared`]).
//!
//! `Worker`'s methods are grouped by role, one file each: the services
//! every task uses are here (the claim request, store calls retried
//! through busy spells, the runner record `status` reads, reports);
//! running one attempt is in `attempt.rs`, driving a process until it ends
//! in `drive.rs`, the dead-owner sweep in `sweep.rs`, and the on-finish
//! command in `on_finish.rs`.

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slothqueue_core::{
    ClaimFilter, ClaimRequest, Fence, Job, JobId, Reclaim, RunnerActivity, RunnerRecord, Store,
    StoreError, Timestamp,
};
use tokio::time::Instant;

use crate::config::RunnerConfig;
use crate::error::RunnerError;
use crate::event::{Reporter, RunSummary, RunnerEvent};
use crate::exec::Executor;
use crate::fmt::format_duration;
use crate::run::job_control::Suspended;
use crate::signal::ShutdownSignal;

/// How often an idle runner rewrites an unchanged idle record, so that
/// `status` still hears from it (a runner on another host counts as live
/// for 5 minutes after its last record). More often would be a write, and
/// on redb an fsync, every poll of a machine with nothing to do.
pub(super) const IDLE_RECORD_REFRESH: Duration = Duration::from_secs(60);

/// What a store call retried through busy spells came to.
pub(super) enum Retried<T> {
    /// It went through, with this answer.
    Done(T),
    /// A new shutdown request came while waiting to retry; the call was
    /// given up.
    ShutDown,
}

impl<T> Retried<T> {
    pub(super) fn map<U>(self, f: impl FnOnce(T) -> U) -> Retried<U> {
        match self {
            Retried::Done(v) => Retried::Done(f(v)),
            Retried::ShutDown => Retried::ShutDown,
        }
    }
}

/// The idle record last written: an unchanged one is not written again
/// until [`IDLE_RECORD_REFRESH`] has passed.
pub(super) struct IdleRecord {
    /// What it said.
    pub(super) activity: RunnerActivity,
    /// When it was written.
    pub(super) at: Instant,
    /// The summary then (`status` shows the counts).
    pub(super) summary: RunSummary,
}

impl IdleRecord {
    /// Whether writing `activity` with `summary` now would say nothing new.
    pub(super) fn still_says(&self, activity: &RunnerActivity, summary: &RunSummary) -> bool {
        self.activity == *activity
            && self.summary == *summary
            && self.at.elapsed() < IDLE_RECORD_REFRESH
    }
}

/// What the runner record says and should say.
#[derive(Default)]
pub(super) struct Records {
    /// The idle record last written; `None` once another record was.
    pub(super) idle: Option<IdleRecord>,
    /// The attempts running now, oldest start first.
    pub(super) running: Vec<JobId>,
    /// The jobs the last `Running` record named (empty when the last
    /// record was another).
    pub(super) recorded_running: Vec<JobId>,
    /// The last record's reading, when it was `Gated`.
    pub(super) gated: Option<String>,
    /// The last record's activity, written again with the jobs running
    /// then when one of those it named ends.
    pub(super) last: Option<RunnerActivity>,
}

impl Records {
    /// Job `id` started: it runs, and whatever wait the free slots were
    /// recorded in is over (a claim took a job), until a look says again.
    pub(super) fn started(&mut self, id: JobId) {
        self.running.push(id);
        if matches!(self.last, Some(RunnerActivity::Gated { .. })) {
            self.last = None;
            self.gated = None;
        }
    }
}

/// What the loop and every attempt task share, for the run's life.
pub(crate) struct Shared {
    pub(super) store: Arc<dyn Store>,
    pub(super) cfg: RunnerConfig,
    pub(super) executors: BTreeMap<String, Arc<dyn Executor>>,
    pub(super) reporter: Arc<dyn Reporter>,
    pub(super) shutdown: ShutdownSignal,
    /// Shared with the job-control task (Ctrl-Z), if the run has one.
    pub(super) suspended: Arc<Suspended>,
    pub(super) started_at: Timestamp,
    pub(super) summary: Mutex<RunSummary>,
    pub(super) records: Mutex<Records>,
    /// When dead owners' jobs were last looked for.
    pub(super) last_sweep: Mutex<Instant>,
    /// A claim may stand in the store that this runner never heard of: a
    /// call was retried after the server went away mid-call
    /// ([`StoreError::Unreachable`]), when its commit may have landed and
    /// only the answer been lost. The loop then looks for jobs held under
    /// its own lease that no attempt runs
    /// ([`Run::hand_back_unheard`](super::Run::hand_back_unheard));
    /// no claim or sweep would take them back while this runner lives.
    pub(super) unheard_claims: AtomicBool,
    /// The run's sight of its host's GPUs, remembering its last look for
    /// the record and the wait it prints; `None` when it offers no GPUs.
    pub(super) gpu_sight: Option<Arc<crate::gpu::Remembering>>,
}

/// The store calls, records and reports of one task (the loop, or one
/// attempt): the shared state, and whether the current busy spell was
/// warned about (once per spell, per task).
pub(crate) struct Worker {
    pub(super) sh: Arc<Shared>,
    pub(super) busy_warned: bool,
}

impl Deref for Worker {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.sh
    }
}

impl Worker {
    /// What this runner claims: jobs of its queues and of the kinds it can
    /// run, and of a running job only an expired lease, never a dead
    /// owner's job: a claim cannot first kill what is left of the dead
    /// attempt, so that job is the sweep's ([`Worker::sweep_dead`]), and a
    /// job never runs twice at once, even when its owner dies between a
    /// sweep and a claim.
    pub(super) fn claim_request(&self) -> ClaimRequest {
        let request = ClaimRequest::new(self.cfg.owner.clone(), self.cfg.judge.clone())
            .filter(ClaimFilter {
                queues: self.cfg.queues.clone(),
                kinds: Some(self.executors.keys().cloned().collect()),
            })
            .reclaim(Reclaim::ExpiredOnly);
        match &self.cfg.gpus {
            Some(offer) => request.gpus(offer.clone()),
            None => request,
        }
    }

    /// The run's counts so far.
    pub(super) fn summary(&self) -> RunSummary {
        self.summary.lock().map(|s| *s).unwrap_or_default()
    }

    /// Changes the run's counts.
    pub(super) fn tally(&self, f: impl FnOnce(&mut RunSummary)) {
        if let Ok(mut s) = self.summary.lock() {
            f(&mut s);
        }
    }

    /// Hands job `id` back to pending without charging the attempt.
    pub(super) async fn release(
        &mut self,
        id: JobId,
        fence: &Fence,
    ) -> Result<Retried<Job>, RunnerError> {
        let store = self.store.clone();
        let clock = self.cfg.clock.clone();
        self.retrying("release a job", || store.release(id, fence, clock.now())).await
    }

    /// Calls `op` until it succeeds, waiting out temporary errors (a busy
    /// queue file, a full disk, a lost server) with one warning per streak.
    /// Gives up ([`Retried::ShutDown`]) when a new shutdown request arrives
    /// while waiting. A lost server may have committed the call all the
    /// same: noted in [`Shared::unheard_claims`].
    pub(super) async fn retrying<T, F, Fut>(
        &mut self,
        what: &str,
        op: F,
    ) -> Result<Retried<T>, RunnerError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let seen = self.shutdown.count();
        loop {
            match op().await {
                Ok(v) => {
                    self.busy_warned = false;
                    return Ok(Retried::Done(v));
                }
                Err(e) if e.is_temporary() => {
                    if matches!(e, StoreError::Unreachable(_)) {
                        self.unheard_claims.store(true, Ordering::SeqCst);
                    }
                    if !self.busy_warned {
                        self.busy_warned = true;
                        self.warn(format!(
                            "cannot {what}: {e}; retrying every {}",
                            format_duration(self.cfg.busy_pause)
                        ));
                    }
                    let mut shutdown = self.shutdown.clone();
                    tokio::select! {
                        () = tokio::time::sleep(self.cfg.busy_pause) => {}
                        () = shutdown.reached(seen + 1) => return Ok(Retried::ShutDown),
                    }
                }
                Err(e) => return Err(RunnerError::store(format!("cannot {what}"), e)),
            }
        }
    }

    /// Whether the last record written was a wait with this reading.
    pub(super) fn records_say_gated(&self, reading: &str) -> bool {
        self.records.lock().is_ok_and(|r| r.gated.as_deref() == Some(reading))
    }

    /// Records the attempts running now, for `status`: `Running` with the
    /// first started and the others; or, while a slot is free and the last
    /// record said the free slots wait (a gate, a paused lane), that wait
    /// still, with the jobs running now (nothing is written when that is
    /// what the record says already). A start clears the wait
    /// ([`Records::started`]): the next look says whether it holds.
    pub(super) async fn record_running(&self) {
        let slots = self.cfg.slots.max(1);
        let (running, waiting) = match self.records.lock() {
            Ok(r) => {
                let waiting = r.last.clone().filter(|a| {
                    matches!(a, RunnerActivity::Gated { .. }) && r.running.len() < slots
                });
                if waiting.is_some() && r.recorded_running == r.running {
                    return;
                }
                (r.running.clone(), waiting)
            }
            Err(_) => return,
        };
        let Some((&job, also)) = running.split_first() else { return };
        let activity = waiting.unwrap_or(RunnerActivity::Running { job, also: also.to_vec() });
        self.record(activity).await;
    }

    /// Records what this runner does, for `status`. Failing to is not worth
    /// stopping for.
    pub(super) async fn record(&self, activity: RunnerActivity) {
        if let Ok(mut r) = self.records.lock() {
            if !matches!(activity, RunnerActivity::Idle { .. }) {
                r.idle = None;
            }
            r.gated = match &activity {
                RunnerActivity::Gated { reading, .. } => Some(reading.clone()),
                _ => None,
            };
            // Every record names the jobs running as it is written, so
            // whichever it was, it is rewritten when one of them ends.
            r.recorded_running = r.running.clone();
            r.last = Some(activity.clone());
        }
        let running = self.records.lock().map(|r| r.running.clone()).unwrap_or_default();
        let record = RunnerRecord {
            owner: self.cfg.owner.clone(),
            queues: self.cfg.queues.clone(),
            kinds: Some(self.executors.keys().cloned().collect()),
            refused: self.cfg.refused.clone(),
            started_at: self.started_at,
            updated_at: self.now(),
            activity,
            slots: u32::try_from(self.cfg.slots.max(1)).unwrap_or(u32::MAX),
            running,
            gpus: self.gpu_seen(),
        };
        if let Err(e) = self.store.put_runner(&record).await {
            if !e.is_temporary() {
                self.warn(format!("cannot record this runner's activity: {e}"));
            }
        }
    }

    /// What this runner last saw of its GPUs, for its record.
    pub(super) fn gpu_seen(&self) -> Option<slothqueue_core::gpu::GpuSeen> {
        let look = self.gpu_sight.as_ref()?.last()?;
        let busy_above_pct = self.cfg.gpus.as_ref()?.busy_above_pct;
        Some(slothqueue_core::gpu::GpuSeen { look, busy_above_pct })
    }

    pub(super) fn report(&self, event: RunnerEvent) {
        self.reporter.report(event);
    }

    pub(super) fn warn(&self, message: String) {
        self.report(RunnerEvent::Warning { message });
    }

    pub(super) fn now(&self) -> Timestamp {
        self.cfg.clock.now()
    }
}
