//! The schedule routes, against a served instance whose clock is a
//! `ManualClock` (no drain worker: ticks fire only when a test calls the
//! store's `fire_schedules`).

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use slothqueue_core::schedule::MAX_KEY_LEN;
use slothqueue_core::{Clock, ManualClock, Timestamp};

use crate::common::{Backend, Server, assert_documented, start_configured};

crate::on_both_backends!(
    stored_listed_paused_resumed_removed,
    intervals_and_the_earliest_next_fire,
    a_tick_shows_in_the_schedule_and_the_outbox,
    secrets_are_masked_unless_asked,
    bad_schedules_are_refused_and_nothing_is_stored,
    schedule_routes_are_guarded,
    answers_match_the_documented_schemas,
);

fn at(s: &str) -> Timestamp {
    Timestamp::from_millis(s.parse::<jiff::Timestamp>().unwrap().as_millisecond())
}

fn ms(s: &str) -> i64 {
    at(s).as_millis()
}

/// A server whose routes read `clock`, standing at 2026-12-01T00:00:00Z.
async fn start_at_t0(backend: Backend) -> (Server, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(at("2026-12-01T00:00:00Z")));
    let routes_clock: Arc<dyn Clock> = clock.clone();
    let s = start_configured(backend, |_, _| None, |state, _| state.with_clock(routes_clock)).await;
    (s, clock)
}

fn nightly() -> Value {
    json!({
        "key": "nightly",
        "spec": { "cron": "0 3 * * *" },
        "zone": "Europe/Berlin",
        "job": { "kind": "shell", "payload": { "command": "backup" } },
    })
}

fn with(mut v: Value, field: &str, value: Value) -> Value {
    v[field] = value;
    v
}

async fn put(s: &Server, body: &Value) -> (StatusCode, Value) {
    s.post("/api/schedules", body).await
}

async fn keys(s: &Server) -> Vec<String> {
    let (status, list) = s.get("/api/schedules").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap().to_owned())
        .collect()
}

async fn stored_listed_paused_resumed_removed(backend: Backend) {
    let (s, clock) = start_at_t0(backend).await;
    let (status, put1) = put(&s, &nightly()).await;
    assert_eq!(status, StatusCode::CREATED, "{put1}");
    assert_eq!(put1["created"], true);
    let sch = &put1["schedule"];
    assert_eq!(sch["key"], "nightly");
    assert_eq!(sch["spec"], json!({ "cron": "0 3 * * *" }));
    assert_eq!(sch["zone"], "Europe/Berlin");
    assert_eq!(sch["catch_up"], "once");
    assert_eq!(sch["overlap"], "skip");
    assert_eq!(sch["created_at"], ms("2026-12-01T00:00:00Z"));
    assert_eq!(sch["cursor"], ms("2026-12-01T00:00:00Z"));
    assert_eq!(sch["next_fire"], ms("2026-12-01T02:00:00Z"), "03:00 in Berlin is 02:00 UTC");
    assert_eq!(sch["next_fire_local"], "2026-12-01 03:00:00 CET");
    assert!(sch.get("paused").is_none() && sch.get("last_fire").is_none(), "{sch}");
    // The job is built as the enqueue route builds one.
    assert_eq!(sch["job"]["payload"]["cwd"], s.dir.path().to_str().unwrap());
    assert_eq!(sch["job"]["payload"]["env"], json!({}));
    assert_eq!(sch["job"]["max_runtime"], 300_000);
    assert_eq!(sch["job"]["queue"], "default");
    assert_eq!(sch["job"]["idempotency_key"], Value::Null);

    // The same definition again, later: nothing written.
    clock.advance(Duration::from_secs(60));
    let (status, put2) = put(&s, &nightly()).await;
    assert_eq!(status, StatusCode::OK, "{put2}");
    assert_eq!(put2["created"], false);
    assert_eq!(put2["schedule"], put1["schedule"]);
    // Another definition under the key is a conflict, and changes nothing.
    for other in [
        with(nightly(), "spec", json!({ "cron": "0 4 * * *" })),
        with(nightly(), "zone", json!("UTC")),
        with(nightly(), "overlap", json!("queue")),
        with(nightly(), "job", json!({ "kind": "shell", "payload": { "command": "restore" } })),
    ] {
        let (status, err) = put(&s, &other).await;
        assert_eq!(status, StatusCode::CONFLICT, "{other}: {err}");
        assert_eq!(
            err["error"],
            "schedule `nightly` exists with another definition (0 3 * * * in Europe/Berlin); remove it first (DELETE /api/schedules/nightly)"
        );
    }
    let (status, shown) = s.get("/api/schedules/nightly").await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown, put1["schedule"]);

    // Paused: no next fire; the first pause's stamp stays.
    clock.set(at("2026-12-01T01:00:00Z"));
    let (status, paused) = s.post_empty("/api/schedules/nightly/pause").await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(
        paused["paused"],
        json!({ "since": ms("2026-12-01T01:00:00Z"), "by": "http 127.0.0.1" })
    );
    assert_eq!(paused["next_fire"], Value::Null);
    assert_eq!(paused["next_fire_local"], Value::Null);
    clock.advance(Duration::from_secs(60));
    let (_, again) = s.post_empty("/api/schedules/nightly/pause").await;
    assert_eq!(again["paused"], paused["paused"]);
    let (_, list) = s.get("/api/schedules").await;
    assert_eq!(list["next_fire"], Value::Null, "a paused schedule fires never: {list}");

    // Resumed two days later: the slots passed while paused are not run.
    clock.set(at("2026-12-03T00:00:00Z"));
    let (status, resumed) = s.post_empty("/api/schedules/nightly/resume").await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert!(resumed.get("paused").is_none(), "{resumed}");
    assert_eq!(resumed["cursor"], ms("2026-12-03T00:00:00Z"));
    assert_eq!(resumed["next_fire"], ms("2026-12-03T02:00:00Z"));
    let (_, again) = s.post_empty("/api/schedules/nightly/resume").await;
    assert_eq!(again, resumed, "resuming a running schedule changes nothing");

    let (status, removed) = s.send(s.req(Method::DELETE, "/api/schedules/nightly")).await;
    assert_eq!(status, StatusCode::OK, "{removed}");
    assert_eq!(removed, json!({ "key": "nightly", "removed": true }));
    assert!(keys(&s).await.is_empty());
    for (method, path) in [
        (Method::GET, "/api/schedules/nightly"),
        (Method::DELETE, "/api/schedules/nightly"),
        (Method::POST, "/api/schedules/nightly/pause"),
        (Method::POST, "/api/schedules/nightly/resume"),
    ] {
        let (status, err) = s.send(s.req(method.clone(), path)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {err}");
        assert_eq!(err["error"], "no schedule `nightly`");
    }
    // Removed, the key takes another definition.
    let (status, _) = put(&s, &with(nightly(), "zone", json!("UTC"))).await;
    assert_eq!(status, StatusCode::CREATED);
    s.stop().await.unwrap();
}

