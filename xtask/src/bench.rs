//! `cargo xtask bench [--quick] [--backend sqlite|redb|postgres] [--profile release|dev]`:
//! builds the `slothqueue` binary and the bench harness in one profile
//! (release unless told), then runs the harness with the binary's path.
//! Results land in `<target>/bench/` (`results.json`, `results.md`); a
//! complete full run also rewrites the generated table in `BENCHMARKS.md`.
//!
//! The PostgreSQL column is measured on the server of `SLOTHQUEUE_PG_URL`
//! when set (CI's `ci` sets it to its cluster); else on a throwaway
//! cluster started here for the run ([`pg::Cluster::start_durable`]).
//! Without server binaries, `--backend postgres` fails, and a run of every
//! backend reports the column skipped, loudly, saying why.

use std::path::PathBuf;
use std::process::Command;

use crate::{pg, run};

const USAGE: &str = "usage: cargo xtask bench [--quick] [--backend sqlite|redb|postgres] [--profile release|dev] [--only STEP,...]";

pub fn run(args: &[String]) -> Result<(), String> {
    let mut forward: Vec<String> = Vec::new();
    let mut profile = "release".to_owned();
    let mut backend: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => forward.push(a.clone()),
            "--backend" => {
                let b = it.next().ok_or(USAGE)?;
                if !["sqlite", "redb", "postgres"].contains(&b.as_str()) {
                    return Err(format!(
                        "unknown backend `{b}` (expected sqlite, redb or postgres)"
                    ));
                }
                forward.extend([a.clone(), b.clone()]);
                backend = Some(b.clone());
            }
            // Some steps only (the bench's own list); the table is then
            // not rewritten, as for any run that is not complete.
            "--only" => forward.extend([a.clone(), it.next().ok_or(USAGE)?.clone()]),
            "--profile" => {
                profile = it.next().ok_or(USAGE)?.clone();
                if profile != "release" && profile != "dev" {
                    return Err(format!("unknown profile `{profile}` (expected release or dev)"));
                }
            }
            _ => return Err(format!("unknown argument `{a}`\n{USAGE}")),
        }
    }
    run::cargo(&[
        "build",
        "--profile",
        &profile,
        "-p",
        "slothqueue-cli",
        "-p",
        "slothqueue-bench",
        "--bins",
    ])?;
    // Started after the build (a server idling through a release build is
    // no use), stopped when the harness is done.
    let mut cluster = None;
    let mut pg_url = run::cargo_env_value(pg::URL_ENV);
    let wants_postgres = backend.as_deref().is_none_or(|b| b == "postgres");
    if wants_postgres && pg_url.is_none() {
        match pg::Cluster::start_durable(false) {
            Ok(c) => {
                pg_url = Some(c.url().to_owned());
                cluster = Some(c);
            }
            Err(e) if backend.is_some() => return Err(format!("no PostgreSQL server: {e}")),
            Err(e) => {
                eprintln!(
                    "\n*** xtask bench: no PostgreSQL server: {e}\n*** its column is skipped\n"
                );
                forward.extend(["--pg-skipped".to_owned(), e]);
            }
        }
    }
    let bin_dir = target_dir().join(if profile == "dev" { "debug" } else { "release" });
    let out = target_dir().join("bench");
    let root = run::project_root();
    let mut cmd = Command::new(bin_dir.join("slothqueue-bench"));
    cmd.arg("--slothqueue")
        .arg(bin_dir.join("slothqueue"))
        .arg("--out")
        .arg(&out)
        .arg("--benchmarks-md")
        .arg(root.join("BENCHMARKS.md"))
        .args(&forward);
    if let Some(url) = &pg_url {
        cmd.env(pg::URL_ENV, url);
    }
    println!("$ {cmd:?}");
    let status = cmd.status().map_err(|e| format!("cannot run the bench harness: {e}"))?;
    drop(cluster);
    if status.success() { Ok(()) } else { Err(format!("the bench harness failed ({status})")) }
}

/// Cargo's target folder: `CARGO_TARGET_DIR` when set, else `target/`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => run::project_root().join(dir),
        _ => run::project_root().join("target"),
    }
}
