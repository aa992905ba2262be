//! The protocol between a multi-process scenario and the copies of the test
//! binary it starts.
//!
//! The parent starts `current_exe() --exact <module>::__child_entry
//! --nocapture --test-threads 1` with [`CHILD_ENV`] set to
//! `<role>:<queue path>` ([`Role`]), [`OWNER_ENV`], [`NOW_ENV`] (the
//! injected time, in milliseconds), [`COUNT_ENV`] (for pushes and fires) and
//! [`OUT_ENV`], the file where the child writes one job id per line and a
//! final `end`. A missing `end` means the child did not finish (or the test
//! filter matched nothing), and the scenario fails saying so.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use slothqueue_core::{ClaimRequest, ClockOnly, Completion, JobId, Owner, Policy, Timestamp};

use crate::OpenFn;
use crate::harness::shell;

/// `<role>:<queue path>`; unset in every ordinary test run.
pub const CHILD_ENV: &str = "SLOTHQUEUE_CONFORMANCE_CHILD";
/// Where the child writes the ids it handled.
pub const OUT_ENV: &str = "SLOTHQUEUE_CONFORMANCE_OUT";
/// The child's owner id.
pub const OWNER_ENV: &str = "SLOTHQUEUE_CONFORMANCE_OWNER";
/// The injected `now`, in milliseconds since the epoch.
pub const NOW_ENV: &str = "SLOTHQUEUE_CONFORMANCE_NOW";
/// How many jobs a pushing child pushes (steps a firing child takes).
pub const COUNT_ENV: &str = "SLOTHQUEUE_CONFORMANCE_COUNT";

/// What a child does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Claims and completes jobs until none is due; reports the ids.
    Claim,
    /// Pushes `count` jobs one by one; reports the ids.
    Push {
        /// How many.
        count: usize,
    },
    /// Calls `fire_schedules` at `now + i × FIRE_STEP` for `i` in
    /// `1..=count`, one after the other; reports the job of every tick
    /// that enqueued one.
    Fire {
        /// How many steps.
        count: usize,
    },
}

/// How far apart a firing child's calls are in injected time.
pub const FIRE_STEP: std::time::Duration = std::time::Duration::from_secs(60);

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Claim => "claim",
            Role::Push { .. } => "push",
            Role::Fire { .. } => "fire",
        }
    }
}

/// One child's assignment.
#[derive(Clone, Debug)]
pub struct Work {
    /// What to do.
    pub role: Role,
    /// The queue to open.
    pub path: PathBuf,
    /// The owner id to claim as (and the command prefix to push with).
    pub owner: String,
    /// The injected time.
    pub now: Timestamp,
}

/// The name libtest knows the child-entry test by, from the
/// `module_path!()` of the macro's expansion (whose first segment is the
/// test crate's name, which libtest leaves out).
pub fn child_test_name(module: &str) -> String {
    match module.split_once("::") {
        Some((_, rest)) => format!("{rest}::__child_entry"),
        None => "__child_entry".to_owned(),
    }
}

/// Does the work of one child and returns the ids it handled.
pub async fn do_work(open: OpenFn, work: &Work) -> Vec<JobId> {
    let store = open(&work.path, Policy::default()).expect("child: open the queue");
    let mut ids = Vec::new();
    match work.role {
        Role::Claim => {
            let request = ClaimRequest::new(Owner::named(work.owner.clone()), Arc::new(ClockOnly));
            while let Some(c) = store.claim(&request, work.now).await.expect("child: claim") {
                let done = Completion { result: Some(work.owner.clone()), exit_code: Some(0) };
                store.complete(c.job.id, &c.fence, done, work.now).await.expect("child: complete");
                ids.push(c.job.id);
            }
        }
        Role::Push { count } => {
            for i in 0..count {
                let cmd = format!("echo {} {i}", work.owner);
                let pushed = store.push(shell(&cmd), work.now).await.expect("child: push");
                assert!(pushed.created, "child: a push without a key creates a job");
                ids.push(pushed.job.id);
            }
        }
        Role::Fire { count } => {
            let mut now = work.now;
            for _ in 0..count {
                now = now.saturating_add(FIRE_STEP);
                let ticks = store.fire_schedules(now).await.expect("child: fire_schedules");
                for tick in ticks.ticks {
                    if let slothqueue_core::TickOutcome::Enqueued { job, .. } = tick.outcome {
                        ids.push(job);
                    }
                }
            }
        }
    }
    ids
}

