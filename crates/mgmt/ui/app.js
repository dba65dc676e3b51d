// Warren management UI: plain JavaScript, hash routing, charts drawn on <canvas>.
// Talks to the management HTTP API on the same origin with basic auth built from the login
// form (kept in sessionStorage, so it goes away with the tab).
"use strict";

const SAMPLE_MS = 3000; // overview and per-queue sampling period
const WINDOW_S = 300; // charts show the last five minutes
const MAX_POINTS = Math.ceil((WINDOW_S * 1000) / SAMPLE_MS) + 1;
const REFRESH_MS = 5000; // list pages
const AUTH_KEY = "warren.auth";
const USER_KEY = "warren.user";
const ROWS_MAX = 500;

const COLORS = {
  ready: "#e8702a",
  unacked: "#2f7ed8",
  total: "#8a5cd1",
  publish: "#e8702a",
  deliver: "#2ea65a",
  ack: "#2f7ed8",
  confirm: "#8a5cd1",
  redeliver: "#d64545",
};

// ---------------------------------------------------------------- helpers

const $ = (sel, root) => (root || document).querySelector(sel);
const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));

function esc(value) {
  return String(value === undefined || value === null ? "" : value)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}

function fmtNum(n) {
  if (n === undefined || n === null || Number.isNaN(n)) return "–";
  return Number(n).toLocaleString("en-US");
}

function fmtRate(r) {
  if (r === undefined || r === null) return "–";
  const v = Number(r);
  if (v === 0) return "0.0/s";
  return (v >= 100 ? Math.round(v).toLocaleString("en-US") : v.toFixed(1)) + "/s";
}

function fmtBytes(b) {
  if (b === undefined || b === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(b);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v : v.toFixed(v >= 100 ? 0 : 1)) + " " + units[i];
}

function fmtUptime(ms) {
  let s = Math.floor((ms || 0) / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

function fmtTime(ms) {
  if (!ms) return "–";
  const d = new Date(ms);
  return d.toLocaleDateString("en-CA") + " " + d.toLocaleTimeString("en-GB");
}

function rateOf(obj, key) {
  const d = obj && obj[key + "_details"];
  return d ? d.rate : 0;
}

function enc(s) { return encodeURIComponent(s); }

function vhostLabel(v) { return v === "/" ? "/" : v; }

function features(item) {
  const f = [];
  if (item.durable) f.push(`<span class="feature" title="durable">D</span>`);
  if (item.auto_delete) f.push(`<span class="feature" title="auto-delete">AD</span>`);
  if (item.exclusive) f.push(`<span class="feature" title="exclusive">Excl</span>`);
  if (item.internal) f.push(`<span class="feature" title="internal">I</span>`);
  const args = item.arguments || {};
  for (const k of Object.keys(args)) {
    if (k === "x-queue-type") continue;
    f.push(`<span class="feature" title="${esc(k)}: ${esc(JSON.stringify(args[k]))}">${esc(shortArg(k))}</span>`);
  }
  return f.join("");
}

function shortArg(k) {
  const known = {
    "x-message-ttl": "TTL", "x-expires": "Exp", "x-max-length": "Lim", "x-max-length-bytes": "Lim B",
    "x-dead-letter-exchange": "DLX", "x-dead-letter-routing-key": "DLK", "x-max-priority": "Pri",
    "x-overflow": "Ovfl", "x-single-active-consumer": "SAC", "x-queue-mode": "Mode",
  };
  return known[k] || k.replace(/^x-/, "");
}

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, body) {
    const reason = body && (body.reason || body.error) ? (body.reason || body.error) : `HTTP ${status}`;
    super(reason);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body, auth) {
  const headers = { Authorization: "Basic " + (auth || sessionStorage.getItem(AUTH_KEY) || ""), "X-Warren-UI": "1" };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 15000);
  init.signal = controller.signal;
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, { reason: "cannot reach the broker (" + e.message + ")" });
  } finally {
    clearTimeout(timer);
  }
  const text = await res.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch (_) { data = { reason: text }; } }
  if (!res.ok) {
    if (res.status === 401 && !auth) onUnauthorized(data);
    throw new ApiError(res.status, data);
  }
  return data;
}

const get = (path) => api("GET", path);

function onUnauthorized(data) {
  sessionStorage.removeItem(AUTH_KEY);
  showLogin("Your session is no longer valid: " + ((data && data.reason) || "not authorised"));
}

// ---------------------------------------------------------------- history and charts

function newHistory(keys) {
  const h = { t: [] };
  for (const k of keys) h[k] = [];
  return h;
}

function pushSample(h, values) {
  h.t.push(Date.now());
  for (const k of Object.keys(values)) h[k].push(values[k]);
  while (h.t.length > MAX_POINTS) {
    for (const k of Object.keys(h)) h[k].shift();
  }
}

function niceMax(v) {
  if (v <= 0) return 1;
  const exp = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) {
    if (v <= m * exp) return m * exp;
  }
  return 10 * exp;
}

function shortNum(v) {
  if (v >= 1e9) return (v / 1e9).toFixed(v % 1e9 ? 1 : 0) + "G";
  if (v >= 1e6) return (v / 1e6).toFixed(v % 1e6 ? 1 : 0) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(v % 1e3 ? 1 : 0) + "k";
  return String(Math.round(v * 100) / 100);
}

