//! `slothqueue top` driven the way a person uses it: the real binary in a
//! real terminal (tmux, on a private socket, 120×40), keys sent with
//! `send-keys`, the screen read back with `capture-pane -p`, every wait a
//! poll of the screen against a deadline. A runner started by the test
//! runs what `add` queues; `top` must show the job running within a
//! second of `add`, cancel it after a confirmed key (checked through
//! `slothqueue --json show`), and give the terminal back as it found it
//! on `q` and on SIGTERM: the alternate screen left (the shell's earlier
//! output visible again) and `stty -g` as before.
//!
//! Two frames are saved under `target/top-frames/` for a person to look at.
//!
//! Without tmux the test says SKIPPED and passes, except under `CI`, where
//! a missing tmux fails it.
#![cfg(feature = "top")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly on purpose; a panic is the test's report"
)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_slothqueue");

/// The shell's prompt inside the pane, to know it is back (the pane's
/// text comes back without trailing spaces, so it is looked for without
/// its own).
const PROMPT: &str = "sq-shell$ ";

/// A tmux server of this test's own, ended when the test ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// `tmux` on this test's private socket.
    fn command(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.args(["-L", &self.socket, "-f", "/dev/null"]);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = self.command().args(args).output().unwrap();
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    }

    /// Types `text` and Enter into the shell.
    fn line(&self, text: &str) {
        self.run(&["send-keys", "-t", "top", "-l", text]);
        self.run(&["send-keys", "-t", "top", "Enter"]);
    }

    /// Sends one key (tmux's name for it: `c`, `y`, `Enter`, `q`).
    fn key(&self, key: &str) {
        self.run(&["send-keys", "-t", "top", key]);
    }

    /// The visible screen, as text.
    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Polls the screen until `cond` holds, at most `within`; the screen
    /// that satisfied it.
    fn wait_screen(&self, what: &str, within: Duration, cond: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = poll(within, || {
            last = self.screen();
            cond(&last)
        });
        assert!(found, "timed out after {within:?} waiting for {what}; the screen:\n{last}");
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

/// Calls `cond` every 20 ms until it holds or `within` has passed.
#[expect(
    clippy::disallowed_methods,
    reason = "a deadline on the wall clock and a short poll interval: the test waits on the screen, not on time"
)]
fn poll(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether tmux can be run here; without it, SKIPPED (a failure under CI).
fn have_tmux() -> bool {
    if Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success()) {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but tmux cannot be run: install tmux");
    #[expect(clippy::print_stderr, reason = "a skipped test says so loudly")]
    let () = eprintln!(
        "SKIPPED: `slothqueue top` in tmux, for want of tmux (install it to run this test)"
    );
    false
}

/// The environment every process of the test runs in.
fn env_of(cmd: &mut Command, home: &Path) {
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", home)
        .env("TZ", "UTC")
        .env("NO_COLOR", "1")
        .env("USER", "ana")
        .current_dir(home);
}

fn slothqueue(home: &Path, db: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    env_of(&mut cmd, home);
    cmd.arg("--db").arg(db).args(args).stdin(Stdio::null());
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "slothqueue {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// `slothqueue --json show ID`, as JSON.
fn show(home: &Path, db: &Path, id: u64) -> serde_json::Value {
    let out = slothqueue(home, db, &["--json", "show", &id.to_string()]);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Where the frames go: `target/top-frames/`.
fn frames_dir() -> PathBuf {
    let target = PathBuf::from(BIN)
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "target"))
        .map(Path::to_path_buf)
        .unwrap_or_else(|| std::env::temp_dir().join("slothqueue-target"));
    let dir = target.join("top-frames");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The runner the test starts, killed when the test ends.
struct Runner(Child);

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The pane's line that shows job `id` in the list, if any.
fn row_of(screen: &str, id: u64) -> Option<&str> {
    let tag = format!("#{id} ");
    screen.lines().find(|l| l.trim_start_matches(['>', ' ']).starts_with(&tag))
}

/// The shell is back: top's title gone, the prompt there, and the output
/// written before top started visible again (the alternate screen left).
fn shell_is_back(screen: &str, before: &str) -> bool {
    !screen.contains("slothqueue top ·")
        && screen.contains(before)
        && screen.contains(PROMPT.trim_end())
}

/// Waits until the shell waits for a command: its prompt is the pane's
/// last line, alone.
fn wait_prompt(tmux: &Tmux) {
    tmux.wait_screen("the shell's prompt", Duration::from_secs(20), |s| {
        s.lines().rev().find(|l| !l.trim().is_empty()) == Some(PROMPT.trim_end())
    });
}

/// Asks the shell in the pane for `stty -g` into `file`, and waits for
/// it and for the prompt after it.
fn stty_into(tmux: &Tmux, dir: &Path, file: &str) -> String {
    wait_prompt(tmux);
    let path = dir.join(file);
    tmux.line(&format!("stty -g > {file}.tmp && mv {file}.tmp {file}"));
    assert!(poll(Duration::from_secs(20), || path.exists()), "the shell wrote no {file}");
    wait_prompt(tmux);
    std::fs::read_to_string(&path).unwrap()
}

#[test]
fn top_shows_a_job_start_cancels_it_on_a_confirmed_key_and_gives_the_terminal_back() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::Builder::new().prefix("sq-top-").tempdir().unwrap();
    let home = dir.path();
    let db = home.join("queue.db");
    std::fs::write(home.join("load"), "0.01 0.01 0.01 1/100 1\n").unwrap();

    // The runner creates the queue and waits for jobs; a short lease so
    // that its heartbeat (a third of it) sees the cancel soon.
    let mut runner = Command::new(BIN);
    env_of(&mut runner, home);
    runner
        .arg("--db")
        .arg(&db)
        .args(["run", "--follow", "--lease", "3s", "--load-file", "load", "--load-ceiling", "25"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _runner = Runner(runner.spawn().unwrap());
    assert!(poll(Duration::from_secs(20), || db.exists()), "the runner made no queue");

    let tmux = Tmux { socket: format!("sq-top-{}", std::process::id()) };
    // A plain sh with a known prompt and the test's environment; TERM is
    // the one tmux gives its panes.
    let shell = format!(
        "exec env -i PATH='{}' HOME='{}' TZ=UTC USER=ana TERM=\"$TERM\" PS1='{PROMPT}' sh",
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        home.display()
    );
    let home_arg = home.to_str().unwrap();
    tmux.run(&["new-session", "-d", "-s", "top", "-x", "120", "-y", "40", "-c", home_arg, &shell]);
    tmux.wait_screen("the shell's prompt", Duration::from_secs(10), |s| {
        s.contains(PROMPT.trim_end())
    });
    let stty_before = stty_into(&tmux, home, "stty-before");
    // Output written before top starts, which must be there again after.
    let earlier = "earlier-output-1234";
    tmux.line("echo earlier-output-$((1000+234))");
    tmux.wait_screen("the earlier output", Duration::from_secs(20), |s| {
        s.lines().any(|l| l == earlier)
    });
    wait_prompt(&tmux);

    let top = format!("{BIN} --db {} top", db.display());
    tmux.line(&top);
    tmux.wait_screen("top's first frame, the runner in it", Duration::from_secs(20), |s| {
        s.contains("slothqueue top ·") && s.contains("runner pid")
    });

    // A job added by the CLI shows as running within a second.
    slothqueue(home, &db, &["add", "sleep 300"]);
    tmux.wait_screen("job #1 running, within a second of add", Duration::from_secs(1), |s| {
        row_of(s, 1).is_some_and(|r| r.contains("running"))
    });
    // The frame for a person: once the runner's own line has caught up
    // (its record is a commit of its own, just after the claim's).
    let running = tmux.wait_screen("the runner's line naming #1", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.starts_with("runner pid") && l.contains("#1"))
            && row_of(s, 1).is_some_and(|r| r.contains("running"))
    });
    let frames = frames_dir();
    std::fs::write(frames.join("list-running.txt"), &running).unwrap();

    // Its screen, then cancel: asked first, done on `y`.
    tmux.key("Enter");
    tmux.wait_screen("job #1's screen", Duration::from_secs(10), |s| {
        s.contains("#1 running") && s.contains("trail")
    });
    tmux.key("c");
    let asked = tmux.wait_screen("the cancel question", Duration::from_secs(10), |s| {
        s.contains("cancel job #1") && s.contains("y/n")
    });
    std::fs::write(frames.join("job-cancel-question.txt"), &asked).unwrap();
    assert_eq!(show(home, &db, 1)["state"], "running", "nothing happens before the yes");
    tmux.key("y");
    tmux.wait_screen("the cancel's outcome", Duration::from_secs(10), |s| {
        s.contains("cancel requested for job #1") || s.contains("cancelled job #1")
    });
    let cancelled = poll(Duration::from_secs(30), || show(home, &db, 1)["state"] == "cancelled");
    assert!(cancelled, "job #1 was not cancelled: {}", show(home, &db, 1));
    tmux.wait_screen("top showing it cancelled", Duration::from_secs(10), |s| {
        s.contains("#1 cancelled")
    });

    // `q` gives the terminal back as it was.
    tmux.key("q");
    tmux.wait_screen("the shell back after q", Duration::from_secs(10), |s| {
        shell_is_back(s, earlier)
    });
    assert_eq!(stty_into(&tmux, home, "stty-after-q"), stty_before, "q left the tty changed");

    // So does Ctrl-C (a key in raw mode, not a signal).
    tmux.line(&top);
    tmux.wait_screen("top again", Duration::from_secs(20), |s| s.contains("slothqueue top ·"));
    tmux.key("C-c");
    tmux.wait_screen("the shell back after Ctrl-C", Duration::from_secs(10), |s| {
        shell_is_back(s, earlier)
    });
    assert_eq!(
        stty_into(&tmux, home, "stty-after-ctrl-c"),
        stty_before,
        "Ctrl-C left the tty changed"
    );

    // And SIGTERM.
    tmux.line(&format!("sh -c 'echo $$ > top.pid; exec {top}'; echo top-ended-$?"));
    tmux.wait_screen("top again", Duration::from_secs(20), |s| s.contains("slothqueue top ·"));
    let pid = std::fs::read_to_string(home.join("top.pid")).unwrap();
    let killed = Command::new("kill").args(["-TERM", pid.trim()]).status().unwrap();
    assert!(killed.success());
    let back = tmux.wait_screen("the shell back after SIGTERM", Duration::from_secs(10), |s| {
        shell_is_back(s, earlier) && s.lines().any(|l| l.starts_with("top-ended-"))
    });
    assert!(
        back.lines().any(|l| l == "top-ended-0"),
        "top did not end cleanly on SIGTERM:\n{back}"
    );
    assert_eq!(
        stty_into(&tmux, home, "stty-after-term"),
        stty_before,
        "SIGTERM left the tty changed"
    );
}
