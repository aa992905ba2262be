//! The `slothqueue` command line: parse, validate, dispatch to one
//! function per command, and turn the outcome into an exit code.

pub mod args;
mod commands;
pub mod config;
pub mod duration;
pub mod exit;
mod explain;
mod render;
pub mod time;

use std::process::ExitCode;

use clap::Parser;

use self::exit::Code;

/// The whole program: arguments in, exit code out.
pub fn main() -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return exit::clap_error(&e),
    };
    let config = match config::Config::new(cli, &config::Env::from_process()) {
        Ok(c) => c,
        Err(e) => return exit::report(&e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return exit::report(&anyhow::Error::new(e).context("cannot start tokio")),
    };
    match runtime.block_on(commands::execute(config)) {
        Ok(code) => code.into(),
        Err(e) => exit::report(&e),
    }
}

/// Keeps `Code` reachable for the commands without a path dance.
pub(crate) type Outcome = anyhow::Result<Code>;
