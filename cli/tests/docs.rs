//! The README cannot rot: its command blocks, and those of `docs/*.md`,
//! run here as a new user would type them, and what they print and exit
//! with must still be what the documents say.
//!
//! Each document gets a fresh shell (`docs/session.rs`): a new home folder
//! whose default queue starts empty, the binary under test first on `PATH`
//! (standing in for the one `cargo install --path cli` puts there, so that
//! line is not run). Its blocks run in order, as a reader goes down the
//! page. `docs/markdown.rs` says how a block is read and the comments that
//! set one aside (with a reason) or prepare it; `docs/matching.rs` what a
//! transcript may leave out. A block neither checked nor set aside fails
//! the test, so a new example is checked from the day it is written.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]
#![allow(
    clippy::print_stdout,
    reason = "the count of blocks checked and set aside is the test's report"
)]

#[path = "docs/markdown.rs"]
mod markdown;
#[path = "docs/matching.rs"]
mod matching;
#[path = "docs/session.rs"]
mod session;

use std::path::{Path, PathBuf};

use markdown::{Block, Kind};
use session::Session;

/// The documents whose blocks are checked: the README and every guide.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    // While editing one document: `DOCS_CHECK_ONLY=README.md cargo test --test docs`.
    if let Ok(only) = std::env::var("DOCS_CHECK_ONLY") {
        docs.retain(|d| d.file_name().is_some_and(|n| n.to_string_lossy() == only));
    }
    docs
}

#[test]
fn every_command_block_does_what_its_document_says() {
    let mut failures = Vec::new();
    let (mut checked, mut set_aside) = (0, Vec::new());
    for doc in documents() {
        let name = doc.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&doc).unwrap();
        let blocks = match markdown::blocks(&text) {
            Ok(b) => b,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let mut session = Session::new();
        for block in &blocks {
            let at = format!("{name}:{}", block.line);
            if let Some(reason) = &block.not_checked {
                set_aside.push(format!("{at} ({reason})"));
                continue;
            }
            if let Some(tool) = missing_tool(block, &TOOLS) {
                // As the other tests of real tools: a failure under CI,
                // which installs them, and a loud skip elsewhere.
                assert!(
                    std::env::var_os("CI").is_none(),
                    "{at} needs `{tool}`: CI installs it (.ci/run)"
                );
                println!("SKIPPED: {at}, for want of `{tool}` (install it to check this block)");
                set_aside.push(format!("{at} (no `{tool}` here)"));
                continue;
            }
            checked += 1;
            if let Err(e) = check(&mut session, block) {
                failures.push(format!("{at}: {e}"));
            }
        }
    }
    println!("{checked} blocks checked; set aside: {}", set_aside.join("; "));
    // The whole report, also where a terminal would cut it.
    let report = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-check.txt");
    let _ = std::fs::write(&report, failures.join("\n\n"));
    assert!(
        failures.is_empty(),
        "{} block(s) no longer do what they say:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The programs the documents' examples call besides `slothqueue` and a
/// shell's basics, which a developer's machine may lack.
const TOOLS: [&str; 5] = ["curl", "promtool", "sqlite3", "make", "jq"];

/// A program the block names (as a word) that is not on `PATH`.
fn missing_tool(block: &Block, tools: &[&'static str]) -> Option<&'static str> {
    let text: String = block.before.iter().chain(&block.body).map(|l| format!("{l}\n")).collect();
    let names = |tool: &str| {
        text.match_indices(tool).any(|(at, _)| {
            let word = |c: Option<char>| {
                c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            };
            !word(text[..at].chars().next_back()) && !word(text[at + tool.len()..].chars().next())
        })
    };
    let on_path = |tool: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .any(|d| d.join(tool).is_file())
    };
    tools.iter().copied().find(|&tool| names(tool) && !on_path(tool))
}

/// Runs one block and says how it differs from its document.
fn check(session: &mut Session, block: &Block) -> Result<(), String> {
    // The `before:` commands run first in the same shell, so a variable
    // they set (`TOKEN=…`) is there for the block.
    let run = |session: &mut Session, commands: &[String]| -> Result<Vec<session::Ran>, String> {
        let all: Vec<String> = block.before.iter().chain(commands).cloned().collect();
        let mut ran = session.run(&all)?;
        let rest = ran.split_off(block.before.len());
        for (ran, before) in ran.iter().zip(&block.before) {
            if ran.status != 0 {
                return Err(format!(
                    "`before: {before}` exited {}: {}",
                    ran.status,
                    ran.lines.join("\n")
                ));
            }
        }
        Ok(rest)
    };
    match block.kind {
        Kind::Sh => {
            let commands: Vec<String> = markdown::commands(&block.body)
                .into_iter()
                .filter(|c| !c.starts_with("cargo install"))
                .collect();
            if commands.is_empty() {
                return Err(
                    "an `sh` block with no command: mark it `not checked` or make it `text`".into(),
                );
            }
            let ran = run(session, &commands)?;
            for (command, ran) in commands.iter().zip(&ran) {
                let want = markdown::sh_status(command);
                if ran.status != want {
                    return Err(format!(
                        "`{command}` exited {} (the document expects {want}):\n{}",
                        ran.status,
                        ran.lines.join("\n")
                    ));
                }
            }
        }
        Kind::Console => {
            let steps = markdown::steps(&block.body)?;
            let commands: Vec<String> = steps.iter().map(|s| s.command.clone()).collect();
            let ran = run(session, &commands)?;
            for (step, ran) in steps.iter().zip(&ran) {
                if ran.status != step.status || !matching::matches(&step.expected, &ran.lines) {
                    return Err(format!(
                        "`$ {}`\n  the document shows (exit {}):\n{}\n  it printed (exit {}):\n{}",
                        step.command,
                        step.status,
                        indent(&step.expected),
                        ran.status,
                        indent(&ran.lines)
                    ));
                }
            }
        }
    }
    Ok(())
}

fn indent(lines: &[String]) -> String {
    lines.iter().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_block_naming_a_program_not_installed_is_known() {
    let block = |line: &str| Block {
        line: 1,
        kind: Kind::Sh,
        body: vec![line.to_owned()],
        not_checked: None,
        before: Vec::new(),
    };
    let tools = ["no-such-tool-here", "sh"];
    assert_eq!(
        missing_tool(&block("no-such-tool-here -v | sh"), &tools),
        Some("no-such-tool-here")
    );
    assert_eq!(missing_tool(&block("echo no-such-tool-here-too"), &tools), None);
    assert_eq!(missing_tool(&block("sh -c true"), &tools), None);
}
