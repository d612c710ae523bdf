"""Two revisions of Ferry side by side in one run: did a change cost speed?

    .venv/bin/python -m bench.compare --baseline d34ea47                      # loopback SeaweedFS
    .venv/bin/python -m bench.compare --baseline /tmp/base --workloads checkpoint --profile quick
    sudo .venv/bin/python -m bench.compare --baseline d34ea47 --link regional # through the netsim link

The baseline revision is checked out into a temporary git worktree (removed afterwards) and served
by the same virtualenv with ``PYTHONPATH`` pointing at it (a directory is used as it is); the working tree is the other contender.
Both run in embedded mode, each with its own data dir, against one remote. Runs alternate which
contender goes first. Figures: 4 KiB PUT p50, warm 4 KiB GET p50 (urllib3 and boto3), cold epoch
(a never-read prefix of small objects, read with the profile's threads); with ``--workloads checkpoint``
the profile's object by boto3 ``upload_file`` (ack MB/s, remote-holds-it time against a direct upload). The report is a markdown
table of medians over the runs, printed and written next to the results JSON.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.contenders import Contender, Direct, Ferry
from bench.probes import log, make_file
from bench.remote import LINKS, ROOT, RemoteRegion
from bench.workloads import PROFILES, Bench, Profile

FIGURES = (  # (workload, field, label, unit)
    ("small_put", "p50_ms", "4 KiB PUT p50", "ms"),
    ("small_put", "cpu_us_durable", "gateway CPU per 4 KiB PUT incl. destage", "us"),
    ("small_get", "http_p50_ms", "warm 4 KiB GET p50 (urllib3)", "ms"),
    ("small_get", "boto3_p50_ms", "warm 4 KiB GET p50 (boto3)", "ms"),
    ("cold_epoch", "seconds", "cold epoch", "s"),
    ("checkpoint", "write_mbps", "checkpoint ack", "MB/s"),
    ("checkpoint", "durable_s", "checkpoint remote holds it", "s"),
    ("checkpoint", "cpu_s_per_gib", "checkpoint CPU until ack", "s/GiB"),
    ("checkpoint", "cpu_s_per_gib_durable", "checkpoint CPU until remote holds it", "s/GiB"),
)
WORKLOADS = ("small_put", "small_get", "cold_epoch")
CHOICES = (*WORKLOADS, "checkpoint")


class SideBySide(Bench):
    """Every workload runs on every contender given, whatever their names."""

    def pick(self, *names: str) -> list[Contender]:
        return [c for c in self.c.values() if c.name != "direct" or "direct" in names]


def ratios(results: dict[str, dict[str, list[dict[str, Any]]]], names: list[str]) -> list[list[str]]:
    """Medians of per-run ratios: checkpoint ack MB/s against the baseline, remote-holds against direct."""
    ck = results.get("checkpoint", {})
    by_run = {n: {r.get("run"): r for r in ck.get(n, []) if "error" not in r} for n in [*names, "direct"]}

    def med(pairs: list[float]) -> str:
        return f"{statistics.median(pairs):.3f} (n={len(pairs)})" if pairs else "—"

    base = by_run[names[-1]]  # the baseline comes last
    acks = [med([by_run[n][r]["write_mbps"] / base[r]["write_mbps"] for r in by_run[n] if r in base])
            for n in names]
    cpus = [med([by_run[n][r]["cpu_s_per_gib"] / base[r]["cpu_s_per_gib"] for r in by_run[n]
                 if r in base and "cpu_s_per_gib" in by_run[n][r] and base[r].get("cpu_s_per_gib")])
            for n in names]
    rows = [["checkpoint ack MB/s ÷ baseline's (per run)", *acks],
            ["checkpoint CPU until ack ÷ baseline's (per run)", *cpus]]
    holds = [med([by_run[n][r]["durable_s"] / by_run["direct"][r]["ack_s"] for r in by_run[n] if r in by_run["direct"]])
             for n in names]
    return [*rows, ["checkpoint remote holds it ÷ direct upload (per run)", *holds]] if ck else []


def _env(variant: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in variant.split(";") if "=" in kv)


def baseline_tree(rev: str, into: Path) -> Path:
    """A detached worktree of ``rev`` (the caller removes it with ``drop_tree``)."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), rev], check=True,
                   stdout=subprocess.DEVNULL)
    return into


def drop_tree(path: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)
    shutil.rmtree(path, ignore_errors=True)


