//! The limit: the bare storage engine's single-row insert+commit rate with
//! the settings the store uses, written directly against rusqlite, redb
//! and tokio-postgres.
//!
//! SQLite gets the store's pragmas (WAL, the same `synchronous`,
//! `foreign_keys`, `journal_size_limit`) and the store's `BEGIN IMMEDIATE`;
//! redb gets the store's builder (`ConcurrencyMode::MultiWriter`, a 64 MiB
//! cache) and `Durability::Immediate`; PostgreSQL gets one connection of
//! tokio-postgres to the same server, a prepared `INSERT` and
//! `BEGIN`/`COMMIT` around it (three round trips; the server's own
//! durability settings, which the report names). Each commit inserts one
//! 256-byte row, about the size of a job row, into each of `tables`
//! tables: one for the bare limit, [`PUSH_TABLES`] for a commit that
//! dirties as many pages as a push does.
//!
//! [`add_once`] is the floor of one `slothqueue add` as a process: open the
//! file (connect to the server) with those settings, commit one row, close.
//! `slothqueue-bench --raw-add sqlite|redb|postgres FILE|URL` runs it, and
//! the CLI figures time that process against `add` (`add_floor_ratio`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use redb::{Builder, ConcurrencyMode, Database, Durability, ReadableTable as _, TableDefinition};

use rusqlite::Connection;
use tokio_postgres::{Client, Statement};

use crate::pg;
use crate::setting::Backend;

/// The b-trees one push writes on either backend: on SQLite (schema v2)
/// the job row, its three pending-index entries and its event; on redb the
/// job, its pending or ready entry, the state counts, the event and the
/// next id.
pub const PUSH_TABLES: usize = 5;

/// A row about the size of a job's.
const ROW: [u8; 256] = [0x5a; 256];

/// Commits one row at a time.
pub trait RawCommit {
    /// Commits one transaction of one row in each table.
    fn commit_one(&mut self) -> Result<()>;

    /// Commits single-row transactions for about `d`; the rate per second.
    fn commit_for(&mut self, d: Duration) -> Result<f64> {
        rate(d, || self.commit_one())
    }
}

/// Opens (creating) `path` as the store of `backend` would, commits one
/// row and closes it: what one `add` cannot do with less.
pub fn add_once(backend: Backend, path: &Path) -> Result<()> {
    match backend {
        Backend::Sqlite => RawSqlite::open(path, false, 1)?.commit_one(),
        Backend::Redb => RawRedb::open(path, true, 1)?.commit_one(),
        Backend::Postgres => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start a tokio runtime")?
            .block_on(async { RawPg::open(path, 1).await?.commit_one().await }),
    }
    .with_context(|| format!("raw {}: cannot commit a row to {}", backend.as_str(), path.display()))
}

/// Runs `commit` until `d` has passed; commits per second.
fn rate(d: Duration, mut commit: impl FnMut() -> Result<()>) -> Result<f64> {
    let start = Instant::now();
    let mut n = 0u64;
    loop {
        commit()?;
        n += 1;
        let elapsed = start.elapsed();
        if elapsed >= d {
            return Ok(n as f64 / elapsed.as_secs_f64());
        }
    }
}

/// Bare SQLite tables with the store's pragmas.
pub struct RawSqlite {
    conn: Connection,
    /// One insert per table.
    inserts: Vec<String>,
}

impl RawSqlite {
    pub fn open(path: &Path, normal: bool, tables: usize) -> Result<Self> {
        let conn = Connection::open(path)
            .with_context(|| format!("raw sqlite: cannot open {}", path.display()))?;
        let _: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        let sync = if normal { "NORMAL" } else { "FULL" };
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {sync};
             PRAGMA foreign_keys = ON;
             PRAGMA journal_size_limit = 67108864;"
        ))?;
        for t in 0..tables {
            conn.execute_batch(&format!(
                "CREATE TABLE IF NOT EXISTS raw{t} (id INTEGER PRIMARY KEY, v BLOB NOT NULL) STRICT;"
            ))?;
        }
        let inserts = (0..tables).map(|t| format!("INSERT INTO raw{t} (v) VALUES (?1)")).collect();
        Ok(RawSqlite { conn, inserts })
    }
}

impl RawCommit for RawSqlite {
    fn commit_one(&mut self) -> Result<()> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        for sql in &self.inserts {
            self.conn.prepare_cached(sql)?.execute([&ROW[..]])?;
        }
        self.conn.execute_batch("COMMIT")?;
        Ok(())
    }
}

const RAW: [TableDefinition<'_, u64, &[u8]>; 8] = [
    TableDefinition::new("raw0"),
    TableDefinition::new("raw1"),
    TableDefinition::new("raw2"),
    TableDefinition::new("raw3"),
    TableDefinition::new("raw4"),
    TableDefinition::new("raw5"),
    TableDefinition::new("raw6"),
    TableDefinition::new("raw7"),
];

/// Bare redb tables.
pub struct RawRedb {
    db: Database,
    /// The key of the next row; `None` until the first commit has read the
    /// last one (a file opened again appends, as a new job does).
    next: Option<u64>,
    tables: usize,
}