// drawChart(canvas, history, series): series is [{key, label, color}]. Sets data-points and
// data-last on the canvas (what the end-to-end test reads) and fills the legend beside it.
function drawChart(canvas, h, series, unit) {
  if (!canvas || !canvas.isConnected) return;
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600;
  const hgt = canvas.clientHeight || 220;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(hgt * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(hgt * dpr);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, hgt);
  const pad = { l: 48, r: 10, t: 10, b: 24 };
  const pw = w - pad.l - pad.r;
  const ph = hgt - pad.t - pad.b;
  const now = h.t.length ? h.t[h.t.length - 1] : Date.now();
  // The window grows with the history, from one minute to five, so that a fresh page does
  // not squeeze its first samples against the right edge.
  const spanS = Math.min(WINDOW_S, Math.max(60, Math.ceil(h.t.length ? (now - h.t[0]) / 1000 / 30 : 2) * 30));
  const t0 = now - spanS * 1000;
  let max = 0;
  for (const s of series) for (const v of h[s.key]) max = Math.max(max, v);
  const ymax = niceMax(max);
  const x = (t) => pad.l + ((t - t0) / (spanS * 1000)) * pw;
  const y = (v) => pad.t + ph - (v / ymax) * ph;

  ctx.font = "11px -apple-system, 'Segoe UI', Arial, sans-serif";
  ctx.textBaseline = "middle";
  // Horizontal grid and y labels.
  const rows = 4;
  for (let i = 0; i <= rows; i++) {
    const v = (ymax * i) / rows;
    const yy = Math.round(y(v)) + 0.5;
    ctx.strokeStyle = i === 0 ? "#c9d1dc" : "#edf0f4";
    ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(pad.l, yy); ctx.lineTo(pad.l + pw, yy); ctx.stroke();
    ctx.fillStyle = "#8a94a3";
    ctx.textAlign = "right";
    ctx.fillText(shortNum(v) + (unit || ""), pad.l - 6, yy);
  }
  // Time labels: every 10, 15, 30 or 60 s, whichever gives at most six.
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const step = [10, 15, 30, 60].find((s) => spanS / s <= 6) || 60;
  for (let k = 0; k * step <= spanS; k++) {
    const ago = k * step;
    const xx = Math.round(x(now - ago * 1000)) + 0.5;
    ctx.strokeStyle = "#f2f4f7";
    ctx.beginPath(); ctx.moveTo(xx, pad.t); ctx.lineTo(xx, pad.t + ph); ctx.stroke();
    ctx.fillStyle = "#8a94a3";
    const label = ago === 0 ? "now" : ago % 60 === 0 ? `-${ago / 60}m` : ago > 60 ? `-${Math.floor(ago / 60)}m${ago % 60}s` : `-${ago}s`;
    ctx.fillText(label, Math.min(Math.max(xx, pad.l + 10), pad.l + pw - 12), pad.t + ph + 6);
  }
  const note = canvas.parentElement && canvas.parentElement.querySelector("h2 small");
  if (note) note.textContent = spanS >= 120 ? `last ${Math.round(spanS / 60)} minutes` : `last ${spanS} s`;
  // Series: a filled area under each, then the line on top.
  ctx.save();
  ctx.beginPath(); ctx.rect(pad.l, pad.t - 2, pw, ph + 4); ctx.clip();
  for (const s of series) {
    const vals = h[s.key];
    if (!vals.length) continue;
    ctx.beginPath();
    for (let i = 0; i < vals.length; i++) {
      const px = x(h.t[i]);
      const py = y(vals[i]);
      if (i === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
    }
    if (vals.length > 1) {
      ctx.lineTo(x(h.t[vals.length - 1]), y(0));
      ctx.lineTo(x(h.t[0]), y(0));
      ctx.closePath();
      ctx.fillStyle = s.color + "1f";
      ctx.fill();
      ctx.beginPath();
      for (let i = 0; i < vals.length; i++) {
        const px = x(h.t[i]);
        const py = y(vals[i]);
        if (i === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
      }
      ctx.strokeStyle = s.color;
      ctx.setLineDash(s.dash ? [6, 4] : []);
      ctx.lineWidth = 2;
      ctx.lineJoin = "round";
      ctx.stroke();
      ctx.setLineDash([]);
    }
    const last = vals.length - 1;
    ctx.fillStyle = s.color;
    ctx.beginPath(); ctx.arc(x(h.t[last]), y(vals[last]), 3, 0, Math.PI * 2); ctx.fill();
  }
  ctx.restore();
  canvas._chart = { h, series, unit, x, t0, pad, pw, ph };
  const hover = canvas._hoverIndex;
  if (hover !== undefined && hover !== null && hover < h.t.length) drawHover(ctx, canvas._chart, hover, w);
  if (!h.t.length) {
    ctx.fillStyle = "#8a94a3"; ctx.textAlign = "center"; ctx.textBaseline = "middle";
    ctx.font = "13px -apple-system, 'Segoe UI', Arial, sans-serif";
    ctx.fillText("collecting samples…", pad.l + pw / 2, pad.t + ph / 2);
  }

  const lastValues = {};
  for (const s of series) {
    const vals = h[s.key];
    lastValues[s.key] = vals.length ? vals[vals.length - 1] : null;
  }
  canvas.dataset.points = String(h.t.length);
  canvas.dataset.last = JSON.stringify(lastValues);
  canvas.dataset.max = String(max);
  const legend = canvas.nextElementSibling;
  if (legend && legend.classList.contains("legend")) {
    legend.innerHTML = series.map((s) => {
      const v = lastValues[s.key];
      const shown = v === null ? "–" : unit === "/s" ? fmtRate(v) : fmtNum(v);
      return `<span><span class="sw"></span>${esc(s.label)}<b>${shown}</b></span>`;
    }).join("");
    // Colours go through the CSSOM: the Content-Security-Policy refuses style attributes.
    legend.querySelectorAll(".sw").forEach((sw, i) => { sw.style.background = series[i].color; });
  }
}

function drawHover(ctx, c, i, w) {
  const xx = Math.round(c.x(c.h.t[i])) + 0.5;
  ctx.strokeStyle = "#9aa5b4";
  ctx.setLineDash([3, 3]);
  ctx.beginPath(); ctx.moveTo(xx, c.pad.t); ctx.lineTo(xx, c.pad.t + c.ph); ctx.stroke();
  ctx.setLineDash([]);
  const lines = [new Date(c.h.t[i]).toLocaleTimeString("en-GB")].concat(c.series.map((s) => {
    const v = c.h[s.key][i];
    return `${s.label}: ${c.unit === "/s" ? fmtRate(v) : fmtNum(v)}`;
  }));
  ctx.font = "12px -apple-system, 'Segoe UI', Arial, sans-serif";
  const bw = Math.max(...lines.map((l) => ctx.measureText(l).width)) + 32;
  const bh = lines.length * 17 + 10;
  const bx = xx + 12 + bw > w ? xx - 12 - bw : xx + 12;
  ctx.fillStyle = "rgba(22, 32, 46, .92)";
  ctx.beginPath();
  if (ctx.roundRect) ctx.roundRect(bx, c.pad.t + 4, bw, bh, 6); else ctx.rect(bx, c.pad.t + 4, bw, bh);
  ctx.fill();
  ctx.textAlign = "left";
  ctx.textBaseline = "top";
  lines.forEach((l, k) => {
    ctx.fillStyle = k === 0 ? "#aab4c3" : c.series[k - 1].color;
    if (k > 0) ctx.fillRect(bx + 8, c.pad.t + 12 + k * 17, 8, 8);
    ctx.fillStyle = k === 0 ? "#aab4c3" : "#ffffff";
    ctx.fillText(l, bx + (k === 0 ? 8 : 22), c.pad.t + 10 + k * 17);
  });
}

// One mouse handler for every chart: the nearest sample under the pointer is shown.
document.addEventListener("mousemove", (e) => {
  const canvas = e.target;
  for (const other of $$("canvas.chart")) {
    if (other !== canvas && other._hoverIndex !== undefined && other._hoverIndex !== null) {
      other._hoverIndex = null;
      redraw(other);
    }
  }
  if (!(canvas instanceof HTMLCanvasElement) || !canvas._chart) return;
  const c = canvas._chart;
  const px = e.clientX - canvas.getBoundingClientRect().left;
  let best = null;
  let bestDist = Infinity;
  c.h.t.forEach((t, i) => {
    const d = Math.abs(c.x(t) - px);
    if (d < bestDist) { bestDist = d; best = i; }
  });
  if (best !== canvas._hoverIndex) { canvas._hoverIndex = best; redraw(canvas); }
});

function redraw(canvas) {
  const c = canvas._chart;
  if (c) drawChart(canvas, c.h, c.series, c.unit);
}

function chartCard(id, title, note) {
  return `<div class="card chart-card"><h2>${esc(title)} <small>${esc(note || "last 5 minutes")}</small></h2>
    <canvas class="chart" id="${id}"></canvas><div class="legend"></div></div>`;
}

const MSG_SERIES = [
  { key: "ready", label: "Ready", color: COLORS.ready },
  { key: "unacked", label: "Unacked", color: COLORS.unacked },
  { key: "total", label: "Total", color: COLORS.total, dash: true },
];
const RATE_SERIES = [
  { key: "publish", label: "Publish", color: COLORS.publish },
  { key: "deliver", label: "Deliver / get", color: COLORS.deliver },
  { key: "ack", label: "Consumer ack", color: COLORS.ack, dash: true },
  { key: "confirm", label: "Publisher confirm", color: COLORS.confirm },
];
const QUEUE_RATE_SERIES = [
  { key: "publish", label: "Publish", color: COLORS.publish },
  { key: "deliver", label: "Deliver / get", color: COLORS.deliver },
  { key: "ack", label: "Consumer ack", color: COLORS.ack, dash: true },
  { key: "redeliver", label: "Redelivered", color: COLORS.redeliver },
];

// The overview is sampled all the time while logged in, so its charts have history
// whichever page is open; per-queue history is kept for the queues the pages fetch.
const state = {
  overview: null,
  overviewHistory: newHistory(["ready", "unacked", "total", "publish", "deliver", "ack", "confirm"]),
  queueHistory: new Map(),
  sampler: null,
  page: null,
  pageTimer: null,
  vhosts: ["/"],
};

function recordQueue(q) {
  const key = q.vhost + "\u0000" + q.name;
  let h = state.queueHistory.get(key);
  if (!h) {
    if (state.queueHistory.size > 200) state.queueHistory.clear();
    h = newHistory(["ready", "unacked", "total", "publish", "deliver", "ack", "redeliver"]);
    state.queueHistory.set(key, h);
  }
  const ms = q.message_stats || {};
  pushSample(h, {
    ready: q.messages_ready || 0,
    unacked: q.messages_unacknowledged || 0,
    total: q.messages || 0,
    publish: rateOf(ms, "publish"),
    deliver: rateOf(ms, "deliver_get"),
    ack: rateOf(ms, "ack"),
    redeliver: rateOf(ms, "redeliver"),
  });
  return h;
}

async function sampleOverview() {
  try {
    const o = await get("/api/overview");
    state.overview = o;
    const qt = o.queue_totals || {};
    const ms = o.message_stats || {};
    pushSample(state.overviewHistory, {
      ready: qt.messages_ready || 0,
      unacked: qt.messages_unacknowledged || 0,
      total: qt.messages || 0,
      publish: rateOf(ms, "publish"),
      deliver: rateOf(ms, "deliver_get"),
      ack: rateOf(ms, "ack"),
      confirm: rateOf(ms, "confirm"),
    });
    $("#cluster").textContent = o.cluster_name || "";
    $("#foot").textContent = `${o.product_name || "Warren"} ${o.product_version || ""} · RabbitMQ management API ${o.management_version || ""}`;
    setStatus(true);
    if (state.page && state.page.onOverview) state.page.onOverview(o);
  } catch (e) {
    setStatus(false, e.message);
  }
}

function setStatus(ok, why) {
  const dot = $("#status-dot");
  dot.className = "dot " + (ok ? "ok" : "bad");
  dot.title = ok ? "Live: sampling every " + SAMPLE_MS / 1000 + " s" : "Refresh failed: " + why;
}

// ---------------------------------------------------------------- small UI pieces

function tile(label, value, hint, id, accent) {
  return `<div class="tile${accent ? " accent" : ""}"><div class="label">${esc(label)}</div>
    <div class="value" ${id ? `id="${id}"` : ""}>${value}</div>${hint ? `<div class="hint">${hint}</div>` : ""}</div>`;
}

function table(columns, rows, emptyText, rowAttrs) {
  const head = columns.map((c) => `<th class="${c.num ? "num" : ""}">${esc(c.title)}</th>`).join("");
  let body;
  if (!rows.length) {
    body = `<tr><td class="empty" colspan="${columns.length}">${esc(emptyText || "Nothing here yet.")}</td></tr>`;
  } else {
    body = rows.map((r) => `<tr ${rowAttrs ? rowAttrs(r) : ""}>` + columns.map((c) =>
      `<td class="${c.num ? "num" : ""}" data-col="${esc(c.key || "")}">${c.render ? c.render(r) : esc(r[c.key])}</td>`).join("") + "</tr>").join("");
  }
  return `<div class="table-wrap"><table><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table></div>`;
}

function showResult(el, ok, text) {
  el.className = "result " + (ok ? "ok" : "bad");
  el.textContent = text;
}

// A destructive button asks for a second click instead of a modal dialog.
function armed(button, action) {
  button.addEventListener("click", async () => {
    if (!button.classList.contains("armed")) {
      const label = button.textContent;
      button.classList.add("armed");
      button.textContent = "Click again to confirm";
      setTimeout(() => { button.classList.remove("armed"); button.textContent = label; }, 4000);
      return;
    }
    button.classList.remove("armed");
    await action();
  });
}

function apiProblem(e, what) {
  if (e.status === 404) return `<div class="notice"><b>${esc(what)}</b> is not served by this broker yet (404).</div>`;
  if (e.status === 401 || e.status === 403) return `<div class="notice">Not allowed: ${esc(e.message)}</div>`;
  return `<div class="notice">Could not load ${esc(what)}: ${esc(e.message)}</div>`;
}

function vhostOptions(selected) {
  return state.vhosts.map((v) => `<option value="${esc(v)}"${v === selected ? " selected" : ""}>${esc(v)}</option>`).join("");
}

async function loadVhosts() {
  try {
    const list = await get("/api/vhosts");
    if (Array.isArray(list) && list.length) state.vhosts = list.map((v) => v.name);
  } catch (_) {
    // Older API without /api/vhosts: the vhosts that the exchanges live in.
    try {
      const ex = await get("/api/exchanges?columns=vhost");
      const names = Array.from(new Set(ex.map((e) => e.vhost))).sort();
      if (names.length) state.vhosts = names;
    } catch (_) { /* keep "/" */ }
  }
}

function readArguments(text) {
  const t = (text || "").trim();
  if (!t) return {};
  if (t.startsWith("{")) return JSON.parse(t);
  const out = {};
  for (const line of t.split(/\n+/)) {
    const m = line.match(/^\s*([^=]+?)\s*=\s*(.*?)\s*$/);
    if (!m) throw new Error(`argument line "${line}" is not key=value`);
    const v = m[2];
    out[m[1]] = /^-?\d+$/.test(v) ? Number(v) : v === "true" ? true : v === "false" ? false : v;
  }
  return out;
}

// ---------------------------------------------------------------- pages

const pages = {};

pages.overview = {
  title: "Overview",
  mount(view) {
    view.innerHTML = `
      <div class="page-head"><div><h1>Overview</h1><div class="sub" id="ov-sub">Live view of the broker</div></div></div>
      <div class="tiles" id="ov-tiles"></div>
      <div class="grid2">
        ${chartCard("chart-messages", "Queued messages")}
        ${chartCard("chart-rates", "Message rates")}
      </div>
      <div class="grid2 mt-16">
        <div class="card"><h2>Node</h2><div id="ov-node" class="muted">loading…</div></div>
        <div class="stack">
          <div class="card"><h2>Alarms</h2><div id="ov-alarms" class="muted">loading…</div></div>
          <div class="card"><h2>Listeners</h2><div id="ov-listeners"></div></div>
        </div>
      </div>`;
    this.draw();
    if (state.overview) this.onOverview(state.overview);
    this.refresh();
  },
  draw() {
    drawChart($("#chart-messages"), state.overviewHistory, MSG_SERIES, "");
    drawChart($("#chart-rates"), state.overviewHistory, RATE_SERIES, "/s");
  },
  onOverview(o) {
    const t = o.object_totals || {};
    const q = o.queue_totals || {};
    $("#ov-tiles").innerHTML =
      tile("Connections", fmtNum(t.connections), "", "tot-connections") +
      tile("Channels", fmtNum(t.channels), "", "tot-channels") +
      tile("Exchanges", fmtNum(t.exchanges), "", "tot-exchanges") +
      tile("Queues", fmtNum(t.queues), "", "tot-queues") +
      tile("Consumers", fmtNum(t.consumers), "", "tot-consumers") +
      tile("Ready", fmtNum(q.messages_ready), "messages", "tot-ready", true) +
      tile("Unacked", fmtNum(q.messages_unacknowledged), "messages", "tot-unacked", true) +
      tile("Publish", fmtRate(rateOf(o.message_stats, "publish")), "incoming", "tot-publish", true);
    $("#ov-sub").textContent = `${o.product_name || "Warren"} ${o.product_version || ""} on ${o.node || ""}`;
    $("#ov-listeners").innerHTML = table(
      [{ title: "Protocol", key: "protocol" }, { title: "Bound to", key: "ip_address" }, { title: "Port", key: "port", num: true }],
      o.listeners || []);
    this.draw();
  },
  async refresh() {
    try {
      const nodes = await get("/api/nodes");
      const n = nodes[0] || {};
      const pct = n.mem_limit ? Math.min(100, (100 * n.mem_used) / n.mem_limit) : 0;
      const cls = n.mem_alarm ? "bad" : pct > 80 ? "warn" : "";
      const headroom = n.disk_free_limit ? n.disk_free / n.disk_free_limit : 0;
      $("#ov-node").innerHTML = `
        <div><b>Memory</b> <span class="muted">${fmtBytes(n.mem_used)} resident of ${fmtBytes(n.mem_limit)} high watermark (${pct.toFixed(1)}%)</span></div>
        <div class="meter ${cls}" id="mem-meter" data-used="${esc(n.mem_used)}" data-limit="${esc(n.mem_limit)}"><div></div></div>
        <div class="mt-12"><b>Disk</b> <span class="muted">${fmtBytes(n.disk_free)} free, alarm below ${fmtBytes(n.disk_free_limit)}</span>
          <span class="badge ${n.disk_free_alarm ? "bad" : headroom < 2 ? "warn" : "ok"}">${n.disk_free_alarm ? "disk alarm" : headroom ? headroom.toFixed(1) + "× the limit" : "–"}</span></div>
        <dl class="kv mt-14">
          <dt>Node</dt><dd>${esc(n.name)}</dd>
          <dt>Uptime</dt><dd>${fmtUptime(n.uptime)}</dd>
          <dt>OS pid</dt><dd>${esc(n.os_pid)}</dd>
          <dt>Cores</dt><dd>${esc(n.processors)}</dd>
          <dt>Plugins</dt><dd>${(n.enabled_plugins || []).map((p) => `<span class="badge tag">${esc(p)}</span>`).join("")}</dd>
        </dl>`;
      $("#mem-meter > div").style.width = pct.toFixed(2) + "%";
    } catch (e) {
      $("#ov-node").innerHTML = apiProblem(e, "/api/nodes");
    }
    const alarms = $("#ov-alarms");
    try {
      await get("/api/health/checks/alarms");
      alarms.innerHTML = `<div class="alarm-ok"><span class="badge ok" id="alarm-status">No alarms</span>
        <span class="muted">memory and disk are within their limits</span></div>`;
    } catch (e) {
      if (e.status === 503) {
        alarms.innerHTML = `<span class="badge bad" id="alarm-status">Alarm</span><p>${esc(e.message)}</p>
          <p class="muted">Publishers are blocked until the alarm clears.</p>`;
      } else if (e.status !== 401) {
        alarms.innerHTML = apiProblem(e, "/api/health/checks/alarms");
      }
    }
  },
  resize() { this.draw(); },
};

// Queues list.
pages.queues = {
  title: "Queues",
  filter: "",
  mount(view) {
    view.innerHTML = `
      <div class="page-head"><div><h1>Queues</h1><div class="sub">Message counts and rates, refreshed every ${REFRESH_MS / 1000} s</div></div></div>
      <div class="card">
        <div class="toolbar"><input type="search" id="q-filter" placeholder="Filter by name" value="${esc(this.filter)}"><span class="count" id="q-count"></span></div>
        <div id="q-table" class="muted">loading…</div>
      </div>
      <div class="card"><details class="section" id="q-add-section"><summary>Add a new queue</summary>
        <form class="form" id="q-add">
          <label>Virtual host <select name="vhost">${vhostOptions("/")}</select></label>
          <label>Name <input name="name" id="q-add-name" required placeholder="orders"></label>
          <label>Type <select name="type"><option value="classic">Classic</option><option value="quorum">Quorum</option></select></label>
          <label>Durability <select name="durable"><option value="true">Durable</option><option value="false">Transient</option></select></label>
          <label>Auto delete <select name="auto_delete"><option value="false">No</option><option value="true">Yes</option></select></label>
          <label class="wide">Arguments <textarea name="arguments" placeholder="x-max-length=1000&#10;x-message-ttl=60000"></textarea></label>
          <div class="actions"><button class="btn primary" type="submit" id="q-add-submit">Add queue</button></div>
        </form><div class="result" id="q-add-result"></div></details></div>`;
    $("#q-filter").addEventListener("input", (e) => { this.filter = e.target.value; this.render(); });
    $("#q-add").addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = new FormData(e.target);
      const out = $("#q-add-result");
      try {
        const args = readArguments(f.get("arguments"));
        args["x-queue-type"] = f.get("type");
        await api("PUT", `/api/queues/${enc(f.get("vhost"))}/${enc(f.get("name"))}`, {
          durable: f.get("durable") === "true", auto_delete: f.get("auto_delete") === "true", arguments: args,
        });
        showResult(out, true, `Queue "${f.get("name")}" declared.`);
        this.refresh();
      } catch (err) {
        showResult(out, false, "Declare failed: " + err.message);
      }
    });
    this.refresh();
  },
  async refresh() {
    try {
      this.items = await get("/api/queues");
      for (const q of this.items) recordQueue(q);
      this.render();
    } catch (e) {
      $("#q-table").innerHTML = apiProblem(e, "/api/queues");
    }
  },
  sortKey: "name",
  sortDesc: false,
  sortValue(q, key) {
    const ms = q.message_stats || {};
    switch (key) {
      case "publish_rate": return rateOf(ms, "publish");
      case "deliver_rate": return rateOf(ms, "deliver_get");
      case "ack_rate": return rateOf(ms, "ack");
      default: return q[key];
    }
  },
  render() {
    const key = this.sortKey;
    const dir = this.sortDesc ? -1 : 1;
    const items = (this.items || []).filter((q) => !this.filter || q.name.includes(this.filter))
      .sort((a, b) => {
        const va = this.sortValue(a, key);
        const vb = this.sortValue(b, key);
        if (typeof va === "number" && typeof vb === "number") return (va - vb) * dir;
        return String(va).localeCompare(String(vb)) * dir;
      });
    const shown = items.slice(0, ROWS_MAX);
    $("#q-count").textContent = `${items.length} of ${(this.items || []).length} queue(s)` + (items.length > ROWS_MAX ? `, first ${ROWS_MAX} shown` : "");
    const link = (q) => `#/queue/${enc(q.vhost)}/${enc(q.name)}`;
    $("#q-table").innerHTML = table([
      { title: "Virtual host", key: "vhost" },
      { title: "Name", key: "name", render: (q) => `<a href="${link(q)}">${esc(q.name)}</a>` },
      { title: "Type", key: "type", render: (q) => esc((q.arguments && q.arguments["x-queue-type"]) || q.type) },
      { title: "Features", key: "features", render: (q) => features(q) },
      { title: "State", key: "state", render: (q) => `<span class="badge ${q.state === "running" ? "ok" : "warn"}">${esc(q.state)}</span>` },
      { title: "Ready", key: "messages_ready", num: true, render: (q) => fmtNum(q.messages_ready) },
      { title: "Unacked", key: "messages_unacknowledged", num: true, render: (q) => fmtNum(q.messages_unacknowledged) },
      { title: "Total", key: "messages", num: true, render: (q) => fmtNum(q.messages) },
      { title: "Incoming", key: "publish_rate", num: true, render: (q) => fmtRate(rateOf(q.message_stats, "publish")) },
      { title: "Deliver / get", key: "deliver_rate", num: true, render: (q) => fmtRate(rateOf(q.message_stats, "deliver_get")) },
      { title: "Ack", key: "ack_rate", num: true, render: (q) => fmtRate(rateOf(q.message_stats, "ack")) },
      { title: "Consumers", key: "consumers", num: true, render: (q) => fmtNum(q.consumers) },
    ], shown, this.filter ? "No queue matches the filter." : "No queues yet.", (q) => `data-queue="${esc(q.name)}" data-vhost="${esc(q.vhost)}"`);
    const keys = ["vhost", "name", "type", null, "state", "messages_ready", "messages_unacknowledged", "messages",
      "publish_rate", "deliver_rate", "ack_rate", "consumers"];
    $$("#q-table th").forEach((th, i) => {
      const k = keys[i];
      if (!k) return;
      th.classList.add("sortable");
      if (k === key) th.classList.add(this.sortDesc ? "desc" : "asc");
      th.title = "Sort by " + th.textContent.toLowerCase();
      th.addEventListener("click", () => {
        if (this.sortKey === k) this.sortDesc = !this.sortDesc;
        else { this.sortKey = k; this.sortDesc = typeof this.sortValue((this.items || [])[0] || {}, k) === "number"; }
        this.render();
      });
    });
  },
};

