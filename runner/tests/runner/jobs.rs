//! Running jobs to their ends: order, outcomes, logs, modes, hooks.

use std::time::Duration;

use slothqueue_core::{JobState, NewJob};
use slothqueue_runner::{ExecOutcome, Mode, handler_fn};

use crate::support::{alive, drain_mode, env, eventually};

#[tokio::test]
async fn runs_in_priority_order_then_fifo() {
    let env = env();
    let low = env.add("echo low", |j| j.priority(1)).await;
    let high = env.add("echo high", |j| j.priority(9)).await;
    let mid = env.add("echo mid", |j| j.priority(5)).await;
    let mid2 = env.add("echo mid2", |j| j.priority(5)).await;
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    let order: Vec<&str> =
        lines.iter().filter(|l| l.contains(" done in ")).map(String::as_str).collect();
    assert_eq!(order.len(), 4, "{lines:?}");
    for (line, id) in order.iter().zip([high, mid, mid2, low]) {
        assert!(line.starts_with(&format!("job #{id} done in ")), "{lines:?}");
    }
    assert_eq!(lines.last().unwrap(), "finished: 4 done, 0 failed");
    assert_eq!(summary.exit_code(), 0);
    assert_eq!(env.job(high).await.result.as_deref(), Some("high"));
}

#[tokio::test]
async fn the_seed_transcript() {
    let env = env();
    let slow = env
        .add("sleep 5", |j| j.priority(9).max_runtime(Some(Duration::from_secs(1))).max_attempts(1))
        .await;
    let echo = env.add(r#"echo "rebuilt search index: 412 documents""#, |j| j.priority(5)).await;
    let three = env.add("exit 3", |j| j.priority(1).max_attempts(1)).await;
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines[0].starts_with(&format!("job #{slow} FAILED in ")), "{lines:?}");
    assert!(
        lines[0].contains(
            "s (timeout: exceeded max runtime of 1s (all its processes killed, contained by "
        ),
        "{lines:?}"
    );
    assert!(lines[1].starts_with(&format!("job #{echo} done in ")), "{lines:?}");
    assert!(lines[2].starts_with(&format!("job #{three} FAILED in ")), "{lines:?}");
    assert!(lines[2].ends_with("s (exit code 3)"), "{lines:?}");
    assert_eq!(lines[3], "finished: 1 done, 2 failed");
    assert_eq!(summary.exit_code(), 1);
    assert_eq!(env.job(echo).await.result.as_deref(), Some("rebuilt search index: 412 documents"));
    let failed = env.job(three).await;
    assert_eq!((failed.state, failed.exit_code), (JobState::Failed, Some(3)));
    let error = env.job(slow).await.last_error.unwrap_or_default();
    assert!(
        error.starts_with(
            "timeout: exceeded max runtime of 1s (all its processes killed, contained by "
        ),
        "{error}"
    );
}

#[tokio::test]
async fn a_failure_with_attempts_left_is_retried_later() {
    let env = env();
    let id = env.add("echo 'disk is full' >&2; exit 1", |j| j).await;
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    assert!(lines[0].starts_with(&format!("job #{id} failed in ")), "{lines:?}");
    assert!(lines[0].ends_with("s (exit code 1) — retry 1/3 in 2s"), "{lines:?}");
    assert_eq!(lines[1], "finished: 0 done, 1 failed");
    assert_eq!(summary.exit_code(), 1);
    let job = env.job(id).await;
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.last_error.as_deref(), Some("exit code 1: disk is full"));
    assert!(job.not_before > env.now(), "not due again before its backoff");
}

#[tokio::test]
async fn output_goes_to_a_log_with_a_header_per_attempt() {
    let env = env();
    let id = env.add("echo out; echo err >&2; printf 'last line without newline'", |j| j).await;
    env.drain(env.runner(env.config())).await;
    let log = std::fs::read_to_string(env.logs().join(format!("{id}.log"))).unwrap();
    let mut lines = log.lines();
    assert!(lines.next().unwrap().starts_with(&format!("--- job #{id} attempt 1/3 started ")));
    assert_eq!(lines.collect::<Vec<_>>(), ["out", "err", "last line without newline"]);
    assert_eq!(env.job(id).await.result.as_deref(), Some("last line without newline"));
}

