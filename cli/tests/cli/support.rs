//! The one test context every CLI test uses: a temp dir holding the queue,
//! the built binary run with a cleared environment (`TZ=UTC`, `NO_COLOR=1`),
//! and the central list of snapshot filters (elapsed times, timestamps,
//! temp paths, pids), so a snapshot says only what is stable.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

pub use slothqueue::Backend;
use slothqueue::{Job, JobId, OpenOptions, Store};

/// A temp dir with a queue path in it, and helpers to run the binary there.
pub struct TestContext {
    /// Removed when the test ends.
    pub dir: tempfile::TempDir,
    /// The queue file (not created until a command creates it).
    pub db: PathBuf,
    /// Its backend.
    pub backend: Backend,
}

impl TestContext {
    /// A fresh context; the file name picks the backend.
    pub fn new(backend: Backend) -> TestContext {
        let dir = tempfile::Builder::new().prefix("sq-test-").tempdir().unwrap();
        let name = match backend {
            Backend::Sqlite => "queue.db",
            Backend::Redb => "queue.redb",
            Backend::Postgres => panic!("a queue on a server: use TestContext::postgres"),
        };
        let db = dir.path().join(name);
        TestContext { dir, db, backend }
    }

    /// A context whose queue is a fresh schema on the test server
    /// (`SLOTHQUEUE_PG_URL`, which `cargo xtask pg` and `cargo xtask ci`
    /// set). Without a server: `None`, after saying loudly that the test
    /// was skipped, unless `SLOTHQUEUE_PG_REQUIRED=1` (CI), which fails.
    pub fn postgres() -> Option<TestContext> {
        let Some(url) = std::env::var("SLOTHQUEUE_PG_URL").ok().filter(|u| !u.is_empty()) else {
            assert!(
                std::env::var("SLOTHQUEUE_PG_REQUIRED").as_deref() != Ok("1"),
                "SLOTHQUEUE_PG_REQUIRED=1 but SLOTHQUEUE_PG_URL is not set"
            );
            #[expect(clippy::print_stderr, reason = "a skipped test says so loudly")]
            let () = eprintln!(
                "SKIPPED: a PostgreSQL test, for want of a server; run it with \
                 `cargo xtask pg -- cargo test -p slothqueue-cli --test cli postgres`"
            );
            return None;
        };
        let dir = tempfile::Builder::new().prefix("sq-test-").tempdir().unwrap();
        // The temporary folder's random part names the schema.
        let suffix: String = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_lowercase();
        let separator = if url.contains('?') { '&' } else { '?' };
        let db = PathBuf::from(format!("{url}{separator}schema={suffix}"));
        Some(TestContext { dir, db, backend: Backend::Postgres })
    }

