//! The web page of `slothqueue serve` in a real browser: headless Chromium
//! driven through chromedriver (WebDriver) by fantoccini.
//!
//! One story, end to end, against the real binary on a free port and a
//! temporary queue: open the one-time login link `serve` printed, see a
//! job appear after `slothqueue add`, open it, watch its log tail grow,
//! cancel it, see its state change; a queue paused from the list, a job
//! waiting on it held and released from its page, the page saying why it
//! waits in the server's words (the same `show --json` gives); the cookie
//! without the key its login left in the origin's storage sent to the
//! login; a spent link refused and the token form used instead.
//! Screenshots of the list and the job page are saved under
//! `target/screenshots/` for a reviewer to look at.
//!
//! Without `chromium` and `chromedriver` on the PATH the test says
//! `SKIPPED` loudly and passes, except under CI (`CI` set), where `.ci/run`
//! installs them and their absence is a failure.
//!
//! Every wait is a browser-side wait with a deadline: a script that resolves
//! when a `MutationObserver` sees the page say what is awaited, bounded by
//! WebDriver's script timeout. Nothing sleeps.

#![cfg(feature = "http")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly on purpose; a panic is the test's report"
)]
#![allow(clippy::print_stderr, reason = "a skipped test says so loudly; screenshots are named")]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use fantoccini::wd::{Locator, TimeoutConfiguration};
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

/// The longest any one wait in the story may take.
const WAIT: Duration = Duration::from_secs(20);

/// An executable named `name` on the PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// A child killed when the test ends, however it ends.
struct Reaped(Child, &'static str);

impl Drop for Reaped {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_some() {
            return;
        }
        let pid = rustix::process::Pid::from_child(&self.0);
        // SIGTERM first: `serve` hands its job back, chromedriver closes
        // its browsers; SIGKILL if that takes more than 10 s.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            let child = &mut self.0;
            s.spawn(move || {
                let _ = tx.send(child.wait());
            });
            if rx.recv_timeout(Duration::from_secs(10)).is_err() {
                eprintln!("{} did not stop on SIGTERM within 10 s: killed", self.1);
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        });
    }
}

/// Kills, when the test ends however it ends, every process whose command
/// line names this test's own browser profile: the browser chromedriver
/// started, which a test that panicked before closing its session would
/// leave behind.
struct BrowserReaper(String);

