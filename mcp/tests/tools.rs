//! Every tool's mapping, called as the server calls it (the handler
//! functions of `Queue`, and `Server::call` where the shape of the result
//! is what is tested) on a temporary queue file; and the `tools/list`
//! answer, names and schemas, held by an insta snapshot so that a schema
//! cannot change without a reviewed snapshot.

#![allow(clippy::unwrap_used, reason = "a test's unwrap is its assertion")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use slothqueue::{OpenOptions, Store, Timestamp};
use slothqueue_mcp::wire::*;
use slothqueue_mcp::{Options, Policy, Queue, Server, ToolError, tool_list};

/// A queue file in a temporary folder, and the tools over it.
struct Fixture {
    _dir: tempfile::TempDir,
    db: PathBuf,
    store: Arc<dyn Store>,
}

const START: Timestamp = Timestamp::from_millis(1_800_000_000_000);

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let store =
        slothqueue::open(&db, OpenOptions { create: true, ..OpenOptions::default() }).unwrap();
    Fixture { _dir: dir, db, store }
}

impl Fixture {
    fn options(&self, policy: Policy) -> Options {
        Options {
            queue_file: self.db.clone(),
            files: self.db.clone(),
            policy,
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("HOME".into(), "/home/agent".into()),
                ("API_TOKEN".into(), "s3cret".into()),
            ],
            cwd: Some(PathBuf::from("/tmp")),
            who: "ana@box".into(),
            this_host: "box".into(),
            worker: false,
        }
    }

    fn queue(&self, policy: Policy) -> Queue {
        let clock = Arc::new(slothqueue::core::ManualClock::new(START));
        Queue::with_clock(self.store.clone(), self.options(policy), clock)
    }

    fn server(&self, policy: Policy) -> Server {
        Server::new(self.queue(policy))
    }

    fn log_dir(&self) -> PathBuf {
        slothqueue::runner::log_dir_for(&self.db)
    }
}

fn shell(command: &str) -> AddJobInput {
    AddJobInput { command: Some(command.into()), ..AddJobInput::default() }
}

fn args(v: serde_json::Value) -> Option<serde_json::Map<String, serde_json::Value>> {
    v.as_object().cloned()
}

fn text(r: &rmcp::model::CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect()
}

#[test]
fn the_tool_list_keeps_its_names_and_schemas() {
    let all = tool_list(&Policy::default());
    let names: Vec<&str> = all.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "add_job",
            "list_jobs",
            "show_job",
            "job_logs",
            "queue_status",
            "wait_jobs",
            "cancel_job",
            "retry_job",
            "hold_job",
            "release_job",
            "pause_queue",
            "resume_queue"
        ]
    );
    for t in &all {
        assert_eq!(t.input_schema.get("type"), Some(&"object".into()), "{}", t.name);
        let output = t.output_schema.as_ref().unwrap();
        assert_eq!(output.get("type"), Some(&"object".into()), "{}", t.name);
    }
    insta::assert_json_snapshot!("tools_list", serde_json::to_value(&all).unwrap());
    let looking = tool_list(&Policy { read_only: true, ..Policy::default() });
    let names: Vec<&str> = looking.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["list_jobs", "show_job", "job_logs", "queue_status", "wait_jobs"]);
}

#[tokio::test]
async fn add_job_queues_as_add_does_and_says_no_runner_takes_it() {
    let f = fixture();
    let q = f.queue(Policy::default());
    let mut input = shell("make build");
    input.key = Some("build".into());
    input.env.insert("MODE".into(), "fast".into());
    let a = q.add_job(input.clone()).await.unwrap();
    assert_eq!(a.data.outcome, "created");
    assert_eq!(a.data.job.command.as_deref(), Some("make build"));
    assert_eq!(a.data.job.cwd.as_deref(), Some("/tmp"));
    assert_eq!(a.data.job.key.as_deref(), Some("build"));
    assert!(!a.data.served);
    let note = a.data.runner_note.unwrap();
    assert!(note.contains("slothqueue run --follow"), "{note}");
    assert!(a.text.starts_with("added job #1 to queue default"), "{}", a.text);
    // `add`'s environment rule: the allowlist and what is named, never a
    // secret the call did not name.
    let job = f.store.get(1).await.unwrap();
    let env = &job.payload["env"];
    assert_eq!(env["MODE"], "fast");
    assert_eq!(env["HOME"], "/home/agent");
    assert!(env.get("API_TOKEN").is_none(), "{env}");
    // The same key and job again adds nothing.
    let again = q.add_job(input).await.unwrap();
    assert_eq!((again.data.outcome.as_str(), again.data.job.id), ("existing", 1));
    // Named, the secret is recorded.
    let mut named = shell("deploy");
    named.env_pass = vec!["API_TOKEN".into()];
    let id = q.add_job(named).await.unwrap().data.job.id;
    assert_eq!(f.store.get(id).await.unwrap().payload["env"]["API_TOKEN"], "s3cret");
    let mut missing = shell("deploy");
    missing.env_pass = vec!["NOPE".into()];
    let e = q.add_job(missing).await.unwrap_err();
    assert!(e.to_string().contains("NOPE is not set in the server's environment"), "{e}");
}

