//! Containment: everything one attempt started, found and stopped.
//!
//! A job's process group is not a fence: `setsid cmd &`, `set -m` in bash,
//! a program calling `setpgid(0, 0)`, a double-forked daemon, or a process
//! that joins the runner's own group all leave it, and the group's TERM and
//! KILL miss them. A [`Containment`], made for one attempt before its job is
//! spawned, finds them by four paths and stops them all:
//!
//! - **cgroup** — where a cgroup v2 hierarchy is writable (root, or a
//!   delegated subtree), the attempt gets a child cgroup of the runner's
//!   own, `slothqueue-<job>-<attempt>-<runner pid>-<runner start>-<n>`, that the job's
//!   leader joins before it runs anything. Nothing its processes do (new
//!   sessions, groups, a cleared environment, double forks) takes them out
//!   of it; stopping writes `cgroup.kill` (kernel 5.14+, else KILLs each pid
//!   of `cgroup.procs`) and removes the cgroup once empty. When the leader
//!   joined it before exec, the cgroup is trusted alone and a stop of an
//!   attempt with nothing left costs a read of `cgroup.procs`, not a scan
//!   of `/proc` (on this 2-core VM a scan takes about 3 ms for 100
//!   processes). Only a root job writing itself into another cgroup leaves
//!   it; that is out of reach.
//! - **group** — the job's process group, while it is still the job's
//!   (never `<= 1`, never the runner's own group: a process that moved into
//!   the runner's group is signalled by pid, not through the group).
//! - **marker** — every process of an attempt inherits
//!   [`LEASE_VAR`](crate::contain::LEASE_VAR)`=<marker>`; a scan of
//!   `/proc/<pid>/environ` finds those that left the group.
//! - **descendants** — the runner is made a child subreaper
//!   (`PR_SET_CHILD_SUBREAPER`, once per process), so orphans of a job are
//!   re-parented to the runner instead of init, and the parent chain keeps
//!   leading to the attempt: descendants of anything found above, and
//!   anything seen as the attempt's in an earlier scan (pid and start time).
//!
//! Without a cgroup, a process that both left the group and cleared its
//! environment (`env -i setsid cmd &`) can be found only while it descends
//! from a process already known; [`Mechanism`] and [`StopReport`] say which
//! mechanism was in force so that `show` can tell the truth.
//!
//! Adopted orphans that exit become zombies of the runner; they are reaped
//! here (`waitid(P_PID, pid, WNOHANG)`, one pid at a time, looked for only
//! when `waitid(P_ALL, WNOHANG | WNOWAIT)`, which reaps nothing, says some
//! child is waiting, or during a `/proc` scan), and only those
//! that are provably the attempt's: never the job's leader (tokio reaps the
//! child it spawned) and never `waitpid(-1)`. Without a cgroup an adopted
//! process that exited before any scan saw it cannot be attributed and stays
//! a zombie until the runner exits.
//!
//! # Wiring
//!
//! - when a run starts: [`sweep_orphan_cgroups`] (beside the reclaim of
//!   dead owners' jobs);
//! - after the claim, before the spawn: [`Containment::new`] with the
//!   attempt's [`lease_marker`](crate::contain::lease_marker);
//! - on the command: [`Containment::join_before_exec`] (or rely on
//!   [`Containment::spawned`] alone and accept its race);
//! - right after the spawn: [`Containment::spawned`] with the child's pid;
//! - on each heartbeat: [`Containment::observe`] and
//!   [`Containment::reap_adopted`] (cheap: one `/proc` scan);
//! - when the leader exited, and on every stop path (max runtime, cancel,
//!   lost lease, shutdown): [`Containment::stop_all`] in place of the
//!   group-only stop, while tokio waits for the leader; its
//!   [`StopReport`] says what was in force;
//! - on a shutdown signal: [`Containment::sent`] with the request's sender
//!   to charge an attempt whose own job asked;
//! - on [`JobControl`](crate::JobControl): [`Containment::suspend`] then
//!   [`suspend_self`](crate::suspend_self), then [`Containment::resume`].

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use slothqueue_core::{Fence, JobId};
use tokio::time::Instant;

use crate::process::group::may_signal_group;

mod ceiling;
mod cgroup;
mod procs;
mod report;

pub use ceiling::CeilingReport;
pub(crate) use ceiling::memory_exceeded;
use ceiling::{Ceilings, V1Child, oom_kills};
pub use cgroup::SweepReport;
use cgroup::*;
use procs::*;
use report::Found;
pub use report::{Mechanism, StopReport};

/// The environment variable marking every process of one attempt of a job
/// (see [`lease_marker`]). A runner that dies between spawning a job and
/// the heartbeat that records its process group leaves an orphan nobody
/// could find by its group; the marker finds it (and any process that left
/// the group but not the environment).
pub const LEASE_VAR: &str = "SLOTHQUEUE_LEASE";