// A stream's log figures, for the queue page's details.
function streamDetails(q) {
  if (q.type !== "stream") return "";
  const offset = (o) => (o === undefined || o === null || o < 0 ? "–" : fmtNum(o));
  return `<dt>Segments</dt><dd id="qp-segments">${fmtNum(q.segments)}</dd>
    <dt>Size on disk</dt><dd>${fmtBytes(q.message_bytes)}</dd>
    <dt>First offset</dt><dd>${offset(q.first_offset)}</dd>
    <dt>Committed offset</dt><dd>${offset(q.committed_offset)}</dd>
    <dt>First timestamp</dt><dd>${q.first_timestamp > 0 ? fmtTime(q.first_timestamp) : "–"}</dd>`;
}

// One queue.
pages.queue = {
  title: "Queue",
  mount(view, args) {
    this.vhost = args[0];
    this.name = args[1];
    const path = `/api/queues/${enc(this.vhost)}/${enc(this.name)}`;
    this.path = path;
    view.innerHTML = `
      <div class="page-head"><div><div class="crumbs"><a href="#/queues">Queues</a> · virtual host <b>${esc(this.vhost)}</b></div>
        <h1 id="qp-name">${esc(this.name)}</h1><div class="sub" id="qp-sub"></div></div>
        <div class="actions">
          <button class="btn danger" id="qp-purge">Purge messages</button>
          <button class="btn danger" id="qp-delete">Delete queue</button>
        </div></div>
      <div class="result" id="qp-action-result"></div>
      <div class="tiles" id="qp-tiles"></div>
      <div class="grid2">
        ${chartCard("chart-q-messages", "Queued messages")}
        ${chartCard("chart-q-rates", "Message rates")}
      </div>
      <div class="grid2 mt-16">
        <div class="card"><h2>Get messages</h2>
          <p class="muted hint">Getting messages is destructive unless they are requeued.</p>
          <form class="form" id="qp-get">
            <label>Ack mode <select name="ackmode">
              <option value="ack_requeue_true">Nack, requeue</option>
              <option value="reject_requeue_true">Reject, requeue</option>
              <option value="ack_requeue_false">Ack, remove</option>
              <option value="reject_requeue_false">Reject, remove</option></select></label>
            <label>Encoding <select name="encoding"><option value="auto">Auto string / base64</option><option value="base64">base64</option></select></label>
            <label>Messages <input name="count" type="number" min="1" max="1000" value="1"></label>
            <div class="actions"><button class="btn primary" type="submit" id="qp-get-submit">Get messages</button></div>
          </form>
          <div class="result" id="qp-get-result"></div><div id="qp-messages"></div>
        </div>
        <div class="card"><h2>Publish message</h2>
          <p class="muted hint">Published to the default exchange with this queue's name as the routing key.</p>
          <form class="form" id="qp-pub">
            <label>Delivery mode <select name="delivery_mode"><option value="1">1 – non-persistent</option><option value="2">2 – persistent</option></select></label>
            <label>Content type <input name="content_type" placeholder="text/plain"></label>
            <label class="wide">Payload <textarea name="payload" id="qp-pub-payload" placeholder="Hello, Warren"></textarea></label>
            <div class="actions"><button class="btn primary" type="submit">Publish message</button></div>
          </form><div class="result" id="qp-pub-result"></div>
        </div>
      </div>
      <div class="grid2 mt-16">
        <div class="card"><h2>Details</h2><div id="qp-details"></div></div>
        <div class="card"><h2>Bindings</h2><div id="qp-bindings" class="muted">loading…</div></div>
      </div>`;
    const result = $("#qp-action-result");
    armed($("#qp-purge"), async () => {
      try { await api("DELETE", path + "/contents"); showResult(result, true, "Queue purged."); this.refresh(); } catch (e) { showResult(result, false, "Purge failed: " + e.message); }
    });
    armed($("#qp-delete"), async () => {
      try { await api("DELETE", path); location.hash = "#/queues"; } catch (e) { showResult(result, false, "Delete failed: " + e.message); }
    });
    $("#qp-get").addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = new FormData(e.target);
      const out = $("#qp-get-result");
      try {
        const msgs = await api("POST", path + "/get", {
          count: Number(f.get("count")) || 1, ackmode: f.get("ackmode"), encoding: f.get("encoding"), truncate: 50000,
        });
        showResult(out, true, msgs.length ? `${msgs.length} message(s) fetched.` : "Queue is empty.");
        $("#qp-messages").innerHTML = msgs.map((m, i) => `<div class="message" data-message="${i}">
          <div class="mhead"><span>#${i + 1}</span><span>exchange <b>${esc(m.exchange || "(AMQP default)")}</b></span>
          <span>routing key <b>${esc(m.routing_key)}</b></span><span>${fmtNum(m.payload_bytes)} bytes, ${esc(m.payload_encoding)}</span>
          <span>redelivered: ${m.redelivered ? "yes" : "no"}</span><span>${fmtNum(m.message_count)} left</span></div>
          ${Object.keys(m.properties || {}).length ? `<div class="mhead mono">${esc(JSON.stringify(m.properties))}</div>` : ""}
          <pre class="payload">${esc(m.payload)}</pre></div>`).join("");
        this.refresh();
      } catch (err) {
        showResult(out, false, "Get failed: " + err.message);
      }
    });
    $("#qp-pub").addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = new FormData(e.target);
      const out = $("#qp-pub-result");
      const properties = { delivery_mode: Number(f.get("delivery_mode")) };
      if (f.get("content_type")) properties.content_type = f.get("content_type");
      try {
        const r = await api("POST", `/api/exchanges/${enc(this.vhost)}/amq.default/publish`, {
          routing_key: this.name, payload: f.get("payload") || "", payload_encoding: "string", properties,
        });
        showResult(out, r.routed, r.routed ? "Message published." : "Message published, but not routed.");
        this.refresh();
      } catch (err) {
        showResult(out, false, "Publish failed: " + err.message);
      }
    });
    this.loadBindings();
    this.refresh();
  },
  async loadBindings() {
    try {
      const list = await get(this.path + "/bindings");
      $("#qp-bindings").innerHTML = table([
        { title: "From", key: "source", render: (b) => esc(b.source || "(AMQP default)") },
        { title: "Routing key", key: "routing_key" },
        { title: "Arguments", key: "arguments", render: (b) => `<span class="mono">${esc(JSON.stringify(b.arguments || {}))}</span>` },
      ], list, "No bindings.");
    } catch (e) {
      $("#qp-bindings").innerHTML = apiProblem(e, "bindings");
    }
  },
  async refresh() {
    let q;
    try {
      q = await get(this.path);
    } catch (e) {
      if (e.status === 404) {
        $("#qp-tiles").innerHTML = `<div class="notice"><b>This queue does not exist</b> (any more).</div>`;
      } else {
        $("#qp-action-result").textContent = "Refresh failed: " + e.message;
      }
      return;
    }
    const h = recordQueue(q);
    const ms = q.message_stats || {};
    $("#qp-sub").innerHTML = `${esc((q.arguments && q.arguments["x-queue-type"]) || q.type)} queue · ${features(q) || "transient"} · <span class="badge ok">${esc(q.state)}</span>`;
    $("#qp-tiles").innerHTML =
      tile("Ready", fmtNum(q.messages_ready), "messages", "qp-ready", true) +
      tile("Unacked", fmtNum(q.messages_unacknowledged), "messages", "qp-unacked", true) +
      tile("Total", fmtNum(q.messages), "messages", "qp-total", true) +
      tile("Consumers", fmtNum(q.consumers), "", "qp-consumers") +
      tile("Incoming", fmtRate(rateOf(ms, "publish")), fmtNum(ms.publish) + " total", "qp-publish") +
      tile("Deliver / get", fmtRate(rateOf(ms, "deliver_get")), fmtNum(ms.deliver_get) + " total", "qp-deliver") +
      tile("Ack", fmtRate(rateOf(ms, "ack")), fmtNum(ms.ack) + " total", "qp-ack");
    $("#qp-details").innerHTML = `<dl class="kv">
      <dt>Virtual host</dt><dd>${esc(q.vhost)}</dd><dt>Node</dt><dd>${esc(q.node)}</dd>
      <dt>Durable</dt><dd>${q.durable ? "yes" : "no"}</dd><dt>Auto delete</dt><dd>${q.auto_delete ? "yes" : "no"}</dd>
      <dt>Exclusive</dt><dd>${q.exclusive ? "yes" : "no"}</dd><dt>Policy</dt><dd>${esc(q.policy || "–")}</dd>
      <dt>Arguments</dt><dd class="mono">${esc(JSON.stringify(q.arguments || {}))}</dd>${streamDetails(q)}</dl>`;
    this.draw(h);
  },
  draw(h) {
    h = h || state.queueHistory.get(this.vhost + "\u0000" + this.name);
    if (!h) return;
    drawChart($("#chart-q-messages"), h, MSG_SERIES, "");
    drawChart($("#chart-q-rates"), h, QUEUE_RATE_SERIES, "/s");
  },
  interval: SAMPLE_MS,
  resize() { this.draw(); },
};

