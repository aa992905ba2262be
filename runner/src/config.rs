//! How a runner behaves: [`Mode`] and [`RunnerConfig`], the knobs a caller
//! sets before a run. Its own file so that the loop (`run/`) and the
//! [`Runner`](crate::Runner) that starts it can both read it without
//! reading each other.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use slothqueue_core::gpu::GpuOffer;
use slothqueue_core::{Clock, Limits, LivenessJudge, Owner, RefusedKind, SystemClock};

use crate::exec::{DEFAULT_KILL_GRACE, DEFAULT_LOG_CAP};
use crate::gate::Gate;
use crate::gpu::DriverSight;
use crate::owner::{ProcJudge, this_process_owner};

/// The poll of a follow-mode runner whose queue file is watched
/// ([`RunnerConfig::watch_file`]): only a fallback for a notification the
/// kernel did not deliver (a network filesystem written from another
/// host). A minute, because an idle runner wakes that often anyway to
/// refresh its record for `status`, so the fallback costs no wake-up of
/// its own.
pub const WATCHED_POLL: Duration = Duration::from_secs(60);

/// When the runner stops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Run everything that is due, then exit (the default).
    #[default]
    Drain,
    /// Run at most one job.
    Once,
    /// Never exit on its own: when nothing is due, sleep until the next due
    /// time, a poll interval, or a wake-up.
    Follow,
}

