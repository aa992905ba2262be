//! **`slothqueue top`**: a live terminal view of a queue, for people on an
//! ssh session with no browser. It shows what `status` shows (counts,
//! queues with their limits and pauses, runners and what each slot does,
//! GPUs), the job list with filters (state, queue, a search text), and one
//! job as `show` sees it (its trail, why it waits, its log followed); and
//! it steers: cancel, retry, hold/release, pause/resume a queue, each
//! through the store operation the CLI's command calls, cancel and retry
//! only after a `y`.
//!
//! A crate of its own, a face over the library as the MCP server is, so
//! that the terminal UI crate stays out of the library and the binary
//! only wires it (`cli/src/app/commands/top.rs`). No command-line parser
//! here (a layering rule checks it).
//!
//! Rooms: [`model`] and [`keys`], pure (the state, and what a key does to
//! it); [`frame`], pure (what a frame shows, drawn from the model alone,
//! snapshot-tested on ratatui's `TestBackend`); [`load`] (one read of the
//! queue through the read model) and [`act`] (the actions); `term` (the
//! terminal taken and given back: [`Screen`], [`restore`]) and `app` (the
//! loop, [`run`]), the thin glue.

pub mod act;
mod app;
mod error;
pub mod frame;
pub mod keys;
pub mod load;
pub mod model;
mod term;

pub use app::{Options, run};
pub use error::TopError;
pub use term::{Screen, restore};
