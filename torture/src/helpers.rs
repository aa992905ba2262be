//! The helper processes scenarios start: an enqueuer that calls
//! `slothqueue add` and acknowledges each id only after `add` returned
//! success, and a poller that keeps calling `status` and `list`.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::history::History;
use crate::queue::{Backend, Where as _};
use crate::util::{Rng, append_line, read_or_empty};

/// `--name value` pairs.
fn flags(args: &[String]) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let v = it.next().with_context(|| format!("{k} needs a value"))?;
        out.push((k.trim_start_matches('-').to_owned(), v.clone()));
    }
    Ok(out)
}

fn get<'a>(f: &'a [(String, String)], k: &str) -> Option<&'a str> {
    f.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

fn need<'a>(f: &'a [(String, String)], k: &str) -> Result<&'a str> {
    get(f, k).with_context(|| format!("--{k} is required"))
}

fn sq(f: &[(String, String)]) -> Result<Command> {
    let mut cmd = Command::new(need(f, "bin")?);
    cmd.arg("--db").arg(need(f, "db")?);
    if let Some(backend) = Backend::cli_flag_of(need(f, "backend")?) {
        cmd.arg("--backend").arg(backend);
    }
    cmd.stdin(Stdio::null());
    Ok(cmd)
}

/// The id in `add --json` output.
fn added_id(stdout: &[u8]) -> Option<i64> {
    let v: serde_json::Value = serde_json::from_slice(stdout).ok()?;
    v.get("id")?.as_i64()
}

/// `enqueue --bin B --db D --backend X --ack FILE --errors FILE --dir DIR
/// --seed N --min-ms A --max-ms B --max-attempts N (--count N | --tickets FILE --already N)`
pub fn enqueue(args: &[String]) -> Result<ExitCode> {
    let f = flags(args)?;
    let ack = PathBuf::from(need(&f, "ack")?);
    let errors = PathBuf::from(need(&f, "errors")?);
    let history = History::new(&PathBuf::from(need(&f, "dir")?))?;
    let mut rng = Rng::new(need(&f, "seed")?.parse()?);
    let min: u64 = need(&f, "min-ms")?.parse()?;
    let max: u64 = need(&f, "max-ms")?.parse()?;
    let attempts = need(&f, "max-attempts")?;
    let count: Option<u64> = get(&f, "count").map(str::parse).transpose()?;
    let tickets = get(&f, "tickets").map(PathBuf::from);
    let mut done: u64 = get(&f, "already").map(str::parse).transpose()?.unwrap_or(0);
    if count.is_none() && tickets.is_none() {
        bail!("enqueue needs --count or --tickets");
    }
    loop {
        if let Some(c) = count {
            if done >= c {
                return Ok(ExitCode::SUCCESS);
            }
        }
        if let Some(t) = &tickets {
            let granted: u64 = read_or_empty(t)?.trim().parse().unwrap_or(0);
            if done >= granted {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        }
        let ms = rng.range(min, max + 1);
        let out = sq(&f)?
            .args(["--json", "add", &history.sleeper(ms), "--max-attempts", attempts])
            .output()
            .context("cannot run slothqueue add")?;
        match (out.status.success(), added_id(&out.stdout)) {
            (true, Some(id)) => {
                append_line(&ack, &id.to_string())?;
                done += 1;
            }
            _ => {
                let err = String::from_utf8_lossy(&out.stderr).replace('\n', " ");
                append_line(&errors, &format!("add: {}: {err}", out.status))?;
                done += 1; // counted, so a persistent failure cannot loop forever
            }
        }
    }
}

/// `poll --bin B --db D --backend X --errors FILE`: `status` and `list`
/// in a loop until killed; every failure goes to the errors file.
pub fn poll(args: &[String]) -> Result<ExitCode> {
    let f = flags(args)?;
    let errors = PathBuf::from(need(&f, "errors")?);
    let mut n: u64 = 0;
    loop {
        let args: &[&str] = match n % 3 {
            0 => &["--json", "status"],
            1 => &["--json", "list", "--limit", "20"],
            _ => &["list", "--state", "running"],
        };
        n += 1;
        let out = sq(&f)?.args(args).output().context("cannot run slothqueue")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A read-only command on a file not created yet says so: fine.
        if !out.status.success() && !stderr.contains("no queue at") {
            append_line(
                &errors,
                &format!("{}: {}: {}", args.join(" "), out.status, stderr.replace('\n', " ")),
            )?;
        } else if stderr.contains("panicked at") || stderr.contains("database is locked") {
            append_line(&errors, &format!("{}: {}", args.join(" "), stderr.replace('\n', " ")))?;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
