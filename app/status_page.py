"""The worker's live status page: one self-contained HTML document.

Everything is inline — styles, the script and the SVG charts it draws — because the
page must work where the worker runs, which is often a network with no way out (no
CDN, no web fonts). The script polls ``/status/data`` once a second and redraws; the
numbers and bars carry ``id`` and ``data-*`` attributes so a browser test (and a
curious operator with the inspector) can read exactly what is drawn.
"""

# ruff: noqa: E501, RUF001
# (One HTML document with its script: long lines and typographic dashes are its content.)
from __future__ import annotations

__all__ = ["STATUS_PAGE_HTML"]

STATUS_PAGE_HTML = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kafka-timers worker status</title>
<link rel="icon" href="data:,">
<style>
  :root { --fg:#1d2330; --muted:#667085; --bg:#f6f7f9; --card:#fff; --bar:#3b6fd8;
          --bad:#c8372d; --ok:#1f8a4c; --warn:#c98a00; }
  * { box-sizing:border-box; }
  body { margin:0; font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;
         color:var(--fg); background:var(--bg); }
  header { padding:12px 20px; background:#1d2330; color:#fff; display:flex; gap:16px;
           align-items:baseline; flex-wrap:wrap; }
  header h1 { font-size:18px; margin:0; }
  header .meta { color:#c9cfdb; font-size:13px; }
  .badge { padding:2px 8px; border-radius:10px; font-size:12px; font-weight:600; }
  .badge.ok { background:var(--ok); } .badge.bad { background:var(--bad); }
  .badge.warn { background:var(--warn); }
  main { padding:16px 20px; display:grid; gap:16px;
         grid-template-columns:repeat(auto-fit,minmax(440px,1fr)); }
  .tiles { grid-column:1/-1; display:grid; gap:12px;
           grid-template-columns:repeat(auto-fit,minmax(130px,1fr)); }
  .tile, section { background:var(--card); border-radius:8px; padding:12px 14px;
                   box-shadow:0 1px 2px rgba(0,0,0,.08); }
  .tile .label { color:var(--muted); font-size:12px; text-transform:uppercase; }
  .tile .value { font-size:24px; font-weight:600; font-variant-numeric:tabular-nums; }
  section h2 { font-size:14px; margin:0 0 8px; }
  section .note { color:var(--muted); font-size:12px; margin:4px 0 0; }
  section.wide { grid-column:1/-1; }
  svg.chart { width:100%; height:170px; display:block; }
  svg.chart text { font-size:10px; fill:var(--muted); }
  svg.chart rect.bar { fill:var(--bar); } svg.chart rect.bar.bad { fill:var(--bad); }
  svg.chart rect.bar.warn { fill:var(--warn); }
  svg.chart polyline { fill:none; stroke:var(--bar); stroke-width:1.5; }
  svg.chart line.axis { stroke:#d0d5dd; }
  table { border-collapse:collapse; width:100%; font-variant-numeric:tabular-nums; }
  th, td { text-align:left; padding:3px 6px; border-bottom:1px solid #eef0f3;
           font-size:12px; white-space:nowrap; overflow:hidden; text-overflow:ellipsis;
           max-width:260px; }
  th { color:var(--muted); font-weight:500; }
  form { display:flex; gap:8px; }
  input { flex:1; padding:5px 8px; font:inherit; }
  button { padding:5px 12px; font:inherit; }
  pre { background:#f2f4f7; padding:8px; margin:8px 0 0; overflow:auto; font-size:12px; }
  #error { color:var(--bad); }
</style>
</head>
<body data-refreshes="0">
<header>
  <h1>kafka-timers</h1>
  <span class="meta">worker <b id="worker-id">…</b></span>
  <span class="meta">partitions <b id="partitions-held">…</b></span>
  <span class="meta">updated <b id="updated">never</b></span>
  <span id="tick-badge" class="badge warn">waiting</span>
  <span id="error"></span>
</header>
<noscript><p>This page draws with JavaScript; the same numbers are at
  <a href="data">/status/data</a>.</p></noscript>
<main>
  <div class="tiles">
    <div class="tile"><div class="label">Pending</div><div class="value" id="total-pending">–</div></div>
    <div class="tile"><div class="label">Overdue</div><div class="value" id="total-overdue">–</div></div>
    <div class="tile"><div class="label">Scheduled</div><div class="value" id="total-scheduled">–</div></div>
    <div class="tile"><div class="label">Fired</div><div class="value" id="total-fired">–</div></div>
    <div class="tile"><div class="label">Cancelled</div><div class="value" id="total-cancelled">–</div></div>
    <div class="tile"><div class="label">Rejected</div><div class="value" id="total-rejected">–</div></div>
    <div class="tile"><div class="label">Fires/s (10 s)</div><div class="value" id="fires-rate">–</div></div>
    <div class="tile"><div class="label">Lateness p50 (1 min)</div><div class="value" id="lateness-p50">–</div></div>
    <div class="tile"><div class="label">Lateness p99 (1 min)</div><div class="value" id="lateness-p99">–</div></div>
  </div>
  <section class="wide">
    <h2>Pending timers due in the next 10 minutes</h2>
    <svg class="chart" id="chart-soon"></svg>
    <p class="note" id="soon-note"></p>
  </section>
  <section>
    <h2>Pending timers further out</h2>
    <svg class="chart" id="chart-far"></svg>
    <p class="note" id="far-note"></p>
  </section>
  <section>
    <h2>Fires per second (last 5 minutes)</h2>
    <svg class="chart" id="chart-fires"></svg>
  </section>
  <section>
    <h2>Fire lateness (fired at − due), since start</h2>
    <svg class="chart" id="chart-lateness"></svg>
    <table id="lateness-table"><thead><tr><th></th><th>p50</th><th>p90</th><th>p99</th>
      <th>fires</th></tr></thead><tbody></tbody></table>
  </section>
  <section>
    <h2>Seconds since the last tick, per partition</h2>
    <svg class="chart" id="chart-ticks"></svg>
    <p class="note">A bar over 5 s means no oscillator reaches that partition.</p>
  </section>
  <section>
    <h2>Rejected requests by reason</h2>
    <svg class="chart" id="chart-rejects"></svg>
  </section>
  <section>
    <h2>Fired by callback topic</h2>
    <svg class="chart" id="chart-topics"></svg>
  </section>
  <section class="wide">
    <h2>Next due on this worker</h2>
    <table id="next-table"><thead><tr><th>due (UTC)</th><th>in</th><th>id</th>
      <th>partition</th><th>topic</th><th>key</th><th>bytes</th></tr></thead>
      <tbody></tbody></table>
  </section>
  <section class="wide">
    <h2>Look up a timer</h2>
    <form id="lookup-form"><input id="lookup-id" placeholder="timer id" autocomplete="off">
      <button id="lookup-go" type="submit">Look up</button></form>
    <pre id="lookup-result"></pre>
  </section>
</main>
<script>
"use strict";
const BASE = location.pathname.replace(/\/status\/?$/, "");
const SVGNS = "http://www.w3.org/2000/svg";

function fmt(n) {
  if (n === null || n === undefined) return "–";
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(2) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return Number.isInteger(n) ? String(n) : n.toFixed(2);
}
function secs(s) { return s === null || s === undefined ? "–" : s < 1 ? (s * 1000).toFixed(0) + " ms" : s.toFixed(2) + " s"; }
function text(id, value) { document.getElementById(id).textContent = value; }
function node(tag, attrs, parent, content) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (content !== undefined) e.textContent = content;
  parent.appendChild(e);
  return e;
}
function clear(svg) { while (svg.firstChild) svg.removeChild(svg.firstChild); }

// Bars: items [{label, value, cls, title}]; every nth label drawn under the axis.
function barChart(svg, items, opts) {
  opts = opts || {};
  clear(svg);
  const W = svg.clientWidth || 600, H = svg.clientHeight || 170;
  const left = 34, bottom = 18, top = 8;
  const max = Math.max(1, ...items.map(i => i.value));
  const step = Math.min(opts.maxBar || 64, (W - left - 4) / Math.max(1, items.length));
  node("line", {class: "axis", x1: left, y1: H - bottom, x2: W, y2: H - bottom}, svg);
  node("text", {x: 2, y: top + 8}, svg, fmt(max));
  node("text", {x: 2, y: H - bottom}, svg, "0");
  const every = Math.max(1, Math.ceil(items.length / (opts.maxLabels || 12)));
  items.forEach((item, i) => {
    const h = (H - bottom - top) * item.value / max;
    const r = node("rect", {
      class: "bar " + (item.cls || ""), x: left + i * step + 1, y: H - bottom - h,
      width: Math.max(1, step - 2), height: h,
      "data-label": item.label, "data-value": item.value,
    }, svg);
    node("title", {}, r, (item.title || item.label) + ": " + fmt(item.value));
    if (i % every === 0) node("text", {x: left + i * step + 1, y: H - 4}, svg, item.label);
  });
  if (!items.length) node("text", {x: left + 8, y: H / 2}, svg, opts.empty || "nothing yet");
}

// A line over time: points [[t, v]], x from -span to now.
function lineChart(svg, points, span, now) {
  clear(svg);
  const W = svg.clientWidth || 600, H = svg.clientHeight || 170;
  const left = 34, bottom = 18, top = 8;
  const max = Math.max(1, ...points.map(p => p[1]));
  node("line", {class: "axis", x1: left, y1: H - bottom, x2: W, y2: H - bottom}, svg);
  node("text", {x: 2, y: top + 8}, svg, fmt(max));
  node("text", {x: 2, y: H - bottom}, svg, "0");
  node("text", {x: left, y: H - 4}, svg, "-" + Math.round(span / 60) + " min");
  node("text", {x: W - 24, y: H - 4}, svg, "now");
  const xy = points.map(([t, v]) => [
    left + (W - left - 4) * (1 - (now - t) / span), H - bottom - (H - bottom - top) * v / max,
  ]).filter(p => p[0] >= left);
  const line = node("polyline", {points: xy.map(p => p.join(",")).join(" ")}, svg);
  line.setAttribute("data-points", String(xy.length));
}

function utc(sec) { return new Date(sec * 1000).toISOString().replace("T", " ").replace(".000Z", ""); }
function hms(sec) { return new Date(sec * 1000).toISOString().substr(11, 8); }

function render(d) {
  text("worker-id", d.worker);
  text("partitions-held", d.partitions_held.length ? d.partitions_held.join(", ") : "none");
  text("updated", hms(d.now) + " UTC");
  text("total-pending", fmt(d.totals.pending));
  text("total-overdue", fmt(d.pending_by_due.overdue));
  text("total-scheduled", fmt(d.totals.scheduled));
  text("total-fired", fmt(d.totals.fired));
  text("total-cancelled", fmt(d.totals.cancelled));
  text("total-rejected", fmt(d.totals.rejected));
  text("fires-rate", fmt(d.fires_per_second_recent));
  text("lateness-p50", secs(d.lateness.recent.p50));
  text("lateness-p99", secs(d.lateness.recent.p99));

  const due = d.pending_by_due, soon = due.soon;
  barChart(document.getElementById("chart-soon"), soon.counts.map((c, i) => ({
    label: hms(soon.start + i * soon.bucket_seconds).substr(0, 5 + (soon.bucket_seconds < 60 ? 3 : 0)),
    value: c, title: "due " + hms(soon.start + i * soon.bucket_seconds) + "+" + soon.bucket_seconds + "s",
  })));
  let note = "Bars of " + soon.bucket_seconds + " s, UTC. " + fmt(due.scanned) + " timers scanned";
  if (due.unscanned) note += "; " + fmt(due.unscanned) + " more due at or after " + utc(due.exact_before) + " not scanned (counts from then on are lower bounds)";
  text("soon-note", note + ".");
  barChart(document.getElementById("chart-far"), due.far.map(f => ({label: f.label, value: f.count})));
  text("far-note", due.unscanned ? "Lower bounds: " + fmt(due.unscanned) + " timers were not scanned." : "");

  lineChart(document.getElementById("chart-fires"), d.fires_per_second, 300, d.now);

  const lat = d.lateness;
  barChart(document.getElementById("chart-lateness"), lat.buckets.map(b => ({
    label: b.le === null ? "+Inf" : "≤" + b.le, value: b.count, cls: b.le !== null && b.le <= 2 ? "" : "warn",
  })), {maxLabels: 8});
  const tbody = document.querySelector("#lateness-table tbody");
  tbody.innerHTML = "";
  for (const [name, row, count] of [["last 1 min", lat.recent, lat.recent_count], ["since start", lat, lat.count]]) {
    const tr = tbody.insertRow();
    for (const v of [name, secs(row.p50), secs(row.p90), secs(row.p99), fmt(count)]) tr.insertCell().textContent = v;
  }

  const ticks = Object.entries(d.last_tick).sort((a, b) => Number(a[0]) - Number(b[0]));
  barChart(document.getElementById("chart-ticks"), ticks.map(([p, t]) => ({
    label: "p" + p, value: Math.max(0, t.age), cls: t.age > 5 ? "bad" : "",
    title: "partition " + p + " last tick " + hms(t.second),
  })), {empty: "no ticks yet"});
  const badge = document.getElementById("tick-badge");
  const held = ticks.filter(([p]) => d.partitions_held.includes(Number(p)));
  const stale = held.filter(([, t]) => t.age > 5);
  if (!d.partitions_held.length) { badge.className = "badge warn"; badge.textContent = "no partitions"; }
  else if (stale.length || held.length < d.partitions_held.length) {
    badge.className = "badge bad"; badge.textContent = "NO TICKS on " + (stale.length || d.partitions_held.length - held.length) + " partition(s)";
  } else { badge.className = "badge ok"; badge.textContent = "ticking"; }

  barChart(document.getElementById("chart-rejects"), Object.entries(d.rejected_by_reason)
    .sort().map(([r, c]) => ({label: r, value: c, cls: "bad"})), {empty: "no rejects"});
  barChart(document.getElementById("chart-topics"), Object.entries(d.fired_by_topic)
    .sort().map(([t, c]) => ({label: t, value: c})), {empty: "nothing fired yet"});
}

function renderNext(list) {
  const tbody = document.querySelector("#next-table tbody");
  tbody.innerHTML = "";
  const now = Date.now() / 1000;
  for (const t of list.timers) {
    const tr = tbody.insertRow();
    tr.dataset.id = t.id;
    for (const v of [utc(t.due), Math.round(t.due - now) + " s", t.id, t.partition, t.topic, t.key === null ? "" : t.key, t.value_bytes])
      tr.insertCell().textContent = v;
  }
}

async function getJSON(path) {
  const r = await fetch(BASE + path, {cache: "no-store"});
  const body = await r.json();
  if (!r.ok && r.status !== 404) throw new Error(path + ": HTTP " + r.status);
  return body;
}

async function refresh() {
  try {
    const [d, next] = await Promise.all([getJSON("/status/data"), getJSON("/timers/next?n=20")]);
    render(d);
    renderNext(next);
    text("error", "");
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes) + 1);
  } catch (e) {
    text("error", "cannot reach the worker: " + e.message);
  }
}

document.getElementById("lookup-form").addEventListener("submit", async ev => {
  ev.preventDefault();
  const id = document.getElementById("lookup-id").value.trim();
  if (!id) return;
  try {
    text("lookup-result", JSON.stringify(await getJSON("/timers/" + encodeURIComponent(id)), null, 2));
  } catch (e) { text("lookup-result", String(e)); }
});

refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
"""
