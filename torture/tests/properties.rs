//! Fuzz-style property tests: arbitrary and mutated inputs against every
//! parser an outsider can feed slothqueue. The property is always the
//! same: a typed answer, never a panic (and a refused file is left as it
//! was).
//!
//! These are proptest properties, bounded by `PROPTEST_CASES` (`cargo
//! xtask torture` sets it: a short run with `--quick`, a longer one
//! without), and run with every `cargo test`. The coverage-guided twins of
//! the same properties are the libFuzzer targets in `fuzz/`, which
//! `cargo xtask torture` builds and runs for a bounded time.
//!
//! - opening a store from arbitrary bytes, then one read and one write
//!   (SQLite and redb);
//! - the JSON lines `import` reads: arbitrary and mutated job records
//!   restored into both stores, and through the binary when `SQ_BIN`
//!   names it;
//! - the duration parser of the CLI;
//! - the body of `POST /api/tasks/enqueue`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::print_stderr,
    reason = "a property test fails by panicking, and says so when it skips a part"
)]

use std::path::Path;
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use slothqueue::Backend;
use slothqueue_core::{
    ClaimRequest, ClockOnly, Event, Job, ListFilter, NewJob, Owner, Store, StoreError, Timestamp,
};
use slothqueue_store_redb::{RedbOptions, RedbStore};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

/// The CLI's duration parser, compiled here as it is in the binary.
#[allow(dead_code, reason = "only the parser and formatter are exercised")]
#[path = "../../cli/src/app/duration.rs"]
mod duration;

const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Opens the file at `path` as `backend`'s store itself, not through
/// `slothqueue::open`, whose look at the header would refuse most
/// arbitrary bytes before the store ever read them. Files only: a
/// PostgreSQL queue is not made of bytes an outsider hands over.
fn open(backend: Backend, path: &Path) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match backend {
        Backend::Sqlite => Arc::new(SqliteStore::open(path, SqliteOptions::default())?),
        Backend::Redb => Arc::new(RedbStore::open(path, RedbOptions::default())?),
        Backend::Postgres => unreachable!("the properties are about queue files"),
    })
}

/// A small valid queue of each backend, with jobs in several states.
fn golden(backend: Backend) -> &'static [u8] {
    static SQLITE: OnceLock<Vec<u8>> = OnceLock::new();
    static REDB: OnceLock<Vec<u8>> = OnceLock::new();
    let cell = match backend {
        Backend::Sqlite => &SQLITE,
        Backend::Redb => &REDB,
        Backend::Postgres => unreachable!("the properties are about queue files"),
    };
    cell.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("golden");
        {
            let store = open(backend, &path).unwrap();
            rt().block_on(async {
                for i in 0..5 {
                    store
                        .push(NewJob::shell(format!("echo {i}"), "/tmp").key(format!("k{i}")), T)
                        .await
                        .unwrap();
                }
                let owner = Owner::named("golden");
                let c = store
                    .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), T)
                    .await
                    .unwrap()
                    .unwrap();
                store.complete(c.job.id, &c.fence, Default::default(), T).await.unwrap();
                store
                    .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), T)
                    .await
                    .unwrap()
                    .unwrap();
            });
        }
        std::fs::read(&path).unwrap()
    })
}

/// A mutation of a valid file: flipped bytes, a cut, or both.
fn mutated(backend: Backend) -> impl Strategy<Value = Vec<u8>> {
    let len = golden(backend).len();
    (prop::collection::vec((0..len, 1u8..=255), 0..6), prop::option::of(0..len)).prop_map(
        move |(flips, cut)| {
            let mut bytes = golden(backend).to_vec();
            for (at, x) in flips {
                bytes[at] ^= x;
            }
            if let Some(c) = cut {
                bytes.truncate(c);
            }
            bytes
        },
    )
}

fn file_bytes(backend: Backend) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..4096),
        mutated(backend),
        mutated(backend),
        mutated(backend),
    ]
}