impl RawRedb {
    /// `multi_writer`: the store's mode; otherwise redb's default
    /// (`ExclusiveWriter`), for comparison.
    pub fn open(path: &Path, multi_writer: bool, tables: usize) -> Result<Self> {
        let mut builder = Builder::new();
        if multi_writer {
            builder.set_concurrency_mode(ConcurrencyMode::MultiWriter);
        }
        builder.set_cache_size(64 * 1024 * 1024);
        let db = builder
            .create(path)
            .with_context(|| format!("raw redb: cannot create {}", path.display()))?;
        anyhow::ensure!((1..=RAW.len()).contains(&tables), "1 to {} raw tables", RAW.len());
        Ok(RawRedb { db, next: None, tables })
    }
}

impl RawCommit for RawRedb {
    fn commit_one(&mut self) -> Result<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        let key = match self.next {
            Some(key) => key,
            None => txn.open_table(RAW[0])?.last()?.map_or(0, |(k, _)| k.value() + 1),
        };
        for def in &RAW[..self.tables] {
            let mut table = txn.open_table(*def)?;
            table.insert(key, &ROW[..])?;
        }
        txn.commit()?;
        self.next = Some(key + 1);
        Ok(())
    }
}

/// Bare PostgreSQL tables in the queue's schema, on one connection.
pub struct RawPg {
    client: Client,
    /// One insert per table.
    inserts: Vec<Statement>,
}

impl RawPg {
    /// Connects to the server of the queue URL `path` and creates its
    /// schema and `tables` tables if missing (as [`RawSqlite::open`] does).
    pub async fn open(path: &Path, tables: usize) -> Result<Self> {
        let schema = pg::schema_of(path)?;
        let client = pg::connect(pg::url_of(path)?).await?;
        let mut ddl = format!("CREATE SCHEMA IF NOT EXISTS {schema};");
        for t in 0..tables {
            ddl.push_str(&format!(
                "CREATE TABLE IF NOT EXISTS {schema}.raw{t} \
                 (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v BYTEA NOT NULL);"
            ));
        }
        client.batch_execute(&ddl).await.context("raw postgres: cannot create the tables")?;
        let mut inserts = Vec::new();
        for t in 0..tables {
            inserts.push(
                client.prepare(&format!("INSERT INTO {schema}.raw{t} (v) VALUES ($1)")).await?,
            );
        }
        Ok(RawPg { client, inserts })
    }

    /// Commits one transaction of one row in each table: `BEGIN`, the
    /// inserts, `COMMIT`, each a round trip.
    pub async fn commit_one(&mut self) -> Result<()> {
        let txn = self.client.transaction().await?;
        for insert in &self.inserts {
            txn.execute(insert, &[&&ROW[..]]).await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// One `INSERT` of one row in the first table, committed by itself
    /// (autocommit): one round trip, the least a durable row can cost.
    pub async fn autocommit_one(&self) -> Result<()> {
        let insert = self.inserts.first().context("raw postgres: no table")?;
        self.client.execute(insert, &[&&ROW[..]]).await?;
        Ok(())
    }

    /// Commits single-row transactions for about `d`; the rate per second.
    pub async fn commit_for(&mut self, d: Duration) -> Result<f64> {
        Ok(rate_for(d, async || self.commit_one().await).await?.0)
    }

    /// [`RawPg::autocommit_one`] for about `d`; the rate per second.
    pub async fn autocommit_for(&self, d: Duration) -> Result<f64> {
        Ok(rate_for(d, async || self.autocommit_one().await).await?.0)
    }
}

/// Runs `op` until `d` has passed; operations per second and the count.
pub async fn rate_for(d: Duration, mut op: impl AsyncFnMut() -> Result<()>) -> Result<(f64, u64)> {
    let start = Instant::now();
    let mut n = 0u64;
    loop {
        op().await?;
        n += 1;
        let elapsed = start.elapsed();
        if elapsed >= d {
            return Ok((n as f64 / elapsed.as_secs_f64(), n));
        }
    }
}

#[cfg(test)]
mod tests {
    use redb::{ReadableDatabase as _, ReadableTableMetadata as _};

    use super::*;

    #[test]
    fn each_add_once_appends_a_row() {
        let dir = std::env::temp_dir().join(format!("bench-raw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (db, redb) = (dir.join("f.db"), dir.join("f.redb"));
        for _ in 0..3 {
            add_once(Backend::Sqlite, &db).unwrap();
            add_once(Backend::Redb, &redb).unwrap();
        }
        let conn = Connection::open(&db).unwrap();
        let rows: i64 = conn.query_row("SELECT COUNT(*) FROM raw0", [], |r| r.get(0)).unwrap();
        assert_eq!(rows, 3);
        let db = RawRedb::open(&redb, true, 1).unwrap().db;
        let txn = db.begin_read().unwrap();
        assert_eq!(txn.open_table(RAW[0]).unwrap().len().unwrap(), 3);
        drop((conn, txn, db));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
