//! What a containment says of itself: the mechanism in force, and what a
//! stop did (by which path each process was found).

use std::fmt;

/// Which mechanism holds an attempt's processes, strongest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// A cgroup of its own: every process the attempt started, whatever it
    /// did to its group, session or environment.
    Cgroup,
    /// The runner is a child subreaper and scans `/proc` (group, lease
    /// marker, parent chain): misses only a process that left the group,
    /// cleared its environment and was never seen descending from the job.
    SubreaperProc,
    /// Only the process group and the marker scan; orphans go to init.
    GroupOnly,
}

impl Mechanism {
    /// The word `show` and the README use: `cgroup`, `subreaper+proc` or
    /// `group only`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::Cgroup => "cgroup",
            Mechanism::SubreaperProc => "subreaper+proc",
            Mechanism::GroupOnly => "group only",
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The path by which a process was found (the first that found it, in this
/// order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Found {
    Cgroup,
    Group,
    Marker,
    Descendant,
}

/// What [`Containment::stop_all`](super::Containment::stop_all) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopReport {
    /// The mechanism in force for the attempt.
    pub mechanism: Mechanism,
    /// Why no cgroup held the attempt, when none did ("not contained").
    pub not_contained: Option<String>,
    /// Processes found through the attempt's cgroup.
    pub by_cgroup: usize,
    /// Processes found in the job's process group.
    pub by_group: usize,
    /// Processes found by the lease marker in their environment.
    pub by_marker: usize,
    /// Processes found through the parent chain (or seen in an earlier scan).
    pub by_descendant: usize,
    /// Processes still alive when the bounded wait after KILL ran out
    /// (uninterruptible sleep); empty when the attempt is gone.
    pub survivors: Vec<i32>,
    /// Adopted zombies of the attempt reaped on the way.
    pub reaped: usize,
    /// Whether the attempt's cgroup was removed (`false` also without one).
    pub cgroup_removed: bool,
}

impl StopReport {
    /// How many processes were stopped, by all paths.
    pub fn stopped(&self) -> usize {
        self.by_cgroup + self.by_group + self.by_marker + self.by_descendant
    }

    /// Whether nothing of the attempt is alive any more.
    pub fn is_clean(&self) -> bool {
        self.survivors.is_empty()
    }
}

impl fmt::Display for StopReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: stopped {} (cgroup {}, group {}, marker {}, descendants {})",
            self.mechanism,
            self.stopped(),
            self.by_cgroup,
            self.by_group,
            self.by_marker,
            self.by_descendant
        )?;
        if !self.survivors.is_empty() {
            write!(f, ", {} still alive", self.survivors.len())?;
        }
        if let Some(why) = &self.not_contained {
            write!(f, "; not contained: {why}")?;
        }
        Ok(())
    }
}
