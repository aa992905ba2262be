//! Changing a job a user already added (`edit`) and adding a new one from
//! it (`clone`): what may change, on which jobs, and what the trail says.
//!
//! An edit is one fenced write: the store reads the job inside its write
//! transaction and applies [`edit`], which refuses unless the job is still
//! pending (held or not). A job claimed between the user's look and the
//! write is refused whole, never half-changed. A clone is a push built by
//! [`clone_of`] from any job, in the same transaction as the two events
//! that tie the trails together ([`cloned_events`]).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::gpu::GpuRequest;
use crate::job::{Event, EventKind, Job, JobId, JobState, NewJob, SHELL_KIND};
use crate::machine::{Transition, TransitionError, payload_hash, validate};
use crate::shell::Limits;
use crate::time::Timestamp;

/// What an `edit` or `clone` changes; every field left `None` (or empty)
/// stays as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobEdit {
    /// A new shell command (shell jobs only).
    pub command: Option<String>,
    /// A new payload, whole (for handler jobs; not with `command`, `env`
    /// or `limits`).
    pub payload: Option<serde_json::Value>,
    /// A new priority.
    pub priority: Option<i32>,
    /// A new max runtime; `Some(None)` removes the limit.
    pub max_runtime: Option<Option<Duration>>,
    /// A new attempt limit.
    pub max_attempts: Option<u32>,
    /// A new due time.
    pub not_before: Option<Timestamp>,
    /// A new queue (lane).
    pub queue: Option<String>,
    /// Environment variables to set (or replace) in a shell job's `env`.
    pub env: BTreeMap<String, String>,
    /// Limits to set; unset fields keep the job's own.
    pub limits: Limits,
    /// A new GPU request; `Some(None)` asks for none any more.
    pub gpus: Option<Option<GpuRequest>>,
}

impl JobEdit {
    /// The names of the fields this edit sets, as the `edited` event and
    /// the CLI say them: `command, priority, env PATH`.
    pub fn fields(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut add = |set: bool, name: &str| {
            if set {
                out.push(name.to_owned());
            }
        };
        add(self.command.is_some(), "command");
        add(self.payload.is_some(), "payload");
        add(self.priority.is_some(), "priority");
        add(self.max_runtime.is_some(), "max-runtime");
        add(self.max_attempts.is_some(), "max-attempts");
        add(self.not_before.is_some(), "due time");
        add(self.queue.is_some(), "queue");
        add(self.limits.nice.is_some(), "nice");
        add(self.limits.ionice.is_some(), "ionice");
        add(self.limits.memory_max.is_some(), "memory-max");
        add(self.limits.cpu_weight.is_some(), "cpu-weight");
        add(self.gpus.is_some(), "gpus");
        out.extend(self.env.keys().map(|k| format!("env {k}")));
        out
    }

    /// Whether the edit changes nothing.
    pub fn is_empty(&self) -> bool {
        self.fields().is_empty()
    }

    /// Whether the edit touches the shell payload's parts.
    fn touches_shell_payload(&self) -> bool {
        self.command.is_some() || !self.env.is_empty() || !self.limits.is_empty()
    }
}