/// How a runner behaves. [`RunnerConfig::new`] gives the defaults; set
/// fields directly.
pub struct RunnerConfig {
    /// Drain, once or follow.
    pub mode: Mode,
    /// Queues served; empty for all.
    pub queues: Vec<String>,
    /// How many jobs this runner runs at once (`--slots N`, default 1; 0
    /// counts as 1). Each has its own lease, heartbeat, log, max runtime
    /// and process group; the gates are read before every start.
    pub slots: usize,
    /// When a gate closes while jobs run, stop their processes (SIGSTOP)
    /// and continue them (SIGCONT) once it opens, instead of letting them
    /// run on (`--suspend-when-gated`; default `false`). Their leases are
    /// kept meanwhile, and the stopped time is not counted against max
    /// runtime.
    pub suspend_when_gated: bool,
    /// Checked in order before each job; all must be open.
    pub gates: Vec<Box<dyn Gate>>,
    /// Wait between gate checks while a gate holds (default 1 s).
    pub check_interval: Duration,
    /// Pause before a job starts, counted from the later of the last
    /// start and the last end (default 0). With one slot that is the gap
    /// between one job's end and the next one's start, as before slots;
    /// with more it also spaces the starts.
    pub cooldown: Duration,
    /// In follow mode, look for work at least this often even when nothing
    /// is due: other processes add jobs without waking us (default 5 s).
    /// While [`RunnerConfig::watch_file`] is watched, at least
    /// [`WATCHED_POLL`]: the poll is then only a fallback.
    pub poll_interval: Duration,
    /// In follow mode, the queue file whose changes wake the runner at
    /// once, so that a job another process adds starts within
    /// milliseconds, not at the next poll, and an idle runner sleeps
    /// between changes instead of polling (see [`QueueWatch`](crate::QueueWatch):
    /// the store's own notifications, or writes to the files the store
    /// names, `Store::watched_files`; this path names the queue in the
    /// runner's warning). A
    /// change wakes it at once and again 5, 25, 125 and 625 ms later (a
    /// commit is notified before it can be read); its own commits wake it
    /// too, for looks that find nothing new. Where the watch cannot be made the runner says why and
    /// polls every `poll_interval`. Default `None`: only the poll and
    /// [`Runner::waker`](crate::Runner::waker) wake it.
    pub watch_file: Option<PathBuf>,
    /// Wait before retrying when the queue file is busy (default 1 s).
    pub busy_pause: Duration,
    /// Heartbeat period; `None` for a third of the lease the claim gave.
    pub heartbeat_interval: Option<Duration>,
    /// Between heartbeats, how often the running job is read back to see a
    /// requested cancel or a lost lease (default 1 s). A read costs no
    /// fsync, unlike a heartbeat, so a cancel lands in about a second
    /// without a durable write every second.
    pub cancel_check_interval: Duration,
    /// A shell command run after each job (`--on-finish`).
    pub on_finish: Option<String>,
    /// How long `on_finish` may run before its group is killed (default 60 s).
    pub on_finish_timeout: Duration,
    /// Where per-job logs go (`<log_dir>/<id>.log`).
    pub log_dir: PathBuf,
    /// Most bytes of output kept per job (default 1 MiB).
    pub log_cap_bytes: u64,
    /// Time between TERM and KILL when stopping a job (default 2 s).
    pub kill_grace: Duration,
    /// Wall time for the store.
    pub clock: Arc<dyn Clock>,
    /// Judges other owners' liveness (default: [`ProcJudge`]).
    pub judge: Arc<dyn LivenessJudge>,
    /// This runner's identity (default: [`this_process_owner`]).
    pub owner: Owner,
    /// Whether each attempt gets a cgroup of its own where one can be
    /// written (default `true`); without, its processes are found by group,
    /// lease marker and parent chain (see [`Containment`](crate::Containment)).
    pub cgroups: bool,
    /// The limits of jobs that do not set their own (`run --nice`,
    /// `--ionice`, `--memory-max`, `--cpu-weight`; default none). A shell
    /// job's own limits win field by field; a handler job gets these only
    /// (its payload is its handler's). A niceness and I/O class nobody set
    /// are `DEFAULT_NICE` and `DEFAULT_IO_CLASS` (see docs/limits.md).
    pub limits: Limits,
    /// How this runner sees its host's GPUs and hands them out (`run
    /// --gpu-file`, `--gpu-busy-above`; default NVML, else `nvidia-smi`, asked only
    /// when a job that needs GPUs is a candidate). `None`: jobs that need
    /// GPUs are left to other runners. See `slothqueue_core::gpu`.
    pub gpus: Option<GpuOffer>,
    /// Attempts that hold no GPU get `CUDA_VISIBLE_DEVICES` empty, so they
    /// cannot reach the GPUs other jobs hold (`run --hide-gpus`; default
    /// `false`: a job queued without `--gpus` runs as it would by hand).
    pub hide_gpus: bool,
    /// The handlers [`Runner::register_handlers`](crate::Runner::register_handlers)
    /// refused, with why, for the runner's record (what `show` says).
    pub(crate) refused: Vec<RefusedKind>,
}

impl RunnerConfig {
    /// The defaults: drain all queues, no gates, logs in `log_dir`.
    pub fn new(log_dir: impl Into<PathBuf>) -> Self {
        RunnerConfig {
            mode: Mode::Drain,
            queues: Vec::new(),
            slots: 1,
            suspend_when_gated: false,
            gates: Vec::new(),
            check_interval: Duration::from_secs(1),
            cooldown: Duration::ZERO,
            poll_interval: Duration::from_secs(5),
            watch_file: None,
            busy_pause: Duration::from_secs(1),
            heartbeat_interval: None,
            cancel_check_interval: Duration::from_secs(1),
            on_finish: None,
            on_finish_timeout: Duration::from_secs(60),
            log_dir: log_dir.into(),
            log_cap_bytes: DEFAULT_LOG_CAP,
            kill_grace: DEFAULT_KILL_GRACE,
            clock: Arc::new(SystemClock),
            judge: Arc::new(ProcJudge::new()),
            owner: this_process_owner(),
            cgroups: true,
            limits: Limits::default(),
            gpus: Some(GpuOffer::new(Arc::new(DriverSight::new()))),
            hide_gpus: false,
            refused: Vec::new(),
        }
    }
}
