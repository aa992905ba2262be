//! slothqueue's [`Store`](slothqueue_core::Store) on PostgreSQL: one queue
//! per schema, any number of processes on any number of hosts.
//!
//! The choices, and why:
//!
//! - **tokio-postgres, no libpq.** Pure Rust, async on the tokio the
//!   workspace uses. The store owns a small runtime of its own (one worker
//!   thread, and blocking threads for its operations) on which its
//!   connections' tasks run, so [`PgStore::open`] is synchronous and can
//!   be called from anywhere, also inside another runtime, and the async
//!   methods can be awaited from any runtime. A pool of a few connections
//!   ([`PgOptions::pool_size`], 4), opened on demand.
//! - **A schema per queue**, named by the URL's `?schema=NAME` parameter
//!   (default `slothqueue`; the parameter is removed before the URL goes
//!   to tokio-postgres): several queues share one database. Creation and
//!   migration run in one transaction under an advisory lock keyed on the
//!   schema (`pg_advisory_xact_lock`), so two processes opening a fresh
//!   schema at once create it once; the version is the `meta` row
//!   `schema_version`, and a newer one is refused untouched
//!   ([`StoreError::SchemaTooNew`](slothqueue_core::StoreError::SchemaTooNew)).
//! - **Every transition is one transaction** (`READ COMMITTED`) that reads
//!   the rows it changes locked (`FOR UPDATE`), applies the core's
//!   function, and writes with the old state, owner and attempt in the
//!   `UPDATE`'s condition (the fence). Serialization failures and
//!   deadlocks are retried a few times, then
//!   [`StoreError::Busy`](slothqueue_core::StoreError::Busy), as is a lock
//!   waited for longer than [`PgOptions::busy_timeout`] (`lock_timeout`).
//!   A lost server is
//!   [`StoreError::Unreachable`](slothqueue_core::StoreError::Unreachable).
//! - **Every round trip is bounded** ([`PgOptions::call_timeout`], 30 s):
//!   a server behind a link that went silent without a reset (a
//!   partition, a frozen proxy) would otherwise be waited on forever. Past
//!   it the call is `Unreachable` and its connection dropped, so the next
//!   call connects afresh and a runner gets back to the server once the
//!   link heals (S26).
//!
//! # The queue's lock
//!
//! Where the core's rule needs one consistent view across rows, the
//! transaction takes the queue's transaction-level advisory lock (a key
//! derived from the schema) before it reads anything; `READ COMMITTED`
//! then shows it every earlier holder's commits.
//!
//! - **Exclusive**: `push`, `push_many`, `clone_job` (ids are allocated
//!   from the highest ever used; idempotency keys and parents are looked up
//!   and must not change before the insert); `release`, `cancel`, `retry`,
//!   `edit`, `hold`, `release_hold`, `reclaim_dead` (a user's transition
//!   may reach far through the graph, and revive jobs from their parents'
//!   states); `fire_schedules`, `put_schedule`, `change_schedule`,
//!   `restore_schedules` (a schedule's cursor decides each slot once);
//!   `change_lane`; `purge` (the id high water, a pending parent still
//!   waited on); `restore_many` (ids and keys free).
//! - **Shared**: `complete`, `fail` and `settle_and_claim`, an owner's
//!   end of its attempt: it writes only rows it holds locked, its own job
//!   and the jobs waiting on it, each read `FOR UPDATE` before the core's
//!   rule counts its parents down, so two parents settling at once count a
//!   shared child down one after the other (a deadlock between them is the
//!   server's to detect, and retried). Settles of many runners thus run
//!   side by side and share the server's WAL flushes.
//! - **Shared**: `claim`. Claimers run side by side: each locks the due
//!   jobs it is handed with `SELECT … FOR UPDATE SKIP LOCKED` in claim
//!   order (priority desc, `not_before`, id, the `jobs_pending` index:
//!   O(log n) in the backlog) and the running jobs it reads likewise, so
//!   no two take one job and none waits for another. A claim that needs a
//!   view of every running job, because lanes are configured (a limit
//!   counts a lane's running jobs, across every claimer), or that would end
//!   abandoned jobs (their end reaches their dependents), rolls back and
//!   runs again under the exclusive lock: the row verbs answer
//!   `Escalate` where they see it (the lanes read first; an abandoned job's
//!   end about to be written), and the transaction is run again whole.
//! - **None** (the row lock alone): `heartbeat` and `note_attempt` (one
//!   running job's row, its owner's), `put_runner`, `remove_runner`, and
//!   every read.
//!
//! # Every operation is the core's
//!
//! Each write of [`PgStore`] is one of `slothqueue_core::ops` run inside
//! one transaction over the row verbs of `PgTx` (`verbs.rs`), in the lock
//! mode above; every job row it writes carries the old state, owner and
//! attempt in the `UPDATE`'s condition. What is PostgreSQL's own wraps the
//! operation, never repeats it:
//!
//! - **The claim's search is pushed down to the claim indexes.** Due jobs
//!   are handed to core in claim order from `jobs_pending` (priority
//!   DESC, `not_before`, id; pending, waiting on no parent, not held),
//!   leaving out closed lanes' queues (`queue <> ALL(…)`), or from
//!   `jobs_pending_queue` per queue when the claim names queues; kinds are
//!   pushed down as `kind = ANY(…)`. The first pull asks for one job (what
//!   one `LIMIT 1` seek costs); core asks for more, from a cursor (the
//!   rest of its priority level, then the levels below: each a range of
//!   the index), only when it passes jobs over. Everything else a claim
//!   checks is core's.
//! - **Bulk writes.** A statement is a round trip, so new jobs (pushed,
//!   or restored by an import) are held behind the insert verb and written
//!   together: 3 or more as one binary `COPY` of the jobs, one
//!   `INSERT … UNNEST` of their edges and one `COPY` of their events
//!   (about four round trips in all, against two a job row by row); fewer
//!   row by row, as a lone push always was. What is held is flushed before
//!   any read whose answer it could change (a held job's id, its key, a
//!   parent it names), before any other write, and before the commit, so
//!   every read sees every earlier job of its batch. An import reads the
//!   batch's ids and keys the queue holds in two queries first, so that
//!   core's check of each job against the queue costs no round trip.
//! - **One round trip fewer at each end.** The lock is taken in `BEGIN`'s
//!   round trip, and the notification sent in `COMMIT`'s (the simple
//!   protocol runs a string of statements at once).
//! - **Ids are never reused**: the next id is above both `MAX(id)` and a
//!   high water in `meta` that a purge raises before it deletes.
//!
//! # One clock
//!
//! Every call is judged on the database server's clock, so hosts whose
//! clocks disagree still agree on leases and due times. The `now` a caller
//! passes is its host's wall clock; the store measures
//! `offset = server clock − host clock` when it opens (five
//! `SELECT clock_timestamp()` samples, the one with the shortest round
//! trip, at its midpoint) and again every 60 s, and judges every call at
//! `now + offset`; the due time of a new or edited job, given on the host's
//! clock, is moved the same way. Offsets under 250 ms are treated as 0
//! (hosts are synced, round trips are noise), so times injected by tests
//! pass through exactly. Times stored and returned in jobs are the
//! server's; `next_due`, `Stats::next_due` and `Ticks::next`, which a
//! caller sleeps until, are returned on its own clock. The host clock is
//! [`PgOptions::host_clock`] (the system clock unless a test injects one).
//!
//! # Notifications
//!
//! Every committing write that can make work claimable or change what a
//! waiter waits for (every write above but `heartbeat`, `note_attempt`,
//! `put_runner` and `purge`; a claim only when it ended abandoned jobs)
//! sends `pg_notify('slothqueue_<schema>', '')` inside its transaction.
//! [`PgStore::on_change`] listens on one dedicated connection, reconnects
//! after a lost one, and calls back once after each (re)connect.
//!
//! # Through a pooler, and on a standby
//!
//! `?pooler=transaction` in the URL (PgBouncer's `pool_mode =
//! transaction`): no session state, since each transaction may run on
//! another server connection. The settings are `SET LOCAL` in `BEGIN`'s
//! round trip instead of startup `options`, statements are unnamed
//! (`query_typed`, types learnt once per connection), and change
//! listening polls every second instead of `LISTEN` (`txn::Session`,
//! `listen.rs`). Explicit, not detected: the direct path keeps its
//! prepared statements and instant wake-ups.
//!
//! A writing open on a hot standby (`pg_is_in_recovery()`) is refused
//! before anything is written
//! ([`StoreError::ReadOnlyStandby`](slothqueue_core::StoreError::ReadOnlyStandby)),
//! as is a later write a writer's server refuses as read-only (a
//! failover); a read-only open works there.
//!
//! # Tests
//!
//! Its tests need a server: `cargo xtask pg -- <command>` makes a
//! throwaway cluster from the distribution's binaries and runs the command
//! with `SLOTHQUEUE_PG_URL` set. Without the variable the tests say
//! `SKIPPED` and how to run them; with `SLOTHQUEUE_PG_REQUIRED=1` (CI) they
//! fail instead. The shared conformance suite runs through
//! `conformance_suite!(open, when = pg_available)`.

