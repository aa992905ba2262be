//! Every rusqlite error becomes a [`StoreError`] here, in one place, so the
//! rest of the crate can use `?` freely and callers only ever match on the
//! core enum (a CLI must say "busy, waited 5s", not print `SQLITE_BUSY`).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::ErrorCode;
use slothqueue_core::{StoreError, TransitionError};

/// The crate's internal error: a SQLite failure still waiting for the
/// context (file, busy timeout) it needs to become a [`StoreError`], or a
/// decision already expressed in the core's terms.
#[derive(Debug)]
pub(crate) enum Error {
    /// A SQLite call failed.
    Sql(rusqlite::Error),
    /// A row could not be read back as a job, event or runner: the file was
    /// edited by something else, or is damaged.
    Decode(String),
    /// Already a store error (a refused transition, bad input, not found).
    Store(StoreError),
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Sql(e)
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::Store(e)
    }
}

impl From<TransitionError> for Error {
    fn from(e: TransitionError) -> Self {
        Error::Store(e.into())
    }
}

/// What the mapping needs to know to write a useful message.
#[derive(Clone, Debug)]
pub(crate) struct Context {
    /// The queue file, named in corrupt and disk-full errors.
    pub path: PathBuf,
    /// How long SQLite's busy handler waited before giving up.
    pub busy_timeout: Duration,
}

impl Context {
    /// Maps `e` onto the core's error enum.
    pub fn map(&self, e: Error) -> StoreError {
        match e {
            Error::Store(e) => e,
            Error::Decode(detail) => corrupt(&self.path, detail),
            Error::Sql(e) => self.map_sql(e),
        }
    }

    /// Maps a rusqlite error onto the core's error enum.
    pub fn map_sql(&self, e: rusqlite::Error) -> StoreError {
        self.map_sql_seeing(e, || free_bytes(&self.path))
    }

    /// [`map_sql`](Self::map_sql), with the free space of the queue's
    /// filesystem asked of `free` (only for an I/O error).
    fn map_sql_seeing(&self, e: rusqlite::Error, free: impl FnOnce() -> Option<u64>) -> StoreError {
        if let Some(msg) = schema_mismatch(&e) {
            // Every statement is ours and fixed, so a table or column it
            // names that is not there means the file's schema is not the
            // one slothqueue wrote: damaged or edited (S16).
            return corrupt(&self.path, format!("its schema is not slothqueue's ({msg})"));
        }
        let Some(code) = e.sqlite_error_code() else {
            // Conversions of column values: the row is not what we wrote.
            return match e {
                rusqlite::Error::FromSqlConversionFailure(..)
                | rusqlite::Error::IntegralValueOutOfRange(..)
                | rusqlite::Error::InvalidColumnType(..)
                | rusqlite::Error::Utf8Error(..) => corrupt(&self.path, e.to_string()),
                other => StoreError::Backend(other.to_string()),
            };
        };
        match code {
            // SQLite's busy handler already waited `busy_timeout` before
            // giving up (writes begin IMMEDIATE, so the handler always runs).
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                StoreError::Busy { waited: self.busy_timeout }
            }
            ErrorCode::DiskFull => StoreError::DiskFull(self.path.clone()),
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                corrupt(&self.path, e.to_string())
            }
            // A write through a read-only store (or on a read-only file):
            // the kind redb's read-only store answers too.
            ErrorCode::ReadOnly => StoreError::Io {
                context: format!("cannot write to {}", self.path.display()),
                source: io::Error::new(io::ErrorKind::ReadOnlyFilesystem, e.to_string()),
            },
            // SQLite says SQLITE_FULL only for a failed write of a page;
            // growing the `-shm` or the journal on a full disk is a "disk
            // I/O error" (SQLITE_IOERR_*), and the errno is not in the
            // error. A filesystem with (almost) nothing free says it.
            ErrorCode::SystemIoFailure if free().is_some_and(|b| b < NEARLY_FULL_BYTES) => {
                StoreError::DiskFull(self.path.clone())
            }
            ErrorCode::CannotOpen | ErrorCode::SystemIoFailure | ErrorCode::PermissionDenied => {
                StoreError::Io {
                    context: format!(
                        "{}: sqlite could not read or write the file",
                        self.path.display()
                    ),
                    source: io::Error::other(e.to_string()),
                }
            }
            _ => StoreError::Backend(e.to_string()),
        }
    }
}