/// Past its cap a log keeps its head and its tail: the error at the end of
/// a chatty job is what a user looks for.
#[tokio::test]
async fn the_log_is_capped_keeping_its_head_and_tail() {
    let env = env();
    let id = env.add("i=0; while [ $i -lt 500 ]; do echo line $i; i=$((i+1)); done", |j| j).await;
    let mut cfg = env.config();
    cfg.log_cap_bytes = 1000;
    env.drain(env.runner(cfg)).await;
    let log = std::fs::read_to_string(env.logs().join(format!("{id}.log"))).unwrap();
    assert!(log.len() < 1400, "{} bytes", log.len());
    assert!(log.contains("the log's cap of 1000 bytes was reached"), "{log}");
    assert!(log.contains("\nline 0\n"), "the head is kept: {log}");
    assert!(log.ends_with("line 498\nline 499\n"), "the tail is kept: {log}");
    assert_eq!(
        env.job(id).await.result.as_deref(),
        Some("line 499"),
        "the summary sees all output"
    );
}

#[tokio::test]
async fn a_vanished_working_directory_fails_clearly() {
    let env = env();
    let gone = env.path("gone");
    std::fs::create_dir(&gone).unwrap();
    let job = NewJob::shell("true", gone.to_string_lossy()).max_attempts(1);
    let id = env.store.push(job, env.now()).await.unwrap().job.id;
    std::fs::remove_dir(&gone).unwrap();
    let (_, lines) = env.drain(env.runner(env.config())).await;
    let expected = format!(
        "(working directory {} no longer exists (recorded when the job was added))",
        gone.display()
    );
    assert!(lines[0].ends_with(&expected), "{lines:?}");
    assert_eq!(env.job(id).await.state, JobState::Failed);
}

#[tokio::test]
async fn a_job_killed_by_a_signal_says_so() {
    let env = env();
    let id = env.add("kill -9 $$", |j| j.max_attempts(1)).await;
    let (_, lines) = env.drain(env.runner(env.config())).await;
    assert!(lines[0].ends_with("(killed by signal 9)"), "{lines:?}");
    assert_eq!(env.job(id).await.last_error.as_deref(), Some("killed by signal 9"));
}

#[tokio::test]
async fn once_runs_one_job() {
    let env = env();
    let first = env.add("true", |j| j.priority(1)).await;
    let second = env.add("true", |j| j).await;
    let (summary, _) = env.drain(env.runner(drain_mode(env.config(), Mode::Once))).await;
    assert_eq!(summary.done, 1);
    assert_eq!(env.job(first).await.state, JobState::Done);
    assert_eq!(env.job(second).await.state, JobState::Pending);
}

#[tokio::test]
async fn payload_env_and_job_variables_reach_the_command() {
    let env = env();
    let job = NewJob::new(
        "shell",
        serde_json::json!({
            "command": "echo \"$GREETING $SLOTHQUEUE_JOB_ID $SLOTHQUEUE_ATTEMPT $SLOTHQUEUE_KIND\"",
            "cwd": env.dir.path(),
            "env": {"GREETING": "hello"},
        }),
    );
    let id = env.store.push(job, env.now()).await.unwrap().job.id;
    env.drain(env.runner(env.config())).await;
    assert_eq!(env.job(id).await.result, Some(format!("hello {id} 1 shell")));
}

#[tokio::test]
async fn rust_handlers_run_and_obey_max_runtime() {
    let env = env();
    let push = |kind: &str, runtime: Option<Duration>| {
        NewJob::new(kind, serde_json::json!({"to": "a@example.com"}))
            .max_runtime(runtime)
            .max_attempts(1)
    };
    let quick = env.store.push(push("email", None), env.now()).await.unwrap().job.id;
    let stuck = env
        .store
        .push(push("stuck", Some(Duration::from_millis(200))), env.now())
        .await
        .unwrap()
        .job
        .id;
    let mut runner = env.runner(env.config());
    runner.register(
        "email",
        handler_fn(|job, _ctx| async move {
            ExecOutcome::success(format!("sent to {}", job.payload["to"].as_str().unwrap_or("?")))
        }),
    );
    runner.register(
        "stuck",
        handler_fn(|_job, ctx| async move {
            let mut stop = ctx.stop();
            stop.requested().await;
            ExecOutcome::Stopped { detail: "handler stopped".into() }
        }),
    );
    let (summary, lines) = env.drain(runner).await;
    assert_eq!((summary.done, summary.failed), (1, 1), "{lines:?}");
    assert_eq!(env.job(quick).await.result.as_deref(), Some("sent to a@example.com"));
    assert_eq!(
        env.job(stuck).await.last_error.as_deref(),
        Some("timeout: exceeded max runtime of 200ms (handler stopped)")
    );
}

