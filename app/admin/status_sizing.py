"""The status page's sizing chart (app/admin/status_page.py splices it in): the miss-ratio curve of
the worker that answered ``/admin/stats`` (its ``sizing`` section), hit ratio against cache size on
a log scale from budget/4 to 4 x budget, the budget marked, predicted against measured beneath."""

from __future__ import annotations

SECTION = """    <section><h2>Sizing: hit ratio against cache size</h2><svg class="chart" id="chart-sizing"
        viewBox="0 0 600 170" role="img" aria-label="miss-ratio curve"></svg>
      <div class="empty" id="sizing-caption"></div></section>
"""

SCRIPT = """  function sizingChart(z) {
    // The curve of the answering worker (its own reads): x is the cache size, log scale.
    const svg = $("chart-sizing"), W = Math.max(200, Math.round(svg.clientWidth || 600)), H = 170, T = 14, B = 16;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const pts = (z && z.points) || [];
    $("sizing-caption").textContent = !z ? "" : "at the budget: predicted " + pct(z.predicted_hit_ratio)
      + ", measured " + pct(z.measured_hit_ratio) + " (" + count(z.reads) + " reads of worker " + z.pid + ")";
    const y = (h) => T + (H - T - B) * (1 - Math.max(0, Math.min(1, h)));
    for (const f of [0, 0.5, 1]) svg.appendChild(svgEl("line", {x1: 0, x2: W, y1: y(f), y2: y(f), stroke: "#e7ebef"}));
    const top = svgEl("text", {x: 4, y: 10}); top.textContent = pts.length > 1 ? "100 %" : "no reads recorded yet";
    svg.appendChild(top);
    if (pts.length < 2) return;
    const lo = Math.log(pts[0].cache_bytes), hi = Math.log(pts[pts.length - 1].cache_bytes);
    const x = (c) => 30 + (W - 60) * (Math.log(c) - lo) / Math.max(1e-9, hi - lo);
    if (z.budget_bytes > 0) {
      svg.appendChild(svgEl("line", {x1: x(z.budget_bytes), x2: x(z.budget_bytes), y1: T, y2: H - B,
        stroke: "#d9822b", "stroke-dasharray": "4 3"}));
      const b = svgEl("text", {x: x(z.budget_bytes) + 4, y: T + 10}); b.textContent = "budget " + bytes(z.budget_bytes);
      svg.appendChild(b);
    }
    svg.appendChild(svgEl("polyline", {points: pts.map((p) => x(p.cache_bytes).toFixed(1) + ","
      + y(p.hit_ratio).toFixed(1)).join(" "), fill: "none", stroke: "#2f6fdb", "stroke-width": 2}));
    for (const p of pts) {
      const dot = svgEl("circle", {cx: x(p.cache_bytes), cy: y(p.hit_ratio), r: 2.5, fill: "#2f6fdb"});
      const tip = svgEl("title", {}); tip.textContent = bytes(p.cache_bytes) + ": " + pct(p.hit_ratio);
      dot.appendChild(tip); svg.appendChild(dot);
    }
    const left = svgEl("text", {x: 4, y: H - 3}); left.textContent = bytes(pts[0].cache_bytes);
    const right = svgEl("text", {x: W - 60, y: H - 3}); right.textContent = bytes(pts[pts.length - 1].cache_bytes);
    svg.appendChild(left); svg.appendChild(right);
  }
"""
