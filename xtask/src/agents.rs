//! CI's step for `slothqueue mcp`: the server driven by a real client,
//! the official MCP Python SDK (`mcp` from PyPI, in the virtual
//! environment `py::venv` makes), over stdio against the debug binary.
//! The tests are `mcp/tests/python/`; they find the binary in
//! `$SLOTHQUEUE_BIN`, and skip without it (a plain `pytest` run).

use crate::py;

/// Builds the binary, then runs the MCP tests with pytest.
pub fn run() -> Result<(), String> {
    let python = py::venv()?;
    let binary = py::slothqueue_binary()?;
    let binary = binary.to_string_lossy();
    let tests = crate::run::project_root().join("mcp").join("tests").join("python");
    let tests = tests.to_string_lossy();
    py::command(
        &python,
        &["-m", "pytest", "-q", "-p", "no:cacheprovider", &tests],
        &[("SLOTHQUEUE_BIN", &binary), ("PYTHONDONTWRITEBYTECODE", "1")],
        None,
    )
    .map_err(|e| format!("the MCP client tests failed: {e}"))
}
