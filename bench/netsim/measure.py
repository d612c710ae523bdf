"""Measure the running link: TCP connect time, download rate with N streams, the delay line's CPU.

    sudo .venv/bin/python -m bench.netsim measure --seconds 8 --streams 8

A sender in the remote namespace streams zeros to every connection (kernel to kernel, so the
numbers are the link's, not an S3 server's); the delay line's CPU comes from /proc/<pid>/stat.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import threading
import time

from bench.netsim.link import HOST_IF, NS_REMOTE, REMOTE_IP, S3_PORT, guard, load_state
from bench.netsim.system import NetsimError, alive, cpu_seconds

SINK_PORT = 9555
_SENDER = f"""
import socket, threading
srv = socket.create_server(("0.0.0.0", {SINK_PORT}), backlog=64)
buf = bytes(1 << 20)
def feed(c):
    try:
        while True:
            c.sendall(buf)
    except OSError:
        c.close()
while True:
    threading.Thread(target=feed, args=(srv.accept()[0],), daemon=True).start()
"""


def connect_ms(samples: int = 7) -> float:
    """Median TCP connect time to the remote S3 port (one SYN / SYN-ACK round trip)."""
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        with socket.create_connection((REMOTE_IP, S3_PORT), timeout=5):
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _receive(seconds: float, streams: int) -> int:
    total = [0] * streams
    stop = time.monotonic() + seconds

    def drain(i: int) -> None:
        buf = bytearray(1 << 20)
        with socket.create_connection((REMOTE_IP, SINK_PORT), timeout=10) as s:
            while time.monotonic() < stop and (n := s.recv_into(buf)):
                total[i] += n

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(total)


def _rx_bytes() -> int:
    with open(f"/sys/class/net/{HOST_IF}/statistics/rx_bytes") as f:
        return int(f.read())


def download(seconds: float = 8.0, streams: int = 8, warmup: float = 2.0) -> dict[str, float]:
    """Download rate at the host's interface (L2 bytes, as tbf counts them) over ``seconds`` after
    ``warmup`` (slow start left out), and the delay line's CPU over the same window."""
    state = load_state()
    if state is None:
        raise NetsimError("the link is down")
    guard(state.endpoint)
    sender = subprocess.Popen(["ip", "netns", "exec", NS_REMOTE, sys.executable, "-c", _SENDER],
                              stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        receiver = threading.Thread(target=_receive, args=(warmup + seconds + 0.5, streams))
        receiver.start()
        time.sleep(warmup)
        pid = state.delay_pid if alive(state.delay_pid, "delay_line-") else None
        b0, c0, t0 = _rx_bytes(), cpu_seconds(pid) if pid else 0.0, time.monotonic()
        time.sleep(seconds)
        b1, c1, t1 = _rx_bytes(), cpu_seconds(pid) if pid else 0.0, time.monotonic()
        receiver.join()
    finally:
        sender.kill()
        sender.wait()
    return {"mbit_s": round((b1 - b0) * 8 / (t1 - t0) / 1e6, 1),
            "delay_line_cpu_percent": round(100 * (c1 - c0) / (t1 - t0), 1)}
