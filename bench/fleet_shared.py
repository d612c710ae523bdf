"""A shared cache against islands: 3 fleet nodes against 3 independent single-node caches.

    sudo .venv/bin/python -m bench.fleet_shared --runs 3                  # netsim `regional` link (root)
    .venv/bin/python -m bench.fleet_shared --link loopback --runs 1      # no namespaces: loopback, unshaped

The remote is SeaweedFS behind the repository's emulated cross-region link (bench/netsim,
`regional`: 80 ms RTT, 400 Mbit/s per direction), with a CountingProxy in front of it that counts
every request and byte the contenders ask of it. Both contenders get the same workload on cold
caches (fresh data directories, a fresh catalog) in every run:

- ``shared``: a fleet of 3 ``ferry serve`` nodes (tests/support/fleet.py): one PostgreSQL catalog,
  fleet port and secret, rendezvous ownership, peer reads;
- ``islands``: 3 ``ferry serve`` nodes alone (each its own SQLite catalog), same remote.

Workload (the cold epoch of a data-parallel job): ``--objects`` objects of ``--size`` bytes; every node
reads every object once, in its own shuffled order, ``--threads`` readers per node, all 3 nodes at
once. Reported per run: wall time of the epoch, remote GETs, remote bytes. Then, on the fleet, the
cost of one whole-object GET of ``--probes`` fresh objects: a remote miss (on the block's owner), a
peer read (another node's first read: the owner streams it) and a local hit (that node again).
Medians over runs. Needs PostgreSQL at 127.0.0.1 (user postgres).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.domain.ownership import block_key, owner  # noqa: E402
from bench import netsim  # noqa: E402
from bench.fleet_peer_read import _database, _drop, _get_ms  # noqa: E402
from bench.remote import LINKS, Remote, RemoteRegion  # noqa: E402
from tests.support.counting_proxy import CountingProxy  # noqa: E402
from tests.support.fleet import Fleet  # noqa: E402
from tests.support.gateway import GatewayProcess  # noqa: E402

NODES = 3
BUCKET = "fleet-bench"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def upload(remote: Remote, keys: list[str], size: int) -> None:
    """The dataset, written to the remote directly (not counted: the proxy is not in that path)."""
    s3 = remote.client()
    with contextlib.suppress(Exception):
        s3.create_bucket(Bucket=BUCKET)
    with cf.ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda k: s3.put_object(Bucket=BUCKET, Key=k, Body=os.urandom(size)), keys))


def epoch(clients: list[Any], keys: list[str], threads: int, seed: int) -> float:
    """Every node reads every key once (its own shuffled order, ``threads`` readers), all nodes at
    once: wall seconds until the last node is done."""

    def node(i: int) -> None:
        order = list(keys)
        random.Random(seed * 100 + i).shuffle(order)
        with cf.ThreadPoolExecutor(threads) as ex:
            list(ex.map(lambda k: _get_ms(clients[i], BUCKET, k), order))

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(len(clients)) as ex:
        list(ex.map(node, range(len(clients))))
    return time.perf_counter() - t0


def remote_counts(proxy: CountingProxy) -> dict[str, float]:
    gets = proxy.gets()
    return {"gets": len(gets), "mib": sum(s.sent_bytes for s in gets) / 2**20,
            "heads": len(proxy.requests("HEAD"))}


@contextlib.contextmanager
def islands(proxy: CountingProxy, work: Path) -> Iterator[list[GatewayProcess]]:
    nodes = [GatewayProcess(proxy, work / f"island-{i + 1}") for i in range(NODES)]
    try:
        for gw in nodes:
            gw.start(timeout=90)
        yield nodes
    finally:
        for gw in nodes:
            gw.stop()


@contextlib.contextmanager
def shared(proxy: CountingProxy, work: Path) -> Iterator[Fleet]:
    name, url = _database()
    try:
        with Fleet(proxy, url, work / "fleet", size=NODES) as fleet:
            fleet.wait_live(NODES, timeout=60)
            yield fleet
    finally:
        _drop(name)


def probe(fleet: Fleet, proxy: CountingProxy, remote: Remote, keys: list[str], size: int) -> dict[str, list[float]]:
    """Miss on the owner, peer read on another node, hit on that node: ms per whole-object GET."""
    upload(remote, keys, size)
    clients = [n.client() for n in fleet.nodes]
    ids = fleet.node_ids()
    out: dict[str, list[float]] = {"miss": [], "peer": [], "hit": [], "peer_remote_gets": []}
    for key in keys:
        own = ids.index(owner(block_key(BUCKET, key, 0), ids))  # type: ignore[arg-type]
        other = (own + 1) % NODES
        out["miss"].append(_get_ms(clients[own], BUCKET, key))
        before = len(proxy.gets())
        out["peer"].append(_get_ms(clients[other], BUCKET, key))
        out["peer_remote_gets"].append(len(proxy.gets()) - before)
        out["hit"].append(_get_ms(clients[other], BUCKET, key))
    return out


def run(args: argparse.Namespace, remote: Remote, work: Path) -> dict[str, Any]:
    keys = [f"ds/{i:04d}" for i in range(args.objects)]
    log(f"uploading {args.objects} x {args.size} bytes")
    upload(remote, keys, args.size)
    res: dict[str, Any] = {"shared": [], "islands": [], "probe": {"miss": [], "peer": [], "hit": [],
                                                                   "peer_remote_gets": []}}
    with CountingProxy(remote) as proxy:
        proxy.record_cut = True  # a fill that closes an answer early still fetched those bytes
        for r in range(args.runs):
            for kind in ("islands", "shared"):
                rwork = work / f"{kind}-{r}"
                cm = islands(proxy, rwork) if kind == "islands" else shared(proxy, rwork)
                with cm as started:
                    nodes = started if kind == "islands" else started.nodes
                    clients = [n.client(max_pool_connections=args.threads * 2) for n in nodes]
                    proxy.reset()
                    seconds = epoch(clients, keys, args.threads, seed=r)
                    row = {"seconds": seconds, **remote_counts(proxy)}
                    res[kind].append(row)
                    log(f"run {r + 1} {kind}: {row}")
                    if kind == "shared":
                        pkeys = [f"probe/{r}-{i}" for i in range(args.probes)]
                        for k, v in probe(started, proxy, remote, pkeys, args.size).items():
                            res["probe"][k].extend(v)
                shutil.rmtree(rwork, ignore_errors=True)
    return res


def render(args: argparse.Namespace, link: str, res: dict[str, Any]) -> str:
    def med(kind: str, field: str) -> float:
        return statistics.median(r[field] for r in res[kind])

    p = res["probe"]
    mib = args.size / 2**20
    lines = [
        f"{args.objects} objects x {mib:g} MiB, each read once on each of {NODES} nodes "
        f"({args.threads} readers per node); {link}; medians of {args.runs} run(s), cold caches each run.",
        "",
        "| | cold epoch (s) | remote GETs | remote MiB | remote HEADs |",
        "|---|---|---|---|---|",
    ]
    for kind, label in (("islands", f"{NODES} independent nodes"), ("shared", f"{NODES}-node fleet (shared cache)")):
        lines.append(f"| {label} | {med(kind, 'seconds'):.1f} | {med(kind, 'gets'):.0f} | "
                     f"{med(kind, 'mib'):.0f} | {med(kind, 'heads'):.0f} |")
    lines += [
        "",
        f"One whole-object GET of a {mib:g} MiB object on the fleet, ms (median of {len(p['miss'])}):",
        "",
        "| local hit | peer read | remote miss (owner) | remote GETs during the peer reads |",
        "|---|---|---|---|",
        f"| {statistics.median(p['hit']):.0f} | {statistics.median(p['peer']):.0f} | "
        f"{statistics.median(p['miss']):.0f} | {sum(p['peer_remote_gets'])} |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_shared", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--link", choices=["regional", "long-fat", "loopback"], default="regional")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--objects", type=int, default=24)
    parser.add_argument("--size", type=int, default=4 * 2**20)
    parser.add_argument("--threads", type=int, default=4, help="readers per node")
    parser.add_argument("--probes", type=int, default=3, help="fresh objects per run for the peer-read cost")
    args = parser.parse_args(argv)
    link = args.link
    if link != "loopback" and not netsim.netns_available():
        log("network namespaces unavailable (needs root and `ip netns`): falling back to loopback")
        link = "loopback"
    region = RemoteRegion("loopback" if link == "loopback" else "netsim")
    work = Path(tempfile.mkdtemp(prefix="ferry-fleet-bench-"))
    try:
        remote = region.up()
        described = region.shape(LINKS[link]) if link in LINKS else "loopback SeaweedFS, unshaped"
        log(described)
        res = run(args, region.remote or remote, work)
    finally:
        region.down()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(render(args, described, res))
    print(f"\ncommand: python -m bench.fleet_shared {' '.join(argv if argv is not None else sys.argv[1:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
