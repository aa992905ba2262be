//! The follow-mode idle wait, on a kernel timer rather than tokio's.
//!
//! tokio's timer wheel files a sleep by how far away it is: one of 5 s (the
//! poll interval) goes into the level of 4,096 ms slots, and when that slot
//! comes up it is filed again into the 64 ms level, then the 1 ms level.
//! Each refiling wakes the process, so every idle poll cost three wake-ups,
//! two of them only to re-arm the timer (as strace of `run --follow` on an
//! empty queue shows). A timerfd armed for the exact deadline and
//! watched by tokio's reactor wakes the process once, at the deadline:
//! with no tokio timer pending the reactor blocks in `epoll_wait` with no
//! timeout at all.
//!
//! The timer counts `CLOCK_BOOTTIME`, which goes on while the machine is
//! suspended: a laptop that slept past a due time looks for work as it
//! wakes instead of waiting out the rest of the interval.
//!
//! This is kernel time, not tokio's: under tokio's paused test clock the
//! wait still takes real time. Tests of follow mode wake the runner through
//! its waker, or give it a due time or poll interval of a few hundred ms.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A one-shot timer for the idle wait, made on first use and reused (one
/// registration with the reactor for the whole run). Falls back to tokio's
/// sleep where a timerfd cannot be made or fails.
#[derive(Default)]
pub(crate) struct IdleTimer {
    state: State,
}

#[derive(Default)]
enum State {
    #[default]
    Unmade,
    Ready(AsyncFd<OwnedFd>),
    /// The kernel refused once; tokio's timer from then on.
    Unavailable,
}

const ZERO: Timespec = Timespec { tv_sec: 0, tv_nsec: 0 };

impl IdleTimer {
    /// A timer that is tokio's from the start: no descriptor, for a
    /// caller holding many short waits at once (the HTTP API's long
    /// polls), where a timerfd each would spend the process's limit on
    /// open files and the wake-ups it saves do not matter.
    pub(crate) fn tokio_only() -> IdleTimer {
        IdleTimer { state: State::Unavailable }
    }

    /// Sleeps for `d`. Cancel-safe: dropped early (a wake-up or a shutdown
    /// won the race), the timer is disarmed, so it cannot wake the process
    /// later for nothing.
    pub(crate) async fn sleep(&mut self, d: Duration) {
        if d.is_zero() {
            return;
        }
        if matches!(self.state, State::Unmade) {
            self.state = match make() {
                Ok(fd) => State::Ready(fd),
                Err(_) => State::Unavailable,
            };
        }
        let State::Ready(fd) = &self.state else {
            return tokio::time::sleep(d).await;
        };
        match wait(fd, d).await {
            Ok(()) => {}
            Err(_) => {
                // Never seen; a timer that fails once is not trusted again,
                // and the rest of the wait is tokio's (an early return
                // here would poll the queue in a loop).
                self.state = State::Unavailable;
                tokio::time::sleep(d).await;
            }
        }
    }
}

fn make() -> io::Result<AsyncFd<OwnedFd>> {
    let flags = TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC;
    let fd = timerfd_create(TimerfdClockId::Boottime, flags)
        .or_else(|_| timerfd_create(TimerfdClockId::Monotonic, flags))?;
    #[expect(
        unsafe_code,
        reason = "tokio's registration needs the descriptor to stay open and the same \
                  while registered: an OwnedFd moved into the AsyncFd, never replaced"
    )]
    // SAFETY: the `OwnedFd` is owned by the `AsyncFd` and closed only when it
    // is dropped; nothing here calls `get_mut` to swap it.
    let registered = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
    Ok(registered?)
}

async fn wait(fd: &AsyncFd<OwnedFd>, d: Duration) -> io::Result<()> {
    // A zero `it_value` would disarm instead of firing; `d` is not zero.
    let value = Timespec::try_from(d).unwrap_or(Timespec { tv_sec: i64::MAX, tv_nsec: 0 });
    let spec = Itimerspec { it_interval: ZERO, it_value: value };
    timerfd_settime(fd.get_ref(), TimerfdTimerFlags::empty(), &spec)?;
    let _disarm = Disarm(fd);
    loop {
        let mut guard = fd.readable().await?;
        // The expiry count; reading it also clears readiness. A readiness
        // left over from an earlier expiry reads nothing (`WouldBlock`),
        // which `try_io` clears before waiting again.
        let read = guard.try_io(|inner| {
            let mut count = [0u8; 8];
            rustix::io::read(inner.get_ref(), &mut count).map_err(io::Error::from)
        });
        match read {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
}

/// Disarms the timer when the wait ends, however it ends.
struct Disarm<'a>(&'a AsyncFd<OwnedFd>);

impl Drop for Disarm<'_> {
    fn drop(&mut self) {
        let off = Itimerspec { it_interval: ZERO, it_value: ZERO };
        let _ = timerfd_settime(self.0.get_ref(), TimerfdTimerFlags::empty(), &off);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real time on purpose: the point is the kernel timer. Only "it ended,
    /// not before the deadline" is checked, never how soon after.
    #[tokio::test]
    async fn sleeps_at_least_the_duration_and_can_be_reused() {
        let mut timer = IdleTimer::default();
        for ms in [30, 10] {
            let start = tokio::time::Instant::now();
            timer.sleep(Duration::from_millis(ms)).await;
            assert!(start.elapsed() >= Duration::from_millis(ms));
        }
        assert!(matches!(timer.state, State::Ready(_)), "no timerfd on this system");
    }

    /// A wait dropped early (the waker won) leaves the timer disarmed: it
    /// must not wake the process later for nothing.
    #[tokio::test]
    async fn a_cancelled_wait_leaves_the_timer_disarmed() {
        let mut timer = IdleTimer::default();
        let early =
            tokio::time::timeout(Duration::from_millis(5), timer.sleep(Duration::from_secs(60)));
        assert!(early.await.is_err());
        let State::Ready(fd) = &timer.state else { panic!("no timerfd on this system") };
        let left = rustix::time::timerfd_gettime(fd.get_ref()).unwrap();
        assert_eq!((left.it_value.tv_sec, left.it_value.tv_nsec), (0, 0), "still armed");
        let start = tokio::time::Instant::now();
        timer.sleep(Duration::from_millis(10)).await;
        assert!(start.elapsed() >= Duration::from_millis(10));
    }
}
