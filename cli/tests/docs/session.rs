//! A new user's shell for one document: a fresh home folder (the default
//! queue lives under it), the built `slothqueue` first on `PATH`, none of
//! the test's own environment, and every process a block left in the
//! background (`serve &`) ended with the session.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one block may run before it counts as hung.
const BLOCK_LIMIT: Duration = Duration::from_secs(60);

/// One document's shell.
pub struct Session {
    dir: tempfile::TempDir,
    path: std::ffi::OsString,
    groups: Vec<i32>,
}

/// What one command printed and how it exited.
pub struct Ran {
    /// stdout and stderr, as one stream.
    pub lines: Vec<String>,
    /// Its exit status (`128 + N` for a signal, as a shell says it).
    pub status: i32,
}

impl Session {
    /// A fresh home with the binary under test first on `PATH`.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        std::fs::create_dir(dir.path().join("home")).expect("a home folder");
        let bin = Path::new(env!("CARGO_BIN_EXE_slothqueue"));
        let mut paths = vec![bin.parent().expect("the binary's folder").to_path_buf()];
        paths.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
        let path = std::env::join_paths(paths).expect("a PATH");
        Self { dir, path, groups: Vec::new() }
    }

    /// The home folder, also each command's working folder.
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Runs `commands` in order in one bash, each one's output and status
    /// kept apart; later commands see the variables and background jobs of
    /// earlier ones, as in a terminal.
    pub fn run(&mut self, commands: &[String]) -> Result<Vec<Ran>, String> {
        let work = self.dir.path().join("ran");
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir(&work).map_err(|e| e.to_string())?;
        let mut script = String::new();
        for (n, command) in commands.iter().enumerate() {
            let out = work.join(format!("{n}.out"));
            let status = work.join(format!("{n}.status"));
            let (out, status) = (quote(&out), quote(&status));
            script.push_str(&format!(
                "{{\n{command}\n}} > {out} 2>&1 < /dev/null\necho $? > {status}\n"
            ));
            // A server started in the background (`serve &`) is typed after
            // by a reader who saw its first line: wait for it (10 s at
            // most). One whose output goes to a file says nothing here.
            if command.trim_end().ends_with('&') && !command.contains('>') {
                script.push_str(&format!(
                    "for _ in $(seq 100); do [ -s {out} ] && break; sleep 0.1; done\n"
                ));
            }
        }
        let mut cmd = Command::new("bash");
        // A new user's login: nothing of this test's own environment (cargo's
        // variables would be recorded into every job `add` queues).
        cmd.arg("-c")
            .arg(script)
            .current_dir(self.home())
            .env_clear()
            .env("HOME", self.home())
            .env("USER", "ana")
            .env("PATH", &self.path)
            .env("LANG", "C.UTF-8")
            .env("TZ", "UTC")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().map_err(|e| format!("cannot start bash: {e}"))?;
        let pgid = i32::try_from(child.id()).map_err(|e| e.to_string())?;
        self.groups.push(pgid);
        if !wait_for(BLOCK_LIMIT, || child.try_wait().is_ok_and(|s| s.is_some())) {
            let _ = child.kill();
            return Err(format!("still running after {BLOCK_LIMIT:?}"));
        }
        let mut ran = Vec::new();
        for n in 0..commands.len() {
            let read = |ext: &str| std::fs::read_to_string(work.join(format!("{n}.{ext}")));
            let Ok(status) = read("status") else {
                return Err(format!("the block stopped before command {}", n + 1));
            };
            let text = read("out").unwrap_or_default();
            ran.push(Ran {
                lines: text.lines().map(str::to_owned).collect(),
                status: status.trim().parse().map_err(|_| format!("status {status:?}"))?,
            });
        }
        Ok(ran)
    }
}

impl Drop for Session {
    /// What a block left running (`serve &`) gets SIGTERM and the grace a
    /// service manager gives (it hands its job back), then SIGKILL.
    fn drop(&mut self) {
        use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};
        let groups: Vec<Pid> = self.groups.iter().filter_map(|&g| Pid::from_raw(g)).collect();
        for &group in &groups {
            let _ = kill_process_group(group, Signal::TERM);
        }
        let gone = || groups.iter().all(|&g| test_kill_process_group(g).is_err());
        if !wait_for(Duration::from_secs(10), gone) {
            for &group in &groups {
                let _ = kill_process_group(group, Signal::KILL);
            }
        }
    }
}

/// Calls `done` every 20 ms until it holds (true) or `within` has passed
/// (false).
#[expect(
    clippy::disallowed_methods,
    reason = "a deadline on the wall clock and a short poll interval: the test waits on processes, not on time"
)]
fn wait_for(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A path as one shell word.
fn quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}
