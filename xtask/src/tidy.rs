//! House rules checked as ordinary tests of the `xtask` package: every
//! Rust file says why it exists, no test is switched off, no trailing
//! whitespace, no wall clock inside `core`, every conformance scenario is
//! in the one list that runs them, the declared `rust-version` covers the
//! syntax the code uses, every cited torture scenario is documented in
//! `docs/reliability.md`, and nothing points outside the repository.
//!
//! Plain `cargo test` does not run them: the workspace's default member is
//! `cli`. `cargo tidy` (an alias for `cargo test -p xtask`, in
//! `.cargo/config.toml`) runs these alone; `cargo test --workspace` and
//! `cargo xtask ci` run them with everything else.

use std::fs;
use std::path::{Path, PathBuf};

use crate::run::project_root;

fn rust_files() -> Vec<PathBuf> {
    let out = files_under(&project_root(), &["fuzz"], |name| name.ends_with(".rs"));
    assert!(out.len() > 10, "tidy found too few files under {}", project_root().display());
    out
}

/// The files under `root` whose name `keep` accepts, skipping build output,
/// dot-directories, and the directories named in `skip`.
fn files_under(root: &Path, skip: &[&str], keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let root = root.to_path_buf();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "target" | "node_modules")
                    && !skip.contains(&name.as_str())
                    && !name.starts_with('.')
                {
                    stack.push(path);
                }
            } else if keep(&name) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Every file of the repository that tidy reads as text, the fuzz
/// workspace included (not its corpus and crash inputs, which are data).
fn repo_files() -> Vec<PathBuf> {
    let root = project_root();
    let mut out = files_under(&root, &["fuzz"], |_| true);
    let fuzz = root.join("fuzz");
    out.extend(files_under(&fuzz, &["corpus", "artifacts", "coverage"], |_| true));
    out.sort();
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

/// The names listed in the `__with_scenarios!` macro, as `area::name`.
fn listed_scenarios(mod_rs: &str) -> Vec<String> {
    let Some(start) = mod_rs.find("macro_rules! __with_scenarios") else { return Vec::new() };
    let body = &mod_rs[start..];
    let Some(open) = body.find("[\n") else { return Vec::new() };
    let Some(close) = body[open..].find(']') else { return Vec::new() };
    body[open + 1..open + close]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The `pub async fn` names of one scenario file (whose doc says each is a
/// scenario), as `area::name`.
fn defined_scenarios(area: &str, text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub async fn "))
        .filter_map(|rest| rest.split(['(', '<']).next())
        .map(|name| format!("{area}::{}", name.trim()))
        .collect()
}

#[test]
fn every_conformance_scenario_is_listed_and_every_listed_one_exists() {
    let dir = project_root().join("conformance/src/scenarios");
    let mod_rs = fs::read_to_string(dir.join("mod.rs")).unwrap_or_default();
    let listed = listed_scenarios(&mod_rs);
    assert!(listed.len() > 10, "found too few scenarios in the `__with_scenarios!` list");
    let mut defined = Vec::new();
    for p in files_under(&dir, &[], |n| n.ends_with(".rs") && n != "mod.rs") {
        let area = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        defined.extend(defined_scenarios(&area, &fs::read_to_string(&p).unwrap_or_default()));
    }
    let unlisted: Vec<&String> = defined.iter().filter(|d| !listed.contains(d)).collect();
    let missing: Vec<&String> = listed.iter().filter(|l| !defined.contains(l)).collect();
    assert!(
        unlisted.is_empty() && missing.is_empty(),
        "conformance/src/scenarios/mod.rs: `__with_scenarios!` must list every scenario: \
         never run (not listed): {unlisted:?}; listed but not defined: {missing:?}"
    );
}

/// The workspace's `rust-version` as (major, minor).
fn workspace_rust_version() -> Option<(u32, u32)> {
    let manifest = fs::read_to_string(project_root().join("Cargo.toml")).ok()?;
    let line = manifest.lines().find(|l| l.trim_start().starts_with("rust-version"))?;
    let version = line.split('"').nth(1)?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
}

/// Whether a line of Rust uses a let-chain (stable since 1.88): `&& let`,
/// or an `if let`/`while let` whose condition goes on with `&&` outside any
/// parentheses. Textual, so it can be fooled, but not by ordinary code.
fn uses_let_chain(line: &str) -> bool {
    let code = without_strings(line);
    let code = code.split("//").next().unwrap_or("");
    if code.contains("&& let ") || code.trim_end().ends_with("&& let") {
        return true;
    }
    let trimmed = code.trim_start().trim_start_matches("} else ");
    let Some(rest) = trimmed.strip_prefix("if let ").or_else(|| trimmed.strip_prefix("while let "))
    else {
        return false;
    };
    let Some((_, scrutinee)) = rest.split_once(" = ") else { return false };
    let mut depth = 0i32;
    let bytes = scrutinee.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'&' if depth == 0 && bytes.get(i + 1) == Some(&b'&') => return true,
            _ => {}
        }
    }
    false
}

/// `line` with the insides of its string literals blanked out (escapes
/// honoured), so that code quoting a pattern does not match it.
fn without_strings(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let (mut inside, mut escaped) = (false, false);
    for c in line.chars() {
        if inside {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    inside = false;
                    out.push(c);
                }
                _ => {}
            }
        } else {
            inside = c == '"';
            out.push(c);
        }
    }
    out
}

