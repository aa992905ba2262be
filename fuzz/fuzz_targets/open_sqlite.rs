//! Opening a SQLite queue from arbitrary bytes: a typed refusal (the file
//! left as it was) or a store that answers reads and writes, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slothqueue_fuzz::{Backend, empty, golden, init, open_from_bytes, run};

fuzz_target!(
    init: init(|| vec![
        ("golden.db".to_owned(), golden(Backend::Sqlite)),
        ("empty.db".to_owned(), empty(Backend::Sqlite)),
    ]),
    |data: &[u8]| run(|| open_from_bytes(Backend::Sqlite, data))
);
