//! Completion that knows the queue (issue 37, "The shell"), tested by
//! driving each shell with what `slothqueue completions SHELL` prints:
//! bash through its own entry point (`COMP_WORDS`, `COMP_CWORD` and the
//! registered function, as readline calls it), fish through `complete -C`
//! (what fish runs on TAB), and zsh in a real terminal (tmux), a TAB typed
//! after `slothqueue show ` and the screen read back.
//!
//! The queue holds jobs #1 and #2, a schedule `nightly` and a queue
//! `disk`, and the folder the shells run in holds files named like
//! candidates (`1-file`, `disk-file`, `nightly-file`): completion that
//! offered files instead of ids, queues or keys fails.
//!
//! Without bash, fish, zsh or tmux a test says SKIPPED and passes, except
//! under `CI`, where a missing one fails it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::{Backend, TestContext, wait_for};

/// The queue every test completes from, and a folder whose `slothqueue`
/// is the binary under test (put first on `PATH`, as an installed one is).
struct Setup {
    ctx: TestContext,
    bin_dir: PathBuf,
}

fn setup() -> Setup {
    let ctx = TestContext::new(Backend::Sqlite);
    ctx.ok(&["add", "echo one"]);
    ctx.ok(&["add", "echo two", "--queue", "disk"]);
    ctx.ok(&["every", "1h", "make nightly", "--key", "nightly"]);
    for decoy in ["1-file", "2-file", "disk-file", "nightly-file", "sqlite-file"] {
        std::fs::write(ctx.path(decoy), "").unwrap();
    }
    let bin_dir = ctx.path("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_slothqueue"), bin_dir.join("slothqueue"))
        .unwrap();
    Setup { ctx, bin_dir }
}

impl Setup {
    /// `PATH` with the binary's folder first.
    fn path_var(&self) -> String {
        format!("{}:{}", self.bin_dir.display(), std::env::var("PATH").unwrap_or_default())
    }

    /// A shell process in the queue's folder, the queue named by
    /// `SLOTHQUEUE_DB` as a user's profile would.
    fn shell(&self, program: &str, db: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PATH", self.path_var())
            .env("HOME", self.ctx.dir.path())
            .env("TZ", "UTC")
            .env("SLOTHQUEUE_DB", db)
            .current_dir(self.ctx.dir.path());
        cmd
    }
}

