//! `run`: a runner with the real clock, `/proc` liveness, this process as
//! owner, logs beside the queue file, printing each event as one line.
//!
//! Lines about a job or a gate are indented two spaces under the run's own
//! lines (`reclaimed …`, `finished: …`), as in the seed's transcript.

use std::io::{self, Write};
use std::sync::Arc;

use slothqueue::Store;
use slothqueue::runner::{
    AcPowerGate, Gate, HandlerDirExecutor, LaneHold, LoadGate, Mode, PressureGate, RunSummary,
    Runner, RunnerConfig, RunnerEvent, inherited_ignores, unix_signals_with,
};

use super::Ctx;
use crate::app::Outcome;
use crate::app::config::{RunConfig, RunMode, RunnerOptions, SlotConfig, log_dir};
use crate::app::exit::{Code, usage};
use crate::app::render::red;

/// Runs jobs until the mode says stop or a signal arrives.
pub async fn run(ctx: &Ctx, rc: RunConfig) -> Outcome {
    let mut base = RunnerConfig::new(log_dir(&ctx.files));
    base.mode = match rc.mode {
        RunMode::Drain => Mode::Drain,
        RunMode::Once => Mode::Once,
        RunMode::Follow => Mode::Follow,
    };
    // A job another process adds wakes `run --follow` at once.
    base.watch_file = Some(ctx.db.clone());
    // TERM, INT, HUP, QUIT and the other fatal signals stop the run cleanly
    // (those inherited as ignored, as under `nohup`, stay ignored); Ctrl-Z
    // stops the job's processes with the runner and CONT continues them.
    // Caught before the queue is opened: connecting to a server can take
    // a while, and a signal meanwhile must stop the run as cleanly
    // (torture S04 sent SIGHUP to a runner still connecting, which died).
    let signals = unix_signals_with(inherited_ignores())?;
    let (_store, mut runner) = runner_from(ctx, rc.runner, base)?;
    runner.job_control(signals.suspension);
    let shutdown = signals.shutdown;
    let (json, color) = (ctx.json, ctx.color);
    // A runner that cannot say what it does stops as a signal would stop
    // it (its jobs' processes ended, their attempts uncharged), and the
    // write's error is the run's.
    let failed_write = Arc::new(std::sync::Mutex::new(None::<io::Error>));
    let report = {
        let failed_write = Arc::clone(&failed_write);
        let stop = signals.trigger;
        move |event: RunnerEvent| {
            if let Err(e) = print_event(&event, json, color) {
                let mut first =
                    failed_write.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if first.is_none() {
                    *first = Some(e);
                    stop.trigger();
                }
            }
        }
    };
    let summary = runner.run(report, shutdown).await?;
    let failed = failed_write.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(e) = failed {
        return Err(anyhow::Error::new(e).context("cannot write to stdout"));
    }
    Ok(match summary.exit_code() {
        0 => Code::Success,
        130 => Code::Interrupted,
        _ => Code::Failure,
    })
}

/// The runner the options describe, over the queue file opened for it,
/// from `base` (the mode, the log folder and what `serve`'s worker sets):
/// the one place `run` and `serve` turn their shared options into a
/// [`Runner`]. Everything that can refuse (a gate's file, a kernel without
/// PSI, the handler folder) is built before the queue file is opened or
/// created.
pub(super) fn runner_from(
    ctx: &Ctx,
    opts: RunnerOptions,
    mut base: RunnerConfig,
) -> anyhow::Result<(Arc<dyn Store>, Runner)> {
    let gate = match &opts.load_file {
        Some(path) => LoadGate::from_file(path, opts.load_ceiling)
            .map_err(|e| usage(format!("--load-file: {e}")))?,
        None => LoadGate::system(opts.load_ceiling),
    };
    let mut gates: Vec<Box<dyn Gate>> = vec![Box::new(gate)];
    gates.extend(more_gates(&opts.slots)?);
    let handlers = match &opts.handlers {
        Some(dir) => {
            Some(HandlerDirExecutor::open(dir).map_err(|e| usage(format!("--handlers: {e}")))?)
        }
        None => None,
    };
    // A runner checks the whole file once at its start.
    let store = ctx.open_for_runner(opts.lease)?;
    base.queues = opts.queues;
    base.gates = gates;
    base.slots = opts.slots.slots;
    base.suspend_when_gated = opts.slots.suspend_when_gated;
    if let Some(c) = opts.cooldown {
        base.cooldown = c;
    }
    if let Some(c) = opts.check_interval {
        base.check_interval = c;
    }
    base.on_finish = opts.on_finish;
    base.limits = opts.limits;
    base.gpus = Some(gpu_offer(&opts.gpus));
    base.hide_gpus = opts.gpus.hide;
    let mut runner = Runner::new(store.clone(), base);
    if let Some(dir) = handlers {
        runner.register_handlers(dir);
    }
    Ok((store, runner))
}