#[tokio::test]
async fn add_job_asks_for_gpus_as_add_gpus_does() {
    let f = fixture();
    let q = f.queue(Policy::default());
    let input =
        AddJobInput { gpus: Some(2), gpu_memory_mib: Some(1024), ..shell("python3 train.py") };
    let job = q.add_job(input).await.unwrap().data.job;
    assert_eq!((job.gpus, job.gpu_memory_mib), (Some(2), Some(1024)));
    let stored = f.store.get(job.id).await.unwrap();
    let asked = stored.gpus.expect("the request is stored");
    assert_eq!((asked.count, asked.memory), (2, Some(1024 * 1024 * 1024)));
    // Memory without a count, and no GPU at all, are refused as `add` refuses them.
    let alone = AddJobInput { gpu_memory_mib: Some(1), ..shell("x") };
    let e = q.add_job(alone).await.unwrap_err();
    assert!(e.to_string().contains("`gpu_memory_mib` needs `gpus`"), "{e}");
    let none = AddJobInput { gpus: Some(0), ..shell("x") };
    assert!(q.add_job(none).await.is_err());
}

#[tokio::test]
async fn add_job_takes_a_handler_job_parents_and_the_job_settings() {
    let f = fixture();
    let q = f.queue(Policy::default());
    let first = q.add_job(shell("fetch")).await.unwrap().data.job.id;
    let mut keyed = shell("train");
    keyed.key = Some("train".into());
    q.add_job(keyed).await.unwrap();
    let input = AddJobInput {
        kind: Some("report".into()),
        payload: Some(serde_json::json!({"to": "ana"})),
        after: vec![ParentRef::Id(first), ParentRef::Key("train".into())],
        queue: Some("gpu".into()),
        priority: Some(5),
        delay: Some(60),
        max_runtime: Some(0),
        max_attempts: Some(1),
        ..AddJobInput::default()
    };
    let job = q.add_job(input).await.unwrap().data.job;
    assert_eq!((job.kind.as_str(), job.queue.as_str(), job.priority), ("report", "gpu", 5));
    assert_eq!((job.after.len(), job.max_attempts, job.command), (2, 1, None));
    assert_eq!(job.not_before, START.as_millis() + 60_000);
    let stored = f.store.get(job.id).await.unwrap();
    assert_eq!((stored.payload["to"].as_str(), stored.max_runtime), (Some("ana"), None));
}

