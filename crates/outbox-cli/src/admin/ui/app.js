// The outbox relay dashboard: a thin client of /api/v1 (docs/admin-api.md). Every value from
// the server is written with textContent, never as HTML. The token stays in this tab's
// sessionStorage; a `#token=...` fragment (never sent to a server) signs in and is removed.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { store: null, after: null, detail: null };

function token() { return sessionStorage.getItem("outbox-token") || ""; }

async function api(method, path, body) {
  const headers = { "Authorization": "Bearer " + token() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
  if (r.status === 401) { showLogin(); throw new Error("sign in with a read or admin token"); }
  if (!r.ok) throw new Error((data && data.detail) || (r.status + " " + r.statusText));
  return data;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? wrap(c) : el("td", c));
  return tr;
}

function wrap(node) { const td = document.createElement("td"); td.appendChild(node); return td; }

function button(label, onClick) { const b = el("button", label); b.type = "button"; b.addEventListener("click", onClick); return b; }

function fill(tableId, rows) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows);
  if (rows.length === 0) {
    const cols = $(tableId).querySelectorAll("th").length;
    const td = el("td", "none", "muted"); td.colSpan = cols;
    const tr = document.createElement("tr"); tr.appendChild(td); body.appendChild(tr);
  }
}

function showError(e) { const p = $("error"); p.hidden = !e; p.textContent = e ? String(e.message || e) : ""; }

function showLogin() { $("login").hidden = false; $("logout").hidden = true; }

function when(t) { return t ? new Date(t).toLocaleString() : ""; }

function storePath(rest) { return "/api/v1/stores/" + encodeURIComponent(state.store) + rest; }

async function loadStats() {
  const stats = await api("GET", "/api/v1/stats");
  const select = $("store");
  const names = stats.stores.map((s) => s.store);
  if (!state.store || !names.includes(state.store)) state.store = names[0] || null;
  if (select.options.length !== names.length) {
    select.replaceChildren(...names.map((n) => { const o = el("option", n); o.value = n; return o; }));
  }
  select.value = state.store;
  const s = stats.stores.find((x) => x.store === state.store);
  if (!s) return;
  const cards = s.stats.by_status.map((c) => {
    const d = el("div", null, "card " + c.status); d.appendChild(el("b", c.count)); d.appendChild(el("span", c.status, "muted")); return d;
  });
  const age = s.stats.oldest_pending_age_secs;
  const d = el("div", null, "card"); d.appendChild(el("b", age == null ? "-" : age.toFixed(1) + " s")); d.appendChild(el("span", "oldest waiting", "muted"));
  cards.push(d);
  $("counts").replaceChildren(...cards);
}

function line(points, value, max, color) {
  if (points.length < 2 || max <= 0) return null;
  const t0 = Date.parse(points[0].at), t1 = Date.parse(points[points.length - 1].at) || t0 + 1;
  const coords = points.map((p) => {
    const x = ((Date.parse(p.at) - t0) / Math.max(1, t1 - t0)) * 600;
    const y = 115 - (Math.max(0, value(p) || 0) / max) * 105;
    return x.toFixed(1) + "," + y.toFixed(1);
  });
  const pl = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  pl.setAttribute("points", coords.join(" "));
  pl.setAttribute("fill", "none");
  pl.setAttribute("stroke", color);
  pl.setAttribute("stroke-width", "2");
  pl.setAttribute("vector-effect", "non-scaling-stroke");
  return pl;
}

async function loadHistory() {
  const h = await api("GET", storePath("/history"));
  const pts = h.points;
  const maxPending = Math.max(1, ...pts.map((p) => p.pending));
  const maxRate = Math.max(1, ...pts.map((p) => p.delivered_per_sec || 0));
  const lines = [line(pts, (p) => p.pending, maxPending, "#b54708"), line(pts, (p) => p.delivered_per_sec, maxRate, "#2f5bd3")];
  $("chart").replaceChildren(...lines.filter(Boolean));
}

async function bulk(action, selection, what) {
  const dry = await api("POST", storePath("/bulk/" + action), Object.assign({ dry_run: true }, selection));
  if (dry.count === 0) { alert("Nothing to " + action + " in " + what + "."); return; }
  if (!confirm(action + " " + dry.count + " message(s) of " + what + "?")) return;
  const done = await api("POST", storePath("/bulk/" + action), selection);
  alert(action + ": " + done.count + " message(s).");
  await refresh();
}

async function loadFailures() {
  const f = await api("GET", storePath("/failures?limit=50"));
  $("failed-total").textContent = "(" + f.scanned + " failed read" + (f.truncated ? ", more not read" : "") + ")";
  fill("failures", f.groups.map((g) => {
    const acts = el("span");
    acts.appendChild(button("Retry all", () => bulk("retry", { group: g.id }, "this group").catch(showError)));
    acts.appendChild(button("Cancel all", () => bulk("cancel", { group: g.id }, "this group").catch(showError)));
    const cause = el("td", g.cause, "cause"); cause.title = g.example_error || "";
    const tr = row([g.count, g.topic, g.destination || "", "", when(g.last_failed_at), acts]);
    tr.replaceChild(cause, tr.children[3]);
    return tr;
  }));
}

