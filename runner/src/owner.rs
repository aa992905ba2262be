//! Who this runner is, and whether another owner on this host is alive.
//!
//! A lease records host, boot id, pid and the pid's start time. On the same
//! host that identity can be checked without trusting the clock: a laptop
//! that slept for an hour has every lease expired, yet its runners are
//! alive. `/proc` answers for this host; other hosts cannot be checked.

use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;

use slothqueue_core::{Lease, Liveness, LivenessJudge, Owner};

use crate::process::procfs::{parse_stat, proc_stat};

/// This host's name (`uname` nodename).
pub(crate) fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// The PID namespace this process sees `/proc` through (the inode of
/// `/proc/self/ns/pid`): pids, and so liveness, only mean something inside
/// one namespace.
pub(crate) fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// This boot's id, which changes at every boot.
pub(crate) fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_owned())
}

/// The identity of this runner process, unique for its lifetime and never
/// reused: host, boot id, pid, start time (field 22 of `/proc/self/stat`)
/// and a random part.
///
/// The random part makes the id unique even where `/proc` cannot be read;
/// then `boot_id`/`pid_start_time` stay `None` and other runners on this
/// host fall back to the lease's clock for it.
pub fn this_process_owner() -> Owner {
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    let start = proc_stat(pid).map(|s| s.starttime);
    let host = hostname();
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    Owner {
        id: format!("{host}:{pid}:{}:{random:016x}", start.unwrap_or(0)),
        host,
        boot_id: boot_id(),
        pid: u32::try_from(pid).ok(),
        pid_start_time: start,
        pid_ns: pid_namespace(),
    }
}

/// Judges lease owners by reading `/proc`.
///
/// - another host → `Unknown` (the lease's clock decides);
/// - this host, another boot id → `Gone`;
/// - this host and boot, another PID namespace (a runner under
///   `unshare -p`, bubblewrap, firejail, a container sharing the boot id)
///   → `Unknown`: its pid is not in this `/proc`, which proves nothing;
/// - this host and boot, the pid not running (or a zombie) → `Gone`;
/// - the pid running with another start time (a reused pid) → `Gone`;
/// - the pid running with the recorded start time → `Alive`, whatever the
///   lease says: a live owner on this host is never robbed.
///
/// Where the lease lacks what is needed to be sure (no boot id, no pid, no
/// start time), the answer is `Unknown`, never `Gone`.
#[derive(Clone, Debug)]
pub struct ProcJudge {
    host: String,
    boot_id: Option<String>,
    pid_ns: Option<u64>,
    proc_root: PathBuf,
}

impl ProcJudge {
    /// A judge for this machine.
    pub fn new() -> Self {
        ProcJudge {
            host: hostname(),
            boot_id: boot_id(),
            pid_ns: pid_namespace(),
            proc_root: PathBuf::from("/proc"),
        }
    }

    /// A judge that believes it runs on `host` in boot `boot_id`, for tests
    /// and for callers that already read them.
    pub fn with_identity(host: impl Into<String>, boot_id: Option<String>) -> Self {
        ProcJudge {
            host: host.into(),
            boot_id,
            pid_ns: pid_namespace(),
            proc_root: PathBuf::from("/proc"),
        }
    }

    /// The same judge, believing it sees `/proc` from PID namespace `ns`.
    #[must_use]
    pub fn in_pid_namespace(mut self, ns: Option<u64>) -> Self {
        self.pid_ns = ns;
        self
    }

    /// Judges an owner directly (the lease adds nothing else).
    pub fn judge_owner(&self, owner: &Owner) -> Liveness {
        if owner.host.is_empty() || owner.host != self.host {
            return Liveness::Unknown;
        }
        let (Some(theirs), Some(ours)) = (&owner.boot_id, &self.boot_id) else {
            return Liveness::Unknown;
        };
        if theirs != ours {
            return Liveness::Gone;
        }
        // An owner recorded before namespaces were (no `pid_ns`) is judged
        // as before: by its pid in this `/proc`.
        if let (Some(theirs), Some(ours)) = (owner.pid_ns, self.pid_ns) {
            if theirs != ours {
                return Liveness::Unknown;
            }
        }
        let Some(pid) = owner.pid.and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 0) else {
            return Liveness::Unknown;
        };
        let path = self.proc_root.join(pid.to_string()).join("stat");
        let Ok(text) = std::fs::read_to_string(&path) else {
            // No such process. (`/proc` itself missing would make every
            // owner look dead; refuse to judge then.)
            return if self.proc_root.join("self").exists() {
                Liveness::Gone
            } else {
                Liveness::Unknown
            };
        };
        let Some(stat) = parse_stat(&text) else { return Liveness::Unknown };
        if !stat.is_live() {
            return Liveness::Gone;
        }
        match owner.pid_start_time {
            Some(t) if t == stat.starttime => Liveness::Alive,
            Some(_) => Liveness::Gone,
            None => Liveness::Unknown,
        }
    }
}

