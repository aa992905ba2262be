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

use slothqueue_core::gpu::{self, Gpu, GpuUse};

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
    /// The GPUs each host's live runners last saw, with who uses each
    /// (hosts whose runners never looked are left out).
    pub gpus: Vec<HostGpus>,
}

/// One host's GPUs as `status` lists them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostGpus {
    /// The host.
    pub host: String,
    /// Why its runner found no GPU, if it found none.
    pub error: Option<String>,
    /// Each GPU and who uses it.
    pub gpus: Vec<GpuLine>,
}

/// One GPU and who uses it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuLine {
    /// As measured.
    pub gpu: Gpu,
    /// Who uses it.
    #[serde(flatten)]
    pub used: GpuUse,
    /// The words: `GPU 0 held by job #12`.
    pub line: String,
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
    let gpus = host_gpus(store, &live).await?;
    Ok(StatusView {
        exists: true,
        stats,
        lanes,
        queues,
        schedules,
        next_tick,
        live,
        unserved,
        gpus,
    })
}

/// The GPUs the live runners saw, one entry per host (the latest record's
/// look), with the holds of the running jobs on it. Reads the running jobs
/// only when some runner looked.
async fn host_gpus(
    store: &dyn slothqueue_core::Store,
    live: &[RunnerView],
) -> Result<Vec<HostGpus>, ViewError> {
    let mut seen: Vec<&RunnerView> = live.iter().filter(|r| r.record.gpus.is_some()).collect();
    if seen.is_empty() {
        return Ok(Vec::new());
    }
    seen.sort_by_key(|r| std::cmp::Reverse(r.record.updated_at));
    let running = store
        .list(&ListFilter { state: Some(JobState::Running), ..ListFilter::default() })
        .await
        .map_err(read("cannot list running jobs"))?;
    let mut out: Vec<HostGpus> = Vec::new();
    for r in seen {
        let host = &r.record.owner.host;
        let Some(g) = r.record.gpus.as_ref().filter(|_| !out.iter().any(|h| &h.host == host))
        else {
            continue;
        };
        let holds = gpu::holds_on(host, &running);
        let gpus = gpu::gpu_uses(&g.look, &holds, g.busy_above_pct)
            .into_iter()
            .map(|(gpu, used)| GpuLine {
                line: gpu::use_words(gpu, &used, None),
                gpu: gpu.clone(),
                used,
            })
            .collect();
        out.push(HostGpus { host: host.clone(), error: g.look.error.clone(), gpus });
    }
    Ok(out)
}
