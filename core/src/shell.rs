//! What a shell job's payload says beyond its command: the environment it
//! was added with, and the manners and limits it runs under.
//!
//! Data and pure rules only. The CLI's `add` captures ([`capture`]), the
//! runner applies ([`EnvMode`], [`Limits::over`]), and `show`, `list`,
//! `export` and HTTP present ([`masked`]). A payload reads
//! `{"command": …, "cwd": …, "env": {…}, "env_mode": "exact",
//! "limits": {"nice": 10, "ionice": "idle", "memory_max": 52428800,
//! "cpu_weight": 50}}`; every key but `command` is optional, so payloads
//! written before these existed mean what they meant.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::job::{Job, SHELL_KIND};

/// How a shell job's `env` relates to the environment it runs with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvMode {
    /// The runner's own environment (minus its `SLOTHQUEUE_*`), with `env`
    /// laid over it: what jobs got before `add` recorded an environment,
    /// and what a payload without `env_mode` (an HTTP enqueue naming no
    /// mode) still gets.
    #[default]
    Inherit,
    /// Exactly `env`, plus the job's own `SLOTHQUEUE_*` variables: nothing
    /// of the runner's (a runner under systemd has another `PATH`, and its
    /// secrets are not the job's business). What `add` records.
    Exact,
}

impl EnvMode {
    /// The payload's `env_mode` (absent is [`EnvMode::Inherit`]); `Err`
    /// for any other value.
    pub fn of(payload: &serde_json::Value) -> Result<EnvMode, String> {
        match payload.get("env_mode") {
            None | Some(serde_json::Value::Null) => Ok(EnvMode::Inherit),
            Some(serde_json::Value::String(s)) if s == "inherit" => Ok(EnvMode::Inherit),
            Some(serde_json::Value::String(s)) if s == "exact" => Ok(EnvMode::Exact),
            Some(other) => Err(format!("`env_mode` must be \"exact\" or \"inherit\", not {other}")),
        }
    }

    /// `exact` or `inherit`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvMode::Inherit => "inherit",
            EnvMode::Exact => "exact",
        }
    }
}

/// Variables `add` records by default, by exact name: what makes a command
/// behave as it would in the shell it was typed in. See also
/// [`CAPTURED_PREFIXES`].
pub const CAPTURED_NAMES: &[&str] = &[
    // Where programs are found, who and where the user is.
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    // Language, time zone.
    "LANG",
    "LANGUAGE",
    "TZ",
    // Python: virtualenv, pyenv, pipenv, poetry, conda.
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYENV_VERSION",
    "PYENV_ROOT",
    "PIPENV_ACTIVE",
    "POETRY_ACTIVE",
    // Nix.
    "NIX_PATH",
    "NIX_PROFILES",
    "IN_NIX_SHELL",
    // Version managers and toolchains.
    "RBENV_VERSION",
    "NODE_PATH",
    "GOPATH",
    "GOROOT",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "JAVA_HOME",
    // Libraries a toolchain was pointed at.
    "LD_LIBRARY_PATH",
    "PKG_CONFIG_PATH",
    // The user's directories.
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
];

/// Variables `add` records by default, by prefix: locale categories,
/// conda, asdf, nvm and mise. (Not direnv's `DIRENV_*`: that is its
/// bookkeeping, see [`BOOKKEEPING_PREFIXES`].)
pub const CAPTURED_PREFIXES: &[&str] = &["LC_", "CONDA_", "ASDF_", "NVM_", "MISE_", "VIRTUAL_ENV_"];