impl Default for ProcJudge {
    fn default() -> Self {
        ProcJudge::new()
    }
}

impl LivenessJudge for ProcJudge {
    fn judge(&self, lease: &Lease) -> Liveness {
        self.judge_owner(&lease.owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_are_unique_and_describe_the_process() {
        let a = this_process_owner();
        let b = this_process_owner();
        assert_ne!(a.id, b.id);
        assert_eq!(a.pid, Some(std::process::id()));
        assert!(a.pid_start_time.is_some());
        assert!(a.boot_id.is_some());
        assert!(a.id.starts_with(&format!("{}:{}:", a.host, std::process::id())));
    }

    #[test]
    fn this_process_is_alive() {
        assert_eq!(ProcJudge::new().judge_owner(&this_process_owner()), Liveness::Alive);
    }

    #[test]
    fn a_dead_pid_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let owner = Owner { pid: Some(pid), ..this_process_owner() };
        assert_eq!(ProcJudge::new().judge_owner(&owner), Liveness::Gone);
    }

    #[test]
    fn a_reused_pid_is_gone() {
        let me = this_process_owner();
        let owner = Owner { pid_start_time: me.pid_start_time.map(|t| t + 1), ..me };
        assert_eq!(ProcJudge::new().judge_owner(&owner), Liveness::Gone);
    }

    #[test]
    fn another_boot_is_gone() {
        let owner = Owner { boot_id: Some("another-boot".into()), ..this_process_owner() };
        assert_eq!(ProcJudge::new().judge_owner(&owner), Liveness::Gone);
    }

    #[test]
    fn another_host_is_unknown() {
        let owner =
            Owner { host: "elsewhere.example".into(), pid: Some(1), ..this_process_owner() };
        assert_eq!(ProcJudge::new().judge_owner(&owner), Liveness::Unknown);
        let judge = ProcJudge::with_identity("elsewhere.example", boot_id());
        assert_eq!(judge.judge_owner(&this_process_owner()), Liveness::Unknown);
    }

    #[test]
    fn missing_identity_is_unknown_not_gone() {
        let me = this_process_owner();
        let no_start = Owner { pid_start_time: None, ..me.clone() };
        assert_eq!(ProcJudge::new().judge_owner(&no_start), Liveness::Unknown);
        let no_boot = Owner { boot_id: None, ..me.clone() };
        assert_eq!(ProcJudge::new().judge_owner(&no_boot), Liveness::Unknown);
        assert_eq!(ProcJudge::new().judge_owner(&Owner::named("x")), Liveness::Unknown);
    }

    #[test]
    fn an_owner_in_another_pid_namespace_is_unknown_never_gone() {
        let judge = ProcJudge::new();
        let me = this_process_owner();
        assert!(me.pid_ns.is_some(), "this test needs /proc/self/ns/pid");
        // A pid that is surely not running here, as a runner under
        // `unshare -p` would record its own (small) pid.
        let elsewhere =
            Owner { pid: Some(u32::MAX / 2), pid_ns: me.pid_ns.map(|n| n ^ 1), ..me.clone() };
        assert_eq!(judge.judge_owner(&elsewhere), Liveness::Unknown, "the lease decides");
        let here = Owner { pid_ns: me.pid_ns, ..elsewhere.clone() };
        assert_eq!(judge.judge_owner(&here), Liveness::Gone, "same namespace: the pid is gone");
        let unrecorded = Owner { pid_ns: None, ..elsewhere };
        assert_eq!(judge.judge_owner(&unrecorded), Liveness::Gone, "older records as before");
        let from_elsewhere = ProcJudge::new().in_pid_namespace(me.pid_ns.map(|n| n ^ 1));
        assert_eq!(from_elsewhere.judge_owner(&me), Liveness::Unknown);
    }
}
