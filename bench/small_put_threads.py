"""Where a small PUT's CPU goes, by the gateway's threads: the acknowledgement and the destage.

    .venv/bin/python -m bench.small_put_threads [--puts 800] [--runs 2] [--compare REV_DIR]

Starts SeaweedFS on loopback and one gateway (tests/support), sends ``--puts`` sequential 4 KiB
PUTs through boto3, then flushes, and prints the CPU of each of the gateway's threads (from
``/proc/<pid>/task/<tid>/stat``, named through ``py-spy dump``) per PUT: until the last PUT is
acknowledged, and until the remote holds them all. The destage threads (``ferry-destage-N``)
are what a write costs beyond its acknowledgement; on loopback the remote answers at once, so
the destage of earlier PUTs runs beside the acknowledgement of later ones on the same cores.
``--compare DIR`` runs the gateway from another checkout (its ``app/`` on PYTHONPATH) in turn
with this one, run by run: an A/B in one sitting.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path


def _thread_cpu(pid: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _names(pid: int) -> dict[int, str]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    dump = subprocess.run([spy, "dump", "-p", str(pid)], capture_output=True, text=True).stdout
    names = {int(m.group(1)): m.group(2) for m in re.finditer(r'Thread (\d+) \(\w+\): "([^"]+)"', dump)}
    return {tid: re.sub(r"-\d+$", "-N", name).replace("AnyIO worker thread", "AnyIO") for tid, name in names.items()}


def one_run(puts: int) -> dict[str, tuple[float, float]]:
    """Per thread name: (µs CPU per PUT until the last ack, until the remote holds them all);
    also ``_loop`` (ms of wall time per PUT)."""
    from tests.support.gateway import GatewayProcess
    from tests.support.seaweed import SeaweedServer

    work = Path(tempfile.mkdtemp(prefix="ferry-bench-threads-"))
    try:
        with SeaweedServer() as weed:
            bucket = "b" + uuid.uuid4().hex[:8]
            weed.client().create_bucket(Bucket=bucket)
            with GatewayProcess(weed, work) as gw:
                s3 = gw.client()
                body = os.urandom(4096)
                for i in range(50):  # connections, caches, the bucket check
                    s3.put_object(Bucket=bucket, Key=f"warm/{i}", Body=body)
                gw.flush()
                time.sleep(1)
                assert gw.proc is not None
                pid = gw.proc.pid
                names = _names(pid)
                before = _thread_cpu(pid)
                t0 = time.perf_counter()
                for i in range(puts):
                    s3.put_object(Bucket=bucket, Key=f"small/{i:05d}", Body=body)
                acked = _thread_cpu(pid)
                loop = time.perf_counter() - t0
                gw.flush()
                durable = _thread_cpu(pid)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, tuple[float, float]] = {"_loop": (loop / puts * 1e3, 0.0)}
    for tid, cpu in durable.items():
        name = names.get(tid, "other")
        a, d = out.get(name, (0.0, 0.0))
        out[name] = (a + (acked.get(tid, 0.0) - before.get(tid, 0.0)) / puts * 1e6,
                     d + (cpu - before.get(tid, 0.0)) / puts * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=800)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--compare", type=Path, help="another checkout, run in turn with this one")
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    trees = [("this", here)] + ([("compare", args.compare.resolve())] if args.compare else [])
    for run in range(args.runs):
        for label, tree in trees:
            env = dict(os.environ, PYTHONPATH=str(tree))
            # This checkout's harness; the gateway it starts imports ``app`` from ``tree`` (PYTHONPATH).
            code = (f"import sys; sys.path.insert(0, {str(here)!r}); from bench.small_put_threads import one_run; "
                    f"import json; print(json.dumps(one_run({args.puts})))")
            result = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                               check=True).stdout.strip().splitlines()[-1])
            print(f"run {run + 1}, {label} ({tree}): {result.pop('_loop')[0]:.2f} ms per PUT in the loop")
            for name, (acked, durable) in sorted(result.items(), key=lambda kv: -kv[1][1]):
                if durable >= 10:
                    print(f"  {name:36s} {acked:8.0f} µs/PUT until acked {durable:8.0f} until durable")


if __name__ == "__main__":
    main()
