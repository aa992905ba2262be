//! `mcp`: the queue as a Model Context Protocol server on stdio, for an
//! agent (`slothqueue-mcp` holds the server; this wires the CLI's choices).
//! Stdout is the protocol: nothing here prints there. The worker's events
//! and every note go to stderr, which MCP clients keep as the server's log.
//!
//! With `--worker`, the drain worker `run --follow` would be runs beside
//! the server on the same queue (as `serve` runs one beside the HTTP API),
//! and stops with it, handing its running jobs back.

use std::io::Write as _;

use slothqueue::runner::{Mode, RunnerConfig, RunnerEvent, ShutdownSignal, unix_signals};
use slothqueue_mcp::{Options, Policy};

use super::Ctx;
use super::inspect::this_host;
use super::run::runner_from;
use crate::app::Outcome;
use crate::app::config::{McpConfig, log_dir};
use crate::app::exit::{Code, say};

/// Serves until the client closes stdin, or SIGTERM or SIGINT.
pub async fn mcp(ctx: &Ctx, mc: McpConfig) -> Outcome {
    let mut signals = unix_signals()?;
    let policy = Policy { read_only: mc.read_only, kinds: mc.kinds, queue: mc.queue };
    let (store, worker) = match mc.worker {
        Some(opts) => {
            let mut base = RunnerConfig::new(log_dir(&ctx.files));
            base.mode = Mode::Follow;
            // A job an agent (or anyone) adds starts at once.
            base.watch_file = Some(ctx.db.clone());
            let (store, runner) = runner_from(ctx, opts, base)?;
            let (trigger, shutdown) = ShutdownSignal::new();
            let task = tokio::spawn(async move {
                let report = |event: RunnerEvent| {
                    // The worker's story is the server's log: stderr.
                    let _ = writeln!(std::io::stderr().lock(), "worker: {event}");
                };
                runner.run(report, shutdown).await
            });
            (store, Some((trigger, task)))
        }
        None if mc.read_only => (ctx.open_read_only()?, None),
        None => (ctx.open(true)?, None),
    };
    let options = Options {
        queue_file: ctx.db.clone(),
        files: ctx.files.clone(),
        policy,
        env: mc.env,
        cwd: mc.cwd,
        who: mc.who,
        this_host: this_host(),
        worker: worker.is_some(),
    };
    let served =
        slothqueue_mcp::serve_stdio(store, options, async move { signals.requested().await }).await;
    if let Some((trigger, task)) = worker {
        trigger.trigger();
        match task.await {
            Ok(Ok(_summary)) => {}
            Ok(Err(e)) => say(&format!("mcp --worker: {e}")),
            Err(e) => say(&format!("mcp --worker stopped: {e}")),
        }
    }
    served?;
    Ok(Code::Success)
}
