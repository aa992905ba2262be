//! What every browser story needs: the real `slothqueue serve` on a free
//! port over a temporary queue, chromedriver and a headless Chromium
//! logged in with the link `serve` printed, and the browser-side waits
//! (a `MutationObserver` in the page, bounded by WebDriver's script
//! timeout: nothing sleeps). The stories run one at a time (a lock), so
//! that two browsers never share this machine's few cores.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use fantoccini::wd::{Locator, TimeoutConfiguration};
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

/// The longest any one wait in a story may take.
pub const WAIT: Duration = Duration::from_secs(20);

/// One story at a time: each starts its own server and browser.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An executable named `name` on the PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// A child killed when the test ends, however it ends.
pub struct Reaped(Child, &'static str);

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
pub struct BrowserReaper(String);

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
pub fn line_matching(lines: &mpsc::Receiver<String>, pick: impl Fn(&str) -> bool) -> String {
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

/// Resolves once `look` (the body of a function of the script's
/// arguments, `args`) returns something other than `null` or `undefined`,
/// looked at now and at every change of the page: a `MutationObserver`,
/// bounded by the script timeout. Returns what `look` returned then.
pub async fn wait_until(client: &Client, what: &str, look: &str, args: Vec<Value>) -> Value {
    let script = format!(
        r#"
        const args = Array.from(arguments);
        const done = args.pop();
        const look = () => {{ {look} }};
        const now = look();
        if (now !== null && now !== undefined) {{ done(now); return; }}
        const seen = new MutationObserver(() => {{
            const t = look();
            if (t !== null && t !== undefined) {{ seen.disconnect(); done(t); }}
        }});
        seen.observe(document.documentElement, {{ subtree: true, childList: true, characterData: true, attributes: true }});
    "#
    );
    match client.execute_async(&script, args).await {
        Ok(v) if !v.is_null() => v,
        other => {
            let page = client.source().await.unwrap_or_default();
            panic!("never {what} within {WAIT:?}: {other:?}\n{page}")
        }
    }
}

/// Resolves once the element `selector` exists, is shown, and its text
/// contains `needle`. Returns the element's text then.
pub async fn wait_text(client: &Client, selector: &str, needle: &str) -> String {
    const LOOK: &str = r#"
        const e = document.querySelector(args[0]);
        return e && e.offsetParent !== null && e.textContent.includes(args[1]) ? e.textContent : null;
    "#;
    let what = format!("`{selector}` said {needle:?}");
    match wait_until(client, &what, LOOK, vec![json!(selector), json!(needle)]).await {
        Value::String(text) => text,
        other => panic!("{what}: {other:?}"),
    }
}

/// Resolves once no element `selector` is shown.
pub async fn wait_gone(client: &Client, selector: &str) {
    const LOOK: &str = r#"
        return Array.from(document.querySelectorAll(args[0])).every((e) => e.offsetParent === null) ? true : null;
    "#;
    wait_until(client, &format!("`{selector}` went"), LOOK, vec![json!(selector)]).await;
}

/// Clicks the element `selector` finds, once it is on the page and shown.
/// The page redraws its lists live, so an element found may be replaced
/// before the click lands (seen under load: "no such element", "stale
/// element"): each try waits for the element as `wait_text` waits for
/// text, and a click that missed a redrawn element tries again, three
/// times at most.
pub async fn click(client: &Client, selector: &str) {
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

/// Types `text` into the field `selector` as a person does, after
/// emptying it.
pub async fn type_into(client: &Client, selector: &str, text: &str) {
    wait_text(client, selector, "").await;
    let field = client.find(Locator::Css(selector)).await.expect("the field");
    field.clear().await.expect("clear the field");
    field.send_keys(text).await.expect("type");
}

/// Answers the page's confirmation: waits for it to name `needle`, then
/// clicks its OK button. Returns the question as the page asked it.
pub async fn confirm(client: &Client, needle: &str) -> String {
    let asked = wait_text(client, "#confirm-text", needle).await;
    click(client, "#confirm-ok").await;
    wait_gone(client, "#confirm-text").await;
    asked
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

pub async fn color_scheme(client: &Client, scheme: &str) {
    let features = json!({ "features": [{ "name": "prefers-color-scheme", "value": scheme }] });
    client.issue_cmd(Cdp("Emulation.setEmulatedMedia", features)).await.expect("emulate media");
}

/// Runs the CLI against `db`.
pub fn slothqueue(db: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_slothqueue"))
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run slothqueue")
}

/// Runs the CLI with `--json` and reads its answer; a failure panics
/// with what it printed.
pub fn cli_json(db: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = slothqueue(db, &all);
    assert!(out.status.success(), "slothqueue {all:?}: {out:?}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("slothqueue {all:?}: {e}: {out:?}"))
}

/// `http://127.0.0.1:PORT` from `listening on http://127.0.0.1:PORT (…)`.
fn listening_url(line: &str) -> String {
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned()
}

/// A server, a browser logged in to it, and where screenshots go. The
/// processes end when it is dropped, however the story ends.
pub struct Session {
    pub client: Client,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The one-time login link `serve` printed (spent by now).
    pub link: String,
    /// The API token, from the token file.
    pub token: String,
    pub db: PathBuf,
    pub shots: PathBuf,
    _browser: BrowserReaper,
    _chromedriver: Reaped,
    _server: Reaped,
    _dir: tempfile::TempDir,
    _one: tokio::sync::MutexGuard<'static, ()>,
}

impl Session {
    /// The page at `#/…` (`""`: the list).
    pub async fn open(&self, fragment: &str) {
        self.client.goto(&format!("{}/{fragment}", self.base)).await.expect("open the page");
    }

    /// Saves a screenshot of what the browser shows as `name` under
    /// `target/screenshots/`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        let path = self.shots.join(name);
        std::fs::write(&path, png).expect("write screenshot");
        eprintln!("screenshot: {}", path.display());
    }

    /// The CLI's `--json` answer for `args` on this story's queue.
    pub fn cli(&self, args: &[&str]) -> Value {
        cli_json(&self.db, args)
    }

    /// `slothqueue add ARGS…` on this story's queue: the new job's id.
    pub fn add(&self, args: &[&str]) -> u64 {
        let mut all = vec!["add"];
        all.extend_from_slice(args);
        let job = self.cli(&all);
        job["id"].as_u64().unwrap_or_else(|| panic!("no id in {job}"))
    }
}

/// Starts a story: the server, chromedriver, a browser at 1280×900 logged
/// in with the printed link, on the list. `None` when chromium or
/// chromedriver is missing (outside CI: the test then passes, saying
/// SKIPPED loudly).
pub async fn start() -> Option<Session> {
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
        return None;
    };
    let one = ONE_AT_A_TIME.lock().await;
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot directory");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("queue.db");

    // The real server, on a free port, with a load gate nothing reaches
    // (a story must not wait on a busy build machine's load).
    let mut server = Command::new(env!("CARGO_BIN_EXE_slothqueue"))
        .arg("--db")
        .arg(&db)
        .args(["serve", "--addr", "127.0.0.1:0", "--load-ceiling", "1000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start slothqueue serve");
    let server_lines = stdout_lines(&mut server);
    let server = Reaped(server, "slothqueue serve");
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
    let chromedriver = Reaped(chromedriver, "chromedriver");
    let started = line_matching(&driver_lines, |l| l.contains("started successfully on port"));
    let port: u16 = started
        .rsplit("port ")
        .next()
        .and_then(|p| p.trim_end_matches('.').trim().parse().ok())
        .unwrap_or_else(|| panic!("no port in {started:?}"));

    let profile = dir.path().join("chromium-profile");
    let browser = BrowserReaper(profile.display().to_string());
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
    let base = listening_url(&listening);
    let home = url::Url::parse(&format!("{base}/")).expect("url");
    // The link's page goes on to `/` by itself: wait for that navigation
    // before looking inside the page.
    client.wait().at_most(WAIT).for_url(&home).await.expect("the link went on to the queue");
    wait_text(&client, "#counts", "pending").await;
    Some(Session {
        client,
        base,
        link,
        token: token.trim().to_owned(),
        db,
        shots,
        _browser: browser,
        _chromedriver: chromedriver,
        _server: server,
        _dir: dir,
        _one: one,
    })
}