#[tokio::test]
async fn bad_input_gets_the_clis_reasons() {
    let f = fixture();
    let q = f.queue(Policy::default());
    let both = AddJobInput { kind: Some("k".into()), ..shell("x") };
    let e = q.add_job(both).await.unwrap_err();
    assert!(e.to_string().starts_with("give either `command` or `kind`"), "{e}");
    let none = q.add_job(AddJobInput::default()).await.unwrap_err();
    assert!(none.to_string().starts_with("add_job needs `command`"), "{none}");
    let relative = AddJobInput { cwd: Some("rel".into()), ..shell("x") };
    assert!(q.add_job(relative).await.unwrap_err().to_string().contains("not an absolute"));
    let queue = AddJobInput { queue: Some("a b".into()), ..shell("x") };
    let e = q.add_job(queue).await.unwrap_err();
    assert!(e.to_string().starts_with("`queue` `a b` is not a plain name"), "{e}");
    let orphan = AddJobInput { after: vec![ParentRef::Id(42)], ..shell("x") };
    let e = q.add_job(orphan).await.unwrap_err();
    assert!(matches!(e, ToolError::BadInput(_)), "{e:?}");
    assert!(e.to_string().contains("#42"), "{e}");
    // A cycle: a job waiting on the job its key replaces.
    q.add_job(AddJobInput { key: Some("k".into()), ..shell("true") }).await.unwrap();
    let cycle = AddJobInput {
        key: Some("k".into()),
        after: vec![ParentRef::Key("k".into())],
        ..shell("false")
    };
    let e = q.add_job(cycle).await.unwrap_err();
    assert!(e.to_string().contains("cannot wait on the job it replaces"), "{e}");
    let e = q.show_job(JobIdInput { id: 7 }).await.unwrap_err();
    assert_eq!(e.to_string(), "no job #7");
    let e = q.list_jobs(ListJobsInput { state: Some("asleep".into()), ..Default::default() });
    assert!(e.await.unwrap_err().to_string().contains("give pending, running"));
    // Through the server: a wrong type is a tool error, not a protocol one.
    let server = f.server(Policy::default());
    let r = server.call("add_job", args(serde_json::json!({"command": 5})), None).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).starts_with("add_job: bad arguments: invalid type"), "{}", text(&r));
    let r = server.call("show_job", args(serde_json::json!({"id": 1, "extra": 1})), None).await;
    assert!(text(&r).contains("unknown field `extra`"), "{}", text(&r));
    let r = server.call("no_such_tool", None, None).await;
    assert_eq!(r.is_error, Some(true));
}

#[tokio::test]
async fn a_call_answers_a_short_text_and_structured_content() {
    let f = fixture();
    let server = f.server(Policy::default());
    let r = server.call("add_job", args(serde_json::json!({"command": "echo hi"})), None).await;
    assert_eq!(r.is_error, Some(false));
    let data = r.structured_content.clone().unwrap();
    assert_eq!((data["outcome"].as_str(), data["job"]["id"].as_i64()), (Some("created"), Some(1)));
    assert!(text(&r).starts_with("added job #1"), "{}", text(&r));
}

#[tokio::test]
async fn the_users_flags_refuse_with_a_sentence() {
    let f = fixture();
    let read_only = f.server(Policy { read_only: true, ..Policy::default() });
    let r = read_only.call("add_job", args(serde_json::json!({"command": "x"})), None).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("--read-only"), "{}", text(&r));
    let r = read_only.call("queue_status", None, None).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));

    let kinds = f.queue(Policy { kinds: Some(vec!["render".into()]), ..Policy::default() });
    let e = kinds.add_job(shell("rm -rf /")).await.unwrap_err();
    assert!(e.to_string().contains("queues no shell command (slothqueue mcp --kinds render)"));
    let other = AddJobInput { kind: Some("mine".into()), ..AddJobInput::default() };
    assert!(kinds.add_job(other).await.unwrap_err().to_string().contains("kind `mine`"));
    let ok = AddJobInput { kind: Some("render".into()), ..AddJobInput::default() };
    assert_eq!(kinds.add_job(ok).await.unwrap().data.job.kind, "render");

    let open = f.queue(Policy::default());
    let elsewhere = open.add_job(shell("x")).await.unwrap().data.job.id;
    let gpu = f.queue(Policy { queue: Some("gpu".into()), ..Policy::default() });
    let job = gpu.add_job(shell("train")).await.unwrap().data.job;
    assert_eq!(job.queue, "gpu", "the server's queue is the default");
    let there = AddJobInput { queue: Some("default".into()), ..shell("x") };
    let e = gpu.add_job(there).await.unwrap_err();
    assert!(e.to_string().contains("confined to queue gpu"), "{e}");
    let e = gpu.cancel_job(JobIdInput { id: elsewhere }).await.unwrap_err();
    assert!(e.to_string().contains("is in queue default"), "{e}");
    let listed = gpu.list_jobs(ListJobsInput::default()).await.unwrap().data.jobs;
    assert_eq!(listed.iter().map(|j| j.id).collect::<Vec<_>>(), [job.id]);
    let paused = gpu.pause_queue(QueueInput::default()).await.unwrap().data.lane;
    assert_eq!(paused.queue.as_deref(), Some("gpu"), "not every queue");
}

