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
//! - **Shared**: `claim`. Claimers run side by side: each locks its
//!   candidate with `SELECT … FOR UPDATE SKIP LOCKED` in the claim plan's
//!   order (priority desc, `not_before`, id, the `jobs_pending` index:
//!   O(log n) in the backlog) and the running jobs it reads likewise, so
//!   no two take one job and none waits for another. A claim that needs a
//!   view of every running job, because lanes are configured (a limit
//!   counts a lane's running jobs, across every claimer), or that would end
//!   abandoned jobs (their end reaches their dependents), rolls back and
//!   runs again under the exclusive lock.
//! - **None** (the row lock alone): `heartbeat` and `note_attempt` (one
//!   running job's row, its owner's), `put_runner`, `remove_runner`, and
//!   every read.
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

#![deny(missing_docs)]

// The files, one role each, as in every store crate, each using only
// files before it:
// - `error`: every tokio-postgres error onto `StoreError`, in one place;
// - `schema`: the layout (DDL, versions, migrations);
// - `txn`: the options and URL, the runtime's connections and pool, the
//   synchronous face of a connection, the transactions, the clock offset;
// - `rows`: jobs, events, runner records, lanes and schedules as rows and
//   back, the queries, the claim's candidates, the dependency rule's
//   `Graph` over the open transaction;
// - `open`: creation and migration under the schema's lock;
// - `listen`: the change listener (`LISTEN`);
// - `store`: the operations and `impl Store`.
mod error;
mod listen;
mod open;
mod reads;
mod rows;
mod schema;
mod store;
#[doc(hidden)]
pub mod testing;
mod txn;
mod verbs;

pub use listen::ChangeListener;
pub use schema::SCHEMA_VERSION;
pub use store::PgStore;
pub use txn::{DEFAULT_SCHEMA, HostClock, PgOptions, valid_schema_name};
