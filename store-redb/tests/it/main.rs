//! The redb store's own integration tests, in one binary (one link, not
//! one per file). Each module guards one concern; its `//!` says which bug
//! or promise. What belongs where:
//!
//! - `bad_files`: files that are not a healthy queue refused with a typed
//!   error, never a panic, and left byte-for-byte as they were;
//! - `crash`: a queue a killed process left open is repaired on open, after
//!   a dry run in memory (runs this binary again as the child, by the test's
//!   full name `crash::crash_child`);
//! - `damaged_close`: a file whose damage redb meets only on close (S16);
//! - `power_loss`: power cut after every sync of a workload (S06);
//! - `disk_full`: a full disk fails cleanly and the handle recovers (S15);
//! - `dependencies`: jobs waiting on parents kept out of the claim's
//!   indexes and let in when the last parent is done (a chain and a fan-out
//!   of 10,000), the v1 → v2 migration, batch refusals naming the element;
//! - `import`: how long a `restore_many` of 100,000 jobs takes (a measurement, run when asked);
//! - `busy`: contention between handles and processes, bounded waits;
//! - `read_only`: commands that only look change no byte of the file;
//! - `claim_order`: the `ready` index against a model (proptest; its
//!   regressions file sits beside it, `claim_order.proptest-regressions`);
//! - `v1_fixture`: the schema-v1 fixture in `tests/data/` opens and reads
//!   back exactly, forever;
//! - `v2_fixture`: the schema-v2 fixture (dependencies) migrates to the
//!   current schema and reads back exactly, forever;
//! - `v3_fixture`: the schema-v3 fixture (lanes, holds) migrates to v4
//!   (schedules) and reads back exactly, forever; a schedule put on it
//!   fires, finds the v3 job holding its tick's key, and survives reopen;
//! - `schedules`: schedules in this backend's table: stored as they are
//!   across handles and read-only opens, a row that does not decode is
//!   damage, a fire is one transaction (all its ticks or none);
//! - `lanes`: limits, pauses and holds in this backend's claim indexes
//!   (a closed queue skipped at its first key, a limit across handles, a
//!   held job out of every claim index), against a model too.
//!
//! The shared `Store` contract is not here: it is `tests/conformance.rs`, its
//! own binary, which `cargo xtask conformance` runs by name.

mod bad_files;
mod busy;
mod claim_order;
mod crash;
mod damaged_close;
mod dependencies;
mod disk_full;
mod import;
mod lanes;
mod power_loss;
mod read_only;
mod schedules;
mod v1_fixture;
mod v2_fixture;
mod v3_fixture;
mod v4_fixture;
