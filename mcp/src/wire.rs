//! What each tool takes and answers, as Rust types: their JSON Schemas are
//! the `inputSchema` and `outputSchema` of `tools/list` (schemars, as rmcp
//! generates them), and their serde shapes are what `tools/call` reads and
//! writes as `structuredContent`. One place, so a schema cannot drift from
//! what a handler does (the snapshot test of `tools/list` watches both).
//!
//! Times are UTC milliseconds, as in every other JSON slothqueue writes
//! (docs/json.md); durations a client gives are seconds.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use slothqueue::Job;

/// A job as an answer names it: enough to act on, never its recorded
/// environment (secrets stay out of a model's context).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobOut {
    /// The job's id.
    pub id: i64,
    /// pending, running, done, failed or cancelled.
    pub state: String,
    /// Its queue.
    pub queue: String,
    /// `shell`, or a handler's kind.
    pub kind: String,
    /// A shell job's command.
    pub command: Option<String>,
    /// A shell job's directory.
    pub cwd: Option<String>,
    /// Higher runs first.
    pub priority: i32,
    /// Attempts made so far.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Its idempotency key.
    pub key: Option<String>,
    /// When it was added (UTC ms).
    pub created_at: i64,
    /// When it may start (UTC ms).
    pub not_before: i64,
    /// When it ended (UTC ms).
    pub finished_at: Option<i64>,
    /// The exit code of its last attempt.
    pub exit_code: Option<i32>,
    /// Why its last attempt failed.
    pub last_error: Option<String>,
    /// The last line of its output, when it ended done.
    pub result: Option<String>,
    /// The jobs it runs after.
    pub after: Vec<i64>,
    /// Held (`hold_job`) until released.
    pub held: bool,
    /// A cancel was asked of its runner.
    pub cancel_requested: bool,
    /// The GPUs it needs to start (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// The free memory it needs on each of them, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_mib: Option<u64>,
    /// While it runs: the indexes of the GPUs its attempt holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus_held: Vec<u32>,
}

impl From<&Job> for JobOut {
    fn from(j: &Job) -> Self {
        let shell = j.kind == slothqueue::core::SHELL_KIND;
        JobOut {
            id: j.id,
            state: j.state.as_str().to_owned(),
            queue: j.queue.clone(),
            kind: j.kind.clone(),
            command: shell.then(|| j.command()).flatten().map(str::to_owned),
            cwd: shell
                .then(|| j.payload.get("cwd"))
                .flatten()
                .and_then(|c| c.as_str())
                .map(str::to_owned),
            priority: j.priority,
            attempts: j.attempts,
            max_attempts: j.max_attempts,
            key: j.idempotency_key.clone(),
            created_at: j.created_at.as_millis(),
            not_before: j.not_before.as_millis(),
            finished_at: j.finished_at.map(|t| t.as_millis()),
            exit_code: j.exit_code,
            last_error: j.last_error.clone(),
            result: j.result.clone(),
            after: j.after.clone(),
            held: j.held.is_some(),
            cancel_requested: j.cancel_requested,
            gpus: j.gpus.as_ref().map(|g| g.count),
            gpu_memory_mib: j.gpus.as_ref().and_then(|g| g.memory).map(|b| b.div_ceil(1024 * 1024)),
            gpus_held: j
                .lease
                .as_ref()
                .map(|l| l.gpus.iter().map(|h| h.index).collect())
                .unwrap_or_default(),
        }
    }
}

/// A parent of a new job: its id, or the idempotency key of the job that
/// holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ParentRef {
    /// A job id.
    Id(i64),
    /// An idempotency key.
    Key(String),
}

/// `add_job`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddJobInput {
    /// A shell command (`sh -c`); or give `kind` and `payload` instead.
    pub command: Option<String>,
    /// The command's directory (absolute); default: the server's own.
    pub cwd: Option<String>,
    /// Variables the command runs with, beside the few `add` records
    /// (PATH, HOME, LANG, …); the server's environment is not copied.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of the server's variables to record too (a secret enters
    /// only when named here).
    #[serde(default)]
    pub env_pass: Vec<String>,
    /// A handler job's kind (run by the runner's handler of that name).
    pub kind: Option<String>,
    /// A handler job's payload (any JSON; `{}` when absent).
    pub payload: Option<serde_json::Value>,
    /// Idempotency key: the same key and job again adds nothing.
    pub key: Option<String>,
    /// Jobs (ids or keys) that must end done before this one starts.
    #[serde(default)]
    pub after: Vec<ParentRef>,
    /// The queue (default `default`).
    pub queue: Option<String>,
    /// Higher runs first (default 0).
    pub priority: Option<i32>,
    /// Seconds to wait before it may start.
    pub delay: Option<u64>,
    /// Seconds an attempt may run (0: no limit; default 1 hour).
    pub max_runtime: Option<u64>,
    /// Attempts before it fails for good (default 3).
    pub max_attempts: Option<u32>,
    /// Start only with this many free GPUs on the runner's host, held for
    /// the whole attempt (the job sees them in `CUDA_VISIBLE_DEVICES`).
    pub gpus: Option<u32>,
    /// With `gpus`: the free memory it needs on each GPU, in MiB.
    pub gpu_memory_mib: Option<u64>,
}

/// What `add_job` did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AddJobOutput {
    /// `created`; `existing` (the key held the same job: nothing added);
    /// `superseded` (the key held another pending job, which was cancelled).
    pub outcome: String,
    /// The job.
    pub job: JobOut,
    /// The job the key held before, cancelled (outcome `superseded`).
    pub superseded: Option<i64>,
    /// Whether a live runner will take it.
    pub served: bool,
    /// Why no live runner will take it, and how to start one.
    pub runner_note: Option<String>,
}

