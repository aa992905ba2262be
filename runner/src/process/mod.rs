//! Processes the runner starts and stops: each job runs as the leader of
//! its own process group, so stopping a job means signalling the group and
//! a pipeline or a `cmd &` inside the job dies with it.
//!
//! Three files of one role each: [`procfs`] reads `/proc` (no side
//! effects), [`group`] signals whole groups safely, and [`spawn`] starts a
//! child in a clean state (all of the crate's `unsafe` but the idle timer's
//! lives there).
//!
//! Not covered: a process that leaves the job's group on purpose (`setsid`,
//! `setpgid`, a daemon that double-forks) escapes the group's signals, as it
//! escapes a terminal's. Its output still goes to the job's log until it
//! closes it; the runner waits for that a bounded time only.

pub(crate) mod group;
pub(crate) mod procfs;
pub(crate) mod spawn;
