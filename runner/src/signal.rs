//! Asking a runner to stop: a counted shutdown signal, who sent it, and
//! job control.
//!
//! The first request stops the running job's group gracefully (TERM, grace,
//! KILL) and hands the job back; a second one skips the grace. So the signal
//! is a counter, not a flag. Each request also says which signal it was and
//! who sent it ([`ShutdownRequest`]), so that a runner whose own job sent
//! it SIGTERM (`kill $PPID`) can charge the attempt instead of handing the
//! job back uncharged forever (see
//! [`Containment::sent`](crate::Containment::sent)).
//!
//! Which signals count (see [`SHUTDOWN_SIGNALS`]): SIGTERM and SIGINT,
//! always, also when inherited as ignored; SIGHUP (a closed terminal, an ssh
//! drop) and SIGQUIT (Ctrl-\\), and every other signal whose default would
//! kill the runner and leave its job running (SIGUSR1, SIGUSR2, SIGALRM,
//! SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGIO, SIGPWR, SIGSTKFLT) — unless
//! the process inherited it as ignored (`nohup` ignores SIGHUP; a script's
//! `cmd &` ignores SIGQUIT): those stay ignored. The signals a fault raises
//! (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGABRT) are not
//! caught: a runner that dies of one leaves its job to the next runner's
//! start-up reclaim, as does SIGKILL.

use std::sync::{Arc, OnceLock};

use signal_hook::consts::signal as sig;
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use tokio::sync::{mpsc, watch};

use crate::contain::SignalSender;
use crate::error::RunnerError;

/// The signals that count as a shutdown request, but for those inherited
/// as ignored (SIGTERM and SIGINT count even then).
pub const SHUTDOWN_SIGNALS: [i32; 14] = [
    sig::SIGTERM,
    sig::SIGINT,
    sig::SIGHUP,
    sig::SIGQUIT,
    sig::SIGUSR1,
    sig::SIGUSR2,
    sig::SIGALRM,
    sig::SIGVTALRM,
    sig::SIGPROF,
    sig::SIGXCPU,
    sig::SIGXFSZ,
    sig::SIGIO,
    libc::SIGPWR,
    libc::SIGSTKFLT,
];

/// The signals listened for whatever the process inherited.
const ALWAYS: [i32; 2] = [sig::SIGTERM, sig::SIGINT];

/// How many requests a [`ShutdownSignal`] keeps (the first ones).
const KEPT: usize = 16;

/// A set of signals 1..=64, as the masks of `/proc/<pid>/status` write
/// them (bit `n - 1` is signal `n`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SignalSet(u64);

impl SignalSet {
    /// No signal.
    pub const fn empty() -> SignalSet {
        SignalSet(0)
    }

    /// From a `/proc/<pid>/status` mask (`SigIgn:` and the like).
    pub const fn from_mask(mask: u64) -> SignalSet {
        SignalSet(mask)
    }

    /// The signals listed.
    pub fn of(signals: &[i32]) -> SignalSet {
        signals.iter().fold(SignalSet::empty(), |set, &s| set.with(s))
    }

    /// This set and `signo`.
    pub fn with(self, signo: i32) -> SignalSet {
        match u32::try_from(signo) {
            Ok(n @ 1..=64) => SignalSet(self.0 | 1 << (n - 1)),
            _ => self,
        }
    }

    /// Whether `signo` is in the set.
    pub fn contains(self, signo: i32) -> bool {
        matches!(u32::try_from(signo), Ok(n @ 1..=64) if self.0 & (1 << (n - 1)) != 0)
    }

    /// The mask (bit `n - 1` is signal `n`).
    pub const fn mask(self) -> u64 {
        self.0
    }
}

/// The signals this process inherited as ignored, read from
/// `/proc/self/status` (`SigIgn`) the first time it is called and
/// remembered: call it before anything installs a handler (the runner's
/// `catch_inherited_ignores` must call it first too), or a signal caught
/// since reads as not ignored. Empty when it cannot be read.
pub fn inherited_ignores() -> SignalSet {
    static FIRST: OnceLock<SignalSet> = OnceLock::new();
    *FIRST.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("SigIgn:"))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            })
            .map_or(SignalSet::empty(), SignalSet::from_mask)
    })
}

