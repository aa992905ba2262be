//! slothqueue's [`Store`](slothqueue_core::Store) on [redb], a pure-Rust
//! embedded key-value store: one file, no C toolchain, ACID transactions.
//!
//! # The choices, and why
//!
//! Each is detailed in a section below.
//!
//! - **Every question is a seek.** redb is an ordered key-value store, so
//!   each index is a table keyed for the question it answers (the claim's
//!   is keyed in claim order per queue and kind), kept in step with the
//!   job row by one function in the same transaction.
//! - **Every operation is the core's.** Each write is one of
//!   `slothqueue_core::ops` in one write transaction over the row verbs of
//!   `RedbTx` (`verbs.rs`); the store pushes down into the claim's search
//!   only what `ready` serves (queues, closed lanes, kinds, due time).
//! - **Many processes, one file.** redb's multi-writer mode; the threads
//!   of one process hand the turn to write along a per-file gate, another
//!   process's lock is polled for, at most `lock_timeout`, then
//!   [`StoreError::Busy`](slothqueue_core::StoreError::Busy).
//! - **One durability, `Immediate`**: redb refuses the faster one on a
//!   file shared between processes.
//! - **Vetted before anything is written**, by a sniff and a read-only
//!   probe; a full integrity check only where the file's seal does not
//!   vouch for it (and at a runner's start).
//! - **Commands that only look** use redb's read-only handle (a writable
//!   open rewrites the header); a file a crash left unclean is read as a
//!   snapshot repaired in memory, refreshed to the real file once a writer
//!   has repaired it.
//! - **Ids are never reused**: the next id is a counter in the meta table
//!   that only goes up, also across purges and restores.
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
//! due jobs of each (queue, kind) pair are the first `ready` entries under
//! that prefix, already in claim order. `ready` holds exactly the pending
//! jobs whose `not_before` is at or below a stored *watermark*, the latest
//! `now` any push or claim has seen; a claim first moves the jobs that
//! became due since then from `pending_by_time` into `ready` (each job
//! moves once), so jobs scheduled for the future never sit in front of due
//! ones. If the clock steps backwards, the few `ready` entries that are not
//! due at the earlier `now` are skipped a priority level at a time. Every
//! index is written in the same write transaction as the job row, by one
//! function (`RedbTx::put`) that removes the old row's entries and adds
//! the new row's.
//!
//! A job with parents (`after`) that are not all `done` is pending but in
//! `waiting_on_parents` instead: the claim's range scans never meet it,
//! however many wait. Every transition is written with what it causes to
//! the jobs waiting on it (core's one write path, which reads
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
//! row: `fire_schedules` reads every row in one write transaction, decides
//! each due tick (core's `ops::fire_schedules`), pushes a tick's job
//! through the path every push takes (so its key `KEY@SLOT` deduplicates a
//! second decision of the slot) and writes the row back with its cursor
//! moved. Two runners firing at once take turns at the write lock, and the
//! second reads the first's cursor: each slot is decided once.
//!
//! A job's GPU request and its attempt's holds (schema 5) live inside the
//! job's JSON like every other field; the version moved anyway, with no
//! table change, so that a v4 build refuses a file that may hold a GPU
//! job rather than hand it out as one that needs no GPU.
//!
//! # Transactions and the fence
//!
//! Every change is one of core's operations (`slothqueue_core::ops`) run in
//! one redb write transaction over the row verbs of `RedbTx` (`verbs.rs`):
//! the rows read, the pure transition from [`slothqueue_core::machine`],
//! each row written with its index entries, the events appended, the
//! commit (all on tokio's blocking pool). redb allows one write
//! transaction at a time across every process sharing the file, and a
//! write transaction starts from the latest commit, so the owner and
//! attempt the transition checks (the fence) cannot change between the
//! read and the write: the transaction is the `WHERE owner = ? AND attempt
//! = ?` of the SQL backend. `RedbTx::put` still compares the stored row's
//! state, attempts and lease with the one planned from, for one lookup, so
//! that no future change can write over a row it did not read.
//!
//! A claim is decided as on every backend, by core: in its write
//! transaction the running jobs and the lanes are read, and the due jobs
//! are pulled from `ready` in claim order ([`ClaimRequest`](slothqueue_core::ClaimRequest)'s liveness
//! judge, an `Arc` that travels to the blocking pool, is asked about each
//! running lease there, inside the transaction that acts on its verdict).
//! What the index serves is pushed down: the queues named (each its own
//! prefix), the closed lanes (a paused or full queue skipped at its first
//! key, one seek however many of its jobs are due), the kinds (a group
//! skipped at a time) and the due time; the first pull asks for one job,
//! which costs one seek per (queue, kind) pair, and core asks for more,
//! from a cursor, only when it passes jobs over. With no lane settings the
//! lanes cost one look at an empty table; while every queue is paused no
//! pending job is read at all. `reclaim_dead` takes the exact (job,
//! attempt) pairs to take back and changes only a job still at that
//! attempt; an empty list opens no transaction.
//!
//! Every write transaction reads the schema version first, so a handle
//! whose file a newer build migrated meanwhile (a runner left going across
//! an upgrade) refuses with
//! [`StoreError::SchemaTooNew`](slothqueue_core::StoreError::SchemaTooNew)
//! rather than write rows and indexes in the old layout. After an I/O error
//! redb has latched (a full disk, say) the store opens the file again and
//! tries the call once more, so the queue recovers without a restart.
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
//! # The seal: a full check only when the file needs one
//!
//! A writable open runs redb's integrity check (every page checksum, under
//! its writer lock) before anything is written, unless the file's seal
//! vouches for it. redb's plain open trusts the file, and on one damaged
//! outside redb it can panic twice in a row and abort the process (torture
//! S16); the check reads the whole file, which on every `add` made its
//! cost grow with the queue (×30 at 100,000 jobs). The seal (`seal.rs`,
//! the file `Q.seal`) is the file's device, inode, size and modification
//! and change times as a slothqueue writer last left it, renewed after
//! every commit and every close. What protects against what:
//!
//! - a file copied or restored in, or written by any other program: its
//!   times or inode differ from the seal, so the open checks in full;
//! - a writer killed mid-commit: it could not renew the seal after its
//!   last write, so the next open checks in full (and redb repairs);
//! - damage under unchanged timestamps (a disk's bit rot), or a same-size
//!   change in the same coarse clock tick as a renewal on kernels before
//!   6.13: a runner (`run`, `serve`) checks in full at every start
//!   ([`RedbOptions::full_check`]), whatever the seal says;
//! - a seal planted by someone else: believed only when it is a regular
//!   file of this user that nobody else may write, opened without
//!   following a symlink;
//! - a look (`status`, `list`, …) at a file the seal does not vouch for,
//!   and a writing open of one before its probe reads it, run the same
//!   check in the copy-on-write overlay in memory (nothing written; the
//!   writing open then need not check again). The overlay takes none of
//!   redb's locks, so the check runs only while nobody has the file open:
//!   it takes the exclusive `flock` (every redb handle holds the shared
//!   one) without waiting, and holds it throughout. A file in use is left
//!   to its users' checks (torture S03: a check of a queue four runners
//!   wrote read a commit half-made, and redb's close of that image
//!   panicked).
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