async fn intervals_and_the_earliest_next_fire(backend: Backend) {
    let (s, _clock) = start_at_t0(backend).await;
    let often = json!({
        "key": "often",
        "spec": { "every": 90 },
        "catch_up": "none",
        "overlap": "queue",
        "job": { "kind": "report", "payload": { "x": 1 }, "priority": 3, "max_runtime": 2500, "queue": "slow" },
    });
    let (status, put1) = put(&s, &often).await;
    assert_eq!(status, StatusCode::CREATED, "{put1}");
    let sch = &put1["schedule"];
    assert_eq!(sch["spec"], json!({ "every": 90_000 }), "stored in milliseconds");
    assert_eq!(sch["zone"], "UTC", "the default zone");
    assert_eq!(sch["catch_up"], "none");
    assert_eq!(sch["overlap"], "queue");
    assert_eq!(sch["next_fire"], ms("2026-12-01T00:01:30Z"));
    assert_eq!(sch["next_fire_local"], "2026-12-01 00:01:30 UTC");
    assert_eq!(sch["job"]["payload"], json!({ "x": 1 }), "a handler's payload as given");
    assert_eq!(sch["job"]["max_runtime"], 2_500);
    assert_eq!(sch["job"]["queue"], "slow");
    assert_eq!(sch["job"]["priority"], 3);
    // A fraction of a second is kept in whole milliseconds, so the same
    // body twice is the same definition.
    let fine = json!({ "key": "fine", "spec": { "every": 1.0005 }, "job": { "kind": "report", "payload": {}, "max_runtime_secs": 0.0015 } });
    let (status, first) = put(&s, &fine).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["schedule"]["spec"], json!({ "every": 1_000 }));
    let (status, second) = put(&s, &fine).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(second["created"], false);

    let (status, _) = put(&s, &nightly()).await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, list) = s.get("/api/schedules").await;
    assert_eq!(keys(&s).await, ["fine", "nightly", "often"], "by key");
    assert_eq!(list["next_fire"], ms("2026-12-01T00:00:01Z"), "the earliest: fine's");
    s.stop().await.unwrap();
}

