//! `demo`: slothqueue's stories told by real processes in a temp dir.
//!
//! Every step is this very binary (`current_exe()`) run as a child, its
//! command printed as `$ slothqueue …` and its output shown as it comes, so
//! what the demo shows is what a user would see: the SIGKILL is a real
//! SIGKILL of a real runner, and the job the next runner reclaims is
//! really orphaned. Runs read a simulated load from a file the demo writes,
//! so the tour neither depends on this machine's load nor waits for it.
//! The temp dir is removed at the end, also on Ctrl-C or SIGTERM (after the
//! children have stopped).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, bail};
use slothqueue::runner::unix_signals;
use slothqueue::{Backend, JobId, JobState, OpenOptions, Store};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::Ctx;
use crate::app::Outcome;
use crate::app::exit::Code;

/// The longest the demo waits for any one thing before it gives up.
const PATIENCE: Duration = Duration::from_secs(20);

/// A load above the ceiling, then below it, as in the seed's transcript.
const HIGH_LOAD: &str = "26.59 25.80 24.90 3/412 31337\n";
const LOW_LOAD: &str = "24.42 25.10 24.80 2/410 31338\n";
const IDLE_LOAD: &str = "0.12 0.30 0.41 1/402 31339\n";

/// Runs the tour; cleans up whatever happens.
pub async fn demo(ctx: &Ctx) -> Outcome {
    let dir = tempfile::Builder::new()
        .prefix("slothqueue-demo-")
        .tempdir()
        .context("cannot create a temp dir for the demo")?;
    let tour = Tour::new(dir.path(), ctx.backend)?;
    let mut shutdown = unix_signals()?;
    let outcome = tokio::select! {
        r = tour.all() => r,
        () = shutdown.requested() => {
            let _ = writeln!(io::stdout(), "\n# interrupted: stopping the demo's processes");
            tour.stop_children().await;
            Ok(Code::Interrupted)
        }
    };
    tour.stop_children().await;
    let path = dir.path().to_owned();
    dir.close().with_context(|| format!("cannot remove the demo's temp dir {}", path.display()))?;
    outcome
}

/// The demo's temp dir, queue and running children.
struct Tour {
    exe: PathBuf,
    dir: PathBuf,
    db: PathBuf,
    load: PathBuf,
    children: Arc<Mutex<Vec<u32>>>,
}

impl Tour {
    fn new(dir: &Path, backend: Option<Backend>) -> anyhow::Result<Tour> {
        let exe = std::env::current_exe().context("cannot find this program's path")?;
        let name = if backend == Some(Backend::Redb) { "queue.redb" } else { "queue.db" };
        Ok(Tour {
            exe,
            dir: dir.to_owned(),
            db: dir.join(name),
            load: dir.join("load"),
            children: Arc::new(Mutex::new(Vec::new())),
        })
    }

    async fn all(&self) -> Outcome {
        self.set_load(HIGH_LOAD)?;
        say(&[
            "# slothqueue demo: every command below really runs, in a temp dir removed at the end.",
            "# Runs read a simulated load average from ./load (--load-file), so the gate",
            "# can be shown on any machine; without it they read /proc/loadavg.",
        ])?;
        self.priorities_gate_and_failures().await?;
        self.retry_with_backoff().await?;
        self.kill_nine().await?;
        self.workflow().await?;
        self.lanes_and_holds().await?;
        say(&["", "# That's the tour. `slothqueue --help` has the rest."])?;
        Ok(Code::Success)
    }