    /// The binary with a cleared environment, `--db` set, run in the temp dir.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = self.bare_command();
        cmd.arg("--db").arg(&self.db).args(args);
        cmd
    }

    /// The binary with the cleared environment but no `--db`.
    pub fn bare_command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_slothqueue"));
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
            .env("HOME", self.dir.path())
            .env("TZ", "UTC")
            .env("NO_COLOR", "1")
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        cmd
    }

    /// Runs to the end and returns the output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs, asserts success, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        succeeded(args, self.run(args))
    }

    /// Starts the binary in the background with stdout and stderr piped.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    }

    /// A file in the temp dir.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a loadavg-format file below any ceiling and returns its name,
    /// so runs never wait on this machine's real load.
    pub fn calm_load(&self) -> &'static str {
        std::fs::write(self.path("load"), "0.01 0.01 0.01 1/100 1\n").unwrap();
        "load"
    }

    /// The queue opened in-process through the library facade.
    pub fn store(&self) -> Arc<dyn Store> {
        slothqueue::open(&self.db, OpenOptions { create: false, ..OpenOptions::default() }).unwrap()
    }

    /// One job, read in-process.
    pub fn job(&self, id: JobId) -> Job {
        let store = self.store();
        block_on(store.get(id)).unwrap()
    }

    /// One job's trail, read in-process.
    pub fn store_events(&self, id: JobId) -> Vec<slothqueue::Event> {
        let store = self.store();
        block_on(store.events(id)).unwrap()
    }

    /// The filters every snapshot goes through, most specific first.
    pub fn filters(&self) -> Vec<(String, String)> {
        let host = rustix::system::uname().nodename().to_string_lossy().into_owned();
        let temp = regex_escape(&self.dir.path().display().to_string());
        vec![
            // `add` records the PATH of the test's own environment.
            (r#"("PATH":\s*)"[^"]*""#.into(), r#"$1"[PATH]""#.into()),
            (r"(?m)^  PATH=.*$".into(), "  PATH=[PATH]".into()),
            (temp, "[TEMP]".into()),
            (r"\[TEMP\]/queue\.(db|redb)".into(), "[TEMP]/queue.[EXT]".into()),
            (r"\((sqlite|redb)\)".into(), "([BACKEND])".into()),
            (r#""payload_hash":"[0-9a-f]{64}""#.into(), r#""payload_hash":"[HASH]""#.into()),
            (format!(r"{}:\d+:\d+:[0-9a-f]+", regex_escape(&host)), "[OWNER]".into()),
            (format!(r"{}:\d+", regex_escape(&host)), "[HOST]:[PID]".into()),
            (format!(r#""{}""#, regex_escape(&host)), r#""[HOST]""#.into()),
            (r"pid \d+".into(), "pid [PID]".into()),
            (r#""pid":\d+"#.into(), r#""pid":"[PID]""#.into()),
            (r#""pid_start_time":\d+"#.into(), r#""pid_start_time":"[START]""#.into()),
            (r#""boot_id":"[0-9a-f-]+""#.into(), r#""boot_id":"[BOOT]""#.into()),
            (r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z".into(), "[RFC3339]".into()),
            // A date shows only when a time is not today: near midnight
            // the same line may have one, so both read the same.
            (r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}".into(), "[TIME]".into()),
            (r"\b\d{2}:\d{2}:\d{2}\b".into(), "[TIME]".into()),
            (r"\b\d+\.\d+s\b".into(), "[ELAPSED]".into()),
            (r"\(in [0-9dhms]+\)".into(), "(in [SPAN])".into()),
            (r"\b\d{13}\b".into(), "[MS]".into()),
            // What holds a job's processes depends on the machine.
            (
                r"contained by (cgroup|subreaper\+proc|group only)".into(),
                "contained by [MECHANISM]".into(),
            ),
            (
                r"contained:    (cgroup|subreaper\+proc|group only)".into(),
                "contained:    [MECHANISM]".into(),
            ),
        ]
    }
}

fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An argument quoted the way a shell would need it, for readable headers.
fn quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:#,+%@".contains(c))
    {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Output as a snapshot shows it: the exit code, then both streams.
pub fn format_output(args: &[&str], out: &Output) -> String {
    format!(
        "$ slothqueue {}\nexit code: {}\n----- stdout -----\n{}----- stderr -----\n{}",
        args.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" "),
        out.status.code().map_or_else(|| "signal".to_owned(), |c| c.to_string()),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    )
}

/// Runs a command in a [`TestContext`] and snapshots its output through
/// the central filters. The snapshot name is shared by both backends, so
/// both must print exactly the same thing. Returns the output.
#[macro_export]
macro_rules! slothqueue_snapshot {
    ($ctx:expr, $name:expr, $args:expr) => {{
        let args: &[&str] = &$args;
        let out = $ctx.run(args);
        let text = $crate::support::format_output(args, &out);
        let mut settings = insta::Settings::clone_current();
        settings.set_prepend_module_to_snapshot(false);
        settings.set_omit_expression(true);
        for (re, rep) in $ctx.filters() {
            settings.add_filter(&re, rep);
        }
        settings.bind(|| insta::assert_snapshot!($name, text));
        out
    }};
}

/// Runs a command and snapshots its output through the central filters
/// and then `extra` (pattern, replacement) ones, as
/// [`slothqueue_snapshot!`] does. Returns the output.
pub fn snapshot_with(
    ctx: &TestContext,
    name: &str,
    args: &[&str],
    extra: &[(&str, &str)],
) -> Output {
    let out = ctx.run(args);
    let text = format_output(args, &out);
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    for (re, rep) in ctx.filters() {
        settings.add_filter(&re, rep);
    }
    for (re, rep) in extra {
        settings.add_filter(re, *rep);
    }
    settings.bind(|| insta::assert_snapshot!(name, text));
    out
}

/// Snapshots a JSON command's output pretty-printed, so a change in one
/// field reads as one changed line; through the central filters and then
/// `extra` ones. The command must succeed.
pub fn json_snapshot(ctx: &TestContext, name: &str, args: &[&str], extra: &[(&str, &str)]) {
    let out = ctx.run(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let pretty: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(l).unwrap())
                .unwrap()
        })
        .collect();
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    for (re, rep) in ctx.filters() {
        // Pretty JSON puts a space after the colon.
        settings.add_filter(&re.replace("\":", "\": "), rep.replace("\":", "\": "));
        settings.add_filter(&re, rep);
    }
    for (re, rep) in extra {
        settings.add_filter(re, *rep);
    }
    settings.bind(|| insta::assert_snapshot!(name, pretty.join("\n")));
}

/// Generates one test per backend the build has, named after the backend,
/// inside a module named after the scenario.
#[macro_export]
macro_rules! both_backends {
    ($(fn $name:ident($ctx:ident) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports, reason = "not every scenario uses everything")]
            use super::*;

            #[cfg(feature = "sqlite")]
            #[test]
            fn sqlite() {
                let $ctx = $crate::support::TestContext::new($crate::support::Backend::Sqlite);
                $body
            }

            #[cfg(feature = "redb")]
            #[test]
            fn redb() {
                let $ctx = $crate::support::TestContext::new($crate::support::Backend::Redb);
                $body
            }
        }
    )*};
}

/// [`both_backends!`] for scenarios that need the stores' lane methods
/// and the runner's slots (issue #16), which land from other branches:
/// ignored until they do. To run them, delete the `#[ignore]` lines here
/// (one place for every such test).
#[macro_export]
macro_rules! both_backends_with_lanes {
    ($(fn $name:ident($ctx:ident) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports, reason = "not every scenario uses everything")]
            use super::*;

            #[cfg(feature = "sqlite")]
            #[test]
            fn sqlite() {
                let $ctx = $crate::support::TestContext::new($crate::support::Backend::Sqlite);
                $body
            }

            #[cfg(feature = "redb")]
            #[test]
            fn redb() {
                let $ctx = $crate::support::TestContext::new($crate::support::Backend::Redb);
                $body
            }
        }
    )*};
}

