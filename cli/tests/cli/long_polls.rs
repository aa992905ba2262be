//! Long polls cannot starve a server of file descriptors (issue 31, item
//! 10d): each `?wait=` held its connection and its wait's timer, so 900
//! of them once exhausted a 1,024 limit and stalled `/healthz` (and the
//! worker's load reading) for seconds. A poll now holds its connection
//! alone, and `serve` admits as many as its limit leaves room for and
//! answers the rest 503 at once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::process::Signal;

use crate::support::{Backend, TestContext, signal, wait_child};

/// The served process's soft and hard limit on open files.
const LIMIT: u32 = 128;

fn send(addr: &str, token: &str, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

/// The answer, if one comes within `within`.
fn answer(stream: &mut TcpStream, within: Duration) -> Option<String> {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut text = String::new();
    match stream.read_to_string(&mut text) {
        Ok(_) if !text.is_empty() => Some(text),
        _ => None,
    }
}

#[test]
fn long_polls_beyond_the_fd_budget_are_refused_and_healthz_answers() {
    let ctx = TestContext::new(Backend::Sqlite);
    let load = ctx.calm_load();
    // A job that stays pending: every wait on it lasts its full minute.
    ctx.ok(&["add", "true", "--delay", "1h"]);
    let mut child = Command::new("sh")
        .args(["-c", &format!("ulimit -n {LIMIT} && exec \"$@\""), "sh"])
        .arg(env!("CARGO_BIN_EXE_slothqueue"))
        .arg("--db")
        .arg(&ctx.db)
        .args(["serve", "--addr", "localhost:0", "--queue", "none", "--load-file", load])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", ctx.path(""))
        .current_dir(ctx.path(""))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let rest = line.strip_prefix("listening on http://").unwrap_or_else(|| panic!("{line:?}"));
    let (addr, token_file) =
        rest.trim_end().trim_end_matches(')').split_once(" (token in ").unwrap();
    let token = std::fs::read_to_string(token_file).unwrap().trim().to_owned();
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", child.id())).unwrap().count();

    let before = fds();
    // More waits than the limit could hold.
    let mut polls: Vec<TcpStream> =
        (0..LIMIT).map(|_| send(addr, &token, "/api/tasks/outbox/1?wait=60")).collect();
    let mut refused = 0;
    let mut held = Vec::new();
    for mut poll in polls.drain(..) {
        match answer(&mut poll, Duration::from_millis(300)) {
            Some(text) => {
                assert!(text.starts_with("HTTP/1.1 503"), "{text}");
                assert!(text.contains("too many long polls"), "{text}");
                refused += 1;
            }
            None => held.push(poll),
        }
    }
    assert!(refused > 0 && !held.is_empty(), "{refused} refused, {} held", held.len());
    let open = fds();
    assert!(open < LIMIT as usize - 16, "{open} descriptors open of {LIMIT}");
    // A held poll costs its connection, not a timer besides.
    assert!(
        open <= before + held.len() + 8,
        "{} polls held {} descriptors ({before} before them)",
        held.len(),
        open - before
    );
    // Within 2 s (the stall was 8 s).
    let mut health = send(addr, &token, "/healthz");
    let text = answer(&mut health, Duration::from_secs(2)).expect("/healthz did not answer");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    drop(held);
    signal(child.id(), Signal::TERM);
    wait_child(&mut child, Duration::from_secs(30));
}
