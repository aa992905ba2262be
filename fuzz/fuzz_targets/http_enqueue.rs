//! The body of `POST /api/tasks/enqueue`, through the real router with a
//! valid token: every answer is JSON and none is a 500 (the router turns a
//! handler's panic into one).
#![no_main]

use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use slothqueue_fuzz::{Backend, fail, open, rt, run, scratch};
use tower::ServiceExt;

const TOKEN: &str = "0123456789abcdef0123";

/// One router on one queue for the whole run (kept in a leaked scratch
/// directory): a fresh queue per input would cost more than the input.
fn router() -> Router {
    static ROUTER: OnceLock<Router> = OnceLock::new();
    ROUTER
        .get_or_init(|| {
            let dir = Box::leak(Box::new(scratch()));
            let store = open(Backend::Sqlite, &dir.path().join("q")).expect("a new queue");
            let state = slothqueue_http::ApiState::new(TOKEN).with_default_cwd("/tmp");
            slothqueue_http::router(store, state)
        })
        .clone()
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    [
        r#"{"kind":"shell","payload":{"command":"true"}}"#,
        r#"{"kind":"shell","payload":{"command":"make","cwd":"/src","env":{"A":"1"}},"idempotency_key":"k","priority":3,"scheduled_for":"2030-01-02T03:04:05Z","max_attempts":5,"max_runtime":null,"queue":"builds"}"#,
        r#"{"kind":"mail","payload":{"to":["a@b"]},"max_runtime":2.5}"#,
    ]
    .iter()
    .enumerate()
    .map(|(i, s)| (format!("seed{i}.json"), s.as_bytes().to_vec()))
    .collect()
}

fuzz_target!(
    init: slothqueue_fuzz::init(seeds),
    |data: &[u8]| run(|| {
        let req = Request::post("/api/tasks/enqueue")
            .header("host", "127.0.0.1:7878")
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .body(Body::from(data.to_vec()))
            .expect("a request");
        let (status, answer) = rt().block_on(async move {
            let resp = router().oneshot(req).await.expect("the router is infallible");
            let status = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await;
            (status, body.expect("a body"))
        });
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            fail(&format!("500 for {:?}: {}", String::from_utf8_lossy(data), String::from_utf8_lossy(&answer)));
        }
        if serde_json::from_slice::<serde_json::Value>(&answer).is_err() {
            fail(&format!("a non-JSON answer {status}: {}", String::from_utf8_lossy(&answer)));
        }
    })
);
