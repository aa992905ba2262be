//! Judging whether a lease's owner is slow or gone.
//!
//! A laptop that slept for an hour wakes with every lease expired, yet every
//! owner is still alive. So a lease whose owner can be checked (same host) is
//! judged by the owner, not by the clock; the wall-clock expiry decides only
//! where the owner cannot be checked. The judge is injected like the clock:
//! the runner's reads `/proc`, tests bring their own.

use crate::job::Lease;

/// What a judge knows about a lease's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// The owner process is running: never take its job away.
    Alive,
    /// The owner is certainly dead (another boot, no such pid, a reused pid):
    /// its job may be taken back at once.
    Gone,
    /// The owner cannot be checked (another host): trust the lease's expiry.
    Unknown,
}

/// Answers [`Liveness`] for a lease.
pub trait LivenessJudge: Send + Sync {
    /// Judges the owner of `lease`.
    fn judge(&self, lease: &Lease) -> Liveness;
}

/// A judge that knows nothing: every lease lives and dies by its clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClockOnly;

impl LivenessJudge for ClockOnly {
    fn judge(&self, _lease: &Lease) -> Liveness {
        Liveness::Unknown
    }
}
