"""Warm single-stream read of one cached object: Ferry with zero-copy, Ferry without, nginx sendfile.

    .venv/bin/python -m bench.zerocopy_read --size-mib 1024 --runs 5

Starts a SeaweedFS remote, two gateways (FERRY_ZERO_COPY=true / false, one worker each) and an
nginx serving the same bytes from a file with ``sendfile on``; reads the object over one keep-alive
urllib3 connection (``readinto`` a reused buffer, so the client copies as little as it can), the
contenders interleaved run by run; prints MB/s medians. Then the 4 KiB warm GET latency (p50 of
sequential GETs on one connection) of both gateways.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import urllib3

from bench.proc_cpu import snapshot
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess, free_port
from tests.support.seaweed import SeaweedServer

NGINX_CONF = """{user}daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"""


def read_mbps(pool: urllib3.PoolManager, url: str, size: int, buf: bytearray) -> float:
    view = memoryview(buf)
    started = time.perf_counter()
    resp = pool.request("GET", url, preload_content=False)
    got = 0
    while n := resp.readinto(view):
        got += n
    resp.release_conn()
    elapsed = time.perf_counter() - started
    assert resp.status == 200 and got == size, (resp.status, got)
    return size / elapsed / 1e6


def curl_mbps(url: str, size: int) -> float:
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download} %{size_download}", url],
                         check=True, capture_output=True, text=True).stdout.split()
    assert int(out[1]) == size, out
    return float(out[0]) / 1e6


def cpu_seconds(pid: int) -> float:
    """CPU of a process and its descendants (nginx's worker), from /proc (``bench.proc_cpu``)."""
    return sum(snapshot([pid]).values())


def p50_us(pool: urllib3.PoolManager, url: str, n: int) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        resp = pool.request("GET", url)
        times.append(time.perf_counter() - started)
        assert resp.status == 200 and len(resp.data) == 4096
    return statistics.median(times) * 1e6


def presign(gw: GatewayProcess, bucket: str, key: str) -> str:
    client = gw.client(signature_version="s3v4")
    return str(client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=7200))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--small-requests", type=int, default=3000)
    args = parser.parse_args()
    size = args.size_mib * 1024 * 1024
    work = Path(tempfile.mkdtemp(prefix="ferry-zc-bench-"))
    started: list[Any] = []
    nginx: subprocess.Popen[bytes] | None = None
    try:
        remote = SeaweedServer().start()
        started.append(remote)
        client = remote.client()
        client.create_bucket(Bucket="bench")
        payload = work / "www" / "big.bin"
        payload.parent.mkdir()
        with open(payload, "wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(1024 * 1024))
        client.upload_file(str(payload), "bench", "big.bin")
        client.put_object(Bucket="bench", Key="small.bin", Body=os.urandom(4096))
        gws = {}
        for name, flag in (("ferry zero-copy", "true"), ("ferry body iterator", "false")):
            gw = GatewayProcess(remote, work / name.replace(" ", "-"), env={"FERRY_ZERO_COPY": flag}).start()
            started.append(gw)
            gws[name] = gw
        port = free_port()
        (work / "nginx").mkdir()
        conf = work / "nginx" / "nginx.conf"
        conf.write_text(NGINX_CONF.format(user="user root;\n" if os.geteuid() == 0 else "", dir=work / "nginx",
                                          port=port, root=payload.parent))
        nginx = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-p", str(work / "nginx"), "-c", str(conf)],
                                 start_new_session=True)
        time.sleep(0.5)
        urls = {name: presign(gw, "bench", "big.bin") for name, gw in gws.items()}
        urls["nginx sendfile"] = f"http://127.0.0.1:{port}/big.bin"
        pool = urllib3.PoolManager(maxsize=1, retries=False, timeout=urllib3.Timeout(connect=10, read=600))
        buf = bytearray(4 * 1024 * 1024)
        for url in urls.values():  # fill the caches, then warm the page cache
            for _ in range(2):
                read_mbps(pool, url, size, buf)
        pids = {name: gw.proc.pid for name, gw in gws.items() if gw.proc is not None}
        pids["nginx sendfile"] = nginx.pid
        for client_name, reader in (("urllib3 readinto", lambda u: read_mbps(pool, u, size, buf)),
                                    ("curl -o /dev/null", lambda u: curl_mbps(u, size))):
            results: dict[str, list[float]] = {name: [] for name in urls}
            cpu: dict[str, float] = dict.fromkeys(urls, 0.0)
            for _ in range(args.runs):
                for name, url in urls.items():
                    before = cpu_seconds(pids[name])
                    results[name].append(reader(url))
                    cpu[name] += cpu_seconds(pids[name]) - before
            print(f"warm single-stream GET of {args.size_mib} MiB, {client_name}, {args.runs} runs (MB/s):")
            nginx_median = statistics.median(results["nginx sendfile"])
            for name, values in results.items():
                med = statistics.median(values)
                per_gib = cpu[name] / (args.runs * size / 1024**3) * 1000
                print(f"  {name:22s} median {med:8.0f}  ({med / nginx_median:.2f}x nginx)  server CPU {per_gib:6.0f} ms/GiB"
                      "  runs " + " ".join(f"{v:.0f}" for v in values))
        for name, gw in gws.items():
            text = urllib3.PoolManager().request("GET", f"{gw.endpoint}/metrics",
                                                 headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).data.decode()
            line = [x for x in text.splitlines() if x.startswith("ferry_http_zerocopy_bytes_total")]
            print(f"  {name}: {line[0] if line else 'ferry_http_zerocopy_bytes_total absent'}")
        print(f"4 KiB warm GET, {args.small_requests} sequential requests on one connection, p50 (us):")
        small = {name: presign(gw, "bench", "small.bin") for name, gw in gws.items()}
        for url in small.values():
            p50_us(pool, url, 200)
        lat: dict[str, list[float]] = {name: [] for name in small}
        for _ in range(3):
            for name, url in small.items():
                lat[name].append(p50_us(pool, url, args.small_requests))
        for name, values in lat.items():
            print(f"  {name:22s} p50 {statistics.median(values):7.0f}  runs " + " ".join(f"{v:.0f}" for v in values))
    finally:
        if nginx is not None:
            os.killpg(nginx.pid, signal.SIGTERM)
            nginx.wait(10)
        for thing in reversed(started):
            (thing.stop if isinstance(thing, GatewayProcess) else thing.close)()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