impl Drop for BrowserReaper {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir("/proc") else { return };
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
            let mine = cmdline
                .split(|b| *b == 0)
                .any(|arg| arg == format!("--user-data-dir={}", self.0).as_bytes());
            if let (true, Some(pid)) = (mine, rustix::process::Pid::from_raw(pid)) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// The next line of `lines` that satisfies `pick`, each waited for at
/// most `WAIT`.
fn line_matching(lines: &mpsc::Receiver<String>, pick: impl Fn(&str) -> bool) -> String {
    loop {
        match lines.recv_timeout(WAIT) {
            Ok(line) if pick(&line) => return line,
            Ok(_) => {}
            Err(e) => panic!("no such line within {WAIT:?}: {e}"),
        }
    }
}

/// The lines a child prints on stdout, read by a thread.
fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().expect("stdout piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Resolves once the element `selector` exists and its text contains
/// `needle`: a `MutationObserver` in the page, bounded by the script
/// timeout. Returns the element's text then.
async fn wait_text(client: &Client, selector: &str, needle: &str) -> String {
    const SCRIPT: &str = r#"
        const [selector, needle, done] = arguments;
        const look = () => {
            const e = document.querySelector(selector);
            return e && e.offsetParent !== null && e.textContent.includes(needle) ? e.textContent : null;
        };
        const now = look();
        if (now !== null) { done(now); return; }
        const seen = new MutationObserver(() => {
            const t = look();
            if (t !== null) { seen.disconnect(); done(t); }
        });
        seen.observe(document.documentElement, { subtree: true, childList: true, characterData: true, attributes: true });
    "#;
    match client.execute_async(SCRIPT, vec![json!(selector), json!(needle)]).await {
        Ok(Value::String(text)) => text,
        other => {
            let page = client.source().await.unwrap_or_default();
            panic!("`{selector}` never said {needle:?} within {WAIT:?}: {other:?}\n{page}")
        }
    }
}

/// Clicks the element `selector` finds, once it is on the page and shown.
/// The page redraws its lists live, so an element found may be replaced
/// before the click lands (seen under load: "no such element", "stale
/// element"): each try waits for the element as `wait_text` waits for
/// text, and a click that missed a redrawn element tries again, three
/// times at most.
async fn click(client: &Client, selector: &str) {
    let mut missed = String::new();
    for _ in 0..3 {
        wait_text(client, selector, "").await;
        match client.find(Locator::Css(selector)).await {
            Ok(element) => match element.click().await {
                Ok(_) => return,
                Err(e) => missed = format!("cannot click `{selector}`: {e}"),
            },
            Err(e) => missed = format!("no `{selector}`: {e}"),
        }
    }
    panic!("{missed}");
}

/// A Chrome DevTools call through chromedriver (`goog/cdp/execute`): how
/// the test asks for the dark color scheme.
#[derive(Debug)]
struct Cdp(&'static str, Value);

impl fantoccini::wd::WebDriverCompatibleCommand for Cdp {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        let base = base.as_str().trim_end_matches('/');
        url::Url::parse(&format!("{base}/session/{}/goog/cdp/execute", session.unwrap_or("")))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({ "cmd": self.0, "params": self.1 }).to_string()))
    }
}

async fn color_scheme(client: &Client, scheme: &str) {
    let features = json!({ "features": [{ "name": "prefers-color-scheme", "value": scheme }] });
    client.issue_cmd(Cdp("Emulation.setEmulatedMedia", features)).await.expect("emulate media");
}

async fn screenshot(client: &Client, dir: &Path, name: &str) {
    let png = client.screenshot().await.expect("screenshot");
    let path = dir.join(name);
    std::fs::write(&path, png).expect("write screenshot");
    eprintln!("screenshot: {}", path.display());
}

