//! An attempt's ceilings: its memory maximum and CPU weight, written into
//! a cgroup the job joins before it runs anything.
//!
//! Where the attempt's cgroup v2 child can get the controller (the runner's
//! own cgroup lists it in `cgroup.controllers` and may enable it in its
//! `cgroup.subtree_control`, which the kernel refuses while that cgroup
//! holds processes, unless it is the root), the limits go there:
//! `memory.max` (and `memory.swap.max` 0) and `cpu.weight`. Where it
//! cannot but a cgroup v1 hierarchy of that controller is mounted and
//! writable (a hybrid layout as root), the attempt gets a child of the
//! runner's own v1 cgroup, named like the v2 one, with
//! `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`, so swap is
//! no way around it) or `cpu.shares`. Such children are made only for jobs
//! that ask, removed when the attempt ends and swept at start like the v2
//! ones. Everywhere else the job runs without the ceiling, and says so.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use slothqueue_core::shell::format_size;

use super::cgroup::{Cgroup, dir_in_mount, find_mount};

/// A ceiling's controller, as cgroups name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Controller {
    Memory,
    Cpu,
}

impl Controller {
    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
        }
    }
}

/// An attempt's child in a cgroup v1 hierarchy.
#[derive(Debug)]
pub(super) struct V1Child {
    pub(super) dir: PathBuf,
    /// `cgroup.procs`, open for writing, for the child to join before exec.
    pub(super) procs: Arc<OwnedFd>,
}

/// Where the attempt's memory ceiling is counted: the file whose
/// `oom_kill N` line says whether it killed something.
#[derive(Clone, Debug)]
pub(super) struct MemoryWatch {
    pub(super) limit: u64,
    /// `memory.events` (v2) or `memory.oom_control` (v1).
    pub(super) events: PathBuf,
}

/// What [`set_ceilings`] made: the v1 children to join and remove, and the
/// memory watch.
#[derive(Debug, Default)]
pub(super) struct Ceilings {
    pub(super) v1: Vec<V1Child>,
    pub(super) memory: Option<MemoryWatch>,
}

/// Whether each asked ceiling is in force (`Err` says why not).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CeilingReport {
    /// The memory maximum, if one was asked.
    pub memory: Option<Result<(), String>>,
    /// The CPU weight, if one was asked.
    pub cpu: Option<Result<(), String>>,
}

/// Puts the ceilings in force for an attempt whose v2 cgroup is `v2` (if
/// it has one) and whose cgroups are named `name`: v2 where the controller
/// can be had, else a v1 child.
pub(super) fn set_ceilings(
    v2: Option<&Cgroup>,
    name: &str,
    memory_max: Option<u64>,
    cpu_weight: Option<u32>,
) -> (Ceilings, CeilingReport) {
    let mut made = Ceilings::default();
    let mut report = CeilingReport::default();
    if let Some(bytes) = memory_max {
        let v2_files = [("memory.max", bytes.to_string())];
        let result = ceiling(v2, name, Controller::Memory, &v2_files, &mut made, |dir| {
            write_file(dir, "memory.limit_in_bytes", &bytes.to_string())?;
            if dir.join("memory.memsw.limit_in_bytes").exists() {
                write_file(dir, "memory.memsw.limit_in_bytes", &bytes.to_string())?;
            }
            Ok(())
        });
        if let Ok(events) = &result {
            made.memory = Some(MemoryWatch { limit: bytes, events: events.clone() });
        }
        report.memory = Some(result.map(|_| ()));
    }
    if let Some(weight) = cpu_weight {
        let v2_files = [("cpu.weight", weight.to_string())];
        let shares = (u64::from(weight) * 1024 / 100).max(2);
        let result = ceiling(v2, name, Controller::Cpu, &v2_files, &mut made, |dir| {
            write_file(dir, "cpu.shares", &shares.to_string())
        });
        report.cpu = Some(result.map(|_| ()));
    }
    (made, report)
}

/// One ceiling: in the v2 cgroup, else in a new v1 child (written by
/// `v1_write`). Returns the file that counts its OOM kills (meaningful for
/// memory only).
fn ceiling(
    v2: Option<&Cgroup>,
    name: &str,
    controller: Controller,
    v2_files: &[(&str, String)],
    made: &mut Ceilings,
    v1_write: impl Fn(&Path) -> Result<(), String>,
) -> Result<PathBuf, String> {
    let c = controller.name();
    let v2_why = match v2 {
        Some(cg) => match in_v2(cg, controller, v2_files) {
            Ok(()) => return Ok(cg.dir.join("memory.events")),
            Err(why) => why,
        },
        None => "no delegated cgroup".to_owned(),
    };
    let parent = match own_v1(controller) {
        Ok(parent) => parent,
        Err(v1_why) => {
            return Err(if v2.is_some() {
                format!("{v2_why} and {v1_why}")
            } else {
                // No cgroup at all: v1 only matters where it is writable.
                v2_why
            });
        }
    };
    let dir = parent.join(name);
    std::fs::create_dir(&dir)
        .map_err(|e| format!("{v2_why} and cannot create a v1 {c} cgroup ({e})"))?;
    let procs = std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs"));
    let written = procs.map_err(|e| e.to_string()).and_then(|f| {
        v1_write(&dir)?;
        Ok(f)
    });
    match written {
        Ok(f) => {
            let events = dir.join("memory.oom_control");
            made.v1.push(V1Child { dir, procs: Arc::new(OwnedFd::from(f)) });
            Ok(events)
        }
        Err(e) => {
            let _ = std::fs::remove_dir(&dir);
            Err(format!("{v2_why} and the v1 {c} cgroup refused it ({e})"))
        }
    }
}

