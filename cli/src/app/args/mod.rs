//! The command line as clap sees it: raw, typed arguments with their help.
//!
//! This is step one of two. Value parsers here reject what is wrong in a
//! single value (a duration, an id, a state); everything that needs several
//! values or the environment (which queue file, a command or a handler
//! kind, the current directory) is decided in `config`, so that nothing
//! runs before the whole invocation is known to be valid.
//!
//! The shape of the command line is here; the parsers of single values
//! are in `values`.

mod mcp;
mod values;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use slothqueue::core::{CatchUp, Overlap, Parent};
use slothqueue::{Backend, JobId};

use super::duration;
pub use mcp::McpArgs;
pub use values::{ListState, MaxRuntime, parse_id};
use values::{
    backend_parser, catch_up_parser, overlap_parser, parse_addr, parse_attempts, parse_ceiling,
    parse_cpu_weight, parse_ionice, parse_limit, parse_max_runtime, parse_memory, parse_nice,
    parse_parallel, parse_parent, parse_pressure, parse_priority, parse_slots, state_parser,
};

/// Printed under `--help`: the exit codes scripts can rely on.
const EXIT_CODES: &str = "\
Exit codes:
  0    success
  1    run: at least one attempt failed; other commands: an unexpected error (I/O, storage)
  2    bad input: unknown flag, invalid value, malformed import (nothing was written)
  3    not found: no such job or schedule, or no queue file for a command that needs one
  4    not allowed now: the job's state forbids it (e.g. cancelling a finished job)
  5    the queue file stayed busy (locked by another process) for too long; try again
  6    the queue file cannot be used: foreign, damaged, from a newer slothqueue, or
       in a backend this build was compiled without
  7    the PostgreSQL server is a read-only standby: point --db at the primary
  124  wait: the --timeout came first (as timeout(1) says it)
  130  run: interrupted by SIGINT or SIGTERM (the running job went back to pending)

The queue file: --db, else $SLOTHQUEUE_DB, else $XDG_DATA_HOME/slothqueue/queue.db
(~/.local/share/slothqueue/queue.db).";

/// A durable background-job queue for one machine.
///
/// Jobs wait in one file (SQLite or redb), or on a PostgreSQL server
/// shared by several hosts (`--db postgres://…`); `slothqueue run` starts them one
/// at a time, in priority order, only while the machine is quiet enough,
/// and a crashed runner's job is picked up again by the next one. Delivery
/// is at least once.
#[derive(Debug, Parser)]
#[command(name = "slothqueue", version, after_long_help = EXIT_CODES, max_term_width = 100)]
pub struct Cli {
    /// The queue file (created on first `add` or `run`), or a queue on a
    /// PostgreSQL server: `postgres://USER@HOST/DB?schema=NAME`.
    #[arg(long, global = true, value_name = "PATH|URL", env = "SLOTHQUEUE_DB")]
    pub db: Option<PathBuf>,

    /// Storage engine for a new queue file; an existing file's own header
    /// always wins. Default: redb for a `.redb` name, else sqlite.
    #[arg(long, global = true, value_name = "BACKEND", value_parser = backend_parser())]
    pub backend: Option<Backend>,

