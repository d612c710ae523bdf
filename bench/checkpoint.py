"""Checkpoint write benchmark: a 1 GiB ``upload_file`` to Ferry vs straight to the remote region.

    python -m bench.checkpoint --runs 3 --size-mib 1024          # netsim remote (80 ms, 400 Mbit/s)
    python -m bench.checkpoint --remote-endpoint https://... --remote-access-key ... --remote-secret-key ...

Reports, side by side in one run (medians of --runs, with min-max):
  - the acknowledgement time through the gateway and directly;
  - the time until the remote holds the object (the flush barrier);
  - the gateway's write throughput as a fraction of this disk's sequential write + fsync.
A benchmark, not a test: it prints a table and writes bench/results/checkpoint-<time>.json and
docs/benchmarks-checkpoint.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import netsim  # noqa: E402
from bench.probes import disk_write_fsync_mbps, md5_mbps  # noqa: E402
from bench.probes import make_file as _make_file  # noqa: E402
from tests.support.gateway import GatewayProcess  # noqa: E402


class Remote:
    def __init__(self, endpoint: str, access_key: str, secret_key: str) -> None:
        self.endpoint, self.access_key, self.secret_key = endpoint, access_key, secret_key

    def client(self) -> Any:
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name="us-east-1",
                            config=Config(s3={"addressing_style": "path"}, max_pool_connections=32))


def netsim_remote() -> Remote:
    """The regional link of bench/netsim (brought up, or re-shaped in place), checked to be routed locally."""
    state = netsim.up(netsim.PROFILES["regional"])
    netsim.guard(state.endpoint)
    env = state.env()
    return Remote(env["NETSIM_S3_ENDPOINT"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])


def one_run(gw: GatewayProcess, remote: Remote, bucket: str, src: Path, n: int) -> dict[str, float]:
    cfg = TransferConfig()  # boto3 defaults: 8 MiB parts, 10 threads
    key = f"ckpt/run-{n}-{time.time_ns()}"
    s3 = gw.client(max_pool_connections=16, read_timeout=600)
    t0 = time.perf_counter()
    s3.upload_file(str(src), bucket, key, Config=cfg)
    ack = time.perf_counter() - t0
    gw.flush(bucket, "ckpt/", timeout=3600)
    durable = time.perf_counter() - t0
    head = remote.client().head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] == src.stat().st_size
    direct_key = f"direct/run-{n}-{time.time_ns()}"
    t1 = time.perf_counter()
    remote.client().upload_file(str(src), bucket, direct_key, Config=cfg)
    direct = time.perf_counter() - t1
    for k in (key, direct_key):
        remote.client().delete_object(Bucket=bucket, Key=k)
    return {"gateway_ack_s": ack, "gateway_durable_s": durable, "direct_s": direct}


def summarize(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--remote-endpoint")
    parser.add_argument("--remote-access-key")
    parser.add_argument("--remote-secret-key")
    parser.add_argument("--bucket", default="ferry-bench")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks-checkpoint.md")
    args = parser.parse_args()
    ours = not args.remote_endpoint and netsim.load_state() is None
    remote = (Remote(args.remote_endpoint, args.remote_access_key, args.remote_secret_key)
              if args.remote_endpoint else netsim_remote())
    try:
        run_and_report(args, remote)
    finally:
        if ours:  # the link this run brought up goes, with its namespaces, processes and objects
            netsim.down()


def run_and_report(args: argparse.Namespace, remote: Remote) -> None:
    """Every run, then the table (stdout and --out) and the raw numbers (bench/results/)."""
    size = args.size_mib * 1024 * 1024
    try:
        remote.client().create_bucket(Bucket=args.bucket)
    except remote.client().exceptions.BucketAlreadyOwnedByYou:
        pass
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-", dir=os.environ.get("FERRY_BENCH_DIR")))
    src = _make_file(work / "checkpoint.bin", size)
    disk = [disk_write_fsync_mbps(work, size) for _ in range(2)]
    md5 = md5_mbps()
    runs: list[dict[str, float]] = []
    try:
        with GatewayProcess(remote, work / "gateway", env={"FERRY_LOG_LEVEL": "warning"}) as gw:
            for n in range(args.runs):
                runs.append(one_run(gw, remote, args.bucket, src, n))
                print(f"run {n + 1}: {runs[-1]}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the checkpoint file and the gateway's data dir
    ack = [r["gateway_ack_s"] for r in runs]
    durable = [r["gateway_durable_s"] for r in runs]
    direct = [r["direct_s"] for r in runs]
    mib = size / 1e6
    gw_mbps = [mib / a for a in ack]
    disk_mbps = statistics.median(disk)
    rows = [
        ("object size", f"{args.size_mib} MiB"),
        ("acknowledged through Ferry (s)", summarize(ack)),
        ("upload_file straight to the remote (s)", summarize(direct)),
        ("ack speed-up vs direct (x)", f"{statistics.median(direct) / statistics.median(ack):.1f}"),
        ("remote holds it, via Ferry, from the start (s)", summarize(durable)),
        ("remote-durable time / direct upload time", f"{statistics.median(durable) / statistics.median(direct):.2f}"),
        ("Ferry write throughput (MB/s)", summarize(gw_mbps)),
        ("disk sequential write + fsync (MB/s)", f"{disk_mbps:.0f}"),
        ("Ferry / disk write+fsync", f"{statistics.median(gw_mbps) / disk_mbps:.2f}"),
        ("MD5 per core (MB/s)", f"{md5:.0f}"),
    ]
    table = "| figure | median (min-max) |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
    command = "python -m bench.checkpoint " + " ".join(sys.argv[1:])
    link = "custom endpoint" if args.remote_endpoint else "netsim: 80 ms RTT, 400 Mbit/s (regional)"
    report = (f"# Checkpoint write benchmark\n\nGenerated by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
              f", {os.cpu_count()} cores, remote: {link}, {args.runs} runs.\n\n{table}\n")
    print(report)
    args.out.write_text(report)
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / f"checkpoint-{int(time.time())}.json").write_text(json.dumps(
        {"runs": runs, "disk_mbps": disk, "md5_mbps": md5, "size": size, "command": command}, indent=2))


if __name__ == "__main__":
    main()
