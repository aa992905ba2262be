//! Step two of parsing: raw arguments plus the environment become one
//! validated [`Config`], before anything is opened or written.
//!
//! Everything a user can get wrong across several values (a command *and*
//! a handler kind, an `--env` without `=`, a queue name with a slash, no
//! place for the queue file) is caught here, so a command function can
//! assume its input is sound and "bad input writes nothing" holds by
//! construction.
//!
//! The [`Config`] and what each command gets are here, with the small
//! checks; the larger ones have files of their own: `job` for the commands
//! that define a job (`add`, `every`, `edit`/`clone`), `runner` for `run`'s
//! and `serve`'s runner options, and `env` for what is read from the
//! process and where the queue's files are.

mod env;
mod job;
mod runner;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use slothqueue::core::{DEFAULT_QUEUE, LaneScope, Limits, NewSchedule};
use slothqueue::{Backend, JobId, ListFilter, ListOrder, NewJob};

use super::args::{self, Cli, Order};
use super::exit::usage;
pub use super::spec::When;
use super::spec::{self, JobSpec};
pub use env::{Env, default_db, expand_home, log_dir, server_files};
use job::{add_command, every_command, revise};
use runner::{run_config, runner_options};

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
    /// Cancel jobs, each in turn.
    Cancel(Vec<JobId>),
    /// Retry jobs, each in turn.
    Retry(Vec<JobId>),
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
    /// The man pages, into this folder.
    Man(PathBuf),
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
    /// The MCP server on stdio.
    #[cfg_attr(
        not(feature = "mcp"),
        allow(
            dead_code,
            reason = "without the mcp feature mcp only says it is missing (the config is read all the same)"
        )
    )]
    Mcp(McpConfig),
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
    /// The live terminal view.
    #[cfg_attr(
        not(feature = "top"),
        allow(dead_code, reason = "without the top feature top only says it is missing")
    )]
    Top {
        /// Who acts (holds and pauses record it).
        by: String,
    },
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
    /// Jobs run at once (1 to `args::values::MAX_SLOTS`).
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

/// `mcp`, validated.
#[derive(Debug, PartialEq)]
pub struct McpConfig {
    /// Only the looking tools.
    pub read_only: bool,
    /// `add_job` queues only these handler kinds; `None`: any job.
    pub kinds: Option<Vec<String>>,
    /// Every tool confined to this queue.
    pub queue: Option<String>,
    /// A drain worker runs inside the server, with these options.
    pub worker: Option<RunnerOptions>,
    /// `USER@host`: who pauses and holds.
    pub who: String,
    /// The server's environment, from which `add_job` records what `add`
    /// would.
    pub env: Vec<(String, String)>,
    /// A shell job's directory when the call names none.
    pub cwd: Option<PathBuf>,
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
    /// How the runner sees and hands out GPUs.
    pub gpus: GpuOptions,
}

