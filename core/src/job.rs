//! The job record, its states, its owner and the event trail.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lane::Stamp;
use crate::time::Timestamp;

/// A job's identity: a positive, increasing integer, shown as `#12`.
pub type JobId = i64;

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting to be claimed once `not_before` has passed.
    Pending,
    /// Leased to an owner until the lease's `until`.
    Running,
    /// Completed by its owner.
    Done,
    /// Out of attempts; `last_error` says why.
    Failed,
    /// Cancelled by a user, or superseded by a newer job with its key.
    Cancelled,
}

impl JobState {
    /// Every state, in the order `status` shows them.
    pub const ALL: [JobState; 5] = [
        JobState::Pending,
        JobState::Running,
        JobState::Done,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// Terminal states never change again except through `retry`.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Done | JobState::Failed | JobState::Cancelled)
    }

    /// The lower-case name used in storage, JSON and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state name that is not one of the five.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state `{0}` (expected pending, running, done, failed or cancelled)")]
pub struct UnknownState(pub String);

impl FromStr for JobState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// Who is claiming: one runner process for its lifetime.
///
/// `id` is never reused (it includes the pid, the process start time and a
/// random part), so an owner that lost its lease can never be confused with
/// the next one. The rest lets another process on the same host judge
/// whether the owner is still alive without trusting the wall clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// Unique per runner process lifetime.
    pub id: String,
    /// The host name the owner runs on.
    pub host: String,
    /// `/proc/sys/kernel/random/boot_id` of that host, when known.
    pub boot_id: Option<String>,
    /// The owner's pid.
    pub pid: Option<u32>,
    /// The owner's process start time (field 22 of `/proc/<pid>/stat`), to
    /// tell a live owner from a reused pid.
    pub pid_start_time: Option<u64>,
    /// The inode of the owner's PID namespace (`/proc/self/ns/pid`), when
    /// known: `pid` names that process only inside the same namespace (a
    /// runner in a container and one outside it see different pids).
    /// Absent from owners recorded before it existed.
    #[serde(default)]
    pub pid_ns: Option<u64>,
}

impl Owner {
    /// An owner known only by its id, as in-process library users and tests have.
    pub fn named(id: impl Into<String>) -> Self {
        Owner {
            id: id.into(),
            host: String::new(),
            boot_id: None,
            pid: None,
            pid_start_time: None,
            pid_ns: None,
        }
    }
}

/// The proof of ownership every owner-side write carries: the owner and the
/// attempt number it was given by `claim` (the fencing token).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fence {
    /// The owner's id.
    pub owner: String,
    /// The attempt number the claim handed out.
    pub attempt: u32,
}

/// A running job's lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Who holds it.
    pub owner: Owner,
    /// The attempt this lease belongs to; the fencing token.
    pub attempt: u32,
    /// The lease is expired when `until < now`.
    pub until: Timestamp,
    /// The process group of the job's child, once spawned, so that a
    /// successor can kill an orphan before running the job again.
    pub child_pgid: Option<i32>,
    /// The GPUs this attempt holds on its owner's host, for as long as the
    /// lease lives (`crate::gpu`): no other claim on that host hands them
    /// out. Empty for a job that asked for none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuHold>,
}

impl Lease {
    /// The fence an owner must present to write to this job.
    pub fn fence(&self) -> Fence {
        Fence { owner: self.owner.id.clone(), attempt: self.attempt }
    }
}