pages.exchanges = {
  title: "Exchanges",
  mount(view) {
    view.innerHTML = `
      <div class="page-head"><div><h1>Exchanges</h1><div class="sub">Where publishers send messages</div></div></div>
      <div class="card"><div id="x-table" class="muted">loading…</div></div>
      <div class="grid2">
        <div class="card"><h2>Add a new exchange</h2>
          <form class="form" id="x-add">
            <label>Virtual host <select name="vhost">${vhostOptions("/")}</select></label>
            <label>Name <input name="name" required placeholder="events"></label>
            <label>Type <select name="type" id="x-add-type">${["direct", "fanout", "topic", "headers"].map((t) => `<option>${t}</option>`).join("")}</select></label>
            <label>Durability <select name="durable"><option value="true">Durable</option><option value="false">Transient</option></select></label>
            <label>Auto delete <select name="auto_delete"><option value="false">No</option><option value="true">Yes</option></select></label>
            <label>Internal <select name="internal"><option value="false">No</option><option value="true">Yes</option></select></label>
            <label class="wide">Arguments <textarea name="arguments" placeholder="alternate-exchange=unrouted"></textarea></label>
            <div class="actions"><button class="btn primary" type="submit">Add exchange</button></div>
          </form><div class="result" id="x-add-result"></div></div>
        <div class="card"><h2>Publish message</h2>
          <form class="form" id="x-pub">
            <label>Exchange <select name="exchange" id="x-pub-exchange"></select></label>
            <label>Routing key <input name="routing_key" placeholder="orders"></label>
            <label>Delivery mode <select name="delivery_mode"><option value="1">1 – non-persistent</option><option value="2">2 – persistent</option></select></label>
            <label class="wide">Headers <textarea name="headers" placeholder="key=value (one a line)"></textarea></label>
            <label class="wide">Payload <textarea name="payload" placeholder="Hello, Warren"></textarea></label>
            <div class="actions"><button class="btn primary" type="submit">Publish message</button></div>
          </form><div class="result" id="x-pub-result"></div></div>
      </div>`;
    $("#x-add").addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = new FormData(e.target);
      const out = $("#x-add-result");
      try {
        await api("PUT", `/api/exchanges/${enc(f.get("vhost"))}/${enc(f.get("name"))}`, {
          type: f.get("type"), durable: f.get("durable") === "true", auto_delete: f.get("auto_delete") === "true",
          internal: f.get("internal") === "true", arguments: readArguments(f.get("arguments")),
        });
        showResult(out, true, `Exchange "${f.get("name")}" declared.`);
        this.refresh();
      } catch (err) { showResult(out, false, "Declare failed: " + err.message); }
    });
    $("#x-pub").addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = new FormData(e.target);
      const out = $("#x-pub-result");
      try {
        const [vhost, name] = JSON.parse(f.get("exchange"));
        const properties = { delivery_mode: Number(f.get("delivery_mode")) };
        const headers = readArguments(f.get("headers"));
        if (Object.keys(headers).length) properties.headers = headers;
        const r = await api("POST", `/api/exchanges/${enc(vhost)}/${enc(name || "amq.default")}/publish`, {
          routing_key: f.get("routing_key") || "", payload: f.get("payload") || "", payload_encoding: "string", properties,
        });
        showResult(out, r.routed, r.routed ? "Message published and routed." : "Message published, but not routed to any queue.");
      } catch (err) { showResult(out, false, "Publish failed: " + err.message); }
    });
    this.refresh();
  },
  async refresh() {
    let list;
    try { list = await get("/api/exchanges"); } catch (e) { $("#x-table").innerHTML = apiProblem(e, "/api/exchanges"); return; }
    const sel = $("#x-pub-exchange");
    const current = sel.value;
    sel.innerHTML = list.filter((x) => !x.internal).map((x) => {
      const v = JSON.stringify([x.vhost, x.name]);
      return `<option value="${esc(v)}"${v === current ? " selected" : ""}>${esc(x.name || "(AMQP default)")} · ${esc(x.vhost)}</option>`;
    }).join("");
    $("#x-table").innerHTML = table([
      { title: "Virtual host", key: "vhost" },
      { title: "Name", key: "name", render: (x) => x.name ? esc(x.name) : `<span class="muted">(AMQP default)</span>` },
      { title: "Type", key: "type" },
      { title: "Features", key: "features", render: (x) => features(x) },
      { title: "Rate in", key: "publish_in_rate", num: true, render: (x) => fmtRate(rateOf(x.message_stats, "publish_in")) },
      { title: "Rate out", key: "publish_out_rate", num: true, render: (x) => fmtRate(rateOf(x.message_stats, "publish_out")) },
      { title: "", key: "actions", render: (x) => x.name && !x.name.startsWith("amq.")
        ? `<button class="btn small danger" data-delete="${esc(JSON.stringify([x.vhost, x.name]))}">Delete</button>` : "" },
    ], list, "No exchanges.", (x) => `data-exchange="${esc(x.name)}"`);
    for (const b of $$("#x-table button[data-delete]")) {
      armed(b, async () => {
        const [vhost, name] = JSON.parse(b.dataset.delete);
        try { await api("DELETE", `/api/exchanges/${enc(vhost)}/${enc(name)}`); this.refresh(); }
        catch (e) { showResult($("#x-add-result"), false, "Delete failed: " + e.message); }
      });
    }
  },
};