#[tokio::test]
async fn a_handlers_permanent_failure_ends_the_job_at_once_and_a_plain_one_is_retried() {
    let env = env();
    let push = |kind: &str| NewJob::new(kind, serde_json::json!({})).max_attempts(3);
    let bad = env.store.push(push("refuse").priority(1), env.now()).await.unwrap().job.id;
    let flaky = env.store.push(push("flaky"), env.now()).await.unwrap().job.id;
    let mut runner = env.runner(env.config());
    runner.register(
        "refuse",
        handler_fn(|_, _| async { ExecOutcome::permanent_failure("no such account: 42") }),
    );
    runner.register("flaky", handler_fn(|_, _| async { ExecOutcome::failure("try later") }));
    let (summary, lines) = env.drain(runner).await;
    assert_eq!((summary.done, summary.failed), (0, 2), "{lines:?}");

    let job = env.job(bad).await;
    assert_eq!((job.state, job.attempts), (JobState::Failed, 1), "not retried");
    assert_eq!(job.last_error.as_deref(), Some("no such account: 42"));
    let said = format!("s (no such account: 42; {})", slothqueue_core::machine::NOT_RETRIED);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("job #{bad} FAILED in ")) && l.ends_with(&said)),
        "{lines:?}"
    );
    let job = env.job(flaky).await;
    assert_eq!((job.state, job.attempts), (JobState::Pending, 1), "retried after its backoff");
    assert!(lines.iter().any(|l| l.contains("retry 1/3")), "{lines:?}");
}

#[tokio::test]
async fn only_registered_kinds_and_served_queues_are_claimed() {
    let env = env();
    let foreign = env
        .store
        .push(NewJob::new("unknown-kind", serde_json::json!({})), env.now())
        .await
        .unwrap()
        .job
        .id;
    let other_queue = env.add("true", |j| j.queue("elsewhere")).await;
    let mine = env.add("true", |j| j.queue("mine")).await;
    let mut cfg = env.config();
    cfg.queues = vec!["mine".into()];
    let (summary, _) = env.drain(env.runner(cfg)).await;
    assert_eq!(summary.done, 1);
    assert_eq!(env.job(mine).await.state, JobState::Done);
    assert_eq!(env.job(foreign).await.state, JobState::Pending);
    assert_eq!(env.job(other_queue).await.state, JobState::Pending);
}

#[tokio::test]
async fn on_finish_runs_after_each_job_and_its_failure_is_only_a_warning() {
    let env = env();
    let ok = env.add("echo fine", |j| j.priority(2)).await;
    let bad = env.add("exit 4", |j| j.priority(1).max_attempts(1)).await;
    let notes = env.path("notes");
    let mut cfg = env.config();
    cfg.on_finish = Some(format!(
        "echo \"$SLOTHQUEUE_JOB_ID $SLOTHQUEUE_STATE $SLOTHQUEUE_EXIT_CODE $SLOTHQUEUE_RESULT\" >> {}; [ $SLOTHQUEUE_STATE = done ]",
        notes.display()
    ));
    let (summary, lines) = env.drain(env.runner(cfg)).await;
    let notes = std::fs::read_to_string(notes).unwrap();
    assert_eq!(notes, format!("{ok} done 0 fine\n{bad} failed 4 \n"));
    assert!(
        lines.contains(&format!("warning: on-finish command for job #{bad} failed: exit code 1")),
        "{lines:?}"
    );
    assert_eq!((summary.done, summary.failed), (1, 1));
    assert_eq!(env.job(ok).await.state, JobState::Done);
}

#[tokio::test]
async fn an_on_finish_command_past_its_timeout_is_killed_with_its_group() {
    let env = env();
    let id = env.add("true", |j| j).await;
    let pid_file = env.path("on_finish_child");
    let mut cfg = env.config();
    // A background child in the command's group, which must die with it.
    cfg.on_finish = Some(format!("sleep 30 & echo $! > {}; wait", pid_file.display()));
    cfg.on_finish_timeout = Duration::from_millis(300);
    let (summary, lines) = env.drain(env.runner(cfg)).await;
    assert_eq!(summary.done, 1);
    assert_eq!(summary.exit_code(), 0, "a notification never decides the run's outcome");
    assert!(
        lines.contains(&format!(
            "warning: on-finish command for job #{id} failed: stopped (process group killed)"
        )),
        "{lines:?}"
    );
    let child: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    eventually("the on-finish command's child to be gone", || !alive(child)).await;
    assert_eq!(env.job(id).await.state, JobState::Done);
}

/// A job that succeeded while its log could not be written is still done,
/// and its result says the log is missing instead of hiding it.
#[tokio::test]
async fn a_failed_log_write_on_a_successful_job_is_reported() {
    let env = env();
    let id = env.add("echo fine", |j| j).await;
    let mut cfg = env.config();
    let not_a_folder = env.path("logs-is-a-file");
    std::fs::write(&not_a_folder, "").unwrap();
    cfg.log_dir = not_a_folder;
    let (summary, _) = env.drain(env.runner(cfg)).await;
    assert_eq!(summary.done, 1);
    let result = env.job(id).await.result.unwrap_or_default();
    assert!(result.starts_with("fine (cannot open log in "), "{result}");
}
