//! Handler directories: kind `K` runs `DIR/K`, and nothing outside `DIR`.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use slothqueue_core::{JobState, NewJob};
use slothqueue_runner::HandlerDirExecutor;

use crate::support::env;

fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn a_handler_gets_the_payload_on_stdin_and_its_identity_in_env() {
    let env = env();
    let dir = env.path("handlers");
    std::fs::create_dir(&dir).unwrap();
    let out = env.path("out");
    script(
        &dir.join("greet"),
        &format!(
            "cat > {o}; echo \"$SLOTHQUEUE_JOB_ID $SLOTHQUEUE_ATTEMPT $SLOTHQUEUE_KIND\" >> {o}; echo greeted",
            o = out.display()
        ),
    );
    std::fs::write(dir.join("notes.txt"), "not executable").unwrap();
    let handlers = HandlerDirExecutor::open(&dir).unwrap();
    assert_eq!(handlers.kinds(), ["greet"]);

    let payload = serde_json::json!({"name": "Ada"});
    let id = env.store.push(NewJob::new("greet", payload.clone()), env.now()).await.unwrap().job.id;
    let mut runner = env.runner(env.config());
    runner.register_handlers(handlers);
    let (summary, _) = env.drain(runner).await;
    assert_eq!(summary.done, 1);
    let written = std::fs::read_to_string(&out).unwrap();
    let (stdin, ids) = written.split_once('\n').unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(stdin).unwrap(), payload);
    assert_eq!(ids, format!("{id} 1 greet\n"));
    assert_eq!(env.job(id).await.result.as_deref(), Some("greeted"));
}

#[tokio::test]
async fn nothing_outside_the_directory_runs() {
    let env = env();
    let dir = env.path("handlers");
    std::fs::create_dir(&dir).unwrap();
    let outside = env.path("outside");
    script(&outside, "echo escaped");
    script(&dir.join("ok"), "true");
    symlink(&outside, dir.join("evil")).unwrap();
    symlink(dir.join("ok"), dir.join("alias")).unwrap();
    symlink("../outside", dir.join("sneaky")).unwrap();

    let handlers = HandlerDirExecutor::open(&dir).unwrap();
    assert_eq!(handlers.kinds(), ["alias", "ok"], "links out of the directory are not handlers");
    for bad in ["../outside", "../x", "/bin/sh", ".hidden", "", "a/b"] {
        let err = handlers.resolve(bad).unwrap_err().to_string();
        assert!(err.contains("is not a plain name"), "{bad}: {err}");
    }
    for bad in ["evil", "sneaky"] {
        let err = handlers.resolve(bad).unwrap_err().to_string();
        assert!(err.contains("outside"), "{bad}: {err}");
    }
    assert!(handlers.resolve("missing").unwrap_err().to_string().contains("no handler `missing`"));

    // A job of kind `evil` is not claimed by a runner with these handlers.
    let evil =
        env.store.push(NewJob::new("evil", serde_json::json!({})), env.now()).await.unwrap().job.id;
    let mut runner = env.runner(env.config());
    runner.register_handlers(handlers);
    let (summary, _) = env.drain(runner).await;
    assert_eq!(summary.done + summary.failed, 0);
    assert_eq!(env.job(evil).await.state, JobState::Pending);
}

#[tokio::test]
async fn a_handler_named_shell_does_not_take_over_shell_jobs() {
    let env = env();
    let dir = env.path("handlers");
    std::fs::create_dir(&dir).unwrap();
    script(&dir.join("shell"), "echo hijacked");
    let handlers = HandlerDirExecutor::open(&dir).unwrap();
    let id = env.add("echo plain", |j| j).await;
    let mut runner = env.runner(env.config());
    runner.register_handlers(handlers);
    env.drain(runner).await;
    assert_eq!(env.job(id).await.result.as_deref(), Some("plain"));
}

/// A drain that ends with due jobs it cannot run says which and why, so
/// `finished: 0 done, 0 failed` is not all a user sees while a job of a
/// kind nobody serves waits forever.
#[tokio::test]
async fn a_drain_says_which_due_jobs_it_skipped_and_why() {
    let env = env();
    let download =
        env.store.push(NewJob::new("download", serde_json::json!({})), env.now()).await.unwrap();
    let backup = env.add("true", |j| j.queue("backups")).await;
    let mine = env.add("true", |j| j).await;
    let mut cfg = env.config();
    cfg.queues = vec!["default".to_owned()];
    let (summary, lines) = env.drain(env.runner(cfg)).await;
    assert_eq!(summary.done, 1);
    assert_eq!(env.job(mine).await.state, JobState::Done);
    let skipped = lines.iter().find(|l| l.starts_with("skipped")).expect("a skipped line");
    assert_eq!(
        skipped,
        &format!(
            "skipped 2 due job(s) this runner cannot run: #{} (no handler for kind download), #{backup} (queue `backups` not served)",
            download.job.id
        )
    );
}
