//! A served queue with a drain worker, as `slothqueue serve` runs it:
//! `cargo run -p slothqueue-http --example serve -- /tmp/q.db [127.0.0.1:7878]`.
//! Stops (handing back a running job) on Ctrl-C or SIGTERM.

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "an example program presents")]

use std::path::PathBuf;
use std::sync::Arc;

use slothqueue_core::Store;
use slothqueue_http::{DrainWorker, ServeConfig, Token};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let queue = PathBuf::from(args.next().ok_or("usage: serve QUEUE_FILE [ADDR]")?);
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&queue, SqliteOptions::default())?);
    let mut config = ServeConfig::new(Token::Generate { beside_queue: queue.clone() });
    if let Some(addr) = args.next() {
        config.addr = addr.parse()?;
    }
    let worker = DrainWorker::new(store.clone(), DrainWorker::config(&queue), |event| {
        eprintln!("{event}");
    });
    let mut signals = slothqueue_runner::unix_signals()?;
    slothqueue_http::serve(
        store,
        config,
        Some(worker),
        async move { signals.requested().await },
        |at| {
            println!("listening on http://{} (token in {})", at.addr, at.token_path.display());
            println!("web page: {} (this link works once)", at.login_link);
        },
    )
    .await?;
    Ok(())
}
