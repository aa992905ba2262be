//! The commands about lanes and holds: `parallel`, `pause`, `resume`,
//! `queues`, `hold`, `release`. A lane's settings live in the queue file
//! (`Store::change_lane`), so every runner on it obeys them at its next
//! claim; what they mean for a claim is `core`'s `LaneCheck`, not ours.

use std::io::{self, Write};

use anyhow::Context as _;
use slothqueue::core::{LaneChange, LaneScope, LaneSettings, Stamp};
use slothqueue::{Job, JobId, Store, StoreError, Timestamp};

use super::{Ctx, job_json, print_json};
use crate::app::Outcome;
use crate::app::exit::{self, Code};
use crate::app::render;

/// A lane as `--json` prints it after a change: `{"queue": "disk",
/// "limit": 2, "paused": {"since": MS, "by": "ana@laptop"}}`; `queue` is
/// `null` for every queue at once, `paused` absent when not paused.
fn lane_json(scope: &LaneScope, settings: &LaneSettings) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::json!({
        "queue": match scope {
            LaneScope::All => serde_json::Value::Null,
            LaneScope::Queue(q) => q.as_str().into(),
        },
        "limit": settings.limit,
    });
    if let Some(p) = &settings.paused {
        v["paused"] = serde_json::to_value(p)?;
    }
    Ok(v)
}

/// How many jobs of `scope` are due now (of every queue for all), for the
/// line a pause or a resume prints.
async fn due_in(store: &dyn Store, scope: &LaneScope, now: Timestamp) -> anyhow::Result<u64> {
    let counts = store.queue_counts(now).await.context("cannot count the queue's jobs")?;
    Ok(counts
        .iter()
        .filter(|c| match scope {
            LaneScope::All => true,
            LaneScope::Queue(q) => c.queue == *q,
        })
        .map(|c| c.due)
        .sum())
}

/// `parallel N --queue Q`: the queue's limit, 0 lifting it.
pub async fn parallel(ctx: &Ctx, queue: &str, limit: u32) -> Outcome {
    // Settings may come before the first job: the queue file is created.
    let store = ctx.open(true)?;
    let scope = LaneScope::Queue(queue.to_owned());
    let lanes = store
        .change_lane(&scope, &LaneChange::Limit(limit))
        .await
        .with_context(|| format!("cannot set the limit of queue {queue}"))?;
    let settings = lanes.get(&scope);
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(&mut out, &lane_json(&scope, &settings)?)?;
    } else {
        writeln!(out, "{}", render::limit_line(queue, &settings, ctx.now()))?;
    }
    Ok(Code::Success)
}

/// `pause [--queue Q]`: no new job of the lane starts; running ones go on.
pub async fn pause(ctx: &Ctx, scope: LaneScope, by: String) -> Outcome {
    // A pause may come before the first job, as a limit may.
    let store = ctx.open(true)?;
    let now = ctx.now();
    let mine = Stamp::new(by, now);
    let lanes = store
        .change_lane(&scope, &LaneChange::Pause(mine.clone()))
        .await
        .with_context(|| format!("cannot pause {scope}"))?;
    let settings = lanes.get(&scope);
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(&mut out, &lane_json(&scope, &settings)?)?;
        return Ok(Code::Success);
    }
    let due = due_in(store.as_ref(), &scope, now).await?;
    let line = render::paused_line(&scope, settings.paused.as_ref(), &mine, due, now);
    writeln!(out, "{line}")?;
    Ok(Code::Success)
}

/// `resume [--queue Q]`: jobs of the lane may start again.
pub async fn resume(ctx: &Ctx, scope: LaneScope) -> Outcome {
    // Nothing is paused in a queue file that does not exist: no new file.
    let store = ctx.open(false)?;
    let now = ctx.now();
    // Read only to say whether it was paused: the change itself is one
    // write whatever another process did meanwhile.
    let before = store.lanes().await.context("cannot read the lanes")?;
    let lanes = store
        .change_lane(&scope, &LaneChange::Resume)
        .await
        .with_context(|| format!("cannot resume {scope}"))?;
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(&mut out, &lane_json(&scope, &lanes.get(&scope))?)?;
        return Ok(Code::Success);
    }
    let was_paused = before.get(&scope).paused.is_some();
    let due = due_in(store.as_ref(), &scope, now).await?;
    writeln!(out, "{}", render::resumed_line(&scope, was_paused, &lanes, due, now))?;
    Ok(Code::Success)
}

