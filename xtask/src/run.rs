//! Running cargo from xtask, echoing each command like a shell would.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The workspace root: xtask lives one level below it.
pub fn project_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(PathBuf::from).unwrap_or(here)
}

/// Environment every later cargo command gets (`ci` names its throwaway
/// PostgreSQL cluster here), set once.
static EXTRA_ENV: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// Gives every cargo command run from now on these variables; a second
/// call is refused.
pub fn set_cargo_env(env: Vec<(String, String)>) -> Result<(), String> {
    EXTRA_ENV.set(env).map_err(|_| "the cargo environment was set already".to_owned())
}

/// Whether cargo commands get `key`, from our own environment or from
/// [`set_cargo_env`].
pub fn cargo_env_has(key: &str) -> bool {
    std::env::var_os(key).is_some()
        || EXTRA_ENV.get().is_some_and(|env| env.iter().any(|(k, _)| k == key))
}

fn cargo_command() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
    if let Some(env) = EXTRA_ENV.get() {
        command.envs(env.iter().map(|(k, v)| (k, v)));
    }
    command
}

/// Runs `cargo <args>` with inherited output; an error if it fails.
pub fn cargo(args: &[&str]) -> Result<(), String> {
    cargo_env(args, &[])
}

/// As [`cargo`], with extra environment variables.
pub fn cargo_env(args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    println!("$ cargo {}", args.join(" "));
    let status = cargo_command()
        .args(args)
        .envs(env.iter().copied())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

/// Runs `cargo <args>` and returns its stdout; stderr passes through.
pub fn cargo_output(args: &[&str]) -> Result<String, String> {
    let out = cargo_command()
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("`cargo {}` failed ({})", args.join(" "), out.status));
    }
    String::from_utf8(out.stdout)
        .map_err(|_| format!("`cargo {}` printed non-UTF-8", args.join(" ")))
}

/// Runs `cargo <args>`, teeing stdout to ours, and returns (success, stdout).
pub fn cargo_capture(args: &[&str]) -> Result<(bool, String), String> {
    println!("$ cargo {}", args.join(" "));
    let out = cargo_command()
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{text}");
    Ok((out.status.success(), text))
}

/// The value of `key` that cargo commands get: from [`set_cargo_env`]
/// first, else our own environment (empty counts as unset). For the
/// programs xtask starts itself, such as the bench harness.
pub fn cargo_env_value(key: &str) -> Option<String> {
    EXTRA_ENV
        .get()
        .and_then(|env| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
        .or_else(|| std::env::var(key).ok())
        .filter(|v| !v.trim().is_empty())
}
