//! The dead-owner sweep: takes back the jobs of dead runners on this host,
//! killing what is left of each dead attempt first, so that a job never
//! runs twice at once.
//!
//! What is left is found two ways: by the process group the lease
//! recorded (if that pgid still belongs to the job's processes), and by
//! the [`LEASE_VAR`] marker every process of the attempt carries in its
//! environment (the group is not recorded when the owner died right after
//! the spawn).

use std::time::Duration;

use slothqueue_core::{Job, JobId, JobState, ListFilter, Liveness, Timestamp};
use tokio::time::Instant;

use crate::contain::{Containment, sweep_orphan_cgroups};
use crate::contain::{LEASE_VAR, lease_marker};
use crate::error::RunnerError;
use crate::event::RunnerEvent;
use crate::process::group::{group_alive, may_signal_group, stop_group};
use crate::process::procfs::{environ_has, pids, proc_stat, process_started_at};
use crate::run::worker::{Retried, Worker};

/// How much earlier than its job's claim an orphaned group's leader may
/// seem to have started and still be the job's: process start times derive
/// from the boot time, which `/proc/stat` gives in whole seconds and which
/// drifts from the wall clock with NTP adjustments over a long uptime.
const ORPHAN_START_SLACK: Duration = Duration::from_secs(30);

/// How long after its claim a job's process may have been spawned: the
/// runner spawns right after claiming (opening the log is all in between),
/// so this is generous; a much later leader with the recorded pid is a
/// stranger.
const LEADER_SPAWN_WINDOW: Duration = Duration::from_secs(600);

/// How often the loop looks for dead owners' jobs between claims. A claim
/// never takes such a job (see [`Worker::claim_request`]), so sweeping less
/// often only delays their return; sweeping before every claim cost a read
/// of every running job per job. A drain that finds nothing to claim sweeps
/// at once.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

impl Worker {
    /// Whether dead owners' jobs are due to be looked for.
    pub(super) fn sweep_due(&self) -> bool {
        self.last_sweep.lock().is_ok_and(|t| t.elapsed() >= SWEEP_EVERY)
    }

    /// Notes that dead owners' jobs were just looked for.
    pub(super) fn swept_now(&self) {
        if let Ok(mut t) = self.last_sweep.lock() {
            *t = Instant::now();
        }
    }

    /// Reclaims jobs of dead owners on this host, killing each one's
    /// orphaned process group first so that a job never runs twice at once.
    /// Returns how many jobs it took back.
    pub(super) async fn sweep_dead(&mut self) -> Result<usize, RunnerError> {
        let store = self.store.clone();
        let filter = ListFilter { state: Some(JobState::Running), ..ListFilter::default() };
        let Retried::Done(running) =
            self.retrying("list running jobs", || store.list(&filter)).await?
        else {
            return Ok(0);
        };
        let dead: Vec<&Job> = running
            .iter()
            .filter(|j| j.lease.as_ref().is_some_and(|l| self.cfg.judge.judge(l) == Liveness::Gone))
            .collect();
        if dead.is_empty() {
            return Ok(0);
        }
        let mut killed = Vec::new();
        let mut swept = Vec::new();
        // The dead runners' attempt cgroups first: they hold what even
        // cleared its environment and left the group.
        self.sweep_cgroups().await;
        for job in dead {
            self.kill_orphan(job, &mut killed).await;
            swept.extend(job.lease.as_ref().map(|l| (job.id, l.fence())));
        }
        // Exactly the attempts whose orphans were just dealt with: an owner
        // that died since the list waits for the next sweep, so its job is
        // never pending while its processes still run.
        let clock = self.cfg.clock.clone();
        let Retried::Done(reclaimed) = self
            .retrying("reclaim jobs of dead runners", || store.reclaim_dead(&swept, clock.now()))
            .await?
        else {
            return Ok(0);
        };
        if !reclaimed.is_empty() {
            self.report(RunnerEvent::Reclaimed {
                jobs: reclaimed.iter().map(|j| j.id).collect(),
                killed_groups: killed,
            });
        }
        Ok(reclaimed.len())
    }

