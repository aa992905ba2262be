//! The commands that define a job: `add` (one job, or defaults for
//! `--stdin`'s lines), `every` (a schedule, whose job `add`'s own path
//! builds) and `edit`/`clone` (a change).

use std::collections::BTreeMap;
use std::path::PathBuf;

use slothqueue::Timestamp;
use slothqueue::core::NewSchedule;

use super::{AddConfig, Command, Env, EveryChange, EveryConfig, Revise, StdinConfig};
use crate::app::args;
use crate::app::every;
use crate::app::exit::usage;
use crate::app::spec::{self, JobSpec, Source, When};
use crate::app::time;

/// The flags of `add` as one [`JobSpec`]: the job itself, or (with
/// `--stdin`) the defaults every line starts from; and the notes for
/// stderr.
fn add_spec(a: args::AddArgs, process: &Env) -> anyhow::Result<(JobSpec, Vec<String>)> {
    let payload = match a.payload {
        Some(text) => Some(
            serde_json::from_str(&text)
                .map_err(|e| usage(format!("--payload is not valid JSON ({e})")))?,
        ),
        None => None,
    };
    let mut env = BTreeMap::new();
    for pair in &a.env {
        let (k, v) = parse_env_pair(pair)?;
        env.insert(k, v);
    }
    let when = match (a.settings.delay, a.settings.at) {
        (Some(d), _) => When::After(d),
        (None, Some(t)) => When::At(time::to_stamp(t)),
        (None, None) => When::Now,
    };
    let limits = a.limits.limits();
    if a.settings.gpus == Some(0) {
        return Err(usage("--gpus must be at least 1 (leave it out for a job that needs no GPU)"));
    }
    let gpus = a.settings.gpu_request().map_err(usage)?;
    let mut notes = Vec::new();
    let recorded = if a.kind.is_some() {
        // A handler's payload is its own: nothing of the shell goes in.
        if let Some(flag) = env_flag(&a.env_pass, a.env_all, &limits) {
            return Err(usage(format!(
                "{flag} is for shell commands; put a handler's settings in --payload"
            )));
        }
        None
    } else {
        let captured =
            slothqueue::core::shell::capture(process.vars.clone(), &a.env_pass, a.env_all);
        if let Some(name) = captured.missing.first() {
            return Err(usage(format!(
                "--env-pass {name}: {name} is not set in this environment (or its value is not UTF-8); set it, or give it with -e {name}=VALUE"
            )));
        }
        notes.extend(env_all_note(&captured));
        Some(captured.env)
    };
    let spec = JobSpec {
        command: a.command,
        kind: a.kind,
        payload,
        priority: a.settings.priority,
        max_runtime: a.settings.max_runtime.map(|m| m.0),
        max_attempts: a.settings.max_attempts,
        when,
        key: a.key,
        queue: a.queue,
        env,
        recorded,
        limits: Some(limits).filter(|l| !l.is_empty()),
        cwd: None,
        after: a.after,
        gpus,
    };
    Ok((spec, notes))
}

/// What `--env-all` left out and why, as one note for stderr: names that
/// look secret, values holding a password, other tools' bookkeeping (none
/// is recorded unless named); `None` when it left nothing out.
fn env_all_note(captured: &slothqueue::core::shell::Captured) -> Option<String> {
    let groups = [
        (&captured.secrets_left_out, "names that look secret"),
        (&captured.secret_values_left_out, "values holding a password"),
        (&captured.bookkeeping_left_out, "other tools' bookkeeping, which packs their values"),
    ];
    let parts: Vec<String> = groups
        .iter()
        .filter(|(names, _)| !names.is_empty())
        .map(|(names, why)| format!("{} ({why})", names.join(", ")))
        .collect();
    (!parts.is_empty()).then(|| {
        format!(
            "--env-all recorded {} variables and left out {}; --env-pass NAME records one",
            captured.env.len(),
            parts.join("; ")
        )
    })
}

