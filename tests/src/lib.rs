//! The conformance suite every slothqueue [`Store`]
//! backend must pass, written once and generic over how a backend opens a
//! queue file.
//!
//! # Shape
//!
//! Each scenario is a plain `pub async fn name(h: &Harness)` in a module
//! named by area ([`scenarios::claim`], [`scenarios::lease`], …); its doc
//! comment states the contract it checks, so the module docs are the
//! specification in prose. A [`Harness`] owns a temporary directory, the
//! backend's [`OpenFn`], the queue path `dir/queue`, a start time, an
//! injected [`TestJudge`] and the store handle. Time is injected only: a
//! scenario passes `now` to every call and advances a local variable; nothing
//! sleeps. After every scenario the runner replays every job's trail
//! ([`slothqueue_core::machine::replay`]) and checks it ends in the job's
//! state ([`assert_all_trails_consistent`]).
//!
//! # Using it from a backend
//!
//! The backend gives a function of type [`OpenFn`] (the same path opens the
//! same queue, from a second handle or another process) and calls the macro
//! once from its `tests/conformance.rs`:
//!
//! ```text
//! fn open(path: &Path, policy: Policy) -> Result<Arc<dyn Store>, StoreError> {
//!     Ok(Arc::new(SqliteStore::open(path, policy)?))
//! }
//!
//! slothqueue_conformance::conformance_suite!(open);
//! ```
//!
//! That expands to one `#[test]` per scenario, named after it
//! (`delayed_job_is_not_claimed_early`, …), each a one-liner calling
//! [`run_scenario`], plus a hidden `__child_entry` test used by the
//! multi-process scenarios (see below). Only one invocation per module.
//!
//! To run the whole suite again under a configuration variant (SQLite's
//! rollback journal, say), pass a second argument, a
//! module name:
//!
//! ```text
//! slothqueue_conformance::conformance_suite!(open_rollback_journal, rollback_journal);
//! ```
//!
//! That wraps the same expansion in `mod rollback_journal { use super::*; … }`,
//! so its tests are named `rollback_journal::delayed_job_is_not_claimed_early`
//! and so on. The open function is resolved inside that module through the
//! glob import, so a plain name or an absolute path both work.
//!
//! For ad-hoc use, [`run_all`] runs every scenario in turn and panics naming
//! the ones that failed.
//!
//! # Multi-process scenarios
//!
//! [`scenarios::concurrency::claim_race_across_processes_hands_each_job_once`],
//! [`scenarios::concurrency::pushes_across_processes_get_distinct_ids`] and
//! [`scenarios::schedules::processes_racing_fire_decide_each_slot_once`]
//! start 4 copies of the current test binary
//! (`current_exe() --exact <module>::__child_entry --nocapture --test-threads 1`)
//! with [`child::CHILD_ENV`] set to `<role>:<queue path>`. The generated
//! `__child_entry` test does nothing unless that variable is set; when it
//! is, it opens the queue through the same [`OpenFn`], does its role's work
//! and writes what it did to the file named by [`child::OUT_ENV`]. Under
//! [`run_all`] there is no such test to re-execute, so those scenarios
//! use OS threads, each with its own handle and runtime, instead.

#![deny(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a conformance failure is a panic")]

pub mod child;
pub mod disk_full;
mod harness;
pub mod scenarios;

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;

pub use harness::{
    Harness, TestJudge, assert_all_trails_consistent, assert_trail_consistent, event_kinds, job,
    refused_in_batch, secs, shell, snapshot,
};
use slothqueue_core::{Policy, Store, StoreError};

/// How the suite opens a backend: the same path opens the same queue
/// (reopen, second handle, other process). The backend may use the path as
/// given or derive its own file name from it.
pub type OpenFn = fn(&Path, Policy) -> Result<Arc<dyn Store>, StoreError>;

/// Runs one scenario in a fresh [`Harness`] on a fresh multi-thread tokio
/// runtime, then checks every job's trail. `module` is the `module_path!()`
/// of the macro's expansion: it names the child-entry test the
/// multi-process scenarios re-execute.
pub fn run_scenario<F>(open: OpenFn, module: &str, scenario: F)
where
    F: AsyncFnOnce(&Harness),
{
    run_in_harness(open, Some(child::child_test_name(module)), scenario);
}

