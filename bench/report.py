"""docs/benchmarks.md from a results JSON: goals (ratios in one run), measurements, plots, machine.

Only ratios are verdicts: absolute times on this shared 2-core machine are shown, never judged.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.figures import FIGURES_29, cpu_table, issue16_table

LABELS = {
    "direct": "direct (boto3 → remote)", "ferry": "Ferry", "ferry-w2": "Ferry --workers 2",
    "rclone": "rclone serve s3 (vfs full, write-back 5s)", "nginx-proxy": "nginx proxy_cache",
    "nginx-static": "nginx static (sendfile)", "disk": "disk",
}
METRICS: dict[str, list[tuple[str, str]]] = {
    "disk": [("write_fsync_mbps", "write + fsync MB/s"), ("md5_mbps_per_core", "MD5 MB/s per core")],
    "checkpoint": [("ack_s", "ack s"), ("durable_s", "remote holds it s"), ("write_mbps", "write MB/s (ack)"),
                   ("cpu_s_per_gib", "CPU s/GiB (ack)"), ("cpu_s_per_gib_durable", "CPU s/GiB (remote holds it)")],
    "small_put": [("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("n", "PUTs/run"), ("cpu_us", "CPU µs/PUT (ack)"),
                  ("cpu_us_durable", "CPU µs/PUT (remote holds it)")],
    "cold_read": [("mbps", "MB/s"), ("ttfb_ms", "TTFB ms")],
    "warm_read": [("mbps", "MB/s"), ("ttfb_ms", "TTFB ms"), ("cpu_s_per_gib", "CPU s/GiB")],
    "cold_epoch": [("seconds", "s"), ("objects_per_s", "objects/s"), ("cpu_ms_per_object", "CPU ms/object")],
    "warm_epoch": [("seconds", "s"), ("objects_per_s", "objects/s"), ("cpu_ms_per_object", "CPU ms/object")],
    "small_get": [("http_p50_ms", "p50 ms (urllib3)"), ("http_p99_ms", "p99 ms (urllib3)"),
                  ("boto3_p50_ms", "p50 ms (boto3)"), ("boto3_p99_ms", "p99 ms (boto3)"),
                  ("http_cpu_us", "CPU µs/hit (urllib3)"), ("boto3_cpu_us", "CPU µs/hit (boto3)")],
    "herd": [("ratio", "remote bytes ÷ size"), ("seconds", "s (all readers)")],
    "scale": [("hit_p50_ms_1000", "hit p50 ms, 1k entries"), ("hit_p50_ms_1M", "hit p50 ms, 1M entries"),
              ("start_s_1000", "start-up s, 1k"), ("start_s_1M", "start-up s, 1M")],
}
TITLES = {
    "disk": "The disk itself", "checkpoint": "Checkpoint write (upload_file)", "small_put": "Small writes, 4 KiB PUT",
    "cold_read": "Cold read, one object, single stream", "warm_read": "Warm read, one object, single stream",
    "cold_epoch": "Cold epoch (objects, 16 threads)", "warm_epoch": "Warm epoch (objects, 16 threads)",
    "small_get": "Warm 4 KiB GET, sequential", "herd": "Herd: concurrent readers of one cold object",
    "scale": "Scale: catalog entries",
}
BLOCK = 16 * 1024 * 1024  # "+ at most one block": Ferry's block size is not fixed yet; its part size


def runs_of(res: dict[str, Any], workload: str, contender: str, metric: str) -> list[float]:
    rows = res.get("results", {}).get(workload, {}).get(contender, [])
    return [float(r[metric]) for r in rows if isinstance(r.get(metric), int | float)]


def med(res: dict[str, Any], workload: str, contender: str, metric: str) -> float | None:
    values = runs_of(res, workload, contender, metric)
    return statistics.median(values) if values else None


def fmt(v: float | None, digits: int | None = None) -> str:
    if v is None:
        return "-"
    if digits is None:
        digits = 0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2 if abs(v) >= 1 else 3
    return f"{v:.{digits}f}"


def cell(res: dict[str, Any], workload: str, contender: str, metric: str) -> str:
    values = runs_of(res, workload, contender, metric)
    if not values:
        errs = [r["error"] for r in res.get("results", {}).get(workload, {}).get(contender, []) if "error" in r]
        return f"error: {errs[0][:60]}" if errs else "-"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"


Goal = tuple[str, str, Callable[[dict[str, Any], str, str], tuple[float | None, bool | None]]]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def _at_least(x: float | None, bar: float) -> tuple[float | None, bool | None]:
    return x, None if x is None else x >= bar


def _at_most(x: float | None, bar: float) -> tuple[float | None, bool | None]:
    return x, None if x is None else x <= bar


def goals(link: str) -> list[Goal]:
    """(workload, bar as text, f(results, ferry contender, link) -> (measured, met)) for one link."""
    cold_bar = 3.0 if link == "long-fat" else 1.2

    def herd(r: dict[str, Any], f: str, _: str) -> tuple[float | None, bool | None]:
        x = med(r, "herd", f, "ratio")
        size = r.get("profile", {}).get("herd_size") or 1
        return x, None if x is None else x <= 1.0 + BLOCK / size + 1e-3

    def ttfb(r: dict[str, Any], f: str, _: str) -> tuple[float | None, bool | None]:
        a, b = med(r, "cold_read", f, "ttfb_ms"), med(r, "cold_read", "direct", "ttfb_ms")
        return (None, None) if a is None or b is None else (a - b, a <= b + 10)

    return [
        ("checkpoint", "ack ≥ 10x faster than direct (direct ack ÷ Ferry ack)",
         lambda r, f, _: _at_least(_ratio(med(r, "checkpoint", "direct", "ack_s"), med(r, "checkpoint", f, "ack_s")), 10)),
        ("checkpoint", "write MB/s ≥ 0.75x disk write+fsync",
         lambda r, f, _: _at_least(_ratio(med(r, "checkpoint", f, "write_mbps"), med(r, "disk", "disk", "write_fsync_mbps")),
                                   0.75)),
        ("checkpoint", "write MB/s ≥ 1.5x rclone",
         lambda r, f, _: _at_least(_ratio(med(r, "checkpoint", f, "write_mbps"), med(r, "checkpoint", "rclone", "write_mbps")),
                                   1.5)),
        ("checkpoint", "remote-durable ≤ 1.1x direct upload time",
         lambda r, f, _: _at_most(_ratio(med(r, "checkpoint", f, "durable_s"), med(r, "checkpoint", "direct", "ack_s")), 1.1)),
        ("small_put", "4 KiB PUT p50 ≤ 5 ms (ms)", lambda r, f, _: _at_most(med(r, "small_put", f, "p50_ms"), 5.0)),
        ("small_put", "4 KiB PUT p50 ≥ 20x faster than direct",
         lambda r, f, _: _at_least(_ratio(med(r, "small_put", "direct", "p50_ms"), med(r, "small_put", f, "p50_ms")), 20)),
        ("cold_read", f"cold read MB/s ≥ {cold_bar}x direct single stream",
         lambda r, f, _: _at_least(_ratio(med(r, "cold_read", f, "mbps"), med(r, "cold_read", "direct", "mbps")), cold_bar)),
        ("cold_read", "TTFB ≤ direct + 10 ms (Ferry - direct, ms)", ttfb),
        ("cold_epoch", "cold epoch time ≤ direct (Ferry ÷ direct)",
         lambda r, f, _: _at_most(_ratio(med(r, "cold_epoch", f, "seconds"), med(r, "cold_epoch", "direct", "seconds")), 1.0)),
        ("warm_read", "warm read MB/s ≥ 0.7x nginx static sendfile",
         lambda r, f, _: _at_least(_ratio(med(r, "warm_read", f, "mbps"), med(r, "warm_read", "nginx-static", "mbps")), 0.7)),
        ("warm_read", "warm read MB/s ≥ 2x rclone",
         lambda r, f, _: _at_least(_ratio(med(r, "warm_read", f, "mbps"), med(r, "warm_read", "rclone", "mbps")), 2.0)),
        ("warm_epoch", "warm epoch objects/s ≥ 0.7x nginx proxy_cache",
         lambda r, f, _: _at_least(_ratio(med(r, "warm_epoch", f, "objects_per_s"),
                                          med(r, "warm_epoch", "nginx-proxy", "objects_per_s")), 0.7)),
        ("small_get", "warm 4 KiB GET p50 ≤ 1.25x nginx proxy_cache (same client: urllib3)",
         lambda r, f, _: _at_most(_ratio(med(r, "small_get", f, "http_p50_ms"),
                                         med(r, "small_get", "nginx-proxy", "http_p50_ms")), 1.25)),
        ("small_get", "warm 4 KiB GET p99 ≤ 2x nginx proxy_cache (same client: urllib3)",
         lambda r, f, _: _at_most(_ratio(med(r, "small_get", f, "http_p99_ms"),
                                         med(r, "small_get", "nginx-proxy", "http_p99_ms")), 2.0)),
        ("herd", "remote bytes ÷ object size ≤ 1.0 + one block (16 MiB)", herd),
        ("scale", "hit p50 at 1M ÷ at 1k entries ≤ 1.2",
         lambda r, f, _: _at_most(_ratio(med(r, "scale", f, "hit_p50_ms_1M"), med(r, "scale", f, "hit_p50_ms_1000")), 1.2)),
    ]


def verdict(value: float | None, met: bool | None) -> str:
    if value is None:
        return "not measured"
    return f"{fmt(value)} {'✅ met' if met else '❌ not met'}"


def goals_table(res: dict[str, Any], link: str) -> str:
    ferries = [f for f in ("ferry", "ferry-w2") if any(f in v for v in res.get("results", {}).values())]
    head = "| workload | goal | " + " | ".join(LABELS[f] for f in ferries) + " |\n|---|---|" + "---|" * len(ferries)
    lines = [head]
    for workload, text, fn in goals(link):
        if workload in res.get("skipped", {}):
            cells = [f"skipped: {res['skipped'][workload]}"] * len(ferries)
        else:
            cells = [verdict(*fn(res, f, link)) if workload != "scale" or f == "ferry" else "n/a (measured on Ferry only)"
                     for f in ferries]
        lines.append(f"| {TITLES[workload]} | {text} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def measurements(res: dict[str, Any]) -> str:
    out: list[str] = []
    for workload, metrics in METRICS.items():
        data = res.get("results", {}).get(workload)
        if workload in res.get("skipped", {}):
            out.append(f"**{TITLES[workload]}**: skipped ({res['skipped'][workload]}).\n")
            continue
        if not data:
            continue
        present = [(m, t) for m, t in metrics if any(runs_of(res, workload, c, m) for c in data)]
        out.append(f"**{TITLES[workload]}**\n")
        out.append("| contender | " + " | ".join(t for _, t in present) + " |\n|---|" + "---|" * len(present))
        for c in data:
            out.append(f"| {LABELS.get(c, c)} | " + " | ".join(cell(res, workload, c, m) for m, _ in present) + " |")
        out.append("")
    return "\n".join(out)


PLOTS = [  # (file stem, workload, metric, axis label, log scale)
    ("checkpoint-ack", "checkpoint", "ack_s", "checkpoint ack (s, lower is better)", False),
    ("small-put-p50", "small_put", "p50_ms", "4 KiB PUT p50 (ms, log, lower is better)", True),
    ("cold-read", "cold_read", "mbps", "cold read MB/s (higher is better)", False),
    ("warm-read", "warm_read", "mbps", "warm read MB/s (higher is better)", False),
    ("epochs", "cold_epoch", "seconds", "cold epoch s (lower is better)", False),
    ("warm-epoch", "warm_epoch", "objects_per_s", "warm epoch objects/s (higher is better)", False),
    ("small-get-p50", "small_get", "http_p50_ms", "warm 4 KiB GET p50, urllib3 (ms, log)", True),
    ("herd", "herd", "ratio", "herd: remote bytes ÷ object size (lower is better)", True),
]


def plots(data: dict[str, Any], out_dir: Path) -> list[tuple[str, Path]]:
    """Grouped bars per workload (contenders on x, one bar per link, whiskers = min-max)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    made: list[tuple[str, Path]] = []
    links = list(data["links"])
    for stem, workload, metric, ylabel, logy in PLOTS:
        contenders: list[str] = []
        for link in links:
            for c in data["links"][link].get("results", {}).get(workload, {}):
                if c not in contenders and runs_of(data["links"][link], workload, c, metric):
                    contenders.append(c)
        if not contenders:
            continue
        fig, ax = plt.subplots(figsize=(8, 3.6))
        width = 0.8 / len(links)
        for i, link in enumerate(links):
            res = data["links"][link]
            xs, ys, lo, hi = [], [], [], []
            for j, c in enumerate(contenders):
                values = runs_of(res, workload, c, metric)
                if values:
                    m = statistics.median(values)
                    xs.append(j + i * width - 0.4 + width / 2)
                    ys.append(m)
                    lo.append(m - min(values))
                    hi.append(max(values) - m)
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=link)
        ax.set_xticks(range(len(contenders)))
        ax.set_xticklabels([LABELS.get(c, c).split(" (")[0] for c in contenders], fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        if logy:
            ax.set_yscale("log")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = out_dir / f"{stem}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append((ylabel, path))
    return made


def howto() -> list[str]:
    """bench/README.md (written by hand: how to run the benchmark, which column answers which goal)."""
    path = Path(__file__).resolve().parent / "README.md"
    if not path.exists():
        return []
    lines, fenced = [], False
    for line in path.read_text().rstrip().splitlines():
        fenced = fenced != line.startswith("```")
        lines.append("#" + line if line.startswith("#") and not fenced else line)  # one level down
    return [*lines, ""]


def render(data: dict[str, Any], out: Path) -> str:
    """Write the markdown report (and its PNGs into ``<out dir>/benchmarks/``); return the markdown."""
    meta = data["meta"]
    prof = meta["profile"]
    figs = plots(data, out.parent / "benchmarks")
    parts = [
        "# Benchmarks",
        "",
        "Generated by the benchmark itself (`bench/`); do not edit by hand. Regenerate with:",
        "",
        f"```\n{meta['command']}\n```",
        "",
        f"Run {meta['started']} - {meta['finished']} (UTC). Profile `{prof['name']}`: objects of "
        f"{prof['object_size'] // 2**20} MiB, epochs of {prof['dataset_count']} x {prof['dataset_object'] // 1024} KiB with "
        f"{prof['threads']} threads, herd of {prof['herd_readers']} readers on {prof['herd_size'] // 2**20} MiB, "
        f"{meta['runs']} run(s) per figure (herd: 1). Cells are the median of the runs with (min-max) in brackets.",
        "",
    ]
    if meta.get("note"):
        parts += [meta["note"], ""]
    parts += [
        "**Read this first.** The machine has 2 cores and is shared with other work, so absolute times are noise-prone;"
        " only ratios between contenders measured in the same run are verdicts. The remote is a real S3 server (SeaweedFS)"
        " behind an emulated long-haul link (`bench/netsim`), not a real cloud region.",
        "",
        "**Clients.** S3 contenders (direct, Ferry, rclone) are driven with boto3 as their users would drive them"
        " (`upload_file`/`get_object` defaults, bodies drained in 1 MiB reads, no disk writes on the client); nginx is driven"
        " with urllib3 (a plain HTTP GET; the proxy_cache gets presigned URLs of the remote, and caches by path with"
        " `proxy_cache_lock on`). The warm 4 KiB GET is also measured with urllib3 and a presigned URL against *every*"
        " contender, and that same-client figure is the one judged against nginx.",
        "",
        "**Cache validity.** Both caches keep data valid for 7 days without asking the remote: nginx with"
        " `proxy_cache_valid 200 7d`, Ferry with `FERRY_CACHE_TTL_SECONDS=604800` (a dataset that does not change; the"
        " default 300 s TTL would add a conditional HEAD to reads made more than 5 minutes after the data was cached).",
        "",
        *howto(),
        "## Machine",
        "",
        "| | |\n|---|---|",
        *[f"| {k} | {v} |" for k, v in meta["machine"].items()],
        *[f"| {k} | {v} |" for k, v in meta["versions"].items() if k != "root"],
        "",
    ]
    for link, res in data["links"].items():
        parts += [f"## Link `{link}`: {res['description']}", "", "### Issue 29's figures (checkpoints at disk speed)", "",
                  "Each ratio is the median of per-run ratios (both sides measured in the same run).", "",
                  issue16_table(res, LABELS, FIGURES_29), "", "### Issue 16's figures", "",
                  "Each ratio is the median of per-run ratios (both sides measured in the same run).", "",
                  issue16_table(res, LABELS), "", "### Process CPU per unit of work (from /proc)", "",
                  "utime + stime of each contender's processes (Ferry with its workers, rclone, nginx master and"
                  " workers), read before and after each workload; direct has no local server. The client's CPU"
                  " is not included.", "", cpu_table(res, LABELS), ""]
        parts += ["### Goals (issue 6)", "", goals_table(res, link), ""]
        parts += ["### Measurements", "", measurements(res)]
        if res.get("errors"):
            parts += ["Errors during the run:", "", *[f"- `{e}`" for e in res["errors"]], ""]
    if figs:
        parts += ["## Plots", "", "Bars are medians, whiskers min-max, one bar per link profile.", ""]
        parts += [f"![{label}](benchmarks/{path.name})\n" for label, path in figs]
    else:
        parts += ["(No plots: matplotlib is not installed; `pip install -e '.[bench]'`.)", ""]
    parts += [
        "## What is not measured",
        "",
        "- Herd with direct clients: 32 readers fetch 32 x the object by construction, so it is not run.",
        "",
    ]
    analysis = Path(__file__).resolve().parent / "analysis.md"
    if analysis.exists():  # written by hand: why a goal is not met, and what would close the gap
        parts += [analysis.read_text().rstrip(), ""]
    text = "\n".join(parts)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text
