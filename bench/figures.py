"""Issue 16's table, filled from one run: each figure of the issue is a row, each Ferry a column, and
every contender's process CPU (from /proc, see ``bench.proc_cpu``) is a column of its own table.

Ratios are the median of per-run ratios: both sides of a ratio come from the same run (rows carry
``run``), so a noisy neighbour that slows one run slows both.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

Side = tuple[str, str, str]  # (workload, contender, metric); contender "*" is the Ferry of the column
Figure = tuple[str, str, Callable[[dict[str, Any], str], tuple[float | None, bool | None]]]


def _rows_by_run(res: dict[str, Any], workload: str, contender: str, metric: str) -> dict[int, float]:
    rows = res.get("results", {}).get(workload, {}).get(contender, [])
    return {int(r.get("run", i)): float(r[metric]) for i, r in enumerate(rows)
            if isinstance(r.get(metric), int | float) and not isinstance(r.get(metric), bool)}


def paired(res: dict[str, Any], ferry: str, a: Side, b: Side) -> float | None:
    """Median over runs of a ÷ b, each ratio from one run; None when no run has both."""
    (wa, ca, ma), (wb, cb, mb) = a, b
    xs = _rows_by_run(res, wa, ferry if ca == "*" else ca, ma)
    ys = _rows_by_run(res, wb, ferry if cb == "*" else cb, mb)
    ratios = [xs[r] / ys[r] for r in xs if ys.get(r)]
    return statistics.median(ratios) if ratios else None


def single(res: dict[str, Any], ferry: str, side: Side) -> float | None:
    w, c, m = side
    values = list(_rows_by_run(res, w, ferry if c == "*" else c, m).values())
    return statistics.median(values) if values else None


def _ratio_goal(a: Side, b: Side, bar: float, at_most: bool) -> Callable[[dict[str, Any], str],
                                                                          tuple[float | None, bool | None]]:
    def fn(res: dict[str, Any], ferry: str) -> tuple[float | None, bool | None]:
        x = paired(res, ferry, a, b)
        return x, None if x is None else (x <= bar if at_most else x >= bar)
    return fn


def _value_goal(side: Side, bar: float | None) -> Callable[[dict[str, Any], str], tuple[float | None, bool | None]]:
    def fn(res: dict[str, Any], ferry: str) -> tuple[float | None, bool | None]:
        x = single(res, ferry, side)
        return x, None if x is None or bar is None else x <= bar
    return fn


CKPT_MBPS, CKPT_CPU, CKPT_CPU_DURABLE = ("checkpoint", "*", "write_mbps"), ("checkpoint", "*", "cpu_s_per_gib"), \
    ("checkpoint", "*", "cpu_s_per_gib_durable")
FIGURES: list[Figure] = [
    ("checkpoint ack MB/s vs rclone serve s3", "≥ 1.0x (aim 1.5x)",
     _ratio_goal(CKPT_MBPS, ("checkpoint", "rclone", "write_mbps"), 1.0, False)),
    ("checkpoint ack MB/s vs disk write+fsync", "≥ 0.5x (aim 0.75x)",
     _ratio_goal(CKPT_MBPS, ("disk", "disk", "write_fsync_mbps"), 0.5, False)),
    ("gateway CPU s per GiB acknowledged vs rclone's (until the ack)", "≤ 1.2x",
     _ratio_goal(CKPT_CPU, ("checkpoint", "rclone", "cpu_s_per_gib"), 1.2, True)),
    ("gateway CPU s per GiB acknowledged vs rclone's (until the remote holds it)", "≤ 1.2x",
     _ratio_goal(CKPT_CPU_DURABLE, ("checkpoint", "rclone", "cpu_s_per_gib_durable"), 1.2, True)),
    ("remote holds it, vs direct upload time", "≤ 1.05x",
     _ratio_goal(("checkpoint", "*", "durable_s"), ("checkpoint", "direct", "ack_s"), 1.05, True)),
    ("4 KiB PUT p50 (fsync and journal on), ms", "≤ 3 ms", _value_goal(("small_put", "*", "p50_ms"), 3.0)),
    ("4 KiB PUT p99, ms", "≤ 15 ms", _value_goal(("small_put", "*", "p99_ms"), 15.0)),
    ("warm 4 KiB GET p50 vs nginx proxy_cache, same client (urllib3)", "≤ 1.25x",
     _ratio_goal(("small_get", "*", "http_p50_ms"), ("small_get", "nginx-proxy", "http_p50_ms"), 1.25, True)),
    ("gateway CPU µs per 4 KiB hit (urllib3)", "reported (and halved)",
     _value_goal(("small_get", "*", "http_cpu_us"), None)),
    ("warm single stream (one object of the profile's size) vs rclone", "≥ 2x",
     _ratio_goal(("warm_read", "*", "mbps"), ("warm_read", "rclone", "mbps"), 2.0, False)),
    ("cold epoch vs direct (time)", "≤ 1.0x",
     _ratio_goal(("cold_epoch", "*", "seconds"), ("cold_epoch", "direct", "seconds"), 1.0, True)),
]

# Issue 29 ("checkpoints at disk speed"): its goals table, each a ratio of two figures of one run.
FIGURES_29: list[Figure] = [
    ("CPU s per GiB until the ack, vs rclone", "≤ 1.2x",
     _ratio_goal(CKPT_CPU, ("checkpoint", "rclone", "cpu_s_per_gib"), 1.2, True)),
    ("checkpoint ack MB/s vs rclone serve s3", "≥ 1.0x (aim 1.5x)",
     _ratio_goal(CKPT_MBPS, ("checkpoint", "rclone", "write_mbps"), 1.0, False)),
    ("checkpoint ack MB/s vs disk write+fsync", "≥ 0.5x",
     _ratio_goal(CKPT_MBPS, ("disk", "disk", "write_fsync_mbps"), 0.5, False)),
    ("remote holds it vs direct upload", "≤ 1.05x",
     _ratio_goal(("checkpoint", "*", "durable_s"), ("checkpoint", "direct", "ack_s"), 1.05, True)),
    ("4 KiB PUT p50 vs rclone", "≤ 1.2x",
     _ratio_goal(("small_put", "*", "p50_ms"), ("small_put", "rclone", "p50_ms"), 1.2, True)),
    ("4 KiB PUT p99, ms", "≤ 15 ms", _value_goal(("small_put", "*", "p99_ms"), 15.0)),
    ("warm 4 KiB GET p50 vs nginx proxy_cache (urllib3)", "≤ 1.25x",
     _ratio_goal(("small_get", "*", "http_p50_ms"), ("small_get", "nginx-proxy", "http_p50_ms"), 1.25, True)),
    ("CPU per 4 KiB hit vs rclone (urllib3)", "≤ 1.0x",
     _ratio_goal(("small_get", "*", "http_cpu_us"), ("small_get", "rclone", "http_cpu_us"), 1.0, True)),
]

CPU_COLUMNS = [  # (workload, metric, column title)
    ("checkpoint", "cpu_s_per_gib", "CPU s per GiB acknowledged (until the ack)"),
    ("checkpoint", "cpu_s_per_gib_durable", "CPU s per GiB acknowledged (until the remote holds it)"),
    ("small_put", "cpu_us", "CPU µs per 4 KiB PUT (until the ack)"),
    ("small_put", "cpu_us_durable", "CPU µs per 4 KiB PUT (until the remote holds it)"),
    ("small_get", "http_cpu_us", "CPU µs per 4 KiB hit (urllib3)"),
    ("small_get", "boto3_cpu_us", "CPU µs per 4 KiB hit (boto3)"),
    ("warm_read", "cpu_s_per_gib", "CPU s per GiB read warm"),
    ("cold_epoch", "cpu_ms_per_object", "CPU ms per cold object"),
    ("warm_epoch", "cpu_ms_per_object", "CPU ms per warm object"),
]


def _fmt(v: float) -> str:
    digits = 0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2 if abs(v) >= 1 else 3
    return f"{v:.{digits}f}"


def _verdict(value: float | None, met: bool | None, reported: bool) -> str:
    if value is None:
        return "not measured"
    if reported:
        return f"{_fmt(value)} (reported)"
    return f"{_fmt(value)} {'✅ met' if met else '❌ not met'}"


def issue16_table(res: dict[str, Any], labels: dict[str, str], figures: list[Figure] = FIGURES) -> str:
    """An issue's figures (rows; issue 16's unless ``figures`` names others) for each Ferry (columns)."""
    ferries = [f for f in ("ferry", "ferry-w2") if any(f in v for v in res.get("results", {}).values())]
    lines = ["| figure | goal (ratio in one run) | " + " | ".join(labels.get(f, f) for f in ferries) + " |",
             "|---|---|" + "---|" * len(ferries)]
    for text, goal, fn in figures:
        cells = [_verdict(*fn(res, f), reported=goal.startswith("reported")) for f in ferries]
        lines.append(f"| {text} | {goal} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_table(res: dict[str, Any], labels: dict[str, str]) -> str:
    """Process CPU (utime+stime of the contender's processes, /proc) per unit of work, every local contender."""
    results = res.get("results", {})
    present = [(w, m, t) for w, m, t in CPU_COLUMNS
               if any(single(res, c, (w, c, m)) is not None for c in results.get(w, {}))]
    contenders: list[str] = []
    for w, m, _ in present:
        contenders += [c for c in results.get(w, {}) if c not in contenders and single(res, c, (w, c, m)) is not None]
    if not present:
        return "(No process CPU was measured: no /proc, or no contender ran on this machine.)"
    lines = ["| contender | " + " | ".join(t for _, _, t in present) + " |", "|---|" + "---|" * len(present)]
    for c in contenders:
        cells = [single(res, c, (w, c, m)) for w, m, _ in present]
        lines.append(f"| {labels.get(c, c)} | " + " | ".join("-" if v is None else _fmt(v) for v in cells) + " |")
    return "\n".join(lines)
