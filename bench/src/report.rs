//! Presenting the figures: the markdown table (every figure, each setting
//! side by side, ratios beside their figures), the targets, the machine,
//! `results.json`, and the table section of `BENCHMARKS.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result};

use crate::raw::PUSH_TABLES;
use crate::setting::Backend;
use crate::stats::Figures;

/// Every setting's figures, by label (`sqlite/default` …), in run order.
pub type Results = Vec<(String, Figures)>;

/// One row of the table: the figure, its unit, and how a cell reads.
struct Row {
    figure: &'static str,
    unit: &'static str,
    cell: fn(&Figures) -> Option<String>,
}

fn get(f: &Figures, k: &str) -> Option<f64> {
    f.get(k).copied().filter(|v| v.is_finite())
}

/// Thousands separated, no decimals: `47,012`.
fn count(v: f64) -> String {
    let s = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

const ROWS: &[Row] = &[
    Row {
        figure: "raw_commit",
        unit: "commits/s: 1 row; one row in each of 5 tables (the pages a push dirties)",
        cell: |f| {
            let mut cell = count(get(f, "raw_commit")?);
            if let Some(x) = get(f, "raw_commit_push_pages") {
                cell.push_str(&format!("; {PUSH_TABLES} pages: {}", count(x)));
            }
            if let Some(x) = get(f, "raw_commit_exclusive") {
                cell.push_str(&format!("; ExclusiveWriter: {}", count(x)));
            }
            if let Some(x) = get(f, "raw_commit_autocommit") {
                cell.push_str(&format!("; one-statement autocommit: {}", count(x)));
            }
            Some(cell)
        },
    },
    Row {
        figure: "handoff",
        unit: "µs per round trip to tokio's blocking pool (each store call)",
        cell: |f| Some(format!("{:.0}", get(f, "handoff_us")?)),
    },
    Row {
        figure: "push",
        unit: "ops/s (÷ raw)",
        cell: |f| Some(format!("{} (×{:.2})", count(get(f, "push")?), get(f, "push_ratio")?)),
    },
    Row {
        figure: "cycle",
        unit: "jobs/s (÷ raw/3)",
        cell: |f| Some(format!("{} (×{:.2})", count(get(f, "cycle")?), get(f, "cycle_ratio")?)),
    },
    Row {
        figure: "push_many",
        unit: "jobs/s",
        cell: |f| {
            Some(format!(
                "{} ({} in one call)",
                count(get(f, "push_many")?),
                count(get(f, "push_many_jobs")?)
            ))
        },
    },
    Row {
        figure: "claim_scaling",
        unit: "median ms of claim+complete, small / mid / large backlog (large ÷ small); the claim alone, small / large; the first claim+complete right after push_many filled the mid backlog",
        cell: |f| {
            let mut cell = format!(
                "{:.3} / {:.3} / {:.3} (×{:.2})",
                get(f, "claim_scaling_small_ms")?,
                get(f, "claim_scaling_mid_ms")?,
                get(f, "claim_scaling")?,
                get(f, "claim_scaling_ratio")?
            );
            if let (Some(small), Some(large)) =
                (get(f, "claim_only_small_ms"), get(f, "claim_only_large_ms"))
            {
                cell.push_str(&format!("; claim {small:.3} / {large:.3}"));
            }
            if let Some(fresh) = get(f, "claim_fresh_ms") {
                cell.push_str(&format!("; first after push_many {fresh:.3}"));
            }
            Some(cell)
        },
    },
    Row {
        figure: "claim_concurrency",
        unit: "claim+complete jobs/s in total, 1 / 4 / 16 claimers at once, each its own store handle (16 ÷ 1)",
        cell: |f| {
            Some(format!(
                "{} / {} / {} (×{:.2}; {} pending)",
                count(get(f, "claim_concurrency_1")?),
                count(get(f, "claim_concurrency_4")?),
                count(get(f, "claim_concurrency_16")?),
                get(f, "claim_concurrency_ratio")?,
                count(get(f, "claim_concurrency_backlog")?)
            ))
        },
    },
    Row {
        figure: "chain",
        unit: "median ms per claim, first 100 / last 100 of a chain (last ÷ first)",
        cell: |f| {
            Some(format!(
                "{:.3} / {:.3} (×{:.2}; {} jobs)",
                get(f, "chain_claim_first_ms")?,
                get(f, "chain_claim_last_ms")?,
                get(f, "chain_claim_ratio")?,
                count(get(f, "chain_jobs")?)
            ))
        },
    },
    Row {
        figure: "fan_out",
        unit: "ms to settle a parent of N children / of 1 (µs per child)",
        cell: |f| {
            Some(format!(
                "{:.1} / {:.2} ({:.1} µs; N = {})",
                get(f, "fan_out_settle_ms")?,
                get(f, "fan_out_settle_1_ms")?,
                get(f, "fan_out_settle_per_child_us")?,
                count(get(f, "fan_out_children")?)
            ))
        },
    },
    Row {
        figure: "drain",
        unit: "ms/job over `sh -c true` (runner ÷ loop)",
        cell: |f| {
            Some(format!(
                "+{:.2} ({:.2} vs {:.2}; ×{:.2})",
                get(f, "drain")?,
                get(f, "drain_ms_per_job")?,
                get(f, "plain_ms_per_job")?,
                get(f, "drain_ratio")?
            ))
        },
    },
    Row {
        figure: "slots",
        unit: "jobs/s draining `true` with 1 / 2 slots (2 ÷ 1); most running at once, 1 / 2 slots",
        cell: |f| {
            Some(format!(
                "{} / {} (×{:.2}; at once {} / {}; {} jobs each)",
                count(get(f, "slots_1_jobs_s")?),
                count(get(f, "slots_2_jobs_s")?),
                get(f, "slots_ratio")?,
                count(get(f, "slots_1_peak")?),
                count(get(f, "slots_2_peak")?),
                count(get(f, "slots_jobs")?)
            ))
        },
    },
    Row {
        figure: "idle",
        unit: "ms CPU per 10 s; switches; wake bursts / polls",
        cell: |f| {
            Some(format!(
                "{:.2} ms; {} sw; {} / {:.0}",
                get(f, "idle")?,
                count(get(f, "idle_wakeups")?),
                count(get(f, "idle_bursts")?),
                get(f, "idle_polls")?
            ))
        },
    },
    Row {
        figure: "wake_latency",
        unit: "ms from `add` (another process) to its job's start under an idle `run --follow`: median / max",
        cell: |f| {
            Some(format!(
                "{:.0} / {:.0}",
                get(f, "wake_latency_ms")?,
                get(f, "wake_latency_max_ms")?
            ))
        },
    },
    Row {
        figure: "wait_idle",
        unit: "`wait` on a job nobody runs: ms CPU per 10 s; switches; wake bursts / polls",
        cell: |f| {
            Some(format!(
                "{:.2} ms; {} sw; {} / {:.0}",
                get(f, "wait_idle")?,
                count(get(f, "wait_idle_wakeups")?),
                count(get(f, "wait_idle_bursts")?),
                get(f, "wait_idle_polls")?
            ))
        },
    },
    Row {
        figure: "status_100k",
        unit: "ms (median wall); on a queue of a few jobs",
        cell: |f| {
            Some(format!(
                "{:.1} ({} jobs); {:.1}",
                get(f, "status_100k")?,
                count(get(f, "status_jobs")?),
                get(f, "status_small_ms")?
            ))
        },
    },
    Row {
        figure: "add_ratio",
        unit: "`add` ÷ `true` (median ms); `--version` ÷ `true`",
        cell: |f| {
            Some(format!(
                "×{:.2} ({:.2} vs {:.2}); ×{:.2}",
                get(f, "add_ratio")?,
                get(f, "add_ms")?,
                get(f, "true_ms")?,
                get(f, "version_ratio")?
            ))
        },
    },
    Row {
        figure: "add_scaling",
        unit: "median ms of `add` on a queue of few / many pending jobs (many ÷ few)",
        cell: |f| {
            Some(format!(
                "{:.2} / {:.2} (×{:.2}; {} / {} jobs)",
                get(f, "add_small_ms")?,
                get(f, "add_large_ms")?,
                get(f, "add_scaling")?,
                count(get(f, "add_scaling_small_jobs")?),
                count(get(f, "add_scaling_large_jobs")?)
            ))
        },
    },
    Row {
        figure: "add_floor_ratio",
        unit: "`add` ÷ a process of the bare engine committing one row (median ms)",
        cell: |f| {
            Some(format!(
                "×{:.2} ({:.2} vs {:.2})",
                get(f, "add_floor_ratio")?,
                get(f, "floor_add_ms")?,
                get(f, "floor_ms")?
            ))
        },
    },
    Row {
        figure: "import",
        unit: "jobs/s, `import` of an export into a new queue (the whole process)",
        cell: |f| {
            Some(format!(
                "{} ({} jobs)",
                count(get(f, "import_jobs_s")?),
                count(get(f, "import_jobs")?)
            ))
        },
    },
    Row {
        figure: "rss",
        unit: "MiB peak, `run` draining (anon + file-backed)",
        cell: |f| {
            Some(format!(
                "{:.1} ({:.1} + {:.1})",
                get(f, "rss")?,
                get(f, "rss_anon")?,
                get(f, "rss_file")?
            ))
        },
    },
    Row {
        figure: "bytes_per_job",
        unit: "bytes per done job",
        cell: |f| Some(count(get(f, "bytes_per_job")?)),
    },
];

/// A target on the default setting.
struct Target {
    text: &'static str,
    check: fn(&Figures) -> Option<(bool, String)>,
    /// The backend the target is for (its other columns read `—`); `None`
    /// for both.
    only: Option<Backend>,
}

fn at_least(f: &Figures, k: &str, bound: f64) -> Option<(bool, String)> {
    let v = get(f, k)?;
    Some((v >= bound, format!("{v:.3}")))
}

fn at_most(f: &Figures, k: &str, bound: f64) -> Option<(bool, String)> {
    let v = get(f, k)?;
    Some((v <= bound, format!("{v:.3}")))
}

/// [`at_least`] for a rate, shown as a count.
fn at_least_count(f: &Figures, k: &str, bound: f64) -> Option<(bool, String)> {
    let v = get(f, k)?;
    Some((v >= bound, count(v)))
}

const TARGETS: &[Target] = &[
    Target { text: "push_ratio ≥ 0.8", check: |f| at_least(f, "push_ratio", 0.8), only: None },
    Target { text: "cycle_ratio ≥ 0.7", check: |f| at_least(f, "cycle_ratio", 0.7), only: None },
    Target {
        text: "claim_scaling_ratio ≤ 2",
        check: |f| at_most(f, "claim_scaling_ratio", 2.0),
        only: None,
    },
    Target {
        text: "push_many ≥ 100,000 jobs/s",
        check: |f| at_least_count(f, "push_many", 100_000.0),
        only: None,
    },
    Target {
        text: "chain_claim_ratio ≤ 2",
        check: |f| at_most(f, "chain_claim_ratio", 2.0),
        only: None,
    },
    Target { text: "drain_ratio ≤ 1.5", check: |f| at_most(f, "drain_ratio", 1.5), only: None },
    Target {
        text: "idle ≤ 5 ms CPU per 10 s, wake bursts ≤ polls due (0 in a window shorter than the poll)",
        check: |f| {
            let (cpu, bursts, polls) =
                (get(f, "idle")?, get(f, "idle_bursts")?, get(f, "idle_polls")?);
            // The window starts 3 s after the runner, so it holds
            // `polls` rounded down of them: none when shorter than the poll.
            let ok = cpu <= 5.0 && bursts <= polls.floor();
            Some((ok, format!("{cpu:.2} ms, {bursts:.0} bursts / {polls:.1} polls")))
        },
        only: None,
    },
    Target {
        text: "wake_latency ≤ 20 ms (median)",
        check: |f| at_most(f, "wake_latency_ms", 20.0),
        only: None,
    },
    Target {
        text: "status_100k ≤ 20 ms", check: |f| at_most(f, "status_100k", 20.0), only: None
    },
    Target { text: "add_ratio ≤ 2.5", check: |f| at_most(f, "add_ratio", 2.5), only: None },
    Target { text: "add_scaling ≤ 1.5", check: |f| at_most(f, "add_scaling", 1.5), only: None },
    Target {
        text: "add_floor_ratio ≤ 1.3 (sqlite)",
        check: |f| at_most(f, "add_floor_ratio", 1.3),
        only: Some(Backend::Sqlite),
    },
    Target {
        text: "add_floor_ratio ≤ 2 (redb)",
        check: |f| at_most(f, "add_floor_ratio", 2.0),
        only: Some(Backend::Redb),
    },
    Target {
        text: "import ≥ 50,000 jobs/s (sqlite)",
        check: |f| at_least_count(f, "import_jobs_s", 50_000.0),
        only: Some(Backend::Sqlite),
    },
    Target {
        text: "import ≥ 30,000 jobs/s (redb)",
        check: |f| at_least_count(f, "import_jobs_s", 30_000.0),
        only: Some(Backend::Redb),
    },
    Target { text: "rss ≤ 8 MiB", check: |f| at_most(f, "rss", 8.0), only: None },
];

/// The table of every figure, settings as columns.
pub fn table(results: &Results) -> String {
    let mut out = String::new();
    let _ = write!(out, "| figure | unit |");
    for (label, _) in results {
        let _ = write!(out, " {label} |");
    }
    let _ = write!(out, "\n|---|---|");
    for _ in results {
        out.push_str("---|");
    }
    out.push('\n');
    for row in ROWS {
        let _ = write!(out, "| {} | {} |", row.figure, row.unit);
        for (_, f) in results {
            let _ = write!(out, " {} |", (row.cell)(f).unwrap_or_else(|| "—".to_owned()));
        }
        out.push('\n');
    }
    out
}

/// The targets, checked on each default setting.
pub fn targets(results: &Results) -> String {
    let defaults: Vec<&(String, Figures)> =
        results.iter().filter(|(l, _)| l.ends_with("/default")).collect();
    let mut out = String::from("| target (default durability) |");
    for (label, _) in &defaults {
        let _ = write!(out, " {label} |");
    }
    out.push_str("\n|---|");
    for _ in &defaults {
        out.push_str("---|");
    }
    out.push('\n');
    for t in TARGETS {
        let _ = write!(out, "| {} |", t.text);
        for (label, f) in &defaults {
            let backend = label.split_once('/').and_then(|(b, _)| b.parse::<Backend>().ok());
            let applies = t.only.is_none_or(|only| backend == Some(only));
            let cell = match applies.then(|| (t.check)(f)).flatten() {
                Some((true, v)) => format!("met ({v})"),
                Some((false, v)) => format!("**not met** ({v})"),
                None => "—".to_owned(),
            };
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
    out
}

/// The machine, the date and the load, as a markdown list.
pub struct Machine {
    pub date: String,
    pub nproc: usize,
    pub cpu: String,
    pub kernel: String,
    pub disk: String,
    pub load_before: String,
    pub load_after: String,
}

impl Machine {
    pub fn probe(scratch: &Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
            .map(|(_, m)| m.trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        let df = Command::new("df")
            .arg("-hT")
            .arg(scratch)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).lines().nth(1).unwrap_or("").to_owned())
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| "unknown".to_owned());
        let date = Command::new("date")
            .args(["-u", "+%Y-%m-%d %H:%M UTC"])
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        Machine {
            date,
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
            disk: df,
            load_before: loadavg(),
            load_after: String::new(),
        }
    }

    pub fn markdown(&self, profile: &str, sizes: &str) -> String {
        format!(
            "- date: {}\n- machine: {} CPUs (nproc), {}, Linux {}\n- disk (`df -hT` of the scratch folder): {}\n\
             - load average (1/5/15 min) at start: {}; at end: {}\n- build: {profile}; sizes: {sizes}\n",
            self.date,
            self.nproc,
            self.cpu,
            self.kernel,
            self.disk,
            self.load_before,
            self.load_after
        )
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `{ "sqlite/default": { "push": 5000.0, ... }, ... }`, rounded to 4
/// decimals (NaN, a figure that could not be computed, as null).
pub fn json(results: &Results) -> serde_json::Value {
    let mut top = serde_json::Map::new();
    for (label, f) in results {
        let figures: BTreeMap<&str, serde_json::Value> =
            f.iter().map(|(k, v)| (*k, serde_json::Value::from((v * 1e4).round() / 1e4))).collect();
        top.insert(label.clone(), serde_json::json!(figures));
    }
    serde_json::Value::Object(top)
}

/// The markers around the generated part of `BENCHMARKS.md`.
const BEGIN: &str = "<!-- bench:begin (written by `cargo xtask bench`; edit outside) -->";
const END: &str = "<!-- bench:end -->";

/// Replaces the generated section of `path` with `section`; false when the
/// file has no markers (then it is left alone).
pub fn update_benchmarks_md(path: &Path, section: &str) -> Result<bool> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else { return Ok(false) };
    if e < b {
        return Ok(false);
    }
    let new = format!("{}{BEGIN}\n{section}{END}{}", &text[..b], &text[e + END.len()..]);
    std::fs::write(path, new).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped() {
        assert_eq!(count(0.0), "0");
        assert_eq!(count(999.4), "999");
        assert_eq!(count(1234.0), "1,234");
        assert_eq!(count(1_234_567.0), "1,234,567");
    }

    #[test]
    fn a_missing_figure_is_a_dash_and_targets_read_defaults_only() {
        let mut f = Figures::new();
        f.insert("push", 100.0);
        f.insert("push_ratio", 0.9);
        let results = vec![("sqlite/default".to_owned(), f.clone()), ("sqlite/fast".to_owned(), f)];
        let t = table(&results);
        assert!(t.contains("| push | ops/s (÷ raw) | 100 (×0.90) | 100 (×0.90) |"), "{t}");
        assert!(
            t.contains("| rss | MiB peak, `run` draining (anon + file-backed) | — | — |"),
            "{t}"
        );
        let tg = targets(&results);
        assert!(tg.contains("| push_ratio ≥ 0.8 | met (0.900) |"), "{tg}");
        assert!(!tg.contains("sqlite/fast"), "{tg}");
    }

    #[test]
    fn a_target_for_one_backend_leaves_the_other_a_dash() {
        let mut f = Figures::new();
        f.insert("import_jobs_s", 40_000.0);
        let results =
            vec![("sqlite/default".to_owned(), f.clone()), ("redb/default".to_owned(), f)];
        let tg = targets(&results);
        assert!(
            tg.contains("| import ≥ 50,000 jobs/s (sqlite) | **not met** (40,000) | — |"),
            "{tg}"
        );
        assert!(tg.contains("| import ≥ 30,000 jobs/s (redb) | — | met (40,000) |"), "{tg}");
    }

    #[test]
    fn the_generated_section_is_replaced_between_markers() {
        let dir = std::env::temp_dir().join(format!("bench-md-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("B.md");
        std::fs::write(&path, format!("# B\n{BEGIN}\nold\n{END}\nnotes\n")).unwrap();
        assert!(update_benchmarks_md(&path, "new\n").unwrap());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("# B\n{BEGIN}\nnew\n{END}\nnotes\n")
        );
        std::fs::write(&path, "no markers\n").unwrap();
        assert!(!update_benchmarks_md(&path, "new\n").unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
