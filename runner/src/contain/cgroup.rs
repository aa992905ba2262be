//! The attempt's cgroup v2 child: finding the hierarchy and the runner's
//! own cgroup, creating one per attempt, killing what is in it, and the
//! start-up sweep of cgroups whose runner died.

use rustix::process::Signal;
use slothqueue_core::JobId;
use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::time::Instant;

use super::*;

#[derive(Debug)]
pub(super) struct Cgroup {
    /// The directory, e.g. `/sys/fs/cgroup/unified/slothqueue-4-1-977-5123-0`.
    pub(super) dir: PathBuf,
    /// Its path as `/proc/<pid>/cgroup` shows it (`0::<rel>`).
    pub(super) rel: String,
    /// `cgroup.procs`, open for writing, for the child to join before exec.
    pub(super) procs: Arc<OwnedFd>,
    /// Whether the placement failed (the leader is not in it).
    pub(super) broken: AtomicBool,
    /// Whether the leader was in it before it ran anything (the pre-exec
    /// hook): then the cgroup alone holds every process of the attempt.
    pub(super) placed_early: AtomicBool,
    pub(super) removed: AtomicBool,
}

/// The runner's own cgroup v2 directory, if it may have children: found
/// from `/proc/self/mountinfo` (the `cgroup2` mount) and `/proc/self/cgroup`
/// (`0::/path`), checked writable. Looked up once per process.
pub(super) fn own_cgroup() -> Result<&'static (PathBuf, String), String> {
    static OWN: OnceLock<Result<(PathBuf, String), String>> = OnceLock::new();
    OWN.get_or_init(|| {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let (root, mount) = cgroup2_mount(&mountinfo).ok_or("no cgroup v2 hierarchy is mounted")?;
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let rel = unified_path(&cgroup).ok_or("this process is in no cgroup v2")?;
        let dir = dir_in_mount(&root, &mount, &rel);
        for path in [dir.clone(), dir.join("cgroup.procs")] {
            rustix::fs::access(&path, rustix::fs::Access::WRITE_OK)
                .map_err(|e| format!("cgroup {} is not writable: {e}", path.display()))?;
        }
        Ok((dir, rel))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// This process's start time (clock ticks after boot), for cgroup names.
pub(super) fn own_start() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    *START.get_or_init(|| read_stat(std::process::id() as i32).map_or(0, |s| s.starttime))
}

/// The runner a cgroup name belongs to: its pid, start time and PID
/// namespace, from `slothqueue-<job>-<attempt>-<pid>-<start>-<pidns>-<n>`
/// (`None` for the namespace in a name made before it was recorded,
/// `slothqueue-<job>-<attempt>-<pid>-<start>-<n>`).
pub(super) fn cgroup_owner(name: &str) -> Option<(i32, u64, Option<u64>)> {
    let fields: Vec<&str> = name.strip_prefix("slothqueue-")?.split('-').collect();
    let (pid, start, ns, seq) = match fields.as_slice() {
        [_job, _attempt, pid, start, ns, seq] => (pid, start, Some(ns.parse().ok()?), seq),
        [_job, _attempt, pid, start, seq] => (pid, start, None, seq),
        _ => return None,
    };
    let _seq: u64 = seq.parse().ok()?;
    Some((pid.parse().ok()?, start.parse().ok()?, ns))
}

/// What [`sweep_orphan_cgroups`](super::sweep_orphan_cgroups) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Attempt cgroups of dead runners removed.
    pub removed: usize,
    /// Processes KILLed in them.
    pub killed: usize,
    /// Cgroups that could not be emptied and removed in time.
    pub left: Vec<PathBuf>,
}

/// Sweeps the dead runners' attempt cgroups directly under `parent`.
pub(super) async fn sweep_under(parent: &Path, report: &mut SweepReport) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.filter_map(Result::ok) {
        let Some((pid, start, ns)) = entry.file_name().to_str().and_then(cgroup_owner) else {
            continue;
        };
        if ns.is_some_and(|ns| Some(ns) != crate::owner::pid_namespace()) {
            continue; // another namespace's runner: it cannot be judged from here
        }
        if read_stat(pid).is_some_and(|s| s.starttime == start) {
            continue; // its runner is alive (maybe this one)
        }
        let dir = entry.path();
        report.killed += cgroup_procs(&dir).len();
        let deadline = Instant::now() + AFTER_KILL;
        loop {
            if cgroup_procs(&dir).is_empty() && std::fs::remove_dir(&dir).is_ok() {
                report.removed += 1;
                break;
            }
            if Instant::now() >= deadline {
                report.left.push(dir);
                break;
            }
            cgroup_kill(&dir);
            tokio::time::sleep(POLL).await;
        }
    }
}

