"""What a fleet's peer read costs under load, against a local hit (issue 28: a 3-node fleet's
epochs 2-3 read two thirds of their samples from another node's cache).

    .venv/bin/python -m bench.peer_rate --runs 3 [--objects 300] [--size-kib 256] [--threads 8] \\
        [--variant ""] [--variant "PYTHONPATH=/tmp/base"] [--spy DIR]

SeaweedFS on loopback, a fresh PostgreSQL database and a fleet of 2 nodes (tests/support/fleet.py)
per ``--variant`` (``NAME=VALUE`` pairs separated by ``;`` added to the nodes' environment;
``PYTHONPATH=DIR`` runs another checkout's code). ``--objects`` objects are read once through
the node that owns them (the owner's copy), then, ``--threads`` at a time, every object whose
owner is node 0 is read through node 1 (``peer``: relayed from the owner, never copied:
``FERRY_FLEET_COPY_READS`` 255) and through node 0 (``hit``). Prints GETs a second and the CPU
both nodes spent per GET (every thread of both processes, from /proc), and apart, the CPU of
the PostgreSQL backends serving the fleet's database (the catalog's side of each lookup): on
this 2-core machine the rate is bounded by that CPU, which is also the figure that carries to a
bigger node. ``--spy DIR`` records each node with py-spy (GIL holders only: the Python CPU)
during both phases of the last run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg

from app.domain.ownership import block_key, owner
from bench.au_prefix import variants_of
from bench.fleet_peer_read import PRODUCTION_INTERVALS, _database, _drop
from bench.proc_cpu import CpuMeter
from tests.support.fleet import Fleet
from tests.support.seaweed import SeaweedServer


def _user_seconds(pids: list[int]) -> float:
    """User-mode CPU of these processes (the Python side; the rest of their CPU is the kernel's)."""
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            total += int(stat.read().rsplit(")", 1)[1].split()[11]) / os.sysconf("SC_CLK_TCK")
    return total


def _spies(spy: Path, pids: list[int], phase: str) -> list[subprocess.Popen[bytes]]:
    """py-spy (GIL holders only: the Python CPU) on each node, until signalled."""
    spy.mkdir(parents=True, exist_ok=True)
    spies = [subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking", "--gil",
                               "-r", "500", "-f", "raw", "-p", str(pid), "-o", str(spy / f"{phase}-node{n}.txt"),
                               "-d", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for n, pid in enumerate(pids)]
    time.sleep(1.0)
    return spies


def _stop(spies: list[subprocess.Popen[bytes]]) -> None:
    for p in spies:
        p.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
        p.wait(30)


def _catalog_pids(database: str) -> list[int]:
    """The PostgreSQL server processes serving the fleet's database (its backends)."""
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True) as admin:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)).fetchall()
    return [int(r[0]) for r in rows]


def _phase(client: Any, bucket: str, keys: list[str], threads: int, pids: list[int],
           rounds: int, database: str) -> dict[str, float]:
    def get(key: str) -> int:
        return len(client.get_object(Bucket=bucket, Key=key)["Body"].read())

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(get, keys[: threads * 2]))  # connections open, code paths warm
        user = _user_seconds(pids)
        catalog = CpuMeter(_catalog_pids(database))  # backends opened mid-phase are not counted
        meters, started = [CpuMeter([pid]) for pid in pids], time.perf_counter()
        for _ in range(rounds):
            list(pool.map(get, keys))
        wall = time.perf_counter() - started
    gets = rounds * len(keys)
    each = [1000 * (m.seconds() or 0.0) / gets for m in meters]
    user_ms = 1000 * (_user_seconds(pids) - user) / gets
    return {"rate": gets / wall, "cpu_ms": sum(each), "owner_ms": each[0], "asker_ms": each[1], "user_ms": user_ms,
            "catalog_ms": 1000 * (catalog.seconds() or 0.0) / gets}


