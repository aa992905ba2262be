//! The attempt's processes as `/proc` shows them: the process table with
//! parents, the lease marker in an environment, signalling one process
//! safely, becoming the subreaper of orphans.

use crate::process::procfs::{ProcStat, environ_has, proc_stat};
use rustix::process::{Pid, Signal};
use std::collections::HashMap;
use std::sync::OnceLock;

use super::*;

/// Sends `sig` to `pid` if it is still the process that started at `start`:
/// through a pidfd opened and then checked, so a reused pid is never hit.
pub(super) fn signal_pid(pid: i32, start: u64, sig: Signal, me: i32) {
    if pid <= 1 || pid == me {
        return;
    }
    let Some(p) = Pid::from_raw(pid) else { return };
    match rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => {
            if read_stat(pid).is_some_and(|s| s.starttime == start) {
                let _ = rustix::process::pidfd_send_signal(&fd, sig);
            }
        }
        Err(rustix::io::Errno::NOSYS) => {
            if read_stat(pid).is_some_and(|s| s.starttime == start) {
                let _ = rustix::process::kill_process(p, sig);
            }
        }
        Err(_) => {}
    }
}

/// Whether some child of this process has exited and waits to be reaped
/// (asked with `WNOWAIT`: nothing is reaped, tokio's children included).
pub(super) fn has_waitable_child() -> bool {
    use rustix::process::WaitIdOptions as W;
    let opts = W::EXITED | W::NOHANG | W::NOWAIT;
    matches!(rustix::process::waitid(rustix::process::WaitId::All, opts), Ok(Some(_)))
}

/// Makes this process a child subreaper, once. Returns whether it is one.
pub(super) fn become_subreaper() -> bool {
    static DONE: OnceLock<bool> = OnceLock::new();
    *DONE.get_or_init(|| {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid())).is_ok()
    })
}

/// Whether `/proc/<pid>/environ` holds exactly `needle` (`VAR=value`).
/// Readable for the runner's own user's processes (all, as root).
pub(super) fn is_marked(pid: i32, needle: &str) -> bool {
    environ_has(pid, needle)
}

/// Process `pid`'s [`LEASE_VAR`] value, if its environment is readable and
/// has one.
pub(crate) fn lease_marker_of(pid: i32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{LEASE_VAR}=");
    env.split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The fields of `/proc/<pid>/stat` containment uses, with the pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ProcInfo {
    pub(super) pid: i32,
    pub(super) state: char,
    pub(super) ppid: i32,
    pub(super) pgrp: i32,
    pub(super) starttime: u64,
}

pub(super) fn read_stat(pid: i32) -> Option<ProcInfo> {
    let ProcStat { state, ppid, pgrp, starttime } = proc_stat(pid)?;
    Some(ProcInfo { pid, state, ppid, pgrp, starttime })
}

pub(super) fn is_dead(state: char) -> bool {
    matches!(state, 'Z' | 'X')
}

/// Every process of the host, zombies included.
pub(super) fn proc_table() -> HashMap<i32, ProcInfo> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return HashMap::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, read_stat(pid)?)))
        .collect()
}
