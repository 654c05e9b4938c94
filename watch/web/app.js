// The tvmq dashboard: polls /api/queues every second (the table, sorted and
// filtered by the server; the chosen queues by id), keeps the last minutes
// of the chosen queues here, and draws them. Names are shown as text, never
// as HTML.
"use strict";

const HISTORY_MS = 5 * 60 * 1000;
const MAX_CHOSEN = 8;
const TABLE_ROWS = 50;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];

const state = {
  sort: "depth",
  filter: "",
  chosen: [],        // ids, in the order chosen
  autoChosen: false, // the first answer chose some, so that charts show at once
  history: new Map(), // id -> [{t, depth, push, pop}]
  names: new Map(),
  lastServer: null,   // {t, commands_total}
};

const $ = (id) => document.getElementById(id);

function fmt(n) {
  if (n === null || n === undefined) return "-";
  if (typeof n !== "number") return String(n);
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(2) + " G";
  if (a >= 1e6) return (n / 1e6).toFixed(2) + " M";
  if (a >= 1e4) return (n / 1e3).toFixed(1) + " k";
  if (Number.isInteger(n)) return String(n);
  return n.toFixed(a >= 100 ? 0 : 1);
}

function ago(ns, nowNs) {
  if (!ns) return "never";
  const s = Math.max(0, (nowNs - ns) / 1e9);
  return s < 1 ? "now" : s < 120 ? s.toFixed(0) + " s ago" : (s / 60).toFixed(0) + " min ago";
}

async function get(url) {
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) throw new Error(url + ": " + r.status + " " + (await r.text()));
  return r.json();
}

function card(parent, key, value, testid) {
  const d = document.createElement("div");
  d.className = "card";
  const v = document.createElement("div");
  v.className = "v";
  v.textContent = value;
  if (testid) v.dataset.k = testid;
  const k = document.createElement("div");
  k.className = "k";
  k.textContent = key;
  d.append(v, k);
  parent.append(d);
}

function renderCards(all) {
  const c = $("cards");
  c.replaceChildren();
  const t = all.totals;
  card(c, "queues", fmt(all.total), "queues");
  card(c, "records queued", fmt(t.depth), "depth");
  card(c, "push/s", fmt(t.push_rate), "push_rate");
  card(c, "pop/s", fmt(t.pop_rate), "pop_rate");
  card(c, "leases in flight", fmt(t.leases_in_flight), "leases_in_flight");
  card(c, "dead-lettered", fmt(t.dead_lettered), "dead_lettered");
  if (all.unreadable) card(c, "unreadable queue files", fmt(all.unreadable), "unreadable");
  const s = $("server-cards");
  s.replaceChildren();
  const srv = all.server;
  if (!srv) return;
  const now = Date.now();
  let cps = null;
  if (state.lastServer && now > state.lastServer.t) {
    cps = (srv.commands_total - state.lastServer.commands_total) / ((now - state.lastServer.t) / 1000);
  }
  state.lastServer = { t: now, commands_total: srv.commands_total };
  card(s, "server: clients", fmt(srv.connected_clients), "connected_clients");
  card(s, "blocked clients", fmt(srv.blocked_clients), "blocked_clients");
  card(s, "commands/s", fmt(cps), "commands_rate");
  card(s, "commands", fmt(srv.commands_total), "commands_total");
  const top = Object.entries(srv.commands || {}).sort((a, b) => b[1] - a[1]).slice(0, 4);
  if (top.length) card(s, "most run", top.map(([n, v]) => n + " " + fmt(v)).join(", "), "top_commands");
  card(s, "auth failures", fmt(srv.auth_failures_total), "auth_failures");
  card(s, "rejected connections", fmt(srv.rejected_connections_total), "rejected_connections");
  if (srv.leases) {
    card(s, "leases granted", fmt(srv.leases.granted), "leases_granted");
    card(s, "leases acked", fmt(srv.leases.acked), "leases_acked");
  }
}

