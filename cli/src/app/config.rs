//! Step two of parsing: raw arguments plus the environment become one
//! validated [`Config`], before anything is opened or written.
//!
//! Everything a user can get wrong across several values (a command *and*
//! a handler kind, an `--env` without `=`, a queue name with a slash, no
//! place for the queue file) is caught here, so a command function can
//! assume its input is sound and "bad input writes nothing" holds by
//! construction.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use slothqueue::core::{DEFAULT_QUEUE, LaneScope, Limits, NewSchedule};
use slothqueue::{Backend, JobId, ListFilter, ListOrder, NewJob, Timestamp};

use super::args::{self, Cli, Order};
use super::every;
use super::exit::usage;
pub use super::spec::When;
use super::spec::{self, JobSpec, Source};
use super::time;

/// Rows `list` shows unless asked for more.
pub const DEFAULT_LIST_LIMIT: usize = 50;

/// A whole, validated invocation.
#[derive(Debug)]
pub struct Config {
    /// The queue file.
    pub db: PathBuf,
    /// `db` is the default one (no --db, no $SLOTHQUEUE_DB): only its
    /// folder is created when missing.
    pub default_db: bool,
    /// Where this host keeps the queue's own files (job logs, the serve
    /// token): the queue file itself for a file, whose logs go beside it;
    /// for a queue on a server, a name in the data folder
    /// ([`server_files`]).
    pub files: PathBuf,
    /// The backend asked for, if any.
    pub backend: Option<Backend>,
    /// JSON output instead of text.
    pub json: bool,
    /// Colour the few words that deserve it.
    pub color: bool,
    /// What to do.
    pub command: Command,
}

/// A validated command.
#[derive(Debug)]
pub enum Command {
    /// Push one job.
    Add(AddConfig),
    /// Push the jobs of stdin's lines, all or none.
    AddStdin(StdinConfig),
    /// Run jobs.
    Run(RunConfig),
    /// Counts and runners.
    Status,
    /// One row a job.
    List {
        /// Which jobs.
        filter: ListFilter,
        /// `--json` shows secret-looking values.
        show_secrets: bool,
    },
    /// One job's story.
    Show {
        /// The job.
        id: JobId,
        /// Secret-looking values shown, not masked.
        show_secrets: bool,
    },
    /// A job's output.
    Logs {
        /// The job.
        id: JobId,
        /// Keep reading until it ends.
        follow: bool,
    },
    /// Cancel a job.
    Cancel(JobId),
    /// Retry a job.
    Retry(JobId),
    /// Delete finished jobs.
    Clear {
        /// Pending ones too.
        include_pending: bool,
        /// Only older than this.
        older_than: Option<Duration>,
    },
    /// JSON lines out.
    Export,
    /// JSON lines in; `None` is stdin.
    Import(Option<PathBuf>),
    /// Shell completions.
    Completions(clap_complete::Shell),
    /// The guided tour.
    Demo,
    /// The HTTP API with a drain worker.
    #[cfg_attr(
        not(feature = "http"),
        allow(
            dead_code,
            reason = "without the http feature serve only says it is missing (a unit test reads the config all the same)"
        )
    )]
    Serve(ServeConfig),
    /// Block until jobs are finished.
    Wait {
        /// What to wait for.
        target: slothqueue::runner::WaitTarget,
        /// Give up after this long.
        timeout: Option<Duration>,
    },
    /// Set a queue's limit.
    Parallel {
        /// The queue.
        queue: String,
        /// The most of its jobs running at once; 0 is none.
        limit: u32,
    },
    /// Pause a lane.
    Pause {
        /// One queue or every queue.
        scope: LaneScope,
        /// Who pauses (`USER@host`).
        by: String,
    },
    /// Resume a lane.
    Resume(LaneScope),
    /// Hold pending jobs.
    Hold {
        /// The jobs, in the order given.
        ids: Vec<JobId>,
        /// Who holds them (`USER@host`).
        by: String,
    },
    /// Release held jobs.
    Release {
        /// The jobs, in the order given.
        ids: Vec<JobId>,
        /// Who releases them (`USER@host`).
        by: String,
    },
    /// One row a lane.
    Queues,
    /// Change a job (the rest checked and built by the command: `--delay`
    /// counts from when it writes).
    Edit(Revise),
    /// Add a job from another.
    Clone(Revise),
    /// Store a schedule.
    Every(EveryConfig),
    /// Pause, resume or remove a stored schedule.
    EveryChange {
        /// The schedule.
        key: String,
        /// What to do to it.
        change: EveryChange,
    },
    /// One row a schedule.
    Schedules,
}

/// `every SPEC CMD`, validated: the schedule as `core::schedule::create`
/// accepts it (but for what the store holds under its key).
#[derive(Debug)]
pub struct EveryConfig {
    /// What to store; its `job` is exactly the job `add` would have queued.
    pub schedule: NewSchedule,
    /// The key was derived from the command (no `--key`), so it is told.
    pub derived_key: bool,
    /// What to say on stderr before storing it (secret-looking names that
    /// `--env-all` left out, a zone that fell back to UTC).
    pub notes: Vec<String>,
}

/// `every --pause/--resume/--remove KEY`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EveryChange {
    /// No tick fires until resumed.
    Pause {
        /// Who pauses (`USER@host`).
        by: String,
    },
    /// Ticks fire again from the next slot after now.
    Resume,
    /// The schedule is deleted; its jobs stay.
    Remove,
}

/// `edit` and `clone`: the flags, with the environment they set resolved
/// here, where the process environment is read.
#[derive(Debug)]
pub struct Revise {
    /// The flags.
    pub args: args::ReviseArgs,
    /// `-e K=V` and `--env-pass NAME` (its value in this shell), checked.
    pub env: BTreeMap<String, String>,
}