    /// Print JSON instead of text, for scripts (every shape is in
    /// docs/json.md: snake_case names, times in UTC milliseconds).
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Queue a shell command (with --kind, a handler job; with --stdin, one job a line).
    #[command(allow_negative_numbers = true)]
    Add(AddArgs),
    /// Run due jobs one at a time (or --slots N at once), politely, until none is due.
    Run(RunArgs),
    /// Counts per state, what is due, and the live runners.
    Status,
    /// One row per job.
    List(ListArgs),
    /// One job, its event trail, and why it is not running (if it is not).
    Show(ShowArgs),
    /// The captured output of a job.
    Logs(LogsArgs),
    /// Cancel pending jobs, or ask the runner to stop running ones.
    Cancel(IdsArg),
    /// Put failed or cancelled jobs back in the queue, attempts reset.
    Retry(IdsArg),
    /// Delete finished jobs (done, failed, cancelled); never running ones.
    Clear(ClearArgs),
    /// Write every job with its events, the schedules and lane settings as JSON lines.
    Export,
    /// Read jobs written by `export` (also from the other backend).
    Import(ImportArgs),
    /// Print the shell's completion set-up (it completes job ids, queues, schedule keys).
    #[command(after_long_help = COMPLETIONS_HELP)]
    Completions(CompletionsArgs),
    /// Show slothqueue's stories with real processes in a temp dir (< 30 s).
    Demo,
    /// Serve the loopback HTTP API (the outbox routes) with a drain worker.
    Serve(ServeArgs),
    /// Serve the queue to an agent as an MCP server on stdio (docs/agents.md).
    Mcp(McpArgs),
    /// Block until jobs are finished; exit 1 if one did not end done.
    Wait(WaitArgs),
    /// At most N jobs of a queue run at once, across every runner (0: no limit).
    Parallel(ParallelArgs),
    /// Start no new job of a queue (of every queue without --queue); running ones go on.
    Pause(LaneArgs),
    /// Undo `pause`: jobs of the queue (of every queue without --queue) may start again.
    Resume(LaneArgs),
    /// Keep pending jobs from starting until `release`.
    Hold(IdsArg),
    /// Let held jobs run again.
    Release(IdsArg),
    /// One row per queue: its jobs, its limit, whether it is paused.
    Queues,
    /// A live view of the queue in the terminal, with keys to steer it (docs/top.md).
    Top,
    /// Change a pending or held job (a typo in its command, its priority, …).
    #[command(allow_negative_numbers = true)]
    Edit(ReviseArgs),
    /// Add a new job from any job (a failed one, say), with changes.
    #[command(allow_negative_numbers = true)]
    Clone(ReviseArgs),
    /// Queue a job every 2h, or on a cron line in a zone (--pause/--resume/--remove KEY).
    #[command(
        allow_negative_numbers = true,
        after_long_help = EVERY_HELP,
        mut_arg("key", |a| a.help(
            "The schedule's name (letters, digits, `-`, `_`, `.`); each tick's job gets the \
             idempotency key NAME@SLOT. Default: derived from SPEC, the command and its \
             directory, and printed (docs/schedules.md)"
        )),
        mut_arg("delay", |a| a.hide(true)),
        mut_arg("at", |a| a.hide(true)),
        mut_arg("after", |a| a.hide(true)),
        mut_arg("stdin", |a| a.hide(true)),
    )]
    Every(EveryArgs),
    /// One row per schedule: its next tick, its last fire, what it missed, its pause.
    Schedules,
    /// Writes the man pages, one per command, into DIR (`cargo xtask man`).
    #[command(name = "__man", hide = true)]
    Man(ManArgs),
}

/// Printed under `completions --help`.
const COMPLETIONS_HELP: &str = "\
Set-up, one line per shell (the function calls slothqueue back at each TAB, so `show <TAB>`
offers the ids of the queue --db or $SLOTHQUEUE_DB names):
  bash  echo 'source <(slothqueue completions bash)' >> ~/.bashrc
  zsh   echo 'source <(slothqueue completions zsh)' >> ~/.zshrc     (after compinit)
  fish  echo 'slothqueue completions fish | source' >> ~/.config/fish/config.fish";

/// `__man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The folder the pages go into (`…/man1`), made if missing.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// Printed under `every --help`.
const EVERY_HELP: &str = "\
Examples:
  slothqueue every 2h 'make backup'                       every 2 hours from now
  slothqueue every '0 3 * * *' 'make nightly' --key nightly --tz Europe/Berlin
  slothqueue every @daily 'restic backup' --catch-up none --overlap queue
  slothqueue every --pause nightly      (--resume nightly, --remove nightly)
  slothqueue schedules

A runner fires the ticks (`run --follow` or `serve` keeps one going). A slot missed while
no runner ran (the laptop slept) runs once when one does, unless --catch-up none; a tick
whose previous job is still pending or running is skipped unless --overlap queue.
docs/schedules.md";