/// Enables `controller` for the attempt's v2 cgroup and writes its files.
fn in_v2(cg: &Cgroup, controller: Controller, files: &[(&str, String)]) -> Result<(), String> {
    let c = controller.name();
    let parent = cg.dir.parent().ok_or("the job's cgroup has no parent")?;
    let listed = |file: &str| {
        std::fs::read_to_string(parent.join(file))
            .is_ok_and(|t| t.split_whitespace().any(|w| w == c))
    };
    if !listed("cgroup.controllers") {
        return Err(format!("cgroup v2 has no {c} controller"));
    }
    if !listed("cgroup.subtree_control") {
        std::fs::write(parent.join("cgroup.subtree_control"), format!("+{c}"))
            .map_err(|e| format!("cgroup v2 cannot enable {c} for the job ({e})"))?;
    }
    for (file, value) in files {
        write_file(&cg.dir, file, value).map_err(|e| format!("cgroup v2 refused it ({e})"))?;
    }
    if controller == Controller::Memory && cg.dir.join("memory.swap.max").exists() {
        let _ = write_file(&cg.dir, "memory.swap.max", "0");
    }
    Ok(())
}

fn write_file(dir: &Path, file: &str, value: &str) -> Result<(), String> {
    std::fs::write(dir.join(file), value).map_err(|e| format!("{file}: {e}").replace(": ", " "))
}

/// The runner's own cgroup v1 directory of `controller`, if such a
/// hierarchy is mounted and writable: found from `/proc/self/mountinfo`
/// (a `cgroup` mount whose options name it) and `/proc/self/cgroup`
/// (`N:memory:/path`). Looked up once per process.
pub(super) fn own_v1(controller: Controller) -> Result<&'static PathBuf, String> {
    static MEMORY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    static CPU: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let cell = match controller {
        Controller::Memory => &MEMORY,
        Controller::Cpu => &CPU,
    };
    cell.get_or_init(|| {
        let c = controller.name();
        let none = || format!("no v1 {c} hierarchy is writable");
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(|_| none())?;
        let (root, mount) = v1_mount(&mountinfo, c).ok_or_else(none)?;
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").map_err(|_| none())?;
        let rel = v1_path(&cgroup, c).ok_or_else(none)?;
        let dir = dir_in_mount(&root, &mount, &rel);
        rustix::fs::access(&dir, rustix::fs::Access::WRITE_OK).map_err(|_| none())?;
        Ok(dir)
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// `(root, mount point)` of the cgroup v1 mount holding `controller`.
pub(super) fn v1_mount(mountinfo: &str, controller: &str) -> Option<(String, String)> {
    find_mount(mountinfo, |fstype, options| {
        fstype == "cgroup" && options.split(',').any(|o| o == controller)
    })
}

/// The path of the `N:<controllers>:/path` line naming `controller`.
pub(super) fn v1_path(text: &str, controller: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
        names.split(',').any(|n| n == controller).then(|| path.trim_end().to_owned())
    })
}

/// The OOM kills a `memory.events` or `memory.oom_control` file counts.
pub(super) fn oom_kills(events: &Path) -> u64 {
    std::fs::read_to_string(events)
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The error of an attempt its memory ceiling killed.
pub(crate) fn memory_exceeded(limit: u64) -> String {
    format!("killed: memory limit {} exceeded", format_size(limit))
}

/// The runner's own v1 directories of every controller a ceiling uses,
/// for the start-up sweep.
pub(super) fn own_v1_dirs() -> Vec<&'static PathBuf> {
    [Controller::Memory, Controller::Cpu].into_iter().filter_map(|c| own_v1(c).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_v1_mounts_and_paths_by_controller() {
        let mountinfo = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                         36 31 0:33 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                         41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            v1_mount(mountinfo, "memory"),
            Some(("/".into(), "/sys/fs/cgroup/memory".into()))
        );
        assert_eq!(
            v1_mount(mountinfo, "cpu"),
            Some(("/".into(), "/sys/fs/cgroup/cpu,cpuacct".into()))
        );
        assert_eq!(v1_mount(mountinfo, "pids"), None);
        let cgroup = "4:memory:/process_api/x\n2:cpu,cpuacct:/\n0::/\n";
        assert_eq!(v1_path(cgroup, "memory").as_deref(), Some("/process_api/x"));
        assert_eq!(v1_path(cgroup, "cpu").as_deref(), Some("/"));
        assert_eq!(v1_path(cgroup, "cpuacct").as_deref(), Some("/"));
        assert_eq!(v1_path(cgroup, "pids"), None);
    }

    #[test]
    fn oom_kills_are_read_from_either_file() {
        let dir = tempfile::tempdir().unwrap();
        let v2 = dir.path().join("memory.events");
        std::fs::write(&v2, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n").unwrap();
        assert_eq!(oom_kills(&v2), 1);
        let v1 = dir.path().join("memory.oom_control");
        std::fs::write(&v1, "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n").unwrap();
        assert_eq!(oom_kills(&v1), 2);
        assert_eq!(oom_kills(&dir.path().join("nothing")), 0);
        assert_eq!(memory_exceeded(50 << 20), "killed: memory limit 50 MiB exceeded");
    }
}
