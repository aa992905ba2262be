//! The door checks: what a new (or restored) job must be before anything is
//! written, so that every way in (`add`, HTTP, `import`) refuses the same
//! input with the same words, and what the OS would refuse at run time
//! (argument length, NULs, bad environment names) is refused at once.

use std::time::Duration;

use sha2::{Digest, Sha256};

use super::TransitionError;
use crate::job::{Event, Job, JobState, NewJob, SHELL_KIND};

/// Longest queue, kind or idempotency key accepted.
pub const MAX_NAME_LEN: usize = 128;

/// Longest single argument Linux passes to a program (`MAX_ARG_STRLEN`,
/// 32 pages of 4 KiB, with its NUL): a shell command (`sh -c CMD`) or one
/// `NAME=VALUE` of its environment longer than this cannot start.
pub const MAX_ARG_LEN: usize = 131_072;

/// Most attempts a job may be given.
pub const MAX_ATTEMPTS: u32 = 1_000_000;

/// Shortest max runtime: stored in milliseconds, anything shorter would be
/// 0 and kill the job at once.
pub const MIN_MAX_RUNTIME: Duration = Duration::from_millis(1);

/// Longest max runtime (100 years, the longest duration the CLI reads); a
/// longer one is a mistake, and its milliseconds must fit an `i64`.
pub const MAX_MAX_RUNTIME: Duration = Duration::from_secs(100 * 366 * 24 * 3600);

/// Checks a new job before anything is written: every door (the CLI's
/// `add`, HTTP enqueue, `import`) passes here, so what the OS would refuse
/// only at run time (an over-long argument, a NUL, an env name with `=`)
/// is refused at enqueue.
pub fn validate(new: &NewJob) -> Result<(), TransitionError> {
    let bad = |m: String| Err(TransitionError::InvalidJob(m));
    for (what, name) in [("queue", &new.queue), ("kind", &new.kind)] {
        if !is_plain_name(name) {
            return bad(format!(
                "{what} `{name}` must be 1 to {MAX_NAME_LEN} characters of letters, digits, `-`, `_` or `.`, not starting with `.`"
            ));
        }
    }
    if let Some(key) = &new.idempotency_key {
        if key.is_empty() || key.len() > MAX_NAME_LEN || key.chars().any(char::is_control) {
            return bad(format!(
                "idempotency key must be 1 to {MAX_NAME_LEN} printable characters"
            ));
        }
    }
    for p in &new.after {
        match p {
            crate::job::Parent::Id(id) if *id <= 0 => {
                return bad(format!("--after {id}: a job id is a positive number"));
            }
            crate::job::Parent::Key(k)
                if k.is_empty() || k.len() > MAX_NAME_LEN || k.chars().any(char::is_control) =>
            {
                return bad(format!(
                    "--after: a key must be 1 to {MAX_NAME_LEN} printable characters"
                ));
            }
            _ => {}
        }
    }
    if let Some(why) = new.gpus.as_ref().and_then(crate::gpu::GpuRequest::check) {
        return bad(why);
    }
    if new.max_attempts == Some(0) {
        return bad("max attempts must be at least 1".to_owned());
    }
    if new.max_attempts.is_some_and(|n| n > MAX_ATTEMPTS) {
        return bad(format!("max attempts must be at most {MAX_ATTEMPTS}"));
    }
    if let Some(d) = new.max_runtime {
        if d < MIN_MAX_RUNTIME {
            return bad("max runtime must be at least 1ms (none for no limit)".to_owned());
        }
        if d > MAX_MAX_RUNTIME {
            return bad("max runtime must be at most 100 years (none for no limit)".to_owned());
        }
    }
    if new.not_before.is_some_and(|t| t.as_millis() < 0) {
        return bad("the due time is before 1970-01-01 (the epoch)".to_owned());
    }
    if new.kind == SHELL_KIND {
        validate_shell(&new.payload).map_err(TransitionError::InvalidJob)?;
    }
    Ok(())
}

