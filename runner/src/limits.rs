//! An attempt's limits: which apply (a shell job's own over its runner's
//! defaults), what the defaults fall back to, and what is said of them once
//! they were put in force — the `limits:` part of the log header (which
//! `show` reads back) and a run line for each one that is not enforced.
//!
//! Putting them in force is the executor's (`exec/child.rs`): the niceness and
//! I/O class through `process/manners.rs`, the memory maximum and CPU
//! weight through the attempt's cgroups (`contain/ceiling.rs`).

use std::fmt;
use std::sync::OnceLock;

use rustix::io::Errno;
use slothqueue_core::shell::{DEFAULT_IO_CLASS, DEFAULT_NICE, format_size};
use slothqueue_core::{IoClass, Limits};

use crate::contain::CeilingReport;
use crate::process::manners::{self, Manners, Set};

/// What an attempt is asked to run under, every default filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub manners: Manners,
    pub memory_max: Option<u64>,
    pub cpu_weight: Option<u32>,
}

impl Plan {
    /// The plan for `limits` (the job's own over the runner's, see
    /// [`Limits::over`]). A niceness or I/O class nobody set is the default
    /// ([`DEFAULT_NICE`], [`DEFAULT_IO_CLASS`]) unless the runner itself is
    /// politer (`nice -n 15 slothqueue run`, `ionice -c3`): a default never
    /// makes a job less polite than its runner, which unprivileged could
    /// not do anyway.
    pub(crate) fn new(limits: &Limits) -> Plan {
        let (own_nice, own_class) = *own_manners();
        let nice = limits.nice.unwrap_or_else(|| DEFAULT_NICE.max(own_nice.unwrap_or(0)));
        let class = limits.ionice.unwrap_or(match own_class {
            Some(IoClass::Idle) => IoClass::Idle,
            _ => DEFAULT_IO_CLASS,
        });
        Plan {
            manners: Manners { nice, class },
            memory_max: limits.memory_max,
            cpu_weight: limits.cpu_weight,
        }
    }
}

/// This process's niceness and I/O class, read once.
fn own_manners() -> &'static (Option<i32>, Option<IoClass>) {
    static OWN: OnceLock<(Option<i32>, Option<IoClass>)> = OnceLock::new();
    OWN.get_or_init(manners::own)
}

/// One limit as the attempt has it: `nice 10`, `memory-max 50 MiB`, and
/// why it is not enforced when it is not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    pub what: String,
    pub not_enforced: Option<String>,
}

/// The limits in force for an attempt, as its log header says them:
/// `nice 10, ionice best-effort:7, memory-max 50 MiB not enforced (no
/// delegated cgroup)`. Never contains `": "`, so the header stays readable
/// back (`show`'s `limits:` line).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct InForce(pub Vec<Part>);

impl InForce {
    /// What the attempt has: `set` is what setting the manners on its
    /// group did, `seen` what its leader reads back (`None` parts when it
    /// could not be read: gone already), `ceilings` what its cgroups took.
    pub(crate) fn of(
        plan: &Plan,
        set: Set,
        seen: (Option<i32>, Option<IoClass>),
        ceilings: &CeilingReport,
    ) -> InForce {
        let mut parts = Vec::new();
        let want = plan.manners.nice;
        // A set that succeeded on the whole group is in force, whatever a
        // read just after says: a leader on its way out has already lost
        // its I/O context (`ioprio_get` then answers the default derived
        // from its niceness), and a job may change its own manners.
        parts.push(match (seen.0, set.nice) {
            (Some(n), _) if n == want => Part { what: format!("nice {n}"), not_enforced: None },
            (_, Ok(())) => Part { what: format!("nice {want}"), not_enforced: None },
            (Some(n), Err(e)) => Part {
                what: format!("nice {want}"),
                not_enforced: Some(format!("{}, runs at {n}", errno_words(e))),
            },
            (None, Err(e)) => {
                Part { what: format!("nice {want}"), not_enforced: Some(errno_words(e)) }
            }
        });
        let class = plan.manners.io_class();
        parts.push(match (seen.1, set.ioprio) {
            (Some(c), _) if c == class => Part { what: format!("ionice {c}"), not_enforced: None },
            (_, Ok(())) => Part { what: format!("ionice {class}"), not_enforced: None },
            (Some(c), Err(e)) => Part {
                what: format!("ionice {class}"),
                not_enforced: Some(format!("{}, runs at {c}", errno_words(e))),
            },
            (None, Err(e)) => {
                Part { what: format!("ionice {class}"), not_enforced: Some(errno_words(e)) }
            }
        });
        if let (Some(bytes), Some(r)) = (plan.memory_max, &ceilings.memory) {
            parts.push(Part {
                what: format!("memory-max {}", format_size(bytes)),
                not_enforced: r.clone().err(),
            });
        }
        if let (Some(w), Some(r)) = (plan.cpu_weight, &ceilings.cpu) {
            parts.push(Part { what: format!("cpu-weight {w}"), not_enforced: r.clone().err() });
        }
        InForce(parts)
    }