/// How the runner sees its GPUs: the `--gpu-file`, read at every look, or
/// NVML, else `nvidia-smi` (asked only when a job that needs GPUs is a
/// candidate).
fn gpu_offer(g: &crate::app::config::GpuOptions) -> slothqueue::core::GpuOffer {
    use slothqueue::runner::gpu::{DriverSight, GpuFile};
    let sight: Arc<dyn slothqueue::core::GpuSight> = match &g.file {
        Some(path) => Arc::new(GpuFile::new(path)),
        None => Arc::new(DriverSight::new()),
    };
    let mut offer = slothqueue::core::GpuOffer::new(sight);
    if let Some(pct) = g.busy_above {
        offer.busy_above_pct = pct;
    }
    if let Some(d) = g.backfill_for {
        offer.backfill_for = d;
    }
    offer
}

/// The gates after the load gate, in the order they are read: CPU
/// pressure, then AC power. Built before the queue is opened, so a kernel
/// without PSI is refused (exit 2) before anything is written.
fn more_gates(sc: &SlotConfig) -> anyhow::Result<Vec<Box<dyn Gate>>> {
    let mut gates: Vec<Box<dyn Gate>> = Vec::new();
    if let Some(ceiling) = sc.max_cpu_pressure {
        let gate = match &sc.pressure_file {
            Some(path) => PressureGate::from_file(path, ceiling),
            None => PressureGate::system(ceiling)
                .map_err(|e| usage(format!("--max-cpu-pressure: {e}")))?,
        };
        gates.push(Box::new(gate));
    }
    if sc.require_ac_power {
        let gate = match &sc.power_supply_dir {
            Some(dir) => AcPowerGate::with_root(dir),
            None => AcPowerGate::system(),
        };
        gates.push(Box::new(gate));
    }
    Ok(gates)
}

/// Prints one event; stdout's write error is the caller's (`run` stops on
/// it, as it stops on the SIGHUP of a terminal gone away; `serve` goes on).
/// A warning's failing stderr is ignored: the exit code is left to say it.
pub(super) fn print_event(event: &RunnerEvent, json: bool, color: bool) -> io::Result<()> {
    if json {
        return writeln!(io::stdout().lock(), "{}", event_json(event));
    }
    let line = event.to_string();
    if event.is_warning() {
        // A warning's stderr failing too leaves the exit code to say it.
        let _ = writeln!(io::stderr().lock(), "{line}");
        return Ok(());
    }
    let indent = match event {
        RunnerEvent::Reclaimed { .. }
        | RunnerEvent::Skipped { .. }
        | RunnerEvent::Ticks { .. }
        | RunnerEvent::Finished(_) => "",
        _ => "  ",
    };
    let line = if color { line.replacen("FAILED", &red("FAILED", true), 1) } else { line };
    writeln!(io::stdout().lock(), "{indent}{line}")
}

