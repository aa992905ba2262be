//! The second story: steering (issue 36's page). A failed job found by
//! searching its command, its error first on its page, cloned with a fixed
//! command (a bad queue refused first, nothing added), and the clone run by
//! `serve`'s runner; a pending job edited, and an edit that lost the race
//! refused in the CLI's own sentence; an unknown job shown as such with
//! nothing of the previous one left; every failed job of a queue retried
//! and every pending one cancelled, each with one confirmed action; the
//! pause buttons' words while every queue is paused; a waiting job (and a
//! held one) filtered and worded as the CLI words it, and the cancel of its
//! running parent naming it; the history panel; finished jobs cleared; a
//! schedule paused, resumed and removed from the schedules view; and at
//! 390×844 every queue's state and buttons inside the screen. Each effect
//! is checked through the CLI (`--json show`, `list`, `queues`,
//! `schedules`). Screenshots: `list-search.png`, `job-failed.png`,
//! `schedules.png`, `list-phone.png`.

use serde_json::{Value, json};

use crate::harness::{self, click, confirm, type_into, wait_gone, wait_text, wait_until};

/// Sets a form field by script, as a person's input would (an `input`
/// event): how a field is emptied (WebDriver's clear sends no `input`).
async fn set_field(s: &harness::Session, selector: &str, value: &str) {
    let script = "const e = document.querySelector(arguments[0]); e.value = arguments[1]; \
                  e.dispatchEvent(new Event('input', { bubbles: true }));";
    s.client.execute(script, vec![json!(selector), json!(value)]).await.expect("set the field");
}

/// Resolves once the job list shows exactly the jobs `ids`, in that order.
async fn list_shows(s: &harness::Session, ids: &[u64]) {
    const LOOK: &str = r#"
        const rows = Array.from(document.querySelectorAll('#jobs tbody tr[data-id]')).map((r) => Number(r.dataset.id));
        return JSON.stringify(rows) === JSON.stringify(args[0]) ? true : null;
    "#;
    wait_until(&s.client, &format!("the list showed {ids:?}"), LOOK, vec![json!(ids)]).await;
}

