//! The routes that add jobs: `POST /api/tasks/enqueue` and its batch
//! form. The body ([`EnqueueRequest`]) is the one input shape of a new job
//! over HTTP; a schedule's job is read with it too
//! (`super::schedules`), so both take the same fields with the same
//! defaults and the same units.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};
use slothqueue_core::{
    DEFAULT_MAX_RUNTIME, DEFAULT_QUEUE, NewJob, Parent, Pushed, SHELL_KIND, machine,
};

use super::doc::{IONICE_PATTERN, ok_json, plain_name, responses};
use super::{api_words, bad, present, refusal};
use crate::extract::JsonBody;
use crate::mask;
use crate::{AppState, HttpError};

/// The most jobs one batch enqueue may hold (the body limit bounds it too).
pub(super) const MAX_BATCH: usize = 10_000;

/// The body of `POST /api/tasks/enqueue`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EnqueueRequest {
    kind: String,
    payload: Value,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    priority: Option<i32>,
    #[serde(default)]
    scheduled_for: Option<String>,
    #[serde(default)]
    max_attempts: Option<u32>,
    /// Absent: [`DEFAULT_MAX_RUNTIME`]; `null`: unlimited; a number:
    /// whole milliseconds, as every other duration and every answer has it.
    #[serde(default, deserialize_with = "present")]
    max_runtime: Option<Option<f64>>,
    /// The old form, in seconds (`2.5`), which this body took before it
    /// took milliseconds like the rest of the API: still accepted, not with
    /// `max_runtime`, and answered with a deprecation ([`DEPRECATED_SECS`]).
    #[serde(default, deserialize_with = "present")]
    max_runtime_secs: Option<Option<f64>>,
    #[serde(default)]
    queue: Option<String>,
    /// Parents: numbers are job ids, strings idempotency keys.
    #[serde(default)]
    after: Option<Vec<Value>>,
    /// The GPUs it needs (`{"count": 1, "memory": bytes}`).
    #[serde(default)]
    gpus: Option<slothqueue_core::GpuRequest>,
}

impl EnqueueRequest {
    pub(super) fn into_new_job(self, app: &AppState) -> Result<NewJob, HttpError> {
        let payload =
            if self.kind == SHELL_KIND { shell_payload(self.payload, app)? } else { self.payload };
        let mut new = NewJob::new(self.kind, payload);
        new.queue = self.queue.unwrap_or_else(|| DEFAULT_QUEUE.to_owned());
        new.priority = self.priority.unwrap_or(0);
        new.max_attempts = self.max_attempts;
        new.idempotency_key = self.idempotency_key;
        new.gpus = self.gpus;
        new.max_runtime = match (self.max_runtime, self.max_runtime_secs) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "give max_runtime (milliseconds) or max_runtime_secs (seconds, deprecated), not both",
                ));
            }
            (None, None) => Some(DEFAULT_MAX_RUNTIME),
            (Some(None), None) | (None, Some(None)) => None,
            (Some(Some(ms)), None) => Some(millis(ms)?),
            (None, Some(Some(secs))) => {
                Some(Duration::try_from_secs_f64(secs).ok().filter(|d| !d.is_zero()).ok_or_else(
                    || bad("max_runtime_secs must be a positive number of seconds or null"),
                )?)
            }
        };
        if let Some(at) = self.scheduled_for {
            let ts: jiff::Timestamp = at.parse().map_err(|e| {
                bad(format!(
                    "scheduled_for must be an rfc 3339 timestamp such as 2030-01-02T03:04:05Z, in the years 1970 to 9999: {e}"
                ))
            })?;
            new.not_before = Some(slothqueue_core::Timestamp::from_millis(ts.as_millisecond()));
        }
        new.after = parents(self.after.unwrap_or_default())?;
        machine::validate(&new).map_err(|e| bad(api_words(&e.to_string())))?;
        check_cwd(&new.kind, &new.payload)?;
        Ok(new)
    }
}

