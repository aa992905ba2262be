// slothqueue's page: a client of the JSON API, authenticated by the session
// cookie (sent by the browser, unreadable here) and the session's key, sent
// with every request. The login hands the key over once; it is kept in this
// origin's localStorage, which no page of another port can read (the
// cookie, a browser sends to every port of 127.0.0.1).
// It looks again once a second while the tab is visible, not at all while
// it is hidden. Everything shown is set as text, never as HTML.
// One thing: the page's only script, over 800 lines since it steers as well
// as shows (edit/clone, bulk actions, schedules, history): with no build
// step to join files, a second script would be a second request sharing
// this one's helpers through globals. Its sections are marked `// ----`.
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
  const view = {
    mode: "list", jobId: null, cursors: [null], next: null, log: null, loggedOut: false,
    job: null, stats: null, queues: null, historyAt: 0,
  };
  let timer = null;
  let busy = false;

  class Refused extends Error {
    constructor(status, message, key) { super(message); this.status = status; this.key = key; }
  }

  /** One API call; `body`, when given, is sent as JSON. */
  async function api(method, path, body) {
    // Read each time: a login in another tab replaces both the cookie and
    // the key, and this tab goes on with the new pair.
    const headers = { Accept: "application/json", "X-Session-Key": store.get() || "" };
    const init = { method, headers, credentials: "same-origin", cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    const answer = await r.json().catch(() => ({}));
    if (!r.ok) throw new Refused(r.status, answer.error || "refused (" + r.status + ")", headers["X-Session-Key"]);
    return answer;
  }

  /** A line at the top: an error (the server's words), or, with `ok`, what an action did. */
  function flash(msg, link, ok) {
    const f = $("flash");
    f.replaceChildren(msg, link ? " " : "", link || "");
    f.className = ok ? "flash ok" : "flash";
    f.hidden = !msg;
  }

  function setLive(cls, text) {
    const l = $("live");
    l.className = "live " + cls;
    l.textContent = text;
  }

  /**
   * Asks before a change that cannot be undone, in a native `<dialog>`
   * (a phone shows it as any page element; a test clicks its buttons).
   * Resolves true when the person chose `okLabel`.
   */
  function confirmed(text, okLabel) {
    const d = $("confirm");
    if (d.open) return Promise.resolve(false); // one question at a time
    $("confirm-text").textContent = text;
    $("confirm-ok").textContent = okLabel;
    d.returnValue = "";
    return new Promise((resolve) => {
      d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
      d.showModal();
      $("confirm-no").focus();
    });
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
  /** How long a job ran (or has run so far), or "" when it never started. */
  function took(job) {
    if (!job.started_at) return "";
    const end = job.finished_at || (job.state === "running" ? Date.now() : null);
    if (!end) return "";
    const ms = end - job.started_at;
    return ms < 1000 ? (ms / 1000).toFixed(2) + " s" : span(ms);
  }
  function plural(n, one, many) { return n + " " + (n === 1 ? one : many || one + "s"); }

  // ---- what a job is --------------------------------------------------------
  function what(job) {
    if (job.kind === "shell" && job.payload && typeof job.payload.command === "string") {
      return job.payload.command;
    }
    const p = JSON.stringify(job.payload);
    return p.length > 200 ? p.slice(0, 200) + "…" : p;
  }
  /** Whether `queue` is paused now, by its own pause or every queue's (from `/api/queues`). */
  function queuePaused(queue) {
    const qs = view.queues;
    if (!qs) return false;
    if (qs.all_paused) return true;
    return (qs.queues || []).some((q) => q.queue === queue && q.paused);
  }
  /**
   * A job's state as the CLI words it: the server's `shown_state` (held,
   * waiting, or the state) and `waiting_on` (`after #16`), never derived
   * here; a pending job of a paused queue says so.
   */
  function stateCell(job) {
    let s = job.shown_state || job.state;
    if (job.waiting_on) s += " " + job.waiting_on;
    else if (!job.shown_state && job.state === "pending" && job.held) s = "pending (held)";
    if (job.state === "pending" && s !== "held" && queuePaused(job.queue)) s += " (queue paused)";
    if (job.state === "running" && job.cancel_requested) s = "running (cancelling)";
    return el("span", { class: "state " + job.state + (job.shown_state ? " " + job.shown_state : "") }, s);
  }
  /** A table cell that names its column, for the stacked cards at a phone's width. */
  function cell(label, attrs, ...children) {
    return el("td", Object.assign({ "data-label": label }, attrs || {}), ...children);
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
    const finished = stats.done + stats.failed + stats.cancelled;
    $("clear-finished").disabled = finished === 0;
    $("clear-finished").textContent = "Clear " + plural(finished, "finished job") + "…";
  }

  /**
   * A queue's pause button says what it does. While every queue is
   * paused, a queue's own pause is a second pause that "Resume every
   * queue" leaves in place: the button says so instead of a plain "Pause".
   */
  function laneButton(q, allPaused) {
    const path = "/api/queues/" + encodeURIComponent(q.queue) + "/";
    if (q.paused) {
      const label = allPaused ? "Lift its own pause (every queue stays paused)" : "Resume";
      return el("button", { type: "button", class: "small lane-toggle", "data-act": "resume", onclick: () => act("POST", path + "resume") }, label);
    }
    if (allPaused) {
      return el("button", {
        type: "button", class: "small lane-toggle", "data-act": "pause",
        title: "Every queue is paused; this adds " + q.queue + "'s own pause, which stays after “Resume every queue”",
        onclick: () => act("POST", path + "pause"),
      }, "Keep paused after Resume every queue");
    }
    return el("button", { type: "button", class: "small lane-toggle", "data-act": "pause", onclick: () => act("POST", path + "pause") }, "Pause");
  }

  function laneState(q, allPaused) {
    if (q.paused && allPaused) return "paused (itself and every queue)";
    if (q.paused) return "paused";
    if (allPaused) return "paused (every queue)";
    return "open";
  }

  function renderLanes(queues) {
    view.queues = queues;
    const all = !!queues.all_paused;
    const rows = (queues.queues || []).map((q) => {
      return el("tr", { "data-queue": q.queue },
        cell("Queue", { class: "name" }, q.queue),
        cell("Pending", { class: "num" }, q.pending), cell("Due", { class: "num" }, q.due),
        cell("Held", { class: "num" }, q.held), cell("Running", { class: "num" }, q.running),
        cell("Limit", { class: "num" }, q.limit ? q.limit : "—"),
        cell("State", { class: "lane-state" }, laneState(q, all)),
        cell("Actions", { class: "lane-actions" },
          laneButton(q, all), " ",
          el("button", { type: "button", class: "small bulk-retry", onclick: () => retryFailed(q.queue) }, "Retry failed…"), " ",
          el("button", { type: "button", class: "small bulk-cancel danger", disabled: q.pending === 0, onclick: () => cancelPending(q) }, "Cancel pending…")));
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

  // The jobs done and failed per minute over the last hour (`GET
  // /api/history`, the queue's own trail), as inline SVG bars: no library.
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  function renderHistory(h) {
    const minutes = h.minutes || [];
    const top = Math.max(1, ...minutes.map((m) => m.done + m.failed));
    const W = 6, H = 48;
    const bars = [];
    let done = 0, failed = 0;
    minutes.forEach((m, i) => {
      done += m.done; failed += m.failed;
      const hd = (m.done / top) * H, hf = (m.failed / top) * H;
      const label = new Date(m.at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) + ": " + m.done + " done, " + m.failed + " failed";
      bars.push(svg("g", { class: "minute" }, svg("title", {}, label),
        svg("rect", { x: i * W, y: 0, width: W, height: H, class: "slot" }),
        svg("rect", { x: i * W + 1, y: H - hd - hf, width: W - 2, height: hd, class: "done" }),
        svg("rect", { x: i * W + 1, y: H - hf, width: W - 2, height: hf, class: "failed" })));
    });
    const chart = svg("svg", { viewBox: "0 0 " + Math.max(1, minutes.length) * W + " " + H, preserveAspectRatio: "none", role: "img" }, ...bars);
    $("history").replaceChildren(chart, el("div", { class: "axis muted" }, el("span", {}, "an hour ago"), el("span", {}, "now")));
    const busiest = Math.max(0, ...minutes.map((m) => m.done + m.failed));
    $("history-note").textContent = "(" + done + " done, " + failed + " failed" + (busiest ? "; at most " + busiest + " a minute" : "") + ")";
    $("history-box").hidden = false;
  }
  async function refreshHistory(stats) {
    // Once every ten seconds is enough for minutes, unless a job ended
    // since (the counts of done and failed jobs moved).
    const ended = stats.done + "/" + stats.failed;
    if (Date.now() - view.historyAt < 10000 && ended === view.historyEnded) return;
    view.historyAt = Date.now();
    view.historyEnded = ended;
    try {
      renderHistory(await api("GET", "/api/history"));
    } catch (e) {
      // A server without the route shows no panel.
      $("history-box").hidden = true;
    }
  }

  function filterQuery() {
    const p = new URLSearchParams();
    for (const name of ["state", "queue", "kind"]) {
      const v = $("f-" + name).value.trim();
      if (v) p.set(name, v);
    }
    const search = $("f-search").value;
    if (search) p.set("search", search);
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
      el("td", { class: "num tries", title: j.attempts + " of " + j.max_attempts + " attempts" }, j.attempts + "/" + j.max_attempts),
      el("td", { class: "wide took" }, took(j)),
      el("td", { class: "wide last-error", title: j.last_error || "" }, j.last_error || ""),
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
    view.stats = stats;
    renderCounts(stats);
    renderLanes(queues);
    renderRunners(runners.runners);
    renderGpus(stats.gpus || []);
    renderJobs(page);
    await refreshHistory(stats);
  }

  // ---- bulk actions ----------------------------------------------------------
  /** What a bulk action did, from its answer `{"count": N, "ids": […]}`. */
  function didBulk(verb, answer) {
    const ids = (answer.ids || []).slice(0, 20).map((id) => "#" + id).join(", ");
    const more = (answer.ids || []).length > 20 ? ", …" : "";
    // Jobs that moved on since they were counted, with the server's why.
    const skipped = (answer.skipped || []).map((k) => "#" + k.id + " (" + k.why + ")").join("; ");
    flash(verb + " " + plural(answer.count, "job") + (ids ? ": " + ids + more : "") + "." +
      (skipped ? " Skipped: " + skipped + "." : ""), null, true);
  }
  async function bulk(verb, path, body) {
    try {
      didBulk(verb, await api("POST", path, body));
    } catch (e) {
      flash(e.message);
    }
    refresh();
  }
  /** How many failed jobs `queue` has now: its row's count when the server gives one, else counted. */
  async function failedOf(queue) {
    const row = ((view.queues && view.queues.queues) || []).find((q) => q.queue === queue);
    if (row && typeof row.failed === "number") return { n: row.failed, more: false };
    const page = await api("GET", "/api/tasks/outbox?state=failed&limit=500&queue=" + encodeURIComponent(queue));
    return { n: page.jobs.length, more: !!page.next_cursor };
  }
  async function retryFailed(queue) {
    let count;
    try { count = await failedOf(queue); } catch (e) { flash(e.message); return; }
    if (count.n === 0) { flash("Queue " + queue + " has no failed job.", null, true); return; }
    const n = (count.more ? "more than " : "") + plural(count.n, "failed job");
    const ok = await confirmed("Retry " + (count.more ? "" : "the ") + n + " of queue " + queue + "? Each runs again as a new attempt.",
      "Retry " + (count.more ? "them all" : plural(count.n, "job")));
    if (ok) bulk("Retried", "/api/queues/" + encodeURIComponent(queue) + "/retry-failed");
  }
  async function cancelPending(q) {
    const n = q.pending;
    const ok = await confirmed("Cancel the " + plural(n, "pending job") + " of queue " + q.queue +
      " (held and waiting ones too)? Running jobs go on.", "Cancel " + plural(n, "job"));
    if (ok) bulk("Cancelled", "/api/queues/" + encodeURIComponent(q.queue) + "/cancel-pending");
  }
  async function clearFinished() {
    const s = view.stats;
    if (!s) return;
    const n = s.done + s.failed + s.cancelled;
    const ok = await confirmed("Remove the " + plural(n, "finished job") + " (" + s.done + " done, " + s.failed + " failed, " +
      s.cancelled + " cancelled) from the queue, with their trails? Pending and running jobs stay.", "Remove " + plural(n, "job"));
    if (ok) bulk("Cleared", "/api/clear");
  }

  // ---- the job view ---------------------------------------------------------
  function field(name, value) {
    return [el("dt", {}, name), el("dd", {}, value === undefined || value === null || value === "" ? "—" : value)];
  }

  function renderJob(job) {
    view.job = job;
    $("job-missing").hidden = true;
    $("job-body").hidden = false;
    $("job-title").replaceChildren("Job #" + job.id + " ", stateCell(job));
    // A failed job's error comes first: it is what the page is opened for.
    const failedNow = job.state === "failed" || (job.state === "pending" && job.last_error);
    $("job-error").hidden = !(failedNow && job.last_error);
    $("job-error").textContent = job.last_error
      ? (job.state === "failed" ? "Failed: " : "The last attempt failed: ") + job.last_error
      : "";
    // Why it is not running, or who runs it: the server's words (the read
    // model's, the same `slothqueue show` prints), never the page's own.
    $("job-why").textContent = job.why || "";
    const pending = job.state === "pending";
    $("act-cancel").hidden = !(pending || job.state === "running");
    $("act-cancel").disabled = !!job.cancel_requested;
    $("act-retry").hidden = !(job.state === "failed" || job.state === "cancelled");
    $("act-hold").hidden = !(pending && !job.held);
    $("act-release").hidden = !(pending && job.held);
    // An open edit form stays when the job leaves pending under it: its
    // Save then gets the server's refusal, which says what happened.
    $("act-edit").hidden = !pending;
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
      ...field("Took", took(job)),
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

  /** A job id the queue does not have: said so, and nothing of another job left on the page. */
  function renderMissing(id, message) {
    view.job = null;
    closeEdit();
    $("job-title").textContent = "Job #" + id;
    $("job-body").hidden = true;
    const m = $("job-missing");
    m.textContent = "No job #" + id + " in this queue: it may have been cleared, or the link is wrong. (The server said: " + message + ".)";
    m.hidden = false;
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
    let job;
    try {
      job = await api("GET", "/api/tasks/outbox/" + id);
    } catch (e) {
      if (e instanceof Refused && e.status === 404 && view.jobId === id) { renderMissing(id, e.message); return; }
      throw e;
    }
    if (view.jobId !== id) return;
    renderJob(job);
    // A finished job's log is read to its end once, then left alone (a
    // retry makes it pending again, and it is followed again).
    const finished = ["done", "failed", "cancelled"].includes(job.state);
    if (finished && view.log && view.log.id === id && view.log.complete) return;
    await followLog(id);
    if (view.log && view.log.id === id) view.log.complete = finished && view.log.offset >= view.log.size;
  }

  // ---- edit and clone --------------------------------------------------------
  // The form sends only what the person changed (the CLI's flags: anything
  // not given stays); the server checks it by the CLI's rules, and its
  // refusal is shown as given.
  function openEdit(mode) {
    const job = view.job;
    if (!job) return;
    view.editing = mode;
    const shell = job.kind === "shell" && job.payload && typeof job.payload.command === "string";
    view.editFrom = {
      command: shell ? job.payload.command : null,
      payload: shell ? null : JSON.stringify(job.payload, null, 1),
      queue: job.queue, priority: String(job.priority), max_attempts: String(job.max_attempts),
    };
    $("edit-title").textContent = mode === "edit" ? "Edit job #" + job.id : "Clone job #" + job.id + " as a new job";
    $("edit-note").textContent = mode === "edit"
      ? "Changes this pending job in place; it keeps its id, trail, key and parents."
      : "Adds a new pending job, due now, with no key and no parents; #" + job.id + " stays as it is.";
    $("edit-save").textContent = mode === "edit" ? "Save changes" : "Add the clone";
    $("edit-command-label").hidden = !shell;
    $("edit-payload-label").hidden = shell;
    $("edit-command").value = view.editFrom.command || "";
    $("edit-payload").value = view.editFrom.payload || "";
    $("edit-queue").value = job.queue;
    $("edit-priority").value = view.editFrom.priority;
    $("edit-attempts").value = view.editFrom.max_attempts;
    $("edit-error").hidden = true;
    $("edit-form").hidden = false;
    (shell ? $("edit-command") : $("edit-payload")).focus();
  }
  function closeEdit() {
    view.editing = null;
    $("edit-form").hidden = true;
  }
  /** The body of the edit or clone: the fields the person changed, or a sentence saying what is wrong. */
  function editBody() {
    const from = view.editFrom;
    const body = {};
    if (from.command !== null && $("edit-command").value !== from.command) body.command = $("edit-command").value;
    if (from.payload !== null && $("edit-payload").value !== from.payload) {
      try { body.payload = JSON.parse($("edit-payload").value); } catch (e) { return "The payload is not JSON: " + e.message; }
    }
    if ($("edit-queue").value !== from.queue) body.queue = $("edit-queue").value;
    for (const [id, name] of [["edit-priority", "priority"], ["edit-attempts", "max_attempts"]]) {
      const v = $(id).value.trim();
      if (v === from[name]) continue;
      if (!/^-?\d+$/.test(v)) return name.replace("_", " ") + " must be a whole number";
      body[name] = Number(v);
    }
    return body;
  }
  $("edit-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const job = view.job;
    if (!job || !view.editing) return;
    const body = editBody();
    const err = $("edit-error");
    if (typeof body === "string") { err.textContent = body; err.hidden = false; return; }
    if (view.editing === "edit" && Object.keys(body).length === 0) {
      err.textContent = "Nothing changed: change a field first.";
      err.hidden = false;
      return;
    }
    try {
      if (view.editing === "edit") {
        await api("PATCH", "/api/tasks/outbox/" + job.id, body);
        closeEdit();
        flash("Edited job #" + job.id + ": " + Object.keys(body).join(", ").replace("max_attempts", "max attempts") + ".", null, true);
        refresh();
      } else {
        const clone = await api("POST", "/api/tasks/outbox/" + job.id + "/clone", body);
        closeEdit();
        view.keepFlash = true;
        location.hash = "#/job/" + clone.id;
        flash("Cloned job #" + job.id + " as #" + clone.id + ".", null, true);
      }
    } catch (e) {
      // The server's sentence, as the CLI prints it.
      err.textContent = e.message;
      err.hidden = false;
    }
  });
  $("edit-cancel").addEventListener("click", closeEdit);
  $("act-edit").addEventListener("click", () => openEdit("edit"));
  $("act-clone").addEventListener("click", () => openEdit("clone"));

  // ---- the schedules view ------------------------------------------------------
  function specText(spec) {
    if (spec.cron !== undefined) return "cron " + spec.cron;
    if (spec.every !== undefined) return "every " + span(spec.every);
    return JSON.stringify(spec);
  }
  function newJobWhat(job) {
    if (job.kind === "shell" && job.payload && typeof job.payload.command === "string") return job.payload.command;
    return job.kind + " " + JSON.stringify(job.payload);
  }
  function renderSchedules(list) {
    const rows = list.schedules.map((s) => {
      const path = "/api/schedules/" + encodeURIComponent(s.key);
      const next = s.paused ? "— (paused)" : s.next_fire_local
        ? [s.next_fire_local + " (" + ago(s.next_fire) + ")", s.spec.every !== undefined ? el("br") : "",
           s.spec.every !== undefined ? "then every " + span(s.spec.every) : ""]
        : "none left";
      const fire = s.last_fire
        ? [s.last_fire_local || when(s.last_fire.slot), " ", el("a", { href: "#/job/" + s.last_fire.job }, "#" + s.last_fire.job)]
        : "—";
      const missed = [];
      if (s.last_missed) {
        const m = s.last_missed;
        missed.push((m.at_least ? "at least " : "") + plural(m.count, "slot") + ", latest " + new Date(m.latest).toLocaleString());
      }
      if (s.last_skipped) missed.push((missed.length ? "; " : "") + "skipped " + new Date(s.last_skipped).toLocaleString() + " (the previous job was unfinished)");
      const state = s.paused ? "paused since " + new Date(s.paused.since).toLocaleString() + " by " + s.paused.by : "active";
      return el("tr", { "data-key": s.key },
        cell("Key", { class: "name" }, s.key),
        cell("When", {}, el("span", { class: "nowrap" }, specText(s.spec)), el("br"), el("span", { class: "muted" }, s.zone)),
        cell("Next ticks", { class: "next" }, next),
        cell("Last fire", {}, fire),
        cell("Missed", { class: "missed" }, missed.length ? missed : "—"),
        cell("State", { class: "sched-state" }, state),
        cell("Command", { class: "mono what", title: newJobWhat(s.job) }, newJobWhat(s.job)),
        cell("Actions", { class: "lane-actions" },
          s.paused
            ? el("button", { type: "button", class: "small sched-toggle", "data-act": "resume", onclick: () => act("POST", path + "/resume") }, "Resume")
            : el("button", { type: "button", class: "small sched-toggle", "data-act": "pause", onclick: () => act("POST", path + "/pause") }, "Pause"),
          " ",
          el("button", { type: "button", class: "small danger sched-remove", onclick: () => removeSchedule(s) }, "Remove…")));
    });
    if (rows.length === 0) {
      rows.push(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No schedule. `slothqueue every 2h 'make backup'` adds one.")));
    }
    $("schedules").tBodies[0].replaceChildren(...rows);
    $("schedules-next").textContent = list.next_fire ? "Next tick: " + when(list.next_fire) : "No tick is coming.";
  }
  async function removeSchedule(s) {
    const ok = await confirmed("Remove schedule " + s.key + "? No tick fires any more; the jobs it added stay.", "Remove " + s.key);
    if (ok) act("DELETE", "/api/schedules/" + encodeURIComponent(s.key));
  }
  async function refreshSchedules() {
    renderSchedules(await api("GET", "/api/schedules"));
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
  /**
   * Cancel says what goes with the job: a running job is stopped, and every
   * job waiting on it is cancelled too (the server's list, read first).
   */
  async function cancelJob() {
    const job = view.job;
    if (!job) return;
    let deps = null;
    try {
      deps = await api("GET", "/api/tasks/outbox/" + job.id + "/dependents");
    } catch (e) {
      deps = null;
    }
    const taken = deps && (deps.jobs || []).length > 0;
    if (job.state === "running" || taken) {
      const what = job.state === "running" ? "Cancel running job #" + job.id + "? Its process is stopped." : "Cancel job #" + job.id + "?";
      const also = taken
        ? " Cancelled with it: " + deps.words + "."
        : deps ? " No other job waits on it." : "";
      const n = taken ? deps.jobs.length + 1 : 1;
      if (!(await confirmed(what + also, "Cancel " + plural(n, "job")))) return;
    }
    act("POST", "/api/tasks/outbox/" + job.id + "/cancel");
  }
  $("act-cancel").addEventListener("click", cancelJob);
  $("act-retry").addEventListener("click", jobAction("retry"));
  $("act-hold").addEventListener("click", jobAction("hold"));
  $("act-release").addEventListener("click", jobAction("release"));
  $("pause-all").addEventListener("click", () => act("POST", "/api/pause"));
  $("resume-all").addEventListener("click", () => act("POST", "/api/resume"));
  $("clear-finished").addEventListener("click", clearFinished);
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
    view.mode = m ? "job" : location.hash === "#/schedules" ? "schedules" : "list";
    $("list-view").hidden = view.mode !== "list";
    $("job-view").hidden = view.mode !== "job";
    $("schedules-view").hidden = view.mode !== "schedules";
    $("tab-jobs").className = view.mode === "schedules" ? "" : "on";
    $("tab-schedules").className = view.mode === "schedules" ? "on" : "";
    if (view.jobId !== null) {
      // Nothing of the job shown before stays: its buttons and sections
      // come back with this job's answer.
      view.job = null;
      closeEdit();
      $("job-title").textContent = "Job #" + view.jobId;
      $("job-body").hidden = true;
      $("job-missing").hidden = true;
      $("job-log").textContent = "";
      $("job-events").replaceChildren();
      $("job-fields").replaceChildren();
      $("job-why").textContent = "";
      $("job-error").hidden = true;
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
      if (view.mode === "job") await refreshJob(view.jobId);
      else if (view.mode === "schedules") await refreshSchedules();
      else await refreshList();
      setLive("on", "live");
      if (view.refusedBy) { view.refusedBy = false; flash(""); }
    } catch (e) {
      if (e instanceof Refused && e.status === 401) {
        view.loggedOut = true;
        if (e.key === store.get()) store.clear();
        setLive("err", "logged out");
        flash("Your session has ended.", el("a", { href: "/login" }, "Log in again"));
        return;
      }
      if (e instanceof Refused) {
        // A filter the server refuses, say: its words until a look succeeds.
        view.refusedBy = true;
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
  window.addEventListener("hashchange", () => {
    // A message an action left for the page it opened stays; any other goes.
    if (!view.keepFlash) flash("");
    view.keepFlash = false;
    route();
    refresh();
  });
  route();
  refresh();
})();
