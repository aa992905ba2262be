//! What `add` says about one job before it is checked — from the flags, or
//! from a line of `add --stdin` laid over them, or from an agent's
//! `add_job` call (slothqueue-mcp) — and the one function that checks it
//! and makes it a [`NewJob`].
//!
//! Every way in goes through [`build`], so a job given as flags, as a JSON
//! line or as a tool call is refused for the same reasons; only the names
//! in the message differ ([`Source`]), so each says what the user wrote
//! (`--queue` on the command line, `` `queue` `` in a line or a call). It
//! lives in the library, not the binary, so that the MCP server queues a
//! job exactly as `add` does without a copy of the rules.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::core::{DEFAULT_MAX_RUNTIME, Parent, machine};
use crate::{NewJob, Timestamp};

/// When a new job becomes due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum When {
    /// At once.
    #[default]
    Now,
    /// This long after the push.
    After(Duration),
    /// At this instant.
    At(Timestamp),
}

impl When {
    /// The job's `not_before` for a push at `now`.
    pub fn resolve(self, now: Timestamp) -> Option<Timestamp> {
        match self {
            When::Now => None,
            When::After(d) => Some(now.saturating_add(d)),
            When::At(t) => Some(t),
        }
    }
}

/// Where a job's description came from, so errors name its fields as the
/// user wrote them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `add`'s flags: `--queue`.
    Flags,
    /// A JSON line of `add --stdin`: `` `queue` ``.
    Line,
    /// The arguments of an MCP `add_job` call: `` `queue` `` too.
    Tool,
}

impl Source {
    /// How this source names `field` (snake_case).
    pub fn name(self, field: &str) -> String {
        match self {
            Source::Flags => format!("--{}", field.replace('_', "-")),
            Source::Line | Source::Tool => format!("`{field}`"),
        }
    }
}

/// One job as given, every field optional.
#[derive(Clone, Debug, Default)]
pub struct JobSpec {
    /// A shell command.
    pub command: Option<String>,
    /// A handler kind (instead of a command).
    pub kind: Option<String>,
    /// The handler's payload (`{}` when absent).
    pub payload: Option<serde_json::Value>,
    /// Priority (0 when absent).
    pub priority: Option<i32>,
    /// `Some(None)` is no limit; `None` the default limit.
    pub max_runtime: Option<Option<Duration>>,
    /// Attempts (the policy's default when absent).
    pub max_attempts: Option<u32>,
    /// When it becomes due.
    pub when: When,
    /// Idempotency key.
    pub key: Option<String>,
    /// Queue (the default queue when absent).
    pub queue: Option<String>,
    /// A shell job's environment as given (`-e`, a line's `env`), laid
    /// over `recorded`.
    pub env: BTreeMap<String, String>,
    /// What `add` recorded from the adding shell's environment
    /// (`core::shell::capture`); `Some` makes the job run with exactly its
    /// `env` (`env_mode` exact), `None` (no capture made) leaves the
    /// runner's environment under `env`.
    pub recorded: Option<BTreeMap<String, String>>,
    /// A shell job's own niceness, I/O class and ceilings; `None`: the
    /// runner's defaults.
    pub limits: Option<crate::core::Limits>,
    /// A shell job's directory; the current one when absent.
    pub cwd: Option<String>,
    /// The jobs it runs after.
    pub after: Vec<Parent>,
    /// The GPUs it needs (`--gpus`, `--gpu-memory`; a line's `gpus`).
    pub gpus: Option<crate::core::GpuRequest>,
}

