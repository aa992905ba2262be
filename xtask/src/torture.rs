//! `cargo xtask torture [--quick] [--backend sqlite|redb|postgres|all] [--seed N] [--only S03,S04]`:
//! builds the `slothqueue` binary with its crash points (the `failpoints`
//! feature, inert unless `SLOTHQUEUE_FAILPOINT` is set), runs the
//! fuzz-style property tests for a bounded number of cases, the libFuzzer
//! targets of `fuzz/` for a bounded time each (see [`fuzz`]; not with
//! `--quick`), then the
//! torture scenarios against that binary (`torture/`). The scenarios'
//! summary lines come last; a fuzz failure is reported after them.
//!
//! The `postgres` backend runs on the server `SLOTHQUEUE_PG_URL` names;
//! `--backend postgres` (or `all`) without it starts a throwaway cluster
//! ([`crate::pg::Cluster`]) for the run. Without `--backend`, the scenarios
//! run on PostgreSQL too when the variable is set (as `ci` sets it): with
//! `--quick`, its kill loop, server restart and partition only (S04, S25,
//! S26).
//!
//! redb and the bundled SQLite are compiled optimised even in this debug
//! build (the workspace's `profile.dev.package` settings, which every
//! debug build shares): unoptimised redb is several times slower under
//! contention, which would spend the time budget on waiting instead of on
//! torture.

use crate::{pg, run};

pub fn run(args: &[String]) -> Result<(), String> {
    let quick = args.iter().any(|a| a == "--quick");
    let bin = build_binary()?;
    // Fuzz-style property tests, bounded by their number of cases.
    let cases = if quick { "200" } else { "5000" };
    let test = vec!["test", "-p", "slothqueue-torture", "--test", "properties"];
    let mut env = vec![("PROPTEST_CASES", cases), ("SQ_BIN", bin.as_str())];
    if quick {
        // The quick run is CI's: reproducible, like `ci`'s test step.
        env.push(("PROPTEST_RNG_SEED", crate::CI_PROPTEST_SEED));
    }
    run::cargo_env(&test, &env)?;
    // The fuzz targets are a release check: a quick run (CI's) leaves
    // them out, as building them instrumented is minutes of its budget.
    let fuzzed = if quick {
        println!("xtask: the fuzz targets are not run by --quick (run `cargo xtask torture`)");
        Ok(())
    } else {
        fuzz(args)
    };
    if let Err(e) = &fuzzed {
        eprintln!("xtask: FUZZING FAILED: {e}");
    }
    let mut torture = vec!["run", "-q", "-p", "slothqueue-torture"];
    torture.extend_from_slice(&["--", "--bin", &bin]);
    torture.extend(args.iter().map(String::as_str));
    // Kept until the scenarios are done; stopped and deleted on drop.
    let cluster = match flag(args, "--backend") {
        Some("postgres" | "all") if std::env::var_os(pg::URL_ENV).is_none() => {
            Some(pg::Cluster::start(false)?)
        }
        _ => None,
    };
    let env = cluster.as_ref().map(pg::Cluster::env).unwrap_or_default();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let tortured = run::cargo_env(&torture, &env);
    drop(cluster);
    fuzzed.and(tortured)
}

/// Builds `slothqueue` with the failpoints and returns its path, read from
/// cargo's JSON messages (so `CARGO_TARGET_DIR` is honoured). The library
/// it is built on is also called `slothqueue`; its artifact has no
/// executable, so the one with an executable is the binary.
fn build_binary() -> Result<String, String> {
    let build = vec![
        "build",
        "-p",
        "slothqueue-cli",
        "--bin",
        "slothqueue",
        "--features",
        "failpoints",
        "--message-format",
        "json-render-diagnostics",
    ];
    println!("$ cargo {}", build.join(" "));
    let out = run::cargo_output(&build)?;
    out.lines()
        .filter(|l| {
            l.contains("\"reason\":\"compiler-artifact\"") && l.contains("\"name\":\"slothqueue\"")
        })
        .find_map(|l| {
            let start = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            let rest = &l[start..];
            Some(rest[..rest.find('"')?].to_owned())
        })
        .ok_or_else(|| "cargo built no slothqueue executable".to_owned())
}

/// The libFuzzer targets of `fuzz/`, and the backend each concerns (`None`:
/// both, or neither).
const FUZZ_TARGETS: [(&str, Option<&str>); 5] = [
    ("open_sqlite", Some("sqlite")),
    ("open_redb", Some("redb")),
    ("import_jsonl", None),
    ("http_enqueue", None),
    ("duration", None),
];

/// Seconds each target runs for: a quick run is CI's, the full one a
/// release check.
const QUICK_SECS: u32 = 8;
const FULL_SECS: u32 = 60;

/// The instrumentation `cargo fuzz build` asks of rustc, spelled out so
/// that stable Rust without cargo-fuzz can build the targets (libfuzzer-sys
/// compiles libFuzzer itself with the system C++ compiler).
const FUZZ_RUSTFLAGS: &str = "-Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares \
    --cfg fuzzing -Cdebug-assertions -Coverflow-checks";

