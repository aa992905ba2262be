//! Seeing this host's GPUs for the claim rule (`slothqueue_core::gpu`):
//! through NVML, the driver's library loaded at run time ([`NvmlSight`]),
//! falling back to `nvidia-smi` ([`NvidiaSmi`]; the two are the default,
//! [`DriverSight`], each look cached for a moment so a burst of claims
//! reads once), or from a file of `nvidia-smi`'s CSV at every look (`run
//! --gpu-file`, [`GpuFile`]; the CSV is [`parse_query_gpu`] and
//! [`parse_compute_apps`]); and the environment a job's GPUs give it
//! ([`gpu_env`]). The claim asks a sight only when a job that needs GPUs is
//! a candidate, so a runner with no such job pending never loads the
//! driver's library nor runs `nvidia-smi`. Where no GPU is found the look
//! says why, and jobs that need one wait, saying so.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use slothqueue_core::gpu::{
    CUDA_VISIBLE_DEVICES, Gpu, GpuHold, GpuLook, GpuProcess, GpuSight, visible_devices,
};

const MIB: u64 = 1 << 20;

/// The query `--gpu-file` holds the answer of, and the one [`NvidiaSmi`]
/// runs.
pub const QUERY_GPU: &str = "index,uuid,name,memory.used,memory.total,utilization.gpu";

/// `nvidia-smi --query-gpu=… --format=csv` output as GPUs: the header line
/// names the columns (units in brackets, as `memory.used [MiB]`), in any
/// order; a GPU whose row has `[GPU is lost]`, `[Unknown Error]` or
/// another unreadable index, UUID or memory is left out (it is not there
/// to hand out). `[N/A]` utilization is unknown. An error when the text is
/// no such output at all.
pub fn parse_query_gpu(text: &str) -> Result<Vec<Gpu>, String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let header = lines.next().ok_or("no header line (empty output)")?;
    let cols: Vec<String> = header
        .split(',')
        .map(|c| c.split('[').next().unwrap_or("").trim().to_ascii_lowercase())
        .collect();
    let at = |name: &str| cols.iter().position(|c| c == name);
    let (Some(index), Some(uuid), Some(used), Some(total)) =
        (at("index"), at("uuid"), at("memory.used"), at("memory.total"))
    else {
        return Err(format!(
            "the header `{header}` is not `nvidia-smi --query-gpu={QUERY_GPU} --format=csv`'s"
        ));
    };
    let (name, util) = (at("name"), at("utilization.gpu"));
    let mut gpus = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |i: usize| f.get(i).copied().unwrap_or("");
        let (Ok(i), Some(used), Some(total)) =
            (get(index).parse::<u32>(), mib(get(used)), mib(get(total)))
        else {
            continue;
        };
        let uuid = get(uuid);
        if !uuid.starts_with("GPU-") {
            continue;
        }
        gpus.push(Gpu {
            index: i,
            uuid: uuid.to_owned(),
            name: name.map(get).unwrap_or_default().to_owned(),
            memory_used: used,
            memory_total: total,
            utilization: util.and_then(|u| percent(get(u))),
            processes: Vec::new(),
        });
    }
    gpus.sort_by_key(|g| g.index);
    Ok(gpus)
}

/// `nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv`
/// output, laid onto `gpus` as their processes.
pub fn parse_compute_apps(text: &str, gpus: &mut [Gpu]) {
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let [uuid, pid, memory, ..] = f.as_slice() else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if let Some(g) = gpus.iter_mut().find(|g| g.uuid == *uuid) {
            g.processes.push(GpuProcess { pid, memory: mib(memory) });
        }
    }
}

/// `81559 MiB` (or a bare number of MiB) in bytes.
fn mib(field: &str) -> Option<u64> {
    let n = field.strip_suffix("MiB").unwrap_or(field).trim();
    n.parse::<u64>().ok().map(|n| n.saturating_mul(MIB))
}

