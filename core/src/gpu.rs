//! GPUs as a claim condition, in one place: what a job asks for
//! ([`GpuRequest`]), what a running attempt holds ([`GpuHold`], kept in its
//! lease, so every store persists it with the attempt), what a runner
//! measured on its host ([`GpuLook`], through a [`GpuSight`] the claim asks
//! only when a job that needs GPUs is a candidate), and the rules: which of
//! the host's GPUs are free for a job and which it gets ([`GpuPool`],
//! [`gpu_uses`]), and when a big job stops lower ones from backfilling
//! ([`GpuPool::reserve_for`]). Pure: the runner measures, the claim rule
//! (`machine/claim.rs`) decides here, the read model explains with it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::job::{GpuHold, GpuRequest, MAX_GPUS};
use crate::job::{Job, JobId, JobState};
use crate::time::Timestamp;

impl GpuRequest {
    /// The request in words: `2 GPUs with 20 GiB free each`.
    pub fn words(&self) -> String {
        let n = self.count;
        let mut s = format!("{n} GPU{}", if n == 1 { "" } else { "s" });
        if let Some(m) = self.memory {
            s.push_str(&format!(
                " with {} free{}",
                bytes_words(m),
                if n == 1 { "" } else { " each" }
            ));
        }
        s
    }
}

/// A process using a GPU, as the driver reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    /// Its pid (in the driver's namespace).
    pub pid: u32,
    /// The memory it uses on that GPU, in bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
}

/// One GPU as measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Its index (PCI bus order).
    pub index: u32,
    /// Its UUID.
    pub uuid: String,
    /// Its product name.
    pub name: String,
    /// Memory in use, in bytes.
    pub memory_used: u64,
    /// Memory in all, in bytes.
    pub memory_total: u64,
    /// Utilization in percent over the driver's last sample, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<u8>,
    /// The processes using it, when the source lists them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<GpuProcess>,
}

impl Gpu {
    /// Free memory in bytes.
    pub fn memory_free(&self) -> u64 {
        self.memory_total.saturating_sub(self.memory_used)
    }

    /// What it is as a hold.
    pub fn hold(&self) -> GpuHold {
        GpuHold { index: self.index, uuid: self.uuid.clone() }
    }

    /// Whether what runs on it is above `busy_above_pct` percent of its
    /// memory or of its time: someone else's work, not to be added to.
    pub fn is_busy(&self, busy_above_pct: u8) -> bool {
        let pct = u128::from(busy_above_pct);
        let mem_busy = self.memory_total > 0
            && u128::from(self.memory_used) * 100 > pct * u128::from(self.memory_total);
        mem_busy || self.utilization.is_some_and(|u| u > busy_above_pct)
    }
}

/// What one look at a host's GPUs found: the GPUs, or why none were seen
/// (no driver, `nvidia-smi` missing, a file that does not parse).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuLook {
    /// The GPUs, in index order.
    pub gpus: Vec<Gpu>,
    /// Why the look found no GPU, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a runner last saw of its host's GPUs, in its record: what `show`
/// and `status` explain a GPU job's wait with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSeen {
    /// The look.
    pub look: GpuLook,
    /// The runner's busy ceiling, in percent.
    pub busy_above_pct: u8,
}

/// Who measures a host's GPUs for a claim: the runner's reader (NVML,
/// `nvidia-smi`, or `--gpu-file`). Asked inside the claim's transaction,
/// and only when a candidate job needs GPUs, so a queue without GPU jobs
/// never pays for a look.
pub trait GpuSight: Send + Sync {
    /// The GPUs now.
    fn look(&self) -> GpuLook;
}

/// The default ceiling: a GPU whose memory or time others use above this
/// many percent is busy, and not handed out.
pub const DEFAULT_BUSY_ABOVE_PCT: u8 = 10;

/// The default bound of the starvation rule ([`GpuPool::reserve_for`]):
/// lower jobs may backfill GPUs while the best waiting GPU job has been due
/// for less than this.
pub const DEFAULT_BACKFILL_FOR: Duration = Duration::from_secs(10 * 60);