/// `--gpu-file`, `--gpu-busy-above`, `--gpu-backfill-for`, `--hide-gpus`.
#[derive(Debug, Default, PartialEq)]
pub struct GpuOptions {
    /// An `nvidia-smi --query-gpu` CSV file read at every look, instead
    /// of `nvidia-smi`.
    pub file: Option<PathBuf>,
    /// The busy ceiling in percent; `None` is the default.
    pub busy_above: Option<u8>,
    /// The starvation rule's bound; `None` is the default.
    pub backfill_for: Option<Duration>,
    /// Jobs without GPUs get `CUDA_VISIBLE_DEVICES` empty.
    pub hide: bool,
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
            args::Command::Cancel(i) => Command::Cancel(i.ids),
            args::Command::Retry(i) => Command::Retry(i.ids),
            args::Command::Clear(c) => {
                Command::Clear { include_pending: c.all, older_than: c.older_than }
            }
            args::Command::Export => Command::Export,
            args::Command::Import(i) => Command::Import(i.file.filter(|f| f.as_os_str() != "-")),
            args::Command::Completions(c) => Command::Completions(c.shell),
            args::Command::Man(m) => Command::Man(m.dir),
            args::Command::Demo => Command::Demo,
            args::Command::Serve(a) => Command::Serve(ServeConfig {
                addr: a.addr,
                token_file: a.token_file,
                allow_remote: a.allow_remote,
                metrics_addr: a.metrics_addr,
                runner: runner_options(a.runner)?,
            }),
            args::Command::Mcp(a) => Command::Mcp(mcp_config(a, env)?),
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
            args::Command::Top => Command::Top { by: env.who() },
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

/// `mcp`'s flags, checked: the kinds and the queue are plain names, at
/// most one queue (the one every tool is confined to), and the runner's
/// other flags only with `--worker`, which uses them.
fn mcp_config(a: args::McpArgs, env: &Env) -> anyhow::Result<McpConfig> {
    for k in &a.kinds {
        plain_name("--kinds", k)?;
    }
    let queue = match a.runner.queue.as_slice() {
        [] => None,
        [q] => {
            plain_name("--queue", q)?;
            Some(q.clone())
        }
        _ => {
            return Err(usage(
                "mcp takes one --queue: the queue every tool is confined to (start one server per queue)",
            ));
        }
    };
    let runner = runner_options(a.runner)?;
    let worker = if a.worker {
        Some(runner)
    } else {
        // The runner's flags do something only with --worker: given
        // without it they would be ignored in silence.
        use clap::Parser as _;
        let plain = match Cli::try_parse_from(["slothqueue", "mcp"]).map(|c| c.command) {
            Ok(args::Command::Mcp(m)) => runner_options(m.runner)?,
            _ => return Err(usage("mcp: cannot read its default flags")),
        };
        let without_queue = RunnerOptions { queues: plain.queues.clone(), ..runner };
        if without_queue != plain {
            return Err(usage(
                "the runner's flags (--slots, --handlers, --load-ceiling, …) are for mcp --worker, which runs jobs inside the server; add --worker, or leave them out",
            ));
        }
        None
    };
    Ok(McpConfig {
        read_only: a.read_only,
        kinds: (!a.kinds.is_empty()).then_some(a.kinds),
        queue,
        worker,
        who: env.who(),
        env: env.vars.clone(),
        cwd: env.cwd.as_ref().ok().cloned(),
    })
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

fn plain_name(flag: &str, value: &str) -> anyhow::Result<()> {
    spec::plain_name(flag, value).map_err(usage)
}

fn list_filter(l: args::ListArgs) -> anyhow::Result<ListFilter> {
    if let Some(q) = &l.queue {
        plain_name("--queue", q)?;
    }
    if let Some(k) = &l.kind {
        plain_name("--kind", k)?;
    }
    let (state, shown) = match l.state {
        None => (None, None),
        Some(args::ListState::Is(s)) => (Some(s), None),
        Some(args::ListState::Shown(w)) => (None, Some(w)),
    };
    Ok(ListFilter {
        state,
        shown,
        search: l.search,
        finished_since: None,
        queue: l.queue,
        kind: l.kind,
        // `--all` and `--limit 0` lift the limit.
        limit: match (l.all, l.limit) {
            (true, _) | (false, Some(0)) => None,
            (false, Some(n)) => Some(n),
            (false, None) => Some(DEFAULT_LIST_LIMIT),
        },
        cursor: None,
        order: match l.order {
            Order::Newest => ListOrder::Newest,
            Order::Due => ListOrder::DueFirst,
        },
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::env::user_name;
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
            ["--env-all recorded 3 variables and left out GITHUB_TOKEN (names that look secret); \
                 --env-pass NAME records one"]
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
    fn mcp_takes_one_queue_and_the_runner_flags_only_with_its_worker() {
        let Command::Mcp(m) =
            config(&["mcp", "--read-only", "--kinds", "a,b", "-q", "gpu"]).unwrap().command
        else {
            panic!("not mcp")
        };
        assert!(m.read_only && m.worker.is_none());
        assert_eq!(
            (m.kinds, m.queue.as_deref()),
            (Some(vec!["a".into(), "b".into()]), Some("gpu"))
        );
        let err = config(&["mcp", "-q", "a", "-q", "b"]).unwrap_err().to_string();
        assert!(err.starts_with("mcp takes one --queue"), "{err}");
        let err = config(&["mcp", "--slots", "2"]).unwrap_err().to_string();
        assert!(err.contains("are for mcp --worker"), "{err}");
        let err = config(&["mcp", "--kinds", "a b"]).unwrap_err().to_string();
        assert!(err.starts_with("--kinds `a b` is not a plain name"), "{err}");
        let Command::Mcp(m) =
            config(&["mcp", "--worker", "--slots", "2", "-q", "gpu"]).unwrap().command
        else {
            panic!("not mcp")
        };
        let worker = m.worker.unwrap();
        assert_eq!((worker.slots.slots, worker.queues), (2, vec!["gpu".to_owned()]));
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
