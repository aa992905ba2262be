//! `cargo xtask conformance`: run the shared Store suite on each backend
//! and print one table, so a scenario that passes on one backend and fails
//! on another is seen at a glance.

use std::collections::BTreeMap;

use crate::run;

/// The backends and the package whose `tests/conformance.rs` instantiates
/// the suite for each.
pub const BACKENDS: &[(&str, &str)] = &[
    ("sqlite", "slothqueue-store-sqlite"),
    ("redb", "slothqueue-store-redb"),
    ("postgres", "slothqueue-store-postgres"),
];

/// The integration tests of a store's package but its conformance suite:
/// `tests/<name>.rs` and `tests/<name>/main.rs`.
pub fn other_tests(package: &str) -> Result<Vec<String>, String> {
    let folder = package.strip_prefix("slothqueue-").unwrap_or(package);
    let tests = run::project_root().join(folder).join("tests");
    let entries =
        std::fs::read_dir(&tests).map_err(|e| format!("cannot list {}: {e}", tests.display()))?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            let name = if path.is_dir() {
                path.join("main.rs").is_file().then(|| entry.file_name())?
            } else {
                path.extension().filter(|e| *e == "rs").and(path.file_stem())?.to_owned()
            };
            name.into_string().ok().filter(|n| n != "conformance")
        })
        .collect();
    names.sort();
    Ok(names)
}

struct Outcome {
    passed: usize,
    failed: usize,
    seconds: f64,
    failures: Vec<String>,
}

pub fn run(args: &[String]) -> Result<(), String> {
    let only = match args {
        [] => None,
        [flag, name] if flag == "--store" => match BACKENDS.iter().find(|(b, _)| b == name) {
            Some(b) => Some(b.0),
            None => {
                return Err(format!("unknown store `{name}` (expected sqlite, redb or postgres)"));
            }
        },
        _ => return Err("usage: cargo xtask conformance [--store sqlite|redb|postgres]".to_owned()),
    };
    // The Postgres suite needs a server: the caller's (`ci`'s), else a
    // throwaway one of our own for as long as the run.
    let wants_postgres = only.is_none_or(|o| o == "postgres");
    let _cluster = if wants_postgres && !run::cargo_env_has(crate::pg::URL_ENV) {
        let cluster = crate::pg::Cluster::start(false)?;
        run::set_cargo_env(cluster.env())?;
        Some(cluster)
    } else {
        None
    };
    let mut results: BTreeMap<String, Outcome> = BTreeMap::new();
    let mut scenarios: BTreeMap<String, BTreeMap<String, bool>> = BTreeMap::new();
    for (backend, package) in BACKENDS.iter().filter(|(b, _)| only.is_none_or(|o| o == *b)) {
        let (ok, stdout) = run::cargo_capture(&["test", "-p", package, "--test", "conformance"])?;
        let outcomes = parse(&stdout, &mut scenarios, backend);
        if !ok && outcomes.values().all(|o| o.failed == 0) {
            return Err(format!("{backend}: the conformance tests did not run (build failure?)"));
        }
        results.extend(outcomes);
    }
    println!();
    println!("| backend | scenarios | passed | failed | time |");
    println!("|---|---:|---:|---:|---:|");
    for (backend, o) in &results {
        let time = if o.seconds > 0.0 { format!("{:.2}s", o.seconds) } else { "(above)".into() };
        println!("| {backend} | {} | {} | {} | {time} |", o.passed + o.failed, o.passed, o.failed,);
    }
    let mismatched: Vec<_> = scenarios
        .iter()
        .filter(|(_, by)| by.values().any(|ok| !ok))
        .map(|(name, by)| {
            let cells: Vec<String> = by
                .iter()
                .map(|(b, ok)| format!("{b}: {}", if *ok { "ok" } else { "FAILED" }))
                .collect();
            format!("  {name} ({})", cells.join(", "))
        })
        .collect();
    if !mismatched.is_empty() {
        println!("failing scenarios:");
        for line in &mismatched {
            println!("{line}");
        }
    }
    let failed: usize = results.values().map(|o| o.failed).sum();
    for (backend, o) in &results {
        for f in &o.failures {
            eprintln!("{backend}: FAILED {f}");
        }
    }
    if failed > 0 { Err(format!("{failed} conformance scenario(s) failed")) } else { Ok(()) }
}

/// Reads libtest's output: `test module::name ... ok` lines and the final
/// `test result:` line with its time.
fn parse(
    stdout: &str,
    scenarios: &mut BTreeMap<String, BTreeMap<String, bool>>,
    backend: &str,
) -> BTreeMap<String, Outcome> {
    // One row per configuration: a backend runs the suite again under a
    // variant module (SQLite's `rollback_journal::…`), named `sqlite/…`.
    let mut rows: BTreeMap<String, Outcome> = BTreeMap::new();
    let empty = || Outcome { passed: 0, failed: 0, seconds: 0.0, failures: Vec::new() };
    rows.insert(backend.to_owned(), empty());
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("test ")
            && let Some((full, verdict)) = rest.split_once(" ... ")
        {
            let (row, name) = match full.rsplit_once("::") {
                Some((variant, name)) => (format!("{backend}/{variant}"), name.to_owned()),
                None => (backend.to_owned(), full.to_owned()),
            };
            if name.starts_with("__") {
                continue; // the multi-process suite's child entry point
            }
            let ok = verdict.starts_with("ok");
            if !ok && !verdict.starts_with("FAILED") {
                continue; // ignored
            }
            let o = rows.entry(row.clone()).or_insert_with(empty);
            if ok {
                o.passed += 1;
            } else {
                o.failed += 1;
                o.failures.push(full.to_owned());
            }
            scenarios.entry(name).or_default().insert(row, ok);
        }
        if let Some(idx) = line.find("finished in ") {
            let t = &line[idx + "finished in ".len()..];
            // One binary runs every configuration: its time is the
            // backend's row's.
            if let Some(o) = rows.get_mut(backend) {
                o.seconds += t.trim_end_matches('s').trim().parse::<f64>().unwrap_or(0.0);
            }
        }
    }
    rows
}
