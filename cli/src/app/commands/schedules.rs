//! The commands about schedules: `every SPEC CMD` stores one, `every
//! --pause/--resume/--remove KEY` changes one, `schedules` lists them.
//! What a schedule means (its slots, catch-up, overlap, what a pause
//! does) is `core::schedule`'s; a store applies it in one write, and these
//! functions only say what it did. The ticks are fired by a runner
//! (docs/schedules.md), never here.

use std::io::{self, Write};

use anyhow::Context as _;
use slothqueue::core::{Schedule, ScheduleChange, Stamp};

use super::inspect::terminal_width;
use super::{Ctx, print_json, schedule_json};
use crate::app::Outcome;
use crate::app::config::{EveryChange, EveryConfig};
use crate::app::exit::Code;
use crate::app::render;

/// Stores the schedule; the same definition under its key again changes
/// nothing and says so, another one is refused (exit 2, nothing written).
pub async fn every(ctx: &Ctx, config: EveryConfig) -> Outcome {
    let EveryConfig { schedule, derived_key, notes } = config;
    super::add::say_notes(&notes)?;
    let store = ctx.open(true)?;
    let now = ctx.now();
    let put = store
        .put_schedule(&schedule, now)
        .await
        .with_context(|| format!("cannot store schedule {}", schedule.key))?;
    if derived_key && put.created {
        let mut err = io::stderr().lock();
        writeln!(
            err,
            "key {} derived from SPEC, the command and its directory (--key NAME names a schedule)",
            put.schedule.key
        )?;
    }
    let mut out = io::stdout().lock();
    if ctx.json {
        let mut v = schedule_json(&put.schedule)?;
        v["created"] = put.created.into();
        print_json(&mut out, &v)?;
    } else {
        writeln!(out, "{}", render::schedule_line(&put.schedule, put.created, now))?;
    }
    Ok(Code::Success)
}

/// Pauses, resumes or removes the schedule `key`; an unknown key is exit 3.
pub async fn change(ctx: &Ctx, key: &str, change: EveryChange) -> Outcome {
    // A change needs a schedule, so a queue file: none is created.
    let store = ctx.open(false)?;
    let now = ctx.now();
    // What it was, for the words only (`was already paused`, `was not
    // paused`): the change itself is decided in the store's one write.
    let before = store
        .schedules()
        .await
        .context("cannot read the schedules")?
        .into_iter()
        .find(|s| s.key == key);
    let (core_change, mine, verb) = match &change {
        EveryChange::Pause { by } => {
            let stamp = Stamp::new(by.clone(), now);
            (ScheduleChange::Pause(stamp.clone()), Some(stamp), "pause")
        }
        EveryChange::Resume => (ScheduleChange::Resume, None, "resume"),
        EveryChange::Remove => (ScheduleChange::Remove, None, "remove"),
    };
    let after = store
        .change_schedule(key, &core_change, now)
        .await
        .with_context(|| format!("every --{verb} {key}"))?;
    let mut out = io::stdout().lock();
    match after {
        None => {
            if ctx.json {
                print_json(&mut out, &serde_json::json!({ "key": key, "removed": true }))?;
            } else {
                writeln!(out, "schedule {key} removed (the jobs its ticks queued stay)")?;
            }
        }
        Some(s) => {
            if ctx.json {
                print_json(&mut out, &schedule_json(&s)?)?;
            } else {
                let was_paused = before.as_ref().is_some_and(|b| b.paused.is_some());
                writeln!(out, "{}", render::schedule_changed(&s, mine.as_ref(), was_paused, now))?;
            }
        }
    }
    Ok(Code::Success)
}

/// One row a schedule, in key order; `--json`, an array of them.
pub async fn schedules(ctx: &Ctx) -> Outcome {
    let mut out = io::stdout().lock();
    let Some(store) = ctx.look_existing()? else {
        if ctx.json {
            writeln!(out, "[]")?;
        } else {
            writeln!(out, "no queue at {} yet: no schedules", slothqueue::shown(&ctx.db))?;
        }
        return Ok(Code::Success);
    };
    let all: Vec<Schedule> = store.schedules().await.context("cannot read the schedules")?;
    if ctx.json {
        let list: Vec<serde_json::Value> =
            all.iter().map(schedule_json).collect::<anyhow::Result<_>>()?;
        print_json(&mut out, &serde_json::Value::Array(list))?;
        return Ok(Code::Success);
    }
    if all.is_empty() {
        writeln!(out, "no schedules (slothqueue every SPEC CMD adds one)")?;
        return Ok(Code::Success);
    }
    write!(out, "{}", render::schedules_table(&all, terminal_width()))?;
    Ok(Code::Success)
}
