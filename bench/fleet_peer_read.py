"""What a peer read costs: a block read from its owner node against a local hit and a remote miss.

    .venv/bin/python -m bench.fleet_peer_read --runs 7 [--remote-delay-ms 0] [--pause 0.2]

Starts SeaweedFS behind a CountingProxy (``--remote-delay-ms`` adds that much before each remote
request, a crude cross-region round trip), a fresh PostgreSQL database and a fleet of 2 nodes
(tests/support/fleet.py). For each size and run it writes a cold object to the remote, picks the
node that owns its block 0 (rendezvous hashing) and times whole-object GETs through boto3:

- ``miss``: the owner, cold (its fill fetches from the remote);
- ``peer``: the other node, first read (the owner's block relayed to the client; with
  ``FERRY_FLEET_COPY_READS`` 1 it also keeps a copy);
- ``copy``: the other node again, 0.2 s later (the second read: it streams the block from the
  owner again and keeps a copy, docs/fleet.md "Peer reads");
- ``hit``: the other node a third time, 0.2 s later (its own copy).

``--copy-reads N`` sets the nodes' ``FERRY_FLEET_COPY_READS`` (default: the nodes' default).

Prints medians in ms, and the CPU the two gateways spent on each GET (every thread of both node
processes, from ``/proc/<pid>/task/*/schedstat``): on a small shared machine the latency of a
peer read also waits for the cores the other processes hold; its CPU is what carries to a big
node. Needs PostgreSQL at FERRY_TEST_DATABASE_URL's server (default 127.0.0.1).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from app.domain.ownership import block_key, owner
from tests.support.counting_proxy import CountingProxy
from tests.support.fleet import Fleet
from tests.support.seaweed import SeaweedServer

# The defaults of app/config.py, not the tests' fast ones: background chores every 0.5 s would
# take CPU from the reads being timed.
PRODUCTION_INTERVALS = {"FERRY_SWEEP_INTERVAL": "2", "FERRY_NODE_HEARTBEAT_SECONDS": "5",
                        "FERRY_NODE_STALE_SECONDS": "30"}
SIZES = {"4KiB": 4 * 1024, "256KiB": 256 * 1024, "4MiB": 4 * 1024 * 1024, "8MiB": 8 * 1024 * 1024}


def _cpu_ns(pids: list[int]) -> int:
    """CPU time, ns, of every thread of these processes and their children so far."""
    total, todo, seen = 0, list(pids), set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
    return total


def _timed(client: Any, bucket: str, key: str, pids: list[int]) -> tuple[float, float]:
    """(ms, gateway CPU ms) of one whole-object GET."""
    before = _cpu_ns(pids)
    ms = _get_ms(client, bucket, key)
    time.sleep(0.05)  # what the request left to its threads (the fill's last steps) is counted too
    return ms, (_cpu_ns(pids) - before) / 1e6


def _get_ms(client: Any, bucket: str, key: str) -> float:
    t0 = time.perf_counter()
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    while body.read(1024 * 1024):
        pass
    return (time.perf_counter() - t0) * 1000


def _page_cache_write_ms(work: Path, size: int = 8 * 1024 * 1024, files: int = 24) -> tuple[float, float]:
    """CPU ms to write ``size`` bytes into new page-cache pages (a new file each time, as a fill
    does) and into pages already there (the same file rewritten): median of ``files``. A VM that
    hands the host back the memory its guest freed (this one: firecracker, virtio-balloon) pays
    for every first touch of a page, and a fill's copy is made of first touches."""
    data = memoryview(os.urandom(size))
    fresh, reused = [], []
    for i in range(files):
        fd = os.open(work / f"probe-{i}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            for sink, offset in ((fresh, None), (reused, 0)):
                t0 = time.thread_time()
                if offset is None:
                    os.write(fd, data)
                else:
                    os.pwrite(fd, data, offset)
                sink.append((time.thread_time() - t0) * 1000)
        finally:
            os.close(fd)
    return statistics.median(fresh), statistics.median(reused)


def _database() -> tuple[str, str]:
    name = f"ferry_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return name, f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def _drop(name: str) -> None:
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(runs: int, delay_ms: float, copy_reads: int = 0, pause: float = 0.2) -> dict[str, dict[str, float]]:
    name, url = _database()
    kinds = ("miss", "peer", "copy", "hit")
    results: dict[str, dict[str, list[float]]] = {s: {k: [] for k in kinds + tuple(f"{k} cpu" for k in kinds)}
                                                  for s in SIZES}
    env = dict(PRODUCTION_INTERVALS, **({"FERRY_FLEET_COPY_READS": str(copy_reads)} if copy_reads else {}))
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-fleet-"))  # the nodes' data dirs: removed at the end
    try:
        with SeaweedServer() as weed, CountingProxy(weed) as proxy, \
                Fleet(proxy, url, work, size=2, env=env) as fleet:
            fleet.wait_live(2)
            bucket = weed.create_bucket(f"bench-{uuid.uuid4().hex[:8]}")
            clients = [n.client() for n in fleet.nodes]
            pids = [n.proc.pid for n in fleet.nodes if n.proc is not None]
            proxy.delay = delay_ms / 1000
            for label, size in SIZES.items():
                for _ in range(runs):
                    key = f"o-{uuid.uuid4().hex[:10]}"
                    weed.client().put_object(Bucket=bucket, Key=key, Body=os.urandom(size))
                    first = owner(block_key(bucket, key, 0), fleet.node_ids())
                    own = fleet.node_ids().index(first)  # type: ignore[arg-type]
                    other = 1 - own
                    for kind, node in (("miss", own), ("peer", other), ("copy", other), ("hit", other)):
                        ms, cpu = _timed(clients[node], bucket, key, pids)
                        results[label][kind].append(ms)
                        results[label][f"{kind} cpu"].append(cpu)
                        # A kept copy is accounted and published before its last byte; the pause
                        # keeps the next GET apart from its background chores.
                        time.sleep(pause)
        fresh, reused = _page_cache_write_ms(work)
    finally:
        _drop(name)
        shutil.rmtree(work, ignore_errors=True)
    medians = {s: {k: statistics.median(v) for k, v in r.items()} for s, r in results.items()}
    medians["page cache"] = {"8 MiB into new pages": fresh, "8 MiB over cached pages": reused}
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--remote-delay-ms", type=float, default=0.0)
    parser.add_argument("--copy-reads", type=int, default=0, help="FERRY_FLEET_COPY_READS (0: the default)")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between one GET and the next")
    args = parser.parse_args()
    medians = run(args.runs, args.remote_delay_ms, args.copy_reads, args.pause)
    print(f"medians of {args.runs} whole-object GETs, ms (remote delay {args.remote_delay_ms} ms per request)")
    kinds = ("hit", "peer", "copy", "miss")
    print(f"{'size':>8} " + " ".join(f"{k:>7}" for k in kinds) + "  peer/hit   gateway CPU ms: "
          + " ".join(f"{k:>6}" for k in kinds))
    probe = medians.pop("page cache")
    for label, m in medians.items():
        print(f"{label:>8} " + " ".join(f"{m[k]:7.1f}" for k in kinds) + f"  {m['peer'] / m['hit']:7.1f}x"
              + " " * 18 + " ".join(f"{m[k + ' cpu']:6.1f}" for k in kinds))
    print("CPU ms to write into the page cache, after the run: " +
          ", ".join(f"{k} {v:.1f}" for k, v in probe.items()))


if __name__ == "__main__":
    main()
