//! The heart of slothqueue: the job, the policy, and the state machine as
//! pure functions, plus the [`Store`] trait every backend implements and
//! the operations behind it ([`ops`]), written once over a backend's
//! transaction ([`ops::Tx`]).
//!
//! Nothing in this crate performs I/O, reads a clock or spawns anything:
//! every transition takes `now` (and the liveness judge's verdict) as an
//! argument and returns a decision. That is what lets the same functions be
//! unit-tested exhaustively, drive every backend, and serve as the reference
//! model in property tests.

pub mod failpoint;
pub mod gpu;
pub mod job;
pub mod lane;
pub mod liveness;
pub mod machine;
pub mod ops;
pub mod policy;
pub mod runners;
pub mod schedule;
pub mod serving;
pub mod shell;
pub mod store;
pub mod time;

pub use gpu::{GpuHold, GpuLook, GpuOffer, GpuRequest, GpuSight};
pub use job::{
    DEFAULT_MAX_RUNTIME, DEFAULT_QUEUE, Event, EventKind, Fence, Job, JobId, JobState, Lease,
    NewJob, Owner, Parent, SHELL_KIND, UnknownState,
};
pub use lane::{
    LaneChange, LaneScope, LaneSettings, Lanes, QueueCounts, QueueInfo, QueuesReport, Stamp,
};
pub use liveness::{ClockOnly, Liveness, LivenessJudge};
pub use machine::{
    AttemptNote, ClaimFilter, ClaimOutcome, ClaimPlan, ClaimRequest, Claimed, Completion, Failure,
    HeartbeatAck, JobEdit, LaneCheck, LaneVerdict, PlannedWrite, PushPlan, Reclaim, ReclaimReason,
    Settlement, Transition, TransitionError,
};
pub use policy::{Policy, splitmix64};
pub use schedule::{
    CatchUp, NewSchedule, Overlap, Schedule, ScheduleChange, Spec, Tick, TickOutcome, Ticks,
};
pub use serving::{Coverage, Unserved};
pub use shell::{EnvMode, IoClass, Limits};
pub use store::{
    ChangeGuard, ChangeWaker, JobSource, ListFilter, ListOrder, PendingShown, PurgeFilter, Pushed,
    PushedId, PutSchedule, RefusedKind, RunnerActivity, RunnerRecord, SettledAndClaimed, Stats,
    Store, StoreError, WaitCause,
};
pub use time::{Clock, ManualClock, SystemClock, Timestamp};
