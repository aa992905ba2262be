//! The one error of this crate: why a tool call did not do what it asked,
//! in one line a model can act on. Every variant becomes a tool error
//! (`isError: true` with that line), never a protocol error or a crash:
//! a client that sent a wrong type, an unknown id or a call this server
//! may not make reads why, and goes on.

use slothqueue::StoreError;

/// Why a tool call was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// What the user who started the server chose not to allow
    /// (`--read-only`, `--kinds`, `--queue`), or a bound of the server.
    #[error("{0}")]
    Refused(String),
    /// The arguments do not make sense: the same sentence the CLI gives.
    #[error("{0}")]
    BadInput(String),
    /// The queue refused or failed, with what was being done.
    #[error("{what}: {source}")]
    Store {
        /// `cannot add the job`.
        what: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// The store's own refusal, as the CLI words it (`no job #7`, `cannot
    /// retry job #3: it is done`).
    #[error(transparent)]
    Queue(#[from] StoreError),
    /// A file (a job's log) could not be read.
    #[error("{0}")]
    Io(String),
}

impl ToolError {
    /// A store error with what was being done.
    pub fn store(what: impl Into<String>) -> impl FnOnce(StoreError) -> ToolError {
        let what = what.into();
        move |source| ToolError::Store { what, source }
    }
}
