//! `add`: push one job and say what was added.

use std::io::{self, Write};

use anyhow::Context as _;

use super::{Ctx, job_json, print_json};
use crate::app::Outcome;
use crate::app::config::{AddConfig, When};
use crate::app::exit::Code;
use crate::app::render;

/// Pushes the job; with an idempotency key that already holds the same
/// job, adds nothing and says so.
pub async fn add(ctx: &Ctx, add: AddConfig) -> Outcome {
    let AddConfig { mut job, when } = add;
    let store = ctx.open(true)?;
    let now = ctx.now();
    job.not_before = match when {
        When::Now => None,
        When::After(d) => Some(now.saturating_add(d)),
        When::At(t) => Some(t),
    };
    let pushed = store.push(job, now).await.context("cannot add the job")?;
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(&mut out, &job_json(&pushed.job, None)?)?;
        return Ok(Code::Success);
    }
    if !pushed.created {
        writeln!(
            out,
            "job #{} already holds key {} with the same job; nothing added",
            pushed.job.id,
            pushed.job.idempotency_key.as_deref().map(render::one_line).unwrap_or_default()
        )?;
        return Ok(Code::Success);
    }
    writeln!(out, "{}", render::added(&pushed.job, now))?;
    if let Some(old) = pushed.superseded {
        writeln!(out, "superseded job #{old} (same key, different job; it will not run)")?;
    }
    Ok(Code::Success)
}
