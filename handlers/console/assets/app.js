// The dwr console: a small single-page app over the console's JSON API.
// Every text from the service goes into the page as text (textContent),
// never as markup.
"use strict";

const main = document.getElementById("main");
let me = null; // the signed-in identity
let live = null; // the EventSource of the goal page shown

// h makes an element: h("td", {class: "x"}, "text", child...).
function h(tag, attrs, ...children) {
  const svg = ["svg", "g", "rect", "path", "text", "title", "defs", "marker"].includes(tag);
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function show(...nodes) {
  main.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
}

class APIError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || "HTTP " + status);
    this.status = status;
    this.code = body && body.error && body.error.code;
  }
}

async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") {
    opts.headers["X-Dwr-Console"] = "1";
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body || {});
  }
  const r = await fetch(path, opts);
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) {
    if (r.status === 401 && !path.startsWith("/api/signin") && path !== "/api/me") { // route() asks /api/me before anyone signed in
      me = null;
      renderSignIn("Your session ended: sign in again.");
    }
    throw new APIError(r.status, data);
  }
  return data;
}

function errorBox(err) {
  return h("p", { class: "error", role: "alert", "data-error-code": err.code || "" }, err.message);
}

function ago(t) {
  if (!t) return "-";
  const d = new Date(t);
  const s = Math.round((Date.now() - d.getTime()) / 1000);
  const rel = s < 60 ? s + "s" : s < 3600 ? Math.round(s / 60) + "m" : s < 86400 ? Math.round(s / 3600) + "h" : Math.round(s / 86400) + "d";
  return h("time", { datetime: d.toISOString(), title: d.toISOString() }, s >= 0 ? rel + " ago" : "in " + rel.replace("-", ""));
}

function dur(a, b) {
  if (!a || !b) return "-";
  const ms = new Date(b) - new Date(a);
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
}

function pre(v) {
  if (v === undefined || v === null) return "-";
  return h("pre", {}, typeof v === "string" ? v : JSON.stringify(v, null, 2));
}

function state(s) {
  return h("span", { class: "state s-" + s }, s);
}

// ---- sign-in ----

function renderSignIn(msg) {
  document.getElementById("nav").hidden = true;
  document.getElementById("signout").hidden = true;
  document.getElementById("who").textContent = "";
  const out = h("div", { id: "signin-result" });
  const creds = h("input", { type: "file", id: "creds", required: true });
  const ws = h("input", { type: "text", id: "workspace", value: "default", required: true });
  const form = h("form", { id: "signin-form", class: "card" },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "Pick your credential file: what dwr users add --out wrote, or dwr-data/admin.creds. " +
      "Its key stays in this browser: the page signs the NATS server's challenge with it, and the console keeps the connection so made, " +
      "as that identity, in a session held in memory."),
    h("label", {}, "Credential file ", creds),
    h("label", {}, "Workspace ", ws),
    h("button", { type: "submit", id: "signin" }, "Sign in"),
    out);
  if (msg) out.append(h("p", { class: "muted" }, msg));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    out.replaceChildren();
    const f = creds.files[0];
    if (!f) return;
    if (f.size > 60000) {
      out.append(errorBox(new Error("this file is too large to be a credential")));
      return;
    }
    try {
      if (!window.crypto || !crypto.subtle) throw new Error("signing in needs a secure context: open the console at http://127.0.0.1, localhost, or over HTTPS");
      const cred = await window.dwrCredential.read(await f.text());
      const ch = await api("POST", "/api/signin", { workspace: ws.value.trim(), public_key: cred.publicKey, about: cred.about });
      me = await api("POST", "/api/signin/" + encodeURIComponent(ch.challenge), { signature: await window.dwrCredential.signNonce(cred.key, ch.nonce) });
      signedIn();
      route();
    } catch (err) {
      out.append(errorBox(err));
    }
  });
  show(form);
}

function signedIn() {
  document.getElementById("nav").hidden = false;
  document.getElementById("signout").hidden = false;
  document.getElementById("who").textContent = (me.about || me.public_key.slice(0, 12) + "…") + " · workspace " + me.workspace;
}

document.getElementById("signout").addEventListener("click", async () => {
  try { await api("POST", "/api/signout"); } catch (e) { /* signed out anyway */ }
  me = null;
  // Back to the goals' address without a hashchange: its route() would
  // render the sign-in form again, under the user's (and a test's) hands.
  history.replaceState(null, "", "#/goals");
  renderSignIn("Signed out.");
});

// ---- goals ----

// progress is how many tasks of the goal's current plan are accepted, of
// how many (the tasks a revision removed count no more).
function progress(g) {
  const nodes = g.nodes || [];
  return { done: nodes.filter((n) => n.state === "accepted").length, total: nodes.length };
}

// listQuery is the query of a listing by labels with these filters (the
// page's address and its API take the same: #/goals and GET /api/goals,
// #/tasks and GET /api/tasks): each of params that has a value
// ({schedule: S}, {state: S}), then a label=NAME=VALUE for each label
// filter, written as typed ("" for none).
function listQuery(params, labels) {
  const parts = Object.entries(params).filter(([, v]) => v).map(([k, v]) => k + "=" + encodeURIComponent(v));
  for (const l of labels) {
    const i = l.indexOf("=");
    parts.push("label=" + (i < 0 ? encodeURIComponent(l) : encodeURIComponent(l.slice(0, i)) + "=" + encodeURIComponent(l.slice(i + 1))));
  }
  return parts.length ? "?" + parts.join("&") : "";
}