/// The first flag given that only a shell job takes, by its name.
fn env_flag(pass: &[String], all: bool, limits: &slothqueue::core::Limits) -> Option<&'static str> {
    if !pass.is_empty() {
        Some("--env-pass")
    } else if all {
        Some("--env-all")
    } else if limits.nice.is_some() {
        Some("--nice")
    } else if limits.ionice.is_some() {
        Some("--ionice")
    } else if limits.memory_max.is_some() {
        Some("--memory-max")
    } else if limits.cpu_weight.is_some() {
        Some("--cpu-weight")
    } else {
        None
    }
}

pub(super) fn add_command(a: args::AddArgs, env: &Env) -> anyhow::Result<Command> {
    let stdin = a.stdin;
    let (spec, notes) = add_spec(a, env)?;
    if stdin {
        // The defaults must be sound on their own (a bad --queue is the
        // flag's fault, not line 1's): check them as a shell job would be.
        let probe = JobSpec { command: Some("true".to_owned()), ..spec.clone() };
        spec::build(probe, Source::Flags, &Ok(PathBuf::from("/"))).map_err(usage)?;
        let current_dir = match &env.cwd {
            Ok(p) => Ok(p.clone()),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        };
        return Ok(Command::AddStdin(StdinConfig { defaults: spec, current_dir, notes }));
    }
    let (job, when) = spec::build(spec, Source::Flags, &env.cwd).map_err(usage)?;
    Ok(Command::Add(AddConfig { job, when, notes }))
}

/// `every`: a change to the schedule a `--pause`, `--resume` or
/// `--remove` names (nothing else given), or a new schedule, whose job is
/// built by `add`'s own path and which is checked whole by
/// `core::schedule::create` before anything is opened.
pub(super) fn every_command(mut a: args::EveryArgs, env: &Env) -> anyhow::Result<Command> {
    let change = match (a.pause.take(), a.resume.take(), a.remove.take()) {
        (Some(key), _, _) => Some(("--pause", key, EveryChange::Pause { by: env.who() })),
        (None, Some(key), _) => Some(("--resume", key, EveryChange::Resume)),
        (None, None, Some(key)) => Some(("--remove", key, EveryChange::Remove)),
        (None, None, None) => None,
    };
    if let Some((flag, key, change)) = change {
        if let Some(other) = definition_flag(&a) {
            return Err(usage(format!(
                "every {flag} KEY takes nothing else (got {other}): it changes a stored schedule, which `every SPEC CMD` defines"
            )));
        }
        return Ok(Command::EveryChange { key, change });
    }
    for (given, flag, why) in [
        (a.job.settings.delay.is_some(), "--delay", "each tick's job is due at its slot"),
        (a.job.settings.at.is_some(), "--at", "each tick's job is due at its slot"),
        (!a.job.after.is_empty(), "--after", "each tick's job is queued on its own"),
        (a.job.stdin, "--stdin", "a schedule queues one command"),
    ] {
        if given {
            return Err(usage(format!("every takes no {flag}: {why}")));
        }
    }
    let Some(text) = a.spec.take() else {
        return Err(usage(
            "every needs SPEC and a command: slothqueue every 2h 'make backup' (SPEC: an interval, or a cron expression like '0 3 * * *' or @daily)",
        ));
    };
    let no_job = a.job.command.is_none() && a.job.kind.is_none();
    let spec = every::parse_spec(&text).map_err(|e| {
        if no_job {
            usage(format!("every needs SPEC and a command, and `{text}` is no SPEC: {e}"))
        } else {
            usage(e)
        }
    })?;
    if no_job {
        return Err(usage(format!(
            "every {} needs a command: slothqueue every {} 'make backup' (or a handler job: --kind K --payload JSON)",
            render_arg(&text),
            render_arg(&text)
        )));
    }
    let key = a.job.key.take();
    let (zone, zone_note) = match a.tz.take() {
        Some(z) => (z, None),
        None => every::default_zone(env.zone()),
    };
    let catch_up = a.catch_up.unwrap_or_default();
    let overlap = a.overlap.unwrap_or_default();
    let (job_spec, mut notes) = add_spec(a.job, env)?;
    let (job, _) = spec::build(job_spec, Source::Flags, &env.cwd).map_err(usage)?;
    let derived_key = key.is_none();
    let key = key.unwrap_or_else(|| every::derived_key(&spec, &job));
    let schedule = NewSchedule { key, spec, zone, catch_up, overlap, job };
    // The whole definition as the store will check it; only what the file
    // holds under the key is left for the store to say. `now` is no part
    // of what is checked.
    slothqueue::core::schedule::create(&schedule, None, Timestamp::from_millis(0))
        .map_err(|e| usage(every::why(e)))?;
    notes.extend(zone_note);
    Ok(Command::Every(EveryConfig { schedule, derived_key, notes }))
}

