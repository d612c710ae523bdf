"""``ferry mount`` against the gateway's own S3 view (issue 30's goals), in one run.

    .venv/bin/python -m bench.mount --size-mib 1024 --runs 3
    .venv/bin/python -m bench.mount --only metadata --runs 3   # only the listings (ls -l, find + grep -r)

Starts SeaweedFS on loopback, one gateway (embedded default: write-back) and three mounts of it (one
with the defaults: the gateway's local read socket, as on the serving node, and direct reads; one
with ``FERRY_MOUNT_DIRECT_READS=off``: reads through the kernel's page cache; one with
``FERRY_LOCAL_SOCKET=off``: over HTTP), then, interleaved run by run (medians printed):
- sequential read of a cached object: a GET through the gateway (urllib3, readinto a reused
  buffer) against ``read()`` of the mounted file in 1 MiB pieces, the kernel's pages of the file
  dropped first (the mount keeps them across opens: a re-read would time the page cache);
- first read of a cold object (put straight to the remote, never read through the gateway), a
  new key for each contender and run;
- a write of the same bytes: boto3 ``upload_file`` through the gateway until its acknowledgement,
  against write + fsync + close through the mount (the close returns once the gateway acknowledged);
- ``ls -l`` of a directory of 10,000 keys and ``find`` + ``grep -r`` over 1,000 small files (warm:
  the gateway has listed them before; the mount's 1 s cache expired before each run).
Needs root and /dev/fuse (``ferry mount``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import urllib3
from boto3.s3.transfer import TransferConfig

from bench.zerocopy_read import read_mbps
from tests.support.gateway import GatewayProcess, remote_client
from tests.support.mount import MountProcess
from tests.support.seaweed import SeaweedServer

MiB = 1024 * 1024


def gateway_get(gw: GatewayProcess, bucket: str, key: str, size: int, buf: bytearray) -> float:
    """Seconds to read the object by one presigned GET (bench.zerocopy_read's reader)."""
    url = gw.client().generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600)
    return size / read_mbps(urllib3.PoolManager(), url, size, buf) / 1e6


def mount_read(path: Path, size: int, buf: bytearray) -> float:
    """Seconds to read the file through FUSE: the kernel's pages of it are dropped first (the
    mount keeps them across opens while the version stays; a run after the first would
    otherwise time the page cache, 3.2 GB/s against 1.4 GB/s through FUSE in one run here)."""
    with open(path, "rb", buffering=0) as fh:
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    started = time.perf_counter()
    got = 0
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):  # type: ignore[attr-defined]
            got += n
    elapsed = time.perf_counter() - started
    assert got == size, (got, size)
    return elapsed


def mount_write(path: Path, source: Path) -> float:
    started = time.perf_counter()
    with open(source, "rb") as src, open(path, "wb") as dst:
        while chunk := src.read(MiB):
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    return time.perf_counter() - started


def gateway_put(gw: GatewayProcess, bucket: str, key: str, source: Path) -> float:
    config = TransferConfig(multipart_threshold=64 * MiB, multipart_chunksize=16 * MiB, max_concurrency=8)
    client = gw.client()
    started = time.perf_counter()
    client.upload_file(str(source), bucket, key, Config=config)
    return time.perf_counter() - started


def timed(command: str, cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(command, shell=True, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def fill(gw: GatewayProcess, bucket: str, keys: list[str], body: Callable[[int], bytes]) -> None:
    client = gw.client(max_pool_connections=32)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: client.put_object(Bucket=bucket, Key=keys[i], Body=body(i)), range(len(keys))))


def listings(gw: GatewayProcess, bucket: str, root: Path, runs: int, listing_keys: int, small_files: int,
             add: Callable[[str, float], None]) -> None:
    """``ls -l`` of one large directory and ``find`` + ``grep -r`` over small files, warm (the
    gateway listed and served them once), each run after the mount's 1 s cache expired."""
    fill(gw, bucket, [f"many/{i:05d}" for i in range(listing_keys)], lambda i: b"x")
    fill(gw, bucket, [f"small/{i // 100:02d}/{i:04d}.txt" for i in range(small_files)],
         lambda i: (f"file {i}\n" + ("needle\n" if i % 50 == 0 else "") + "y" * 2000).encode())
    # Destaged first: the figure is a warm listing, not one sharing the 2 cores with the destage of
    # 11,000 writes (whose LastModified also changes as they land, so the kernel would drop the
    # pages it holds of each file and grep would read it again).
    gw.flush(bucket)
    timed("ls -l many", root)  # the gateway has listed them once: warm
    timed("find small -type f; grep -r needle small", root)
    for _ in range(runs):
        time.sleep(1.1)
        add("ls -l 10k keys (s)", timed("ls -l many", root))
        time.sleep(1.1)
        add("find + grep -r 1k files (s)", timed("find small -type f > /dev/null && grep -r needle small", root))


def median(values: list[float]) -> float:
    return statistics.median(values)