/// In a child process (when [`CHILD_ENV`] is set), does the assigned work
/// and writes the ids to [`OUT_ENV`]; otherwise returns at once.
pub fn run_if_child(open: OpenFn) {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("child: {name} unset"));
    let (role, path) = spec.split_once(':').expect("child: <role>:<path>");
    let role = match role {
        "claim" => Role::Claim,
        "push" => Role::Push { count: var(COUNT_ENV).parse().expect("child: count") },
        "fire" => Role::Fire { count: var(COUNT_ENV).parse().expect("child: count") },
        other => panic!("child: unknown role {other}"),
    };
    let work = Work {
        role,
        path: PathBuf::from(path),
        owner: var(OWNER_ENV),
        now: Timestamp::from_millis(var(NOW_ENV).parse().expect("child: now")),
    };
    let out = PathBuf::from(var(OUT_ENV));
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("child: runtime");
    let ids = rt.block_on(do_work(open, &work));
    write_ids(&out, &ids);
}

fn write_ids(out: &Path, ids: &[JobId]) {
    let mut text: String = ids.iter().map(|id| format!("{id}\n")).collect();
    text.push_str("end\n");
    std::fs::write(out, text).expect("child: write the ids");
}

fn read_ids(out: &Path, who: &str) -> Vec<JobId> {
    let text = std::fs::read_to_string(out)
        .unwrap_or_else(|e| panic!("{who} wrote no report at {} ({e})", out.display()));
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.pop(), Some("end"), "{who} did not finish its report");
    lines.iter().map(|l| l.parse().expect("a job id")).collect()
}

/// Runs every `work` at once, each in its own process (re-executing
/// `child_test` in the current binary) or, without a child test, each on
/// its own OS thread with its own runtime and handle. Returns each
/// worker's ids, in the order given.
pub fn run_workers(
    open: OpenFn,
    child_test: Option<&str>,
    dir: &Path,
    works: &[Work],
) -> Vec<Vec<JobId>> {
    match child_test {
        Some(test) => run_processes(test, dir, works),
        None => std::thread::scope(|scope| {
            let handles: Vec<_> = works
                .iter()
                .map(|w| {
                    scope.spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .expect("worker runtime");
                        rt.block_on(do_work(open, w))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("worker thread panicked")).collect()
        }),
    }
}

fn run_processes(test: &str, dir: &Path, works: &[Work]) -> Vec<Vec<JobId>> {
    let exe = std::env::current_exe().expect("the current test binary");
    let mut children = Vec::new();
    for w in works {
        let out = dir.join(format!("child-{}.ids", w.owner));
        let count = match w.role {
            Role::Push { count } | Role::Fire { count } => count,
            Role::Claim => 0,
        };
        let child = Command::new(&exe)
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env(CHILD_ENV, format!("{}:{}", w.role.name(), w.path.display()))
            .env(OWNER_ENV, &w.owner)
            .env(NOW_ENV, w.now.as_millis().to_string())
            .env(COUNT_ENV, count.to_string())
            .env(OUT_ENV, &out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} ({e})", exe.display()));
        children.push((w.owner.clone(), out, child));
    }
    children
        .into_iter()
        .map(|(who, out, child)| {
            let output = child.wait_with_output().expect("wait for a child");
            assert!(
                output.status.success(),
                "child {who} ({test}) failed with {}:\n{}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            read_ids(&out, &format!("child {who} ({test})"))
        })
        .collect()
}
