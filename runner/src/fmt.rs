//! Small formatting helpers shared by events and logs.

use std::time::Duration;

use slothqueue_core::Timestamp;

/// A duration the way a user writes it: `2s`, `1m30s`, `1h`, `500ms`,
/// `2.5s`.
///
/// Report lines quote the user's own limits back (`exceeded max runtime of
/// 2s`), so this must read like the input, not like `Debug`'s `2.000s`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms % 1000 != 0 && ms < 60_000 {
        let s = format!("{:.3}", d.as_secs_f64());
        return format!("{}s", s.trim_end_matches('0').trim_end_matches('.'));
    }
    // Whole seconds, or long enough that a fraction is noise.
    let total = u64::try_from((ms + 500) / 1000).unwrap_or(u64::MAX);
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// A timestamp as RFC 3339 UTC with seconds (`2025-01-02T03:04:05Z`), for
/// log headers. The runner carries no calendar library, and the CLI shows
/// local time anyway; logs are for humans and grep.
pub fn format_timestamp(t: Timestamp) -> String {
    let ms = t.as_millis();
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    format!("{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, (rem % 3600) / 60, rem % 60)
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    (y, u32::try_from(m).unwrap_or(1), u32::try_from(d).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_the_input() {
        let f = |ms: u64| format_duration(Duration::from_millis(ms));
        assert_eq!(f(0), "0s");
        assert_eq!(f(2000), "2s");
        assert_eq!(f(300_000), "5m");
        assert_eq!(f(90_000), "1m30s");
        assert_eq!(f(5_400_000), "1h30m");
        assert_eq!(f(3_600_000), "1h");
        assert_eq!(f(3_605_000), "1h5s");
        assert_eq!(f(500), "500ms");
        assert_eq!(f(2500), "2.5s");
        assert_eq!(f(1250), "1.25s");
    }

    #[test]
    fn timestamps_are_utc_rfc3339() {
        assert_eq!(format_timestamp(Timestamp::from_millis(0)), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_timestamp(Timestamp::from_millis(1_735_787_045_123)),
            "2025-01-02T03:04:05Z"
        );
        assert_eq!(
            format_timestamp(Timestamp::from_millis(951_782_400_000)),
            "2000-02-29T00:00:00Z"
        );
    }
}
