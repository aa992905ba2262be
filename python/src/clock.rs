//! The manual clock a Python test injects: the core's
//! [`ManualClock`](slothqueue::core::ManualClock), moved by `advance`
//! without sleeping, as the Rust tests do.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use slothqueue::core::ManualClock;
use slothqueue::{Clock, Timestamp};

use crate::error::InvalidInputError;

/// A clock that moves only when told to (`slothqueue.ManualClock` wraps it).
#[pyclass(frozen, module = "slothqueue._native")]
pub struct NativeClock {
    pub(crate) inner: Arc<ManualClock>,
}

#[pymethods]
impl NativeClock {
    /// A clock standing at `start_ms` (milliseconds since the epoch, UTC).
    #[new]
    fn new(start_ms: i64) -> Self {
        NativeClock { inner: Arc::new(ManualClock::new(Timestamp::from_millis(start_ms))) }
    }

    /// Its time, in milliseconds since the epoch.
    fn now_ms(&self) -> i64 {
        self.inner.now().as_millis()
    }

    /// Moves it forward by `ms` milliseconds; a clock never moves back
    /// through `advance`.
    fn advance_ms(&self, ms: i64) -> PyResult<()> {
        let ms = u64::try_from(ms)
            .map_err(|_| InvalidInputError::new_err("a clock advances by a positive time"))?;
        self.inner.advance(Duration::from_millis(ms));
        Ok(())
    }
}