/// `every`: a schedule's definition (SPEC, the job as `add` takes it, the
/// zone and the rules for missed slots and overlaps), or one change to a
/// stored schedule.
#[derive(Debug, Args)]
pub struct EveryArgs {
    /// When it fires: an interval (`30s`, `15m`, `2h`, `1d`), counted from
    /// now; or a cron expression, quoted (`'0 3 * * *'`: minute hour
    /// day-of-month month day-of-week), or @hourly, @daily, @weekly,
    /// @monthly, @yearly, read as wall time in --tz.
    #[arg(value_name = "SPEC")]
    pub spec: Option<String>,

    /// The job each tick queues, exactly as `add` takes it.
    #[command(flatten)]
    pub job: AddArgs,

    /// The IANA time zone the cron fields are read in (`Europe/Berlin`,
    /// `UTC`); default: this machine's zone.
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,

    /// Slots missed while no runner ran: `once` (default) runs the latest
    /// of them once when a runner comes back; `none` runs none of them.
    #[arg(long, value_name = "HOW", value_parser = catch_up_parser())]
    pub catch_up: Option<CatchUp>,

    /// While the previous tick's job is pending or running: `skip`
    /// (default) queues nothing; `queue` queues the tick's job anyway.
    #[arg(long, value_name = "HOW", value_parser = overlap_parser())]
    pub overlap: Option<Overlap>,

    /// Pause the schedule KEY: no tick fires until --resume (the slots
    /// passed meanwhile are not run).
    #[arg(long, value_name = "KEY", conflicts_with_all = ["spec", "resume", "remove"])]
    pub pause: Option<String>,

    /// Resume the schedule KEY from its next slot after now.
    #[arg(long, value_name = "KEY", conflicts_with_all = ["spec", "remove"])]
    pub resume: Option<String>,

    /// Delete the schedule KEY; the jobs its ticks queued stay.
    #[arg(long, value_name = "KEY", conflicts_with = "spec")]
    pub remove: Option<String>,
}

/// `edit ID` and `clone ID`: what to change; anything not given stays as
/// the job has it (docs/edit.md). The settings `add` takes too are
/// [`JobSettings`], worded here for a change.
#[derive(Debug, Args)]
#[command(mut_args(worded_for_a_change))]
pub struct ReviseArgs {
    /// The job (`12` or `#12`).
    #[arg(value_name = "ID", value_parser = parse_id)]
    pub id: JobId,

    /// A new shell command, as one argument (shell jobs only).
    #[arg(long, value_name = "CMD")]
    pub command: Option<String>,

    /// A new JSON payload, whole (handler jobs; not with --command, -e or limits).
    #[arg(long, value_name = "JSON")]
    pub payload: Option<String>,

    /// The new priority, max runtime, attempt limit or due time.
    #[command(flatten)]
    pub settings: JobSettings,

    /// Move it to this queue.
    #[arg(long, short = 'q', value_name = "Q")]
    pub queue: Option<String>,

    /// Set (or replace) an environment variable of the command (repeatable).
    #[arg(long, short = 'e', value_name = "K=V")]
    pub env: Vec<String>,

    /// Set NAME to its value in this shell, now (repeatable; an error if unset).
    #[arg(long, value_name = "NAME")]
    pub env_pass: Vec<String>,

    /// The job's own limits.
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// [`JobSettings`]' help as `edit` and `clone` word it: a change to a job.
/// (`mut_args`, unlike `mut_arg`, keeps the arguments in their order, so
/// that shell completion lists them as before.)
fn worded_for_a_change(arg: clap::Arg) -> clap::Arg {
    let help = match arg.get_id().as_str() {
        "priority" => "A new priority (higher runs first)",
        "max_runtime" => "A new max runtime; `none` removes the limit",
        "max_attempts" => "A new attempt limit (above the attempts already made)",
        "delay" => "Due this long from now",
        "at" => "Due at this time: RFC 3339 or local `YYYY-MM-DD HH:MM`",
        "gpus" => "Start only with N free GPUs (0: asks for none any more)",
        _ => return arg,
    };
    arg.help(help)
}

/// `parallel`.
#[derive(Debug, Args)]
pub struct ParallelArgs {
    /// The most jobs of the queue that may run at once, across every
    /// runner on the file; 0 lifts the limit.
    #[arg(value_name = "N", allow_hyphen_values = true, value_parser = parse_parallel)]
    pub limit: u32,

