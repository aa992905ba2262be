//! Lanes: what is stored about a queue as a whole (its concurrency limit,
//! whether it is paused) and what `queues` reports of each. A lane's
//! settings live in the queue file, so every runner and process on it sees
//! the same limit and the same pause; what they mean for a claim is
//! [`crate::machine::LaneCheck`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// Who did something to a lane or a job, and when: a pause, a hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// When.
    pub since: Timestamp,
    /// Who, as the caller names itself (`ana@laptop`, `http 127.0.0.1`).
    pub by: String,
}

impl Stamp {
    /// A stamp of `by` at `since`.
    pub fn new(by: impl Into<String>, since: Timestamp) -> Self {
        Stamp { since, by: by.into() }
    }
}

/// One lane's settings. The default (no limit, not paused) is what a queue
/// nobody configured has, and is not stored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneSettings {
    /// At most this many of the lane's jobs run at once, across every
    /// runner on the file; 0 is no limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub limit: u32,
    /// Set while the lane is paused: no job of it starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Stamp>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl LaneSettings {
    /// Whether these are the defaults (a store need not keep them).
    pub fn is_default(&self) -> bool {
        *self == LaneSettings::default()
    }
}

/// Which lane a change is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaneScope {
    /// Every queue at once (`pause` without `--queue`): a pause of all is
    /// its own setting, so resuming it leaves a lane paused on its own
    /// still paused.
    All,
    /// One queue.
    Queue(String),
}

impl LaneScope {
    /// The key a store files these settings under: the queue's name, or
    /// `""` for [`LaneScope::All`] (no queue name is empty).
    pub fn key(&self) -> &str {
        match self {
            LaneScope::All => "",
            LaneScope::Queue(q) => q,
        }
    }

    /// The scope a store's key names ([`LaneScope::key`] reversed).
    pub fn from_key(key: &str) -> LaneScope {
        if key.is_empty() { LaneScope::All } else { LaneScope::Queue(key.to_owned()) }
    }
}

impl std::fmt::Display for LaneScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaneScope::All => f.write_str("every queue"),
            LaneScope::Queue(q) => write!(f, "queue {q}"),
        }
    }
}

/// A change to one lane's settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaneChange {
    /// Sets the concurrency limit (0 lifts it). Only for one queue.
    Limit(u32),
    /// Pauses (a lane already paused keeps its first stamp).
    Pause(Stamp),
    /// Lifts the pause (a lane not paused stays as it is).
    Resume,
}

/// Every lane's settings, as stored in the file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lanes {
    /// Set while every queue is paused (`pause` without `--queue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_paused: Option<Stamp>,
    /// The queues with settings other than the defaults, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queues: BTreeMap<String, LaneSettings>,
}

impl Lanes {
    /// Whether nothing is set: no limit, no pause (a claim then has
    /// nothing to check).
    pub fn is_default(&self) -> bool {
        self.all_paused.is_none() && self.queues.is_empty()
    }

    /// The settings of `queue` (the defaults when it has none).
    pub fn of(&self, queue: &str) -> LaneSettings {
        self.queues.get(queue).cloned().unwrap_or_default()
    }

    /// Why no job of `queue` may start, if a pause says so: its own pause
    /// first, then the pause of every queue.
    pub fn pause_of(&self, queue: &str) -> Option<&Stamp> {
        self.queues.get(queue).and_then(|s| s.paused.as_ref()).or(self.all_paused.as_ref())
    }

    /// The settings of `scope` as stored: for [`LaneScope::All`], only a
    /// pause.
    pub fn get(&self, scope: &LaneScope) -> LaneSettings {
        match scope {
            LaneScope::All => LaneSettings { limit: 0, paused: self.all_paused.clone() },
            LaneScope::Queue(q) => self.of(q),
        }
    }

    /// Puts back the settings a store read under `scope`'s key.
    pub fn insert(&mut self, scope: LaneScope, settings: LaneSettings) {
        match scope {
            LaneScope::All => self.all_paused = settings.paused,
            LaneScope::Queue(q) if settings.is_default() => {
                self.queues.remove(&q);
            }
            LaneScope::Queue(q) => {
                self.queues.insert(q, settings);
            }
        }
    }
}

/// How many jobs of one queue are where, as a store counts them for
/// `queues`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueCounts {
    /// The queue.
    pub queue: String,
    /// Pending jobs: due or not, held, or waiting on parents.
    pub pending: u64,
    /// Of `pending`, those a claim could take now if the lane let it:
    /// their time come, no parent left to wait on, not held.
    pub due: u64,
    /// Of `pending`, those held.
    pub held: u64,
    /// Of `pending`, those waiting on parents not yet done.
    pub waiting_on_parents: u64,
    /// Running jobs.
    pub running: u64,
}

/// Whether a lane whose limit is `limit` (0: none) is full with `running`
/// of its jobs running: no new job of it starts. The one rule for "full":
/// the claim's [`crate::machine::LaneCheck`], the runner's report of what
/// holds it, and every presenter ask this, none re-derives it.
pub fn is_full(limit: u32, running: u64) -> bool {
    limit > 0 && running >= u64::from(limit)
}

/// One lane as `queues` shows it: its counts and its settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueInfo {
    /// The counts (the queue's name among them).
    #[serde(flatten)]
    pub counts: QueueCounts,
    /// The lane's limit; 0 is none.
    pub limit: u32,
    /// Set while the lane itself is paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<Stamp>,
}

