//! House rules checked as ordinary tests of the `xtask` package: every
//! Rust file says why it exists, no test is switched off, no trailing
//! whitespace, no wall clock inside `core`, every conformance scenario is
//! in the one list that runs them, the declared `rust-version` covers the
//! syntax the code uses, every cited torture scenario is documented in
//! `docs/reliability.md`, nothing points outside the repository, every
//! example is one `cargo xtask ci` runs, the library builds without clap
//! and re-exports every backend, and one `Backend` enum is declared.
//!
//! Plain `cargo test` does not run them: the workspace's default members
//! are `cli` and `slothqueue`. `cargo tidy` (an alias for `cargo test -p
//! xtask`, in `.cargo/config.toml`) runs these alone; `cargo test
//! --workspace` and `cargo xtask ci` run them with everything else.

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
    let dir = project_root().join("tests/src/scenarios");
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
        "tests/src/scenarios/mod.rs: `__with_scenarios!` must list every scenario: \
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

/// The module path of a source file under a crate's `src/`: `lib.rs` and
/// `main.rs` are the root, `a/mod.rs` is `a`, `a/b.rs` is `a::b`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> =
        rel.iter().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The `crate::…` and `super::…` paths a file's non-test code names, as
/// module paths (a `{a, b}` group gives one path per item).
fn named_paths(text: &str, me: &[String], is_dir_module: bool) -> Vec<Vec<String>> {
    let code: String = text
        .lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> usize {
        s.char_indices()
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '_'))
            .map_or(s.len(), |(i, _)| i)
    };
    let mut out = Vec::new();
    for (start, base) in [
        ("crate::", Vec::new()),
        ("super::", {
            // `super` of a file module is its parent; of a `mod.rs`, the
            // directory's parent.
            let mut p = me.to_vec();
            let _ = is_dir_module;
            p.pop();
            p
        }),
    ] {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(start) {
            let before = rest[..at].chars().last();
            rest = &rest[at + start.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // `$crate::`, `foo_crate::`
            }
            let mut path = base.clone();
            let mut s = rest;
            loop {
                let n = ident(s);
                if n == 0 {
                    break;
                }
                path.push(s[..n].to_owned());
                s = &s[n..];
                if let Some(t) = s.strip_prefix("::") {
                    s = t;
                } else {
                    break;
                }
            }
            if let Some(group) = s.strip_prefix('{') {
                let inner = &group[..group.find('}').unwrap_or(group.len())];
                for item in inner.split(',') {
                    let item = item.trim();
                    let n = ident(item);
                    if n > 0 {
                        let mut p = path.clone();
                        p.push(item[..n].to_owned());
                        out.push(p);
                    }
                }
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// Files of one crate that import each other in a loop, a parent module
/// and its children aside (a `mod.rs` and the files it declares belong
/// together, as in ripgrep's `searcher/`): each such loop points at an
/// item living in the wrong file.
#[test]
fn no_import_cycle_between_the_files_of_a_crate() {
    use std::collections::{BTreeMap, BTreeSet};
    let root = project_root();
    let mut cycles = Vec::new();
    let crates = files_under(&root, &["fuzz"], |n| n == "Cargo.toml");
    for manifest in crates {
        let src = manifest.with_file_name("src");
        if !src.is_dir() {
            continue;
        }
        let files = files_under(&src, &[], |n| n.ends_with(".rs"));
        let modules: BTreeMap<Vec<String>, String> =
            files.iter().map(|f| (module_path(&src, f), rel(f))).collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in &files {
            let me = module_path(&src, file);
            let Ok(text) = fs::read_to_string(file) else { continue };
            let dir_module = file.file_name().is_some_and(|n| n == "mod.rs");
            for mut path in named_paths(&text, &me, dir_module) {
                // The longest prefix that is a file's module.
                while !path.is_empty() && !modules.contains_key(&path) {
                    path.pop();
                }
                if path.is_empty() || path.starts_with(&me) || me.starts_with(&path) {
                    continue; // the crate root, itself, a parent or a child
                }
                edges.entry(rel(file)).or_default().insert(modules[&path].clone());
            }
        }
        // A loop: a file that reaches itself.
        for start in edges.keys() {
            let mut seen = BTreeSet::new();
            let mut stack: Vec<Vec<String>> = vec![vec![start.clone()]];
            while let Some(trail) = stack.pop() {
                let last = trail.last().cloned().unwrap_or_default();
                for next in edges.get(&last).into_iter().flatten() {
                    if next == start {
                        let mut ring = trail.clone();
                        ring.push(start.clone());
                        let key: BTreeSet<String> = ring.iter().cloned().collect();
                        if !cycles.iter().any(|(k, _): &(BTreeSet<String>, Vec<String>)| *k == key)
                        {
                            cycles.push((key, ring));
                        }
                    } else if seen.insert(next.clone()) {
                        let mut t = trail.clone();
                        t.push(next.clone());
                        stack.push(t);
                    }
                }
            }
        }
    }
    let rings: Vec<String> = cycles.into_iter().map(|(_, r)| r.join(" -> ")).collect();
    assert!(rings.is_empty(), "files that import each other in a loop: {rings:#?}");
}

/// CI runs the embedding examples through `cargo test --workspace`: each
/// file of the library's `slothqueue/examples/` must be declared in
/// `slothqueue/Cargo.toml` with `test = true` and `harness = false` (its
/// `main` is the test), and every declared example must exist.
#[test]
fn every_example_is_run_by_cargo_test() {
    let mut found: Vec<String> =
        files_under(&project_root().join("slothqueue/examples"), &[], |name| name.ends_with(".rs"))
            .iter()
            .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .collect();
    found.sort();
    let manifest = std::fs::read_to_string(project_root().join("slothqueue/Cargo.toml"))
        .unwrap_or_else(|e| panic!("cannot read slothqueue/Cargo.toml: {e}"));
    let mut declared = Vec::new();
    for block in manifest.split("[[example]]").skip(1) {
        let block = block.split("\n[").next().unwrap_or(block);
        let name = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = "))
            .map(|n| n.trim_matches('"').to_owned())
            .unwrap_or_else(|| panic!("an [[example]] without a name in slothqueue/Cargo.toml"));
        let has = |line: &str| block.lines().any(|l| l.trim() == line);
        assert!(
            has("test = true") && has("harness = false"),
            "slothqueue/Cargo.toml: example `{name}` needs `test = true` and `harness = false`, \
             or `cargo test` (and so CI) never runs it"
        );
        declared.push(name);
    }
    declared.sort();
    assert!(!found.is_empty(), "slothqueue/examples/ holds no example");
    assert_eq!(
        found, declared,
        "slothqueue/examples/ and slothqueue/Cargo.toml's [[example]] entries differ"
    );
}

/// The user's design card names the workspace's top level: `Cargo.toml`,
/// `core`, `store-sqlite`, `store-redb`, `runner`, `cli`, `xtask` and
/// `tests` (the shared conformance suite). More crates beside them are
/// fine; none of these may be renamed away.
#[test]
fn the_top_level_keeps_the_design_cards_names() {
    let root = project_root();
    let card = ["core", "store-sqlite", "store-redb", "runner", "cli", "xtask", "tests"];
    assert!(root.join("Cargo.toml").is_file(), "the top-level Cargo.toml is missing");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("cannot read Cargo.toml: {e}"));
    for name in card {
        assert!(
            root.join(name).join("Cargo.toml").is_file(),
            "the design card names a top-level `{name}/` crate, and it is missing"
        );
        assert!(
            manifest.contains(&format!("\"{name}\"")),
            "the design card's `{name}/` is not a member of the workspace"
        );
    }
    let suite = std::fs::read_to_string(root.join("tests/Cargo.toml"))
        .unwrap_or_else(|e| panic!("cannot read tests/Cargo.toml: {e}"));
    assert!(
        suite.contains("name = \"slothqueue-conformance\""),
        "the top-level tests/ holds the shared conformance suite"
    );
}

/// An embedder's dependency builds no command line: `cargo tree -p
/// slothqueue -e normal` lists no clap (nor the binary's package). The
/// same rule is one of `cargo xtask ci`'s layering rules.
#[test]
fn the_library_builds_without_clap() {
    let (package, banned) = crate::LIBRARY_LAYER;
    assert!(banned.contains(&"clap"), "the library's layering rule must ban clap");
    if let Err(e) = crate::depends_on_none(package, banned) {
        panic!("{e}");
    }
}

/// The one `Backend` enum: the library's (`slothqueue::Backend`), which
/// the binary, the bench, the harnesses and the tests name a backend with.
const BACKEND_ENUM: &str = "slothqueue/src/open.rs";

/// Copies of the `Backend` enum that must stay, each with the reason;
/// empty when there are none. A listed file that no longer has one fails
/// too, so the list stays true.
const BACKEND_ENUM_EXCEPTIONS: &[(&str, &str)] = &[];

/// Whether `line` declares an enum called `Backend`, generic or not, by
/// any visibility; comments and strings do not count. (This file spells
/// such a declaration only in pieces, so that a plain grep for one finds
/// the library's alone.)
fn declares_backend_enum(line: &str) -> bool {
    let line = without_strings(line);
    if line.trim_start().starts_with("//") {
        return false;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    words.windows(2).any(|w| {
        w[0] == "enum"
            && w[1].strip_prefix("Backend").is_some_and(|rest| {
                rest.is_empty() || rest.starts_with('{') || rest.starts_with('<')
            })
    })
}

#[test]
fn backend_enum_detection() {
    let declared =
        |before: &str, after: &str| declares_backend_enum(&format!("{before} Backend{after}"));
    assert!(declared("pub enum", " {"));
    assert!(declared("    enum", "{"));
    assert!(declared("pub(crate) enum", "<T> {"));
    assert!(!declared("/// one enum", " in the tree"));
    assert!(!declared("pub enum", "Kind {"));
    assert!(!declared("pub use", " as Engine;"));
    assert!(!declared("let s = \"enum", " {\";"));
}

/// Issue 30: one `Backend` type in the tree, the fuzz workspace included,
/// so that adding a backend is one variant, not seven.
#[test]
fn at_most_one_backend_enum() {
    let root = project_root();
    let mut files = rust_files();
    files.extend(files_under(&root.join("fuzz"), &["corpus", "artifacts", "coverage"], |name| {
        name.ends_with(".rs")
    }));
    let mut found = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap_or_default();
        if text.lines().any(declares_backend_enum) {
            found.push(rel(file));
        }
    }
    found.sort();
    let mut allowed: Vec<String> = std::iter::once(BACKEND_ENUM)
        .chain(BACKEND_ENUM_EXCEPTIONS.iter().map(|(path, _)| *path))
        .map(str::to_owned)
        .collect();
    allowed.sort();
    assert_eq!(
        found, allowed,
        "a `Backend` enum is declared in these files; use `slothqueue::Backend`, or list a \
         copy that must stay in BACKEND_ENUM_EXCEPTIONS with its reason"
    );
}

/// The library re-exports every store of the workspace behind the feature
/// of the same name (`store-postgres` as `slothqueue::postgres` under
/// `postgres`), so that an embedder reaches each backend's own options.
#[test]
fn the_library_reexports_every_backend() {
    let root = project_root();
    let lib = fs::read_to_string(root.join("slothqueue/src/lib.rs"))
        .unwrap_or_else(|e| panic!("cannot read slothqueue/src/lib.rs: {e}"));
    let manifest = fs::read_to_string(root.join("slothqueue/Cargo.toml"))
        .unwrap_or_else(|e| panic!("cannot read slothqueue/Cargo.toml: {e}"));
    let mut stores: Vec<String> = fs::read_dir(&root)
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("store-").map(str::to_owned))
                .filter(|name| root.join(format!("store-{name}/Cargo.toml")).is_file())
                .collect()
        })
        .unwrap_or_default();
    stores.sort();
    assert!(stores.len() >= 3, "tidy found too few store crates: {stores:?}");
    for name in &stores {
        let krate = format!("slothqueue_store_{}", name.replace('-', "_"));
        let reexport = format!("#[cfg(feature = \"{name}\")]\npub use {krate} as {name};");
        assert!(
            lib.contains(&reexport),
            "slothqueue/src/lib.rs must re-export store-{name} behind its feature:\n{reexport}"
        );
        assert!(
            manifest.contains(&format!("\n{name} = [\"dep:slothqueue-store-{name}\"")),
            "slothqueue/Cargo.toml must have a `{name}` feature that turns store-{name} on"
        );
    }
}