/// One shutdown request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownRequest {
    /// The signal, when a signal asked ([`ShutdownTrigger::trigger`] has
    /// none).
    pub signal: Option<i32>,
    /// Who sent it, when the kernel says (a signal from another process).
    pub sender: Option<SignalSender>,
}

#[derive(Clone, Debug, Default)]
struct Requests {
    count: u32,
    /// The first [`KEPT`] requests.
    kept: Vec<ShutdownRequest>,
}

/// The receiving side: the runner watches it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ShutdownSignal {
    rx: watch::Receiver<Requests>,
}

/// The sending side: each [`trigger`](ShutdownTrigger::trigger) counts as
/// one request (like one Ctrl-C).
#[derive(Clone, Debug)]
pub struct ShutdownTrigger {
    tx: Arc<watch::Sender<Requests>>,
}

impl ShutdownTrigger {
    /// Requests a shutdown; a second call asks for it at once.
    pub fn trigger(&self) {
        self.trigger_with(ShutdownRequest { signal: None, sender: None });
    }

    /// Requests a shutdown, saying which signal and who sent it.
    pub fn trigger_with(&self, request: ShutdownRequest) {
        self.tx.send_modify(|r| {
            r.count = r.count.saturating_add(1);
            if r.kept.len() < KEPT {
                r.kept.push(request);
            }
        });
    }
}

impl ShutdownSignal {
    /// A connected trigger and signal, for embedding and tests.
    pub fn new() -> (ShutdownTrigger, ShutdownSignal) {
        let (tx, rx) = watch::channel(Requests::default());
        (ShutdownTrigger { tx: Arc::new(tx) }, ShutdownSignal { rx })
    }

    /// A signal that never fires (the runner stops only on its own).
    pub fn never() -> ShutdownSignal {
        let (_trigger, signal) = ShutdownSignal::new();
        signal
    }

    /// How many times shutdown was requested so far.
    pub fn count(&self) -> u32 {
        self.rx.borrow().count
    }

    /// Whether shutdown was requested at least once.
    pub fn is_requested(&self) -> bool {
        self.count() > 0
    }

    /// The requests so far, oldest first (the first 16 of them).
    pub fn requests(&self) -> Vec<ShutdownRequest> {
        self.rx.borrow().kept.clone()
    }

    /// Resolves once shutdown has been requested at least `n` times; never
    /// when the trigger is gone without reaching `n`.
    pub async fn reached(&mut self, n: u32) {
        if self.rx.wait_for(|r| r.count >= n).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves once shutdown has been requested.
    pub async fn requested(&mut self) {
        self.reached(1).await;
    }
}

/// Job control asked of the runner by a signal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobControl {
    /// SIGTSTP (Ctrl-Z): stop the running job
    /// ([`Containment::suspend`](crate::Containment::suspend)), then the
    /// runner itself ([`suspend_self`]).
    Suspend,
    /// SIGCONT (`fg`, `bg`): continue the job
    /// ([`Containment::resume`](crate::Containment::resume)). Also comes
    /// when nothing was suspended; continuing a running job is harmless.
    Resume,
}

/// Job-control requests, in the order the signals came. Held by the runner
/// loop alone.
#[derive(Debug)]
pub struct Suspension {
    rx: mpsc::UnboundedReceiver<JobControl>,
}

/// The sending side of a [`Suspension`], for embedding and tests.
#[derive(Clone, Debug)]
pub struct SuspensionTrigger {
    tx: mpsc::UnboundedSender<JobControl>,
}

impl SuspensionTrigger {
    /// Sends one request (dropped when the [`Suspension`] is gone).
    pub fn send(&self, request: JobControl) {
        let _ = self.tx.send(request);
    }
}

impl Suspension {
    /// A connected trigger and suspension.
    pub fn new() -> (SuspensionTrigger, Suspension) {
        let (tx, rx) = mpsc::unbounded_channel();
        (SuspensionTrigger { tx }, Suspension { rx })
    }