// sortedLabels is a goal's or a task's labels as [name, value] pairs, by name.
function sortedLabels(labels) {
  return Object.entries(labels || {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

// chipText is how a label reads, name=value, a long value cut short (the
// chip's title has it whole).
function chipText(name, value) {
  return name + "=" + (value.length > 40 ? value.slice(0, 39) + "…" : value);
}

// labelChips are the labels of a goal or a task listed (what: "goals",
// "tasks"), a chip each linking to the listing filtered by it too;
// filters are the label filters the listing has (their chips are marked),
// hashWith the listing's address with other label filters.
function labelChips(labels, filters, hashWith, what) {
  return sortedLabels(labels).map(([k, v]) => {
    const l = k + "=" + v;
    const on = filters.includes(l);
    return h("a", { class: "chip" + (on ? " on" : ""), href: hashWith(on ? filters : [...filters, l]),
      "data-label": l, title: "only the " + what + " labeled " + l }, chipText(k, v));
  });
}

// labelFilters is a listing's label filters (id: its element's, what:
// "goal", "task"): a chip for each filter with a × that removes it, and a
// box that adds one typed as name=value (then Enter); hashWith is the
// listing's address with other label filters.
function labelFilters(id, labels, hashWith, what) {
  const add = h("input", { type: "text", id: "label-filter", class: "short", placeholder: "name=value", "aria-label": "filter by a label: name=value, then Enter" });
  add.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter") return;
    ev.preventDefault();
    const l = add.value.trim();
    if (l) location.hash = hashWith(labels.includes(l) ? labels : [...labels, l]);
  });
  return h("p", { id, class: "label-filters" }, "Labels ",
    labels.map((l) => h("span", { class: "chip on", "data-filter": l, title: l }, l.length > 48 ? l.slice(0, 47) + "…" : l,
      h("a", { class: "chip-x", href: hashWith(labels.filter((x) => x !== l)), "data-remove-filter": l, title: "remove this filter", "aria-label": "remove filter " + l }, "×"))),
    add, labels.length ? null : h("span", { class: "muted" }, ` (or click a ${what}'s label)`));
}

// listedFor reads a listing by labels (path: its API's, query: listQuery's)
// into { items, refused }: a filter the console or the service refuses
// (400) is no failure of the page, but shown with the filters, to remove
// it.
async function listedFor(path, query) {
  try {
    return { items: await api("GET", path + query), refused: null };
  } catch (err) {
    if (err.status !== 400) throw err;
    return { items: [], refused: err };
  }
}

async function renderGoals() {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  const schedule = q.get("schedule");
  const labels = [...new Set(q.getAll("label"))];
  const { items: gs, refused } = await listedFor("/api/goals", listQuery({ schedule }, labels));
  const hashWith = (ls) => "#/goals" + listQuery({ schedule }, ls);
  const rows = gs.map((g) => {
    const { done, total } = progress(g);
    return h("tr", { "data-goal-id": g.id },
      h("td", {}, h("a", { href: "#/goals/" + g.id }, g.title || g.id)),
      h("td", { class: "labels" }, labelChips(g.labels, labels, hashWith, "goals")),
      h("td", {}, state(g.state)),
      h("td", {}, h("progress", { max: total || 1, value: done }), " " + done + "/" + total),
      h("td", {}, g.plan_version || "-"),
      h("td", {}, ago(g.updated_at)));
  });
  const filters = labelFilters("goal-filters", labels, hashWith, "goal");
  const byKey = goToKey();
  const empty = labels.length ? "No goal" + (schedule ? " of this schedule" : "") + " holds " + (labels.length > 1 ? "every one of " : "") + labels.join(", ") + "."
    : schedule ? "This schedule has started no goal yet." : "No goals yet: dwr goal create …";
  show(h("h1", {}, schedule ? "Goals of schedule " + schedule : "Goals"),
    schedule || labels.length ? h("p", {}, h("a", { href: "#/goals" }, "All goals"), schedule ? h("span", {}, " · ", h("a", { href: "#/schedules" }, "Schedules")) : null) : null,
    filters, byKey,
    refused ? errorBox(refused) : gs.length === 0 ? h("p", { class: "muted", id: "no-goals" }, empty) :
      h("table", { id: "goals" }, h("thead", {}, h("tr", {}, h("th", {}, "Goal"), h("th", {}, "Labels"), h("th", {}, "State"), h("th", {}, "Progress"),
        h("th", {}, "Plan"), h("th", {}, "Updated"))), h("tbody", {}, rows)),
    !refused && gs.length && (labels.length || schedule) ? spentTogether(gs) : null);
}

// goToKey is the goals page's "Go to key" box: a goal's key (goal.create's
// key, an order id) typed in goes to the page of the goal made last with it
// (GET /api/goal-by-key/{key}), or says in place that no goal has it.
function goToKey() {
  const key = h("input", { type: "text", id: "goal-key-input", class: "short", placeholder: "key", required: true, "aria-label": "a goal's key" });
  const go = h("button", { type: "submit", id: "go-to-key" }, "Go to key");
  const msg = h("div", { id: "goal-key-msg" });
  const form = h("form", { id: "goal-key-form" }, key, go, msg);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const k = key.value.trim();
    if (!k) return;
    msg.replaceChildren();
    go.disabled = true; // until the goal is found, or not
    try {
      const g = await api("GET", "/api/goal-by-key/" + encodeURIComponent(k));
      location.hash = "#/goals/" + g.id; // as the list links it
    } catch (err) {
      msg.append(err.status === 404 && err.code === "not_found"
        ? h("span", { class: "muted", id: "no-goal-with-key", "data-key": k }, "no goal with key " + k)
        : errorBox(err));
    } finally {
      go.disabled = false;
    }
  });
  return form;
}

// spentTogether says what the goals listed spent together — what a
// customer's goals cost, listed by their label.
function spentTogether(gs) {
  const sum = { attempts: 0, tokens: 0, cost: 0, wall_ms: 0 };
  for (const g of gs) for (const k of Object.keys(sum)) sum[k] += (g.spent || {})[k] || 0;
  const wall = sum.wall_ms < 1000 ? sum.wall_ms + " ms" : (sum.wall_ms / 1000).toFixed(1) + " s";
  return h("p", { id: "spent-together", "data-cost": String(Math.round(sum.cost * 1e6) / 1e6) },
    `Spent by these ${gs.length} goal${gs.length === 1 ? "" : "s"}: ${sum.attempts} attempts · ${sum.tokens.toLocaleString("en")} tokens · cost ${Math.round(sum.cost * 1e6) / 1e6} · ${wall}`);
}

// ---- tasks ----

// taskStates are the states a task can be in, as the lists offer them.
const taskStates = ["pending", "ready", "running", "waiting", "verifying", "needs_review", "backoff",
  "accepted", "rejected", "failed", "cancelled"];

// renderTasks lists the tasks holding every label filtered by (the hash's
// label=NAME=VALUE, repeatable), and in one state if one is picked
// (state=S), newest first, each linked to its page; with neither it lists
// none but says how to ask.
async function renderTasks() {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  const st = q.get("state") || "";
  const labels = [...new Set(q.getAll("label"))];
  const asked = labels.length > 0 || st !== "";
  const { items: ts, refused } = asked ? await listedFor("/api/tasks", listQuery({ state: st }, labels)) : { items: [], refused: null };
  const hashWith = (ls) => "#/tasks" + listQuery({ state: st }, ls);
  const rows = ts.map((t) => h("tr", { "data-task-id": t.id },
    h("td", {}, h("a", { href: "#/tasks/" + t.id }, t.id), t.title ? h("div", { class: "muted" }, t.title) : null),
    h("td", {}, t.key || "-"),
    h("td", {}, state(t.state), t.reason ? h("div", { class: "muted" }, t.reason) : null),
    h("td", {}, h("a", { href: "#/queues/" + encodeURIComponent(t.queue) }, t.queue)),
    h("td", {}, t.goal_id ? h("a", { href: "#/goals/" + t.goal_id }, t.goal_id) : "-"),
    h("td", { class: "labels" }, labelChips(t.labels, labels, hashWith, "tasks")),
    h("td", {}, ago(t.updated_at))));
  const pick = h("select", { id: "task-state", "aria-label": "state" }, h("option", { value: "" }, "any state"),
    taskStates.map((s) => h("option", { value: s, selected: s === st }, s)));
  pick.addEventListener("change", () => { location.hash = "#/tasks" + listQuery({ state: pick.value }, labels); });
  const empty = !asked ? "Type a label as name=value (customer=acme), then Enter, to list the tasks holding it; or pick a state."
    : labels.length ? "No task" + (st ? " " + st : "") + " holds " + (labels.length > 1 ? "every one of " : "") + labels.join(", ") + "."
      : "No task is " + st + ".";
  show(h("h1", {}, "Tasks"),
    labelFilters("task-filters", labels, hashWith, "task"), h("p", {}, "Show ", pick),
    refused ? errorBox(refused) : ts.length === 0 ? h("p", { class: "muted", id: "no-tasks" }, empty)
      : table("tasks", ["Task", "Key", "State", "Queue", "Goal", "Labels", "Updated"], rows));
}

