//! Crash points for the torture suite (`cargo xtask torture`, scenario S05).
//!
//! Compiled to nothing unless the `failpoints` feature is on (never in a
//! release). With it, `SLOTHQUEUE_FAILPOINT=<name>` makes the process abort
//! (as a `kill -9` would, no unwinding, no cleanup) the first time it
//! passes the point of that name, so a test can prove that a crash at that
//! step loses nothing and leaves no half-applied transition.

/// Aborts the process here if `SLOTHQUEUE_FAILPOINT` names `name`.
#[inline]
pub(crate) fn hit(name: &str) {
    #[cfg(feature = "failpoints")]
    if std::env::var_os("SLOTHQUEUE_FAILPOINT").is_some_and(|v| v == name) {
        std::process::abort();
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}