/// One job and everything the queue knows about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Positive and increasing.
    pub id: JobId,
    /// The lane; a runner serves one or more.
    pub queue: String,
    /// `shell` for a command; any other name is dispatched to a handler.
    pub kind: String,
    /// For `shell`: `{"command": …, "cwd": …, "env": {…}}`.
    pub payload: serde_json::Value,
    /// Higher runs first.
    pub priority: i32,
    /// Where the job is in its life.
    pub state: JobState,
    /// Attempts started so far.
    pub attempts: u32,
    /// The most attempts allowed.
    pub max_attempts: u32,
    /// How long one attempt may run (awake time); `None` is unlimited.
    #[serde(with = "opt_millis")]
    pub max_runtime: Option<Duration>,
    /// The job is due when `now >= not_before`.
    pub not_before: Timestamp,
    /// Present exactly while `state == Running`.
    pub lease: Option<Lease>,
    /// Pushing the same key twice does not make two jobs.
    pub idempotency_key: Option<String>,
    /// SHA-256 of the canonical payload, to tell a duplicate from a newer job.
    pub payload_hash: String,
    /// Set by `cancel` on a running job; the owner sees it on its next heartbeat.
    pub cancel_requested: bool,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// A short summary of a successful run (the last line of output).
    pub result: Option<String>,
    /// The exit code of the last attempt, if it was a process.
    pub exit_code: Option<i32>,
    /// When the job was pushed.
    pub created_at: Timestamp,
    /// When the last attempt started.
    pub started_at: Option<Timestamp>,
    /// When the job reached a terminal state.
    pub finished_at: Option<Timestamp>,
    /// The jobs it runs after (its parents), by id, in the order given;
    /// fixed at push. Absent from jobs without parents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<JobId>,
    /// How many of `after` are not `done` yet. A pending job with any is
    /// waiting on its parents: not due, and not in any index a claim reads.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pending_parents: u32,
    /// Set when the job was cancelled because a job it depends on
    /// (transitively) failed or was cancelled: that job's id, the root of
    /// the failure. A `retry` of the root brings this job back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<JobId>,
    /// Set while a user holds the pending job (`hold`): it is not due, and
    /// not in any index a claim reads, until released. Cleared when the
    /// job leaves pending (a cancel, a supersede).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Stamp>,
    /// The GPUs it needs free to start (`add --gpus`); a claim takes it
    /// only with that many free on the claimer's host (`crate::gpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<GpuRequest>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Job {
    /// The job is due at `now`: pending, its parents done, not held, its
    /// time come.
    pub fn is_due(&self, now: Timestamp) -> bool {
        self.is_claimable() && self.not_before <= now
    }

    /// Pending, not held and waiting on no parent: a claim may take it once
    /// its time has come (and its lane lets it). What the stores' claim
    /// indexes hold.
    pub fn is_claimable(&self) -> bool {
        self.state == JobState::Pending && self.pending_parents == 0 && self.held.is_none()
    }

    /// Pending and held by a user.
    pub fn is_held(&self) -> bool {
        self.state == JobState::Pending && self.held.is_some()
    }

    /// Pending, but waiting on parents that are not `done` yet.
    pub fn is_waiting_on_parents(&self) -> bool {
        self.state == JobState::Pending && self.pending_parents > 0
    }

    /// The key `claim` orders by: highest priority, then earliest
    /// `not_before`, then lowest id. Smaller sorts first.
    pub fn claim_order(&self) -> (std::cmp::Reverse<i32>, Timestamp, JobId) {
        (std::cmp::Reverse(self.priority), self.not_before, self.id)
    }

    /// The shell command, for `shell` jobs.
    pub fn command(&self) -> Option<&str> {
        self.payload.get("command").and_then(|c| c.as_str())
    }
}

/// What happened to a job, appended to its trail by every transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The job was created.
    Pushed,
    /// An owner took the job.
    Claimed,
    /// The previous owner's lease was taken back (`message` says why).
    Reclaimed,
    /// The owner handed the job back without charging the attempt.
    Released,
    /// The attempt failed; `retry_at` is set when it will run again.
    Failed,
    /// The owner finished the job.
    Completed,
    /// A cancel was requested while the job was running.
    CancelRequested,
    /// The job was cancelled.
    Cancelled,
    /// A newer job with the same idempotency key replaced this pending one.
    Superseded,
    /// The lease ran out with no attempts left.
    Expired,
    /// A user put a failed or cancelled job back to pending.
    Retried,
    /// A user held the pending job (`hold`); `owner` is not set, `message`
    /// names who.
    Held,
    /// A user released the hold (`release`).
    HoldReleased,
    /// The runner stopped the running attempt's processes (SIGSTOP) while
    /// a gate was closed; `message` says which reading.
    Suspended,
    /// The runner continued them (SIGCONT); `message` says after how long.
    Resumed,
    /// A user changed the pending job (`edit`); `message` names the fields.
    Edited,
    /// The job was added as a copy of another (`clone`); `message` names it.
    ClonedFrom,
    /// A copy of this job was added (`clone`); `message` names it.
    ClonedAs,
    /// The job is a schedule's tick; `message` names the schedule, the
    /// slot and the slots caught up on.
    Scheduled,
    /// A schedule's next tick enqueued nothing because this job (its
    /// previous tick) was unfinished; `message` names the slot.
    TickSkipped,
}