/// The value of [`LEASE_VAR`] for attempt `fence` of job `job`: unique on
/// this host, as the owner's id is.
pub fn lease_marker(job: JobId, fence: &Fence) -> String {
    format!("{job}/{}/{}", fence.attempt, fence.owner)
}

/// Who sent a signal, as read the moment it arrived (the sender may be gone
/// by the time the runner looks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalSender {
    /// Its pid.
    pub pid: i32,
    /// Its real user id.
    pub uid: u32,
    /// Its [`LEASE_VAR`](crate::contain::LEASE_VAR) value, if readable and set.
    pub lease_marker: Option<String>,
    /// Its cgroup v2 path (`0::<path>` of `/proc/<pid>/cgroup`), if readable.
    pub cgroup: Option<String>,
}

impl SignalSender {
    /// Reads what can be known about process `pid`, sent with uid `uid`.
    pub fn read(pid: i32, uid: u32) -> SignalSender {
        SignalSender { pid, uid, lease_marker: lease_marker_of(pid), cgroup: proc_cgroup(pid) }
    }
}

/// Kills what is left in the attempt cgroups of runners that died (`kill
/// -9`, a crash) under this runner's own cgroup, and removes them: the
/// start-up counterpart of the lease-marker sweep, which also catches
/// processes that cleared their environment. A cgroup whose runner (pid and
/// start time, from its name) is alive is left alone, and so is one whose
/// runner lives in another PID namespace (its pid means nothing in this
/// `/proc`: a runner under `unshare -p` is pid 1 there). Call it once when a
/// run starts, beside the reclaim of dead owners' jobs.
///
/// The attempts' cgroup v1 children (made for memory and CPU ceilings, see
/// `ceiling.rs`) under the runner's own v1 cgroups are swept the same way.
pub async fn sweep_orphan_cgroups() -> SweepReport {
    let mut report = SweepReport::default();
    if let Ok((parent, _)) = own_cgroup() {
        sweep_under(parent, &mut report).await;
    }
    for parent in ceiling::own_v1_dirs() {
        sweep_under(parent, &mut report).await;
    }
    report
}

/// How often a dying attempt is looked at.
const POLL: Duration = Duration::from_millis(25);
/// How long KILLed processes may take to disappear before we stop waiting
/// (a process in uninterruptible sleep dies only when its I/O ends).
const AFTER_KILL: Duration = Duration::from_secs(5);

/// One attempt's processes: created before the job is spawned, asked to
/// stop them all on every stop path. See the module documentation.
///
/// Wiring, in order: [`Containment::new`] after the claim;
/// [`join_before_exec`](Containment::join_before_exec) on the command;
/// [`spawned`](Containment::spawned) with the child's pid right after the
/// spawn; [`stop_all`](Containment::stop_all) when the leader exited and on
/// each stop path (max runtime, cancel, lost lease, shutdown); drop it when
/// the attempt is recorded.
#[derive(Debug)]
pub struct Containment {
    needle: String,
    me: i32,
    subreaper: bool,
    cgroup: Option<Cgroup>,
    /// Why there is no (working) cgroup.
    why_not: Mutex<Option<String>>,
    state: Mutex<State>,
    /// The name of the attempt's cgroups; `None` where cgroups are not
    /// used at all.
    name: Option<String>,
    /// The memory and CPU ceilings, once set (before the spawn).
    ceilings: std::sync::OnceLock<Ceilings>,
    /// OOM kills counted before the attempt's cgroups were removed.
    oom_seen: std::sync::atomic::AtomicU64,
}

/// What a stop already sent TERM to: the group (once), and by pid.
#[derive(Debug, Default)]
struct Sent {
    group: bool,
    pids: HashSet<(i32, u64)>,
}

#[derive(Debug, Default)]
struct State {
    /// The job's leader: pid (= pgid) and start time.
    leader: Option<(i32, u64)>,
    /// Every process seen as the attempt's: pid -> start time.
    seen: HashMap<i32, u64>,
}

impl Containment {
    /// A containment for attempt `attempt` of job `job`, whose processes
    /// carry `LEASE_VAR=<marker>` (see
    /// [`lease_marker`](crate::contain::lease_marker)). Makes the runner a
    /// child subreaper (once per process) and creates the attempt's cgroup
    /// where a cgroup v2 hierarchy is writable. Never fails: what could not
    /// be set up shows in [`mechanism`](Containment::mechanism).
    pub fn new(job: JobId, attempt: u32, marker: &str) -> Containment {
        let mut this = Containment::without_cgroup(marker);
        let name = cgroup_name(job, attempt);
        let created = create_cgroup(&name);
        this.name = Some(name);
        match created {
            Ok(cg) => {
                this.cgroup = Some(cg);
                this.set_why_not(None);
            }
            Err(why) => this.set_why_not(Some(why)),
        }
        this
    }

