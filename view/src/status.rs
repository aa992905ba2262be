//! `status`'s facts about a queue, read once: the counts, the lanes (and
//! each lane's counts when some lane has a setting), the schedules and the
//! next tick, the live runners, and the pending jobs no live runner can
//! run. The CLI's text and `--json` and the HTTP stats answer present a
//! [`StatusView`].

use serde::Serialize;
use slothqueue_core::serving::{self, UNSERVED_SCAN, Unserved};
use slothqueue_core::{
    JobState, Lanes, ListFilter, ListOrder, QueuesReport, RunnerRecord, Schedule, Stats, Timestamp,
};

use crate::{Look, RunnerView, ViewError, read};

/// Everything `status` says of a queue.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StatusView {
    /// Whether the queue file exists (`false`: every count is 0).
    pub exists: bool,
    /// The counts per state, due now, next due.
    #[serde(flatten)]
    pub stats: Stats,
    /// Every lane's settings.
    pub lanes: Lanes,
    /// Each lane's counts with its settings, when some lane has a setting
    /// (a file without any pays nothing for lanes).
    pub queues: Option<QueuesReport>,
    /// The schedules, by key.
    pub schedules: Vec<Schedule>,
    /// The schedule that fires next, and when.
    pub next_tick: Option<NextTick>,
    /// The runners alive now.
    pub live: Vec<RunnerView>,
    /// The pending jobs (the first [`UNSERVED_SCAN`] in claim order) no
    /// live runner can run, by queue and kind; with no runner alive, every
    /// one of them (`no live runner serves queue Q`).
    pub unserved: Vec<Unserved>,
}

/// The schedule that fires next.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NextTick {
    /// Its key.
    pub key: String,
    /// When.
    pub at: Timestamp,
}

impl StatusView {
    /// The schedule that fires next, as stored.
    pub fn next_schedule(&self) -> Option<&Schedule> {
        let next = self.next_tick.as_ref()?;
        self.schedules.iter().find(|s| s.key == next.key)
    }
}

/// Reads what `status` says of the queue.
pub async fn status(look: &Look<'_>) -> Result<StatusView, ViewError> {
    let store = look.store;
    let now = look.now;
    let stats = store.stats(now).await.map_err(read("cannot read the queue's counts"))?;
    let lanes = store.lanes().await.map_err(read("cannot read the lanes"))?;
    let schedules = store.schedules().await.map_err(read("cannot read the schedules"))?;
    let next_tick = schedules
        .iter()
        .filter_map(|s| s.next_fire().map(|at| NextTick { key: s.key.clone(), at }))
        .min_by_key(|t| t.at);
    let live: Vec<RunnerView> = look.runners().await?.into_iter().filter(|r| r.live).collect();
    let filter = ListFilter {
        state: Some(JobState::Pending),
        order: ListOrder::DueFirst,
        limit: Some(UNSERVED_SCAN),
        ..ListFilter::default()
    };
    let pending = store.list(&filter).await.map_err(read("cannot list pending jobs"))?;
    let records: Vec<&RunnerRecord> = live.iter().map(|r| &r.record).collect();
    let unserved = serving::unserved(&pending, &records);
    let queues = if lanes.is_default() {
        None
    } else {
        let counts =
            store.queue_counts(now).await.map_err(read("cannot count the queues' jobs"))?;
        Some(QueuesReport::new(&lanes, counts))
    };
    Ok(StatusView { exists: true, stats, lanes, queues, schedules, next_tick, live, unserved })
}