/// A new name for an attempt's cgroups (v2, and v1 children for
/// ceilings): `slothqueue-<job>-<attempt>-<pid>-<start>-<pidns>-<n>`, which
/// [`cgroup_owner`] reads back.
pub(super) fn cgroup_name(job: JobId, attempt: u32) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let ns = crate::owner::pid_namespace().unwrap_or(0);
    format!("slothqueue-{job}-{attempt}-{}-{}-{ns}-{seq}", std::process::id(), own_start())
}

/// Creates the attempt's cgroup, named `name`, under the runner's own.
pub(super) fn create_cgroup(name: &str) -> Result<Cgroup, String> {
    let (parent, parent_rel) = own_cgroup()?;
    let dir = parent.join(name);
    std::fs::create_dir(&dir)
        .map_err(|e| format!("cannot create cgroup {}: {e}", dir.display()))?;
    let procs = std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs"));
    let procs = match procs {
        Ok(f) => OwnedFd::from(f),
        Err(e) => {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!("cannot open {}/cgroup.procs: {e}", dir.display()));
        }
    };
    let rel = format!("{}/{name}", parent_rel.trim_end_matches('/'));
    Ok(Cgroup {
        dir,
        rel,
        procs: Arc::new(procs),
        broken: AtomicBool::new(false),
        placed_early: AtomicBool::new(false),
        removed: AtomicBool::new(false),
    })
}

/// `(root, mount point)` of the first `cgroup2` line of a mountinfo.
pub(super) fn cgroup2_mount(mountinfo: &str) -> Option<(String, String)> {
    find_mount(mountinfo, |fstype, _| fstype == "cgroup2")
}

/// `(root, mount point)` of the first mountinfo line whose filesystem type
/// and super options `wanted` accepts (the fields after ` - `).
pub(super) fn find_mount(
    mountinfo: &str,
    wanted: impl Fn(&str, &str) -> bool,
) -> Option<(String, String)> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split_whitespace();
        let fstype = right.next()?;
        let options = right.nth(1).unwrap_or("");
        if !wanted(fstype, options) {
            return None;
        }
        let fields: Vec<&str> = left.split_whitespace().collect();
        Some((unescape(fields.get(3)?), unescape(fields.get(4)?)))
    })
}

/// The directory of cgroup `rel` (as `/proc/<pid>/cgroup` names it) in a
/// hierarchy mounted at `mount` from `root` (a container sees its own
/// cgroup as the mount's root).
pub(super) fn dir_in_mount(root: &str, mount: &str, rel: &str) -> PathBuf {
    let inside = match rel.strip_prefix(root.trim_end_matches('/')) {
        Some(rest) if root != "/" => rest,
        _ => rel,
    };
    Path::new(mount).join(inside.trim_start_matches('/'))
}

/// mountinfo escapes space, tab, newline and backslash as octal.
pub(super) fn unescape(field: &str) -> String {
    field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// The `0::/path` line of a `/proc/<pid>/cgroup`.
pub(super) fn unified_path(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix("0::")).map(|p| p.trim_end().to_owned())
}

/// Process `pid`'s cgroup v2 path (also for a zombie, which keeps it).
pub(crate) fn proc_cgroup(pid: i32) -> Option<String> {
    unified_path(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?)
}

/// Whether a `/proc/<pid>/cgroup` path is `rel` (a removed cgroup shows as
/// `rel (deleted)`).
pub(super) fn cgroup_matches(path: &str, rel: &str) -> bool {
    path == rel || path.strip_suffix(" (deleted)") == Some(rel)
}

/// The pids in a cgroup's `cgroup.procs`.
pub(super) fn cgroup_procs(dir: &Path) -> HashSet<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// KILLs everything in a cgroup: `cgroup.kill` where the kernel has it
/// (5.14+), else each pid of `cgroup.procs`.
pub(super) fn cgroup_kill(dir: &Path) {
    if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    let me = std::process::id() as i32;
    for pid in cgroup_procs(dir) {
        if let Some(stat) = read_stat(pid) {
            signal_pid(pid, stat.starttime, Signal::KILL, me);
        }
    }
}