/// Whether `program` can be run here; without it, SKIPPED (a failure
/// under CI, which installs it).
fn have(program: &str, version_flag: &str) -> bool {
    if Command::new(program).arg(version_flag).output().is_ok_and(|o| o.status.success()) {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but {program} cannot be run: install it");
    #[expect(clippy::print_stderr, reason = "a skipped test says so loudly")]
    let () =
        eprintln!("SKIPPED: completion in {program}, for want of it (install it to run this test)");
    false
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The values among the candidates: an empty word is offered the
/// command's flags too (`--db`, `--json`, …), which are not what is
/// tested here.
fn values(offered: BTreeSet<String>) -> BTreeSet<String> {
    offered.into_iter().filter(|c| !c.starts_with('-')).collect()
}

/// What bash's completion offers for `words`, the last one being
/// completed (the registered function called as readline calls it),
/// flags left out.
fn bash_offers(s: &Setup, db: &Path, words: &[&str]) -> BTreeSet<String> {
    let (offered, stderr) = bash_run(s, db, words);
    assert_eq!(stderr, "", "completion wrote to the terminal");
    offered
}

/// [`bash_offers`] with what the function wrote to stderr.
fn bash_run(s: &Setup, db: &Path, words: &[&str]) -> (BTreeSet<String>, String) {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        r#"source <(slothqueue completions bash) || exit 9
complete -p slothqueue >/dev/null || exit 8
COMP_WORDS=({words})
COMP_CWORD={cword}
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
_clap_complete_slothqueue slothqueue "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}""#,
        words = quoted.join(" "),
        cword = words.len() - 1,
    );
    let out = s.shell("bash", db).args(["--norc", "--noprofile", "-c", &script]).output().unwrap();
    let offered =
        stdout(&out).lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect();
    (values(offered), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// What fish offers for the command line `line` (`complete -C`, what a
/// TAB runs), each candidate without its description, flags left out.
fn fish_offers(s: &Setup, db: &Path, line: &str) -> BTreeSet<String> {
    values(fish_all(s, db, line))
}

/// Every candidate fish offers for `line`, flags too.
fn fish_all(s: &Setup, db: &Path, line: &str) -> BTreeSet<String> {
    let script = format!("slothqueue completions fish | source; complete -C '{line}'");
    let out = s.shell("fish", db).args(["--no-config", "-c", &script]).output().unwrap();
    stdout(&out)
        .lines()
        .filter_map(|l| l.split('\t').next())
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_ids_queues_and_schedule_keys() {
    if !have("bash", "--version") {
        return;
    }
    let s = setup();
    let db = &s.ctx.db;
    assert_eq!(bash_offers(&s, db, &["slothqueue", "show", ""]), set(&["1", "2"]));
    assert_eq!(bash_offers(&s, db, &["slothqueue", "logs", "#"]), set(&["#1", "#2"]));
    assert_eq!(bash_offers(&s, db, &["slothqueue", "hold", "1", ""]), set(&["1", "2"]));
    assert_eq!(
        bash_offers(&s, db, &["slothqueue", "list", "--queue", ""]),
        set(&["default", "disk"])
    );
    assert_eq!(bash_offers(&s, db, &["slothqueue", "every", "--pause", ""]), set(&["nightly"]));
    assert_eq!(bash_offers(&s, db, &["slothqueue", "--backend", ""]), set(&["sqlite", "redb"]));
    // The queue the words name wins over the environment's.
    let elsewhere = s.ctx.path("none.db");
    let db_arg = db.to_str().unwrap();
    assert_eq!(
        bash_offers(&s, &elsewhere, &["slothqueue", "--db", db_arg, "retry", ""]),
        BTreeSet::new(),
        "nothing failed or was cancelled yet"
    );
    s.ctx.ok(&["cancel", "2"]);
    assert_eq!(
        bash_offers(&s, &elsewhere, &["slothqueue", "--db", db_arg, "retry", ""]),
        set(&["2"])
    );
    assert_eq!(
        bash_offers(&s, &elsewhere, &["slothqueue", "--db", db_arg, "cancel", ""]),
        set(&["1"])
    );
    // A queue that does not exist completes nothing, and is not made.
    assert_eq!(bash_offers(&s, &elsewhere, &["slothqueue", "show", ""]), BTreeSet::new());
    assert!(!elsewhere.exists(), "completion created the queue file");
}

/// A queue another process holds locked completes nothing, quickly and
/// silently: no error in the command line, no wait for the store's own
/// five seconds of patience.
#[test]
#[expect(clippy::disallowed_methods, reason = "the wall time a TAB takes is what is checked")]
fn a_locked_queue_completes_nothing_at_once() {
    if !have("bash", "--version") {
        return;
    }
    let s = setup();
    let db = &s.ctx.db;
    let lock = rusqlite::Connection::open(db).unwrap();
    lock.execute_batch(
        "PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; UPDATE jobs SET priority = priority;",
    )
    .unwrap();
    let started = std::time::Instant::now();
    assert_eq!(bash_offers(&s, db, &["slothqueue", "show", ""]), BTreeSet::new());
    let took = started.elapsed();
    assert!(took < Duration::from_millis(4500), "a TAB took {took:?}");
    // In exclusive locking mode only closing lets go of the file.
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    assert_eq!(bash_offers(&s, db, &["slothqueue", "show", ""]), set(&["1", "2"]));
}

#[test]
fn fish_completes_ids_queues_keys_and_backends() {
    if !have("fish", "--version") {
        return;
    }
    let s = setup();
    let db = &s.ctx.db;
    assert_eq!(fish_offers(&s, db, "slothqueue show "), set(&["1", "2"]));
    assert_eq!(fish_offers(&s, db, "slothqueue wait "), set(&["1", "2"]));
    assert_eq!(fish_offers(&s, db, "slothqueue add x --queue "), set(&["default", "disk"]));
    assert_eq!(fish_offers(&s, db, "slothqueue every --remove "), set(&["nightly"]));
    // The space form of --backend (not only `--backend=`).
    assert_eq!(fish_offers(&s, db, "slothqueue --backend "), set(&["sqlite", "redb"]));
    assert_eq!(fish_all(&s, db, "slothqueue list --backend=s"), set(&["--backend=sqlite"]));
}

/// zsh in a terminal: `slothqueue show ` and a TAB list the two jobs with
/// their commands, and no file.
#[test]
fn zsh_completes_ids_in_a_terminal() {
    if !have("zsh", "--version") || !have("tmux", "-V") {
        return;
    }
    let s = setup();
    let home = s.ctx.dir.path();
    std::fs::write(
        home.join(".zshrc"),
        "PS1='sq-zsh%% '\nautoload -Uz compinit && compinit -u -d \"$HOME/.zcompdump\"\n\
         source <(slothqueue completions zsh)\n",
    )
    .unwrap();
    let socket = format!("sq-complete-{}", std::process::id());
    let tmux = Tmux { socket };
    let shell = format!(
        "exec env -i PATH='{}' HOME='{}' ZDOTDIR='{}' TZ=UTC TERM=\"$TERM\" SLOTHQUEUE_DB='{}' zsh -i",
        s.path_var(),
        home.display(),
        home.display(),
        s.ctx.db.display()
    );
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "sq",
        "-x",
        "100",
        "-y",
        "20",
        "-c",
        home.to_str().unwrap(),
        &shell,
    ]);
    tmux.wait_screen("zsh's prompt", |screen| screen.contains("sq-zsh%"));
    tmux.run(&["send-keys", "-t", "sq", "-l", "slothqueue show "]);
    tmux.run(&["send-keys", "-t", "sq", "Tab"]);
    let screen = tmux.wait_screen("the ids listed", |screen| {
        screen.contains("echo one") && screen.contains("echo two")
    });
    assert!(!screen.contains("-file"), "files offered:\n{screen}");
    assert!(screen.lines().any(|l| l.trim_start().starts_with('1')), "{screen}");
}

/// A tmux server of this test's own, ended when the test ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> Output {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    }

    /// The visible screen, as text.
    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "sq"]).stdout).into_owned()
    }

    /// Polls the screen until `cond` holds (at most 20 s); the screen. On
    /// a timeout the panic shows the last screen.
    fn wait_screen(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for(what, Duration::from_secs(20), || {
                last = self.screen();
                cond(&last)
            });
        }));
        assert!(waited.is_ok(), "timed out waiting for {what}; the screen:\n{last}");
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).output();
    }
}
