//! CI's step for `slothqueue serve` as an outside client sees it:
//! schemathesis (from PyPI, in the virtual environment `py::venv` makes)
//! reads the server's own OpenAPI document and sends what it derives from
//! it, positive and negative, with every check it has; any failure fails
//! the step. The run is bounded (a fixed seed, few examples per operation)
//! so that it takes a few minutes at most on a 2-core machine, and the
//! same seed gives the same requests on any machine.
//!
//! The server runs the debug binary on a fresh queue file in a temporary
//! folder, with a load file that keeps its drain worker from starting any
//! job schemathesis queues (a generated shell command is never run).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::py;

/// The seed of every run (schemathesis draws the same cases from it).
const SEED: &str = "1";

/// Cases per operation: enough to reach each input's edges with the
/// coverage phase doing the rest, few enough for the time bound.
const MAX_EXAMPLES: &str = "50";

/// What the run is told beyond the command line:
/// - a request may take a minute: the debug build on 2 shared cores takes
///   about 15 s to cancel the 20,000 pending jobs the generated batches
///   leave (`POST /api/queues/{queue}/cancel-pending`);
/// - a 413 (a body past the server's limit, as a generated batch of
///   10,000 jobs is) is a rejection like a 400;
/// - `GET /api/tasks/outbox/{id}` waits a quarter second: its `wait` (up
///   to 120 s of long poll on a job no runner starts) would pass the
///   client's 10 s timeout and the step's time; the wait's own rule is
///   tested in `http` (`parse_wait`, `http/tests/wire.rs`).
const CONFIG: &str = r#"
request-timeout = 60

[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]

[[operations]]
include-operation-id = "showJob"
parameters = { "query.wait" = 0.25 }
"#;

/// A queue file and server that go away when dropped.
struct Served {
    dir: PathBuf,
    child: Child,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `serve` and runs schemathesis against it.
pub fn run() -> Result<(), String> {
    let python = py::venv()?;
    let binary = py::slothqueue_binary()?;
    let dir = std::env::temp_dir().join(format!("slothqueue-schemathesis-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    // A load far above any ceiling: the worker never starts a job.
    let load = dir.join("loadavg");
    std::fs::write(&load, "1000.00 1000.00 1000.00 1/1 1\n")
        .map_err(|e| format!("cannot write {}: {e}", load.display()))?;
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let queue = dir.join("q.db");
    let child = Command::new(&binary)
        .args(["serve", "--addr", &addr, "--db"])
        .arg(&queue)
        .arg("--load-file")
        .arg(&load)
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let served = Served { dir, child };
    let token = wait_until_up(&addr, &queue.with_extension("db.token"))?;
    let schemathesis = schemathesis_of(&python)?;
    let authorization = format!("Authorization: Bearer {token}");
    let report = served.dir.join("report");
    let report = report.to_string_lossy();
    let schema = format!("http://{addr}/api/openapi.json");
    let config = served.dir.join("schemathesis.toml");
    std::fs::write(&config, CONFIG)
        .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
    let config = config.to_string_lossy();
    py::command(
        &schemathesis,
        &[
            "--config-file",
            &config,
            "run",
            &schema,
            "--checks",
            "all",
            "--seed",
            SEED,
            "--max-examples",
            MAX_EXAMPLES,
            // One worker: the same seed then sends the same requests in
            // the same order (two interleave by timing).
            "--workers",
            "1",
            "-H",
            &authorization,
            "--report-dir",
            &report,
        ],
        &[("NO_COLOR", "1")],
        Some(&served.dir),
    )
    .map_err(|e| format!("schemathesis found failures against `serve`: {e}"))
}

/// A loopback port free now (the kernel's pick, released for `serve`).
fn free_port() -> Result<u16, String> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| format!("cannot find a free port: {e}"))
}

/// Waits for `serve` to listen and write its token; returns the token.
#[expect(
    clippy::disallowed_methods,
    reason = "a build step polling a real process it started: no clock to inject"
)]
fn wait_until_up(addr: &str, token_file: &Path) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if TcpStream::connect(addr).is_ok()
            && let Ok(token) = std::fs::read_to_string(token_file)
        {
            return Ok(token.trim().to_owned());
        }
        if Instant::now() > deadline {
            return Err(format!("`serve` did not listen on {addr} within 60 s"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `schemathesis` command beside the environment's `python`.
fn schemathesis_of(python: &Path) -> Result<PathBuf, String> {
    python
        .parent()
        .map(|bin| bin.join("schemathesis"))
        .ok_or_else(|| format!("{} is not in a virtual environment", python.display()))
}