def one_run(weed: SeaweedServer, args: argparse.Namespace, variant: dict[str, str], spy: Path | None) -> dict[str, Any]:
    name, url = _database()
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-peer-"))
    env = dict(PRODUCTION_INTERVALS, FERRY_FLEET_COPY_READS="255", **variant)
    try:
        with Fleet(weed, url, work, size=2, env=env) as fleet:
            fleet.wait_live(2)
            bucket = weed.create_bucket(f"peer-{uuid.uuid4().hex[:8]}")
            s3 = weed.client()
            body = os.urandom(args.size_kib * 1024)
            keys = [f"s/{i:05d}" for i in range(args.objects)]
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=body), keys))
            ids = fleet.node_ids()
            mine = [k for k in keys if owner(block_key(bucket, k, 0), ids) == ids[0]]
            clients = [n.client() for n in fleet.nodes]
            pids = [n.proc.pid for n in fleet.nodes if n.proc is not None]
            with ThreadPoolExecutor(8) as pool:  # the owner's copies
                list(pool.map(lambda k: clients[0].get_object(Bucket=bucket, Key=k)["Body"].read(), mine))
            time.sleep(1.0)  # the fills' rows and accounting settle
            spies = _spies(spy, pids, "hit") if spy is not None else []
            hit = _phase(clients[0], bucket, mine, args.threads, pids, args.rounds, name)
            _stop(spies)
            spies = _spies(spy, pids, "peer") if spy is not None else []
            peer = _phase(clients[1], bucket, mine, args.threads, pids, args.rounds, name)
            _stop(spies)
            return {"hit": hit, "peer": peer, "objects": len(mine)}
    finally:
        _drop(name)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variant", action="append", default=[], help="NAME=VALUE[;NAME=VALUE] ('' = defaults)")
    parser.add_argument("--objects", type=int, default=300)
    parser.add_argument("--size-kib", type=int, default=256)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="passes over the objects per phase")
    parser.add_argument("--spy", type=Path, default=None, help="py-spy raw profiles (GIL holders) of the last run's phases")
    args = parser.parse_args(argv)
    variants = variants_of(args)
    results: dict[str, list[dict[str, Any]]] = {}
    with SeaweedServer() as weed:
        for run in range(args.runs):
            for variant in variants:
                last = run == args.runs - 1 and variant is variants[-1]
                row = one_run(weed, args, variant, args.spy if last else None)
                results.setdefault(json.dumps(variant), []).append(row)
                print(f"run {run} {json.dumps(variant)}: {row['objects']} objects; "
                      f"hit {row['hit']['rate']:.0f}/s {row['hit']['cpu_ms']:.2f} ms CPU "
                      f"(catalog {row['hit']['catalog_ms']:.2f}); "
                      f"peer {row['peer']['rate']:.0f}/s {row['peer']['cpu_ms']:.2f} ms CPU "
                      f"(owner {row['peer']['owner_ms']:.2f}, asker {row['peer']['asker_ms']:.2f}; "
                      f"user {row['peer']['user_ms']:.2f}; catalog {row['peer']['catalog_ms']:.2f})", flush=True)
    print("| variant | hit GETs/s | hit CPU ms per GET (+ catalog) | peer GETs/s | peer CPU ms per GET "
          "(owner + asker) | peer: catalog CPU ms | peer/hit CPU |\n|---|---|---|---|---|---|---|")
    for name, rows in results.items():
        med = {f"{k} {m}": statistics.median(r[k][m] for r in rows)
               for k in ("hit", "peer") for m in ("rate", "cpu_ms", "owner_ms", "asker_ms", "catalog_ms")}
        print(f"| {name} | {med['hit rate']:.0f} | {med['hit cpu_ms']:.2f} (+ {med['hit catalog_ms']:.2f}) | "
              f"{med['peer rate']:.0f} | {med['peer cpu_ms']:.2f} ({med['peer owner_ms']:.2f} + "
              f"{med['peer asker_ms']:.2f}) | {med['peer catalog_ms']:.2f} | {med['peer cpu_ms'] / med['hit cpu_ms']:.1f}x |")


if __name__ == "__main__":
    main()