/// Prefixes (any case) of another tool's bookkeeping: variables a tool
/// keeps for itself in the shell it manages, which pack the values of
/// other variables (the old and new values of everything it set, secrets
/// included) and mean nothing to a job's `sh -c`. Never recorded unless
/// named (`--env-pass`), not even by `--env-all`; masked whole wherever a
/// job is shown.
///
/// - `DIRENV_`: `DIRENV_DIFF` (base64 of zlib of JSON of every value an
///   `.envrc` exported, before and after), `DIRENV_WATCHES`, `DIRENV_DIR`,
///   `DIRENV_FILE`, `DIRENV_DUMP_FILE_PATH`.
/// - `__MISE_`, `__RTX_`: mise's (formerly rtx's) `__MISE_DIFF`,
///   `__MISE_WATCH`, `__MISE_ORIG_PATH`, `__MISE_SESSION`.
/// - `__SHADOWENV`: shadowenv's `__shadowenv_data`, the values it replaced.
/// - `__LMOD_`, `_MODULETABLE`: Lmod's stacks of pushed values and its
///   packed module table.
/// - `__MODULES_`: Environment Modules' pushed values and shares.
/// - `CONDA_BACKUP_`: the values conda's activation scripts replaced.
pub const BOOKKEEPING_PREFIXES: &[&str] = &[
    "DIRENV_",
    "__MISE_",
    "__RTX_",
    "__SHADOWENV",
    "__LMOD_",
    "_MODULETABLE",
    "__MODULES_",
    "CONDA_BACKUP_",
];

/// Whether `name` is another tool's bookkeeping ([`BOOKKEEPING_PREFIXES`]).
pub fn is_bookkeeping(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    BOOKKEEPING_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// Whether `add` records `name` without being asked: in the allowlist
/// ([`CAPTURED_NAMES`], [`CAPTURED_PREFIXES`]), not looking like a
/// secret and not another tool's bookkeeping.
pub fn is_captured_by_default(name: &str) -> bool {
    (CAPTURED_NAMES.contains(&name) || CAPTURED_PREFIXES.iter().any(|p| name.starts_with(p)))
        && !hides_value(name)
}

/// Whether a variable's whole value is masked when shown: its name looks
/// secret ([`looks_secret`]) or it is another tool's bookkeeping
/// ([`is_bookkeeping`]).
pub fn hides_value(name: &str) -> bool {
    looks_secret(name) || is_bookkeeping(name)
}

/// Whether a variable holds a secret: by its name ([`hides_value`]) or
/// inside its value ([`mask_value`] changes it: a URL's password).
pub fn holds_secret(name: &str, value: &str) -> bool {
    hides_value(name) || mask_value(value) != value
}

/// Parts of a name (upper-cased) that mark a secret anywhere in it.
pub const SECRET_PARTS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "PRIVATE",
    "COOKIE",
    "APIKEY",
    "API_KEY",
    "ACCESS_KEY",
];

/// Endings (upper-cased) that mark a secret: `AWS_KEY`, `DB_PASS`,
/// `GITHUB_PAT`, `NPM_AUTH`.
pub const SECRET_SUFFIXES: &[&str] = &["_KEY", "_PASS", "_PAT", "_AUTH", "_PWD"];

/// Whether a variable's name looks like it holds a secret: such a variable
/// is recorded only when named (`--env-pass NAME`, `-e NAME=…`), and its
/// value is masked wherever a job is shown.
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_PARTS.iter().any(|p| upper.contains(p))
        || SECRET_SUFFIXES.iter().any(|s| upper.ends_with(s))
}

/// What [`capture`] took from an environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    /// The variables to record, by name.
    pub env: BTreeMap<String, String>,
    /// Names given to pass that the environment does not have.
    pub missing: Vec<String>,
    /// Secret-looking names left out because they were not named (only
    /// said with `all`, where the user may expect everything).
    pub secrets_left_out: Vec<String>,
    /// Names left out, not named, because their value holds a secret (a
    /// URL's password, [`mask_value`]); said with `all`, as above.
    pub secret_values_left_out: Vec<String>,
    /// Other tools' bookkeeping left out, not named ([`is_bookkeeping`]);
    /// said with `all`, as above.
    pub bookkeeping_left_out: Vec<String>,
}

