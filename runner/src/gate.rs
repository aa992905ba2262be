//! Gates: is the machine quiet enough to start a job?
//!
//! A gate is read before each job and, while it holds, once per check
//! interval, and every reading is reported: a wait that prints its reason is
//! a policy, a silent one looks like a hang. Probes are injectable so tests
//! can say "the load is high" and later "now it is not".

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::error::RunnerError;

/// One reading of a gate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateReading {
    /// Whether a job may start.
    pub open: bool,
    /// What was measured, e.g. `load 26.59 >= ceiling 25.00`.
    pub text: String,
}

/// A condition that must hold before a job starts.
#[async_trait]
pub trait Gate: Send + Sync {
    /// Reads the condition now. A reading that fails is a closed gate whose
    /// text says why: the runner waits and reads again rather than running
    /// blind or giving up.
    async fn check(&self) -> GateReading;
}

/// Where a load average comes from.
pub trait LoadProbe: Send + Sync {
    /// The one-minute load average, or why it cannot be read.
    fn load(&self) -> Result<f64, String>;
}

impl<F: Fn() -> Result<f64, String> + Send + Sync> LoadProbe for F {
    fn load(&self) -> Result<f64, String> {
        self()
    }
}

/// A loadavg-format file: `/proc/loadavg`, or a file given with
/// `--load-file` (its first field is the one-minute average).
#[derive(Clone, Debug)]
pub struct LoadFile {
    path: PathBuf,
}

impl LoadFile {
    /// Reads `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        LoadFile { path: path.into() }
    }
}

impl LoadProbe for LoadFile {
    fn load(&self) -> Result<f64, String> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        parse_loadavg(&text)
            .ok_or_else(|| format!("{} is not in loadavg format", self.path.display()))
    }
}

/// The first field of a loadavg-format text, if it is a finite,
/// non-negative number.
pub fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse::<f64>().ok().filter(|l| l.is_finite() && *l >= 0.0)
}

/// The number of CPUs online, the default load ceiling: a load average
/// above it means runnable work is waiting for a CPU.
pub fn cpu_count() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| count_cpu_list(t.trim()))
        .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
        .unwrap_or(1)
}

/// Counts a CPU list like `0-3,8,10-11`.
fn count_cpu_list(list: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                n += b.checked_sub(a)? + 1;
            }
            None => {
                part.parse::<usize>().ok()?;
                n += 1;
            }
        }
    }
    (n > 0).then_some(n)
}

/// Open while the one-minute load average is below a ceiling.
pub struct LoadGate {
    probe: Box<dyn LoadProbe>,
    ceiling: f64,
}

impl LoadGate {
    /// A gate over any probe.
    pub fn new(probe: impl LoadProbe + 'static, ceiling: f64) -> Self {
        LoadGate { probe: Box::new(probe), ceiling }
    }

    /// The system's load average (`/proc/loadavg`); the ceiling defaults to
    /// the number of CPUs.
    pub fn system(ceiling: Option<f64>) -> Self {
        LoadGate::new(LoadFile::new("/proc/loadavg"), ceiling.unwrap_or(cpu_count() as f64))
    }

    /// A loadavg-format file (`--load-file`). Checked now, so a wrong path
    /// is an error at start rather than a wait forever.
    pub fn from_file(path: impl AsRef<Path>, ceiling: Option<f64>) -> Result<Self, RunnerError> {
        let probe = LoadFile::new(path.as_ref());
        probe.load().map_err(RunnerError::GateUnavailable)?;
        Ok(LoadGate::new(probe, ceiling.unwrap_or(cpu_count() as f64)))
    }

    /// The ceiling.
    pub fn ceiling(&self) -> f64 {
        self.ceiling
    }
}

#[async_trait]
impl Gate for LoadGate {
    async fn check(&self) -> GateReading {
        match self.probe.load() {
            Ok(load) if load < self.ceiling => GateReading {
                open: true,
                text: format!("load {load:.2} < ceiling {:.2}", self.ceiling),
            },
            Ok(load) => GateReading {
                open: false,
                text: format!("load {load:.2} >= ceiling {:.2}", self.ceiling),
            },
            Err(e) => GateReading { open: false, text: format!("load unknown ({e})") },
        }
    }
}

