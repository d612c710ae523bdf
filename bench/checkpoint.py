"""Checkpoint write benchmark: a 1 GiB ``upload_file`` to Ferry vs straight to the remote region.

    python -m bench.checkpoint --runs 3 --size-mib 1024          # netsim remote (80 ms, 400 Mbit/s)
    python -m bench.checkpoint --remote-endpoint https://... --remote-access-key ... --remote-secret-key ...
    python -m bench.checkpoint --link loopback --size-mib 64 --runs 1   # smoke: a local SeaweedFS, no root
    python -m bench.checkpoint --scaling --runs 3                # core scaling: gateway on cpu 0, then on 0,1


Reports, side by side in one run (medians of --runs, with min-max):
  - the acknowledgement time through the gateway and directly;
  - the time until the remote holds the object (the flush barrier);
  - the gateway's write throughput as a fraction of this disk's sequential write + fsync.
A benchmark, not a test: it prints a table and writes bench/results/checkpoint-<time>.json and
docs/benchmarks-checkpoint.md.

Core scaling (issue 29), ``--cpus 0 0,1`` (``--scaling`` for short): one gateway per CPU set, each
started on that set and with every thread of its process tree pinned to it (``taskset -a -cp``, see
bench/pin.py); the client stays unpinned. Runs alternate between the variants (the order flips every
run) and each waits for the remote to hold the object before the next starts, so no destage of one
run overlaps another's upload. Reported per variant: acknowledgement MB/s and the gateway's CPU
seconds per GiB (/proc, bench/proc_cpu.py) until the ack and until the remote holds the object. No
direct upload in this mode; it writes bench/results/checkpoint-scaling-<time>.json and
docs/benchmarks-checkpoint-scaling.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from boto3.s3.transfer import TransferConfig

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pin import affinity, parse_cpus, pin_tree, pinned  # noqa: E402
from bench.probes import disk_write_fsync_mbps, md5_mbps  # noqa: E402
from bench.probes import make_file as _make_file  # noqa: E402
from bench.proc_cpu import CpuMeter  # noqa: E402
from bench.remote import LINKS, Remote, RemoteRegion  # noqa: E402
from tests.support.gateway import GatewayProcess  # noqa: E402


def add_remote_args(parser: argparse.ArgumentParser) -> None:
    """The remote choices every checkpoint benchmark offers (bench.checkpoint, bench.torch_checkpoint)."""
    parser.add_argument("--link", choices=[*LINKS, "loopback"], default="regional",
                        help="netsim link profile (root), or loopback: a local SeaweedFS, unshaped (smoke)")
    parser.add_argument("--remote-endpoint", help="any S3 endpoint instead (then --link is ignored)")
    parser.add_argument("--remote-access-key")
    parser.add_argument("--remote-secret-key")


def remote_region(args: argparse.Namespace) -> tuple[RemoteRegion, str]:
    """The remote of ``add_remote_args``'s options, brought up (``.down()`` it after), and a description."""
    if args.remote_endpoint:
        region = RemoteRegion("endpoint", args.remote_endpoint, args.remote_access_key, args.remote_secret_key)
    else:
        region = RemoteRegion("loopback" if args.link == "loopback" else "netsim")
    region.up()
    if region.kind == "netsim":
        link = LINKS[args.link]
        region.shape(link)
        return region, f"netsim: {link.describe()} ({link.name})"
    return region, "loopback SeaweedFS, unshaped" if region.kind == "loopback" else "custom endpoint"


def one_run(gw: GatewayProcess, remote: Remote, bucket: str, src: Path, n: int, direct: bool = True) -> dict[str, float]:
    """One checkpoint through the gateway (ack, then until the remote holds it) and, with ``direct``, one
    straight to the remote; the gateway's CPU (its whole process tree) until each point, in s/GiB."""
    cfg = TransferConfig()  # boto3 defaults: 8 MiB parts, 10 threads
    key = f"ckpt/run-{n}-{time.time_ns()}"
    s3 = gw.client(max_pool_connections=16, read_timeout=600)
    gib = src.stat().st_size / 2**30
    meter = CpuMeter([gw.proc.pid if gw.proc else 0])
    t0 = time.perf_counter()
    s3.upload_file(str(src), bucket, key, Config=cfg)
    ack = time.perf_counter() - t0
    cpu_ack = meter.seconds()
    gw.flush(bucket, "ckpt/", timeout=3600)
    durable = time.perf_counter() - t0
    cpu_durable = meter.seconds()
    head = remote.client().head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] == src.stat().st_size
    out = {"gateway_ack_s": ack, "gateway_durable_s": durable}
    if cpu_ack is not None and cpu_durable is not None:
        out |= {"gateway_cpu_s_per_gib": cpu_ack / gib, "gateway_cpu_s_per_gib_durable": cpu_durable / gib}
    keys = [key]
    if direct:
        direct_key = f"direct/run-{n}-{time.time_ns()}"
        t1 = time.perf_counter()
        remote.client().upload_file(str(src), bucket, direct_key, Config=cfg)
        out["direct_s"] = time.perf_counter() - t1
        keys.append(direct_key)
    for k in keys:
        remote.client().delete_object(Bucket=bucket, Key=k)
    return out


