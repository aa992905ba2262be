//! Reading another process's CPU time, context switches and peak RSS from
//! `/proc`, without disturbing it.

use std::collections::BTreeMap;
use std::fs;

use anyhow::{Context as _, Result};

/// The thread ids of `pid`.
pub fn threads(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// CPU time of the whole process (live and exited threads) from
/// `/proc/<pid>/stat`, in ms: utime + stime, in clock ticks.
pub fn stat_cpu_ms(pid: u32) -> Result<f64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat"))?;
    // The command name is in parentheses and may hold spaces.
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime field 14, stime field 15.
    let field = |n: usize| -> Result<u64> {
        fields
            .get(n - 3)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("/proc/{pid}/stat has no field {n}"))
    };
    let ticks = field(14)? + field(15)?;
    Ok(ticks as f64 * 1000.0 / clock_ticks_per_second() as f64)
}

/// CPU time of the live threads of `pid` in ns, from each thread's
/// `schedstat` (nanosecond resolution, unlike `stat`'s ticks).
pub fn threads_cpu_ns(pid: u32) -> BTreeMap<u32, u64> {
    threads(pid)
        .into_iter()
        .filter_map(|tid| {
            let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
            Some((tid, text.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

/// Context switches (voluntary + involuntary) of each live thread of `pid`:
/// every one is a time a thread stopped running, so a wake-up follows it.
pub fn threads_switches(pid: u32) -> BTreeMap<u32, u64> {
    threads(pid)
        .into_iter()
        .filter_map(|tid| {
            let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
            let n = status_field(&text, "voluntary_ctxt_switches:")?
                + status_field(&text, "nonvoluntary_ctxt_switches:")?;
            Some((tid, n))
        })
        .collect()
}

/// Peak resident set size of `pid` so far (`VmHWM`), and the anonymous
/// and file-backed parts of the current one (`RssAnon`, `RssFile`), in KiB.
pub fn rss_kib(pid: u32) -> Option<(u64, u64, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some((
        status_field(&text, "VmHWM:")?,
        status_field(&text, "RssAnon:")?,
        status_field(&text, "RssFile:")?,
    ))
}

fn status_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// `sysconf(_SC_CLK_TCK)` without libc: the `AT_CLKTCK` entry of this
/// process's auxiliary vector; 100, Linux's usual value, if unreadable.
fn clock_ticks_per_second() -> u64 {
    const AT_CLKTCK: u64 = 17;
    let Ok(auxv) = fs::read("/proc/self/auxv") else { return 100 };
    auxv.chunks_exact(16)
        .filter_map(|pair| {
            let key = u64::from_ne_bytes(pair[..8].try_into().ok()?);
            let value = u64::from_ne_bytes(pair[8..].try_into().ok()?);
            (key == AT_CLKTCK).then_some(value)
        })
        .next()
        .filter(|&v| v > 0)
        .unwrap_or(100)
}

/// How much `after` grew over `before`, per thread; a thread that appeared
/// counts from zero (one that exited is not seen).
pub fn growth(before: &BTreeMap<u32, u64>, after: &BTreeMap<u32, u64>) -> u64 {
    after.iter().map(|(tid, &n)| n.saturating_sub(before.get(tid).copied().unwrap_or(0))).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads() {
        let pid = std::process::id();
        assert!(!threads(pid).is_empty());
        assert!(stat_cpu_ms(pid).unwrap() >= 0.0);
        assert!(rss_kib(pid).unwrap().0 > 0);
        assert!(!threads_switches(pid).is_empty());
        assert!(clock_ticks_per_second() > 0);
    }

    #[test]
    fn growth_counts_new_threads_from_zero() {
        let before = BTreeMap::from([(1, 10), (2, 5)]);
        let after = BTreeMap::from([(1, 12), (3, 4)]);
        assert_eq!(growth(&before, &after), 6);
    }
}
