//! Shell completion that knows the queue: `show <TAB>` offers the job
//! ids, `--queue <TAB>` the queues, `every --pause <TAB>` the schedules.
//!
//! It is clap_complete's environment-driven completion: the shell's
//! completion function (what `slothqueue completions SHELL` prints, the
//! same as `COMPLETE=SHELL slothqueue`) runs the binary again with
//! `COMPLETE` set and the words typed so far after `--`; [`complete_if_asked`]
//! answers that call before anything else runs. The candidates for ids,
//! queues and schedule keys are read from the queue those words name
//! (`--db`, else `SLOTHQUEUE_DB`, else the default file, as every command
//! finds it), opened read-only and given [`QUICK`] at most: a missing,
//! locked or unreachable queue completes nothing, silently, rather than
//! hanging the shell or printing an error into the command line.
//!
//! Everything else (flags, subcommands, the values of `--backend`,
//! `--state`, `--order`) comes from the clap definitions as they are.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::CommandFactory as _;
use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};
use slothqueue::{Backend, Job, JobState, ListFilter, OpenOptions, Store, StoreError};

use super::args::Cli;
use super::config::{Env, default_db, expand_home};

/// The most a completion waits for the queue: a shell that hangs on TAB
/// is worse than one that offers nothing.
const QUICK: Duration = Duration::from_secs(2);

/// The most jobs offered (the newest): enough for any screen.
const JOBS_OFFERED: usize = 500;

/// The variable that asks for completions (clap_complete's default).
const VAR: &str = "COMPLETE";

/// The command line with the completers of ids, queues and schedule keys:
/// what completion walks. (Parsing uses [`Cli`] alone: a completer changes
/// nothing of what an argument accepts.)
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_owned()).collect();
    for name in names {
        cmd = cmd.mut_subcommand(&name, |sub| with_completers(&name, sub));
    }
    cmd
}

/// Which jobs a command's ids are offered from.
fn jobs_for(command: &str) -> Option<fn(&Job) -> bool> {
    let which: fn(&Job) -> bool = match command {
        "show" | "logs" | "wait" | "clone" => |_| true,
        "cancel" => |j| matches!(j.state, JobState::Pending | JobState::Running),
        "retry" => |j| matches!(j.state, JobState::Failed | JobState::Cancelled),
        "hold" => |j| j.state == JobState::Pending && !j.is_held(),
        "release" => Job::is_held,
        "edit" => |j| j.state == JobState::Pending,
        _ => return None,
    };
    Some(which)
}

/// One subcommand's arguments with their completers: its job ids, its
/// `--queue`, and `every`'s schedule keys.
fn with_completers(name: &str, mut sub: clap::Command) -> clap::Command {
    let ids: Vec<String> = sub
        .get_arguments()
        .filter(|a| {
            a.is_positional() && a.get_value_names().is_some_and(|v| v.iter().any(|n| n == "ID"))
        })
        .map(|a| a.get_id().to_string())
        .collect();
    if let Some(which) = jobs_for(name) {
        for id in ids {
            sub = sub.mut_arg(id, |a| {
                a.add(ArgValueCompleter::new(move |current: &OsStr| job_ids(current, which)))
            });
        }
    }
    if sub.get_arguments().any(|a| a.get_id() == "queue") {
        sub = sub.mut_arg("queue", |a| a.add(ArgValueCompleter::new(queue_names)));
    }
    if name == "every" {
        for key in ["pause", "resume", "remove"] {
            sub = sub.mut_arg(key, |a| a.add(ArgValueCompleter::new(schedule_keys)));
        }
    }
    sub
}

/// Answers a completion call (`COMPLETE` set) and exits; returns at once
/// when there is none, before anything is written to stdout.
pub fn complete_if_asked() {
    clap_complete::CompleteEnv::with_factory(command).var(VAR).bin("slothqueue").complete();
}

/// What `completions SHELL` prints: the shell's completion function that
/// calls this binary back for every TAB (what `COMPLETE=SHELL slothqueue`
/// prints too). The binary is named as it was called, as clap_complete
/// names it: a bare name is found on `PATH` at each TAB, a path with a
/// folder is made absolute.
pub fn registration(
    shell: clap_complete::Shell,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};
    let completer: &dyn EnvCompleter = match shell {
        clap_complete::Shell::Bash => &Bash,
        clap_complete::Shell::Elvish => &Elvish,
        clap_complete::Shell::Fish => &Fish,
        clap_complete::Shell::PowerShell => &Powershell,
        clap_complete::Shell::Zsh => &Zsh,
        other => {
            return Err(std::io::Error::other(format!("no completion for the shell {other}")));
        }
    };
    let called = PathBuf::from(std::env::args_os().next().unwrap_or_else(|| "slothqueue".into()));
    let called = match std::env::current_dir() {
        Ok(cwd) if called.components().count() > 1 => cwd.join(called),
        _ => called,
    };
    completer.write_registration(VAR, "slothqueue", "slothqueue", &called.to_string_lossy(), out)
}

/// The words of the command line being completed: what follows `--` in
/// this process's arguments (clap_complete's calling convention).
fn words() -> Vec<OsString> {
    std::env::args_os().skip_while(|a| a != "--").skip(1).collect()
}

