//! The one place errors become exit codes and a line on stderr.
//!
//! Commands return `anyhow::Result`, carrying typed causes (a
//! [`StoreError`], an [`OpenError`], a [`UsageError`], …); this module walks
//! the cause chain and picks the code, so every command maps the same
//! failure to the same code and the codes stay stable (they are listed in
//! `--help`).

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use slothqueue::runner::RunnerError;
use slothqueue::{OpenError, StoreError};

/// Exit codes, documented in `--help` (see `args::EXIT_CODES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Code {
    /// Everything went as asked.
    Success = 0,
    /// `run`: an attempt failed; elsewhere an unexpected error.
    Failure = 1,
    /// Bad input; nothing was written.
    Usage = 2,
    /// No such job, or no queue file.
    NotFound = 3,
    /// The job's state forbids the operation.
    NotAllowed = 4,
    /// The queue file stayed locked.
    Busy = 5,
    /// The queue file cannot be used by this build.
    Unusable = 6,
    /// The PostgreSQL server is a read-only standby: a writer must be
    /// pointed at the primary (a runner's unit does not restart on it).
    Standby = 7,
    /// `wait`: the timeout came before the jobs finished (124, as
    /// `timeout(1)` exits).
    TimedOut = 124,
    /// Stopped by SIGINT or SIGTERM.
    Interrupted = 130,
}

impl From<Code> for ExitCode {
    fn from(c: Code) -> Self {
        ExitCode::from(c as u8)
    }
}

/// Input the user can fix: exit 2, nothing written.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Something the user named does not exist (a log file, a queue file).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotFound(pub String);

/// A store's refusal of one job of a batch, named by the line of the
/// input it came from (`add --stdin`, `import`): `line 500: --after 99: no
/// job #99`. The refusal stays its cause, so it decides the exit code, and
/// [`report`] says it once.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {source}; nothing was written")]
pub struct AtLine {
    /// The input's line, from 1.
    pub line: usize,
    /// Why the store refused it.
    #[source]
    pub source: StoreError,
}

/// What a failed write of new jobs (`add`, `import`) says: `what` and
/// `undone` (`nothing was added`, if not empty) when the store refused, but when the
/// server went away mid-call the write may have committed with only its
/// answer lost, so "nothing" would be a lie and a blind retry could add
/// the jobs twice: then it says so, and how to look first.
pub fn new_jobs_failed(e: &StoreError, what: &str, undone: &str, look: &str) -> String {
    if matches!(e, StoreError::Unreachable(_)) {
        format!(
            "{what} (the connection was lost mid-call: it may have been written all the same; \
             {look} before trying again)"
        )
    } else if undone.is_empty() {
        what.to_owned()
    } else {
        format!("{what} ({undone})")
    }
}

/// Shorthand for a usage error.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// The code for an error: the first cause in the chain that says.
pub fn code_for(err: &anyhow::Error) -> Code {
    for cause in err.chain() {
        if cause.is::<UsageError>() {
            return Code::Usage;
        }
        if cause.is::<NotFound>() {
            return Code::NotFound;
        }
        if let Some(e) = cause.downcast_ref::<StoreError>() {
            return store_code(e);
        }
        if let Some(e) = cause.downcast_ref::<RunnerError>() {
            if let RunnerError::Store { source, .. } = e {
                return store_code(source);
            }
            return Code::Failure;
        }
        if let Some(e) = cause.downcast_ref::<OpenError>() {
            return match e {
                OpenError::Missing(_) | OpenError::NoFolder { .. } => Code::NotFound,
                OpenError::Store(s) => store_code(s),
                OpenError::Io { .. } => Code::Failure,
                _ => Code::Unusable,
            };
        }
        if let Some(e) = cause.downcast_ref::<io::Error>() {
            if e.kind() == io::ErrorKind::BrokenPipe {
                return Code::Success;
            }
        }
        // `--json` output writes through serde_json, which wraps the pipe's error.
        if let Some(e) = cause.downcast_ref::<serde_json::Error>() {
            if e.io_error_kind() == Some(io::ErrorKind::BrokenPipe) {
                return Code::Success;
            }
        }
    }
    Code::Failure
}

