//! What the configuration reads from the process ([`Env`]), and where a
//! queue's files are: the default queue file, a server queue's files on
//! this host, `~` expanded, the job logs' folder.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::app::exit::usage;

/// What the configuration reads from the process environment, gathered in
/// one place so tests can supply their own.
#[derive(Debug)]
pub struct Env {
    /// `$XDG_DATA_HOME`.
    pub xdg_data_home: Option<OsString>,
    /// `$HOME`.
    pub home: Option<OsString>,
    /// `$NO_COLOR` is set to something.
    pub no_color: bool,
    /// Standard output is a terminal.
    pub stdout_is_terminal: bool,
    /// The current directory, recorded as a shell job's `cwd`.
    pub cwd: std::io::Result<PathBuf>,
    /// `$USER`, else `$LOGNAME`, else `uid N`: who pauses and holds.
    pub user: String,
    /// This host's name, as runners record it.
    pub host: String,
    /// Every variable of the environment whose name and value are UTF-8:
    /// what `add` records a shell job's environment from.
    pub vars: Vec<(String, String)>,
    /// This machine's time zone by its IANA name, if it has one: `every`'s
    /// default `--tz`. Read from the system (`TZ`, else `/etc/localtime`)
    /// only when asked ([`Env::zone`]): naming it walks the time-zone
    /// database's folders, a cost every other command (`add` above all)
    /// need not pay.
    pub zone: std::cell::OnceCell<Option<String>>,
}

impl Env {
    /// The real environment.
    pub fn from_process() -> Env {
        use std::io::IsTerminal;
        Env {
            xdg_data_home: std::env::var_os("XDG_DATA_HOME"),
            home: std::env::var_os("HOME"),
            no_color: std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
            stdout_is_terminal: std::io::stdout().is_terminal(),
            cwd: std::env::current_dir(),
            user: user_name(
                std::env::var("USER").ok(),
                std::env::var("LOGNAME").ok(),
                rustix::process::getuid().as_raw(),
            ),
            host: rustix::system::uname().nodename().to_string_lossy().into_owned(),
            // A variable that is not UTF-8 cannot go into the JSON payload:
            // skipped (`--env-pass` of one says it is not set).
            vars: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
            zone: std::cell::OnceCell::new(),
        }
    }

    /// This machine's time zone by its IANA name, if it has one.
    pub fn zone(&self) -> Option<&str> {
        self.zone
            .get_or_init(|| jiff::tz::TimeZone::system().iana_name().map(str::to_owned))
            .as_deref()
    }

    /// `USER@host`: how a pause or a hold names who did it.
    pub fn who(&self) -> String {
        format!("{}@{}", self.user, self.host)
    }
}

/// The user's name from `$USER` or `$LOGNAME` (the first set to a plain
/// name), else `uid N`. Control characters and `@` are left out so the
/// stamp reads as one `name@host`.
pub(super) fn user_name(user: Option<String>, logname: Option<String>, uid: u32) -> String {
    [user, logname]
        .into_iter()
        .flatten()
        .map(|n| n.chars().filter(|c| !c.is_control() && *c != '@').collect::<String>())
        .find(|n| !n.trim().is_empty())
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// `$XDG_DATA_HOME/slothqueue/queue.db` (an absolute one only, as the XDG
/// spec says), else `~/.local/share/slothqueue/queue.db`.
pub fn default_db(env: &Env) -> Option<PathBuf> {
    let xdg = env.xdg_data_home.as_ref().map(PathBuf::from).filter(|p| p.is_absolute());
    let base = xdg.or_else(|| {
        env.home
            .as_ref()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|h| h.join(".local").join("share"))
    })?;
    Some(base.join("slothqueue").join("queue.db"))
}

/// Where this host keeps the files of a queue on a server: job logs stay
/// on the host that ran the job, so each host has its own, in the data
/// folder, named after the URL without its password:
/// `postgres://ci:secret@db/jobs?schema=gpu` →
/// `~/.local/share/slothqueue/postgres-ci@db_jobs_schema=gpu` (and its
/// `.logs` folder beside it).
pub fn server_files(url: &Path, env: &Env) -> anyhow::Result<PathBuf> {
    let data =
        default_db(env).and_then(|db| db.parent().map(Path::to_path_buf)).ok_or_else(|| {
            usage("no place for the job logs of a queue on a server: set XDG_DATA_HOME or HOME")
        })?;
    let text = url.to_string_lossy();
    let rest = text.split_once("://").map_or(&*text, |(_, rest)| rest);
    // `user:password@host` keeps `user@host`.
    let rest = match rest.split_once('@') {
        Some((user, host)) => format!("{}@{host}", user.split(':').next().unwrap_or(user)),
        None => rest.to_owned(),
    };
    let name: String = rest
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "@.=-".contains(c) { c } else { '_' })
        .take(120)
        .collect();
    Ok(data.join(format!("postgres-{name}")))
}

/// A leading `~/` (or a lone `~`) is `$HOME`, as a shell would have made
/// it: `SLOTHQUEUE_DB='~/q.db'` in a unit file or a quoted `--db` must not
/// create a folder named `~`. `~user/` is not expanded (it then names a
/// folder that does not exist, which `open` refuses).
pub fn expand_home(path: PathBuf, env: &Env) -> anyhow::Result<PathBuf> {
    let rest = match path.strip_prefix("~") {
        Ok(rest) => rest.to_owned(),
        Err(_) => return Ok(path),
    };
    let home = env.home.as_ref().map(PathBuf::from).filter(|h| h.is_absolute()).ok_or_else(|| {
        usage(format!(
            "--db (or SLOTHQUEUE_DB) {} starts with `~` but HOME is not set to an absolute path: give the full path",
            path.display()
        ))
    })?;
    Ok(if rest.as_os_str().is_empty() { home } else { home.join(rest) })
}

/// The folder a queue's job logs live in: the runner's rule, so `logs`
/// finds what `run` and `serve` wrote.
pub fn log_dir(db: &Path) -> PathBuf {
    slothqueue::runner::log_dir_for(db)
}
