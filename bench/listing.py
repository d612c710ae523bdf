"""ListObjectsV2 of a large directory through the gateway against the same listing straight from
SeaweedFS (issue 30's ``ls -l`` of 10,000 keys is these pages), in one run.

    .venv/bin/python -m bench.listing --keys 10000 --runs 5

Starts SeaweedFS on loopback and one gateway (the embedded defaults), writes ``--keys`` keys
``many/NNNNN`` through the gateway and flushes them (the remote holds them all; ``--pending``
more are written last and listed while the journal may still hold them), then, interleaved run by
run, lists ``many/`` whole in pages of 1,000 (delimiter '/', as the mount lists a large directory)
two ways: through the gateway and straight from SeaweedFS. Each listing is presigned GETs on one kept-alive connection; the
client only finds the continuation token (a regular expression), so the figures are the server's.
Prints medians of wall seconds per whole listing and the CPU seconds of the gateway and of
SeaweedFS per listing (from /proc).
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import urllib3

from bench.proc_cpu import CpuMeter
from tests.support.gateway import GatewayProcess
from tests.support.seaweed import SeaweedServer

_TOKEN = re.compile(rb"<NextContinuationToken>([^<]*)</NextContinuationToken>")
_KEYS = re.compile(rb"<Key>")
_PREFIXES = re.compile(rb"<CommonPrefixes>")


def list_all(client: Any, pool: urllib3.PoolManager, bucket: str, prefix: str) -> tuple[float, int]:
    """Seconds to list ``prefix`` whole (delimiter '/', pages of 1,000), and the entries listed."""
    started = time.perf_counter()
    token: str | None = None
    listed = 0
    while True:
        params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/", "MaxKeys": 1000,
                                  "EncodingType": "url"}
        if token:
            params["ContinuationToken"] = token
        url = client.generate_presigned_url("list_objects_v2", Params=params, ExpiresIn=600)
        resp = pool.request("GET", url)
        assert resp.status == 200, resp.data[:500]
        listed += len(_KEYS.findall(resp.data)) + len(_PREFIXES.findall(resp.data))
        found = _TOKEN.search(resp.data)
        if found is None or b"<IsTruncated>true</IsTruncated>" not in resp.data:
            return time.perf_counter() - started, listed
        token = found.group(1).decode()


def fill(client: Any, bucket: str, keys: list[str]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=b"x"), keys))


def run(keys: int, runs: int, pending: int) -> dict[str, float]:
    results: dict[str, list[float]] = {}

    def add(name: str, value: float | None) -> None:
        if value is not None:
            results.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory(prefix="bench-listing-") as scratch, SeaweedServer() as sw, \
            GatewayProcess(sw, Path(scratch) / "gw") as gw:
        bucket = f"bl-{uuid.uuid4().hex[:8]}"
        ferry = gw.client(max_pool_connections=32)
        ferry.create_bucket(Bucket=bucket)
        fill(ferry, bucket, [f"many/{i:05d}" for i in range(keys)])
        gw.flush(bucket)
        if pending:
            fill(ferry, bucket, [f"many/{i:05d}p" for i in range(0, keys, max(1, keys // pending))][:pending])
        direct = sw.client()
        pool = urllib3.PoolManager(maxsize=2)
        assert gw.proc is not None and sw.pid is not None
        contenders: list[tuple[str, Callable[[], tuple[float, int]]]] = [
            ("gateway", lambda: list_all(ferry, pool, bucket, "many/")),
            ("SeaweedFS", lambda: list_all(direct, pool, bucket, "many/")),
        ]
        for _, call in contenders:
            call()  # warm: connections, the gateway's route table and imports
        for _ in range(runs):
            for name, call in contenders:
                gw_cpu, sw_cpu = CpuMeter([gw.proc.pid]), CpuMeter([sw.pid])
                seconds, listed = call()
                add(f"{name}: wall s", seconds)
                add(f"{name}: gateway CPU s", gw_cpu.seconds())
                add(f"{name}: SeaweedFS CPU s", sw_cpu.seconds())
                add(f"{name}: entries", listed)
    return {name: statistics.median(values) for name, values in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pending", type=int, default=0, help="keys written after the flush (journal merge)")
    args = parser.parse_args()
    medians = run(args.keys, args.runs, args.pending)
    print(f"ListObjectsV2 of {args.keys} keys (+{args.pending} written after the flush), pages of 1,000, "
          f"medians of {args.runs} runs:")
    for name, value in medians.items():
        print(f"  {name:28s} {value:10.3f}")
    if medians.get("SeaweedFS: wall s"):
        print(f"  {'gateway / SeaweedFS (wall)':28s} {medians['gateway: wall s'] / medians['SeaweedFS: wall s']:10.2f}")


if __name__ == "__main__":
    main()