/// What an answer to a body in the old form says beside it: the
/// `Deprecation` header, and a `Warning` naming the field to use instead.
pub(super) const DEPRECATED_SECS: &str =
    "299 - \"max_runtime_secs (seconds) is deprecated: give max_runtime in milliseconds\"";

impl EnqueueRequest {
    /// Whether the body gives its runtime in the old seconds form.
    pub(super) fn in_seconds(&self) -> bool {
        self.max_runtime_secs.is_some()
    }
}

/// The headers of an answer to `requests`: a deprecation when one of them
/// used the old seconds form.
fn deprecation<'a>(requests: impl IntoIterator<Item = &'a EnqueueRequest>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if requests.into_iter().any(EnqueueRequest::in_seconds) {
        headers.insert("deprecation", HeaderValue::from_static("true"));
        headers.insert(header::WARNING, HeaderValue::from_static(DEPRECATED_SECS));
    }
    headers
}

/// `max_runtime`: whole milliseconds, at least 1 (the core bounds it
/// above, at 100 years).
fn millis(ms: f64) -> Result<Duration, HttpError> {
    if ms.fract() != 0.0 || !(1.0..=1e15).contains(&ms) {
        return Err(bad(
            "max_runtime must be a positive whole number of milliseconds or null (max_runtime_secs takes seconds)",
        ));
    }
    Ok(Duration::from_millis(ms as u64))
}

/// `after` as the core takes it: a number is a job id, a string a key.
pub(super) fn parents(after: Vec<Value>) -> Result<Vec<Parent>, HttpError> {
    after
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Number(n) => {
                crate::numbers::whole(&n).and_then(|id| i64::try_from(id).ok()).map(Parent::Id)
            }
            .ok_or_else(|| {
                bad(format!("after[{i}]: {n} is not a job id (a positive integer)"))
            }),
            Value::String(key) => Ok(Parent::Key(key)),
            other => Err(bad(format!(
                "after[{i}]: expected a job id (a number) or an idempotency key (a string), got {other}"
            ))),
        })
        .collect()
}

/// A shell job's `cwd` names a directory that exists here, by the
/// runner's rule ([`slothqueue_runner::exec::working_dir_exists`]): a
/// typo is refused when the job is given, not found when it first runs.
/// 409: the body is well formed, the machine lacks the directory (the
/// same body passes once it is made).
pub(super) fn check_cwd(kind: &str, payload: &Value) -> Result<(), HttpError> {
    let cwd = payload.get("cwd").and_then(Value::as_str);
    match cwd {
        // A relative one is refused by `machine::validate` (absolute only).
        Some(dir)
            if kind == SHELL_KIND
                && dir.starts_with('/')
                && !slothqueue_runner::exec::working_dir_exists(dir) =>
        {
            Err(HttpError::Conflict(format!(
                "cwd {dir} is not a directory on this machine: a shell job runs in an existing directory"
            )))
        }
        _ => Ok(()),
    }
}

/// A shell payload as the runner expects it: `command`, `cwd` (the server's
/// working directory unless given, recorded now as `add` does) and `env`.
pub(super) fn shell_payload(payload: Value, app: &AppState) -> Result<Value, HttpError> {
    let Value::Object(mut map) = payload else {
        return Err(bad("a shell job needs a payload object with a string `command`"));
    };
    // `env_mode` and `limits` are checked by `machine::validate` with the
    // rest of the job. Without `"env_mode": "exact"` the job runs with the
    // runner's environment under `env`: the API records nothing of the
    // server's own.
    if let Some(key) = map
        .keys()
        .find(|k| !matches!(k.as_str(), "command" | "cwd" | "env" | "env_mode" | "limits"))
    {
        return Err(bad(format!(
            "unknown field `{key}` in the shell payload, expected `command`, `cwd`, `env`, `env_mode` or `limits`"
        )));
    }
    match map.get("cwd") {
        // A given one is checked by `machine::validate` (absolute, no NUL).
        Some(_) => {}
        None => {
            let cwd = app.api.default_cwd.as_ref().ok_or_else(|| {
                bad("the server's working directory is unknown: give the payload a `cwd`")
            })?;
            let cwd = cwd
                .to_str()
                .ok_or_else(|| bad("the server's working directory is not utf-8: give a `cwd`"))?;
            map.insert("cwd".to_owned(), Value::String(cwd.to_owned()));
        }
    }
    // The limits are integers, read from the payload by the core: an
    // integral float is one there too (`numbers`).
    if let Some(Value::Object(limits)) = map.get_mut("limits") {
        for value in limits.values_mut() {
            if let Value::Number(n) = value
                && let Some(whole) = crate::numbers::whole(n)
            {
                *value = crate::numbers::integer_value(whole);
            }
        }
    }
    match map.get("env") {
        None => {
            map.insert("env".to_owned(), json!({}));
        }
        Some(Value::Object(env)) if env.values().all(Value::is_string) => {}
        Some(_) => {
            return Err(bad("the shell payload's `env` must be an object of string values"));
        }
    }
    Ok(Value::Object(map))
}