/// The environment `add` records from `vars` (the adding shell's): the
/// allowlist, plus the names in `pass`, plus with `all` every other
/// variable. Unless named in `pass`, a variable that holds a secret (its
/// name looks secret, it is another tool's bookkeeping, or its value holds
/// a password: [`holds_secret`]) is left out. `SLOTHQUEUE_*` is never
/// taken from the shell: a job gets its own. Variables that are not valid
/// UTF-8 are the caller's to skip.
pub fn capture<I>(vars: I, pass: &[String], all: bool) -> Captured
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut out = Captured::default();
    let mut seen = std::collections::BTreeSet::new();
    for (name, value) in vars {
        seen.insert(name.clone());
        if name.starts_with("SLOTHQUEUE_") {
            continue;
        }
        let named = pass.contains(&name);
        let wanted = all || is_captured_by_default(&name);
        if named || (wanted && !holds_secret(&name, &value)) {
            out.env.insert(name, value);
        } else if all && is_bookkeeping(&name) {
            out.bookkeeping_left_out.push(name);
        } else if all && looks_secret(&name) {
            out.secrets_left_out.push(name);
        } else if all {
            out.secret_values_left_out.push(name);
        }
    }
    out.missing = pass.iter().filter(|n| !seen.contains(*n)).cloned().collect();
    out.missing.dedup();
    // In name order, whatever the environment's: a note reads the same
    // from every shell.
    out.secrets_left_out.sort();
    out.secret_values_left_out.sort();
    out.bookkeeping_left_out.sort();
    out
}

/// What a masked value reads as.
pub const MASK: &str = "<secret>";

/// The payload as shown to someone who did not ask for secrets: the whole
/// value of every `env` variable whose name [`hides_value`] (looks secret,
/// or is a tool's bookkeeping) replaced by [`MASK`], and the secrets inside
/// every other value masked ([`mask_value`]). Anything else is unchanged.
pub fn masked(payload: &serde_json::Value) -> serde_json::Value {
    let mut out = payload.clone();
    if let Some(serde_json::Value::Object(env)) = out.get_mut("env") {
        for (name, value) in env.iter_mut() {
            if hides_value(name) {
                *value = serde_json::Value::String(MASK.to_owned());
            } else if let serde_json::Value::String(text) = value {
                let shown = mask_value(text);
                if shown != *text {
                    *value = serde_json::Value::String(shown);
                }
            }
        }
    }
    out
}

/// Query parameters (lower-cased) whose value is a secret though their
/// name does not [`looks_secret`]: `?key=` (API keys), signatures of
/// presigned URLs, and short forms of password and auth.
const SECRET_QUERY_NAMES: &[&str] =
    &["key", "sig", "signature", "x-amz-signature", "pass", "pwd", "auth"];