    /// Like [`new`](Containment::new) but never uses a cgroup (a runner
    /// told not to, or a test showing what only the cgroup catches).
    pub fn without_cgroup(marker: &str) -> Containment {
        Containment {
            needle: format!("{LEASE_VAR}={marker}"),
            me: std::process::id() as i32,
            subreaper: become_subreaper(),
            cgroup: None,
            why_not: Mutex::new(Some("no cgroup used".to_owned())),
            state: Mutex::new(State::default()),
            name: None,
            ceilings: std::sync::OnceLock::new(),
            oom_seen: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn set_why_not(&self, why: Option<String>) {
        if let Ok(mut w) = self.why_not.lock() {
            *w = why;
        }
    }

    /// The mechanism in force (see [`Mechanism`]).
    pub fn mechanism(&self) -> Mechanism {
        match &self.cgroup {
            Some(cg) if !cg.broken.load(Ordering::Relaxed) => Mechanism::Cgroup,
            _ if self.subreaper => Mechanism::SubreaperProc,
            _ => Mechanism::GroupOnly,
        }
    }

    /// Why no cgroup holds the attempt (`None` when one does): a process
    /// that left the group and cleared its environment is not contained.
    pub fn not_contained(&self) -> Option<String> {
        if self.mechanism() == Mechanism::Cgroup {
            return None;
        }
        self.why_not.lock().ok().and_then(|w| w.clone())
    }

    /// The attempt's cgroup directory, if it has one.
    pub fn cgroup_dir(&self) -> Option<&Path> {
        self.cgroup.as_ref().map(|c| c.dir.as_path())
    }

    /// Puts the attempt's memory maximum and CPU weight in force (see
    /// `ceiling.rs`: its cgroup v2 child where the controller can be had,
    /// else a child in a writable cgroup v1 hierarchy), for the job to join
    /// with [`join_before_exec`](Containment::join_before_exec). Call it
    /// once, before that. Says for each asked ceiling whether it is in
    /// force, or why not; a containment without cgroups enforces none.
    pub fn set_ceilings(&self, memory_max: Option<u64>, cpu_weight: Option<u32>) -> CeilingReport {
        let why = match (&self.name, self.ceilings.get()) {
            (None, _) => "this runner uses no cgroups",
            (Some(_), Some(_)) => "ceilings were already set for this attempt",
            (Some(name), None) => {
                let v2 = self.cgroup.as_ref().filter(|c| !c.broken.load(Ordering::Relaxed));
                let (made, report) = ceiling::set_ceilings(v2, name, memory_max, cpu_weight);
                if let Err(unused) = self.ceilings.set(made) {
                    remove_v1(&unused.v1);
                }
                return report;
            }
        };
        CeilingReport {
            memory: memory_max.map(|_| Err(why.to_owned())),
            cpu: cpu_weight.map(|_| Err(why.to_owned())),
        }
    }

    /// The attempt's memory maximum, if its cgroup killed a process for
    /// going over it (read before the cgroup was removed, or now).
    pub fn memory_exceeded(&self) -> Option<u64> {
        let watch = self.ceilings.get()?.memory.as_ref()?;
        let kills = self.oom_seen.load(Ordering::Relaxed).max(oom_kills(&watch.events));
        (kills > 0).then_some(watch.limit)
    }

    /// Counts the OOM kills before the cgroup that counts them goes.
    fn remember_oom(&self) {
        if let Some(watch) = self.ceilings.get().and_then(|c| c.memory.as_ref()) {
            self.oom_seen.fetch_max(oom_kills(&watch.events), Ordering::Relaxed);
        }
    }

    fn v1_children(&self) -> &[V1Child] {
        self.ceilings.get().map_or(&[], |c| c.v1.as_slice())
    }

    /// Makes the spawned child join the attempt's cgroups between fork and
    /// exec, before it can start anything (no-op without a cgroup). It
    /// adds a `pre_exec` hook, so std forks the runner instead of using
    /// `posix_spawn` (about 1 ms per job); [`spawned`](Containment::spawned)
    /// alone also places the child, from the parent, with a race: whatever
    /// the child forks before it is moved stays outside the cgroup (the
    /// other paths still find it unless it also cleared its environment).
    /// Returns whether it added the hook. Call
    /// [`set_ceilings`](Containment::set_ceilings) first: the v1 children
    /// a ceiling needs are joined by the same hook.
    pub fn join_before_exec(&self, cmd: &mut tokio::process::Command) -> bool {
        let mut fds: Vec<Arc<std::os::fd::OwnedFd>> =
            self.v1_children().iter().map(|c| Arc::clone(&c.procs)).collect();
        if let Some(cg) = &self.cgroup {
            fds.push(Arc::clone(&cg.procs));
        }
        if fds.is_empty() {
            return false;
        }
        #[expect(
            unsafe_code,
            reason = "pre_exec runs between fork and exec; the closure makes one \
                      write(2) of a static buffer to each descriptor opened before the \
                      fork, allocates nothing and cannot panic"
        )]
        // SAFETY: see the reason above; `write` is async-signal-safe, and a
        // failure is left to `spawned`, which checks and moves the pid.
        unsafe {
            cmd.pre_exec(move || {
                for procs in &fds {
                    let _ = rustix::io::write(&**procs, b"0");
                }
                Ok(())
            });
        }
        true
    }