/// Slots and gates, as `run` and `serve` take them, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotConfig {
    /// Jobs run at once (1 to [`args::MAX_SLOTS`]).
    pub slots: usize,
    /// The CPU pressure ceiling in percent, if any.
    pub max_cpu_pressure: Option<f64>,
    /// A PSI-format file to read instead of the kernel's.
    pub pressure_file: Option<PathBuf>,
    /// Start jobs only on mains power.
    pub require_ac_power: bool,
    /// A directory to read instead of `/sys/class/power_supply`.
    pub power_supply_dir: Option<PathBuf>,
    /// Stop running jobs' processes while a gate is closed.
    pub suspend_when_gated: bool,
}

impl Default for SlotConfig {
    fn default() -> Self {
        SlotConfig {
            slots: 1,
            max_cpu_pressure: None,
            pressure_file: None,
            require_ac_power: false,
            power_supply_dir: None,
            suspend_when_gated: false,
        }
    }
}

/// `serve`, validated.
#[derive(Debug, PartialEq)]
pub struct ServeConfig {
    /// Where to listen.
    pub addr: std::net::SocketAddr,
    /// The token file to read, or `None` to generate one beside the queue.
    pub token_file: Option<PathBuf>,
    /// Accept non-loopback addresses and headers.
    pub allow_remote: bool,
    /// Where `/metrics` is also served without the token.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// What the drain worker runs and how, as `run` takes it.
    pub runner: RunnerOptions,
}

/// `add --stdin`: the flags, checked, as the defaults of every line (the
/// lines are read and checked by the command, before anything is opened).
#[derive(Debug)]
pub struct StdinConfig {
    /// What every line starts from.
    pub defaults: JobSpec,
    /// The current directory, a plain line's `cwd`.
    pub current_dir: std::io::Result<PathBuf>,
    /// What to say on stderr before adding (secret-looking names that
    /// `--env-all` left out).
    pub notes: Vec<String>,
}

/// `add`, validated.
#[derive(Debug)]
pub struct AddConfig {
    /// The job, complete but for `not_before`.
    pub job: NewJob,
    /// When it becomes due.
    pub when: When,
    /// What to say on stderr before adding (secret-looking names that
    /// `--env-all` left out).
    pub notes: Vec<String>,
}

/// How long a `run` goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    /// Until nothing is due.
    Drain,
    /// One job.
    Once,
    /// Forever.
    Follow,
}

/// `run`, validated.
#[derive(Debug)]
pub struct RunConfig {
    /// How long to go on.
    pub mode: RunMode,
    /// What the runner runs and how.
    pub runner: RunnerOptions,
}

/// What a runner runs and how, validated: `run`'s options, which `serve`'s
/// drain worker takes with the same meaning.
#[derive(Debug, PartialEq)]
pub struct RunnerOptions {
    /// The load ceiling; `None` is the number of CPUs.
    pub load_ceiling: Option<f64>,
    /// A loadavg-format file to read instead of the system's.
    pub load_file: Option<PathBuf>,
    /// Pause after each job.
    pub cooldown: Option<Duration>,
    /// How often a closed gate is checked again.
    pub check_interval: Option<Duration>,
    /// Queues served; empty is all.
    pub queues: Vec<String>,
    /// The handler directory.
    pub handlers: Option<PathBuf>,
    /// A command run after each job.
    pub on_finish: Option<String>,
    /// The lease length asked for (`--lease`); `None` is the default.
    pub lease: Option<Duration>,
    /// Slots and the gates beyond the load.
    pub slots: SlotConfig,
    /// Limits for jobs that set none (`--nice`, `--ionice`, `--memory-max`,
    /// `--cpu-weight`).
    pub limits: Limits,
}

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
fn user_name(user: Option<String>, logname: Option<String>, uid: u32) -> String {
    [user, logname]
        .into_iter()
        .flatten()
        .map(|n| n.chars().filter(|c| !c.is_control() && *c != '@').collect::<String>())
        .find(|n| !n.trim().is_empty())
        .unwrap_or_else(|| format!("uid {uid}"))
}

