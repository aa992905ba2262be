//! `slothqueue mcp`: the queue as a Model Context Protocol server over
//! stdio, so a coding or personal agent can queue long work, wait for it
//! and read its story with structured answers, the same "why is it not
//! running" a person gets, and nothing its user did not allow.
//!
//! Built on the official Rust SDK (`rmcp`): its server, its stdio
//! transport, its JSON Schemas. The binary (`cli`, the `mcp` subcommand)
//! opens the queue, reads its flags into [`Options`] and calls
//! [`serve_stdio`]; stdout is the protocol, so nothing here prints.
//!
//! Rooms: [`wire`] what each tool takes and answers (the schemas);
//! [`policy`] what the user allows (`--read-only`, `--kinds`, `--queue`);
//! [`tools`] the handlers, thin faces over `spec::build`, the read model,
//! `runner::wait` and the job logs ([`logs`]); [`server`] rmcp's handler,
//! the tool list, the log resources and the bounds on a runaway client.

pub mod error;
pub mod logs;
pub mod policy;
pub mod server;
pub mod tools;
pub mod wire;

use std::sync::Arc;

pub use error::ToolError;
pub use policy::Policy;
pub use server::{Server, tools as tool_list};
pub use tools::{Answer, Options, Queue};

use rmcp::ServiceExt;
use slothqueue::Store;

/// Why the server stopped other than by its client going away.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The client never completed `initialize`, or the transport failed.
    #[error("the MCP session did not start: {0}")]
    Start(String),
    /// The session's task failed.
    #[error("the MCP session failed: {0}")]
    Session(String),
}

/// Serves the tools over this process's stdin and stdout until the client
/// closes its end, or `stop` completes.
pub async fn serve_stdio(
    store: Arc<dyn Store>,
    options: Options,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let server = Server::new(Queue::new(store, options));
    let (stdin, stdout) = rmcp::transport::stdio();
    let transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(stdin, stdout)
        .with_max_line_length(server::MAX_REQUEST);
    let running = server.serve(transport).await.map_err(|e| ServeError::Start(e.to_string()))?;
    let cancel = running.cancellation_token();
    tokio::select! {
        done = running.waiting() => {
            done.map_err(|e| ServeError::Session(e.to_string()))?;
        }
        () = stop => cancel.cancel(),
    }
    Ok(())
}