#[test]
fn rust_version_covers_let_chains() {
    let Some(version) = workspace_rust_version() else {
        panic!("the workspace Cargo.toml declares no readable rust-version");
    };
    if version >= (1, 88) {
        return;
    }
    let mut uses = Vec::new();
    for p in rust_files() {
        let Ok(text) = fs::read_to_string(&p) else { continue };
        for (i, line) in text.lines().enumerate() {
            if uses_let_chain(line) {
                uses.push(format!("{}:{}", rel(&p), i + 1));
            }
        }
    }
    assert!(
        uses.is_empty(),
        "let-chains need Rust 1.88 but the workspace says rust-version = {}.{}: {}",
        version.0,
        version.1,
        uses.join(", ")
    );
}

#[test]
fn let_chain_detection() {
    assert!(uses_let_chain("        if let Some(a) = b && c {"));
    assert!(uses_let_chain(
        "            && let Some((name, verdict)) = rest.split_once(\" ... \")"
    ));
    assert!(uses_let_chain("    } else if let Ok(x) = y() && x > 1 {"));
    assert!(!uses_let_chain("        if let Some(a) = f(b && c) {"));
    assert!(!uses_let_chain("        if a && b {"));
    assert!(!uses_let_chain("        if let Some(a) = b { // then && let"));
    assert!(!uses_let_chain("        if code.contains(\"&& let \") {"));
}

/// Scenario codes cited in `text`: `S` and two digits, standing alone.
fn scenario_codes(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let word = |i: usize| b.get(i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_');
    (0..b.len())
        .filter(|&i| {
            b[i] == b'S'
                && b.get(i + 1).is_some_and(u8::is_ascii_digit)
                && b.get(i + 2).is_some_and(u8::is_ascii_digit)
                && !word(i + 3)
                && (i == 0 || !word(i - 1))
        })
        .map(|i| text[i..i + 3].to_owned())
        .collect()
}

#[test]
fn every_cited_scenario_code_has_a_heading_in_docs_reliability() {
    let doc = fs::read_to_string(project_root().join("docs/reliability.md")).unwrap_or_default();
    let headings: Vec<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .flat_map(|h| scenario_codes(h).into_iter().take(1))
        .collect();
    assert!(!headings.is_empty(), "docs/reliability.md has no `### Sxx name` heading");
    let mut missing = Vec::new();
    let cited = |n: &str| n.ends_with(".rs") || n.ends_with(".md") || n.ends_with(".toml");
    for p in repo_files().into_iter().filter(|p| cited(&p.to_string_lossy())) {
        let Ok(text) = fs::read_to_string(&p) else { continue };
        for (i, line) in text.lines().enumerate() {
            for code in scenario_codes(line) {
                if !headings.contains(&code) {
                    missing.push(format!("{}:{}: {code}", rel(&p), i + 1));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "scenario codes without a `### Sxx` heading in docs/reliability.md:\n{}",
        missing.join("\n")
    );
}

#[test]
fn nothing_points_outside_the_repository() {
    // Spelled in two pieces so that this file does not match itself.
    let needle = ["../", "shared/"].concat();
    let hits: Vec<String> = repo_files()
        .into_iter()
        .filter(|p| fs::read_to_string(p).is_ok_and(|t| t.contains(&needle)))
        .map(|p| rel(&p))
        .collect();
    assert!(
        hits.is_empty(),
        "files pointing at {needle} (outside the repository; say it here instead): {hits:?}"
    );
}