/// `38 %` (or a bare number) as a percentage.
fn percent(field: &str) -> Option<u8> {
    let n = field.strip_suffix('%').unwrap_or(field).trim();
    n.parse::<u8>().ok().filter(|p| *p <= 100)
}

/// GPUs read from a file of `nvidia-smi --query-gpu=… --format=csv`
/// output at every look (`run --gpu-file`), as `--load-file` reads a load.
#[derive(Clone, Debug)]
pub struct GpuFile {
    path: PathBuf,
}

impl GpuFile {
    /// Reads `path` at every look.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        GpuFile { path: path.into() }
    }

    /// Whether the file reads and parses now (checked at start, so a wrong
    /// path is an error then, not a silent wait).
    pub fn check(&self) -> Result<(), String> {
        match self.look().error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl GpuSight for GpuFile {
    fn look(&self) -> GpuLook {
        let read = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))
            .and_then(|t| parse_query_gpu(&t).map_err(|e| format!("{}: {e}", self.path.display())));
        match read {
            Ok(gpus) => GpuLook { gpus, error: None },
            Err(e) => GpuLook { gpus: Vec::new(), error: Some(e) },
        }
    }
}

/// How long [`NvidiaSmi`] reuses a look: a burst of claims runs it once.
pub const SMI_CACHE: Duration = Duration::from_secs(2);

/// The longest `nvidia-smi` may take before the look gives up on it (a
/// wedged driver must not hold the claim's transaction).
pub const SMI_TIMEOUT: Duration = Duration::from_secs(10);

/// GPUs from `nvidia-smi` on the `PATH` (or the program given), with the
/// processes on each; a look is reused for [`SMI_CACHE`].
pub struct NvidiaSmi {
    program: PathBuf,
    last: Mutex<Option<(Instant, GpuLook)>>,
}

impl NvidiaSmi {
    /// `nvidia-smi` from the `PATH`.
    pub fn new() -> Self {
        NvidiaSmi::at("nvidia-smi")
    }

    /// A given program (a test's stand-in, or a driver's own path).
    pub fn at(program: impl Into<PathBuf>) -> Self {
        NvidiaSmi { program: program.into(), last: Mutex::new(None) }
    }

    fn run(&self, args: &[&str]) -> Result<String, String> {
        let name = self.program.display();
        let child = Command::new(&self.program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("no GPU found: cannot run {name}: {e}"))?;
        // Waited for on a thread of its own, so that a wedged driver is
        // given up on after SMI_TIMEOUT (and killed) without polling.
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(SMI_TIMEOUT) {
            Ok(out) => out.map_err(|e| format!("{name}: {e}"))?,
            Err(_) => {
                if let Some(pid) = rustix::process::Pid::from_raw(pid.cast_signed()) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
                return Err(format!("{name} did not answer in {}s", SMI_TIMEOUT.as_secs()));
            }
        };
        if !out.status.success() {
            return Err(format!("no GPU found: {name} failed ({})", out.status));
        }
        String::from_utf8(out.stdout).map_err(|_| format!("{name} printed no text"))
    }

    fn look_now(&self) -> GpuLook {
        let query = format!("--query-gpu={QUERY_GPU}");
        let gpus = self.run(&[&query, "--format=csv"]).and_then(|t| parse_query_gpu(&t));
        match gpus {
            Ok(mut gpus) => {
                let apps = ["--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv"];
                if let Ok(t) = self.run(&apps) {
                    parse_compute_apps(&t, &mut gpus);
                }
                GpuLook { gpus, error: None }
            }
            Err(e) => GpuLook { gpus: Vec::new(), error: Some(e) },
        }
    }
}

impl Default for NvidiaSmi {
    fn default() -> Self {
        NvidiaSmi::new()
    }
}