    /// The parts not enforced: `(what, why)`.
    pub(crate) fn not_enforced(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().filter_map(|p| Some((p.what.as_str(), p.not_enforced.as_deref()?)))
    }
}

impl fmt::Display for InForce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|p| match &p.not_enforced {
                None => p.what.clone(),
                Some(why) => format!("{} not enforced ({})", p.what, why.replace(": ", " - ")),
            })
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// An errno as a few words, without the `: ` a header must not hold.
fn errno_words(e: Errno) -> String {
    match e {
        Errno::ACCESS | Errno::PERM => "not permitted".to_owned(),
        Errno::SRCH => "the job was gone".to_owned(),
        other => std::io::Error::from(other).to_string().replace(": ", " - "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(nice: i32, memory_max: Option<u64>) -> Plan {
        Plan {
            manners: Manners { nice, class: IoClass::BestEffort(Some(7)) },
            memory_max,
            cpu_weight: None,
        }
    }

    #[test]
    fn the_header_says_what_is_in_force_and_what_is_not() {
        let ok = Set { nice: Ok(()), ioprio: Ok(()) };
        let be7 = Some(IoClass::BestEffort(Some(7)));
        let mem = CeilingReport { memory: Some(Err("no delegated cgroup".into())), cpu: None };
        let f = InForce::of(&plan(10, Some(50 << 20)), ok, (Some(10), be7), &mem);
        assert_eq!(
            f.to_string(),
            "nice 10, ionice best-effort:7, memory-max 50 MiB not enforced (no delegated cgroup)"
        );
        assert_eq!(
            f.not_enforced().collect::<Vec<_>>(),
            [("memory-max 50 MiB", "no delegated cgroup")]
        );
        // A leader that exits as it starts reads back the kernel's default
        // class (best-effort:6 at nice 10): the set on its group succeeded,
        // so what was set is in force (this said "not enforced" in CI once).
        let be6 = Some(IoClass::BestEffort(Some(6)));
        let f = InForce::of(&plan(10, None), ok, (Some(10), be6), &CeilingReport::default());
        assert_eq!(f.to_string(), "nice 10, ionice best-effort:7");
        assert_eq!(f.not_enforced().count(), 0);
        let denied = Set { nice: Err(Errno::ACCESS), ioprio: Ok(()) };
        let f = InForce::of(&plan(-5, None), denied, (Some(0), be7), &CeilingReport::default());
        assert_eq!(
            f.to_string(),
            "nice -5 not enforced (not permitted, runs at 0), ionice best-effort:7"
        );
        let mem = CeilingReport { memory: Some(Err("v2 a: b".into())), cpu: None };
        let f = InForce::of(&plan(10, Some(1 << 30)), ok, (None, None), &mem);
        assert_eq!(
            f.to_string(),
            "nice 10, ionice best-effort:7, memory-max 1 GiB not enforced (v2 a - b)"
        );
        assert!(!f.to_string().contains(": "));
    }

    #[test]
    fn defaults_are_polite_and_asked_limits_win() {
        let p = Plan::new(&Limits::default());
        let (own, _) = manners::own();
        assert_eq!(p.manners.nice, DEFAULT_NICE.max(own.unwrap_or(0)));
        let asked = Limits { nice: Some(3), ionice: Some(IoClass::Idle), ..Limits::default() };
        let p = Plan::new(&asked);
        assert_eq!(p.manners, Manners { nice: 3, class: IoClass::Idle });
    }
}