/// An event as one JSON object: its kind, the job when there is one, and
/// the line a person would read.
fn event_json(event: &RunnerEvent) -> serde_json::Value {
    use serde_json::json;
    let line = event.to_string();
    match event {
        RunnerEvent::Ticks { ticks } => json!({"event": "ticks", "ticks": ticks, "line": line}),
        RunnerEvent::Reclaimed { jobs, .. } => {
            json!({"event": "reclaimed", "jobs": jobs, "line": line})
        }
        RunnerEvent::Gated { reading, wait } => json!({
            "event": "gated", "reading": reading, "wait_ms": wait.as_millis() as u64, "line": line
        }),
        RunnerEvent::GateOpened { reading } => {
            json!({"event": "gate_opened", "reading": reading, "line": line})
        }
        RunnerEvent::GpuWait { .. } => json!({"event": "gpu_wait", "line": line}),
        RunnerEvent::Done { job, elapsed } => json!({
            "event": "done", "job": job, "elapsed_ms": elapsed.as_millis() as u64, "line": line
        }),
        RunnerEvent::Failed { job, elapsed, reason, retry } => json!({
            "event": "failed", "job": job, "elapsed_ms": elapsed.as_millis() as u64,
            "reason": reason, "retry_in_ms": retry.as_ref().map(|r| r.delay.as_millis() as u64),
            "line": line
        }),
        RunnerEvent::Cancelled { job, .. } => {
            json!({"event": "cancelled", "job": job, "line": line})
        }
        RunnerEvent::LeaseLost { job, .. } => {
            json!({"event": "lease_lost", "job": job, "line": line})
        }
        RunnerEvent::Released { job, .. } => json!({"event": "released", "job": job, "line": line}),
        RunnerEvent::Fenced { job, silent, grace } => json!({
            "event": "fenced", "job": job, "silent_ms": silent.as_millis() as u64,
            "grace_ms": grace.as_millis() as u64, "line": line
        }),
        RunnerEvent::Warning { message } => {
            json!({"event": "warning", "message": message, "line": line})
        }
        RunnerEvent::Skipped { jobs } => {
            let jobs: Vec<serde_json::Value> = jobs
                .iter()
                .map(|s| json!({"job": s.job, "reason": s.reason.to_string()}))
                .collect();
            json!({"event": "skipped", "jobs": jobs, "line": line})
        }
        RunnerEvent::LanesWaiting { lanes } => {
            let lanes: Vec<serde_json::Value> = lanes
                .iter()
                .map(|b| match b.hold {
                    LaneHold::Paused => json!({"queue": b.queue, "hold": "paused", "due": b.due}),
                    LaneHold::Full { running, limit } => json!({
                        "queue": b.queue, "hold": "full", "running": running, "limit": limit,
                        "due": b.due
                    }),
                })
                .collect();
            json!({"event": "lanes_waiting", "lanes": lanes, "line": line})
        }
        RunnerEvent::Suspended { jobs, reading } => {
            json!({"event": "suspended", "jobs": jobs, "reading": reading, "line": line})
        }
        RunnerEvent::Resumed { jobs, after } => json!({
            "event": "resumed", "jobs": jobs, "after_ms": after.as_millis() as u64, "line": line
        }),
        RunnerEvent::LimitNotEnforced { job, limit, why } => json!({
            "event": "limit_not_enforced", "job": job, "limit": limit, "why": why, "line": line
        }),
        RunnerEvent::Finished(s) => summary_json(s, &line),
        _ => json!({"event": "other", "line": line}),
    }
}

fn summary_json(s: &RunSummary, line: &str) -> serde_json::Value {
    serde_json::json!({
        "event": "finished", "done": s.done, "failed": s.failed, "cancelled": s.cancelled,
        "lost": s.lost, "released": s.released, "interrupted": s.interrupted, "line": line
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_fence_is_an_event_of_its_own_in_json() {
        let event = RunnerEvent::Fenced {
            job: 6,
            silent: Duration::from_millis(56_600),
            grace: Duration::from_secs(2),
        };
        let json = event_json(&event);
        assert_eq!(json["event"], "fenced");
        assert_eq!(json["job"], 6);
        assert_eq!(json["silent_ms"], 56_600);
        assert_eq!(json["grace_ms"], 2_000);
    }
}