/// Below this much free space, an I/O error is taken for a full disk: more
/// than SQLite grows a file by at once (a 32 KiB `-shm` region, a few
/// pages), less than any disk in use keeps free.
const NEARLY_FULL_BYTES: u64 = 1 << 20;

/// The bytes an unprivileged writer may still use on the filesystem of
/// `path` (or of its folder, before the file exists).
fn free_bytes(path: &Path) -> Option<u64> {
    let stat =
        rustix::fs::statvfs(path).ok().or_else(|| rustix::fs::statvfs(path.parent()?).ok())?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// SQLite's message when a statement names a table or column the file
/// does not have, without the statement itself.
fn schema_mismatch(e: &rusqlite::Error) -> Option<&str> {
    let msg = match e {
        rusqlite::Error::SqliteFailure(_, Some(m)) => m.as_str(),
        rusqlite::Error::SqlInputError { msg, .. } => msg.as_str(),
        _ => return None,
    };
    // "unsupported file format": the header's schema format number (byte
    // 44) is not one SQLite knows; slothqueue never writes such a file.
    [
        "no such table",
        "no such column",
        "has no column named",
        "malformed database schema",
        "unsupported file format",
    ]
    .iter()
    .any(|p| msg.contains(p))
    .then_some(msg)
}

/// The file is not a slothqueue queue, or is damaged.
pub(crate) fn corrupt(path: &Path, detail: impl Into<String>) -> StoreError {
    StoreError::Corrupt { path: path.to_path_buf(), detail: detail.into() }
}

/// An I/O failure outside SQLite (creating the directory, reading the header).
pub(crate) fn io(context: String, source: io::Error) -> StoreError {
    StoreError::Io { context, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context { path: PathBuf::from("/q.db"), busy_timeout: Duration::from_millis(200) }
    }

    fn sqlite(code: i32) -> Error {
        Error::Sql(rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None))
    }

    #[test]
    fn sqlite_codes_map_onto_the_core_enum() {
        let c = ctx();
        assert!(matches!(
            c.map(sqlite(rusqlite::ffi::SQLITE_BUSY)),
            StoreError::Busy { waited } if waited == Duration::from_millis(200)
        ));
        assert!(matches!(c.map(sqlite(rusqlite::ffi::SQLITE_LOCKED)), StoreError::Busy { .. }));
        assert!(
            matches!(c.map(sqlite(rusqlite::ffi::SQLITE_FULL)), StoreError::DiskFull(p) if p == Path::new("/q.db"))
        );
        assert!(matches!(c.map(sqlite(rusqlite::ffi::SQLITE_CORRUPT)), StoreError::Corrupt { .. }));
        assert!(matches!(c.map(sqlite(rusqlite::ffi::SQLITE_NOTADB)), StoreError::Corrupt { .. }));
        assert!(matches!(c.map(sqlite(rusqlite::ffi::SQLITE_IOERR)), StoreError::Io { .. }));
        assert!(matches!(c.map(sqlite(rusqlite::ffi::SQLITE_MISMATCH)), StoreError::Backend(_)));
        assert!(matches!(c.map(Error::Decode("bad".into())), StoreError::Corrupt { .. }));
    }

    #[test]
    fn an_io_error_on_a_full_filesystem_says_the_disk_is_full() {
        let c = ctx();
        let shm_grow = || {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR_SHMSIZE),
                None,
            )
        };
        let full = c.map_sql_seeing(shm_grow(), || Some(4096));
        assert!(matches!(&full, StoreError::DiskFull(p) if p == Path::new("/q.db")), "{full:?}");
        assert!(full.to_string().contains("no space left on device"), "{full}");
        let roomy = c.map_sql_seeing(shm_grow(), || Some(10 << 30));
        assert!(matches!(roomy, StoreError::Io { .. }), "{roomy:?}");
        let unknown = c.map_sql_seeing(shm_grow(), || None);
        assert!(matches!(unknown, StoreError::Io { .. }), "{unknown:?}");
        // The real filesystem is asked, of the file or of its folder.
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).is_some());
        assert!(free_bytes(&dir.path().join("not-yet.db")).is_some());
    }

    #[test]
    fn busy_message_says_it_waited() {
        let msg = ctx().map(sqlite(rusqlite::ffi::SQLITE_BUSY)).to_string();
        assert!(msg.contains("200ms"), "{msg}");
    }
}