fn run_in_harness<F>(open: OpenFn, child_test: Option<String>, scenario: F)
where
    F: AsyncFnOnce(&Harness),
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("build a tokio runtime");
    rt.block_on(async {
        let h = Harness::new(open, child_test);
        scenario(&h).await;
        let store = h.store();
        assert_all_trails_consistent(&*store).await;
    });
}

/// Runs every scenario, each in its own harness, and panics naming the ones
/// that failed. The multi-process scenarios use threads here (there is no
/// child-entry test to re-execute).
pub fn run_all(open: OpenFn) {
    let mut failed: Vec<&'static str> = Vec::new();
    crate::__with_scenarios!(__run_all_body { open, failed });
    assert!(failed.is_empty(), "conformance scenarios failed: {}", failed.join(", "));
}

#[doc(hidden)]
pub fn __run_catching<F>(open: OpenFn, name: &'static str, failed: &mut Vec<&'static str>, f: F)
where
    F: AsyncFnOnce(&Harness),
{
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| run_in_harness(open, None, f)));
    if outcome.is_err() {
        failed.push(name);
    }
}

/// The entry point of a child process in the multi-process scenarios: does
/// nothing unless [`child::CHILD_ENV`] is set. The macro generates the
/// `__child_entry` test that calls it.
pub fn child_entry(open: OpenFn) {
    child::run_if_child(open);
}

crate::__with_scenarios!(__scenario_names {});

/// Generates the conformance tests for a backend.
///
/// `conformance_suite!(open)` expands, in the current module, to one
/// `#[test] fn <scenario>()` per scenario plus the hidden `__child_entry`
/// test. `conformance_suite!(open, variant)` puts the same inside
/// `mod variant`, so a backend can run the suite again under another
/// configuration. `open` must be a function of type [`OpenFn`].
///
/// A backend that needs something the machine may not have (a database
/// server) adds a precondition, a `fn() -> bool` checked at the start of
/// every generated test, which returns at once (passing) when it is false:
/// `conformance_suite!(open, when = server_available)` (or
/// `conformance_suite!(open, variant, when = server_available)`). The
/// precondition says why it skips, or panics where skipping is not
/// allowed.
#[macro_export]
macro_rules! conformance_suite {
    ($open:path $(,)?) => {
        $crate::__with_scenarios!(__emit_tests { $open });

        /// Does nothing unless started by a multi-process scenario.
        #[test]
        fn __child_entry() {
            $crate::child_entry($open)
        }
    };
    ($open:path, when = $when:path $(,)?) => {
        $crate::__with_scenarios!(__emit_tests_when { $open, $when });

        /// Does nothing unless started by a multi-process scenario.
        #[test]
        fn __child_entry() {
            $crate::child_entry($open)
        }
    };
    ($open:path, $variant:ident, when = $when:path $(,)?) => {
        mod $variant {
            #[allow(unused_imports)]
            use super::*;
            $crate::conformance_suite!($open, when = $when);
        }
    };
    ($open:path, $variant:ident $(,)?) => {
        mod $variant {
            #[allow(unused_imports)]
            use super::*;
            $crate::conformance_suite!($open);
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __emit_tests_when {
    ({ $open:path, $when:path } [ $( $area:ident :: $name:ident ),* $(,)? ]) => {
        $(
            #[test]
            fn $name() {
                if !$when() {
                    return;
                }
                $crate::run_scenario($open, module_path!(), $crate::scenarios::$area::$name)
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __emit_tests {
    ({ $open:path } [ $( $area:ident :: $name:ident ),* $(,)? ]) => {
        $(
            #[test]
            fn $name() {
                $crate::run_scenario($open, module_path!(), $crate::scenarios::$area::$name)
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __run_all_body {
    ({ $open:ident, $failed:ident } [ $( $area:ident :: $name:ident ),* $(,)? ]) => {
        $(
            $crate::__run_catching($open, stringify!($name), &mut $failed, $crate::scenarios::$area::$name);
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_names {
    ({} [ $( $area:ident :: $name:ident ),* $(,)? ]) => {
        /// Every scenario's name, in the order [`run_all`] runs them.
        pub const SCENARIOS: &[&str] = &[ $( stringify!($name) ),* ];
    };
}