/// A value as shown to someone who did not ask for secrets: in every
/// URL-shaped part (`scheme://…`) the password of its userinfo
/// (`postgres://app:<secret>@db/app`), or the whole userinfo when it has no
/// password (a lone user part is where tokens go: a Sentry DSN's key,
/// `https://TOKEN@github.com`), and the values of query parameters whose
/// name says secret (`?password=`, `?token=`, `?key=`, `?sig=`); in a part
/// without a scheme, `user:<secret>@host` (a proxy written `u:p@proxy:3128`).
/// Parts are separated by whitespace. Anything else is unchanged.
pub fn mask_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find(|c: char| !c.is_whitespace()) {
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        out.push_str(&mask_part(&rest[..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// [`mask_value`] of one whitespace-free part.
fn mask_part(part: &str) -> String {
    if !part.contains("://") {
        return mask_bare_userinfo(part);
    }
    let mut out = String::with_capacity(part.len());
    let mut rest = part;
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        // The authority ends at the path, the query, the fragment or the
        // next URL (`redis://a:p@h1,redis://b:q@h2`); a password holding a
        // raw `/`, `?` or `#` is not a URL's.
        let next = next_url(rest);
        let end = rest[..next].find(['/', '?', '#']).unwrap_or(next);
        let authority = &rest[..end];
        match authority.rfind('@') {
            Some(at) => {
                match authority[..at].split_once(':') {
                    Some((user, _)) => {
                        out.push_str(user);
                        out.push(':');
                        out.push_str(MASK);
                    }
                    None => out.push_str(MASK),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &rest[end..];
        let next = next_url(rest);
        out.push_str(&mask_query(&rest[..next]));
        rest = &rest[next..];
    }
    out.push_str(rest);
    out
}

/// Where the next `scheme://` in `s` starts (its scheme's first
/// character), or `s`'s length.
fn next_url(s: &str) -> usize {
    match s.find("://") {
        Some(i) => s[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |j| j + 1),
        None => s.len(),
    }
}

/// A URL's path, query and fragment with the values of secret query
/// parameters masked.
fn mask_query(tail: &str) -> String {
    let Some(q) = tail.find('?') else { return tail.to_owned() };
    let (path, query) = tail.split_at(q + 1);
    let (query, fragment) = match query.find('#') {
        Some(h) => query.split_at(h),
        None => (query, ""),
    };
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, v)) if !v.is_empty() && secret_query_name(name) => {
                format!("{name}={MASK}")
            }
            _ => param.to_owned(),
        })
        .collect();
    format!("{path}{}{fragment}", params.join("&"))
}

/// Whether a query parameter's name says its value is a secret.
fn secret_query_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    looks_secret(name) || SECRET_QUERY_NAMES.contains(&lower.as_str())
}

/// A part without a scheme written `user:password@host` (a proxy as curl
/// takes it): `user:<secret>@host`. A part with a `/` before its `@` (a
/// path) or no `:` before it (`git@host:repo`, an address) is unchanged.
fn mask_bare_userinfo(part: &str) -> String {
    let Some(at) = part.rfind('@') else { return part.to_owned() };
    let userinfo = &part[..at];
    match userinfo.split_once(':') {
        Some((user, pass))
            if !user.is_empty() && !pass.is_empty() && !userinfo.contains(['/', '=']) =>
        {
            format!("{user}:{MASK}{}", &part[at..])
        }
        _ => part.to_owned(),
    }
}

/// A job's payload as shown to someone who did not ask for secrets: a
/// shell job's [`masked`]; any other kind's as stored (a handler's payload
/// is its own, and an `env` in it means what the handler says). What every
/// presenter (`show`, `list`, `--json`, HTTP) calls.
pub fn masked_payload(job: &Job) -> serde_json::Value {
    masked_payload_of(&job.kind, &job.payload)
}

/// [`masked_payload`] for a job not queued yet (a schedule's job): the
/// same rule, by kind and payload.
pub fn masked_payload_of(kind: &str, payload: &serde_json::Value) -> serde_json::Value {
    if kind == SHELL_KIND { masked(payload) } else { payload.clone() }
}

/// The secret-looking names an export marks beside a job: a shell job's
/// [`secret_names`], none for any other kind (see [`masked_payload`]).
pub fn marked_secrets(job: &Job) -> Vec<String> {
    marked_secrets_of(&job.kind, &job.payload)
}

/// [`marked_secrets`] by kind and payload (a schedule's job).
pub fn marked_secrets_of(kind: &str, payload: &serde_json::Value) -> Vec<String> {
    if kind == SHELL_KIND { secret_names(payload) } else { Vec::new() }
}

/// The names of the payload's `env` variables that hold a secret (by
/// name, or inside the value: [`holds_secret`]), in order: what an export
/// marks, and what [`masked`] masks.
pub fn secret_names(payload: &serde_json::Value) -> Vec<String> {
    match payload.get("env") {
        Some(serde_json::Value::Object(env)) => env
            .iter()
            .filter(|(n, v)| match v {
                serde_json::Value::String(v) => holds_secret(n, v),
                _ => hides_value(n),
            })
            .map(|(n, _)| n.clone())
            .collect(),
        _ => Vec::new(),
    }
}

/// The niceness a job runs at when neither it nor its runner says
/// (`--nice`): background work yields the CPU to what a person is doing.
pub const DEFAULT_NICE: i32 = 10;

/// The I/O class a job runs in when neither it nor its runner says
/// (`--ionice`): best-effort at its last level, 7. Polite (the disk goes
/// to what a person is doing first) and harmless: unlike `idle`, a job is
/// never starved while something else keeps the disk busy.
pub const DEFAULT_IO_CLASS: IoClass = IoClass::BestEffort(Some(7));

/// A job's I/O scheduling class (`ioprio_set`), as `ionice` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoClass {
    /// Disk time only when nobody else wants it.
    Idle,
    /// The normal class at a level 0 (first) to 7 (last); `None` lets the
    /// kernel derive the level from the niceness.
    BestEffort(Option<u8>),
}