/// SPEC as the user would retype it in a message.
fn render_arg(text: &str) -> String {
    if text.contains(char::is_whitespace) { format!("'{text}'") } else { text.to_owned() }
}

/// The first argument given that defines a schedule (so has no place
/// beside `--pause`, `--resume` or `--remove`), by its name.
fn definition_flag(a: &args::EveryArgs) -> Option<&'static str> {
    let j = &a.job;
    let l = &j.limits;
    [
        (a.spec.is_some(), "SPEC"),
        (j.command.is_some(), "CMD"),
        (a.tz.is_some(), "--tz"),
        (a.catch_up.is_some(), "--catch-up"),
        (a.overlap.is_some(), "--overlap"),
        (j.key.is_some(), "--key"),
        (j.settings.priority.is_some(), "--priority"),
        (j.settings.max_runtime.is_some(), "--max-runtime"),
        (j.settings.max_attempts.is_some(), "--max-attempts"),
        (j.settings.delay.is_some(), "--delay"),
        (j.settings.at.is_some(), "--at"),
        (j.settings.gpus.is_some(), "--gpus"),
        (j.settings.gpu_memory.is_some(), "--gpu-memory"),
        (j.queue.is_some(), "--queue"),
        (j.kind.is_some(), "--kind"),
        (j.payload.is_some(), "--payload"),
        (!j.env.is_empty(), "--env"),
        (!j.env_pass.is_empty(), "--env-pass"),
        (j.env_all, "--env-all"),
        (l.nice.is_some(), "--nice"),
        (l.ionice.is_some(), "--ionice"),
        (l.memory_max.is_some(), "--memory-max"),
        (l.cpu_weight.is_some(), "--cpu-weight"),
        (!j.after.is_empty(), "--after"),
        (j.stdin, "--stdin"),
    ]
    .into_iter()
    .find_map(|(given, name)| given.then_some(name))
}

/// `edit`'s and `clone`'s flags with their `-e` checked and each
/// `--env-pass NAME` read from this shell (unset: a usage error).
pub(super) fn revise(args: args::ReviseArgs, process: &Env) -> anyhow::Result<Revise> {
    let mut env = BTreeMap::new();
    for pair in &args.env {
        let (k, v) = parse_env_pair(pair)?;
        env.insert(k, v);
    }
    for name in &args.env_pass {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(usage(format!("--env-pass `{name}` is not a variable name")));
        }
        let value = process.vars.iter().find(|(k, _)| k == name).ok_or_else(|| {
            usage(format!(
                "--env-pass {name}: {name} is not set (or not UTF-8) in this shell; nothing was changed"
            ))
        })?;
        env.insert(name.clone(), value.1.clone());
    }
    Ok(Revise { args, env })
}

fn parse_env_pair(pair: &str) -> anyhow::Result<(String, String)> {
    match pair.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains('\0') && !v.contains('\0') => {
            Ok((k.to_owned(), v.to_owned()))
        }
        _ => Err(usage(format!("--env `{pair}` is not NAME=VALUE"))),
    }
}
