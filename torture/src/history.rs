//! The history checker.
//!
//! Every test job appends to one append-only file (`>>`, so `O_APPEND`):
//!
//! ```text
//! S <job> <attempt> <runner pid> <job pid> <ns>   an execution started
//! E <job> <attempt> <runner pid> <job pid> <ns>   it ended normally
//! X <job> <attempt> <runner pid> <job pid> <ns>   it found another execution
//!                                                 of the same job alive
//! ```
//!
//! `X` comes from a per-job `flock`: each execution takes it without
//! waiting and holds it (its children inherit the descriptor) until every
//! process of the execution is gone, killed or not. So an `X` proves two
//! executions were alive at once even when one was killed and never wrote
//! its `E`. Finished executions are also compared by their start and end.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Result;
use slothqueue_core::{Event, EventKind, Job, JobId, JobState};

use crate::util::{read_or_empty, sh_quote};

/// Where a scenario's jobs write their history.
#[derive(Clone, Debug)]
pub struct History {
    pub file: PathBuf,
    pub locks: PathBuf,
}

impl History {
    pub fn new(dir: &Path) -> Result<History> {
        let locks = dir.join("locks");
        std::fs::create_dir_all(&locks)?;
        Ok(History { file: dir.join("history"), locks })
    }

    fn record(&self, kind: char) -> String {
        format!(
            "echo \"{kind} $SLOTHQUEUE_JOB_ID $SLOTHQUEUE_ATTEMPT $PPID $$ $(date +%s%N)\" >>{}",
            sh_quote(&self.file.to_string_lossy())
        )
    }

    /// The prologue of every test job: take the job's lock (or record that
    /// another execution holds it), then record the start.
    pub fn prologue(&self) -> String {
        let lock = format!("{}/\"$SLOTHQUEUE_JOB_ID\"", sh_quote(&self.locks.to_string_lossy()));
        format!("exec 9>>{lock}; flock -n 9 || {}; {}", self.record('X'), self.record('S'))
    }

    /// The epilogue: record a normal end.
    pub fn epilogue(&self) -> String {
        self.record('E')
    }

    /// A job that runs for `ms` milliseconds.
    pub fn sleeper(&self, ms: u64) -> String {
        format!("{}; sleep {}.{:03}; {}", self.prologue(), ms / 1000, ms % 1000, self.epilogue())
    }

    /// A job that runs `body` between the records.
    pub fn wrap(&self, body: &str) -> String {
        format!("{}; {body}; {}", self.prologue(), self.epilogue())
    }

    pub fn read(&self) -> Result<Vec<Record>> {
        Ok(parse(&read_or_empty(&self.file)?))
    }

    /// How many executions have started so far.
    pub fn starts(&self) -> Result<usize> {
        Ok(self.read()?.iter().filter(|r| r.kind == 'S').count())
    }
}

/// One line of the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: char,
    pub job: JobId,
    pub attempt: u32,
    pub runner: i32,
    pub pid: i32,
    pub ns: i64,
}

pub fn parse(text: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 6 {
                return None;
            }
            Some(Record {
                kind: f[0].chars().next()?,
                job: f[1].parse().ok()?,
                attempt: f[2].parse().ok()?,
                runner: f[3].parse().ok()?,
                pid: f[4].parse().ok()?,
                ns: f[5].parse().ok()?,
            })
        })
        .collect()
}

/// One execution of a job, from its `S` (and `E`, if it ended normally).
#[derive(Clone, Debug)]
pub struct Execution {
    pub attempt: u32,
    pub runner: i32,
    pub pid: i32,
    pub start: i64,
    pub end: Option<i64>,
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Jobs looked at.
    pub jobs: u64,
    /// Executions seen.
    pub executions: u64,
    /// Acknowledged jobs missing from the store, or done without ever
    /// having finished an execution.
    pub lost: u64,
    /// `X` records plus pairs of finished executions overlapping in time.
    pub overlaps: u64,
    /// Everything wrong, one line each.
    pub problems: Vec<String>,
}

/// What a scenario expects of every job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Exactly one execution, ended, state `done`, no reclaim (S03).
    ExactlyOnce,
    /// At least once: terminal; extra executions matched by reclaims or
    /// releases; attempts distinct (S04, S05).
    AtLeastOnce,
}