impl QueueInfo {
    /// Whether the lane is at its limit ([`is_full`]): its own verdict, so
    /// that no reader of a report compares the counts itself.
    pub fn is_full(&self) -> bool {
        is_full(self.limit, self.counts.running)
    }
}

/// What `queues` shows: every queue with jobs or settings, by name, and
/// the pause of every queue.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuesReport {
    /// Set while every queue is paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all_paused: Option<Stamp>,
    /// The lanes, by name.
    pub queues: Vec<QueueInfo>,
}

impl QueuesReport {
    /// Merges what a store counted with the lanes' settings: a queue with
    /// settings but no jobs is listed too.
    pub fn new(lanes: &Lanes, counts: Vec<QueueCounts>) -> QueuesReport {
        let mut by_name: BTreeMap<String, QueueInfo> = counts
            .into_iter()
            .map(|c| (c.queue.clone(), QueueInfo { counts: c, ..QueueInfo::default() }))
            .collect();
        for name in lanes.queues.keys() {
            by_name.entry(name.clone()).or_insert_with(|| QueueInfo {
                counts: QueueCounts { queue: name.clone(), ..QueueCounts::default() },
                ..QueueInfo::default()
            });
        }
        let queues = by_name
            .into_values()
            .map(|mut info| {
                let settings = lanes.of(&info.counts.queue);
                info.limit = settings.limit;
                info.paused = settings.paused;
                info
            })
            .collect();
        QueuesReport { all_paused: lanes.all_paused.clone(), queues }
    }

    /// The lane named `queue`, if listed.
    pub fn get(&self, queue: &str) -> Option<&QueueInfo> {
        self.queues.iter().find(|q| q.counts.queue == queue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

    fn q(name: &str) -> LaneScope {
        LaneScope::Queue(name.to_owned())
    }

    #[test]
    fn a_limit_and_a_pause_are_stored_and_lifted() {
        let mut lanes = Lanes::default();
        lanes.apply(&q("disk"), &LaneChange::Limit(2)).unwrap();
        lanes.apply(&q("disk"), &LaneChange::Pause(Stamp::new("ana", T0))).unwrap();
        assert_eq!(lanes.of("disk").limit, 2);
        assert_eq!(lanes.pause_of("disk").map(|s| s.by.as_str()), Some("ana"));
        lanes.apply(&q("disk"), &LaneChange::Resume).unwrap();
        lanes.apply(&q("disk"), &LaneChange::Limit(0)).unwrap();
        assert!(lanes.is_default(), "defaults are not kept: {lanes:?}");
    }

    #[test]
    fn a_second_pause_keeps_the_first_stamp() {
        let mut lanes = Lanes::default();
        lanes.apply(&LaneScope::All, &LaneChange::Pause(Stamp::new("ana", T0))).unwrap();
        let later = Stamp::new("bo", T0.saturating_add(std::time::Duration::from_secs(5)));
        lanes.apply(&LaneScope::All, &LaneChange::Pause(later)).unwrap();
        assert_eq!(lanes.all_paused, Some(Stamp::new("ana", T0)));
    }

    #[test]
    fn resuming_every_queue_leaves_a_lane_paused_on_its_own() {
        let mut lanes = Lanes::default();
        lanes.apply(&q("disk"), &LaneChange::Pause(Stamp::new("ana", T0))).unwrap();
        lanes.apply(&LaneScope::All, &LaneChange::Pause(Stamp::new("ana", T0))).unwrap();
        assert!(lanes.pause_of("web").is_some());
        lanes.apply(&LaneScope::All, &LaneChange::Resume).unwrap();
        assert!(lanes.pause_of("web").is_none());
        assert!(lanes.pause_of("disk").is_some());
    }

    #[test]
    fn a_limit_for_every_queue_or_a_bad_name_is_refused() {
        let mut lanes = Lanes::default();
        assert!(lanes.apply(&LaneScope::All, &LaneChange::Limit(2)).is_err());
        assert!(lanes.apply(&q("../x"), &LaneChange::Limit(2)).is_err());
        assert!(lanes.is_default());
    }

    #[test]
    fn the_report_lists_configured_lanes_without_jobs() {
        let mut lanes = Lanes::default();
        lanes.apply(&q("idle"), &LaneChange::Limit(3)).unwrap();
        let counts =
            vec![QueueCounts { queue: "default".into(), pending: 2, ..Default::default() }];
        let report = QueuesReport::new(&lanes, counts);
        let names: Vec<_> = report.queues.iter().map(|q| q.counts.queue.as_str()).collect();
        assert_eq!(names, ["default", "idle"]);
        assert_eq!(report.get("idle").map(|q| q.limit), Some(3));
    }

    #[test]
    fn a_lane_is_full_at_its_limit_and_never_without_one() {
        assert!(!is_full(0, 1_000), "0 is no limit");
        assert!(!is_full(2, 1));
        assert!(is_full(2, 2));
        assert!(is_full(2, 3), "over the limit (a limit lowered under running jobs)");
        let info = |running, limit| QueueInfo {
            counts: QueueCounts { queue: "disk".into(), running, ..QueueCounts::default() },
            limit,
            paused: None,
        };
        assert!(info(2, 2).is_full() && !info(1, 2).is_full() && !info(5, 0).is_full());
    }

    #[test]
    fn scope_keys_round_trip() {
        for scope in [LaneScope::All, q("disk")] {
            assert_eq!(LaneScope::from_key(scope.key()), scope);
        }
    }
}