/// What a claimer offers jobs that need GPUs: its sight of this host's
/// GPUs and its rules. A claimer without one takes no such job.
#[derive(Clone)]
pub struct GpuOffer {
    /// Who measures.
    pub sight: Arc<dyn GpuSight>,
    /// The busy ceiling, in percent of memory or utilization.
    pub busy_above_pct: u8,
    /// The starvation rule's bound.
    pub backfill_for: Duration,
}

impl GpuOffer {
    /// An offer with the default rules.
    pub fn new(sight: Arc<dyn GpuSight>) -> Self {
        GpuOffer {
            sight,
            busy_above_pct: DEFAULT_BUSY_ABOVE_PCT,
            backfill_for: DEFAULT_BACKFILL_FOR,
        }
    }
}

impl std::fmt::Debug for GpuOffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuOffer")
            .field("busy_above_pct", &self.busy_above_pct)
            .field("backfill_for", &self.backfill_for)
            .finish_non_exhaustive()
    }
}

/// The GPUs running jobs on `host` hold, by UUID: the holds that count on
/// that host (another host's GPUs are other GPUs).
pub fn holds_on<'a>(
    host: &str,
    running: impl IntoIterator<Item = &'a Job>,
) -> BTreeMap<String, JobId> {
    let mut out = BTreeMap::new();
    for job in running {
        let Some(lease) = job.lease.as_ref().filter(|_| job.state == JobState::Running) else {
            continue;
        };
        if lease.owner.host != host {
            continue;
        }
        for h in &lease.gpus {
            out.insert(h.uuid.clone(), job.id);
        }
    }
    out
}

/// Who uses one GPU, as the claim rule sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "use")]
pub enum GpuUse {
    /// Free: no slothqueue job holds it and others use it below the ceiling.
    Free,
    /// A running slothqueue job holds it.
    Held {
        /// The job.
        job: JobId,
    },
    /// Other processes use it above the ceiling.
    Busy,
}

/// Each measured GPU and who uses it, given the holds on its host.
pub fn gpu_uses<'a>(
    look: &'a GpuLook,
    holds: &BTreeMap<String, JobId>,
    busy_above_pct: u8,
) -> Vec<(&'a Gpu, GpuUse)> {
    look.gpus
        .iter()
        .map(|g| {
            let u = match holds.get(&g.uuid) {
                Some(&job) => GpuUse::Held { job },
                None if g.is_busy(busy_above_pct) => GpuUse::Busy,
                None => GpuUse::Free,
            };
            (g, u)
        })
        .collect()
}

/// One GPU and who uses it, in the words every face shares: `GPU 0 held
/// by job #12`, `GPU 1 in use by pid 4242 (38 GiB, not a slothqueue job)`,
/// `GPU 2 has 3 GiB free` (when `request` needs more on each), `GPU 3
/// free`.
pub fn use_words(gpu: &Gpu, u: &GpuUse, request: Option<&GpuRequest>) -> String {
    let i = gpu.index;
    match u {
        GpuUse::Held { job } => format!("GPU {i} held by job #{job}"),
        GpuUse::Busy => {
            let used = bytes_words(gpu.memory_used);
            let util = gpu.utilization.map(|u| format!(", {u} %")).unwrap_or_default();
            match gpu.processes.as_slice() {
                [] => format!("GPU {i} in use by other processes ({used}{util})"),
                [p] => format!(
                    "GPU {i} in use by pid {} ({}, not a slothqueue job)",
                    p.pid,
                    p.memory.map_or(used, bytes_words)
                ),
                ps => {
                    let pids: Vec<String> = ps.iter().map(|p| p.pid.to_string()).collect();
                    format!(
                        "GPU {i} in use by pids {} ({used}, not slothqueue jobs)",
                        pids.join(", ")
                    )
                }
            }
        }
        GpuUse::Free => match request.and_then(|r| r.memory) {
            Some(m) if gpu.memory_free() < m => {
                format!("GPU {i} has {} free", bytes_words(gpu.memory_free()))
            }
            _ => format!("GPU {i} free"),
        },
    }
}

