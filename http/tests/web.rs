//! The web page's doors: the one-time login link, the token form, the
//! session cookie and its key standing in for the token on the API (the
//! cookie alone opens nothing), `nosniff` on every answer, the loopback
//! checks on the page as on the API; and the
//! routes the page added (a job's log from an offset, retry, runners).
//! The page itself in a browser is `cli/tests/browser.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers panic on failure")]

mod common;

use std::time::Duration;

use common::{Backend, Server, start, start_with};
use reqwest::header::{CONTENT_TYPE, COOKIE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::json;
use slothqueue_http::DrainWorker;

on_both_backends!(
    the_login_link_works_once,
    the_token_form_starts_a_session,
    a_session_reads_and_changes_with_its_key,
    the_page_keeps_the_loopback_checks,
    logout_ends_the_session,
    a_log_is_followed_from_an_offset,
    retry_and_runners,
    a_cookie_alone_opens_nothing,
    every_api_answer_says_nosniff,
);

/// A client that shows redirects instead of following them, and sends no
/// token unless told.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The `name=value` part of a response's `Set-Cookie`, with the whole
/// header.
fn cookie_of(resp: &reqwest::Response) -> (String, String) {
    let set = resp.headers().get(SET_COOKIE).expect("a set-cookie").to_str().unwrap().to_owned();
    (set.split(';').next().unwrap().to_owned(), set)
}

/// Logs in with the server's link; the session's cookie and key (handed
/// to the tab in the answer to the link, and only there).
async fn login(s: &Server) -> (String, String) {
    let resp = browser().get(&s.login_link).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let (cookie, _) = cookie_of(&resp);
    let html = resp.text().await.unwrap();
    let key = html
        .split(r#"name="session-key" content=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the key's meta")
        .to_owned();
    assert_eq!(key.len(), 64, "{key}");
    assert!(!cookie.contains(&key), "the key is not the cookie");
    (cookie, key)
}

async fn the_login_link_works_once(backend: Backend) {
    let s = start(backend).await;
    assert!(s.login_link.starts_with(&format!("{}/login?code=", s.url)), "{}", s.login_link);
    assert!(!s.login_link.contains(&s.token), "the token is never in the link");
    // Without a session the page sends to the login.
    let resp = browser().get(format!("{}/", s.url)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[LOCATION], "/login");
    let resp = browser().get(&s.login_link).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let (cookie, header) = cookie_of(&resp);
    assert!(cookie.starts_with(&format!("slothqueue_session_{}=", s.addr.port())), "{header}");
    for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(header.contains(part), "{header}");
    }
    assert_eq!(resp.headers()["referrer-policy"], "no-referrer");
    assert!(
        resp.headers()["content-security-policy"].to_str().unwrap().contains("script-src 'self'")
    );
    assert_eq!(resp.headers()["cache-control"], "no-store", "the key in it is kept nowhere");
    let body = resp.text().await.unwrap();
    assert!(body.contains(r#"<meta name="session-key" content=""#), "{body}");
    // Spent: the same link is refused, with the form, and no cookie.
    let again = browser().get(&s.login_link).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::FORBIDDEN);
    assert!(again.headers().get(SET_COOKIE).is_none());
    assert!(again.headers()[CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    assert!(again.text().await.unwrap().contains("already used"));
    let forged = browser().get(format!("{}/login?code={}", s.url, s.token)).send().await.unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN, "the token is no login code");
    // The cookie opens the page, and the page names no token and no key.
    let page = browser().get(format!("{}/", s.url)).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(page.headers()["cache-control"], "no-store");
    let html = page.text().await.unwrap();
    assert!(html.contains("<script src=\"/app.js\""), "{html}");
    assert!(!html.contains(&s.token));
    assert!(!html.contains("session-key\" content"), "{html}");
    // A cookie from nowhere opens nothing.
    let name = cookie.split('=').next().unwrap();
    let fake = format!("{name}={}", "ab".repeat(32));
    let resp = browser().get(format!("{}/", s.url)).header(COOKIE, &fake).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    for asset in ["/app.js", "/app.css"] {
        let resp = browser().get(format!("{}{asset}", s.url)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{asset}");
        assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
    }
}

async fn the_token_form_starts_a_session(backend: Backend) {
    let s = start(backend).await;
    let form = browser().get(format!("{}/login", s.url)).send().await.unwrap();
    assert_eq!(form.status(), StatusCode::OK);
    assert!(form.text().await.unwrap().contains(r#"id="token""#));
    let post = |token: &str| {
        browser().post(format!("{}/login", s.url)).json(&json!({ "token": token })).send()
    };
    let wrong = post("0123456789abcdef0123456789abcdef").await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get(SET_COOKIE).is_none());
    let right = post(&s.token).await.unwrap();
    assert_eq!(right.status(), StatusCode::OK);
    assert_eq!(right.headers()["cache-control"], "no-store");
    let (cookie, _) = cookie_of(&right);
    let answer: serde_json::Value = right.json().await.unwrap();
    let key = answer["key"].as_str().expect("the session's key");
    let queues = || browser().get(format!("{}/api/queues", s.url)).header(COOKIE, &cookie);
    let (status, _) = s.send(queues()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the cookie alone");
    let (status, _) = s.send(queues().header("x-session-key", key)).await;
    assert_eq!(status, StatusCode::OK);
    // A form post (no preflight from another site) is refused as on the API.
    let resp = browser()
        .post(format!("{}/login", s.url))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={}", s.token))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

async fn a_session_reads_and_changes_with_its_key(backend: Backend) {
    let s = start(backend).await;
    let (cookie, key) = login(&s).await;
    let job = s.enqueue(json!({ "kind": "shell", "payload": { "command": "true" } })).await;
    let id = job["job"]["id"].as_i64().unwrap();
    let with_cookie = |m: Method, path: &str| {
        browser().request(m, format!("{}{path}", s.url)).header(COOKIE, &cookie)
    };
    let one = format!("/api/tasks/outbox/{id}");
    let (status, body) = s.send(with_cookie(Method::GET, &one)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no key, no read: {body}");
    let (status, body) = s.send(with_cookie(Method::GET, &one).header("x-session-key", &key)).await;
    assert_eq!((status, body["state"].as_str()), (StatusCode::OK, Some("pending")));
    let hold = format!("/api/tasks/outbox/{id}/hold");
    let (status, body) = s.send(with_cookie(Method::POST, &hold)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no key: {body}");
    let (status, _) =
        s.send(with_cookie(Method::POST, &hold).header("x-session-key", "0".repeat(64))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a wrong one");
    // Another session's key is no good either, nor the key without its cookie.
    let (_, other_key) = login_by_token(&s).await;
    let (status, _) =
        s.send(with_cookie(Method::POST, &hold).header("x-session-key", &other_key)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "another session's");
    let (status, _) =
        s.send(browser().post(format!("{}{hold}", s.url)).header("x-session-key", &key)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the key alone");
    let (status, body) =
        s.send(with_cookie(Method::POST, &hold).header("x-session-key", &key)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["held"]["by"], "http 127.0.0.1");
    // Without cookie or token: 401, as ever; the bearer token alone still works.
    let (status, _) = s.send(browser().get(format!("{}/api/queues", s.url))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = s.get("/api/queues").await;
    assert_eq!(status, StatusCode::OK);
}

/// A second session, through the token form; its cookie and key.
async fn login_by_token(s: &Server) -> (String, String) {
    let resp = browser()
        .post(format!("{}/login", s.url))
        .json(&json!({ "token": s.token }))
        .send()
        .await
        .unwrap();
    let (cookie, _) = cookie_of(&resp);
    let answer: serde_json::Value = resp.json().await.unwrap();
    (cookie, answer["key"].as_str().unwrap().to_owned())
}

async fn the_page_keeps_the_loopback_checks(backend: Backend) {
    let s = start(backend).await;
    let (cookie, key) = login(&s).await;
    for path in ["/", "/login", "/app.js"] {
        let resp = browser()
            .get(format!("{}{path}", s.url))
            .header(HOST, "evil.example")
            .header(COOKIE, &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{path}: a rebound name");
    }
    let resp = browser()
        .post(format!("{}/login", s.url))
        .header(ORIGIN, "http://evil.example")
        .json(&json!({ "token": s.token }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN, "a login posted from another site");
    let (status, _) = s
        .send(
            browser()
                .post(format!("{}/api/pause", s.url))
                .header(COOKIE, &cookie)
                .header("x-session-key", &key)
                .header(ORIGIN, "http://evil.example"),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a change from another site, token and all");
    let (status, body) = s
        .send(
            browser()
                .post(format!("{}/api/pause", s.url))
                .header(COOKIE, &cookie)
                .header("x-session-key", &key)
                .header(ORIGIN, &s.url),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "from the page itself: {body}");
}

async fn logout_ends_the_session(backend: Backend) {
    let s = start(backend).await;
    let (cookie, key) = login(&s).await;
    let resp =
        browser().post(format!("{}/logout", s.url)).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN, "not without the key");
    let resp = browser()
        .post(format!("{}/logout", s.url))
        .header(COOKIE, &cookie)
        .header("x-session-key", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert!(cookie_of(&resp).1.contains("Max-Age=0"));
    let (status, _) = s
        .send(
            browser()
                .get(format!("{}/api/queues", s.url))
                .header(COOKIE, &cookie)
                .header("x-session-key", &key),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

async fn a_log_is_followed_from_an_offset(backend: Backend) {
    let s = start_with(backend, |store, queue| {
        Some(DrainWorker::new(store, DrainWorker::config(&queue), |_event| {}))
    })
    .await;
    let job = s
        .enqueue(json!({ "kind": "shell", "payload": { "command": "printf 'one\\ntwo\\n'" } }))
        .await;
    let id = job["job"]["id"].as_i64().unwrap();
    s.wait_for(id, Duration::from_secs(20), |j| j["state"] == "done").await;
    let (status, all) = s.get(&format!("/api/tasks/outbox/{id}/log")).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(all["exists"], true);
    let text = all["text"].as_str().unwrap();
    assert!(text.starts_with(&format!("--- job #{id} attempt 1/")), "{text}");
    assert!(text.contains("one\ntwo\n"), "{text}");
    assert_eq!(all["size"], all["next_offset"]);
    let end = all["next_offset"].as_u64().unwrap();
    let (_, rest) = s.get(&format!("/api/tasks/outbox/{id}/log?offset={end}")).await;
    assert_eq!((rest["text"].as_str(), rest["start"].as_u64()), (Some(""), Some(end)));
    let (_, piece) = s.get(&format!("/api/tasks/outbox/{id}/log?offset=0&limit=3")).await;
    assert_eq!((piece["text"].as_str(), piece["next_offset"].as_u64()), (Some("---"), Some(3)));
    let (status, _) = s.get("/api/tasks/outbox/999/log").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    for bad in ["offset=-1", "offset=x", "limit=0x10", "limit=99999999", "follow=1"] {
        let (status, body) = s.get(&format!("/api/tasks/outbox/{id}/log?{bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    // A job not yet run has no log: empty, not an error.
    let later = s
        .enqueue(json!({ "kind": "shell", "payload": { "command": "true" }, "scheduled_for": "2099-01-01T00:00:00Z" }))
        .await;
    let later = later["job"]["id"].as_i64().unwrap();
    let (status, none) = s.get(&format!("/api/tasks/outbox/{later}/log")).await;
    assert_eq!((status, none["exists"].as_bool()), (StatusCode::OK, Some(false)));
}

async fn retry_and_runners(backend: Backend) {
    let s = start(backend).await;
    let job = s
        .enqueue(json!({ "kind": "shell", "payload": { "command": "true" }, "scheduled_for": "2099-01-01T00:00:00Z" }))
        .await;
    let id = job["job"]["id"].as_i64().unwrap();
    let (status, _) = s.post_empty(&format!("/api/tasks/outbox/{id}/retry")).await;
    assert_eq!(status, StatusCode::CONFLICT, "a pending job is not retried");
    let (status, _) = s.post_empty(&format!("/api/tasks/outbox/{id}/cancel")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = s.post_empty(&format!("/api/tasks/outbox/{id}/retry")).await;
    assert_eq!((status, body["state"].as_str()), (StatusCode::OK, Some("pending")), "{body}");
    let (status, _) = s.post_empty("/api/tasks/outbox/999/retry").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = s.get("/api/runners").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["runners"].as_array().is_some_and(Vec::is_empty), "no worker here: {body}");
    // A runner with two slots, one running a job and the other held by a
    // paused queue: the answer says both, in `status`'s words, and does
    // not call the pause a gate.
    let now = slothqueue_core::Clock::now(&slothqueue_core::SystemClock);
    let record = slothqueue_core::RunnerRecord {
        owner: slothqueue_core::Owner::named("elsewhere:42:1:ff"),
        queues: Vec::new(),
        kinds: None,
        refused: Vec::new(),
        started_at: now,
        updated_at: now,
        activity: slothqueue_core::RunnerActivity::Gated {
            reading: "queue backups paused — 1 due job waiting".into(),
            since: now,
            cause: slothqueue_core::WaitCause::Lanes,
        },
        slots: 2,
        running: vec![15],
        gpus: None,
    };
    s.store.put_runner(&record).await.unwrap();
    let (status, body) = s.get("/api/runners").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let doing = body["runners"][0]["doing"].as_str().unwrap_or_default();
    assert!(
        doing.starts_with(
            "running job #15; its other slot is waiting: queue backups paused — 1 due job waiting (since "
        ),
        "{body}"
    );
    assert_eq!(
        (body["runners"][0]["slots"].as_u64(), body["runners"][0]["running"][0].as_u64()),
        (Some(2), Some(15))
    );
}

/// What a browser keeps from a server's answers: every `Set-Cookie`'s
/// `name=value`, a later one replacing an earlier one of the same name.
#[derive(Default)]
struct CookieJar(Vec<(String, String)>);

impl CookieJar {
    fn keep(&mut self, resp: &reqwest::Response) {
        for set in resp.headers().get_all(SET_COOKIE) {
            let pair = set.to_str().unwrap().split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            self.0.retain(|(n, _)| n != name);
            if !value.is_empty() {
                self.0.push((name.to_owned(), value.to_owned()));
            }
        }
    }

    /// The `Cookie` header a browser sends to any port of the host.
    fn header(&self) -> String {
        self.0.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join("; ")
    }
}

/// Every run of 64 hex digits in `text`: whatever in a page could be a
/// session's secret.
fn hex_runs(text: &str) -> Vec<String> {
    let mut runs = Vec::new();
    let mut run = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() {
            run.push(c);
        } else {
            if run.len() == 64 {
                runs.push(std::mem::take(&mut run));
            }
            run.clear();
        }
    }
    runs
}

/// Issue 31, finding 3: a browser sends its `127.0.0.1` cookies to every
/// port, so another local user's server on another port receives the
/// session cookie. With it alone (and whatever the server answers to it)
/// that user must neither enqueue, nor read the queue, nor learn the
/// session's other half; the tab that logged in still does all three.
async fn a_cookie_alone_opens_nothing(backend: Backend) {
    let s = start(backend).await;
    // The person's browser: opens the link, then the page it goes on to.
    let mut jar = CookieJar::default();
    let landing = browser().get(&s.login_link).send().await.unwrap();
    assert_eq!(landing.status(), StatusCode::OK);
    jar.keep(&landing);
    let landing = landing.text().await.unwrap();
    let page = browser().get(format!("{}/", s.url)).header(COOKIE, jar.header()).send().await;
    jar.keep(&page.unwrap());
    assert!(!jar.0.is_empty(), "logged in");

    // Another port's server: what the browser sent it is the cookie, no more.
    let stolen = jar.header();
    let mut candidates = vec![String::new()];
    for path in ["/", "/login", "/app.js"] {
        let resp = browser().get(format!("{}{path}", s.url)).header(COOKIE, &stolen).send().await;
        candidates.extend(hex_runs(&resp.unwrap().text().await.unwrap()));
    }
    let enqueue = json!({ "kind": "shell", "payload": { "command": "echo stolen" } });
    for candidate in &candidates {
        let (status, body) = s
            .send(
                browser()
                    .post(format!("{}/api/tasks/enqueue", s.url))
                    .header(COOKIE, &stolen)
                    .header("x-session-key", candidate)
                    .json(&enqueue),
            )
            .await;
        let refused = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
        assert!(refused, "enqueue with the cookie and {candidate:?}: {status} {body}");
    }
    let (status, body) =
        s.send(browser().get(format!("{}/api/tasks/outbox", s.url)).header(COOKIE, &stolen)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "read the queue with the cookie alone: {body}");
    let (_, jobs) = s.get("/api/tasks/outbox").await;
    assert_eq!(jobs["jobs"].as_array().map(Vec::len), Some(0), "{jobs}");

    // The tab that logged in kept the key its login handed it.
    let key = landing
        .split(r#"name="session-key" content=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the login hands the tab its key");
    let (status, body) = s
        .send(
            browser()
                .post(format!("{}/api/tasks/enqueue", s.url))
                .header(COOKIE, &stolen)
                .header("x-session-key", key)
                .json(&json!({ "kind": "shell", "payload": { "command": "true" } })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "the tab itself: {body}");
}

/// Issue 31, finding 10: no JSON answer may be sniffed into something a
/// browser runs: every answer, refusals included, says `nosniff`.
async fn every_api_answer_says_nosniff(backend: Backend) {
    let s = start(backend).await;
    let bearer = format!("Bearer {}", s.token);
    let anon = |m: Method, path: &str| browser().request(m, format!("{}{path}", s.url));
    let answers = [
        ("a read", anon(Method::GET, "/api/queues").header("authorization", &bearer)),
        (
            "an enqueue",
            anon(Method::POST, "/api/tasks/enqueue")
                .header("authorization", &bearer)
                .json(&json!({ "kind": "shell", "payload": { "command": "true" } })),
        ),
        ("the document", anon(Method::GET, "/api/openapi.json").header("authorization", &bearer)),
        ("no token", anon(Method::GET, "/api/queues")),
        ("no route", anon(Method::GET, "/api/nothing").header("authorization", &bearer)),
        ("a wrong method", anon(Method::DELETE, "/api/queues").header("authorization", &bearer)),
        ("a bad body", anon(Method::POST, "/api/pause").header("authorization", &bearer).body("x")),
        ("a rebound host", anon(Method::GET, "/api/queues").header(HOST, "evil.example")),
        ("the health check", anon(Method::GET, "/healthz")),
    ];
    for (what, req) in answers {
        let resp = req.send().await.unwrap();
        let status = resp.status();
        assert_eq!(
            resp.headers().get("x-content-type-options").map(|v| v.to_str().unwrap()),
            Some("nosniff"),
            "{what} ({status})"
        );
    }
}
