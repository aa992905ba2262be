//! Process groups: reading `/proc`, signalling whole groups safely, and
//! starting children in a clean state.
//!
//! Every job runs as the leader of its own process group, so stopping a job
//! means signalling the group: a pipeline or a `cmd &` inside the job dies
//! with it. Three rules keep that safe:
//!
//! - never signal a pgid `<= 1` or the runner's own group (a bug there would
//!   kill the runner, the user's shell, or everything);
//! - signal our own child's group *before* reaping its leader: until the
//!   leader is reaped its pid (and so the pgid) cannot be reused; after that,
//!   only surviving members pin the pgid, and a group with no members simply
//!   answers "no such process";
//! - a group is gone when no *live* process has that pgid: zombies are
//!   ignored, because whether they are reaped depends on who adopted them.
//!
//! Not covered: a process that leaves the job's group on purpose (`setsid`,
//! `setpgid`, a daemon that double-forks) escapes the group's signals, as it
//! escapes a terminal's. Its output still goes to the job's log until it
//! closes it; the runner waits for that a bounded time only.

use std::path::Path;
use std::time::Duration;

use rustix::process::{Pid, Signal};
use slothqueue_core::{Fence, JobId, Timestamp};
use tokio::process::Child;
use tokio::time::Instant;

use crate::exec::StopListener;

/// How often a dying group is looked at.
const POLL: Duration = Duration::from_millis(20);
/// How long a KILLed group may take to disappear before we stop waiting
/// (a process in uninterruptible sleep dies only when its I/O ends).
const AFTER_KILL: Duration = Duration::from_secs(5);
/// Linux reports process start times in clock ticks of `USER_HZ`, which is
/// 100 on every architecture Linux supports for user space.
const CLOCK_TICKS_PER_SECOND: u64 = 100;

/// The fields of `/proc/<pid>/stat` the runner uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// `R`, `S`, `D`, `Z`, …
    pub state: char,
    /// The process group.
    pub pgrp: i32,
    /// Start time in clock ticks after boot (field 22).
    pub starttime: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may contain spaces
/// and parentheses, so the fields are counted after the *last* `)`.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 (state), so field N is `fields[N - 3]`.
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        starttime: fields.get(19)?.parse().ok()?,
    })
}

/// `/proc/<pid>/stat`, parsed; `None` when there is no such process.
pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The boot time, in seconds since the epoch (`btime` in `/proc/stat`).
fn boot_time() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    text.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// When a process started, in wall-clock time (second precision at best:
/// `btime` is whole seconds).
pub(crate) fn process_started_at(stat: &ProcStat) -> Option<Timestamp> {
    let boot_ms = i64::try_from(boot_time()?.checked_mul(1000)?).ok()?;
    let ms = i64::try_from(stat.starttime.checked_mul(1000)? / CLOCK_TICKS_PER_SECOND).ok()?;
    Some(Timestamp::from_millis(boot_ms.checked_add(ms)?))
}

/// The live (not zombie) processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    members_in(Path::new("/proc"), pgid)
}

fn members_in(proc_root: &Path, pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir(proc_root) else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat"))
                .ok()
                .and_then(|t| parse_stat(&t))
                .is_some_and(|s| s.pgrp == pgid && !matches!(s.state, 'Z' | 'X'))
        })
        .collect()
}

/// Whether any live process is in group `pgid`.
pub fn group_alive(pgid: i32) -> bool {
    let Some(pid) = Pid::from_raw(pgid) else { return false };
    // Cheap check first: no process at all has this pgid.
    match rustix::process::test_kill_process_group(pid) {
        Err(rustix::io::Errno::SRCH) => false,
        _ => !group_members(pgid).is_empty(),
    }
}