/// The queue the words name, and the backend asked for: `--db PATH` or
/// `--db=PATH`, else `SLOTHQUEUE_DB`, else the default file.
fn queue_named(words: &[OsString]) -> Option<(PathBuf, Option<Backend>)> {
    let env = Env::from_process();
    let mut db = None;
    let mut backend = None;
    let mut words = words.iter().map(|w| w.to_string_lossy());
    while let Some(word) = words.next() {
        if word == "--" {
            break;
        }
        let (flag, value) = match word.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (word.clone().into_owned(), None),
        };
        match flag.as_str() {
            "--db" => db = value.or_else(|| words.next().map(|w| w.into_owned())),
            "--backend" => {
                backend = value.or_else(|| words.next().map(|w| w.into_owned()));
            }
            _ => {}
        }
    }
    let db = db
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("SLOTHQUEUE_DB").filter(|v| !v.is_empty()).map(PathBuf::from));
    let db = match db {
        Some(p) => expand_home(p, &env).ok()?,
        None => default_db(&env)?,
    };
    Some((db, backend.and_then(|b| b.parse().ok())))
}

/// What `look` reads from the queue the command line names, or nothing
/// when it cannot be read within [`QUICK`]. The reading runs on a thread
/// of its own, so that a queue that does not answer (a lock held, a
/// server away) is left behind: the process exits once the candidates
/// are written.
fn from_queue<T, F, Fut>(look: F) -> Vec<T>
where
    T: Send + 'static,
    F: FnOnce(Arc<dyn Store>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Vec<T>, StoreError>>,
{
    let Some((db, backend)) = queue_named(&words()) else { return Vec::new() };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let found = (|| {
            let store = slothqueue::open(&db, OpenOptions::read_only(backend)).ok()?;
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            runtime.block_on(look(store)).ok()
        })();
        let _ = tx.send(found.unwrap_or_default());
    });
    rx.recv_timeout(QUICK).unwrap_or_default()
}

/// The ids of the jobs `which` admits, newest first, each with its state
/// and command as the shell's description; `#12` when the word typed so
/// far starts with `#`.
fn job_ids(current: &OsStr, which: fn(&Job) -> bool) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy();
    let hash = if current.starts_with('#') { "#" } else { "" };
    let jobs = from_queue(|store| async move {
        let filter = ListFilter { limit: Some(JOBS_OFFERED), ..ListFilter::default() };
        store.list(&filter).await
    });
    jobs.iter()
        .filter(|j| which(j))
        .map(|j| (format!("{hash}{}", j.id), j))
        .filter(|(value, _)| value.starts_with(current.as_ref()))
        .map(|(value, j)| {
            let about = format!(
                "{}: {}",
                slothqueue_view::words::state_word(j),
                slothqueue_view::listing::command_or_kind(j)
            );
            CompletionCandidate::new(value).help(Some(about.into()))
        })
        .collect()
}

/// The queues: those with jobs and those with settings.
fn queue_names(current: &OsStr) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy().into_owned();
    let names = from_queue(|store| async move {
        let now = slothqueue::Clock::now(&slothqueue::SystemClock);
        Ok(store.queues(now).await?.queues.into_iter().map(|q| q.counts.queue).collect())
    });
    candidates(names, &current)
}

/// The schedules' keys.
fn schedule_keys(current: &OsStr) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy().into_owned();
    let keys = from_queue(|store| async move {
        Ok(store.schedules().await?.into_iter().map(|s| s.key).collect())
    });
    candidates(keys, &current)
}

/// The names that start with what is typed.
fn candidates(names: Vec<String>, current: &str) -> Vec<CompletionCandidate> {
    names.into_iter().filter(|n| n.starts_with(current)).map(CompletionCandidate::new).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_completing_command_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn every_id_argument_has_a_completer() {
        let cmd = command();
        for name in ["show", "logs", "wait", "clone", "cancel", "retry", "hold", "release", "edit"]
        {
            let sub = cmd.find_subcommand(name).unwrap();
            let id = sub.get_arguments().find(|a| a.is_positional()).unwrap();
            assert!(id.get::<ArgValueCompleter>().is_some(), "{name}: no completer for its ids");
        }
        for name in ["add", "list", "run", "edit", "parallel", "pause", "resume", "wait"] {
            let sub = cmd.find_subcommand(name).unwrap();
            let queue = sub.get_arguments().find(|a| a.get_id() == "queue").unwrap();
            assert!(queue.get::<ArgValueCompleter>().is_some(), "{name}: --queue");
        }
        let every = cmd.find_subcommand("every").unwrap();
        for key in ["pause", "resume", "remove"] {
            let arg = every.get_arguments().find(|a| a.get_id() == key).unwrap();
            assert!(arg.get::<ArgValueCompleter>().is_some(), "every --{key}");
        }
    }

    #[test]
    fn the_queue_is_the_one_the_words_name() {
        let words = |w: &[&str]| w.iter().map(OsString::from).collect::<Vec<_>>();
        let (db, backend) =
            queue_named(&words(&["slothqueue", "show", "--db", "/q/jobs.redb", ""])).unwrap();
        assert_eq!(db, PathBuf::from("/q/jobs.redb"));
        assert_eq!(backend, None);
        let (db, backend) =
            queue_named(&words(&["slothqueue", "--db=/q/a.db", "--backend", "redb", "show"]))
                .unwrap();
        assert_eq!((db, backend), (PathBuf::from("/q/a.db"), Some(Backend::Redb)));
        let (db, _) =
            queue_named(&words(&["slothqueue", "add", "--", "x", "--db", "/elsewhere"])).unwrap();
        assert_ne!(db, PathBuf::from("/elsewhere"), "a job's own words name no queue");
    }
}
