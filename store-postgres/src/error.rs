//! Every tokio-postgres error becomes a [`StoreError`] here, in one place,
//! so the rest of the crate can use `?` freely and callers only ever match
//! on the core enum.
//!
//! - a lost or refused connection is [`StoreError::Unreachable`], naming
//!   the server;
//! - a serialization failure or a deadlock is retried by the transaction
//!   runner (`txn.rs`) and, when it persists, [`StoreError::Busy`], as is a
//!   lock waited for longer than the busy timeout (`lock_timeout`);
//! - a table or column that is not there, or a row that does not decode,
//!   is [`StoreError::Corrupt`]: every statement is ours, so the schema is
//!   not the one slothqueue made;
//! - a write through a read-only store is [`StoreError::Io`] of kind
//!   `ReadOnlyFilesystem`, as the other stores answer.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use slothqueue_core::{StoreError, TransitionError};
use tokio_postgres::error::SqlState;

/// The crate's internal error: a PostgreSQL failure still waiting for the
/// context (queue, server, busy timeout) it needs to become a
/// [`StoreError`], or a decision already expressed in the core's terms.
#[derive(Debug)]
pub(crate) enum Error {
    /// A PostgreSQL call failed.
    Sql(tokio_postgres::Error),
    /// A row could not be read back as a job, event or record.
    Decode(String),
    /// Already a store error (a refused transition, bad input, not found).
    Store(StoreError),
    /// A claim begun under the shared lock found it needs the exclusive
    /// one (lanes are configured, or it would end abandoned jobs): the
    /// transaction is rolled back and run again under the exclusive lock.
    Escalate,
    /// The server did not answer a round trip within the call timeout
    /// (`PgOptions::call_timeout`): the link is taken for cut off.
    Silent(Duration),
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
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

impl Error {
    /// Whether the transaction should simply be run again: a serialization
    /// failure or a deadlock PostgreSQL broke by aborting this one.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Sql(e) => matches!(
                e.code(),
                Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == SqlState::T_R_DEADLOCK_DETECTED
            ),
            _ => false,
        }
    }

    /// Whether the connection this came from can no longer be trusted
    /// (closed, or broken mid-protocol) and must not go back to the pool.
    pub fn breaks_connection(&self) -> bool {
        match self {
            Error::Sql(e) => e.is_closed() || e.code().is_none() && is_io(e),
            Error::Silent(_) => true,
            _ => false,
        }
    }
}

/// What the mapping needs to know to write a useful message.
#[derive(Clone, Debug)]
pub(crate) struct Context {
    /// The queue, as errors name it: the server, database and schema (no
    /// password).
    pub name: PathBuf,
    /// The server alone, for [`StoreError::Unreachable`].
    pub server: String,
    /// How long a lock is waited for before [`StoreError::Busy`].
    pub busy_timeout: Duration,
    /// A store that writes: a write refused as read-only can only be the
    /// server's refusal (a hot standby), never our own read-only session's.
    pub writer: bool,
}

impl Context {
    /// Maps `e` onto the core's error enum.
    pub fn map(&self, e: Error) -> StoreError {
        match e {
            Error::Store(e) => e,
            Error::Decode(detail) => corrupt(&self.name, detail),
            Error::Sql(e) => self.map_sql(e),
            Error::Escalate => {
                StoreError::Backend("a claim asked for the exclusive lock twice".into())
            }
            Error::Silent(waited) => StoreError::Unreachable(format!(
                "{}: no answer within {}s; the connection is dropped and a new one made",
                self.server,
                waited.as_secs_f64()
            )),
        }
    }

    /// Maps a tokio-postgres error onto the core's error enum.
    pub fn map_sql(&self, e: tokio_postgres::Error) -> StoreError {
        let Some(code) = e.code() else {
            if e.is_closed() || is_io(&e) {
                return self.unreachable(&e);
            }
            let text = e.to_string();
            if text.starts_with("error deserializing") {
                // A column's value is not what we wrote.
                return corrupt(&self.name, text);
            }
            return StoreError::Backend(text);
        };
        let detail = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned());
        let class = &code.code()[..2];
        if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::LOCK_NOT_AVAILABLE
            || *code == SqlState::QUERY_CANCELED
        {
            // Retried already, or a lock waited for `lock_timeout`.
            StoreError::Busy { waited: self.busy_timeout }
        } else if *code == SqlState::UNDEFINED_TABLE
            || *code == SqlState::UNDEFINED_COLUMN
            || *code == SqlState::INVALID_SCHEMA_NAME
            || *code == SqlState::UNDEFINED_OBJECT
        {
            corrupt(&self.name, format!("its schema is not slothqueue's ({detail})"))
        } else if *code == SqlState::DISK_FULL {
            StoreError::DiskFull(self.name.clone())
        } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION && self.writer {
            // Opened on the primary, which has since become a standby (a
            // failover), or reached through something that routes to one.
            StoreError::ReadOnlyStandby(self.server.clone())
        } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
            StoreError::Io {
                context: format!("cannot write to {}", self.name.display()),
                source: io::Error::new(io::ErrorKind::ReadOnlyFilesystem, detail),
            }
        } else if class == "08"
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
            || *code == SqlState::TOO_MANY_CONNECTIONS
        {
            self.unreachable(&e)
        } else {
            StoreError::Backend(format!("{} ({})", detail, code.code()))
        }
    }

    fn unreachable(&self, e: &tokio_postgres::Error) -> StoreError {
        let cause = match std::error::Error::source(e) {
            Some(s) => format!("{e}: {s}"),
            None => e.to_string(),
        };
        if cause.contains("unsupported startup parameter") {
            // PgBouncer refusing the session settings this store sends
            // straight to a server: say how to reach it through one.
            return StoreError::Unreachable(format!(
                "{}: {cause} (a pooler such as PgBouncer: add `pooler=transaction` to the URL's \
                 query, e.g. postgres://USER@HOST/DB?pooler=transaction; see docs/postgres.md)",
                self.server
            ));
        }
        StoreError::Unreachable(format!("{}: {cause}", self.server))
    }
}

fn is_io(e: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// The queue is not a slothqueue queue, or is damaged.
pub(crate) fn corrupt(name: &Path, detail: impl Into<String>) -> StoreError {
    StoreError::Corrupt { path: name.to_path_buf(), detail: detail.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context {
            name: PathBuf::from("postgres://u@h/db?schema=q"),
            server: "h:5432".into(),
            busy_timeout: Duration::from_millis(200),
            writer: true,
        }
    }

    #[test]
    fn decode_and_store_errors_map_through() {
        let c = ctx();
        assert!(matches!(c.map(Error::Decode("bad".into())), StoreError::Corrupt { .. }));
        assert!(matches!(c.map(Error::Store(StoreError::NotFound(3))), StoreError::NotFound(3)));
        assert!(StoreError::Unreachable("h".into()).is_temporary());
    }
}
