//! What is measured: a backend under one of its durability settings (two
//! for SQLite, one each for redb and PostgreSQL), and how to open a store
//! or a raw file exactly as that setting does.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result};
use slothqueue_core::Store;
use slothqueue_store_postgres::{PgOptions, PgStore};
use slothqueue_store_redb::{RedbOptions, RedbStore};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore, Synchronous};

use crate::pg;

/// A storage backend the bench measures: the library's, whose every
/// variant exists in every build, so a column exists for every backend the
/// bench knows how to measure (and says "skipped" when it cannot, as
/// PostgreSQL without a server), whatever features the binary was built
/// with.
pub use slothqueue::Backend;

/// Queue names for a backend.
pub trait QueueFile {
    /// A queue the CLI detects as this backend when new: a file name in
    /// `dir`, or for PostgreSQL a schema of this run on the server, as a
    /// URL (see `pg`).
    fn file(self, dir: &Path, stem: &str) -> PathBuf;
    /// Whether the backend has a fast durability setting besides its
    /// default. redb has none: it refuses `Durability::None` on a file
    /// shared between processes, which every slothqueue file is. Nor has
    /// the PostgreSQL store: durability is the server's setting.
    fn has_fast_setting(self) -> bool;
}

impl QueueFile for Backend {
    fn file(self, dir: &Path, stem: &str) -> PathBuf {
        match self {
            Backend::Sqlite => dir.join(format!("{stem}.db")),
            Backend::Redb => dir.join(format!("{stem}.redb")),
            Backend::Postgres => pg::queue(dir, stem),
        }
    }

    fn has_fast_setting(self) -> bool {
        self == Backend::Sqlite
    }
}

/// A backend and one of its durability settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub backend: Backend,
    /// The fast setting rather than the default one.
    pub fast: bool,
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.backend.as_str(), if self.fast { "fast" } else { "default" })
    }
}

impl Setting {
    /// What the setting means, for the report.
    pub fn describe(&self) -> &'static str {
        match (self.backend, self.fast) {
            (Backend::Sqlite, false) => "WAL, synchronous=FULL (the default)",
            (Backend::Sqlite, true) => "WAL, synchronous=NORMAL",
            (Backend::Redb, false) => {
                "Durability::Immediate, ConcurrencyMode::MultiWriter (the default)"
            }
            (Backend::Redb, true) => "no such setting (redb has one durability)",
            (Backend::Postgres, false) => {
                "`PgOptions::default()` (a pool of 4 connections per store, READ COMMITTED)"
            }
            (Backend::Postgres, true) => "no such setting (durability is the server's)",
        }
    }

    /// Opens (creating) a queue with this setting.
    pub fn open(&self, path: &Path) -> Result<Arc<dyn Store>> {
        let store: Arc<dyn Store> = match self.backend {
            Backend::Sqlite => {
                let synchronous = if self.fast { Synchronous::Normal } else { Synchronous::Full };
                let options = SqliteOptions { synchronous, ..SqliteOptions::default() };
                Arc::new(SqliteStore::open(path, options)?)
            }
            Backend::Redb => {
                if self.fast {
                    anyhow::bail!("redb has no fast durability setting");
                }
                Arc::new(RedbStore::open(path, RedbOptions::default())?)
            }
            Backend::Postgres => {
                if self.fast {
                    anyhow::bail!("the PostgreSQL store has no fast durability setting");
                }
                Arc::new(PgStore::open(pg::url_of(path)?, PgOptions::default())?)
            }
        };
        Ok(store)
    }

    /// The bytes a closed queue takes: the file, and for SQLite a WAL if
    /// one was left behind; on PostgreSQL its tables with their indexes.
    pub async fn file_bytes(&self, path: &Path) -> Result<u64> {
        if self.backend == Backend::Postgres {
            return pg::queue_bytes(path).await;
        }
        let mut total = std::fs::metadata(path)
            .with_context(|| format!("cannot read the size of {}", path.display()))?
            .len();
        if self.backend == Backend::Sqlite {
            let mut wal = path.as_os_str().to_owned();
            wal.push("-wal");
            total += std::fs::metadata(PathBuf::from(wal)).map(|m| m.len()).unwrap_or(0);
        }
        Ok(total)
    }
}
