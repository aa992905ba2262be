//! Direct use of a queue file by the harness: snapshots of every job with
//! its trail, integrity checks, crafted rows.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use slothqueue_core::{Event, Job, JobId, ListFilter, ListOrder, Store, StoreError};
use slothqueue_store_redb::{RedbOptions, RedbStore};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

/// A backend under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Redb,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Redb => "redb",
        }
    }

    /// The queue file's name in a scenario directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Backend::Sqlite => "queue.db",
            Backend::Redb => "queue.redb",
        }
    }

    pub fn other(self) -> Backend {
        match self {
            Backend::Sqlite => Backend::Redb,
            Backend::Redb => Backend::Sqlite,
        }
    }
}

/// An open queue: the store, and the concrete type for integrity checks.
pub enum Opened {
    Sqlite(Arc<SqliteStore>),
    Redb(Arc<RedbStore>),
}

impl Opened {
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Opened::Sqlite(s) => s.clone(),
            Opened::Redb(s) => s.clone(),
        }
    }

    /// `PRAGMA integrity_check` / redb's `check_integrity` plus the
    /// stores' own consistency checks.
    pub fn check_integrity(&self) -> Result<(), StoreError> {
        match self {
            Opened::Sqlite(s) => s.check_integrity(),
            Opened::Redb(s) => s.check_integrity(),
        }
    }
}

pub fn open(backend: Backend, path: &Path) -> Result<Opened, StoreError> {
    Ok(match backend {
        Backend::Sqlite => {
            Opened::Sqlite(Arc::new(SqliteStore::open(path, SqliteOptions::default())?))
        }
        Backend::Redb => Opened::Redb(Arc::new(RedbStore::open(path, RedbOptions::default())?)),
    })
}

/// A current-thread runtime for the harness's few async calls.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start a tokio runtime")
}

/// Every job in the queue, with its trail.
pub type Snapshot = BTreeMap<JobId, (Job, Vec<Event>)>;

pub fn snapshot(backend: Backend, path: &Path) -> Result<Snapshot> {
    let opened = open(backend, path).with_context(|| format!("cannot open {}", path.display()))?;
    let store = opened.store();
    runtime()?.block_on(async move {
        let mut out = BTreeMap::new();
        let mut cursor = None;
        loop {
            let filter = ListFilter {
                limit: Some(500),
                cursor,
                order: ListOrder::Oldest,
                ..ListFilter::default()
            };
            let page = store.list(&filter).await.context("cannot list jobs")?;
            for job in &page {
                let events = store.events(job.id).await.context("cannot read a trail")?;
                out.insert(job.id, (job.clone(), events));
            }
            match page.last() {
                Some(last) if page.len() == 500 => cursor = Some(last.id),
                _ => break,
            }
        }
        Ok(out)
    })
}

/// Opens the queue and runs the integrity check; the problem as text.
pub fn integrity(backend: Backend, path: &Path) -> Result<(), String> {
    let opened = open(backend, path).map_err(|e| format!("cannot open for the check: {e}"))?;
    opened.check_integrity().map_err(|e| e.to_string())
}

/// Fails unless the file at `path` holds exactly `bytes`.
pub fn same_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    let now = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if now != bytes {
        bail!("{} changed ({} bytes before, {} after)", path.display(), bytes.len(), now.len());
    }
    Ok(())
}

/// Counts per state, from a short-lived handle.
pub fn stats(backend: Backend, path: &Path) -> Result<slothqueue_core::Stats> {
    let opened = open(backend, path).with_context(|| format!("cannot open {}", path.display()))?;
    let store = opened.store();
    let now = slothqueue_core::Clock::now(&slothqueue_core::SystemClock);
    runtime()?.block_on(async move { store.stats(now).await.context("cannot read stats") })
}

/// One job, from a short-lived handle.
pub fn get(backend: Backend, path: &Path, id: JobId) -> Result<Job> {
    let opened = open(backend, path).with_context(|| format!("cannot open {}", path.display()))?;
    let store = opened.store();
    runtime()?.block_on(async move {
        store.get(id).await.with_context(|| format!("cannot read job #{id}"))
    })
}