/// Builds the fuzz targets and runs each for a bounded time from its corpus
/// (`fuzz/corpus/<target>`, seeded by the target itself with valid inputs
/// when empty), as `cargo fuzz run` would. A crash, a leak of a panic, a
/// timeout or a failed build is an error naming the input libFuzzer saved
/// (`fuzz/artifacts/<target>/`) and the command that replays it.
fn fuzz(args: &[String]) -> Result<(), String> {
    let quick = args.iter().any(|a| a == "--quick");
    let backend = flag(args, "--backend");
    let seed = match flag(args, "--seed") {
        Some(s) => s.parse::<u32>().map_err(|_| format!("--seed {s}: not a number"))?,
        // CI's quick run is reproducible, like its property tests.
        None if quick => 1,
        None => fresh_seed(),
    };
    let secs = if quick { QUICK_SECS } else { FULL_SECS };
    let bins = build_fuzz_targets()?;
    let root = run::project_root().join("fuzz");
    let mut failures = Vec::new();
    for (target, concerns) in FUZZ_TARGETS {
        // `all` and `both` name every file backend: only a single named
        // one leaves the other's target out.
        let single = backend.filter(|b| !matches!(*b, "all" | "both"));
        if concerns.is_some_and(|c| single.is_some_and(|b| b != c)) {
            continue;
        }
        let bin = bins
            .iter()
            .find(|(name, _)| name == target)
            .map(|(_, path)| path.clone())
            .ok_or_else(|| format!("cargo built no fuzz target `{target}`"))?;
        let corpus = root.join("corpus").join(target);
        let artifacts = root.join("artifacts").join(target);
        for dir in [&corpus, &artifacts] {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let log_path = artifacts.join("last-run.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let err = log.try_clone().map_err(|e| format!("cannot share the log: {e}"))?;
        let fuzz_args = [
            corpus.display().to_string(),
            format!("-max_total_time={secs}"),
            format!("-seed={seed}"),
            "-timeout=30".to_owned(),
            format!("-artifact_prefix={}/", artifacts.display()),
        ];
        println!("$ {bin} {}", fuzz_args.join(" "));
        let status = std::process::Command::new(&bin)
            .args(&fuzz_args)
            .stdout(log)
            .stderr(err)
            .status()
            .map_err(|e| format!("cannot run {bin}: {e}"))?;
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let runs = text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("Done ")?.split_whitespace().next())
            .unwrap_or("?");
        if status.success() {
            println!("fuzz: {target} ok, {runs} inputs in {secs} s (seed {seed})");
            continue;
        }
        let interesting: Vec<&str> =
            text.lines().filter(|l| !l.starts_with("panic (maybe caught)")).collect();
        let caught: Vec<&str> =
            text.lines().filter(|l| l.starts_with("panic (maybe caught)")).collect();
        eprintln!("fuzz: {target} FAILED ({status}); the end of {}:", log_path.display());
        for line in caught.iter().rev().take(3).rev().chain(interesting.iter().rev().take(12).rev())
        {
            eprintln!("    {line}");
        }
        let artifact = text
            .lines()
            .find_map(|l| Some(l.split_once("Test unit written to ")?.1.trim().to_owned()));
        match artifact {
            Some(a) => {
                eprintln!("fuzz: {target}: the input is {a}; replay: {bin} {a}");
                failures.push(format!("{target} (input {a})"));
            }
            None => failures.push(format!("{target} (no input saved; seed {seed})")),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("fuzz targets failed: {}", failures.join(", ")))
    }
}

/// A seed that differs between runs, so full runs keep exploring.
#[expect(clippy::disallowed_methods, reason = "a seed from the clock, printed so it replays")]
fn fresh_seed() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(1)
}

/// The value after `name` in `args`.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str)
}

/// Builds every fuzz target, instrumented, for the host (an explicit
/// `--target` keeps the flags off build scripts and proc macros, as
/// cargo-fuzz does), and returns (name, path) of each.
fn build_fuzz_targets() -> Result<Vec<(String, String)>, String> {
    let host = host_triple()?;
    let build = [
        "build",
        "--manifest-path",
        "fuzz/Cargo.toml",
        "--release",
        "--bins",
        "--target",
        &host,
        "--message-format",
        "json-render-diagnostics",
    ];
    let flags = FUZZ_RUSTFLAGS.split_whitespace().collect::<Vec<_>>().join(" ");
    println!("$ RUSTFLAGS='{flags}' cargo {}", build.join(" "));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = std::process::Command::new(cargo)
        .args(build)
        .env("RUSTFLAGS", &flags)
        .envs(fuzz_target_dir())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("building the fuzz targets failed ({})", out.status));
    }
    let out = String::from_utf8_lossy(&out.stdout);
    let bins: Vec<(String, String)> = out
        .lines()
        .filter(|l| {
            l.contains("\"reason\":\"compiler-artifact\"") && l.contains("\"executable\":\"")
        })
        .filter_map(|l| {
            let field = |key: &str| {
                let start = l.find(key)? + key.len();
                let rest = &l[start..];
                Some(rest[..rest.find('"')?].to_owned())
            };
            Some((
                field("\"target\":{\"name\":\"").or_else(|| field("\"name\":\""))?,
                field("\"executable\":\"")?,
            ))
        })
        .collect();
    if bins.is_empty() {
        return Err("cargo built no fuzz target".to_owned());
    }
    Ok(bins)
}

/// Where the instrumented build goes: beside the usual build when
/// `CARGO_TARGET_DIR` names a shared directory (its own subdirectory, so
/// the two builds never wait on each other's lock), else `fuzz/target` as
/// with cargo-fuzz.
fn fuzz_target_dir() -> Option<(&'static str, std::path::PathBuf)> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")?;
    Some(("CARGO_TARGET_DIR", std::path::PathBuf::from(dir).join("fuzz")))
}

/// The host's target triple, from `rustc -vV`.
fn host_triple() -> Result<String, String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let out = std::process::Command::new(&rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("cannot run {rustc}: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .ok_or_else(|| format!("`{rustc} -vV` named no host"))
}
