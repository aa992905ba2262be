//! Durations as people type them (`0s`, `2s`, `5m`, `1h30m`, `90` = seconds)
//! and as the CLI prints them.
//!
//! A tiny parser of our own rather than a general one, so that every
//! surprising input gets a message that says what would be valid: `1h30` is
//! refused as ambiguous instead of guessed, negatives and overflow are
//! refused instead of wrapped or saturated, and only ASCII digits count.

use std::time::Duration;

/// The longest duration accepted anywhere: a century. Longer is a typo, and
/// refusing it keeps every `now + duration` far from overflow.
pub const MAX: Duration = Duration::from_secs(100 * 366 * 24 * 3600);

const HINT: &str = "expected a duration like 0s, 2s, 5m, 1h30m or a number of seconds";

/// Parses a duration: one or more `<digits><unit>` parts with units `d`,
/// `h`, `m`, `s`, `ms` in decreasing order, or bare digits meaning seconds.
pub fn parse(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err(format!("empty duration: {HINT}"));
    }
    if s.starts_with('-') {
        return Err(format!("`{s}` is negative: {HINT}"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = s.parse().map_err(|_| too_long(s))?;
        return checked(s, Duration::from_secs(secs.min(MAX.as_secs() + 1)));
    }
    let mut total_ms: u64 = 0;
    let mut rest = s;
    let mut last_rank = usize::MAX;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("`{s}` is not a duration: {HINT}"));
        }
        let (number, after) = rest.split_at(digits);
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            if after.is_empty() {
                return Err(format!(
                    "`{s}` is ambiguous: `{number}` at the end has no unit (write {}{number}m or {}{number}s)",
                    &s[..s.len() - number.len()],
                    &s[..s.len() - number.len()],
                ));
            }
            return Err(format!("`{s}` is not a duration: {HINT}"));
        }
        let (rank, unit_ms) = match unit {
            "d" => (0, 86_400_000u64),
            "h" => (1, 3_600_000),
            "m" => (2, 60_000),
            "s" => (3, 1_000),
            "ms" => (4, 1),
            _ => return Err(format!("`{s}` has an unknown unit `{unit}`: {HINT}")),
        };
        if last_rank != usize::MAX && rank <= last_rank {
            return Err(format!("`{s}` repeats or misorders its units: {HINT}"));
        }
        last_rank = rank;
        let n: u64 = number.parse().map_err(|_| too_long(s))?;
        let part = n.checked_mul(unit_ms).ok_or_else(|| too_long(s))?;
        total_ms = total_ms.checked_add(part).ok_or_else(|| too_long(s))?;
        rest = after;
    }
    checked(s, Duration::from_millis(total_ms))
}

/// Like [`parse`], but `none` (any case) means "no limit".
pub fn parse_or_none(input: &str) -> Result<Option<Duration>, String> {
    if input.trim().eq_ignore_ascii_case("none") {
        Ok(None)
    } else {
        parse(input).map(Some).map_err(|e| format!("{e}, or none"))
    }
}

fn checked(s: &str, d: Duration) -> Result<Duration, String> {
    if d > MAX { Err(too_long(s)) } else { Ok(d) }
}

fn too_long(s: &str) -> String {
    format!("`{s}` is too long: durations are at most 100 years")
}

/// Prints a duration the way the seed does: whole seconds as `300s`,
/// anything finer in milliseconds (`250ms`).
pub fn format(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// A short human span for "in 4m" style hints: the read model's, so that
/// `show`'s why and every other line say spans alike.
pub use slothqueue_view::words::format_span;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_the_documented_forms() {
        let cases = [
            ("0s", 0),
            ("2s", 2_000),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("90", 90_000),
            ("0", 0),
            ("1d2h3m4s5ms", 93_784_005),
            ("250ms", 250),
            (" 7s ", 7_000),
        ];
        for (input, ms) in cases {
            assert_eq!(parse(input), Ok(Duration::from_millis(ms)), "{input}");
        }
    }

    #[test]
    fn refuses_the_surprising_ones_with_a_reason() {
        let cases = [
            ("", "empty"),
            ("-1s", "negative"),
            ("1e9h", "unknown unit `e`"),
            ("18446744073709551616s", "too long"),
            ("18446744073709551616", "too long"),
            ("1h30", "ambiguous"),
            ("1m1h", "misorders"),
            ("1s1s", "repeats"),
            ("s", "not a duration"),
            ("1.5s", "not a duration"),
            ("١s", "not a duration"),
            ("101y", "unknown unit"),
            ("1000000000h", "too long"),
            ("99999999999999", "too long"),
        ];
        for (input, fragment) in cases {
            let err = parse(input).expect_err(input);
            assert!(err.contains(fragment), "{input}: {err}");
        }
    }

    #[test]
    fn none_means_unlimited() {
        assert_eq!(parse_or_none("none"), Ok(None));
        assert_eq!(parse_or_none("NONE"), Ok(None));
        assert_eq!(parse_or_none("2s"), Ok(Some(Duration::from_secs(2))));
        assert!(parse_or_none("never").expect_err("never").ends_with("or none"));
    }

    #[test]
    fn formats_like_the_seed() {
        assert_eq!(format(Duration::from_secs(300)), "300s");
        assert_eq!(format(Duration::from_secs(2)), "2s");
        assert_eq!(format(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_span(Duration::from_secs(3725)), "1h2m");
        assert_eq!(format_span(Duration::from_secs(59)), "59s");
    }

    proptest! {
        #[test]
        fn any_input_parses_or_errs_without_panicking(s in "\\PC{0,24}") {
            let _ = parse(&s);
            let _ = parse_or_none(&s);
        }

        #[test]
        fn printed_durations_parse_back(ms in 0u64..MAX.as_millis() as u64) {
            let d = Duration::from_millis(ms);
            prop_assert_eq!(parse(&format(d)), Ok(d));
        }

        #[test]
        fn composite_forms_add_up(h in 0u64..1000, m in 0u64..60, s in 0u64..60) {
            let got = parse(&format!("{h}h{m}m{s}s"));
            prop_assert_eq!(got, Ok(Duration::from_secs(h * 3600 + m * 60 + s)));
        }
    }
}
