// The servo console's page: the bus view, live plots (uPlot), registers, and hold-to-move.
// Everything it does goes through its server: reads and writes over /api (with the token), live data and holds over
// one WebSocket. A motion control publishes only while it is held: the page renews its hold every renew_s, and
// letting go, leaving the page, hiding the tab or losing the socket ends it at once (the servo's deadman then stops
// the axis, see servo_node/console/_motion.py).
"use strict";

const TOKEN = new URLSearchParams(location.hash.slice(1)).get("token") || "";
const HEALTH = ["nominal", "advisory", "caution", "warning"];
const MODE = ["operational", "initialization", "maintenance", "software update"];
const COLORS = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#5d4037", "#ad1457"];
const $ = (id) => document.getElementById(id);

const state = {
  ws: null, hello: null, bus: null, plotKeys: [], windowS: 10, bucketS: 0.01, paused: false, dirty: false,
  store: null, charts: [], holds: new Map(), recording: false, registers: {},
};
// What a test or a bench reads back from the page.
window.consoleStats = { frames: 0, draws: 0, fps: 0, latencies: [], samples: 0, lastPosition: {}, errors: [],
  serverLag: [], transport: [] };

function now() { return (performance.timeOrigin + performance.now()) / 1000; }
function say(text, bad) { const m = $("message"); m.textContent = text; m.className = bad ? "refused" : ""; }
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function fmt(x) { return typeof x === "number" ? (Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : +x.toPrecision(6)) : x; }

// An axis label: short enough for the axis's 60 px (fmt's 2.500e-5 was cut to .000e-5).
function tick(x) { return x === 0 ? "0" : Math.abs(x) >= 1e4 || Math.abs(x) < 1e-3 ? x.toExponential(1) : +x.toPrecision(4); }

