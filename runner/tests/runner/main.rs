//! The runner against a real SQLite queue and real processes, by area
//! (`wait` against both backends' files).
//!
//! Every wait polls with a deadline (`support::DEADLINE`); nothing asserts
//! on timing beyond "it happened before the deadline".

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail the test loudly; clippy exempts only #[test] bodies"
)]

mod chain;
mod contain;
mod escapes;
mod faulty;
mod follow;
mod gates;
mod gpus;
mod handlers;
mod jobs;
mod lanes;
mod limits;
mod reclaim;
mod regressions;
mod schedules;
mod slots;
mod stopping;
mod support;
mod suspend;
mod wait;