    /// Records the job's leader right after the spawn (its pid is also its
    /// process group) and makes sure it is in the attempt's cgroup: moves it
    /// there from the parent if [`join_before_exec`](Containment::join_before_exec)
    /// was not used or failed. A failed move degrades the mechanism.
    pub fn spawned(&self, pid: u32) {
        let Ok(pid) = i32::try_from(pid) else { return };
        let start = read_stat(pid).map(|s| s.starttime);
        if let (Ok(mut st), Some(start)) = (self.state.lock(), start) {
            st.leader = Some((pid, start));
            st.seen.insert(pid, start);
        }
        for child in self.v1_children() {
            // Idempotent: a pid already there stays; a zombie cannot move.
            let _ = std::fs::write(child.dir.join("cgroup.procs"), pid.to_string());
        }
        let Some(cg) = &self.cgroup else { return };
        if proc_cgroup(pid).is_some_and(|p| cgroup_matches(&p, &cg.rel)) {
            cg.placed_early.store(true, Ordering::Relaxed);
            return;
        }
        if let Err(e) = std::fs::write(cg.dir.join("cgroup.procs"), pid.to_string()) {
            // The leader may already be gone (a zombie cannot move): then
            // nothing of it can escape either unless it forked first.
            if read_stat(pid).is_some_and(|s| !is_dead(s.state)) {
                cg.broken.store(true, Ordering::Relaxed);
                self.set_why_not(Some(format!(
                    "cannot move the job into {}: {e}",
                    cg.dir.display()
                )));
            }
        }
    }

    /// Whether process `pid` is (or, gone or a zombie, was) one of the
    /// attempt's: its leader, a member of its cgroup, marked with its lease
    /// marker, a descendant of its leader or of a process seen as the
    /// attempt's. For a shutdown signal's sender prefer
    /// [`sent`](Containment::sent), which also uses what was read about the
    /// sender when the signal arrived.
    pub fn contains(&self, pid: i32) -> bool {
        if pid <= 1 || pid == self.me {
            return false;
        }
        let (leader, seen) = match self.state.lock() {
            Ok(st) => (st.leader, st.seen.clone()),
            Err(_) => (None, HashMap::new()),
        };
        let stat = read_stat(pid);
        let same = |recorded: u64| stat.is_none_or(|s| s.starttime == recorded);
        if leader.is_some_and(|(l, start)| l == pid && same(start)) {
            return true;
        }
        if seen.get(&pid).is_some_and(|&start| same(start)) {
            return true;
        }
        let Some(stat) = stat else { return false };
        if let Some(cg) = &self.cgroup {
            if proc_cgroup(pid).is_some_and(|p| cgroup_matches(&p, &cg.rel)) {
                return true;
            }
        }
        if is_marked(pid, &self.needle) {
            return true;
        }
        // The parent chain, bounded against a cycle read across pid reuse.
        let mut ppid = stat.ppid;
        for _ in 0..64 {
            if ppid <= 1 || ppid == self.me {
                return false;
            }
            let Some(parent) = read_stat(ppid) else { return false };
            if leader.is_some_and(|(l, start)| l == ppid && parent.starttime == start)
                || seen.get(&ppid) == Some(&parent.starttime)
                || is_marked(ppid, &self.needle)
            {
                return true;
            }
            ppid = parent.ppid;
        }
        false
    }

    /// Whether a signal's sender was one of the attempt's processes, from
    /// what was read about it when the signal arrived (its marker and
    /// cgroup: a sender that exited since is still recognised) and, failing
    /// that, [`contains`](Containment::contains).
    pub fn sent(&self, sender: &SignalSender) -> bool {
        if sender
            .lease_marker
            .as_deref()
            .is_some_and(|m| self.needle.strip_prefix(&format!("{LEASE_VAR}=")) == Some(m))
        {
            return true;
        }
        if let (Some(cg), Some(theirs)) = (&self.cgroup, &sender.cgroup) {
            if cgroup_matches(theirs, &cg.rel) {
                return true;
            }
        }
        self.contains(sender.pid)
    }

