//! The SQLite store's own integration tests, in one binary (one link, not
//! one per file). Each module guards one concern; its `//!` says which bug
//! or promise. What belongs where:
//!
//! - `files`: what opening does to files on disk (created private, foreign,
//!   damaged, truncated or too-new files refused untouched, ids never
//!   reused);
//! - `dependencies`: jobs waiting on parents kept out of the claim indexes
//!   (a chain of 10,000), edges written, restored and purged with their
//!   jobs, a batch naming its refused element;
//! - `lanes`: limits and pauses read by every claim in its transaction
//!   (across handles, after a reopen, closed lanes skipped), held jobs out
//!   of the claim and due indexes and counted once, per-queue counts
//!   against the table, damaged lane rows refused;
//! - `schedules`: schedules as rows (everything a tick decided survives a
//!   reopen, and no slot is decided twice across it), damaged rows refused;
//! - `damaged_schema`: a damaged stored schema refused at open (S16);
//! - `fixture`: the schema-v1, v3, v4, v5 and v6 fixtures in `tests/data/` open and
//!   read back exactly, forever;
//! - `gpus`: a file of schema v6 migrated (v7's `gpus` column) keeps a
//!   job's GPU request and its attempt's holds across a reopen;
//! - `locking`: contention on the write lock (busy timeout, `Busy`, reads
//!   going on meanwhile);
//! - `disk_full`: a full disk fails cleanly and the handle recovers (S15);
//! - `read_only`: the open of commands that only look (nothing created,
//!   empty files refused, writes refused, immutable where `-shm` cannot be
//!   made);
//! - `dump`: README's recipe for a queue kept as sqlite3's `.dump` replays
//!   it without a stray error and the marked file opens;
//! - `import`: how long a `restore_many` of 100,000 jobs takes (a measurement, run when asked).
//!
//! The shared `Store` contract is not here: it is `tests/conformance.rs`, its
//! own binary, which `cargo xtask conformance` runs by name.

mod damaged_schema;
mod dependencies;
mod disk_full;
mod dump;
mod files;
mod fixture;
mod gpus;
mod import;
mod lanes;
mod locking;
mod read_only;
mod schedules;
