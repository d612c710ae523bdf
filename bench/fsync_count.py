"""fsync + fdatasync calls per 4 KiB write-back PUT, counted with strace on every gateway thread.

    .venv/bin/python -m bench.fsync_count                      # this checkout
    .venv/bin/python -m bench.fsync_count /tmp/base .          # several checkouts, one after the other

For each checkout: one gateway on a fresh data dir and a loopback SeaweedFS; ``--puts`` sequential
PUTs with the remote paused (the acknowledgements' own fsyncs), then as many with the remote up and
a flush (acknowledgements and their destage). Needs strace and ptrace permission (root here).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.proc_cpu import gateway_pids
from tests.support.gateway import GatewayProcess
from tests.support.seaweed import SeaweedServer

ENV = {"FERRY_LOG_LEVEL": "warning", "FERRY_REMOTE_CIRCUIT_COOLDOWN": "1", "FERRY_REMOTE_READ_TIMEOUT": "2",
       "FERRY_REMOTE_CONNECT_TIMEOUT": "2"}


def traced(pid: int, out: Path, work: Callable[[], object]) -> int:
    """fsync/fdatasync calls of every thread of ``pid``'s processes while ``work`` runs."""
    tids = [f"-p{t}" for p in gateway_pids(pid) for t in os.listdir(f"/proc/{p}/task")]
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(out), *tids],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    try:
        work()
        time.sleep(0.5)
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=60)
    return sum(1 for line in out.read_text().splitlines() if "sync(" in line and "resumed" not in line)


def count(seaweed: SeaweedServer, code: Path, puts: int, work_dir: Path) -> tuple[float, float]:
    gw = GatewayProcess(seaweed, work_dir / "gw", env={**ENV, "PYTHONPATH": str(code)}).start(timeout=120)
    try:
        assert gw.proc is not None
        s3, bucket, body = gw.client(), f"fsyncs-{os.getpid()}-{code.name or 'x'}".lower()[:60], os.urandom(4096)
        s3.create_bucket(Bucket=bucket)
        for i in range(10):
            s3.put_object(Bucket=bucket, Key=f"warm/{i}", Body=body)
        gw.flush(bucket, "")
        seaweed.pause()
        try:
            acks = traced(gw.proc.pid, work_dir / "acks.txt",
                          lambda: [s3.put_object(Bucket=bucket, Key=f"a/{i}", Body=body) for i in range(puts)])
        finally:
            seaweed.resume()
        gw.flush(bucket, "")

        def put_and_destage() -> None:
            for i in range(puts):
                s3.put_object(Bucket=bucket, Key=f"d/{i}", Body=body)
            gw.flush(bucket, "")

        return acks / puts, traced(gw.proc.pid, work_dir / "all.txt", put_and_destage) / puts
    finally:
        gw.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", nargs="*", type=Path, default=[Path(__file__).resolve().parent.parent])
    parser.add_argument("--puts", type=int, default=100)
    args = parser.parse_args()
    with SeaweedServer() as seaweed:
        for code in args.checkouts:
            with tempfile.TemporaryDirectory(prefix="ferry-fsyncs-") as tmp:
                acks, both = count(seaweed, code.resolve(), args.puts, Path(tmp))
            print(f"{code}: fsyncs per 4 KiB PUT: acknowledgement {acks:.2f}, with its destage {both:.2f}", flush=True)


if __name__ == "__main__":
    main()
