"""The bench's instruments: machine probes (disk, MD5), timed client reads, per-unit CPU and
latency loops. The workloads (workloads.py) and the single-purpose benchmarks share them."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.contenders import Contender
from bench.proc_cpu import CpuMeter

MiB = 1024 * 1024
CHUNK = MiB


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank), enough for p50/p99 of a few hundred samples."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


# ---------------------------------------------------------------------------------------- machine
def disk_write_fsync_mbps(directory: Path, size: int) -> float:
    """Sequential write + one fsync of ``size`` bytes: what a write-back cache can hope to ack at."""
    block = os.urandom(8 * MiB)
    path = directory / "disk-probe.bin"
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        written = 0
        while written < size:
            written += os.write(fd, block[: min(len(block), size - written)])
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - t0
    path.unlink()
    return size / elapsed / 1e6


def md5_mbps(size: int = 256 * MiB) -> float:
    """MD5 on one core: S3 ETags cost this much CPU per byte written."""
    block = os.urandom(8 * MiB)
    h = hashlib.md5()
    t0 = time.perf_counter()
    for _ in range(max(1, size // len(block))):
        h.update(block)
    return max(1, size // len(block)) * len(block) / (time.perf_counter() - t0) / 1e6


def make_file(path: Path, size: int) -> Path:
    block = os.urandom(16 * MiB)
    with open(path, "wb") as fh:
        written = 0
        while written < size:
            written += fh.write(block[: min(len(block), size - written)])
    return path


# ---------------------------------------------------------------------------------------- clients
def read_s3(s3: Any, bucket: str, key: str) -> tuple[float, float, int]:
    """One GET with boto3, body drained in 1 MiB reads: (time to first byte, total seconds, bytes)."""
    t0 = time.perf_counter()
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    n = len(body.read(1))
    ttfb = time.perf_counter() - t0
    while chunk := body.read(CHUNK):
        n += len(chunk)
    return ttfb, time.perf_counter() - t0, n


def read_http(pool: Any, url: str) -> tuple[float, float, int]:
    """The same with urllib3 (nginx, presigned URLs)."""
    t0 = time.perf_counter()
    r = pool.request("GET", url, preload_content=False)
    if r.status != 200:
        raise RuntimeError(f"GET {url.split('?')[0]}: HTTP {r.status} {r.read(300)!r}")
    n = len(r.read(1))
    ttfb = time.perf_counter() - t0
    while chunk := r.read(CHUNK):
        n += len(chunk)
    r.release_conn()
    return ttfb, time.perf_counter() - t0, n


def reader(c: Contender, pool: Any, bucket: str) -> Callable[[str], tuple[float, float, int]]:
    if c.kind == "http":
        return lambda key: read_http(pool, c.url(bucket, key))
    s3 = c.s3()
    return lambda key: read_s3(s3, bucket, key)


def cpu_per(meter: CpuMeter, units: float, scale: float) -> dict[str, float]:
    """``{"cpu": seconds spent / units * scale}``, or nothing when the contender has no local process."""
    spent = meter.seconds()
    return {} if spent is None or not units else {"cpu": spent / units * scale}


def timed_loop(fn: Callable[[int], None], n: int, budget_s: float, n_min: int = 20) -> list[float]:
    """Latencies (s) of up to ``n`` calls, stopping early after ``budget_s`` once ``n_min`` were done."""
    out: list[float] = []
    start = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t0)
        if len(out) >= n_min and time.perf_counter() - start > budget_s:
            break
    return out
