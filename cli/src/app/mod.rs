//! The `slothqueue` command line: parse, validate, dispatch to one
//! function per command, and turn the outcome into an exit code.

pub mod args;
mod batch;
mod commands;
mod complete;
pub mod config;
pub mod duration;
mod every;
pub mod exit;
mod man;
mod render;
use slothqueue::spec;
pub mod time;

use std::process::ExitCode;

use clap::Parser;

use self::exit::Code;

/// The whole program: arguments in, exit code out.
pub fn main() -> ExitCode {
    // A call from the shell's completion function (`COMPLETE` set) is
    // answered and exits here, before anything else is written.
    complete::complete_if_asked();
    if help_of_help(std::env::args_os()) {
        return print_help_of_help();
    }
    if password_on_command_line(std::env::args_os()) {
        exit::say(PASSWORD_WARNING);
    }
    exit::json_errors(exit::json_asked(std::env::args_os()));
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return exit::clap_error(&e),
    };
    exit::json_errors(cli.json);
    let config = match config::Config::new(cli, &config::Env::from_process()) {
        Ok(c) => c,
        Err(e) => return exit::report(&e),
    };
    let runtime = match runtime_for(&config.command) {
        Ok(rt) => rt,
        Err(e) => return exit::report(&anyhow::Error::new(e).context("cannot start tokio")),
    };
    match runtime.block_on(commands::execute(config)) {
        Ok(code) => code.into(),
        Err(e) => exit::report(&e),
    }
}

/// Whether the command line is `help --help` (or `help -h`), global
/// flags around it: clap's own `help` command takes no flag of its own,
/// and would call `--help` an unexpected argument.
fn help_of_help(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let mut args = args.skip(1).take_while(|a| a != "--");
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--db" | "--backend") => {
                args.next();
            }
            Some(a) if a.starts_with('-') => {}
            Some("help") => return args.any(|a| a == "--help" || a == "-h"),
            _ => return false,
        }
    }
    false
}

/// `help --help`: what `help` does, as clap describes it.
fn print_help_of_help() -> ExitCode {
    use clap::CommandFactory as _;
    let mut cmd = args::Cli::command();
    cmd.build();
    let Some(help) = cmd.find_subcommand_mut("help") else { return Code::Failure.into() };
    let text = help.render_long_help().to_string();
    let mut out = std::io::stdout().lock();
    match std::io::Write::write_all(&mut out, text.as_bytes()) {
        Ok(()) => Code::Success.into(),
        Err(e) => exit::report(&e.into()),
    }
}

/// Said once when `--db` on the command line holds a password.
const PASSWORD_WARNING: &str = "warning: the password in --db is shown to every local user \
    (ps); put it in ~/.pgpass or the file PGPASSFILE names (mode 600, libpq's format), or in \
    PGPASSWORD, or give --db in SLOTHQUEUE_DB";

/// Whether an argument `ps` shows is a `--db` URL with a password (clap
/// reads `--db` from `SLOTHQUEUE_DB` too, which `ps` does not show).
fn password_on_command_line(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let mut after_db = false;
    for arg in args {
        let text = arg.to_string_lossy();
        if text == "--" {
            // What follows is a job's command, not slothqueue's options.
            return false;
        }
        let value = if after_db { Some(text.as_ref()) } else { text.strip_prefix("--db=") };
        if value.is_some_and(|v| slothqueue::has_password(std::path::Path::new(v))) {
            return true;
        }
        after_db = text == "--db";
    }
    false
}

/// The runtime a command needs. Every command but `serve` is one task at a
/// time (a runner awaits one job, its heartbeat and its signals; store
/// calls go to the blocking pool either way), so it runs on the calling
/// thread: no worker threads to start (one per CPU, each with its own stack
/// and malloc arena), fewer thread hand-offs per store call, and less of
/// tokio's scheduler mapped in, which shows in `run`'s peak memory
/// (`BENCHMARKS.md`, "The CLI started tokio's worker threads"). `serve`
/// answers HTTP clients beside its drain worker, so it keeps worker threads.
///
/// A blocking-pool thread (every store call runs on one) waits an hour
/// for its next call, not tokio's ten seconds: a thread parked on its
/// condition variable costs nothing, while one that ends is a wake-up of
/// its own, ten seconds after every look of an idle `run --follow` or a
/// `wait` (which look every minute and every ten seconds).
fn runtime_for(command: &config::Command) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = match command {
        config::Command::Serve(_) => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    builder.thread_keep_alive(std::time::Duration::from_secs(3600)).enable_all().build()
}

/// Keeps `Code` reachable for the commands without a path dance.
pub(crate) type Outcome = anyhow::Result<Code>;