impl fmt::Display for IoClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoClass::Idle => f.write_str("idle"),
            IoClass::BestEffort(None) => f.write_str("best-effort"),
            IoClass::BestEffort(Some(n)) => write!(f, "best-effort:{n}"),
        }
    }
}

impl FromStr for IoClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("I/O class `{s}`: expected idle, best-effort or best-effort:0 to :7");
        match s.split_once(':') {
            None if s == "idle" => Ok(IoClass::Idle),
            None if s == "best-effort" => Ok(IoClass::BestEffort(None)),
            Some(("best-effort", n)) => match n.parse::<u8>() {
                Ok(n) if n <= 7 => Ok(IoClass::BestEffort(Some(n))),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

impl Serialize for IoClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for IoClass {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// The smallest memory ceiling accepted: below it nothing starts.
pub const MIN_MEMORY_MAX: u64 = 1 << 20;
/// The cgroup v2 `cpu.weight` range (100 is the default share).
pub const CPU_WEIGHT_RANGE: std::ops::RangeInclusive<u32> = 1..=10_000;
/// The niceness range.
pub const NICE_RANGE: std::ops::RangeInclusive<i32> = -20..=19;

/// How a job asks to run: politeness (niceness, I/O class) and ceilings
/// that need a cgroup (memory, CPU weight). Every field is optional; a
/// job's own fields win over its runner's ([`Limits::over`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// `nice` value, -20 to 19.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nice: Option<i32>,
    /// I/O scheduling class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ionice: Option<IoClass>,
    /// Memory ceiling in bytes (cgroup `memory.max`); the job is killed
    /// when it goes over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<u64>,
    /// CPU weight, 1 to 10000 (cgroup `cpu.weight`; 100 is an equal share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_weight: Option<u32>,
}

impl Limits {
    /// The payload's `limits` (none when absent), checked.
    pub fn of(payload: &serde_json::Value) -> Result<Limits, String> {
        let limits = match payload.get("limits") {
            None | Some(serde_json::Value::Null) => return Ok(Limits::default()),
            Some(v) => Limits::deserialize(v).map_err(|e| format!("`limits`: {e}"))?,
        };
        limits.check()?;
        Ok(limits)
    }

    /// Whether every value is in range.
    pub fn check(&self) -> Result<(), String> {
        if let Some(n) = self.nice.filter(|n| !NICE_RANGE.contains(n)) {
            return Err(format!("nice {n} is outside -20 to 19"));
        }
        if let Some(m) = self.memory_max.filter(|m| *m < MIN_MEMORY_MAX) {
            return Err(format!("memory max {m} bytes is below the 1 MiB a process needs"));
        }
        if let Some(w) = self.cpu_weight.filter(|w| !CPU_WEIGHT_RANGE.contains(w)) {
            return Err(format!("cpu weight {w} is outside 1 to 10000"));
        }
        Ok(())
    }

    /// These limits with `defaults` filling what they leave unset.
    pub fn over(self, defaults: &Limits) -> Limits {
        Limits {
            nice: self.nice.or(defaults.nice),
            ionice: self.ionice.or(defaults.ionice),
            memory_max: self.memory_max.or(defaults.memory_max),
            cpu_weight: self.cpu_weight.or(defaults.cpu_weight),
        }
    }

    /// Nothing set.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// Whether any limit needs a cgroup (memory, CPU weight).
    pub fn needs_cgroup(&self) -> bool {
        self.memory_max.is_some() || self.cpu_weight.is_some()
    }

    /// Writes these limits into a payload (`limits`, removed when empty).
    pub fn write_into(&self, payload: &mut serde_json::Value) {
        if let serde_json::Value::Object(map) = payload {
            if self.is_empty() {
                map.remove("limits");
            } else if let Ok(v) = serde_json::to_value(self) {
                map.insert("limits".to_owned(), v);
            }
        }
    }
}

impl fmt::Display for Limits {
    /// `nice 10, ionice idle, memory-max 50 MiB, cpu-weight 50`; `none`
    /// when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(n) = self.nice {
            parts.push(format!("nice {n}"));
        }
        if let Some(c) = self.ionice {
            parts.push(format!("ionice {c}"));
        }
        if let Some(m) = self.memory_max {
            parts.push(format!("memory-max {}", format_size(m)));
        }
        if let Some(w) = self.cpu_weight {
            parts.push(format!("cpu-weight {w}"));
        }
        if parts.is_empty() { f.write_str("none") } else { f.write_str(&parts.join(", ")) }
    }
}