// layout places a plan's nodes in layers: a node's layer is the longest
// path to it from a root; within a layer, nodes are ordered by the mean
// position of their dependencies (barycenter), a few sweeps down.
function layout(nodes) {
  const byKey = new Map(nodes.map((n) => [n.key, n]));
  const layer = new Map();
  const depth = (n, seen) => {
    if (layer.has(n.key)) return layer.get(n.key);
    if (seen.has(n.key)) return 0; // a cycle cannot be committed; be safe
    seen.add(n.key);
    let d = 0;
    for (const k of n.depends_on || []) if (byKey.has(k)) d = Math.max(d, depth(byKey.get(k), seen) + 1);
    layer.set(n.key, d);
    return d;
  };
  nodes.forEach((n) => depth(n, new Set()));
  const layers = [];
  for (const n of nodes) (layers[layer.get(n.key)] ||= []).push(n);
  const pos = new Map();
  for (let sweep = 0; sweep < 4; sweep++) {
    layers.forEach((l, i) => {
      if (i > 0) {
        const bary = (n) => {
          const ps = (n.depends_on || []).filter((k) => pos.has(k)).map((k) => pos.get(k));
          return ps.length ? ps.reduce((a, b) => a + b, 0) / ps.length : pos.get(n.key) || 0;
        };
        l.sort((a, b) => bary(a) - bary(b));
      }
      l.forEach((n, j) => pos.set(n.key, j - (l.length - 1) / 2));
    });
  }
  return { layers, pos, layer };
}

