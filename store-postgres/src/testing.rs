//! Helpers for the tests of every crate that runs something on
//! PostgreSQL (this crate's, the runner's, the CLI's, the torture
//! suite's): where the test server is, one schema per test queue path, and
//! a relay between a client and the server that a test can freeze (a link
//! that goes silent without a reset: S26). Not part of the API.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::thread;

use tokio_postgres::config::Host;

use crate::txn::fnv64;

pub mod servers;

/// The URL of the server the tests use, e.g.
/// `postgres://slothqueue@localhost/postgres?host=/tmp/pgdev`.
pub const URL_ENV: &str = "SLOTHQUEUE_PG_URL";

/// Set to `1` (CI) to make a missing [`URL_ENV`] a failure, not a skip.
pub const REQUIRED_ENV: &str = "SLOTHQUEUE_PG_REQUIRED";

/// How to run the PostgreSQL tests, as the skip message says it.
pub const HOW_TO_RUN: &str = "cargo xtask pg -- cargo test -p slothqueue-store-postgres";

/// The test server's URL from [`URL_ENV`]; `None`, said loudly on stderr
/// (once per test binary), when it is unset, so the caller skips. Panics
/// instead when [`REQUIRED_ENV`] is `1`: CI must not pass by skipping.
#[expect(clippy::print_stderr, reason = "a skipped test must say so where cargo test shows it")]
pub fn url_from_env() -> Option<String> {
    if let Ok(url) = std::env::var(URL_ENV) {
        if !url.trim().is_empty() {
            return Some(url);
        }
    }
    assert!(
        std::env::var(REQUIRED_ENV).as_deref() != Ok("1"),
        "{URL_ENV} is not set but {REQUIRED_ENV}=1: the PostgreSQL tests must run here; \
         run them with `{HOW_TO_RUN}`"
    );
    static LOUD: Once = Once::new();
    LOUD.call_once(|| {
        // Straight to the process's stderr: `cargo test` captures what
        // `eprintln!` prints in a passing test, and this must be seen.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: the PostgreSQL tests need a server, and {URL_ENV} is not set.\n\
             *** Run them with: {HOW_TO_RUN}\n\
             *** (or set {URL_ENV}=postgres://USER@HOST/DB yourself)\n"
        );
    });
    eprintln!("skipped: {URL_ENV} is not set");
    None
}

/// Whether the PostgreSQL tests can run ([`url_from_env`]): the
/// precondition of `conformance_suite!(open, when = ...)`.
pub fn pg_available() -> bool {
    url_from_env().is_some()
}

/// The schema a test queue at `path` lives in: `q_` and 16 hex digits of
/// a hash of the path, so the same path (from a second handle, or a child
/// process) names the same queue, and two paths two queues.
pub fn schema_for_path(path: &Path) -> String {
    format!("q_{:016x}", fnv64(path.to_string_lossy().as_bytes()))
}

/// `url` with its `schema` parameter set to `schema` (replaced if it had
/// one).
pub fn with_schema(url: &str, schema: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let mut params: Vec<&str> =
        query.split('&').filter(|p| !p.is_empty() && !p.starts_with("schema=")).collect();
    let param = format!("schema={schema}");
    params.push(&param);
    format!("{base}?{}", params.join("&"))
}

/// The URL of the test queue at `path` on the server at `base`.
pub fn schema_url_for_path(base: &str, path: &Path) -> String {
    with_schema(base, &schema_for_path(path))
}

/// Where a server listens: the relay's far end.
#[derive(Clone, Debug)]
enum Upstream {
    Tcp(String),
    Unix(PathBuf),
}