#[tokio::test]
async fn list_and_show_are_the_read_models() {
    let f = fixture();
    let q = f.queue(Policy::default());
    for c in ["a", "b", "c"] {
        q.add_job(shell(c)).await.unwrap();
    }
    q.cancel_job(JobIdInput { id: 2 }).await.unwrap();
    let all = q.list_jobs(ListJobsInput { limit: Some(2), ..Default::default() }).await.unwrap();
    assert_eq!(all.data.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [3, 2]);
    assert!(all.data.more);
    let pending =
        ListJobsInput { state: Some("pending".into()), limit: Some(1), ..Default::default() };
    let pending = q.list_jobs(pending).await.unwrap().data;
    assert_eq!((pending.jobs.len(), pending.more), (1, true));
    let oldest = ListJobsInput { order: Some("oldest".into()), ..Default::default() };
    assert_eq!(q.list_jobs(oldest).await.unwrap().data.jobs[0].id, 1);

    let shown = q.show_job(JobIdInput { id: 1 }).await.unwrap();
    assert_eq!(
        shown.data.why.as_deref(),
        Some("no runner is alive: it runs when one starts (slothqueue run)")
    );
    assert!(shown.text.contains("why: no runner is alive"), "{}", shown.text);
    assert_eq!(shown.data.log_uri, "slothqueue://jobs/1/log");
    assert_eq!(shown.data.events[0].kind, "pushed");

    let status = q.queue_status(NoInput {}).await.unwrap().data;
    assert_eq!((status.counts.pending, status.counts.cancelled), (2, Some(1)));
    assert!(status.runners.is_empty());
    assert_eq!(status.unserved[0].why, "no live runner serves queue default");
}

#[tokio::test]
async fn logs_come_in_bounded_pieces_through_the_tool_and_the_resource() {
    let f = fixture();
    let q = f.queue(Policy::default());
    q.add_job(shell("echo")).await.unwrap();
    let none = q.job_logs(JobLogsInput { id: 1, ..Default::default() }).await.unwrap();
    assert!(!none.data.exists);
    assert_eq!(none.text, "no output for job #1: it has not run yet");
    std::fs::create_dir_all(f.log_dir()).unwrap();
    let body: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(slothqueue::runner::log_path(&f.log_dir(), 1), &body).unwrap();
    let tail = q.job_logs(JobLogsInput { id: 1, ..Default::default() }).await.unwrap().data;
    assert_eq!(tail.size, body.len() as u64);
    assert_eq!(tail.text.len() as u64, slothqueue_mcp::logs::DEFAULT_CHUNK);
    assert!(tail.text.ends_with("line 4999\n"));
    let page = JobLogsInput { id: 1, offset: Some(0), max_bytes: Some(7), ..Default::default() };
    let page = q.job_logs(page).await.unwrap().data;
    assert_eq!((page.text.as_str(), page.next_offset), ("line 0\n", 7));
    let huge = JobLogsInput { id: 1, max_bytes: Some(u64::MAX), ..Default::default() };
    let huge = q.job_logs(huge).await.unwrap().data;
    assert_eq!(huge.text.len() as u64, (body.len() as u64).min(slothqueue_mcp::logs::MAX_CHUNK));
    let lines = JobLogsInput { id: 1, lines: Some(2), ..Default::default() };
    assert_eq!(q.job_logs(lines).await.unwrap().data.text, "line 4998\nline 4999\n");
    let resource = q.log_resource(1).await.unwrap();
    assert!(resource.ends_with("line 4999\n"));
    assert_eq!(slothqueue_mcp::tools::parse_log_uri("slothqueue://jobs/1/log"), Some(1));
    assert_eq!(slothqueue_mcp::tools::parse_log_uri("slothqueue://jobs/x/log"), None);
}

