"""Epoch 1 of the ``samples`` shape under a ``prefetch: prefix`` rule, by gateway settings (issue 28).

    sudo .venv/bin/python -m bench.au_prefix --links long-fat,regional --runs 3 \\
        --variant "" --variant FERRY_CACHE_PREFETCH_PARALLEL=32 --variant FERRY_CACHE_PREFETCH_PARALLEL=64

The rows of ``bench.au`` (same dataset, loaders, calibration and netsim link), reduced to what an
A/B of the staging needs: direct, then one fresh gateway per ``--variant`` (``NAME=VALUE`` pairs
separated by ``;``, added to the gateway's environment) reading epoch 1 under the rule, the
variants interleaved run by run. Prints each run and the medians: AU, epoch seconds, hit ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import uuid
from pathlib import Path

from bench.au import Rows, calibrate, parse_variant
from bench.au_data import SHAPES, make_dataset
from bench.remote import LINKS, RemoteRegion

PREFIX = "au/"


def add_ab_arguments(parser: argparse.ArgumentParser, runs: int) -> None:
    """The arguments of an A/B over netsim links by gateway settings (this module, stage_rate.py)."""
    parser.add_argument("--links", default="long-fat")
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--variant", action="append", default=[], help="NAME=VALUE[;NAME=VALUE] ('' = defaults)")


def variants_of(args: argparse.Namespace) -> list[dict[str, str]]:
    return [parse_variant(v) for v in (args.variant or [""])]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_ab_arguments(parser, runs=3)
    args = parser.parse_args(argv)
    variants = variants_of(args)
    region = RemoteRegion("netsim")
    remote = region.up()
    workdir = Path(tempfile.mkdtemp(prefix="ferry-au-"))
    bucket = f"au-{uuid.uuid4().hex[:8]}"
    shape = SHAPES["samples"]
    try:
        s3 = remote.client()
        s3.create_bucket(Bucket=bucket)
        data = make_dataset(shape, workdir / "local", PREFIX)
        for key, body in data.items():
            s3.put_object(Bucket=bucket, Key=key, Body=body)
        compute = calibrate(shape, sorted(data), workdir / "local")
        for link in args.links.split(","):
            print(f"\n{link}: {region.shape(LINKS[link])}", flush=True)
            rows = Rows(region.remote or remote, bucket, shape, sorted(data), PREFIX, compute, workdir,
                        sum(map(len, data.values())), True)
            results: dict[str, list[dict[str, float]]] = {"direct": []}
            for run in range(args.runs):
                results["direct"].append(rows.run_epoch([rows.remote.endpoint], rows.remote.access_key,
                                                        rows.remote.secret_key, run * 10))
                for variant in variants:
                    with rows.gateway(FERRY_POLICIES=rows.prefix_rule(), **variant) as gw:
                        results.setdefault(json.dumps(variant), []).append(rows.through(gw, run * 10))
                for name, got in results.items():
                    last = got[-1]
                    print(f"run {run} {name}: AU {last['au']:.1%}, {last['wall']:.2f} s, hit {last.get('hit', 0):.2f}",
                          flush=True)
            print("| row | AU (median) | epoch s | AU of each run |\n|---|---|---|---|")
            for name, got in results.items():
                au, wall = statistics.median(r["au"] for r in got), statistics.median(r["wall"] for r in got)
                each = " ".join(format(r["au"], ".0%") for r in got)
                print(f"| {name} | {au:.1%} | {wall:.2f} | {each} |")
        print(f"compute per batch (calibrated on local disk): {compute * 1000:.1f} ms")
    finally:
        region.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