fn state_of(s: &harness::Session, id: u64) -> String {
    let job = s.cli(&["show", &id.to_string()]);
    job["state"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_edits_clones_retries_in_bulk_and_steers_schedules() {
    let Some(s) = harness::start().await else { return };
    let client = &s.client;

    // Two jobs of queue `builds` fail, one of `default` succeeds.
    let typo = s.add(&["--max-attempts", "1", "-q", "builds", "echo mkae-typo-7; exit 3"]);
    let other = s.add(&["--max-attempts", "1", "-q", "builds", "exit 4"]);
    let fine = s.add(&["echo fine"]);
    wait_text(client, &format!("tr[data-id='{typo}']"), "failed").await;
    wait_text(client, &format!("tr[data-id='{other}']"), "failed").await;
    wait_text(client, &format!("tr[data-id='{fine}']"), "done").await;

    // Found by searching its command; its row has its attempts, how long
    // it took and its last error.
    type_into(client, "#f-search", "mkae-typo").await;
    list_shows(&s, &[typo]).await;
    let shown = s.cli(&["show", &typo.to_string()]);
    let error = shown["last_error"].as_str().expect("a failed job's error").to_owned();
    wait_text(client, &format!("tr[data-id='{typo}'] .tries"), "1/1").await;
    wait_text(client, &format!("tr[data-id='{typo}'] .last-error"), &error).await;
    let took = wait_text(client, &format!("tr[data-id='{typo}'] .took"), "s").await;
    assert!(!took.is_empty(), "a finished job's row says how long it took");
    s.screenshot("list-search.png").await;

    // Its page: the error first, above the buttons.
    click(client, &format!("a[href='#/job/{typo}']")).await;
    wait_text(client, "#job-error", &format!("Failed: {error}")).await;
    let above: bool = client
        .execute(
            "return document.getElementById('job-error').getBoundingClientRect().bottom <= \
             document.getElementById('job-actions').getBoundingClientRect().top",
            vec![],
        )
        .await
        .expect("where the error is")
        .as_bool()
        .unwrap_or(false);
    assert!(above, "a failed job's error is at the top of its page");
    s.screenshot("job-failed.png").await;

    // Clone it: a queue name the server refuses is refused in its words,
    // nothing added; then with the command fixed.
    click(client, "#act-clone").await;
    type_into(client, "#edit-queue", "no such/queue").await;
    click(client, "#edit-save").await;
    wait_text(client, "#edit-error", "queue `no such/queue` must be").await;
    let all = s.cli(&["list"]);
    assert_eq!(all.as_array().map(Vec::len), Some(3), "nothing was added: {all}");
    type_into(client, "#edit-queue", "builds").await;
    type_into(client, "#edit-command", "echo fixed-7").await;
    click(client, "#edit-save").await;
    let clone = fine + 1;
    let page = url::Url::parse(&format!("{}/#/job/{clone}", s.base)).expect("url");
    client.wait().at_most(harness::WAIT).for_url(&page).await.expect("the clone's page");
    wait_text(client, "#flash", &format!("Cloned job #{typo} as #{clone}.")).await;
    // `serve`'s runner runs it; its log says the fixed command ran.
    wait_text(client, "#job-title", "done").await;
    wait_text(client, "#job-log", "fixed-7").await;
    let job = s.cli(&["show", &clone.to_string()]);
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["payload"]["command"], "echo fixed-7", "{job}");
    assert_eq!(job["queue"], "builds", "{job}");
    let original = s.cli(&["show", &typo.to_string()]);
    assert_eq!(original["state"], "failed", "the original stays as it ended: {original}");

    // Edit a pending job from its page.
    let later = s.add(&["--delay", "1h", "-q", "builds", "echo later"]);
    s.open(&format!("#/job/{later}")).await;
    click(client, "#act-edit").await;
    type_into(client, "#edit-priority", "7").await;
    click(client, "#edit-save").await;
    wait_text(client, "#flash", &format!("Edited job #{later}: priority.")).await;
    wait_gone(client, "#edit-form").await;
    let job = s.cli(&["show", &later.to_string()]);
    assert_eq!(job["priority"], 7, "{job}");
    assert_eq!(job["id"], later, "an edit keeps the job's id");

    // An edit that lost the race (the job was cancelled from the CLI
    // while the form was open) is refused in the CLI's own sentence.
    let gone = s.add(&["--delay", "1h", "echo gone"]);
    s.open(&format!("#/job/{gone}")).await;
    click(client, "#act-edit").await;
    type_into(client, "#edit-priority", "8").await;
    let out = harness::slothqueue(&s.db, &["cancel", &gone.to_string()]);
    assert!(out.status.success(), "{out:?}");
    wait_text(client, "#job-title", "cancelled").await;
    click(client, "#edit-save").await;
    let refused = wait_text(client, "#edit-error", &format!("cannot edit job #{gone}")).await;
    let cli = harness::slothqueue(&s.db, &["edit", &gone.to_string(), "-p", "8"]);
    let cli_said = String::from_utf8_lossy(&cli.stderr).into_owned();
    assert!(!cli.status.success(), "{cli:?}");
    assert!(cli_said.contains(&refused), "page: {refused:?}; CLI: {cli_said:?}");
    click(client, "#edit-cancel").await;

    // An unknown job, opened from a known one: said so, none of the
    // previous job's buttons or sections left.
    s.open("#/job/99999").await;
    wait_text(client, "#job-missing", "No job #99999").await;
    wait_gone(client, "#job-actions button").await;
    wait_gone(client, "#job-fields").await;
    wait_gone(client, "#job-log").await;

    // Every failed job of `builds` retried with one confirmed action (its
    // queue paused first from its row, so they stay pending to be seen).
    s.open("#/").await;
    set_field(&s, "#f-search", "").await;
    click(client, "tr[data-queue='builds'] button.lane-toggle").await;
    wait_text(client, "tr[data-queue='builds'] .lane-state", "paused").await;
    click(client, "tr[data-queue='builds'] button.bulk-retry").await;
    confirm(client, "Retry the 2 failed jobs of queue builds?").await;
    wait_text(client, "#flash", "Retried 2 jobs").await;
    assert_eq!(state_of(&s, typo), "pending");
    assert_eq!(state_of(&s, other), "pending");
    wait_text(client, &format!("tr[data-id='{typo}']"), "(queue paused)").await;

    // While every queue is paused, a row's pause button says what it adds
    // (a job due in an hour gives `default` its row).
    let waits = s.add(&["--delay", "1h", "echo default waits"]);
    click(client, "#pause-all").await;
    wait_text(client, "tr[data-queue='default'] .lane-state", "paused (every queue)").await;
    wait_text(
        client,
        "tr[data-queue='default'] .lane-toggle",
        "Keep paused after Resume every queue",
    )
    .await;
    wait_text(client, "tr[data-queue='builds'] .lane-state", "paused (itself and every queue)")
        .await;
    wait_text(client, "tr[data-queue='builds'] .lane-toggle", "Lift its own pause").await;
    click(client, "#resume-all").await;
    wait_text(client, "tr[data-queue='default'] .lane-state", "open").await;
    wait_text(client, "tr[data-queue='default'] .lane-toggle", "Pause").await;
    let queues = s.cli(&["queues"]);
    assert!(queues.get("all_paused").is_none(), "every queue resumed: {queues}");
    let builds =
        queues["queues"].as_array().and_then(|q| q.iter().find(|q| q["queue"] == "builds"));
    assert!(builds.is_some_and(|b| b.get("paused").is_some()), "its own pause stays: {queues}");

    // Every pending job of `builds` cancelled with one confirmed action.
    click(client, "tr[data-queue='builds'] button.bulk-cancel").await;
    confirm(client, "Cancel the 3 pending jobs of queue builds").await;
    wait_text(client, "#flash", "Cancelled 3 jobs").await;
    for id in [typo, other, later] {
        assert_eq!(state_of(&s, id), "cancelled", "job #{id}");
    }
    // Resumed, with no job left and no setting, its row goes.
    click(client, "tr[data-queue='builds'] button.lane-toggle").await;
    wait_gone(client, "tr[data-queue='builds']").await;

    // A job waiting on a running one: the filter finds it, worded as the
    // CLI words it; cancelling the parent names it first.
    let parent = s.add(&["sleep 60"]);
    let child = s.add(&["--after", &parent.to_string(), "echo child"]);
    wait_text(client, &format!("tr[data-id='{parent}']"), "running").await;
    let state =
        client.find(fantoccini::wd::Locator::Id("f-state")).await.expect("the state filter");
    state.select_by_value("waiting").await.expect("choose waiting");
    list_shows(&s, &[child]).await;
    wait_text(client, &format!("tr[data-id='{child}']"), &format!("waiting after #{parent}")).await;
    // And a held one by the held filter.
    let out = harness::slothqueue(&s.db, &["hold", &waits.to_string()]);
    assert!(out.status.success(), "{out:?}");
    state.select_by_value("held").await.expect("choose held");
    list_shows(&s, &[waits]).await;
    wait_text(client, &format!("tr[data-id='{waits}'] .state"), "held").await;
    let out = harness::slothqueue(&s.db, &["release", &waits.to_string()]);
    assert!(out.status.success(), "{out:?}");
    state.select_by_value("").await.expect("choose any");
    click(client, &format!("a[href='#/job/{parent}']")).await;
    wait_text(client, "#job-title", "running").await;
    click(client, "#act-cancel").await;
    let asked = confirm(client, &format!("#{child} (waiting)")).await;
    assert!(asked.contains(&format!("Cancel running job #{parent}")), "{asked}");
    wait_text(client, "#job-title", "cancelled").await;
    assert_eq!(state_of(&s, child), "cancelled");

    // The history panel: a bar a minute for the last hour.
    s.open("#/").await;
    // A job ends failed by the minute it finished (the two of `builds`,
    // retried and cancelled since, count no more): done, `fine` and the
    // clone; failed, one that fails now.
    let broken = s.add(&["--max-attempts", "1", "exit 9"]);
    wait_text(client, &format!("tr[data-id='{broken}']"), "failed").await;
    wait_text(client, "#history-note", "(2 done, 1 failed").await;
    let red = client
        .execute(
            "return Array.from(document.querySelectorAll('#history rect.failed'))\
             .filter((r) => Number(r.getAttribute('height')) > 0).length",
            vec![],
        )
        .await
        .expect("count the red bars");
    assert_eq!(red, json!(1), "one minute with a failure");
    let bars = client
        .execute("return document.querySelectorAll('#history svg g.minute').length", vec![])
        .await
        .expect("count the bars");
    assert_eq!(bars, json!(60), "one bar a minute");

    // Clear the finished jobs: the question names how many.
    let all = s.cli(&["list", "--limit", "500"]);
    let finished = all.as_array().into_iter().flatten().filter(|j| j["id"] != waits).count();
    click(client, "#clear-finished").await;
    confirm(client, &format!("Remove the {finished} finished jobs")).await;
    wait_text(client, "#flash", &format!("Cleared {finished} jobs")).await;
    let left: Vec<Value> =
        s.cli(&["list"]).as_array().into_iter().flatten().map(|j| j["id"].clone()).collect();
    assert_eq!(left, [json!(waits)], "every finished job went, the pending one stayed");

    // The schedules view: pause one, the CLI agrees; resume; remove one.
    for (key, every, command) in [("nightly", "1h", "echo tick"), ("backup", "2h", "echo backup")] {
        let out = harness::slothqueue(&s.db, &["every", every, command, "--key", key]);
        assert!(out.status.success(), "{out:?}");
    }
    s.open("#/schedules").await;
    wait_text(client, "tr[data-key='nightly'] .sched-state", "active").await;
    wait_text(client, "tr[data-key='nightly'] .next", "then every 1 h").await;
    click(client, "tr[data-key='nightly'] button.sched-toggle").await;
    wait_text(client, "tr[data-key='nightly'] .sched-state", "paused since").await;
    let listed = s.cli(&["schedules"]);
    let paused = |key: &str| {
        listed
            .as_array()
            .and_then(|a| a.iter().find(|s| s["key"] == key))
            .map(|s| s.get("paused").is_some_and(|p| !p.is_null()))
    };
    assert_eq!(paused("nightly"), Some(true), "{listed}");
    assert_eq!(paused("backup"), Some(false), "{listed}");
    s.screenshot("schedules.png").await;
    click(client, "tr[data-key='nightly'] button.sched-toggle").await;
    wait_text(client, "tr[data-key='nightly'] .sched-state", "active").await;
    click(client, "tr[data-key='backup'] button.sched-remove").await;
    confirm(client, "Remove schedule backup?").await;
    wait_gone(client, "tr[data-key='backup']").await;
    let listed = s.cli(&["schedules"]);
    let keys: Vec<&str> =
        listed.as_array().into_iter().flatten().filter_map(|s| s["key"].as_str()).collect();
    assert_eq!(keys, ["nightly"], "{listed}");
    assert!(listed[0].get("paused").is_none_or(Value::is_null), "resumed: {listed}");

    // At a phone's width every queue's state and buttons lie inside the
    // screen, with the longest words the rows have (every queue paused,
    // one also on its own).
    s.add(&["--delay", "1h", "echo a"]);
    s.add(&["--delay", "1h", "-q", "builds", "echo b"]);
    for args in [&["pause", "--queue", "builds"][..], &["pause"][..]] {
        let out = harness::slothqueue(&s.db, args);
        assert!(out.status.success(), "{out:?}");
    }
    s.open("#/").await;
    client.set_window_size(390, 844).await.expect("phone size");
    wait_text(client, "tr[data-queue='builds'] .lane-state", "paused (itself and every queue)")
        .await;
    wait_text(client, "tr[data-queue='default'] .lane-state", "paused (every queue)").await;
    // Measured as a person sees them: the page scrolled only downwards,
    // each table's box at its left edge (a box that scrolls sideways
    // hides what lies right of it, which a person may never find).
    const INSIDE: &str = r#"
        const w = document.documentElement.clientWidth, h = window.innerHeight;
        const out = [];
        for (const row of document.querySelectorAll('#lanes tbody tr[data-queue]')) {
            for (const sel of ['.lane-state', 'button.lane-toggle', 'button.bulk-retry', 'button.bulk-cancel']) {
                const e = row.querySelector(sel);
                const wrap = e.closest('.table-wrap');
                wrap.scrollLeft = 0;
                window.scrollTo(0, window.scrollY + e.getBoundingClientRect().top - h / 2);
                const r = e.getBoundingClientRect();
                const box = wrap.getBoundingClientRect();
                const inside = r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= w && r.top >= 0 &&
                    r.bottom <= h && r.left >= box.left && r.right <= box.right &&
                    e.scrollWidth <= e.clientWidth + 1 && wrap.scrollWidth <= wrap.clientWidth + 1;
                out.push({ queue: row.dataset.queue, what: sel, text: e.textContent, left: r.left, right: r.right,
                           width: w, wrap: wrap.scrollWidth, inside });
            }
        }
        return out;
    "#;
    let seen = client.execute(INSIDE, vec![]).await.expect("measure the rows");
    let seen = seen.as_array().expect("a list");
    assert_eq!(seen.len(), 8, "two queues, four things each: {seen:?}");
    for thing in seen {
        assert_eq!(thing["inside"], true, "cut off at 390 px: {thing}");
    }
    let width = client.execute("return document.documentElement.clientWidth", vec![]).await;
    assert!(width.ok().and_then(|w| w.as_u64()).is_some_and(|w| w <= 390), "a phone's width");
    client
        .execute(
            "const bar = document.querySelector('.bar').offsetHeight; \
             const heading = document.getElementById('lanes').closest('.table-wrap').previousElementSibling; \
             window.scrollTo(0, heading.getBoundingClientRect().top + window.scrollY - bar - 8)",
            vec![],
        )
        .await
        .expect("scroll to the queues");
    s.screenshot("list-phone.png").await;

    s.client.clone().close().await.expect("close the browser");
}
