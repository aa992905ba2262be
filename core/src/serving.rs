//! **Who can run a job**: whether a live runner takes jobs of a queue and
//! has an executor (a handler) for a kind, from the runners' records and
//! the liveness judge's verdicts. Pure, like the rest of `core`.
//!
//! A runner claims only the kinds it has executors for (its
//! [`crate::ClaimFilter`]), so a job of a kind no live runner has a handler
//! for stays pending. This rule is how every presenter says so: `show`'s
//! explanation, `status`, and the HTTP job, stats and metrics answers.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::job::{Job, JobState};
use crate::liveness::Liveness;
use crate::store::RunnerRecord;
use crate::time::Timestamp;

/// How long a runner that cannot be checked from here (another host,
/// another PID namespace) counts as alive after it last wrote its record.
pub const UNCHECKED_RUNNER_LIVE_FOR: Duration = Duration::from_secs(300);

/// Whether a runner whose record is `record` counts as alive at `now`,
/// given the judge's verdict on its owner: alive when the judge says so;
/// when the judge cannot tell, while it wrote its record within
/// [`UNCHECKED_RUNNER_LIVE_FOR`].
pub fn is_live(record: &RunnerRecord, liveness: Liveness, now: Timestamp) -> bool {
    match liveness {
        Liveness::Alive => true,
        Liveness::Gone => false,
        Liveness::Unknown => now.duration_since(record.updated_at) < UNCHECKED_RUNNER_LIVE_FOR,
    }
}

impl RunnerRecord {
    /// Whether it takes jobs of `queue` (a record naming no queue takes
    /// every queue).
    pub fn serves_queue(&self, queue: &str) -> bool {
        self.queues.is_empty() || self.queues.iter().any(|q| q == queue)
    }

    /// Whether it can run jobs of `kind` (has an executor for it). A
    /// record that names no kinds (an older runner) is taken to run all.
    pub fn runs_kind(&self, kind: &str) -> bool {
        self.kinds.as_ref().is_none_or(|ks| ks.iter().any(|k| k == kind))
    }
}

/// Whether a job of a queue and kind can be run by the live runners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// At least one live runner takes the queue and runs the kind.
    Served,
    /// Live runners take the queue, but none has a handler for the kind.
    NoHandler {
        /// The kind.
        kind: String,
    },
    /// No live runner takes the queue (none is alive at all, or the live
    /// ones serve other queues).
    NoRunner {
        /// The queue.
        queue: String,
    },
}

impl Coverage {
    /// Whether a live runner can run it.
    pub fn is_served(&self) -> bool {
        matches!(self, Coverage::Served)
    }
}

impl std::fmt::Display for Coverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Coverage::Served => f.write_str("a live runner runs it"),
            Coverage::NoHandler { kind } => write!(f, "no handler for kind {kind}"),
            Coverage::NoRunner { queue } => write!(f, "no live runner serves queue {queue}"),
        }
    }
}

/// Whether any of the `live` runners (those [`is_live`] said are alive)
/// can run a job of `queue` and `kind`.
pub fn coverage<'a>(
    queue: &str,
    kind: &str,
    live: impl IntoIterator<Item = &'a RunnerRecord>,
) -> Coverage {
    let mut serving = false;
    for runner in live.into_iter().filter(|r| r.serves_queue(queue)) {
        if runner.runs_kind(kind) {
            return Coverage::Served;
        }
        serving = true;
    }
    if serving {
        Coverage::NoHandler { kind: kind.to_owned() }
    } else {
        Coverage::NoRunner { queue: queue.to_owned() }
    }
}

/// The most pending jobs (in claim order) a look reads to find those no
/// live runner can run (`status`, the HTTP stats and `/metrics`): such a
/// look stays cheap on a long queue.
pub const UNSERVED_SCAN: usize = 1000;

/// Pending jobs of one queue and kind that no live runner can run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Unserved {
    /// The queue.
    pub queue: String,
    /// The kind.
    pub kind: String,
    /// How many pending jobs of this queue and kind were seen.
    pub pending: u64,
    /// Why none runs them, in words: `no handler for kind download`.
    pub why: String,
}

