//! A job's manners: its niceness and I/O class, set on its whole process
//! group right after the spawn (and, when the spawn forks anyway for a
//! `pre_exec` hook, inside the child before it runs anything), then read
//! back to say what is in force.
//!
//! Setting them from the parent keeps the `posix_spawn` fast path (see
//! [`prepare_child`](crate::process::spawn::prepare_child)): a hook of our
//! own would make std fork the whole runner for every job. The price is a
//! window of a few microseconds in which the job's first instructions run
//! with the runner's manners; a process it forks in that window and moves
//! out of the group keeps them.

use rustix::io::Errno;
use rustix::process::Pid;
use slothqueue_core::IoClass;

use crate::process::procfs::proc_nice;

/// `ioprio_set`/`ioprio_get` "which": one process, one process group.
const IOPRIO_WHO_PROCESS: libc::c_int = 1;
const IOPRIO_WHO_PGRP: libc::c_int = 2;
/// I/O classes as the kernel numbers them (`include/uapi/linux/ioprio.h`).
const IOPRIO_CLASS_NONE: i32 = 0;
const IOPRIO_CLASS_BE: i32 = 2;
const IOPRIO_CLASS_IDLE: i32 = 3;
const IOPRIO_CLASS_SHIFT: i32 = 13;

/// What a job is set to: a niceness and an I/O priority as the kernel
/// encodes it (`class << 13 | level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Manners {
    pub nice: i32,
    pub class: IoClass,
}

impl Manners {
    /// The I/O class with its level made explicit: best-effort without a
    /// level takes the one the kernel derives from the niceness,
    /// `(nice + 20) / 5`.
    pub(crate) fn io_class(&self) -> IoClass {
        match self.class {
            IoClass::BestEffort(None) => IoClass::BestEffort(Some(level_of_nice(self.nice))),
            other => other,
        }
    }

    /// The kernel's encoding of [`io_class`](Manners::io_class).
    pub(crate) fn ioprio(&self) -> i32 {
        encode(self.io_class())
    }
}

fn level_of_nice(nice: i32) -> u8 {
    ((nice.clamp(-20, 19) + 20) / 5) as u8
}

fn encode(class: IoClass) -> i32 {
    match class {
        IoClass::Idle => IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        IoClass::BestEffort(level) => {
            (IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | i32::from(level.unwrap_or(4).min(7))
        }
    }
}

/// The class an `ioprio_get` answer names; `none` (never set) is the
/// best-effort level the kernel derives from `nice`. `None` for real-time
/// or anything unknown.
pub(crate) fn decode(ioprio: i32, nice: i32) -> Option<IoClass> {
    let level = (ioprio & ((1 << IOPRIO_CLASS_SHIFT) - 1)) as u8;
    match ioprio >> IOPRIO_CLASS_SHIFT {
        IOPRIO_CLASS_NONE => Some(IoClass::BestEffort(Some(level_of_nice(nice)))),
        IOPRIO_CLASS_BE => Some(IoClass::BestEffort(Some(level.min(7)))),
        IOPRIO_CLASS_IDLE => Some(IoClass::Idle),
        _ => None,
    }
}

/// What setting a job's manners on its group did: each `Err` is why that
/// part could not be set (most often `EACCES`: only root may lower a
/// niceness).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Set {
    pub nice: Result<(), Errno>,
    pub ioprio: Result<(), Errno>,
}

/// Sets `manners` on every process of group `pgid` now. A group already
/// gone (`ESRCH`: the job ended before this) counts as done: nothing is
/// left to be impolite.
pub(crate) fn set_group(pgid: i32, manners: &Manners) -> Set {
    let gone_is_fine = |r: Result<(), Errno>| match r {
        Err(Errno::SRCH) => Ok(()),
        other => other,
    };
    let Some(pid) = Pid::from_raw(pgid) else {
        return Set { nice: Err(Errno::INVAL), ioprio: Err(Errno::INVAL) };
    };
    let nice = rustix::process::setpriority_pgrp(Some(pid), manners.nice);
    let ioprio = ioprio_set(IOPRIO_WHO_PGRP, pgid, manners.ioprio());
    Set { nice: gone_is_fine(nice), ioprio: gone_is_fine(ioprio) }
}