    /// The seed's transcript: three jobs, a busy machine, then one success,
    /// one timeout that kills its process group, one exit-code failure.
    async fn priorities_gate_and_failures(&self) -> anyhow::Result<()> {
        say(&[
            "",
            "# 1. Jobs run in priority order, one at a time, only while the load is under the",
            "#    ceiling. A job over its max runtime is killed with its whole process group.",
        ])?;
        self.step(&[
            "add",
            "sleep 5",
            "--priority",
            "9",
            "--max-runtime",
            "2",
            "--max-attempts",
            "1",
        ])
        .await?;
        self.step(&["add", "echo \"rebuilt search index: 412 documents\"", "--priority", "5"])
            .await?;
        self.step(&["add", "exit 3", "--priority", "1", "--max-attempts", "1"]).await?;
        let load = self.load.clone();
        let mut checks = 0;
        let code = self
            .step_watching(
                &[
                    "run",
                    "--load-file",
                    "load",
                    "--load-ceiling",
                    "25",
                    "--check-interval",
                    "1",
                    "--cooldown",
                    "1",
                ],
                move |line| {
                    if line.contains("— waiting") {
                        checks += 1;
                        if checks == 3 {
                            // The machine calms down after three checks.
                            let _ = std::fs::write(&load, LOW_LOAD);
                        }
                    }
                },
            )
            .await?;
        expect_code(code, 1, "the first run")?;
        self.set_load(IDLE_LOAD)?;
        self.step(&["logs", "2"]).await?;
        self.step(&["list"]).await?;
        Ok(())
    }

    /// A job that fails once and then works: the failure schedules a retry
    /// 2 s later instead of spinning, and `show` says why it waits.
    async fn retry_with_backoff(&self) -> anyhow::Result<()> {
        say(&[
            "",
            "# 2. A failure is retried later, with backoff (2s, 4s, 8s, …), not at once.",
            "#    This job fails the first time (no marker file yet) and works the second.",
        ])?;
        self.step(&[
            "add",
            "if [ -e tried ]; then echo 'synced 12 files'; else touch tried; echo 'network unreachable' >&2; exit 1; fi",
        ])
        .await?;
        let id: JobId = 4;
        let code = self.step(&["run", "--load-file", "load"]).await?;
        expect_code(code, 1, "the failing run")?;
        self.step(&["show", "4"]).await?;
        let store = self.store()?;
        let job = store.get(id).await?;
        let wait = job.not_before.duration_since(slothqueue::Clock::now(&slothqueue::SystemClock));
        say(&["", &format!("# … {} later, the retry is due:", format_secs(wait))])?;
        tokio::time::sleep(wait + Duration::from_millis(100)).await;
        let code = self.step(&["run", "--load-file", "load"]).await?;
        expect_code(code, 0, "the retry")?;
        Ok(())
    }

