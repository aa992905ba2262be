//! The PostgreSQL server the `postgres/default` column is measured on:
//! where it is (`SLOTHQUEUE_PG_URL`, which `cargo xtask bench` sets to a
//! throwaway cluster of its own when the caller gave none), how a bench
//! queue is named on it, and the few statements the harness itself sends
//! (what the server is, a queue's size, dropping the bench's schemas).
//!
//! A queue on the server is named like a queue file, by a `PathBuf`
//! holding its URL (`postgres://…?schema=NAME`), as the CLI's `--db` takes
//! it: the harness passes queues around as paths, and the CLI figures
//! hand them to the binary unchanged. Every schema of one run starts with
//! `bench_<run>_`, `<run>` being the harness's process id, which the child
//! processes it starts inherit through [`RUN_ENV`]: the run drops them
//! all at its end ([`drop_run_schemas`]), so a shared server keeps
//! nothing, and two runs on one server never meet.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context as _, Result, bail};
use tokio_postgres::{Client, NoTls};

/// Where the server is: `postgres://USER@HOST/DB` with any parameter
/// tokio-postgres knows (`?host=/socket/dir`), as the store's tests read it.
pub const URL_ENV: &str = "SLOTHQUEUE_PG_URL";

/// The run's id, handed to the child processes (drain, slots), so their
/// queues are dropped with the run's.
pub const RUN_ENV: &str = "SLOTHQUEUE_BENCH_RUN";

/// The server's URL (without `schema`), read once.
pub fn server_url() -> Option<&'static str> {
    static URL: OnceLock<Option<String>> = OnceLock::new();
    URL.get_or_init(|| {
        let url = std::env::var(URL_ENV).ok()?;
        let url = url.trim();
        (!url.is_empty()).then(|| without_schema(url))
    })
    .as_deref()
}

/// This run's id: the parent harness's process id.
pub fn run_id() -> &'static str {
    static RUN: OnceLock<String> = OnceLock::new();
    RUN.get_or_init(|| {
        std::env::var(RUN_ENV)
            .ok()
            .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
            .unwrap_or_else(|| std::process::id().to_string())
    })
}

/// `url` without its `schema` parameter.
fn without_schema(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else { return url.to_owned() };
    let kept: Vec<&str> =
        query.split('&').filter(|p| !p.is_empty() && !p.starts_with("schema=")).collect();
    if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) }
}

/// The schema of the bench queue `stem` under the scratch folder `dir`:
/// `bench_<run>_<folder>_<stem>`, lowercase, `-` as `_`, at most 63 bytes
/// (the folder tells the settings' and the CLI's queues apart).
fn schema_name(dir: &Path, stem: &str) -> String {
    let folder = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
            .collect()
    };
    let mut name = format!("bench_{}_{}_{}", run_id(), clean(&folder), clean(stem));
    name.truncate(63);
    name
}

/// The queue `stem` of this run on the server, as a `--db` path.
pub fn queue(dir: &Path, stem: &str) -> PathBuf {
    let base = server_url().unwrap_or("postgres://no-server-configured/postgres");
    let schema = schema_name(dir, stem);
    let sep = if base.contains('?') { '&' } else { '?' };
    PathBuf::from(format!("{base}{sep}schema={schema}"))
}

/// Whether `path` names a queue on the server rather than a file.
pub fn is_url(path: &Path) -> bool {
    path.to_str().is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// The URL a `--db` path holds.
pub fn url_of(path: &Path) -> Result<&str> {
    path.to_str().with_context(|| format!("{} is not a URL", path.display()))
}

/// The `schema` parameter of a queue's URL.
pub fn schema_of(path: &Path) -> Result<String> {
    let url = url_of(path)?;
    let schema = url
        .split_once('?')
        .and_then(|(_, q)| q.split('&').find_map(|p| p.strip_prefix("schema=")))
        .with_context(|| format!("{url} names no schema"))?;
    // Spliced into SQL below: only the names `schema_name` makes.
    if schema.is_empty()
        || !schema.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        bail!("`{schema}` is not a bench schema name");
    }
    Ok(schema.to_owned())
}

