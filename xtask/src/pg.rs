//! A throwaway PostgreSQL cluster for the Postgres store's tests, and
//! `cargo xtask pg [-- command…]`, which runs a command against one.
//!
//! The cluster is the distribution's own server binaries (`initdb`,
//! `pg_ctl`), a data folder in a fresh temporary folder, listening on a
//! unix socket in that folder only (no TCP port to collide with another
//! server), trust authentication for the one role `slothqueue`. Run as
//! root, it runs as `nobody` (the server refuses root). It is stopped and
//! deleted when the [`Cluster`] is dropped.
//!
//! `fsync=off` because nothing outlives the run, and an operating-system
//! crash is the only loss it risks; `synchronous_commit` stays on, so a
//! server killed or restarted mid-run (torture S25) loses no commit. The
//! bench's cluster ([`Cluster::start_durable`]) keeps the server's own
//! `fsync=on`: it measures a durable queue against durable raw commits, as
//! it does the file backends.
//!
//! A PgBouncer in transaction mode runs in front of it when installed
//! (`crate::pgbouncer`), its URL in `SLOTHQUEUE_PG_POOLER_URL`, for the
//! conformance suite through a pooler.
//!
//! The tests read the cluster's address from [`URL_ENV`]; without it they
//! say loudly that they were skipped, unless [`REQUIRED_ENV`] is set (as
//! `ci` sets it), when they fail instead.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the tests find the server.
pub const URL_ENV: &str = "SLOTHQUEUE_PG_URL";
/// Set to `1`: a missing server fails the Postgres tests instead of
/// skipping them.
pub const REQUIRED_ENV: &str = "SLOTHQUEUE_PG_REQUIRED";
/// The cluster's data folder, for a test that restarts the server
/// (`runuser -u $SLOTHQUEUE_PG_USER -- $SLOTHQUEUE_PG_BIN/pg_ctl -D … restart`).
pub const DATA_ENV: &str = "SLOTHQUEUE_PG_DATA";
/// The folder of the server's binaries (`pg_ctl`).
pub const BIN_ENV: &str = "SLOTHQUEUE_PG_BIN";
/// The user the server runs as, when not the caller (`nobody` under root).
pub const USER_ENV: &str = "SLOTHQUEUE_PG_USER";
/// The database the cluster makes for the tests.
const DATABASE: &str = "slothqueue_test";
/// The superuser role `initdb` makes.
const ROLE: &str = "slothqueue";

/// A running throwaway cluster; stopped and deleted on drop.
pub struct Cluster {
    bin: PathBuf,
    root: PathBuf,
    run_as: Option<&'static str>,
    url: String,
    /// A PgBouncer in front of it, when installed (not for the bench).
    bouncer: Option<crate::pgbouncer::Bouncer>,
}

impl Cluster {
    /// Starts a fresh cluster. With `install`, the distribution's
    /// `postgresql` package is installed first when no server binaries
    /// are found (CI's fresh machine); without it, their absence is an
    /// error saying how to install them.
    pub fn start(install: bool) -> Result<Cluster, String> {
        Cluster::launch(install, false)
    }

    /// [`Cluster::start`] with the server's default durability (`fsync`
    /// and `full_page_writes` on): for the bench, whose figures are ratios
    /// to durable commits.
    pub fn start_durable(install: bool) -> Result<Cluster, String> {
        Cluster::launch(install, true)
    }

    fn launch(install: bool, durable: bool) -> Result<Cluster, String> {
        let bin = match server_bin() {
            Some(bin) => bin,
            None if install => {
                install_server()?;
                server_bin().ok_or("installed postgresql, but found no initdb")?
            }
            None => {
                return Err("no PostgreSQL server binaries (initdb, pg_ctl) found; install the \
                            distribution's server (`apt-get install postgresql`), or set \
                            SLOTHQUEUE_PG_BIN to the folder holding them"
                    .to_owned());
            }
        };
        let run_as = is_root().then_some("nobody");
        let root = fresh_dir()?;
        if let Some(user) = run_as {
            checked(Command::new("chown").arg(user).arg(&root), "chown the cluster folder")?;
        }
        let data = root.join("data");
        let mut cluster =
            Cluster { bin, url: url_for(&root), root: root.clone(), run_as, bouncer: None };
        cluster.server_command("initdb", |c| {
            c.arg("-D").arg(&data).args([
                "-U",
                ROLE,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ])
        })?;
        cluster.server_command("pg_ctl", |c| {
            c.arg("-D").arg(&data).arg("-l").arg(root.join("server.log")).args([
                "-w",
                "-t",
                "60",
                "-o",
                &format!(
                    "-c listen_addresses='' -k {} {}-c max_connections=400 -c shared_buffers=64MB",
                    root.display(),
                    if durable { "" } else { "-c fsync=off -c full_page_writes=off " }
                ),
                "start",
            ])
        })?;
        cluster
            .server_command("createdb", |c| c.arg("-h").arg(&root).args(["-U", ROLE, DATABASE]))?;
        println!("xtask: PostgreSQL cluster up: {}", cluster.url);
        if !durable {
            cluster.bouncer = crate::pgbouncer::Bouncer::start(&root, ROLE, DATABASE, run_as)?;
        }
        Ok(cluster)
    }