/// The crates (and folders) whose stores run `slothqueue_core::ops`: none
/// of them may reach for the dependency, push and claim rules themselves:
/// every store, and the conformance suite's reference store.
const PORTED: &[&str] = &["store-sqlite", "store-redb", "store-postgres", "tests"];

/// Whether `text` names `ident` as a whole identifier (not a longer one
/// that starts or ends with it).
fn names_ident(text: &str, ident: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(ident).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + ident.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

#[test]
fn names_ident_sees_whole_identifiers_only() {
    assert!(names_ident("machine::plan_push(new, h)", "plan_push"));
    assert!(names_ident("use x::{plan_push, y};", "plan_push"));
    assert!(!names_ident("let plan_push_many = 1;", "plan_push"));
    assert!(!names_ident("fn replan_push() {}", "plan_push"));
}

/// **Every rule written once**: the push path, the dependency rule and the
/// claim's choice are run by `core::ops`; a store that calls
/// `machine::plan_push`, `plan_with_dependents`, `resolve_parents` or the
/// claim rule itself writes the choreography a second
/// time. Checked in the ported folders ([`PORTED`]); comments may name
/// the rules.
#[test]
fn no_store_runs_the_push_or_dependency_rules_itself() {
    let rules = ["plan_push", "plan_with_dependents", "resolve_parents", "plan_claim_in_order"];
    let root = project_root();
    let mut found = Vec::new();
    for dir in PORTED {
        let files = files_under(&root.join(dir), &[], |n| n.ends_with(".rs"));
        assert!(!files.is_empty(), "{dir}/ has no Rust file: is PORTED out of date?");
        for file in files {
            let Ok(text) = fs::read_to_string(&file) else { continue };
            for (n, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                for rule in rules.iter().filter(|r| names_ident(line, r)) {
                    found.push(format!("{}:{}: {rule}", rel(&file), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "these call core's rules themselves; run the operation in `slothqueue_core::ops` \
         instead:\n{}",
        found.join("\n")
    );
}

/// Most non-test lines a source file may have: a file that grows past it
/// usually holds two roles, and splitting it by role keeps each room
/// readable. One that is one thing says so in its module doc, in a line
/// starting `//! One thing:` with the reason.
const MAX_FILE_LINES: usize = 800;

/// The lines of `text` before its unit tests (a column-0 `#[cfg(test)]`).
fn non_test_lines(text: &str) -> usize {
    text.lines().take_while(|l| !l.starts_with("#[cfg(test)]")).count()
}

/// Rooms of one role: no product source file over [`MAX_FILE_LINES`]
/// non-test lines unless its top says why it is one thing. Test code
/// (the conformance suite in `tests/`, each crate's `tests/`, `tests.rs`
/// files) and the fuzz workspace are not counted.
#[test]
fn no_source_file_over_the_size_rule_unless_it_says_why() {
    let root = project_root();
    let mut over = Vec::new();
    for path in rust_files() {
        let rel = path.strip_prefix(&root).unwrap_or(&path).to_string_lossy().into_owned();
        let in_tests = rel.starts_with("tests/")
            || rel.split('/').any(|part| part == "tests")
            || rel.ends_with("/tests.rs");
        if in_tests || !rel.contains("/src/") {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"));
        let lines = non_test_lines(&text);
        let says_why = text
            .lines()
            .take_while(|l| l.starts_with("//!") || l.trim().is_empty())
            .any(|l| l.starts_with("//! One thing:"));
        if lines > MAX_FILE_LINES && !says_why {
            over.push(format!("{rel}: {lines} non-test lines"));
        }
    }
    assert!(
        over.is_empty(),
        "split these by role, or say at the top (`//! One thing: …`) why each is one thing \
         (at most {MAX_FILE_LINES} non-test lines):\n{}",
        over.join("\n")
    );
}

#[test]
fn non_test_lines_stop_at_the_unit_tests() {
    assert_eq!(non_test_lines("a\nb\n#[cfg(test)]\nmod tests {}\n"), 2);
    assert_eq!(non_test_lines("a\n    #[cfg(test)]\nb\n"), 3);
}
