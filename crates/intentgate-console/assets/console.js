// The intentgate console: draws the page its path names from the admin API's answers.
//
// Every value from the gateway is put into the page as text (textContent, attributes),
// never as HTML, so a key or an argument can't become markup or script. Changes carry the
// session's CSRF token, which the server wrote into a <meta> element of this page.
"use strict";

const CSRF = document.querySelector('meta[name="intentgate-csrf"]').content;
// The tenant this session approves for: empty when its credential lacks the `approve` scope.
const APPROVER_TENANT = document.querySelector('meta[name="intentgate-approver-tenant"]').content;
const API = "/v1/admin";
// The overview asks again this often while it is on screen.
const REFRESH_MS = 2000;
const SINCE_CHOICES = [["", "Any time"], ["15m", "Last 15 minutes"], ["1h", "Last hour"], ["24h", "Last 24 hours"], ["7d", "Last 7 days"]];
const STATUSES = ["pending", "in_flight", "done", "rejected", "not_executed", "unknown"];
const WINDOWS = [["15m", "15 minutes"], ["1h", "1 hour"], ["24h", "24 hours"], ["7d", "7 days"]];
const TIME = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });
const CLOCK = new Intl.DateTimeFormat(undefined, { timeStyle: "medium" });
const SHORT = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/** An element with attributes (`on*` functions become listeners) and children (text or nodes). */
function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replaces a node's children (absent ones skipped, as `el` skips them). */
function fill(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

function svg(tag, attributes) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value));
  return node;
}

/** A time in the viewer's time zone, short (today: the time only); the full date on hover. */
function when(ms) {
  if (ms === null || ms === undefined) return "—";
  const date = new Date(ms);
  const today = new Date().toDateString() === date.toDateString();
  return el("time", { datetime: date.toISOString(), title: TIME.format(date) }, today ? CLOCK.format(date) : SHORT.format(date));
}

function ago(ms) {
  const seconds = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (seconds < 60) return seconds + " s ago";
  if (seconds < 3600) return Math.round(seconds / 60) + " min ago";
  if (seconds < 86400) return Math.round(seconds / 3600) + " h ago";
  return Math.round(seconds / 86400) + " d ago";
}

/** A span of time in words, short: "40 s", "12 min", "3 h 5 min", "2 d 4 h". */
function span(ms) {
  const seconds = Math.max(0, Math.round(ms / 1000));
  if (seconds < 60) return seconds + " s";
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return minutes + " min";
  const hours = Math.floor(minutes / 60);
  if (hours < 24) return hours + " h" + (minutes % 60 ? " " + (minutes % 60) + " min" : "");
  const days = Math.floor(hours / 24);
  return days + " d" + (hours % 24 ? " " + (hours % 24) + " h" : "");
}

/** When `ms` falls, from now: "in 40 s", "due now", "12 min ago". */
function fromNow(ms) {
  const delta = ms - Date.now();
  if (Math.abs(delta) < 1000) return "due now";
  return delta > 0 ? "in " + span(delta) : span(-delta) + " ago";
}

function badge(text, kind) {
  return el("span", { class: "badge " + (kind || "") }, text);
}

function statusBadge(status) {
  return badge(status.replace("_", " "), "status-" + status);
}

function table(headings, rows, empty) {
  if (!rows.length) return el("p", { class: "empty" }, empty || "Nothing to show.");
  const head = el("tr", {}, headings.map((heading) => {
    const [text, kind] = Array.isArray(heading) ? heading : [heading, ""];
    return el("th", { scope: "col", class: kind }, text);
  }));
  return el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, head), el("tbody", {}, rows)));
}

function td(content, kind) {
  return el("td", { class: kind || "" }, content);
}

function intentLink(id) {
  return el("a", { href: "/console/intents/" + encodeURIComponent(id) }, "#" + id);
}

function panel(title, ...children) {
  return el("section", { class: "panel", "aria-label": typeof title === "string" ? title : null },
    el("h2", {}, title), ...children);
}

let toastTimer = null;
function toast(text) {
  const node = document.getElementById("toast");
  node.textContent = text;
  node.classList.add("show");
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => node.classList.remove("show"), 4000);
}

/**
 * Reads an admin API answer without letting a float change a number: a number whose text a
 * float would not give back (`49.00`, `100.000000000000000001`) keeps the text the caller
 * sent, as a raw JSON value where the browser has them (written back unquoted by
 * JSON.stringify) or as text. Counts, ids and times, which a float holds exactly, stay
 * numbers. A browser that can't show a number's source text reads numbers as before.
 */
function parseExact(text) {
  return JSON.parse(text, function (key, value, context) {
    if (typeof value !== "number" || !context || typeof context.source !== "string") return value;
    if (String(value) === context.source) return value;
    return typeof JSON.rawJSON === "function" ? JSON.rawJSON(context.source) : context.source;
  });
}

/** True for a number `parseExact` kept as its source text. */
function isExactNumber(value) {
  return typeof JSON.isRawJSON === "function" && JSON.isRawJSON(value);
}

/** Calls the admin API; an ended session reloads the page (the sign-in form). */
async function api(path, options) {
  const init = { method: "GET", credentials: "same-origin", cache: "no-store", headers: { "Accept": "application/json" } };
  if (options && options.method) init.method = options.method;
  if (options && options.body !== undefined) {
    init.body = JSON.stringify(options.body);
    init.headers["Content-Type"] = "application/json";
  }
  if (init.method !== "GET") init.headers["X-Intentgate-Csrf"] = CSRF;
  const response = await fetch(API + path, init);
  if (response.status === 401) {
    location.reload();
    throw new Error("the session has ended; sign in again");
  }
  const text = await response.text();
  let body = null;
  try { body = text ? parseExact(text) : null; } catch (_) { body = null; }
  if (!response.ok) {
    const detail = body && body.detail ? body.detail : "HTTP " + response.status;
    const error = new Error(detail);
    error.status = response.status;
    throw error;
  }
  return body;
}

function setMain(...children) {
  const main = document.getElementById("main");
  fill(main, ...children.flat().filter(Boolean));
}

function pageHead(title, sub, ...extra) {
  return el("div", { class: "page-head" }, el("div", {}, el("h1", {}, title), sub ? el("p", { class: "sub" }, sub) : null), ...extra);
}

function failure(error) {
  return el("div", { class: "callout", role: "alert" }, el("strong", {}, "The admin API answered with an error"), error.message);
}

function isSensitive(value) {
  return typeof value === "string" && value.startsWith("hmac-sha256:");
}

/** A value from the ledger as readable text: sensitive hashes redacted, objects as JSON. */
function showValue(value) {
  if (isSensitive(value)) return el("span", { title: "Stored only as a keyed hash" }, badge("redacted", "info"), " sensitive");
  if (value === null || value === undefined) return "—";
  if (isExactNumber(value)) return value.rawJSON;
  if (typeof value === "object") return el("code", {}, JSON.stringify(value));
  return String(value);
}

