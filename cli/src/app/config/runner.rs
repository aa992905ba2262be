//! `run`'s and `serve`'s runner options, checked: the files and folders
//! they name must be there now, so a typo is refused at the start.

use std::time::Duration;

use super::{RunConfig, RunMode, RunnerOptions, SlotConfig, plain_name};
use crate::app::args;
use crate::app::exit::usage;

/// `--slots` and the gates beyond the load, checked: the files they name
/// must be there now, so a typo is refused at start, not waited on forever.
fn slot_config(a: args::SlotArgs) -> anyhow::Result<SlotConfig> {
    if let Some(file) = &a.pressure_file {
        let text = std::fs::read_to_string(file).map_err(|e| {
            usage(format!(
                "--pressure-file {}: cannot read it ({e}); expected the PSI format of /proc/pressure/cpu",
                file.display()
            ))
        })?;
        if slothqueue::runner::gate::parse_psi_some_avg10(&text).is_none() {
            return Err(usage(format!(
                "--pressure-file {} is not in PSI format (expected a line like `some avg10=1.00 avg60=0.50 avg300=0.20 total=100`)",
                file.display()
            )));
        }
    }
    if let Some(dir) = &a.power_supply_dir {
        if !dir.is_dir() {
            return Err(usage(format!(
                "--power-supply-dir {} is not a directory (expected the layout of /sys/class/power_supply)",
                dir.display()
            )));
        }
    }
    Ok(SlotConfig {
        slots: a.slots.unwrap_or(1),
        max_cpu_pressure: a.max_cpu_pressure,
        pressure_file: a.pressure_file,
        require_ac_power: a.require_ac_power,
        power_supply_dir: a.power_supply_dir,
        suspend_when_gated: a.suspend_when_gated,
    })
}

pub(super) fn run_config(r: args::RunArgs) -> anyhow::Result<RunConfig> {
    let runner = runner_options(r.runner)?;
    if r.once && runner.slots.slots > 1 {
        return Err(usage("--once runs one job: --slots cannot be more than 1 with it"));
    }
    let mode = if r.once {
        RunMode::Once
    } else if r.follow {
        RunMode::Follow
    } else {
        RunMode::Drain
    };
    Ok(RunConfig { mode, runner })
}

/// The runner's options, as `run` and `serve` take them, checked: the
/// files and folders they name must be there now.
pub(super) fn runner_options(r: args::RunnerArgs) -> anyhow::Result<RunnerOptions> {
    for q in &r.queue {
        plain_name("--queue", q)?;
    }
    if let Some(dir) = &r.handlers {
        if !dir.is_dir() {
            return Err(usage(format!("--handlers {} is not a directory", dir.display())));
        }
    }
    if let Some(file) = &r.load_file {
        if !file.is_file() {
            return Err(usage(format!(
                "--load-file {} is not a file (expected the loadavg format of /proc/loadavg)",
                file.display()
            )));
        }
    }
    if let Some(file) = &r.gpu_file {
        slothqueue::runner::gpu::GpuFile::new(file)
            .check()
            .map_err(|e| usage(format!("--gpu-file: {e}")))?;
    }
    if r.check_interval == Some(Duration::ZERO) {
        return Err(usage("--check-interval must be more than 0s (a zero interval would spin)"));
    }
    if matches!(&r.on_finish, Some(c) if c.trim().is_empty()) {
        return Err(usage("--on-finish is empty: give a shell command"));
    }
    if let Some(lease) = r.lease {
        if lease < MIN_LEASE || lease > MAX_LEASE {
            return Err(usage(
                "--lease must be from 3s to 24h (heartbeats come every third of it)",
            ));
        }
    }
    Ok(RunnerOptions {
        load_ceiling: r.load_ceiling,
        load_file: r.load_file,
        cooldown: r.cooldown,
        check_interval: r.check_interval,
        queues: r.queue,
        handlers: r.handlers,
        on_finish: r.on_finish,
        lease: r.lease,
        slots: slot_config(r.slots)?,
        limits: r.limits.limits(),
        gpus: super::GpuOptions {
            file: r.gpu_file,
            busy_above: r.gpu_busy_above,
            backfill_for: r.gpu_backfill_for,
            hide: r.hide_gpus,
        },
    })
}

/// The shortest `--lease`: heartbeats every second.
const MIN_LEASE: Duration = Duration::from_secs(3);
/// The longest `--lease`: a day.
const MAX_LEASE: Duration = Duration::from_secs(86_400);
