//! The pieces every route's OpenAPI operation object is written with: a
//! JSON answer, the error answers, the id parameter, the name rule. A
//! leaf of its own, so that each room (`jobs`, `enqueue`, `lanes`, …)
//! writes its operations with them and `openapi` assembles the rooms'
//! schemas, without the two importing each other.

use serde_json::{Value, json};
use slothqueue_core::machine;

pub(super) fn ok_json(description: &str, schema: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": format!("#/components/schemas/{schema}") } } }
    })
}

pub(super) fn errors(codes: &[&str]) -> serde_json::Map<String, Value> {
    codes
        .iter()
        .map(|c| ((*c).to_owned(), json!({ "$ref": "#/components/responses/Error" })))
        .collect()
}

pub(super) fn responses(ok: &[(&str, Value)], codes: &[&str]) -> Value {
    let mut map = errors(codes);
    for (code, v) in ok {
        map.insert((*code).to_owned(), v.clone());
    }
    Value::Object(map)
}

pub(super) fn id_param() -> Value {
    json!({
        "name": "id", "in": "path", "required": true,
        "schema": { "type": "integer", "minimum": 1, "format": "int64" }
    })
}

/// What a route behind the token can answer besides its own results:
/// malformed headers, no token, a foreign host, a wrong method, a declared
/// body too large or not JSON, a busy queue.
pub(super) const AUTHED: &[&str] = &["400", "401", "403", "405", "413", "415", "503"];

/// The I/O classes a job's `limits.ionice` may name (`shell::Limits`).
pub(super) const IONICE_PATTERN: &str = "^(idle|best-effort(:[0-7])?)$";

/// The rule of a queue or kind name (`machine::is_plain_name`).
pub(super) const PLAIN_NAME: &str = "^[A-Za-z0-9_-][A-Za-z0-9._-]*$";

pub(super) fn plain_name(description: &str) -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": machine::MAX_NAME_LEN, "pattern": PLAIN_NAME, "description": description })
}
