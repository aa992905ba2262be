//! The runner's one error type.

use slothqueue_core::StoreError;

/// Why a run (or setting one up) failed.
///
/// Only failures that make going on pointless are errors: a job that fails,
/// a gate that cannot be read for a moment, a busy queue file or a failing
/// `--on-finish` command are reported as events and the runner carries on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// The store refused in a way waiting will not fix (corrupt file, schema
    /// too new, I/O).
    #[error("{context}: {source}")]
    Store {
        /// What the runner was doing.
        context: String,
        /// The store's answer.
        #[source]
        source: StoreError,
    },
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the runner was doing.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A gate cannot work on this machine (for example no PSI in the kernel).
    #[error("{0}")]
    GateUnavailable(String),
    /// A handler directory or handler name is not acceptable.
    #[error("{0}")]
    Handler(String),
}

impl RunnerError {
    /// An I/O error with what was being done.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        RunnerError::Io { context: context.into(), source }
    }

    /// A store error with what was being done.
    pub(crate) fn store(context: impl Into<String>, source: StoreError) -> Self {
        RunnerError::Store { context: context.into(), source }
    }

    /// Whether the store refused because the attempt's lease moved on
    /// (another owner took the job, or it ended): what the attempt did no
    /// longer counts, and that is no reason to stop the run.
    pub(crate) fn is_lease_lost(&self) -> bool {
        matches!(self, RunnerError::Store { source: StoreError::LeaseLost { .. }, .. })
    }
}
