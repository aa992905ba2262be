//! A PgBouncer in front of the throwaway cluster ([`crate::pg::Cluster`]),
//! in `pool_mode = transaction` with two server connections, so that the
//! shared conformance suite runs once more through a pooler
//! (`store-postgres/tests/conformance_pooled.rs`), with [`URL_ENV`] set
//! to its URL (`…&pooler=transaction`). Started with the cluster when
//! Debian's `pgbouncer` is installed (CI's `.ci/run` installs it); without
//! it the pooled suite says it skipped, and fails under `CI`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where the pooled tests find the pooler.
pub const URL_ENV: &str = "SLOTHQUEUE_PG_POOLER_URL";

/// The port in the socket's name (`.s.PGSQL.6432`); it listens on a unix
/// socket in a folder of the cluster's, so no port can collide.
const PORT: u16 = 6432;

/// A running PgBouncer; stopped on drop.
pub struct Bouncer {
    pidfile: PathBuf,
    url: String,
}

impl Bouncer {
    /// Starts one in `root/pgbouncer` in front of the server listening in
    /// `root` (its socket folder), as `run_as` when the caller is root
    /// (PgBouncer refuses to run as root). `None` when `pgbouncer` is not
    /// installed.
    #[expect(clippy::disallowed_methods, reason = "polls a child server's start on the wall clock")]
    pub fn start(
        root: &Path,
        role: &str,
        database: &str,
        run_as: Option<&str>,
    ) -> Result<Option<Bouncer>, String> {
        let Some(program) = find() else {
            println!("xtask: no pgbouncer installed: the tests through a pooler will skip");
            return Ok(None);
        };
        let dir = root.join("pgbouncer");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let ini = format!(
            "[databases]\n\
             * = host={root} port=5432\n\
             [pgbouncer]\n\
             unix_socket_dir = {here}\n\
             listen_port = {PORT}\n\
             auth_type = trust\n\
             auth_file = {here}/users.txt\n\
             pool_mode = transaction\n\
             default_pool_size = 2\n\
             max_client_conn = 1000\n\
             logfile = {here}/pgbouncer.log\n\
             pidfile = {here}/pgbouncer.pid\n",
            root = root.display(),
            here = dir.display(),
        );
        let write = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text).map_err(|e| format!("{name}: {e}"))
        };
        write("pgbouncer.ini", &ini)?;
        write("users.txt", &format!("\"{role}\" \"\"\n"))?;
        let mut command = match run_as {
            Some(user) => {
                let chown = Command::new("chown").arg("-R").arg(user).arg(&dir).status();
                if !chown.is_ok_and(|s| s.success()) {
                    return Err(format!("cannot chown {} to {user}", dir.display()));
                }
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&program);
                c
            }
            None => Command::new(&program),
        };
        // A daemon (`-d`), stopped by the pid it writes: `runuser` forks,
        // so killing a child of ours would leave PgBouncer running.
        let out = command
            .arg("-d")
            .arg(dir.join("pgbouncer.ini"))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot start pgbouncer: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pgbouncer failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let url = format!(
            "postgres://{role}@localhost/{database}?host={}&port={PORT}&pooler=transaction",
            dir.display()
        );
        let bouncer = Bouncer { pidfile: dir.join("pgbouncer.pid"), url };
        let socket = dir.join(format!(".s.PGSQL.{PORT}"));
        let start = Instant::now();
        while !socket.exists() {
            if start.elapsed() > Duration::from_secs(20) {
                let log = std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default();
                return Err(format!("pgbouncer did not listen: {log}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        println!("xtask: PgBouncer (transaction mode) up: {}", bouncer.url);
        Ok(Some(bouncer))
    }

    /// Its URL, for [`URL_ENV`].
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        // SIGTERM: PgBouncer 1.18 shuts down at once on it.
        let Ok(pid) = std::fs::read_to_string(&self.pidfile) else { return };
        let pid = pid.trim();
        if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) {
            let _ = Command::new("kill").args(["-TERM", pid]).output();
        }
    }
}

/// `pgbouncer` on PATH or in the system's `sbin` folders (Debian's is in
/// `/usr/sbin`).
fn find() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin"].map(PathBuf::from));
    dirs.into_iter().map(|d| d.join("pgbouncer")).find(|p| p.is_file())
}
