//! Direct use of a queue by the harness: snapshots of every job with its
//! trail, integrity checks, crafted rows. A queue is a file (SQLite, redb)
//! or a schema on a PostgreSQL server, named by its URL where a file would
//! be named by its path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use slothqueue_core::{Event, Job, JobId, ListFilter, ListOrder, Store, StoreError};
use slothqueue_store_postgres::{PgOptions, PgStore};
use slothqueue_store_redb::{RedbOptions, RedbStore};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

/// A backend under test: the library's.
pub use slothqueue::Backend;

/// What the harness asks of a backend beyond its name: where its queue
/// lives in a scenario directory and how the binary is told about it.
pub trait Where {
    /// The queue file's name in a scenario directory; none for a queue on
    /// a server (whose URL names it; see `pg.rs`).
    fn file_name(self) -> Option<&'static str>;

    /// The `--backend` the binary is given: a file backend's name; none
    /// for a queue on a server, which its URL names.
    fn cli_flag(self) -> Option<&'static str>;

    /// The `--backend` the binary is given for the backend called `name`
    /// (the harness's helper processes are told the name).
    fn cli_flag_of(name: &str) -> Option<&str>;

    /// Whether the queue is a file (the scenarios about files, locks and
    /// disks concern only these).
    fn is_file(&self) -> bool;

    /// The other file backend, whose file this one must refuse (S16); a
    /// server has no file, and is given SQLite's.
    fn other(self) -> Backend;
}

impl Where for Backend {
    fn file_name(self) -> Option<&'static str> {
        match self {
            Backend::Sqlite => Some("queue.db"),
            Backend::Redb => Some("queue.redb"),
            Backend::Postgres => None,
        }
    }

    fn cli_flag(self) -> Option<&'static str> {
        self.is_file().then(|| self.as_str())
    }

    fn cli_flag_of(name: &str) -> Option<&str> {
        (name != Backend::Postgres.as_str()).then_some(name)
    }

    fn is_file(&self) -> bool {
        self.file_name().is_some()
    }

    fn other(self) -> Backend {
        match self {
            Backend::Sqlite => Backend::Redb,
            Backend::Redb | Backend::Postgres => Backend::Sqlite,
        }
    }
}

/// An open queue: the store, and the concrete type for integrity checks.
pub enum Opened {
    Sqlite(Arc<SqliteStore>),
    Redb(Arc<RedbStore>),
    Postgres(Arc<PgStore>),
}

impl Opened {
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Opened::Sqlite(s) => s.clone(),
            Opened::Redb(s) => s.clone(),
            Opened::Postgres(s) => s.clone(),
        }
    }

    /// `PRAGMA integrity_check` / redb's `check_integrity` plus the
    /// stores' own consistency checks. The PostgreSQL store has none of
    /// its own (the server keeps its pages, and the schema's constraints
    /// its rows): `integrity` looks at the jobs through the store instead.
    pub fn check_integrity(&self) -> Result<(), StoreError> {
        match self {
            Opened::Sqlite(s) => s.check_integrity(),
            Opened::Redb(s) => s.check_integrity(),
            Opened::Postgres(_) => Ok(()),
        }
    }
}

/// The PostgreSQL store the harness opened last, kept: the harness looks
/// at a queue every few milliseconds while it waits, and a connection per
/// look would cost the server a process each time. Only the last one, so
/// that a run over many schemas holds few connections.
static LAST_PG: Mutex<Option<(PathBuf, Arc<PgStore>)>> = Mutex::new(None);

/// Forgets the kept PostgreSQL store, so the next look connects afresh
/// (after the server was restarted, S25: the harness's own reconnection is
/// not what is under test).
pub fn forget_pg() {
    let old = LAST_PG.lock().map(|mut last| last.take()).unwrap_or_default();
    drop(old);
}

fn open_pg(url: &Path) -> Result<Arc<PgStore>, StoreError> {
    if let Ok(last) = LAST_PG.lock() {
        if let Some((at, store)) = last.as_ref() {
            if at == url {
                return Ok(store.clone());
            }
        }
    }
    let text = url
        .to_str()
        .ok_or_else(|| StoreError::InvalidInput(format!("{}: not UTF-8", url.display())))?;
    let store = Arc::new(PgStore::open(text, PgOptions::default())?);
    let old = match LAST_PG.lock() {
        Ok(mut last) => last.replace((url.to_path_buf(), store.clone())),
        Err(_) => None,
    };
    // Dropped here, outside any runtime: a store with its own runtime
    // must not be dropped inside another's.
    drop(old);
    Ok(store)
}