function drawGraph(goal) {
  const nodes = goal.nodes || [];
  const W = 170, H = 44, GX = 70, GY = 26;
  const { layers, pos, layer } = layout(nodes);
  const widest = Math.max(1, ...layers.map((l) => l.length));
  const width = layers.length * (W + GX) + GX, height = widest * (H + GY) + GY;
  const x = (k) => GX / 2 + layer.get(k) * (W + GX);
  const y = (k) => height / 2 + pos.get(k) * (H + GY) - H / 2;
  const svg = h("svg", { id: "graph", viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": "plan graph" },
    h("defs", {}, h("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
      h("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))));
  for (const n of nodes) {
    for (const k of n.depends_on || []) {
      if (!layer.has(k)) continue;
      const x1 = x(k) + W, y1 = y(k) + H / 2, x2 = x(n.key), y2 = y(n.key) + H / 2;
      svg.append(h("path", { class: "edge", d: `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }));
    }
  }
  for (const n of nodes) {
    const g = h("g", { class: "node s-" + n.state, "data-task-id": n.task_id, "data-task-key": n.key, "data-task-state": n.state,
      transform: `translate(${x(n.key)},${y(n.key)})`, tabindex: 0, role: "link" },
      h("title", {}, n.key + ": " + n.state),
      h("rect", { width: W, height: H, rx: 6 }),
      h("text", { x: 10, y: 18, class: "key" }, n.key.length > 22 ? n.key.slice(0, 21) + "…" : n.key),
      h("text", { x: 10, y: 35, class: "st" }, n.state));
    const open = () => { location.hash = "#/tasks/" + n.task_id; };
    g.addEventListener("click", open);
    g.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
    svg.append(g);
  }
  return svg;
}

// recolour updates the graph's nodes to the states of goal's nodes; a
// plan whose shape changed is drawn again.
function recolour(goal, holder) {
  const svg = holder.querySelector("svg");
  const nodes = goal.nodes || [];
  const drawn = svg ? svg.querySelectorAll("g.node") : [];
  if (!svg || drawn.length !== nodes.length || nodes.some((n) => !svg.querySelector(`g.node[data-task-id="${n.task_id}"]`))) {
    holder.replaceChildren(drawGraph(goal));
    return;
  }
  for (const n of nodes) {
    const g = svg.querySelector(`g.node[data-task-id="${n.task_id}"]`);
    g.setAttribute("class", "node s-" + n.state);
    g.setAttribute("data-task-state", n.state);
    g.querySelector("text.st").textContent = n.state;
    g.querySelector("title").textContent = n.key + ": " + n.state;
  }
}

function goalHeader(g) {
  const { done, total } = progress(g);
  return h("div", { id: "goal-head" },
    h("h1", {}, g.title || g.id), h("p", {}, state(g.state), " ", h("span", { id: "goal-state", "data-goal-state": g.state }, ""),
      " plan version " + g.plan_version + " · ", h("span", { id: "goal-progress" }, done + "/" + total), " of the plan accepted · goal " + g.id,
      g.key ? h("span", {}, " · ", h("span", { id: "goal-key", "data-key": g.key, title: "the caller's own name for the goal (goal.create's key)" }, "key " + g.key)) : null),
    g.reason ? h("p", { class: "muted" }, "reason: " + g.reason) : null,
    (g.success_criteria || []).length ? h("ul", {}, g.success_criteria.map((c) => h("li", {}, c))) : null,
    budgetTable(g));
}

// budgetTable sets what the goal's work spent (every attempt of every plan
// version, failed ones included) beside its budget: a meter for each bound
// dimension, red once the bound is reached, and the deadline. While the
// goal is open with some of its plan accepted, it projects each bound
// dimension to the whole plan at the rate so far (spent ÷ accepted × all),
// marking a projection past the bound.
function budgetTable(g) {
  const b = (g.envelope || {}).budget || {};
  const sp = g.spent || {};
  const { done, total } = progress(g);
  const projecting = g.state === "open" && done > 0 && done < total;
  const num = (n) => Number(n || 0).toLocaleString("en");
  const row = (dim, label, used, limit, fmt) => {
    const over = limit > 0 && used >= limit;
    const projected = projecting && limit > 0 && !over ? used / done * total : null;
    return h("tr", { "data-budget": dim, "data-over": over ? "true" : "false" },
      h("th", {}, label), h("td", { class: "num" + (over ? " bad" : "") }, fmt(used)),
      h("td", {}, limit > 0 ? "of " + fmt(limit) : "no bound"),
      h("td", {}, limit > 0 ? h("meter", { min: 0, max: limit, value: Math.min(used, limit), low: limit * 0.5, high: limit * 0.8, optimum: 0 }) : null),
      h("td", { class: "muted" + (projected > limit ? " bad" : ""), "data-projected": projected === null ? null : String(projected) },
        projected === null ? "" : "at this rate " + fmt(Math.round(projected * 100) / 100) + " for the whole plan" + (projected > limit ? ": over" : "")));
  };
  const deadline = b.deadline ? h("tr", { "data-budget": "deadline", "data-over": new Date(b.deadline) <= new Date() ? "true" : "false" },
    h("th", {}, "Deadline"), h("td", { colspan: 4 }, ago(b.deadline), " (" + new Date(b.deadline).toISOString() + ")")) : null;
  return h("table", { id: "budget", class: "budget" },
    h("tbody", {},
      row("attempts", "Attempts", sp.attempts || 0, b.attempts || 0, num),
      row("tokens", "Tokens", sp.tokens || 0, b.tokens || 0, num),
      row("cost", "Cost", sp.cost || 0, b.cost || 0, (c) => Number(c || 0).toLocaleString("en", { maximumFractionDigits: 4 })),
      row("wall", "Wall time", sp.wall_ms || 0, 0, (ms) => ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s"),
      deadline));
}

// revisions is the goal page's slider over the versions of the plan (revs,
// from /api/goals/{id}/plans): each draws that version's graph, its tasks
// marked as its revision left them (added, replaced; the removed named),
// with who committed it and when. Its latest version is the live plan,
// which live(goal) draws again as the goal changes.
function revisions(revs, holder, latest) {
  const box = h("div", { id: "revisions" });
  if (revs.length < 2) return { box, live: (goal) => recolour(goal, holder) };
  let shown = revs.length; // the version on screen
  const slider = h("input", { type: "range", id: "plan-version", min: 1, max: revs.length, value: revs.length, "aria-label": "plan version" });
  const label = h("span", { id: "plan-version-label" });
  const mark = (rev) => {
    for (const [what, keys] of [["added", rev.added], ["replaced", rev.replaced]]) {
      for (const k of keys || []) holder.querySelector(`g.node[data-task-key="${CSS.escape(k)}"]`)?.setAttribute("data-revision", what);
    }
  };
  const draw = () => {
    const rev = revs[shown - 1];
    if (shown === revs.length) {
      holder.replaceChildren(drawGraph(latest));
    } else {
      const states = new Map((latest.nodes || []).map((n) => [n.task_id, n.state]));
      holder.replaceChildren(drawGraph({ nodes: rev.tasks.map((t) => ({ ...t, state: states.get(t.task_id) || "retired" })) }));
    }
    mark(rev);
    const changes = [["added", rev.added], ["replaced", rev.replaced], ["removed", rev.removed]]
      .filter(([, keys]) => (keys || []).length).map(([what, keys]) => what + " " + keys.join(", "));
    label.replaceChildren("version " + rev.version + " of " + revs.length + (shown === revs.length ? " (the live plan)" : "") + " · ",
      ago(rev.time), rev.actor ? " by " + rev.actor : "", changes.length ? " · " + changes.join("; ") : "");
  };
  slider.addEventListener("input", () => { shown = Number(slider.value); draw(); });
  box.append(h("p", {}, "Plan version ", slider, " ", label));
  draw();
  return {
    box,
    live: (goal) => {
      latest = goal;
      if (shown !== revs.length) return; // an earlier version stays on screen
      recolour(goal, holder);
      mark(revs[shown - 1]);
    },
  };
}

// labelsEditor is a goal's or a task's (kind) labels on its page: a chip
// each (a link to the goals, or the tasks, that hold it) with a × that removes
// it, and a form that sets one (a name given a new value, or a new name).
// Each change is a POST of /api/goals/{id}/labels (goal.label) or
// /api/tasks/{id}/labels (task.label); the labels shown are then read
// again, as they are whenever a goal's live stream brings it anew.
function labelsEditor(kind, id, g) {
  const path = `/api/${kind}s/${encodeURIComponent(id)}/labels`;
  const chips = h("span", { id: kind + "-labels" });
  const msg = h("div", { id: "labels-msg" });
  let at = -1; // the goal version whose labels are shown
  const showLabels = (goal) => {
    if (goal.version < at) return; // read before the labels shown
    at = goal.version;
    const ls = sortedLabels(goal.labels);
    chips.replaceChildren(...(ls.length ? ls.map(([k, v]) => {
      const x = h("button", { type: "button", class: "chip-x", "data-remove-label": k, title: "remove this label", "aria-label": "remove label " + k }, "×");
      x.addEventListener("click", () => change({ remove: [k] }));
      return h("span", { class: "chip", "data-label": k + "=" + v },
        h("a", { href: `#/${kind}s` + listQuery({}, [k + "=" + v]), title: `the ${kind}s labeled ` + k + "=" + v }, chipText(k, v)), x);
    }) : [h("span", { class: "muted" }, "none ")]));
  };
  const change = async (body) => {
    msg.replaceChildren();
    try {
      const r = await api("POST", path, body);
      if (r.duplicate) msg.append(h("p", { class: "muted", id: "labels-unchanged" }, `No change: the ${kind}'s labels were so already.`));
    } catch (err) {
      msg.append(errorBox(err));
      return false;
    }
    // The session reads its own write; should this read fail, the live
    // stream still brings the goal anew.
    await api("GET", `/api/${kind}s/` + encodeURIComponent(id)).then((x) => showLabels(kind === "task" ? x.task : x), () => {});
    return true;
  };
  const name = h("input", { type: "text", id: "label-name", class: "short", placeholder: "name", required: true, "aria-label": "label name" });
  const value = h("input", { type: "text", id: "label-value", class: "short", placeholder: "value", "aria-label": "label value" });
  const set = h("button", { type: "submit", id: "set-label" }, "Set label");
  const form = h("form", { id: "label-form" }, name, "=", value, set);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    set.disabled = true; // until this label is set, or refused
    try {
      if (await change({ set: { [name.value.trim()]: value.value } })) {
        name.value = "";
        value.value = "";
      }
    } finally {
      set.disabled = false;
    }
  });
  showLabels(g);
  return { box: h("div", { class: "labels-line" }, h("span", { class: "muted" }, "Labels "), chips, form, msg), show: showLabels };
}

// priorityEditor is a goal's priority on its page: "Priority N" (3 when
// the goal gives none), and a choice of 1 (first) to 5 (last) set by a
// POST of /api/goals/{id}/priority (goal.prioritize); the priority shown is
// then read again, as it is whenever a goal's live stream brings it anew.
function priorityEditor(id, g) {
  const path = `/api/goals/${encodeURIComponent(id)}/priority`;
  const shown = h("span", { id: "goal-priority", title: "the turn of its tasks that give none of their own, in a queue whose order is priority: 1 first, 5 last (none given: 3)" });
  const pick = h("select", { id: "priority-select", "aria-label": "priority" },
    [1, 2, 3, 4, 5].map((n) => h("option", { value: n }, n + (n === 1 ? " (first)" : n === 5 ? " (last)" : ""))));
  const set = h("button", { type: "submit", id: "set-priority" }, "Set");
  const form = h("form", { id: "priority-form" }, pick, set);
  const msg = h("div", { id: "priority-msg" });
  let at = -1; // the goal version whose priority is shown
  let now = 0; // the priority shown
  const showPriority = (goal) => {
    if (goal.version < at) return; // read before the priority shown
    at = goal.version;
    const p = goal.priority || 3;
    if (p === now) return; // a choice being made stays
    now = p;
    shown.textContent = "Priority " + p;
    shown.dataset.priority = p;
    pick.value = String(p);
  };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    msg.replaceChildren();
    set.disabled = true; // until this priority is set, or refused
    try {
      const r = await api("POST", path, { priority: Number(pick.value) });
      if (r.duplicate) msg.append(h("p", { class: "muted", id: "priority-unchanged" }, "No change: the goal's priority was so already."));
    } catch (err) {
      msg.append(errorBox(err));
      return;
    } finally {
      set.disabled = false;
    }
    // The session reads its own write; should this read fail, the live
    // stream still brings the goal anew.
    await api("GET", "/api/goals/" + encodeURIComponent(id)).then(showPriority, () => {});
  });
  showPriority(g);
  return { box: h("div", { class: "labels-line" }, shown, form, msg), show: showPriority };
}

async function renderGoal(id) {
  const g = await api("GET", "/api/goals/" + encodeURIComponent(id));
  const head = h("div", {}, goalHeader(g));
  const holder = h("div", { class: "graph" }, drawGraph(g));
  // The plan's versions, read again when the goal's plan moves past the
  // last one read; none for an identity that may not read histories.
  const plansPath = `/api/goals/${encodeURIComponent(id)}/plans`;
  let revs = g.plan_version > 1 ? await api("GET", plansPath).catch(() => []) : [];
  let plan = revisions(revs, holder, g);
  const planBox = h("div", {}, plan.box);
  const status = h("span", { id: "live", class: "muted" }, "connecting…");
  const feed = h("ol", { id: "activity", class: "activity" });
  const cancel = h("button", { type: "button", id: "cancel-goal", class: "danger", hidden: g.state !== "open" }, "Cancel goal");
  const msg = h("div");
  const labels = labelsEditor("goal", id, g);
  const priority = priorityEditor(id, g);
  cancel.addEventListener("click", async () => {
    msg.replaceChildren();
    if (!confirm("Cancel this goal and its unfinished tasks?")) return;
    try { await api("POST", `/api/goals/${encodeURIComponent(id)}/cancel`, { reason: "cancelled from the console" }); } catch (err) { msg.append(errorBox(err)); }
  });
  show(head, labels.box, priority.box, h("p", {}, "Live: ", status, " ", cancel), msg, planBox, holder,
    h("p", { class: "muted" }, "Click a task for its timeline."), h("h2", {}, "Activity"), feed);
  const es = new EventSource(`/api/goals/${encodeURIComponent(id)}/stream`);
  live = es;
  es.addEventListener("open", () => { status.textContent = "live"; status.className = "ok"; });
  es.addEventListener("error", () => { status.textContent = "reconnecting…"; status.className = "muted"; });
  es.addEventListener("goal", async (ev) => {
    const s = JSON.parse(ev.data);
    head.replaceChildren(goalHeader(s.goal));
    labels.show(s.goal);
    priority.show(s.goal);
    cancel.hidden = s.goal.state !== "open"; // an ended goal is not cancelled
    const known = revs.length ? revs[revs.length - 1].version : 1;
    if (s.goal.plan_version > known) { // revised while the page is open: the new version joins the slider
      revs = await api("GET", plansPath).catch(() => revs);
      plan = revisions(revs, holder, s.goal);
      planBox.replaceChildren(plan.box);
      if (revs.length < 2) plan.live(s.goal);
      return;
    }
    plan.live(s.goal);
  });
  es.addEventListener("event", (ev) => {
    const e = JSON.parse(ev.data);
    feed.prepend(h("li", {}, h("code", {}, e.type), " ", e.agg + " " + e.agg_id + " v" + e.ver, e.actor ? " by " + e.actor : "", " ", ago(e.time)));
    while (feed.children.length > 200) feed.lastChild.remove();
  });
  es.addEventListener("failure", (ev) => { msg.replaceChildren(errorBox(new Error(JSON.parse(ev.data).message))); });
}

// ---- task timeline ----

function section(title, ...content) {
  return h("section", {}, h("h2", {}, title), ...content);
}

function table(id, head, rows) {
  if (!rows.length) return h("p", { class: "muted" }, "none");
  return h("table", { id }, h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))), h("tbody", {}, rows));
}