    /// A runner dies with SIGKILL mid-job; the next one reclaims the job
    /// (killing the orphaned process group first) and completes it.
    async fn kill_nine(&self) -> anyhow::Result<()> {
        say(&[
            "",
            "# 3. A runner killed with SIGKILL mid-job loses nothing: its lease names a dead",
            "#    process, so the next runner reclaims the job at once and runs it again.",
        ])?;
        self.step(&["add", "sleep 3; echo 'backup finished' >> backup.log"]).await?;
        let id: JobId = 5;
        say(&["$ slothqueue run --load-file load &"])?;
        let mut runner = self.spawn(&["run", "--load-file", "load"])?;
        let pid = runner.id().context("the background runner has no pid")?;
        say(&[&format!("[1] {pid}")])?;
        let store = self.store()?;
        tokio::time::timeout(PATIENCE, async {
            loop {
                if let Ok(job) = store.get(id).await {
                    if job.state == JobState::Running {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .context("the background runner never started the job")?;
        drop(store);
        tokio::time::sleep(Duration::from_millis(500)).await;
        say(&[&format!("$ kill -9 {pid}")])?;
        let raw = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw);
        let Some(raw) = raw else { bail!("the background runner's pid {pid} is not a pid") };
        rustix::process::kill_process(raw, rustix::process::Signal::KILL)
            .with_context(|| format!("cannot kill the background runner {pid}"))?;
        let _ = runner.wait().await;
        self.forget(pid);
        say(&["[1]+  Killed                  slothqueue run --load-file load"])?;
        self.step(&["status"]).await?;
        let code = self.step(&["run", "--load-file", "load"]).await?;
        expect_code(code, 0, "the reclaiming run")?;
        self.step(&["show", "5"]).await?;
        let log = std::fs::read_to_string(self.dir.join("backup.log")).unwrap_or_default();
        say(&["$ cat backup.log", log.trim_end()])?;
        say(&[
            "# (one line: the first attempt's orphaned process group was killed before it wrote)",
        ])?;
        Ok(())
    }

    /// Three steps that wait for each other: the first fails, which
    /// cancels the other two at once (a `wait` on the last returns 1);
    /// once the cause is fixed, a `retry` of the first brings them back.
    async fn workflow(&self) -> anyhow::Result<()> {
        say(&[
            "",
            "# 4. Steps can wait for each other (--after an id or a key). A step that fails",
            "#    for good cancels the steps after it; `retry` of it brings them back, and",
            "#    `wait` tells a script how it all ended.",
        ])?;
        self.step(&[
            "add",
            "test -e mirror-up || { echo 'mirror unreachable' >&2; exit 1; }; echo 'fetched 3 files'",
            "--key",
            "fetch",
            "--max-attempts",
            "1",
        ])
        .await?;
        self.step(&["add", "echo 'converted 3 files'", "--key", "convert", "--after", "fetch"])
            .await?;
        self.step(&["add", "echo 'published report.pdf'", "--after", "convert"]).await?;
        say(&["$ slothqueue wait 8 --timeout 20s &"])?;
        let waiter = self.spawn(&["wait", "8", "--timeout", "20s"])?;
        let pid = waiter.id().context("the background wait has no pid")?;
        say(&[&format!("[1] {pid}")])?;
        let code = self.step(&["run", "--load-file", "load"]).await?;
        expect_code(code, 1, "the run whose first step fails")?;
        let out = tokio::time::timeout(PATIENCE, waiter.wait_with_output())
            .await
            .context("the background wait did not return")??;
        self.forget(pid);
        let code = out.status.code().unwrap_or(-1);
        say(&[&format!("[1]+  Exit {code}                  slothqueue wait 8 --timeout 20s")])?;
        for text in [&out.stdout, &out.stderr] {
            let text = String::from_utf8_lossy(text);
            if !text.trim().is_empty() {
                say(&[text.trim_end()])?;
            }
        }
        expect_code(code, 1, "the wait on a cancelled step")?;
        self.step(&["show", "8"]).await?;
        say(&["$ touch mirror-up"])?;
        let marker = self.dir.join("mirror-up");
        std::fs::write(&marker, "")
            .with_context(|| format!("cannot write {}", marker.display()))?;
        self.step(&["retry", "6"]).await?;
        let code = self.step(&["run", "--load-file", "load"]).await?;
        expect_code(code, 0, "the run after the retry")?;
        let code = self.step(&["wait", "8"]).await?;
        expect_code(code, 0, "the wait on the finished workflow")?;
        Ok(())
    }

    /// Several jobs at once, a limit, a paused queue and a held job: one
    /// run with three slots starts the two photo jobs the limit lets run
    /// (side by side, as their times show) and the third after, leaves the
    /// paused backup and the held report alone and names them; a resume
    /// and a release, and the next run takes both.
    async fn lanes_and_holds(&self) -> anyhow::Result<()> {
        say(&[
            "",
            "# 5. A runner can run several jobs at once (--slots). A queue can be limited",
            "#    (parallel) or paused for every runner, and one job held back.",
        ])?;
        for n in 1..=3 {
            self.step(&["add", &format!("sleep 1; echo 'resized photo {n}'"), "--queue", "photos"])
                .await?;
        }
        self.step(&["add", "echo 'nightly backup done'", "--queue", "backups"]).await?;
        self.step(&["add", "echo 'sent the weekly report'"]).await?;
        self.step(&["parallel", "2", "--queue", "photos"]).await?;
        self.step(&["pause", "--queue", "backups"]).await?;
        self.step(&["hold", "13"]).await?;
        self.step(&["queues"]).await?;
        let code = self.step(&["run", "--load-file", "load", "--slots", "3"]).await?;
        expect_code(code, 0, "the run with three slots")?;
        say(&[
            "# (#9 and #10 ran side by side; #11 took the first place free in photos;",
            "#  the backup waits on its queue's pause, the report on its hold)",
        ])?;
        self.step(&["show", "12"]).await?;
        self.step(&["resume", "--queue", "backups"]).await?;
        self.step(&["release", "13"]).await?;
        let code = self.step(&["run", "--load-file", "load", "--slots", "3"]).await?;
        expect_code(code, 0, "the run after the resume")?;
        self.step(&["list", "--limit", "5"]).await?;
        Ok(())
    }

    fn store(&self) -> anyhow::Result<Arc<dyn Store>> {
        Ok(slothqueue::open(&self.db, OpenOptions::read_only(None))?)
    }

    fn set_load(&self, text: &str) -> anyhow::Result<()> {
        std::fs::write(&self.load, text)
            .with_context(|| format!("cannot write {}", self.load.display()))
    }

    fn spawn(&self, args: &[&str]) -> anyhow::Result<Child> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(args)
            .current_dir(&self.dir)
            .env("SLOTHQUEUE_DB", &self.db)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd.spawn().with_context(|| format!("cannot start {}", self.exe.display()))?;
        if let Some(pid) = child.id() {
            self.children.lock().unwrap_or_else(PoisonError::into_inner).push(pid);
        }
        Ok(child)
    }

    fn forget(&self, pid: u32) {
        self.children.lock().unwrap_or_else(PoisonError::into_inner).retain(|p| *p != pid);
    }

    /// Prints `$ slothqueue ARGS`, runs it, shows its output; returns its exit code.
    async fn step(&self, args: &[&str]) -> anyhow::Result<i32> {
        self.step_watching(args, |_| {}).await
    }

    /// Like [`Tour::step`], calling `watch` with each line as it arrives.
    async fn step_watching(
        &self,
        args: &[&str],
        mut watch: impl FnMut(&str),
    ) -> anyhow::Result<i32> {
        let shown: Vec<String> = args.iter().map(|a| quote(a)).collect();
        say(&[&format!("$ slothqueue {}", shown.join(" "))])?;
        let mut child = self.spawn(args)?;
        let pid = child.id();
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            bail!("cannot read the output of slothqueue {}", args.join(" "));
        };
        let mut out = BufReader::new(stdout).lines();
        let mut err = BufReader::new(stderr).lines();
        let (mut out_open, mut err_open) = (true, true);
        while out_open || err_open {
            tokio::select! {
                line = out.next_line(), if out_open => match line? {
                    Some(l) => { watch(&l); say(&[&l])?; }
                    None => out_open = false,
                },
                line = err.next_line(), if err_open => match line? {
                    Some(l) => say(&[&l])?,
                    None => err_open = false,
                },
            }
        }
        let status = child.wait().await?;
        if let Some(pid) = pid {
            self.forget(pid);
        }
        let code = status.code().unwrap_or(-1);
        if code != 0 {
            say(&[&format!("(exit code {code})")])?;
        }
        Ok(code)
    }

    /// Asks every child still running to stop (a runner releases its job
    /// and kills the job's group) and waits for them, a bounded time.
    async fn stop_children(&self) {
        let pids: Vec<u32> =
            self.children.lock().unwrap_or_else(PoisonError::into_inner).drain(..).collect();
        for pid in &pids {
            if let Some(p) = i32::try_from(*pid).ok().and_then(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            while pids.iter().any(|p| is_running(*p)) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
    }
}

/// Running and not a zombie.
fn is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state =
                stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some('Z' | 'X') | None)
        }
        Err(_) => false,
    }
}

fn expect_code(code: i32, want: i32, what: &str) -> anyhow::Result<()> {
    if code == want {
        Ok(())
    } else {
        bail!("{what} exited with {code}, expected {want}; the demo stops here")
    }
}

fn say(lines: &[&str]) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    for l in lines {
        writeln!(out, "{l}")?;
    }
    out.flush()?;
    Ok(())
}

fn format_secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// An argument as a POSIX shell would need it quoted.
fn quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:#,+%@".contains(c));
    if plain {
        arg.to_owned()
    } else if arg.contains('\'') && !arg.contains(['"', '$', '`', '\\', '!']) {
        format!("\"{arg}\"")
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_quoted_like_a_shell_needs() {
        assert_eq!(quote("--priority"), "--priority");
        assert_eq!(quote("sleep 5"), "'sleep 5'");
        assert_eq!(quote("echo \"a b\""), "'echo \"a b\"'");
        assert_eq!(quote("it's"), "\"it's\"");
        assert_eq!(quote("it's $HOME"), r"'it'\''s $HOME'");
        assert_eq!(quote(""), "''");
    }
}