/// Why a job asking `request` waits on a host, or `None` when enough of
/// its GPUs are free now: `waiting for 2 free GPUs: GPU 0 held by job #12,
/// GPU 1 in use by pid 4242 (38 GiB, not a slothqueue job)`; with no GPU
/// seen, why none was.
pub fn wait_words(
    request: &GpuRequest,
    seen: &GpuSeen,
    holds: &BTreeMap<String, JobId>,
) -> Option<String> {
    let want = request.words();
    if seen.look.gpus.is_empty() {
        let why = seen.look.error.as_deref().unwrap_or("the host has none");
        let why = why.strip_prefix("no GPU found: ").unwrap_or(why);
        return Some(format!("waiting for {want}: no GPU found ({why})"));
    }
    let uses = gpu_uses(&seen.look, holds, seen.busy_above_pct);
    let fit = uses
        .iter()
        .filter(|(g, u)| *u == GpuUse::Free && request.memory.is_none_or(|m| g.memory_free() >= m))
        .count();
    if fit >= request.count as usize {
        return None;
    }
    let each: Vec<String> = uses.iter().map(|(g, u)| use_words(g, u, Some(request))).collect();
    let n = request.count;
    let free = match request.memory {
        None => format!("{n} free GPU{}", if n == 1 { "" } else { "s" }),
        Some(m) => format!(
            "{n} free GPU{} with {} free{}",
            if n == 1 { "" } else { "s" },
            bytes_words(m),
            if n == 1 { "" } else { " each" }
        ),
    };
    Some(format!("waiting for {free}: {}", each.join(", ")))
}

/// The GPUs one claim may hand out: measured once (at the first candidate
/// that needs GPUs), less those held on this host, less the busy ones;
/// each job taken removes its own.
#[derive(Clone, Debug)]
pub struct GpuPool {
    free: Vec<Gpu>,
    /// GPUs seen in all, free or not: a request for more never fits here.
    seen: Vec<Gpu>,
    reserved: bool,
}

impl GpuPool {
    /// The pool of `look`, with `holds` (by UUID) held and GPUs above
    /// `busy_above_pct` busy.
    pub fn new(look: &GpuLook, holds: &BTreeMap<String, JobId>, busy_above_pct: u8) -> Self {
        let mut free: Vec<Gpu> = gpu_uses(look, holds, busy_above_pct)
            .into_iter()
            .filter(|(_, u)| *u == GpuUse::Free)
            .map(|(g, _)| g.clone())
            .collect();
        free.sort_by_key(|g| g.index);
        GpuPool { free, seen: look.gpus.clone(), reserved: false }
    }

    /// The GPUs `request` gets, the lowest indices that fit, taken out of
    /// the pool; `None` when too few are free (or the pool is reserved for
    /// a bigger job, see [`GpuPool::reserve_for`]).
    pub fn take(&mut self, request: &GpuRequest) -> Option<Vec<GpuHold>> {
        if self.reserved {
            return None;
        }
        let fits = |g: &Gpu| request.memory.is_none_or(|m| g.memory_free() >= m);
        let chosen: Vec<usize> = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, g)| fits(g))
            .map(|(i, _)| i)
            .take(request.count as usize)
            .collect();
        if chosen.len() < request.count as usize {
            return None;
        }
        let holds = chosen.iter().map(|&i| self.free[i].hold()).collect();
        for i in chosen.into_iter().rev() {
            self.free.remove(i);
        }
        Some(holds)
    }

    /// **The starvation rule.** Called when `job` (asking `request`) did
    /// not get its GPUs. Lower jobs (later in claim order) may backfill the
    /// free GPUs while `job` has been due for less than `backfill_for`;
    /// from then on the pool is reserved for it: no later job in this claim
    /// gets a GPU (jobs that need none still run), so the GPUs it waits for
    /// are not taken as soon as they free. A job that could never fit this
    /// host (more GPUs, or more memory on each, than it has) reserves
    /// nothing. Returns whether the pool is now reserved.
    pub fn reserve_for(
        &mut self,
        job: &Job,
        request: &GpuRequest,
        now: Timestamp,
        backfill_for: Duration,
    ) -> bool {
        let could_fit =
            self.seen.iter().filter(|g| request.memory.is_none_or(|m| g.memory_total >= m)).count()
                >= request.count as usize;
        let waited = now.as_millis().saturating_sub(job.not_before.as_millis());
        let bound = i64::try_from(backfill_for.as_millis()).unwrap_or(i64::MAX);
        if could_fit && waited >= bound {
            self.reserved = true;
        }
        self.reserved
    }
}