async function loadDestinations() {
  const d = await api("GET", storePath("/destinations"));
  fill("destinations", d.destinations.map((x) => {
    const p = x.pause;
    const act = x.paused
      ? button("Resume", () => act2("resume", x.name))
      : button("Pause…", () => { const why = prompt("Pause " + x.name + " for every relay. Reason?"); if (why !== null) act2("pause", x.name, why); });
    return row([x.name, x.paused ? "paused" : "running", p ? p.paused_by + " " + when(p.paused_at) : "", p ? p.reason || "" : "", act]);
  }));
}

async function act2(action, name, reason) {
  try {
    await api("POST", storePath("/destinations/" + encodeURIComponent(name) + "/" + action), reason ? { reason } : undefined);
    await loadDestinations();
  } catch (e) { showError(e); }
}

function filter() {
  const f = {};
  const status = $("f-status").value; if (status) f.status = status;
  for (const [id, key] of [["f-topic", "topic"], ["f-key", "key"], ["f-error", "error"]]) {
    const v = $(id).value.trim(); if (v) f[key] = v;
  }
  const biz = $("f-biz").value.trim();
  if (biz.includes(":")) { const i = biz.indexOf(":"); f.biz_type = biz.slice(0, i); f.biz_key = biz.slice(i + 1); }
  return f;
}

async function search(next) {
  const f = filter();
  const q = new URLSearchParams(f);
  q.set("limit", "50");
  if (next && state.after) q.set("after_id", String(state.after));
  const page = await api("GET", storePath("/messages?" + q.toString()));
  const rows = page.messages.map((m) => {
    const a = el("a", m.id, "id"); a.addEventListener("click", () => show(m.id).catch(showError));
    const tr = row([a, m.topic, m.key || "", el("span", m.status, "st-" + m.status), m.attempts, m.last_error || "", when(m.updated_at)]);
    tr.children[5].className = "err";
    return tr;
  });
  const body = $("messages").querySelector("tbody");
  if (next) body.append(...rows); else fill("messages", rows);
  state.after = page.next_after_id;
  $("more").hidden = page.next_after_id == null;
}

async function show(id) {
  const d = await api("GET", storePath("/messages/" + id));
  state.detail = id;
  $("detail").hidden = false;
  $("detail-id").textContent = String(id) + " (" + d.message.status + ")";
  $("detail-body").textContent = JSON.stringify(d, null, 2);
}

async function single(action) {
  if (state.detail == null) return;
  try {
    await api("POST", storePath("/messages/" + state.detail + "/" + action));
    await show(state.detail);
    await refresh();
  } catch (e) { showError(e); }
}

async function loadRelays() {
  const r = await api("GET", "/api/v1/relays");
  const where = (x) => (x.host || "?") + " pid " + x.pid + (x.local ? " (this process)" : "");
  fill("relays", r.relays.map((x) => row([x.owner, x.store, where(x), el("span", x.state, "st-" + x.state),
    when(x.last_claim_at), x.claimed, x.delivered, x.failed])));
}

async function refresh() {
  try {
    await loadStats();
    if (state.store) await Promise.all([loadHistory(), loadFailures(), loadDestinations(), loadRelays()]);
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    showError(null);
    document.body.dataset.loaded = "true";
  } catch (e) { showError(e); }
}

function init() {
  const m = /(?:^|&)token=([^&]+)/.exec(location.hash.slice(1));
  if (m) { sessionStorage.setItem("outbox-token", decodeURIComponent(m[1])); history.replaceState(null, "", location.pathname); }
  $("login").addEventListener("submit", (e) => {
    e.preventDefault(); sessionStorage.setItem("outbox-token", $("token").value); $("token").value = "";
    $("login").hidden = true; $("logout").hidden = false; refresh();
  });
  $("logout").addEventListener("click", () => { sessionStorage.removeItem("outbox-token"); showLogin(); });
  $("logout").hidden = !token();
  $("store").addEventListener("change", () => { state.store = $("store").value; refresh(); search(false).catch(showError); });
  $("search").addEventListener("submit", (e) => { e.preventDefault(); search(false).catch(showError); });
  $("more").addEventListener("click", () => search(true).catch(showError));
  $("bulk-retry").addEventListener("click", () => bulk("retry", { filter: filter() }, "this search").catch(showError));
  $("bulk-cancel").addEventListener("click", () => bulk("cancel", { filter: filter() }, "this search").catch(showError));
  $("d-retry").addEventListener("click", () => single("retry"));
  $("d-cancel").addEventListener("click", () => single("cancel"));
  refresh().then(() => search(false)).catch(showError);
  setInterval(refresh, 5000);
}

document.addEventListener("DOMContentLoaded", init);
