"""The benchmark report's issue-16 figures and CPU columns, from results made up here (no servers):
ratios pair rows of the same run, every local contender gets CPU columns, and /proc CPU is read for
a whole process tree."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.figures import FIGURES, cpu_table, issue16_table, paired
from bench.proc_cpu import CpuMeter, process_tree
from bench.report import LABELS, render


def _results() -> dict[str, Any]:
    def runs(*rows: dict[str, float]) -> list[dict[str, float]]:
        return [{**r, "run": i} for i, r in enumerate(rows)]

    return {"description": "made up", "skipped": {}, "errors": [], "profile": {"herd_size": 2**20}, "results": {
        "disk": {"disk": runs({"write_fsync_mbps": 400}, {"write_fsync_mbps": 200})},
        "checkpoint": {
            "direct": runs({"ack_s": 4.0, "durable_s": 4.0, "write_mbps": 50}, {"ack_s": 4.0, "durable_s": 4.0,
                                                                               "write_mbps": 50}),
            "ferry": runs({"ack_s": 1, "durable_s": 4.1, "write_mbps": 200, "cpu_s_per_gib": 3.0,
                           "cpu_s_per_gib_durable": 5.0},
                          {"ack_s": 2, "durable_s": 4.1, "write_mbps": 100, "cpu_s_per_gib": 3.0,
                           "cpu_s_per_gib_durable": 5.0}),
            "rclone": runs({"ack_s": 1, "durable_s": 9, "write_mbps": 400, "cpu_s_per_gib": 1.0,
                            "cpu_s_per_gib_durable": 2.0},
                           {"ack_s": 1, "durable_s": 9, "write_mbps": 100, "cpu_s_per_gib": 2.0,
                            "cpu_s_per_gib_durable": 4.0})},
        "small_put": {"ferry": runs({"p50_ms": 2.5, "p99_ms": 20, "cpu_us": 900, "cpu_us_durable": 2000})},
        "small_get": {"ferry": runs({"http_p50_ms": 0.6, "http_cpu_us": 400, "boto3_cpu_us": 500}),
                      "nginx-proxy": runs({"http_p50_ms": 0.3, "http_cpu_us": 60})},
        "warm_read": {"ferry": runs({"mbps": 2000, "cpu_s_per_gib": 0.4}), "rclone": runs({"mbps": 1000,
                                                                                             "cpu_s_per_gib": 0.6})},
        "cold_epoch": {"ferry": runs({"seconds": 2.0}), "direct": runs({"seconds": 2.5})},
    }}


def test_ratios_pair_rows_of_the_same_run() -> None:
    res = _results()
    # run 0: 200/400 = 0.5, run 1: 100/100 = 1.0; a ratio of medians would say 150/250 = 0.6
    assert paired(res, "ferry", ("checkpoint", "*", "write_mbps"), ("checkpoint", "rclone", "write_mbps")) == 0.75
    res["results"]["checkpoint"]["rclone"][0] = {"error": "boom", "run": 0}
    assert paired(res, "ferry", ("checkpoint", "*", "write_mbps"), ("checkpoint", "rclone", "write_mbps")) == 1.0


def test_every_figure_of_the_issue_is_a_row_with_a_number() -> None:
    table = issue16_table(_results(), LABELS)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    assert len(rows) == len(FIGURES) == 11
    assert "not measured" not in table, table
    cells = {row[0]: row[2] for row in rows}
    assert cells["checkpoint ack MB/s vs rclone serve s3"] == "0.750 ❌ not met"
    assert cells["gateway CPU s per GiB acknowledged vs rclone's (until the ack)"] == "2.25 ❌ not met"  # 3/1 and 3/2
    assert cells["4 KiB PUT p50 (fsync and journal on), ms"] == "2.50 ✅ met"
    assert cells["gateway CPU µs per 4 KiB hit (urllib3)"] == "400 (reported)"
    assert cells["cold epoch vs direct (time)"] == "0.800 ✅ met"


def test_cpu_columns_for_every_contender_that_ran_here() -> None:
    table = cpu_table(_results(), LABELS).splitlines()
    assert "CPU s per GiB acknowledged (until the ack)" in table[0] and "CPU µs per 4 KiB hit (urllib3)" in table[0]
    firsts = [line.strip("|").split("|")[0].strip() for line in table[2:]]
    assert firsts == ["Ferry", LABELS["rclone"], LABELS["nginx-proxy"]]  # direct and disk: no local server


def test_the_report_has_the_figures_the_cpu_table_and_how_to_run_it(tmp_path: Path) -> None:
    meta = {"command": "python -m bench --profile smoke", "started": "x", "finished": "y", "runs": 2,
            "profile": {"name": "smoke", "object_size": 2**23, "dataset_count": 20, "dataset_object": 2**16,
                        "threads": 16, "herd_readers": 32, "herd_size": 2**23},
            "machine": {"CPU": "test"}, "versions": {}, "note": ""}
    text = render({"meta": meta, "links": {"loopback": _results()}}, tmp_path / "benchmarks.md")
    for needle in ("### Issue 16's figures", "### Process CPU per unit of work", "## Running the benchmark yourself",
                   "--link loopback", "--remote-endpoint", "### Which column answers which goal",
                   "CPU µs/hit (urllib3)", "CPU s/GiB (ack)"):
        assert needle in text, needle


def test_process_cpu_counts_the_whole_tree() -> None:
    """A grandchild burning CPU shows in the root's meter (uvicorn and nginx workers are children)."""
    grandchild = "sum(i * i for i in range(2_000_000)); import time; time.sleep(60)"
    child = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grandchild!r}]); time.sleep(60)"
    root = f"import subprocess, sys, time; time.sleep(0.3); subprocess.Popen([sys.executable, '-c', {child!r}]); " \
        "time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", root])
    tree: list[int] = []
    try:
        meter = CpuMeter([proc.pid])
        for _ in range(600):  # until the grandchild exists and has burnt its loop (a poll, not a timing)
            tree = process_tree(proc.pid)
            if len(tree) == 3 and (meter.seconds() or 0.0) > 0.05:
                break
            time.sleep(0.05)
        assert len(tree) == 3
        assert (meter.seconds() or 0.0) > 0.05
        assert CpuMeter([]).seconds() is None
    finally:
        for pid in reversed(tree or [proc.pid]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(10)


def test_disk_short_names_a_disk_below_ferrys_reserve() -> None:
    from pathlib import Path

    from bench.__main__ import disk_short

    gib = 1024**3
    # 252 GiB disk: the reserve is 5 % (12.6 GiB); 9.5 GiB free is short, 40 GiB is not.
    assert disk_short(Path("/x"), 4 * gib, usage=lambda _p: (252 * gib, 0, int(9.5 * gib))) is not None
    assert disk_short(Path("/x"), 4 * gib, usage=lambda _p: (252 * gib, 0, 40 * gib)) is None
    # a small disk: the 1 GiB floor applies
    assert disk_short(Path("/x"), 0, usage=lambda _p: (10 * gib, 0, gib // 2)) is not None


def test_exclude_run_drops_that_run_for_every_contender_and_says_so() -> None:
    from bench.__main__ import exclude_run

    data = {"meta": {"note": ""}, "links": {"regional": {"results": {
        "checkpoint": {"ferry": [{"run": 0, "ack_s": 1}, {"run": 2, "ack_s": 9}],
                       "rclone": [{"run": 2, "ack_s": 8}, {"run": 1, "ack_s": 2}]}}}}}
    exclude_run(data, "regional:3")
    rows = data["links"]["regional"]["results"]["checkpoint"]
    assert rows == {"ferry": [{"run": 0, "ack_s": 1}], "rclone": [{"run": 1, "ack_s": 2}]}
    assert "Run 3 of `regional`" in data["meta"]["note"]