fn store_code(e: &StoreError) -> Code {
    match e {
        StoreError::InBatch { error, .. } => store_code(error),
        StoreError::NotFound(_) | StoreError::NoSchedule(_) => Code::NotFound,
        StoreError::LeaseLost { .. } | StoreError::InvalidTransition { .. } => Code::NotAllowed,
        StoreError::InvalidInput(_) => Code::Usage,
        StoreError::Busy { .. } => Code::Busy,
        StoreError::Corrupt { .. } | StoreError::SchemaTooNew { .. } => Code::Unusable,
        StoreError::ReadOnlyStandby(_) => Code::Standby,
        _ => Code::Failure,
    }
}

/// Whether errors are said as JSON (`--json`): set once by `main`, read
/// by [`report`], [`warn`] and [`clap_error`].
static JSON_ERRORS: AtomicBool = AtomicBool::new(false);

/// Errors from now on are said as JSON lines (`--json`), or as text.
pub fn json_errors(on: bool) {
    JSON_ERRORS.store(on, Ordering::Relaxed);
}

/// Whether `--json` stands among the arguments before a `--` (after it
/// comes a job's command): for clap's own errors, which come before the
/// arguments are known to parse.
pub fn json_asked(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    args.take_while(|a| a != "--").any(|a| a == "--json")
}

/// Prints the error as one line (causes joined by `: `) unless it is a
/// closed pipe (`slothqueue list | head` is not an error), and returns the
/// exit code. Under `--json` the line is `{"error": MESSAGE, "code": N}`
/// (docs/json.md), the exit code the same.
pub fn report(err: &anyhow::Error) -> ExitCode {
    let code = code_for(err);
    if code != Code::Success {
        say_error(&one_line(err), code);
    }
    code.into()
}

/// Prints the error as one line, as [`report`] does, and returns its code:
/// for a command that goes on after one refusal (`hold 3 4 5`).
pub fn warn(err: &anyhow::Error) -> Code {
    let code = code_for(err);
    say_error(&one_line(err), code);
    code
}

/// `error: MESSAGE`, or its JSON under `--json`.
fn say_error(message: &str, code: Code) {
    say(&error_line(message, code, JSON_ERRORS.load(Ordering::Relaxed)));
}

/// The line an error is said in: text, or `{"error": …, "code": N}`.
fn error_line(message: &str, code: Code, json: bool) -> String {
    if json {
        serde_json::json!({ "error": message, "code": code as u8 }).to_string()
    } else {
        format!("error: {message}")
    }
}

/// One line on stderr; a stderr that cannot be written (a full disk, a
/// closed pipe) leaves the exit code to say it, where `eprintln!` would
/// panic and exit 101 instead.
pub fn say(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// The error and its causes joined by `: `, each cause said once: an error
/// type that both prints its source and returns it from `source()` (as
/// some libraries' do) would otherwise repeat the whole message.
fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

/// Handles clap's own errors: help and version go to stdout with exit 0;
/// anything else becomes one line on stderr and exit 2 (clap's own
/// rendering adds usage and tips over several lines).
pub fn clap_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                Code::Usage.into()
            } else {
                Code::Success.into()
            }
        }
        _ => {
            let line = clap_line(&err.render().to_string());
            if JSON_ERRORS.load(Ordering::Relaxed) {
                let message = line.strip_prefix("error: ").unwrap_or(&line);
                say(&error_line(message, Code::Usage, true));
            } else {
                say(&line);
            }
            Code::Usage.into()
        }
    }
}