    /// The queue (default: `default`).
    #[arg(long, short = 'q', value_name = "Q")]
    pub queue: Option<String>,
}

/// `pause`, `resume`.
#[derive(Debug, Args)]
pub struct LaneArgs {
    /// Only this queue (default: every queue; a queue paused on its own
    /// stays paused when every queue is resumed).
    #[arg(long, short = 'q', value_name = "Q")]
    pub queue: Option<String>,
}

/// `hold`, `release`, `cancel`, `retry`. A negative number is taken as
/// an id (to be refused as one: `-1` is not a job id), but not a flag:
/// `hold 3 --json` is a flag after the ids, not a fourth id.
#[derive(Debug, Args)]
pub struct IdsArg {
    /// The jobs (`12` or `#12`), each in turn.
    #[arg(value_name = "ID", required = true, value_parser = parse_id, allow_negative_numbers = true)]
    pub ids: Vec<JobId>,
}

/// What runs at once and what it waits for: flags `run` and `serve` share.
#[derive(Debug, Args)]
pub struct SlotArgs {
    /// Run up to N jobs at once (1 to 64; default 1), each with its own
    /// lease, log and process group. The gates are read before every start.
    #[arg(long, value_name = "N", value_parser = parse_slots)]
    pub slots: Option<usize>,

    /// Start a job only while CPU pressure (Linux PSI, `some avg10` of
    /// /proc/pressure/cpu) is below this percentage.
    #[arg(long, value_name = "PCT", allow_hyphen_values = true, value_parser = parse_pressure)]
    pub max_cpu_pressure: Option<f64>,

    /// Read CPU pressure from this PSI-format file instead of /proc/pressure/cpu.
    #[arg(long, value_name = "PATH", requires = "max_cpu_pressure")]
    pub pressure_file: Option<PathBuf>,

    /// Start a job only while the machine runs on mains power, not on battery.
    #[arg(long)]
    pub require_ac_power: bool,

    /// Read the power supplies from this directory instead of /sys/class/power_supply.
    #[arg(long, value_name = "DIR", requires = "require_ac_power")]
    pub power_supply_dir: Option<PathBuf>,

    /// When a gate closes while jobs run, stop their processes (SIGSTOP)
    /// until it opens again (SIGCONT); the stopped time does not count
    /// against their max runtime.
    #[arg(long)]
    pub suspend_when_gated: bool,
}

/// How a job runs beside others: niceness, I/O class and the ceilings that
/// need a cgroup. On `add`, `edit` and `clone` they are the job's own; on
/// `run` and `serve`, the defaults for jobs that do not say (docs/limits.md).
#[derive(Debug, Default, Args)]
pub struct LimitArgs {
    /// CPU niceness, -20 (first) to 19 (last); jobs that say nothing run at 10.
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = parse_nice)]
    pub nice: Option<i32>,

    /// I/O class: `idle`, `best-effort` or `best-effort:0` to `:7`.
    #[arg(long, value_name = "CLASS", value_parser = parse_ionice)]
    pub ionice: Option<slothqueue::core::IoClass>,

    /// Memory ceiling (`512M`, `2G`; powers of 1024): the job is killed
    /// when it goes over. Needs a cgroup; said when none could be made.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub memory_max: Option<u64>,

    /// CPU weight, 1 to 10000 (100 is an equal share). Needs a cgroup.
    #[arg(long, value_name = "N", value_parser = parse_cpu_weight)]
    pub cpu_weight: Option<u32>,
}

impl LimitArgs {
    /// The limits these flags set (unset fields are `None`).
    pub fn limits(&self) -> slothqueue::core::Limits {
        slothqueue::core::Limits {
            nice: self.nice,
            ionice: self.ionice,
            memory_max: self.memory_max,
            cpu_weight: self.cpu_weight,
        }
    }
}

/// `wait`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["ids", "queue", "all"])))]
pub struct WaitArgs {
    /// The jobs to wait for (`12` or `#12`).
    #[arg(value_name = "ID", value_parser = parse_id)]
    pub ids: Vec<JobId>,

    /// Until no job of this queue is pending or running.
    #[arg(long, short = 'q', value_name = "Q", conflicts_with_all = ["ids", "all"])]
    pub queue: Option<String>,