pages.connections = {
  title: "Connections",
  mount(view) {
    view.innerHTML = `<div class="page-head"><div><h1>Connections</h1><div class="sub">AMQP clients connected now</div></div></div>
      <div class="card"><div id="c-table" class="muted">loading…</div><div class="result" id="c-result"></div></div>`;
    this.refresh();
  },
  async refresh() {
    let list;
    try { list = await get("/api/connections"); } catch (e) { $("#c-table").innerHTML = apiProblem(e, "/api/connections"); return; }
    $("#c-table").innerHTML = table([
      { title: "Name", key: "name", render: (c) => `<span class="mono">${esc(c.name)}</span>` },
      { title: "Client", key: "client", render: (c) => {
        const p = c.client_properties || {};
        return esc([p.connection_name, p.product, p.version].filter(Boolean).join(" ") || "–");
      } },
      { title: "User", key: "user" },
      { title: "Virtual host", key: "vhost" },
      { title: "Protocol", key: "protocol" },
      { title: "Channels", key: "channels", num: true },
      { title: "From client", key: "recv_rate", num: true, render: (c) => fmtBytes(rateOf(c, "recv_oct")) + "/s" },
      { title: "To client", key: "send_rate", num: true, render: (c) => fmtBytes(rateOf(c, "send_oct")) + "/s" },
      { title: "Heartbeat", key: "timeout", num: true, render: (c) => esc(c.timeout) + " s" },
      { title: "Connected at", key: "connected_at", render: (c) => fmtTime(c.connected_at) },
      { title: "State", key: "state", render: (c) => `<span class="badge ok">${esc(c.state)}</span>` },
      { title: "", key: "actions", render: (c) => `<button class="btn small danger" data-close="${esc(c.name)}">Close</button>` },
    ], list, "No client is connected.");
    for (const b of $$("#c-table button[data-close]")) {
      armed(b, async () => {
        try {
          await api("DELETE", `/api/connections/${enc(b.dataset.close)}`);
          showResult($("#c-result"), true, "Connection closed.");
          this.refresh();
        } catch (e) { showResult($("#c-result"), false, "Close failed: " + e.message); }
      });
    }
  },
};

