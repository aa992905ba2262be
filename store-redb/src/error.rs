//! Every redb error becomes a [`StoreError`] here, in one place, so the
//! rest of the crate can use `?` on redb calls and the mapping is reviewed
//! once: damage is `Corrupt`, a full disk is `DiskFull`, contention is
//! `Busy` (after the wait, decided by the caller), the rest `Io`/`Backend`;
//! and a panic inside redb is caught and named damage ([`guarded`]).

use std::io;
use std::path::Path;

use slothqueue_core::StoreError;

/// An operation's failure before it is given a path: either already a
/// [`StoreError`] (a refused transition, bad input) or a redb error still
/// to be mapped.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Already the answer.
    Store(StoreError),
    /// From redb, to be mapped by [`Failure::into_store`].
    Redb(redb::Error),
    /// A stored row that does not decode: the file is damaged.
    Damaged(String),
}

impl Failure {
    /// The typed error for `path`.
    pub(crate) fn into_store(self, path: &Path) -> StoreError {
        match self {
            Failure::Store(e) => e,
            Failure::Damaged(detail) => corrupt(path, detail),
            Failure::Redb(e) => map_redb(path, e),
        }
    }

    /// redb latched an earlier I/O failure (a full disk, say): the
    /// database must be closed and opened again before it works.
    pub(crate) fn is_previous_io(&self) -> bool {
        matches!(self, Failure::Redb(redb::Error::PreviousIo))
    }

    /// Another writer holds the file: worth waiting for.
    pub(crate) fn is_would_block(&self) -> bool {
        matches!(self, Failure::Redb(redb::Error::WouldBlock | redb::Error::DatabaseAlreadyOpen))
    }
}

/// A corrupt-file error for `path`.
pub(crate) fn corrupt(path: &Path, detail: impl Into<String>) -> StoreError {
    StoreError::Corrupt { path: path.to_owned(), detail: detail.into() }
}

/// An I/O error for `path`, as `DiskFull` when that is what it is.
pub(crate) fn io(path: &Path, what: &str, e: io::Error) -> StoreError {
    if is_disk_full(&e) {
        return StoreError::DiskFull(path.to_owned());
    }
    match e.kind() {
        // redb reports "not a redb file" and a file cut short as these.
        io::ErrorKind::InvalidData => corrupt(path, format!("{what}: {e}")),
        io::ErrorKind::UnexpectedEof => corrupt(path, "the file ends early (truncated?)"),
        _ => StoreError::Io { context: format!("{what} {}", path.display()), source: e },
    }
}

fn is_disk_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(28 /* ENOSPC */)
}

/// Below this much free space, an I/O error whose errno is gone is taken
/// for a full disk (as store-sqlite's `error.rs` does for SQLite's "disk
/// I/O error").
const NEARLY_FULL_BYTES: u64 = 1 << 20;

/// The bytes an unprivileged writer may still use on the filesystem of
/// `path` (or of its folder).
fn free_bytes(path: &Path) -> Option<u64> {
    let stat =
        rustix::fs::statvfs(path).ok().or_else(|| rustix::fs::statvfs(path.parent()?).ok())?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

fn map_redb(path: &Path, e: redb::Error) -> StoreError {
    map_redb_seeing(path, e, || free_bytes(path))
}

/// [`map_redb`], with the free space of the queue's filesystem asked of
/// `free` (only for a latched I/O error).
fn map_redb_seeing(path: &Path, e: redb::Error, free: impl FnOnce() -> Option<u64>) -> StoreError {
    use redb::Error as E;
    match e {
        // redb latches the first failed write and answers PreviousIo from
        // then on, its errno gone: on a full filesystem that was the cause.
        E::PreviousIo if free().is_some_and(|b| b < NEARLY_FULL_BYTES) => {
            StoreError::DiskFull(path.to_owned())
        }
        E::Io(e) => io(path, "redb", e),
        E::Corrupted(detail) => corrupt(path, format!("redb: {detail}")),
        E::UpgradeRequired(v) => {
            corrupt(path, format!("a redb file in the old format {v}, never written by slothqueue"))
        }
        E::RepairAborted => corrupt(path, "the file needs a repair that could not be done"),
        E::TableTypeMismatch { table, .. } => {
            corrupt(path, format!("table `{table}` has types slothqueue did not write"))
        }
        E::TableIsMultimap(t) | E::TableIsNotMultimap(t) => {
            corrupt(path, format!("table `{t}` has a kind slothqueue did not write"))
        }
        E::TypeDefinitionChanged { name, .. } => {
            corrupt(path, format!("stored type {name:?} differs from slothqueue's"))
        }
        E::TableDoesNotExist(t) => corrupt(path, format!("table `{t}` is missing")),
        E::ValueTooLarge(n) => {
            StoreError::InvalidInput(format!("a record of {n} bytes is too large"))
        }
        E::LockProtocolMismatch => StoreError::Backend(format!(
            "{} is open in another process using an incompatible redb version",
            path.display()
        )),
        E::PreviousIo => StoreError::Backend(format!(
            "an earlier I/O error on {} left the queue unusable until it is reopened",
            path.display()
        )),
        other => StoreError::Backend(other.to_string()),
    }
}

macro_rules! from_redb {
    ($($t:ty),* $(,)?) => {
        $(impl From<$t> for Failure {
            fn from(e: $t) -> Self {
                Failure::Redb(redb::Error::from(e))
            }
        })*
    };
}

from_redb!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError,
);

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Store(e)
    }
}

impl From<slothqueue_core::TransitionError> for Failure {
    fn from(e: slothqueue_core::TransitionError) -> Self {
        Failure::Store(e.into())
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Redb(redb::Error::Io(e))
    }
}

/// Runs `f`, turning a panic inside redb (which it allows itself on files
/// altered outside redb) into a corrupt-file error.
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => Err(Failure::Damaged(format!("redb gave up: {}", panic_message(&*panic)))),
    }
}

/// The message of a caught panic, for an error that replaces it.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_says_so_even_once_redb_latched_the_error() {
        let path = Path::new("/q.redb");
        let enospc = redb::Error::Io(io::Error::from_raw_os_error(28));
        assert!(matches!(map_redb(path, enospc), StoreError::DiskFull(p) if p == path));
        let latched = map_redb_seeing(path, redb::Error::PreviousIo, || Some(0));
        assert!(matches!(&latched, StoreError::DiskFull(p) if p == path), "{latched:?}");
        assert!(latched.to_string().contains("no space left on device"), "{latched}");
        let roomy = map_redb_seeing(path, redb::Error::PreviousIo, || Some(10 << 30));
        assert!(matches!(roomy, StoreError::Backend(_)), "{roomy:?}");
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(&dir.path().join("not-yet.redb")).is_some());
    }
}