/// A connection of the harness's own to the server, its task spawned on
/// the current runtime.
pub async fn connect(url: &str) -> Result<Client> {
    let (client, connection) = without_schema(url)
        .parse::<tokio_postgres::Config>()
        .with_context(|| format!("not a PostgreSQL URL: {url}"))?
        .connect(NoTls)
        .await
        .with_context(|| format!("cannot connect to {url}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The server for the report: its version and the settings that decide a
/// commit's cost.
pub async fn describe() -> Result<String> {
    let url = server_url().context("no server")?;
    let client = connect(url).await?;
    let mut parts = Vec::new();
    for setting in
        ["server_version", "fsync", "synchronous_commit", "full_page_writes", "shared_buffers"]
    {
        let row = client.query_one(&format!("SHOW {setting}"), &[]).await?;
        let value: String = row.try_get(0)?;
        parts.push(if setting == "server_version" {
            format!("PostgreSQL {value}")
        } else {
            format!("{setting}={value}")
        });
    }
    let socket = if url.contains("host=/") { "unix socket" } else { "TCP" };
    Ok(format!("{} (same machine, {socket})", parts.join(", ")))
}

/// The bytes a queue's tables take with their indexes and TOAST
/// (`pg_total_relation_size`), dead rows not yet vacuumed included.
pub async fn queue_bytes(path: &Path) -> Result<u64> {
    let schema = schema_of(path)?;
    let client = connect(url_of(path)?).await?;
    let row = client
        .query_one(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::BIGINT
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relkind = 'r'",
            &[&schema],
        )
        .await?;
    let bytes: i64 = row.try_get(0)?;
    Ok(u64::try_from(bytes).unwrap_or(0))
}

/// Brings a freshly filled queue's planner statistics up to date
/// (`ANALYZE` of its job, event and edge tables), as autovacuum does
/// within a minute or so of a bulk insert. Until then the server plans a
/// claim on a queue it believes empty: right after a `push_many` of
/// 100,000 jobs, PostgreSQL 15 walked `jobs_pending_due` and sorted every
/// pending row for each claim (334 ms, `EXPLAIN ANALYZE`) instead of
/// reading the first entry of `jobs_pending`. The harness measures the
/// settled queue, and that first claim separately (`claim_fresh_ms`).
pub async fn analyze(path: &Path) -> Result<()> {
    let schema = schema_of(path)?;
    let client = connect(url_of(path)?).await?;
    client
        .batch_execute(&format!("ANALYZE {schema}.jobs, {schema}.events, {schema}.edges"))
        .await
        .with_context(|| format!("cannot analyze {schema}"))?;
    Ok(())
}

/// Drops one queue's schema.
pub async fn drop_queue(path: &Path) -> Result<()> {
    let schema = schema_of(path)?;
    let client = connect(url_of(path)?).await?;
    client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await?;
    Ok(())
}

/// Drops every schema this run made; how many.
pub async fn drop_run_schemas() -> Result<usize> {
    let Some(url) = server_url() else { return Ok(0) };
    let client = connect(url).await?;
    let prefix = format!("bench\\_{}\\_%", run_id());
    let rows = client
        .query("SELECT nspname::TEXT FROM pg_namespace WHERE nspname LIKE $1", &[&prefix])
        .await?;
    for row in &rows {
        let schema: String = row.try_get(0)?;
        client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")).await?;
    }
    Ok(rows.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        let name = schema_name(Path::new("/x/scratch-1/postgres-default"), "backlog-1000");
        assert!(name.starts_with("bench_"), "{name}");
        assert!(name.ends_with("_postgres_default_backlog_1000"), "{name}");
        assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        let long = schema_name(Path::new("/x/a-very-long-folder-name-indeed"), &"s".repeat(80));
        assert_eq!(long.len(), 63);
    }

    #[test]
    fn the_schema_parameter_is_replaced_and_read_back() {
        assert_eq!(without_schema("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            without_schema("postgres://u@h/db?host=/tmp/s&schema=old"),
            "postgres://u@h/db?host=/tmp/s"
        );
        assert_eq!(without_schema("postgres://u@h/db?schema=old"), "postgres://u@h/db");
        let q = Path::new("postgres://u@h/db?host=/tmp/s&schema=bench_1_x_y");
        assert_eq!(schema_of(q).unwrap(), "bench_1_x_y");
        assert!(schema_of(Path::new("postgres://u@h/db?schema=x;drop")).is_err());
        assert!(is_url(q) && !is_url(Path::new("/tmp/q.db")));
    }
}