pub(super) async fn enqueue(
    State(app): State<AppState>,
    JsonBody(req): JsonBody<EnqueueRequest>,
) -> Result<(StatusCode, HeaderMap, Json<Pushed>), HttpError> {
    let headers = deprecation([&req]);
    let new = req.into_new_job(&app)?;
    let pushed = app.store.push(new, app.api.clock.now()).await.map_err(refusal)?;
    if pushed.created {
        app.api.wake_worker();
    }
    let status = if pushed.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, headers, Json(mask::pushed(pushed))))
}

/// Many jobs in one transaction (`push_many`): all or none. A later job
/// may name an earlier one's key in `after`.
pub(super) async fn enqueue_batch(
    State(app): State<AppState>,
    JsonBody(reqs): JsonBody<Vec<EnqueueRequest>>,
) -> Result<(StatusCode, HeaderMap, Json<Vec<Pushed>>), HttpError> {
    if reqs.len() > MAX_BATCH {
        return Err(bad(format!(
            "a batch holds at most {MAX_BATCH} jobs, this one {}: send it in parts",
            reqs.len()
        )));
    }
    let headers = deprecation(&reqs);
    let jobs = reqs
        .into_iter()
        .enumerate()
        .map(|(index, req)| {
            req.into_new_job(&app).map_err(|e| HttpError::InBatch { index, error: Box::new(e) })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pushed = app.store.push_many(jobs, app.api.clock.now()).await.map_err(refusal)?;
    let created = pushed.iter().any(|p| p.created);
    if created {
        app.api.wake_worker();
    }
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, headers, Json(pushed.into_iter().map(mask::pushed).collect())))
}

pub(super) fn op_enqueue() -> Value {
    json!({
        "operationId": "enqueue",
        "summary": "add a job; with an idempotency key, the same payload is deduplicated and a different one supersedes a pending job",
        "requestBody": {
            "required": true,
            "content": { "application/json": { "schema": { "$ref": "#/components/schemas/EnqueueRequest" } } }
        },
        "responses": responses(
            &[
                ("201", ok_json("a new job was created", "EnqueueResponse")),
                ("200", ok_json("an identical job with this idempotency key already exists", "EnqueueResponse")),
            ],
            &["400", "401", "403", "405", "408", "409", "413", "415", "503"],
        )
    })
}

pub(super) fn op_enqueue_batch() -> Value {
    json!({
        "operationId": "enqueueBatch",
        "summary": "add many jobs in one transaction, all or none; a job's `after` may name a job earlier in the batch by its idempotency key",
        "requestBody": {
            "required": true,
            "content": { "application/json": { "schema": {
                "type": "array", "maxItems": MAX_BATCH,
                "items": { "$ref": "#/components/schemas/EnqueueRequest" }
            } } }
        },
        "responses": responses(
            &[
                ("201", json!({
                    "description": "the batch was written (at least one job created); one answer per job, in order",
                    "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/EnqueueResponse" } } } }
                })),
                ("200", json!({
                    "description": "every job already existed with its idempotency key: nothing was written",
                    "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/EnqueueResponse" } } } }
                })),
                ("400", json!({
                    "description": "the batch was refused and nothing was written; a refused job is named by its `index` (from 0)",
                    "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
                })),
            ],
            &["401", "403", "405", "408", "409", "413", "415", "503"],
        )
    })
}

