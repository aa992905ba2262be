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
//! - **Every operation is the core's.** Each write is one of
//!   `slothqueue_core::ops` run inside one write transaction over the row
//!   verbs of `SqliteTx` (`verbs.rs`); every job row it writes carries the
//!   old state, owner and attempt in the `UPDATE`'s condition. Heartbeats
//!   and runner records commit without the fsync (`synchronous=NORMAL` for
//!   that one commit, in WAL with `FULL`): their loss in a power cut
//!   changes nothing, since after one every lease's owner is gone.
//! - **The claim's search is pushed down to partial indexes.** Due jobs
//!   are handed to core in claim order from `jobs_pending` (priority
//!   DESC, `not_before`, id; pending, waiting on no parent, not held) one
//!   priority level at a time, or from `jobs_pending_queue` per queue when
//!   the claim names queues or a lane is closed (the queues with claimable
//!   jobs are walked one seek each, so a paused backlog costs nothing per
//!   job); kinds are pushed down as `kind IN (...)`. The first pull asks
//!   for one job (what one `LIMIT 1` seek costs); core asks for more, from
//!   a cursor, only when it passes jobs over. Everything else a claim
//!   checks is core's.
//! - **Ids are never reused**: the next id is above both `MAX(id)` and a
//!   high water in `meta` that a purge raises before it deletes (no
//!   `AUTOINCREMENT`).
//! - **Partial indexes only, each one count.** A push writes 5 b-tree
//!   pages (the row, the two claim indexes, the due index, the event);
//!   every count `stats` and `queues` show is the size of one partial
//!   index (read with `dbstat`), never a walk of the table. A job waiting
//!   on parents or held is in none of the claim and due indexes
//!   (`pending_parents = 0 AND held = 0` in their conditions; the 0/1
//!   `held` flag is what indexes name, since SQLite treats an index as
//!   covering only for a column its condition fixes), so a backlog of
//!   waiting jobs costs a claim nothing. A job's parents are a JSON column
//!   and an `edges (parent, child)` table keyed by parent, an edge written
//!   and deleted with its child.
//! - **The layout is versioned** (`user_version`; the current one in
//!   [`SCHEMA_VERSION`]): every older file migrates on open, one version at
//!   a time, in place where a column is added. An open compares the file's
//!   whole `sqlite_schema` with the one its version must have — for the
//!   current version by fingerprint (a SHA-256 a unit test recomputes from
//!   the migrations), so a damaged schema is refused before anything is
//!   written. A writing open of a file whose header alone says "current
//!   layout, whole", with no WAL frames beside it, skips the probe's own
//!   connection and vets the schema before its first write; a WAL with
//!   frames always goes through the probe's read-only look.

#![deny(missing_docs)]

// The files, one role each, the same set in every store crate, listed so
// that each uses only files before it (no cycle):
// - `error`: every rusqlite error onto `StoreError`, in one place;
// - `schema`: the layout (DDL, versions, migrations);
// - `rows`: jobs, events, runner records, lanes and schedules as rows and
//   back, the lookups by key, a job's parents as edges, the conditional
//   writes;
// - `reads`: the reads that are not operations (list, stats, counts,
//   next due, trails, runner records), from the partial indexes;
// - `txn`: the options, connecting and configuring, the busy handler, the
//   transactions;
// - `verbs`: `SqliteTx`, the row verbs core's operations run on, and the
//   claim's search in claim order;
// - `open`: the read-only probe, creation, migration under the write lock;
// - `store`: the handle and `impl Store`, each write one of core's
//   operations in one transaction.
mod error;
mod open;
mod reads;
mod rows;
mod schema;
mod store;
mod txn;
mod verbs;

pub use open::sniff;
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use store::SqliteStore;
pub use txn::{Journal, SqliteOptions, Synchronous};