/// The payload after `edit`, or why it cannot apply to `job`'s kind.
fn edited_payload(job: &Job, edit: &JobEdit) -> Result<serde_json::Value, TransitionError> {
    let bad = |m: String| Err(TransitionError::InvalidJob(m));
    if edit.payload.is_some() && edit.touches_shell_payload() {
        return bad("a whole payload cannot be given with a command, env or limits".to_owned());
    }
    if let Some(p) = &edit.payload {
        return Ok(p.clone());
    }
    let mut payload = job.payload.clone();
    if !edit.touches_shell_payload() {
        return Ok(payload);
    }
    if job.kind != SHELL_KIND {
        return bad(format!(
            "job #{} is a `{}` job: its command, env and limits are its payload's (give a whole payload)",
            job.id, job.kind
        ));
    }
    let serde_json::Value::Object(map) = &mut payload else {
        return bad(format!("job #{}'s payload is not an object", job.id));
    };
    if let Some(c) = &edit.command {
        map.insert("command".to_owned(), serde_json::Value::String(c.clone()));
    }
    if !edit.env.is_empty() {
        let env =
            map.entry("env").or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
        let serde_json::Value::Object(env) = env else {
            return bad(format!("job #{}'s `env` is not an object", job.id));
        };
        for (k, v) in &edit.env {
            env.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
    }
    if !edit.limits.is_empty() {
        let limits = edit.limits.over(&Limits::of(&payload).map_err(TransitionError::InvalidJob)?);
        limits.write_into(&mut payload);
    }
    Ok(payload)
}

/// `job` as a [`NewJob`] with `edit` applied (the checks a push makes
/// included), keeping its key and due time unless told.
fn as_new(job: &Job, edit: &JobEdit) -> Result<NewJob, TransitionError> {
    let new = NewJob {
        queue: edit.queue.clone().unwrap_or_else(|| job.queue.clone()),
        kind: job.kind.clone(),
        payload: edited_payload(job, edit)?,
        priority: edit.priority.unwrap_or(job.priority),
        max_attempts: Some(edit.max_attempts.unwrap_or(job.max_attempts)),
        max_runtime: edit.max_runtime.unwrap_or(job.max_runtime),
        not_before: edit.not_before,
        idempotency_key: None,
        after: Vec::new(),
        gpus: edit.gpus.clone().unwrap_or_else(|| job.gpus.clone()),
    };
    validate(&new)?;
    Ok(new)
}

/// A user edits a pending (or held) job: one transition with an `edited`
/// event naming the fields. Any other state refuses and changes nothing
/// (a job claimed since the user looked is not half-changed). An attempt
/// limit at or below the attempts already made refuses too: the job could
/// never run again. An empty edit changes nothing and writes no event.
pub fn edit(job: &Job, edit: &JobEdit, now: Timestamp) -> Result<Transition, TransitionError> {
    if job.state != JobState::Pending {
        return Err(TransitionError::InvalidTransition {
            id: job.id,
            state: job.state,
            action: "edit",
        });
    }
    if edit.is_empty() {
        return Ok(Transition { job: job.clone(), events: Vec::new() });
    }
    let new = as_new(job, edit)?;
    let max_attempts = new.max_attempts.unwrap_or(job.max_attempts);
    if max_attempts <= job.attempts {
        return Err(TransitionError::InvalidJob(format!(
            "job #{} has made {} attempt{} already: a limit of {max_attempts} would leave it none",
            job.id,
            job.attempts,
            if job.attempts == 1 { "" } else { "s" }
        )));
    }
    let mut next = job.clone();
    next.queue = new.queue;
    next.payload_hash = payload_hash(&new.payload);
    next.payload = new.payload;
    next.priority = new.priority;
    next.max_attempts = max_attempts;
    next.max_runtime = new.max_runtime;
    next.gpus = new.gpus;
    if let Some(t) = edit.not_before {
        next.not_before = t;
    }
    let event = Event::new(job.id, EventKind::Edited, now)
        .saying(format!("changed {}", edit.fields().join(", ")));
    Ok(Transition { job: next, events: vec![event] })
}

/// The job a `clone` of `job` pushes: any state, `edit` applied, due now
/// unless told, without the idempotency key (the clone would only meet
/// the original) and without the parents (a clone runs on its own; name
/// them again with `add --after` if it must wait).
pub fn clone_of(job: &Job, edit: &JobEdit) -> Result<NewJob, TransitionError> {
    as_new(job, edit)
}

/// The two events a clone appends, in one transaction with its push: `cloned
/// as #new` on the original's trail and `cloned from #original` on the new
/// job's (after its `pushed`).
pub fn cloned_events(original: JobId, clone: JobId, now: Timestamp) -> [Event; 2] {
    [
        Event::new(original, EventKind::ClonedAs, now).saying(format!("cloned as #{clone}")),
        Event::new(clone, EventKind::ClonedFrom, now).saying(format!("cloned from #{original}")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::create;
    use crate::policy::Policy;

    fn shell_job(command: &str) -> Job {
        let new = NewJob::shell(command, "/tmp");
        create(7, &new, &[], Timestamp::from_millis(1_000), &Policy::default()).job
    }

    #[test]
    fn an_edit_of_a_pending_job_changes_the_fields_and_says_which() {
        let job = shell_job("mkae test");
        let e = JobEdit {
            command: Some("make test".into()),
            priority: Some(5),
            env: [("CI".to_owned(), "1".to_owned())].into(),
            ..JobEdit::default()
        };
        let t = edit(&job, &e, Timestamp::from_millis(2_000)).unwrap();
        assert_eq!(t.job.command(), Some("make test"));
        assert_eq!(t.job.payload["env"]["CI"], "1");
        assert_eq!(t.job.priority, 5);
        assert_ne!(t.job.payload_hash, job.payload_hash);
        assert_eq!(t.events[0].kind, EventKind::Edited);
        assert_eq!(t.events[0].message.as_deref(), Some("changed command, priority, env CI"));
    }

    #[test]
    fn an_edit_refuses_a_job_that_is_not_pending_and_bad_values() {
        let mut job = shell_job("x");
        let e = JobEdit { priority: Some(1), ..JobEdit::default() };
        job.state = JobState::Running;
        assert!(matches!(
            edit(&job, &e, Timestamp::from_millis(1)),
            Err(TransitionError::InvalidTransition { action: "edit", .. })
        ));
        job.state = JobState::Pending;
        job.attempts = 2;
        let e = JobEdit { max_attempts: Some(2), ..JobEdit::default() };
        assert!(edit(&job, &e, Timestamp::from_millis(1)).is_err());
        let e = JobEdit { command: Some(String::new()), ..JobEdit::default() };
        assert!(edit(&job, &e, Timestamp::from_millis(1)).is_err());
        let mut handler = job.clone();
        handler.kind = "download".into();
        let e = JobEdit { command: Some("y".into()), ..JobEdit::default() };
        assert!(edit(&handler, &e, Timestamp::from_millis(1)).is_err());
    }

    #[test]
    fn a_clone_drops_key_and_parents_and_keeps_the_rest() {
        let mut job = shell_job("exit 1");
        job.state = JobState::Failed;
        job.idempotency_key = Some("k".into());
        job.after = vec![3];
        let e = JobEdit { command: Some("exit 0".into()), ..JobEdit::default() };
        let new = clone_of(&job, &e).unwrap();
        assert_eq!(new.payload["command"], "exit 0");
        assert_eq!(new.payload["cwd"], "/tmp");
        assert_eq!(new.idempotency_key, None);
        assert!(new.after.is_empty());
        assert_eq!(new.max_attempts, Some(job.max_attempts));
        let [a, b] = cloned_events(7, 9, Timestamp::from_millis(5));
        assert_eq!((a.job_id, a.kind), (7, EventKind::ClonedAs));
        assert_eq!(b.message.as_deref(), Some("cloned from #7"));
    }
}