/// Opens a store from `bytes`; if it opens, reads and writes once. A
/// refused file must be left byte-identical.
fn open_from_bytes(backend: Backend, bytes: &[u8]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue");
    std::fs::write(&path, bytes).unwrap();
    match open(backend, &path) {
        Ok(store) => {
            rt().block_on(async {
                let _ = store.list(&ListFilter::default()).await;
                let _ = store.stats(T).await;
                let _ = store.push(NewJob::shell("true", "/tmp"), T).await;
                let _ = store
                    .claim(&ClaimRequest::new(Owner::named("fuzz"), Arc::new(ClockOnly)), T)
                    .await;
            });
        }
        Err(e) => {
            let typed = matches!(
                e,
                StoreError::Corrupt { .. }
                    | StoreError::SchemaTooNew { .. }
                    | StoreError::Io { .. }
            );
            prop_assert!(typed, "untyped refusal: {e:?}");
            prop_assert!(std::fs::read(&path).unwrap() == bytes, "a refused file was changed: {e}");
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn open_sqlite_from_arbitrary_bytes(bytes in file_bytes(Backend::Sqlite)) {
        open_from_bytes(Backend::Sqlite, &bytes)?;
    }

    #[test]
    fn open_redb_from_arbitrary_bytes(bytes in file_bytes(Backend::Redb)) {
        open_from_bytes(Backend::Redb, &bytes)?;
    }
}

/// A job as `export` writes it (the `events` key holds its trail).
fn exported_line() -> serde_json::Value {
    static LINE: OnceLock<serde_json::Value> = OnceLock::new();
    LINE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let store = open(Backend::Sqlite, &dir.path().join("q")).unwrap();
        rt().block_on(async {
            let p = store.push(NewJob::shell("echo hi", "/tmp").key("k"), T).await.unwrap();
            let owner = Owner::named("x");
            store.claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), T).await.unwrap();
            let job = store.get(p.job.id).await.unwrap();
            let events = store.events(p.job.id).await.unwrap();
            let mut v = serde_json::to_value(&job).unwrap();
            v["events"] = serde_json::to_value(&events).unwrap();
            v
        })
    })
    .clone()
}

fn json_leaf() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
        prop_oneof![Just("running"), Just("done"), Just("pending"), Just("claimed"), Just("")]
            .prop_map(serde_json::Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An exported line with fields replaced, removed or nested values changed.
fn import_line() -> impl Strategy<Value = serde_json::Value> {
    let keys: Vec<String> = exported_line().as_object().unwrap().keys().cloned().collect();
    let n = keys.len();
    prop_oneof![
        json_value(),
        prop::collection::vec((0..n, prop::option::of(json_value())), 1..4).prop_map(
            move |edits| {
                let mut line = exported_line();
                let obj = line.as_object_mut().unwrap();
                for (i, value) in edits {
                    match value {
                        Some(v) => obj.insert(keys[i].clone(), v),
                        None => obj.remove(&keys[i]),
                    };
                }
                line
            }
        ),
    ]
}

/// What `import` does with one line, minus the CLI's own checks: parse the
/// job and its trail, restore them, and use the queue afterwards.
fn import_into(backend: Backend, line: &serde_json::Value) {
    let mut value = line.clone();
    let events: Vec<Event> = match value.as_object_mut().and_then(|o| o.remove("events")) {
        Some(ev) => match serde_json::from_value(ev) {
            Ok(e) => e,
            Err(_) => return,
        },
        None => Vec::new(),
    };
    let Ok(job) = serde_json::from_value::<Job>(value) else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = open(backend, &dir.path().join("q")).unwrap();
    rt().block_on(async {
        let _ = store.restore(job.clone(), events).await;
        let _ = store.list(&ListFilter::default()).await;
        let _ = store.get(job.id).await;
        let _ = store.stats(T).await;
        let later = T.saturating_add(std::time::Duration::from_secs(86_400));
        let _ =
            store.claim(&ClaimRequest::new(Owner::named("fuzz"), Arc::new(ClockOnly)), later).await;
        let _ = store.push(NewJob::shell("true", "/tmp"), T).await;
    });
}

proptest! {
    #[test]
    fn import_arbitrary_job_lines(line in import_line()) {
        import_into(Backend::Sqlite, &line);
        import_into(Backend::Redb, &line);
    }

    #[test]
    fn duration_parser_never_panics(s in prop_oneof![
        ".{0,24}",
        "[0-9]{0,22}(d|h|m|s|ms|µs|x|)[0-9]{0,4}(d|h|m|s|ms|)",
        "[ 0-9dhms-]{0,16}",
    ]) {
        if let Ok(d) = duration::parse(&s) {
            prop_assert!(d <= duration::MAX);
            prop_assert_eq!(duration::parse(&duration::format(d)), Ok(d));
        }
        let _ = duration::parse_or_none(&s);
    }

    #[test]
    fn duration_format_round_trips(ms in 0u64..(100 * 366 * 86_400_000)) {
        let d = std::time::Duration::from_millis(ms);
        prop_assert_eq!(duration::parse(&duration::format(d)), Ok(d));
    }
}

/// A few cases through the real binary's `import` (when `SQ_BIN` names
/// it): every ending is a defined exit code, never a panic.
#[test]
fn import_through_the_binary() {
    let Some(bin) = std::env::var_os("SQ_BIN") else {
        eprintln!("SQ_BIN not set: skipping the binary import run");
        return;
    };
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 16,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let lines = prop::collection::vec(import_line(), 1..4);
    runner
        .run(&lines, |lines| {
            let dir = tempfile::tempdir().unwrap();
            let input = dir.path().join("in.jsonl");
            let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
            std::fs::write(&input, text.join("\n")).unwrap();
            for db in ["q.db", "q.redb"] {
                let out = std::process::Command::new(&bin)
                    .arg("--db")
                    .arg(dir.path().join(db))
                    .arg("import")
                    .arg(&input)
                    .output()
                    .unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr);
                prop_assert!(!stderr.contains("panicked"), "{stderr}");
                prop_assert!(
                    matches!(out.status.code(), Some(0..=6)),
                    "{:?}: {stderr}",
                    out.status
                );
            }
            Ok(())
        })
        .unwrap();
}