#[tokio::test]
async fn wait_jobs_says_how_jobs_ended_or_that_it_timed_out() {
    let f = fixture();
    let q = f.queue(Policy::default());
    q.add_job(shell("a")).await.unwrap();
    q.add_job(shell("b")).await.unwrap();
    let timed = WaitJobsInput { ids: vec![1], timeout_s: Some(0), ..Default::default() };
    let timed = q.wait_jobs(timed, None).await.unwrap();
    assert_eq!(
        (timed.data.outcome.as_str(), timed.data.pending.as_slice()),
        ("timed_out", &[1][..])
    );
    assert!(timed.text.starts_with("timed out after 0s"), "{}", timed.text);
    let long = WaitJobsInput { ids: vec![1], timeout_s: Some(u64::MAX), ..Default::default() };
    q.cancel_job(JobIdInput { id: 1 }).await.unwrap();
    let ended = q.wait_jobs(long, None).await.unwrap().data;
    assert_eq!((ended.outcome.as_str(), ended.cancelled.as_slice()), ("failed", &[1][..]));
    assert_eq!(ended.timeout_s, slothqueue_mcp::tools::MAX_WAIT.as_secs(), "bounded");
    let bad = WaitJobsInput { ids: vec![99], ..Default::default() };
    assert_eq!(q.wait_jobs(bad, None).await.unwrap_err().to_string(), "no job #99");
    let both = WaitJobsInput { ids: vec![1], queue: Some("default".into()), ..Default::default() };
    assert!(q.wait_jobs(both, None).await.is_err());
    let queue =
        WaitJobsInput { queue: Some("default".into()), timeout_s: Some(0), ..Default::default() };
    let queue = q.wait_jobs(queue, None).await.unwrap().data;
    assert_eq!(queue.pending, [2]);
}

#[tokio::test]
async fn the_changes_map_to_the_stores_operations() {
    let f = fixture();
    let q = f.queue(Policy::default());
    q.add_job(shell("a")).await.unwrap();
    let held = q.hold_job(JobIdInput { id: 1 }).await.unwrap().data;
    assert!(held.job.held);
    let released = q.release_job(JobIdInput { id: 1 }).await.unwrap().data;
    assert!(!released.job.held);
    let cancelled = q.cancel_job(JobIdInput { id: 1 }).await.unwrap();
    assert_eq!(
        (cancelled.data.job.state.as_str(), cancelled.text.as_str()),
        ("cancelled", "cancelled job #1")
    );
    let again = q.cancel_job(JobIdInput { id: 1 }).await.unwrap_err();
    assert_eq!(again.to_string(), "cannot cancel job #1: it is cancelled");
    let retried = q.retry_job(JobIdInput { id: 1 }).await.unwrap().data;
    assert_eq!(retried.job.state, "pending");
    let paused = q.pause_queue(QueueInput { queue: Some("gpu".into()) }).await.unwrap().data;
    assert_eq!(
        (paused.lane.queue.as_deref(), paused.lane.paused_by.as_deref()),
        (Some("gpu"), Some("ana@box"))
    );
    let all = q.pause_queue(QueueInput::default()).await.unwrap().data;
    assert_eq!(all.lane.queue, None);
    let resumed = q.resume_queue(QueueInput { queue: Some("gpu".into()) }).await.unwrap().data;
    assert_eq!(resumed.lane.paused_by, None);
    assert!(resumed.message.contains("every queue is still paused"), "{}", resumed.message);
    let lanes = f.store.lanes().await.unwrap();
    assert!(lanes.all_paused.is_some());
}

#[tokio::test(flavor = "current_thread")]
async fn a_flood_of_waits_is_refused_not_queued() {
    let f = fixture();
    let server = Arc::new(f.server(Policy::default()));
    let id = f.queue(Policy::default()).add_job(shell("x")).await.unwrap().data.job.id;
    let wait = || args(serde_json::json!({"ids": [id], "timeout_s": 600}));
    let mut held = Vec::new();
    for _ in 0..slothqueue_mcp::server::MAX_WAITS {
        let server = server.clone();
        let wait = wait();
        held.push(tokio::spawn(async move { server.call("wait_jobs", wait, None).await }));
    }
    // Each spawned wait takes its place before its first look.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    // Refused at once: a deadline, so that a lost bound fails, not hangs.
    let fifth = server.call("wait_jobs", wait(), None);
    let r = tokio::time::timeout(std::time::Duration::from_secs(10), fifth).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("4 waits are already running"), "{}", text(&r));
    // Other calls still go through.
    let r = server.call("queue_status", None, None).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    for h in &held {
        h.abort();
    }
    for h in held {
        let _ = h.await;
    }
    let r = server.call("wait_jobs", args(serde_json::json!({"ids": [id], "timeout_s": 0})), None);
    assert_eq!(r.await.is_error, Some(false), "the places are given back");
}

#[test]
fn the_log_folder_is_the_runners() {
    let f = fixture();
    assert_eq!(f.log_dir(), Path::new(&format!("{}.logs", f.db.display())));
}
