//! The lines of `add --stdin`, checked before anything is opened: one job
//! a line, a plain line a shell command, a line starting with `{` a JSON
//! object with `add`'s fields, each laid over the flags' defaults.
//!
//! The text is read twice and its jobs are never held together: once to
//! check every line ([`Lines::check`]), then again as the store takes the
//! jobs one at a time inside its transaction ([`Lines::jobs`], behind
//! `Store::push_stream`). A job carries its recorded environment (a few
//! KB), so 200,000 lines held as jobs were most of a gigabyte; held as
//! text they are what was read. The text is read whole before the store
//! is opened, so a slow writer on the other end of the pipe never holds
//! the queue's write lock, and a store that runs its transaction again
//! reads the same jobs again.
//!
//! Everything that can be known without the queue is refused here, naming
//! its line: malformed JSON, an unknown field, what [`spec::build`]
//! refuses, a key defined twice, and an `after` that names the key of a
//! later line (the store resolves parents in batch order, so it would only
//! say "no job holds the key"; here the message can say why). What needs
//! the queue (an unknown parent) the store refuses, and the command maps
//! its [`slothqueue::StoreError::InBatch`] index back to a line number.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use serde::Deserialize;
use slothqueue::NewJob;
use slothqueue::core::shell::parse_size;
use slothqueue::core::{IoClass, Limits, Parent};

use super::duration;
use super::spec::{self, JobSpec, Source, When};
use super::time;

/// One job read from a line.
#[derive(Debug)]
pub struct LineJob {
    /// Its line, from 1.
    pub number: usize,
    /// The checked job, complete but for `not_before`.
    pub job: NewJob,
    /// When it becomes due.
    pub when: When,
}

/// A JSON line: `add`'s flags as fields, durations and times as the flags
/// take them (`"delay": "5m"`, `"max_runtime": "none"`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonLine {
    command: Option<String>,
    kind: Option<String>,
    payload: Option<serde_json::Value>,
    priority: Option<i32>,
    key: Option<String>,
    queue: Option<String>,
    delay: Option<serde_json::Value>,
    at: Option<String>,
    after: Option<After>,
    max_attempts: Option<u32>,
    max_runtime: Option<serde_json::Value>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
    limits: Option<LineLimits>,
    gpus: Option<u32>,
    gpu_memory: Option<serde_json::Value>,
}

/// A line's `limits`: the flags' values, `memory_max` as `--memory-max`
/// takes it (`"512M"`) or a number of bytes (a size has no unit to guess:
/// the payload stores bytes).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LineLimits {
    nice: Option<i32>,
    ionice: Option<String>,
    memory_max: Option<serde_json::Value>,
    cpu_weight: Option<u32>,
}

impl LineLimits {
    /// The limits, each value read as its flag reads it.
    fn limits(self) -> Result<Limits, String> {
        let ionice = self
            .ionice
            .map(|c| c.parse::<IoClass>().map_err(|e| format!("`limits`: {e}")))
            .transpose()?;
        let memory_max = match self.memory_max {
            None => None,
            Some(serde_json::Value::String(s)) => {
                Some(parse_size(&s).map_err(|e| format!("`limits`: `memory_max`: {e}"))?)
            }
            Some(serde_json::Value::Number(n)) => Some(n.as_u64().ok_or_else(|| {
                format!("`limits`: `memory_max` {n} is not a whole number of bytes")
            })?),
            Some(other) => {
                return Err(format!(
                    "`limits`: `memory_max` is a size like \"512M\" or a number of bytes, not {other}"
                ));
            }
        };
        // The ranges are checked where the flags' are, in `spec::build`.
        Ok(Limits { nice: self.nice, ionice, memory_max, cpu_weight: self.cpu_weight })
    }
}

/// `after`: one parent or a list; a number is a job id, a string a key.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum After {
    One(Parent),
    Many(Vec<Parent>),
}

/// The text of `add --stdin` with what every line starts from: checked
/// whole, then read again job by job.
pub struct Lines {
    text: String,
    defaults: JobSpec,
    current_dir: std::io::Result<PathBuf>,
}