impl EventKind {
    /// The snake_case name used in storage, JSON and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Pushed => "pushed",
            EventKind::Claimed => "claimed",
            EventKind::Reclaimed => "reclaimed",
            EventKind::Released => "released",
            EventKind::Failed => "failed",
            EventKind::Completed => "completed",
            EventKind::CancelRequested => "cancel_requested",
            EventKind::Cancelled => "cancelled",
            EventKind::Superseded => "superseded",
            EventKind::Expired => "expired",
            EventKind::Retried => "retried",
            EventKind::Held => "held",
            EventKind::HoldReleased => "hold_released",
            EventKind::Suspended => "suspended",
            EventKind::Resumed => "resumed",
            EventKind::Edited => "edited",
            EventKind::ClonedFrom => "cloned_from",
            EventKind::ClonedAs => "cloned_as",
            EventKind::Scheduled => "scheduled",
            EventKind::TickSkipped => "tick_skipped",
        }
    }

    /// Every kind, for parsing.
    pub const ALL: [EventKind; 20] = [
        EventKind::Pushed,
        EventKind::Claimed,
        EventKind::Reclaimed,
        EventKind::Released,
        EventKind::Failed,
        EventKind::Completed,
        EventKind::CancelRequested,
        EventKind::Cancelled,
        EventKind::Superseded,
        EventKind::Expired,
        EventKind::Retried,
        EventKind::Held,
        EventKind::HoldReleased,
        EventKind::Suspended,
        EventKind::Resumed,
        EventKind::Edited,
        EventKind::ClonedFrom,
        EventKind::ClonedAs,
        EventKind::Scheduled,
        EventKind::TickSkipped,
    ];
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown event kind `{s}`"))
    }
}

/// What a job asks for: `count` GPUs, each with at least `memory` bytes
/// free, held for the whole attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuRequest {
    /// How many GPUs (at least 1).
    pub count: u32,
    /// The free memory it needs on each, in bytes; `None` asks for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
}

/// The most GPUs a job may ask for: more than any one host has.
pub const MAX_GPUS: u32 = 64;

impl GpuRequest {
    /// Why the request cannot be met by any host, or `None`.
    pub fn check(&self) -> Option<String> {
        if self.count == 0 {
            return Some("--gpus must be at least 1".to_owned());
        }
        if self.count > MAX_GPUS {
            return Some(format!("--gpus must be at most {MAX_GPUS}"));
        }
        if self.memory == Some(0) {
            return Some("--gpu-memory must be more than 0".to_owned());
        }
        None
    }
}

/// One GPU an attempt holds: its index on the host (what
/// `CUDA_VISIBLE_DEVICES` names, in PCI bus order) and its UUID (what holds
/// are matched on, since an index can move when a GPU disappears).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GpuHold {
    /// The index `nvidia-smi` gives it.
    pub index: u32,
    /// `GPU-…`.
    pub uuid: String,
}

/// One entry of a job's append-only trail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The job it belongs to.
    pub job_id: JobId,
    /// When it happened.
    pub at: Timestamp,
    /// What happened.
    pub kind: EventKind,
    /// The owner involved, for claim-side events.
    pub owner: Option<String>,
    /// The attempt number the event concerns.
    pub attempt: Option<u32>,
    /// A human-readable detail: the error, the reclaim reason, the result.
    pub message: Option<String>,
    /// For `failed`: when the job will be retried; absent when it will not.
    pub retry_at: Option<Timestamp>,
}

impl Event {
    /// A bare event; the builder methods fill the rest.
    pub fn new(job_id: JobId, kind: EventKind, at: Timestamp) -> Self {
        Event { job_id, at, kind, owner: None, attempt: None, message: None, retry_at: None }
    }

    pub(crate) fn by(mut self, owner: &str, attempt: u32) -> Self {
        self.owner = Some(owner.to_owned());
        self.attempt = Some(attempt);
        self
    }

    pub(crate) fn saying(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }
}

