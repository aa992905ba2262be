//! The CLI's duration parser: any string gives a duration or a message,
//! never a panic; what it accepts is within `MAX` and survives a round
//! trip through the formatter.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code, unused_imports, reason = "only the parser and formatter are exercised")]
#[path = "../../cli/src/app/duration.rs"]
mod duration;

fuzz_target!(
    init: slothqueue_fuzz::init(|| {
        ["0s", "2s", "5m", "1h30m", "90", "1d2h3m4s5ms", "250ms", "none", " 7h "]
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("seed{i}"), s.as_bytes().to_vec()))
            .collect()
    }),
    |data: &[u8]| slothqueue_fuzz::run(|| {
        let Ok(s) = std::str::from_utf8(data) else { return };
        if let Ok(d) = duration::parse(s) {
            if d > duration::MAX {
                slothqueue_fuzz::fail(&format!("{s:?} parsed beyond MAX: {d:?}"));
            }
            let again = duration::parse(&duration::format(d));
            if again != Ok(d) {
                slothqueue_fuzz::fail(&format!("{s:?} → {d:?} does not round-trip: {again:?}"));
            }
        }
        let _ = duration::parse_or_none(s);
    })
);