/// A job line whose `after` names keys: what [`check_keys`] needs of it
/// once its job is dropped.
struct KeyRefs {
    number: usize,
    /// Whether the `after` is the line's own (else the flag's), to name it.
    own: bool,
    keys: Vec<String>,
}

impl Lines {
    /// `text`, each job line laid over `defaults`, a plain line run in
    /// `current_dir`.
    pub fn new(text: String, defaults: JobSpec, current_dir: std::io::Result<PathBuf>) -> Self {
        Lines { text, defaults, current_dir }
    }

    /// Checks every line, holding no job: the number of each job line, in
    /// order (what a refusal of the store's, naming its place in the
    /// batch, maps back through), or the first refusal as a message
    /// starting `line N: `.
    pub fn check(&self) -> Result<Vec<usize>, String> {
        let mut numbers = Vec::new();
        let mut keys: HashMap<String, usize> = HashMap::new();
        let mut refs = Vec::new();
        for line in self.jobs_with_own() {
            let (line, own) = line?;
            if let Some(k) = &line.job.idempotency_key {
                if let Some(first) = keys.insert(k.clone(), line.number) {
                    return Err(format!(
                        "line {}: key `{k}` is also on line {first}; give each job its own key",
                        line.number
                    ));
                }
            }
            let named: Vec<String> = line
                .job
                .after
                .iter()
                .filter_map(|p| match p {
                    Parent::Key(k) => Some(k.clone()),
                    Parent::Id(_) => None,
                })
                .collect();
            if !named.is_empty() {
                refs.push(KeyRefs { number: line.number, own, keys: named });
            }
            numbers.push(line.number);
        }
        check_keys(&keys, &refs)?;
        Ok(numbers)
    }

    /// Every job line's job, in order, made as it is taken; a refusal is
    /// a message starting `line N: ` (none after a [`Lines::check`] that
    /// passed: the same text gives the same jobs).
    pub fn jobs(&self) -> impl Iterator<Item = Result<LineJob, String>> + '_ {
        self.jobs_with_own().map(|line| line.map(|(job, _)| job))
    }

    /// [`Lines::jobs`], each with whether its `after` is its line's own.
    fn jobs_with_own(&self) -> impl Iterator<Item = Result<(LineJob, bool), String>> + '_ {
        self.text.lines().enumerate().filter_map(|(i, raw)| {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            Some(self.line(i + 1, line))
        })
    }

    /// The job of line `number`, which is not blank nor a comment.
    fn line(&self, number: usize, line: &str) -> Result<(LineJob, bool), String> {
        let at = |e: String| format!("line {number}: {e}");
        let (spec, own) = if line.starts_with('{') {
            let parsed: JsonLine = serde_json::from_str(line)
                .map_err(|e| at(format!("not a job ({})", without_position(&e))))?;
            let own = parsed.after.is_some();
            (over(&self.defaults, parsed).map_err(at)?, own)
        } else {
            (JobSpec { command: Some(line.to_owned()), ..self.defaults.clone() }, false)
        };
        let (job, when) = spec::build(spec, Source::Line, &self.current_dir).map_err(at)?;
        Ok((LineJob { number, job, when }, own))
    }
}

/// Every job of `text`, in line order, or the first refusal as a message
/// starting `line N: `: [`Lines::check`], then [`Lines::jobs`] collected.
#[cfg(test)]
pub fn parse(
    text: &str,
    defaults: &JobSpec,
    current_dir: &std::io::Result<PathBuf>,
) -> Result<Vec<LineJob>, String> {
    let current_dir = match current_dir {
        Ok(dir) => Ok(dir.clone()),
        Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
    };
    let lines = Lines::new(text.to_owned(), defaults.clone(), current_dir);
    lines.check()?;
    lines.jobs().collect()
}