/// A size as people write it: `512M`, `2G`, `1.5G`, `512MiB`, `100000`
/// (bytes). Suffixes are powers of 1024, as systemd's `MemoryMax=` reads
/// them (`K`, `M`, `G`, `T`, with or without `iB`/`B`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || format!("size `{s}`: expected bytes or a number with K, M, G or T (e.g. 512M)");
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad()),
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// A size for people: `512 MiB`, `2 GiB`, `1.5 GiB`, `1000 bytes`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in UNITS {
        let size = 1u64 << shift;
        if bytes >= size {
            if bytes % size == 0 {
                return format!("{} {unit}", bytes >> shift);
            }
            let value = bytes as f64 / size as f64;
            return format!("{value:.1} {unit}");
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn capture_takes_the_allowlist_and_named_variables_only() {
        let env = vars(&[
            ("PATH", "/venv/bin:/usr/bin"),
            ("VIRTUAL_ENV", "/venv"),
            ("LC_ALL", "C.UTF-8"),
            ("CONDA_PREFIX", "/conda"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("EDITOR", "vi"),
            ("SLOTHQUEUE_TOKEN", "t"),
            ("AWS_SECRET_ACCESS_KEY", "k"),
        ]);
        let c = capture(env.clone(), &[], false);
        let names: Vec<&str> = c.env.keys().map(String::as_str).collect();
        assert_eq!(names, ["CONDA_PREFIX", "LC_ALL", "PATH", "VIRTUAL_ENV"]);
        let c = capture(env.clone(), &["GITHUB_TOKEN".to_owned(), "NOPE".to_owned()], false);
        assert_eq!(c.env.get("GITHUB_TOKEN").map(String::as_str), Some("ghp_x"));
        assert_eq!(c.missing, ["NOPE"]);
        let c = capture(env, &[], true);
        assert!(c.env.contains_key("EDITOR"));
        assert!(!c.env.contains_key("GITHUB_TOKEN"));
        assert!(!c.env.contains_key("SLOTHQUEUE_TOKEN"));
        assert_eq!(c.secrets_left_out, ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"]);
    }

    #[test]
    fn secret_names_are_recognised_and_masked() {
        for name in ["GITHUB_TOKEN", "db_password", "AWS_KEY", "OPENAI_API_KEY", "NPM_AUTH"] {
            assert!(looks_secret(name), "{name}");
        }
        for name in ["PATH", "KEYBOARD", "HOME", "MONKEY"] {
            assert!(!looks_secret(name), "{name}");
        }
        let p = serde_json::json!({"command": "x", "env": {"API_TOKEN": "abc", "PATH": "/bin"}});
        let m = masked(&p);
        assert_eq!(m["env"]["API_TOKEN"], MASK);
        assert_eq!(m["env"]["PATH"], "/bin");
        assert_eq!(secret_names(&p), ["API_TOKEN"]);
    }

    /// Only a shell job's environment is ours to mask or mark.
    #[test]
    fn only_a_shell_jobs_payload_is_masked_or_marked() {
        let policy = crate::policy::Policy::default();
        let now = crate::time::Timestamp::from_millis(0);
        let payload = serde_json::json!({"command": "x", "env": {"API_TOKEN": "abc"}});
        let shell = crate::job::NewJob::new(SHELL_KIND, payload.clone());
        let shell = crate::machine::create(1, &shell, &[], now, &policy).job;
        assert_eq!(masked_payload(&shell)["env"]["API_TOKEN"], MASK);
        assert_eq!(marked_secrets(&shell), ["API_TOKEN"]);
        let handler = crate::job::NewJob::new("download", payload.clone());
        let handler = crate::machine::create(2, &handler, &[], now, &policy).job;
        assert_eq!(masked_payload(&handler), payload);
        assert!(marked_secrets(&handler).is_empty());
    }

    /// Issue 31, finding 2: direnv's `DIRENV_DIFF` packs every value an
    /// `.envrc` exported, secrets included; no tool's bookkeeping is
    /// recorded unless named, and a named one is masked whole.
    #[test]
    fn another_tools_bookkeeping_is_never_recorded_unless_named() {
        let env = vars(&[
            ("PATH", "/bin"),
            ("DIRENV_DIFF", "eJzEkM1u2zAQhN9lz4t"),
            ("DIRENV_WATCHES", "eJyszkFqwzAQheG7zNoHSJFO"),
            ("DIRENV_DIR", "-/home/ana/app"),
            ("__MISE_DIFF", "eAFrYA"),
            ("CONDA_BACKUP_CC", "gcc"),
            ("CONDA_PREFIX", "/conda"),
        ]);
        for all in [false, true] {
            let c = capture(env.clone(), &[], all);
            let names: Vec<&str> = c.env.keys().map(String::as_str).collect();
            assert_eq!(names, ["CONDA_PREFIX", "PATH"], "all: {all}");
        }
        let c = capture(env.clone(), &[], true);
        let left =
            ["CONDA_BACKUP_CC", "DIRENV_DIFF", "DIRENV_DIR", "DIRENV_WATCHES", "__MISE_DIFF"];
        assert_eq!(c.bookkeeping_left_out, left);
        let c = capture(env, &["DIRENV_DIFF".to_owned()], false);
        assert_eq!(c.env["DIRENV_DIFF"], "eJzEkM1u2zAQhN9lz4t", "named, recorded");
        let p = serde_json::json!({"command": "x", "env": c.env});
        assert_eq!(masked(&p)["env"]["DIRENV_DIFF"], MASK);
        assert_eq!(secret_names(&p), ["DIRENV_DIFF"]);
    }

    /// Issue 31, finding 9: a URL's password is a secret whatever the
    /// variable's name.
    #[test]
    fn passwords_inside_values_are_masked() {
        let cases = [
            ("postgres://app:PASSWORD@db/app", "postgres://app:<secret>@db/app"),
            ("redis://:PASSWORD@cache:6379/0", "redis://:<secret>@cache:6379/0"),
            ("https://KEY@o1.ingest.sentry.io/2", "https://<secret>@o1.ingest.sentry.io/2"),
            ("http://u:p@proxy:3128", "http://u:<secret>@proxy:3128"),
            ("u:p@proxy:3128", "u:<secret>@proxy:3128"),
            ("mysql://u:p@ss:w@db/x?ssl=1", "mysql://u:<secret>@db/x?ssl=1"),
            ("redis://a:p@h1,redis://b:q@h2", "redis://a:<secret>@h1,redis://b:<secret>@h2"),
            ("--db postgres://u:p@h/d --x", "--db postgres://u:<secret>@h/d --x"),
            ("postgres://h/d?user=u&password=p", "postgres://h/d?user=u&password=<secret>"),
            ("https://h/f?X-Amz-Signature=ab&a=1", "https://h/f?X-Amz-Signature=<secret>&a=1"),
            ("https://h/x?key=AIza#top", "https://h/x?key=<secret>#top"),
        ];
        for (value, shown) in cases {
            assert_eq!(mask_value(value), shown, "{value}");
            assert!(holds_secret("DATABASE_URL", value), "{value}");
        }
        for plain in [
            "/usr/bin:/bin",
            "https://example.com/a@b/c",
            "git@github.com:org/repo.git",
            "ana@example.com",
            "https://registry.npmjs.org/@babel/core",
            "postgres://app@db/app?sslmode=require",
            "",
        ] {
            let expect = if plain.starts_with("postgres://app@") {
                "postgres://<secret>@db/app?sslmode=require".to_owned()
            } else {
                plain.to_owned()
            };
            assert_eq!(mask_value(plain), expect, "{plain}");
        }
        let env = vars(&[
            ("DATABASE_URL", "postgres://app:PASSWORD@db/app"),
            ("https_proxy", "http://u:p@proxy:3128"),
            ("EDITOR", "vi"),
        ]);
        let c = capture(env.clone(), &[], true);
        assert_eq!(c.env.keys().collect::<Vec<_>>(), ["EDITOR"]);
        assert_eq!(c.secret_values_left_out, ["DATABASE_URL", "https_proxy"]);
        let c = capture(env, &["DATABASE_URL".to_owned()], false);
        let p = serde_json::json!({"command": "x", "env": c.env});
        assert_eq!(masked(&p)["env"]["DATABASE_URL"], "postgres://app:<secret>@db/app");
        assert_eq!(secret_names(&p), ["DATABASE_URL"]);
    }

    #[test]
    fn limits_read_check_and_layer() {
        let p = serde_json::json!({"limits": {"nice": 5, "ionice": "best-effort:3"}});
        let l = Limits::of(&p).unwrap();
        assert_eq!(l.ionice, Some(IoClass::BestEffort(Some(3))));
        let d = Limits { nice: Some(10), memory_max: Some(1 << 30), ..Limits::default() };
        let both = l.over(&d);
        assert_eq!((both.nice, both.memory_max), (Some(5), Some(1 << 30)));
        assert_eq!(both.to_string(), "nice 5, ionice best-effort:3, memory-max 1 GiB");
        assert!(Limits::of(&serde_json::json!({"limits": {"nice": 40}})).is_err());
        assert!(Limits::of(&serde_json::json!({"limits": {"ionice": "rt"}})).is_err());
        assert!(Limits::of(&serde_json::json!({"limits": {"bogus": 1}})).is_err());
        assert_eq!(Limits::of(&serde_json::json!({})).unwrap(), Limits::default());
    }

    #[test]
    fn sizes_parse_in_powers_of_1024_and_print_back() {
        assert_eq!(parse_size("50M").unwrap(), 50 << 20);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
        assert_eq!(format_size(512 << 20), "512 MiB");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(1000), "1000 bytes");
    }

    #[test]
    fn env_mode_reads_exact_inherit_and_refuses_others() {
        assert_eq!(EnvMode::of(&serde_json::json!({})).unwrap(), EnvMode::Inherit);
        assert_eq!(EnvMode::of(&serde_json::json!({"env_mode": "exact"})).unwrap(), EnvMode::Exact);
        assert!(EnvMode::of(&serde_json::json!({"env_mode": 3})).is_err());
    }
}