def prepare(bench: Bench) -> None:
    """The objects these workloads read: one 4 KiB object and the dataset the epochs copy."""
    s3, p = bench.rs3, bench.p
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
        s3.create_bucket(Bucket=bench.bucket)
    s3.put_object(Bucket=bench.bucket, Key="base/small4k", Body=os.urandom(4096))
    body = os.urandom(p.dataset_object)
    with cf.ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda i: s3.put_object(Bucket=bench.bucket, Key=f"base/ds/{i:05d}", Body=body),
                    range(p.dataset_count)))


def medians(results: dict[str, dict[str, list[dict[str, Any]]]], names: list[str]) -> list[list[str]]:
    rows = []
    for workload, field, label, unit in FIGURES:
        row = [f"{label} ({unit})"]
        for name in names:
            values = [r[field] for r in results.get(workload, {}).get(name, []) if field in r]
            row.append(f"{statistics.median(values):.3f} (n={len(values)})" if values else "—")
        if any(v != "—" for v in row[1:]):  # a workload left out of this run: no row
            rows.append(row)
    return rows


def table(names: list[str], rows: list[list[str]]) -> str:
    head = "| figure | " + " | ".join(names) + " |\n|---|" + "---|" * len(names) + "\n"
    return head + "".join("| " + " | ".join(r) + " |\n" for r in rows)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="git revision to compare the working tree with")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="smoke")
    parser.add_argument("--link", choices=sorted(LINKS), help="netsim link (root); default loopback SeaweedFS")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--bucket", default="ferry-compare")
    parser.add_argument("--results-dir", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--variant", action="append", metavar="K=V[;K=V]",
                        help="a working-tree contender with these environment variables (repeatable)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated subset of {CHOICES}")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in workloads if w not in CHOICES]
    if unknown or not workloads:
        parser.error(f"--workloads: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(CHOICES)}")
    profile = PROFILES[args.profile]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, check=True).stdout.strip())
    work = Path(tempfile.mkdtemp(prefix="ferry-compare-"))
    region = RemoteRegion("netsim" if args.link else "loopback")
    started: list[Ferry] = []
    given = Path(args.baseline).is_dir()
    tree = Path(args.baseline).resolve() if given else baseline_tree(args.baseline, work / "baseline")
    try:
        remote = region.up()
        description = region.shape(LINKS[args.link] if args.link else LINKS["regional"])
        contenders: dict[str, Contender] = {}
        variants = [(f"ferry@{head}{'+' if dirty else ''}" + (f"[{v}]" if v else ""), _env(v))
                    for v in args.variant or [""]]
        for name, env in (*variants, (f"ferry@{args.baseline}", {"PYTHONPATH": str(tree)})):
            ferry = Ferry(remote, work / "".join(ch if ch.isalnum() else "-" for ch in name))
            ferry.gw.extra_env.update(env)
            ferry.name = ferry.label = name
            started.append(ferry.start())
            contenders[name] = ferry
        if "checkpoint" in workloads:
            contenders["direct"] = Direct(remote)
            src = make_file(work / "checkpoint.bin", profile.object_size)
        bench = SideBySide(profile, remote, args.bucket, work, args.link or "loopback", contenders, None, args.runs)
        prepare(bench)
        bench.stage(list(contenders), [], workloads)
        for run in range(args.runs):
            log(f"---- run {run + 1}/{args.runs}")
            bench.run = run
            for workload in workloads:
                if workload == "checkpoint":
                    bench.checkpoint(run, src)
                else:
                    getattr(bench, workload)(run)
    finally:
        for ferry in started:
            ferry.stop()
        region.down()
        if not given:
            drop_tree(tree)
        shutil.rmtree(work, ignore_errors=True)
    return write_report(bench, contenders, description, profile, args, argv)


def write_report(bench: SideBySide, contenders: dict[str, Contender], description: str, profile: Profile,
                 args: argparse.Namespace, argv: list[str] | None) -> int:
    """The medians and per-run ratios, printed and kept in results-dir; 1 when a workload failed."""
    names = [n for n in contenders if n != "direct"]
    report = (f"Ferry {names[0]} against {names[1]}, {description}; profile {profile.name}, {args.runs} runs, "
              f"medians.\n\n{table(names, medians(bench.results, names) + ratios(bench.results, names))}\n"
              f"Command: `python -m bench.compare {' '.join(argv if argv is not None else sys.argv[1:])}`\n")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stem = args.results_dir / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
    stem.with_suffix(".json").write_text(json.dumps({"results": bench.results, "errors": bench.errors}, indent=1))
    stem.with_suffix(".md").write_text(report)
    print(report)
    if bench.errors:
        print("errors:", *bench.errors, sep="\n  ")
    return 1 if bench.errors else 0


if __name__ == "__main__":
    sys.exit(main())