impl GpuSight for NvidiaSmi {
    fn look(&self) -> GpuLook {
        let Ok(mut last) = self.last.lock() else { return self.look_now() };
        if let Some((at, look)) = last.as_ref() {
            if at.elapsed() < SMI_CACHE {
                return look.clone();
            }
        }
        let look = self.look_now();
        *last = Some((Instant::now(), look.clone()));
        look
    }
}

/// Runs `call` on a thread of its own and waits at most `timeout` for its
/// answer, for a call that cannot be killed (NVML runs inside this
/// process, and a wedged driver blocks it in the kernel): the claim goes on
/// with an error instead. While an abandoned call is still blocked,
/// `in_flight` stays set and later calls are refused at once, so a wedged
/// driver costs one blocked thread, never one per look.
pub fn bounded<T: Send + 'static>(
    in_flight: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    timeout: Duration,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    use std::sync::atomic::Ordering;
    if in_flight.swap(true, Ordering::AcqRel) {
        return Err("the last call has not answered yet".to_owned());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let flag = std::sync::Arc::clone(in_flight);
    let spawned = std::thread::Builder::new().name("gpu-look".to_owned()).spawn(move || {
        let answer = call();
        flag.store(false, Ordering::Release);
        let _ = tx.send(answer);
    });
    if let Err(e) = spawned {
        in_flight.store(false, Ordering::Release);
        return Err(format!("cannot start a thread: {e}"));
    }
    rx.recv_timeout(timeout).map_err(|_| format!("did not answer in {}s", timeout.as_secs()))
}

/// GPUs through NVML, the driver's own library, loaded at the first look
/// (`nvml-wrapper` loads `libnvidia-ml.so` at run time: the binary starts
/// on a machine without the driver, and a runner that never sees a GPU job
/// never loads it). A look is reused for [`SMI_CACHE`]; loading and each
/// look are [`bounded`] by [`SMI_TIMEOUT`], as `nvidia-smi` is.
pub struct NvmlSight {
    nvml: std::sync::Arc<std::sync::OnceLock<Result<nvml_wrapper::Nvml, String>>>,
    in_flight: std::sync::Arc<std::sync::atomic::AtomicBool>,
    last: Mutex<Option<(Instant, GpuLook)>>,
}

impl NvmlSight {
    /// Not loaded until the first look.
    pub fn new() -> Self {
        NvmlSight {
            nvml: std::sync::Arc::new(std::sync::OnceLock::new()),
            in_flight: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
            last: Mutex::new(None),
        }
    }

    /// Whether NVML loads here (loading it if not yet).
    pub fn available(&self) -> Result<(), String> {
        if let Some(loaded) = self.nvml.get() {
            return loaded.as_ref().map(|_| ()).map_err(Clone::clone);
        }
        let nvml = std::sync::Arc::clone(&self.nvml);
        bounded(&self.in_flight, SMI_TIMEOUT, move || {
            Self::load(&nvml).map(|_| ()).map_err(Clone::clone)
        })
        .map_err(|e| format!("NVML: loading {e}"))?
    }

    fn load(
        nvml: &std::sync::OnceLock<Result<nvml_wrapper::Nvml, String>>,
    ) -> Result<&nvml_wrapper::Nvml, &String> {
        nvml.get_or_init(|| nvml_wrapper::Nvml::init().map_err(|e| format!("NVML: {e}"))).as_ref()
    }

    fn look_bounded(&self) -> Result<Vec<Gpu>, String> {
        let nvml = std::sync::Arc::clone(&self.nvml);
        bounded(&self.in_flight, SMI_TIMEOUT, move || {
            Self::look_now(Self::load(&nvml).map_err(Clone::clone)?)
        })
        .map_err(|e| format!("NVML: {e}"))?
    }

