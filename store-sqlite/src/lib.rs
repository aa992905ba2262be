//! slothqueue's [`Store`](slothqueue_core::Store) on SQLite: one file, any
//! number of processes, no daemon.
//!
//! The choices, and why:
//!
//! - **SQLite is bundled.** Older system SQLite builds have a WAL bug when
//!   several processes write, and a runner, `add` and `serve` all write.
//! - **WAL journal** by default: readers never block the writer, so
//!   `status` never waits behind a runner's commit.
//! - **`synchronous=FULL`** by default: an acknowledged `add` survives a
//!   power cut. [`Synchronous::Normal`] trades the last few commits before
//!   an OS crash for speed (never corruption).
//! - **Writes begin `BEGIN IMMEDIATE`** with a busy timeout: a deferred
//!   transaction that upgrades to a write skips SQLite's busy handler and
//!   fails at once, and a CLI call must wait its turn, not fail because a
//!   runner is alive. Waiting longer than the timeout is
//!   [`StoreError::Busy`](slothqueue_core::StoreError::Busy).
//! - **A read-only probe before opening.** A foreign, damaged or too-new
//!   file is refused without a byte changed and without `-wal`/`-shm`
//!   files left beside it; see [`SqliteStore::open`].
//! - **Only a writing open makes a queue**, and only of a file it created
//!   itself: an empty file found in place (0 bytes, or a database with no
//!   tables) is waited for briefly, as another slothqueue creating the
//!   queue, then refused untouched.
//! - **Commands that only look** open with [`SqliteStore::open_read_only`]:
//!   nothing created or written, and where the folder cannot be written
//!   (a read-only filesystem, a full disk) the file is read immutable,
//!   which [`SqliteStore::read_only_note`] says.
//! - **Lanes are in the file**, one row per lane with settings, read by
//!   every claim inside its write transaction with the running jobs, so a
//!   limit holds across every runner and process on the file; a file with
//!   no settings costs a claim one read of an empty table. A held job, like
//!   one waiting on parents, is in no claim or due index.
//! - **Schedules are in the file**, one row per schedule (its JSON), and
//!   `fire_schedules` decides every due tick in one write transaction:
//!   the cursor it moves is read by the next caller under the same lock,
//!   so two runners never decide a slot twice, and a tick's job is pushed
//!   by the path every push takes.
//! - **Every transition is the core's.** The store reads rows, calls
//!   `slothqueue_core::machine`, and writes the result with the old state,
//!   owner and attempt in the `UPDATE`'s condition.

#![deny(missing_docs)]

// The files, one role each, the same set in every store crate, listed so
// that each uses only files before it (no cycle):
// - `error`: every rusqlite error onto `StoreError`, in one place;
// - `schema`: the layout (DDL, versions, migrations);
// - `rows`: jobs, events, runner records, lanes and schedules as rows and
//   back, the queries, the claim's candidates, a job's parents as edges,
//   the dependency rule's `Graph` over the open transaction;
// - `txn`: the options, connecting and configuring, the busy handler, the
//   transactions;
// - `open`: the read-only probe, creation, migration under the write lock;
// - `store`: the operations (the schedules' transactions among them) and
//   `impl Store`.
mod error;
mod open;
mod rows;
mod schema;
mod store;
mod txn;

pub use open::sniff;
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use store::SqliteStore;
pub use txn::{Journal, SqliteOptions, Synchronous};