pages.channels = {
  title: "Channels",
  mount(view) {
    view.innerHTML = `<div class="page-head"><div><h1>Channels</h1><div class="sub">Open channels on every connection</div></div></div>
      <div class="card"><div id="ch-table" class="muted">loading…</div></div>`;
    this.refresh();
  },
  async refresh() {
    let list;
    try { list = await get("/api/channels"); } catch (e) { $("#ch-table").innerHTML = apiProblem(e, "/api/channels"); return; }
    $("#ch-table").innerHTML = table([
      { title: "Channel", key: "name", render: (c) => `<span class="mono">${esc(c.name)}</span>` },
      { title: "User", key: "user" },
      { title: "Virtual host", key: "vhost" },
      { title: "Mode", key: "mode", render: (c) => [c.confirm ? `<span class="feature" title="publisher confirms">C</span>` : "", c.transactional ? `<span class="feature" title="transactional">T</span>` : ""].join("") },
      { title: "Prefetch", key: "prefetch_count", num: true },
      { title: "Global prefetch", key: "global_prefetch_count", num: true },
      { title: "Consumers", key: "consumer_count", num: true },
      { title: "Publish", key: "publish_rate", num: true, render: (c) => fmtRate(rateOf(c.message_stats, "publish")) },
      { title: "Confirm", key: "confirm_rate", num: true, render: (c) => fmtRate(rateOf(c.message_stats, "confirm")) },
      { title: "Deliver / get", key: "deliver_rate", num: true, render: (c) => fmtRate(rateOf(c.message_stats, "deliver_get")) },
      { title: "Ack", key: "ack_rate", num: true, render: (c) => fmtRate(rateOf(c.message_stats, "ack")) },
      { title: "State", key: "state", render: (c) => `<span class="badge ok">${esc(c.state)}</span>` },
    ], list, "No open channels.");
  },
};

