"""The warm 4 KiB hit, alone: Ferry (this tree, and optionally a baseline checkout) against the
raw-ASGI ceiling (``bench/asgi_ceiling.py`` under the same uvicorn), with the client of the
benchmark's ``small_get`` (urllib3, a presigned URL, one connection, sequential GETs).

    .venv/bin/python -m bench.hitpath --gets 2000 --runs 5 --baseline /tmp/hit-base
    .venv/bin/python -m bench.hitpath --py-spy /tmp/spy   # also record this tree's gateway

Contenders alternate run by run (the machine is noisy: only figures of one run compare). Per run
and contender: p50/p99 latency and the server's CPU µs per hit (utime+stime from /proc, all its
threads and processes: ``bench/proc_cpu.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import urllib3

from bench.probes import pct, read_http
from bench.proc_cpu import CpuMeter
from bench.stages import tree_gateways
from tests.support.gateway import free_port
from tests.support.seaweed import SeaweedServer

KEY = "hot4k"


class Ceiling:
    """uvicorn serving one file with a minimal ASGI app: what any Python hit costs at least."""

    def __init__(self, path: Path, log: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "FERRY_CEILING_FILE": str(path)}
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "bench.asgi_ceiling:app", "--http", "httptools", "--port",
                 str(self.port), "--no-access-log", "--no-server-header", "--log-level", "warning"],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        for _ in range(200):
            try:
                with urllib.request.urlopen(self.url(), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the ceiling app did not come up")

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{KEY}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@contextlib.contextmanager
def recorded(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy of ``pid`` for the block, on-CPU samples only (no ``--idle``): a stage's share of
    the samples times the CPU µs per hit is its µs per hit."""
    proc = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        proc = subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "500", "--format", "raw",
                                 "-o", str(out / "hit4k.txt")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    try:
        yield
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)


def loop(pool: Any, url: str, n: int, pid: int) -> dict[str, float]:
    read_http(pool, url)  # the connection, warm
    meter = CpuMeter([pid])
    lat = [read_http(pool, url)[1] for _ in range(n)]
    cpu = meter.seconds() or 0.0
    return {"p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3, "cpu_us": cpu / n * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gets", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT", help="another tree's code, alternated run by run")
    parser.add_argument("--py-spy", type=Path, metavar="DIR", help="record this tree's gateway with py-spy")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra gateway setting")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferry-hitpath-", dir=os.environ.get("FERRY_BENCH_DIR")))
    seaweed = SeaweedServer().start()
    gws = tree_gateways(args, seaweed, work)
    body = os.urandom(4096)
    (work / "4k").write_bytes(body)
    ceiling = None
    try:
        seaweed.client().create_bucket(Bucket="hit")
        seaweed.client().put_object(Bucket="hit", Key=KEY, Body=body)
        urls: dict[str, tuple[str, int]] = {}
        for name, gw in gws.items():
            gw.start(timeout=120)
            s3 = gw.client(signature_version="s3v4")
            s3.get_object(Bucket="hit", Key=KEY)["Body"].read()  # the miss that caches it
            assert gw.proc is not None
            urls[name] = (s3.generate_presigned_url("get_object", Params={"Bucket": "hit", "Key": KEY},
                                                    ExpiresIn=3600), gw.proc.pid)
        ceiling = Ceiling(work / "4k", work / "ceiling.log")
        urls["asgi-ceiling"] = (ceiling.url(), ceiling.proc.pid)
        pool = urllib3.PoolManager(maxsize=1)
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in urls}
        for run in range(args.runs):
            names = list(urls)
            order = names[run % len(names):] + names[:run % len(names)]
            for name in order:
                url, pid = urls[name]
                spy = args.py_spy if name == "this" and run == 0 else None
                with recorded(pid, spy):
                    rows[name].append(loop(pool, url, args.gets, pid))
                print(f"run {run + 1} {name}: " + ", ".join(f"{k}={v:.4g}" for k, v in rows[name][-1].items()),
                      flush=True)
        for name, got in rows.items():
            print(f"median {name}: " + ", ".join(f"{k}={statistics.median(r[k] for r in got):.4g}" for k in got[0]))
        for other in [n for n in rows if n != "this"]:
            ratios = {k: [t[k] / b[k] for t, b in zip(rows["this"], rows[other], strict=True) if b[k]]
                      for k in rows["this"][0]}
            print(f"this / {other}, median of per-run ratios: "
                  + ", ".join(f"{k}={statistics.median(v):.3g}" for k, v in ratios.items() if v))
    finally:
        if ceiling is not None:
            ceiling.stop()
        for gw in gws.values():
            gw.stop()
        seaweed.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
