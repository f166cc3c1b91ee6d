"use strict";
const BASE = location.pathname.replace(/\/status\/?$/, "");
const SVGNS = "http://www.w3.org/2000/svg";
//: An oscillator this far ahead of the worker's clock is flagged (the alert's threshold).
const AHEAD_ALERT = 1.0;

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

  const keysBody = document.querySelector("#store-keys-table tbody");
  keysBody.innerHTML = "";
  const keyRows = Object.entries(d.store_keys_by_partition || {}).sort((a, b) => Number(a[0]) - Number(b[0]));
  keyRows.push(["all", d.store_keys || {}]);
  for (const [p, k] of keyRows) {
    const tr = keysBody.insertRow();
    tr.dataset.partition = p;
    for (const v of [p === "all" ? "all" : "p" + p, fmt(k.pending), fmt(k.remembered), fmt(k.bookkeeping)])
      tr.insertCell().textContent = v;
  }
  const clocks = Object.entries(d.oscillators || {});
  const obody = document.querySelector("#oscillator-table tbody");
  obody.innerHTML = "";
  for (const [source, c] of clocks) {
    const tr = obody.insertRow();
    tr.dataset.source = source;
    tr.dataset.ahead = String(c.ahead_seconds);
    if (c.ahead_seconds !== null && c.ahead_seconds > AHEAD_ALERT) tr.className = "bad";
    for (const v of [source, c.ahead_seconds === null ? "–" : c.ahead_seconds.toFixed(2) + " s", fmt(c.ticks_held)])
      tr.insertCell().textContent = v;
  }
  const ahead = clocks.filter(([, c]) => c.ahead_seconds !== null && c.ahead_seconds > AHEAD_ALERT);
  const clockBadge = document.getElementById("clock-badge");
  if (!clocks.length) { clockBadge.className = "badge warn"; clockBadge.textContent = "clocks: no ticks"; }
  else if (ahead.length) {
    clockBadge.className = "badge bad";
    clockBadge.textContent = "OSCILLATOR AHEAD: " + ahead.map(([s]) => s).join(", ");
  } else { clockBadge.className = "badge ok"; clockBadge.textContent = "clocks agree"; }

  // Held partitions from this worker's reader (live), the others from the group's commits.
  const lag = Object.assign({}, d.request_group_lag || {});
  for (const [p, l] of Object.entries(d.request_lag || {})) lag[p] = l.records;
  barChart(document.getElementById("chart-request-lag"), Object.entries(lag)
    .sort((a, b) => Number(a[0]) - Number(b[0])).map(([p, n]) => {
      const own = (d.request_lag || {})[p];
      return {label: "p" + p, value: n, cls: n > 1000 ? "bad" : "",
        title: "partition " + p + ": " + fmt(n) + " waiting" +
          (own ? ", newest applied " + secs(own.seconds) + " old" : " (committed offsets)")};
    }), {empty: "no lag figures yet"});

  const gates = document.querySelector("#rate-limits-table tbody");
  gates.innerHTML = "";
  const gateRows = Object.entries(d.rate_limits || {}).sort();
  if (!gateRows.length) gates.insertRow().insertCell().textContent = "no limits";
  for (const [topic, g] of gateRows) {
    const tr = gates.insertRow();
    tr.dataset.topic = topic;
    if (g.paused) tr.className = "warn";
    const limit = g.paused ? "paused" : g.limit_per_second === null ? "none" : fmt(g.limit_per_second) + "/s";
    for (const v of [topic, limit, fmt(g.backlog), secs(g.delay_p50), secs(g.delay_p99)])
      tr.insertCell().textContent = v;
  }

  barChart(document.getElementById("chart-rejects"), Object.entries(d.rejected_by_reason)
    .sort().map(([r, c]) => ({label: r, value: c, cls: "bad"})), {empty: "no rejects"});
  barChart(document.getElementById("chart-topics"), Object.entries(d.fired_by_topic)
    .sort().map(([t, c]) => ({label: t, value: c})), {empty: "nothing fired yet"});
}