    /// Looks at the attempt's processes now and remembers them (pid and
    /// start time), so that one which later loses every tie — its parent
    /// exits, it has left the group and cleared its environment — is still
    /// the attempt's for [`stop_all`](Containment::stop_all) and
    /// [`contains`](Containment::contains). Without a cgroup, call it on
    /// each heartbeat; with one it adds little. Returns how many it found.
    pub fn observe(&self) -> usize {
        self.look().0.len()
    }

    /// The cgroup, when it alone holds every process of the attempt: in
    /// force, the leader placed before exec, not removed yet.
    fn cgroup_only(&self) -> Option<&Cgroup> {
        let cg = self.cgroup.as_ref()?;
        let whole = !cg.broken.load(Ordering::Relaxed)
            && cg.placed_early.load(Ordering::Relaxed)
            && !cg.removed.load(Ordering::Relaxed);
        whole.then_some(cg)
    }

    /// The live processes of the attempt now, and how many adopted zombies
    /// of it were reaped. With a cgroup holding everything, that is a read
    /// of `cgroup.procs` (and a `/proc` scan only when some child of the
    /// runner is waiting to be reaped); else one `/proc` scan.
    fn look(&self) -> (Vec<(i32, u64, Found)>, usize) {
        let Some(cg) = self.cgroup_only() else {
            let table = proc_table();
            let found = self.find(&table);
            // Reaped from the same table: a process found alive is reaped
            // in a later round, and a round finding none alive reaps all.
            return (found, self.reap(&table));
        };
        let found: Vec<(i32, u64, Found)> = cgroup_procs(&cg.dir)
            .into_iter()
            .filter(|&pid| pid > 1 && pid != self.me)
            .filter_map(|pid| {
                let s = read_stat(pid).filter(|s| !is_dead(s.state))?;
                Some((pid, s.starttime, Found::Cgroup))
            })
            .collect();
        if let Ok(mut st) = self.state.lock() {
            st.seen.extend(found.iter().map(|&(pid, start, _)| (pid, start)));
        }
        let reaped = if has_waitable_child() { self.reap(&proc_table()) } else { 0 };
        (found, reaped)
    }