function renderTable(all) {
  const body = document.querySelector("#queues tbody");
  body.replaceChildren();
  for (const q of all.queues) {
    const tr = document.createElement("tr");
    tr.dataset.id = q.id;
    tr.dataset.depth = q.depth;
    if (state.chosen.includes(q.id)) tr.className = "chosen";
    const cell = (text, cls) => {
      const td = document.createElement("td");
      if (cls) td.className = cls;
      td.textContent = text;
      tr.append(td);
      return td;
    };
    cell(String(q.id));
    cell(q.name, "name");
    const fill = q.capacity ? q.depth / q.capacity : 0;
    const td = cell("");
    const bar = document.createElement("span");
    bar.className = "bar";
    const i = document.createElement("i");
    i.style.width = Math.min(100, fill * 100).toFixed(1) + "%";
    if (fill >= 0.9) i.className = "full";
    bar.append(i);
    td.append(bar, document.createTextNode(fmt(q.depth) + " / " + fmt(q.capacity)));
    cell(fmt(q.push_rate));
    cell(fmt(q.pop_rate));
    cell(fmt(q.waiters));
    cell(fmt(q.processes));
    cell(q.leases ? fmt(q.leases_in_flight) + (q.leases_waiting ? " (+" + fmt(q.leases_waiting) + " waiting)" : "") : "-");
    cell(q.leases ? fmt(q.redelivered_rate) : "-");
    cell(q.leases ? fmt(q.dead_lettered) : "-");
    cell(q.durable ? q.durable + ", " + ago(q.last_sync_ns, all.time_ns) : "-");
    tr.addEventListener("click", () => toggle(q.id));
    body.append(tr);
  }
  $("shown").textContent = all.queues.length + " of " + all.matched + " shown" + (all.matched !== all.total ? " (" + all.total + " in all)" : "");
}

function toggle(id) {
  const i = state.chosen.indexOf(id);
  if (i >= 0) state.chosen.splice(i, 1);
  else if (state.chosen.length < MAX_CHOSEN) state.chosen.push(id);
  state.autoChosen = true;
  location.hash = state.chosen.length ? "ids=" + state.chosen.join(",") : "";
  tick(true);
}

function record(chosen, tMs) {
  for (const q of chosen.queues) {
    state.names.set(q.id, q.name);
    let h = state.history.get(q.id);
    if (!h) state.history.set(q.id, (h = []));
    h.push({ t: tMs, depth: q.depth, push: q.push_rate, pop: q.pop_rate });
    while (h.length && h[0].t < tMs - HISTORY_MS) h.shift();
  }
  for (const id of state.history.keys()) if (!state.chosen.includes(id)) state.history.delete(id);
}