#![deny(missing_docs)]

// The files, one role each, as in every store crate, each using only
// files before it:
// - `error`: every tokio-postgres error onto `StoreError`, in one place;
// - `schema`: the layout (DDL, versions, migrations);
// - `txn`: the options and URL, the runtime's connections and pool (and
//   the pooler mode), the synchronous face of a connection, the
//   transactions;
// - `clock`: the clock offset to the server;
// - `rows`: jobs, events, runner records, lanes and schedules as rows and
//   back, the queries, the buffer of new jobs written by `COPY`;
// - `verbs`: `PgTx`, the row verbs core's operations run on, the claim's
//   due search, the shared-lock transaction mode;
// - `reads`: the reads that are not operations (list, stats, counts);
// - `open`: creation and migration under the schema's lock;
// - `listen`: the change listener (`LISTEN`);
// - `store`: `PgStore` and `impl Store`, each write one `ops` call.
mod clock;
mod error;
mod listen;
mod open;
mod passfile;
mod reads;
mod rows;
mod schema;
mod store;
#[doc(hidden)]
pub mod testing;
mod txn;
mod url;
mod verbs;

pub use listen::{ChangeListener, POLL_EVERY};
pub use schema::SCHEMA_VERSION;
pub use store::PgStore;
pub use txn::{DEFAULT_CALL_TIMEOUT, DEFAULT_SCHEMA, HostClock, PgOptions, valid_schema_name};
