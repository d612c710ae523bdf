"""Cache hits sent by the kernel: uvicorn + app/server/zerocopy.py's ``http.response.zerocopysend``.

A real gateway (``ferry serve``) in front of SeaweedFS through the counting proxy; the
``ferry_http_zerocopy_bytes_total`` counter proves which path served a response.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_read_cache import BLOCK, MiB, cache_env, put_remote
from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess

SIZE = 40 * MiB


@pytest.fixture(scope="module")
def zgw(proxy: CountingProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(proxy, tmp_path_factory.mktemp("zerocopy-gw"), env=cache_env()) as gw:
        yield gw


@pytest.fixture(scope="module")
def zbucket(seaweed: Any) -> Iterator[str]:
    name = f"zc-{uuid.uuid4().hex[:12]}"
    client = seaweed.client()
    client.create_bucket(Bucket=name)
    yield name
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
        for item in page.get("Contents", []):
            client.delete_object(Bucket=name, Key=item["Key"])
    client.delete_bucket(Bucket=name)


@pytest.fixture(scope="module")
def big(zgw: GatewayProcess, zbucket: str, seaweed: Any) -> tuple[str, bytes]:
    """A 40 MiB object (10 cache blocks) in the remote, read once through the gateway to cache it."""
    data = os.urandom(SIZE)
    put_remote(seaweed.client(), zbucket, "big.bin", data)
    assert get(zgw, zbucket, "big.bin") == data
    wait_cached(zgw, zbucket, "big.bin")
    return "big.bin", data


def metric(gw: GatewayProcess, name: str, labels: str = "") -> float:
    """Sum of a metric's samples (matching ``labels``, a substring of the label set)."""
    ctx = gw.tls.client_context() if gw.tls else None
    req = urllib.request.Request(f"{gw.endpoint}/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        text = r.read().decode()
    total = 0.0
    for match in re.finditer(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, re.MULTILINE):
        if labels in (match.group(1) or ""):
            total += float(match.group(2))
    return total


def zerocopy_bytes(gw: GatewayProcess) -> float:
    return metric(gw, "ferry_http_zerocopy_bytes_total")


def get(gw: GatewayProcess, bucket: str, key: str, **kwargs: Any) -> bytes:
    client = gw.client()
    try:
        return bytes(client.get_object(Bucket=bucket, Key=key, **kwargs)["Body"].read())
    finally:
        client.close()


def wait_cached(gw: GatewayProcess, bucket: str, key: str, timeout: float = 10.0) -> None:
    """Until a GET of the whole object goes zero-copy (its blocks are all local)."""
    deadline = time.monotonic() + timeout
    while True:
        before = zerocopy_bytes(gw)
        get(gw, bucket, key)
        if zerocopy_bytes(gw) > before:
            return
        assert time.monotonic() < deadline, "the object never became a full local hit"
        time.sleep(0.2)


def presigned(gw: GatewayProcess, bucket: str, key: str, method: str = "get_object") -> str:
    client = gw.client(signature_version="s3v4")  # (botocore presigns SigV2 by default)
    try:
        return str(client.generate_presigned_url(method, Params={"Bucket": bucket, "Key": key}, ExpiresIn=600))
    finally:
        client.close()


def test_cached_object_and_ranges_across_blocks_are_byte_exact_and_zero_copy(
        zgw: GatewayProcess, proxy: CountingProxy, zbucket: str, big: tuple[str, bytes]) -> None:
    key, data = big
    proxy.reset()
    before = zerocopy_bytes(zgw)
    assert get(zgw, zbucket, key) == data
    assert zerocopy_bytes(zgw) - before == SIZE
    ranges = [
        (BLOCK - 100_000, BLOCK + 100_000),  # straddles the first block boundary
        (3 * MiB, 13 * MiB - 1),  # four blocks, neither end aligned
        (BLOCK, 2 * BLOCK - 1),  # exactly one block
        (0, 70_000),  # just above the zero-copy threshold
        (SIZE - 5_000_000, SIZE - 1),  # the tail
    ]
    expected_zero_copy = 0
    for first, last in ranges:
        assert get(zgw, zbucket, key, Range=f"bytes={first}-{last}") == data[first:last + 1], (first, last)
        expected_zero_copy += last - first + 1
    assert get(zgw, zbucket, key, Range="bytes=-5000000") == data[-5_000_000:]
    expected_zero_copy += 5_000_000
    assert get(zgw, zbucket, key, Range=f"bytes={BLOCK - 1000}-{BLOCK + 1000}") == data[BLOCK - 1000:BLOCK + 1001]  # small: plain
    assert zerocopy_bytes(zgw) - before == SIZE + expected_zero_copy
    assert not proxy.gets(key), "all of these were local hits"


def test_keep_alive_after_zero_copy_responses_and_head(zgw: GatewayProcess, zbucket: str, seaweed: Any,
                                                       big: tuple[str, bytes]) -> None:
    key, data = big
    put_remote(seaweed.client(), zbucket, "small.bin", b"s" * 4096)
    get(zgw, zbucket, "small.bin")
    host = urllib.parse.urlsplit(zgw.endpoint)
    conn = http.client.HTTPConnection(host.hostname or "127.0.0.1", host.port, timeout=30)
    try:
        def request(method: str, url: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
            conn.request(method, url[len(zgw.endpoint):], headers=headers or {})
            return conn.getresponse()

        big_url = presigned(zgw, zbucket, key)
        head_url = presigned(zgw, zbucket, key, "head_object")
        small_url = presigned(zgw, zbucket, "small.bin")
        r = request("GET", big_url)
        assert r.status == 200 and r.read() == data
        sockname = conn.sock.getsockname()
        before = zerocopy_bytes(zgw)
        r = request("HEAD", head_url)
        assert r.status == 200 and r.getheader("Content-Length") == str(SIZE) and r.read() == b""
        r = request("GET", small_url)
        assert r.status == 200 and r.read() == b"s" * 4096
        r = request("GET", big_url, {"Range": f"bytes={BLOCK - 7}-{3 * BLOCK + 7}"})
        assert r.status == 206 and r.read() == data[BLOCK - 7:3 * BLOCK + 8]
        r = request("GET", big_url)
        assert r.status == 200 and r.read() == data
        assert conn.sock is not None and conn.sock.getsockname() == sockname, "the connection was not kept"
        assert zerocopy_bytes(zgw) - before == SIZE + 2 * BLOCK + 15  # HEAD and the small GET added nothing
    finally:
        conn.close()


def _served_socket_inodes(pid: int, port: int) -> set[str]:
    """Inodes of the process's TCP sockets on the gateway's own port (its clients' connections,
    and their dups), from /proc/PID/net/tcp{,6}: local address is field 1, inode field 9."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] != "0A":  # not the listener
                    inodes.add(fields[9])
    return inodes


def open_fds(gw: GatewayProcess) -> list[str]:
    """The descriptors a served read may leak: block and fill files of the cache, and sockets of
    client connections (or their dups). The remote's pooled connections and the catalog's files
    come and go with background work and are not counted."""
    assert gw.proc is not None and gw.data_dir is not None
    pid, cache = gw.proc.pid, str((gw.data_dir / "cache").resolve())
    served = _served_socket_inodes(pid, gw.port)
    held: list[str] = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue  # closed meanwhile
        if target.startswith((cache + "/blocks", cache + "/tmp")) or (
                target.startswith("socket:[") and target[8:-1] in served):
            held.append(target)
    return held


def wait_released(gw: GatewayProcess, before: list[str], what: str) -> None:
    """The server notices closed connections as it next writes or reads: give it 10 s."""
    deadline = time.monotonic() + 10
    while len(open_fds(gw)) > len(before) and time.monotonic() < deadline:
        time.sleep(0.1)
    after = open_fds(gw)
    assert len(after) <= len(before), f"{what} leaked: {sorted(set(after) - set(before))}"


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_client_leaving_mid_body_does_not_break_the_server(zgw: GatewayProcess, zbucket: str,
                                                            big: tuple[str, bytes], how: str) -> None:
    key, data = big
    host = urllib.parse.urlsplit(zgw.endpoint)
    path = presigned(zgw, zbucket, key)[len(zgw.endpoint):]
    get(zgw, zbucket, key)
    fds_before = open_fds(zgw)
    for _ in range(3):
        sock = socket.create_connection((host.hostname or "127.0.0.1", host.port or 80))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host.netloc}\r\n\r\n".encode())
        received = 0
        while received < 3 * MiB:  # well into the second block
            chunk = sock.recv(1024 * 1024)
            assert chunk
            received += len(chunk)
        assert len(open_fds(zgw)) > len(fds_before), "the count sees the served connection"
        if how == "reset":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()
    assert get(zgw, zbucket, key) == data
    wait_released(zgw, fds_before, "block files, socket dups or sockets")
    assert "Traceback" not in zgw.log_tail(20000)


def test_tls_gateway_serves_hits_without_zero_copy(gateway_tls: GatewayProcess, seaweed_bucket: str,
                                                   seaweed: Any) -> None:
    assert gateway_tls.endpoint.startswith("https://")
    data = os.urandom(6 * MiB + 123)
    put_remote(seaweed.client(), seaweed_bucket, "tls.bin", data)
    assert get(gateway_tls, seaweed_bucket, "tls.bin") == data  # a miss fills the cache
    hits = metric(gateway_tls, "ferry_cache_requests_total", 'outcome="hit"')
    for _ in range(2):
        assert get(gateway_tls, seaweed_bucket, "tls.bin") == data
        assert get(gateway_tls, seaweed_bucket, "tls.bin", Range="bytes=1000-5000000") == data[1000:5000001]
    assert metric(gateway_tls, "ferry_cache_requests_total", 'outcome="hit"') > hits
    assert zerocopy_bytes(gateway_tls) == 0


def test_a_miss_is_sent_zero_copy_from_the_filling_blocks(zgw: GatewayProcess, proxy: CountingProxy,
                                                          zbucket: str, seaweed: Any) -> None:
    """A cold read follows its blocks as they fill and hands the landed ranges to the kernel: the
    client gets exact bytes, and every byte counts as zero-copy (none went through Python)."""
    data = os.urandom(2 * BLOCK + 777_777)
    put_remote(seaweed.client(), zbucket, "cold.bin", data)
    put_remote(seaweed.client(), zbucket, "cold-range.bin", data)
    proxy.reset()
    before = zerocopy_bytes(zgw)
    assert get(zgw, zbucket, "cold.bin") == data
    assert zerocopy_bytes(zgw) - before == len(data)
    first, last = BLOCK - 300_000, 2 * BLOCK + 300_000  # pieces above the inline-read size
    before = zerocopy_bytes(zgw)
    assert get(zgw, zbucket, "cold-range.bin", Range=f"bytes={first}-{last}") == data[first:last + 1]
    assert zerocopy_bytes(zgw) - before == last - first + 1
    assert len(proxy.gets("cold.bin")) >= 1 and len(proxy.gets("cold-range.bin")) >= 1  # both were misses
    assert get(zgw, zbucket, "cold.bin") == data  # and now a hit


def test_a_client_leaving_a_zero_copy_miss_leaks_nothing(zgw: GatewayProcess, zbucket: str, seaweed: Any) -> None:
    data = os.urandom(3 * BLOCK)
    put_remote(seaweed.client(), zbucket, "left.bin", data)
    host = urllib.parse.urlsplit(zgw.endpoint)
    path = presigned(zgw, zbucket, "left.bin")[len(zgw.endpoint):]
    fds_before = open_fds(zgw)
    sock = socket.create_connection((host.hostname or "127.0.0.1", host.port or 80))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host.netloc}\r\n\r\n".encode())
    received = 0
    while received < 2 * MiB:
        chunk = sock.recv(1024 * 1024)
        assert chunk
        received += len(chunk)
    assert len(open_fds(zgw)) > len(fds_before), "the count sees the served connection"
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
    assert get(zgw, zbucket, "left.bin") == data  # the fills outlived the reader that left
    wait_released(zgw, fds_before, "fill descriptors, socket dups or sockets")
    assert "Traceback" not in zgw.log_tail(20000)


def test_a_zero_copy_hit_longer_than_its_eager_opens_survives_an_overwrite_mid_body(
        zgw: GatewayProcess, zbucket: str, seaweed: Any) -> None:
    """A full hit of more blocks than are opened before the answer starts (``EAGER_OPEN``, 16):
    the object is overwritten mid-body, which retires its blocks, and the later ones are still
    opened from there, so the reader gets the old version whole and zero-copy, never a cut body
    (issue 25: 6 of 13,114 multi-block GETs during overwrites lost their connection)."""
    blocks = 20
    key = "retired-mid-body.bin"
    data = os.urandom(blocks * BLOCK)
    put_remote(seaweed.client(), zbucket, key, data)
    assert get(zgw, zbucket, key) == data
    wait_cached(zgw, zbucket, key)
    retired = zgw.data_dir / "cache" / "retired"

    def retired_files() -> int:
        return len(os.listdir(retired)) if retired.exists() else 0

    already = retired_files()
    sent_before = zerocopy_bytes(zgw)
    host = urllib.parse.urlsplit(zgw.endpoint)
    conn = http.client.HTTPConnection(host.hostname or "127.0.0.1", host.port or 80, timeout=60)
    conn.connect()
    assert conn.sock is not None
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    conn.request("GET", presigned(zgw, zbucket, key)[len(zgw.endpoint):])
    resp = conn.getresponse()
    assert resp.status == 200
    head = resp.read(3 * MiB)  # into the first blocks; the server waits on the socket
    client = zgw.client()
    try:
        client.put_object(Bucket=zbucket, Key=key, Body=b"the next version")
        deadline = time.monotonic() + 20
        while retired_files() < already + blocks and time.monotonic() < deadline:
            time.sleep(0.1)
        assert retired_files() >= already + blocks, "the overwrite never retired the old blocks"
        rest = resp.read()
        assert len(head) + len(rest) == len(data)
        assert head + rest == data, "the reader got the old version, whole"
        assert zerocopy_bytes(zgw) - sent_before >= len(data)
        assert get(zgw, zbucket, key) == b"the next version"
    finally:
        client.close()
        conn.close()