// Draws the chosen queues' series on a canvas, over the time this page has
// seen them (one to five minutes) ending at nowMs; dashed series dashed.
function draw(canvas, nowMs, series) {
  const ctx = canvas.getContext("2d");
  let oldest = nowMs;
  for (const s of series) if (s.points.length) oldest = Math.min(oldest, s.points[0].t);
  const spanMs = Math.min(HISTORY_MS, Math.max(60000, Math.ceil((nowMs - oldest) / 60000) * 60000));
  const W = canvas.width, H = canvas.height, L = 56, R = 8, T = 8, B = 22;
  ctx.clearRect(0, 0, W, H);
  let max = 1;
  for (const s of series) for (const p of s.points) if (p.v !== null && p.v > max) max = p.v;
  max *= 1.1;
  ctx.strokeStyle = "#e4e7ec";
  ctx.fillStyle = "#667085";
  ctx.font = "11px system-ui, DejaVu Sans, sans-serif";
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = T + (H - T - B) * (1 - i / 4);
    ctx.beginPath();
    ctx.moveTo(L, y);
    ctx.lineTo(W - R, y);
    ctx.stroke();
    ctx.fillText(fmt((max * i) / 4), 4, y + 4);
  }
  const ticks = spanMs / 60000 > 1 ? spanMs / 60000 : 4;
  for (let m = 0; m <= ticks; m++) {
    const x = L + (W - L - R) * (1 - m / ticks);
    const ago = (m * spanMs) / ticks / 1000;
    ctx.fillText(m ? "-" + (ago >= 60 ? ago / 60 + " min" : ago + " s") : "now", x - 14, H - 6);
  }
  let drawn = 0;
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 2;
    ctx.setLineDash(s.dashed ? [5, 4] : []);
    ctx.beginPath();
    let started = false;
    for (const p of s.points) {
      if (p.v === null) continue;
      const x = L + (W - L - R) * (1 - (nowMs - p.t) / spanMs);
      const y = T + (H - T - B) * (1 - p.v / max);
      if (started) ctx.lineTo(x, y);
      else ctx.moveTo(x, y);
      started = true;
      drawn++;
    }
    ctx.stroke();
  }
  ctx.setLineDash([]);
  canvas.dataset.points = drawn;
  canvas.dataset.series = series.length;
}

function renderCharts(nowMs) {
  const depth = [], rates = [];
  const legend = $("legend");
  legend.replaceChildren();
  state.chosen.forEach((id, i) => {
    const h = state.history.get(id) || [];
    const color = COLORS[i % COLORS.length];
    depth.push({ color, points: h.map((p) => ({ t: p.t, v: p.depth })) });
    rates.push({ color, points: h.map((p) => ({ t: p.t, v: p.push })) });
    rates.push({ color, dashed: true, points: h.map((p) => ({ t: p.t, v: p.pop })) });
    const span = document.createElement("span");
    span.style.setProperty("--c", color);
    const last = h[h.length - 1];
    span.textContent = id + " " + (state.names.get(id) || "") + (last ? ": depth " + fmt(last.depth) : "");
    span.dataset.id = id;
    legend.append(span);
  });
  draw($("depth-chart"), nowMs, depth);
  draw($("rate-chart"), nowMs, rates);
}

let timer = null;
let running = false;
async function tick(now) {
  if (timer) clearTimeout(timer);
  timer = null;
  if (running && now) return;
  running = true;
  try {
    const p = new URLSearchParams({ sort: state.sort, limit: String(TABLE_ROWS) });
    if (state.filter) p.set("match", state.filter);
    const all = await get("/api/queues?" + p);
    if (!state.autoChosen && !state.chosen.length) {
      state.chosen = all.queues.slice(0, 3).map((q) => q.id);
      state.autoChosen = true;
    }
    const chosen = state.chosen.length ? await get("/api/queues?limit=" + MAX_CHOSEN + "&ids=" + state.chosen.join(",")) : { queues: [] };
    const tMs = Date.now();
    record(chosen, tMs);
    $("dir").textContent = all.dir;
    $("status").textContent = "updated " + new Date(all.time_ns / 1e6).toLocaleTimeString() + ", read in " + all.sample_ms.toFixed(1) + " ms";
    $("status").className = "muted";
    renderCards(all);
    renderTable(all);
    renderCharts(tMs);
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  } catch (e) {
    $("status").textContent = "error: " + e.message;
    $("status").className = "error";
  } finally {
    running = false;
    timer = setTimeout(tick, 1000);
  }
}

function start() {
  const m = /ids=([\d,]+)/.exec(location.hash);
  if (m) {
    state.chosen = m[1].split(",").filter(Boolean).map(Number).slice(0, MAX_CHOSEN);
    state.autoChosen = true;
  }
  $("sort").value = state.sort;
  $("sort").addEventListener("change", (e) => { state.sort = e.target.value; tick(true); });
  $("filter").addEventListener("input", (e) => { state.filter = e.target.value.trim(); tick(true); });
  tick(true);
}

start();
