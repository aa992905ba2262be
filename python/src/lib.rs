//! `slothqueue._native`: the queue of the `slothqueue` library as a Python
//! extension module, so a Python program gets the same leases, backoff,
//! keys and trail as the Rust queue, on the same files the CLI uses.
//!
//! This crate decides nothing: every operation is one call of the
//! library's [`Store`](slothqueue::Store) (the rules live in `core`), and
//! this crate only converts: arguments in, jobs out as JSON text that the
//! pure-Python layer (`python/python/slothqueue/`) turns into objects.
//! The GIL is released around every store call (`block`), so Python
//! threads get real concurrency; the store's async API runs on one tokio
//! runtime for the whole module (`runtime`).

use std::future::Future;
use std::sync::OnceLock;

use pyo3::prelude::*;

mod clock;
mod error;
mod queue;

/// The module's one runtime: the stores' async calls (SQLite and redb hand
/// their work to its blocking pool, PostgreSQL to its own) and the waits'
/// timers. Made at the first call; two worker threads are plenty, the
/// work itself runs on the blocking pool.
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("slothqueue")
        .enable_all()
        .build()
        .map_err(|e| error::Error::new_err(format!("cannot start the runtime: {e}")))?;
    Ok(RUNTIME.get_or_init(|| rt))
}

/// Runs `future` to its end on the module's runtime with the GIL released,
/// so other Python threads run meanwhile.
fn block<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let rt = runtime()?;
    Ok(py.detach(|| rt.block_on(future)))
}

/// The extension module: the queue, the manual clock, the exceptions.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<queue::NativeQueue>()?;
    m.add_class::<queue::NativeChanges>()?;
    m.add_class::<clock::NativeClock>()?;
    m.add_function(wrap_pyfunction!(queue::default_owner, m)?)?;
    error::register(m)?;
    Ok(())
}
