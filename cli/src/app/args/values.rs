//! The single-value parsers of the command line: each rejects what is
//! wrong in one value (a duration, an id, a state, a range), with a
//! message naming what was expected; and the names offered to shell
//! completion.

use std::time::Duration;

use slothqueue::core::{CatchUp, Overlap, Parent, PendingShown};
use slothqueue::{Backend, JobId, JobState};

use crate::app::duration;

/// `--catch-up`: the names offered to shell completion.
pub(super) fn catch_up_parser() -> impl clap::builder::TypedValueParser<Value = CatchUp> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new([CatchUp::Once, CatchUp::None].map(CatchUp::as_str))
        .map(|s| if s == CatchUp::None.as_str() { CatchUp::None } else { CatchUp::Once })
}

/// `--overlap`: the names offered to shell completion.
pub(super) fn overlap_parser() -> impl clap::builder::TypedValueParser<Value = Overlap> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new([Overlap::Skip, Overlap::Queue].map(Overlap::as_str))
        .map(|s| if s == Overlap::Queue.as_str() { Overlap::Queue } else { Overlap::Skip })
}

pub(super) fn parse_nice(s: &str) -> Result<i32, String> {
    match s.parse::<i32>() {
        Ok(n) if slothqueue::core::shell::NICE_RANGE.contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a niceness: expected an integer from -20 to 19")),
    }
}

pub(super) fn parse_ionice(s: &str) -> Result<slothqueue::core::IoClass, String> {
    s.parse()
}

pub(super) fn parse_memory(s: &str) -> Result<u64, String> {
    let bytes = slothqueue::core::shell::parse_size(s)?;
    if bytes < slothqueue::core::shell::MIN_MEMORY_MAX {
        return Err(format!("`{s}` is below the 1 MiB a process needs"));
    }
    Ok(bytes)
}

pub(super) fn parse_cpu_weight(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if slothqueue::core::shell::CPU_WEIGHT_RANGE.contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a CPU weight: expected an integer from 1 to 10000")),
    }
}

/// `--max-runtime`: a limit, or `none` for no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxRuntime(pub Option<Duration>);

pub(super) fn parse_max_runtime(s: &str) -> Result<MaxRuntime, String> {
    duration::parse_or_none(s).map(MaxRuntime)
}

/// `IP:PORT`, or `localhost:PORT` (loopback: 127.0.0.1, without asking a
/// resolver what `localhost` is).
pub(super) fn parse_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let bad = || {
        format!(
            "`{s}` is not an address: expected IP:PORT (127.0.0.1:7878, [::1]:7878) or localhost:PORT"
        )
    };
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.eq_ignore_ascii_case("localhost") {
        Ok(std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port)))
    } else {
        Err(bad())
    }
}

pub(super) fn parse_priority(s: &str) -> Result<i32, String> {
    s.parse::<i32>().map_err(|_| {
        format!("`{s}` is not a priority: expected an integer from {} to {}", i32::MIN, i32::MAX)
    })
}

/// `--backend`: the names offered to shell completion (not file names).
/// Only the file backends: a queue on a server is named by its URL.
pub(super) fn backend_parser() -> impl clap::builder::TypedValueParser<Value = Backend> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new([Backend::Sqlite, Backend::Redb].map(Backend::as_str))
        .try_map(|s| s.parse::<Backend>())
}

/// `12` or `#12`, positive.
pub fn parse_id(s: &str) -> Result<JobId, String> {
    let digits = s.strip_prefix('#').unwrap_or(s);
    match digits.parse::<JobId>() {
        Ok(id) if id > 0 && digits.bytes().all(|b| b.is_ascii_digit()) => Ok(id),
        _ => Err(format!("`{s}` is not a job id: ids are positive integers like 12 or #12")),
    }
}

/// `--after`: `12` or `#12` is a job id, anything else the idempotency
/// key of a job.
pub(super) fn parse_parent(s: &str) -> Result<Parent, String> {
    let digits = s.strip_prefix('#').unwrap_or(s);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return parse_id(s).map(Parent::Id);
    }
    if s.is_empty() {
        return Err("an empty --after: give a job id (12 or #12) or an idempotency key".to_owned());
    }
    Ok(Parent::Key(s.to_owned()))
}

pub(super) fn parse_attempts(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("max attempts must be at least 1".to_owned()),
        Ok(n) if n <= 1_000_000 => Ok(n),
        _ => Err(format!("`{s}` is not a number of attempts from 1 to 1000000")),
    }
}

pub(super) fn parse_ceiling(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        _ => Err(format!("`{s}` is not a load ceiling: expected a positive number like 2 or 3.5")),
    }
}

/// What `list --state` asks for: a state, or one of the two kinds of
/// pending job `list` words apart (`held`, `waiting`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListState {
    /// Jobs in this state (`pending`: every pending job).
    Is(JobState),
    /// Pending jobs shown as `held` or `waiting`.
    Shown(PendingShown),
}

/// `list --state`: the names offered to shell completion (not file
/// names): the states, then `held` and `waiting`.
pub(super) fn state_parser() -> impl clap::builder::TypedValueParser<Value = ListState> {
    use clap::builder::TypedValueParser as _;
    let states = [
        JobState::Pending,
        JobState::Running,
        JobState::Done,
        JobState::Failed,
        JobState::Cancelled,
    ]
    .map(JobState::as_str);
    clap::builder::PossibleValuesParser::new(states.into_iter().chain(["held", "waiting"])).try_map(
        |s| match s.to_ascii_lowercase().as_str() {
            "held" => Ok(ListState::Shown(PendingShown::Held)),
            "waiting" => Ok(ListState::Shown(PendingShown::Waiting)),
            other => other.parse::<JobState>().map(ListState::Is),
        },
    )
}

/// The most `--slots` a runner takes: more would be a fork bomb by typo.
pub const MAX_SLOTS: usize = 64;

pub(super) fn parse_slots(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_SLOTS).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a number of slots from 1 to {MAX_SLOTS}")),
    }
}

/// The highest `parallel N`.
pub const MAX_PARALLEL: u32 = 10_000;

pub(super) fn parse_parallel(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n <= MAX_PARALLEL => Ok(n),
        _ => Err(format!(
            "`{s}` is not a limit: expected a number of jobs from 0 (no limit) to {MAX_PARALLEL}"
        )),
    }
}

pub(super) fn parse_pressure(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 && f <= 100.0 => Ok(f),
        _ => Err(format!(
            "`{s}` is not a cpu pressure ceiling: expected a percentage above 0 and at most 100, like 30"
        )),
    }
}

pub(super) fn parse_limit(s: &str) -> Result<usize, String> {
    s.parse::<usize>().map_err(|_| {
        format!("`{s}` is not a limit: expected a number of rows (0 for no limit, as --all)")
    })
}
