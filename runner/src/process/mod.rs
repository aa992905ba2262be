//! Processes the runner starts and stops: each job runs as the leader of
//! its own process group, so stopping a job means signalling the group and
//! a pipeline or a `cmd &` inside the job dies with it.
//!
//! Four files of one role each: [`procfs`] reads `/proc` (no side
//! effects), [`group`] signals whole groups safely, [`spawn`] starts a
//! child in a clean state (its `pre_exec` hooks), and [`manners`] sets and
//! reads back a job's niceness and I/O class.
//!
//! Not covered: a process that leaves the job's group on purpose (`setsid`,
//! `setpgid`, a daemon that double-forks) escapes the group's signals, as it
//! escapes a terminal's. Its output still goes to the job's log until it
//! closes it; the runner waits for that a bounded time only.

pub(crate) mod group;
pub(crate) mod manners;
pub(crate) mod procfs;
pub(crate) mod spawn;