    fn look_now(nvml: &nvml_wrapper::Nvml) -> Result<Vec<Gpu>, String> {
        let n = nvml.device_count().map_err(|e| format!("NVML: {e}"))?;
        let mut gpus = Vec::new();
        for i in 0..n {
            // A device that cannot be read (fallen off the bus) is not
            // there to hand out.
            let Ok(d) = nvml.device_by_index(i) else { continue };
            let (Ok(uuid), Ok(mem)) = (d.uuid(), d.memory_info()) else { continue };
            let processes = d
                .running_compute_processes()
                .unwrap_or_default()
                .into_iter()
                .map(|p| GpuProcess {
                    pid: p.pid,
                    memory: match p.used_gpu_memory {
                        nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => Some(b),
                        nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => None,
                    },
                })
                .collect();
            gpus.push(Gpu {
                index: d.index().unwrap_or(i),
                uuid,
                name: d.name().unwrap_or_default(),
                memory_used: mem.used,
                memory_total: mem.total,
                utilization: d.utilization_rates().ok().and_then(|u| u8::try_from(u.gpu).ok()),
                processes,
            });
        }
        gpus.sort_by_key(|g| g.index);
        Ok(gpus)
    }
}

impl Default for NvmlSight {
    fn default() -> Self {
        NvmlSight::new()
    }
}

impl GpuSight for NvmlSight {
    fn look(&self) -> GpuLook {
        let Ok(mut last) = self.last.lock() else { return GpuLook::default() };
        if let Some((at, look)) = last.as_ref() {
            if at.elapsed() < SMI_CACHE {
                return look.clone();
            }
        }
        let look = match self.look_bounded() {
            Ok(gpus) => GpuLook { gpus, error: None },
            Err(e) => GpuLook { gpus: Vec::new(), error: Some(format!("no GPU found: {e}")) },
        };
        *last = Some((Instant::now(), look.clone()));
        look
    }
}

/// The default sight: NVML where the driver's library loads, else
/// `nvidia-smi` (a driver whose library is elsewhere, a container with the
/// tool but not the library). Decided at the first look.
pub struct DriverSight {
    nvml: NvmlSight,
    smi: NvidiaSmi,
}

impl DriverSight {
    /// NVML, falling back to `nvidia-smi` from the `PATH`.
    pub fn new() -> Self {
        DriverSight::with_smi("nvidia-smi")
    }

    /// NVML, falling back to the `nvidia-smi` at `program`.
    pub fn with_smi(program: impl Into<PathBuf>) -> Self {
        DriverSight { nvml: NvmlSight::new(), smi: NvidiaSmi::at(program) }
    }
}

impl Default for DriverSight {
    fn default() -> Self {
        DriverSight::new()
    }
}

impl GpuSight for DriverSight {
    fn look(&self) -> GpuLook {
        match self.nvml.available() {
            Ok(()) => self.nvml.look(),
            Err(nvml) => {
                let mut look = self.smi.look();
                if let Some(e) = look.error.as_mut() {
                    *e = format!("{e}; {nvml}");
                }
                look
            }
        }
    }
}

/// A sight that remembers its last look, for the runner's record and the
/// wait it prints (what `status` and `show` quote).
pub struct Remembering {
    inner: std::sync::Arc<dyn GpuSight>,
    last: Mutex<Option<GpuLook>>,
    looks: std::sync::atomic::AtomicU64,
}

impl Remembering {
    /// Wraps `inner`.
    pub fn new(inner: std::sync::Arc<dyn GpuSight>) -> Self {
        Remembering { inner, last: Mutex::new(None), looks: std::sync::atomic::AtomicU64::new(0) }
    }

    /// How many looks were taken: a claim that changed it asked for GPUs.
    pub fn looks(&self) -> u64 {
        self.looks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The last look, if any was taken.
    pub fn last(&self) -> Option<GpuLook> {
        self.last.lock().ok().and_then(|l| l.clone())
    }
}

impl GpuSight for Remembering {
    fn look(&self) -> GpuLook {
        let look = self.inner.look();
        self.looks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut last) = self.last.lock() {
            *last = Some(look.clone());
        }
        look
    }
}

