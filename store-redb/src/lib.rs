//! slothqueue's [`Store`](slothqueue_core::Store) on [redb], a pure-Rust
//! embedded key-value store: one file, no C toolchain, ACID transactions.
//!
//! # Why the tables look the way they do
//!
//! redb is an ordered key-value store, so every question the queue asks
//! often has to be a point lookup or the start of a range scan; anything
//! else would cost a scan of every job. The tables (see `schema.rs`):
//!
//! | table | key → value | why |
//! |---|---|---|
//! | `slothqueue_meta` | name → `u64` | schema version, next id (never reused), the ready watermark |
//! | `jobs` | id → JSON [`Job`](slothqueue_core::Job) | the rows; JSON so a new field is a serde default, not a migration |
//! | `ready` | (queue, kind, priority flipped, `not_before`, id) → () | pending jobs already due at the watermark, in claim order per (queue, kind) |
//! | `pending_by_time` | (`not_before`, id) → (queue, kind, priority) | every pending job by due time: promotion into `ready`, `next_due`, `due_now` |
//! | `waiting_on_parents` | id → () | pending jobs waiting on parents not yet done: kept out of `pending_by_time` and `ready`, so no claim sees them; its length is `Stats::waiting_on_parents` |
//! | `held` | id → queue | pending jobs a user holds: kept out of `pending_by_time` and `ready` like waiting ones (in `waiting_on_parents` too if they also wait); its length is `Stats::held`, and the queue makes `queues` count them without reading rows |
//! | `lanes` | scope key → JSON [`LaneSettings`](slothqueue_core::LaneSettings) | each lane's limit and pause (key: the queue, or `""` for every queue); only settings other than the defaults are stored |
//! | `dependency_edges` | (parent id, child id) → () | who waits on a job, in one range scan: a parent's completion or failure reaches its children in its own transaction |
//! | `running` | id → lease end | the few running jobs, for reclaim and `next_due` |
//! | `idempotency_keys` | key → id | which job holds a key |
//! | `events` | (job id, seq) → JSON [`Event`](slothqueue_core::Event) | the append-only trail, read by one range scan |
//! | `state_counts` | state → count | `status` without a scan |
//! | `runners` | owner id → JSON [`RunnerRecord`](slothqueue_core::RunnerRecord) | who is running |
//! | `schedules` | key → JSON [`Schedule`](slothqueue_core::Schedule) | recurring jobs: definition, cursor, last fire; in key order, the order ticks are decided in |
//!
//! A claim is a few O(log n) seeks even with a million pending jobs: the
//! best due job of each (queue, kind) pair is the first `ready` entry
//! under that prefix. `ready` holds exactly the pending jobs whose
//! `not_before` is at or below a stored *watermark*, the latest `now` any
//! push or claim has seen; a claim first moves the jobs that became due
//! since then from `pending_by_time` into `ready` (each job moves once), so
//! jobs scheduled for the future never sit in front of due ones. If the
//! clock steps backwards, the few `ready` heads that are not due at the
//! earlier `now` are skipped a priority level at a time. Every index is
//! written in the same write transaction as the job row, by one function
//! that removes the old row's entries and adds the new row's.
//!
//! A job with parents (`after`) that are not all `done` is pending but in
//! `waiting_on_parents` instead: the claim's range scans never meet it,
//! however many wait. Every transition is written with what it causes to
//! the jobs waiting on it (`machine::plan_with_dependents`, read through
//! `dependency_edges` in the same transaction), so the write that completes
//! a job's last parent moves it into `pending_by_time` (and `ready`, by the
//! watermark rule) before the commit; a failure cancels them the same way.
//! The edges (schema 2; a v1 queue gains the empty tables on open) belong
//! to the child: written with it, deleted with it.
//!
//! A held job (schema 3, like `lanes`; a v2 queue gains both tables empty)
//! is out of the claim's indexes the same way, in `held`; releasing it
//! puts it back by the same one write path (if its parents are done). A
//! claim reads the lanes and every running job in its transaction
//! ([`LaneCheck`](slothqueue_core::LaneCheck)): with no settings that is
//! one look at an empty table; a closed (paused or full) queue is skipped
//! at its first `ready` key, one seek, however many of its jobs are due,
//! and while every queue is paused no pending job is read at all.
//!
//! A schedule (schema 4; a v3 queue gains the empty table on open) is one
//! row: `fire_schedules` reads every row in one write transaction, asks
//! [`slothqueue_core::schedule::plan_tick`] about each (with the state of
//! its last tick's job, read there too), pushes a due tick's job through
//! the same path as `push` (so its key `KEY@SLOT` deduplicates a second
//! decision of the slot) and writes the row back with its cursor moved.
//! Two runners firing at once take turns at the write lock, and the second
//! reads the first's cursor: each slot is decided once.
//!
//! # Transactions and the fence
//!
//! Every change is one redb write transaction: read the row, apply the
//! pure transition from [`slothqueue_core::machine`], write the row and its
//! index entries, append the events, commit (all on tokio's blocking
//! pool). redb allows one write transaction at a time across every process
//! sharing the file, and a write transaction starts from the latest
//! commit, so the owner and attempt the transition checks (the fence)
//! cannot change between the read and the write: the transaction is the
//! `WHERE owner = ? AND attempt = ?` of the SQL backend.
//!
//! A claim is decided as on every backend: in its write transaction, the
//! running jobs and the best ready job are read and handed to
//! [`slothqueue_core::machine::plan_claim`] with the claim's
//! [`ClaimRequest`](slothqueue_core::ClaimRequest), whose liveness judge (an
//! `Arc`, so it travels to the blocking pool) is asked about each running
//! lease there, inside the transaction that acts on its verdict; the plan
//! is then written. `reclaim_dead` takes the exact (job, attempt) pairs to
//! take back and changes only a job still at that attempt.
//!
//! # Several processes, several handles
//!
//! The file is opened with [`redb::ConcurrencyMode::MultiWriter`] (redb
//! 4.5+): a runner, `add`, `status` and `serve` all hold it at once, taking
//! turns at writing, one write transaction at a time. redb's locks are
//! open-file-description locks, so two [`RedbStore`]s on one file in one
//! process contend exactly like two processes, and each has its own
//! `Database`; no shared registry of databases is needed. What the handles
//! of one process do share (through a registry of `Weak` entries keyed by
//! the file's device and inode) is a write gate that hands the turn to
//! write from one thread to the next, so threads of one process do not
//! poll against each other. Another process's write is polled for (redb
//! has a non-blocking `try_begin_write`, while its blocking `begin_write`
//! would wait without limit), pausing 1 to 10 ms between tries, for at most
//! [`RedbOptions::lock_timeout`] in all; then the call answers
//! [`StoreError::Busy`](slothqueue_core::StoreError::Busy). An open that
//! finds another process mid-write waits the same way. Reads never wait
//! for writers.
//!
//! # Durability
//!
//! Every commit is [`redb::Durability::Immediate`]: fsynced, with redb's
//! 2-phase commit, before the call returns. There is no faster setting:
//! redb refuses its only one, `Durability::None`, on a file shared between
//! processes (a commit held in one process's memory would be invisible to
//! the others), and every slothqueue file is shared.
//!
//! # Bad files and new files
//!
//! Before redb may write anything, the file is sniffed (redb's magic
//! number) and opened read-only to check the schema version: a foreign
//! file (SQLite, random bytes, another program's redb), a truncated or
//! damaged one, or one from a newer slothqueue is refused with a typed
//! error and left byte-for-byte unchanged. A file a crash left needing
//! repair cannot be opened read-only; it is first repaired in a
//! copy-on-write overlay in memory, and only if that works out is the real
//! file opened (and repaired by redb) for writing.
//!
//! # Looking without writing
//!
//! A writable redb open rewrites the file's header on opening and closing
//! even when nothing else is written, so [`RedbStore::open_read_only`]
//! (the CLI's `status`, `list`, `show`, `logs`, `export`) opens redb's
//! read-only handle instead: same vetting, not a byte written, the file
//! shared with running writers whose commits it sees. A file left unclean
//! by a crash, with no live writer to repair it, cannot be opened that way;
//! it is repaired in the memory overlay and read as a snapshot, replaced by
//! the real handle once a writer has repaired the file. Writes through a
//! read-only store answer `StoreError::Io` of kind `ReadOnlyFilesystem`.
//! A file that is not a queue yet (0 bytes, or a redb file with no tables)
//! is refused untouched: only a writing open makes a queue.
//!
//! redb initialises a new file in place in several steps, and a crash
//! between them leaves a file without its magic number that redb never
//! opens again. So a missing queue is built under a temporary name beside
//! it and hard-linked into place (which also settles a race between
//! processes creating it at once: the first link wins, the others use its
//! file). A zero-byte file is initialised in place.

#![deny(missing_docs)]

// The files, one role each, the same set in every store crate, listed so
// that each uses only files before it (no cycle):
// - `error`: every redb error (and a panic inside redb) onto `StoreError`;
// - `schema`: the layout (tables, keys, versions, migrations);
// - `rows`: `RedbTx`, the tables of one write transaction and the index
//   bookkeeping (every index in step with the row, the watermark), the
//   encoding, the index check;
// - `reads`: the reads that are not operations (list, stats, counts, next
//   due, trails, runner records), from the indexes;
// - `verbs`: the row verbs core's operations run on, over `RedbTx`, and
//   the claim's search in claim order in `ready`;
// - `seal`: the file's seal, what a writable open may trust;
// - `txn`: the options, the handle, the write gate, the bounded wait for
//   another process's lock, the write transaction;
// - `open`: the sniff and probe, creation, the vetted and read-only opens,
//   the memory overlay;
// - `store`: the handle and `impl Store`, each write one of core's
//   operations in one transaction.
mod error;
mod open;
mod reads;
mod rows;
mod schema;
mod seal;
mod store;
mod txn;
mod verbs;

pub use open::sniff;
pub use schema::SCHEMA_VERSION;
pub use store::RedbStore;
pub use txn::RedbOptions;