/// A JSON line laid over the defaults: each field it gives replaces the
/// flag's (`after`, `env` and `limits` included: they replace, not add
/// to). What was recorded of the environment stays under every shell
/// line's `env`: one capture for the batch.
fn over(defaults: &JobSpec, line: JsonLine) -> Result<JobSpec, String> {
    let mut spec = defaults.clone();
    if line.kind.is_some() {
        // The flags' --env, the recorded environment and the limits are
        // for the shell lines; a handler line has none.
        spec.env.clear();
        spec.recorded = None;
        spec.limits = None;
    }
    if let Some(limits) = line.limits {
        spec.limits = Some(limits.limits()?);
    }
    spec.command = line.command;
    spec.kind = line.kind;
    spec.payload = line.payload;
    if let Some(p) = line.priority {
        spec.priority = Some(p);
    }
    if let Some(k) = line.key {
        spec.key = Some(k);
    }
    if let Some(q) = line.queue {
        spec.queue = Some(q);
    }
    match (line.delay, line.at) {
        (Some(_), Some(_)) => return Err("give `delay` or `at`, not both".to_owned()),
        (Some(d), None) => {
            let text = duration_text("delay", &d)?;
            spec.when = When::After(duration::parse(text).map_err(|e| format!("`delay`: {e}"))?);
        }
        (None, Some(t)) => {
            let t = time::parse_at(&t).map_err(|e| format!("`at`: {e}"))?;
            spec.when = When::At(time::to_stamp(t));
        }
        (None, None) => {}
    }
    if let Some(after) = line.after {
        spec.after = match after {
            After::One(p) => vec![p],
            After::Many(ps) => ps,
        };
    }
    if let Some(n) = line.max_attempts {
        spec.max_attempts = Some(n);
    }
    if let Some(m) = line.max_runtime {
        let text = duration_text("max_runtime", &m)?;
        spec.max_runtime =
            Some(duration::parse_or_none(text).map_err(|e| format!("`max_runtime`: {e}"))?);
    }
    if let Some(env) = line.env {
        spec.env = env;
    }
    if line.gpus.is_some() || line.gpu_memory.is_some() {
        spec.gpus = line_gpus(line.gpus, line.gpu_memory, spec.gpus.as_ref())?;
    }
    spec.cwd = line.cwd;
    Ok(spec)
}

/// A line's `gpus` and `gpu_memory` over the flags' request: `gpus` a
/// count (at least 1), `gpu_memory` a size as `--gpu-memory` takes it
/// (`"20G"`) or a number of bytes; a line's `gpu_memory` alone keeps the
/// flags' count.
fn line_gpus(
    count: Option<u32>,
    memory: Option<serde_json::Value>,
    defaults: Option<&slothqueue::core::GpuRequest>,
) -> Result<Option<slothqueue::core::GpuRequest>, String> {
    let memory = match memory {
        None => defaults.and_then(|d| d.memory),
        Some(serde_json::Value::String(s)) => {
            Some(parse_size(&s).map_err(|e| format!("`gpu_memory`: {e}"))?)
        }
        Some(serde_json::Value::Number(n)) => Some(
            n.as_u64().ok_or_else(|| format!("`gpu_memory` {n} is not a whole number of bytes"))?,
        ),
        Some(other) => {
            return Err(format!(
                "`gpu_memory` is a size like \"20G\" or a number of bytes, not {other}"
            ));
        }
    };
    let Some(count) = count.or(defaults.map(|d| d.count)) else {
        return Err("`gpu_memory` needs `gpus` (or --gpus)".to_owned());
    };
    if count == 0 {
        return Err("`gpus` must be at least 1".to_owned());
    }
    Ok(Some(slothqueue::core::GpuRequest { count, memory }))
}

/// A duration field's text: a string as the flag takes it. A bare number
/// is refused rather than guessed (seconds, as the flag reads it, or
/// milliseconds, as the JSON output writes durations?).
fn duration_text<'a>(field: &str, value: &'a serde_json::Value) -> Result<&'a str, String> {
    value.as_str().ok_or_else(|| {
        format!("`{field}` is a string like \"90s\", \"5m\" or \"1h30m\" (not a number: the unit would be a guess)")
    })
}

