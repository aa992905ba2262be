//! The first story: watching. Log in with the printed link, see a job
//! added by `slothqueue add` appear and run, open a running job, watch its
//! log tail grow, cancel it (confirmed), see its state change; a queue
//! paused from the list, a job waiting on it held and released from its
//! page, the page saying why it waits in the server's words (the same
//! `show --json` gives); the cookie without the key its login left in the
//! origin's storage sent to the login; a spent link refused and the token
//! form used instead. Screenshots: `list.png`, `job.png`,
//! `job-cancelled.png`, `job-dark.png`, `login-spent-link.png`.

use crate::harness::{self, click, color_scheme, confirm, wait_text};
use fantoccini::wd::Locator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_queue_follows_a_log_and_cancels_a_job() {
    let Some(s) = harness::start().await else { return };
    let client = &s.client;

    // A job added by another process appears, runs and ends.
    s.add(&["echo hello from the queue"]);
    wait_text(client, "tr[data-id='1']", "done").await;
    // A job that writes a line every 0.2 s for 40 s.
    s.add(&["i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo \"tick $i\"; sleep 0.2; done"]);
    wait_text(client, "tr[data-id='2']", "running").await;
    wait_text(client, "#runners", "running job #2").await;
    s.screenshot("list.png").await;

    // Its page: the fields, the trail, the log following live.
    click(client, "a[href='#/job/2']").await;
    wait_text(client, "#job-title", "running").await;
    // Who runs it, in the server's words (`now:` in `show`).
    wait_text(client, "#job-why", "held by runner pid").await;
    wait_text(client, "#job-events", "claimed").await;
    let early = wait_text(client, "#job-log", "tick 3").await;
    let later = wait_text(client, "#job-log", "tick 12").await;
    assert!(later.len() > early.len(), "the log grew: {early:?} then {later:?}");
    assert!(later.contains("tick 4\ntick 5\n"), "no line lost or doubled: {later}");
    s.screenshot("job.png").await;

    // Cancel: a running job is stopped only once the question is
    // answered; the runner stops it, the page says so.
    click(client, "#act-cancel").await;
    confirm(client, "Cancel running job #2? Its process is stopped.").await;
    wait_text(client, "#job-title", "cancelled").await;
    wait_text(client, "#job-events", "cancel").await;
    let retry = client.find(Locator::Id("act-retry")).await.expect("the retry button");
    assert!(retry.is_displayed().await.expect("displayed"), "a cancelled job can be retried");
    let job = s.cli(&["show", "2"]);
    assert_eq!(job["state"], "cancelled", "{job}");
    s.screenshot("job-cancelled.png").await;
    color_scheme(client, "dark").await;
    let background: String = client
        .execute("return getComputedStyle(document.body).backgroundColor", vec![])
        .await
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    assert_eq!(background, "rgb(21, 23, 26)", "the dark scheme's background");
    s.screenshot("job-dark.png").await;
    color_scheme(client, "light").await;

    // Why a job waits, and the buttons that make it wait or not: its
    // queue paused from the list, the job held and released on its page.
    // (A job due in an hour gives the queue its row in the list.)
    s.open("#/").await;
    s.add(&["--delay", "1h", "echo in an hour"]);
    wait_text(client, "tr[data-queue='default']", "open").await;
    click(client, "tr[data-queue='default'] button.lane-toggle").await;
    wait_text(client, "tr[data-queue='default'] .lane-state", "paused").await;
    s.add(&["echo after the pause"]);
    wait_text(client, "tr[data-id='4']", "pending").await;
    wait_text(client, "tr[data-id='4']", "(queue paused)").await;
    click(client, "a[href='#/job/4']").await;
    let paused = wait_text(client, "#job-why", "its queue default is paused since").await;
    // The page shows the server's why, the words `show` prints: not its own.
    let job = s.cli(&["show", "4"]);
    assert_eq!(job["why"].as_str(), Some(paused.as_str()), "{job}");
    click(client, "#act-hold").await;
    wait_text(client, "#job-why", "by http 127.0.0.1 — `slothqueue release 4` lets it run").await;
    wait_text(client, "#job-title", "held").await;
    click(client, "#act-release").await;
    wait_text(client, "#job-why", "its queue default is paused since").await;
    s.open("#/").await;
    wait_text(client, "tr[data-queue='default'] .lane-state", "paused").await;
    click(client, "tr[data-queue='default'] button.lane-toggle").await;
    wait_text(client, "tr[data-id='4']", "done").await;
    wait_text(client, "tr[data-queue='default']", "open").await;

    // The cookie alone opens nothing (a browser sends it to every port):
    // without the key the login left in this origin's storage, the page
    // goes to the login.
    client.execute("localStorage.clear()", vec![]).await.expect("forget the key");
    s.open("").await;
    let login = url::Url::parse(&format!("{}/login", s.base)).expect("url");
    client.wait().at_most(harness::WAIT).for_url(&login).await.expect("sent to the login");

    // The link was spent: opened again, it is refused, and the token
    // pasted into the form logs in instead.
    client.goto(&s.link).await.expect("open the spent link");
    wait_text(client, "#notice", "already used").await;
    s.screenshot("login-spent-link.png").await;
    let form = client.find(Locator::Id("token")).await.expect("the token field");
    form.send_keys(&s.token).await.expect("type the token");
    click(client, "#login button").await;
    let home = url::Url::parse(&format!("{}/", s.base)).expect("url");
    client
        .wait()
        .at_most(harness::WAIT)
        .for_url(&home)
        .await
        .expect("the form went on to the queue");
    wait_text(client, "#counts", "cancelled").await;

    client.clone().close().await.expect("close the browser");
}
