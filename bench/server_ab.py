"""uvicorn (httptools, as Ferry serves) against granian, on the same minimal ASGI app: what the HTTP
server itself costs a 4 KiB GET and a 4 KiB PUT (issue 29's server A/B).

    .venv/bin/pip install granian && .venv/bin/python -m bench.server_ab --requests 3000 --runs 5

The app is bench/asgi_ceiling.py's (every GET answers one 4 KiB file; here a PUT reads its body
and answers 200), so the figures are each server's floor under any app: latency p50 of sequential
requests from one urllib3 client, and the server process's CPU per request (utime + stime of its
process tree, /proc). Servers alternate run by run; one worker process each, access log off.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import urllib3

from bench.proc_cpu import CpuMeter


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command(server: str, port: int) -> list[str]:
    venv = Path(sys.executable).parent
    if server == "uvicorn":
        return [str(venv / "uvicorn"), "bench.asgi_ceiling:app", "--http", "httptools", "--port", str(port),
                "--no-access-log", "--no-server-header", "--log-level", "warning"]
    return [str(venv / "granian"), "--interface", "asgi", "--port", str(port), "--workers", "1",
            "--no-access-log", "--log-level", "warning", "bench.asgi_ceiling:app"]


def _wait(port: int) -> None:
    for _ in range(200):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def one_run(server: str, requests: int, env: dict[str, str]) -> dict[str, float]:
    port = _free_port()
    proc = subprocess.Popen(_command(server, port), env=env, cwd=Path(__file__).resolve().parent.parent)
    try:
        _wait(port)
        http = urllib3.PoolManager(maxsize=1)
        url = f"http://127.0.0.1:{port}/b/k"
        body = os.urandom(4096)
        for _ in range(200):  # warm-up
            http.request("GET", url)
        row: dict[str, float] = {}
        for method in ("GET", "PUT"):
            lat = []
            meter = CpuMeter([proc.pid])
            for _ in range(requests):
                t0 = time.perf_counter()
                resp = http.request(method, url, body=body if method == "PUT" else None)
                lat.append(time.perf_counter() - t0)
                assert resp.status == 200, resp.status
            row[f"{method} p50 ms"] = statistics.median(lat) * 1e3
            row[f"{method} CPU us"] = (meter.seconds() or 0.0) / requests * 1e6
        return row
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("granian", path=str(Path(sys.executable).parent)) is None:
        raise SystemExit("granian is not installed in this virtualenv: pip install granian")
    work = Path(tempfile.mkdtemp(prefix="ferry-server-ab-"))
    try:
        (work / "4k").write_bytes(os.urandom(4096))
        env = dict(os.environ, FERRY_CEILING_FILE=str(work / "4k"))
        rows: dict[str, list[dict[str, float]]] = {"uvicorn": [], "granian": []}
        for run in range(args.runs):
            for server in (("uvicorn", "granian") if run % 2 == 0 else ("granian", "uvicorn")):
                rows[server].append(one_run(server, args.requests, env))
                print(f"run {run} {server}: {rows[server][-1]}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    names = list(rows["uvicorn"][0])
    print(f"\nmedians of {args.runs} runs, {args.requests} sequential requests each\n")
    print("| server | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for server, runs in rows.items():
        print(f"| {server} | " + " | ".join(f"{statistics.median(r[n] for r in runs):.3g}" for n in names) + " |")


if __name__ == "__main__":
    main()
