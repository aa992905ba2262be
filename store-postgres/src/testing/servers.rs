//! Real components around the throwaway cluster, for the tests of
//! PostgreSQL as operators run it (this crate's and the CLI's
//! `postgres_ops`): a PgBouncer in transaction mode in front of it
//! ([`PgBouncer`]), and a hot standby made from it with `pg_basebackup -R`
//! ([`Standby`]). Each is started by the test and stopped when dropped.
//!
//! A missing binary skips the test, loudly, unless `CI` is set, where it
//! fails: CI installs them (`.ci/run`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio_postgres::config::Host;

/// The cluster's data folder, its binaries and its user, as `cargo xtask
/// pg` sets them.
const DATA_ENV: &str = "SLOTHQUEUE_PG_DATA";
const BIN_ENV: &str = "SLOTHQUEUE_PG_BIN";
const USER_ENV: &str = "SLOTHQUEUE_PG_USER";

/// `name` on PATH or in the system's `sbin` folders (Debian puts
/// `pgbouncer` in `/usr/sbin`), or in the cluster's binaries
/// (`pg_basebackup`); `None`, said loudly, when missing, so the caller
/// skips. Panics under `CI`, where a skipped test would hide a gap.
#[expect(clippy::print_stderr, reason = "a skipped test must say so where cargo test shows it")]
pub fn tool(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os(BIN_ENV).map(PathBuf::from).into_iter().collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
    if let Some(found) = dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file()) {
        return Some(found);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "`{name}` is not installed but CI is set: this test must run here (.ci/run installs it)"
    );
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("\n*** SKIPPED: `{name}` is not installed (apt-get install {name}).\n").as_bytes(),
    );
    eprintln!("skipped: no {name}");
    None
}

/// Runs `program` as the cluster's user (`nobody` under root: neither
/// the server nor PgBouncer runs as root).
fn as_server_user(program: &Path) -> Command {
    match std::env::var(USER_ENV) {
        Ok(user) if !user.is_empty() => {
            let mut c = Command::new("runuser");
            c.args(["-u", &user, "--"]).arg(program);
            c
        }
        _ => Command::new(program),
    }
}

/// A folder of a test server's, deleted when dropped.
struct Folder(PathBuf);

