//! What a runner records about itself in the store, so that `status`,
//! `show`, the page and `top` can say what it does and why a job waits:
//! its identity, the queues and kinds it serves, what its slots do, and
//! its last look at its GPUs. Stores keep a record whole (as JSON), so a
//! field added here is serde-defaulted, and older builds read newer
//! records and the other way round.

use serde::{Deserialize, Serialize};

use crate::job::{JobId, Owner};
use crate::time::Timestamp;

/// What a runner is doing, recorded so `status` and `show` can explain why a
/// job is not running.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "activity", rename_all = "snake_case")]
pub enum RunnerActivity {
    /// Looking for work.
    Starting,
    /// Running a job (with `--slots N`, maybe more than one).
    Running {
        /// The job (the first it started, of those running).
        job: JobId,
        /// The other jobs it runs at the same time, oldest start first;
        /// absent with one slot, and from records written before slots.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        also: Vec<JobId>,
    },
    /// Its free slots wait: held by a gate, or while every due job's lane
    /// is paused or full (`cause` says which, `reading` what it saw:
    /// `load 3.20 >= ceiling 2.00`, `queue backups paused — 3 due jobs
    /// waiting`). Jobs it runs meanwhile are in [`RunnerRecord::running`].
    Gated {
        /// The last reading, e.g. `load 3.20 >= ceiling 2.00`.
        reading: String,
        /// Since when.
        since: Timestamp,
        /// A gate or the lanes; absent (a gate) from records written before
        /// it was recorded, and from the JSON for a gate.
        #[serde(default, skip_serializing_if = "WaitCause::is_gate")]
        cause: WaitCause,
    },
    /// Nothing due; sleeping until a job is due, a wake-up or a poll.
    Idle {
        /// When the next job it knows of is due; `None` when none is
        /// waiting (it still polls for jobs added without telling it).
        until: Option<Timestamp>,
    },
}

/// What holds a runner's free slots in [`RunnerActivity::Gated`]: a gate
/// the user set on the runner (`--load-ceiling`, `--on-ac`, …), or the
/// queues' lanes (paused, or at their limit), which are not the runner's
/// and must not be called its gate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitCause {
    /// One of the runner's gates is closed.
    #[default]
    Gate,
    /// Every due job's lane is paused or full.
    Lanes,
}

impl WaitCause {
    /// For `skip_serializing_if`: a gate is what older records meant.
    pub fn is_gate(&self) -> bool {
        *self == WaitCause::Gate
    }
}

/// A kind a runner refused to run, and its reason in one line naming the
/// file or folder at fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedKind {
    /// The kind.
    pub kind: String,
    /// Why, as the runner said it.
    pub why: String,
}

/// A live runner's record in the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunnerRecord {
    /// The runner's identity (the same as its leases').
    pub owner: Owner,
    /// The queues it serves; empty for all.
    pub queues: Vec<String>,
    /// The kinds it can run (its executors); `None` for every kind, as
    /// records written before kinds were recorded say.
    #[serde(default)]
    pub kinds: Option<Vec<String>>,
    /// The kinds it found a handler for but refused to run (another user
    /// could change it), each with the runner's reason: what `show` says of
    /// their jobs. Absent from records written before it was recorded, and
    /// from the JSON when empty, so older builds read the record unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedKind>,
    /// When it started.
    pub started_at: Timestamp,
    /// When it last wrote this record.
    pub updated_at: Timestamp,
    /// What it is doing (with free slots, what those slots do).
    pub activity: RunnerActivity,
    /// How many jobs it may run at once (`run --slots N`); 1 in records
    /// written before it was recorded.
    #[serde(default = "one_slot", skip_serializing_if = "is_one_slot")]
    pub slots: u32,
    /// The jobs it runs now, oldest start first, whatever `activity` says:
    /// with `--slots 2`, one slot may run #15 while the other waits on a
    /// paused queue, and a record must say both. Empty in records written
    /// before it was recorded (their `Running` activity names the jobs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<JobId>,
    /// What it last saw of its host's GPUs (it looks only when a job that
    /// needs GPUs is a candidate). Absent from records of runners that
    /// never looked, and from those written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<crate::gpu::GpuSeen>,
}

fn one_slot() -> u32 {
    1
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_one_slot(n: &u32) -> bool {
    *n == 1
}