// The stream protocol: its connections, publishers and consumers (the stream management
// plugin's /api/stream routes).
pages.streams = {
  title: "Streams",
  mount(view) {
    view.innerHTML = `<div class="page-head"><div><h1>Streams</h1><div class="sub">Stream protocol connections, publishers and consumers</div></div></div>
      <div class="card"><h2>Connections</h2><div id="s-connections" class="muted">loading…</div></div>
      <div class="card mt-16"><h2>Publishers</h2><div id="s-publishers" class="muted">loading…</div></div>
      <div class="card mt-16"><h2>Consumers</h2><div id="s-consumers" class="muted">loading…</div></div>`;
    this.refresh();
  },
  async show(id, path, columns, empty) {
    try { $(id).innerHTML = table(columns, await get(path), empty); } catch (e) { $(id).innerHTML = apiProblem(e, path); }
  },
  async refresh() {
    const conn = (x) => `<span class="mono">${esc((x.connection_details || {}).name)}</span>`;
    const stream = (x) => `<a href="#/queue/${enc(x.queue.vhost)}/${enc(x.queue.name)}">${esc(x.queue.name)}</a>`;
    await Promise.all([
      this.show("#s-connections", "/api/stream/connections", [
        { title: "Name", key: "name", render: (c) => `<span class="mono">${esc(c.name)}</span>` },
        { title: "User", key: "user" },
        { title: "Virtual host", key: "vhost" },
        { title: "Frame max", key: "frame_max", num: true },
        { title: "Heartbeat", key: "timeout", num: true, render: (c) => esc(c.timeout) + " s" },
        { title: "Connected at", key: "connected_at", render: (c) => fmtTime(c.connected_at) },
        { title: "State", key: "state", render: (c) => `<span class="badge ok">${esc(c.state)}</span>` },
      ], "No stream client is connected."),
      this.show("#s-publishers", "/api/stream/publishers", [
        { title: "Virtual host", key: "vhost", render: (p) => esc(p.queue.vhost) },
        { title: "Stream", key: "stream", render: stream },
        { title: "Id", key: "publisher_id", num: true },
        { title: "Reference", key: "reference" },
        { title: "Published", key: "published", num: true, render: (p) => fmtNum(p.published) },
        { title: "Confirmed", key: "confirmed", num: true, render: (p) => fmtNum(p.confirmed) },
        { title: "Errored", key: "errored", num: true, render: (p) => fmtNum(p.errored) },
        { title: "Connection", key: "connection", render: conn },
      ], "No stream publishers."),
      this.show("#s-consumers", "/api/stream/consumers", [
        { title: "Virtual host", key: "vhost", render: (c) => esc(c.queue.vhost) },
        { title: "Stream", key: "stream", render: stream },
        { title: "Subscription", key: "subscription_id", num: true },
        { title: "Credits", key: "credits", num: true },
        { title: "Consumed", key: "consumed", num: true, render: (c) => fmtNum(c.consumed) },
        { title: "Offset", key: "offset", num: true, render: (c) => fmtNum(c.offset) },
        { title: "Offset lag", key: "offset_lag", num: true, render: (c) => fmtNum(c.offset_lag) },
        { title: "Connection", key: "connection", render: conn },
      ], "No stream consumers."),
    ]);
  },
};

