//! CI's step for `slothqueue mcp`: the server driven by a real client,
//! the official MCP Python SDK (`mcp` from PyPI, in the virtual
//! environment `py::venv` makes), over stdio against the debug binary.
//! The tests are `mcp/tests/python/`; they find the binary in
//! `$SLOTHQUEUE_BIN`, and skip without it (a plain `pytest` run).

use std::path::PathBuf;
use std::process::Command;

use crate::{py, run};

/// Builds the binary, then runs the MCP tests with pytest.
pub fn run() -> Result<(), String> {
    let python = py::venv()?;
    run::cargo(&["build", "-p", "slothqueue-cli"])?;
    let root = run::project_root();
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let binary = target.join("debug").join("slothqueue");
    let tests = root.join("mcp").join("tests").join("python");
    println!(
        "$ SLOTHQUEUE_BIN={} {} -m pytest -q {}",
        binary.display(),
        python.display(),
        tests.display()
    );
    let status = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(&tests)
        .env("SLOTHQUEUE_BIN", &binary)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .status()
        .map_err(|e| format!("cannot run pytest: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("the MCP client tests failed ({status})")) }
}