/// Whether the runner may ever signal group `pgid`: never 0, 1, negative,
/// or the runner's own group.
pub fn may_signal_group(pgid: i32) -> bool {
    pgid > 1 && rustix::process::getpgrp().as_raw_nonzero().get() != pgid
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

/// Prepares a command to start in a clean state: its own process group
/// (the child leads it), no file descriptors but stdio, and default
/// dispositions for the signals a job expects to be able to receive.
///
/// - Signals *ignored* in the runner stay ignored across `exec`: a runner
///   started in the background or by some supervisors has SIGINT (or
///   SIGTERM) ignored, and its jobs would then survive the TERM that stops
///   them. Signals *blocked* in the spawning thread stay blocked too. Every
///   such signal is reset, except SIGHUP: a runner started under `nohup`
///   passes that choice on to its jobs on purpose.
/// - Descriptors: slothqueue opens everything close-on-exec, but the runner
///   itself may have inherited descriptors without it (a jobserver pipe, a
///   supervisor's socket) that are none of a job's business. Everything
///   from 3 up is marked close-on-exec in the child, which also keeps std's
///   own exec-error pipe working until the exec.
///
/// Both fixes need code between fork and exec (`pre_exec`), and a
/// `pre_exec` hook makes std fork the whole runner instead of using
/// `posix_spawn` (a vfork): about 1 ms more per job, most of a short job's
/// overhead. So the hook is added only when this process actually has
/// something to fix ([`inherits_cleanly`]); usually nothing is ignored but
/// SIGPIPE (which std's `posix_spawn` path resets itself), nothing blocked,
/// and every descriptor close-on-exec. The check runs just before the spawn,
/// on the spawning thread (a signal mask is per thread).
pub(crate) fn prepare_child(cmd: &mut tokio::process::Command) {
    cmd.process_group(0);
    if inherits_cleanly() {
        return;
    }
    #[expect(
        unsafe_code,
        reason = "pre_exec runs between fork and exec; the closure only makes \
                  async-signal-safe system calls (signal, pthread_sigmask, close_range, \
                  fcntl) on the child's own state, allocates nothing and cannot panic"
    )]
    // SAFETY: see the reason above. `signal` with SIG_DFL installs no
    // handler; `pthread_sigmask` with an emptied set only unblocks;
    // `close_range` with CLOSE_RANGE_CLOEXEC and `fcntl(F_SETFD)` only set
    // the close-on-exec flag.
    unsafe {
        cmd.pre_exec(|| {
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP && sig != libc::SIGHUP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            if libc::sigemptyset(set.as_mut_ptr()) == 0 {
                libc::pthread_sigmask(libc::SIG_SETMASK, set.as_ptr(), std::ptr::null_mut());
            }
            let all_cloexec = libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            if all_cloexec != 0 {
                // Kernels before 5.11: one by one, up to a sane bound.
                for fd in 3..FALLBACK_FD_LIMIT {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
            Ok(())
        });
    }
}

/// glibc's own real-time signals 32 and 33 (bits 31 and 32 of a
/// `/proc` mask), which its `posix_spawn` handles itself.
const GLIBC_INTERNAL: u64 = (1 << 31) | (1 << 32);
/// Ignored signals a plain spawn passes on harmlessly: SIGHUP (kept on
/// purpose, see [`prepare_child`]) and SIGPIPE (std's spawn resets it).
const IGNORED_OK: u64 = 1 | (1 << 12) | GLIBC_INTERNAL;

/// Whether a child spawned now without a `pre_exec` hook starts clean: no
/// signal ignored in this process but those of [`IGNORED_OK`], none blocked
/// in this thread, and no descriptor from 3 up without close-on-exec.
/// `false` whenever it cannot tell.
pub(crate) fn inherits_cleanly() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/thread-self/status") else { return false };
    let mask = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    };
    let (Some(ignored), Some(blocked)) = (mask("SigIgn:"), mask("SigBlk:")) else { return false };
    if ignored & !IGNORED_OK != 0 || blocked & !GLIBC_INTERNAL != 0 {
        return false;
    }
    let Ok(fds) = std::fs::read_dir("/proc/thread-self/fd") else { return false };
    for entry in fds {
        let Ok(entry) = entry else { return false };
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            return false;
        };
        if fd >= 3 && !close_on_exec(fd, false) {
            return false;
        }
    }
    true
}

/// Whether descriptor `fd` of this process is close-on-exec (made so when
/// `seal`); `true` when it is not open (any more): nothing would be
/// inherited.
fn close_on_exec(fd: i32, seal: bool) -> bool {
    #[expect(
        unsafe_code,
        reason = "F_GETFD/F_SETFD only read and set the close-on-exec flag; on a \
                  descriptor closed meanwhile they fail with EBADF"
    )]
    // SAFETY: the borrowed descriptor is used for `fcntl(F_GETFD)` and
    // `fcntl(F_SETFD)`, which neither close it nor touch what it refers to.
    let fd = unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) };
    match rustix::io::fcntl_getfd(fd) {
        Ok(flags) if flags.contains(rustix::io::FdFlags::CLOEXEC) => true,
        Ok(flags) => {
            seal && rustix::io::fcntl_setfd(fd, flags | rustix::io::FdFlags::CLOEXEC).is_ok()
        }
        Err(_) => true,
    }
}

