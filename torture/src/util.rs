//! The harness's plumbing: a seeded random source, waiting on events with
//! deadlines, and a registry of the processes a scenario started, which
//! kills every one of them (and every job they left) however the scenario
//! ends.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustix::process::{Pid, Signal};

/// The environment variable every process the harness starts carries (and
/// passes on to the jobs its runners start), so that a final sweep finds
/// every process a scenario left behind.
pub const TAG_VAR: &str = "SQ_TORTURE_TAG";

/// splitmix64: small, seedable, good enough to pick victims and delays.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo { lo } else { lo + self.next_u64() % (hi - lo) }
    }

    /// True with probability `num/den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.range(0, den) < num
    }

    /// A derived generator, so each scenario's choices depend only on the
    /// seed and its own name, not on what ran before it.
    pub fn fork(&self, label: &str) -> Rng {
        let mut h = self.0;
        for b in label.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
        let mut r = Rng(h);
        r.next_u64();
        r
    }
}

/// How often conditions are looked at while waiting for them.
const POLL: Duration = Duration::from_millis(15);

/// Waits until `check` answers `Some`, looking every few milliseconds, for
/// at most `limit`; an error naming `what` after that.
pub fn wait_for<T>(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if start.elapsed() > limit {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(POLL);
    }
}

/// A short pause of a random length: the jitter that makes a kill land at
/// a random point of whatever the victim is doing (not a wait for time to
/// pass: nothing depends on its length).
pub fn jitter(rng: &mut Rng, max_ms: u64) {
    std::thread::sleep(Duration::from_millis(rng.range(0, max_ms + 1)));
}

/// How a process ended, with what it printed.
#[derive(Clone, Debug)]
pub struct Ended {
    pub name: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Ended {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    pub fn signal(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal()
    }

    /// A Rust panic: exit code 101, a panic message, or death by SIGABRT
    /// or SIGSEGV when no crash was asked for.
    pub fn panicked(&self, abort_expected: bool) -> bool {
        self.code() == Some(101)
            || self.stderr.contains("panicked at")
            || matches!(self.signal(), Some(6) if !abort_expected)
            || self.signal() == Some(11)
    }

    pub fn describe(&self) -> String {
        let last = self.stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        format!("{} ended with {} (stderr: {last})", self.name, self.status)
    }
}

/// One process started by a scenario.
pub struct Managed {
    pub name: String,
    pub child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Managed {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

/// Every process a scenario started. Dropping it kills them all, then
/// every process still carrying the scenario's tag (orphaned jobs).
pub struct Procs {
    pub dir: PathBuf,
    pub tag: String,
    live: Vec<Managed>,
    count: usize,
    /// Processes that ended, with their output.
    pub ended: Vec<Ended>,
}

impl Procs {
    pub fn new(dir: &Path, tag: &str) -> Result<Procs> {
        let dir = dir.join("procs");
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Procs { dir, tag: tag.to_owned(), live: Vec::new(), count: 0, ended: Vec::new() })
    }

    /// Starts `cmd` in its own process group, tagged, stdin from
    /// /dev/null, output to files under the scenario's directory.
    pub fn spawn(&mut self, name: &str, mut cmd: Command) -> Result<i32> {
        self.count += 1;
        let out = self.dir.join(format!("{:03}-{name}.out", self.count));
        let err = self.dir.join(format!("{:03}-{name}.err", self.count));
        let o =
            fs::File::create(&out).with_context(|| format!("cannot create {}", out.display()))?;
        let e =
            fs::File::create(&err).with_context(|| format!("cannot create {}", err.display()))?;
        use std::os::unix::process::CommandExt;
        cmd.env(TAG_VAR, &self.tag)
            .stdin(Stdio::null())
            .stdout(Stdio::from(o))
            .stderr(Stdio::from(e))
            .process_group(0);
        let child = cmd.spawn().with_context(|| format!("cannot start {name}"))?;
        let pid = child.id() as i32;
        self.live.push(Managed { name: name.to_owned(), child, out, err });
        Ok(pid)
    }

    /// What the live process `pid` has printed on stdout so far.
    pub fn stdout_of(&self, pid: i32) -> Result<String> {
        match self.live.iter().find(|m| m.pid() == pid) {
            Some(m) => read_or_empty(&m.out),
            None => bail!("process {pid} is not running"),
        }
    }

    /// The last `lines` lines of what the live process `pid` printed on
    /// stdout and stderr, and whether it still runs: what a scenario that
    /// timed out waiting on it reports, so that a rare failure can be read.
    pub fn tail_of(&mut self, pid: i32, lines: usize) -> String {
        let Some(m) = self.live.iter_mut().find(|m| m.pid() == pid) else {
            return format!("process {pid} is not one of this scenario's");
        };
        let state = match m.child.try_wait() {
            Ok(None) => "still running".to_owned(),
            Ok(Some(status)) => format!("ended: {status}"),
            Err(e) => format!("cannot tell whether it runs: {e}"),
        };
        let tail = |path: &Path| {
            let text = read_or_empty(path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n    ")
        };
        format!(
            "{} ({state})\n  stdout:\n    {}\n  stderr:\n    {}",
            m.name,
            tail(&m.out),
            tail(&m.err)
        )
    }

    /// Sends `sig` to the process `pid` alone.
    pub fn signal(&self, pid: i32, sig: Signal) -> Result<()> {
        let p = Pid::from_raw(pid).context("bad pid")?;
        rustix::process::kill_process(p, sig).with_context(|| format!("cannot signal {pid}"))
    }

    /// Sends `sig` to the process group led by `pid`.
    pub fn signal_group(&self, pid: i32, sig: Signal) -> Result<()> {
        let p = Pid::from_raw(pid).context("bad pid")?;
        rustix::process::kill_process_group(p, sig)
            .with_context(|| format!("cannot signal group {pid}"))
    }

    /// Reaps every process that has exited; returns them.
    pub fn reap(&mut self) -> Result<Vec<Ended>> {
        let mut done = Vec::new();
        let mut i = 0;
        while i < self.live.len() {
            if self.live[i].child.try_wait().context("cannot wait for a child")?.is_some() {
                let m = self.live.swap_remove(i);
                done.push(finish(m)?);
            } else {
                i += 1;
            }
        }
        self.ended.extend(done.iter().cloned());
        Ok(done)
    }

    /// Waits for `pid` to exit, at most `limit`.
    pub fn wait(&mut self, pid: i32, limit: Duration) -> Result<Ended> {
        let Some(i) = self.live.iter().position(|m| m.pid() == pid) else {
            bail!("process {pid} is not one of ours (or was already reaped)");
        };
        let name = self.live[i].name.clone();
        let start = Instant::now();
        loop {
            if self.live[i].child.try_wait().context("cannot wait for a child")?.is_some() {
                let m = self.live.swap_remove(i);
                let e = finish(m)?;
                self.ended.push(e.clone());
                return Ok(e);
            }
            if start.elapsed() > limit {
                bail!("{name} (pid {pid}) did not exit within {limit:?}");
            }
            std::thread::sleep(POLL);
        }
    }

    /// Kills `pid`'s whole group with SIGKILL and reaps it.
    pub fn kill(&mut self, pid: i32) -> Result<Ended> {
        let _ = self.signal_group(pid, Signal::KILL);
        self.wait(pid, Duration::from_secs(10))
    }

    /// Kills everything: our processes, then tagged strays. Returns how
    /// many strays (processes not started by us directly) were found.
    pub fn shutdown(&mut self) -> usize {
        for m in &self.live {
            if let Some(p) = Pid::from_raw(m.pid()) {
                let _ = rustix::process::kill_process_group(p, Signal::KILL);
            }
        }
        for m in std::mem::take(&mut self.live) {
            let mut m = m;
            let _ = m.child.wait();
            if let Ok(e) = finish(m) {
                self.ended.push(e);
            }
        }
        kill_tagged(&self.tag)
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn finish(mut m: Managed) -> Result<Ended> {
    let status = m.child.wait().context("cannot wait for a child")?;
    let stdout = fs::read_to_string(&m.out).unwrap_or_default();
    let stderr = fs::read_to_string(&m.err).unwrap_or_default();
    Ok(Ended { name: m.name, status, stdout, stderr })
}

/// The pids of live processes whose environment carries `TAG_VAR=tag`.
pub fn tagged(tag: &str) -> Vec<i32> {
    let needle = format!("{TAG_VAR}={tag}");
    let me = std::process::id() as i32;
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let env = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) && !is_zombie(*pid)
        })
        .collect()
}

/// Whether `pid` is a zombie (or gone).
pub fn is_zombie(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().next()) == Some("Z"),
        Err(_) => true,
    }
}

