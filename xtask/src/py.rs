//! The Python virtual environment the test command makes for itself: the
//! MCP server is tested with the official MCP Python SDK as its client and
//! the Python package with pytest, both from PyPI, so a fresh machine needs
//! only `python3` (with its `venv` module) and a reachable package index.
//!
//! The environment lives under `target/` (never committed, removed by
//! `cargo clean`) and is made once; later runs only ask pip for what is
//! missing, which answers from the installed set without a download.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run;

/// Where the environment lives, relative to the project root.
const VENV_DIR: &str = "target/py-venv";

/// What every Python test of the project needs, pinned to the majors the
/// tests were written against: pytest runs them, `mcp` is the official MCP
/// SDK (its stdio client drives `slothqueue mcp`), maturin builds the
/// Python package, mypy checks its stubs, schemathesis tests `serve`
/// against its own OpenAPI document.
pub const PACKAGES: &[&str] =
    &["pytest>=8,<10", "mcp>=1.9,<2", "maturin>=1.7,<2", "mypy>=1.10,<2", "schemathesis>=4.3,<5"];

/// A ready virtual environment with [`PACKAGES`] installed; returns the
/// path of its `python`.
pub fn venv() -> Result<PathBuf, String> {
    let root = run::project_root();
    let dir = root.join(VENV_DIR);
    let python = dir.join("bin").join("python");
    if !python.exists() {
        let system = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
        let dir_text = dir.to_string_lossy().into_owned();
        command(Path::new(&system), &["-m", "venv", &dir_text], &[], None)?;
    }
    let mut install = vec!["-m", "pip", "install", "--quiet", "--disable-pip-version-check"];
    install.extend(PACKAGES);
    command(&python, &install, &[], None)?;
    Ok(python)
}

/// Runs `program args…` with `env` added (in `dir` when given), with
/// inherited output, echoed like a shell would; an error if it cannot
/// start or fails.
pub fn command(
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    dir: Option<&Path>,
) -> Result<(), String> {
    let shown_env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    println!("$ {}{} {}", shown_env.concat(), program.display(), args.join(" "));
    let mut command = Command::new(program);
    command.args(args).envs(env.iter().copied());
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let status = command.status().map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{} {}` failed ({status})", program.display(), args.join(" ")))
    }
}

/// Builds the `slothqueue` binary (debug, as `cargo test` builds it) for
/// the Python tests that run it, and returns its path: in
/// `CARGO_TARGET_DIR` when set, else `target/`.
pub fn slothqueue_binary() -> Result<PathBuf, String> {
    run::cargo(&["build", "-p", "slothqueue-cli"])?;
    let root = run::project_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), |dir| root.join(dir));
    Ok(target.join("debug").join("slothqueue"))
}
