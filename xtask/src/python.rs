//! The Python package's step of `ci`: builds the `slothqueue` binary (the
//! interop tests run it) and the package (`python/`, a debug build by
//! maturin into the workspace's `target/`, installed into the test
//! command's virtual environment), then runs its pytest suite and
//! `mypy --strict` on the package and its typed example.
//!
//! The debug build shares the workspace's target folder and lock file, so
//! on a warm `ci` it compiles little beyond the extension itself.

use std::path::Path;

use crate::{py, run};

/// Builds and installs the package, then runs its tests; an error names
/// the step that failed.
pub fn run() -> Result<(), String> {
    let root = run::project_root();
    let python = py::venv()?;
    let binary = py::slothqueue_binary()?;
    let venv = python
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("{} is not in a virtual environment", python.display()))?;
    let package = root.join("python");
    let manifest = package.join("Cargo.toml");
    let manifest = manifest.to_string_lossy();
    let venv_text = venv.to_string_lossy().into_owned();
    py::command(
        &python,
        &["-m", "maturin", "develop", "--quiet", "-m", &manifest],
        &[("VIRTUAL_ENV", venv_text.as_str())],
        Some(&package),
    )?;
    let binary = binary.to_string_lossy().into_owned();
    let tests = root.join("python").join("tests");
    let tests = tests.to_string_lossy().into_owned();
    // The PostgreSQL test gets the server `ci` started, as cargo's tests do.
    let mut env = vec![("SLOTHQUEUE_BIN".to_owned(), binary)];
    for key in ["SLOTHQUEUE_PG_URL", "SLOTHQUEUE_PG_REQUIRED"] {
        if let Some(value) = run::cargo_env_value(key) {
            env.push((key.to_owned(), value));
        }
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    py::command(
        &python,
        &["-m", "pytest", "-q", "-p", "no:cacheprovider", &tests],
        &env,
        Some(&package),
    )?;
    // The package's own code and the typed example, as a caller sees them.
    py::command(
        &python,
        &[
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "python/slothqueue",
            "examples/typed_example.py",
        ],
        &[],
        Some(&package),
    )
}
