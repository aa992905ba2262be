//! The man pages: one per command (`slothqueue.1`, `slothqueue-add.1`, …)
//! made by clap_mangen from the same clap definitions as `--help`, so a
//! page never says other than the command. `cargo xtask man` runs the
//! hidden `slothqueue __man DIR` to write them where `MANPATH` can find
//! them.

use std::path::Path;

use anyhow::Context as _;
use clap::CommandFactory as _;

use super::Outcome;
use super::args::Cli;
use super::exit::Code;

/// Writes every page into `dir` (made if missing) and names them on
/// stdout, one a line.
pub fn write(dir: &Path) -> Outcome {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = vec![cmd.clone()];
    pages.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    let mut out = std::io::stdout().lock();
    for page in pages {
        // A subcommand has no version of its own: name the program's.
        let man =
            clap_mangen::Man::new(page).source(format!("slothqueue {}", env!("CARGO_PKG_VERSION")));
        let path = man
            .generate_to(dir)
            .with_context(|| format!("cannot write a man page into {}", dir.display()))?;
        std::io::Write::write_all(&mut out, format!("{}\n", path.display()).as_bytes())?;
    }
    Ok(Code::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_command_has_a_page_naming_its_options() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path()).unwrap();
        let add = std::fs::read_to_string(dir.path().join("slothqueue-add.1")).unwrap();
        for option in ["priority", "max\\-runtime", "after"] {
            assert!(add.contains(&format!("\\-\\-{option}")), "--{option} not in:\n{add}");
        }
        let main = std::fs::read_to_string(dir.path().join("slothqueue.1")).unwrap();
        assert!(
            main.contains("slothqueue\\-add(1)") || main.contains("slothqueue\\-add"),
            "{main}"
        );
        assert!(!dir.path().join("slothqueue-__man.1").exists(), "the hidden command has no page");
        assert!(!dir.path().join("slothqueue-help.1").exists(), "help is no command of its own");
    }
}
