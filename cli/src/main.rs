//! The `slothqueue` binary: everything it does lives in `app`, one function
//! per command; this file only hands over the exit code.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the binary is the one place in the workspace that presents to people"
)]

mod app;

fn main() -> std::process::ExitCode {
    app::main()
}