/// Checks the history against the store's jobs and trails.
///
/// `acked`: job ids whose `add` returned success. `jobs`: every job in
/// the store, with its trail.
pub fn check(
    records: &[Record],
    acked: &BTreeSet<JobId>,
    jobs: &BTreeMap<JobId, (Job, Vec<Event>)>,
    expect: Expect,
) -> Verdict {
    let mut v = Verdict::default();
    let mut by_job: BTreeMap<JobId, Vec<Execution>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.kind == 'S') {
        by_job.entry(r.job).or_default().push(Execution {
            attempt: r.attempt,
            runner: r.runner,
            pid: r.pid,
            start: r.ns,
            end: None,
        });
    }
    for r in records.iter().filter(|r| r.kind == 'E') {
        if let Some(e) =
            by_job.get_mut(&r.job).and_then(|xs| xs.iter_mut().find(|e| e.pid == r.pid))
        {
            e.end = Some(r.ns);
        } else {
            v.problems.push(format!("job #{}: an end (pid {}) without a start", r.job, r.pid));
        }
    }
    for r in records.iter().filter(|r| r.kind == 'X') {
        v.overlaps += 1;
        v.problems.push(format!(
            "job #{} attempt {} (runner {}, pid {}) started while another execution of it was alive",
            r.job, r.attempt, r.runner, r.pid
        ));
    }
    for id in acked {
        if !jobs.contains_key(id) {
            v.lost += 1;
            v.problems
                .push(format!("job #{id}: acknowledged by `add` but not in the queue (lost)"));
        }
    }
    for (id, (job, events)) in jobs {
        v.jobs += 1;
        let mut execs = by_job.remove(id).unwrap_or_default();
        execs.sort_by_key(|e| e.start);
        v.executions += execs.len() as u64;
        let finished = execs.iter().filter(|e| e.end.is_some()).count();
        if !job.state.is_terminal() {
            v.problems.push(format!("job #{id}: still {} at the end", job.state));
        }
        if let Some(replayed) = slothqueue_core::machine::replay(events) {
            if replayed != job.state {
                v.problems.push(format!(
                    "job #{id}: state {} but its trail says {replayed} (half-applied transition)",
                    job.state
                ));
            }
        }
        if job.state == JobState::Done && finished == 0 {
            v.lost += 1;
            v.problems.push(format!("job #{id}: done but no execution of it finished"));
        }
        for pair in execs.windows(2) {
            if let (Some(end), next) = (pair[0].end, &pair[1]) {
                if next.start < end {
                    v.overlaps += 1;
                    v.problems.push(format!(
                        "job #{id}: attempt {} (runner {}, pid {}) started {} µs before attempt {} (runner {}, pid {}) ended",
                        next.attempt,
                        next.runner,
                        next.pid,
                        (end - next.start) / 1000,
                        pair[0].attempt,
                        pair[0].runner,
                        pair[0].pid
                    ));
                }
            }
        }
        let attempts: BTreeSet<u32> = execs.iter().map(|e| e.attempt).collect();
        // A release hands the attempt number back (it was not charged),
        // so only a run beyond the releases needs its own number.
        let released = events.iter().filter(|e| e.kind == EventKind::Released).count();
        if attempts.len() + released < execs.len() {
            v.problems.push(format!(
                "job #{id}: {} executions share {} attempt number(s): a run without its own claim",
                execs.len(),
                attempts.len()
            ));
        }
        let count = |k: EventKind| events.iter().filter(|e| e.kind == k).count();
        let claims = count(EventKind::Claimed);
        if execs.len() > claims {
            v.problems
                .push(format!("job #{id}: {} executions but only {claims} claims", execs.len()));
        }
        match expect {
            Expect::ExactlyOnce => {
                if execs.len() != 1 || finished != 1 || job.state != JobState::Done {
                    v.problems.push(format!(
                        "job #{id}: expected exactly one finished execution and done; got {} executions ({finished} finished), state {}",
                        execs.len(),
                        job.state
                    ));
                }
                if count(EventKind::Reclaimed) > 0 {
                    v.problems.push(format!("job #{id}: reclaimed although no runner died"));
                }
            }
            Expect::AtLeastOnce => {
                let reruns = count(EventKind::Reclaimed)
                    + count(EventKind::Released)
                    + count(EventKind::Failed)
                    + count(EventKind::Retried);
                if execs.len() > reruns + 1 {
                    v.problems.push(format!(
                        "job #{id}: {} executions but only {reruns} reclaim/release/failure event(s) to explain the extra ones",
                        execs.len()
                    ));
                }
            }
        }
    }
    for (id, execs) in by_job {
        v.problems.push(format!(
            "job #{id}: {} execution(s) recorded for a job the queue does not have",
            execs.len()
        ));
    }
    v
}
