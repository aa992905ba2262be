//! Opening a redb queue from arbitrary bytes: a typed refusal (the file
//! left as it was) or a store that answers reads and writes, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slothqueue_fuzz::{Backend, empty, golden, init, open_from_bytes, run};

fuzz_target!(
    init: init(|| vec![
        ("golden.redb".to_owned(), golden(Backend::Redb)),
        ("empty.redb".to_owned(), empty(Backend::Redb)),
    ]),
    |data: &[u8]| run(|| open_from_bytes(Backend::Redb, data))
);
