//! `edit` and `clone`: fixing a job a user already added. `edit` changes
//! a pending (or held) job in one fenced write; `clone` adds a new job from
//! any job, the two trails naming each other (docs/edit.md).
//!
//! The flags become one [`JobEdit`] before the queue is opened, so a bad
//! value (an `--env-pass` of a name this shell does not set, say) writes
//! nothing. `--delay` counts from the moment of the write.

use std::collections::BTreeMap;
use std::io::{self, Write};

use anyhow::Context as _;
use slothqueue::core::JobEdit;
use slothqueue::{StoreError, Timestamp};

use super::{Ctx, job_json, print_json};
use crate::app::Outcome;
use crate::app::args::ReviseArgs;
use crate::app::config::Revise;
use crate::app::exit::{Code, usage};
use crate::app::{spec, time};

/// `edit ID [flags]`: at least one flag; a job that is no longer pending
/// is refused with exit 4 and nothing changed.
pub async fn edit(ctx: &Ctx, revise: Revise) -> Outcome {
    let id = revise.args.id;
    let now = ctx.now();
    let edit = job_edit(revise.args, revise.env, now)?;
    if edit.is_empty() {
        return Err(usage(format!(
            "edit #{id}: nothing to change: give --command, --priority, --max-runtime, --max-attempts, --delay/--at, --queue, -e/--env-pass or a limit flag"
        )));
    }
    let store = ctx.open(false)?;
    let job = match store.edit(id, &edit, now).await {
        Ok(job) => job,
        Err(e @ StoreError::InvalidTransition { state, .. }) => {
            return Err(anyhow::Error::new(e).context(format!(
                "cannot edit job #{id}: it is {state} (edit changes only pending or held jobs; nothing was changed{})",
                if state.is_terminal() { "; `slothqueue clone` adds a new job from it" } else { "" }
            )));
        }
        Err(e @ StoreError::InvalidInput(_)) => {
            return Err(anyhow::Error::new(e)
                .context(format!("cannot edit job #{id} (nothing was changed)")));
        }
        Err(e) => return Err(e.into()),
    };
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(&mut out, &job_json(&job, None)?)?;
    } else {
        writeln!(out, "edited job #{id}: {}", edit.fields().join(", "))?;
    }
    Ok(Code::Success)
}

/// `clone ID [flags]`: a new pending job from job ID (in any state), the
/// flags applied; no key, no parents.
pub async fn clone(ctx: &Ctx, revise: Revise) -> Outcome {
    let id = revise.args.id;
    let now = ctx.now();
    let edit = job_edit(revise.args, revise.env, now)?;
    let store = ctx.open(false)?;
    let job = match store.clone_job(id, &edit, now).await {
        Ok(job) => job,
        Err(e @ StoreError::InvalidInput(_)) => {
            return Err(anyhow::Error::new(e)
                .context(format!("cannot clone job #{id} (nothing was added)")));
        }
        Err(e) => return Err(e).with_context(|| format!("cannot clone job #{id}")),
    };
    let mut out = io::stdout().lock();
    if ctx.json {
        print_json(&mut out, &job_json(&job, None)?)?;
    } else {
        writeln!(out, "cloned job #{id} as #{}", job.id)?;
    }
    Ok(Code::Success)
}

/// The flags as one edit, `--delay` counted from `now`, with `env` (the
/// `-e` and `--env-pass` variables, resolved by the configuration).
fn job_edit(
    args: ReviseArgs,
    env: BTreeMap<String, String>,
    now: Timestamp,
) -> anyhow::Result<JobEdit> {
    let payload = match &args.payload {
        Some(text) => Some(
            serde_json::from_str(text)
                .map_err(|e| usage(format!("--payload is not valid JSON ({e})")))?,
        ),
        None => None,
    };
    if let Some(q) = &args.queue {
        spec::plain_name("--queue", q).map_err(usage)?;
    }
    let not_before = match (args.settings.delay, args.settings.at) {
        (Some(d), _) => Some(now.saturating_add(d)),
        (None, Some(t)) => Some(time::to_stamp(t)),
        (None, None) => None,
    };
    Ok(JobEdit {
        command: args.command,
        payload,
        priority: args.settings.priority,
        max_runtime: args.settings.max_runtime.map(|m| m.0),
        max_attempts: args.settings.max_attempts,
        not_before,
        queue: args.queue,
        env,
        limits: args.limits.limits(),
        gpus: match (args.settings.gpus, args.settings.gpu_request().map_err(usage)?) {
            (None, _) => None,
            (Some(_), request) => Some(request),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::args::{Cli, Command};
    use clap::Parser;
    use std::time::Duration;

    fn parse(argv: &[&str]) -> ReviseArgs {
        let cli = Cli::try_parse_from(argv).unwrap();
        match cli.command {
            Command::Edit(a) | Command::Clone(a) => a,
            other => panic!("not edit or clone: {other:?}"),
        }
    }

    #[test]
    fn the_flags_become_one_edit() {
        let args = parse(&[
            "slothqueue",
            "edit",
            "#3",
            "--command",
            "make test",
            "-p",
            "-2",
            "--max-runtime",
            "none",
            "--delay",
            "10s",
            "-q",
            "slow",
            "--nice",
            "5",
        ]);
        assert_eq!(args.id, 3);
        let now = Timestamp::from_millis(1_000);
        let env = BTreeMap::from([("CI".to_owned(), "1".to_owned())]);
        let e = job_edit(args, env, now).unwrap();
        assert_eq!(e.command.as_deref(), Some("make test"));
        assert_eq!((e.priority, e.max_runtime), (Some(-2), Some(None)));
        assert_eq!(e.not_before, Some(now.saturating_add(Duration::from_secs(10))));
        assert_eq!(e.queue.as_deref(), Some("slow"));
        assert_eq!(e.env.get("CI").map(String::as_str), Some("1"));
        assert_eq!(e.limits.nice, Some(5));
    }

    #[test]
    fn a_bad_value_is_a_usage_error() {
        let now = Timestamp::from_millis(0);
        for argv in [
            &["slothqueue", "clone", "3", "-q", "a/b"][..],
            &["slothqueue", "clone", "3", "--payload", "{"],
        ] {
            let err = job_edit(parse(argv), BTreeMap::new(), now).unwrap_err();
            assert_eq!(crate::app::exit::code_for(&err), Code::Usage, "{argv:?}");
        }
        let none = job_edit(parse(&["slothqueue", "edit", "3"]), BTreeMap::new(), now).unwrap();
        assert!(none.is_empty());
    }
}