/// How deep [`json_values`] follows a payload's arrays and objects.
const JSON_DEPTH: usize = 4;

/// `JsonValue`, a payload: any JSON whose integers fit 64 bits, as the
/// body's reader takes it (`numbers::check_big_integers`). Written as one
/// schema per level, `JsonValue`, `JsonValue1`, … to [`JSON_DEPTH`], below
/// which anything goes: a schema that refers to itself is beyond some
/// generators (schemathesis' coverage phase overflows on it), and
/// payloads nest a few levels at most.
fn json_values() -> serde_json::Map<String, Value> {
    let name = |level: usize| {
        if level == 0 { "JsonValue".to_owned() } else { format!("JsonValue{level}") }
    };
    (0..JSON_DEPTH)
        .map(|level| {
            let inner = if level + 1 == JSON_DEPTH {
                json!({})
            } else {
                json!({ "$ref": format!("#/components/schemas/{}", name(level + 1)) })
            };
            let schema = json!({
                "description": "any JSON value whose whole numbers are from -2^63 to 2^64-1: a longer one would be read as a double and lose digits, so it is refused (send it as a string), and so is a double past 2^64 (`1e30`: every double past 2^53 is whole); a number with a fraction is a double, as JSON readers take it",
                "anyOf": [
                    { "type": ["string", "boolean", "null"] },
                    { "type": "number", "not": { "type": "integer" } },
                    { "type": "integer", "minimum": i64::MIN, "maximum": u64::MAX },
                    { "type": "array", "items": inner },
                    { "type": "object", "additionalProperties": inner }
                ]
            });
            (name(level), schema)
        })
        .collect()
}

/// An idempotency key's characters: printable (no C0 or C1 control).
const KEY_PATTERN: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$";

/// The schemas of the enqueue body and answer.
/// A shell command as every body takes it (a new job's, an edit's, a
/// clone's): what `machine::validate` accepts, so a document-valid command
/// is never refused.
pub(super) fn shell_command(what: &str) -> Value {
    json!({
        "type": "string", "minLength": 1, "maxLength": machine::MAX_ARG_LEN - 1,
        "pattern": "^[^\\u0000]*\\S[^\\u0000]*$",
        "description": format!("{what}; not blank, no NUL, under Linux's 128 KiB argument limit (in bytes)")
    })
}

