//! What an agent may do is the user's choice, made when the server starts:
//! `--read-only` (only the looking tools), `--kinds a,b` (`add_job` queues
//! only those handler kinds, never a shell command), `--queue Q` (every
//! tool confined to one queue). Each refusal is one sentence the model can
//! act on, naming the flag that made it, so it can ask its user.

use slothqueue::Job;

use crate::error::ToolError;

/// The tools that only look: all that `--read-only` offers.
pub const LOOKING_TOOLS: &[&str] =
    &["list_jobs", "show_job", "job_logs", "queue_status", "wait_jobs"];

/// What the server lets an agent do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Only the looking tools.
    pub read_only: bool,
    /// `add_job` queues only handler jobs of these kinds; `None`: any job.
    pub kinds: Option<Vec<String>>,
    /// Every tool confined to this queue.
    pub queue: Option<String>,
}

impl Policy {
    /// Whether `tool` is offered at all.
    pub fn offers(&self, tool: &str) -> bool {
        !self.read_only || LOOKING_TOOLS.contains(&tool)
    }

    /// Refuses a tool that changes the queue under `--read-only`.
    pub fn may_change(&self, tool: &str) -> Result<(), ToolError> {
        if self.offers(tool) {
            Ok(())
        } else {
            Err(ToolError::Refused(format!(
                "{tool} is refused: this server was started with --read-only, so it only looks ({}); ask the user to run it, or to restart `slothqueue mcp` without --read-only",
                LOOKING_TOOLS.join(", ")
            )))
        }
    }

    /// Refuses what `--kinds` does not allow: a shell command at all, a
    /// handler kind not listed.
    pub fn may_add(&self, command: bool, kind: Option<&str>) -> Result<(), ToolError> {
        let Some(kinds) = &self.kinds else { return Ok(()) };
        let allowed = kinds.join(", ");
        if command {
            return Err(ToolError::Refused(format!(
                "add_job is refused: this server queues no shell command (slothqueue mcp --kinds {allowed}); queue a handler job with `kind` ({allowed}) and `payload`"
            )));
        }
        match kind {
            Some(k) if !kinds.iter().any(|a| a == k) => Err(ToolError::Refused(format!(
                "add_job is refused: kind `{k}` is not one this server queues (slothqueue mcp --kinds {allowed}); use one of {allowed}"
            ))),
            _ => Ok(()),
        }
    }

    /// The queue a call acts on: the one it names, or the server's own;
    /// another than the server's is refused.
    pub fn queue_for(
        &self,
        tool: &str,
        asked: Option<String>,
    ) -> Result<Option<String>, ToolError> {
        if let Some(q) = &asked {
            slothqueue::spec::plain_name("`queue`", q).map_err(ToolError::BadInput)?;
        }
        match (&self.queue, asked) {
            (None, asked) => Ok(asked),
            (Some(mine), None) => Ok(Some(mine.clone())),
            (Some(mine), Some(q)) if *mine == q => Ok(Some(q)),
            (Some(mine), Some(q)) => Err(ToolError::Refused(format!(
                "{tool} is refused for queue {q}: this server is confined to queue {mine} (slothqueue mcp --queue {mine}); leave `queue` out or give {mine}"
            ))),
        }
    }

    /// Refuses a job outside the server's queue.
    pub fn job_in_scope(&self, job: &Job) -> Result<(), ToolError> {
        match &self.queue {
            Some(mine) if *mine != job.queue => Err(ToolError::Refused(format!(
                "job #{} is in queue {}: this server is confined to queue {mine} (slothqueue mcp --queue {mine})",
                job.id, job.queue
            ))),
            _ => Ok(()),
        }
    }
}
