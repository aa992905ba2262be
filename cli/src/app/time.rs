//! Times as users type and read them: the queue stores UTC milliseconds,
//! people think in local wall-clock time.
//!
//! The local zone is jiff's system zone, which honours `TZ` (the tests pin
//! `TZ=UTC` so snapshots are stable everywhere).

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use slothqueue::Timestamp;

/// `--at`: RFC 3339 (`2025-01-02T03:04:05Z`, any offset) or a local
/// `YYYY-MM-DD HH:MM` (seconds optional, `T` allowed in place of the space).
pub fn parse_at(s: &str) -> Result<jiff::Timestamp, String> {
    let t = parse_time(s)?;
    if t < jiff::Timestamp::UNIX_EPOCH {
        return Err(format!(
            "`{}` is before 1970-01-01 (the epoch): leave --at out to run the job now",
            s.trim()
        ));
    }
    Ok(t)
}

fn parse_time(s: &str) -> Result<jiff::Timestamp, String> {
    let s = s.trim();
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return Ok(t);
    }
    let local = ["%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|fmt| DateTime::strptime(fmt, s).ok());
    let Some(local) = local else {
        return Err(format!(
            "`{s}` is not a time: expected RFC 3339 like 2025-01-02T03:04:05Z or local YYYY-MM-DD HH:MM, in the years 1970 to 9999"
        ));
    };
    local
        .to_zoned(TimeZone::system())
        .map(|z| z.timestamp())
        .map_err(|e| format!("`{s}` is not a valid local time: {e}"))
}

/// A jiff instant as the queue's timestamp.
pub fn to_stamp(t: jiff::Timestamp) -> Timestamp {
    Timestamp::from_millis(t.as_millisecond())
}

/// A local time for a story or a table (`12:03:04` on the same local day
/// as `now`): the read model's, so that `show`'s why and every other line
/// say times alike.
pub use slothqueue_view::words::local;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_and_local_times_parse() {
        let t = parse_at("2025-01-02T03:04:05Z").unwrap();
        assert_eq!(t.as_millisecond(), 1_735_787_045_000);
        let t = parse_at("2025-01-02T04:04:05+01:00").unwrap();
        assert_eq!(t.as_millisecond(), 1_735_787_045_000);
        assert!(parse_at("2025-01-02 03:04").is_ok());
        assert!(parse_at("2025-01-02T03:04").is_ok());
    }

    #[test]
    fn nonsense_is_refused_with_the_valid_forms() {
        for bad in ["", "tomorrow", "2025-13-01 00:00", "2025-01-02", "12:00"] {
            let err = parse_at(bad).expect_err(bad);
            assert!(err.contains("RFC 3339") || err.contains("not a valid"), "{bad}: {err}");
        }
    }
}
