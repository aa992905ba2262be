//! The command line's own refusals and shapes (the hardening issue, point
//! 6): a missing argument is named, `--json logs` is JSON, `serve` takes
//! `localhost`.

use crate::support::{Backend, TestContext};

#[test]
fn a_missing_argument_is_named() {
    let ctx = TestContext::new(Backend::Sqlite);
    for (args, fragment) in [
        (&["show"][..], "were not provided: <ID> (usage: slothqueue show <ID>)"),
        (&["retry"], "were not provided: <ID>"),
        (&["completions"], "were not provided: <SHELL>"),
    ] {
        let out = ctx.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(fragment), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    assert!(!ctx.db.exists());
}

#[test]
fn json_logs_are_json() {
    let ctx = TestContext::new(Backend::Sqlite);
    let load = ctx.calm_load();
    ctx.ok(&["add", "echo 'say \"hi\"'; echo second"]);
    ctx.ok(&["run", "--load-file", load]);
    let plain = ctx.ok(&["logs", "1"]);
    let json: serde_json::Value = serde_json::from_str(&ctx.ok(&["--json", "logs", "1"])).unwrap();
    assert_eq!(json["id"], 1);
    assert_eq!(json["log"], plain);
    assert!(plain.contains("say \"hi\"\nsecond\n"), "{plain}");
    let followed = ctx.ok(&["--json", "logs", "1", "--follow"]);
    let pieces: Vec<serde_json::Value> =
        followed.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let text: String = pieces.iter().map(|p| p["log"].as_str().unwrap()).collect();
    assert_eq!(text, plain);
}

#[cfg(feature = "http")]
#[test]
fn serve_listens_on_localhost() {
    use std::io::BufRead;
    use std::time::Duration;

    use rustix::process::Signal;

    use crate::support::{signal, wait_child};

    let ctx = TestContext::new(Backend::Sqlite);
    let mut child = ctx.spawn(&["serve", "--addr", "localhost:0"]);
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let refused = child.try_wait().unwrap().is_some();
    if !refused {
        signal(child.id(), Signal::TERM);
    }
    let status = wait_child(&mut child, Duration::from_secs(60));
    assert!(line.starts_with("listening on http://127.0.0.1:"), "{line:?} ({status})");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_bare_slothqueue_prints_the_usage() {
    let ctx = TestContext::new(Backend::Sqlite);
    let out = ctx.bare_command().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("Usage: slothqueue [OPTIONS] <COMMAND>"), "{text}");
}

#[test]
fn json_into_a_closed_pipe_is_quiet() {
    use std::io::Read;
    use std::time::Duration;

    use crate::support::wait_child;
    let ctx = TestContext::new(Backend::Sqlite);
    for i in 0..300 {
        ctx.ok(&["add", &format!("echo {i} {}", "x".repeat(200))]);
    }
    let mut child = ctx
        .command(&["--json", "list", "-n", "300"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // stdout is closed now: the rest of the output meets a closed pipe.
    let status = wait_child(&mut child, Duration::from_secs(60));
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "");
}