/// What the runner says once when jobs that need GPUs start waiting, and
/// again when what it sees changes: why none of the GPUs it sees will do.
pub fn wait_line(look: &GpuLook, busy_above_pct: u8) -> String {
    if let Some(e) = &look.error {
        return format!("jobs that need GPUs wait: {e}");
    }
    if look.gpus.is_empty() {
        return "jobs that need GPUs wait: no GPU found".to_owned();
    }
    let busy: Vec<String> = look
        .gpus
        .iter()
        .filter(|g| g.is_busy(busy_above_pct))
        .map(|g| slothqueue_core::gpu::use_words(g, &slothqueue_core::gpu::GpuUse::Busy, None))
        .collect();
    let n = look.gpus.len();
    let mut line = format!("jobs that need GPUs wait: too few of the {n} GPUs here are free");
    if !busy.is_empty() {
        line.push_str(&format!(" ({})", busy.join(", ")));
    }
    line.push_str("; `slothqueue show ID` says which");
    line
}

/// The variables a job holding `holds` gets: `CUDA_VISIBLE_DEVICES` (their
/// indices), `CUDA_DEVICE_ORDER=PCI_BUS_ID` (so CUDA numbers the GPUs as
/// `nvidia-smi` does) and `SLOTHQUEUE_GPUS` (their UUIDs). A job that
/// holds none gets `CUDA_VISIBLE_DEVICES` empty only when `hide` (`run
/// --hide-gpus`), and nothing otherwise.
pub fn gpu_env(holds: &[GpuHold], hide: bool) -> Vec<(String, String)> {
    if holds.is_empty() {
        return if hide {
            vec![(CUDA_VISIBLE_DEVICES.to_owned(), String::new())]
        } else {
            Vec::new()
        };
    }
    let mut by_index: Vec<&GpuHold> = holds.iter().collect();
    by_index.sort_by_key(|h| h.index);
    let uuids: Vec<&str> = by_index.iter().map(|h| h.uuid.as_str()).collect();
    vec![
        (CUDA_VISIBLE_DEVICES.to_owned(), visible_devices(holds)),
        ("CUDA_DEVICE_ORDER".to_owned(), "PCI_BUS_ID".to_owned()),
        ("SLOTHQUEUE_GPUS".to_owned(), uuids.join(",")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver call that never answers is given up on at the deadline;
    /// while it stays blocked no second thread is started; once it returns,
    /// calls go through again.
    #[test]
    fn a_wedged_call_is_given_up_on_and_not_piled_up() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let in_flight = Arc::new(AtomicBool::new(false));
        assert_eq!(bounded(&in_flight, Duration::from_secs(5), || 7), Ok(7));
        assert!(!in_flight.load(Ordering::Acquire), "an answered call leaves nothing in flight");
        let (release, wedged) = std::sync::mpsc::channel::<()>();
        let e = bounded(&in_flight, Duration::from_millis(50), move || wedged.recv().is_ok())
            .unwrap_err();
        assert!(e.contains("did not answer"), "{e}");
        let e = bounded(&in_flight, Duration::from_secs(5), || 8).unwrap_err();
        assert!(e.contains("has not answered yet"), "a second call piles up: {e}");
        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while in_flight.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "the released call never returned");
            std::thread::yield_now();
        }
        assert_eq!(bounded(&in_flight, Duration::from_secs(5), || 9), Ok(9));
    }

    fn fixture(name: &str) -> String {
        let path = format!("{}/tests/data/gpus/{name}.csv", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn the_recorded_boxes_parse() {
        let one = parse_query_gpu(&fixture("1-gpu")).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].memory_total, 81_559 * MIB);
        assert!(one[0].uuid.starts_with("GPU-"));
        assert_eq!(parse_query_gpu(&fixture("4-gpu")).unwrap().len(), 4);
        let eight = parse_query_gpu(&fixture("8-gpu")).unwrap();
        assert_eq!(eight.iter().map(|g| g.index).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn a_busy_gpu_reads_as_busy_and_a_lost_one_is_left_out() {
        let busy = parse_query_gpu(&fixture("4-gpu-busy")).unwrap();
        let flags: Vec<bool> = busy.iter().map(|g| g.is_busy(10)).collect();
        assert_eq!(flags, [false, true, false, false]);
        let lost = parse_query_gpu(&fixture("4-gpu-one-lost")).unwrap();
        assert_eq!(lost.iter().map(|g| g.index).collect::<Vec<_>>(), [0, 1, 3]);
    }

    #[test]
    fn what_is_not_nvidia_smi_output_is_refused() {
        assert!(parse_query_gpu("").is_err());
        assert!(parse_query_gpu("0.52 0.58 0.59 1/467 12345\n").is_err());
    }

    #[test]
    fn compute_apps_land_on_their_gpu() {
        let mut gpus = parse_query_gpu(&fixture("4-gpu-busy")).unwrap();
        let uuid = gpus[1].uuid.clone();
        parse_compute_apps(
            &format!("gpu_uuid, pid, used_memory [MiB]\n{uuid}, 4242, 38912 MiB\n"),
            &mut gpus,
        );
        assert_eq!(gpus[1].processes, [GpuProcess { pid: 4242, memory: Some(38_912 * MIB) }]);
    }

    #[test]
    fn nvidia_smi_is_asked_for_the_gpus_and_their_processes_and_its_absence_said() {
        let dir = tempfile::tempdir().unwrap();
        let smi = dir.path().join("nvidia-smi");
        let busy = format!("{}/tests/data/gpus/4-gpu-busy.csv", env!("CARGO_MANIFEST_DIR"));
        let script = format!(
            "#!/bin/sh\ncase \"$1\" in\n--query-gpu=*) cat '{busy}';;\n\
             *) printf 'gpu_uuid, pid, used_memory [MiB]\\nGPU-2a7c3b4d-0e5f-4b86-9c17-d4e3f2a1b0c9, 4242, 38912 MiB\\n';;\nesac\n"
        );
        std::fs::write(&smi, script).unwrap();
        std::fs::set_permissions(&smi, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let look = NvidiaSmi::at(&smi).look();
        assert_eq!(look.error, None);
        assert_eq!(look.gpus.len(), 4);
        assert_eq!(look.gpus[1].processes, [GpuProcess { pid: 4242, memory: Some(38_912 * MIB) }]);
        let none = NvidiaSmi::at(dir.path().join("missing")).look();
        assert!(none.gpus.is_empty());
        assert!(none.error.unwrap().starts_with("no GPU found: cannot run"));
    }

    #[test]
    fn the_default_sight_tries_nvml_then_nvidia_smi_and_says_why_neither_served() {
        let dir = tempfile::tempdir().unwrap();
        let look = DriverSight::with_smi(dir.path().join("missing")).look();
        match look.error {
            // No driver here (CI): both ways named.
            Some(e) => {
                assert!(e.starts_with("no GPU found: cannot run"), "{e}");
                assert!(e.contains("NVML"), "{e}");
            }
            // A machine with the driver: NVML read its GPUs.
            None => assert!(!look.gpus.is_empty()),
        }
    }

    #[test]
    fn a_jobs_env_names_its_gpus_and_hides_them_only_when_asked() {
        let holds = [
            GpuHold { index: 3, uuid: "GPU-c".into() },
            GpuHold { index: 1, uuid: "GPU-a".into() },
        ];
        let env = gpu_env(&holds, false);
        assert_eq!(env[0], ("CUDA_VISIBLE_DEVICES".to_owned(), "1,3".to_owned()));
        assert_eq!(env[1].1, "PCI_BUS_ID");
        assert!(gpu_env(&[], false).is_empty());
        assert_eq!(gpu_env(&[], true), [("CUDA_VISIBLE_DEVICES".to_owned(), String::new())]);
    }
}