async function api(method, path, body) {
  const res = await fetch(path, {
    method, headers: { "X-Console-Token": TOKEN, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
  if (!res.ok) throw new Error(data.error || `HTTP ${res.status}`);
  return data;
}

// ------------------------------------------------------------------ the socket

function connect() {
  const ws = new WebSocket(`ws://${location.host}/ws`);
  state.ws = ws;
  ws.onopen = () => {
    ws.send(JSON.stringify({ type: "hello", token: TOKEN }));
    $("conn").textContent = "connected"; $("conn").className = "badge on";
    subscribe();
  };
  ws.onclose = () => {
    stopAllHolds(false);
    $("conn").textContent = "disconnected: reload the page"; $("conn").className = "badge bad";
  };
  ws.onmessage = (ev) => {
    const msg = JSON.parse(ev.data);
    if (msg.type === "frame") onFrame(msg);
    else if (msg.type === "bus") onBus(msg);
    else if (msg.type === "hello") onHello(msg);
    else if (msg.type === "motion") onMotion(msg);
    else if (msg.type === "error") { window.consoleStats.errors.push(msg.why); say(msg.why, true);
      if (msg.about === "hold") stopAllHolds(false); }
  };
  setInterval(() => send({ type: "ping" }), 250);
}
function send(msg) { if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify(msg)); }

function onHello(msg) {
  state.hello = msg;
  $("self").textContent = msg.self === null ? "anonymous (listening only)" : `console node ${msg.self}`;
  $("motion-flag").textContent = msg.allow_motion ? "motion allowed" : "motion off (--allow-motion)";
  $("motion-flag").className = msg.allow_motion ? "badge on" : "badge off";
}

// ------------------------------------------------------------------ the bus

function onBus(msg) {
  const first = state.bus === null;
  state.bus = msg;
  const tb = $("bus").tBodies[0];
  tb.replaceChildren(...msg.nodes.map((n) => el("tr", { id: `node-${n.node_id}` },
    el("td", {}, n.node_id), el("td", {}, n.name ?? "…"), el("td", {}, n.version ?? ""),
    n.offline ? el("td", { class: "health-3" }, "offline") : el("td", { class: `health-${n.health}` }, HEALTH[n.health] ?? n.health),
    el("td", {}, MODE[n.mode] ?? n.mode),
    el("td", {}, `${n.uptime} s`), el("td", {}, n.vssc),
    el("td", {}, ports(n.ports && n.ports.publishers)), el("td", {}, ports(n.ports && n.ports.subscribers)),
    el("td", {}, n.servo === null ? "…" : n.servo ? n.axes.map((a) => a.key).join(", ") : "—"))));
  renderAxes(msg);
  renderNodeChoices(msg);
  const log = $("log");
  log.replaceChildren(...msg.diagnostics.slice().reverse().map((d) =>
    el("li", {}, `${new Date(d.t * 1000).toLocaleTimeString()} node ${d.node_id}: ${d.text}`)));
  $("record-state").textContent = msg.recording ? "recording…" : $("record-state").textContent;
  window.consoleStats.received = msg.received;
  if (first) say(`${msg.nodes.length} nodes on the bus`);
}
function ports(list) { return list === undefined || list === null ? "" : list === "all" ? "all" : list.join(" "); }
function allAxes() { return state.bus ? state.bus.nodes.flatMap((n) => n.axes) : []; }

function renderAxes(msg) {
  const tb = $("axes").tBodies[0];
  const allowed = state.hello && state.hello.allow_motion;
  const present = new Set(allAxes().map((a) => `axis-${a.key}`));
  const offline = new Set(state.bus ? state.bus.nodes.filter((n) => n.offline).map((n) => n.node_id) : []);
  for (const row of [...tb.rows]) if (!present.has(row.id)) row.remove();  // A node gone, or restarted.
  for (const a of allAxes()) {
    let row = $(`axis-${a.key}`);
    if (!row) { row = axisRow(a); tb.append(row); }
    const servo = (a.status && a.status.servo) || {};
    const st = row.querySelector(".state");
    const shown = offline.has(a.node_id) ? "offline" : servo.state;
    st.textContent = shown ?? "…"; st.className = `state state-${shown}`;
    const error = row.querySelector(".error");
    error.textContent = error.title = servo.error ? `${servo.error}: ${servo.reason ?? ""}` : "";
    row.querySelector(".limits").textContent =
      `v ${fmt(a.velocity[0])}..${fmt(a.velocity[1])} ${a.unit}/s, a ${fmt(a.acceleration[0])}..${fmt(a.acceleration[1])}, ` +
      `j ${fmt(a.jerk)}, deadman ${fmt(a.deadman_s)} s`;
    for (const b of row.querySelectorAll("button")) b.disabled = !allowed;
    const arm = row.querySelector(".arm");
    if (arm) arm.textContent = msg.armed.includes(a.key) ? "disarm" : "arm";
  }
  $("coord-hold").disabled = !allowed || state.plotKeys.length < 2;
}

function axisRow(a) {
  const plot = el("input", { type: "checkbox", class: "plot", onchange: (e) => togglePlot(a.key, e.target.checked) });
  const speed = el("input", { class: "speed", type: "number", step: "any", value: fmt(0.2 * a.velocity[1]) });
  const target = el("input", { class: "target", type: "number", step: "any", value: "0" });
  const title = "motion needs the console started with --allow-motion";
  const jog = (sign, label) => holdButton(label, `jog-${sign > 0 ? "fwd" : "rev"}`, () => ({
    kind: "jog", axes: [a.key], params: { velocity: sign * Math.abs(parseFloat(speed.value)) } }));
  const cells = [
    jog(-1, "◀ hold"), speed, jog(+1, "hold ▶"), " ",
    target, holdButton("hold to go", "goto", () => ({ kind: "goto", axes: [a.key], params: { target: parseFloat(target.value) } })),
    " ", el("button", { class: "rearm", title, onclick: () => command(a.node_id, "rearm", a.name) }, "re-arm"),
  ];
  if (a.readiness !== null) cells.unshift(el("button", { class: "arm", title,
    onclick: (e) => send({ type: "arm", axis: a.key, engaged: e.target.textContent === "arm" }) }, "arm"), " ");
  return el("tr", { id: `axis-${a.key}` }, el("td", {}, plot), el("td", {}, a.key), el("td", { class: "motion" }, ...cells),
    el("td", { class: "state" }), el("td", { class: "error" }), el("td", { class: "limits" }));
}

// ------------------------------------------------------------------ hold-to-move

function holdButton(label, cls, make) {
  const b = el("button", { class: `hold ${cls}`, disabled: true }, label);
  b.addEventListener("pointerdown", (e) => { if (e.button === 0) { e.preventDefault(); startHold(b, make()); } });
  for (const ev of ["pointerup", "pointercancel", "pointerleave", "lostpointercapture"]) {
    b.addEventListener(ev, () => stopHold(b));
  }
  b.addEventListener("contextmenu", (e) => e.preventDefault());
  return b;
}
function startHold(button, msg) {
  stopHold(button);
  const renew = () => send({ type: "hold", ...msg });
  renew();
  button.classList.add("active");
  state.holds.set(button, { msg, timer: setInterval(renew, 1000 * (state.hello ? state.hello.renew_s : 0.05)) });
}
function stopHold(button, tell = true) {
  const h = state.holds.get(button);
  if (!h) return;
  clearInterval(h.timer);
  state.holds.delete(button);
  button.classList.remove("active");
  if (tell) send({ type: "release", axes: h.msg.axes });
}
function stopAllHolds(tell = true) { for (const b of [...state.holds.keys()]) stopHold(b, tell); }
// Leaving the control, the window or the tab ends every hold at once.
window.addEventListener("blur", () => stopAllHolds());
window.addEventListener("pagehide", () => stopAllHolds());
document.addEventListener("visibilitychange", () => { if (document.hidden) stopAllHolds(); });

function onMotion(msg) {
  if (msg.state === "arrived") $("coord-result").textContent = msg.table;
  else if (msg.state === "refused") { say(msg.why, true); $("coord-result").textContent = msg.why; }
  else if (msg.state === "ended") say(`motion of ${msg.keys.join(", ")} ended: ${msg.why}`);
}

function renderCoord() {
  $("coord-targets").replaceChildren(...state.plotKeys.map((k) =>
    el("label", {}, `${k} `, el("input", { class: "coord-target", "data-key": k, type: "number", step: "any", value: "0", size: 5 }))));
}
holdButtonInit();
function holdButtonInit() {
  const b = $("coord-hold");
  b.addEventListener("pointerdown", (e) => {
    if (e.button !== 0) return;
    e.preventDefault();
    const targets = [...document.querySelectorAll(".coord-target")].map((i) => parseFloat(i.value));
    startHold(b, { kind: "coord", axes: state.plotKeys.slice(), params: { targets, sync: $("coord-sync").value } });
  });
  for (const ev of ["pointerup", "pointercancel", "pointerleave", "lostpointercapture"]) b.addEventListener(ev, () => stopHold(b));
}

async function command(nodeId, name, axis) {
  try {
    const res = await api("POST", `/api/nodes/${nodeId}/command`, { command: name, axis });
    say(`node ${nodeId}: ${name}: ${res.status}`, res.status !== "SUCCESS");
  } catch (e) { say(`node ${nodeId}: ${name}: ${e.message}`, true); }
}

// ------------------------------------------------------------------ plots

function togglePlot(key, on) {
  state.plotKeys = on ? [...new Set([...state.plotKeys, key])] : state.plotKeys.filter((k) => k !== key);
  subscribe();
}
function subscribe() {
  const width = Math.max(300, Math.floor($("charts").clientWidth / (window.innerWidth > 1200 ? 2 : 1)) - 60);
  state.bucketS = state.windowS / width;
  state.store = { x: [], cols: {}, lim: {}, n: Math.ceil(state.windowS / state.bucketS) };
  for (const k of state.plotKeys) state.store.cols[k] = { p: [], v: [], f: [], pr: [], vr: [], e: [], vmin: [], vmax: [], fmax: [] };
  send({ type: "plot", axes: state.plotKeys, window_s: state.windowS, width });
  buildCharts();
  renderCoord();
  if (state.bus) renderAxes(state.bus);
}

function put(b, key, col, value) {
  const s = state.store;
  if (s.x.length === 0 || b - s.x[s.x.length - 1] > s.n) {  // The first sample, or a gap longer than the window.
    s.x = [b];
    for (const c of Object.values(s.cols)) for (const name in c) c[name] = [null];
  }
  let last = s.x[s.x.length - 1];
  while (last < b) {
    s.x.push(++last);
    for (const [k, c] of Object.entries(s.cols)) {
      for (const name in c) c[name].push(null);
      const lim = s.lim[k];
      if (lim) { const i = c.vmin.length - 1; c.vmin[i] = lim[0]; c.vmax[i] = lim[1]; c.fmax[i] = lim[4]; }
    }
  }
  const i = b - s.x[0];
  if (i >= 0 && s.cols[key]) s.cols[key][col][i] = value;
}

function onFrame(msg) {
  const stats = window.consoleStats;
  const recv = now();
  stats.frames++;
  if (!state.store || Math.abs(msg.bucket_s - state.bucketS) > 1e-12) return;  // Of an older subscription.
  const bs = msg.bucket_s;
  for (const [k, lim] of Object.entries(msg.lim)) state.store.lim[k] = lim;
  for (const [k, a] of Object.entries(msg.axes)) {
    for (let i = 0; i < a.t.length; i++) {
      const b = Math.floor(a.t[i] / bs);
      put(b, k, "p", a.p[i]); put(b, k, "v", a.v[i]); put(b, k, "f", a.f[i]);
      stats.latencies.push(recv - a.t[i]);
    }
    stats.samples += a.t.length;
    if (a.p.length) {
      stats.lastPosition[k] = a.p[a.p.length - 1];
      stats.serverLag.push(msg.sent_at - a.t[a.t.length - 1]);
      stats.transport.push(recv - msg.sent_at);
    }
  }
  for (const [k, r] of Object.entries(msg.ref)) {
    for (let i = 0; i < r.t.length; i++) {
      const b = Math.floor(r.t[i] / bs);
      put(b, k, "pr", r.p[i]); put(b, k, "vr", r.v[i]); put(b, k, "e", r.e[i]);
    }
  }
  if (stats.latencies.length > 50000) stats.latencies.splice(0, 25000);
  const s = state.store, extra = s.x.length - s.n;
  if (extra > 0) {
    s.x.splice(0, extra);
    for (const c of Object.values(s.cols)) for (const name in c) c[name].splice(0, extra);
  }
  state.dirty = true;
}

const CHARTS = [
  { title: "position", cols: [["p", ""], ["pr", "ref", [6, 4]]] },
  { title: "velocity", cols: [["v", ""], ["vr", "ref", [6, 4]], ["vmin", "min", [2, 3]], ["vmax", "max", [2, 3]]] },
  { title: "torque / force", cols: [["f", ""], ["fmax", "limit", [2, 3]]] },
  { title: "following error (reference − measured)", cols: [["e", ""]] },
];
function buildCharts() {
  for (const c of state.charts) c.plot.destroy();
  state.charts = [];
  const box = $("charts");
  box.replaceChildren();
  const width = Math.max(300, Math.floor(box.clientWidth / (window.innerWidth > 1200 ? 2 : 1)) - 10);
  for (const spec of CHARTS) {
    const series = [{}];
    const cols = [];
    state.plotKeys.forEach((k, ai) => {
      for (const [col, label, dash] of spec.cols) {
        series.push({ label: `${k} ${label}`.trim(), stroke: COLORS[ai % COLORS.length], width: dash ? 1 : 1.5,
          dash, spanGaps: true, points: { show: col === "e" } });
        cols.push([k, col]);
      }
    });
    const div = el("div", { class: "chart", "data-title": spec.title });
    box.append(div);
    const opts = { title: spec.title, width, height: 220, series,
      scales: { x: { time: true } }, cursor: { drag: { x: true, y: false } },
      axes: [{}, { size: 60, values: (_u, splits) => splits.map(tick) }],
      hooks: { setSelect: [() => { state.paused = true; $("pause").textContent = "resume"; }] } };
    const plot = new uPlot(opts, [[]].concat(cols.map(() => [])), div);
    state.charts.push({ plot, cols });
  }
}

function draw() {
  const stats = window.consoleStats;
  if (state.dirty && !state.paused && state.store) {
    state.dirty = false;
    const s = state.store, xs = s.x.map((b) => b * state.bucketS);
    for (const c of state.charts) c.plot.setData([xs, ...c.cols.map(([k, col]) => s.cols[k][col])]);
    stats.draws++;
  }
  requestAnimationFrame(draw);
}
let lastDraws = 0;
setInterval(() => {
  const stats = window.consoleStats;
  stats.fps = stats.draws - lastDraws; lastDraws = stats.draws;
  $("fps").textContent = state.plotKeys.length ? `${stats.fps} frames/s` : "";
}, 1000);

$("window").addEventListener("change", (e) => { state.windowS = parseFloat(e.target.value); subscribe(); });
$("pause").addEventListener("click", () => {
  state.paused = !state.paused;
  $("pause").textContent = state.paused ? "resume" : "pause";
  if (!state.paused) { for (const c of state.charts) c.plot.setScale("x", { min: null, max: null }); state.dirty = true; }
});
$("record").addEventListener("click", async () => {
  try {
    if (!state.recording) {
      const res = await api("POST", "/api/record", { action: "start", axes: state.plotKeys });
      state.recording = true; $("record").textContent = "stop recording";
      $("record-state").textContent = `recording ${res.recording.join(", ")}…`;
    } else {
      const res = await api("POST", "/api/record", { action: "stop" });
      state.recording = false; $("record").textContent = "record";
      const link = await download(res.url, res.name);
      $("record-state").replaceChildren(`${res.rows} rows written to ${res.file} `, link);
    }
  } catch (e) { say(e.message, true); }
});
async function download(url, name) {
  const res = await fetch(url, { headers: { "X-Console-Token": TOKEN } });
  const href = URL.createObjectURL(await res.blob());
  return el("a", { href, download: name }, "download");
}

// ------------------------------------------------------------------ registers

function renderNodeChoices(msg) {
  const sel = $("reg-node");
  const label = (n) => `${n.node_id} ${n.name ?? ""}`;
  const want = msg.nodes.map((n) => String(n.node_id));
  const have = [...sel.options].map((o) => o.textContent).filter((_, i) => i < sel.options.length - 1);
  if (msg.nodes.map(label).join() === have.join()) return;
  const chosen = sel.value;
  sel.replaceChildren(...msg.nodes.map((n) => el("option", { value: n.node_id }, label(n))),
    el("option", { value: "servos" }, "every servo"));
  if ([...want, "servos"].includes(chosen)) sel.value = chosen;
}
function chosenNodes() {
  const v = $("reg-node").value;
  if (v === "servos") return state.bus.nodes.filter((n) => n.servo).map((n) => n.node_id);
  return v ? [parseInt(v, 10)] : [];
}
function flags(r) { return (r.mutable ? "mutable" : "read-only") + (r.persistent ? ", persistent" : ""); }
function shown(r) { return typeof r.value === "string" ? r.value : JSON.stringify(r.value); }

async function loadRegisters() {
  const ids = chosenNodes();
  if (ids.length !== 1) { say("choose one node to table its registers (every servo: use the table across servos)", true); return; }
  const id = ids[0];
  const contains = $("reg-filter").value.trim();
  $("reg-state").textContent = `reading node ${id}${contains ? ` (names with "${contains}")` : ""}…`;
  try {
    state.registers = await api("GET", `/api/nodes/${id}/registers?contains=${encodeURIComponent(contains)}`);
    state.registersOf = id;
    renderRegisters();
    $("reg-state").textContent = `node ${id}: ${Object.keys(state.registers).length} registers`;
  } catch (e) { $("reg-state").textContent = e.message; }
}
function renderRegisters() {
  const filter = $("reg-filter").value.trim();
  const tb = $("registers").tBodies[0];
  const rows = Object.entries(state.registers).filter(([n]) => !filter || n.includes(filter));
  tb.replaceChildren(...rows.map(([name, r]) => registerRow(state.registersOf, name, r)));
}
function registerRow(nodeId, name, r) {
  const reason = el("span", { class: "reason" });
  let value;
  if (r.mutable) {
    const input = el("input", { class: "value", value: shown(r) });
    const go = async () => {
      reason.textContent = "writing…"; reason.className = "reason";
      const text = input.value;
      const res = await api("POST", `/api/nodes/${nodeId}/registers`, { name, value: r.kind === "string" ? text : text })
        .catch((e) => ({ ok: false, reason: e.message, register: null }));
      if (res.register) { state.registers[name] = res.register; input.value = shown(res.register); }
      reason.textContent = res.ok ? "written" : `refused: ${res.reason}`;
      reason.className = `reason ${res.ok ? "written" : "refused"}`;
      say(res.ok ? `node ${nodeId}: ${name} written` : `node ${nodeId}: ${name}: ${res.reason}`, !res.ok);
    };
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
    value = el("td", { class: "value" }, input, " ", el("button", { class: "write", onclick: go }, "write"));
  } else {
    value = el("td", { class: "value" }, shown(r));
  }
  return el("tr", { id: `reg-${nodeId}-${name}`, "data-name": name }, el("td", {}, name), el("td", {}, r.type),
    el("td", {}, flags(r)), value, el("td", {}, reason));
}

async function loadAcross() {
  const name = $("across-name").value.trim();
  const servos = state.bus ? state.bus.nodes.filter((n) => n.servo) : [];
  const head = $("across").tHead, body = $("across").tBodies[0] || $("across").createTBody();
  head.replaceChildren(el("tr", {}, el("th", {}, "register"), ...servos.map((n) => el("th", {}, `node ${n.node_id}`)),
    el("th", {}, "every servo")));
  const cells = await Promise.all(servos.map(async (n) => {
    try {
      const one = await api("GET", `/api/nodes/${n.node_id}/registers?name=${encodeURIComponent(name)}`);
      const r = one[name];
      return r && r.kind ? registerRow(n.node_id, name, r).querySelector("td.value") : el("td", { class: "dim" }, "none");
    } catch (e) { return el("td", { class: "refused" }, e.message); }
  }));
  const all = el("input", { class: "value", placeholder: "one value for the row" });
  const setAll = el("button", { onclick: async () => {
    const results = await Promise.all(servos.map((n) => api("POST", `/api/nodes/${n.node_id}/registers`, { name, value: all.value })
      .catch((e) => ({ ok: false, reason: e.message }))));
    $("across-state").textContent = results.map((r, i) => `node ${servos[i].node_id}: ${r.ok ? "written" : r.reason}`).join("; ");
    loadAcross();
  } }, "write to every servo");
  body.replaceChildren(el("tr", {}, el("td", {}, name), ...cells, el("td", {}, all, " ", setAll)));
}

$("reg-load").addEventListener("click", loadRegisters);
$("reg-filter").addEventListener("input", renderRegisters);
$("across-load").addEventListener("click", loadAcross);
$("reg-store").addEventListener("click", () => chosenNodes().forEach((n) => command(n, "store")));
$("reg-restart").addEventListener("click", () => {
  const ids = chosenNodes();
  if (ids.length && confirm(`restart node ${ids.join(", ")}? A servo stops its joint first.`)) ids.forEach((n) => command(n, "restart"));
});
$("reg-export").addEventListener("click", async () => {
  const ids = chosenNodes();
  $("reg-state").textContent = `exporting node ${ids.join(", ")}…`;
  try {
    const doc = await api("GET", `/api/registers?nodes=${ids.join(",")}`);
    const href = URL.createObjectURL(new Blob([JSON.stringify(doc, null, 1)], { type: "application/json" }));
    const name = `registers-${ids.join("-")}.json`;
    $("reg-state").replaceChildren(`node ${ids.join(", ")}: `, el("a", { href, download: name, id: "export-link" }, name));
  } catch (e) { $("reg-state").textContent = e.message; }
});
$("reg-import").addEventListener("change", async (e) => {
  const file = e.target.files[0];
  if (!file) return;
  try {
    const doc = JSON.parse(await file.text());
    const inFile = Object.keys(doc.nodes || {});
    const ids = chosenNodes();
    let remap = {};
    if (inFile.length === 1 && ids.length === 1 && String(ids[0]) !== inFile[0]) {
      if (!confirm(`the file holds node ${inFile[0]}'s registers: write them to node ${ids[0]}?`)) return;
      remap = { [inFile[0]]: ids[0] };
    }
    const results = await api("POST", "/api/registers", { document: doc, remap });
    const count = (k) => results.filter((r) => r.result === k).length;
    const refused = results.filter((r) => r.result === "refused").map((r) => `${r.node_id} ${r.name}: ${r.reason}`);
    $("reg-state").textContent = `imported: ${count("written")} written, ${count("same")} unchanged, ${refused.length} refused` +
      (refused.length ? ` (${refused.join("; ")})` : "");
  } catch (err) { $("reg-state").textContent = `import: ${err.message}`; }
  e.target.value = "";
});

connect();
requestAnimationFrame(draw);