/// Whether a live (not zombie) process `pid` exists.
pub fn alive(pid: i32) -> bool {
    !is_zombie(pid)
}

/// Live processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(s) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            let Some(i) = s.rfind(')') else { return false };
            let f: Vec<&str> = s[i + 1..].split_whitespace().collect();
            f.first() != Some(&"Z") && f.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
        })
        .collect()
}

/// SIGKILLs every live tagged process; returns how many there were.
pub fn kill_tagged(tag: &str) -> usize {
    let pids = tagged(tag);
    for pid in &pids {
        if let Some(p) = Pid::from_raw(*pid) {
            let _ = rustix::process::kill_process(p, Signal::KILL);
        }
    }
    pids.len()
}

/// Runs a command to the end with a deadline (killing its group after it),
/// tagged, stdin from /dev/null; its output captured.
pub fn run_capture(name: &str, mut cmd: Command, limit: Duration, tag: &str) -> Result<Ended> {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().context("cannot create a temp dir")?;
    let out = dir.path().join("out");
    let err = dir.path().join("err");
    cmd.env(TAG_VAR, tag)
        .stdin(Stdio::null())
        .stdout(Stdio::from(fs::File::create(&out).context("cannot create a capture file")?))
        .stderr(Stdio::from(fs::File::create(&err).context("cannot create a capture file")?))
        .process_group(0);
    let mut child = cmd.spawn().with_context(|| format!("cannot start {name}"))?;
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().context("cannot wait")? {
            break st;
        }
        if start.elapsed() > limit {
            if let Some(p) = Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process_group(p, Signal::KILL);
            }
            let _ = child.wait();
            bail!("{name} hung: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ok(Ended {
        name: name.to_owned(),
        status,
        stdout: fs::read_to_string(&out).unwrap_or_default(),
        stderr: fs::read_to_string(&err).unwrap_or_default(),
    })
}

/// Appends a line to a file (O_APPEND), creating it.
pub fn append_line(path: &Path, line: &str) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    writeln!(f, "{line}").with_context(|| format!("cannot write {}", path.display()))
}

/// Reads a file that may not exist yet as text ("" when missing).
pub fn read_or_empty(path: &Path) -> Result<String> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Shell-quotes `s` with single quotes.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The wall clock in nanoseconds since the epoch (for history records the
/// harness writes itself).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