async function renderTask(id) {
  const tl = await api("GET", "/api/tasks/" + encodeURIComponent(id));
  const t = tl.task;
  const ch = tl.chain;
  const msg = h("div");
  const ended = ["accepted", "rejected", "failed", "cancelled"].includes(t.state);
  const cancel = ended ? null : h("button", { type: "button", id: "cancel-task", class: "danger" }, "Cancel task");
  cancel?.addEventListener("click", async () => {
    msg.replaceChildren();
    if (!confirm("Cancel this task?")) return;
    try { await api("POST", `/api/tasks/${encodeURIComponent(id)}/cancel`, { reason: "cancelled from the console" }); route(); } catch (err) { msg.append(errorBox(err)); }
  });
  let retry = null;
  if (t.state === "failed" || t.state === "rejected") {
    retry = h("button", { type: "button", id: "retry-task" }, "Retry task");
    retry.addEventListener("click", async () => {
      msg.replaceChildren();
      if (!confirm("Give this task a new attempt?")) return;
      try { await api("POST", `/api/tasks/${encodeURIComponent(id)}/retry`, { reason: "retried from the console" }); route(); } catch (err) { msg.append(errorBox(err)); }
    });
  }
  const attempts = (t.attempts || []).map((a) => h("tr", { "data-attempt": a.n },
    h("td", {}, a.n), h("td", {}, state(a.state)), h("td", {}, a.executor + (a.executor_version ? " " + a.executor_version : "")),
    h("td", {}, ago(a.started_at)), h("td", {}, dur(a.started_at, a.ended_at)),
    h("td", {}, a.error ? (a.error.code ? a.error.code + ": " : "") + a.error.message : a.reason || ""),
    h("td", {}, a.result ? pre(a.result) : "-"),
    h("td", {}, (a.model_steps || []).map((m) => h("div", {}, m.model + (m.tokens ? " · " + m.tokens + " tokens" : "") +
      (m.cost ? " · " + m.cost : "") + (m.prompt_version ? " · prompt " + m.prompt_version : "") + (m.validation ? " · " + m.validation : "")))),
    h("td", {}, (a.artifacts || []).map((r) => h("div", {}, r.name + " " + r.sha256.slice(0, 12))))));
  const verdicts = (t.verifications || []).map((v) => h("tr", {},
    h("td", {}, v.attempt), h("td", {}, h("span", { class: "verdict v-" + v.outcome }, v.outcome)), h("td", {}, v.verifier),
    h("td", {}, pre(v.evidence)), h("td", {}, (v.evidence_refs || []).map((r) => h("div", {}, r.name + " " + r.sha256.slice(0, 12))))));
  const approvals = (t.approvals || []).map((a) => h("tr", {},
    h("td", {}, h("a", { href: "#/approvals/" + a.id }, a.id)), h("td", {}, state(a.state)), h("td", {}, a.summary || ""),
    h("td", {}, a.decision ? `${a.decision.response} by ${a.decision.approver} → ${a.decision.branch}` : "-"),
    h("td", {}, (a.refusals || []).map((r) => h("div", { class: "refusal" }, `${r.approver || "?"}: ${r.reason} (${r.message})`)))));
  const signals = [...(t.signal ? [["received", t.signal]] : []), ...(t.pending_signals || []).map((s) => ["pending", s])]
    .map(([k, s]) => h("tr", {}, h("td", {}, s.name), h("td", {}, k), h("td", {}, pre(s.payload))));
  const history = tl.history.map((e) => h("tr", {},
    h("td", {}, e.ver), h("td", {}, h("code", {}, e.type)), h("td", {}, e.actor || "-"), h("td", {}, ago(e.time)),
    h("td", { class: "hash", title: e.hash }, e.hash.slice(0, 12)), h("td", { class: "hash", title: e.prev || "" }, (e.prev || "-").slice(0, 12))));
  const chainBox = ch.withheld ? h("p", { id: "chain", class: "muted", "data-verified": "withheld" }, "history not shown: " + ch.withheld)
    : ch.verified
    ? h("p", { id: "chain", class: "ok", "data-verified": "true" }, `✔ chain verified: ${ch.events} events, head ${ch.head}` + (ch.truncated ? " (the first ones only)" : ""))
    : h("p", { id: "chain", class: "error", "data-verified": "false" }, "✘ chain broken: " + ch.problem);
  let wait = null;
  if (t.wait) {
    wait = h("p", { id: "wait" }, "waiting for " + t.wait.kind + (t.wait.signal ? " " + t.wait.signal : "") +
      (t.wait.approval_id ? " " + t.wait.approval_id : ""), t.wait.until ? h("span", {}, " until ", ago(t.wait.until)) : null);
  }
  show(h("h1", {}, "Task " + (t.key || t.id)),
    h("p", {}, state(t.state), " queue " + t.spec.queue,
      t.spec.priority ? h("span", {}, " · ", h("span", { id: "task-priority", "data-priority": t.spec.priority }, "Priority " + t.spec.priority)) : null,
      " · task " + t.id,
      t.goal_id ? h("span", {}, " · goal ", h("a", { href: "#/goals/" + t.goal_id }, t.goal_id)) : null, " ", cancel, retry),
    labelsEditor("task", id, t).box,
    msg, t.reason ? h("p", { class: "muted" }, "reason: " + t.reason) : null,
    t.omitted ? h("p", { class: "muted", id: "omitted" }, "Too large to show whole: " + t.omitted.length +
      " parts of its history are left out (the task's events hold them): " + t.omitted.join(" ")) : null,
    t.error ? h("p", { class: "error" }, (t.error.code || "") + " " + t.error.message) : null,
    wait, t.backoff_until ? h("p", {}, "backoff until ", ago(t.backoff_until)) : null,
    t.spec.start_at ? h("p", {}, "timer: starts ", ago(t.spec.start_at)) : null,
    t.spec.deadline ? h("p", {}, "timer: deadline ", ago(t.spec.deadline)) : null,
    section("Input", pre(t.spec.input)),
    section("Attempts",
      t.earlier_attempts ? h("p", { class: "muted", id: "earlier-attempts" }, "Attempts 1–" + t.earlier_attempts.count +
        " are not listed (the task's events hold them): " + (t.earlier_attempts.spent || 0) + " of them used the retry budget since the last retry.") : null,
      table("attempts", ["#", "State", "Executor", "Started", "Took", "Error", "Result", "Model steps", "Artifacts"], attempts)),
    section("Checkpoint", pre(t.checkpoint)),
    section("Verdicts", table("verdicts", ["Attempt", "Outcome", "Verifier", "Evidence", "Evidence files"], verdicts)),
    section("Approvals", table("task-approvals", ["Approval", "State", "Summary", "Decision", "Refused"], approvals)),
    section("Signals", table("signals", ["Name", "", "Payload"], signals)),
    section("History", chainBox, table("history", ["Ver", "Event", "Actor", "Time", "Hash", "Prev"], history)));
}

