//! `top`'s one error type: a read of the queue that failed (named), or the
//! terminal that could not be set up or drawn on.

use slothqueue::StoreError;
use slothqueue_view::ViewError;

/// Why `top` could not go on.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// A look at the queue failed (`status`'s or `show`'s read).
    #[error(transparent)]
    View(#[from] ViewError),
    /// Another read failed: which one, and the store's error.
    #[error("{what}: {source}")]
    Read {
        /// `cannot list the jobs`.
        what: &'static str,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// Standard output is not a terminal.
    #[error(
        "top needs a terminal: its standard output is not one (use `slothqueue status` or `list` in a script)"
    )]
    NotATerminal,
    /// The terminal could not be set up, drawn on or read.
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

/// Names a read's failure.
pub(crate) fn read(what: &'static str) -> impl Fn(StoreError) -> TopError {
    move |source| TopError::Read { what, source }
}
