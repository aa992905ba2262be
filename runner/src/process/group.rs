//! Signalling whole process groups, safely.
//!
//! Three rules keep it safe:
//!
//! - never signal a pgid `<= 1` or the runner's own group (a bug there would
//!   kill the runner, the user's shell, or everything);
//! - signal our own child's group *before* reaping its leader: until the
//!   leader is reaped its pid (and so the pgid) cannot be reused; after that,
//!   only surviving members pin the pgid, and a group with no members simply
//!   answers "no such process";
//! - a group is gone when no *live* process has that pgid: zombies are
//!   ignored, because whether they are reaped depends on who adopted them.

use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::process::Child;
use tokio::time::Instant;

use crate::process::procfs::{pids, proc_stat};
use crate::stop::StopListener;

/// How often a dying group is looked at.
const POLL: Duration = Duration::from_millis(20);
/// How long a KILLed group may take to disappear before we stop waiting
/// (a process in uninterruptible sleep dies only when its I/O ends).
const AFTER_KILL: Duration = Duration::from_secs(5);

/// The live (not zombie) processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|&pid| proc_stat(pid).is_some_and(|s| s.pgrp == pgid && s.is_live()))
        .collect()
}

/// Whether any live process is in group `pgid`.
pub(crate) fn group_alive(pgid: i32) -> bool {
    let Some(pid) = Pid::from_raw(pgid) else { return false };
    // Cheap check first: no process at all has this pgid.
    match rustix::process::test_kill_process_group(pid) {
        Err(rustix::io::Errno::SRCH) => false,
        _ => !group_members(pgid).is_empty(),
    }
}

/// Whether the runner may ever signal group `pgid`: never 0, 1, negative,
/// or the runner's own group. (Its group as `/proc` shows it: `getpgrp`
/// panics in rustix where the group is outside this PID namespace.)
pub(crate) fn may_signal_group(pgid: i32) -> bool {
    pgid > 1 && super::procfs::own_pgrp() != pgid
}

/// Sends `sig` to every process of group `pgid`, if allowed. Returns whether
/// the signal went anywhere (`false` also for "no such group").
pub(crate) fn signal_group(pgid: i32, sig: Signal) -> bool {
    if !may_signal_group(pgid) {
        return false;
    }
    let Some(pid) = Pid::from_raw(pgid) else { return false };
    rustix::process::kill_process_group(pid, sig).is_ok()
}

/// Stops a process group: TERM, up to `grace` for it to go, then KILL.
///
/// With `child` (our own child, the group's leader) the leader is reaped as
/// part of waiting, after the group was signalled. `stop`, when given, can
/// cut the grace short: a request marked immediate (a second Ctrl-C) sends
/// KILL at once. Returns the leader's exit status when it was reaped here.
pub(crate) async fn stop_group(
    pgid: i32,
    mut child: Option<&mut Child>,
    grace: Duration,
    mut stop: Option<&mut StopListener>,
) -> Option<std::process::ExitStatus> {
    let immediate = stop.as_ref().is_some_and(|s| s.current().is_some_and(|r| r.immediate));
    let mut killed = immediate || grace.is_zero();
    signal_group(pgid, if killed { Signal::KILL } else { Signal::TERM });
    let mut deadline = Instant::now() + if killed { AFTER_KILL } else { grace };
    let mut status = None;
    let mut reaped = child.is_none();
    loop {
        if reaped && !group_alive(pgid) {
            return status;
        }
        if Instant::now() >= deadline {
            if killed {
                return status; // unkillable for now (uninterruptible sleep); give up waiting
            }
            signal_group(pgid, Signal::KILL);
            killed = true;
            deadline = Instant::now() + AFTER_KILL;
            continue;
        }
        tokio::select! {
            st = wait_leader(&mut child), if !reaped => {
                reaped = true;
                status = st;
            }
            () = wait_immediate(&mut stop), if !killed => {
                signal_group(pgid, Signal::KILL);
                killed = true;
                deadline = Instant::now() + AFTER_KILL;
            }
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

async fn wait_leader(child: &mut Option<&mut Child>) -> Option<std::process::ExitStatus> {
    match child {
        Some(c) => c.wait().await.ok(),
        None => std::future::pending().await,
    }
}

async fn wait_immediate(stop: &mut Option<&mut StopListener>) {
    match stop {
        Some(s) => s.immediate().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_signals_init_or_its_own_group() {
        assert!(!may_signal_group(0));
        assert!(!may_signal_group(1));
        assert!(!may_signal_group(-5));
        assert!(!may_signal_group(super::super::procfs::own_pgrp()));
        assert!(!signal_group(1, Signal::TERM));
    }
}