async fn a_tick_shows_in_the_schedule_and_the_outbox(backend: Backend) {
    let (s, clock) = start_at_t0(backend).await;
    let minutely = json!({
        "key": "minutely",
        "spec": { "every": 60 },
        "job": { "kind": "shell", "payload": { "command": "true" } },
    });
    let (status, _) = put(&s, &minutely).await;
    assert_eq!(status, StatusCode::CREATED);
    clock.advance(Duration::from_secs(61));
    let ticks = s.store.fire_schedules(clock.now()).await.unwrap();
    assert_eq!(ticks.ticks.len(), 1, "{ticks:?}");
    let (_, sch) = s.get("/api/schedules/minutely").await;
    let job = sch["last_fire"]["job"].as_i64().unwrap();
    assert_eq!(sch["last_fire"]["slot"], ms("2026-12-01T00:01:00Z"));
    assert_eq!(sch["last_fire_local"], "2026-12-01 00:01:00 UTC");
    assert_eq!(sch["cursor"], ms("2026-12-01T00:01:00Z"));
    assert_eq!(sch["next_fire"], ms("2026-12-01T00:02:00Z"));
    let (status, shown) = s.get(&format!("/api/tasks/outbox/{job}")).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown["idempotency_key"], "minutely@2026-12-01T00:01:00Z");
    assert_eq!(shown["payload"]["cwd"], s.dir.path().to_str().unwrap());
    let kinds: Vec<&str> =
        shown["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"scheduled"), "{kinds:?}");
    s.stop().await.unwrap();
}

async fn secrets_are_masked_unless_asked(backend: Backend) {
    let (s, _clock) = start_at_t0(backend).await;
    let deploy = json!({
        "key": "deploy",
        "spec": { "cron": "@daily" },
        "job": { "kind": "shell", "payload": {
            "command": "deploy", "env": { "API_TOKEN": "t0k3n", "PATH": "/bin" }, "env_mode": "exact",
        } },
    });
    let masked = json!({ "API_TOKEN": "<secret>", "PATH": "/bin" });
    let shown = json!({ "API_TOKEN": "t0k3n", "PATH": "/bin" });
    let (status, put1) = put(&s, &deploy).await;
    assert_eq!(status, StatusCode::CREATED, "{put1}");
    assert_eq!(put1["schedule"]["job"]["payload"]["env"], masked);
    let (_, again) = put(&s, &deploy).await;
    assert_eq!(again["schedule"]["job"]["payload"]["env"], masked);
    for path in ["/api/schedules/deploy", "/api/schedules/deploy?show_secrets=false"] {
        let (_, one) = s.get(path).await;
        assert_eq!(one["job"]["payload"]["env"], masked, "{path}");
    }
    let (_, one) = s.get("/api/schedules/deploy?show_secrets=true").await;
    assert_eq!(one["job"]["payload"]["env"], shown, "asked, and stored as given");
    let (_, list) = s.get("/api/schedules").await;
    assert_eq!(list["schedules"][0]["job"]["payload"]["env"], masked);
    let (_, list) = s.get("/api/schedules?show_secrets=true").await;
    assert_eq!(list["schedules"][0]["job"]["payload"]["env"], shown);
    for action in ["pause", "resume"] {
        let (_, changed) = s.post_empty(&format!("/api/schedules/deploy/{action}")).await;
        assert_eq!(changed["job"]["payload"]["env"], masked, "{action}");
    }
    let stored = s.store.schedules().await.unwrap();
    assert_eq!(stored[0].job.payload["env"], shown, "what is stored is untouched");

    // A handler's payload is its own: an `env` in it is not the shell's.
    let report = json!({
        "key": "report", "spec": { "cron": "@daily" },
        "job": { "kind": "report", "payload": { "env": { "API_TOKEN": "mine" } } },
    });
    let (_, put2) = put(&s, &report).await;
    assert_eq!(put2["schedule"]["job"]["payload"]["env"]["API_TOKEN"], "mine");

    for bad in ["yes", "1", ""] {
        for path in ["/api/schedules", "/api/schedules/deploy"] {
            let (status, err) = s.get(&format!("{path}?show_secrets={bad}")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {bad}: {err}");
            assert_eq!(err["error"], "show_secrets must be true or false");
        }
    }
    let (status, _) = s.get("/api/schedules?wait=1").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "unknown query parameters are refused");
    s.stop().await.unwrap();
}