    /// Stops every process group left of `job`'s dead attempt, adding each
    /// to `killed`.
    async fn kill_orphan(&self, job: &Job, killed: &mut Vec<(JobId, i32)>) {
        let Some(lease) = job.lease.as_ref() else { return };
        if let Some(pgid) = lease.child_pgid {
            if orphan_group_is_jobs(pgid, job.started_at, ORPHAN_START_SLACK) {
                stop_group(pgid, None, self.cfg.kill_grace, None).await;
                killed.push((job.id, pgid));
            }
        }
        // The group is not recorded when the owner died right after the
        // spawn, before the heartbeat that records it: the processes
        // marked with this attempt are the job's all the same.
        let marker = lease_marker(job.id, &lease.fence());
        for pgid in marked_groups(&marker) {
            if may_signal_group(pgid) && !killed.contains(&(job.id, pgid)) {
                stop_group(pgid, None, self.cfg.kill_grace, None).await;
                killed.push((job.id, pgid));
            }
        }
        // What left the group (`setsid`, a daemon, a process in someone
        // else's group) but kept the marker, and its descendants: by pid.
        let report = Containment::without_cgroup(&marker).stop_all(self.cfg.kill_grace).await;
        if !report.is_clean() {
            self.warn(format!("job #{} (dead owner's attempt): {report}", job.id));
        }
    }

    /// Kills what is left in the attempt cgroups of dead runners and
    /// removes them (see [`sweep_orphan_cgroups`]); says what it could not.
    pub(super) async fn sweep_cgroups(&self) {
        let report = sweep_orphan_cgroups().await;
        for dir in &report.left {
            self.warn(format!(
                "cgroup {} of a dead runner could not be emptied; its processes may still run",
                dir.display()
            ));
        }
    }
}

/// Decides whether an orphaned group recorded in a dead owner's lease may
/// be killed: its pgid must still belong to the job's processes.
///
/// If the group's leader still exists, it must have started around the
/// job's claim: the runner spawns it right after claiming, so its start lies
/// within `[claimed - slack, claimed + LEADER_SPAWN_WINDOW]` (the slack
/// covers `btime`'s whole seconds). A process with that pid started long
/// before or long after is an unrelated one that reused the pid, and is left
/// alone. If the leader is gone but live members with that pgid remain, the
/// pgid cannot have been reused (Linux does not hand out a pid still used as
/// a pgid), so they are the job's.
fn orphan_group_is_jobs(pgid: i32, claimed_at: Option<Timestamp>, slack: Duration) -> bool {
    if !may_signal_group(pgid) {
        return false;
    }
    match proc_stat(pgid) {
        Some(leader) => {
            let (Some(claimed), Some(started)) = (claimed_at, process_started_at(&leader)) else {
                return false;
            };
            let earliest = claimed.saturating_sub(slack);
            let latest = claimed.saturating_add(LEADER_SPAWN_WINDOW);
            (earliest..=latest).contains(&started) && group_alive(pgid)
        }
        None => group_alive(pgid),
    }
}

/// The process groups holding live processes marked with `marker` that are
/// the attempt's to kill: the group's leader carries the marker, or every
/// live member does. (A marked process that joined someone else's group
/// does not make that group the job's.)
fn marked_groups(marker: &str) -> Vec<i32> {
    let needle = format!("{LEASE_VAR}={marker}");
    let me = std::process::id() as i32;
    // (pid, pgid, marked) of every live process.
    let procs: Vec<(i32, i32, bool)> = pids()
        .into_iter()
        .filter(|pid| *pid != me)
        .filter_map(|pid| {
            let stat = proc_stat(pid).filter(|s| s.is_live())?;
            Some((pid, stat.pgrp, environ_has(pid, &needle)))
        })
        .collect();
    let mut groups: Vec<i32> =
        procs.iter().filter(|(_, _, marked)| *marked).map(|(_, pgid, _)| *pgid).collect();
    groups.sort_unstable();
    groups.dedup();
    groups.retain(|&g| {
        procs.iter().any(|&(pid, _, marked)| pid == g && marked)
            || procs.iter().filter(|p| p.1 == g).all(|p| p.2)
    });
    groups
}
