//! The PostgreSQL server the `postgres` backend runs against: where it is
//! (`SLOTHQUEUE_PG_URL`, set by `cargo xtask pg`, `ci` and `torture`),
//! a fresh schema per queue, the schemas dropped afterwards, and the
//! server restarted mid-run (S25).
//!
//! Each queue of a scenario is a schema of its own, named after the run's
//! pid and the scenario, so scenarios never see each other's jobs, and a
//! server shared with other runs (a developer's) is left as it was.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Where the server is: a `postgres://` URL without a `schema`.
pub const URL_ENV: &str = "SLOTHQUEUE_PG_URL";
/// Set to `1` (as `ci` does): a missing server is a failure, not a skip.
pub const REQUIRED_ENV: &str = "SLOTHQUEUE_PG_REQUIRED";
/// The server's data folder, for `pg_ctl restart` (S25).
pub const DATA_ENV: &str = "SLOTHQUEUE_PG_DATA";
/// The folder of `pg_ctl`.
pub const BIN_ENV: &str = "SLOTHQUEUE_PG_BIN";
/// The user the server runs as when it is not us (`nobody` under root).
pub const USER_ENV: &str = "SLOTHQUEUE_PG_USER";

/// Every schema the harness makes starts with this, then the pid of the
/// run that made it.
const PREFIX: &str = "sqt_";

/// The server's URL from the environment, if set.
pub fn url_from_env() -> Option<String> {
    std::env::var(URL_ENV).ok().filter(|u| !u.trim().is_empty())
}

/// Whether the environment says a missing server is a failure.
pub fn required() -> bool {
    std::env::var(REQUIRED_ENV).is_ok_and(|v| v == "1")
}

/// `url` without any `schema=` in its query: the server and database
/// alone.
pub fn base_url(url: &str) -> String {
    let Some((head, query)) = url.split_once('?') else { return url.to_owned() };
    let kept: Vec<&str> =
        query.split('&').filter(|kv| !kv.is_empty() && !kv.starts_with("schema=")).collect();
    if kept.is_empty() { head.to_owned() } else { format!("{head}?{}", kept.join("&")) }
}

/// `base` with `schema=<schema>` added to its query.
pub fn with_schema(base: &str, schema: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}schema={schema}")
}

/// A schema name of our own for `label` (lower case, `[a-z0-9_]`, within
/// PostgreSQL's 63 bytes), unique within this run by `n`.
pub fn schema_name(label: &str, n: usize) -> String {
    let clean: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
        .collect();
    let mut name = format!("{PREFIX}{}_{n}_{clean}", std::process::id());
    name.truncate(63);
    name
}

/// Runs `f` with a connection to the server at `base` (a current-thread
/// runtime of its own, closed afterwards).
fn with_client<T>(
    base: &str,
    f: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<T>,
) -> Result<T> {
    let rt = crate::queue::runtime()?;
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls)
            .await
            .with_context(|| format!("cannot connect to {base}"))?;
        let conn = tokio::spawn(connection);
        let out = f(&client).await;
        drop(client);
        let _ = conn.await;
        out
    })
}

/// Checks that the server answers (before a backend's run starts).
pub fn ping(base: &str) -> Result<()> {
    with_client(base, async |c| {
        c.simple_query("SELECT 1").await.context("the server does not answer")?;
        Ok(())
    })
}

/// Drops `schemas` (and everything in them), and the schemas earlier runs
/// of the harness left behind whose process is gone (killed before they
/// could clean up).
pub fn drop_schemas(base: &str, schemas: &[String]) -> Result<()> {
    with_client(base, async |c| {
        let rows = c
            .query("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", &[&PREFIX])
            .await
            .context("cannot list the schemas")?;
        let mut doomed: Vec<String> = schemas.to_vec();
        for row in rows {
            let name: String = row.get(0);
            let pid = name.strip_prefix(PREFIX).and_then(|r| r.split('_').next());
            let gone = pid
                .and_then(|p| p.parse::<i32>().ok())
                .is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists());
            if gone && !doomed.contains(&name) {
                doomed.push(name);
            }
        }
        for name in doomed {
            // Quoted as an identifier: the name is ours, but a quote
            // costs nothing.
            let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", name.replace('"', "\"\""));
            c.batch_execute(&sql).await.with_context(|| format!("cannot drop schema {name}"))?;
        }
        Ok(())
    })
}

/// What it takes to restart the server: its data folder, `pg_ctl`, and
/// the user it runs as.
#[derive(Clone, Debug)]
pub struct Server {
    data: PathBuf,
    pg_ctl: PathBuf,
    user: Option<String>,
}

impl Server {
    /// From the environment `cargo xtask pg` / `ci` / `torture` set; `None`
    /// names what is missing.
    pub fn from_env() -> Result<Server, String> {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        let data = var(DATA_ENV).map(PathBuf::from);
        let bin = var(BIN_ENV).map(PathBuf::from);
        match (data, bin) {
            (Some(data), Some(bin)) => Ok(Server {
                data,
                pg_ctl: bin.join("pg_ctl"),
                user: std::env::var(USER_ENV).ok().filter(|u| !u.is_empty()),
            }),
            _ => Err(format!(
                "restarting the server needs {DATA_ENV} and {BIN_ENV} (set by `cargo xtask pg` and \
                 `cargo xtask torture`)"
            )),
        }
    }

    /// The file the running server writes its log to (its stdout), so a
    /// restart keeps writing there: `pg_ctl restart` does not remember
    /// `-l`, and without it the new server would write to our pipes.
    fn log_file(&self) -> Option<PathBuf> {
        let pid = std::fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        let pid: i32 = pid.lines().next()?.trim().parse().ok()?;
        std::fs::read_link(format!("/proc/{pid}/fd/1")).ok().filter(|p| p.is_absolute())
    }

    /// `pg_ctl restart -m immediate -w`: the server stops at once (every
    /// connection dropped, no checkpoint: it recovers from its WAL on the
    /// way up, as after a crash) and starts again. Returns how long it
    /// took.
    pub fn restart_immediate(&self) -> Result<Duration> {
        let started = Instant::now();
        let mut cmd = match &self.user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&self.pg_ctl);
                c
            }
            None => Command::new(&self.pg_ctl),
        };
        cmd.arg("-D").arg(&self.data).args(["restart", "-m", "immediate", "-w", "-t", "60"]);
        if let Some(log) = self.log_file() {
            cmd.arg("-l").arg(log);
        }
        // The server's user may not enter our folder.
        cmd.current_dir("/").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let out = cmd.output().context("cannot run pg_ctl")?;
        if !out.status.success() {
            bail!(
                "pg_ctl restart failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(started.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_one_schema() {
        let u = "postgres://u@localhost/db?host=/tmp/x";
        assert_eq!(with_schema(u, "s"), "postgres://u@localhost/db?host=/tmp/x&schema=s");
        assert_eq!(with_schema("postgres://u@h/db", "s"), "postgres://u@h/db?schema=s");
        assert_eq!(base_url("postgres://u@h/db?schema=a&host=/x"), "postgres://u@h/db?host=/x");
        assert_eq!(base_url("postgres://u@h/db?schema=a"), "postgres://u@h/db");
        let name = schema_name("S04-s04 very long label ".repeat(9).as_str(), 3);
        assert!(name.len() <= 63 && name.starts_with(PREFIX));
        assert!(name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
    }
}
