//! `mcp`'s arguments: what the user lets an agent do (`--read-only`,
//! `--kinds`, the runner's `--queue` as the one queue every tool is
//! confined to) and `--worker` with the runner's own flags.

use clap::Args;

use super::RunnerArgs;

/// `mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// Offer only the tools that look (list_jobs, show_job, job_logs,
    /// queue_status, wait_jobs): the agent changes nothing.
    #[arg(long)]
    pub read_only: bool,

    /// add_job queues only handler jobs of these kinds (comma-separated),
    /// never a shell command.
    #[arg(long, value_name = "K,K", value_delimiter = ',')]
    pub kinds: Vec<String>,

    /// Also run a drain worker inside the server (the runner `run
    /// --follow` would be, with the flags below), so jobs run while the
    /// agent's session is open. Without it, jobs wait for the user's own
    /// runner.
    #[arg(long)]
    pub worker: bool,

    /// The runner flags, for --worker; its --queue Q confines every tool
    /// to queue Q (with or without --worker).
    #[command(flatten)]
    pub runner: RunnerArgs,
}
