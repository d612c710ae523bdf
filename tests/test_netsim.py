"""bench.netsim, measured: the emulated link gives the RTT and rate asked, carries S3, re-shapes in place,
and comes down leaving no namespace, interface, iptables rule, process or data behind.

Needs root and ``ip netns`` (it skips otherwise; CI runs as root). Takes ~20 s.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from bench import netsim
from bench.netsim import link

pytestmark = pytest.mark.skipif(not netsim.netns_available(),
                                reason="bench.netsim needs root and a working `ip netns` (network namespaces)")

MB = 1_000_000


def _connect_ms(samples: int = 7) -> float:
    """Median TCP connect time to the remote S3 port, in ms (one SYN/SYN-ACK: one RTT)."""
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        with socket.create_connection((link.REMOTE_IP, link.S3_PORT), timeout=5):
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _client(state: netsim.State):  # type: ignore[no-untyped-def]
    return boto3.client("s3", endpoint_url=state.endpoint, aws_access_key_id=link.ACCESS_KEY,
                        aws_secret_access_key=link.SECRET_KEY, region_name=link.REGION,
                        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))


def _download_mbit(s3, bucket: str, key: str) -> float:  # type: ignore[no-untyped-def]
    """Throughput of one GET, from the first body byte to the last (the request's RTT left out)."""
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    first = body.read(64 * 1024)
    t0, total = time.perf_counter(), len(first)
    while chunk := body.read(1024 * 1024):
        total += len(chunk)
    return total * 8 / (time.perf_counter() - t0) / 1e6


def _data_bytes() -> int:
    """What the remote's objects take on disk (SeaweedFS volumes)."""
    return sum(p.stat().st_size for p in (link.STATE_DIR / "data").rglob("*") if p.is_file())


def _leftovers() -> list[str]:
    """Anything of the link still on the machine."""
    found = sorted(set(link.namespaces()) & {link.NS_ROUTER, link.NS_REMOTE})
    found += [f"interface {link.HOST_IF}"] * Path(f"/sys/class/net/{link.HOST_IF}").exists()
    found += [f"address {line}" for line in subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True)
              .stdout.splitlines() if "10.213." in line]
    rules = subprocess.run(["iptables-legacy-save"], capture_output=True, text=True).stdout
    found += [f"rule {r}" for r in rules.splitlines() if "NFQUEUE" in r]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        cmd = netsim.system.cmdline(int(pid))
        if "delay_line-" in cmd or str(link.STATE_DIR / "data") in cmd:
            found.append(f"process {pid} {cmd[:80]}")
    found += [f"state dir {link.STATE_DIR}"] * link.STATE_DIR.exists()
    return found


@pytest.fixture
def free_link():  # type: ignore[no-untyped-def]
    if netsim.load_state() is not None or link.HOST_IF in os.listdir("/sys/class/net"):
        pytest.skip("a bench.netsim link is already up on this machine (someone else's run): not touching it")
    yield
    netsim.down()


def test_link_rtt_rate_s3_reshape_and_clean_teardown(free_link: None) -> None:
    state = netsim.up(netsim.Shape(rtt_ms=40, rate_mbit=100))
    netsim.guard(state.endpoint)
    cli = subprocess.run([sys.executable, "-m", "bench.netsim", "env"], capture_output=True, text=True, check=True)
    assert f"export NETSIM_S3_ENDPOINT={state.endpoint}" in cli.stdout.splitlines()
    assert f"export AWS_ACCESS_KEY_ID={link.ACCESS_KEY}" in cli.stdout.splitlines()
    assert subprocess.run([sys.executable, "-m", "bench.netsim", "status"], capture_output=True).returncode == 0
    rtt = _connect_ms()
    assert 30 <= rtt <= 50, f"TCP connect {rtt:.1f} ms on a 40 ms link"

    s3 = _client(state)
    bucket = f"netsim-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    small = os.urandom(4096)
    s3.put_object(Bucket=bucket, Key="small", Body=small)
    assert s3.get_object(Bucket=bucket, Key="small")["Body"].read() == small
    s3.put_object(Bucket=bucket, Key="big", Body=os.urandom(20 * MB))
    rate = _download_mbit(s3, bucket, "big")
    assert 70 <= rate <= 105, f"20 MB download at {rate:.1f} Mbit/s on a 100 Mbit/s link"

    # deleted objects give their space back once the bench asks for a vacuum (a full run needs it)
    held = _data_bytes()
    s3.delete_object(Bucket=bucket, Key="big")
    deadline = time.monotonic() + 30
    while _data_bytes() > held - 15 * MB and time.monotonic() < deadline:
        netsim.vacuum()  # the filer deletes chunks asynchronously: repeat until the volume has them
        time.sleep(0.5)
    assert _data_bytes() <= held - 15 * MB, f"{held} -> {_data_bytes()} bytes after deleting 20 MB and vacuuming"

    netsim.up(netsim.Shape(rtt_ms=120, rate_mbit=100))  # in place: same server, same objects
    rtt2 = _connect_ms(5)
    assert 90 <= rtt2 <= 150, f"TCP connect {rtt2:.1f} ms after re-shaping to 120 ms"
    assert s3.get_object(Bucket=bucket, Key="small")["Body"].read() == small

    netsim.down()
    assert _leftovers() == []
    with pytest.raises(netsim.NetsimError):
        netsim.guard(state.endpoint)  # the range is no longer ours: nothing may be sent there


def test_a_failed_first_up_leaves_nothing_behind(free_link: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_WEED", "/nonexistent/weed")  # fails after the namespaces and delay line exist
    with pytest.raises(netsim.NetsimError, match="FERRY_WEED"):
        netsim.up(netsim.Shape(rtt_ms=20, rate_mbit=50))
    assert _leftovers() == []
