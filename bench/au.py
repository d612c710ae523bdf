"""Accelerator utilisation (AU) through Ferry against going direct (issue 28), MLPerf Storage's measure.

    .venv/bin/python -m bench.au --runs 3                        # loopback SeaweedFS
    sudo .venv/bin/python -m bench.au --links regional,long-fat  # bench/netsim links (root)

Simulated accelerators consume batches at a fixed compute time per batch; loader threads read
through a real ML data stack and feed them through a bounded queue (2 batches per loader).
AU = the time the accelerators computed / the wall time of the epoch (MLPerf Storage passes at
90 %). The compute time per batch of each dataset shape is calibrated on local disk: the
smallest that gives AU >= 99 % reading the same bytes from local files with the same loaders.

Shapes: ``samples`` (256 KiB objects, shuffled every epoch, 16 per batch, read whole with
``s3torchconnectorclient``'s ``MountpointS3Client``, the CRT engine of the AWS PyTorch
connector), ``shards`` (32 MiB objects read front to back in key order, one batch per 4 MiB),
``parquet`` (files read row group by row group with pyarrow's S3 filesystem, one batch per row
group) and, with torch installed, ``torch`` (a ``DataLoader`` over ``s3torchconnector``'s
``S3MapDataset``, 2 worker processes, shuffled). Rows per shape and link: direct; Ferry epoch 1
(cold), epochs 2 and 3 (warm); epoch 1 under a ``prefetch: prefix`` rule; after ``ferry stage``;
a cache half the dataset (epochs 2-3: AU and hit ratio, frequency admission beside LRU,
``admission: always``, in the same run).

``--fleet 3`` adds the rows of a 3-node fleet (tests/support/fleet.py: a fresh PostgreSQL
database at 127.0.0.1 per run, the production sweep interval) over the same remote, each node's
``FERRY_CACHE_BYTES`` half the dataset: the fleet's caches hold it together (1.5x), no node alone
does. Loader i reads through node i % 3 (data-parallel trainers on 3 hosts, the same accelerator
demand as the single-node rows); every epoch reshuffles, so a sample one node read in epoch 1 is
likely read through another in epoch 2. Rows: fleet epoch 1 (cold), epochs 2 and 3 (warm); not
for ``torch``, whose DataLoader reads through one endpoint. ``--fleet-only`` keeps direct and the
fleet rows; ``--fleet-variant`` (repeatable) runs the fleet rows once per variant of the nodes'
settings, interleaved in each run (``PYTHONPATH=DIR`` runs another checkout's code). Columns:
the hit ratio is the nodes' local hits over their GETs (a peer read is its node's miss); remote
bytes are what the netsim link carried, or on loopback the GET bodies a CountingProxy in front
of SeaweedFS relayed (fleet rows only); peer bytes are what the nodes sent each other
(``ferry_fleet_served_bytes_total``). ``--scale`` shrinks every shape's object count (a smoke run).

    .venv/bin/python -m bench.au --runs 3 --shapes samples,shards,parquet --fleet 3
    sudo .venv/bin/python -m bench.au --runs 3 --shapes samples,shards,parquet --links regional --fleet 3
    .venv/bin/python -m bench.au --runs 1 --shapes samples --fleet 3 --fleet-only --scale 0.05  # smoke

Install the stack first: ``pip install torch==2.13.0 && pip install -e ".[ml]"``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.au_data import SHAPES, MiB, Shape, crt_reader, make_dataset, order, parquet_reader
from bench.au_epoch import calibrate, epoch, torch_epoch
from bench.fleet_peer_read import PRODUCTION_INTERVALS, _database, _drop
from bench.remote import LINKS, Remote, RemoteRegion
from tests.support.counting_proxy import CountingProxy
from tests.support.fleet import Fleet
from tests.support.gateway import ACCESS_KEY, ADMIN_TOKEN, SECRET_KEY, GatewayProcess

Counter = Callable[[], int | None]  # bytes the remote sent so far (None: not counted)
FLEET_ROWS = ("fleet epoch 1 (cold)", "fleet epoch 2", "fleet epoch 3")






# ---- the rows ------------------------------------------------------------------------------------
def parse_variant(text: str) -> dict[str, str]:
    """``NAME=VALUE[;NAME=VALUE]`` (a variant of the gateways' settings; '' = the defaults)."""
    return dict(pair.split("=", 1) for pair in text.split(";") if pair)


class Rows:
    def __init__(self, remote: Remote, bucket: str, shape: Shape, keys: list[str], prefix: str, compute: float,
                 workdir: Path, dataset_bytes: int, netsim: bool = False) -> None:
        self.remote, self.bucket, self.shape, self.keys, self.prefix = remote, bucket, shape, keys, prefix
        self.compute, self.workdir, self.netsim = compute, workdir, netsim
        # The bytes stored, not count x nominal size: Parquet files run a little over theirs, and a
        # cache of "half the dataset" sized by the nominal figure held r = 0.49, not 0.5.
        self.dataset_bytes = dataset_bytes

    def link_bytes(self) -> int | None:
        """The netsim link's count; None on loopback, also while another run has a netsim link up."""
        return link_bytes() if self.netsim else None

    def run_epoch(self, endpoints: list[str], access: str, secret: str, seed: int) -> dict[str, float]:
        """An epoch through ``endpoints``: loader i reads through ``endpoints[i % len(endpoints)]``."""
        if self.shape.name == "torch":
            return torch_epoch(endpoints[0], access, secret, self.bucket, f"{self.prefix}torch/", self.compute)
        make = parquet_reader if self.shape.name == "parquet" else crt_reader
        readers = [make(endpoint, access, secret, self.bucket, self.shape) for endpoint in endpoints]
        return epoch(order(self.keys, self.shape, seed), readers, self.shape, self.compute)

    def prefix_rule(self) -> str:
        """``FERRY_POLICIES`` with one ``prefetch: prefix`` rule over this shape's objects."""
        return json.dumps([{"bucket": self.bucket, "prefix": f"{self.prefix}{self.shape.name}/", "prefetch": "prefix"}])

    def gateway(self, **env: str) -> GatewayProcess:
        return GatewayProcess(self.remote, Path(tempfile.mkdtemp(dir=self.workdir)), env=env)

    def through(self, gws: GatewayProcess | list[GatewayProcess], seed: int,
                fetched: Counter | None = None) -> dict[str, float]:
        """An epoch through one gateway or a fleet's nodes: AU, hit ratio, remote (and peer) bytes.
        ``fetched`` counts the remote's bytes (default: the netsim link's, none on loopback)."""
        nodes = gws if isinstance(gws, list) else [gws]
        fetched = fetched or self.link_bytes
        before, carried = hits(nodes, self.bucket), fetched()
        peered = served_bytes(nodes) if len(nodes) > 1 else 0
        row = self.run_epoch([gw.endpoint for gw in nodes], ACCESS_KEY, SECRET_KEY, seed)
        after, now = hits(nodes, self.bucket), fetched()
        reads = (after[0] - before[0]) + (after[1] - before[1])
        row["hit"] = (after[0] - before[0]) / reads if reads else 0.0  # of the GETs, ranged ones each
        if carried is not None and now is not None:  # of the bytes: what the remote did not send
            row["remote"] = (now - carried) / self.dataset_bytes
        if len(nodes) > 1:  # what the owners sent the other nodes
            row["peer"] = (served_bytes(nodes) - peered) / self.dataset_bytes
        return row

    def all(self, seed: int, fleet: int = 0, single: bool = True,
            fleet_variants: tuple[str, ...] = ("",)) -> dict[str, dict[str, float]]:
        carried = self.link_bytes()
        out = {"direct": self.run_epoch([self.remote.endpoint], self.remote.access_key, self.remote.secret_key,
                                        seed)}
        if carried is not None and (now := self.link_bytes()) is not None:
            out["direct"]["remote"] = (now - carried) / self.dataset_bytes
        if single:
            out.update(self.single(seed))
        if fleet and self.shape.name != "torch":  # the torch DataLoader reads through one endpoint
            for variant in fleet_variants:
                rows = self.fleet(fleet, seed, parse_variant(variant))
                out.update({f"{row}, {variant}" if variant else row: found for row, found in rows.items()})
        return out

    def single(self, seed: int) -> dict[str, dict[str, float]]:
        """The rows of one node: epochs 1-3, prefetch, stage, a cache half the dataset."""
        out: dict[str, dict[str, float]] = {}
        with self.gateway() as gw:
            for n, name in enumerate(("ferry epoch 1 (cold)", "ferry epoch 2", "ferry epoch 3")):
                out[name] = self.through(gw, seed + n)
        with self.gateway(FERRY_POLICIES=self.prefix_rule()) as gw:
            out["ferry epoch 1, prefetch: prefix"] = self.through(gw, seed)
        with self.gateway() as gw:
            stage(gw, self.bucket, f"{self.prefix}{self.shape.name}/")
            out["ferry after stage"] = self.through(gw, seed + 7)
        for admission, label in (("frequency", "cache = dataset/2"), ("always", "cache = dataset/2, LRU")):
            with self.gateway(FERRY_CACHE_BYTES=str(self.dataset_bytes // 2), FERRY_CACHE_ADMISSION=admission) as gw:
                self.through(gw, seed)
                rows = [self.through(gw, seed + n) for n in (1, 2)]
                out[f"{label}, epochs 2-3"] = {k: statistics.fmean(r[k] for r in rows) for k in rows[0]}
        return out

    def fleet(self, size: int, seed: int, variant: dict[str, str] | None = None) -> dict[str, dict[str, float]]:
        """Epochs 1-3 through a fresh fleet of ``size`` nodes (one PostgreSQL catalog, cold caches),
        each node's cache half the dataset: together they hold it, no node alone does. ``variant``:
        settings added to the nodes' environment (``PYTHONPATH=DIR`` runs another checkout)."""
        name, url = _database()
        # The production sweep, not the tests' 0.5 s; the fleet's quick heartbeat, which wait_live expects.
        env = {"FERRY_SWEEP_INTERVAL": PRODUCTION_INTERVALS["FERRY_SWEEP_INTERVAL"],
               "FERRY_CACHE_BYTES": str(self.dataset_bytes // 2), **(variant or {})}
        base = Path(tempfile.mkdtemp(dir=self.workdir))
        try:
            with counted(self.remote, self.link_bytes) as (remote, fetched), \
                    Fleet(remote, url, base, size=size, env=env) as fleet:
                fleet.wait_live(size, timeout=60)  # and every node has re-read the live set
                return {row: self.through(fleet.nodes, seed + n, fetched) for n, row in enumerate(FLEET_ROWS)}
        finally:
            _drop(name)
            shutil.rmtree(base, ignore_errors=True)  # 1.5 datasets of cache per fleet


@contextlib.contextmanager
def counted(remote: Remote, link: Counter) -> Iterator[tuple[Any, Counter]]:
    """The remote a fleet reads, and what counts the bytes it sends: the netsim ``link``'s count,
    or on loopback a CountingProxy in front of SeaweedFS (GET body bytes, early-closed ones too)."""
    if link() is not None:
        yield remote, link
        return
    with CountingProxy(remote) as proxy:
        proxy.record_cut = True  # a fill that closes an answer early still fetched those bytes
        yield proxy, proxy.bytes_fetched


def link_bytes() -> int | None:
    """Bytes the netsim link carried from the remote (its host-side interface), None on loopback."""
    try:
        return int(Path("/sys/class/net/ferrysim0/statistics/rx_bytes").read_text())
    except (OSError, ValueError):
        return None


def hits(gws: list[GatewayProcess], bucket: str) -> tuple[int, int]:
    """(hits, misses) of the clients' GETs of ``bucket``, summed over the nodes. Alone: the cache's
    outcomes; in a fleet, the S3 requests' (the cache also counts an owner's reads for its peers,
    and a peer read is its node's miss). Only this bench's reads reach its gateways."""
    if len(gws) == 1:
        rows = [r for r in admin_stats(gws[0])["cache"]["by_bucket"] if r["bucket"] == bucket]
        return sum(r["hit"] + r["stale"] for r in rows), sum(r["miss"] for r in rows)
    outcomes = [admin_stats(gw)["requests"]["by_outcome"] for gw in gws]
    return (sum(o.get("hit", 0) + o.get("stale", 0) for o in outcomes), sum(o.get("miss", 0) for o in outcomes))


def admin_stats(gw: GatewayProcess) -> dict[str, Any]:
    return httpx.get(f"{gw.endpoint}/admin/stats", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                     timeout=30).json()


def served_bytes(gws: list[GatewayProcess]) -> int:
    """Block bytes the nodes sent each other (``ferry_fleet_served_bytes_total``, summed)."""
    total = 0.0
    for gw in gws:
        text = httpx.get(f"{gw.endpoint}/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                         timeout=30).text
        total += sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
                     if s.name == "ferry_fleet_served_bytes_total")
    return int(total)


def stage(gw: GatewayProcess, bucket: str, prefix: str) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    job = httpx.post(f"{gw.endpoint}/admin/staging", json={"bucket": bucket, "prefix": prefix}, headers=headers,
                     timeout=30).json()
    while (state := httpx.get(f"{gw.endpoint}/admin/staging/{job['id']}", headers=headers,
                              timeout=30).json()["state"]) in ("queued", "running"):
        time.sleep(0.2)
    assert state == "done", state


def median_cell(runs: list[dict[str, dict[str, float]]], name: str, field: str, fmt: str) -> str:
    """The median of ``field`` of row ``name`` over the runs, or '-' where the row has none."""
    if field not in runs[0][name]:
        return "-"
    return format(statistics.median(r[name][field] for r in runs), fmt)


def print_rows(shape: Shape, runs: list[dict[str, dict[str, float]]]) -> None:
    for name in runs[0]:
        au = median_cell(runs, name, "au", ".1%")
        hit = median_cell(runs, name, "hit", ".2f")
        remote, peer = median_cell(runs, name, "remote", ".2f"), median_cell(runs, name, "peer", ".2f")
        wall = median_cell(runs, name, "wall", ".2f")
        each = " ".join(f"{r[name]['au']:.0%}" for r in runs)
        print(f"| {shape.name} | {name} | {au} | {hit} | {remote} | {peer} | {wall} | {each} |", flush=True)


def scaled(shape: Shape, scale: float) -> Shape:
    """The shape with ``scale`` times its objects (at least one): a smaller dataset for a smoke run."""
    return dataclasses.replace(shape, count=max(1, round(shape.count * scale)))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--links", default="loopback", help="loopback, or netsim profiles: regional,long-fat")
    ap.add_argument("--shapes", default="samples,shards,parquet,torch")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fleet", type=int, default=0, metavar="N",
                    help="also the rows of an N-node fleet, each node's cache half the dataset (needs PostgreSQL)")
    ap.add_argument("--fleet-only", action="store_true", help="with --fleet: direct and the fleet rows only")
    ap.add_argument("--fleet-variant", action="append", default=[],
                    help="with --fleet: the fleet rows once per variant, NAME=VALUE[;NAME=VALUE] ('' = defaults), "
                         "interleaved in each run")
    ap.add_argument("--scale", type=float, default=1.0, help="times the objects of each shape (smoke: 0.05)")
    args = ap.parse_args(argv)
    links = args.links.split(",")
    region = RemoteRegion("loopback" if links == ["loopback"] else "netsim")
    remote = region.up()
    workdir = Path(tempfile.mkdtemp(prefix="ferry-au-"))
    bucket = f"au-{uuid.uuid4().hex[:8]}"
    try:
        s3 = remote.client()
        s3.create_bucket(Bucket=bucket)
        prefix = "au/"
        shapes = [scaled(SHAPES[n], args.scale) for n in args.shapes.split(",")]
        data: dict[str, dict[str, bytes]] = {}
        for shape in shapes:
            data[shape.name] = make_dataset(shape, workdir / "local", prefix)
            for key, body in data[shape.name].items():
                s3.put_object(Bucket=bucket, Key=key, Body=body)
        stored = {name: sum(map(len, objects.values())) for name, objects in data.items()}
        computes = {s.name: calibrate(s, sorted(data[s.name]), workdir / "local") for s in shapes}
        for link in links:
            where = region.shape(LINKS[link]) if region.kind == "netsim" else "loopback SeaweedFS, unshaped"
            print(f"\n### {link}: {where}\n")
            print("| shape | row | AU (median) | hit ratio (GETs) | remote bytes / dataset | peer bytes / dataset "
                  "| epoch s | AU of each run |\n|---|---|---|---|---|---|---|---|")
            for shape in shapes:
                rows = Rows(region.remote or remote, bucket, shape, sorted(data[shape.name]), prefix,
                            computes[shape.name], workdir, stored[shape.name], region.kind == "netsim")
                print_rows(shape, [rows.all(run * 10, args.fleet, not args.fleet_only, tuple(args.fleet_variant or [""]))
                                   for run in range(args.runs)])
        print("\ncompute per batch (calibrated on local disk, AU >= 99 %): "
              + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in computes.items()))
        if args.fleet:
            print(f"fleet: {args.fleet} nodes, each FERRY_CACHE_BYTES = dataset/2 ("
                  + ", ".join(f"{s.name} {stored[s.name] // 2 / MiB:.1f} MiB" for s in shapes) + ")")
    finally:
        region.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
