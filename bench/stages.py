"""Per-stage profile of Ferry's data plane on a loopback SeaweedFS: where a 4 KiB PUT, a checkpoint
(256 MiB ``upload_file``) and a warm 4 KiB GET spend their time.

    .venv/bin/python -m bench.stages --puts 300 --gets 1000 --checkpoint-mib 256 --runs 3
    .venv/bin/python -m bench.stages --py-spy /tmp/flame   # also record py-spy flame graphs (svg)

One gateway (one worker) on a fresh data dir. Prints per run: 4 KiB PUT p50/p99 (sequential, one
boto3 client; each PUT is destaged at once by the fast remote, so acks compete with destage
work), the checkpoint's ack MB/s, and the gateway's process CPU (utime+stime from /proc, all its
threads) per 4 KiB PUT, per GiB acknowledged and per warm 4 KiB hit. With ``--py-spy`` each phase
is also recorded (``py-spy record --idle`` on the gateway) into DIR/<phase>.svg and DIR/<phase>.txt
(collapsed stacks, for grepping a stage's share).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig

from bench.probes import make_file, pct
from bench.proc_cpu import cpu_seconds, gateway_pids
from tests.support.gateway import GatewayProcess
from tests.support.seaweed import SeaweedServer


@contextmanager
def recorded(pid: int, out: Path | None, phase: str) -> Iterator[None]:
    """py-spy record of ``pid`` for the block (when ``out`` is given)."""
    proc = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        proc = subprocess.Popen([spy, "record", "--pid", str(pid), "--subprocesses", "--idle", "--rate", "200",
                                 "--format", "raw", "-o", str(out / f"{phase}.txt")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    try:
        yield
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)


def measure(gw: GatewayProcess, fn: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``fn`` and return its result and the gateway's CPU seconds spent meanwhile."""
    assert gw.proc is not None
    pids = gateway_pids(gw.proc.pid)
    before = sum(cpu_seconds(p) for p in pids)
    result = fn()
    return result, sum(cpu_seconds(p) for p in pids) - before


def run_once(gw: GatewayProcess, s3: Any, bucket: str, src: Path, args: argparse.Namespace, run: int,
             spy: Path | None, prefix: str = "") -> dict[str, float]:
    body = os.urandom(4096)
    assert gw.proc is not None
    row: dict[str, float] = {}

    def puts() -> list[float]:
        lat = []
        for i in range(args.puts):
            t0 = time.perf_counter()
            s3.put_object(Bucket=bucket, Key=f"{prefix}small/{run}/{i:05d}", Body=body)
            lat.append(time.perf_counter() - t0)
        return lat

    with recorded(gw.proc.pid, spy, f"put4k-{run}"):
        lat, cpu = measure(gw, puts)
    gw.flush(bucket, f"{prefix}small/{run}/")
    row.update(put_p50_ms=pct(lat, 0.5) * 1e3, put_p99_ms=pct(lat, 0.99) * 1e3, put_cpu_us=cpu / len(lat) * 1e6)
    if args.checkpoint_mib:
        size = src.stat().st_size

        def checkpoint() -> float:
            t0 = time.perf_counter()
            s3.upload_file(str(src), bucket, f"{prefix}ckpt/{run}", Config=TransferConfig())
            return time.perf_counter() - t0

        with recorded(gw.proc.pid, spy, f"checkpoint-{run}"):
            ack, cpu = measure(gw, checkpoint)
        t0 = time.perf_counter()
        gw.flush(bucket, f"{prefix}ckpt/{run}")
        row.update(ckpt_ack_mbps=size / ack / 1e6, ckpt_cpu_s_per_gib=cpu / (size / 2**30),
                   ckpt_durable_after_ack_s=time.perf_counter() - t0)
    s3.put_object(Bucket=bucket, Key=f"{prefix}hot4k", Body=body)
    s3.get_object(Bucket=bucket, Key=f"{prefix}hot4k")["Body"].read()

    def gets() -> list[float]:
        lat = []
        for _ in range(args.gets):
            t0 = time.perf_counter()
            s3.get_object(Bucket=bucket, Key=f"{prefix}hot4k")["Body"].read()
            lat.append(time.perf_counter() - t0)
        return lat

    with recorded(gw.proc.pid, spy, f"get4k-{run}"):
        lat, cpu = measure(gw, gets)
    row.update(get_p50_ms=pct(lat, 0.5) * 1e3, get_cpu_us=cpu / len(lat) * 1e6)
    return row


def tree_gateways(args: argparse.Namespace, seaweed: SeaweedServer, work: Path) -> dict[str, GatewayProcess]:
    """One gateway (not started) for this tree, and one for ``args.baseline``'s code if given:
    same remote, settings (``args.env``) and worker count, each importing its own tree."""
    env = {"FERRY_LOG_LEVEL": "warning", **dict(e.split("=", 1) for e in args.env)}
    here = str(Path(__file__).resolve().parent.parent)
    codes = {"this": here, **({"baseline": str(args.baseline.resolve())} if args.baseline else {})}
    return {name: GatewayProcess(seaweed, work / name, workers=args.workers, env={**env, "PYTHONPATH": code})
            for name, code in codes.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--puts", type=int, default=300)
    parser.add_argument("--gets", type=int, default=1000)
    parser.add_argument("--checkpoint-mib", type=int, default=256, help="0: no checkpoint")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--py-spy", type=Path, metavar="DIR", help="record each phase with py-spy into DIR")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra gateway setting")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="also run the code of another checkout (e.g. `git worktree add /tmp/base main`), "
                             "alternating with this one run by run: ratios from one run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferry-stages-", dir=os.environ.get("FERRY_BENCH_DIR")))
    seaweed = SeaweedServer().start()
    gws = tree_gateways(args, seaweed, work)
    try:
        s3s = {}
        for name, gw in gws.items():
            gw.start(timeout=120)
            s3s[name] = gw.client(max_pool_connections=32, read_timeout=600, signature_version="s3v4")
        bucket = "stages"
        seaweed.client().create_bucket(Bucket=bucket)
        src = make_file(work / "ckpt.bin", max(args.checkpoint_mib, 1) * 2**20)
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in gws}
        for run in range(args.runs):
            order = list(gws) if run % 2 == 0 else list(reversed(gws))
            for name in order:
                spy = args.py_spy / name if args.py_spy else None
                rows[name].append(run_once(gws[name], s3s[name], bucket, src, args, run, spy, prefix=f"{name}/"))
                print(f"run {run + 1} {name}: " + ", ".join(f"{k}={v:.3g}" for k, v in rows[name][-1].items()),
                      flush=True)
        for name, got in rows.items():
            print(f"median {name}: " + ", ".join(f"{k}={statistics.median(r[k] for r in got):.3g}" for k in got[0]))
        if "baseline" in rows:
            ratios = {k: [t[k] / b[k] for t, b in zip(rows["this"], rows["baseline"], strict=True) if b[k]]
                      for k in rows["this"][0]}
            print("this / baseline, median of per-run ratios: "
                  + ", ".join(f"{k}={statistics.median(v):.3g}" for k, v in ratios.items() if v))
    finally:
        for gw in gws.values():
            gw.stop()
        seaweed.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