def summarize(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size-mib", type=int, default=1024)
    add_remote_args(parser)
    parser.add_argument("--bucket", default="ferry-bench")
    parser.add_argument("--cpus", nargs="+", metavar="CPUS",
                        help="core scaling: one variant per CPU set (taskset -c syntax), e.g. --cpus 0 0,1")
    parser.add_argument("--scaling", action="store_true", help="--cpus 0 0,1")
    parser.add_argument("--out", type=Path, help="the markdown report (default docs/benchmarks-checkpoint[-scaling].md)")
    args = parser.parse_args()
    if args.scaling:
        args.cpus = args.cpus or ["0", "0,1"]
    if args.out is None:
        args.out = ROOT / "docs" / ("benchmarks-checkpoint-scaling.md" if args.cpus else "benchmarks-checkpoint.md")
    region, link = remote_region(args)  # an endpoint, a loopback SeaweedFS, or the netsim link (ours: taken down)
    assert region.remote is not None
    try:
        if args.cpus:
            scaling_and_report(args, region.remote, link)
        else:
            run_and_report(args, region.remote, link)
    finally:
        region.down()


def ensure_bucket(remote: Remote, bucket: str) -> None:
    s3 = remote.client()
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
        s3.create_bucket(Bucket=bucket)


def pinned_gateway(remote: Remote, data_dir: Path, cpus: set[int]) -> GatewayProcess:
    """A gateway started on ``cpus`` (it inherits the mask) with every thread of its tree pinned there too."""
    with affinity(cpus):
        gw = GatewayProcess(remote, data_dir, env={"FERRY_LOG_LEVEL": "warning"}).start()
    assert gw.proc is not None
    pin_tree(gw.proc.pid, cpus)
    return gw


def scaling_and_report(args: argparse.Namespace, remote: Remote, link: str) -> None:
    """Core scaling: the ack MB/s and gateway CPU s/GiB of one gateway per CPU set, runs interleaved."""
    size = args.size_mib * 1024 * 1024
    ensure_bucket(remote, args.bucket)
    variants = {spec: parse_cpus(spec) for spec in args.cpus}
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-", dir=os.environ.get("FERRY_BENCH_DIR")))
    src = _make_file(work / "checkpoint.bin", size)
    runs: dict[str, list[dict[str, float]]] = {spec: [] for spec in variants}
    gateways: dict[str, GatewayProcess] = {}
    try:
        for i, (spec, cpus) in enumerate(variants.items()):
            gateways[spec] = pinned_gateway(remote, work / f"gateway-{i}", cpus)
        for n in range(args.runs):
            order = list(variants) if n % 2 == 0 else list(reversed(variants))
            for spec in order:
                gw = gateways[spec]
                assert gw.proc is not None
                pin_tree(gw.proc.pid, variants[spec])  # anything started since is pinned too (it inherits anyway)
                masks = pinned(gw.proc.pid)
                if masks != {frozenset(variants[spec])}:
                    raise RuntimeError(f"gateway threads on {sorted(map(sorted, masks))}, not {spec}")
                runs[spec].append(one_run(gw, remote, args.bucket, src, n, direct=False))
                print(f"run {n + 1} cpus {spec}: {runs[spec][-1]}", flush=True)
    finally:
        for gw in gateways.values():
            gw.stop()
        shutil.rmtree(work, ignore_errors=True)
    lines = ["| gateway CPUs | ack MB/s | ack s | gateway CPU s/GiB until ack | until the remote holds it "
             "| remote holds it (s) |", "|---|---|---|---|---|---|"]
    for spec, rs in runs.items():
        cpu = [r["gateway_cpu_s_per_gib"] for r in rs if "gateway_cpu_s_per_gib" in r]
        cpu_d = [r["gateway_cpu_s_per_gib_durable"] for r in rs if "gateway_cpu_s_per_gib_durable" in r]
        lines.append(f"| {spec} ({len(variants[spec])} core{'s' * (len(variants[spec]) > 1)}) "
                     f"| {summarize([size / 1e6 / r['gateway_ack_s'] for r in rs])} "
                     f"| {summarize([r['gateway_ack_s'] for r in rs])} "
                     f"| {summarize(cpu) if cpu else '-'} | {summarize(cpu_d) if cpu_d else '-'} "
                     f"| {summarize([r['gateway_durable_s'] for r in rs])} |")
    command = "python -m bench.checkpoint " + " ".join(sys.argv[1:])
    report = (f"# Checkpoint write benchmark: core scaling\n\nGenerated by `{command}` on "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, remote: {link}, "
              f"{args.size_mib} MiB `upload_file` (boto3 defaults), {args.runs} runs per variant, interleaved; "
              f"the gateway's process tree pinned (every thread), the client unpinned. "
              f"Medians (min-max).\n\n" + "\n".join(lines) + "\n")
    print(report)
    args.out.write_text(report)
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / f"checkpoint-scaling-{int(time.time())}.json").write_text(json.dumps(
        {"runs": runs, "size": size, "command": command, "link": link}, indent=2))


def run_and_report(args: argparse.Namespace, remote: Remote, link: str) -> None:
    """Every run, then the table (stdout and --out) and the raw numbers (bench/results/)."""
    size = args.size_mib * 1024 * 1024
    ensure_bucket(remote, args.bucket)
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