    /// The live processes of the attempt now, each with the path that found
    /// it; remembered for later scans.
    fn find(&self, table: &HashMap<i32, ProcInfo>) -> Vec<(i32, u64, Found)> {
        let (leader, mut seen) = match self.state.lock() {
            Ok(st) => (st.leader, st.seen.clone()),
            Err(_) => (None, HashMap::new()),
        };
        let group = self.job_group(leader, table);
        let in_cgroup: HashSet<i32> = self
            .cgroup
            .as_ref()
            .filter(|c| !c.removed.load(Ordering::Relaxed))
            .map(|c| cgroup_procs(&c.dir))
            .unwrap_or_default();
        let mut found: HashMap<i32, (u64, Found)> = HashMap::new();
        // Every process of the attempt descends from its leader, so none
        // started before it: older ones are not read further (their
        // environment above all, the cost of a scan).
        let since = leader.map(|(_, start)| start);
        let live = table.values().filter(|p| {
            !is_dead(p.state)
                && p.pid > 1
                && p.pid != self.me
                && since.is_none_or(|s| p.starttime >= s)
        });
        for p in live.clone() {
            let how = if in_cgroup.contains(&p.pid) {
                Some(Found::Cgroup)
            } else if group.is_some_and(|g| p.pgrp == g) {
                Some(Found::Group)
            } else if is_marked(p.pid, &self.needle) {
                Some(Found::Marker)
            } else if seen.get(&p.pid) == Some(&p.starttime) {
                Some(Found::Descendant)
            } else {
                None
            };
            if let Some(how) = how {
                found.insert(p.pid, (p.starttime, how));
            }
        }
        // Descendants of anything found, of the leader and of processes
        // seen before (a parent that exited re-parents to us, not to them,
        // so this mostly catches what was forked since the last scan).
        let mut roots: HashSet<i32> = found.keys().copied().collect();
        if let Some((l, start)) = leader {
            // Only while the pid is still the leader's (not reused).
            if table.get(&l).is_some_and(|p| p.starttime == start) {
                roots.insert(l);
            }
        }
        loop {
            let mut grew = false;
            for p in live.clone() {
                if !found.contains_key(&p.pid) && roots.contains(&p.ppid) {
                    found.insert(p.pid, (p.starttime, Found::Descendant));
                    roots.insert(p.pid);
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
        for (&pid, &(start, _)) in &found {
            seen.insert(pid, start);
        }
        if let Ok(mut st) = self.state.lock() {
            st.seen.extend(seen);
        }
        found.into_iter().map(|(pid, (start, how))| (pid, start, how)).collect()
    }

    /// The job's process group, if it is still the job's and may be
    /// signalled as a group: the leader is alive with its recorded start
    /// time, or gone (a pgid is not handed out while members use it).
    fn job_group(&self, leader: Option<(i32, u64)>, table: &HashMap<i32, ProcInfo>) -> Option<i32> {
        let (pgid, start) = leader?;
        if !may_signal_group(pgid) {
            return None;
        }
        match table.get(&pgid) {
            Some(p) if p.starttime != start => None,
            _ => Some(pgid),
        }
    }

    /// Reaps the attempt's adopted zombies: children of the runner that
    /// exited and are provably the attempt's (seen before, in the job's
    /// group, or in its cgroup), never its leader (tokio's). Returns how
    /// many. [`stop_all`](Containment::stop_all) calls it; a runner may
    /// also call it on each heartbeat.
    pub fn reap_adopted(&self) -> usize {
        self.reap(&proc_table())
    }

    fn reap(&self, table: &HashMap<i32, ProcInfo>) -> usize {
        let (leader, seen) = match self.state.lock() {
            Ok(st) => (st.leader, st.seen.clone()),
            Err(_) => return 0,
        };
        let group = self.job_group(leader, table);
        let mut reaped = 0;
        for p in table.values() {
            if p.state != 'Z' || p.ppid != self.me || leader.is_some_and(|(l, _)| l == p.pid) {
                continue;
            }
            let ours = seen.get(&p.pid) == Some(&p.starttime)
                || group.is_some_and(|g| p.pgrp == g)
                || self.cgroup.as_ref().is_some_and(|cg| {
                    proc_cgroup(p.pid).is_some_and(|path| cgroup_matches(&path, &cg.rel))
                });
            if !ours {
                continue;
            }
            let Some(pid) = Pid::from_raw(p.pid) else { continue };
            let opts =
                rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOHANG;
            if let Ok(Some(_)) = rustix::process::waitid(rustix::process::WaitId::Pid(pid), opts) {
                reaped += 1;
            }
        }
        reaped
    }

    /// Stops every process of the attempt: TERM to everything found (the
    /// group as a group, the rest by pid), up to `grace` for them to go,
    /// then KILL (`cgroup.kill` too), looking again each time so that late
    /// forks die as well, until nothing of the attempt is alive or 5 s after
    /// the KILL. Reaps adopted zombies on the way and removes the cgroup
    /// once empty. `grace` zero kills at once. Cancel-safe: dropping the
    /// future midway leaves nothing to undo, and a later call goes on.
    pub async fn stop_all(&self, grace: Duration) -> StopReport {
        let mut counted: HashMap<(i32, u64), Found> = HashMap::new();
        let mut termed = Sent::default();
        let mut reaped = 0;
        let mut killing = grace.is_zero();
        let mut deadline = Instant::now() + if killing { AFTER_KILL } else { grace };
        let mut survivors = Vec::new();
        loop {
            let (found, reaped_now) = self.look();
            reaped += reaped_now;
            for &(pid, start, how) in &found {
                counted.entry((pid, start)).or_insert(how);
            }
            if found.is_empty() {
                break;
            }
            let group = self.state.lock().ok().and_then(|st| st.leader).map(|(l, _)| l);
            if killing {
                if let Some(cg) = &self.cgroup {
                    cgroup_kill(&cg.dir);
                }
                self.signal(&found, group, Signal::KILL, None);
            } else {
                self.signal(&found, group, Signal::TERM, Some(&mut termed));
                // A stopped process acts on its TERM only once continued.
                self.signal(&found, group, Signal::CONT, None);
            }
            if Instant::now() >= deadline {
                if killing {
                    survivors = found.iter().map(|f| f.0).collect();
                    break;
                }
                killing = true;
                deadline = Instant::now() + AFTER_KILL;
                continue;
            }
            tokio::time::sleep(POLL).await;
        }
        let cgroup_removed = survivors.is_empty() && self.remove_cgroup();
        if survivors.is_empty() {
            self.remember_oom();
            remove_v1(self.v1_children());
        }
        let count = |how: Found| counted.values().filter(|h| **h == how).count();
        StopReport {
            mechanism: self.mechanism(),
            not_contained: self.not_contained(),
            by_cgroup: count(Found::Cgroup),
            by_group: count(Found::Group),
            by_marker: count(Found::Marker),
            by_descendant: count(Found::Descendant),
            survivors,
            reaped,
            cgroup_removed,
        }
    }

    /// Sends `sig` to the found processes: the job's group as a group when
    /// it may be, every other one by pid (identity checked through a
    /// pidfd). With `once`, a process already sent the signal is skipped.
    fn signal(
        &self,
        found: &[(i32, u64, Found)],
        group: Option<i32>,
        sig: Signal,
        mut memo: Option<&mut Sent>,
    ) {
        let has_members = found.iter().any(|f| f.2 == Found::Group);
        let group = group.filter(|&g| has_members && may_signal_group(g));
        let mut by_group = false;
        if let Some(pgid) = group {
            if memo.as_deref().is_none_or(|m| !m.group) {
                if let Some(p) = Pid::from_raw(pgid) {
                    by_group = rustix::process::kill_process_group(p, sig).is_ok();
                }
                if let Some(m) = memo.as_deref_mut() {
                    m.group = true;
                }
            }
        }
        for &(pid, start, how) in found {
            if let Some(m) = memo.as_deref_mut() {
                if !m.pids.insert((pid, start)) {
                    continue; // signalled before (a TERM is sent once)
                }
            }
            if how == Found::Group && by_group {
                continue; // the group signal reached it
            }
            signal_pid(pid, start, sig, self.me);
        }
    }

    /// SIGSTOPs every process of the attempt (for a runner suspended with
    /// Ctrl-Z, before it stops itself). Returns how many were found.
    pub fn suspend(&self) -> usize {
        self.signal_everything(Signal::STOP)
    }

    /// SIGCONTs every process of the attempt (the runner was continued).
    pub fn resume(&self) -> usize {
        self.signal_everything(Signal::CONT)
    }

    fn signal_everything(&self, sig: Signal) -> usize {
        let (found, _) = self.look();
        let group = self.state.lock().ok().and_then(|st| st.leader).map(|(l, _)| l);
        self.signal(&found, group, sig, None);
        found.len()
    }

    /// Removes the attempt's cgroup if it is empty. Returns whether it is
    /// gone (now or before).
    fn remove_cgroup(&self) -> bool {
        let Some(cg) = &self.cgroup else { return false };
        if cg.removed.load(Ordering::Relaxed) {
            return true;
        }
        self.remember_oom();
        let gone = match std::fs::remove_dir(&cg.dir) {
            Ok(()) => true,
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
        cg.removed.store(gone, Ordering::Relaxed);
        gone
    }
}

impl Drop for Containment {
    /// Best effort, never blocking: KILLs whatever is left in the cgroup and
    /// removes it if it is already empty.
    fn drop(&mut self) {
        for child in self.v1_children() {
            if !cgroup_procs(&child.dir).is_empty() {
                cgroup_kill(&child.dir);
            }
        }
        remove_v1(self.v1_children());
        if let Some(cg) = &self.cgroup {
            if !cg.removed.load(Ordering::Relaxed) {
                if !cgroup_procs(&cg.dir).is_empty() {
                    cgroup_kill(&cg.dir);
                }
                let _ = std::fs::remove_dir(&cg.dir);
            }
        }
    }
}

/// Removes the attempt's v1 children that are empty (a busy one is left
/// to the start-up sweep of a later runner).
fn remove_v1(children: &[V1Child]) {
    for child in children {
        let _ = std::fs::remove_dir(&child.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_in_hybrid_and_unified_layouts() {
        let hybrid = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                      41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_mount(hybrid), Some(("/".into(), "/sys/fs/cgroup/unified".into())));
        let unified = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(cgroup2_mount(unified), Some(("/".into(), "/sys/fs/cgroup".into())));
        assert_eq!(cgroup2_mount("22 1 0:5 / /proc rw - proc proc rw\n"), None);
        assert_eq!(unescape("/a\\040b"), "/a b");
    }

    #[test]
    fn reads_the_unified_line_of_proc_cgroup() {
        let text = "4:memory:/x\n0::/user.slice/user-1000.slice/session-2.scope\n";
        assert_eq!(
            unified_path(text).as_deref(),
            Some("/user.slice/user-1000.slice/session-2.scope")
        );
        assert_eq!(unified_path("4:memory:/x\n"), None);
        assert!(cgroup_matches("/a/slothqueue-1-1-2-0 (deleted)", "/a/slothqueue-1-1-2-0"));
        assert!(!cgroup_matches("/a/slothqueue-1-1-2-01", "/a/slothqueue-1-1-2-0"));
    }

    #[test]
    fn never_signals_init_itself_or_its_own_group() {
        assert!(!may_signal_group(0));
        assert!(!may_signal_group(1));
        assert!(!may_signal_group(-3));
        assert!(!may_signal_group(crate::process::procfs::own_pgrp()));
        let me = std::process::id() as i32;
        let start = read_stat(me).unwrap().starttime;
        signal_pid(me, start, Signal::KILL, me); // must be a no-op: we are still here
        signal_pid(1, 0, Signal::KILL, me);
        let c = Containment::without_cgroup("contain-unit/never");
        assert!(!c.contains(me));
        assert!(!c.contains(1));
        assert!(!c.contains(0));
    }

    #[test]
    fn the_report_says_what_held_the_attempt() {
        let r = StopReport {
            mechanism: Mechanism::SubreaperProc,
            not_contained: Some("no cgroup used".into()),
            by_cgroup: 0,
            by_group: 2,
            by_marker: 1,
            by_descendant: 1,
            survivors: Vec::new(),
            reaped: 1,
            cgroup_removed: false,
        };
        assert_eq!(r.stopped(), 4);
        assert!(r.is_clean());
        assert_eq!(
            r.to_string(),
            "subreaper+proc: stopped 4 (cgroup 0, group 2, marker 1, descendants 1); \
             not contained: no cgroup used"
        );
        assert_eq!(Mechanism::GroupOnly.to_string(), "group only");
    }

    #[test]
    fn a_containment_can_be_shared_between_tasks() {
        fn shared<T: Send + Sync + 'static>() {}
        shared::<Containment>();
        shared::<StopReport>();
    }

    #[test]
    fn cgroup_names_say_whose_they_are() {
        assert_eq!(
            cgroup_owner("slothqueue-12-3-4567-890-4026531836-0"),
            Some((4567, 890, Some(4_026_531_836)))
        );
        assert_eq!(cgroup_owner("slothqueue-12-3-4567-890-0"), Some((4567, 890, None)));
        assert_eq!(cgroup_owner("slothqueue-x"), None);
        assert_eq!(cgroup_owner("other-12-3-4567-890-0"), None);
    }

    /// The v2 sweep, and the v1 one where a v1 memory hierarchy is writable
    /// (one test: two sweeps at once would take each other's orphans).
    #[tokio::test]
    async fn the_sweep_kills_and_removes_dead_runners_cgroups_only() {
        let v2 = own_cgroup().ok().map(|(parent, _)| parent.clone());
        let v1 = ceiling::own_v1(ceiling::Controller::Memory).ok().cloned();
        let me = std::process::id();
        let mut orphans = Vec::new();
        let mut live = Vec::new();
        for parent in v2.iter().chain(v1.iter()) {
            let dead = parent.join(format!("slothqueue-1-1-{me}-{}-0", own_start() + 1));
            let alive = parent.join(format!("slothqueue-1-1-{me}-{}-999999", own_start()));
            std::fs::create_dir(&dead).unwrap();
            std::fs::create_dir(&alive).unwrap();
            let orphan = std::process::Command::new("sleep").arg("300").spawn().unwrap();
            std::fs::write(dead.join("cgroup.procs"), orphan.id().to_string()).unwrap();
            orphans.push((orphan, dead));
            live.push(alive);
        }
        if orphans.is_empty() {
            return; // no cgroup here: nothing to sweep
        }
        let report = sweep_orphan_cgroups().await;
        for (mut orphan, dead) in orphans {
            let status = orphan.wait().unwrap();
            assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
            assert!(!dead.exists(), "{} left: {report:?}", dead.display());
        }
        assert!(report.killed >= 1 && report.removed >= live.len(), "{report:?}");
        for alive in live {
            assert!(alive.exists(), "a live runner's cgroup was swept");
            std::fs::remove_dir(&alive).unwrap();
        }
    }

    /// The job's first instruction already runs in the attempt's cgroup
    /// (no `spawned` call: only the pre-exec hook can have placed it), and
    /// `spawned` alone places a child spawned without the hook.
    #[tokio::test]
    async fn the_leader_joins_the_cgroup_before_exec_or_right_after_the_spawn() {
        let c = Containment::new(0, 2, "contain-unit/placement");
        let Some(cg) = &c.cgroup else { return }; // no cgroup here
        let mut cmd = tokio::process::Command::new("cat");
        cmd.arg("/proc/self/cgroup").stdout(std::process::Stdio::piped()).process_group(0);
        c.join_before_exec(&mut cmd);
        let out = cmd.output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(unified_path(&text).as_deref(), Some(cg.rel.as_str()), "{text}");

        let mut cmd = tokio::process::Command::new("sleep");
        cmd.arg("300").process_group(0);
        let mut child = cmd.spawn().unwrap();
        let pid = child.id().unwrap();
        c.spawned(pid);
        assert_eq!(proc_cgroup(pid as i32).as_deref(), Some(cg.rel.as_str()));
        assert_eq!(c.mechanism(), Mechanism::Cgroup);
        let report = c.stop_all(Duration::from_millis(200)).await;
        assert_eq!((report.by_cgroup, report.is_clean(), report.cgroup_removed), (1, true, true));
        assert!(child.wait().await.is_ok(), "tokio reaps its own child");
    }

    #[tokio::test]
    async fn an_empty_attempt_stops_at_once_and_removes_its_cgroup() {
        let c = Containment::new(0, 1, "contain-unit/empty");
        let dir = c.cgroup_dir().map(Path::to_path_buf);
        let report = c.stop_all(Duration::from_secs(10)).await;
        assert!(report.is_clean());
        assert_eq!(report.stopped(), 0);
        if let Some(dir) = dir {
            assert_eq!(report.mechanism, Mechanism::Cgroup);
            assert!(report.cgroup_removed && !dir.exists());
        }
    }
}
