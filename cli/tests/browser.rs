//! The web page of `slothqueue serve` in a real browser: headless Chromium
//! driven through chromedriver (WebDriver) by fantoccini, against the real
//! binary on a free port and a temporary queue, in two stories (one at a
//! time): `story` (watching: log in, a job appears, runs, its log follows,
//! cancel, pause, hold, the login's rules) and `controls` (steering: search,
//! edit and clone, bulk actions, waiting states, dependents named on
//! cancel, history, schedules, the phone layout). `harness` starts the
//! processes and holds the browser-side waits. Screenshots are saved under
//! `target/screenshots/` for a reviewer to look at.
//!
//! Without `chromium` and `chromedriver` on the PATH each story says
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

#[path = "browser/controls.rs"]
mod controls;
#[path = "browser/harness.rs"]
mod harness;
#[path = "browser/story.rs"]
mod story;

/// The page (HTML, script and style) stays light: under 100 KB before any
/// data, as issue 36 asks (no framework, no build step).
#[test]
fn the_page_stays_under_100_kb() {
    let page = [
        include_str!("../../http/src/web/index.html"),
        include_str!("../../http/src/web/app.js"),
        include_str!("../../http/src/web/app.css"),
    ];
    let bytes: usize = page.iter().map(|p| p.len()).sum();
    assert!(bytes < 100 * 1024, "the page is {bytes} bytes");
}
