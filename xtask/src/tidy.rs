//! House rules checked as an ordinary test, so `cargo test` alone enforces
//! them: every Rust file says why it exists, no test is switched off, no
//! trailing whitespace, no wall clock inside `core`.

use std::fs;
use std::path::{Path, PathBuf};

use crate::run::project_root;

fn rust_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let root = project_root();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "target" | ".git" | "fuzz" | "node_modules")
                    && !name.starts_with('.')
                {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    assert!(out.len() > 10, "tidy found too few files under {}", root.display());
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(project_root()).unwrap_or(p).display().to_string()
}

#[test]
fn every_rust_file_starts_with_a_module_doc() {
    let missing: Vec<String> = rust_files()
        .into_iter()
        .filter(|p| {
            fs::read_to_string(p).map(|s| !s.trim_start().starts_with("//!")).unwrap_or(true)
        })
        .map(|p| rel(&p))
        .collect();
    assert!(missing.is_empty(), "files without a `//!` doc saying why they exist: {missing:?}");
}

#[test]
fn no_test_is_switched_off_and_no_trailing_whitespace() {
    let mut problems = Vec::new();
    let ignore = ["#[", "ignore]"].concat();
    let should_panic = ["#[", "should_panic"].concat();
    for p in rust_files() {
        let Ok(text) = fs::read_to_string(&p) else { continue };
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with(&ignore) || line.contains(&should_panic) {
                problems.push(format!(
                    "{}:{}: switched-off or panic-expecting test",
                    rel(&p),
                    i + 1
                ));
            }
            if line.ends_with(' ') || line.ends_with('\t') {
                problems.push(format!("{}:{}: trailing whitespace", rel(&p), i + 1));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn core_reads_no_clock_outside_the_system_clock() {
    let core = project_root().join("core/src");
    for p in rust_files().into_iter().filter(|p| p.starts_with(&core)) {
        let Ok(text) = fs::read_to_string(&p) else { continue };
        let hits = text.matches("SystemTime::now").count() + text.matches("Instant::now").count();
        let allowed = usize::from(p.ends_with("time.rs"));
        assert!(hits <= allowed, "{} reads a clock; take `now` as an argument", rel(&p));
    }
}

#[test]
fn core_manifest_has_no_runtime_or_storage_dependency() {
    let manifest = fs::read_to_string(project_root().join("core/Cargo.toml")).unwrap_or_default();
    let deps =
        manifest.split("[dependencies]").nth(1).unwrap_or("").split("\n[").next().unwrap_or("");
    for banned in ["tokio", "rusqlite", "redb", "slothqueue-"] {
        assert!(!deps.contains(banned), "core must not depend on {banned}");
    }
}