/** An object's fields as a two-column table (nested objects flattened with dots). */
function fieldsTable(object, empty) {
  const rows = [];
  const walk = (prefix, value) => {
    if (value && typeof value === "object" && !Array.isArray(value) && !isExactNumber(value)) {
      for (const [name, inner] of Object.entries(value)) walk(prefix ? prefix + "." + name : name, inner);
    } else {
      rows.push(el("tr", {}, el("th", { scope: "row" }, prefix || "(value)"), td(showValue(value), "wrap")));
    }
  };
  walk("", object);
  return rows.length ? el("div", { class: "table-wrap" }, el("table", { class: "fields" }, el("tbody", {}, rows))) : el("p", { class: "empty" }, empty);
}

// ---------------------------------------------------------------------------------------
// The resolve form (unknown intents), shared by the Unknown page and an intent's page
// ---------------------------------------------------------------------------------------

let formCount = 0;
/**
 * The resolve form of an unsettled intent. `resolvable` is the admin API's verdict
 * (`{now, reason, retry_after_ms}`): while a call or the sweeper holds the intent's lease the
 * form says why and its button stays disabled until the lease is over, so nobody races the
 * step that is running.
 */
function resolveForm(intent, onDone, resolvable) {
  const n = ++formCount;
  const external = el("input", { id: "external-" + n, type: "text", autocomplete: "off", spellcheck: "false", maxlength: 256 });
  const reason = el("textarea", { id: "reason-" + n, rows: 2, maxlength: 4096, required: true });
  const message = el("p", { class: "message", role: "alert" });
  const done = el("input", { type: "radio", name: "status-" + n, value: "done", id: "done-" + n });
  const notExecuted = el("input", { type: "radio", name: "status-" + n, value: "not_executed", id: "not-executed-" + n });
  const externalField = el("div", { class: "field" }, el("label", { for: external.id }, "Provider's id of the effect (required for done)"), external);
  const button = el("button", { type: "submit", class: "primary" }, "Resolve intent #" + intent.id);
  const form = el("form", { class: "resolve", novalidate: true, "data-intent": intent.id, "aria-label": "Resolve intent " + intent.id },
    el("fieldset", { class: "radios" },
      el("legend", {}, "What happened at the provider?"),
      el("label", { for: done.id }, done, "Done: the provider has the effect"),
      el("label", { for: notExecuted.id }, notExecuted, "Not executed: it never happened")),
    el("div", { class: "resolve-grid" },
      externalField,
      el("div", { class: "field" }, el("label", { for: reason.id }, "Reason (required)"), reason)),
    message,
    el("div", { class: "actions" }, button));
  if (resolvable && !resolvable.now) {
    const wait = resolvable.retry_after_ms;
    const refusal = el("p", { class: "refusal", role: "status", "data-slot": "resolve-refused" },
      el("strong", {}, "Not now. "), resolvable.reason.replace(/\.?$/, "."),
      wait ? " This form opens again " + fromNow(Date.now() + wait) + "." : "");
    form.prepend(refusal);
    button.disabled = true;
    button.setAttribute("aria-describedby", "refusal-" + n);
    refusal.id = "refusal-" + n;
    if (wait) setTimeout(() => onDone(null), wait + 500);
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    message.textContent = "";
    if (button.disabled) return;
    const status = done.checked ? "done" : notExecuted.checked ? "not_executed" : null;
    if (!status) { message.textContent = "Choose done or not executed."; done.focus(); return; }
    if (status === "done" && !external.value.trim()) { message.textContent = "Give the provider's id of the effect, as the provider's dashboard shows it."; external.focus(); return; }
    if (!reason.value.trim()) { message.textContent = "Give a reason: it is kept in the intent's event log."; reason.focus(); return; }
    const body = { status, reason: reason.value.trim() };
    if (status === "done") body.external_id = external.value.trim();
    button.disabled = true;
    try {
      const resolved = await api("/intents/" + encodeURIComponent(intent.id) + "/resolve", { method: "POST", body });
      toast("Intent #" + intent.id + " resolved as " + resolved.status.replace("_", " "));
      onDone(resolved);
    } catch (error) {
      message.textContent = error.message;
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

// ---------------------------------------------------------------------------------------
// The reopen form (a rejected intent whose refusal was the gateway's own error)
// ---------------------------------------------------------------------------------------

function reopenForm(intent, onDone) {
  const n = ++formCount;
  const reason = el("textarea", { id: "reopen-reason-" + n, rows: 2, maxlength: 4096, required: true });
  const message = el("p", { class: "message", role: "alert" });
  const button = el("button", { type: "submit", class: "primary" }, "Reopen intent #" + intent.id);
  const form = el("form", { class: "reopen", novalidate: true, "data-intent": intent.id, "aria-label": "Reopen intent " + intent.id },
    el("div", { class: "field" }, el("label", { for: reason.id }, "Why the refusal was wrong, and that it is fixed (required)"), reason),
    message,
    el("div", { class: "actions" }, button));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    message.textContent = "";
    if (!reason.value.trim()) { message.textContent = "Give a reason: it is kept in the intent's event log."; reason.focus(); return; }
    button.disabled = true;
    try {
      const reopened = await api("/intents/" + encodeURIComponent(intent.id) + "/reopen", { method: "POST", body: { reason: reason.value.trim() } });
      toast("Intent #" + intent.id + " reopened: the next call executes it");
      onDone(reopened);
    } catch (error) {
      message.textContent = error.message;
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

// ---------------------------------------------------------------------------------------
// The confirmation dialog (kill switch)
// ---------------------------------------------------------------------------------------

function confirmDialog(title, text, okLabel, danger, action) {
  const dialog = document.getElementById("confirm");
  const reason = document.getElementById("confirm-reason");
  const message = document.getElementById("confirm-message");
  const ok = document.getElementById("confirm-ok");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  ok.textContent = okLabel;
  ok.className = danger ? "danger" : "primary";
  reason.value = "";
  message.textContent = "";
  const form = document.getElementById("confirm-form");
  form.onsubmit = async (event) => {
    event.preventDefault();
    if (!reason.value.trim()) { message.textContent = "Give a reason: it is stored with the switch."; reason.focus(); return; }
    ok.disabled = true;
    try {
      await action(reason.value.trim());
      dialog.close();
    } catch (error) {
      message.textContent = error.message;
    } finally {
      ok.disabled = false;
    }
  };
  document.getElementById("confirm-cancel").onclick = () => dialog.close();
  dialog.showModal();
  reason.focus();
}

// ---------------------------------------------------------------------------------------
// Overview
// ---------------------------------------------------------------------------------------

function sparkline(buckets) {
  const width = 168, height = 36, gap = 2;
  const max = Math.max(1, ...buckets.map((bucket) => bucket.calls));
  const bar = (width - gap * (buckets.length - 1)) / buckets.length;
  const total = (field) => buckets.reduce((sum, bucket) => sum + bucket[field], 0);
  const peak = Math.max(...buckets.map((bucket) => bucket.repeats));
  const chart = svg("svg", { class: "spark", viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `${total("calls")} calls and ${total("repeats")} repeats in the last hour; at most ${peak} repeats in one 5-minute bucket` });
  buckets.forEach((bucket, index) => {
    const x = index * (bar + gap);
    const callsHeight = Math.round((bucket.calls / max) * (height - 2));
    const repeatsHeight = Math.round((bucket.repeats / max) * (height - 2));
    if (callsHeight > 0) chart.append(svg("rect", { class: "calls", x, y: height - 1 - callsHeight, width: bar, height: callsHeight }));
    if (repeatsHeight > 0) chart.append(svg("rect", { class: "repeats", x, y: height - 1 - repeatsHeight, width: bar, height: repeatsHeight }));
  });
  chart.append(svg("line", { class: "base", x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5 }));
  return chart;
}

function statusBadges(statuses) {
  return Object.entries(statuses).map(([status, count]) => badge(status.replace("_", " ") + " " + count, "status-" + status));
}

async function overview() {
  const live = el("span", { class: "live", "aria-live": "off" }, "Live");
  const body = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  setMain(pageHead("Overview", "The last hour of side-effecting calls, refreshed every few seconds.", live), body);
  let stopped = false;
  const refresh = async () => {
    if (stopped) return;
    if (!document.hidden) {
      try {
        fill(body, await overviewBody());
        live.textContent = "Updated " + CLOCK.format(new Date());
        live.classList.remove("stale");
      } catch (error) {
        live.textContent = "Not updated: " + error.message;
        live.classList.add("stale");
      }
    }
    setTimeout(refresh, REFRESH_MS);
  };
  window.addEventListener("pagehide", () => { stopped = true; });
  await refresh();
}

async function overviewBody() {
  const [activity, flags, unknown, runs, alerts] = await Promise.all([
    api("/activity?since=1h"),
    api("/flags"),
    api("/intents?status=unknown&limit=10"),
    api("/reconciliations?limit=1"),
    api("/alerts").catch(() => ({ alerts: [] })),
  ]);
  const lastRun = runs.reconciliations[0];
  const run = lastRun ? await api("/reconciliations/" + lastRun.id + "?limit=1000") : null;
  const critical = run ? run.mismatches.filter((mismatch) => mismatch.severity === "critical") : [];
  const off = flags.flags.filter((flag) => !flag.enabled);
  const calls = activity.tools.reduce((sum, tool) => sum + tool.calls, 0);
  const repeats = activity.tools.reduce((sum, tool) => sum + tool.repeats, 0);
  const card = (label, value, kind, id) => el("div", { class: "card " + (kind || ""), id }, el("div", { class: "label" }, label), el("div", { class: "value" }, String(value)));
  const cards = el("div", { class: "cards" },
    card("Calls, last hour", calls, "", "card-calls"),
    card("Repeats, last hour", repeats, repeats > 0 ? "caution" : "", "card-repeats"),
    card("Unknown intents", unknown.intents.length + (unknown.next_cursor ? "+" : ""), unknown.intents.length ? "caution" : "", "card-unknown"),
    card("Tools switched off", off.length, off.length ? "alarm" : "", "card-off"),
    card("Critical mismatches", lastRun ? lastRun.critical : 0, lastRun && lastRun.critical ? "alarm" : "", "card-critical"),
    card("Alerts sent", alerts.alerts.length, alerts.alerts.length ? "caution" : "", "card-alerts"));

  const activityRows = activity.tools.map((tool) => el("tr", { "data-tool": tool.tool },
    td(el("a", { href: "/console/intents?tool=" + encodeURIComponent(tool.tool) + "&since=1h" }, tool.tool)),
    td(sparkline(tool.buckets)),
    td(String(tool.calls), "num"),
    td(String(tool.repeats), "num repeats"),
    td(statusBadges(tool.statuses))));
  const activityPanel = panel("Calls by tool, last hour",
    table(["Tool", "Every 5 minutes", ["Calls", "num"], ["Repeats", "num"], "Intents by status"], activityRows,
      "No side-effecting calls in the last hour."),
    el("div", { class: "legend", "aria-hidden": "true" }, el("span", {}, el("i", { class: "calls" }), "calls"), el("span", {}, el("i", { class: "repeats" }), "repeats (duplicate calls answered from the ledger)")),
    activity.stopped_early ? el("p", { class: "muted" }, "Counted from the hour's newest " + activity.intents_read + " intents.") : null);

  const offPanel = panel(el("span", {}, "Tools switched off ", el("a", { href: "/console/flags" }, "Kill switch")),
    table(["Tool", "Reason", "By", "Since"], off.map((flag) => el("tr", {},
      td(el("strong", {}, flag.tool)), td(flag.reason || "—", "wrap"), td(flag.actor || "—"), td(when(flag.updated_ms), "time"))), "Every tool is on."));

  const unknownPanel = panel(el("span", {}, "Unknown intents ", el("a", { href: "/console/unknown" }, "Resolve")),
    table(["Intent", "Tool", "Key", "Last call"], unknown.intents.map((intent) => el("tr", {},
      td(intentLink(intent.id)), td(intent.tool), td(intent.key, "key"), td(when(intent.last_seen_ms), "time"))), "No intent is waiting for an answer."));

  let runPanel;
  if (!lastRun) {
    runPanel = panel("Last reconciliation", el("p", { class: "empty" }, "No reconciliation has run yet. ", el("a", { href: "/console/reconciliation" }, "Run one")));
  } else {
    runPanel = panel(el("span", {}, "Last reconciliation ", el("a", { href: "/console/reconciliation/" + lastRun.id }, "Run #" + lastRun.id)),
      el("p", { class: "muted" }, "Finished ", when(lastRun.finished_ms), " · ", lastRun.mismatches + " mismatches, " + lastRun.critical + " critical"),
      table(["Subject", "Kind", "Tool", "Detail"], critical.slice(0, 10).map((mismatch) => el("tr", {},
        td(el("strong", {}, mismatch.subject || "—")), td(mismatch.kind), td(mismatch.tool), td(mismatch.detail, "wrap"))), "No critical mismatch."));
  }

  const alertsPanel = panel(el("span", {}, "Recent alerts ", el("a", { href: "/console/alerts" }, "All alerts")),
    table(["Time", "Tool", "What happened"], alerts.alerts.slice(0, 5).map((alert) => el("tr", {},
      td(when(alert.at_ms), "time"), td(alert.tool), td(alert.summary, "wrap"))), "No alert has fired."));

  return el("div", {}, cards, activityPanel, el("div", { class: "grid-2" }, offPanel, unknownPanel), el("div", { class: "grid-2" }, runPanel, alertsPanel));
}

// ---------------------------------------------------------------------------------------
// Intents
// ---------------------------------------------------------------------------------------

function select(id, label, choices, value) {
  const node = el("select", { id, name: id },
    choices.map(([choice, text]) => el("option", { value: choice, selected: choice === value }, text)));
  return el("div", {}, el("label", { for: id }, label), node);
}

async function intents() {
  const query = new URLSearchParams(location.search);
  const flags = await api("/flags");
  const tools = flags.flags.map((flag) => flag.tool);
  const form = el("form", { class: "filters", method: "get", action: "/console/intents", role: "search", "aria-label": "Filter intents" },
    select("tool", "Tool", [["", "Any tool"], ...tools.map((tool) => [tool, tool])], query.get("tool") || ""),
    select("status", "Status", [["", "Any status"], ...STATUSES.map((status) => [status, status.replace("_", " ")])], query.get("status") || ""),
    el("div", {}, el("label", { for: "tenant" }, "Tenant"), el("input", { id: "tenant", name: "tenant", type: "text", value: query.get("tenant") || "", autocomplete: "off" })),
    select("since", "First seen", SINCE_CHOICES, query.get("since") || ""),
    el("div", { class: "wide" }, el("label", { for: "q" }, "Key or subject"), el("input", { id: "q", name: "q", type: "search", value: query.get("q") || "", placeholder: "order id, customer, key…", autocomplete: "off" })),
    el("div", {}, el("button", { type: "submit", class: "primary" }, "Filter")));
  const results = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  setMain(pageHead("Intents", "Every side-effecting intent the ledger holds, newest first."), panel("Filter", form), el("section", { class: "panel", "aria-label": "Intents" }, results));
  const parameters = new URLSearchParams();
  for (const name of ["tool", "status", "tenant", "since", "q", "cursor"]) {
    const value = query.get(name);
    if (value) parameters.set(name, value);
  }
  parameters.set("limit", "50");
  try {
    const page = await api("/intents?" + parameters.toString());
    const rows = page.intents.map((intent) => el("tr", {},
      td(intentLink(intent.id)), td(when(intent.first_seen_ms), "time"), td(intent.tool), td(intent.tenant),
      td(intent.key, "key"), td(statusBadge(intent.status)), td(String(intent.call_count), "num"), td(intent.external_id || "—", "wrap")));
    const next = new URLSearchParams(query);
    if (page.next_cursor) next.set("cursor", page.next_cursor);
    fill(results, 
      table(["Intent", "First seen", "Tool", "Tenant", "Key", "Status", ["Calls", "num"], "Provider id"], rows, "No intent matches these filters."),
      page.scan_stopped ? el("p", { class: "muted" }, "The search read " + page.scanned + " intents and stopped; go on to search further.") : null,
      page.next_cursor ? el("p", {}, el("a", { href: "/console/intents?" + next.toString() }, "Older intents →")) : null);
  } catch (error) {
    fill(results, failure(error));
  }
}

async function intent(id) {
  let data;
  try {
    data = await api("/intents/" + encodeURIComponent(id));
  } catch (error) {
    setMain(pageHead("Intent #" + id), failure(error));
    return;
  }
  const record = data.intent;
  const facts = [
    ["Tool", record.tool], ["Tenant", record.tenant], ["Key", el("code", {}, record.key)],
    ["Status", statusBadge(record.status)],
    ["Calls", record.call_count + (record.call_count > 1 ? " (" + (record.call_count - 1) + " repeats answered from the ledger)" : "")],
    ["Attempts", String(record.attempt)],
    ["First seen", when(record.first_seen_ms)], ["Last call", when(record.last_seen_ms)], ["Updated", when(record.updated_ms)],
    ["Provider's id", record.external_id ? el("code", {}, record.external_id) : "—"],
    ["Provider key", el("code", {}, data.provider_key)],
    ["Resolved by", record.resolved_by || "—"],
    ["Lease", record.lease_owner ? record.lease_owner + " until " + TIME.format(new Date(record.lease_expires_ms)) : "—"],
  ];
  // The trace of the call, once tracing exists: shown only when the gateway records one.
  if (data.trace_id) facts.push(["Trace", el("code", { "data-slot": "trace-id" }, data.trace_id)]);
  const factList = el("dl", { class: "facts" }, facts.map(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
  const groups = collapseEvents(data.events);
  // An in-flight intent past its first attempt is a re-send of an unknown one; one whose
  // lease ran out is unknown in effect. A first attempt still running is an ordinary call.
  const resolvable = record.status === "unknown" || (record.status === "in_flight" && (record.attempt > 1 || !data.lease));
  const reopenable = record.status === "rejected";
  setMain(
    pageHead(el("span", {}, "Intent #" + record.id + " ", statusBadge(record.status)), record.tool + " · " + record.key,
      el("a", { href: "/console/intents?tool=" + encodeURIComponent(record.tool) }, "← Intents of " + record.tool)),
    el("div", { class: "grid-2" },
      panel("Intent", factList),
      panel("Arguments", fieldsTable(record.arguments, "No arguments."),
        record.result ? [el("h3", {}, "Stored result"), fieldsTable(record.result, "—")] : null)),
    resolvable ? panel("Resolve this unknown intent",
      unknownFacts(data),
      el("p", { class: "muted" }, "Check the provider's records first: done needs the provider's id of the effect; not executed means it certainly never happened. The resolution is recorded under your name."),
      resolveForm(record, () => intent(id), data.resolvable)) : null,
    reopenable ? panel("Reopen this rejected intent",
      el("p", { class: "muted" }, "Only if the refusal was the gateway's own error (a wrong API key, a wrong route) and the config is fixed: the intent becomes not executed, with a new provider key, and the next call of the tool executes it. The reopening is recorded under your name."),
      reopenForm(record, () => intent(id))) : null,
    el("section", { class: "panel", "aria-label": "Event log", id: "event-log" },
      el("h2", {}, el("span", {}, "Event log ", el("span", { class: "sub" }, "newest first; " + data.events.length + " events" +
        (groups.length < data.events.length ? " in " + groups.length + " rows (repeats in a row counted once)" : "") +
        (data.events_omitted ? ", " + data.events_omitted + " older ones not shown" : "")))),
      eventTable(groups)));
}

/** The event log's rows, newest first, from `collapseEvents`. */
function eventTable(groups) {
  const rows = groups.map((group) => {
    const event = group.event;
    const repeated = group.count > 1;
    return el("tr", repeated ? { class: "repeated", "data-repeats": group.count } : {},
      td(repeated ? [when(group.last_ms), el("div", { class: "note" }, "first ", when(group.first_ms))] : when(event.at_ms), "time"),
      td([event.kind, repeated ? [" ", badge("× " + group.count, "info")] : ""], "nowrap"),
      td(event.from_status || event.to_status ? [event.from_status ? statusBadge(event.from_status) : "", event.to_status ? [" → ", statusBadge(event.to_status)] : ""] : "—"),
      td(event.attempt === null ? "—" : String(group.attempts), "num"), td(event.actor || "—"), td(event.detail || "—", "wrap"));
  });
  return table(["Time", "Event", "Status", ["Attempt", "num"], "By", "Detail"], rows, "No events.");
}

/**
 * The event log newest first, with a run of events that say the same (same kind, statuses,
 * actor and detail, such as 27 repeat calls) as one row: its count, first and last time, and
 * the attempts it spans. `events` comes oldest first, as the admin API lists it.
 */
function collapseEvents(events) {
  const groups = [];
  const same = (a, b) => a.kind === b.kind && a.from_status === b.from_status && a.to_status === b.to_status &&
    a.actor === b.actor && sameDetail(a.detail, b.detail);
  for (let index = events.length - 1; index >= 0; index -= 1) {
    const event = events[index];
    const last = groups[groups.length - 1];
    if (last && same(last.event, event)) {
      last.count += 1;
      last.first_ms = event.at_ms;
      last.first_attempt = event.attempt;
    } else {
      groups.push({ event, count: 1, first_ms: event.at_ms, last_ms: event.at_ms, first_attempt: event.attempt, last_attempt: event.attempt });
    }
  }
  for (const group of groups) {
    group.attempts = group.first_attempt === group.last_attempt || group.first_attempt === null
      ? String(group.last_attempt) : group.first_attempt + "–" + group.last_attempt;
  }
  return groups;
}

/** Two details that differ only in their numbers ("repeat call 7", "repeat call 8") say the same. */
function sameDetail(a, b) {
  if (a === b) return true;
  if (!a || !b) return false;
  return a.replace(/\d+/g, "#") === b.replace(/\d+/g, "#");
}

/** The sweeper's state of an unsettled intent, in words, from the admin API's `sweeper` and `lease`. */
function sweeperState(data) {
  const record = data.intent;
  const lease = data.lease;
  if (lease && lease.holder === "sweeper") {
    const doing = record.status === "in_flight" ? "re-sending it (automatic attempt " + record.attempt + ")" : "looking it up at the provider";
    return [badge("sweeper holds the lease", "warn"), " ", "It is " + doing + " right now, until ", when(lease.expires_ms), "."];
  }
  if (lease) {
    return [badge(lease.holder === "client" ? "caller's code holds the lease" : "a call holds the lease", "warn"), " Until ", when(lease.expires_ms), "."];
  }
  const sweeper = data.sweeper;
  if (!sweeper) {
    return record.status === "in_flight"
      ? [badge("lease expired", "warn"), " The attempt's lease ran out; the next step looks it up."]
      : [el("span", { class: "muted" }, "This gateway's sweeper does not run this tool.")];
  }
  // A step past its time waits for the next sweep (every few seconds): due now.
  const next = sweeper.next_step_ms === null ? "" : "next step " + (sweeper.next_step_ms <= Date.now() ? "due now" : fromNow(sweeper.next_step_ms));
  if (sweeper.resends === "active") {
    const sent = record.attempt > 1 ? "Automatic attempt " + record.attempt + " so far" : "Attempt 1 (the call's own) so far, not re-sent yet";
    return [badge("sweeper is re-sending", "warn"), " ", sent + "; " + next + ": a lookup, then a re-send with the same provider key if the provider has nothing, until ", when(sweeper.resend_until_ms),
      ". It settles the intent itself once the provider answers."];
  }
  if (sweeper.resends === "stopped") {
    return [badge("sweeper stopped re-sending", "info"), " ", sweeper.why + ". It only looks it up" + (next ? ", " + next : "") + "."];
  }
  return [badge("sweeper looks it up only", "info"), " ", sweeper.why + (next ? "; " + next : "") + "."];
}

/** What a person needs to resolve an unsettled intent: amount, provider key, age, last error, sweeper. */
function unknownFacts(data) {
  const record = data.intent;
  const amount = data.amount && Object.keys(data.amount).length
    ? Object.entries(data.amount).map(([name, value], index) => [index ? ", " : "", Object.keys(data.amount).length > 1 ? name + " " : "", showValue(value)])
    : el("span", { class: "muted" }, "no amount in this tool's key (see the arguments)");
  const since = data.unknown_since_ms || record.first_seen_ms;
  const facts = [
    ["Amount", el("span", { "data-slot": "amount" }, amount)],
    ["Provider key", el("code", { "data-slot": "provider-key", class: "select-all" }, data.provider_key)],
    ["Unknown for", el("span", { "data-slot": "age" }, span(Date.now() - since), " (since ", when(since), "; first call ", when(record.first_seen_ms), ")")],
    ["Last error", el("span", { "data-slot": "last-error" }, data.last_error || "—")],
    ["Sweeper", el("span", { "data-slot": "sweeper" }, sweeperState(data))],
  ];
  return el("dl", { class: "facts unknown-facts" }, facts.map(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
}

async function unknownIntents() {
  const list = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  setMain(pageHead("Unknown intents", "Calls whose outcome the gateway could not learn: the provider may or may not have the effect. Search the provider's dashboard for the provider key, then resolve it; while the sweeper is working on one, wait for it."), list);
  const load = async () => {
    try {
      const page = await api("/unknown");
      if (!page.intents.length) {
        fill(list, el("div", { class: "callout calm" }, el("strong", {}, "Nothing to resolve"), "No intent is unknown."));
        return;
      }
      fill(list, ...page.intents.map((data) => {
        const record = data.intent;
        return el("section", { class: "panel unknown-card", "aria-label": "Intent " + record.id, "data-intent": record.id },
          el("h2", {}, el("span", {}, intentLink(record.id), " ", record.tool, " ", statusBadge(record.status)),
            el("span", { class: "sub" }, "last call ", when(record.last_seen_ms))),
          unknownFacts(data),
          el("details", { class: "more" }, el("summary", {}, "Key, tenant, calls"),
            el("dl", { class: "facts" },
              el("dt", {}, "Key"), el("dd", {}, el("code", {}, record.key)),
              el("dt", {}, "Tenant"), el("dd", {}, record.tenant),
              el("dt", {}, "Calls"), el("dd", {}, String(record.call_count)))),
          resolveForm(record, load, data.resolvable));
      }), page.more ? el("p", { class: "muted" }, "More intents are unknown than this page shows; the oldest are first.") : null);
    } catch (error) {
      fill(list, failure(error));
    }
  };
  await load();
}

// ---------------------------------------------------------------------------------------
// Kill switch
// ---------------------------------------------------------------------------------------

async function flagsPage() {
  const body = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  setMain(pageHead("Kill switch", "A switched-off tool executes nothing: every call is answered disabled, on every gateway sharing the ledger, within a second."), el("section", { class: "panel", "aria-label": "Tools" }, body));
  const load = async () => {
    try {
      const flags = (await api("/flags")).flags;
      const rows = flags.map((flag) => {
        const action = flag.enabled
          ? el("button", { type: "button", class: "danger-quiet", "data-tool": flag.tool, "data-action": "off", onclick: () => confirmDialog(
              "Switch off " + flag.tool + "?",
              "Every call of " + flag.tool + " will be answered disabled, and nothing will be sent to its upstream, until someone switches it back on.",
              "Switch off", true,
              async (reason) => { await api("/flags/" + encodeURIComponent(flag.tool), { method: "PUT", body: { enabled: false, reason } }); toast(flag.tool + " is switched off"); await load(); }) }, "Switch off…")
          : el("button", { type: "button", "data-tool": flag.tool, "data-action": "on", onclick: () => confirmDialog(
              "Switch on " + flag.tool + "?",
              "Calls of " + flag.tool + " will be executed again.",
              "Switch on", false,
              async (reason) => { await api("/flags/" + encodeURIComponent(flag.tool), { method: "PUT", body: { enabled: true, reason } }); toast(flag.tool + " is switched on"); await load(); }) }, "Switch on…");
        const changed = flag.updated_ms
          ? el("div", { class: "note" }, flag.enabled ? "Switched on" : "Switched off", " by ", flag.actor, " at ", when(flag.updated_ms), flag.reason ? [": ", flag.reason] : "")
          : null;
        return el("tr", { "data-tool": flag.tool, class: flag.enabled ? "" : "is-off" },
          td([el("strong", {}, flag.tool), changed], "wrap"),
          td(flag.enabled ? badge("on", "ok") : badge("off", "off")),
          td(flag.configured ? action : el("span", { class: "muted" }, "not configured"), "action"));
      });
      fill(body, table(["Tool", "State", ["Action", "action"]], rows, "No tools."));
    } catch (error) {
      fill(body, failure(error));
    }
  };
  await load();
}

// ---------------------------------------------------------------------------------------
// Reconciliation
// ---------------------------------------------------------------------------------------

async function reconciliation() {
  const runs = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  const message = el("p", { class: "message", role: "alert" });
  const button = el("button", { type: "submit", class: "primary", id: "run-reconciliation" }, "Run reconciliation");
  const form = el("form", { class: "filters narrow", "aria-label": "Run reconciliation" },
    select("window", "Compare the last", WINDOWS, "1h"), el("div", {}, button));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    message.textContent = "";
    button.disabled = true;
    button.textContent = "Reconciling…";
    try {
      await api("/reconcile", { method: "POST", body: { since: form.elements.window.value } });
      const latest = (await api("/reconciliations?limit=1")).reconciliations[0];
      location.assign("/console/reconciliation/" + latest.id);
    } catch (error) {
      message.textContent = error.message;
      button.disabled = false;
      button.textContent = "Run reconciliation";
    }
  });
  const affectedPanel = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  const affectedSection = el("section", { class: "panel", "aria-label": "Affected in the latest run", id: "affected-latest" },
    el("h2", {}, "Who was affected in the latest run with mismatches"), affectedPanel);
  setMain(pageHead("Reconciliation", "Compares the ledger with the provider's records: who was charged or refunded without an intent, or more than once."),
    panel("Run now", form, message), affectedSection, el("section", { class: "panel", "aria-label": "Runs" }, el("h2", {}, "Runs"), runs));
  try {
    const list = (await api("/reconciliations?limit=50")).reconciliations;
    // Who each of the newest runs with mismatches affected, read from their stored mismatches.
    const named = list.filter((run) => run.mismatches > 0).slice(0, AFFECTED_RUNS_SHOWN);
    const details = new Map(await Promise.all(named.map(async (run) =>
      [run.id, await api("/reconciliations/" + run.id + "?limit=1000").catch(() => null)])));
    const latest = named.length ? details.get(named[0].id) : null;
    fill(runs, table(["Run", "Affected", ["Mismatches", "num"], ["Critical", "num"], "Finished", "Window", "By", ["Intents", "num"], ["Records", "num"]],
      list.map((run) => {
        const detail = details.get(run.id);
        const affected = detail ? subjects(detail.mismatches) : [];
        const shown = affected.slice(0, 5).map((entry, index) => [index ? ", " : "", el("strong", { "data-subject": entry.subject }, entry.subject)]);
        return el("tr", { "data-run": run.id },
          td(el("a", { href: "/console/reconciliation/" + run.id }, "Run #" + run.id), "nowrap"),
          td(run.mismatches === 0 ? el("span", { class: "muted" }, "no one")
            : detail ? [shown, affected.length > 5 ? " and " + (affected.length - 5) + " more" : "", affected.length ? "" : el("span", { class: "muted" }, "no subject named")]
            : el("a", { href: "/console/reconciliation/" + run.id }, "see the run"), "wrap affected"),
          td(String(run.mismatches), "num"), td(run.critical ? badge(String(run.critical), "critical") : "0", "num"),
          td(when(run.finished_ms), "time"),
          td([TIME.format(new Date(run.since_ms)), " – ", CLOCK.format(new Date(run.until_ms))]), td(run.actor),
          td(String(run.intents_checked), "num"), td(String(run.records_checked), "num"));
      }), "No run yet."));
    if (latest) fill(affectedPanel, affectedTable(latest));
    else affectedSection.remove();
  } catch (error) {
    affectedSection.remove();
    fill(runs, failure(error));
  }
}

/** Runs whose affected subjects the runs page names (each is one more request). */
const AFFECTED_RUNS_SHOWN = 10;

/** One row per mismatch that names someone: subject, intent, kind, amount, tool. */
function affectedTable(data) {
  const run = data.reconciliation;
  const rows = data.mismatches
    .filter((mismatch) => mismatch.subject || mismatch.intent_id)
    .sort((a, b) => SEVERITY_ORDER[a.severity] - SEVERITY_ORDER[b.severity] || (a.subject || "").localeCompare(b.subject || ""))
    .map((mismatch) => el("tr", { "data-subject": mismatch.subject || "" },
      td(el("strong", {}, mismatch.subject || "—")), td(mismatch.intent_id ? intentLink(mismatch.intent_id) : "—"),
      td([badge(mismatch.severity, mismatch.severity), " ", mismatch.kind.replace(/_/g, " ")], "nowrap"),
      td(mismatch.amount ? Object.values(mismatch.amount).map((value, index) => [index ? " " : "", showValue(value)]) : "—", "num"),
      td(mismatch.tool), td(mismatch.external_ids.join(" ") || "—", "wrap")));
  return [el("p", { class: "muted" }, "From ", el("a", { href: "/console/reconciliation/" + run.id }, "run #" + run.id), ", finished ", when(run.finished_ms), "."),
    table(["Subject", "Intent", "Mismatch", ["Amount", "num"], "Tool", "Provider ids"], rows, "No mismatch of this run names a subject.")];
}

const SEVERITY_ORDER = { critical: 0, warning: 1, info: 2 };

/** The run's mismatches grouped by who they affected, most provider records first. */
function subjects(mismatches) {
  const bySubject = new Map();
  for (const mismatch of mismatches) {
    if (!mismatch.subject) continue;
    const entry = bySubject.get(mismatch.subject) || { subject: mismatch.subject, records: new Set(), kinds: new Set(), severity: "info", tools: new Set(), intents: new Set(), mismatches: 0 };
    mismatch.external_ids.forEach((id) => entry.records.add(id));
    entry.kinds.add(mismatch.kind);
    entry.tools.add(mismatch.tool);
    if (mismatch.intent_id) entry.intents.add(mismatch.intent_id);
    if (SEVERITY_ORDER[mismatch.severity] < SEVERITY_ORDER[entry.severity]) entry.severity = mismatch.severity;
    entry.mismatches += 1;
    bySubject.set(mismatch.subject, entry);
  }
  return [...bySubject.values()].sort((a, b) => b.records.size - a.records.size || SEVERITY_ORDER[a.severity] - SEVERITY_ORDER[b.severity] || a.subject.localeCompare(b.subject));
}

/** A download of the run's mismatches (`what`: "mismatches") or affected subjects ("subjects"). */
function csvLink(runId, what, text, kind, severity) {
  const parameters = new URLSearchParams();
  if (kind) parameters.set("kind", kind);
  if (severity) parameters.set("severity", severity);
  const query = parameters.toString();
  return el("a", { class: "button", href: API + "/reconciliations/" + runId + "/" + what + ".csv" + (query ? "?" + query : ""), download: "" }, text);
}

async function reconciliationRun(id) {
  let data;
  try {
    data = await api("/reconciliations/" + encodeURIComponent(id) + "?limit=10000");
  } catch (error) {
    setMain(pageHead("Reconciliation run #" + id), failure(error));
    return;
  }
  const run = data.reconciliation;
  const groups = new Map();
  for (const mismatch of data.mismatches) {
    const key = mismatch.kind + "\u0000" + mismatch.severity;
    const group = groups.get(key) || { kind: mismatch.kind, severity: mismatch.severity, count: 0, tools: new Set() };
    group.count += 1;
    group.tools.add(mismatch.tool);
    groups.set(key, group);
  }
  const groupRows = [...groups.values()]
    .sort((a, b) => SEVERITY_ORDER[a.severity] - SEVERITY_ORDER[b.severity] || b.count - a.count)
    .map((group) => el("tr", {}, td(badge(group.severity, group.severity)), td(group.kind), td([...group.tools].join(", ")), td(String(group.count), "num"),
      td(csvLink(run.id, "mismatches", "CSV", group.kind, group.severity))));
  const affected = subjects(data.mismatches);
  const twice = affected.filter((entry) => entry.records.size > 1);
  const subjectRows = affected.map((entry) => el("tr", { "data-subject": entry.subject },
    td(el("strong", {}, entry.subject)), td(String(entry.records.size), "num"), td(badge(entry.severity, entry.severity)),
    td([...entry.kinds].join(", ")), td([...entry.tools].join(", ")),
    td(entry.intents.size ? [...entry.intents].map((intentId) => [intentLink(intentId), " "]) : "—"), td([...entry.records].join(" "), "wrap")));
  const facts = el("dl", { class: "facts" },
    el("dt", {}, "Window"), el("dd", {}, when(run.since_ms), " – ", when(run.until_ms)),
    el("dt", {}, "Finished"), el("dd", {}, when(run.finished_ms), " (", ((run.finished_ms - run.started_ms) / 1000).toFixed(1), " s)"),
    el("dt", {}, "Run by"), el("dd", {}, run.actor),
    el("dt", {}, "Checked"), el("dd", {}, run.intents_checked + " intents, " + run.records_checked + " provider records"),
    el("dt", {}, "Mismatches"), el("dd", {}, run.mismatches + " (" + run.critical + " critical)" + (data.mismatches_not_shown ? "; " + data.mismatches_not_shown + " not shown" : "")));
  const mismatchRows = data.mismatches.map((mismatch) => el("tr", {},
    td(badge(mismatch.severity, mismatch.severity)), td(mismatch.kind), td(mismatch.subject || "—"), td(mismatch.tool),
    td(mismatch.intent_id ? intentLink(mismatch.intent_id) : "—"),
    td(mismatch.amount ? Object.values(mismatch.amount).map((value, index) => [index ? " " : "", showValue(value)]) : "—", "num"),
    td(mismatch.external_ids.join(" ") || "—", "wrap"), td(mismatch.detail, "wrap")));
  setMain(
    pageHead("Reconciliation run #" + run.id, null, el("a", { href: "/console/reconciliation" }, "← All runs")),
    twice.length
      ? el("div", { class: "callout", id: "affected-twice", role: "status" },
          el("strong", {}, twice.length + (twice.length === 1 ? " subject has" : " subjects have") + " more than one provider record the ledger does not account for"),
          el("ul", { class: "subject-list" }, twice.map((entry) => el("li", { "data-subject": entry.subject }, entry.subject + ": " + entry.records.size + " records (" + [...entry.kinds].join(", ") + ")"))))
      : run.mismatches === 0 ? el("div", { class: "callout calm" }, el("strong", {}, "The ledger and the provider agree"), "No mismatch in this window.") : null,
    el("div", { class: "grid-2" },
      panel("Run", facts),
      panel(el("span", {}, "By kind and severity ", csvLink(run.id, "mismatches", "All mismatches as CSV")),
        table(["Severity", "Kind", "Tools", ["Count", "num"], "Export"], groupRows, "No mismatches."))),
    panel(el("span", {}, "Affected subjects ", el("span", { class: "sub" }, "customers and orders, most provider records first"), " ", csvLink(run.id, "subjects", "Download affected subjects (CSV)")),
      table(["Subject", ["Records", "num"], "Severity", "Kinds", "Tools", "Intents", "Provider ids"], subjectRows, "No subject is named by a mismatch.")),
    panel("Mismatches", table(["Severity", "Kind", "Subject", "Tool", "Intent", ["Amount", "num"], "Provider ids", "Detail"], mismatchRows, "No mismatches.")));
}

// ---------------------------------------------------------------------------------------
// Alerts
// ---------------------------------------------------------------------------------------

async function alertsPage() {
  const body = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  setMain(pageHead("Alerts", "Duplicate-call alerts and reconciliation notices this gateway sent its tools' owners, newest first."), el("section", { class: "panel", "aria-label": "Alerts" }, body));
  try {
    const alerts = (await api("/alerts")).alerts;
    fill(body, table(["Time", "Severity", "Kind", "Tool", "Intent", "What happened"],
      alerts.map((alert) => {
        const details = alert.details || {};
        return el("tr", {},
          td(when(alert.at_ms), "time"), td(badge(alert.severity, alert.severity)), td(alert.kind.replace("_", " "), "nowrap"),
          td(el("a", { href: "/console/intents?tool=" + encodeURIComponent(alert.tool) }, alert.tool)),
          td(details.intent_id ? intentLink(details.intent_id) : "—"), td(alert.summary, "wrap"));
      }), "No alert has fired since this gateway started."));
  } catch (error) {
    fill(body, failure(error));
  }
}

// ---------------------------------------------------------------------------------------
// Approvals
// ---------------------------------------------------------------------------------------

const APPROVAL_STATES = [["open", "Waiting for a decision"], ["approved", "Approved, not started yet"], ["closed", "Decided or expired"]];

async function approvalsPage() {
  const query = new URLSearchParams(location.search);
  const state = APPROVAL_STATES.some(([name]) => name === query.get("state")) ? query.get("state") : "open";
  const tabs = el("nav", { class: "tabs", "aria-label": "Which requests" }, APPROVAL_STATES.map(([name, text]) =>
    el("a", { href: "/console/approvals" + (name === "open" ? "" : "?state=" + name), "aria-current": name === state ? "page" : null, "data-state": name }, text)));
  const who = APPROVER_TENANT
    ? el("p", { class: "muted", id: "approver" }, "You decide for tenant ", el("strong", {}, APPROVER_TENANT), ", never on a request you made yourself. Your decisions are recorded under your credential's name.")
    : el("div", { class: "callout", id: "approver", role: "status" }, el("strong", {}, "You can read these requests but not decide on them"),
      "Deciding needs a credential with the approve scope, which is separate from admin (the admin token names nobody and can't decide). Sign out and sign in with one to approve or deny.");
  const body = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  setMain(pageHead("Approvals", "Calls held for a person's decision: nothing runs until an approver approves that one intent."), tabs, who, body);
  try {
    const page = await api("/approvals?state=" + state + "&limit=50");
    if (!page.approvals.length) {
      fill(body, el("p", { class: "empty" }, state === "open" ? "No call is waiting for a decision." : "Nothing to show."));
      return;
    }
    fill(body, page.approvals.map((held) => approvalCard(held)),
      page.next_cursor ? el("p", { class: "muted" }, "Showing the newest 50.") : null);
  } catch (error) {
    fill(body, failure(error));
  }
}

/** One held intent: what it would do, who asked, its deadline and history, and the decision. */
function approvalCard(held) {
  const facts = [
    ["Tool", el("strong", {}, held.tool)], ["Tenant", held.tenant], ["Key", el("code", {}, held.key)],
    ["Asked by", el("span", { "data-slot": "requested-by" }, held.requested_by)], ["Asked", when(held.requested_ms)],
    ["Deadline", held.decision ? when(held.deadline_ms) : [when(held.deadline_ms), " (", held.overdue ? "passed" : fromNow(held.deadline_ms), ")"]],
    ["Held by", held.held_by],
    ["Intent", [statusBadge(held.status), " ", el("a", { href: held.console_url }, "Intent #" + held.intent_id)]],
  ];
  if (held.application_intent_id) facts.push(["Application's intent id", el("code", {}, held.application_intent_id)]);
  if (held.decision) {
    facts.push(["Decision", [badge(held.decision, held.decision === "approved" ? "ok" : held.decision === "denied" ? "bad" : "warn"),
      held.decided_by ? " by " + held.decided_by : "", held.decided_ms ? [" at ", when(held.decided_ms)] : "", held.reason ? ": " + held.reason : ""]]);
  }
  const decision = el("div", { class: "decision", "data-slot": "decision" });
  if (!held.decision) fill(decision, held.decidable.now ? decisionForm(held, decision) : el("p", { class: "refusal", role: "status", "data-slot": "not-decidable" }, el("strong", {}, "You can't decide on this one. "), held.decidable.reason.replace(/\.?$/, ".")));
  const history = collapseEvents(held.events);
  return el("article", { class: "panel approval", "data-intent": held.intent_id, "aria-label": "Intent " + held.intent_id + " held for approval" },
    el("h2", {}, el("span", {}, held.tool + " · intent #" + held.intent_id + " "), held.decision ? badge(held.decision) : badge("awaiting approval", "warn")),
    el("div", { class: "grid-2" },
      el("div", {}, el("h3", {}, "Request"), el("dl", { class: "facts" }, facts.map(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]))),
      el("div", { "data-slot": "arguments" }, el("h3", {}, "Exact arguments"), fieldsTable(held.arguments, "No arguments."))),
    decision,
    el("details", { class: "history" }, el("summary", {}, "History: " + held.events.length + " events" + (held.events_omitted ? " (" + held.events_omitted + " older not shown)" : "")),
      eventTable(history)));
}

/** Approve and Deny for a held intent this session may decide on; the outcome replaces them. */
function decisionForm(held, slot) {
  const n = ++formCount;
  const reason = el("textarea", { id: "decision-reason-" + n, rows: 2, maxlength: 1024 });
  const message = el("p", { class: "message", role: "alert", "data-slot": "refusal" });
  const approve = el("button", { type: "button", class: "primary", "data-action": "approve" }, "Approve intent #" + held.intent_id);
  const deny = el("button", { type: "button", class: "danger", "data-action": "deny" }, "Deny…");
  const decide = async (verb) => {
    message.textContent = "";
    const text = reason.value.trim();
    if (verb === "deny" && !text) {
      message.textContent = "Give a reason to deny: the model that asked reads it, and so does the person it works for.";
      reason.focus();
      return;
    }
    approve.disabled = deny.disabled = true;
    try {
      const answer = await api("/approvals/" + encodeURIComponent(held.intent_id) + "/" + verb, { method: "POST", body: text ? { reason: text } : {} });
      fill(slot, decisionOutcome(answer));
      // The card's badge says what it is now, not "awaiting approval".
      const heading = slot.closest("article").querySelector("h2 > .badge");
      if (heading) heading.replaceWith(badge(answer.decision, answer.decision === "approved" ? "ok" : "bad"));
      toast("Intent #" + held.intent_id + " " + answer.decision);
    } catch (error) {
      message.textContent = error.message;
      approve.disabled = deny.disabled = false;
    }
  };
  approve.addEventListener("click", () => decide("approve"));
  deny.addEventListener("click", () => decide("deny"));
  return el("form", { class: "resolve", novalidate: true, "aria-label": "Decide on intent " + held.intent_id, onsubmit: (event) => event.preventDefault() },
    el("div", { class: "field" }, el("label", { for: reason.id }, "Reason ", el("span", { class: "muted" }, "(required to deny: the model reads it; optional to approve)")), reason),
    message,
    el("div", { class: "actions" }, deny, approve));
}

/** What a decision did, from the admin API's answer. */
function decisionOutcome(answer) {
  const intent = answer.intent;
  let text;
  if (answer.decision === "denied") text = ["Denied: the intent is ", statusBadge(intent.status), ", and every call of it is answered with your reason."];
  else if (answer.outcome) text = ["Approved, and the gateway executed it: ", statusBadge(answer.outcome.status),
    intent.external_id ? [" (provider's id ", el("code", {}, intent.external_id), ")"] : "", ". ", answer.outcome.message];
  else text = ["Approved: it runs at its next call, or when the gateway's sweeper starts it (its arguments are kept only as hashes, its tool runs in the caller's code, or it is switched off)."];
  return el("div", { class: "callout calm", role: "status", "data-slot": "outcome", "data-decision": answer.decision }, el("strong", {}, "Decided"), text);
}

// ---------------------------------------------------------------------------------------
// Start
// ---------------------------------------------------------------------------------------

const PAGES = [
  [/^\/console\/?$/, "overview", () => overview(), "Overview"],
  [/^\/console\/intents\/?$/, "intents", () => intents(), "Intents"],
  [/^\/console\/intents\/(\d+)$/, "intents", (id) => intent(id), "Intent"],
  [/^\/console\/unknown\/?$/, "unknown", () => unknownIntents(), "Unknown intents"],
  [/^\/console\/flags\/?$/, "flags", () => flagsPage(), "Kill switch"],
  [/^\/console\/reconciliation\/?$/, "reconciliation", () => reconciliation(), "Reconciliation"],
  [/^\/console\/reconciliation\/(\d+)$/, "reconciliation", (id) => reconciliationRun(id), "Reconciliation run"],
  [/^\/console\/alerts\/?$/, "alerts", () => alertsPage(), "Alerts"],
  [/^\/console\/approvals\/?$/, "approvals", () => approvalsPage(), "Approvals"],
];

document.addEventListener("DOMContentLoaded", () => {
  sessionStorage.removeItem("intentgate-console-signed-in");
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  document.getElementById("time-zone").textContent = "Times are shown in your time zone (" + zone + ").";
  document.getElementById("sign-out").addEventListener("click", async () => {
    await fetch("/console/session", { method: "DELETE", credentials: "same-origin", headers: { "X-Intentgate-Csrf": CSRF } });
    location.assign("/console/");
  });
  const path = location.pathname;
  for (const [pattern, nav, draw, title] of PAGES) {
    const match = path.match(pattern);
    if (!match) continue;
    document.title = title + " · intentgate console";
    const link = document.querySelector('nav a[data-page="' + nav + '"]');
    if (link) link.setAttribute("aria-current", "page");
    draw(match[1]).catch((error) => setMain(pageHead(title), failure(error)));
    return;
  }
  setMain(pageHead("No such page"), el("p", {}, "This console has no page here. ", el("a", { href: "/console/" }, "Go to the overview")));
});
