// slothqueue's page: a client of the JSON API, authenticated by the session
// cookie (sent by the browser, unreadable here) and the session's key, sent
// with every request. The login hands the key over once; it is kept in this
// origin's localStorage, which no page of another port can read (the
// cookie, a browser sends to every port of 127.0.0.1).
// It looks again once a second while the tab is visible, not at all while
// it is hidden. Everything shown is set as text, never as HTML.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const KEY = "slothqueue.session-key";
  const store = {
    get() { try { return localStorage.getItem(KEY); } catch (e) { return null; } },
    set(key) { try { localStorage.setItem(KEY, key); } catch (e) { /* the page then asks to log in */ } },
    clear() { try { localStorage.removeItem(KEY); } catch (e) { /* nothing kept */ } },
  };

  /** An element with attributes and children (strings become text). */
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  // ---- the login page -----------------------------------------------------
  if (document.body.dataset.page === "login") {
    // The answer to a login link carries the new session's key: keep it,
    // then open the queue.
    const handed = document.querySelector('meta[name="session-key"]');
    if (handed) {
      store.set(handed.content);
      location.replace("/");
      return;
    }
    const form = $("login");
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const err = $("login-error");
      err.hidden = true;
      const r = await fetch("/login", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ token: $("token").value }),
        credentials: "same-origin",
      });
      const answer = r.ok ? await r.json().catch(() => ({})) : {};
      if (r.ok && typeof answer.key === "string") {
        store.set(answer.key);
        location.replace("/");
      } else {
        err.textContent = r.status === 401 ? "That is not the token." : "Refused: " + r.status;
        err.hidden = false;
      }
    });
    return;
  }

  // ---- the queue page -----------------------------------------------------
  if (!store.get()) {
    // A tab of a browser that never logged in here (or logged out): the
    // cookie alone opens nothing.
    location.replace("/login");
    return;
  }
  const POLL_MS = 1000;
  const LOG_KEEP = 256 * 1024; // characters of log kept on the page
  const PAGE_SIZE = 25;
  const view = { jobId: null, cursors: [null], next: null, log: null, loggedOut: false };
  let timer = null;
  let busy = false;

  class Refused extends Error {
    constructor(status, message, key) { super(message); this.status = status; this.key = key; }
  }

  async function api(method, path) {
    // Read each time: a login in another tab replaces both the cookie and
    // the key, and this tab goes on with the new pair.
    const headers = { Accept: "application/json", "X-Session-Key": store.get() || "" };
    const r = await fetch(path, { method, headers, credentials: "same-origin", cache: "no-store" });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Refused(r.status, body.error || "refused (" + r.status + ")", headers["X-Session-Key"]);
    return body;
  }

  function flash(msg, link) {
    const f = $("flash");
    f.replaceChildren(msg, link ? " " : "", link || "");
    f.hidden = !msg;
  }

  function setLive(cls, text) {
    const l = $("live");
    l.className = "live " + cls;
    l.textContent = text;
  }

  // ---- time ---------------------------------------------------------------
  function span(ms) {
    const s = Math.round(Math.abs(ms) / 1000);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.round(s / 60) + " min";
    if (s < 86400) return (s / 3600).toFixed(1).replace(/\.0$/, "") + " h";
    return (s / 86400).toFixed(1).replace(/\.0$/, "") + " d";
  }
  function when(ms) {
    if (ms === null || ms === undefined) return "—";
    const d = ms - Date.now();
    const rel = Math.abs(d) < 1000 ? "now" : d > 0 ? "in " + span(d) : span(d) + " ago";
    return new Date(ms).toLocaleString() + " (" + rel + ")";
  }
  function ago(ms) {
    const d = ms - Date.now();
    return Math.abs(d) < 1000 ? "now" : d > 0 ? "in " + span(d) : span(d) + " ago";
  }

  // ---- what a job is --------------------------------------------------------
  function what(job) {
    if (job.kind === "shell" && job.payload && typeof job.payload.command === "string") {
      return job.payload.command;
    }
    const p = JSON.stringify(job.payload);
    return p.length > 200 ? p.slice(0, 200) + "…" : p;
  }
  function stateCell(job) {
    let s = job.state;
    if (job.state === "pending" && job.held) s = "pending (held)";
    if (job.state === "running" && job.cancel_requested) s = "running (cancelling)";
    return el("span", { class: "state " + job.state }, s);
  }

  // ---- the list view --------------------------------------------------------
  function renderCounts(stats) {
    const tiles = [
      ["pending", stats.pending], ["running", stats.running], ["done", stats.done],
      ["failed", stats.failed], ["cancelled", stats.cancelled], ["due now", stats.due_now],
      ["held", stats.held || 0], ["waiting on parents", stats.waiting_on_parents || 0],
    ];
    $("counts").replaceChildren(...tiles.map(([name, n]) =>
      el("div", { class: "count", "data-state": name }, el("b", {}, n), el("span", {}, name))));
    $("next-due").textContent = stats.next_due ? "Next due: " + when(stats.next_due) : "Nothing is waiting for its time.";
  }

  function renderLanes(queues) {
    const rows = (queues.queues || []).map((q) => {
      const paused = q.paused || queues.all_paused;
      return el("tr", { "data-queue": q.queue },
        el("td", {}, q.queue),
        el("td", { class: "num" }, q.pending), el("td", { class: "num" }, q.due),
        el("td", { class: "num" }, q.held), el("td", { class: "num" }, q.running),
        el("td", { class: "num" }, q.limit ? q.limit : "—"),
        el("td", {}, paused ? "paused" : "open"),
        el("td", {}, q.paused
          ? el("button", { type: "button", class: "small", onclick: () => act("POST", "/api/queues/" + encodeURIComponent(q.queue) + "/resume") }, "Resume")
          : el("button", { type: "button", class: "small", onclick: () => act("POST", "/api/queues/" + encodeURIComponent(q.queue) + "/pause") }, "Pause")));
    });
    if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No queue has jobs or settings yet.")));
    $("lanes").tBodies[0].replaceChildren(...rows);
    $("pause-all").disabled = !!queues.all_paused;
    $("resume-all").disabled = !queues.all_paused;
  }

  function renderRunners(runners) {
    const items = runners.map((r) => {
      const o = r.owner || {};
      // What it does is the server's sentence (`status` prints the same).
      return el("li", { class: r.live ? "" : "muted" },
        el("b", {}, "pid " + (o.pid || "?")), " on " + (o.host || "?"), r.live ? "" : " (gone)", el("br"),
        r.doing, el("br"),
        el("span", { class: "muted" }, "queues: " + (r.queues.length ? r.queues.join(", ") : "all") + ", up " + span(Date.now() - r.started_at)));
    });
    if (items.length === 0) items.push(el("li", { class: "muted" }, "No runner is recorded."));
    $("runners").replaceChildren(...items);
  }

  // Each host's GPUs as its runners last saw them, with who uses each
  // (the server's words: docs/gpus.md).
  function renderGpus(hosts) {
    const items = [];
    for (const h of hosts) {
      if (h.error) items.push(el("li", {}, el("b", {}, h.host), ": no GPU found (" + h.error + ")"));
      for (const g of h.gpus) {
        items.push(el("li", { class: g.use === "free" ? "" : "muted" },
          el("b", {}, h.host), ": " + g.line + " — " + g.gpu.name));
      }
    }
    $("gpus-box").hidden = items.length === 0;
    $("gpus").replaceChildren(...items);
  }

  function filterQuery() {
    const p = new URLSearchParams();
    for (const name of ["state", "queue", "kind"]) {
      const v = $("f-" + name).value.trim();
      if (v) p.set(name, v);
    }
    p.set("limit", String(PAGE_SIZE));
    const cursor = view.cursors[view.cursors.length - 1];
    if (cursor) p.set("cursor", String(cursor));
    return p.toString();
  }

  function renderJobs(page) {
    const rows = page.jobs.map((j) => el("tr", { "data-id": j.id },
      el("td", {}, el("a", { href: "#/job/" + j.id, class: "job-link" }, "#" + j.id)),
      el("td", {}, stateCell(j)),
      el("td", { class: "wide" }, j.queue),
      el("td", { class: "wide" }, j.kind),
      el("td", { class: "what mono", title: what(j) }, what(j)),
      el("td", { class: "wide", title: new Date(j.created_at).toLocaleString() }, ago(j.created_at))));
    $("jobs").tBodies[0].replaceChildren(...rows);
    $("empty").hidden = rows.length > 0;
    view.next = page.next_cursor;
    $("older").disabled = !page.next_cursor;
    $("newer").disabled = view.cursors.length <= 1;
    $("page").textContent = "page " + view.cursors.length;
  }

  async function refreshList() {
    const [stats, queues, runners, page] = await Promise.all([
      api("GET", "/api/tasks/outbox/stats"),
      api("GET", "/api/queues"),
      api("GET", "/api/runners"),
      api("GET", "/api/tasks/outbox?" + filterQuery()),
    ]);
    renderCounts(stats);
    renderLanes(queues);
    renderRunners(runners.runners);
    renderGpus(stats.gpus || []);
    renderJobs(page);
  }

  // ---- the job view ---------------------------------------------------------
  function field(name, value) {
    return [el("dt", {}, name), el("dd", {}, value === undefined || value === null || value === "" ? "—" : value)];
  }

  function renderJob(job) {
    $("job-title").replaceChildren("Job #" + job.id + " ", stateCell(job));
    // Why it is not running, or who runs it: the server's words (the read
    // model's, the same `slothqueue show` prints), never the page's own.
    $("job-why").textContent = job.why || "";
    const pending = job.state === "pending";
    $("act-cancel").hidden = !(pending || job.state === "running");
    $("act-cancel").disabled = !!job.cancel_requested;
    $("act-retry").hidden = !(job.state === "failed" || job.state === "cancelled");
    $("act-hold").hidden = !(pending && !job.held);
    $("act-release").hidden = !(pending && job.held);
    const env = job.kind === "shell" && job.payload && job.payload.env ? Object.entries(job.payload.env) : [];
    $("job-fields").replaceChildren(
      ...field("Kind", job.kind),
      ...field("Queue", job.queue),
      ...field(job.kind === "shell" ? "Command" : "Payload", el("code", {}, what(job))),
      ...(job.kind === "shell" && job.payload ? field("Directory", job.payload.cwd) : []),
      ...(env.length ? field("Environment", el("code", {}, env.map(([k, v]) => k + "=" + v).join(" "))) : []),
      ...field("Priority", job.priority),
      ...field("Attempts", job.attempts + " of " + job.max_attempts),
      ...field("Max runtime", job.max_runtime ? span(job.max_runtime) : "no limit"),
      ...field("Key", job.idempotency_key),
      ...field("After", (job.after || []).length ? job.after.map((p) => el("a", { href: "#/job/" + p }, "#" + p + " ")) : null),
      ...field("Created", when(job.created_at)),
      ...field("Due", when(job.not_before)),
      ...field("Started", job.started_at ? when(job.started_at) : null),
      ...field("Finished", job.finished_at ? when(job.finished_at) : null),
      ...field("Exit code", job.exit_code),
      ...field("Result", job.result),
      ...field("Last error", job.last_error),
    );
    $("job-events").replaceChildren(...job.events.map((e) => el("li", {},
      el("span", { class: "kind" }, e.kind), " ",
      el("span", { class: "muted", title: new Date(e.at).toLocaleString() }, ago(e.at)),
      e.attempt ? " · attempt " + e.attempt : "",
      e.message ? " · " + e.message : "",
      e.retry_at ? " · retry " + ago(e.retry_at) : "")));
  }

  async function followLog(id) {
    if (!view.log || view.log.id !== id) view.log = { id, offset: null };
    const q = view.log.offset === null ? "" : "?offset=" + view.log.offset;
    const chunk = await api("GET", "/api/tasks/outbox/" + id + "/log" + q);
    if (view.jobId !== id) return;
    const pre = $("job-log");
    const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
    let text = pre.textContent;
    if (view.log.offset === null || chunk.start < view.log.offset) {
      text = chunk.start > 0 ? "[… " + chunk.start + " earlier bytes not shown …]\n" : "";
    } else if (chunk.start > view.log.offset) {
      text += "\n[… " + (chunk.start - view.log.offset) + " bytes skipped …]\n";
    }
    text += chunk.text;
    if (text.length > LOG_KEEP) text = text.slice(text.length - LOG_KEEP);
    if (text !== pre.textContent) pre.textContent = text;
    view.log.offset = chunk.next_offset;
    view.log.size = chunk.size;
    $("log-note").textContent = chunk.exists ? "(" + chunk.size + " bytes)" : "(no log yet)";
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }

  async function refreshJob(id) {
    const job = await api("GET", "/api/tasks/outbox/" + id);
    if (view.jobId !== id) return;
    renderJob(job);
    // A finished job's log is read to its end once, then left alone (a
    // retry makes it pending again, and it is followed again).
    const finished = ["done", "failed", "cancelled"].includes(job.state);
    if (finished && view.log && view.log.id === id && view.log.complete) return;
    await followLog(id);
    if (view.log && view.log.id === id) view.log.complete = finished && view.log.offset >= view.log.size;
  }

  // ---- actions -------------------------------------------------------------
  async function act(method, path) {
    try {
      await api(method, path);
      flash("");
    } catch (e) {
      flash(e.message);
    }
    refresh();
  }
  function jobAction(what) {
    return () => { if (view.jobId) act("POST", "/api/tasks/outbox/" + view.jobId + "/" + what); };
  }
  $("act-cancel").addEventListener("click", jobAction("cancel"));
  $("act-retry").addEventListener("click", jobAction("retry"));
  $("act-hold").addEventListener("click", jobAction("hold"));
  $("act-release").addEventListener("click", jobAction("release"));
  $("pause-all").addEventListener("click", () => act("POST", "/api/pause"));
  $("resume-all").addEventListener("click", () => act("POST", "/api/resume"));
  $("logout").addEventListener("click", async () => {
    await fetch("/logout", { method: "POST", headers: { "X-Session-Key": store.get() || "" }, credentials: "same-origin" });
    store.clear();
    location.replace("/login");
  });
  $("filters").addEventListener("submit", (ev) => ev.preventDefault());
  $("filters").addEventListener("input", () => { view.cursors = [null]; refresh(); });
  $("older").addEventListener("click", () => { if (view.next) { view.cursors.push(view.next); refresh(); } });
  $("newer").addEventListener("click", () => { if (view.cursors.length > 1) { view.cursors.pop(); refresh(); } });

  // ---- the loop ------------------------------------------------------------
  function route() {
    const m = /^#\/job\/(\d+)$/.exec(location.hash);
    view.jobId = m ? Number(m[1]) : null;
    $("list-view").hidden = view.jobId !== null;
    $("job-view").hidden = view.jobId === null;
    if (view.jobId !== null) {
      $("job-title").textContent = "Job #" + view.jobId;
      $("job-log").textContent = "";
      $("job-events").replaceChildren();
      $("job-fields").replaceChildren();
      $("job-why").textContent = "";
      view.log = null;
    }
  }

  async function refresh() {
    if (view.loggedOut) return;
    clearTimeout(timer);
    timer = null;
    if (document.hidden) {
      setLive("off", "paused while hidden");
      return;
    }
    if (busy) { schedule(); return; }
    busy = true;
    try {
      if (view.jobId !== null) await refreshJob(view.jobId);
      else await refreshList();
      setLive("on", "live");
    } catch (e) {
      if (e instanceof Refused && e.status === 401) {
        view.loggedOut = true;
        if (e.key === store.get()) store.clear();
        setLive("err", "logged out");
        flash("Your session has ended.", el("a", { href: "/login" }, "Log in again"));
        return;
      }
      if (e instanceof Refused && e.status === 404 && view.jobId !== null) {
        flash(e.message);
      } else {
        setLive("err", "cannot reach the server");
      }
    } finally {
      busy = false;
    }
    schedule();
  }

  function schedule() {
    if (!document.hidden && !view.loggedOut && timer === null) timer = setTimeout(refresh, POLL_MS);
  }

  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); else setLive("off", "paused while hidden"); });
  window.addEventListener("hashchange", () => { route(); flash(""); refresh(); });
  route();
  refresh();
})();
