"""How fast ``prefetch: prefix`` stages a prefix over a netsim link, alone, by gateway settings
(issue 28's epoch 1: the stage is what a shuffled first epoch waits on).

    sudo .venv/bin/python -m bench.stage_rate --links long-fat --runs 2 \\
        --variant "" --variant "FERRY_CACHE_PREFETCH_PARALLEL=64;FERRY_CACHE_FETCH_CONCURRENCY=64"

A netsim SeaweedFS holds ``--objects`` objects of ``--size-kib``; per run and ``--variant``
(``NAME=VALUE`` pairs separated by ``;``, added to the gateway's environment; ``PYTHONPATH=DIR``
runs another checkout's code) a fresh gateway with one ``prefetch: prefix`` rule reads the first
object, and the clock runs until every object has a cached row with bytes. Prints objects a
second and the gateway's CPU (its process tree, from /proc) per object, then the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.au_prefix import add_ab_arguments, variants_of
from bench.proc_cpu import CpuMeter
from bench.remote import LINKS, RemoteRegion
from tests.support.gateway import GatewayProcess

PREFIX = "stage/"
TIMEOUT_S = 120.0


def staged(gw: GatewayProcess) -> int:
    db = sqlite3.connect(gw.data_dir / "ferry.db")
    try:
        return int(db.execute("SELECT COUNT(*) FROM cache_entries WHERE state = 'ready' AND cached_bytes > 0")
                   .fetchone()[0])
    finally:
        db.close()


def one_run(remote: object, workdir: Path, bucket: str, keys: list[str], variant: dict[str, str]) -> dict[str, float]:
    rule = json.dumps([{"bucket": bucket, "prefix": PREFIX, "prefetch": "prefix"}])
    with GatewayProcess(remote, Path(tempfile.mkdtemp(dir=workdir)), env={"FERRY_POLICIES": rule, **variant}) as gw:
        assert gw.proc is not None
        client = gw.client()
        meter, started = CpuMeter([gw.proc.pid]), time.perf_counter()
        client.get_object(Bucket=bucket, Key=keys[0])["Body"].read()
        while (done := staged(gw)) < len(keys) and time.perf_counter() - started < TIMEOUT_S:
            time.sleep(0.05)
        wall = time.perf_counter() - started
        cpu = meter.seconds() or 0.0
        client.close()
    return {"rate": done / wall, "cpu_ms": 1000 * cpu / max(done, 1), "staged": done}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_ab_arguments(parser, runs=2)
    parser.add_argument("--objects", type=int, default=500)
    parser.add_argument("--size-kib", type=int, default=256)
    args = parser.parse_args(argv)
    variants = variants_of(args)
    region = RemoteRegion("netsim")
    remote = region.up()
    workdir = Path(tempfile.mkdtemp(prefix="ferry-stage-"))
    try:
        bucket = f"stage-{uuid.uuid4().hex[:8]}"
        s3 = remote.client()
        s3.create_bucket(Bucket=bucket)
        body = os.urandom(args.size_kib * 1024)
        keys = [f"{PREFIX}{i:05d}" for i in range(args.objects)]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda key: s3.put_object(Bucket=bucket, Key=key, Body=body), keys))
        for link in args.links.split(","):
            print(f"\n{link}: {region.shape(LINKS[link])}", flush=True)
            results: dict[str, list[dict[str, float]]] = {}
            for run in range(args.runs):
                for variant in variants:
                    row = one_run(region.remote or remote, workdir, bucket, keys, variant)
                    results.setdefault(json.dumps(variant), []).append(row)
                    print(f"run {run} {json.dumps(variant)}: {row['staged']:.0f} staged, {row['rate']:.0f} objects/s, "
                          f"gateway CPU {row['cpu_ms']:.2f} ms per object", flush=True)
            print("| variant | objects/s (median) | gateway CPU ms per object | each run (objects/s) |\n|---|---|---|---|")
            for name, got in results.items():
                each = " / ".join(f"{r['rate']:.0f}" for r in got)
                print(f"| {name} | {statistics.median(r['rate'] for r in got):.0f} | "
                      f"{statistics.median(r['cpu_ms'] for r in got):.2f} | {each} |")
    finally:
        region.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
