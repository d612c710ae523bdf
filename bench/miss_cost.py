"""What a cold miss costs the gateway against a hit, per small object (issue 28's epoch 1).

    .venv/bin/python -m bench.miss_cost --objects 600 --size-kib 256 --runs 3

A loopback SeaweedFS holds ``--objects`` objects; a fresh gateway per run reads each once with 8
boto3 threads (every read a miss: the sample epoch's first pass), then again (every read a hit).
Per run: the wall time of each pass and the gateway's CPU (utime + stime of its process tree, from
/proc) per object. On a machine whose cores the loaders and the remote share, an epoch of misses
is bounded by this CPU, whatever the prefetch's parallelism.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.proc_cpu import CpuMeter
from tests.support.gateway import GatewayProcess
from tests.support.seaweed import SeaweedServer

THREADS = 8


def read_all(s3: Any, bucket: str, keys: list[str]) -> None:
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda key: s3.get_object(Bucket=bucket, Key=key)["Body"].read(), keys))


def one_run(seaweed: SeaweedServer, bucket: str, keys: list[str]) -> dict[str, float]:
    """A fresh gateway: one pass of misses, one of hits (a first read outside both warms it up)."""
    data_dir = Path(tempfile.mkdtemp(prefix="ferry-miss-"))
    try:
        return _passes(seaweed, bucket, keys, data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)  # each run's cache: ~150 MiB


def _passes(seaweed: SeaweedServer, bucket: str, keys: list[str], data_dir: Path) -> dict[str, float]:
    with GatewayProcess(seaweed, data_dir, env={"FERRY_CACHE_TTL_SECONDS": "604800"}) as gw:
        assert gw.proc is not None
        s3 = gw.client(max_pool_connections=16)
        read_all(s3, bucket, keys[:1])
        out: dict[str, float] = {}
        for kind in ("miss", "hit"):
            meter, started = CpuMeter([gw.proc.pid]), time.perf_counter()
            read_all(s3, bucket, keys[1:])
            out[f"{kind}_wall_s"] = time.perf_counter() - started
            out[f"{kind}_cpu_ms"] = 1000 * (meter.seconds() or 0.0) / (len(keys) - 1)
        return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=600)
    parser.add_argument("--size-kib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with SeaweedServer() as seaweed:
        remote = seaweed.client(max_pool_connections=16)
        bucket = f"miss-{uuid.uuid4().hex[:8]}"
        remote.create_bucket(Bucket=bucket)
        body = os.urandom(args.size_kib * 1024)
        keys = [f"samples/{i:06d}" for i in range(args.objects)]
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(lambda key: remote.put_object(Bucket=bucket, Key=key, Body=body), keys))
        runs = [one_run(seaweed, bucket, keys) for _ in range(args.runs)]
    print(f"{args.objects - 1} objects of {args.size_kib} KiB, {THREADS} threads, medians of {args.runs} runs")
    print("| pass | wall s | gateway CPU ms per object | each run (ms) |\n|---|---|---|---|")
    for kind in ("miss", "hit"):
        wall = statistics.median(r[f"{kind}_wall_s"] for r in runs)
        cpu = statistics.median(r[f"{kind}_cpu_ms"] for r in runs)
        each = " / ".join(f"{r[f'{kind}_cpu_ms']:.2f}" for r in runs)
        print(f"| {kind} | {wall:.2f} | {cpu:.2f} | {each} |")


if __name__ == "__main__":
    main()
