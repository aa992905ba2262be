//! Reading `/proc`: one parser per file the runner looks at, and nothing
//! that changes anything.
//!
//! Every reader answers `None` (or nothing) when the file cannot be read or
//! parsed: a process that vanished between listing and reading is the
//! usual case, not an error.

use slothqueue_core::Timestamp;

/// Linux reports process start times in clock ticks of `USER_HZ`, which is
/// 100 on every architecture Linux supports for user space.
const CLOCK_TICKS_PER_SECOND: u64 = 100;

/// The fields of `/proc/<pid>/stat` the runner uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// `R`, `S`, `D`, `Z`, …
    pub state: char,
    /// The parent (field 4).
    pub ppid: i32,
    /// The process group.
    pub pgrp: i32,
    /// Start time in clock ticks after boot (field 22).
    pub starttime: u64,
}

impl ProcStat {
    /// Whether the process still runs: a zombie (or a dead entry) is gone,
    /// whether or not someone has reaped it yet.
    pub(crate) fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X')
    }
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may contain spaces
/// and parentheses, so the fields are counted after the *last* `)`.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 (state), so field N is `fields[N - 3]`.
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        starttime: fields.get(19)?.parse().ok()?,
    })
}

/// `/proc/<pid>/stat`, parsed; `None` when there is no such process.
pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    proc_stat_at(&format!("/proc/{pid}/stat"))
}

/// This process's own process group as its `/proc` shows it: 0 when the
/// group lives outside this PID namespace (a runner that `unshare -p
/// --fork` started as pid 1), where `getpgrp` would have no number for it.
pub(crate) fn own_pgrp() -> i32 {
    proc_stat_at("/proc/self/stat").map_or(0, |s| s.pgrp)
}

/// Process `pid`'s niceness, field 19 of `/proc/<pid>/stat` (a zombie
/// keeps it): what is in force, read back after it was set.
pub(crate) fn proc_nice(pid: i32) -> Option<i32> {
    parse_nice(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_nice(text: &str) -> Option<i32> {
    let rest = &text[text.rfind(')')? + 1..];
    rest.split_whitespace().nth(19 - 3)?.parse().ok()
}

fn proc_stat_at(path: &str) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// The pids `/proc` lists now (processes that end meanwhile included).
pub(crate) fn pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()).collect()
}

/// Whether process `pid`'s environment holds exactly `entry` (`NAME=value`).
/// `false` when it cannot be read (another user's process, or gone).
pub(crate) fn environ_has(pid: i32, entry: &str) -> bool {
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    env.split(|b| *b == 0).any(|kv| kv == entry.as_bytes())
}

/// The boot time, in seconds since the epoch (`btime` in `/proc/stat`).
fn boot_time() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    text.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// When a process started, in wall-clock time (second precision at best:
/// `btime` is whole seconds).
pub(crate) fn process_started_at(stat: &ProcStat) -> Option<Timestamp> {
    let boot_ms = i64::try_from(boot_time()?.checked_mul(1000)?).ok()?;
    let ms = i64::try_from(stat.starttime.checked_mul(1000)? / CLOCK_TICKS_PER_SECOND).ok()?;
    Some(Timestamp::from_millis(boot_ms.checked_add(ms)?))
}

/// The signal masks of a `/proc/<…>/status` file: bit `n - 1` stands for
/// signal `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SignalMasks {
    /// Signals ignored by the process (`SigIgn`).
    pub ignored: u64,
    /// Signals blocked in the thread (`SigBlk`).
    pub blocked: u64,
}

/// The signal masks of `who`: `self` for this process, `thread-self` for
/// the calling thread (a blocked mask is per thread, an ignored one per
/// process).
pub(crate) fn signal_masks(who: &str) -> Option<SignalMasks> {
    parse_signal_masks(&std::fs::read_to_string(format!("/proc/{who}/status")).ok()?)
}

/// Parses the `SigIgn:` and `SigBlk:` lines of a status file (hexadecimal).
fn parse_signal_masks(status: &str) -> Option<SignalMasks> {
    let mask = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    };
    Some(SignalMasks { ignored: mask("SigIgn:")?, blocked: mask("SigBlk:")? })
}

/// The descriptors `who` (`self`, `thread-self`) has open, or `None` when
/// any entry cannot be read or named: a caller deciding whether a child
/// inherits cleanly must not guess.
pub(crate) fn open_fds(who: &str) -> Option<Vec<i32>> {
    let mut fds = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{who}/fd")).ok()? {
        fds.push(entry.ok()?.file_name().to_str()?.parse().ok()?);
    }
    Some(fds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_counts_after_the_last_paren() {
        let line = "4242 (we)ird (name)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        let s = parse_stat(line).unwrap();
        assert_eq!(s, ProcStat { state: 'S', ppid: 1, pgrp: 4242, starttime: 987_654 });
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("1 (x) S 1").is_none());
        assert_eq!(parse_nice(line), Some(0));
        let niced = "7 (a b) S 1 7 7 0 -1 4194560 100 0 0 0 1 2 0 0 30 10 1 0 987654 1000 100";
        assert_eq!(parse_nice(niced), Some(10));
        assert_eq!(parse_nice("1 (x) S 1"), None);
    }

    #[test]
    fn stat_parsing_reads_the_ppid_after_the_last_paren() {
        let line = "4242 (we)ird (name)) S 77 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        let s = parse_stat(line).unwrap();
        assert_eq!(s, ProcStat { state: 'S', ppid: 77, pgrp: 4242, starttime: 987_654 });
    }

    #[test]
    fn this_process_started_recently_and_in_the_past() {
        let me = proc_stat(std::process::id() as i32).unwrap();
        let started = process_started_at(&me).unwrap();
        assert!(started.as_millis() > 1_600_000_000_000);
    }

    #[test]
    fn signal_masks_are_read_in_hex() {
        let status = "Name:\tx\nSigBlk:\t0000000000010000\nSigIgn:\t0000000180001001\n";
        let masks = parse_signal_masks(status).unwrap();
        assert_eq!(masks, SignalMasks { ignored: 0x1_8000_1001, blocked: 1 << 16 });
        assert!(parse_signal_masks("SigIgn:\t0\n").is_none(), "both lines or nothing");
        assert!(signal_masks("self").is_some());
        assert!(open_fds("self").is_some_and(|fds| fds.contains(&0) || fds.contains(&1)));
    }
}