// Read-only list pages for the objects whose endpoints may not exist on every build.
function listPage(title, sub, path, columns, empty) {
  return {
    title,
    mount(view) {
      view.innerHTML = `<div class="page-head"><div><h1>${esc(title)}</h1><div class="sub">${esc(sub)}</div></div></div>
        <div class="card"><div id="l-table" class="muted">loading…</div></div>`;
      this.refresh();
    },
    async refresh() {
      try {
        const list = await get(path);
        $("#l-table").innerHTML = table(columns, Array.isArray(list) ? list : list.items || [], empty);
      } catch (e) {
        $("#l-table").innerHTML = apiProblem(e, path);
      }
    },
  };
}

pages.vhosts = listPage("Virtual hosts", "Isolated groups of exchanges, queues and permissions", "/api/vhosts", [
  { title: "Name", key: "name" },
  { title: "Description", key: "description" },
  { title: "Tags", key: "tags", render: (v) => (Array.isArray(v.tags) ? v.tags : String(v.tags || "").split(",").filter(Boolean)).map((t) => `<span class="badge tag">${esc(t)}</span>`).join("") },
  { title: "Default queue type", key: "default_queue_type" },
  { title: "Ready", key: "messages_ready", num: true, render: (v) => fmtNum(v.messages_ready) },
  { title: "Unacked", key: "messages_unacknowledged", num: true, render: (v) => fmtNum(v.messages_unacknowledged) },
  { title: "Total", key: "messages", num: true, render: (v) => fmtNum(v.messages) },
], "No virtual hosts.");

pages.users = listPage("Users", "Who may connect, and with which tags", "/api/users", [
  { title: "Name", key: "name" },
  { title: "Tags", key: "tags", render: (u) => (Array.isArray(u.tags) ? u.tags : String(u.tags || "").split(",").filter(Boolean)).map((t) => `<span class="badge tag">${esc(t)}</span>`).join("") || `<span class="muted">none</span>` },
  { title: "Can log in with password", key: "password_hash", render: (u) => (u.password_hash ? "yes" : "no") },
], "No users.");

pages.policies = listPage("Policies", "Settings applied to queues and exchanges by name pattern", "/api/policies", [
  { title: "Virtual host", key: "vhost" },
  { title: "Name", key: "name" },
  { title: "Pattern", key: "pattern", render: (p) => `<span class="mono">${esc(p.pattern)}</span>` },
  { title: "Apply to", key: "apply-to", render: (p) => esc(p["apply-to"]) },
  { title: "Definition", key: "definition", render: (p) => `<span class="mono">${esc(JSON.stringify(p.definition || {}))}</span>` },
  { title: "Priority", key: "priority", num: true },
], "No policies.");

// ---------------------------------------------------------------- routing and session

function route() {
  if (!sessionStorage.getItem(AUTH_KEY)) { showLogin(""); return; }
  const hash = location.hash.replace(/^#\/?/, "") || "overview";
  const parts = hash.split("/").map((p) => { try { return decodeURIComponent(p); } catch (_) { return p; } });
  const name = pages[parts[0]] ? parts[0] : "overview";
  const page = pages[name];
  if (state.pageTimer) { clearInterval(state.pageTimer); state.pageTimer = null; }
  state.page = page;
  for (const a of $$("#nav a")) a.classList.toggle("active", a.dataset.page === name || (name === "queue" && a.dataset.page === "queues"));
  document.title = `${page.title}${name === "queue" ? " " + parts[2] : ""} · Warren`;
  $("#banner").hidden = true;
  const view = $("#view");
  view.dataset.page = name;
  page.mount(view, parts.slice(1));
  if (page.refresh) {
    state.pageTimer = setInterval(() => { if (state.page === page) page.refresh(); }, page.interval || REFRESH_MS);
  }
}

function showLogin(message) {
  stopSampling();
  $("#app").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
  $("#login-user").focus();
}

function startApp() {
  $("#login").hidden = true;
  $("#app").hidden = false;
  $("#user").textContent = sessionStorage.getItem(USER_KEY) || "";
  startSampling();
  loadVhosts().then(() => { if (state.page && state.page.onVhosts) state.page.onVhosts(); });
  route();
}

function startSampling() {
  stopSampling();
  sampleOverview();
  state.sampler = setInterval(sampleOverview, SAMPLE_MS);
}

function stopSampling() {
  if (state.sampler) { clearInterval(state.sampler); state.sampler = null; }
  if (state.pageTimer) { clearInterval(state.pageTimer); state.pageTimer = null; }
}

async function login(event) {
  event.preventDefault();
  const user = $("#login-user").value;
  const pass = $("#login-pass").value;
  const token = btoa(unescape(encodeURIComponent(user + ":" + pass)));
  const err = $("#login-error");
  err.textContent = "";
  try {
    const me = await api("GET", "/api/whoami", undefined, token);
    sessionStorage.setItem(AUTH_KEY, token);
    sessionStorage.setItem(USER_KEY, me.name || user);
    $("#login-pass").value = "";
    if (!location.hash || location.hash === "#/login") location.hash = "#/overview";
    startApp();
  } catch (e) {
    err.textContent = e.status === 401 ? "Login failed: " + e.message : "Cannot log in: " + e.message;
  }
}

function logout() {
  sessionStorage.removeItem(AUTH_KEY);
  sessionStorage.removeItem(USER_KEY);
  state.overviewHistory = newHistory(Object.keys(state.overviewHistory).filter((k) => k !== "t"));
  state.queueHistory.clear();
  location.hash = "#/overview";
  showLogin("Logged out.");
}

window.addEventListener("hashchange", () => { if (sessionStorage.getItem(AUTH_KEY)) route(); });
window.addEventListener("resize", () => { if (state.page && state.page.resize) state.page.resize(); });
$("#login-form").addEventListener("submit", login);
$("#logout").addEventListener("click", logout);
if (sessionStorage.getItem(AUTH_KEY)) startApp(); else showLogin("");