/// The checked job, complete but for `not_before` (see [`When::resolve`]).
pub fn build(
    spec: JobSpec,
    source: Source,
    current_dir: &std::io::Result<PathBuf>,
) -> Result<(NewJob, When), String> {
    let n = |f: &str| source.name(f);
    let mut job = match (spec.command, spec.kind) {
        (Some(_), Some(_)) => {
            return Err(match source {
                Source::Flags => "give either a command or --kind with --payload, not both (a handler job has no command)".to_owned(),
                Source::Line | Source::Tool => "give either `command` or `kind` (with `payload`), not both (a handler job has no command)".to_owned(),
            });
        }
        (None, Some(kind)) => {
            if kind == crate::core::SHELL_KIND {
                return Err(match source {
                    Source::Flags => {
                        "--kind shell is what a command already is: give the command as CMD instead"
                            .to_owned()
                    }
                    Source::Line | Source::Tool => {
                        "`kind` shell is what a command already is: give `command` instead"
                            .to_owned()
                    }
                });
            }
            plain_name(&n("kind"), &kind)?;
            if !spec.env.is_empty() {
                return Err(format!(
                    "{} is for shell commands; put a handler's settings in {}",
                    n("env"),
                    n("payload")
                ));
            }
            if spec.cwd.is_some() {
                return Err(format!("{} is for shell commands", n("cwd")));
            }
            if spec.limits.is_some() {
                return Err(format!(
                    "{} is for shell commands; a handler job runs with its runner's",
                    match source {
                        Source::Flags =>
                            "--nice, --ionice, --memory-max or --cpu-weight".to_owned(),
                        Source::Line | Source::Tool => n("limits"),
                    }
                ));
            }
            NewJob::new(kind, spec.payload.unwrap_or_else(|| serde_json::json!({})))
        }
        (Some(command), None) => {
            if spec.payload.is_some() {
                return Err(format!(
                    "{} is for handler jobs (with {}); a shell command takes {}",
                    n("payload"),
                    n("kind"),
                    n("env")
                ));
            }
            if command.trim().is_empty() {
                return Err(
                    "the command is empty: give a shell command like 'make test'".to_owned()
                );
            }
            let cwd = match spec.cwd {
                // Checked with the rest of the job by `machine::validate`.
                Some(cwd) => cwd,
                None => {
                    let cwd = current_dir.as_ref().map_err(|e| {
                        format!(
                            "cannot record the current directory ({e}); cd somewhere that exists"
                        )
                    })?;
                    cwd.to_str()
                        .ok_or_else(|| {
                            format!(
                                "the current directory {} is not valid UTF-8; run add from another directory",
                                cwd.display()
                            )
                        })?
                        .to_owned()
                }
            };
            let mut job = NewJob::shell(command, cwd);
            let exact = spec.recorded.is_some();
            let mut env = spec.recorded.unwrap_or_default();
            env.extend(spec.env);
            job.payload["env"] = serde_json::Value::Object(
                env.into_iter().map(|(k, v)| (k, serde_json::Value::String(v))).collect(),
            );
            if exact {
                job.payload["env_mode"] = crate::core::EnvMode::Exact.as_str().into();
            }
            if let Some(limits) = spec.limits {
                limits.check().map_err(|e| format!("{}: {e}", n("limits")))?;
                limits.write_into(&mut job.payload);
            }
            job
        }
        (None, None) => {
            return Err(match source {
                Source::Flags => "add needs a command: slothqueue add 'make test' (or a handler job: --kind K --payload JSON)".to_owned(),
                Source::Line => "a JSON line needs `command` (or `kind`, with `payload`)".to_owned(),
                Source::Tool => "add_job needs `command` (a shell command) or `kind` (with `payload`)".to_owned(),
            });
        }
    };
    if let Some(q) = spec.queue {
        plain_name(&n("queue"), &q)?;
        job.queue = q;
    }
    job.priority = spec.priority.unwrap_or(0);
    job.max_attempts = spec.max_attempts;
    job.max_runtime = spec.max_runtime.unwrap_or(Some(DEFAULT_MAX_RUNTIME));
    if let Some(key) = spec.key {
        if key.is_empty() || key.len() > machine::MAX_NAME_LEN || key.chars().any(char::is_control)
        {
            return Err(format!(
                "{} must be 1 to {} printable characters",
                n("key"),
                machine::MAX_NAME_LEN
            ));
        }
        job.idempotency_key = Some(key);
    }
    job.after = spec.after;
    job.gpus = spec.gpus;
    machine::validate(&job).map_err(|e| e.to_string())?;
    Ok((job, spec.when))
}

/// `name` is a plain name (queue, kind), or the message saying what one is.
pub fn plain_name(flag: &str, value: &str) -> Result<(), String> {
    if machine::is_plain_name(value) {
        Ok(())
    } else {
        Err(format!(
            "{flag} `{value}` is not a plain name: use 1 to {} letters, digits, `-`, `_` or `.`, not starting with `.`",
            machine::MAX_NAME_LEN
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn here() -> std::io::Result<PathBuf> {
        Ok(PathBuf::from("/work"))
    }

    #[test]
    fn a_line_names_its_fields_as_written() {
        let spec =
            JobSpec { command: Some("x".into()), queue: Some("a b".into()), ..JobSpec::default() };
        let flags = build(spec.clone(), Source::Flags, &here()).unwrap_err();
        assert!(flags.starts_with("--queue `a b`"), "{flags}");
        let line = build(spec, Source::Line, &here()).unwrap_err();
        assert!(line.starts_with("`queue` `a b`"), "{line}");
        let relative =
            JobSpec { command: Some("x".into()), cwd: Some("rel".into()), ..JobSpec::default() };
        assert!(build(relative, Source::Line, &here()).unwrap_err().contains("not an absolute"));
    }

    #[test]
    fn parents_reach_the_job() {
        let spec = JobSpec {
            command: Some("x".into()),
            after: vec![Parent::Id(3), Parent::Key("k".into())],
            ..JobSpec::default()
        };
        let (job, when) = build(spec, Source::Flags, &here()).unwrap();
        assert_eq!(job.after, [Parent::Id(3), Parent::Key("k".into())]);
        assert_eq!(job.payload["cwd"], "/work");
        assert_eq!(when, When::Now);
    }
}