/// `queues`: one row per lane.
pub async fn queues(ctx: &Ctx) -> Outcome {
    let mut out = io::stdout().lock();
    let Some(store) = ctx.look_existing()? else {
        if ctx.json {
            print_json(&mut out, &serde_json::json!({ "queues": [] }))?;
        } else {
            writeln!(out, "no queue at {} yet: no queues", slothqueue::shown(&ctx.db))?;
        }
        return Ok(Code::Success);
    };
    let now = ctx.now();
    let report = store.queues(now).await.context("cannot read the queues")?;
    if ctx.json {
        print_json(&mut out, &serde_json::to_value(&report)?)?;
    } else {
        write!(out, "{}", render::queues_table(&report, now))?;
    }
    Ok(Code::Success)
}

/// Which of the two a per-job command does.
#[derive(Clone, Copy)]
enum Toggle {
    Hold,
    Release,
}

/// `hold ID…`: each job in turn stays pending and starts no more.
pub async fn hold(ctx: &Ctx, ids: &[JobId], by: &str) -> Outcome {
    each_job(ctx, ids, by, Toggle::Hold).await
}

/// `release ID…`: each held job in turn may run again.
pub async fn release(ctx: &Ctx, ids: &[JobId], by: &str) -> Outcome {
    each_job(ctx, ids, by, Toggle::Release).await
}

/// Holds or releases each job in turn, one line each. A job that does not
/// exist or is not pending gets an error line and the rest go on (each is
/// its own write: all or nothing is not promised); the exit code is the
/// first such refusal's. Any other failure (a busy or damaged file) stops
/// at once.
async fn each_job(ctx: &Ctx, ids: &[JobId], by: &str, toggle: Toggle) -> Outcome {
    let store = ctx.open(false)?;
    let mut code = Code::Success;
    let mut changed_jobs: Vec<Job> = Vec::new();
    for &id in ids {
        let now = ctx.now();
        // `Ok((job, changed))`: whether this call held or released it.
        let result = match toggle {
            Toggle::Hold => {
                let mine = Stamp::new(by, now);
                store.hold(id, mine.clone(), now).await.map(|j| {
                    let changed = j.held.as_ref() == Some(&mine);
                    (j, changed)
                })
            }
            Toggle::Release => {
                // Read first only to say whether it was held; the release
                // itself is one write.
                match store.get(id).await {
                    Ok(before) => {
                        store.release_hold(id, by, now).await.map(|j| (j, before.is_held()))
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match result {
            Ok((job, changed)) => {
                if ctx.json {
                    changed_jobs.push(job);
                    continue;
                }
                let line = match (toggle, changed) {
                    (Toggle::Hold, true) => format!("held #{id}"),
                    (Toggle::Hold, false) => match &job.held {
                        Some(h) => format!("#{id} was already held {}", render::stamp(h, now)),
                        None => format!("#{id} was already held"),
                    },
                    (Toggle::Release, true) => format!("released #{id}"),
                    (Toggle::Release, false) => format!("#{id} was not held"),
                };
                writeln!(io::stdout().lock(), "{line}")?;
            }
            Err(e @ (StoreError::NotFound(_) | StoreError::InvalidTransition { .. })) => {
                let this = exit::warn(&anyhow::Error::new(e));
                if code == Code::Success {
                    code = this;
                }
            }
            Err(e) => {
                let verb = match toggle {
                    Toggle::Hold => "hold",
                    Toggle::Release => "release",
                };
                return Err(anyhow::Error::new(e).context(format!("cannot {verb} job #{id}")));
            }
        }
    }
    if ctx.json {
        let all: Vec<serde_json::Value> =
            changed_jobs.iter().map(|j| job_json(j, None)).collect::<anyhow::Result<_>>()?;
        print_json(&mut io::stdout().lock(), &serde_json::Value::Array(all))?;
    }
    Ok(code)
}