/// What a user asks to be queued; `push` turns it into a [`Job`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewJob {
    /// The lane; `default` unless given.
    pub queue: String,
    /// `shell` or a handler's name.
    pub kind: String,
    /// The payload; for `shell`, see [`NewJob::shell`].
    pub payload: serde_json::Value,
    /// Higher runs first.
    pub priority: i32,
    /// `None` takes the policy's default.
    pub max_attempts: Option<u32>,
    /// `None` is unlimited.
    #[serde(with = "opt_millis")]
    pub max_runtime: Option<Duration>,
    /// `None` is "due now".
    pub not_before: Option<Timestamp>,
    /// Optional deduplication key.
    pub idempotency_key: Option<String>,
    /// The jobs this one runs after: it is not due until every one is
    /// `done`, and is cancelled when one fails or is cancelled. Each must
    /// exist when this job is pushed (in a batch: earlier in it), so no
    /// cycle can form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<Parent>,
    /// The GPUs it needs (`add --gpus`), `None` for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<GpuRequest>,
}

/// A parent named at push: by job id, or by the idempotency key of the job
/// holding it (so a script can chain steps without parsing ids). In JSON a
/// number is an id and a string a key: `"after": [12, "build-7"]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Parent {
    /// A job id.
    Id(JobId),
    /// The idempotency key of the job holding it.
    Key(String),
}

impl fmt::Display for Parent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Parent::Id(id) => write!(f, "#{id}"),
            Parent::Key(k) => write!(f, "key `{k}`"),
        }
    }
}

/// The queue a job goes to when none is named.
pub const DEFAULT_QUEUE: &str = "default";
/// The kind of a shell command job.
pub const SHELL_KIND: &str = "shell";
/// The max runtime a job gets when whoever queues it does not say (the
/// CLI's `add`, the HTTP enqueue): a job that hangs must not hold the queue
/// forever. Opting out (`--max-runtime none`, `"max_runtime": null`) is
/// explicit.
pub const DEFAULT_MAX_RUNTIME: Duration = Duration::from_secs(300);

impl NewJob {
    /// A job of `kind` with `payload`, defaults elsewhere.
    pub fn new(kind: impl Into<String>, payload: serde_json::Value) -> Self {
        NewJob {
            queue: DEFAULT_QUEUE.to_owned(),
            kind: kind.into(),
            payload,
            priority: 0,
            max_attempts: None,
            max_runtime: None,
            not_before: None,
            idempotency_key: None,
            after: Vec::new(),
            gpus: None,
        }
    }

    /// A shell command run with `sh -c` in `cwd`.
    pub fn shell(command: impl Into<String>, cwd: impl Into<String>) -> Self {
        NewJob::new(
            SHELL_KIND,
            serde_json::json!({ "command": command.into(), "cwd": cwd.into(), "env": {} }),
        )
    }

    /// Sets the priority.
    pub fn priority(mut self, p: i32) -> Self {
        self.priority = p;
        self
    }

    /// Sets the queue.
    pub fn queue(mut self, q: impl Into<String>) -> Self {
        self.queue = q.into();
        self
    }

    /// Sets when the job becomes due.
    pub fn not_before(mut self, t: Timestamp) -> Self {
        self.not_before = Some(t);
        self
    }

    /// Sets the idempotency key.
    pub fn key(mut self, k: impl Into<String>) -> Self {
        self.idempotency_key = Some(k.into());
        self
    }

    /// Asks for GPUs (`add --gpus`).
    pub fn gpus(mut self, request: GpuRequest) -> Self {
        self.gpus = Some(request);
        self
    }

    /// Sets the maximum number of attempts.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Sets the maximum runtime of one attempt.
    pub fn max_runtime(mut self, d: Option<Duration>) -> Self {
        self.max_runtime = d;
        self
    }

    /// Adds a parent: this job runs after it is `done`.
    pub fn after(mut self, parent: impl Into<Parent>) -> Self {
        self.after.push(parent.into());
        self
    }
}

impl From<JobId> for Parent {
    fn from(id: JobId) -> Self {
        Parent::Id(id)
    }
}

impl From<&str> for Parent {
    fn from(key: &str) -> Self {
        Parent::Key(key.to_owned())
    }
}

/// Durations serialise as integer milliseconds, like timestamps.
mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leases and runner records written before `pid_ns` existed (redb rows,
    /// runner records, exports) still decode, without a namespace.
    #[test]
    fn an_owner_recorded_without_pid_ns_decodes() {
        let old = r#"{"id":"w","host":"h","boot_id":"b","pid":7,"pid_start_time":9}"#;
        let owner: Owner = serde_json::from_str(old).unwrap();
        assert_eq!(owner.pid_ns, None);
        assert_eq!(owner.pid, Some(7));
        let new = Owner { pid_ns: Some(4_026_531_836), ..owner };
        let back: Owner = serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert_eq!(back, new);
    }
}
