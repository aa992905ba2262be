//! `cargo xtask bench [--quick] [--backend sqlite|redb] [--profile release|dev]`:
//! builds the `slothqueue` binary and the bench harness in one profile
//! (release unless told), then runs the harness with the binary's path.
//! Results land in `<target>/bench/` (`results.json`, `results.md`); a
//! complete full run also rewrites the generated table in `BENCHMARKS.md`.

use std::path::PathBuf;
use std::process::Command;

use crate::run;

const USAGE: &str = "usage: cargo xtask bench [--quick] [--backend sqlite|redb] [--profile release|dev] [--only STEP,...]";

pub fn run(args: &[String]) -> Result<(), String> {
    let mut forward: Vec<String> = Vec::new();
    let mut profile = "release".to_owned();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => forward.push(a.clone()),
            "--backend" => {
                let b = it.next().ok_or(USAGE)?;
                if b != "sqlite" && b != "redb" {
                    return Err(format!("unknown backend `{b}` (expected sqlite or redb)"));
                }
                forward.extend([a.clone(), b.clone()]);
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
        "slothqueue",
        "-p",
        "slothqueue-bench",
        "--bins",
    ])?;
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
    println!("$ {cmd:?}");
    let status = cmd.status().map_err(|e| format!("cannot run the bench harness: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("the bench harness failed ({status})")) }
}

/// Cargo's target folder: `CARGO_TARGET_DIR` when set, else `target/`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => run::project_root().join(dir),
        _ => run::project_root().join("target"),
    }
}
