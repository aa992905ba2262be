//! The exceptions: one hierarchy under `slothqueue.Error`, a class per
//! kind of failure a caller may handle (the grouping the CLI's exit codes
//! make, `cli/src/app/exit.rs`), each with the one line the CLI prints
//! after `error: `.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use slothqueue::runner::RunnerError;
use slothqueue::{OpenError, StoreError};

create_exception!(slothqueue, Error, PyException, "Every error of slothqueue.");
create_exception!(slothqueue, NotFoundError, Error, "No such job (or schedule).");
create_exception!(
    slothqueue,
    InvalidInputError,
    Error,
    "The request was refused; nothing was written."
);
create_exception!(
    slothqueue,
    InvalidStateError,
    InvalidInputError,
    "The job's state does not allow the operation (cancel a finished job)."
);
create_exception!(
    slothqueue,
    LeaseLostError,
    Error,
    "The job is no longer held by this owner: reclaimed, finished or released."
);
create_exception!(
    slothqueue,
    BusyError,
    Error,
    "Another process held the queue's write lock too long; try again."
);
create_exception!(
    slothqueue,
    UnusableFileError,
    Error,
    "The queue cannot be used: not a queue, damaged, newer, or unsafe."
);

/// Adds the exception classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add("InvalidInputError", py.get_type::<InvalidInputError>())?;
    m.add("InvalidStateError", py.get_type::<InvalidStateError>())?;
    m.add("LeaseLostError", py.get_type::<LeaseLostError>())?;
    m.add("BusyError", py.get_type::<BusyError>())?;
    m.add("UnusableFileError", py.get_type::<UnusableFileError>())?;
    Ok(())
}

/// The error and its causes joined by `: `, each said once, on one line:
/// what the CLI prints after `error: `.
fn one_line(err: &dyn std::error::Error) -> String {
    let mut line = String::new();
    let mut cause: Option<&dyn std::error::Error> = Some(err);
    while let Some(e) = cause {
        let text = e.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        cause = e.source();
    }
    line.replace('\n', " ")
}

/// The exception for a store's refusal.
pub(crate) fn store(err: StoreError) -> PyErr {
    let message = one_line(&err);
    class_of(&err)(message)
}

fn class_of(err: &StoreError) -> fn(String) -> PyErr {
    match err {
        StoreError::InBatch { error, .. } => class_of(error),
        StoreError::NotFound(_) | StoreError::NoSchedule(_) => NotFoundError::new_err,
        StoreError::LeaseLost { .. } => LeaseLostError::new_err,
        StoreError::InvalidTransition { .. } => InvalidStateError::new_err,
        StoreError::InvalidInput(_) => InvalidInputError::new_err,
        StoreError::Busy { .. } => BusyError::new_err,
        StoreError::Corrupt { .. } | StoreError::SchemaTooNew { .. } => UnusableFileError::new_err,
        _ => Error::new_err,
    }
}

/// The exception for a queue that could not be opened.
pub(crate) fn open(err: OpenError) -> PyErr {
    match err {
        OpenError::Store(e) => store(e),
        other => UnusableFileError::new_err(one_line(&other)),
    }
}

/// The exception for a wait that failed.
pub(crate) fn runner(err: RunnerError) -> PyErr {
    let message = one_line(&err);
    match &err {
        RunnerError::Store { source, .. } => class_of(source)(message),
        _ => Error::new_err(message),
    }
}