    /// The URL the cluster answers at (the bench's `SLOTHQUEUE_PG_URL`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What a test needs to reach, and to restart, the server:
    /// [`URL_ENV`], [`REQUIRED_ENV`], [`DATA_ENV`], [`BIN_ENV`] and
    /// [`USER_ENV`].
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            (URL_ENV.to_owned(), self.url.clone()),
            (REQUIRED_ENV.to_owned(), "1".to_owned()),
            (DATA_ENV.to_owned(), self.root.join("data").display().to_string()),
            (BIN_ENV.to_owned(), self.bin.display().to_string()),
        ];
        if let Some(user) = self.run_as {
            env.push((USER_ENV.to_owned(), user.to_owned()));
        }
        if let Some(bouncer) = &self.bouncer {
            env.push((crate::pgbouncer::URL_ENV.to_owned(), bouncer.url().to_owned()));
        }
        env
    }

    /// Runs one of the server's binaries, as the cluster's user.
    fn server_command(
        &self,
        name: &str,
        args: impl FnOnce(&mut Command) -> &mut Command,
    ) -> Result<(), String> {
        let program = self.bin.join(name);
        let mut command = match self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&program);
                c
            }
            None => Command::new(&program),
        };
        // The server's folder is the working directory: `nobody` may not
        // be allowed into ours.
        command.current_dir(&self.root);
        args(&mut command);
        checked(&mut command, name)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Before its folder (holding its pid file) goes.
        drop(self.bouncer.take());
        let data = self.root.join("data");
        let stopped = self.server_command("pg_ctl", |c| {
            c.arg("-D").arg(&data).args(["-m", "immediate", "-w", "stop"])
        });
        if let Err(e) = stopped {
            eprintln!("xtask: stopping the PostgreSQL cluster: {e}");
        }
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            eprintln!("xtask: cannot delete {}: {e}", self.root.display());
        }
    }
}

/// `cargo xtask pg [-- command…]`: starts a cluster, runs the command with
/// [`URL_ENV`] and [`REQUIRED_ENV`] set, stops the cluster. Without a
/// command, prints the address and keeps the cluster until Enter.
pub fn run(args: &[String]) -> Result<(), String> {
    let command = match args.split_first() {
        Some((dashes, rest)) if dashes == "--" => rest,
        _ => args,
    };
    let cluster = Cluster::start(false)?;
    let Some((program, rest)) = command.split_first() else {
        println!("(the cluster answers at {})", cluster.url);
        for (key, value) in cluster.env() {
            println!("export {key}='{value}'");
        }
        println!("(press Enter to stop the cluster)");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        return Ok(());
    };
    println!("$ {}", command.join(" "));
    let status = Command::new(program)
        .args(rest)
        .envs(cluster.env())
        .status()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({status})", command.join(" ")))
    }
}

/// The folder of `initdb` and `pg_ctl`: `SLOTHQUEUE_PG_BIN`, else the
/// newest `/usr/lib/postgresql/<version>/bin` (Debian's layout, not on
/// PATH), else the folder on PATH that holds `initdb`.
fn server_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(BIN_ENV) {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
}

/// Installs the distribution's server, as root or through sudo.
fn install_server() -> Result<(), String> {
    let sudo: &[&str] = if is_root() { &[] } else { &["sudo"] };
    let apt = |args: &[&str]| -> Result<(), String> {
        let all: Vec<&str> = sudo.iter().chain(["apt-get"].iter()).chain(args).copied().collect();
        println!("$ {}", all.join(" "));
        let (program, rest) = all.split_first().ok_or("empty command")?;
        checked(
            Command::new(program).args(rest).env("DEBIAN_FRONTEND", "noninteractive"),
            "apt-get",
        )
    };
    apt(&["update"])?;
    apt(&["install", "-y", "--no-install-recommends", "postgresql"])
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A new folder of our own under the temporary folder, readable by the
/// server's user.
fn fresh_dir() -> Result<PathBuf, String> {
    let base = std::env::temp_dir();
    for n in 0..1000u32 {
        let dir = base.join(format!("slothqueue-pg-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
    }
    Err(format!("no free folder name under {}", base.display()))
}

/// The tests' URL: the socket folder as the `host` parameter, which
/// tokio-postgres reads as a unix socket.
fn url_for(socket_dir: &Path) -> String {
    format!("postgres://{ROLE}@localhost/{DATABASE}?host={}", socket_dir.display())
}

/// Runs `command`; an error naming `what` with its output if it fails.
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
