//! `serve`: the loopback HTTP API with a drain worker beside it, sharing the
//! queue file with every other process. The API and its guards live in
//! `slothqueue-http`; this only wires the CLI's choices and prints.

use std::io::{self, Write};

use slothqueue::runner::{LoadGate, RunnerEvent, unix_signals};
use slothqueue_http::{DrainWorker, ServeConfig as HttpConfig, Token};

use super::Ctx;
use super::run::print_event;
use crate::app::Outcome;
use crate::app::config::ServeConfig;
use crate::app::exit::{Code, usage};

/// Serves until SIGTERM or SIGINT, then hands back the running job.
pub async fn serve(ctx: &Ctx, sc: ServeConfig) -> Outcome {
    if !sc.allow_remote && !sc.addr.ip().is_loopback() {
        return Err(usage(format!(
            "--addr {}: not a loopback address; pass --allow-remote to listen there",
            sc.addr
        )));
    }
    let store = ctx.open(true)?;
    let token = match sc.token_file {
        Some(f) => Token::File(f),
        None => Token::Generate { beside_queue: ctx.db.clone() },
    };
    let mut config = HttpConfig::new(token);
    config.addr = sc.addr;
    config.allow_remote = sc.allow_remote;
    let mut runner_config = DrainWorker::config(&ctx.db);
    runner_config.gates = vec![Box::new(LoadGate::system(sc.load_ceiling))];
    let (json, color) = (ctx.json, ctx.color);
    let worker = DrainWorker::new(store.clone(), runner_config, move |event: RunnerEvent| {
        print_event(&event, json, color)
    });
    let mut signals = unix_signals()?;
    slothqueue_http::serve(
        store,
        config,
        Some(worker),
        async move { signals.requested().await },
        |addr, token| {
            let _ = writeln!(
                io::stdout().lock(),
                "listening on http://{addr} (token in {})",
                token.display()
            );
        },
    )
    .await?;
    // A server stopped on request has done its job: exit 0, unlike `run`,
    // whose 130 tells a script that due work was left undone.
    Ok(Code::Success)
}