fn ioprio_set(which: libc::c_int, who: i32, ioprio: i32) -> Result<(), Errno> {
    #[expect(
        unsafe_code,
        reason = "ioprio_set has no wrapper in libc or rustix; the raw system call \
                  takes three integers and touches no memory of ours"
    )]
    // SAFETY: integer arguments only; the kernel reads no pointer.
    let rc = unsafe { libc::syscall(libc::SYS_ioprio_set, which, who, ioprio) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::INVAL))
    }
}

/// Process `pid`'s I/O priority as the kernel encodes it.
pub(crate) fn ioprio_get(pid: i32) -> Option<i32> {
    #[expect(
        unsafe_code,
        reason = "ioprio_get has no wrapper in libc or rustix; the raw system call \
                  takes two integers and touches no memory of ours"
    )]
    // SAFETY: integer arguments only; the kernel reads no pointer.
    let rc = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, pid) };
    i32::try_from(rc).ok().filter(|v| *v >= 0)
}

/// Process `pid`'s niceness and I/O class now (`None` when it cannot be
/// read): what is in force.
pub(crate) fn read_back(pid: i32) -> (Option<i32>, Option<IoClass>) {
    let nice = proc_nice(pid);
    let class = ioprio_get(pid).and_then(|p| decode(p, nice.unwrap_or(0)));
    (nice, class)
}

/// This runner's own niceness and I/O class: what a job gets when nothing
/// is set, and the floor of the defaults (a runner started with `nice -n
/// 15` does not make its jobs less polite than itself).
pub(crate) fn own() -> (Option<i32>, Option<IoClass>) {
    read_back(std::process::id() as i32)
}

/// Sets `manners` on the calling process; for the `pre_exec` hook, so it
/// makes only the two system calls and ignores their failures (the parent
/// sets the group again right after the spawn and reports what failed).
pub(crate) fn set_self_in_child(manners: &Manners) {
    let _ = rustix::process::setpriority_process(None, manners.nice);
    let _ = ioprio_set(IOPRIO_WHO_PROCESS, 0, manners.ioprio());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_classes_encode_as_the_kernel_numbers_them() {
        assert_eq!(encode(IoClass::Idle), 3 << 13);
        assert_eq!(encode(IoClass::BestEffort(Some(7))), (2 << 13) | 7);
        let m = Manners { nice: 10, class: IoClass::BestEffort(None) };
        assert_eq!(m.io_class(), IoClass::BestEffort(Some(6)));
        let m = Manners { nice: -20, class: IoClass::BestEffort(None) };
        assert_eq!(m.io_class(), IoClass::BestEffort(Some(0)));
        assert_eq!(decode((2 << 13) | 3, 0), Some(IoClass::BestEffort(Some(3))));
        assert_eq!(decode(3 << 13, 0), Some(IoClass::Idle));
        assert_eq!(decode(0, 0), Some(IoClass::BestEffort(Some(4))));
        assert_eq!(decode(1 << 13, 0), None, "real-time is not ours to name");
    }

    /// On a child of this test: the group gets the manners, and they read
    /// back (a niceness can always be raised, a best-effort level always
    /// set, without privileges).
    #[test]
    fn a_group_gets_its_manners_and_they_read_back() {
        let mut child =
            std::process::Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
        let pid = child.id() as i32;
        let (own_nice, _) = own();
        let nice = own_nice.unwrap_or(0).clamp(5, 19);
        let m = Manners { nice, class: IoClass::BestEffort(Some(6)) };
        let set = set_group(pid, &m);
        assert_eq!(set, Set { nice: Ok(()), ioprio: Ok(()) });
        assert_eq!(read_back(pid), (Some(nice), Some(IoClass::BestEffort(Some(6)))));
        let m = Manners { nice, class: IoClass::Idle };
        assert_eq!(set_group(pid, &m).ioprio, Ok(()));
        assert_eq!(read_back(pid).1, Some(IoClass::Idle));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    use std::os::unix::process::CommandExt;
}
