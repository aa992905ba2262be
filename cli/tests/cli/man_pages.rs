//! The man pages (issue 37, "The shell"): the pages `cargo xtask man`
//! writes (through the binary's hidden `__man DIR`) are read by `man`
//! itself, as a user reads them after adding the folder to `MANPATH`,
//! and `man slothqueue-add` names add's options.
//!
//! Without `man` the test says SKIPPED and passes, except under `CI`,
//! where a missing one fails it.

use std::process::Command;

use crate::support::{Backend, TestContext};

#[test]
fn man_finds_a_page_per_command_on_manpath() {
    let ctx = TestContext::new(Backend::Sqlite);
    let root = ctx.path("man");
    let pages = root.join("man1");
    let listed = ctx.ok(&["__man", pages.to_str().unwrap()]);
    for name in
        ["slothqueue", "slothqueue-add", "slothqueue-show", "slothqueue-retry", "slothqueue-every"]
    {
        let page = pages.join(format!("{name}.1"));
        assert!(page.exists(), "{} missing; written:\n{listed}", page.display());
    }
    assert!(!listed.contains("__man"), "the hidden command has a page:\n{listed}");

    if Command::new("man").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but man cannot be run: install man-db"
        );
        #[expect(clippy::print_stderr, reason = "a skipped test says so loudly")]
        let () =
            eprintln!("SKIPPED: reading the man pages with man, for want of man (install man-db)");
        return;
    }
    let out = Command::new("man")
        .arg("slothqueue-add")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("MANPATH", &root)
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("MANWIDTH", "100")
        .env("HOME", ctx.dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "man slothqueue-add: {}", String::from_utf8_lossy(&out.stderr));
    // man may hyphenate or embolden by overstriking; col -b's view of it.
    let plain: String = text.replace("\u{2010}", "-").replace("\u{2212}", "-");
    for option in ["--priority", "--max-runtime", "--after", "--queue"] {
        assert!(plain.contains(option), "man slothqueue-add lacks {option}:\n{plain}");
    }
    assert!(plain.contains("slothqueue-add"), "{plain}");
}
