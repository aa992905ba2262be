//! The systemd units in `contrib/` (issue 37, "The shell"): each one
//! passes `systemd-analyze verify` as a user unit, with `%h` a home whose
//! `.cargo/bin/slothqueue` is the binary under test (as `cargo install`
//! puts it), and every command line a unit starts parses as this
//! binary's own (`--help` after it: parsed, not run).
//!
//! Without `systemd-analyze` the test says SKIPPED and passes, except
//! under `CI`, where a missing one fails it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every `.service` file in `contrib/`.
fn units() -> Vec<PathBuf> {
    let contrib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib");
    let mut units: Vec<PathBuf> = std::fs::read_dir(&contrib)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect();
    units.sort();
    units
}

#[test]
fn every_contrib_unit_verifies_and_starts_a_command_that_parses() {
    let units = units();
    let names: Vec<String> =
        units.iter().map(|u| u.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert!(names.contains(&"slothqueue-serve.service".to_owned()), "{names:?}");
    assert!(names.contains(&"slothqueue.service".to_owned()), "{names:?}");

    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let bin = home.join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_slothqueue"), bin.join("slothqueue")).unwrap();

    for unit in &units {
        let text = std::fs::read_to_string(unit).unwrap();
        for exec in text.lines().filter_map(|l| l.strip_prefix("ExecStart=")) {
            let mut words = exec.split_whitespace();
            assert_eq!(words.next(), Some("%h/.cargo/bin/slothqueue"), "{}", unit.display());
            let out = Command::new(env!("CARGO_BIN_EXE_slothqueue"))
                .args(words)
                .arg("--help")
                .env_clear()
                .env("HOME", &home)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: `{exec}` does not parse: {}",
                unit.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI is set but systemd-analyze cannot be run");
        #[expect(clippy::print_stderr, reason = "a skipped test says so loudly")]
        let () =
            eprintln!("SKIPPED: systemd-analyze verify of contrib/, for want of systemd-analyze");
        return;
    }
    let runtime = dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    for unit in &units {
        let out = Command::new("systemd-analyze")
            .args(["verify", "--user"])
            .arg(unit)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("HOME", &home)
            .env("XDG_RUNTIME_DIR", &runtime)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // An unknown key is only a warning to systemd: any line about the
        // unit fails the test too.
        let about_unit: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains(unit.file_name().unwrap().to_str().unwrap()))
            .collect();
        assert!(
            out.status.success() && about_unit.is_empty(),
            "systemd-analyze verify {}: {stderr}",
            unit.display()
        );
    }
}