pub(super) fn schemas() -> Value {
    let mut all = json!({
        "EnqueueRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["kind", "payload"],
            "not": { "required": ["max_runtime", "max_runtime_secs"], "description": "max_runtime and max_runtime_secs are two forms of one limit: give one" },
            "if": { "required": ["kind"], "properties": { "kind": { "const": "shell" } } },
            "then": { "properties": { "payload": { "$ref": "#/components/schemas/ShellPayload" } } },
            "properties": {
                "kind": plain_name("`shell` for a command (its payload is a ShellPayload); any other name runs the handler of that name"),
                "payload": { "$ref": "#/components/schemas/JsonValue", "description": "any JSON whose integers fit 64 bits (JsonValue); for kind `shell` a ShellPayload" },
                "idempotency_key": {
                    "type": ["string", "null"], "minLength": 1, "maxLength": machine::MAX_NAME_LEN,
                    "pattern": KEY_PATTERN,
                    "description": "1 to 128 bytes of printable characters"
                },
                "priority": { "type": ["integer", "null"], "format": "int32", "default": 0 },
                "scheduled_for": { "type": ["string", "null"], "format": "date-time", "pattern": "^(19[7-9][0-9]|[2-9][0-9]{3})-", "description": "RFC 3339, in the years 1970 to 9999 (UTC); the job is not run before" },
                "max_attempts": { "type": ["integer", "null"], "minimum": 1, "maximum": machine::MAX_ATTEMPTS, "default": 3 },
                "max_runtime": {
                    "type": ["integer", "null"],
                    "minimum": machine::MIN_MAX_RUNTIME.as_millis() as u64,
                    "maximum": machine::MAX_MAX_RUNTIME.as_millis() as u64,
                    "default": DEFAULT_MAX_RUNTIME.as_millis() as u64,
                    "description": "milliseconds, as in every answer (at least 1, at most 100 years); null for no limit"
                },
                "max_runtime_secs": {
                    "type": ["number", "null"],
                    "deprecated": true,
                    "minimum": machine::MIN_MAX_RUNTIME.as_secs_f64(),
                    "maximum": machine::MAX_MAX_RUNTIME.as_secs(),
                    "description": "deprecated: the old form of max_runtime, in seconds (at least 0.001); not with max_runtime; an answer to a body using it carries `Deprecation: true` and a `Warning`"
                },
                "queue": {
                    "oneOf": [plain_name("a queue"), { "type": "null" }],
                    "default": DEFAULT_QUEUE
                },
                "after": {
                    "type": ["array", "null"],
                    "maxItems": machine::MAX_PARENTS,
                    "items": { "oneOf": [
                        { "type": "integer", "format": "int64", "minimum": 1, "description": "a job id" },
                        { "type": "string", "minLength": 1, "maxLength": machine::MAX_NAME_LEN, "pattern": KEY_PATTERN, "description": "the idempotency key of a job" }
                    ] },
                    "description": "the jobs this one runs after: it is not run until each is done, and is cancelled when one fails or is cancelled; each must exist (in a batch: earlier in it)"
                },
                "gpus": {
                    "oneOf": [{ "$ref": "#/components/schemas/GpuRequest" }, { "type": "null" }],
                    "description": "start only with this many free GPUs on the runner's host, held for the whole attempt (docs/gpus.md)"
                }
            }
        },
        "GpuRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["count"],
            "properties": {
                "count": { "type": "integer", "minimum": 1, "maximum": slothqueue_core::gpu::MAX_GPUS },
                "memory": { "type": ["integer", "null"], "minimum": 1, "description": "bytes free needed on each GPU" }
            }
        },
        "ShellPayload": {
            "type": "object",
            "additionalProperties": false,
            "required": ["command"],
            "properties": {
                "command": shell_command("run with `sh -c`"),
                "cwd": { "type": "string", "pattern": "^/[^\\u0000]*$", "description": "an absolute path; the server's working directory when absent" },
                "env": {
                    "type": "object",
                    "propertyNames": { "minLength": 1, "pattern": "^[^=\\u0000]+$" },
                    "additionalProperties": { "type": "string", "pattern": "^[^\\u0000]*$" },
                    "description": "variables for the command, laid over the runner's environment, or with `env_mode` exact the whole environment (plus the job's SLOTHQUEUE_*); names non-empty without `=` or NUL; secret-looking ones are masked in answers unless `show_secrets=true`"
                },
                "env_mode": {
                    "type": "string", "enum": ["inherit", "exact"], "default": "inherit",
                    "description": "`exact`: the job gets exactly `env` (what `slothqueue add` records); `inherit`: the runner's environment with `env` over it"
                },
                "limits": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "nice": { "type": "integer", "minimum": -20, "maximum": 19 },
                        "ionice": { "type": "string", "pattern": IONICE_PATTERN },
                        "memory_max": { "type": "integer", "minimum": 1048576, "description": "bytes" },
                        "cpu_weight": { "type": "integer", "minimum": 1, "maximum": 10000 }
                    },
                    "description": "the job's own niceness, I/O class and ceilings; what it leaves out, the runner's defaults (docs/limits.md)"
                }
            }
        },
        "EnqueueResponse": {
            "type": "object",
            "properties": {
                "job": { "$ref": "#/components/schemas/Job" },
                "created": { "type": "boolean" },
                "superseded": { "type": ["integer", "null"], "description": "the id of the pending job this one replaced" }
            },
            "required": ["job", "created", "superseded"]
        }
    });
    if let Value::Object(all) = &mut all {
        all.extend(json_values());
    }
    all
}
