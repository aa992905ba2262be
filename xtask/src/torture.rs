//! `cargo xtask torture [--quick] [--backend sqlite|redb] [--seed N] [--only S03,S04]`:
//! builds the `slothqueue` binary with its crash points (the `failpoints`
//! feature, inert unless `SLOTHQUEUE_FAILPOINT` is set), runs the
//! fuzz-style property tests for a bounded number of cases, then the
//! torture scenarios against that binary (`torture/`). The scenarios'
//! summary lines come last.
//!
//! redb and the bundled SQLite are compiled optimised even in this debug
//! build: unoptimised redb is several times slower under contention, which
//! would spend the time budget on waiting instead of on torture.

use crate::run;

/// Cargo settings for every build here (a separate set of artifacts from
/// the plain debug build; cargo keeps both).
const CONFIG: [&str; 4] = [
    "--config",
    "profile.dev.package.redb.opt-level=3",
    "--config",
    "profile.dev.package.libsqlite3-sys.opt-level=3",
];

pub fn run(args: &[String]) -> Result<(), String> {
    let quick = args.iter().any(|a| a == "--quick");
    let bin = build_binary()?;
    // Fuzz-style property tests, bounded by their number of cases.
    let cases = if quick { "200" } else { "5000" };
    let mut test = vec!["test", "-p", "slothqueue-torture", "--test", "fuzz"];
    test.extend_from_slice(&CONFIG);
    let mut env = vec![("PROPTEST_CASES", cases), ("SQ_BIN", bin.as_str())];
    if quick {
        // The quick run is CI's: reproducible, like `ci`'s test step.
        env.push(("PROPTEST_RNG_SEED", crate::CI_PROPTEST_SEED));
    }
    run::cargo_env(&test, &env)?;
    let mut torture = vec!["run", "-q", "-p", "slothqueue-torture"];
    torture.extend_from_slice(&CONFIG);
    torture.extend_from_slice(&["--", "--bin", &bin]);
    torture.extend(args.iter().map(String::as_str));
    run::cargo(&torture)
}

/// Builds `slothqueue` with the failpoints and returns its path, read from
/// cargo's JSON messages (so `CARGO_TARGET_DIR` is honoured).
fn build_binary() -> Result<String, String> {
    let mut build = vec![
        "build",
        "-p",
        "slothqueue",
        "--bin",
        "slothqueue",
        "--features",
        "failpoints",
        "--message-format",
        "json-render-diagnostics",
    ];
    build.extend_from_slice(&CONFIG);
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