mod http {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    const TOKEN: &str = "0123456789abcdef0123";

    fn body() -> impl Strategy<Value = Vec<u8>> {
        let fields = prop::collection::btree_map(
            prop_oneof![
                Just("kind".to_owned()),
                Just("payload".to_owned()),
                Just("idempotency_key".to_owned()),
                Just("priority".to_owned()),
                Just("scheduled_for".to_owned()),
                Just("max_attempts".to_owned()),
                Just("max_runtime".to_owned()),
                Just("queue".to_owned()),
                ".{0,6}",
            ],
            prop_oneof![
                json_value(),
                any::<f64>().prop_map(|f| serde_json::json!(f)),
                Just(serde_json::json!({"command": "true"})),
                Just(serde_json::json!("shell")),
                Just(serde_json::json!(-1.5)),
                Just(serde_json::json!(1e300)),
                Just(serde_json::json!("2025-01-02T03:04:05Z")),
            ],
            0..6,
        )
        .prop_map(|m| serde_json::to_vec(&m).unwrap());
        prop_oneof![prop::collection::vec(any::<u8>(), 0..256), fields.clone(), fields]
    }

    proptest! {
        #[test]
        fn enqueue_body_never_panics(body in body()) {
            let dir = tempfile::tempdir().unwrap();
            let store = open(Backend::Sqlite, &dir.path().join("q")).unwrap();
            let app = slothqueue_http::router(store, slothqueue_http::ApiState::new(TOKEN));
            let req = Request::post("/api/tasks/enqueue")
                .header("host", "127.0.0.1:7878")
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("content-type", "application/json")
                .body(Body::from(body.clone()))
                .unwrap();
            let (status, answer) = rt().block_on(async move {
                let resp = app.oneshot(req).await.unwrap();
                let status = resp.status();
                (status, axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap())
            });
            prop_assert!(
                status != StatusCode::INTERNAL_SERVER_ERROR,
                "500 for {}: {}",
                String::from_utf8_lossy(&body),
                String::from_utf8_lossy(&answer)
            );
            prop_assert!(serde_json::from_slice::<serde_json::Value>(&answer).is_ok());
        }
    }
}