impl Config {
    /// Validates `cli` in `env`.
    pub fn new(cli: Cli, env: &Env) -> anyhow::Result<Config> {
        let is_default = cli.db.is_none();
        let db = match cli.db {
            Some(p) if p.as_os_str().is_empty() => {
                return Err(usage("--db (or SLOTHQUEUE_DB) is empty: give the queue file's path"));
            }
            Some(p) => expand_home(p, env)?,
            None => default_db(env).ok_or_else(|| {
                usage("no place for the queue file: set --db, SLOTHQUEUE_DB, XDG_DATA_HOME or HOME")
            })?,
        };
        let command = match cli.command {
            args::Command::Add(a) => add_command(a, env)?,
            args::Command::Run(r) => Command::Run(run_config(r)?),
            args::Command::Status => Command::Status,
            args::Command::List(l) => {
                let show_secrets = l.show_secrets;
                Command::List { filter: list_filter(l)?, show_secrets }
            }
            args::Command::Show(s) => Command::Show { id: s.id, show_secrets: s.show_secrets },
            args::Command::Logs(l) => Command::Logs { id: l.id, follow: l.follow },
            args::Command::Cancel(i) => Command::Cancel(i.id),
            args::Command::Retry(i) => Command::Retry(i.id),
            args::Command::Clear(c) => {
                Command::Clear { include_pending: c.all, older_than: c.older_than }
            }
            args::Command::Export => Command::Export,
            args::Command::Import(i) => Command::Import(i.file.filter(|f| f.as_os_str() != "-")),
            args::Command::Completions(c) => Command::Completions(c.shell),
            args::Command::Demo => Command::Demo,
            args::Command::Serve(a) => Command::Serve(ServeConfig {
                addr: a.addr,
                token_file: a.token_file,
                allow_remote: a.allow_remote,
                metrics_addr: a.metrics_addr,
                runner: runner_options(a.runner)?,
            }),
            args::Command::Parallel(p) => {
                let queue = p.queue.unwrap_or_else(|| DEFAULT_QUEUE.to_owned());
                plain_name("--queue", &queue)?;
                Command::Parallel { queue, limit: p.limit }
            }
            args::Command::Pause(l) => Command::Pause { scope: lane_scope(l)?, by: env.who() },
            args::Command::Resume(l) => Command::Resume(lane_scope(l)?),
            args::Command::Hold(i) => Command::Hold { ids: i.ids, by: env.who() },
            args::Command::Release(i) => Command::Release { ids: i.ids, by: env.who() },
            args::Command::Queues => Command::Queues,
            args::Command::Edit(a) => Command::Edit(revise(a, env)?),
            args::Command::Clone(a) => Command::Clone(revise(a, env)?),
            args::Command::Every(a) => every_command(a, env)?,
            args::Command::Schedules => Command::Schedules,
            args::Command::Wait(w) => {
                let target = match (w.queue, w.all) {
                    (Some(q), _) => {
                        plain_name("--queue", &q)?;
                        slothqueue::runner::WaitTarget::Queue(q)
                    }
                    (None, true) => slothqueue::runner::WaitTarget::All,
                    (None, false) => slothqueue::runner::WaitTarget::Jobs(w.ids),
                };
                Command::Wait { target, timeout: w.timeout }
            }
        };
        let files =
            if slothqueue::is_server_url(&db) { server_files(&db, env)? } else { db.clone() };
        Ok(Config {
            db,
            files,
            default_db: is_default,
            backend: cli.backend,
            json: cli.json,
            color: env.stdout_is_terminal && !env.no_color,
            command,
        })
    }
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
fn expand_home(path: PathBuf, env: &Env) -> anyhow::Result<PathBuf> {
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

/// `--queue Q` as a lane: that queue, or every queue without the flag.
fn lane_scope(l: args::LaneArgs) -> anyhow::Result<LaneScope> {
    match l.queue {
        Some(q) => {
            plain_name("--queue", &q)?;
            Ok(LaneScope::Queue(q))
        }
        None => Ok(LaneScope::All),
    }
}

/// `--slots` and the gates beyond the load, checked: the files they name
/// must be there now, so a typo is refused at start, not waited on forever.
fn slot_config(a: args::SlotArgs) -> anyhow::Result<SlotConfig> {
    if let Some(file) = &a.pressure_file {
        let text = std::fs::read_to_string(file).map_err(|e| {
            usage(format!(
                "--pressure-file {}: cannot read it ({e}); expected the PSI format of /proc/pressure/cpu",
                file.display()
            ))
        })?;
        if slothqueue::runner::gate::parse_psi_some_avg10(&text).is_none() {
            return Err(usage(format!(
                "--pressure-file {} is not in PSI format (expected a line like `some avg10=1.00 avg60=0.50 avg300=0.20 total=100`)",
                file.display()
            )));
        }
    }
    if let Some(dir) = &a.power_supply_dir {
        if !dir.is_dir() {
            return Err(usage(format!(
                "--power-supply-dir {} is not a directory (expected the layout of /sys/class/power_supply)",
                dir.display()
            )));
        }
    }
    Ok(SlotConfig {
        slots: a.slots.unwrap_or(1),
        max_cpu_pressure: a.max_cpu_pressure,
        pressure_file: a.pressure_file,
        require_ac_power: a.require_ac_power,
        power_supply_dir: a.power_supply_dir,
        suspend_when_gated: a.suspend_when_gated,
    })
}

fn plain_name(flag: &str, value: &str) -> anyhow::Result<()> {
    spec::plain_name(flag, value).map_err(usage)
}

/// The flags of `add` as one [`JobSpec`]: the job itself, or (with
/// `--stdin`) the defaults every line starts from; and the notes for
/// stderr.
fn add_spec(a: args::AddArgs, process: &Env) -> anyhow::Result<(JobSpec, Vec<String>)> {
    let payload = match a.payload {
        Some(text) => Some(
            serde_json::from_str(&text)
                .map_err(|e| usage(format!("--payload is not valid JSON ({e})")))?,
        ),
        None => None,
    };
    let mut env = BTreeMap::new();
    for pair in &a.env {
        let (k, v) = parse_env_pair(pair)?;
        env.insert(k, v);
    }
    let when = match (a.settings.delay, a.settings.at) {
        (Some(d), _) => When::After(d),
        (None, Some(t)) => When::At(time::to_stamp(t)),
        (None, None) => When::Now,
    };
    let limits = a.limits.limits();
    let mut notes = Vec::new();
    let recorded = if a.kind.is_some() {
        // A handler's payload is its own: nothing of the shell goes in.
        if let Some(flag) = env_flag(&a.env_pass, a.env_all, &limits) {
            return Err(usage(format!(
                "{flag} is for shell commands; put a handler's settings in --payload"
            )));
        }
        None
    } else {
        let captured =
            slothqueue::core::shell::capture(process.vars.clone(), &a.env_pass, a.env_all);
        if let Some(name) = captured.missing.first() {
            return Err(usage(format!(
                "--env-pass {name}: {name} is not set in this environment (or its value is not UTF-8); set it, or give it with -e {name}=VALUE"
            )));
        }
        if !captured.secrets_left_out.is_empty() {
            notes.push(format!(
                "--env-all left out {} (names that look secret; --env-pass NAME records one)",
                captured.secrets_left_out.join(", ")
            ));
        }
        Some(captured.env)
    };
    let spec = JobSpec {
        command: a.command,
        kind: a.kind,
        payload,
        priority: a.settings.priority,
        max_runtime: a.settings.max_runtime.map(|m| m.0),
        max_attempts: a.settings.max_attempts,
        when,
        key: a.key,
        queue: a.queue,
        env,
        recorded,
        limits: Some(limits).filter(|l| !l.is_empty()),
        cwd: None,
        after: a.after,
    };
    Ok((spec, notes))
}

/// The first flag given that only a shell job takes, by its name.
fn env_flag(pass: &[String], all: bool, limits: &slothqueue::core::Limits) -> Option<&'static str> {
    if !pass.is_empty() {
        Some("--env-pass")
    } else if all {
        Some("--env-all")
    } else if limits.nice.is_some() {
        Some("--nice")
    } else if limits.ionice.is_some() {
        Some("--ionice")
    } else if limits.memory_max.is_some() {
        Some("--memory-max")
    } else if limits.cpu_weight.is_some() {
        Some("--cpu-weight")
    } else {
        None
    }
}

fn add_command(a: args::AddArgs, env: &Env) -> anyhow::Result<Command> {
    let stdin = a.stdin;
    let (spec, notes) = add_spec(a, env)?;
    if stdin {
        // The defaults must be sound on their own (a bad --queue is the
        // flag's fault, not line 1's): check them as a shell job would be.
        let probe = JobSpec { command: Some("true".to_owned()), ..spec.clone() };
        spec::build(probe, Source::Flags, &Ok(PathBuf::from("/"))).map_err(usage)?;
        let current_dir = match &env.cwd {
            Ok(p) => Ok(p.clone()),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        };
        return Ok(Command::AddStdin(StdinConfig { defaults: spec, current_dir, notes }));
    }
    let (job, when) = spec::build(spec, Source::Flags, &env.cwd).map_err(usage)?;
    Ok(Command::Add(AddConfig { job, when, notes }))
}

/// `every`: a change to the schedule a `--pause`, `--resume` or
/// `--remove` names (nothing else given), or a new schedule, whose job is
/// built by `add`'s own path and which is checked whole by
/// `core::schedule::create` before anything is opened.
fn every_command(mut a: args::EveryArgs, env: &Env) -> anyhow::Result<Command> {
    let change = match (a.pause.take(), a.resume.take(), a.remove.take()) {
        (Some(key), _, _) => Some(("--pause", key, EveryChange::Pause { by: env.who() })),
        (None, Some(key), _) => Some(("--resume", key, EveryChange::Resume)),
        (None, None, Some(key)) => Some(("--remove", key, EveryChange::Remove)),
        (None, None, None) => None,
    };
    if let Some((flag, key, change)) = change {
        if let Some(other) = definition_flag(&a) {
            return Err(usage(format!(
                "every {flag} KEY takes nothing else (got {other}): it changes a stored schedule, which `every SPEC CMD` defines"
            )));
        }
        return Ok(Command::EveryChange { key, change });
    }
    for (given, flag, why) in [
        (a.job.settings.delay.is_some(), "--delay", "each tick's job is due at its slot"),
        (a.job.settings.at.is_some(), "--at", "each tick's job is due at its slot"),
        (!a.job.after.is_empty(), "--after", "each tick's job is queued on its own"),
        (a.job.stdin, "--stdin", "a schedule queues one command"),
    ] {
        if given {
            return Err(usage(format!("every takes no {flag}: {why}")));
        }
    }
    let Some(text) = a.spec.take() else {
        return Err(usage(
            "every needs SPEC and a command: slothqueue every 2h 'make backup' (SPEC: an interval, or a cron expression like '0 3 * * *' or @daily)",
        ));
    };
    let no_job = a.job.command.is_none() && a.job.kind.is_none();
    let spec = every::parse_spec(&text).map_err(|e| {
        if no_job {
            usage(format!("every needs SPEC and a command, and `{text}` is no SPEC: {e}"))
        } else {
            usage(e)
        }
    })?;
    if no_job {
        return Err(usage(format!(
            "every {} needs a command: slothqueue every {} 'make backup' (or a handler job: --kind K --payload JSON)",
            render_arg(&text),
            render_arg(&text)
        )));
    }
    let key = a.job.key.take();
    let (zone, zone_note) = match a.tz.take() {
        Some(z) => (z, None),
        None => every::default_zone(env.zone()),
    };
    let catch_up = a.catch_up.unwrap_or_default();
    let overlap = a.overlap.unwrap_or_default();
    let (job_spec, mut notes) = add_spec(a.job, env)?;
    let (job, _) = spec::build(job_spec, Source::Flags, &env.cwd).map_err(usage)?;
    let derived_key = key.is_none();
    let key = key.unwrap_or_else(|| every::derived_key(&spec, &job));
    let schedule = NewSchedule { key, spec, zone, catch_up, overlap, job };
    // The whole definition as the store will check it; only what the file
    // holds under the key is left for the store to say. `now` is no part
    // of what is checked.
    slothqueue::core::schedule::create(&schedule, None, Timestamp::from_millis(0))
        .map_err(|e| usage(every::why(e)))?;
    notes.extend(zone_note);
    Ok(Command::Every(EveryConfig { schedule, derived_key, notes }))
}

/// SPEC as the user would retype it in a message.
fn render_arg(text: &str) -> String {
    if text.contains(char::is_whitespace) { format!("'{text}'") } else { text.to_owned() }
}

/// The first argument given that defines a schedule (so has no place
/// beside `--pause`, `--resume` or `--remove`), by its name.
fn definition_flag(a: &args::EveryArgs) -> Option<&'static str> {
    let j = &a.job;
    let l = &j.limits;
    [
        (a.spec.is_some(), "SPEC"),
        (j.command.is_some(), "CMD"),
        (a.tz.is_some(), "--tz"),
        (a.catch_up.is_some(), "--catch-up"),
        (a.overlap.is_some(), "--overlap"),
        (j.key.is_some(), "--key"),
        (j.settings.priority.is_some(), "--priority"),
        (j.settings.max_runtime.is_some(), "--max-runtime"),
        (j.settings.max_attempts.is_some(), "--max-attempts"),
        (j.settings.delay.is_some(), "--delay"),
        (j.settings.at.is_some(), "--at"),
        (j.queue.is_some(), "--queue"),
        (j.kind.is_some(), "--kind"),
        (j.payload.is_some(), "--payload"),
        (!j.env.is_empty(), "--env"),
        (!j.env_pass.is_empty(), "--env-pass"),
        (j.env_all, "--env-all"),
        (l.nice.is_some(), "--nice"),
        (l.ionice.is_some(), "--ionice"),
        (l.memory_max.is_some(), "--memory-max"),
        (l.cpu_weight.is_some(), "--cpu-weight"),
        (!j.after.is_empty(), "--after"),
        (j.stdin, "--stdin"),
    ]
    .into_iter()
    .find_map(|(given, name)| given.then_some(name))
}