def run(size_mib: int, cold_mib: int, runs: int, listing_keys: int, small_files: int,
        only: str | None = None) -> dict[str, Any]:
    size, cold = size_mib * MiB, cold_mib * MiB
    results: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory(prefix="bench-mount-") as scratch, SeaweedServer() as sw, \
            GatewayProcess(sw, Path(scratch) / "gw") as gw, MountProcess(gw) as mnt, \
            MountProcess(gw, env={"FERRY_LOCAL_SOCKET": "off"}) as over_http, \
            MountProcess(gw, env={"FERRY_MOUNT_DIRECT_READS": "off"}) as paged:
        bucket = f"bm-{uuid.uuid4().hex[:8]}"
        s3 = gw.client()
        s3.create_bucket(Bucket=bucket)
        source = Path(scratch) / "source.bin"
        with open(source, "wb") as fh:
            for _ in range(size_mib):
                fh.write(os.urandom(MiB))
        s3.upload_file(str(source), bucket, "cached.bin")
        gw.flush(bucket)
        buf = bytearray(MiB)
        if only != "metadata":
            gateway_get(gw, bucket, "cached.bin", size, buf)  # the cache now holds it
        root, http_root, paged_root = mnt.path / bucket, over_http.path / bucket, paged.path / bucket
        remote = remote_client(sw)
        cold_body = os.urandom(cold)
        for r in range(runs if only != "metadata" else 0):
            add("cached GET", size / gateway_get(gw, bucket, "cached.bin", size, buf) / 1e6)
            add("cached mount read", size / mount_read(root / "cached.bin", size, buf) / 1e6)
            add("cached mount read over HTTP", size / mount_read(http_root / "cached.bin", size, buf) / 1e6)
            add("cached mount read, page cache", size / mount_read(paged_root / "cached.bin", size, buf) / 1e6)
            # Each cold key in a directory of its own: three reads in key order in one directory
            # are a walk, and the gateway would fetch the third key ahead (sequential prefetch).
            for who in ("GET", "mount", "mount-http", "mount-paged"):
                remote.put_object(Bucket=bucket, Key=f"cold-{who}-{r}/cold.bin", Body=cold_body)
            time.sleep(1.1)  # the mount's listing cache: the new keys are seen
            add("cold GET", cold / gateway_get(gw, bucket, f"cold-GET-{r}/cold.bin", cold, buf) / 1e6)
            add("cold mount read", cold / mount_read(root / f"cold-mount-{r}" / "cold.bin", cold, buf) / 1e6)
            add("cold mount read over HTTP",
                cold / mount_read(http_root / f"cold-mount-http-{r}" / "cold.bin", cold, buf) / 1e6)
            add("cold mount read, page cache",
                cold / mount_read(paged_root / f"cold-mount-paged-{r}" / "cold.bin", cold, buf) / 1e6)
            add("PUT ack (upload_file)", size / gateway_put(gw, bucket, f"put-{r}", source) / 1e6)
            add("mount write+fsync+close", size / mount_write(root / f"written-{r}", source) / 1e6)
            gw.flush(bucket)
            for key in (f"put-{r}", f"written-{r}", f"cold-GET-{r}/cold.bin", f"cold-mount-{r}/cold.bin",
                        f"cold-mount-http-{r}/cold.bin", f"cold-mount-paged-{r}/cold.bin"):
                s3.delete_object(Bucket=bucket, Key=key)
            gw.flush(bucket)
        if only != "reads":
            listings(gw, bucket, root, runs, listing_keys, small_files, add)
    return {name: median(values) for name, values in results.items()} | {"runs": runs, "size_mib": size_mib,
                                                                       "cold_mib": cold_mib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--cold-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--listing-keys", type=int, default=10_000)
    parser.add_argument("--small-files", type=int, default=1000)
    parser.add_argument("--only", choices=("reads", "metadata"), help="only the reads and write, or only the listings")
    args = parser.parse_args()
    medians = run(args.size_mib, args.cold_mib, args.runs, args.listing_keys, args.small_files, args.only)
    print(f"medians of {args.runs} runs ({args.size_mib} MiB cached/written, {args.cold_mib} MiB cold), MB/s or s:")
    for name, value in medians.items():
        if name not in ("runs", "size_mib", "cold_mib"):
            print(f"  {name:32s} {value:10.2f}")
    ratio = [("cached read: mount / GET", "cached mount read", "cached GET", 0.7),
             ("cached, over HTTP: mount / GET", "cached mount read over HTTP", "cached GET", 0.7),
             ("cached, page cache: mount / GET", "cached mount read, page cache", "cached GET", 0.7),
             ("cold read: mount / GET", "cold mount read", "cold GET", 1 / 1.2),
             ("cold, page cache: mount / GET", "cold mount read, page cache", "cold GET", 1 / 1.2),
             ("cold, over HTTP: mount / GET", "cold mount read over HTTP", "cold GET", 1 / 1.2),
             ("write: mount / PUT ack", "mount write+fsync+close", "PUT ack (upload_file)", 0.7)]
    for label, mine, theirs, goal in ratio:
        if mine not in medians:
            continue
        print(f"  {label:32s} {medians[mine] / medians[theirs]:10.2f}  (goal >= {goal:.2f})")


if __name__ == "__main__":
    main()
