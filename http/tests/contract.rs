//! What issue 37 found where the API and its OpenAPI document disagreed
//! (schemathesis, an agent computing a long poll's wait, a payload with a
//! 30-digit id), each pinned: the answer and the document's word on it.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]

mod common;

use common::{Backend, Server, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

on_both_backends!(
    a_long_poll_waits_for_any_json_number_in_range,
    an_integral_float_is_an_integer_wherever_one_is_asked,
    a_payload_integer_past_64_bits_is_refused_not_rounded,
    a_cwd_that_is_no_directory_is_refused_at_enqueue,
    a_refusal_that_depends_on_the_queue_is_a_conflict,
    the_log_route_bounds_offset_and_limit,
    the_list_refuses_a_name_that_no_queue_can_have,
    an_edit_refuses_null_and_a_payload_with_its_parts,
    a_body_for_an_object_is_an_object,
    the_document_declares_what_the_parser_refuses,
);

/// Sends `text` as a JSON body, as written (no serde round trip).
async fn post_text(s: &Server, path: &str, text: &str) -> (StatusCode, Value) {
    let req = s
        .req(Method::POST, path)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(text.to_owned());
    s.send(req).await
}

fn handler_job() -> Value {
    json!({"kind": "resize", "payload": {}})
}

async fn a_long_poll_waits_for_any_json_number_in_range(backend: Backend) {
    let s = start(backend).await;
    let id = s.enqueue(handler_job()).await["job"]["id"].as_i64().unwrap();
    // What an agent computing `deadline - now` sends, and the exponent
    // forms a language prints; all short enough to keep the test quick.
    for wait in ["0.0012499479254102", "1e-3", "1E-2", "0", "2.5e-2", "1.1125369292536007e-308"] {
        let (status, body) = s.get(&format!("/api/tasks/outbox/{id}?wait={wait}")).await;
        assert_eq!(status, StatusCode::OK, "wait={wait}: {body}");
    }
    for wait in ["120.5", "1e3", "-1", "NaN", "inf", "+1", "0x10", "1.", ".5", "", "5s"] {
        let (status, body) = s.get(&format!("/api/tasks/outbox/{id}?wait={wait}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "wait={wait}: {body}");
        assert!(body["error"].as_str().unwrap().contains("from 0 to 120"), "{body}");
    }
    s.stop().await.unwrap();
}

async fn an_integral_float_is_an_integer_wherever_one_is_asked(backend: Backend) {
    let s = start(backend).await;
    // A body's integer field, a lane's limit (read by hand), a parent id,
    // a shell payload's limits (read by the core), query numbers.
    let parent = s.enqueue(handler_job()).await["job"]["id"].as_i64().unwrap();
    let job = s
        .enqueue(json!({"kind": "shell", "payload": {"command": "true", "cwd": "/",
                        "limits": {"nice": 5.0, "cpu_weight": 1e2}},
                        "priority": 2.0, "max_attempts": 3e0, "after": [parent as f64]}))
        .await;
    assert_eq!(job["job"]["priority"], 2, "{job}");
    assert_eq!(job["job"]["max_attempts"], 3, "{job}");
    assert_eq!(job["job"]["after"], json!([parent]), "{job}");
    assert_eq!(job["job"]["payload"]["limits"], json!({"nice": 5, "cpu_weight": 100}), "{job}");
    let (status, lane) = s.put("/api/queues/default/limit", &json!({"limit": 2.0})).await;
    assert_eq!((status, &lane["limit"]), (StatusCode::OK, &json!(2)), "{lane}");
    let (status, page) = s.get("/api/tasks/outbox?limit=1.0").await;
    assert_eq!((status, page["jobs"].as_array().unwrap().len()), (StatusCode::OK, 1), "{page}");
    let (status, log) = s.get(&format!("/api/tasks/outbox/{parent}/log?limit=1e1")).await;
    assert_eq!(status, StatusCode::OK, "{log}");
    // A handler's payload is any JSON: kept as sent.
    let kept = s.enqueue(json!({"kind": "resize", "payload": {"scale": 2.0}})).await;
    assert_eq!(kept["job"]["payload"]["scale"], json!(2.0), "{kept}");
    // A fraction is still refused, by name.
    for (body, field) in [
        (json!({"kind": "resize", "payload": {}, "priority": 2.5}), "priority"),
        (json!({"kind": "shell", "payload": {"command": "x", "limits": {"nice": 1.5}}}), "limits"),
    ] {
        let (status, answer) = s.post("/api/tasks/enqueue", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(answer["error"].as_str().unwrap().contains(field), "{answer}");
    }
    let (status, answer) = s.put("/api/queues/default/limit", &json!({"limit": 2.5})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    s.stop().await.unwrap();
}

async fn a_payload_integer_past_64_bits_is_refused_not_rounded(backend: Backend) {
    let s = start(backend).await;
    let (status, body) = post_text(
        &s,
        "/api/tasks/enqueue",
        r#"{"kind": "charge", "payload": {"account": 123456789012345678901234567890}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("the number 123456789012345678901234567890 is a whole number past 64 bits")
            && error.contains("send it as a string"),
        "{error}"
    );
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!(stats["pending"], 0, "nothing written: {stats}");
    // So is a double past 64 bits, whole as all of them are.
    let (status, body) =
        post_text(&s, "/api/tasks/enqueue", r#"{"kind": "charge", "payload": [1e30]}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // The edges of 64 bits are kept exactly, and so is the same number as a
    // string; a double with a fraction stays one.
    let (status, body) = post_text(
        &s,
        "/api/tasks/enqueue",
        r#"{"kind": "charge", "payload": {"max": 18446744073709551615, "min": -9223372036854775808,
            "account": "123456789012345678901234567890", "rate": 1.5e-3}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["job"]["id"].as_i64().unwrap();
    let (_, job) = s.get(&format!("/api/tasks/outbox/{id}")).await;
    assert_eq!(job["payload"]["max"], json!(u64::MAX), "{job}");
    assert_eq!(job["payload"]["min"], json!(i64::MIN), "{job}");
    assert_eq!(job["payload"]["account"], "123456789012345678901234567890", "{job}");
    assert_eq!(job["payload"]["rate"], json!(1.5e-3), "{job}");
    s.stop().await.unwrap();
}

async fn a_cwd_that_is_no_directory_is_refused_at_enqueue(backend: Backend) {
    let s = start(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let missing = dir.path().join("no-such-dir");
    for cwd in [&missing, &file] {
        let body = json!({"kind": "shell", "payload": {"command": "true", "cwd": cwd}});
        let (status, answer) = s.post("/api/tasks/enqueue", &body).await;
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(&format!("cwd {}", cwd.display())), "{error}");
        assert!(error.contains("not a directory"), "{error}");
    }
    let (_, stats) = s.get("/api/tasks/outbox/stats").await;
    assert_eq!(stats["pending"], 0, "{stats}");
    // An edit's whole payload, and a schedule's job, by the same rule.
    let ok = json!({"kind": "shell", "payload": {"command": "true", "cwd": dir.path()}});
    let id = s.enqueue(ok).await["job"]["id"].as_i64().unwrap();
    let edit = json!({"payload": {"command": "true", "cwd": missing}});
    let patch = s.req(Method::PATCH, &format!("/api/tasks/outbox/{id}")).json(&edit);
    let (status, answer) = s.send(patch).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let schedule = json!({"key": "k", "spec": {"every": 60},
                          "job": {"kind": "shell", "payload": {"command": "true", "cwd": missing}}});
    let (status, answer) = s.post("/api/schedules", &schedule).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    s.stop().await.unwrap();
}

async fn a_refusal_that_depends_on_the_queue_is_a_conflict(backend: Backend) {
    let s = start(backend).await;
    // A handler job's command: its kind, not the body, is at fault.
    let id = s.enqueue(handler_job()).await["job"]["id"].as_i64().unwrap();
    let patch =
        s.req(Method::PATCH, &format!("/api/tasks/outbox/{id}")).json(&json!({"command": "x"}));
    let (status, answer) = s.send(patch).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    // A shell job edited with a payload that is no shell payload.
    let shell = json!({"kind": "shell", "payload": {"command": "true", "cwd": "/"}});
    let shell = s.enqueue(shell).await["job"]["id"].as_i64().unwrap();
    let patch =
        s.req(Method::PATCH, &format!("/api/tasks/outbox/{shell}")).json(&json!({"payload": null}));
    let (status, answer) = s.send(patch).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    // A retry while a parent is cancelled.
    let parent = s.enqueue(handler_job()).await["job"]["id"].as_i64().unwrap();
    let child = json!({"kind": "resize", "payload": {}, "after": [parent]});
    let child = s.enqueue(child).await["job"]["id"].as_i64().unwrap();
    let (status, _) = s.post_empty(&format!("/api/tasks/outbox/{parent}/cancel")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, answer) = s.post_empty(&format!("/api/tasks/outbox/{child}/retry")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("retry #"), "{answer}");
    s.stop().await.unwrap();
}

async fn the_log_route_bounds_offset_and_limit(backend: Backend) {
    let s = start(backend).await;
    let id = s.enqueue(handler_job()).await["job"]["id"].as_i64().unwrap();
    for query in ["limit=0", "offset=9223372036854775808", "offset=-1", "limit=1048577"] {
        let (status, body) = s.get(&format!("/api/tasks/outbox/{id}/log?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }
    for query in ["limit=1", "offset=9223372036854775807", "offset=0&limit=1048576"] {
        let (status, body) = s.get(&format!("/api/tasks/outbox/{id}/log?{query}")).await;
        assert_eq!(status, StatusCode::OK, "{query}: {body}");
    }
    s.stop().await.unwrap();
}

async fn the_list_refuses_a_name_that_no_queue_can_have(backend: Backend) {
    let s = start(backend).await;
    for query in ["queue=%C3%97%C3%B8", "kind=.hidden", "queue=", "kind=a%20b"] {
        let (status, body) = s.get(&format!("/api/tasks/outbox?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }
    let (status, _) = s.get("/api/tasks/outbox?queue=media&kind=resize.v2").await;
    assert_eq!(status, StatusCode::OK);
    s.stop().await.unwrap();
}

async fn an_edit_refuses_null_and_a_payload_with_its_parts(backend: Backend) {
    let s = start(backend).await;
    let id = s.enqueue(handler_job()).await["job"]["id"].as_i64().unwrap();
    let path = format!("/api/tasks/outbox/{id}");
    for body in [
        json!({"queue": null}),
        json!({"priority": null}),
        json!({"not_before": 5, "delay": 5}),
        json!({"payload": {}, "env": {}}),
        json!({"payload": {}, "limits": {}}),
        json!({"delay": 9_223_372_036_854_775_808_u64}),
    ] {
        let (status, answer) = s.send(s.req(Method::PATCH, &path).json(&body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let clone = s.req(Method::POST, &format!("{path}/clone")).json(&body);
        let (status, answer) = s.send(clone).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "clone {body}: {answer}");
    }
    // `max_runtime` and `gpus` take null (no limit, none any more).
    let patch = s.req(Method::PATCH, &path).json(&json!({"max_runtime": null, "gpus": null}));
    let (status, answer) = s.send(patch).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    s.stop().await.unwrap();
}

async fn a_body_for_an_object_is_an_object(backend: Backend) {
    let s = start(backend).await;
    let id = s.enqueue(handler_job()).await["job"]["id"].as_i64().unwrap();
    for (method, path) in [
        (Method::PATCH, format!("/api/tasks/outbox/{id}")),
        (Method::POST, format!("/api/tasks/outbox/{id}/clone")),
        (Method::POST, "/api/clear".to_owned()),
        (Method::POST, "/api/tasks/enqueue".to_owned()),
    ] {
        let req = s.req(method.clone(), &path).json(&json!([null, null]));
        let (status, answer) = s.send(req).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains("sequence"), "{answer}");
    }
    s.stop().await.unwrap();
}

async fn the_document_declares_what_the_parser_refuses(backend: Backend) {
    let s = start(backend).await;
    let (_, doc) = s.get("/api/openapi.json").await;
    let schemas = &doc["components"]["schemas"];
    let param = |path: &str, method: &str, name: &str| {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["schema"]
            .clone()
    };
    let offset = param("/api/tasks/outbox/{id}/log", "get", "offset");
    assert_eq!(offset["maximum"], json!(i64::MAX), "{offset}");
    assert_eq!(param("/api/tasks/outbox/{id}/log", "get", "limit")["minimum"], 1);
    assert_eq!(param("/api/tasks/outbox/{id}", "get", "wait")["type"], "number");
    let ionice = &schemas["EditRequest"]["properties"]["limits"]["properties"]["ionice"];
    assert_eq!(
        ionice["pattern"],
        schemas["ShellPayload"]["properties"]["limits"]["properties"]["ionice"]["pattern"]
    );
    assert!(ionice["pattern"].is_string(), "{ionice}");
    // A clone's or an edit's command is refused blank as a new job's is
    // (schemathesis's stateful phase cloned with `"command": ""`).
    let command = &schemas["EditRequest"]["properties"]["command"];
    assert_eq!(command["minLength"], 1, "{command}");
    assert_eq!(command["pattern"], schemas["ShellPayload"]["properties"]["command"]["pattern"]);
    assert!(command["pattern"].is_string(), "{command}");
    let cron = &schemas["ScheduleRequest"]["properties"]["spec"]["oneOf"][0]["properties"]["cron"];
    assert_eq!(cron["minLength"], 1, "{cron}");
    // Every integer a request may carry has its bounds.
    let priority = &schemas["EditRequest"]["properties"]["priority"];
    assert_eq!(
        (priority["minimum"].clone(), priority["maximum"].clone()),
        (json!(i32::MIN), json!(i32::MAX))
    );
    assert_eq!(schemas["EditRequest"]["properties"]["delay"]["maximum"], json!(i64::MAX));
    // A payload's integers fit 64 bits, a new job's and an edit's alike
    // (schemathesis's stateful phase edited in `-2.39e301`).
    for request in ["EnqueueRequest", "EditRequest"] {
        assert_eq!(
            schemas[request]["properties"]["payload"]["$ref"], "#/components/schemas/JsonValue",
            "{request}"
        );
    }
    s.stop().await.unwrap();
}