/// serde_json's message without its ` at line 1 column 9`: every line is
/// parsed alone, so its line would always be 1, next to the real one.
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// An `after` naming a key of the batch names an earlier line's (no key
/// is defined by two lines: [`Lines::check`] refused that as it went).
fn check_keys(keys: &HashMap<String, usize>, refs: &[KeyRefs]) -> Result<(), String> {
    for r in refs {
        let name = if r.own { "`after`" } else { "--after" };
        for k in &r.keys {
            match keys.get(k.as_str()) {
                Some(n) if *n == r.number => {
                    return Err(format!(
                        "line {}: {name} names the line's own key `{k}`; a job cannot wait on itself",
                        r.number
                    ));
                }
                Some(n) if *n > r.number => {
                    return Err(format!(
                        "line {}: {name} names key `{k}` of line {n}; a job can only wait on earlier ones",
                        r.number
                    ));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn here() -> std::io::Result<PathBuf> {
        Ok(PathBuf::from("/work"))
    }

    fn read(text: &str) -> Result<Vec<LineJob>, String> {
        parse(text, &JobSpec::default(), &here())
    }

    #[test]
    fn plain_and_json_lines_skipping_blanks_and_comments() {
        let jobs = read(
            "make\n\n# a comment\n  \n{\"command\": \"test\", \"key\": \"t\", \"after\": 1, \"priority\": 4}\n{\"kind\": \"resize\", \"payload\": {\"w\": 3}, \"after\": [\"t\", 2]}\n",
        )
        .unwrap();
        let numbers: Vec<usize> = jobs.iter().map(|j| j.number).collect();
        assert_eq!(numbers, [1, 5, 6]);
        assert_eq!(jobs[0].job.payload["command"], "make");
        assert_eq!(jobs[0].job.payload["cwd"], "/work");
        assert_eq!(jobs[1].job.after, [Parent::Id(1)]);
        assert_eq!(jobs[1].job.priority, 4);
        assert_eq!(jobs[2].job.kind, "resize");
        assert_eq!(jobs[2].job.after, [Parent::Key("t".into()), Parent::Id(2)]);
    }

    #[test]
    fn the_flags_are_defaults_a_line_replaces() {
        let defaults = JobSpec {
            priority: Some(7),
            queue: Some("slow".into()),
            after: vec![Parent::Id(9)],
            env: [("A".to_owned(), "1".to_owned())].into(),
            ..JobSpec::default()
        };
        let jobs = parse(
            "plain\n{\"command\": \"own\", \"priority\": 1, \"after\": [], \"delay\": \"5m\", \"max_runtime\": \"none\"}\n{\"kind\": \"k\"}",
            &defaults,
            &here(),
        )
        .unwrap();
        assert_eq!((jobs[0].job.priority, jobs[0].job.queue.as_str()), (7, "slow"));
        assert_eq!(jobs[0].job.after, [Parent::Id(9)]);
        assert_eq!(jobs[0].job.payload["env"]["A"], "1");
        assert_eq!((jobs[1].job.priority, jobs[1].job.queue.as_str()), (1, "slow"));
        assert!(jobs[1].job.after.is_empty(), "a line's `after` replaces --after");
        assert_eq!(jobs[1].when, When::After(std::time::Duration::from_secs(300)));
        assert_eq!(jobs[1].job.max_runtime, None);
        assert_eq!(jobs[2].job.payload, serde_json::json!({}), "--env is not a handler's");
    }

    #[test]
    fn one_capture_under_every_shell_line_and_limits_per_line() {
        let defaults = JobSpec {
            recorded: Some([("PATH".to_owned(), "/venv/bin".to_owned())].into()),
            env: [("A".to_owned(), "1".to_owned())].into(),
            limits: Some(Limits { nice: Some(3), ..Limits::default() }),
            ..JobSpec::default()
        };
        let jobs = parse(
            "plain\n{\"command\": \"own\", \"env\": {\"B\": \"2\"}, \"limits\": {\"memory_max\": \"50M\", \"ionice\": \"best-effort:7\"}}\n{\"kind\": \"k\"}",
            &defaults,
            &here(),
        )
        .unwrap();
        let p = &jobs[0].job.payload;
        assert_eq!(p["env"], serde_json::json!({"A": "1", "PATH": "/venv/bin"}));
        assert_eq!(
            (&p["env_mode"], &p["limits"]),
            (&"exact".into(), &serde_json::json!({"nice": 3}))
        );
        let p = &jobs[1].job.payload;
        assert_eq!(
            p["env"],
            serde_json::json!({"B": "2", "PATH": "/venv/bin"}),
            "a line's env replaces -e only"
        );
        assert_eq!(
            p["limits"],
            serde_json::json!({"ionice": "best-effort:7", "memory_max": 50 << 20})
        );
        assert_eq!(
            jobs[2].job.payload,
            serde_json::json!({}),
            "nothing of the shell in a handler's"
        );
        for (text, expected) in [
            (
                "{\"command\": \"x\", \"limits\": {\"nice\": 40}}",
                "line 1: `limits`: nice 40 is outside",
            ),
            (
                "{\"command\": \"x\", \"limits\": {\"memory_max\": \"lots\"}}",
                "line 1: `limits`: `memory_max`: size `lots`",
            ),
            (
                "{\"command\": \"x\", \"limits\": {\"ionice\": \"rt\"}}",
                "line 1: `limits`: I/O class `rt`",
            ),
            (
                "{\"command\": \"x\", \"limits\": {\"cpu\": 1}}",
                "line 1: not a job (unknown field `cpu`",
            ),
            (
                "{\"kind\": \"k\", \"limits\": {\"nice\": 1}}",
                "line 1: `limits` is for shell commands",
            ),
        ] {
            let err = read(text).expect_err(expected);
            assert!(err.starts_with(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn each_refusal_names_its_line() {
        for (text, expected) in [
            ("a\n{\"command\": \"x\", \"colour\": 1}", "line 2: not a job (unknown field `colour`"),
            ("a\n\n{nope", "line 3: not a job (key must be a string)"),
            ("{\"kind\": \"k\", \"command\": \"x\"}", "line 1: give either `command` or `kind`"),
            ("{\"priority\": 2}", "line 1: a JSON line needs `command`"),
            (
                "{\"command\": \"x\", \"queue\": \"a b\"}",
                "line 1: `queue` `a b` is not a plain name",
            ),
            ("{\"command\": \"x\", \"delay\": 90}", "line 1: `delay` is a string like \"90s\""),
            ("{\"command\": \"x\", \"delay\": \"1h30\"}", "line 1: `delay`: `1h30` is ambiguous"),
            (
                "{\"command\": \"x\", \"delay\": \"1s\", \"at\": \"2030-01-01 00:00\"}",
                "line 1: give `delay` or `at`",
            ),
            (
                "{\"command\": \"x\", \"after\": [0]}",
                "line 1: invalid job: --after 0: a job id is a positive number",
            ),
            (
                "{\"command\": \"a\", \"key\": \"k\"}\n{\"command\": \"b\", \"key\": \"k\"}",
                "line 2: key `k` is also on line 1",
            ),
            (
                "a\nb\nc\nd\n{\"command\": \"e\", \"after\": \"x\"}\nf\ng\nh\n{\"command\": \"i\", \"key\": \"x\"}",
                "line 5: `after` names key `x` of line 9; a job can only wait on earlier ones",
            ),
            (
                "{\"command\": \"a\", \"key\": \"x\", \"after\": \"x\"}",
                "line 1: `after` names the line's own key `x`",
            ),
        ] {
            let err = read(text).expect_err(expected);
            assert!(err.starts_with(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_flag_after_naming_a_later_line_says_it_is_the_flag() {
        let defaults = JobSpec { after: vec![Parent::Key("x".into())], ..JobSpec::default() };
        let err =
            parse("a\n{\"command\": \"b\", \"key\": \"x\", \"after\": []}", &defaults, &here())
                .unwrap_err();
        assert_eq!(
            err,
            "line 1: --after names key `x` of line 2; a job can only wait on earlier ones"
        );
    }
}