impl Folder {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh folder the cluster's user owns.
fn server_dir(prefix: &str) -> Result<Folder, String> {
    let base = std::env::temp_dir();
    let mut n = 0u32;
    let dir = loop {
        let dir = base.join(format!("{prefix}{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => break Folder(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(format!("cannot make {}: {e}", dir.display())),
        }
    };
    if let Ok(user) = std::env::var(USER_ENV) {
        if !user.is_empty() {
            checked(Command::new("chown").arg(&user).arg(dir.path()), "chown")?;
        }
    }
    Ok(dir)
}

/// Runs `command`; its output in the error if it fails.
fn checked(command: &mut Command, what: &str) -> Result<(), String> {
    let out = command.output().map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// Waits until `path` exists (a server's socket), at most `limit`.
#[expect(clippy::disallowed_methods, reason = "polls a child server's start on the wall clock")]
fn wait_for(path: &Path, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The unix socket folder and port of the cluster `url` names.
fn socket_of(url: &str) -> Result<(PathBuf, u16), String> {
    let target = crate::txn::parse_url(url).map_err(|e| e.to_string())?;
    let port = target.config.get_ports().first().copied().unwrap_or(5432);
    match target.config.get_hosts().first() {
        Some(Host::Unix(dir)) => Ok((dir.clone(), port)),
        other => Err(format!("the test cluster is not on a unix socket ({other:?})")),
    }
}

/// `url` (the cluster's) with its query's `host` and `port` replaced, and
/// `extra` parameters added.
fn moved(url: &str, dir: &Path, port: u16, extra: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut params: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("host=") && !p.starts_with("port="))
        .map(str::to_owned)
        .collect();
    params.push(format!("host={}", dir.display()));
    params.push(format!("port={port}"));
    if !extra.is_empty() {
        params.push(extra.to_owned());
    }
    format!("{base}?{}", params.join("&"))
}

/// A PgBouncer 1.18 in `pool_mode = transaction` in front of the test
/// cluster, with `default_pool_size` server connections per database and
/// user: few, so a client's transactions run on whichever is free, as in
/// production. Listens on a unix socket in a folder of its own.
pub struct PgBouncer {
    dir: Folder,
    port: u16,
}

impl PgBouncer {
    /// Starts one in front of the cluster at `cluster_url`.
    pub fn start(cluster_url: &str, pool_size: u32) -> Result<PgBouncer, String> {
        let program = tool("pgbouncer").ok_or("no pgbouncer")?;
        let (server_dir_path, server_port) = socket_of(cluster_url)?;
        let target = crate::txn::parse_url(cluster_url).map_err(|e| e.to_string())?;
        let user = target.config.get_user().unwrap_or("postgres").to_owned();
        let dir = server_dir("slothqueue-pgbouncer-")?;
        let port = 6432;
        let ini = format!(
            "[databases]\n\
             * = host={server} port={server_port}\n\
             [pgbouncer]\n\
             unix_socket_dir = {here}\n\
             listen_port = {port}\n\
             auth_type = trust\n\
             auth_file = {here}/users.txt\n\
             pool_mode = transaction\n\
             default_pool_size = {pool_size}\n\
             max_client_conn = 500\n\
             logfile = {here}/pgbouncer.log\n\
             pidfile = {here}/pgbouncer.pid\n",
            server = server_dir_path.display(),
            here = dir.path().display(),
        );
        let write = |name: &str, text: &str| {
            std::fs::write(dir.path().join(name), text).map_err(|e| format!("{name}: {e}"))
        };
        write("pgbouncer.ini", &ini)?;
        write("users.txt", &format!("\"{user}\" \"\"\n"))?;
        if let Ok(owner) = std::env::var(USER_ENV) {
            if !owner.is_empty() {
                checked(Command::new("chown").arg("-R").arg(&owner).arg(dir.path()), "chown")?;
            }
        }
        // A daemon (`-d`), stopped by the pid it writes: `runuser` forks,
        // so killing a child of ours would leave PgBouncer running.
        checked(
            as_server_user(&program)
                .arg("-d")
                .arg(dir.path().join("pgbouncer.ini"))
                .stdin(Stdio::null()),
            "pgbouncer",
        )?;
        let bouncer = PgBouncer { dir, port };
        let socket = bouncer.dir.path().join(format!(".s.PGSQL.{port}"));
        if !wait_for(&socket, Duration::from_secs(20)) {
            return Err(format!("pgbouncer did not listen: {}", bouncer.log()));
        }
        Ok(bouncer)
    }

    /// `cluster_url` as reached through this pooler (the same user,
    /// database and schema), with `extra` query parameters (e.g.
    /// `pooler=transaction`).
    pub fn url(&self, cluster_url: &str, extra: &str) -> String {
        moved(cluster_url, self.dir.path(), self.port, extra)
    }

    /// What it logged, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        stop_daemon(&self.dir.path().join("pgbouncer.pid"));
    }
}

/// Stops the daemon whose pid `pidfile` holds (SIGTERM: PgBouncer 1.18
/// shuts down at once on it).
fn stop_daemon(pidfile: &Path) {
    let Ok(pid) = std::fs::read_to_string(pidfile) else { return };
    let pid = pid.trim();
    if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) {
        let _ = Command::new("kill").args(["-TERM", pid]).output();
    }
}

/// A hot standby of the test cluster: `pg_basebackup -R` of it into a
/// new data folder, started on a socket folder of its own, streaming from
/// the cluster. Stopped and deleted when dropped.
pub struct Standby {
    bin: PathBuf,
    dir: Folder,
    port: u16,
}

impl Standby {
    /// Makes and starts one of the cluster at `cluster_url` (whose data
    /// folder and binaries `cargo xtask pg` names in the environment).
    pub fn start(cluster_url: &str) -> Result<Standby, String> {
        let basebackup = tool("pg_basebackup").ok_or("no pg_basebackup")?;
        let bin = basebackup.parent().map(Path::to_path_buf).unwrap_or_default();
        if std::env::var_os(DATA_ENV).is_none() || !bin.join("pg_ctl").is_file() {
            return Err(format!(
                "a standby needs the cluster's binaries ({BIN_ENV}) and data folder ({DATA_ENV}): \
                 run under `cargo xtask pg`"
            ));
        }
        let (primary_dir, port) = socket_of(cluster_url)?;
        let target = crate::txn::parse_url(cluster_url).map_err(|e| e.to_string())?;
        let user = target.config.get_user().unwrap_or("postgres").to_owned();
        let dir = server_dir("slothqueue-standby-")?;
        let data = dir.path().join("data");
        checked(
            as_server_user(&basebackup)
                .arg("-h")
                .arg(&primary_dir)
                .arg("-p")
                .arg(port.to_string())
                .args(["-U", &user, "-D"])
                .arg(&data)
                .args(["-R", "-X", "stream", "--no-sync", "--checkpoint=fast"])
                .current_dir(dir.path()),
            "pg_basebackup",
        )?;
        let standby = Standby { bin, dir, port };
        checked(
            as_server_user(&standby.bin.join("pg_ctl"))
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(standby.dir.path().join("server.log"))
                .args(["-w", "-t", "60", "-o"])
                .arg(format!(
                    "-c listen_addresses='' -k {} -c port={port} -c max_connections=400 \
                     -c shared_buffers=64MB -c fsync=off -c hot_standby=on",
                    standby.dir.path().display()
                ))
                .arg("start")
                .current_dir(standby.dir.path()),
            "pg_ctl start (the standby)",
        )?;
        Ok(standby)
    }

    /// `cluster_url` as reached on the standby (the same user, database
    /// and schema).
    pub fn url(&self, cluster_url: &str) -> String {
        moved(cluster_url, self.dir.path(), self.port, "")
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = as_server_user(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "stop"])
            .current_dir(self.dir.path())
            .output();
    }
}
