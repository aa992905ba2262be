//! `serve`: the loopback HTTP API with a drain worker beside it, sharing the
//! queue file with every other process. The API and its guards live in
//! `slothqueue-http`; this only wires the CLI's choices and prints.

use std::io::{self, Write};

use slothqueue::runner::{RunnerEvent, unix_signals};
use slothqueue_http::{DrainWorker, ServeConfig as HttpConfig, Token};

use super::Ctx;
use super::run::{print_event, runner_from};
use crate::app::Outcome;
use crate::app::config::ServeConfig;
use crate::app::exit::{Code, usage};

/// Serves until SIGTERM or SIGINT, then hands back the running job.
pub async fn serve(ctx: &Ctx, sc: ServeConfig) -> Outcome {
    for (flag, addr) in [("--addr", Some(sc.addr)), ("--metrics-addr", sc.metrics_addr)] {
        if let Some(addr) = addr.filter(|a| !sc.allow_remote && !a.ip().is_loopback()) {
            return Err(usage(format!(
                "{flag} {addr}: not a loopback address; pass --allow-remote to listen there"
            )));
        }
    }
    if slothqueue::is_server_url(&ctx.db) {
        // A queue on a server keeps this host's token and logs in the
        // data folder, which may not exist yet.
        if let Some(dir) = ctx.files.parent() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
    }
    let token = match sc.token_file {
        Some(f) => Token::File(f),
        None => Token::Generate { beside_queue: ctx.files.clone() },
    };
    let mut config = HttpConfig::new(token);
    config.addr = sc.addr;
    config.allow_remote = sc.allow_remote;
    config.metrics_addr = sc.metrics_addr;
    // Watched for `?wait=` long polls, whichever way the token comes (a
    // queue on a server is watched through the server's notifications),
    // and where the job logs are.
    config.queue_file = Some(ctx.files.clone());
    // The worker is the runner `run --follow` would be, with the same
    // options, in the worker's settings (heartbeats, woken by enqueues).
    // Caught before the queue is opened (a server may take a while to
    // answer), so a signal meanwhile stops the server cleanly.
    let mut signals = unix_signals()?;
    let (store, runner) = runner_from(ctx, sc.runner, DrainWorker::config(&ctx.files))?;
    let (json, color) = (ctx.json, ctx.color);
    let gate_lines = std::sync::Mutex::new(GateLines::default());
    let worker = DrainWorker::from_runner(runner, move |event: RunnerEvent| {
        let show = gate_lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .show(&event, tokio::time::Instant::now());
        if show {
            // The server goes on serving with its log lost; `run` stops.
            let _ = print_event(&event, json, color);
        }
    });
    slothqueue_http::serve(
        store,
        config,
        Some(worker),
        async move { signals.requested().await },
        |at| {
            let mut out = io::stdout().lock();
            let _ = writeln!(
                out,
                "listening on http://{} (token in {})",
                at.addr,
                at.token_path.display()
            );
            // A one-time code, not the token: useless once opened.
            let _ = writeln!(out, "web page: {} (this link works once)", at.login_link);
            if let Some(metrics) = at.metrics_addr {
                let _ = writeln!(out, "metrics on http://{metrics}/metrics (no token)");
            }
            let _ = out.flush();
        },
    )
    .await?;
    // A server stopped on request has done its job: exit 0, unlike `run`,
    // whose 130 tells a script that due work was left undone.
    Ok(Code::Success)
}

/// How often a server whose gate stays closed says so again.
const GATE_REMINDER: std::time::Duration = std::time::Duration::from_secs(60);

/// Which gate checks a server prints: unlike `run`, which prints every
/// check, a server runs for days, so it prints a closed gate when it
/// closes, then once a minute while it stays closed, and the opening. A
/// wait on paused or full lanes is printed the same way.
#[derive(Debug, Default)]
struct GateLines {
    /// When a closed gate was last printed; `None` while it is open.
    held_since_print: Option<tokio::time::Instant>,
}

impl GateLines {
    fn show(&mut self, event: &RunnerEvent, now: tokio::time::Instant) -> bool {
        match event {
            RunnerEvent::Gated { .. } | RunnerEvent::LanesWaiting { .. } => {
                let due = self.held_since_print.is_none_or(|at| now - at >= GATE_REMINDER);
                if due {
                    self.held_since_print = Some(now);
                }
                due
            }
            RunnerEvent::GateOpened { .. } => {
                self.held_since_print = None;
                true
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gated() -> RunnerEvent {
        RunnerEvent::Gated { reading: "load 3.00 >= ceiling 2.00".into(), wait: GATE_REMINDER }
    }

    #[test]
    fn a_closed_gate_is_printed_when_it_closes_then_once_a_minute() {
        let start = tokio::time::Instant::now();
        let at = |s: u64| start + std::time::Duration::from_secs(s);
        let mut lines = GateLines::default();
        assert!(lines.show(&gated(), at(0)), "the first check");
        for s in 1..60 {
            assert!(!lines.show(&gated(), at(s)), "not every second");
        }
        assert!(lines.show(&gated(), at(60)), "a reminder after a minute");
        let opened = RunnerEvent::GateOpened { reading: "load 1.00 < ceiling 2.00".into() };
        assert!(lines.show(&opened, at(61)));
        assert!(lines.show(&gated(), at(62)), "closed again: printed at once");
    }
}