/// The pending jobs among `jobs` that none of the `live` runners can run,
/// counted by queue and kind (in that order). Jobs in other states are
/// left out; a held job or one waiting on parents counts too: once
/// released or free, it would still find no runner.
pub fn unserved<'a>(
    jobs: impl IntoIterator<Item = &'a Job>,
    live: &[&RunnerRecord],
) -> Vec<Unserved> {
    let mut counts: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for job in jobs.into_iter().filter(|j| j.state == JobState::Pending) {
        *counts.entry((job.queue.as_str(), job.kind.as_str())).or_default() += 1;
    }
    counts
        .into_iter()
        .filter_map(|((queue, kind), pending)| {
            let coverage = coverage(queue, kind, live.iter().copied());
            (!coverage.is_served()).then(|| Unserved {
                queue: queue.to_owned(),
                kind: kind.to_owned(),
                pending,
                why: coverage.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{NewJob, Owner};
    use crate::machine;
    use crate::policy::Policy;
    use crate::store::RunnerActivity;

    const NOW: Timestamp = Timestamp::from_millis(1_700_000_000_000);

    fn runner(queues: &[&str], kinds: Option<&[&str]>) -> RunnerRecord {
        RunnerRecord {
            owner: Owner::named("box:42:1:ff"),
            queues: queues.iter().map(|q| (*q).to_owned()).collect(),
            kinds: kinds.map(|ks| ks.iter().map(|k| (*k).to_owned()).collect()),
            refused: Vec::new(),
            started_at: NOW,
            updated_at: NOW,
            activity: RunnerActivity::Idle { until: None },
            slots: 1,
            running: Vec::new(),
            gpus: None,
        }
    }

    fn job(id: i64, queue: &str, kind: &str) -> Job {
        let mut new = NewJob::new(kind, serde_json::json!({}));
        new.queue = queue.to_owned();
        machine::create(id, &new, &[], NOW, &Policy::default()).job
    }

    #[test]
    fn a_kind_without_a_handler_is_named() {
        let shell = runner(&[], Some(&["shell"]));
        assert_eq!(
            coverage("default", "download", [&shell]),
            Coverage::NoHandler { kind: "download".into() }
        );
        assert_eq!(
            coverage("default", "download", [&shell]).to_string(),
            "no handler for kind download"
        );
        assert!(coverage("default", "shell", [&shell]).is_served());
        let both = runner(&[], Some(&["download", "shell"]));
        assert!(coverage("default", "download", [&shell, &both]).is_served());
        let older = runner(&[], None);
        assert!(coverage("default", "download", [&older]).is_served(), "no kinds: all kinds");
        let disk = runner(&["disk"], Some(&["download"]));
        assert_eq!(
            coverage("net", "download", [&disk]).to_string(),
            "no live runner serves queue net"
        );
        assert_eq!(coverage("net", "download", []), Coverage::NoRunner { queue: "net".into() });
    }

    #[test]
    fn liveness_by_the_judge_else_by_the_record_age() {
        let r = runner(&[], None);
        assert!(is_live(&r, Liveness::Alive, NOW.saturating_add(Duration::from_secs(9999))));
        assert!(!is_live(&r, Liveness::Gone, NOW));
        assert!(is_live(&r, Liveness::Unknown, NOW.saturating_add(Duration::from_secs(299))));
        assert!(!is_live(&r, Liveness::Unknown, NOW.saturating_add(Duration::from_secs(300))));
    }

    #[test]
    fn unserved_jobs_are_counted_by_queue_and_kind() {
        let shell = runner(&[], Some(&["shell"]));
        let mut done = job(4, "default", "download");
        done.state = JobState::Done;
        let jobs = [
            job(1, "default", "download"),
            job(2, "default", "download"),
            job(3, "default", "shell"),
            done,
            job(5, "disk", "resize"),
        ];
        assert_eq!(
            unserved(&jobs, &[&shell]),
            [
                Unserved {
                    queue: "default".into(),
                    kind: "download".into(),
                    pending: 2,
                    why: "no handler for kind download".into(),
                },
                Unserved {
                    queue: "disk".into(),
                    kind: "resize".into(),
                    pending: 1,
                    why: "no handler for kind resize".into(),
                },
            ]
        );
        assert_eq!(unserved(&jobs, &[]).len(), 3, "no runner: nothing is served");
    }
}