// The due-load forecast: totals for anyone, by callback topic with the operator's token.
function renderForecast(f, byTopic) {
  const tbody = document.querySelector("#forecast-table tbody");
  tbody.innerHTML = "";
  if (!f) { text("forecast-note", "no forecast on this worker"); return; }
  barChart(document.getElementById("chart-forecast-minutes"), f.minutes.map((c, i) => ({
    label: hms(f.minute_start + i * 60).substr(0, 5), value: c,
    title: "due " + hms(f.minute_start + i * 60).substr(0, 5) + " UTC (1 min)",
  })), {maxBar: 8, maxLabels: 12});
  barChart(document.getElementById("chart-forecast-hours"), f.hours.map((c, i) => ({
    label: utc(f.hour_start + i * 3600).substr(5, 8) + "h", value: c,
    title: "due " + utc(f.hour_start + i * 3600).substr(0, 13) + ":00 UTC (1 h)",
  })), {maxBar: 8, maxLabels: 7});
  let note = "UTC; from the current minute." + (f.complete ? "" : " Catching up after a start: later bars are lower bounds.");
  const rows = [["all topics", f]];
  if (byTopic && byTopic.topics) rows.push(...Object.entries(byTopic.topics));
  else note += " " + ((byTopic && byTopic.error) || "Per callback topic with the operator's token (below).");
  text("forecast-note", note);
  for (const [topic, r] of rows) {
    const tr = tbody.insertRow();
    tr.dataset.topic = topic;
    for (const v of [topic, r.windows.next_1m, r.windows.next_5m, r.windows.next_1h, r.windows.next_24h, r.overdue])
      tr.insertCell().textContent = typeof v === "number" ? fmt(v) : v;
  }
}

// Fetched every 5 s (the worker recomputes it no more often), kept in between.
let byTopicLast = null, byTopicAt = 0, byTopicToken = "";
async function forecastByTopic() {
  if (!operatorToken) return null;
  if (byTopicLast && byTopicToken === operatorToken && Date.now() - byTopicAt < 5000) return byTopicLast;
  byTopicLast = await getJSON("/status/forecast", true);
  byTopicAt = Date.now();
  byTopicToken = operatorToken;
  return byTopicLast;
}

function renderNext(list) {
  const tbody = document.querySelector("#next-table tbody");
  tbody.innerHTML = "";
  text("next-note", list.error || "");
  const now = Date.now() / 1000;
  for (const t of list.timers || []) {
    const tr = tbody.insertRow();
    tr.dataset.id = t.id;
    const series = t.series ? "#" + t.series.next_seq + " of " + t.series.recurrence + " (" + t.series.fired + " fired)" : "";
    for (const v of [utc(t.due), Math.round(t.due - now) + " s", t.id, t.partition, t.topic, t.key === null ? "" : t.key, t.value_bytes, series])
      tr.insertCell().textContent = v;
  }
}

// Which timers exist is the operator's to see: /timers/* need their credential, kept
// for this tab only (sessionStorage), sent as a bearer token, never put in the page.
let operatorToken = sessionStorage.getItem("kafka-timers-operator-token") || "";

// A heavy view the worker is too busy for answers 503 with Retry-After (its share of the
// event loop is spent): asked again after that many seconds, a few times, as any client
// should, before the page says it cannot reach the worker.
const BUSY_RETRIES = 5;
const pause = seconds => new Promise(done => setTimeout(done, seconds * 1000));

async function getJSON(path, withToken = false) {
  const headers = withToken && operatorToken ? {Authorization: "Bearer " + operatorToken} : {};
  let r = await fetch(BASE + path, {cache: "no-store", headers});
  for (let retry = 0; r.status === 503 && r.headers.get("Retry-After") !== null && retry < BUSY_RETRIES; retry++) {
    await pause(Math.min(Math.max(Number(r.headers.get("Retry-After")) || 1, 0.2), 5));
    r = await fetch(BASE + path, {cache: "no-store", headers});
  }
  const body = await r.json();
  const refused = withToken && (r.status === 401 || r.status === 403);
  if (!r.ok && r.status !== 404 && !refused) throw new Error(path + ": HTTP " + r.status);
  return body;
}

// Without a token nothing is asked: the routes would only answer 401.
function nextDue() {
  if (!operatorToken) return {error: "listing timers needs the operator's credential: enter KAFKA_TIMERS_OPERATOR_TOKEN above"};
  return getJSON("/timers/next?n=20", true);
}

document.getElementById("token-form").addEventListener("submit", ev => {
  ev.preventDefault();
  operatorToken = document.getElementById("operator-token").value.trim();
  sessionStorage.setItem("kafka-timers-operator-token", operatorToken);
  document.getElementById("operator-token").value = "";
  refresh();
});

async function refresh() {
  try {
    const [d, next, byTopic] = await Promise.all([getJSON("/status/data"), nextDue(), forecastByTopic()]);
    render(d);
    renderForecast(d.due_forecast, byTopic);
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
    text("lookup-result", JSON.stringify(await getJSON("/timers/" + encodeURIComponent(id), true), null, 2));
  } catch (e) { text("lookup-result", String(e)); }
});

refresh();
setInterval(refresh, 1000);