    /// Until no job of any queue is pending or running.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,

    /// Give up after this long (awake time) and exit 124.
    #[arg(long, value_name = "DUR", allow_hyphen_values = true, value_parser = duration::parse)]
    pub timeout: Option<Duration>,
}

/// `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen; loopback unless --allow-remote.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7878", value_parser = parse_addr)]
    pub addr: std::net::SocketAddr,

    /// Read the bearer token from this file instead of generating one
    /// (mode 0600) beside the queue file.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Listen on a non-loopback address and accept any Host/Origin header.
    /// Anyone who can reach the port and has the token can run commands as
    /// you: only behind a network you trust.
    #[arg(long)]
    pub allow_remote: bool,

    /// Also answer GET /metrics (and nothing else) on this address without
    /// the token, for a scraper without credentials; loopback unless
    /// --allow-remote. /metrics on --addr needs the token either way.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// What the drain worker runs and how, exactly as `run` takes it.
    #[command(flatten)]
    pub runner: RunnerArgs,
}

/// A job's settings that `add` (and `every`) and `edit`/`clone` both take,
/// declared once: priority, max runtime, attempt limit and due time. The
/// help words them for `add`; [`ReviseArgs`] rewords them for a change.
#[derive(Debug, Args)]
pub struct JobSettings {
    /// Higher runs first (any 32-bit integer; default 0).
    #[arg(long, short = 'p', value_name = "N", value_parser = parse_priority)]
    pub priority: Option<i32>,

    /// Kill the job's whole process group after this long (awake time);
    /// `none` for no limit.
    #[arg(long, value_name = "DUR|none", allow_hyphen_values = true, value_parser = parse_max_runtime)]
    pub max_runtime: Option<MaxRuntime>,

    /// Attempts before the job is marked failed (at least 1; default 3).
    #[arg(long, value_name = "N", value_parser = parse_attempts)]
    pub max_attempts: Option<u32>,

    /// Not before this long from now.
    #[arg(long, value_name = "DUR", conflicts_with = "at", allow_hyphen_values = true,
          value_parser = duration::parse)]
    pub delay: Option<Duration>,

    /// Not before this time: RFC 3339 (`2025-01-02T03:04:05Z`) or local
    /// `YYYY-MM-DD HH:MM`.
    #[arg(long, value_name = "TIME", value_parser = super::time::parse_at)]
    pub at: Option<jiff::Timestamp>,

    /// Start only with N free GPUs on the runner's host, held for the
    /// whole attempt and named in CUDA_VISIBLE_DEVICES (docs/gpus.md).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=64))]
    pub gpus: Option<u32>,

    /// With --gpus: the free memory needed on each GPU (`20G`; powers of 1024).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub gpu_memory: Option<u64>,
}

impl JobSettings {
    /// The GPU request these flags make: `None` when `--gpus` is not given
    /// (or is 0, which `edit` reads as "none any more").
    pub fn gpu_request(&self) -> Result<Option<slothqueue::core::GpuRequest>, String> {
        match (self.gpus, self.gpu_memory) {
            (None, Some(_)) => Err("--gpu-memory needs --gpus N".to_owned()),
            (Some(0), Some(_)) => Err("--gpu-memory needs --gpus 1 or more".to_owned()),
            (None | Some(0), None) => Ok(None),
            (Some(count), memory) => Ok(Some(slothqueue::core::GpuRequest { count, memory })),
        }
    }
}

