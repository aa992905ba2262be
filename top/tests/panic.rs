//! A panic while `top` holds the terminal: the panic hook gives the
//! terminal back *before* the message is printed, so the message lands on
//! the user's own screen, in cooked mode, and stays there; the terminal's
//! settings are as before (`stty -g`). Without the hook the message would
//! be printed on the alternate screen, which the unwinding then leaves:
//! the user would never see it.
//!
//! The test runs itself again inside tmux (a private socket) with
//! `SQ_TOP_PANIC_PROBE` set: that run takes the terminal as `top` does
//! ([`slothqueue_top::Screen::take`]) and panics. Without tmux it says
//! SKIPPED and passes, except under `CI`, where that fails.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly on purpose; a panic is the test's report"
)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const PROMPT: &str = "sq-probe$";

struct Tmux(String);

impl Tmux {
    fn run(&self, args: &[&str]) -> Output {
        let out = Command::new("tmux").args(["-L", &self.0, "-f", "/dev/null"]).args(args).output();
        let out = out.unwrap();
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    }

    fn line(&self, text: &str) {
        self.run(&["send-keys", "-t", "probe", "-l", text]);
        self.run(&["send-keys", "-t", "probe", "Enter"]);
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "probe"]).stdout)
            .into_owned()
    }

    fn wait(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = poll(Duration::from_secs(30), || {
            last = self.screen();
            cond(&last)
        });
        assert!(found, "timed out waiting for {what}; the screen:\n{last}");
        last
    }

    fn wait_prompt(&self) {
        self.wait("the prompt", |s| s.lines().rev().find(|l| !l.trim().is_empty()) == Some(PROMPT));
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.0, "kill-server"]).output();
    }
}

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

fn stty_into(tmux: &Tmux, dir: &Path, file: &str) -> String {
    tmux.wait_prompt();
    tmux.line(&format!("stty -g > {file}.tmp && mv {file}.tmp {file}"));
    let path = dir.join(file);
    assert!(poll(Duration::from_secs(30), || path.exists()), "the shell wrote no {file}");
    tmux.wait_prompt();
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn a_panic_gives_the_terminal_back_before_its_message() {
    if std::env::var_os("SQ_TOP_PANIC_PROBE").is_some() {
        let _screen = slothqueue_top::Screen::take().unwrap();
        panic!("probe panic while the terminal is taken");
    }
    if !Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success()) {
        assert!(std::env::var_os("CI").is_none(), "CI is set but tmux cannot be run");
        #[expect(clippy::print_stderr, reason = "a skipped test says so loudly")]
        let () = eprintln!("SKIPPED: a panic in tmux, for want of tmux");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let tmux = Tmux(format!("sq-top-panic-{}", std::process::id()));
    let shell = format!(
        "exec env -i PATH='{}' HOME='{}' TERM=\"$TERM\" PS1='{PROMPT} ' sh",
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        dir.path().display()
    );
    let home = dir.path().to_str().unwrap();
    tmux.run(&["new-session", "-d", "-s", "probe", "-x", "160", "-y", "40", "-c", home, &shell]);
    let before = stty_into(&tmux, dir.path(), "stty-before");
    tmux.line(&format!(
        "SQ_TOP_PANIC_PROBE=1 RUST_BACKTRACE=0 {} --exact a_panic_gives_the_terminal_back_before_its_message --nocapture --test-threads=1; echo probe-ended-$?",
        exe.display()
    ));
    let screen = tmux.wait("the probe's end", |s| s.lines().any(|l| l.starts_with("probe-ended-")));
    assert!(
        screen.lines().any(|l| l == "probe panic while the terminal is taken"),
        "the panic's message is not on the user's screen, at the start of its line:\n{screen}"
    );
    assert!(
        screen.lines().any(|l| l.starts_with("thread '") && l.contains("panicked at")),
        "{screen}"
    );
    assert_eq!(
        stty_into(&tmux, dir.path(), "stty-after"),
        before,
        "the panic left the tty changed"
    );
}
