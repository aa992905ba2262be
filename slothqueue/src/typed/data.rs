//! Values every handler of a [`Worker`](super::Worker) receives: a
//! database pool, an HTTP client, a configuration, given once with
//! [`Worker::data`](super::Worker::data) and read in each attempt with
//! [`JobContext::data`](super::JobContext::data), as apalis's `Data<T>`
//! and axum's `Extension` do.
//!
//! A map from type to value, written while the worker is built and only
//! read once it runs, so a read costs a hash lookup and no lock. (Twenty
//! lines of our own rather than `http::Extensions`: the library builds
//! without the `http` crate when its server is not wanted.)

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// The values, by type.
#[derive(Default)]
pub(crate) struct DataMap(HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl DataMap {
    /// Keeps `value`, replacing one of the same type.
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Box::new(value));
    }

    fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>()).and_then(|v| v.downcast_ref::<T>())
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// What a worker's executors and their attempts share: the map, set once
/// when the worker becomes a runner (executors made by `handle` before a
/// `data` call still see it).
#[derive(Clone, Default)]
pub(crate) struct SharedData(Arc<OnceLock<DataMap>>);

impl SharedData {
    /// Fixes the values; a second call (there is none: a worker is built
    /// once) would keep the first.
    pub(crate) fn set(&self, map: DataMap) {
        let _ = self.0.set(map);
    }

    /// The value of type `T`, if the worker was given one.
    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0.get().and_then(DataMap::get::<T>)
    }
}

impl fmt::Debug for SharedData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.get().map_or(0, DataMap::len);
        write!(f, "SharedData({n} value(s))")
    }
}