pub fn open(backend: Backend, path: &Path) -> Result<Opened, StoreError> {
    Ok(match backend {
        Backend::Sqlite => {
            Opened::Sqlite(Arc::new(SqliteStore::open(path, SqliteOptions::default())?))
        }
        Backend::Redb => Opened::Redb(Arc::new(RedbStore::open(path, RedbOptions::default())?)),
        Backend::Postgres => Opened::Postgres(open_pg(path)?),
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
    opened.check_integrity().map_err(|e| e.to_string())?;
    if backend.is_file() {
        return Ok(());
    }
    consistency(backend, path)
}

/// What a store's own check would say of its jobs, read through the
/// `Store` API: each job's state is the one its trail replays to (no
/// half-applied transition), a job is running exactly when it holds a
/// lease, and no job has used more attempts than it may.
///
/// The snapshot is not one transaction, and runners may be at work: a job
/// that looks wrong is read again, its trail before and after the job
/// itself, until the two trails agree (every transition appends to the
/// trail in the transaction that changes the job), and only a job wrong
/// in such a reading counts.
fn consistency(backend: Backend, path: &Path) -> Result<(), String> {
    let snap = snapshot(backend, path).map_err(|e| format!("{e:#}"))?;
    let mut problems = Vec::new();
    for (id, (job, events)) in &snap {
        if job_problem(job, events).is_none() {
            continue;
        }
        if let Some(p) = settled_reading(backend, path, *id)? {
            problems.push(p);
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
    Err(format!("{} inconsistent job(s): {}", problems.len(), shown.join("; ")))
}

/// What is wrong with `job` given its trail, if anything.
fn job_problem(job: &Job, events: &[Event]) -> Option<String> {
    let id = job.id;
    if let Some(replayed) = slothqueue_core::machine::replay(events) {
        if replayed != job.state {
            return Some(format!("job #{id} is {} but its trail says {replayed}", job.state));
        }
    }
    if (job.state == slothqueue_core::JobState::Running) != job.lease.is_some() {
        return Some(format!("job #{id} is {} with lease {:?}", job.state, job.lease));
    }
    if job.attempts > job.max_attempts {
        return Some(format!("job #{id} used {} attempts of {}", job.attempts, job.max_attempts));
    }
    None
}

/// Job `id` read between two equal readings of its trail (a few tries),
/// and what is wrong with it then; `None` when nothing is, or when it
/// never held still.
fn settled_reading(backend: Backend, path: &Path, id: JobId) -> Result<Option<String>, String> {
    let store = open(backend, path).map_err(|e| format!("cannot open for the check: {e}"))?.store();
    let rt = runtime().map_err(|e| format!("{e:#}"))?;
    rt.block_on(async move {
        for _ in 0..20 {
            let read = async {
                let before = store.events(id).await?;
                let job = store.get(id).await?;
                let after = store.events(id).await?;
                Ok::<_, StoreError>((before, job, after))
            };
            let (before, job, after) = read.await.map_err(|e| format!("job #{id}: {e}"))?;
            if before.len() == after.len() {
                return Ok(job_problem(&job, &after));
            }
        }
        Ok(None)
    })
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

/// The pids of the runners that have recorded themselves in the queue.
pub fn runner_pids(backend: Backend, path: &Path) -> Result<Vec<u32>> {
    let opened = open(backend, path).with_context(|| format!("cannot open {}", path.display()))?;
    let store = opened.store();
    let records = runtime()?.block_on(async move { store.runners().await })?;
    Ok(records.iter().filter_map(|r| r.owner.pid).collect())
}

/// One job, from a short-lived handle.
pub fn get(backend: Backend, path: &Path, id: JobId) -> Result<Job> {
    let opened = open(backend, path).with_context(|| format!("cannot open {}", path.display()))?;
    let store = opened.store();
    runtime()?.block_on(async move {
        store.get(id).await.with_context(|| format!("cannot read job #{id}"))
    })
}
