"""The benchmark's smoke profile still runs end to end (CI keeps `bench/` working; the numbers mean nothing).

Loopback SeaweedFS, tiny objects, one run: direct boto3, Ferry, rclone serve s3 (and nginx when installed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(180)
def test_bench_smoke_profile_writes_a_report(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--profile", "smoke", "--out", str(out), "--results-dir", str(results)],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = out.read_text()
    assert "| workload | goal | Ferry |" in report
    assert "python -m bench --profile smoke" in report
    for title in ("Checkpoint write", "Small writes, 4 KiB PUT", "Cold read", "Warm epoch", "Herd"):
        assert title in report
    [path] = results.glob("bench-smoke-*.json")
    data = json.loads(path.read_text())
    runs = data["links"]["loopback"]["results"]
    for workload in ("checkpoint", "small_put", "cold_read", "warm_read", "cold_epoch", "warm_epoch", "small_get"):
        for contender in ("direct", "ferry"):
            rows = runs[workload][contender]
            assert rows and "error" not in rows[0], (workload, contender, rows)
    assert runs["herd"]["ferry"][0]["remote_bytes"] > 0