/// One end of a relayed connection.
enum Link {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Link {
    /// The first of `to` that answers, as tokio-postgres tries them.
    fn connect(to: &[Upstream]) -> std::io::Result<Link> {
        let mut last = std::io::Error::other("no server to relay to");
        for server in to {
            let link = match server {
                Upstream::Tcp(addr) => TcpStream::connect(addr).map(Link::Tcp),
                Upstream::Unix(path) => UnixStream::connect(path).map(Link::Unix),
            };
            match link {
                Ok(l) => return Ok(l),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn split(self) -> std::io::Result<(Box<dyn Read + Send>, Box<dyn Write + Send>)> {
        Ok(match self {
            Link::Tcp(s) => (Box::new(s.try_clone()?), Box::new(s)),
            Link::Unix(s) => (Box::new(s.try_clone()?), Box::new(s)),
        })
    }
}

/// The servers `url` names, in the order a client tries them.
fn upstream(url: &str) -> Result<Vec<Upstream>, String> {
    let config = crate::txn::parse_url(url).map_err(|e| e.to_string())?.config;
    let ports = config.get_ports();
    let hosts = config.get_hosts();
    if hosts.is_empty() {
        return Ok(vec![Upstream::Tcp(format!("localhost:{}", ports.first().unwrap_or(&5432)))]);
    }
    Ok(hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match h {
                Host::Unix(dir) => Upstream::Unix(dir.join(format!(".s.PGSQL.{port}"))),
                Host::Tcp(name) => Upstream::Tcp(format!("{name}:{port}")),
            }
        })
        .collect())
}

/// `url` (a test server's, with its `schema` parameter) through a relay
/// listening on `127.0.0.1:port`: the same user, password, database and
/// schema.
pub fn via_relay(url: &str, port: u16) -> Result<String, String> {
    let target = crate::txn::parse_url(url).map_err(|e| e.to_string())?;
    let user = target.config.get_user().unwrap_or("postgres");
    let auth = match target.config.get_password() {
        Some(p) => format!("{user}:{}", String::from_utf8_lossy(p)),
        None => user.to_owned(),
    };
    let db = target.config.get_dbname().unwrap_or(user);
    Ok(format!("postgres://{auth}@127.0.0.1:{port}/{db}?schema={}", target.schema))
}

/// Lets bytes through, or holds them (frozen): a relay's switch.
#[derive(Default)]
struct Gate {
    frozen: Mutex<bool>,
    thawed: Condvar,
}

impl Gate {
    fn pass(&self) {
        let mut frozen = self.frozen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while *frozen {
            frozen = self.thawed.wait(frozen).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    fn set(&self, frozen: bool) {
        *self.frozen.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = frozen;
        self.thawed.notify_all();
    }
}

/// Copies `from` to `to` until either end closes, each chunk through
/// `gate`.
fn pump(mut from: Box<dyn Read + Send>, mut to: Box<dyn Write + Send>, gate: Arc<Gate>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        gate.pass();
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// Accepts on `listener` forever, relaying each connection to `to`.
fn accept_loop(listener: TcpListener, to: Vec<Upstream>, gate: Arc<Gate>) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let (to, gate) = (to.clone(), gate.clone());
        thread::spawn(move || {
            let Ok(server) = Link::connect(&to) else { return };
            let (Ok((c_in, c_out)), Ok((s_in, s_out))) =
                (Link::Tcp(client).split(), server.split())
            else {
                return;
            };
            let back = gate.clone();
            thread::spawn(move || pump(s_in, c_out, back));
            pump(c_in, s_out, gate);
        });
    }
}

/// A TCP relay on `127.0.0.1` to the server of a test URL, in this
/// process: [`Relay::freeze`] stops it forwarding without closing a
/// socket (what a partition, or a SIGSTOPped proxy, looks like to the
/// client: writes are taken, answers never come).
pub struct Relay {
    port: u16,
    gate: Arc<Gate>,
}

impl Relay {
    /// Starts relaying to the server of `url`.
    pub fn start(url: &str) -> Result<Relay, String> {
        let to = upstream(url)?;
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let gate = Arc::new(Gate::default());
        let g = gate.clone();
        thread::spawn(move || accept_loop(listener, to, g));
        Ok(Relay { port, gate })
    }

    /// `url` through this relay ([`via_relay`]).
    pub fn url(&self, url: &str) -> Result<String, String> {
        via_relay(url, self.port)
    }

    /// Holds every byte from now on, in both directions.
    pub fn freeze(&self) {
        self.gate.set(true);
    }

    /// Lets them through again.
    pub fn thaw(&self) {
        self.gate.set(false);
    }
}

/// A relay process's life: relays to the server of `url` from a fresh
/// port on `127.0.0.1`, which it prints as one line on stdout, until it
/// is killed. A test freezes it with SIGSTOP (the torture suite's hidden
/// `relay` mode, the runner's fence test).
pub fn serve_relay(url: &str) -> Result<(), String> {
    let to = upstream(url)?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{port}").and_then(|()| out.flush()).map_err(|e| e.to_string())?;
    drop(out);
    accept_loop(listener, to, Arc::new(Gate::default()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_one_schema() {
        let a = schema_for_path(Path::new("/tmp/x/queue"));
        assert_eq!(a, schema_for_path(Path::new("/tmp/x/queue")));
        assert_ne!(a, schema_for_path(Path::new("/tmp/y/queue")));
        assert!(crate::txn::valid_schema_name(&a), "{a}");
        assert_eq!(a.len(), 18);
    }

    #[test]
    fn the_schema_parameter_is_set_or_replaced() {
        assert_eq!(with_schema("postgres://u@h/db", "q"), "postgres://u@h/db?schema=q");
        assert_eq!(
            with_schema("postgres://u@h/db?host=/tmp/s&schema=old", "q"),
            "postgres://u@h/db?host=/tmp/s&schema=q"
        );
    }
}