// ---- approvals ----

async function renderApprovals() {
  const sel = new URLSearchParams(location.hash.split("?")[1] || "").get("state") || "pending";
  const as = await api("GET", "/api/approvals?state=" + encodeURIComponent(sel));
  const filter = h("select", { id: "approval-state" }, ["pending", "decided", "expired", "withdrawn", "all"].map((s) =>
    h("option", { value: s, selected: s === sel }, s)));
  filter.addEventListener("change", () => { location.hash = "#/approvals?state=" + filter.value; });
  const rows = as.map((a) => h("tr", { "data-approval-id": a.id },
    h("td", {}, h("a", { href: "#/approvals/" + a.id }, a.id)), h("td", {}, state(a.state)), h("td", {}, a.task_key || a.task_id),
    h("td", {}, (a.role || "any") + ((a.quorum || 1) > 1
      ? ` (${(a.sign_offs || []).length + (a.decision && a.decision.response === "approve" ? 1 : 0)}/${a.quorum})` : "")),
    h("td", {}, a.summary || ""), h("td", {}, (a.responses || []).join(", ")),
    h("td", {}, a.expires_at ? ago(a.expires_at) : "-")));
  show(h("h1", {}, "Approvals"), h("p", {}, "Show ", filter),
    table("approvals", ["Approval", "State", "Task", "Role", "Summary", "Responses", "Expires"], rows));
}

