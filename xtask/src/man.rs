//! `cargo xtask man [--out DIR]`: the man pages, one per command, written
//! to `DIR/man1/` (default `target/man`), a folder a user adds to
//! `MANPATH`. The pages come from the binary's own clap definitions (its
//! hidden `slothqueue __man DIR`, clap_mangen inside the CLI), so they say
//! what `--help` says and xtask needs no dependency of its own.

use std::path::PathBuf;

use crate::run;

/// Where the pages go without `--out`.
const DEFAULT_OUT: &str = "target/man";

/// Builds the binary, asks it for its pages, and says how to read them.
pub fn run(args: &[String]) -> Result<(), String> {
    let out = match args {
        [] => PathBuf::from(DEFAULT_OUT),
        [flag, dir] if flag == "--out" => PathBuf::from(dir),
        _ => return Err(format!("usage: cargo xtask man [--out DIR] (got {args:?})")),
    };
    let out = if out.is_absolute() { out } else { run::project_root().join(out) };
    let pages = out.join("man1");
    let dir = pages.to_str().ok_or_else(|| format!("{} is not UTF-8", pages.display()))?;
    run::cargo(&["run", "--quiet", "-p", "slothqueue-cli", "--", "__man", dir])?;
    println!("man pages in {}", pages.display());
    println!("read them with: MANPATH=\"{}:$MANPATH\" man slothqueue-add", out.display());
    Ok(())
}