/// `list_jobs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListJobsInput {
    /// Only jobs in this state: pending, running, done, failed, cancelled.
    pub state: Option<String>,
    /// Only jobs of this queue.
    pub queue: Option<String>,
    /// Only jobs of this kind (`shell` or a handler's).
    pub kind: Option<String>,
    /// At most this many (default 20, at most 200).
    pub limit: Option<u32>,
    /// `newest` (default), `oldest`, or `due` (the order runners take them).
    pub order: Option<String>,
}

/// The jobs found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListJobsOutput {
    /// The jobs, in the order asked.
    pub jobs: Vec<JobOut>,
    /// More jobs matched than `limit`.
    pub more: bool,
}

/// A job named by its id.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobIdInput {
    /// The job's id.
    pub id: i64,
}

/// One line of a job's trail.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventOut {
    /// When (UTC ms).
    pub at: i64,
    /// pushed, claimed, completed, failed, retried, cancelled, …
    pub kind: String,
    /// The attempt it belongs to.
    pub attempt: Option<u32>,
    /// What it says.
    pub message: Option<String>,
}

/// `show_job`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ShowJobOutput {
    /// The job.
    pub job: JobOut,
    /// Why it is not running yet, or who runs it, in `show`'s words.
    pub why: Option<String>,
    /// Its trail, oldest first.
    pub events: Vec<EventOut>,
    /// Its parents as they are now.
    pub parents: Vec<JobOut>,
    /// The ids of the jobs waiting on it.
    pub dependents: Vec<i64>,
    /// Its log as a resource (`resources/read`).
    pub log_uri: String,
}

/// `job_logs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobLogsInput {
    /// The job's id.
    pub id: i64,
    /// Read from this byte; without it, the log's tail.
    pub offset: Option<u64>,
    /// At most this many bytes (default 16384, at most 262144).
    pub max_bytes: Option<u64>,
    /// Only the last this many lines of what is read.
    pub lines: Option<u32>,
}

/// A piece of a job's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobLogsOutput {
    /// The job.
    pub id: i64,
    /// Whether the log exists (none before its first attempt).
    pub exists: bool,
    /// The log's size now, in bytes.
    pub size: u64,
    /// The byte `text` starts at.
    pub start: u64,
    /// Where the next read should start (`offset`) for what follows.
    pub next_offset: u64,
    /// The output (invalid UTF-8 replaced).
    pub text: String,
    /// Whether the job has ended (its log will not grow).
    pub finished: bool,
}

/// `queue_status` takes nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoInput {}

/// Job counts per state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Counts {
    /// Pending (waiting, held or not yet due included).
    pub pending: u64,
    /// Running.
    pub running: u64,
    /// Done (`null` for one queue: finished jobs are counted only for
    /// the whole file).
    pub done: Option<u64>,
    /// Failed (`null` for one queue).
    pub failed: Option<u64>,
    /// Cancelled (`null` for one queue).
    pub cancelled: Option<u64>,
    /// Pending and due now.
    pub due_now: u64,
}

/// A queue's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LaneOut {
    /// The queue (`null`: every queue).
    pub queue: Option<String>,
    /// At most this many of its jobs run at once (0: no limit).
    pub limit: u32,
    /// Who paused it, if paused.
    pub paused_by: Option<String>,
    /// Since when (UTC ms), if paused.
    pub paused_since: Option<i64>,
}

/// A live runner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunnerOut {
    /// `runner pid 42 on this host`.
    pub name: String,
    /// What it does now, in `status`'s words.
    pub activity: String,
    /// The queues it serves (empty: all).
    pub queues: Vec<String>,
}

/// Pending jobs no live runner can run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UnservedOut {
    /// The queue.
    pub queue: String,
    /// The kind.
    pub kind: String,
    /// How many.
    pub pending: u64,
    /// Why, in words.
    pub why: String,
}

/// `queue_status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QueueStatusOutput {
    /// Whether the queue exists yet.
    pub exists: bool,
    /// The counts (of the one queue this server is confined to, if any).
    pub counts: Counts,
    /// The queues with a limit or a pause (and every queue's pause).
    pub lanes: Vec<LaneOut>,
    /// The live runners.
    pub runners: Vec<RunnerOut>,
    /// Pending jobs no live runner can run.
    pub unserved: Vec<UnservedOut>,
}

/// `wait_jobs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitJobsInput {
    /// These jobs; or give `queue`, or neither for every job.
    #[serde(default)]
    pub ids: Vec<i64>,
    /// Every job of this queue.
    pub queue: Option<String>,
    /// Give up after this many seconds (default 60; the server's ceiling
    /// applies, and the answer says it).
    pub timeout_s: Option<u64>,
}

/// How a wait ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WaitJobsOutput {
    /// `done` (all ended done), `failed` (one did not), `timed_out`.
    pub outcome: String,
    /// Ended done.
    pub done: Vec<i64>,
    /// Ended failed.
    pub failed: Vec<i64>,
    /// Ended cancelled.
    pub cancelled: Vec<i64>,
    /// Not ended yet (pending or running) when the wait ended.
    pub pending: Vec<i64>,
    /// Deleted before they were seen ending.
    pub gone: Vec<i64>,
    /// The seconds waited at most.
    pub timeout_s: u64,
}

/// A change to one job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobChangeOutput {
    /// The job after the change.
    pub job: JobOut,
    /// What happened, in the CLI's words.
    pub message: String,
}

/// `pause_queue` and `resume_queue`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueInput {
    /// The queue; without it every queue (or the one this server is
    /// confined to).
    pub queue: Option<String>,
}

/// A lane after a change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LaneChangeOutput {
    /// The lane as it is now.
    pub lane: LaneOut,
    /// What happened.
    pub message: String,
}