/// A shell payload the runner can start: a command `sh -c` can take, an
/// absolute `cwd` without NUL, an `env` of names and values `execve` can take.
fn validate_shell(payload: &serde_json::Value) -> Result<(), String> {
    match payload.get("command").and_then(|c| c.as_str()) {
        None => return Err("a shell job needs a payload with a string `command`".to_owned()),
        Some(c) if c.trim().is_empty() => return Err("the command is empty".to_owned()),
        Some(c) if c.contains('\0') => return Err("the command contains a NUL byte".to_owned()),
        Some(c) if c.len() >= MAX_ARG_LEN => {
            return Err(format!(
                "the command is {} bytes: Linux passes at most {} bytes as one argument (put a long script in a file)",
                c.len(),
                MAX_ARG_LEN - 1
            ));
        }
        Some(_) => {}
    }
    match payload.get("cwd") {
        None => {}
        Some(serde_json::Value::String(cwd)) if cwd.contains('\0') => {
            return Err("the `cwd` contains a NUL byte".to_owned());
        }
        // The one cwd rule of every door (`add`, HTTP, `import`, an edit):
        // a relative one would resolve against wherever the runner was
        // started.
        Some(serde_json::Value::String(cwd)) if !cwd.starts_with('/') => {
            return Err(format!(
                "the `cwd` `{}` is not an absolute path (a relative one would depend on where the runner was started)",
                cwd.escape_debug()
            ));
        }
        Some(serde_json::Value::String(_)) => {}
        Some(_) => return Err("the `cwd` must be a string".to_owned()),
    }
    match payload.get("env") {
        None => {}
        Some(serde_json::Value::Object(env)) => {
            for (name, value) in env {
                let Some(value) = value.as_str() else {
                    return Err(format!("the value of env `{name}` must be a string"));
                };
                if name.is_empty() || name.contains(['=', '\0']) {
                    return Err(format!(
                        "env name `{}` must be non-empty, without `=` or NUL",
                        name.escape_debug()
                    ));
                }
                if value.contains('\0') {
                    return Err(format!("the value of env `{name}` contains a NUL byte"));
                }
                if name.len() + 1 + value.len() >= MAX_ARG_LEN {
                    return Err(format!(
                        "env `{name}` is longer than the {} bytes Linux passes as one variable",
                        MAX_ARG_LEN - 1
                    ));
                }
            }
        }
        Some(_) => return Err("the shell payload's `env` must be an object of strings".to_owned()),
    }
    crate::shell::EnvMode::of(payload)?;
    crate::shell::Limits::of(payload)?;
    Ok(())
}

/// Checks a job and its trail given to [`crate::Store::restore_many`]
/// (an import) on their own, before anything is written: a positive id, a
/// lease exactly while running, and a trail of this job only. What depends
/// on the queue (the id free, the key not held) the store checks in its
/// transaction.
pub fn check_restore(job: &Job, events: &[Event]) -> Result<(), TransitionError> {
    let bad = |m: String| Err(TransitionError::InvalidJob(m));
    if job.id <= 0 {
        return bad(format!("job id {} is not positive", job.id));
    }
    if (job.state == JobState::Running) != job.lease.is_some() {
        return bad(format!("job #{}: a lease is present exactly while running", job.id));
    }
    if let Some(p) = job.after.iter().find(|p| **p >= job.id || **p <= 0) {
        return bad(format!(
            "job #{}: its parent #{p} is not an earlier job (parents come first, so no cycle can form)",
            job.id
        ));
    }
    if job.pending_parents as usize > job.after.len() {
        return bad(format!(
            "job #{}: it waits on {} parents but names {}",
            job.id,
            job.pending_parents,
            job.after.len()
        ));
    }
    if job.held.is_some() && job.state != JobState::Pending {
        return bad(format!("job #{}: only a pending job can be held", job.id));
    }
    if let Some(e) = events.iter().find(|e| e.job_id != job.id) {
        return bad(format!("job #{}: its trail holds an event of job #{}", job.id, e.job_id));
    }
    Ok(())
}

/// A queue, kind or handler name: safe as a file name inside a directory.
pub fn is_plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_LEN
        && !s.starts_with('.')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// SHA-256 of the payload's canonical JSON (object keys sorted), hex.
pub fn payload_hash(payload: &serde_json::Value) -> String {
    // serde_json's default map is ordered by key, so serialising is canonical.
    let bytes = serde_json::to_vec(payload).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    // One allocation, not a `format!` per byte: push_many hashes every job.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(digest.len() * 2);
    for b in digest {
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    hex
}