/// A job's GPU request and its attempt's holds as one JSON text, for the
/// stores that keep a job as columns: one nullable column, `NULL` (no
/// text) for a job that asks for no GPUs, so most jobs cost nothing.
#[derive(Debug, Default, Serialize, Deserialize)]
struct GpuColumn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    want: Option<GpuRequest>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    held: Vec<GpuHold>,
}

/// The text of a job's GPU column, or `None` for a job without GPUs.
pub fn column_of(job: &Job) -> Option<String> {
    let held = job.lease.as_ref().map(|l| l.gpus.clone()).unwrap_or_default();
    if job.gpus.is_none() && held.is_empty() {
        return None;
    }
    serde_json::to_string(&GpuColumn { want: job.gpus.clone(), held }).ok()
}

/// A job's GPU request and holds from its column's text (`None`: none).
pub fn from_column(text: Option<&str>) -> Result<(Option<GpuRequest>, Vec<GpuHold>), String> {
    let Some(text) = text else { return Ok((None, Vec::new())) };
    let c: GpuColumn =
        serde_json::from_str(text).map_err(|e| format!("its GPUs are not readable: {e}"))?;
    Ok((c.want, c.held))
}

/// The variable a job's GPUs are named in: indices in PCI bus order.
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// `CUDA_VISIBLE_DEVICES` for holds: their indices, in order, comma
/// separated (the order `CUDA_DEVICE_ORDER=PCI_BUS_ID` gives them).
pub fn visible_devices(holds: &[GpuHold]) -> String {
    let mut idx: Vec<u32> = holds.iter().map(|h| h.index).collect();
    idx.sort_unstable();
    idx.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// The claim event's words for holds: `GPUs 0,1 (GPU-…, GPU-…)`.
pub fn holds_words(holds: &[GpuHold]) -> String {
    let uuids: Vec<&str> = holds.iter().map(|h| h.uuid.as_str()).collect();
    format!(
        "GPU{} {} ({})",
        if holds.len() == 1 { "" } else { "s" },
        visible_devices(holds),
        uuids.join(", ")
    )
}

/// Bytes in the largest binary unit that keeps a whole number or one
/// decimal: `38 GiB`, `1.5 GiB`, `512 MiB`.
pub fn bytes_words(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if (v - v.round()).abs() < 0.05 {
        format!("{} {}", v.round() as u64, UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Lease, NewJob, Owner};
    use crate::machine::create;
    use crate::policy::Policy;

    const GIB: u64 = 1 << 30;

    fn gpu(index: u32, used_gib: u64, util: u8) -> Gpu {
        Gpu {
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA A100-SXM4-80GB".into(),
            memory_used: used_gib * GIB,
            memory_total: 80 * GIB,
            utilization: Some(util),
            processes: Vec::new(),
        }
    }

    fn look(gpus: Vec<Gpu>) -> GpuLook {
        GpuLook { gpus, error: None }
    }

    fn req(count: u32) -> GpuRequest {
        GpuRequest { count, memory: None }
    }

    #[test]
    fn a_gpu_is_busy_above_the_ceiling_of_memory_or_time() {
        assert!(!gpu(0, 0, 0).is_busy(10));
        assert!(!gpu(0, 8, 10).is_busy(10));
        assert!(gpu(0, 9, 0).is_busy(10));
        assert!(gpu(0, 0, 11).is_busy(10));
    }

    #[test]
    fn the_pool_hands_out_the_lowest_free_gpus_once() {
        let holds = BTreeMap::from([("GPU-0".to_owned(), 12)]);
        let mut pool = GpuPool::new(
            &look(vec![gpu(0, 0, 0), gpu(1, 38, 90), gpu(2, 0, 0), gpu(3, 0, 0)]),
            &holds,
            10,
        );
        let first = pool.take(&req(1)).unwrap();
        assert_eq!(visible_devices(&first), "2");
        assert_eq!(pool.take(&req(2)), None, "one GPU left");
        assert_eq!(visible_devices(&pool.take(&req(1)).unwrap()), "3");
        assert_eq!(pool.take(&req(1)), None);
    }

    #[test]
    fn a_memory_request_skips_gpus_with_too_little_free() {
        let mut pool = GpuPool::new(&look(vec![gpu(0, 5, 0), gpu(1, 0, 0)]), &BTreeMap::new(), 10);
        let r = GpuRequest { count: 1, memory: Some(76 * GIB) };
        assert_eq!(visible_devices(&pool.take(&r).unwrap()), "1");
        assert_eq!(r.words(), "1 GPU with 76 GiB free");
    }

    #[test]
    fn holds_count_only_on_their_own_host() {
        let mut job =
            create(5, &NewJob::shell("x", "/"), &[], Timestamp::from_millis(0), &Policy::default())
                .job;
        job.state = JobState::Running;
        let mut owner = Owner::named("r");
        owner.host = "box-a".into();
        job.lease = Some(Lease {
            owner,
            attempt: 1,
            until: Timestamp::from_millis(1),
            child_pgid: None,
            gpus: vec![GpuHold { index: 0, uuid: "GPU-0".into() }],
        });
        assert_eq!(holds_on("box-a", [&job]).get("GPU-0"), Some(&5));
        assert!(holds_on("box-b", [&job]).is_empty());
    }

    #[test]
    fn the_pool_is_reserved_for_a_big_job_only_once_its_wait_passes_the_bound() {
        let job =
            create(1, &NewJob::shell("x", "/"), &[], Timestamp::from_millis(0), &Policy::default())
                .job;
        let four = look(vec![gpu(0, 0, 0), gpu(1, 50, 0), gpu(2, 50, 0), gpu(3, 50, 0)]);
        let bound = Duration::from_secs(60);
        let mut pool = GpuPool::new(&four, &BTreeMap::new(), 10);
        assert!(pool.take(&req(4)).is_none());
        assert!(!pool.reserve_for(&job, &req(4), Timestamp::from_millis(59_999), bound));
        assert!(pool.take(&req(1)).is_some(), "backfill below the bound");
        let mut pool = GpuPool::new(&four, &BTreeMap::new(), 10);
        assert!(pool.reserve_for(&job, &req(4), Timestamp::from_millis(60_000), bound));
        assert_eq!(pool.take(&req(1)), None, "reserved for the big job");
        let mut pool = GpuPool::new(&four, &BTreeMap::new(), 10);
        assert!(
            !pool.reserve_for(&job, &req(5), Timestamp::from_millis(600_000), bound),
            "a job that can never fit reserves nothing"
        );
    }

    #[test]
    fn a_wait_is_worded_per_gpu_and_none_when_enough_are_free() {
        let seen = |gpus: Vec<Gpu>, error: Option<&str>| GpuSeen {
            look: GpuLook { gpus, error: error.map(str::to_owned) },
            busy_above_pct: 10,
        };
        let holds = BTreeMap::from([("GPU-0".to_owned(), 12)]);
        let two = seen(vec![gpu(0, 0, 0), gpu(1, 38, 90)], None);
        assert_eq!(
            wait_words(&req(1), &two, &holds).as_deref(),
            Some(
                "waiting for 1 free GPU: GPU 0 held by job #12, GPU 1 in use by other processes (38 GiB, 90 %)"
            )
        );
        assert_eq!(wait_words(&req(1), &two, &BTreeMap::new()), None, "GPU 0 is free");
        let big = GpuRequest { count: 1, memory: Some(79 * GIB) };
        assert_eq!(
            wait_words(&big, &seen(vec![gpu(0, 4, 0)], None), &BTreeMap::new()).as_deref(),
            Some("waiting for 1 free GPU with 79 GiB free: GPU 0 has 76 GiB free")
        );
        assert_eq!(
            wait_words(
                &req(2),
                &seen(vec![], Some("no GPU found: NVML: a libloading error")),
                &holds
            )
            .as_deref(),
            Some("waiting for 2 GPUs: no GPU found (NVML: a libloading error)")
        );
    }

    #[test]
    fn bytes_are_worded_in_binary_units() {
        assert_eq!(bytes_words(38 * GIB), "38 GiB");
        assert_eq!(bytes_words(3 * GIB / 2), "1.5 GiB");
        assert_eq!(bytes_words(512 << 20), "512 MiB");
    }
}
