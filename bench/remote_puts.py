"""The CPU of Ferry's writes to the remote, raw (``app/adapters/remote/put.py``) against botocore's
calls, on a loopback SeaweedFS started here: UploadPart of 8 MiB staged parts (what eager copies
and the multipart destage send) and PutObject of a 4 KiB inline body (a small PUT's destage).

    .venv/bin/python -m bench.remote_puts --parts 32 --threads 4 --puts 300 --rounds 4

Prints medians over the rounds after the first (a warm-up): the sender's process CPU per GiB (per
call for PutObject), SeaweedFS's CPU per GiB and the wall time. Both paths alternate in each round.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.adapters.remote import RemoteConfig, RemoteStore
from tests.support.seaweed import SeaweedServer

PART = 8 * 1024 * 1024
TCK = os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """utime + stime of a process and its descendants, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    total = (int(fields[11]) + int(fields[12])) / TCK
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
    except FileNotFoundError:
        children = []
    return total + sum(tree_cpu(int(child)) for child in children)


def b64md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def parts(store: RemoteStore, bucket: str, paths: list[tuple[str, str]], threads: int, weed: int,
          rounds: int) -> dict[str, list[tuple[float, float, float]]]:
    sends: dict[str, Callable[..., str]] = {"raw": store.multipart.upload_part,
                                            "botocore": store.multipart._upload_part_boto}
    gib = len(paths) * PART / 2**30
    out: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sends}
    for rnd in range(rounds):
        for name, send in sends.items():
            key = f"{name}-{rnd}"
            upload = store.create_multipart(bucket, key, {}, {}, None)

            def one(i: int, send: Callable[..., str] = send, key: str = key, upload: str = upload) -> None:
                path, md5 = paths[i]
                with open(path, "rb") as fh:
                    send(bucket, key, upload, i + 1, fh, PART, md5, {})

            weed0, t0, p0 = tree_cpu(weed), time.perf_counter(), time.process_time()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(one, range(len(paths))))
            wall, mine, theirs = time.perf_counter() - t0, time.process_time() - p0, tree_cpu(weed) - weed0
            store.abort_multipart(bucket, key, upload)
            out[name].append((mine / gib, theirs / gib, wall))
    return out


def puts(store: RemoteStore, bucket: str, count: int, rounds: int) -> dict[str, list[tuple[float, float, float]]]:
    body = os.urandom(4096)
    md5 = b64md5(body)
    sends: dict[str, Callable[..., str]] = {"raw": store.objects.put_object,
                                            "botocore": store.objects._put_object_boto}
    out: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sends}
    for rnd in range(rounds):
        for name, send in sends.items():
            t0, p0 = time.perf_counter(), time.process_time()
            for i in range(count):
                send(bucket, f"{name}/{rnd}/{i}", io.BytesIO(body), len(body), md5,
                     {"content-type": "application/octet-stream"}, {}, {}, if_none_match="*")
            out[name].append(((time.process_time() - p0) / count * 1e6, 0.0, (time.perf_counter() - t0) / count * 1e3))
    return out


def medians(rows: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    kept = rows[1:] or rows
    return (statistics.median(r[0] for r in kept), statistics.median(r[1] for r in kept),
            statistics.median(r[2] for r in kept))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", type=int, default=32, help="8 MiB parts per round (0: none)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--puts", type=int, default=300, help="4 KiB PutObjects per round (0: none)")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    with SeaweedServer() as weed, tempfile.TemporaryDirectory() as tmp:
        store = RemoteStore(RemoteConfig(weed.endpoint, "us-east-1", weed.access_key, weed.secret_key))
        assert store.putter.enabled, "the raw path does not apply to this remote"
        bucket = f"rp-{uuid.uuid4().hex[:8]}"
        weed.client().create_bucket(Bucket=bucket)
        weed_pid: Any = weed.pid
        if args.parts:
            paths = []
            for i in range(args.parts):
                data = os.urandom(PART)
                path = os.path.join(tmp, f"p{i}")
                with open(path, "wb") as f:
                    f.write(data)
                paths.append((path, b64md5(data)))
            for name, rows in parts(store, bucket, paths, args.threads, weed_pid, args.rounds).items():
                cpu, theirs, wall = medians(rows)
                print(f"UploadPart {name:9s} sender CPU {cpu:.3f} s/GiB  SeaweedFS CPU {theirs:.3f} s/GiB  "
                      f"wall {wall:.2f} s per {args.parts} parts (n={max(1, len(rows) - 1)})")
        if args.puts:
            for name, rows in puts(store, bucket, args.puts, args.rounds).items():
                cpu, _, wall = medians(rows)
                print(f"PutObject  {name:9s} CPU {cpu:.0f} us per call  wall {wall:.2f} ms (n={max(1, len(rows) - 1)})")


if __name__ == "__main__":
    main()
