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

/// A handler directory with mode 0755, whatever the umask: the vetting
/// below refuses a group-writable folder.
fn handler_dir(env: &crate::support::Env, name: &str) -> std::path::PathBuf {
    let dir = env.path(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Drains a runner over `dir` with one job of kind `kind` pushed, and
/// returns the job's id with the runner's lines: the job must stay pending,
/// never claimed, and the handler (which writes `ran`) never run.
async fn drain_refused(env: &crate::support::Env, dir: &Path, kind: &str) -> Vec<String> {
    let handlers = HandlerDirExecutor::open(dir).unwrap();
    assert!(!handlers.kinds().iter().any(|k| k == kind), "{kind} is not offered to the runner");
    let id =
        env.store.push(NewJob::new(kind, serde_json::json!({})), env.now()).await.unwrap().job.id;
    let mut runner = env.runner(env.config());
    runner.register_handlers(handlers);
    let (summary, lines) = env.drain(runner).await;
    assert_eq!(summary.done + summary.failed, 0, "{lines:?}");
    let job = env.job(id).await;
    assert_eq!(job.state, JobState::Pending, "{lines:?}");
    assert_eq!(job.attempts, 0, "never claimed");
    assert!(!env.path("ran").exists(), "the refused handler ran");
    lines
}

/// The runner's lines that say `kind`'s handler was refused.
fn refusals<'a>(lines: &'a [String], kind: &str) -> Vec<&'a String> {
    lines
        .iter()
        .filter(|l| {
            l.contains("refusing to run handler") && l.contains(&format!("(kind `{kind}`)"))
        })
        .collect()
}

/// Issue 31 finding 1: a world-writable (or group-writable) handler is
/// anyone's command run as the runner's user; it is refused, said once.
#[tokio::test]
async fn a_handler_others_can_write_is_refused_and_its_job_stays_pending() {
    for (mode, kind) in [(0o777, "open"), (0o775, "group")] {
        let env = env();
        let dir = handler_dir(&env, "handlers");
        let ran = env.path("ran");
        script(&dir.join(kind), &format!("touch {}", ran.display()));
        std::fs::set_permissions(dir.join(kind), std::fs::Permissions::from_mode(mode)).unwrap();
        let lines = drain_refused(&env, &dir, kind).await;
        let said = refusals(&lines, kind);
        assert_eq!(said.len(), 1, "said once: {lines:?}");
        assert!(said[0].contains(&format!("(mode {mode:04o})")), "{}", said[0]);
    }
}

/// A private handler in a folder anyone can write (0777) could be
/// replaced by anyone: refused too.
#[tokio::test]
async fn a_handler_in_a_world_writable_directory_is_refused() {
    let env = env();
    let dir = handler_dir(&env, "handlers");
    script(&dir.join("work"), &format!("touch {}", env.path("ran").display()));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let lines = drain_refused(&env, &dir, "work").await;
    let said = refusals(&lines, "work");
    assert_eq!(said.len(), 1, "{lines:?}");
    assert!(said[0].contains("folder") && said[0].contains("(mode 0777)"), "{}", said[0]);
}

/// Every folder between the handler (resolved through a link) and the
/// directory counts, not only the directory.
#[tokio::test]
async fn a_handler_linked_from_a_world_writable_subfolder_is_refused() {
    let env = env();
    let dir = handler_dir(&env, "handlers");
    let sub = dir.join("lib");
    std::fs::create_dir(&sub).unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o777)).unwrap();
    script(&sub.join("real"), &format!("touch {}", env.path("ran").display()));
    symlink("lib/real", dir.join("linked")).unwrap();
    let lines = drain_refused(&env, &dir, "linked").await;
    assert!(
        refusals(&lines, "linked")[0].contains(&sub.canonicalize().unwrap().display().to_string())
    );
}

/// A handler owned by another user is theirs to change: refused. Needs
/// root to give a file away; skipped (said on stderr) otherwise.
#[tokio::test]
async fn a_handler_owned_by_another_user_is_refused() {
    if !rustix::process::geteuid().is_root() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED a_handler_owned_by_another_user_is_refused: needs root to chown"
        );
        return;
    }
    let env = env();
    let dir = handler_dir(&env, "handlers");
    script(&dir.join("theirs"), &format!("touch {}", env.path("ran").display()));
    std::os::unix::fs::chown(dir.join("theirs"), Some(4242), Some(4242)).unwrap();
    let lines = drain_refused(&env, &dir, "theirs").await;
    assert!(refusals(&lines, "theirs")[0].contains("owned by uid 4242"), "{lines:?}");
}

/// A handler made writable after the runner opened the directory is
/// refused when its job would start, not run.
#[tokio::test]
async fn a_handler_made_writable_after_the_open_does_not_run() {
    let env = env();
    let dir = handler_dir(&env, "handlers");
    script(&dir.join("late"), &format!("touch {}", env.path("ran").display()));
    let handlers = HandlerDirExecutor::open(&dir).unwrap();
    assert_eq!(handlers.kinds(), ["late"]);
    std::fs::set_permissions(dir.join("late"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = handlers.resolve("late").unwrap_err().to_string();
    assert!(err.contains("writable by other users"), "{err}");
}