/// `edit`'s and `clone`'s flags with their `-e` checked and each
/// `--env-pass NAME` read from this shell (unset: a usage error).
fn revise(args: args::ReviseArgs, process: &Env) -> anyhow::Result<Revise> {
    let mut env = BTreeMap::new();
    for pair in &args.env {
        let (k, v) = parse_env_pair(pair)?;
        env.insert(k, v);
    }
    for name in &args.env_pass {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(usage(format!("--env-pass `{name}` is not a variable name")));
        }
        let value = process.vars.iter().find(|(k, _)| k == name).ok_or_else(|| {
            usage(format!(
                "--env-pass {name}: {name} is not set (or not UTF-8) in this shell; nothing was changed"
            ))
        })?;
        env.insert(name.clone(), value.1.clone());
    }
    Ok(Revise { args, env })
}

fn parse_env_pair(pair: &str) -> anyhow::Result<(String, String)> {
    match pair.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains('\0') && !v.contains('\0') => {
            Ok((k.to_owned(), v.to_owned()))
        }
        _ => Err(usage(format!("--env `{pair}` is not NAME=VALUE"))),
    }
}

fn run_config(r: args::RunArgs) -> anyhow::Result<RunConfig> {
    let runner = runner_options(r.runner)?;
    if r.once && runner.slots.slots > 1 {
        return Err(usage("--once runs one job: --slots cannot be more than 1 with it"));
    }
    let mode = if r.once {
        RunMode::Once
    } else if r.follow {
        RunMode::Follow
    } else {
        RunMode::Drain
    };
    Ok(RunConfig { mode, runner })
}