    /// One that never asks anything.
    pub fn never() -> Suspension {
        Suspension::new().1
    }

    /// The next request; never resolves once no sender is left.
    pub async fn next(&mut self) -> JobControl {
        match self.rx.recv().await {
            Some(r) => r,
            None => std::future::pending().await,
        }
    }

    /// The next request if one is waiting.
    pub fn try_next(&mut self) -> Option<JobControl> {
        self.rx.try_recv().ok()
    }
}

/// Stops this process (SIGSTOP to itself, as the default action of SIGTSTP
/// would) and returns once it is continued. Call it after
/// [`Containment::suspend`](crate::Containment::suspend) stopped the job.
pub fn suspend_self() -> Result<(), RunnerError> {
    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::STOP)
        .map_err(|e| RunnerError::io("cannot stop the runner", e.into()))
}

/// What [`unix_signals_with`] listens to.
#[derive(Debug)]
pub struct UnixSignals {
    /// Shutdown requests, with their signal and sender.
    pub shutdown: ShutdownSignal,
    /// SIGTSTP and SIGCONT, unless SIGTSTP was in the ignored set.
    pub suspension: Suspension,
    /// The signals listened to.
    pub listening: SignalSet,
    /// A way to ask for the same shutdown without a signal: `run` asks
    /// when it can no longer write its events (a full stdout).
    pub trigger: ShutdownTrigger,
}

/// Listens for the [`SHUTDOWN_SIGNALS`] but those the process inherited as
/// ignored ([`inherited_ignores`]; SIGTERM and SIGINT always); each one
/// counts as a shutdown request. Ctrl-Z keeps its default (the runner stops
/// and its job runs on): a runner that handles [`Suspension`] uses
/// [`unix_signals_with`].
///
/// Installing a handler replaces the disposition the process inherited, so
/// this works also when a supervisor or `nohup`-style launcher started the
/// runner with SIGINT or SIGTERM ignored (a plain background `&` job ignores
/// SIGINT). Must be called inside a tokio runtime; the handlers are in place
/// when it returns.
pub fn unix_signals() -> Result<ShutdownSignal, RunnerError> {
    listen(inherited_ignores(), false).map(|s| s.shutdown)
}

/// Like [`unix_signals`], with the inherited-ignored set given (the lead
/// passes [`inherited_ignores`] taken at start-up), and also SIGTSTP and
/// SIGCONT as [`JobControl`] requests (SIGTSTP not when in `ignored`).
pub fn unix_signals_with(ignored: SignalSet) -> Result<UnixSignals, RunnerError> {
    listen(ignored, true)
}

