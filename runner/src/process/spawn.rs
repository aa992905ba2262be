//! Starting a child in a clean state, and the process-wide fixes that let
//! most spawns skip a fork of the whole runner.
//!
//! All of the runner's `unsafe` for processes is here: the `pre_exec` hook
//! (code between fork and exec) and borrowing raw descriptors to read and
//! set their close-on-exec flag. Each block says why it is sound.

use crate::process::manners::{Manners, set_self_in_child};
use crate::process::procfs::{SignalMasks, open_fds, signal_masks};

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
/// on the spawning thread (a signal mask is per thread). Returns whether it
/// added the hook (the spawn forks anyway, so other settings may go in one
/// too, see [`manners_before_exec`]).
pub(crate) fn prepare_child(cmd: &mut tokio::process::Command) -> bool {
    cmd.process_group(0);
    if inherits_cleanly() {
        return false;
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
    true
}

/// Sets the job's niceness and I/O class in the child before it runs
/// anything, for a spawn that forks anyway (a `pre_exec` hook of
/// [`prepare_child`] or the cgroup join): then no instruction of the job
/// runs with the runner's manners. Never called on the `posix_spawn`
/// path, which this would turn into a fork.
pub(crate) fn manners_before_exec(cmd: &mut tokio::process::Command, manners: Manners) {
    #[expect(
        unsafe_code,
        reason = "pre_exec runs between fork and exec; the closure makes two system \
                  calls on the child itself (setpriority, ioprio_set) with integer \
                  arguments, allocates nothing and cannot panic"
    )]
    // SAFETY: see the reason above; both calls are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            set_self_in_child(&manners);
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
    let Some(masks) = signal_masks("thread-self") else { return false };
    if masks.ignored & !IGNORED_OK != 0 || masks.blocked & !GLIBC_INTERNAL != 0 {
        return false;
    }
    let Some(fds) = open_fds("thread-self") else { return false };
    fds.into_iter().all(|fd| fd < 3 || close_on_exec(fd, false))
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
    for fd in open_fds("self").unwrap_or_default() {
        if fd >= 3 {
            close_on_exec(fd, true);
        }
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
/// only a `pre_exec` hook could reset the signal (`copy_page_range` led
/// the drain benchmark's profile). SIGHUP and SIGPIPE are left alone (see
/// [`IGNORED_OK`]), and SIGCHLD. Needs tokio's signal driver; without it
/// nothing changes. Called once when a run starts.
pub(crate) fn catch_inherited_ignores() {
    // Snapshot what was inherited as ignored before catching anything:
    // the shutdown signals read it later, and a QUIT caught here would
    // read as not ignored and stop the runner.
    let _ = crate::signal::inherited_ignores();
    let Some(SignalMasks { ignored, .. }) = signal_masks("self") else { return };
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

#[cfg(test)]
mod tests {
    use super::*;

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
