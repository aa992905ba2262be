//! End-to-end tests of the `slothqueue` binary, as separate processes on
//! both backends. They live here because Cargo gives only this package's
//! integration tests the built binary (`CARGO_BIN_EXE_slothqueue`).
//!
//! - `snapshots`: the human output of every command, through insta with
//!   central filters (see `support`).
//! - `bad_input`: a table of invalid invocations: exit code, message, and
//!   the queue file byte-for-byte unchanged.
//! - `full_stdout`: a full stdout (`/dev/full`) ends `run --follow` with
//!   one line on stderr; a full stderr too, with the exit code alone.
//! - `e2e`: persistence, the seed's transcript, concurrent runners, kill -9
//!   recovery, SIGTERM, the missing-file rule, export/import, the demo.
//! - `creation`: processes racing to create one queue (torture S17).
//! - `read_only`: the commands that only look leave a redb file's bytes
//!   alone (torture S16).
//! - `workflows`: jobs that run after others (`--after`, `--stdin`), what
//!   the looks say of them, failure and retry down a chain, export/import.
//! - `wait`: `wait`'s exit codes and a wait released by another process.
//! - `long_queue`: `wait --all` on 131,072 jobs ends at its timeout, and
//!   it and `add --stdin` of 20,000 lines hold ids, not jobs (issue 31
//!   finding 8).
//! - `lanes`: limits, pauses, holds and slots (issue #16); the scenarios
//!   that need the stores' lane methods are `both_backends_with_lanes!`.
//! - `revise`: `edit` and `clone` (issue #17): a fixed typo runs, a failed
//!   job cloned with a fixed command, an edit refused for a running job.
//! - `env`: the environment `add` records, secrets masked, kept by export
//!   (issue #17).
//! - `secrets`: no secret leaves by default (issue 31): direnv's
//!   bookkeeping, passwords inside values, every look of a job.
//! - `long_polls`: `serve` under a small file limit refuses the long
//!   polls it has no descriptors for (503) and `/healthz` still answers.
//! - `limits`: `run`'s niceness, I/O class and ceilings, and what `show`
//!   says is in force (issue #17).
//! - `serve`: `serve --handlers DIR` runs a handler job enqueued over
//!   HTTP; a kind without a handler is named; `/metrics` parses (issue #18);
//!   a handler others can write is refused and counted unserved (issue 31).
//! - `gpus`: `add --gpus` and `run --gpu-file` (issue 35): jobs never
//!   share a GPU under slots or two runners, busy and lost GPUs are not
//!   handed out, a killed runner's GPU frees, `show` says why a job waits.
//! - `handlers`: `run --handlers DIR` refuses a world-writable handler,
//!   says so once, and leaves its job pending (issue 31 finding 1).
//! - `listing`: `list --search` and `list --state held|waiting` (issue 36).
//! - `schedules`: `every`, its pause, resume and removal, `schedules`,
//!   `show` of a tick's job, schedules through export/import (issue #19).
//! - `postgres`: the commands on a queue on a PostgreSQL server, and a
//!   queue moved from a file to the server by export and import;
//!   `postgres_hosts`: runners on several hosts sharing it, judged by
//!   lease (issue #20). Both need `SLOTHQUEUE_PG_URL` (`cargo xtask pg`).
//! - `shell`, `completion`, `man_pages`, `units`: the shell knows the
//!   queue (issue 37): many ids for `retry`/`cancel`, a cut `list` said,
//!   JSON errors under `--json`, `help --help`; ids, queues and schedule
//!   keys completed in bash, fish and zsh (each shell driven); the man
//!   pages read by `man`; `contrib/`'s units verified by systemd.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly on purpose; a panic is the test's report"
)]

mod bad_input;
mod completion;
mod creation;
mod e2e;
mod env;
mod full_stdout;
mod gpus;
mod handlers;
mod import;
mod lanes;
mod limits;
mod listing;
#[cfg(feature = "http")]
mod long_polls;
#[cfg(feature = "sqlite")]
mod long_queue;
mod man_pages;
mod namespaces;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_hosts;
mod queue_files;
mod read_only;
mod read_only_disk;
mod revise;
mod schedules;
mod secrets;
#[cfg(feature = "http")]
mod serve;
mod shell;
mod signals;
mod snapshots;
pub mod support;
mod units;
mod usage;
mod wait;
mod workflows;