fn listen(ignored: SignalSet, job_control: bool) -> Result<UnixSignals, RunnerError> {
    let mut list: Vec<i32> = SHUTDOWN_SIGNALS
        .iter()
        .copied()
        .filter(|s| ALWAYS.contains(s) || !ignored.contains(*s))
        .collect();
    if job_control && !ignored.contains(sig::SIGTSTP) {
        list.extend([sig::SIGTSTP, sig::SIGCONT]);
    }
    let mut signals = SignalsInfo::<WithOrigin>::new(&list)
        .map_err(|e| RunnerError::io("cannot listen for signals", e))?;
    let handle = signals.handle();
    let (trigger, shutdown) = ShutdownSignal::new();
    let (control, suspension) = Suspension::new();
    let from_thread = trigger.clone();
    std::thread::Builder::new()
        .name("slothqueue-signals".into())
        .spawn(move || {
            for origin in signals.forever() {
                let sender = origin.process.map(|p| SignalSender::read(p.pid, p.uid));
                match origin.signal {
                    sig::SIGTSTP => control.send(JobControl::Suspend),
                    sig::SIGCONT => control.send(JobControl::Resume),
                    signo => {
                        from_thread.trigger_with(ShutdownRequest { signal: Some(signo), sender })
                    }
                }
            }
        })
        .map_err(|e| RunnerError::io("cannot start the signal listener", e))?;
    let extra = trigger.clone();
    tokio::spawn(async move {
        trigger.tx.closed().await;
        handle.close();
    });
    Ok(UnixSignals { shutdown, suspension, listening: SignalSet::of(&list), trigger: extra })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Tests that raise signals run in a child copy of the test binary, so
    /// that a handler (or its absence) never touches the other tests.
    const CHILD: &str = "SLOTHQUEUE_TEST_SIGNAL_CHILD";
    const WAIT: Duration = Duration::from_secs(20);

    fn in_child(name: &str) -> bool {
        std::env::var(CHILD).is_ok_and(|v| v == name)
    }

    fn child(name: &str, launcher: Option<&str>) -> std::process::Command {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = match launcher {
            Some(l) => {
                let mut c = std::process::Command::new(l);
                c.arg(exe);
                c
            }
            None => std::process::Command::new(exe),
        };
        cmd.args(["--exact", &format!("signal::tests::{name}"), "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD, name);
        cmd
    }

    fn run_child(name: &str, launcher: Option<&str>) {
        let out = child(name, launcher).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child {name} failed: {out:?}");
        assert!(text.contains("1 passed"), "child {name} ran nothing: {text}");
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    fn raise(signo: i32) {
        let sig = rustix::process::Signal::from_named_raw(signo).unwrap();
        rustix::process::kill_process(rustix::process::getpid(), sig).unwrap();
    }

    fn ignored_now() -> SignalSet {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let v = status.lines().find_map(|l| l.strip_prefix("SigIgn:")).unwrap();
        SignalSet::from_mask(u64::from_str_radix(v.trim(), 16).unwrap())
    }

    #[tokio::test]
    async fn counts_requests() {
        let (trigger, mut signal) = ShutdownSignal::new();
        assert!(!signal.is_requested());
        trigger.trigger();
        signal.requested().await;
        trigger.trigger();
        signal.reached(2).await;
        assert_eq!(signal.count(), 2);
        assert_eq!(signal.requests(), vec![ShutdownRequest { signal: None, sender: None }; 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn never_never_fires() {
        let mut signal = ShutdownSignal::never();
        let waited =
            tokio::time::timeout(std::time::Duration::from_secs(3600), signal.requested()).await;
        assert!(waited.is_err());
    }

    #[test]
    fn signal_sets_follow_the_proc_masks() {
        let set = SignalSet::of(&[sig::SIGHUP, sig::SIGQUIT]);
        assert_eq!(set.mask(), 0b101);
        assert!(set.contains(sig::SIGHUP) && !set.contains(sig::SIGINT));
        assert!(!set.contains(0) && !set.contains(65) && !set.contains(-1));
        assert_eq!(set.with(0).with(99), set);
        for s in SHUTDOWN_SIGNALS {
            assert!(!signal_hook::consts::FORBIDDEN.contains(&s), "signal {s} cannot be caught");
        }
    }

    #[test]
    fn hup_quit_and_the_other_fatal_signals_count_with_their_sender() {
        run_child("child_counts_signals", None);
    }

    #[test]
    fn child_counts_signals() {
        if !in_child("child_counts_signals") {
            return;
        }
        rt().block_on(async {
            let mut s = unix_signals_with(SignalSet::empty()).unwrap();
            let mut n = 0;
            for signo in [sig::SIGHUP, sig::SIGQUIT, sig::SIGUSR1, sig::SIGALRM, sig::SIGTERM] {
                assert!(s.listening.contains(signo));
                raise(signo);
                n += 1;
                tokio::time::timeout(WAIT, s.shutdown.reached(n)).await.unwrap();
            }
            let got: Vec<Option<i32>> = s.shutdown.requests().iter().map(|r| r.signal).collect();
            assert_eq!(
                got,
                [sig::SIGHUP, sig::SIGQUIT, sig::SIGUSR1, sig::SIGALRM, sig::SIGTERM].map(Some)
            );
            let me = std::process::id() as i32;
            for r in s.shutdown.requests() {
                assert_eq!(r.sender.map(|s| s.pid), Some(me), "self-sent");
            }
            assert_eq!(s.suspension.try_next(), None);
        });
    }

    #[test]
    fn a_hup_inherited_as_ignored_stays_ignored() {
        run_child("child_under_nohup", Some("nohup"));
    }

    #[test]
    fn child_under_nohup() {
        if !in_child("child_under_nohup") {
            return;
        }
        assert!(ignored_now().contains(sig::SIGHUP), "nohup did not ignore SIGHUP");
        rt().block_on(async {
            assert!(inherited_ignores().contains(sig::SIGHUP));
            let mut shutdown = unix_signals().unwrap();
            assert!(ignored_now().contains(sig::SIGHUP), "a handler replaced the ignore");
            raise(sig::SIGHUP); // ignored by the kernel: nothing to wait for
            raise(sig::SIGUSR2);
            tokio::time::timeout(WAIT, shutdown.reached(1)).await.unwrap();
            let got: Vec<Option<i32>> = shutdown.requests().iter().map(|r| r.signal).collect();
            assert_eq!(got, [Some(sig::SIGUSR2)]);
        });
    }

    #[tokio::test]
    async fn tstp_and_cont_are_job_control_not_shutdown() {
        let mut c = child("child_job_control", None).stdout(std::process::Stdio::piped()).spawn();
        let c = c.as_mut().unwrap();
        let pid = c.id() as i32;
        // The child stops itself after the Suspend request: continue it.
        let stopped = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('T'))
            })
        };
        let deadline = tokio::time::Instant::now() + WAIT;
        while !stopped(pid) {
            assert!(tokio::time::Instant::now() < deadline, "the child never stopped itself");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let p = rustix::process::Pid::from_raw(pid).unwrap();
        rustix::process::kill_process(p, rustix::process::Signal::CONT).unwrap();
        let status = c.wait().unwrap();
        assert!(status.success(), "child failed: {status:?}");
    }

    #[test]
    fn child_job_control() {
        if !in_child("child_job_control") {
            return;
        }
        rt().block_on(async {
            let mut s = unix_signals_with(SignalSet::empty()).unwrap();
            raise(sig::SIGTSTP);
            let got = tokio::time::timeout(WAIT, s.suspension.next()).await.unwrap();
            assert_eq!(got, JobControl::Suspend);
            suspend_self().unwrap(); // the parent continues us
            let got = tokio::time::timeout(WAIT, s.suspension.next()).await.unwrap();
            assert_eq!(got, JobControl::Resume);
            assert_eq!(s.shutdown.count(), 0);
        });
    }

    #[test]
    fn a_job_sending_term_is_recognised_as_the_attempts() {
        run_child("child_term_from_job", None);
    }

    #[test]
    fn child_term_from_job() {
        if !in_child("child_term_from_job") {
            return;
        }
        rt().block_on(async {
            let marker = "signal-test/term-from-job";
            let containment = crate::Containment::new(7, 1, marker);
            let mut shutdown = unix_signals().unwrap();
            let mut cmd = tokio::process::Command::new("sh");
            // `read` keeps the sender alive until we close its stdin.
            cmd.args(["-c", "kill -TERM $PPID; read x"])
                .env(crate::contain::LEASE_VAR, marker)
                .stdin(std::process::Stdio::piped())
                .process_group(0);
            containment.join_before_exec(&mut cmd);
            let mut job = cmd.spawn().unwrap();
            containment.spawned(job.id().unwrap());
            tokio::time::timeout(WAIT, shutdown.requested()).await.unwrap();
            let req = &shutdown.requests()[0];
            assert_eq!(req.signal, Some(sig::SIGTERM));
            let sender = req.sender.clone().unwrap();
            assert_eq!(sender.pid, job.id().unwrap() as i32);
            assert_eq!(sender.lease_marker.as_deref(), Some(marker));
            assert!(containment.sent(&sender));
            assert!(containment.contains(sender.pid));
            let stranger = crate::Containment::without_cgroup("signal-test/another");
            assert!(!stranger.sent(&sender));
            drop(job.stdin.take());
            job.wait().await.unwrap();
            // Gone, it is still recognised by what was read on arrival.
            assert!(containment.sent(&sender));
            assert!(containment.stop_all(Duration::from_millis(100)).await.is_clean());
        });
    }
}
