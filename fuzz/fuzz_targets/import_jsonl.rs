//! `slothqueue import`: JSON lines as `export` writes them. The parsing is
//! private to the binary (`cli/src/app/commands/transfer.rs`,
//! `parse_line`), so this repeats its steps on the library functions it
//! calls: each line to a `Job` and its `events`, the same checks, then
//! `Store::restore` into a new queue of each backend, and the queue used
//! afterwards. Any answer will do but a panic.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use slothqueue_core::{ClaimFilter, ClaimRequest, ClockOnly, Event, Job, ListFilter, NewJob, Owner};
use slothqueue_fuzz::{Backend, T, open, rt, run, scratch};

/// `parse_line` without the messages.
fn parse_line(text: &str) -> Option<(Job, Vec<Event>)> {
    let mut value: serde_json::Value = serde_json::from_str(text).ok()?;
    let events: Vec<Event> = match value.as_object_mut().and_then(|o| o.remove("events")) {
        Some(ev) => serde_json::from_value(ev).ok()?,
        None => Vec::new(),
    };
    let job: Job = serde_json::from_value(value).ok()?;
    if job.id <= 0 || events.iter().any(|e| e.job_id != job.id) {
        return None;
    }
    Some((job, events))
}

fn import(backend: Backend, lines: &[(Job, Vec<Event>)]) {
    let dir = scratch();
    let store = open(backend, &dir.path().join("q")).expect("a new queue");
    rt().block_on(async {
        for (job, events) in lines {
            if store.restore(job.clone(), events.clone()).await.is_err() {
                break;
            }
        }
        let _ = store.list(&ListFilter::default()).await;
        let _ = store.stats(T).await;
        for (job, _) in lines {
            let _ = store.get(job.id).await;
            let _ = store.events(job.id).await;
        }
        let later = T.saturating_add(std::time::Duration::from_secs(86_400));
        let owner = Owner::named("fuzz");
        let _ = store.claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), later).await;
        let _ = store.push(NewJob::shell("true", "/tmp"), T).await;
    });
}

/// A few exported lines: jobs pending, running and done, with trails.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let dir = scratch();
    let store = open(Backend::Sqlite, &dir.path().join("q")).expect("a new queue");
    let text = rt().block_on(async {
        for i in 0..3 {
            let job = NewJob::shell(format!("echo {i}"), "/tmp").key(format!("k{i}"));
            store.push(job, T).await.expect("push");
        }
        let owner = Owner::named("seed");
        let filter = ClaimFilter::default();
        let c = store
            .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(filter.clone()), T)
            .await
            .expect("claim")
            .expect("due");
        store.complete(c.job.id, &c.fence, Default::default(), T).await.expect("complete");
        store.claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(filter.clone()), T).await.expect("claim");
        let mut text = String::new();
        for job in store.list(&ListFilter::default()).await.expect("list") {
            let mut v = serde_json::to_value(&job).expect("job json");
            let events = store.events(job.id).await.expect("events");
            v["events"] = serde_json::to_value(&events).expect("events json");
            text.push_str(&v.to_string());
            text.push('\n');
        }
        text
    });
    let first = text.lines().next().unwrap_or_default().as_bytes().to_vec();
    vec![("export.jsonl".to_owned(), text.into_bytes()), ("one.jsonl".to_owned(), first)]
}

fuzz_target!(
    init: slothqueue_fuzz::init(seeds),
    |data: &[u8]| run(|| {
        let Ok(text) = std::str::from_utf8(data) else { return };
        let lines: Option<Vec<_>> =
            text.lines().filter(|l| !l.trim().is_empty()).map(parse_line).collect();
        let Some(lines) = lines.filter(|l| !l.is_empty()) else { return };
        import(Backend::Sqlite, &lines);
        import(Backend::Redb, &lines);
    })
);