/// Clap's several-line rendering as one line: the message (with the list
/// it introduces, as in "the following required arguments were not
/// provided: <ID>"), then the tip and the usage in parentheses.
fn clap_line(rendered: &str) -> String {
    let mut lines = rendered.lines().skip_while(|l| l.trim().is_empty());
    let mut line = lines.next().unwrap_or("error: bad usage").trim_end().to_owned();
    if line.ends_with(':') {
        let items: Vec<&str> = lines
            .take_while(|l| l.starts_with(char::is_whitespace) && !l.trim().is_empty())
            .map(str::trim)
            .collect();
        if !items.is_empty() {
            line.push(' ');
            line.push_str(&items.join(", "));
        }
    }
    if let Some(values) =
        rendered.lines().map(str::trim).find(|l| l.starts_with("[possible values:"))
    {
        line.push(' ');
        line.push_str(values);
    }
    let mut notes = Vec::new();
    if let Some(tip) = rendered.lines().find(|l| l.trim_start().starts_with("tip:")) {
        notes.push(tip.trim().to_owned());
    }
    if let Some(usage) = rendered.lines().find_map(|l| l.trim().strip_prefix("Usage: ")) {
        notes.push(format!("usage: {}", usage.trim()));
    }
    if !notes.is_empty() {
        line.push_str(&format!(" ({})", notes.join("; ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use slothqueue::JobState;

    /// A refusal says nothing was written; a lost connection does not
    /// claim to know, and says how to look.
    #[test]
    fn a_lost_connection_does_not_claim_nothing_was_added() {
        let refused = StoreError::InvalidInput("bad".into());
        let said = new_jobs_failed(&refused, "cannot add", "nothing was added", "look");
        assert_eq!(said, "cannot add (nothing was added)");
        let lost = StoreError::Unreachable("db:5432: connection closed".into());
        let said = new_jobs_failed(&lost, "cannot add", "nothing was added", "run `list`");
        assert!(!said.contains("nothing"), "{said}");
        assert!(said.contains("may have been written all the same; run `list`"), "{said}");
    }

    #[test]
    fn store_errors_map_to_stable_codes() {
        let cases: Vec<(anyhow::Error, Code)> = vec![
            (StoreError::NotFound(9).into(), Code::NotFound),
            (
                StoreError::InvalidTransition { id: 1, state: JobState::Done, action: "cancel" }
                    .into(),
                Code::NotAllowed,
            ),
            (StoreError::Busy { waited: std::time::Duration::from_secs(5) }.into(), Code::Busy),
            (usage("bad"), Code::Usage),
            (OpenError::Missing("x".into()).into(), Code::NotFound),
            (OpenError::Foreign("x".into()).into(), Code::Unusable),
            (anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe)), Code::Success),
            (
                anyhow::Error::new(serde_json::Error::io(io::Error::from(
                    io::ErrorKind::BrokenPipe,
                ))),
                Code::Success,
            ),
            (anyhow::anyhow!("something else"), Code::Failure),
            (StoreError::ReadOnlyStandby("db:5432".into()).into(), Code::Standby),
            (OpenError::Store(StoreError::ReadOnlyStandby("db:5432".into())).into(), Code::Standby),
            (
                StoreError::InBatch {
                    index: 4,
                    error: Box::new(StoreError::InvalidInput("--after 9: no job #9".into())),
                }
                .into(),
                Code::Usage,
            ),
            (
                anyhow::Error::new(AtLine {
                    line: 5,
                    source: StoreError::InvalidInput("--after 9: no job #9".into()),
                }),
                Code::Usage,
            ),
        ];
        for (err, code) in cases {
            assert_eq!(code_for(&err), code, "{err:#}");
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot list running jobs: {source}")]
        struct Both {
            #[source]
            source: StoreError,
        }
        let err = anyhow::Error::new(Both { source: StoreError::NotFound(3) }).context("run");
        let line = one_line(&err);
        assert_eq!(line, format!("run: cannot list running jobs: {}", StoreError::NotFound(3)));
        let plain = anyhow::Error::new(StoreError::NotFound(3)).context("cannot show job #3");
        assert_eq!(one_line(&plain), format!("cannot show job #3: {}", StoreError::NotFound(3)));
    }

    #[test]
    fn a_line_names_the_store_refusal_once() {
        let err = anyhow::Error::new(AtLine {
            line: 500,
            source: StoreError::InvalidInput("--after 99: no job #99".into()),
        });
        assert_eq!(one_line(&err), "line 500: --after 99: no job #99; nothing was written");
    }

    #[test]
    fn a_missing_argument_is_named_on_one_line() {
        use clap::CommandFactory;
        let err = crate::app::args::Cli::command()
            .try_get_matches_from(["slothqueue", "show"])
            .unwrap_err();
        let line = clap_line(&err.render().to_string());
        assert_eq!(
            line,
            "error: the following required arguments were not provided: <ID> (usage: slothqueue show <ID>)"
        );
    }

    #[test]
    fn a_json_error_is_one_object_with_its_code() {
        let line = error_line("no job #9", Code::NotFound, true);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v, serde_json::json!({ "error": "no job #9", "code": 3 }));
        assert_eq!(error_line("no job #9", Code::NotFound, false), "error: no job #9");
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert!(json_asked(args(&["slothqueue", "show", "--json"]).into_iter()));
        assert!(!json_asked(args(&["slothqueue", "add", "--", "jq", "--json"]).into_iter()));
    }

    #[test]
    fn context_does_not_hide_the_cause() {
        let err = anyhow::Error::new(StoreError::NotFound(3)).context("cannot show job #3");
        assert_eq!(code_for(&err), Code::NotFound);
    }
}