/// Runs a future to completion on a small runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// Polls `cond` until it holds or `within` passes; panics naming `what`.
#[expect(
    clippy::disallowed_methods,
    reason = "waiting for real processes: a deadline on the real clock, polled"
)]
pub fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Waits for a child to exit, at most `within`; kills it and panics if not.
pub fn wait_child(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let mut status = None;
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for("a slothqueue process to exit", within, || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
    }));
    if waited.is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("a slothqueue process did not exit within {within:?}");
    }
    status.unwrap()
}

/// Reads all of a finished child's stdout.
pub fn stdout_of(child: &mut Child) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut s).unwrap();
    }
    s
}

/// Reads all of a finished child's stderr.
pub fn stderr_of(child: &mut Child) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(mut err) = child.stderr.take() {
        err.read_to_string(&mut s).unwrap();
    }
    s
}

/// Sends `signal` to `pid`.
pub fn signal(pid: u32, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
}

/// Whether any live (not zombie) process is in group `pgid`, from `/proc`.
pub fn group_alive(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { return false };
        let Some((_, rest)) = stat.rsplit_once(')') else { return false };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After the command: state, ppid, pgrp.
        fields.len() > 2 && fields[2] == pgid.to_string() && !matches!(fields[0], "Z" | "X")
    })
}

/// The bytes of a file, or `None` if missing.
pub fn read(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

/// The stdout of `slothqueue ARGS`, which must have succeeded (else its
/// stderr is the failure).
pub fn succeeded(args: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "slothqueue {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