/// The runner's options, as `run` and `serve` take them, checked: the
/// files and folders they name must be there now.
fn runner_options(r: args::RunnerArgs) -> anyhow::Result<RunnerOptions> {
    for q in &r.queue {
        plain_name("--queue", q)?;
    }
    if let Some(dir) = &r.handlers {
        if !dir.is_dir() {
            return Err(usage(format!("--handlers {} is not a directory", dir.display())));
        }
    }
    if let Some(file) = &r.load_file {
        if !file.is_file() {
            return Err(usage(format!(
                "--load-file {} is not a file (expected the loadavg format of /proc/loadavg)",
                file.display()
            )));
        }
    }
    if r.check_interval == Some(Duration::ZERO) {
        return Err(usage("--check-interval must be more than 0s (a zero interval would spin)"));
    }
    if matches!(&r.on_finish, Some(c) if c.trim().is_empty()) {
        return Err(usage("--on-finish is empty: give a shell command"));
    }
    if let Some(lease) = r.lease {
        if lease < MIN_LEASE || lease > MAX_LEASE {
            return Err(usage(
                "--lease must be from 3s to 24h (heartbeats come every third of it)",
            ));
        }
    }
    Ok(RunnerOptions {
        load_ceiling: r.load_ceiling,
        load_file: r.load_file,
        cooldown: r.cooldown,
        check_interval: r.check_interval,
        queues: r.queue,
        handlers: r.handlers,
        on_finish: r.on_finish,
        lease: r.lease,
        slots: slot_config(r.slots)?,
        limits: r.limits.limits(),
    })
}

/// The shortest `--lease`: heartbeats every second.
const MIN_LEASE: Duration = Duration::from_secs(3);
/// The longest `--lease`: a day.
const MAX_LEASE: Duration = Duration::from_secs(86_400);

fn list_filter(l: args::ListArgs) -> anyhow::Result<ListFilter> {
    if let Some(q) = &l.queue {
        plain_name("--queue", q)?;
    }
    if let Some(k) = &l.kind {
        plain_name("--kind", k)?;
    }
    Ok(ListFilter {
        state: l.state,
        queue: l.queue,
        kind: l.kind,
        limit: Some(l.limit.unwrap_or(DEFAULT_LIST_LIMIT)),
        cursor: None,
        order: match l.order {
            Order::Newest => ListOrder::Newest,
            Order::Due => ListOrder::DueFirst,
        },
    })
}