// keyOf reads an approver key file: the "# approver:" comment and the PEM
// block after it, imported as a non-extractable Ed25519 signing key.
async function keyOf(file) {
  if (file.size > 60000) throw new Error("this file is too large to be a key file");
  const text = await file.text();
  const approver = (/^#\s*approver:\s*(\S+)/m.exec(text) || [])[1] || "";
  const m = /-----BEGIN PRIVATE KEY-----([\s\S]*?)-----END PRIVATE KEY-----/.exec(text);
  if (!m) throw new Error("no PEM \"PRIVATE KEY\" block in this file: pick the key file dwr keys create wrote (an encrypted key cannot be used)");
  const der = Uint8Array.from(atob(m[1].replace(/\s+/g, "")), (c) => c.charCodeAt(0));
  const key = await crypto.subtle.importKey("pkcs8", der, { name: "Ed25519" }, false, ["sign"]);
  return { key, approver };
}

async function renderApproval(id) {
  const p = await api("GET", "/api/approvals/" + encodeURIComponent(id));
  const a = p.approval;
  let computed = "";
  let digestErr = null;
  try {
    computed = await window.dwrCanonical.actionDigest(p.action_text);
  } catch (err) {
    digestErr = err;
  }
  const digestOK = computed === a.action_digest;
  const out = h("div", { id: "decide-result" });
  const keyfile = h("input", { type: "file", id: "keyfile" });
  const approver = h("input", { type: "text", id: "approver", placeholder: "from the key file" });
  const comment = h("input", { type: "text", id: "comment" });
  keyfile.addEventListener("change", async () => {
    try {
      const k = await keyOf(keyfile.files[0]);
      if (k.approver && !approver.value) approver.value = k.approver;
    } catch (err) { out.replaceChildren(errorBox(err)); }
  });
  const decide = async (response) => {
    out.replaceChildren();
    try {
      if (!digestOK) throw new Error("the action shown does not digest to the approval's digest: not signing");
      if (!window.crypto || !crypto.subtle) throw new Error("signing needs a secure context: open the console at http://127.0.0.1, localhost, or over HTTPS");
      if (!keyfile.files[0]) throw new Error("pick your approver key file first");
      const k = await keyOf(keyfile.files[0]);
      const name = approver.value.trim() || k.approver;
      if (!name) throw new Error("the key file names no approver: type your approver name");
      const msg = new TextEncoder().encode(`dwr approval decision v1\n${a.id}\n${response}\n${a.action_digest}`);
      const sig = new Uint8Array(await crypto.subtle.sign("Ed25519", k.key, msg));
      const r = await api("POST", `/api/approvals/${encodeURIComponent(a.id)}/decide`, {
        approver: name, response, action_digest: a.action_digest, comment: comment.value, signature: btoa(String.fromCharCode(...sig)) });
      const waits = response === "approve" && (a.quorum || 1) > 1 && r.state === "waiting";
      out.replaceChildren(h("p", { class: "ok", "data-decided": response }, waits
        ? `Approved by ${name}: the approval waits for more of the ${a.quorum} distinct approvers it needs; task ${r.id} is ${r.state}.`
        : `Decided: ${response} by ${name}; task ${r.id} is ${r.state}.`));
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  };
  const pending = a.state === "pending";
  show(h("h1", {}, "Approval " + a.id),
    h("p", {}, state(a.state), " task ", h("a", { href: "#/tasks/" + a.task_id }, a.task_key || a.task_id),
      " · role " + (a.role || "any approver") + " · requested " + (a.requested_by ? "by " + a.requested_by + " " : ""), ago(a.requested_at), a.expires_at ? h("span", {}, " · expires ", ago(a.expires_at)) : ""),
    (a.quorum || 1) > 1 ? h("p", { id: "quorum" }, `Needs ${a.quorum} distinct approvers; approved so far: `,
      (a.sign_offs || []).length ? a.sign_offs.map((s) => s.approver).join(", ") : "none", a.decision ? ` (then ${a.decision.approver})` : "") : null,
    (a.dropped_sign_offs || []).length ? h("p", { id: "dropped-sign-offs" }, "Not counted: " + a.dropped_sign_offs.map((s) => s.approver).join(", ") +
      " (revoked, or registered again with another key, since approving).") : null,
    a.exclude_requester && a.requested_by ? h("p", { id: "exclude-requester" }, `${a.requested_by} created the task and may not approve it: another approver must.`) : null,
    a.escalated_from ? h("p", { id: "escalated" }, "Escalated from ", h("a", { href: "#/approvals/" + a.escalated_from }, a.escalated_from),
      ", asked of " + (a.asked_role ? "role " + a.asked_role : "any approver") + ": this decision answers that request.") : null,
    a.summary ? h("p", { class: "summary" }, a.summary) : null,
    section("Action", pre(p.action_text),
      h("p", {}, "digest ", h("code", { id: "digest" }, a.action_digest)),
      digestOK ? h("p", { class: "ok", id: "digest-check", "data-ok": "true" }, "✔ this page digests the action shown to the same digest")
        : h("p", { class: "error", id: "digest-check", "data-ok": "false" }, "✘ the action shown digests to " + (computed || String(digestErr)) + ": nothing will be signed")),
    section("Basis", pre(a.basis)),
    section("Branches", h("ul", {}, (a.responses || []).map((r) => h("li", {}, r + " → " + ((a.branches || {})[r] || "-"))))),
    a.decision ? section("Decision", h("p", { id: "decision" }, `${a.decision.response} by ${a.decision.approver} (key ${a.decision.key_id}) → ${a.decision.branch}, `, ago(a.decided_at || a.decision.decided_at))) : null,
    (a.refusals || []).length ? section("Refused decisions", h("ul", {}, a.refusals.map((r) => h("li", {}, `${r.approver || "?"} ${r.response || ""}: ${r.reason} — ${r.message}`)))) : null,
    pending ? section("Decide",
      h("p", { class: "muted" }, "Your key signs in this browser (WebCrypto Ed25519): the private key never leaves it; only the signature is sent."),
      h("label", {}, "Key file ", keyfile), h("label", {}, "Approver ", approver), h("label", {}, "Comment ", comment),
      h("p", {}, (a.responses || []).map((r) => {
        const b = h("button", { type: "button", "data-response": r, class: r === "reject" ? "danger" : "" }, r);
        b.addEventListener("click", () => decide(r));
        return b;
      })), out) : null);
}

// ---- queues ----

async function renderQueues() {
  const qs = await api("GET", "/api/queues");
  const rows = qs.map((q) => h("tr", { "data-queue": q.name },
    h("td", {}, h("a", { href: "#/queues/" + encodeURIComponent(q.name) }, q.name), q.paused ? h("span", { class: "paused" }, " paused") : null), h("td", { class: "num" }, q.ready), h("td", { class: "num" }, q.running), h("td", { class: "num" }, q.waiting),
    h("td", { class: "num" + (q.quarantined ? " bad" : "") }, q.quarantined),
    h("td", {}, q.lease_ms ? q.lease_ms / 1000 + " s" : "-"), h("td", {}, q.max_deliver || "-"),
    h("td", {}, q.max_running ? "at most " + q.max_running : q.lease_ms ? "no limit" : "-"),
    h("td", { class: "rate" }, q.rate_limit ? `${q.rate_limit} per ${period(q.rate_period_ms)}` : q.lease_ms ? "no limit" : "-"),
    h("td", { class: "order" }, q.order === "priority" ? "priority" : "fifo"),
    h("td", { class: "num" + (q.ready && !q.running && !q.polling && !q.paused ? " bad" : "") }, q.polling || 0), h("td", {}, q.last_delivered ? ago(q.last_delivered) : "-")));
  show(h("h1", {}, "Queues"),
    h("p", { class: "muted" }, "Depth: tasks ready for an executor (a paused queue hands out none). Running: attempts in progress. Waiting: tasks parked on an approval, a signal, a timer or a delegated goal. Quarantined: tasks failed because their work item was delivered the most times the queue allows. Rate: at most so many of its tasks handed out in any such period (the service lets them out one at a time, in order). Order: fifo hands out its tasks as they became ready; priority by their priority first (1 first, 5 last; 3 when a task gives none), then as they became ready. Polling: executors' pulls waiting for an item (red: tasks are ready and no executor takes the queue)."),
    table("queues", ["Queue", "Depth", "Running", "Waiting", "Quarantined", "Lease", "Max deliveries", "Running at once", "Rate", "Order", "Polling", "Last delivered"], rows));
}

// period says a rate limit's period in ms as people do: "second", "10 s",
// "minute", "5 min", "hour", "24 h".
function period(ms) {
  for (const [unit, one, many] of [[3600000, "hour", "h"], [60000, "minute", "min"], [1000, "second", "s"]]) {
    if (ms % unit === 0) return ms === unit ? one : `${ms / unit} ${many}`;
  }
  return `${ms} ms`;
}

// renderQueue lists a queue's tasks in one state (the hash's ?state=,
// ready by default), with a link to each.
async function renderQueue(name) {
  const sel = new URLSearchParams(location.hash.split("?")[1] || "").get("state") || "ready";
  const path = "/api/queues/" + encodeURIComponent(name);
  const [q, ts] = await Promise.all([api("GET", path), api("GET", path + "/tasks?state=" + encodeURIComponent(sel))]);
  const msg = h("div");
  const toggle = h("button", { type: "button", id: q.paused ? "resume-queue" : "pause-queue", class: q.paused ? "" : "danger" }, q.paused ? "Resume queue" : "Pause queue");
  toggle.addEventListener("click", async () => {
    msg.replaceChildren();
    if (!q.paused && !confirm("Pause queue " + name + "? No job goes out until it is resumed; the jobs already out run on.")) return;
    try { await api("POST", path + (q.paused ? "/resume" : "/pause")); route(); } catch (err) { msg.append(errorBox(err)); }
  });
  const paused = q.paused ? h("p", { class: "error", id: "queue-paused" }, "Paused: no job goes out until the queue is resumed; the jobs already out run on, and tasks keep joining it.") : null;
  const filter = h("select", { id: "queue-task-state" }, taskStates.map((s) => h("option", { value: s, selected: s === sel }, s)));
  filter.addEventListener("change", () => { location.hash = `#/queues/${encodeURIComponent(name)}?state=` + filter.value; });
  const rows = ts.map((t) => h("tr", { "data-task-id": t.id },
    h("td", {}, h("a", { href: "#/tasks/" + t.id }, t.key || t.id)), h("td", {}, state(t.state)),
    h("td", {}, t.goal_id ? h("a", { href: "#/goals/" + t.goal_id }, t.goal_id) : "-"),
    h("td", { class: "num" }, (t.attempts || []).length), h("td", {}, t.reason || ""), h("td", {}, ago(t.updated_at))));
  show(h("h1", {}, "Queue " + name), paused, h("p", {}, h("a", { href: "#/queues" }, "All queues"), " · show ", filter, " ", toggle), msg,
    bulkAction(sel, ts), table("queue-tasks", ["Task", "State", "Goal", "Attempts", "Reason", "Updated"], rows));
}

// bulkAction offers to retry every task listed (failed or rejected ones)
// or to cancel them (not yet ended), as dwr task retry|cancel --state does:
// a command each, in turn, the progress shown; a task that changed
// meanwhile (conflict) is skipped, any other refusal stops the walk.
function bulkAction(sel, ts) {
  const retry = sel === "failed" || sel === "rejected";
  if (!ts.length || ["accepted", "cancelled"].includes(sel)) return null;
  const verb = retry ? "retry" : "cancel";
  const button = h("button", { type: "button", id: "bulk-" + verb, class: retry ? "" : "danger" },
    (retry ? "Retry" : "Cancel") + " the " + ts.length + " listed");
  const progress = h("span", { id: "bulk-progress", class: "muted" });
  const box = h("p", {}, button, " ", progress);
  button.addEventListener("click", async () => {
    if (!confirm((retry ? "Give each of the " : "Cancel each of the ") + ts.length + " " + sel + " tasks listed " + (retry ? "a new attempt" : "") + "?")) return;
    button.disabled = true;
    let done = 0, skipped = 0;
    for (const t of ts) {
      try {
        await api("POST", `/api/tasks/${encodeURIComponent(t.id)}/${verb}`, { reason: (retry ? "retried" : "cancelled") + " from the console, with the other " + sel + " tasks of the queue" });
        done++;
      } catch (err) {
        if (err.code !== "conflict") { // stop: the rest are left as they are
          progress.replaceChildren(`stopped after ${done} (${skipped} skipped) at task ${t.id}: `, errorBox(err));
          progress.dataset.done = "stopped";
          return;
        }
        skipped++; // it changed meanwhile
      }
      progress.textContent = `${retry ? "retried" : "cancelled"} ${done} of ${ts.length}` + (skipped ? `, ${skipped} skipped (changed meanwhile)` : "");
    }
    progress.dataset.done = "all";
  });
  return box;
}

// ---- schedules ----

// renderSchedules lists the workspace's schedules: when each fires, what
// its last slot started, and a button to pause or resume it.
async function renderSchedules() {
  const ss = await api("GET", "/api/schedules");
  const msg = h("div");
  const rows = ss.map((s) => {
    const path = "/api/schedules/" + encodeURIComponent(s.name);
    const toggle = h("button", { type: "button", "data-toggle": s.paused ? "resume" : "pause", class: s.paused ? "" : "danger" }, s.paused ? "Resume" : "Pause");
    toggle.addEventListener("click", async () => {
      msg.replaceChildren();
      if (!s.paused && !confirm("Pause schedule " + s.name + "? Its slots do not fire until it is resumed, and those missed meanwhile are not caught up.")) return;
      try { await api("POST", path + (s.paused ? "/resume" : "/pause")); route(); } catch (err) { msg.append(errorBox(err)); }
    });
    const next = s.paused ? h("span", { class: "paused" }, "paused")
      : s.waits_for ? h("span", {}, "after goal ", h("a", { href: "#/goals/" + s.waits_for }, s.waits_for), " ends")
        : ago(s.next_slot);
    return h("tr", { "data-schedule": s.name, "data-paused": s.paused ? "true" : "false" },
      h("td", {}, s.name), h("td", {}, h("code", {}, s.cron || "every " + s.every), s.time_zone ? " " + s.time_zone : ""),
      h("td", {}, next), h("td", {}, s.last_slot ? ago(s.last_slot) : "-"),
      h("td", {}, s.last_goal ? h("a", { href: "#/goals/" + s.last_goal }, s.last_goal) : "-",
        s.fired ? h("span", {}, " · ", h("a", { href: "#/goals?schedule=" + encodeURIComponent(s.name), "data-schedule-goals": s.name }, "all its goals")) : null),
      h("td", { class: "num" }, s.fired || 0), h("td", { class: "num" }, s.skipped || 0),
      h("td", {}, (s.catch_up || "one") + " / " + (s.overlap || "skip")), h("td", {}, toggle));
  });
  show(h("h1", {}, "Schedules"),
    h("p", { class: "muted" }, "Each slot starts the schedule's goal once. Catch-up: which slots missed during an outage fire (skip, one, all); overlap: whether a slot fires while the last slot's goal is open (skip waits for it to end). A resumed schedule fires from its next slot after now."),
    msg, table("schedules", ["Schedule", "When", "Next slot", "Last slot", "Last goal", "Fired", "Skipped", "Catch-up / overlap", ""], rows));
}

// ---- routing ----

async function route() {
  if (live) { live.close(); live = null; }
  if (!me) {
    try { me = await api("GET", "/api/me"); signedIn(); } catch (e) { if (!me) { renderSignIn(); return; } }
  }
  const [path] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean);
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === (parts[0] || "goals")));
  try {
    switch (parts[0] || "goals") {
      case "goals": await (parts[1] ? renderGoal(parts[1]) : renderGoals()); break;
      case "tasks": await (parts[1] ? renderTask(parts[1]) : renderTasks()); break;
      case "approvals": await (parts[1] ? renderApproval(parts[1]) : renderApprovals()); break;
      case "queues": await (parts[1] ? renderQueue(decodeURIComponent(parts[1])) : renderQueues()); break;
      case "schedules": await renderSchedules(); break;
      default: show(h("p", {}, "Nothing here."));
    }
  } catch (err) {
    if (!me) return;
    const hint = err.status === 403 && (parts[0] || "goals") === "goals"
      ? h("p", { class: "muted" }, "This identity may not read goals (an approver's may not): see ", h("a", { href: "#/approvals" }, "Approvals"), ".")
      : null;
    show(errorBox(err), hint);
  }
}

window.addEventListener("hashchange", route);
route();