async fn bad_schedules_are_refused_and_nothing_is_stored(backend: Backend) {
    let (s, _clock) = start_at_t0(backend).await;
    let job = || nightly()["job"].clone();
    let too_long = format!("must be 1 to {MAX_KEY_LEN} characters");
    let cases: Vec<(Value, &str)> = vec![
        (with(nightly(), "when", json!(1)), "unknown field `when`"),
        (json!({ "key": "k", "spec": { "cron": "@daily" } }), "missing field `job`"),
        (json!({ "key": "k", "job": job() }), "missing field `spec`"),
        (json!({ "spec": { "cron": "@daily" }, "job": job() }), "missing field `key`"),
        (with(nightly(), "spec", json!({ "cron": "0 3 * *" })), "expected five fields"),
        (with(nightly(), "spec", json!({ "cron": "0 0 30 2 *" })), "never fires"),
        (with(nightly(), "spec", json!({ "cron": "61 * * * *" })), "cron expression `61 * * * *`"),
        (with(nightly(), "spec", json!({ "every": 0.5 })), "an interval must be from 1s"),
        (with(nightly(), "spec", json!({ "every": 4e9 })), "an interval must be from 1s"),
        (with(nightly(), "spec", json!({ "every": -1 })), "spec.every must be a number of seconds"),
        (
            with(nightly(), "spec", json!({ "every": 1e300 })),
            // No body holds a whole number past 64 bits (http's `numbers`).
            "the number 1e+300 is a whole number past 64 bits",
        ),
        (with(nightly(), "spec", json!({ "every": "1m" })), "spec"),
        (with(nightly(), "spec", json!({ "hourly": true })), "unknown variant `hourly`"),
        (with(nightly(), "spec", json!("0 3 * * *")), "spec"),
        (with(nightly(), "zone", json!("Mars/Olympus")), "unknown time zone `Mars/Olympus`"),
        (with(nightly(), "catch_up", json!("sometimes")), "catch_up"),
        (with(nightly(), "overlap", json!("never")), "overlap"),
        (with(nightly(), "key", json!("bad key")), "schedule key `bad key`"),
        (with(nightly(), "key", json!("")), "schedule key ``"),
        (with(nightly(), "key", json!(".hidden")), "schedule key `.hidden`"),
        (with(nightly(), "key", json!("k".repeat(MAX_KEY_LEN + 1))), &too_long),
        (
            with(nightly(), "job", json!({ "kind": "shell", "payload": {} })),
            "job: a shell job needs a payload",
        ),
        (
            with(
                nightly(),
                "job",
                json!({ "kind": "shell", "payload": { "command": "x", "cwd": "rel" } }),
            ),
            "job: invalid job: the `cwd` `rel` is not an absolute path",
        ),
        (with(nightly(), "job", json!({ "kind": "report" })), "missing field `payload`"),
        (
            with(nightly(), "job", json!({ "kind": "report", "payload": {}, "max_runtime": 0 })),
            "job: max_runtime",
        ),
        (with(nightly(), "job", json!({ "kind": "a b", "payload": {} })), "job: "),
    ];
    for field in [
        json!({ "idempotency_key": "mine" }),
        json!({ "scheduled_for": "2030-01-02T03:04:05Z" }),
        json!({ "after": [1] }),
    ] {
        let mut j = job();
        j.as_object_mut().unwrap().extend(field.as_object().unwrap().clone());
        let (status, err) = put(&s, &with(nightly(), "job", j.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{j}: {err}");
        assert!(err["error"].as_str().unwrap().contains("each tick gives its own"), "{j}: {err}");
    }
    for (body, says) in &cases {
        let (status, err) = put(&s, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {err}");
        let text = err["error"].as_str().unwrap();
        assert!(text.contains(says), "{body}: {text:?} lacks {says:?}");
    }
    assert!(keys(&s).await.is_empty(), "nothing was stored");
    // A key in a path is checked as a schedule key is.
    let long = format!("/api/schedules/{}", "k".repeat(MAX_KEY_LEN + 1));
    for (method, path) in [
        (Method::GET, "/api/schedules/bad%20key"),
        (Method::GET, "/api/schedules/.hidden"),
        (Method::DELETE, long.as_str()),
        (Method::POST, "/api/schedules/a%0Ab/pause"),
    ] {
        let (status, err) = s.send(s.req(method.clone(), path)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {err}");
        assert!(err["error"].as_str().unwrap().starts_with("schedule key `"), "{err}");
    }
    for (method, path) in [
        (Method::PUT, "/api/schedules"),
        (Method::DELETE, "/api/schedules"),
        (Method::PATCH, "/api/schedules/nightly"),
        (Method::GET, "/api/schedules/nightly/pause"),
    ] {
        let (status, err) = s.send(s.req(method.clone(), path)).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {err}");
    }
    s.stop().await.unwrap();
}

async fn schedule_routes_are_guarded(backend: Backend) {
    let (s, _clock) = start_at_t0(backend).await;
    let url = |path: &str| format!("{}{path}", s.url);
    let routes = [
        (Method::GET, "/api/schedules"),
        (Method::POST, "/api/schedules"),
        (Method::GET, "/api/schedules/nightly"),
        (Method::DELETE, "/api/schedules/nightly"),
        (Method::POST, "/api/schedules/nightly/pause"),
        (Method::POST, "/api/schedules/nightly/resume"),
    ];
    for (method, path) in &routes {
        for req in [
            s.client.request(method.clone(), url(path)).json(&nightly()),
            s.client.request(method.clone(), url(path)).json(&nightly()).bearer_auth("wrong"),
        ] {
            let (status, err) = s.send(req).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {err}");
        }
        let (status, err) = s
            .send(s.req(method.clone(), path).header("host", "evil.example").json(&nightly()))
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {err}");
        let (status, err) = s
            .send(
                s.req(method.clone(), path)
                    .header("origin", "http://evil.example")
                    .json(&nightly()),
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {err}");
    }
    // A form or text post (no CORS preflight) is refused before it is read.
    let text = s
        .req(Method::POST, "/api/schedules")
        .header("content-type", "text/plain")
        .body(nightly().to_string());
    let (status, err) = s.send(text).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{err}");
    assert!(keys(&s).await.is_empty(), "nothing was stored past the guards");
    let (status, _) = put(&s, &nightly()).await;
    assert_eq!(status, StatusCode::CREATED, "the same body with the token and a loopback host");
    s.stop().await.unwrap();
}

async fn answers_match_the_documented_schemas(backend: Backend) {
    let (s, clock) = start_at_t0(backend).await;
    let (_, doc) = s.get("/api/openapi.json").await;
    let minutely = json!({
        "key": "minutely", "spec": { "every": 60 },
        "job": { "kind": "shell", "payload": { "command": "true" } },
    });
    let (_, put1) = put(&s, &minutely).await;
    assert_documented(&doc, "SchedulePut", &put1);
    // A schedule with everything: paused, fired, missed.
    clock.advance(Duration::from_secs(185));
    s.store.fire_schedules(clock.now()).await.unwrap();
    let (_, paused) = s.post_empty("/api/schedules/minutely/pause").await;
    for sch in [&put1["schedule"], &paused] {
        assert_documented(&doc, "Schedule", sch);
        assert_documented(&doc, "StoredJob", &sch["job"]);
    }
    assert!(paused["last_fire"].is_object() && paused["last_missed"].is_object(), "{paused}");
    let (_, list) = s.get("/api/schedules").await;
    assert_documented(&doc, "ScheduleList", &list);
    let (_, removed) = s.send(s.req(Method::DELETE, "/api/schedules/minutely")).await;
    assert_documented(&doc, "ScheduleRemoved", &removed);

    // The request schema: a schedule's job is the enqueue body's without
    // the fields each tick gives itself.
    let schemas = &doc["components"]["schemas"];
    let job = schemas["ScheduleJob"]["properties"].as_object().unwrap();
    let enqueue = schemas["EnqueueRequest"]["properties"].as_object().unwrap();
    let mut expected: Vec<&String> = enqueue
        .keys()
        .filter(|k| !["idempotency_key", "scheduled_for", "after"].contains(&k.as_str()))
        .collect();
    expected.sort();
    let mut got: Vec<&String> = job.keys().collect();
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(schemas["ScheduleJob"]["additionalProperties"], false);
    let req = &schemas["ScheduleRequest"];
    assert_eq!(req["required"], json!(["key", "spec", "job"]));
    assert_eq!(req["properties"]["key"]["maxLength"], MAX_KEY_LEN);
    assert_eq!(req["properties"]["zone"]["default"], "UTC");
    let put_op = &doc["paths"]["/api/schedules"]["post"]["responses"];
    for code in ["200", "201", "400", "401", "403", "409", "413", "415"] {
        assert!(put_op[code].is_object(), "POST /api/schedules lacks {code}");
    }
    for (method, path) in [
        ("get", "/api/schedules/{key}"),
        ("delete", "/api/schedules/{key}"),
        ("post", "/api/schedules/{key}/pause"),
        ("post", "/api/schedules/{key}/resume"),
    ] {
        assert!(doc["paths"][path][method]["responses"]["404"].is_object(), "{method} {path}");
    }
    s.stop().await.unwrap();
}
