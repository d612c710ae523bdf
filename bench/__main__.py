"""Ferry's benchmark suite: every workload of issue 6, all contenders side by side, one command.

    sudo .venv/bin/python -m bench --profile full --link both             # netsim remote (root), writes docs/benchmarks.md
    .venv/bin/python -m bench --profile smoke                             # loopback SeaweedFS, < 90 s, report in a temp dir
    sudo .venv/bin/python -m bench --profile smoke --link regional        # the same, through the netsim link (root)
    .venv/bin/python -m bench --remote-endpoint https://s3... --link regional   # any S3 endpoint (keys: AWS_* env)

It brings up (and always tears down) the remote region, Ferry (embedded and --workers 2), rclone
serve s3 and nginx; results go to bench/results/<time>.json and the report to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig

from bench.contenders import Contender, Direct, Ferry, Nginx, NginxProxy, NginxStatic, Rclone, find_nginx, versions
from bench.probes import log, make_file
from bench.remote import LINKS, ROOT, RemoteRegion
from bench.report import render
from bench.workloads import PROFILES, WORKLOADS, Bench, Profile, herd_factories


def machine() -> dict[str, str]:
    """What the numbers were measured on."""
    cpu = "?"
    with contextlib.suppress(OSError):
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "?")
    mem = "?"
    with contextlib.suppress(OSError, StopIteration, ValueError):
        kb = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal")))
        mem = f"{kb / 2**20:.0f} GiB"
    disk = shutil.disk_usage(tempfile.gettempdir())
    return {"CPU": f"{cpu}, {os.cpu_count()} cores (shared)", "memory": mem, "kernel": platform.release(),
            "OS": platform.platform(terse=True), "temp disk": f"{disk.total / 1e9:.0f} GB ({tempfile.gettempdir()})"}


def prepare(bench: Bench, profile: Profile, src: Path, work: Path) -> None:
    """Upload the base objects once (they survive re-shaping); copies of them make every cold key."""
    s3 = bench.rs3
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
        s3.create_bucket(Bucket=bench.bucket)

    def have(key: str, size: int) -> bool:
        try:
            return int(s3.head_object(Bucket=bench.bucket, Key=key)["ContentLength"]) == size
        except Exception:
            return False

    cfg = TransferConfig(max_concurrency=16)
    if not have("base/big", profile.object_size):
        log(f"uploading base/big ({profile.object_size} bytes)")
        s3.upload_file(str(src), bench.bucket, "base/big", Config=cfg)
    if not have("base/herd", profile.herd_size):
        herd = make_file(work / "herd.bin", profile.herd_size)
        s3.upload_file(str(herd), bench.bucket, "base/herd", Config=cfg)
        herd.unlink()
    if not have("base/small4k", 4096):
        s3.put_object(Bucket=bench.bucket, Key="base/small4k", Body=os.urandom(4096))
    last = f"base/ds/{profile.dataset_count - 1:05d}"
    if not have(last, profile.dataset_object):
        log(f"uploading the dataset ({profile.dataset_count} x {profile.dataset_object} bytes)")
        import concurrent.futures as cf

        body = os.urandom(profile.dataset_object)
        with cf.ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda i: s3.put_object(Bucket=bench.bucket, Key=f"base/ds/{i:05d}", Body=body),
                        range(profile.dataset_count)))


def disk_short(path: Path, margin: int, usage: Any = shutil.disk_usage) -> str | None:
    """Why a run here would not measure Ferry, or None: below its default disk reserve
    (max(1 GiB, 5 % of the disk), ``FERRY_DISK_RESERVE_*``) Ferry refuses writes and cache fills,
    so its figures would be of a full disk. ``margin``: what the run itself may still write."""
    total, _used, free = usage(path)
    reserve = max(1024**3, int(0.05 * total))
    if free >= reserve + margin:
        return None
    gib = 1024**3
    return (f"{path}: {free / gib:.1f} GiB free, below Ferry's disk reserve ({reserve / gib:.1f} GiB) plus "
            f"{margin / gib:.1f} GiB for this run: Ferry refuses writes and cache fills there")


def exclude_run(data: dict[str, Any], spec: str) -> None:
    """Drop run N of a link from every workload and contender (all contenders: ratios stay within runs)."""
    link, _, number = spec.partition(":")
    if link not in data["links"] or not number.isdigit():
        raise SystemExit(f"--exclude-run {spec}: expected LINK:N with LINK one of {sorted(data['links'])}")
    run = int(number) - 1
    for rows_by_contender in data["links"][link]["results"].values():
        for name, rows in rows_by_contender.items():
            rows_by_contender[name] = [r for r in rows if r.get("run") != run]
    data["meta"]["note"] = (data["meta"].get("note", "") + f" Run {number} of `{link}` is left out of every figure "
                            f"(`--exclude-run {spec}`).").strip()


def start_contenders(args: argparse.Namespace, profile: Profile, remote: Any, lwork: Path, src: Path,
                     nginx_bin: str | None, contenders: dict[str, Contender]) -> list[Any]:
    """Start Ferry (each worker count), rclone and nginx into ``contenders``; returns what to stop."""
    started: list[Any] = []
    for w in profile.ferry_workers:
        f = Ferry(remote, lwork, workers=w).start()
        started.append(f)
        contenders[f.name] = f
    if not args.no_rclone:
        r = Rclone(remote, lwork).start()
        started.append(r)
        contenders["rclone"] = r
    if nginx_bin:
        nginx = Nginx(nginx_bin, remote, lwork, src.parent).start()
        started.append(nginx)
        contenders["nginx-proxy"] = NginxProxy(nginx, remote)
        contenders["nginx-static"] = NginxStatic(nginx)
    return started


def one_run(bench: Bench, run: int, selected: list[str], src: Path, lwork: Path, region: RemoteRegion) -> None:
    """Every selected per-run workload once; a broken one is recorded, the others still run."""
    short = disk_short(lwork, 4 * bench.p.object_size)
    if short:  # its figures would be of a full disk, not of Ferry: said in the report
        bench.errors.append(f"run {run + 1}: {short}")
        log(f"ERROR {bench.errors[-1]}")
    bench.run = run
    for workload in selected:
        try:
            if workload == "disk":
                bench.disk(run)
            elif workload == "checkpoint":
                bench.checkpoint(run, src)
            elif workload in ("small_put", "cold_read", "warm_read", "cold_epoch", "warm_epoch", "small_get"):
                getattr(bench, workload)(run)
        except Exception as exc:
            bench.errors.append(f"{workload} (run {run + 1}): {type(exc).__name__}: {str(exc)[:300]}")
            log(f"ERROR {bench.errors[-1]}")
    reclaim(bench, region)


def reclaim(bench: Bench, region: RemoteRegion) -> None:
    """Give the remote's deleted objects' space back; a failure is recorded, the run goes on."""
    try:
        region.reclaim()
    except Exception as exc:
        bench.errors.append(f"reclaiming the remote's space: {type(exc).__name__}: {str(exc)[:300]}")
        log(f"ERROR {bench.errors[-1]}")


def run_link(args: argparse.Namespace, profile: Profile, region: RemoteRegion, link_name: str, work: Path, src: Path,
             nginx_bin: str | None, selected: list[str]) -> dict[str, Any]:
    """Fresh contenders (cold caches) for one link profile, every selected workload, then stop them all."""
    description = region.shape(LINKS[link_name]) if link_name in LINKS else region.shape(LINKS["regional"])
    remote = region.remote
    assert remote is not None
    log(f"link {link_name}: {description}")
    lwork = work / link_name
    lwork.mkdir(parents=True, exist_ok=True)
    contenders: dict[str, Contender] = {"direct": Direct(remote)}
    started: list[Any] = []
    bench = Bench(profile, remote, args.bucket, lwork, link_name, contenders, nginx_bin, args.runs)
    try:
        prepare(bench, profile, src, work)
        ferries = ["ferry" if w == 1 else f"ferry-w{w}" for w in profile.ferry_workers]
        others = ([] if args.no_rclone else ["rclone"]) + (["nginx-proxy"] if nginx_bin else [])
        bench.stage(["direct", *ferries, *others], [*ferries, *others], selected)
        started += start_contenders(args, profile, remote, lwork, src, nginx_bin, contenders)
        for run in range(args.runs):
            log(f"---- {link_name} run {run + 1}/{args.runs}")
            one_run(bench, run, selected, src, lwork, region)
        if "herd" in selected:
            log(f"---- {link_name} herd")
            bench.herd(0, herd_factories(lwork, nginx_bin, profile))
        if "scale" in selected and "ferry" in contenders:
            ferry = contenders["ferry"]
            assert isinstance(ferry, Ferry)
            bench.scale(ferry)
    except Exception as exc:
        bench.errors.append(f"{link_name}: {type(exc).__name__}: {str(exc)[:300]}")
        log(f"ERROR {bench.errors[-1]}")
    finally:
        for s in reversed(started):
            with contextlib.suppress(Exception):
                s.stop()
        shutil.rmtree(lwork, ignore_errors=True)
        with contextlib.suppress(Exception):  # the next link stages its own copies: this link's go
            bench.drop([f"{kind}/{link_name}/" for kind in ("cold", "epoch", "small", "ckpt", "herd")])
        reclaim(bench, region)
    return {"description": description, "results": bench.results, "skipped": bench.skipped, "errors": bench.errors,
            "profile": {"herd_size": profile.herd_size}}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="full")
    parser.add_argument("--link", choices=["regional", "long-fat", "both", "loopback"],
                        help="netsim link profile(s) (default both), or an unshaped loopback SeaweedFS (no root "
                             "needed: per-stage work, where the remote is not the bottleneck); smoke runs on "
                             "loopback unless --link is given")
    parser.add_argument("--runs", type=int, help="runs per figure (default: the profile's)")
    parser.add_argument("--only", help=f"comma-separated subset of: {','.join(WORKLOADS)}")
    parser.add_argument("--remote-endpoint", help="any S3 endpoint instead of netsim (keys: --remote-*-key or AWS_* env)")
    parser.add_argument("--remote-access-key", default=os.environ.get("AWS_ACCESS_KEY_ID"))
    parser.add_argument("--remote-secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY"))
    parser.add_argument("--remote-region", default=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    parser.add_argument("--bucket", default="ferry-bench")
    parser.add_argument("--out", type=Path, help="report path (default: docs/benchmarks.md; smoke: a temp dir)")
    parser.add_argument("--write-docs", action="store_true", help="smoke: write docs/benchmarks.md anyway")
    parser.add_argument("--no-nginx", action="store_true", help="leave nginx out (it is installed as root if missing)")
    parser.add_argument("--no-rclone", action="store_true")
    parser.add_argument("--note", help="a sentence put at the top of the report")
    parser.add_argument("--results-dir", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--ferry-workers", help="comma-separated worker counts of the Ferry contenders "
                                                "(default: the profile's, full: 1,2)")
    parser.add_argument("--render", type=Path, metavar="RESULTS_JSON", help="only re-render the report from a results file")
    parser.add_argument("--exclude-run", action="append", default=[], metavar="LINK:N",
                        help="with --render: leave run N (1-based) of LINK out of every figure, e.g. a run the "
                             "report's errors say was taken on a nearly full disk (said in the report)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.render:
        data = json.loads(args.render.read_text())
        if args.note:
            data["meta"]["note"] = args.note
        for spec in args.exclude_run:
            exclude_run(data, spec)
        render(data, args.out or ROOT / "docs" / "benchmarks.md")
        return 0
    profile = PROFILES[args.profile]
    if args.ferry_workers:
        profile = dataclasses.replace(profile, ferry_workers=tuple(int(w) for w in args.ferry_workers.split(",")))
    args.runs = args.runs or profile.runs
    selected = [w for w in WORKLOADS if not args.only or w in args.only.split(",")]
    unknown = set(args.only.split(",")) - set(WORKLOADS) if args.only else set()
    if unknown:
        parser.error(f"unknown workloads: {sorted(unknown)}")
    smoke = profile.name == "smoke"
    if args.remote_endpoint:
        kind, links = "endpoint", [args.link if args.link not in (None, "both") else "custom"]
    elif (smoke and args.link is None) or args.link == "loopback":
        kind, links = "loopback", ["loopback"]
    else:
        kind, links = "netsim", ["regional", "long-fat"] if args.link in (None, "both") else [args.link]
    if args.out is None:
        args.out = (Path(tempfile.mkdtemp(prefix="ferry-bench-report-")) / "benchmarks.md"
                    if smoke and not args.write_docs else ROOT / "docs" / "benchmarks.md")
    nginx_bin = None if args.no_nginx else find_nginx(install=not smoke)
    command = "python -m bench " + shlex.join(argv if argv is not None else sys.argv[1:])
    meta: dict[str, Any] = {"command": command, "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                            "profile": {**profile.__dict__}, "runs": args.runs, "machine": machine(),
                            "versions": versions(nginx_bin), "note": args.note or ""}
    if not nginx_bin:
        meta["note"] += " nginx was not available: its columns are missing."
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-", dir=os.environ.get("FERRY_BENCH_DIR")))
    os.chmod(work, 0o755)  # nginx workers read the static file
    region = RemoteRegion(kind, args.remote_endpoint, args.remote_access_key, args.remote_secret_key, args.remote_region)
    data: dict[str, Any] = {"meta": meta, "links": {}}
    t0 = time.monotonic()
    try:
        region.up()
        src = make_file(work / "big.bin", profile.object_size)
        os.chmod(src, 0o644)
        for link in links:
            data["links"][link] = run_link(args, profile, region, link, work, src, nginx_bin, selected)
    finally:
        region.down()
        shutil.rmtree(work, ignore_errors=True)
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    meta["elapsed_s"] = round(time.monotonic() - t0)
    results = args.results_dir
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"bench-{profile.name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(data, indent=1))
    render(data, args.out)
    log(f"results: {path}")
    log(f"report: {args.out} ({meta['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