/// `add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The shell command, as one argument: quote it (`'make test'`).
    /// Runs with `sh -c` in the current directory.
    #[arg(value_name = "CMD")]
    pub command: Option<String>,

    /// Its priority, max runtime, attempt limit and due time.
    #[command(flatten)]
    pub settings: JobSettings,

    /// Idempotency key: adding the same key and command again adds nothing;
    /// a different command replaces the pending one.
    #[arg(long, value_name = "K")]
    pub key: Option<String>,

    /// The lane; a runner can serve only some queues.
    #[arg(long, short = 'q', value_name = "Q")]
    pub queue: Option<String>,

    /// A handler job instead of a shell command: `run --handlers DIR` runs
    /// `DIR/K` with the payload on stdin.
    #[arg(long, value_name = "K", requires = "payload")]
    pub kind: Option<String>,

    /// The handler job's JSON payload.
    #[arg(long, value_name = "JSON", requires = "kind")]
    pub payload: Option<String>,

    /// An environment variable for the command (repeatable), laid over
    /// what is recorded from your environment: PATH, HOME, the locale, an
    /// active virtualenv, conda, nvm and the like (docs/environment.md).
    /// The job runs with exactly that environment, not the runner's.
    #[arg(long, short = 'e', value_name = "K=V")]
    pub env: Vec<String>,

    /// Record this variable of your environment too (repeatable), also
    /// one whose name looks secret (its value is masked when shown).
    #[arg(long, value_name = "NAME")]
    pub env_pass: Vec<String>,

    /// Record every variable of your environment except those holding a
    /// secret: a name that looks secret, a value with a password in it
    /// (a URL's), another tool's bookkeeping such as DIRENV_DIFF (they are
    /// named on stderr; --env-pass takes one).
    #[arg(long)]
    pub env_all: bool,

    /// The job's niceness, I/O class and ceilings (shell jobs only).
    #[command(flatten)]
    pub limits: LimitArgs,

    /// Run only once this job is done (repeatable, or comma-separated):
    /// `12` or `#12` is a job id, anything else the idempotency key of a
    /// job. If it fails or is cancelled, this job is cancelled too, and a
    /// `retry` of it brings this one back (docs/workflows.md).
    #[arg(long, value_name = "ID|KEY", value_delimiter = ',', value_parser = parse_parent)]
    pub after: Vec<Parent>,

    /// Read one job a line from stdin and add them all in one transaction
    /// (all or nothing; an error names its line): a shell command, or a
    /// JSON object with add's fields, `{"command": "make", "key": "build",
    /// "after": [12, "setup"]}` (docs/workflows.md lists them). Blank lines
    /// and lines starting with `#` are skipped. The other flags given here
    /// are defaults for every line; a line's own field replaces them.
    #[arg(long, conflicts_with_all = ["command", "kind", "payload", "key"])]
    pub stdin: bool,
}

/// `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Run one job (if one is due) and exit.
    #[arg(long, conflicts_with = "follow")]
    pub once: bool,

    /// Never exit: sleep until the next job is due.
    #[arg(long)]
    pub follow: bool,

    /// What the runner runs and how.
    #[command(flatten)]
    pub runner: RunnerArgs,
}

/// What a runner runs and how: the options `run` and `serve` (its drain
/// worker) share, with the same meaning.
#[derive(Debug, Args)]
pub struct RunnerArgs {
    /// Start a job only while the 1-minute load average is below this
    /// (default: the number of CPUs).
    #[arg(long, value_name = "F", allow_hyphen_values = true, value_parser = parse_ceiling)]
    pub load_ceiling: Option<f64>,

    /// Read the load from this loadavg-format file instead of /proc/loadavg.
    #[arg(long, value_name = "PATH")]
    pub load_file: Option<PathBuf>,

    /// Read the GPUs from this file, re-read at every look, instead of
    /// asking nvidia-smi: what `nvidia-smi --query-gpu=index,uuid,name,
    /// memory.used,memory.total,utilization.gpu --format=csv` prints.
    #[arg(long, value_name = "PATH")]
    pub gpu_file: Option<PathBuf>,

    /// A GPU that others use above this percentage of its memory or of its
    /// time is busy: not handed out (default 10).
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub gpu_busy_above: Option<u8>,

    /// How long the best waiting GPU job lets lower ones take the GPUs
    /// before they are kept for it (default 10m; docs/gpus.md).
    #[arg(long, value_name = "DUR", allow_hyphen_values = true, value_parser = duration::parse)]
    pub gpu_backfill_for: Option<Duration>,

    /// Jobs queued without --gpus get CUDA_VISIBLE_DEVICES empty, so they
    /// cannot use the GPUs other jobs hold.
    #[arg(long)]
    pub hide_gpus: bool,

    /// Pause after each job (with --slots, after the latest start or end).
    #[arg(long, value_name = "DUR", allow_hyphen_values = true, value_parser = duration::parse)]
    pub cooldown: Option<Duration>,

