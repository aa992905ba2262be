//! Crash points for the torture suite (`cargo xtask torture`, scenario S05),
//! shared by the runner and both stores.
//!
//! Compiled to nothing unless this crate's `failpoints` feature is on
//! (never in a release; the runner's, the stores' and the `slothqueue`
//! package's `failpoints` features turn it on). With it,
//! `SLOTHQUEUE_FAILPOINT=<name>` makes the process abort (as a `kill -9`
//! would, no unwinding, no cleanup) the first time it passes the point of
//! that name, so a test can prove that a crash at that step loses nothing
//! and leaves no half-applied transition.
//!
//! Reading that variable is the one thing in `core` that looks outside the
//! process's arguments, and only in a build made for torture.

/// Aborts the process here if `SLOTHQUEUE_FAILPOINT` names `name` (and the
/// `failpoints` feature is on); does nothing otherwise.
#[inline]
pub fn hit(name: &str) {
    #[cfg(feature = "failpoints")]
    if std::env::var_os("SLOTHQUEUE_FAILPOINT").is_some_and(|v| v == name) {
        std::process::abort();
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}