/// The folder a queue's job logs live in: the runner's rule, so `logs`
/// finds what `run` and `serve` wrote.
pub fn log_dir(db: &Path) -> PathBuf {
    slothqueue::runner::log_dir_for(db)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use slothqueue::core::DEFAULT_MAX_RUNTIME;

    fn env() -> Env {
        Env {
            xdg_data_home: None,
            home: Some("/home/u".into()),
            no_color: false,
            stdout_is_terminal: false,
            cwd: Ok(PathBuf::from("/work")),
            user: "ana".into(),
            host: "laptop".into(),
            vars: [
                ("PATH", "/venv/bin:/usr/bin"),
                ("VIRTUAL_ENV", "/venv"),
                ("EDITOR", "vi"),
                ("GITHUB_TOKEN", "ghp_x"),
                ("SLOTHQUEUE_DB", "/q.db"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
            zone: Some("Europe/Berlin".to_owned()).into(),
        }
    }

    fn config(argv: &[&str]) -> anyhow::Result<Config> {
        let mut full = vec!["slothqueue", "--db", "/tmp/q.db"];
        full.extend_from_slice(argv);
        Config::new(Cli::try_parse_from(full)?, &env())
    }

    #[test]
    fn the_default_queue_lives_in_the_data_directory() {
        let mut e = env();
        assert_eq!(default_db(&e), Some(PathBuf::from("/home/u/.local/share/slothqueue/queue.db")));
        e.xdg_data_home = Some("/data".into());
        assert_eq!(default_db(&e), Some(PathBuf::from("/data/slothqueue/queue.db")));
        e.xdg_data_home = Some("relative".into());
        assert_eq!(default_db(&e), Some(PathBuf::from("/home/u/.local/share/slothqueue/queue.db")));
        e.home = None;
        assert_eq!(default_db(&e), None);
    }

    #[test]
    fn add_records_cwd_and_defaults() {
        let c = config(&["add", "make test", "--env", "A=1"]).unwrap();
        let Command::Add(add) = c.command else { panic!("not add") };
        assert_eq!(add.job.payload["cwd"], "/work");
        assert_eq!(add.job.payload["env"]["A"], "1");
        assert_eq!(add.job.max_runtime, Some(DEFAULT_MAX_RUNTIME));
        assert_eq!(add.when, When::Now);
    }

    #[test]
    fn add_records_the_allowlist_and_what_is_named_and_runs_exactly_with_it() {
        let Command::Add(add) = config(&["add", "make", "-e", "PATH=/mine"]).unwrap().command
        else {
            panic!("not add")
        };
        let p = &add.job.payload;
        assert_eq!(p["env_mode"], "exact");
        assert_eq!(
            p["env"],
            serde_json::json!({"PATH": "/mine", "VIRTUAL_ENV": "/venv"}),
            "-e wins; EDITOR, the token and SLOTHQUEUE_* stay out"
        );
        assert!(add.notes.is_empty());
        let c = config(&["add", "make", "--env-pass", "GITHUB_TOKEN", "--env-all"]).unwrap();
        let Command::Add(add) = c.command else { panic!("not add") };
        assert_eq!(add.job.payload["env"]["GITHUB_TOKEN"], "ghp_x");
        assert_eq!(add.job.payload["env"]["EDITOR"], "vi");
        assert!(add.job.payload["env"].get("SLOTHQUEUE_DB").is_none());
        assert!(add.notes.is_empty(), "the one secret was named: {:?}", add.notes);
        let Command::Add(add) = config(&["add", "make", "--env-all"]).unwrap().command else {
            panic!("not add")
        };
        assert!(add.job.payload["env"].get("GITHUB_TOKEN").is_none());
        assert_eq!(
            add.notes,
            [
                "--env-all left out GITHUB_TOKEN (names that look secret; --env-pass NAME records one)"
            ]
        );
    }

    #[test]
    fn add_writes_the_limits_asked_into_the_payload() {
        let c = config(&["add", "make", "--nice", "-5", "--ionice", "idle", "--memory-max", "50M"])
            .unwrap();
        let Command::Add(add) = c.command else { panic!("not add") };
        assert_eq!(
            add.job.payload["limits"],
            serde_json::json!({"nice": -5, "ionice": "idle", "memory_max": 50 << 20})
        );
        let Command::Add(plain) = config(&["add", "make"]).unwrap().command else {
            panic!("not add")
        };
        assert!(plain.job.payload.get("limits").is_none(), "no limits asked, none written");
        let Command::Add(handler) =
            config(&["add", "--kind", "k", "--payload", "{}"]).unwrap().command
        else {
            panic!("not add")
        };
        assert_eq!(handler.job.payload, serde_json::json!({}), "nothing of the shell in it");
        for (argv, fragment) in [
            (&["add", "x", "--env-pass", "NOPE"][..], "--env-pass NOPE: NOPE is not set"),
            (&["add", "--kind", "k", "--payload", "{}", "--nice", "3"][..], "--nice is for shell"),
            (&["add", "--kind", "k", "--payload", "{}", "--env-all"][..], "--env-all is for shell"),
            (&["add", "x", "--nice", "20"][..], "not a niceness"),
            (&["add", "x", "--memory-max", "1K"][..], "below the 1 MiB"),
            (&["add", "x", "--ionice", "rt"][..], "I/O class `rt`"),
        ] {
            let err = config(argv).expect_err(fragment);
            assert!(format!("{err:#}").contains(fragment), "{argv:?}: {err:#}");
        }
    }

    #[test]
    fn edit_and_clone_read_their_environment_here() {
        let c = config(&["edit", "3", "-e", "CI=1", "--env-pass", "GITHUB_TOKEN"]).unwrap();
        let Command::Edit(r) = c.command else { panic!("not edit") };
        assert_eq!(r.env.get("CI").map(String::as_str), Some("1"));
        assert_eq!(r.env.get("GITHUB_TOKEN").map(String::as_str), Some("ghp_x"));
        for argv in [&["clone", "3", "--env-pass", "NOPE"][..], &["clone", "3", "-e", "NOEQUALS"]] {
            let err = config(argv).expect_err("refused");
            assert_eq!(crate::app::exit::code_for(&err), crate::app::exit::Code::Usage, "{argv:?}");
        }
    }

    #[test]
    fn handler_jobs_take_kind_and_payload() {
        let c = config(&["add", "--kind", "resize", "--payload", r#"{"w":3}"#]).unwrap();
        let Command::Add(add) = c.command else { panic!("not add") };
        assert_eq!(add.job.kind, "resize");
        assert_eq!(add.job.payload["w"], 3);
        for (argv, fragment) in [
            (&["add", "--kind", "../x", "--payload", "{}"][..], "--kind `../x`"),
            (&["add", "--kind", "k", "--payload", "{nope"][..], "--payload is not valid JSON"),
            (&["add", "echo", "--kind", "k", "--payload", "{}"][..], "not both"),
            (&["add"][..], "add needs a command"),
            (&["add", ""][..], "the command is empty"),
            (&["add", "x", "--env", "NOEQUALS"][..], "--env `NOEQUALS`"),
            (&["add", "x", "--queue", "a/b"][..], "--queue `a/b`"),
        ] {
            let err = config(argv).expect_err(fragment);
            assert!(format!("{err:#}").contains(fragment), "{argv:?}: {err:#}");
        }
    }

    #[test]
    fn logs_live_beside_the_queue_file() {
        assert_eq!(log_dir(Path::new("/a/q.db")), PathBuf::from("/a/q.db.logs"));
    }

    #[test]
    fn run_and_serve_take_the_same_runner_options_with_the_same_checks() {
        let dir = tempfile::tempdir().unwrap();
        let psi = dir.path().join("cpu");
        std::fs::write(&psi, "some avg10=12.00 avg60=3.00 avg300=1.00 total=5\n").unwrap();
        let psi = psi.to_str().unwrap();
        let power = dir.path().to_str().unwrap();
        let not_psi = dir.path().join("loadavg");
        std::fs::write(&not_psi, "0.1 0.1 0.1 1/1 1\n").unwrap();
        let not_psi = not_psi.to_str().unwrap();
        let flags = [
            "--slots",
            "3",
            "--max-cpu-pressure",
            "30",
            "--pressure-file",
            psi,
            "--require-ac-power",
            "--power-supply-dir",
            power,
            "--suspend-when-gated",
            "--handlers",
            power,
            "-q",
            "disk",
            "--queue",
            "net",
            "--on-finish",
            "echo done",
            "--load-ceiling",
            "2.5",
            "--load-file",
            not_psi,
            "--cooldown",
            "2s",
            "--check-interval",
            "5s",
            "--lease",
            "30s",
            "--nice",
            "5",
        ];
        let options = |command: &'static str| -> RunnerOptions {
            let mut argv = vec![command];
            argv.extend_from_slice(&flags);
            match config(&argv).unwrap().command {
                Command::Run(r) => r.runner,
                Command::Serve(s) => s.runner,
                other => panic!("not run or serve: {other:?}"),
            }
        };
        let run = options("run");
        assert_eq!(run.slots.slots, 3);
        assert_eq!(run.slots.max_cpu_pressure, Some(30.0));
        assert!(run.slots.require_ac_power && run.slots.suspend_when_gated);
        assert_eq!(run.queues, ["disk", "net"]);
        assert_eq!(run.handlers.as_deref(), Some(Path::new(power)));
        assert_eq!(run.on_finish.as_deref(), Some("echo done"));
        assert_eq!(run.load_ceiling, Some(2.5));
        assert_eq!(run.cooldown, Some(Duration::from_secs(2)));
        assert_eq!(run.check_interval, Some(Duration::from_secs(5)));
        assert_eq!(run.lease, Some(Duration::from_secs(30)));
        assert_eq!(run.limits.nice, Some(5));
        assert_eq!(options("serve"), run, "serve's drain worker takes run's options");
        let Command::Run(d) = config(&["run"]).unwrap().command else { panic!("not run") };
        assert_eq!(d.runner.slots, SlotConfig::default());
        let Command::Serve(s) = config(&["serve"]).unwrap().command else { panic!("not serve") };
        assert_eq!(s.runner, d.runner, "the same defaults");
        let file = not_psi;
        for command in ["run", "serve"] {
            for (argv, fragment) in [
                (&["--slots", "0"][..], "not a number of slots from 1 to 64"),
                (&["--slots", "65"][..], "not a number of slots from 1 to 64"),
                (&["--max-cpu-pressure", "0"][..], "not a cpu pressure ceiling"),
                (&["--max-cpu-pressure", "101"][..], "not a cpu pressure ceiling"),
                (&["--pressure-file", psi][..], "--max-cpu-pressure"),
                (
                    &["--max-cpu-pressure", "5", "--pressure-file", "/nonexistent/cpu"][..],
                    "cannot read it",
                ),
                (&["--max-cpu-pressure", "5", "--pressure-file", not_psi][..], "not in PSI format"),
                (&["--power-supply-dir", power][..], "--require-ac-power"),
                (&["--require-ac-power", "--power-supply-dir", psi][..], "is not a directory"),
                (&["--handlers", file][..], "--handlers"),
                (&["--handlers", "/nonexistent/handlers"][..], "is not a directory"),
                (&["--queue", "a/b"][..], "--queue `a/b`"),
                (&["--load-file", power][..], "is not a file"),
                (&["--check-interval", "0s"][..], "--check-interval must be more than 0s"),
                (&["--on-finish", " "][..], "--on-finish is empty"),
                (&["--lease", "1s"][..], "--lease must be from 3s to 24h"),
                (&["--load-ceiling", "0"][..], "not a load ceiling"),
            ] {
                let mut full = vec![command];
                full.extend_from_slice(argv);
                let err = config(&full).expect_err(fragment);
                let text = match err.downcast_ref::<clap::Error>() {
                    Some(clap) => clap.render().to_string(),
                    None => format!("{err:#}"),
                };
                assert!(text.contains(fragment), "{full:?}: {text}");
            }
        }
        let err = config(&["run", "--slots", "2", "--once"]).expect_err("--once");
        assert!(format!("{err:#}").contains("--once runs one job"), "{err:#}");
    }

    #[test]
    fn lane_commands_name_their_queue_and_who() {
        let Command::Parallel { queue, limit } = config(&["parallel", "2"]).unwrap().command else {
            panic!("not parallel")
        };
        assert_eq!((queue.as_str(), limit), ("default", 2));
        let Command::Pause { scope, by } = config(&["pause"]).unwrap().command else {
            panic!("not pause")
        };
        assert_eq!((scope, by.as_str()), (LaneScope::All, "ana@laptop"));
        let Command::Resume(scope) = config(&["resume", "-q", "disk"]).unwrap().command else {
            panic!("not resume")
        };
        assert_eq!(scope, LaneScope::Queue("disk".into()));
        let Command::Hold { ids, .. } = config(&["hold", "3", "#4"]).unwrap().command else {
            panic!("not hold")
        };
        assert_eq!(ids, [3, 4]);
        for (argv, fragment) in [
            (&["parallel", "-1"][..], "not a limit"),
            (&["parallel", "10001"][..], "not a limit"),
            (&["parallel", "2", "--queue", "a/b"][..], "--queue `a/b`"),
            (&["pause", "--queue", "a b"][..], "--queue `a b`"),
            (&["hold"][..], "required"),
            (&["release", "0"][..], "not a job id"),
        ] {
            let err = config(argv).expect_err(fragment);
            assert!(format!("{err:#}").contains(fragment), "{argv:?}: {err:#}");
        }
    }

    #[test]
    fn every_queues_exactly_the_job_add_would() {
        let flags = [
            "-q",
            "disk",
            "-p",
            "-3",
            "--max-attempts",
            "2",
            "--max-runtime",
            "1h",
            "-e",
            "A=1",
            "--env-pass",
            "GITHUB_TOKEN",
            "--nice",
            "5",
        ];
        let with = |head: &[&'static str]| {
            let mut argv = head.to_vec();
            argv.extend_from_slice(&flags);
            config(&argv).unwrap().command
        };
        let Command::Add(add) = with(&["add", "make x"]) else { panic!("not add") };
        let Command::Every(every) = with(&["every", "2h", "make x", "--key", "k"]) else {
            panic!("not every")
        };
        assert_eq!(every.schedule.job, add.job, "the tick's job is add's");
        assert_eq!(every.schedule.key, "k");
        assert!(!every.derived_key);
        assert_eq!(every.schedule.zone, "Europe/Berlin", "the machine's zone by default");
        assert_eq!(every.schedule.catch_up, slothqueue::core::CatchUp::Once);
        assert_eq!(every.schedule.overlap, slothqueue::core::Overlap::Skip);
        let Command::Every(e) = config(&[
            "every",
            "0 3 * * *",
            "make x",
            "--tz",
            "UTC",
            "--catch-up",
            "none",
            "--overlap",
            "queue",
        ])
        .unwrap()
        .command
        else {
            panic!("not every")
        };
        assert!(e.derived_key && e.schedule.key.starts_with("make-"), "{}", e.schedule.key);
        assert_eq!(e.schedule.spec, slothqueue::core::Spec::Cron("0 3 * * *".into()));
        assert_eq!(e.schedule.zone, "UTC");
        assert_eq!(e.schedule.catch_up, slothqueue::core::CatchUp::None);
        assert_eq!(e.schedule.overlap, slothqueue::core::Overlap::Queue);
        let Command::Every(h) =
            config(&["every", "@daily", "--kind", "resize", "--payload", "{}"]).unwrap().command
        else {
            panic!("not every")
        };
        assert_eq!(h.schedule.job.kind, "resize");
    }

    #[test]
    fn every_refuses_what_no_schedule_can_be_before_anything_is_opened() {
        for (argv, fragment) in [
            (&["every"][..], "every needs SPEC and a command"),
            (&["every", "2h"][..], "every 2h needs a command"),
            (&["every", "make backup"][..], "`make backup` is no SPEC"),
            (&["every", "5x", "x"][..], "SPEC `5x` is neither an interval"),
            (&["every", "0s", "x"][..], "an interval must be from 1s"),
            (&["every", "61 * * * *", "x"][..], "cron expression `61 * * * *`"),
            (&["every", "0 0 30 2 *", "x"][..], "never fires"),
            (&["every", "2h", "x", "--tz", "Mars/Olympus"][..], "unknown time zone `Mars/Olympus`"),
            (&["every", "2h", "x", "--key", "a b"][..], "schedule key `a b`"),
            (&["every", "2h", "x", "--key", &*"k".repeat(108)][..], "schedule key"),
            (&["every", "2h", "x", "--delay", "5m"][..], "every takes no --delay"),
            (&["every", "2h", "x", "--at", "2030-01-01 00:00"][..], "every takes no --at"),
            (&["every", "2h", "x", "--after", "3"][..], "every takes no --after"),
            (&["every", "2h", "--stdin"][..], "every takes no --stdin"),
            (&["every", "2h", "x", "-q", "a/b"][..], "--queue `a/b`"),
            (&["every", "2h", "x", "--env", "NOEQUALS"][..], "--env `NOEQUALS`"),
            (&["every", "2h", "x", "--env-pass", "NOPE"][..], "NOPE is not set"),
            (&["every", "2h", "x", "--catch-up", "twice"][..], "[possible values: once, none]"),
            (&["every", "2h", "x", "--overlap", "pile"][..], "[possible values: skip, queue]"),
            (&["every", "--pause", "k", "--resume", "k"][..], "cannot be used with"),
            (&["every", "--pause", "k", "2h"][..], "cannot be used with"),
            (&["every", "--remove", "k", "--queue", "q"][..], "takes nothing else (got --queue)"),
            (&["every", "--resume", "k", "--tz", "UTC"][..], "takes nothing else (got --tz)"),
        ] {
            let err = match config(argv) {
                Ok(c) => panic!("{argv:?} accepted: {:?}", c.command),
                Err(e) => e,
            };
            let text = match err.downcast_ref::<clap::Error>() {
                Some(clap) => clap.render().to_string(),
                None => format!("{err:#}"),
            };
            assert!(text.contains(fragment), "{argv:?}: {text}");
            if err.downcast_ref::<clap::Error>().is_none() {
                assert_eq!(crate::app::exit::code_for(&err), crate::app::exit::Code::Usage);
            }
        }
    }

    #[test]
    fn every_changes_name_their_key_and_who() {
        let Command::EveryChange { key, change } =
            config(&["every", "--pause", "nightly"]).unwrap().command
        else {
            panic!("not a change")
        };
        assert_eq!(
            (key.as_str(), change),
            ("nightly", EveryChange::Pause { by: "ana@laptop".into() })
        );
        let Command::EveryChange { change, .. } =
            config(&["every", "--remove", "n"]).unwrap().command
        else {
            panic!("not a change")
        };
        assert_eq!(change, EveryChange::Remove);
        assert!(matches!(config(&["schedules"]).unwrap().command, Command::Schedules));
    }

    #[test]
    fn who_is_the_user_at_the_host() {
        assert_eq!(user_name(Some("ana".into()), Some("x".into()), 7), "ana");
        assert_eq!(user_name(None, Some("bo".into()), 7), "bo");
        assert_eq!(user_name(Some("".into()), None, 7), "uid 7");
        assert_eq!(user_name(Some("a@b\n".into()), None, 7), "ab");
        assert_eq!(env().who(), "ana@laptop");
    }
}