    /// How often a closed gate is checked again.
    #[arg(long, value_name = "DUR", allow_hyphen_values = true, value_parser = duration::parse)]
    pub check_interval: Option<Duration>,

    /// Serve only this queue (repeatable; default: all).
    #[arg(long, short = 'q', value_name = "Q")]
    pub queue: Vec<String>,

    /// Run handler jobs of kind K as the executable DIR/K.
    #[arg(long, value_name = "DIR")]
    pub handlers: Option<PathBuf>,

    /// Run this shell command after each job, with SLOTHQUEUE_JOB_ID,
    /// SLOTHQUEUE_STATE and SLOTHQUEUE_EXIT_CODE set.
    #[arg(long, value_name = "CMD")]
    pub on_finish: Option<String>,

    /// How long a claimed job's lease lasts between heartbeats (default
    /// 60s; heartbeats come every third of it). Only where the owner cannot
    /// be checked (another host, another PID namespace) does a lease's
    /// expiry let another runner take the job: longer is safer on a laptop
    /// that may be suspended, shorter recovers such jobs sooner. A runner
    /// that cannot renew the lease (cut off from a server) stops its job
    /// a margin before the lease ends: the kill grace (2s) plus 1.5s for
    /// clock offsets and the stop, so at 56.5s by default; under 7s the
    /// stop comes at half the lease with a shorter grace (KILL at once for
    /// 3s). See docs/reliability.md, S26.
    #[arg(long, value_name = "DUR", allow_hyphen_values = true, value_parser = duration::parse)]
    pub lease: Option<Duration>,

    /// Slots and gates.
    #[command(flatten)]
    pub slots: SlotArgs,

    /// Limits for jobs that set none.
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only jobs in this state: pending, running, done, failed or cancelled;
    /// or held (pending jobs a user holds) or waiting (pending, not held,
    /// waiting on parents), as the table words them.
    #[arg(long, short = 's', value_name = "S", ignore_case = true, value_parser = state_parser())]
    pub state: Option<ListState>,

    /// Only jobs whose command, kind or key contains this text (the whole
    /// payload's JSON text is searched; case-sensitive).
    #[arg(long, value_name = "TEXT")]
    pub search: Option<String>,

    /// Only jobs in this queue.
    #[arg(long, short = 'q', value_name = "Q")]
    pub queue: Option<String>,

    /// Only jobs of this kind (`shell` or a handler name).
    #[arg(long, value_name = "K")]
    pub kind: Option<String>,

    /// At most this many rows (default 50; 0: no limit, as --all). A
    /// list cut short says how many more there are.
    #[arg(long, short = 'n', value_name = "N", value_parser = parse_limit)]
    pub limit: Option<usize>,

    /// Every matching row, however many (with --json too).
    #[arg(long, conflicts_with = "limit")]
    pub all: bool,

    /// newest: most recent first; due: in the order runners will take them.
    #[arg(long, value_enum, default_value_t = Order::Newest)]
    pub order: Order,

    /// With --json: the values of secret-looking variables, not `<secret>`.
    #[arg(long)]
    pub show_secrets: bool,
}

/// `show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The job's id (`12` or `#12`).
    #[arg(value_name = "ID", value_parser = parse_id, allow_hyphen_values = true)]
    pub id: JobId,

    /// Print the values of secret-looking variables instead of `<secret>`.
    #[arg(long)]
    pub show_secrets: bool,
}

/// The orders `list` offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Order {
    /// Most recent first.
    Newest,
    /// The order runners take them: priority, due time, id.
    Due,
}

/// `logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The job's id (`12` or `#12`).
    #[arg(value_name = "ID", value_parser = parse_id, allow_hyphen_values = true)]
    pub id: JobId,

    /// Keep printing new output until the job finishes.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// `clear`.
#[derive(Debug, Args)]
pub struct ClearArgs {
    /// Also delete pending jobs (work that has not run yet!).
    #[arg(long)]
    pub all: bool,

    /// Only jobs that finished (or, for pending, were added) longer ago than this.
    #[arg(long, value_name = "DUR", allow_hyphen_values = true, value_parser = duration::parse)]
    pub older_than: Option<Duration>,
}