/// Open while CPU pressure (Linux PSI, `some avg10` of
/// `/proc/pressure/cpu`: the share of the last ten seconds in which some
/// task waited for a CPU) is below a ceiling, in percent.
///
/// Pressure reacts in seconds where the load average takes minutes, and it
/// counts waiting, not just running, work.
#[derive(Clone, Debug)]
pub struct PressureGate {
    path: PathBuf,
    ceiling: f64,
}

impl PressureGate {
    /// The kernel's CPU pressure. Fails clearly on a kernel without PSI.
    pub fn system(ceiling_percent: f64) -> Result<Self, RunnerError> {
        let path = PathBuf::from("/proc/pressure/cpu");
        if std::fs::read_to_string(&path).is_err() {
            return Err(RunnerError::GateUnavailable(
                "the cpu pressure gate needs Linux PSI, but /proc/pressure/cpu cannot be read \
                 (a kernel before 4.20, built without CONFIG_PSI, or booted with psi=0)"
                    .to_owned(),
            ));
        }
        Ok(PressureGate { path, ceiling: ceiling_percent })
    }

    /// A PSI-format file instead of the kernel's (tests).
    pub fn from_file(path: impl Into<PathBuf>, ceiling_percent: f64) -> Self {
        PressureGate { path: path.into(), ceiling: ceiling_percent }
    }

    fn read(&self) -> Result<f64, String> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        parse_psi_some_avg10(&text)
            .ok_or_else(|| format!("{} is not in PSI format", self.path.display()))
    }
}

/// `avg10` of the `some` line of a PSI file.
pub fn parse_psi_some_avg10(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
}

#[async_trait]
impl Gate for PressureGate {
    async fn check(&self) -> GateReading {
        match self.read() {
            Ok(p) if p < self.ceiling => GateReading {
                open: true,
                text: format!("cpu pressure {p:.1}% < ceiling {:.1}%", self.ceiling),
            },
            Ok(p) => GateReading {
                open: false,
                text: format!("cpu pressure {p:.1}% >= ceiling {:.1}%", self.ceiling),
            },
            Err(e) => GateReading { open: false, text: format!("cpu pressure unknown ({e})") },
        }
    }
}

/// Open while the machine runs on mains power, so a laptop on battery does
/// not spend it on background work.
///
/// Reads `/sys/class/power_supply`: any `Mains` or `USB` supply online means
/// AC. With no such supply but a battery, the battery's status decides
/// (`Discharging` is on battery). With no supply at all the machine is a
/// desktop or a server: open.
#[derive(Clone, Debug)]
pub struct AcPowerGate {
    root: PathBuf,
}

impl AcPowerGate {
    /// The system's power supplies.
    pub fn system() -> Self {
        AcPowerGate::with_root("/sys/class/power_supply")
    }

    /// A directory laid out like `/sys/class/power_supply` (tests).
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        AcPowerGate { root: root.into() }
    }

    fn on_ac(&self) -> bool {
        let read = |dir: &Path, file: &str| {
            std::fs::read_to_string(dir.join(file)).map(|s| s.trim().to_owned()).unwrap_or_default()
        };
        let Ok(entries) = std::fs::read_dir(&self.root) else { return true };
        let mut saw_mains = false;
        let mut discharging = false;
        for entry in entries.flatten() {
            let dir = entry.path();
            match read(&dir, "type").as_str() {
                "Mains" | "USB" => {
                    saw_mains = true;
                    if read(&dir, "online") == "1" {
                        return true;
                    }
                }
                "Battery" => discharging |= read(&dir, "status") == "Discharging",
                _ => {}
            }
        }
        !saw_mains && !discharging
    }
}

#[async_trait]
impl Gate for AcPowerGate {
    async fn check(&self) -> GateReading {
        if self.on_ac() {
            GateReading { open: true, text: "on AC power".to_owned() }
        } else {
            GateReading { open: false, text: "on battery".to_owned() }
        }
    }
}