fn slothqueue(db: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_slothqueue"))
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run slothqueue")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_queue_follows_a_log_and_cancels_a_job() {
    let (Some(driver), Some(chromium)) =
        (on_path("chromedriver"), on_path("chromium").or_else(|| on_path("chromium-browser")))
    else {
        let message = "SKIPPED: the browser test needs chromium and chromedriver on the PATH \
                       (apt-get install chromium chromium-driver)";
        assert!(std::env::var_os("CI").is_none(), "{message}; .ci/run installs them under CI");
        // Straight to the terminal: the test harness captures `eprintln!`
        // of a passing test, and a skip must be seen.
        let bar = "!".repeat(78);
        let _ = writeln!(std::io::stderr(), "\n{bar}\n{message}\n{bar}\n");
        return;
    };
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot directory");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("queue.db");

    // The real server, on a free port, with a load gate nothing reaches
    // (this test must not wait on a busy build machine's load).
    let mut server = Command::new(env!("CARGO_BIN_EXE_slothqueue"))
        .arg("--db")
        .arg(&db)
        .args(["serve", "--addr", "127.0.0.1:0", "--load-ceiling", "1000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start slothqueue serve");
    let server_lines = stdout_lines(&mut server);
    let _server = Reaped(server, "slothqueue serve");
    let listening = line_matching(&server_lines, |l| l.starts_with("listening on "));
    let link_line = line_matching(&server_lines, |l| l.starts_with("web page: "));
    let link = link_line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("a link in the line")
        .to_owned();
    assert!(link.contains("/login?code="), "{link_line}");
    let token = std::fs::read_to_string(dir.path().join("queue.db.token")).expect("token file");
    assert!(!link.contains(token.trim()), "the token is never in the link");
    eprintln!("{listening}\n{link_line}");

    // chromedriver on a port of its own choosing, which it prints.
    let mut chromedriver = Command::new(&driver)
        .args(["--port=0", "--log-level=WARNING"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start chromedriver");
    let driver_lines = stdout_lines(&mut chromedriver);
    let _chromedriver = Reaped(chromedriver, "chromedriver");
    let started = line_matching(&driver_lines, |l| l.contains("started successfully on port"));
    let port: u16 = started
        .rsplit("port ")
        .next()
        .and_then(|p| p.trim_end_matches('.').trim().parse().ok())
        .unwrap_or_else(|| panic!("no port in {started:?}"));

    let profile = dir.path().join("chromium-profile");
    let _browser = BrowserReaper(profile.display().to_string());
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "binary": chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--disable-breakpad", "--disable-crash-reporter",
                "--window-size=1280,900",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a chromium session");
    client
        .update_timeouts(TimeoutConfiguration::new(Some(WAIT), Some(WAIT), None))
        .await
        .expect("timeouts");

    // Log in with the printed link: it lands on the queue.
    client.goto(&link).await.expect("open the login link");
    let home = url::Url::parse(&format!("{}/", listening_url(&listening))).expect("url");
    // The link's page goes on to `/` by itself: wait for that navigation
    // before looking inside the page.
    client.wait().at_most(WAIT).for_url(&home).await.expect("the link went on to the queue");
    wait_text(&client, "#counts", "pending").await;

    // A job added by another process appears, runs and ends.
    let out = slothqueue(&db, &["add", "echo hello from the queue"]);
    assert!(out.status.success(), "{out:?}");
    wait_text(&client, "tr[data-id='1']", "done").await;
    // A job that writes a line every 0.2 s for 40 s.
    let out = slothqueue(
        &db,
        &["add", "i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo \"tick $i\"; sleep 0.2; done"],
    );
    assert!(out.status.success(), "{out:?}");
    wait_text(&client, "tr[data-id='2']", "running").await;
    wait_text(&client, "#runners", "running job #2").await;
    screenshot(&client, &shots, "list.png").await;

    // Its page: the fields, the trail, the log following live.
    client
        .find(Locator::Css("a[href='#/job/2']"))
        .await
        .expect("the job's link")
        .click()
        .await
        .expect("click");
    wait_text(&client, "#job-title", "running").await;
    // Who runs it, in the server's words (`now:` in `show`).
    wait_text(&client, "#job-why", "held by runner pid").await;
    wait_text(&client, "#job-events", "claimed").await;
    let early = wait_text(&client, "#job-log", "tick 3").await;
    let later = wait_text(&client, "#job-log", "tick 12").await;
    assert!(later.len() > early.len(), "the log grew: {early:?} then {later:?}");
    assert!(later.contains("tick 4\ntick 5\n"), "no line lost or doubled: {later}");
    screenshot(&client, &shots, "job.png").await;

    // Cancel: the runner stops it, the page says so.
    let cancel = client.find(Locator::Id("act-cancel")).await.expect("the cancel button");
    assert!(cancel.is_displayed().await.expect("displayed"));
    cancel.click().await.expect("click cancel");
    wait_text(&client, "#job-title", "cancelled").await;
    wait_text(&client, "#job-events", "cancel").await;
    let retry = client.find(Locator::Id("act-retry")).await.expect("the retry button");
    assert!(retry.is_displayed().await.expect("displayed"), "a cancelled job can be retried");
    let shown = slothqueue(&db, &["--json", "show", "2"]);
    let job: Value = serde_json::from_slice(&shown.stdout).expect("show --json");
    assert_eq!(job["state"], "cancelled", "{job}");
    screenshot(&client, &shots, "job-cancelled.png").await;
    color_scheme(&client, "dark").await;
    let background: String = client
        .execute("return getComputedStyle(document.body).backgroundColor", vec![])
        .await
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    assert_eq!(background, "rgb(21, 23, 26)", "the dark scheme's background");
    screenshot(&client, &shots, "job-dark.png").await;
    color_scheme(&client, "light").await;

    // Why a job waits, and the buttons that make it wait or not: its
    // queue paused from the list, the job held and released on its page.
    // (A job due in an hour gives the queue its row in the list.)
    client.goto(&format!("{}/#/", listening_url(&listening))).await.expect("back to the list");
    let out = slothqueue(&db, &["add", "--delay", "1h", "echo in an hour"]);
    assert!(out.status.success(), "{out:?}");
    wait_text(&client, "tr[data-queue='default']", "open").await;
    click(&client, "tr[data-queue='default'] button").await;
    wait_text(&client, "tr[data-queue='default']", "paused").await;
    let out = slothqueue(&db, &["add", "echo after the pause"]);
    assert!(out.status.success(), "{out:?}");
    wait_text(&client, "tr[data-id='4']", "pending").await;
    click(&client, "a[href='#/job/4']").await;
    let paused = wait_text(&client, "#job-why", "its queue default is paused since").await;
    // The page shows the server's why, the words `show` prints: not its own.
    let shown = slothqueue(&db, &["--json", "show", "4"]);
    let job: Value = serde_json::from_slice(&shown.stdout).expect("show --json");
    assert_eq!(job["why"].as_str(), Some(paused.as_str()), "{job}");
    click(&client, "#act-hold").await;
    wait_text(&client, "#job-why", "by http 127.0.0.1 — `slothqueue release 4` lets it run").await;
    wait_text(&client, "#job-title", "held").await;
    click(&client, "#act-release").await;
    wait_text(&client, "#job-why", "its queue default is paused since").await;
    client.goto(&format!("{}/#/", listening_url(&listening))).await.expect("back to the list");
    wait_text(&client, "tr[data-queue='default']", "paused").await;
    click(&client, "tr[data-queue='default'] button").await;
    wait_text(&client, "tr[data-id='4']", "done").await;
    wait_text(&client, "tr[data-queue='default']", "open").await;

    // The list at a phone's width.
    client.set_window_size(390, 844).await.expect("phone width");
    wait_text(&client, "tr[data-id='2']", "cancelled").await;
    client
        .execute("document.getElementById('jobs').scrollIntoView()", vec![])
        .await
        .expect("scroll to the jobs");
    screenshot(&client, &shots, "list-phone.png").await;
    client.set_window_size(1280, 900).await.expect("desktop width");

    // The cookie alone opens nothing (a browser sends it to every port):
    // without the key the login left in this origin's storage, the page
    // goes to the login.
    client.execute("localStorage.clear()", vec![]).await.expect("forget the key");
    client.goto(home.as_str()).await.expect("the page again");
    let login = home.join("login").expect("url");
    client.wait().at_most(WAIT).for_url(&login).await.expect("sent to the login");

    // The link was spent: opened again, it is refused, and the token
    // pasted into the form logs in instead.
    client.goto(&link).await.expect("open the spent link");
    wait_text(&client, "#notice", "already used").await;
    screenshot(&client, &shots, "login-spent-link.png").await;
    let form = client.find(Locator::Id("token")).await.expect("the token field");
    form.send_keys(token.trim()).await.expect("type the token");
    client
        .find(Locator::Css("#login button"))
        .await
        .expect("button")
        .click()
        .await
        .expect("submit");
    client.wait().at_most(WAIT).for_url(&home).await.expect("the form went on to the queue");
    wait_text(&client, "#counts", "cancelled").await;

    client.close().await.expect("close the browser");
}

/// `http://127.0.0.1:PORT` from `listening on http://127.0.0.1:PORT (…)`.
fn listening_url(line: &str) -> String {
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned()
}