/// `import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// JSON lines from `export`; `-` or nothing reads stdin.
    #[arg(value_name = "FILE|-")]
    pub file: Option<PathBuf>,
}

/// `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use slothqueue::JobState;
    use slothqueue::core::PendingShown;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn ids_are_positive_with_an_optional_hash() {
        assert_eq!(parse_id("12"), Ok(12));
        assert_eq!(parse_id("#12"), Ok(12));
        for bad in ["0", "-1", "abc", "", "#", "+3", "1.0", "99999999999999999999"] {
            assert!(parse_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids_and_keys_are_told_apart() {
        assert_eq!(parse_parent("12"), Ok(Parent::Id(12)));
        assert_eq!(parse_parent("#12"), Ok(Parent::Id(12)));
        assert_eq!(parse_parent("build-7"), Ok(Parent::Key("build-7".into())));
        assert_eq!(parse_parent("12a"), Ok(Parent::Key("12a".into())));
        assert!(parse_parent("0").is_err(), "0 looks like an id and is not one");
        assert!(parse_parent("#0").is_err());
        assert!(parse_parent("").is_err());
    }

    #[test]
    fn state_and_backend_complete_to_their_names() {
        let cmd = Cli::command();
        let values = |arg: &clap::Arg| -> Vec<String> {
            arg.get_possible_values().iter().map(|v| v.get_name().to_owned()).collect()
        };
        let backend = cmd.get_arguments().find(|a| a.get_id() == "backend").unwrap();
        assert_eq!(values(backend), ["sqlite", "redb"]);
        let list = cmd.find_subcommand("list").unwrap();
        let state = list.get_arguments().find(|a| a.get_id() == "state").unwrap();
        assert_eq!(
            values(state),
            ["pending", "running", "done", "failed", "cancelled", "held", "waiting"]
        );
        let mut bash = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Cli::command(),
            "slothqueue",
            &mut bash,
        );
        let bash = String::from_utf8(bash).unwrap();
        assert!(bash.contains("sqlite redb"), "--backend completes to file names");
        let cli = Cli::try_parse_from(["slothqueue", "list", "--state", "DONE"]).unwrap();
        let Command::List(l) = cli.command else { panic!("not list") };
        assert_eq!(l.state, Some(ListState::Is(JobState::Done)));
        for (word, shown) in [("held", PendingShown::Held), ("Waiting", PendingShown::Waiting)] {
            let cli = Cli::try_parse_from(["slothqueue", "list", "--state", word]).unwrap();
            let Command::List(l) = cli.command else { panic!("not list") };
            assert_eq!(l.state, Some(ListState::Shown(shown)), "{word}");
        }
        let cli = Cli::try_parse_from(["slothqueue", "list", "--search", "make backup"]).unwrap();
        let Command::List(l) = cli.command else { panic!("not list") };
        assert_eq!(l.search.as_deref(), Some("make backup"));
        assert!(Cli::try_parse_from(["slothqueue", "list", "--state", "asleep"]).is_err());
    }

    #[test]
    fn serve_accepts_localhost() {
        assert_eq!(parse_addr("localhost:7878"), Ok("127.0.0.1:7878".parse().unwrap()));
        assert_eq!(parse_addr("LOCALHOST:1"), Ok("127.0.0.1:1".parse().unwrap()));
        assert_eq!(parse_addr("[::1]:80"), Ok("[::1]:80".parse().unwrap()));
        for bad in ["localhost", "localhost:x", "evil.example:80", ""] {
            assert!(parse_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags_may_stand_after_the_command() {
        let cli = Cli::try_parse_from([
            "slothqueue",
            "add",
            "sleep 5",
            "--priority",
            "9",
            "--max-runtime",
            "2",
        ])
        .unwrap();
        let Command::Add(add) = cli.command else { panic!("not add") };
        assert_eq!(add.command.as_deref(), Some("sleep 5"));
        assert_eq!(add.settings.priority, Some(9));
        assert_eq!(add.settings.max_runtime, Some(MaxRuntime(Some(Duration::from_secs(2)))));
    }
}