/// Marks every descriptor from 3 up that this process inherited without
/// close-on-exec as close-on-exec, so that jobs can be spawned without a
/// `pre_exec` hook (see [`prepare_child`]). A shell, `make` or a supervisor
/// often leaves one open (a saved descriptor, a jobserver pipe); no job must
/// inherit it, and no child of the runner's process did while the hook did
/// this in every child. Called once when a run starts.
pub(crate) fn seal_inherited_fds() {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<i32> = fds
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd >= 3)
        .collect();
    for fd in fds {
        close_on_exec(fd, true);
    }
}

/// SIGCHLD: ignoring it changes how children are reaped, so an inherited
/// "ignore" is left as it is (and the spawn takes the `pre_exec` path).
const SIGCHLD_BIT: u64 = 1 << (libc::SIGCHLD - 1);

/// Turns each signal this process inherited as ignored into one it catches
/// and drops, so that the runner still ignores it but a child, whose caught
/// signals exec resets to their defaults, does not inherit the "ignore".
/// Without this, a runner started with SIGQUIT ignored (`slothqueue run &`
/// in a shell script: a non-interactive shell ignores SIGINT and SIGQUIT
/// for background commands) forks its whole process for every job, since
/// only a `pre_exec` hook could reset the signal (`copy_page_range` in the
/// drain profile, issue #7). SIGHUP and SIGPIPE are left alone (see
/// [`IGNORED_OK`]), and SIGCHLD. Needs tokio's signal driver; without it
/// nothing changes. Called once when a run starts.
pub(crate) fn catch_inherited_ignores() {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return };
    let Some(ignored) = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    else {
        return;
    };
    for signo in 1..=31 {
        let bit = 1u64 << (signo - 1);
        if ignored & bit == 0 || (IGNORED_OK | SIGCHLD_BIT) & bit != 0 {
            continue;
        }
        // tokio keeps the handler for the life of the process; with the
        // stream dropped, a delivery is caught and goes nowhere: ignored.
        // It refuses the signals no handler may take (none of which can
        // be ignored in a way that matters here).
        let _ = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(signo));
    }
}

/// How far the close-on-exec fallback goes on kernels without
/// `close_range`.
const FALLBACK_FD_LIMIT: libc::c_int = 4096;

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
pub(crate) fn orphan_group_is_jobs(
    pgid: i32,
    claimed_at: Option<Timestamp>,
    slack: Duration,
) -> bool {
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

/// The process groups holding live processes marked with `marker` that are
/// the attempt's to kill: the group's leader carries the marker, or every
/// live member does. (A marked process that joined someone else's group
/// does not make that group the job's.)
pub(crate) fn marked_groups(marker: &str) -> Vec<i32> {
    let needle = format!("{LEASE_VAR}={marker}");
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    // (pid, pgid, marked) of every live process.
    let procs: Vec<(i32, i32, bool)> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter_map(|pid| {
            let stat = proc_stat(pid).filter(|s| !matches!(s.state, 'Z' | 'X'))?;
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let marked = env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes());
            Some((pid, stat.pgrp, marked))
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

/// How long after its claim a job's process may have been spawned: the
/// runner spawns right after claiming (opening the log is all in between),
/// so this is generous; a much later leader with the recorded pid is a
/// stranger.
const LEADER_SPAWN_WINDOW: Duration = Duration::from_secs(600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_counts_after_the_last_paren() {
        let line = "4242 (we)ird (name)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        let s = parse_stat(line).unwrap();
        assert_eq!(s, ProcStat { state: 'S', pgrp: 4242, starttime: 987_654 });
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("1 (x) S 1").is_none());
    }

    #[test]
    fn never_signals_init_or_its_own_group() {
        assert!(!may_signal_group(0));
        assert!(!may_signal_group(1));
        assert!(!may_signal_group(-5));
        assert!(!may_signal_group(rustix::process::getpgrp().as_raw_nonzero().get()));
        assert!(!signal_group(1, Signal::TERM));
    }

    #[test]
    fn this_process_started_recently_and_in_the_past() {
        let me = proc_stat(std::process::id() as i32).unwrap();
        let started = process_started_at(&me).unwrap();
        assert!(started.as_millis() > 1_600_000_000_000);
    }

    #[test]
    fn an_inherited_descriptor_forces_the_reset_until_sealed() {
        use std::os::fd::AsRawFd;
        // A pipe without close-on-exec, as a shell or `make` would leave.
        let (reader, writer) = rustix::pipe::pipe().unwrap();
        let fd = reader.as_raw_fd();
        assert!(!close_on_exec(fd, false));
        assert!(!inherits_cleanly(), "a spawn now would pass the pipe on");
        seal_inherited_fds();
        assert!(close_on_exec(fd, false), "sealed");
        assert!(close_on_exec(writer.as_raw_fd(), false), "sealed");
    }
}
