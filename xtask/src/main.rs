//! Project automation in Rust, run as `cargo xtask <command>` (the alias is
//! in `.cargo/config.toml`), so a fresh machine needs nothing but cargo.
//!
//! The commands are `COMMANDS`: one table drives dispatch, `help` and
//! the message for an unknown command, so none of them can forget one.
//! `cargo xtask help` prints it.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "xtask is a command-line tool; printing is its job"
)]

mod agents;
mod bench;
mod conformance;
mod man;
mod pg;
mod pgbouncer;
mod py;
mod python;
mod run;
mod schemathesis;
mod torture;

use std::process::ExitCode;

/// One `cargo xtask` command: its name, its arguments and what it does
/// (both printed by `help`), and the function that runs it.
struct Command {
    name: &'static str,
    args: &'static str,
    help: &'static str,
    run: fn(&[String]) -> Result<(), String>,
}

/// Every command, in the order `help` lists them.
const COMMANDS: &[Command] = &[
    Command {
        name: "ci",
        args: "",
        help: "everything CI checks: formatting, clippy with warnings as errors, the layering \
               rules, each backend feature alone (clippy of every target, unit tests), docs, every \
               test of the workspace (the tidy rules and the embedding examples included), the \
               conformance table, a quick bench and a \
               quick torture run",
        run: |args| no_args("ci", args).and_then(|()| ci()),
    },
    Command {
        name: "conformance",
        args: "[--store sqlite|redb|postgres]",
        help: "the shared Store suite on each backend, printed side by side (Postgres on the \
               server in SLOTHQUEUE_PG_URL, else on a throwaway cluster of its own)",
        run: conformance::run,
    },
    Command {
        name: "bench",
        args: "[--quick] [--backend sqlite|redb|postgres] [--profile release|dev]",
        help: "every performance figure as a ratio against the raw storage limit measured in \
               the same run (see bench/ and BENCHMARKS.md); PostgreSQL on the server in \
               SLOTHQUEUE_PG_URL, else on a throwaway cluster of its own",
        run: bench::run,
    },
    Command {
        name: "torture",
        args: "[--quick] [--backend sqlite|redb|postgres|all] [--seed N] [--only S03,S04] [--keep]",
        help: "property tests, the fuzz targets and the torture scenarios (kill -9, contention, \
               clock jumps, full disks, hostile files, a database server restarted) against the \
               real binary (see torture/ and docs/reliability.md); postgres runs on the server \
               in SLOTHQUEUE_PG_URL, or on a throwaway one; the summary lines come last",
        run: torture::run,
    },
    Command {
        name: "pg",
        args: "[-- command…]",
        help: "starts a throwaway PostgreSQL cluster (the distribution's server binaries, a \
               temporary folder, a unix socket), runs the command with SLOTHQUEUE_PG_URL set, \
               and stops it; without a command, prints the address and waits for Enter",
        run: pg::run,
    },
    Command {
        name: "man",
        args: "[--out DIR]",
        help: "the man pages, one per command (slothqueue.1, slothqueue-add.1, …), written to \
               DIR/man1 (default target/man): add DIR to MANPATH",
        run: man::run,
    },
    Command { name: "help", args: "", help: "this list", run: |_| help() },
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = std::env::set_current_dir(run::project_root()) {
        eprintln!("xtask: cannot enter the project root: {e}");
        return ExitCode::FAILURE;
    }
    let result = match args.first().map(String::as_str) {
        None | Some("--help" | "-h") => help(),
        Some(name) => match COMMANDS.iter().find(|c| c.name == name) {
            Some(command) => (command.run)(&args[1..]),
            None => Err(format!("unknown command `{name}` (expected {})", names())),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `help`: one line of usage and one of purpose per command.
fn help() -> Result<(), String> {
    println!("usage: cargo xtask <command>\n\ncommands:");
    for c in COMMANDS {
        println!("  {}", format!("{} {}", c.name, c.args).trim_end());
        let mut line = String::new();
        for word in c.help.split_whitespace() {
            if !line.is_empty() && line.len() + 1 + word.len() > 72 {
                println!("      {line}");
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        println!("      {line}");
    }
    Ok(())
}

/// The command names, for the unknown-command message: `a, b or c`.
fn names() -> String {
    let names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// For commands that take no arguments.
fn no_args(name: &str, args: &[String]) -> Result<(), String> {
    match args.first() {
        None => Ok(()),
        Some(a) => Err(format!("`{name}` takes no arguments (got `{a}`)")),
    }
}

/// The proptest seed CI uses (see `ci`).
pub const CI_PROPTEST_SEED: &str = "1";

/// The whole gate, cheapest checks first so a typo fails in seconds.
fn ci() -> Result<(), String> {
    run::cargo(&["fmt", "--all", "--check"])?;
    layering()?;
    // The Postgres store's tests, conformance and torture run against a
    // real server of their own, installed from the distribution's
    // packages when missing; it is stopped when `ci` returns.
    let cluster = pg::Cluster::start(true)?;
    run::set_cargo_env(cluster.env())?;
    run::cargo(&["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])?;
    // Each backend alone, in the library and in the binary (`--features`
    // names the feature of both packages), and the library with none, as
    // the bench, the harnesses and the tests take it for `Backend`. The
    // binary's own tests run its commands on queue files: with postgres
    // alone their file-backend helpers are dead code, so that build lints
    // the binary without them. No test run of its own: clippy built every
    // target with this backend alone, and every test runs with all of
    // them below.
    let both = ["-p", "slothqueue", "-p", "slothqueue-cli", "--all-targets"];
    let alone: [(&[&str], &[&str]); 5] = [
        (&["--features", "sqlite"], &both),
        (&["--features", "redb"], &both),
        (&["--features", "postgres"], &["-p", "slothqueue", "--all-targets"]),
        (&["--features", "postgres"], &["-p", "slothqueue-cli", "--bins"]),
        (&[], &["-p", "slothqueue", "--all-targets"]),
    ];
    for (features, targets) in alone {
        let mut clippy = vec!["clippy", "--no-default-features"];
        clippy.extend(features);
        clippy.extend(targets);
        clippy.extend(["--", "-D", "warnings"]);
        run::cargo(&clippy)?;
    }
    run::cargo_env(&["doc", "--workspace", "--no-deps"], &[("RUSTDOCFLAGS", "-D warnings")])?;
    // CI explores one fixed proptest seed so that a red run is reproducible
    // on any machine; `cargo test` on a developer's machine and the full
    // `cargo xtask torture` keep drawing new seeds.
    // Every test once: the stores' conformance suites run in the table
    // below, so the workspace run leaves the stores out and their other
    // tests run here.
    let mut test = vec!["test", "--workspace"];
    for (_, package) in conformance::BACKENDS {
        test.extend(["--exclude", package]);
    }
    run::cargo_env(&test, &[("PROPTEST_RNG_SEED", CI_PROPTEST_SEED)])?;
    for (_, package) in conformance::BACKENDS {
        let others = conformance::other_tests(package)?;
        let mut test = vec!["test", "-p", package, "--lib"];
        for name in &others {
            test.extend(["--test", name.as_str()]);
        }
        run::cargo(&test)?;
    }
    agents::run()?;
    python::run()?;
    schemathesis::run()?;
    conformance::run(&[])?;
    // Keeps the bench harness alive; asserts nothing about speed. The dev
    // profile reuses the test build instead of a release one.
    bench::run(&["--quick".to_owned(), "--profile".to_owned(), "dev".to_owned()])?;
    // Nothing lost, nothing run twice at once (a few minutes).
    torture::run(&["--quick".to_owned()])?;
    println!("xtask ci: all green");
    Ok(())
}

/// The library an embedder depends on builds no command line: the CLI's
/// parser stays in the binary's package (a tidy test checks this one alone).
pub const LIBRARY_LAYER: (&str, &[&str]) =
    ("slothqueue", &["clap", "clap_complete", "slothqueue-cli"]);

/// The dependency rules of ARCHITECTURE.md, enforced rather than reviewed:
/// `core` pulls in no storage engine and no async runtime, no store
/// depends on another store or on the runner, the read model reads
/// through the `Store` trait alone (no engine, no runner, no runtime), and
/// the library and the faces over it (MCP, Python, top) build without the
/// binary's command-line parser.
fn layering() -> Result<(), String> {
    let forbidden: &[(&str, &[&str])] = &[
        ("slothqueue-core", &["rusqlite", "redb", "tokio", "tokio-postgres", "slothqueue-runner"]),
        (
            "slothqueue-store-sqlite",
            &["redb", "slothqueue-store-redb", "slothqueue-store-postgres", "slothqueue-runner"],
        ),
        (
            "slothqueue-store-redb",
            &[
                "rusqlite",
                "slothqueue-store-sqlite",
                "slothqueue-store-postgres",
                "slothqueue-runner",
            ],
        ),
        (
            "slothqueue-store-postgres",
            &[
                "rusqlite",
                "redb",
                "slothqueue-store-sqlite",
                "slothqueue-store-redb",
                "slothqueue-runner",
            ],
        ),
        (
            "slothqueue-conformance",
            &[
                "slothqueue-store-sqlite",
                "slothqueue-store-redb",
                "slothqueue-store-postgres",
                "slothqueue-runner",
            ],
        ),
        (
            "slothqueue-view",
            &[
                "rusqlite",
                "redb",
                "tokio",
                "tokio-postgres",
                "slothqueue-store-sqlite",
                "slothqueue-store-redb",
                "slothqueue-store-postgres",
                "slothqueue-runner",
            ],
        ),
        LIBRARY_LAYER,
        // The faces over the library (the MCP server, the Python package)
        // build without the binary's command-line parser, as the library does.
        ("slothqueue-mcp", &["clap", "clap_complete", "slothqueue-cli"]),
        ("slothqueue-python", &["clap", "clap_complete", "slothqueue-cli"]),
        ("slothqueue-top", &["clap", "clap_complete", "slothqueue-cli"]),
    ];
    for (package, banned) in forbidden {
        depends_on_none(package, banned)?;
    }
    println!("layering: ok");
    Ok(())
}

/// An error naming the first of `banned` that `package`'s normal
/// dependencies (its default features on, as `cargo tree` lists them)
/// include.
pub fn depends_on_none(package: &str, banned: &[&str]) -> Result<(), String> {
    let tree = run::cargo_output(&[
        "tree", "-p", package, "-e", "normal", "--prefix", "none", "--format", "{p}",
    ])?;
    for dep in banned {
        if tree.lines().any(|l| l.split_whitespace().next() == Some(*dep)) {
            return Err(format!("layering: {package} must not depend on {dep}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tidy;
