"""The status page's HTML: one document, inline CSS, script and SVG; nothing fetched but /admin/stats.
The sizing chart's markup and script are in app/admin/status_sizing.py, spliced in below.

The token comes from ``?token=`` once (then kept in sessionStorage and removed from the address
bar) or from the form; without one the page shows no figures. All data is inserted with
``textContent``, never as markup: bucket names and prefixes are client-chosen text.
"""

from __future__ import annotations

from app.admin import status_sizing

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>Ferry status</title>
<style>
  :root { --fg: #1d2733; --muted: #66707a; --line: #d8dde3; --bg: #f6f7f9; --card: #fff;
          --blue: #2f6fdb; --green: #1f9d55; --orange: #d9822b; --red: #c92a2a; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.4 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
  header { display: flex; gap: 1em; align-items: baseline; padding: 12px 20px; background: #17202b; color: #fff; }
  header h1 { font-size: 18px; margin: 0; }
  header .meta { color: #b8c2cc; font-size: 12px; }
  main { padding: 16px 20px; display: grid; gap: 16px; }
  .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 12px; }
  .card, section { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; }
  .card .label { color: var(--muted); font-size: 12px; }
  .card .value { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
  .card .sub { color: var(--muted); font-size: 12px; }
  .charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(440px, 1fr)); gap: 16px; }
  section h2 { font-size: 14px; margin: 0 0 6px; }
  svg.chart { width: 100%; height: 170px; display: block; }
  svg.chart text { font-size: 10px; fill: var(--muted); }
  table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
  th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid var(--line); }
  th { color: var(--muted); font-weight: 500; font-size: 12px; }
  .bar { height: 8px; background: #e7ebef; border-radius: 4px; overflow: hidden; min-width: 80px; }
  .bar > div { height: 100%; background: var(--blue); }
  .bad { color: var(--red); }
  #login { max-width: 420px; }
  #login input { width: 100%; padding: 6px; margin: 6px 0; font: inherit; }
  .hidden { display: none; }
  .empty { color: var(--muted); }
</style>
</head>
<body>
<header>
  <h1>Ferry</h1>
  <span class="meta" id="node">&nbsp;</span>
  <span class="meta" id="updated" data-value="0">not connected</span>
  <span class="meta bad" id="problem" role="alert"></span>
</header>
<main>
  <section id="login" class="hidden">
    <h2>Admin token</h2>
    <p class="empty">The figures need a token with the read scope (FERRY_ADMIN_TOKEN or one from
      POST /admin/tokens). It is kept in this tab only.</p>
    <form id="login-form">
      <input id="token-input" type="password" autocomplete="off" placeholder="bearer token" aria-label="admin token">
      <button type="submit">Show status</button>
    </form>
  </section>
  <div id="dashboard" class="hidden">
    <div class="cards">
      <div class="card"><div class="label">S3 requests</div>
        <div class="value" id="requests-total" data-value="0">-</div>
        <div class="sub"><span id="request-rate" data-value="0">-</span> req/s</div></div>
      <div class="card"><div class="label">Cache hit ratio (reads in the last 60 s)</div>
        <div class="value" id="hit-ratio" data-value="">-</div>
        <div class="sub">since the gateway started: <span id="hit-ratio-total" data-value="">-</span>,
          <span id="cache-reads" data-value="0">0</span> reads</div></div>
      <div class="card"><div class="label">Dirty bytes (not yet on the remote)</div>
        <div class="value" id="dirty-bytes" data-value="0">-</div>
        <div class="sub">of <span id="buffer-bytes" data-value="0">-</span> write buffer</div></div>
      <div class="card"><div class="label">Destage lag</div>
        <div class="value" id="destage-lag" data-value="0">-</div>
        <div class="sub">queue <span id="queue-depth" data-value="0">-</span>,
          failed <span id="failed-versions" data-value="0">-</span></div></div>
      <div class="card"><div class="label">Cached bytes</div>
        <div class="value" id="cached-bytes" data-value="0">-</div>
        <div class="sub">pinned <span id="pinned-bytes" data-value="0">-</span> of
          <span id="cache-budget" data-value="0">-</span></div></div>
      <div class="card"><div class="label">Traffic</div>
        <div class="value"><span id="bytes-out" data-value="0">-</span></div>
        <div class="sub">out, <span id="bytes-in" data-value="0">-</span> in</div></div>
      <div class="card"><div class="label">Remote</div>
        <div class="value" id="remote-requests" data-value="0">-</div>
        <div class="sub">errors <span id="remote-errors" data-value="0">-</span>,
          destage failures <span id="destage-failures" data-value="0">-</span>,
          circuit <span id="remote-circuit">-</span></div></div>
    </div>
    <div class="charts">
      <section><h2>Cache hit ratio</h2><svg class="chart" id="chart-hit" viewBox="0 0 600 170" role="img"
        aria-label="hit ratio over time"></svg></section>
      <section><h2>Request rate (req/s)</h2><svg class="chart" id="chart-rate" viewBox="0 0 600 170" role="img"
        aria-label="request rate over time"></svg></section>
      <section><h2>Dirty bytes</h2><svg class="chart" id="chart-dirty" viewBox="0 0 600 170" role="img"
        aria-label="dirty bytes over time"></svg></section>
      <section><h2>Destage lag (s)</h2><svg class="chart" id="chart-lag" viewBox="0 0 600 170" role="img"
        aria-label="destage lag over time"></svg></section>
    </div>
<!--sizing-section-->    <section><h2>Cache usage per tenant</h2>
      <table id="tenants"><thead><tr><th>tenant</th><th>cached</th><th>pinned</th><th>objects</th>
        <th>quota</th><th>use</th></tr></thead><tbody></tbody></table></section>
    <section><h2>Hit ratio by bucket</h2>
      <table id="buckets"><thead><tr><th>bucket</th><th>tenant</th><th>hit</th><th>miss</th><th>stale</th>
        <th>bypass</th><th>hit ratio</th></tr></thead><tbody></tbody></table></section>
    <section><h2>Fleet workers</h2>
      <table id="workers"><thead><tr><th>node</th><th>worker</th><th>beat</th><th>queued</th>
        </tr></thead><tbody></tbody></table></section>
    <section><h2>Staging jobs</h2>
      <table id="jobs"><thead><tr><th>job</th><th>target</th><th>state</th><th>objects</th><th>bytes</th>
        <th>progress</th><th>running</th></tr></thead><tbody></tbody></table></section>
  </div>
</main>
<script>
"use strict";
(function () {
  const KEY = "ferryAdminToken";
  const POLL_MS = 2000;
  const RING = 300;               // samples kept: 10 minutes at one every 2 s
  const ring = [];
  let timer = null;

  const params = new URLSearchParams(window.location.search);
  if (params.has("token")) {      // accepted once, then kept out of the address bar and history
    sessionStorage.setItem(KEY, params.get("token"));
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", window.location.pathname + (rest ? "?" + rest : ""));
  }

  const $ = (id) => document.getElementById(id);

  function bytes(n) {
    if (n === null || n === undefined || isNaN(n)) return "-";
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(n >= 100 ? 0 : 1)) + " " + units[i];
  }
  function count(n) {
    if (n >= 1e9) return (n / 1e9).toFixed(1) + "G";
    if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
    return String(Math.round(n));
  }
  function pct(r) { return r === null ? "-" : (100 * r).toFixed(1) + " %"; }
  function secs(s) {
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
    if (s < 3600) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  function put(id, value, text) { const el = $(id); el.dataset.value = String(value); el.textContent = text; }
  function hitRatio(o) {
    const served = o.hit + o.stale, reads = served + o.miss;
    return reads > 0 ? served / reads : null;
  }

  function showLogin(message) {
    if (timer !== null) { clearTimeout(timer); timer = null; }
    $("dashboard").classList.add("hidden");
    $("login").classList.remove("hidden");
    $("problem").textContent = message || "";
    $("updated").textContent = "not connected";
  }

  $("login-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    const value = $("token-input").value.trim();
    if (!value) return;
    sessionStorage.setItem(KEY, value);
    $("token-input").value = "";
    start();
  });

  function start() {
    if (!sessionStorage.getItem(KEY)) { showLogin(""); return; }
    $("login").classList.add("hidden");
    $("dashboard").classList.remove("hidden");
    poll();
  }

  async function poll() {
    timer = null;
    const token = sessionStorage.getItem(KEY);
    if (!token) { showLogin(""); return; }
    let doc = null;
    try {
      const resp = await fetch("/admin/stats", {headers: {"Authorization": "Bearer " + token}, cache: "no-store"});
      if (resp.status === 401 || resp.status === 403) {
        sessionStorage.removeItem(KEY);
        showLogin(resp.status === 401 ? "The token was not accepted." : "The token lacks the read scope.");
        return;
      }
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      doc = await resp.json();
      $("problem").textContent = doc.catalog_ok ? "" : "catalog unreachable: figures from the catalog are stale";
    } catch (err) {
      $("problem").textContent = "cannot reach the gateway (" + err.message + "); retrying";
    }
    if (doc !== null) render(doc);
    timer = setTimeout(poll, POLL_MS);
  }

  function render(d) {
    ring.push(d);
    if (ring.length > RING) ring.shift();
    const prev = ring.length > 1 ? ring[ring.length - 2] : null;
    $("node").textContent = "node " + d.node_id;
    put("updated", d.time, "updated " + new Date(d.time * 1000).toLocaleTimeString());

    const r = d.requests, c = d.cache, w = d.writes;
    put("requests-total", r.total, count(r.total));
    const rate = prev ? Math.max(0, (r.total - prev.requests.total) / Math.max(0.001, d.time - prev.time)) : 0;
    put("request-rate", rate.toFixed(2), rate.toFixed(1));
    const o = c.outcomes;
    const reads = o.hit + o.miss + o.stale + o.bypass;
    put("cache-reads", reads, count(reads));
    const total = hitRatio(o);
    put("hit-ratio-total", total === null ? "" : total.toFixed(4), pct(total));
    let base = ring[0];               // the oldest sample of the last minute
    for (const sample of ring) { if (d.time - sample.time <= 60) { base = sample; break; } }
    const recent = base !== d ? intervalRatio(base.cache.outcomes, o) : null;
    put("hit-ratio", recent === null ? "" : recent.toFixed(4), recent === null ? "no reads in 60 s" : pct(recent));
    put("dirty-bytes", w.dirty_bytes, bytes(w.dirty_bytes));
    put("buffer-bytes", w.buffer_bytes, bytes(w.buffer_bytes));
    put("destage-lag", w.lag_seconds, secs(w.lag_seconds));
    put("queue-depth", w.queue_depth, count(w.queue_depth));
    put("failed-versions", w.failed, count(w.failed));
    $("failed-versions").classList.toggle("bad", w.failed > 0);
    put("cached-bytes", c.cached_bytes, bytes(c.cached_bytes));
    put("pinned-bytes", c.pinned_bytes, bytes(c.pinned_bytes));
    put("cache-budget", c.budget_bytes, bytes(c.budget_bytes));
    put("bytes-out", r.bytes_out, bytes(r.bytes_out));
    put("bytes-in", r.bytes_in, bytes(r.bytes_in));
    put("remote-requests", d.remote.requests, count(d.remote.requests));
    put("remote-errors", d.remote.errors, count(d.remote.errors));
    $("remote-errors").classList.toggle("bad", d.remote.errors > 0);
    put("destage-failures", d.destage.failures, count(d.destage.failures));
    $("remote-circuit").textContent = d.remote.circuit;
    $("remote-circuit").classList.toggle("bad", d.remote.circuit !== "closed");

    const hits = [], rates = [], dirty = [], lag = [];
    for (let i = 0; i < ring.length; i++) {
      const s = ring[i], p = i > 0 ? ring[i - 1] : null;
      hits.push(p ? intervalRatio(p.cache.outcomes, s.cache.outcomes) : null);
      rates.push(p ? Math.max(0, (s.requests.total - p.requests.total) / Math.max(0.001, s.time - p.time)) : null);
      dirty.push(s.writes.dirty_bytes);
      lag.push(s.writes.lag_seconds);
    }
    const span = ring.length > 1 ? ring[ring.length - 1].time - ring[0].time : 0;
    chart("chart-hit", hits, "#1f9d55", 1, pct, span);
    chart("chart-rate", rates, "#2f6fdb", null, (v) => v.toFixed(1), span);
    chart("chart-dirty", dirty, "#d9822b", null, bytes, span);
    chart("chart-lag", lag, "#c92a2a", null, secs, span);
    tenants(c.tenants);
    buckets(c.by_bucket);
    jobs(d.staging_jobs);
    workers(d.workers || []);
    sizingChart(d.sizing);
  }

  function intervalRatio(a, b) {
    return hitRatio({hit: b.hit - a.hit, miss: b.miss - a.miss, stale: b.stale - a.stale});
  }

  const SVG = "http://www.w3.org/2000/svg";
  function svgEl(name, attrs) {
    const el = document.createElementNS(SVG, name);
    for (const k in attrs) el.setAttribute(k, String(attrs[k]));
    return el;
  }
  function chart(id, values, color, fixedMax, fmt, seconds) {
    // Drawn in the element's own pixel size, so text is never stretched; the x axis spans the
    // samples held so far (up to the ring's 10 minutes).
    const svg = $(id), W = Math.max(200, Math.round(svg.clientWidth || 600)), H = 170, L = 4, T = 14, B = 16;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const known = values.filter((v) => v !== null);
    const max = fixedMax !== null ? fixedMax : Math.max(1e-9, ...known, 0);
    for (const f of [0, 0.5, 1]) {
      const y = T + (H - T - B) * (1 - f);
      svg.appendChild(svgEl("line", {x1: 0, x2: W, y1: y, y2: y, stroke: "#e7ebef"}));
    }
    const top = svgEl("text", {x: L, y: 10}); top.textContent = known.length ? fmt(max) : "no data yet";
    svg.appendChild(top);
    const span = Math.max(1, values.length - 1);
    const left = svgEl("text", {x: L, y: H - 3});
    left.textContent = seconds > 0 ? "-" + secs(seconds) : "";
    const right = svgEl("text", {x: W - 24, y: H - 3}); right.textContent = "now";
    svg.appendChild(left); svg.appendChild(right);
    let points = [];
    const flush = () => {
      if (points.length > 1) {
        svg.appendChild(svgEl("polyline", {points: points.join(" "), fill: "none", stroke: color,
          "stroke-width": 2, "vector-effect": "non-scaling-stroke"}));
      } else if (points.length === 1) {
        const [x, y] = points[0].split(",");
        svg.appendChild(svgEl("circle", {cx: x, cy: y, r: 2.5, fill: color}));
      }
      points = [];
    };
    values.forEach((v, i) => {
      if (v === null) { flush(); return; }   // no reads in that interval: a gap, not a zero
      const x = (i / span) * W;
      const y = T + (H - T - B) * (1 - Math.min(1, v / max));
      points.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    flush();
  }

/*sizing-script*/
  function cell(tr, text) { const td = document.createElement("td"); td.textContent = text; tr.appendChild(td); return td; }
  function barCell(tr, fraction) {
    const td = document.createElement("td"), bar = document.createElement("div"), fill = document.createElement("div");
    bar.className = "bar"; fill.style.width = (100 * Math.max(0, Math.min(1, fraction))).toFixed(1) + "%";
    bar.appendChild(fill); td.appendChild(bar); tr.appendChild(td);
  }
  function fill(tableId, rows, emptyText, build) {
    const body = $(tableId).tBodies[0];
    while (body.firstChild) body.removeChild(body.firstChild);
    if (!rows.length) {
      const tr = document.createElement("tr"), td = cell(tr, emptyText);
      td.colSpan = $(tableId).tHead.rows[0].cells.length; td.className = "empty";
      body.appendChild(tr);
      return;
    }
    for (const row of rows) { const tr = document.createElement("tr"); build(tr, row); body.appendChild(tr); }
  }
  function tenants(rows) {
    const budget = ring[ring.length - 1].cache.budget_bytes;
    fill("tenants", rows, "no tenants", (tr, t) => {
      tr.dataset.tenant = t.tenant;
      cell(tr, t.name ? t.name + " (" + t.tenant + ")" : (t.tenant || "(none)"));
      cell(tr, bytes(t.cached_bytes)); cell(tr, bytes(t.pinned_bytes)); cell(tr, count(t.entries));
      cell(tr, t.quota_bytes === null ? "-" : bytes(t.quota_bytes));
      const limit = t.quota_bytes || budget;
      barCell(tr, limit ? t.cached_bytes / limit : 0);
    });
  }
  function buckets(rows) {
    fill("buckets", rows, "no cached reads yet", (tr, b) => {
      cell(tr, b.bucket); cell(tr, b.tenant_name || b.tenant || "-");
      cell(tr, count(b.hit)); cell(tr, count(b.miss)); cell(tr, count(b.stale)); cell(tr, count(b.bypass));
      cell(tr, pct(hitRatio(b)));
    });
  }
  function jobs(rows) {
    fill("jobs", rows, "no staging jobs running", (tr, j) => {
      cell(tr, j.id); cell(tr, j.bucket + "/" + j.prefix); cell(tr, j.state);
      cell(tr, count(j.objects_done) + " / " + (j.listing_done ? count(j.objects_total) : count(j.objects_total) + "+"));
      cell(tr, bytes(j.bytes_done) + " / " + bytes(j.bytes_total));
      barCell(tr, j.bytes_total ? j.bytes_done / j.bytes_total : (j.objects_total ? j.objects_done / j.objects_total : 0));
      cell(tr, j.running_seconds === null ? "-" : secs(j.running_seconds));
    });
  }

  function workers(rows) {
    const life = (l) => (l.alive ? "alive" : "STALE")
      + (l.age_seconds === null ? " (never)" : " (" + secs(l.age_seconds) + " ago)");
    fill("workers", rows, "embedded mode: no Celery workers", (tr, w) => {
      cell(tr, w.node_id); cell(tr, life(w.worker)); cell(tr, life(w.beat)); cell(tr, count(w.queue_depth));
    });
  }

  start();
})();
</script>
</body>
</html>
"""

PAGE = (_PAGE.replace("<!--sizing-section-->", status_sizing.SECTION)
        .replace("/*sizing-script*/", status_sizing.SCRIPT))