/// One pass over a runner's gates.
pub(crate) enum GateCheck {
    /// Every gate is open; their readings, by index.
    Open(Vec<(usize, GateReading)>),
    /// The gate at this index holds (those after it were not read).
    Closed(usize, GateReading),
}

/// Reads `gates` in order up to the first closed one: a reading may cost a
/// file read or more, and one closed gate is enough to wait.
pub(crate) async fn read_gates(gates: &[Box<dyn Gate>]) -> GateCheck {
    let mut readings = Vec::with_capacity(gates.len());
    for (i, gate) in gates.iter().enumerate() {
        let reading = gate.check().await;
        if !reading.open {
            return GateCheck::Closed(i, reading);
        }
        readings.push((i, reading));
    }
    GateCheck::Open(readings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn load_gate_reads_like_the_transcript() {
        let high = LoadGate::new(|| Ok(26.59), 25.0);
        assert_eq!(
            high.check().await,
            GateReading { open: false, text: "load 26.59 >= ceiling 25.00".into() }
        );
        let low = LoadGate::new(|| Ok(24.42), 25.0);
        assert_eq!(
            low.check().await,
            GateReading { open: true, text: "load 24.42 < ceiling 25.00".into() }
        );
        let equal = LoadGate::new(|| Ok(25.0), 25.0);
        assert!(!equal.check().await.open, "at the ceiling is not below it");
        let broken = LoadGate::new(|| Err("cannot read x".to_owned()), 25.0);
        assert_eq!(broken.check().await.text, "load unknown (cannot read x)");
    }

    #[tokio::test]
    async fn load_file_is_checked_at_start_and_read_each_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loadavg");
        assert!(LoadGate::from_file(&path, Some(1.0)).is_err());
        std::fs::write(&path, "3.50 1.00 0.50 2/100 1234\n").unwrap();
        let gate = LoadGate::from_file(&path, Some(1.0)).unwrap();
        assert!(!gate.check().await.open);
        std::fs::write(&path, "0.20 1.00 0.50 2/100 1234\n").unwrap();
        assert_eq!(gate.check().await.text, "load 0.20 < ceiling 1.00");
        assert!(LoadGate::system(None).ceiling() >= 1.0);
        assert!(parse_loadavg("nan 1 1").is_none());
        assert!(parse_loadavg("").is_none());
    }

    #[test]
    fn cpu_lists_count() {
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("x"), None);
        assert!(cpu_count() >= 1);
    }

    #[tokio::test]
    async fn pressure_gate_reads_some_avg10() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu");
        std::fs::write(
            &path,
            "some avg10=42.00 avg60=10.00 avg300=1.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        )
        .unwrap();
        let gate = PressureGate::from_file(&path, 30.0);
        assert_eq!(
            gate.check().await,
            GateReading { open: false, text: "cpu pressure 42.0% >= ceiling 30.0%".into() }
        );
        std::fs::write(&path, "some avg10=1.50 avg60=0 avg300=0 total=0\n").unwrap();
        assert_eq!(gate.check().await.text, "cpu pressure 1.5% < ceiling 30.0%");
        std::fs::remove_file(&path).unwrap();
        assert!(!gate.check().await.open);
    }

    #[tokio::test]
    async fn ac_power_gate() {
        let dir = tempfile::tempdir().unwrap();
        let gate = AcPowerGate::with_root(dir.path());
        assert_eq!(gate.check().await.text, "on AC power", "no supply: a desktop");
        let supply = |name: &str, files: &[(&str, &str)]| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in files {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
        };
        supply("BAT0", &[("type", "Battery"), ("status", "Discharging")]);
        assert_eq!(gate.check().await, GateReading { open: false, text: "on battery".into() });
        supply("AC", &[("type", "Mains"), ("online", "0")]);
        assert!(!gate.check().await.open);
        supply("AC", &[("type", "Mains"), ("online", "1")]);
        assert!(gate.check().await.open);
        assert!(AcPowerGate::with_root(dir.path().join("missing")).check().await.open);
    }
}
