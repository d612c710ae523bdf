"""Bounds before authentication, through a real ``ferry serve``: header size and count, idle and
busy connections past the cap, and /healthz while one client streams a huge header.

Before app/server/headers.py bounded them, one connection streaming a 150 MB header moved /healthz
from 1.6 ms to 9.8 s and memory from 170 to 437 MB, and 20,000 idle connections used every file
descriptor (issue 15).
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import GatewayProcess
from tests.support.reliability import Tally

pytestmark = pytest.mark.reliability

CAP = 40  # FERRY_HTTP_LIMIT_CONCURRENCY for this module's gateway


@pytest.fixture(scope="module")
def gw(seaweed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    env = {"FERRY_HTTP_LIMIT_CONCURRENCY": str(CAP), "FERRY_HTTP_HEADER_TIMEOUT": "3",
           "FERRY_BODY_MIN_RATE": "1024", "FERRY_BODY_MIN_RATE_WINDOW": "2"}
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("edge-conn"), env=env) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def tally() -> Iterator[Tally]:
    t = Tally("edge_connections", "bounds before authentication")
    yield t
    t.write()


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def read_answer(sock: socket.socket, timeout: float = 10, data: bytes = b"",
                strict_close: bool = False) -> tuple[int, dict[str, str], bytes, bool]:
    """(status, headers, body, closed after it) of one HTTP answer on ``sock`` (``data``: its
    first bytes, already received). ``strict_close``: silence until the timeout is not a close."""
    sock.settimeout(timeout)
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed without an answer: {data[:200]!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    try:
        closed = sock.recv(1) == b""
    except TimeoutError:
        closed = not strict_close
    except ConnectionResetError:
        closed = True
    return int(status_line.split()[1]), headers, body, closed


def stream_header(port: int, total: int, result: dict[str, Any]) -> None:
    """Send one header value of ``total`` bytes in 64 KiB pieces until the server stops us."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sent = 0
    try:
        sock.sendall(b"GET /b/k HTTP/1.1\r\nHost: x\r\nX-Huge: ")
        piece = b"a" * 65536
        while sent < total:
            sock.sendall(piece)
            sent += len(piece)
    except OSError:
        pass
    result["sent"] = sent
    try:
        result["answer"] = read_answer(sock)
    except (OSError, AssertionError) as exc:
        result["answer"] = exc
    sock.close()


def test_a_huge_header_is_refused_early_and_healthz_stays_fast(gw: GatewayProcess, tally: Tally) -> None:
    pid = gw.proc.pid  # type: ignore[union-attr]
    before = rss(pid)
    result: dict[str, Any] = {}
    streamer = threading.Thread(target=stream_header, args=(gw.port, 300 * 1024 * 1024, result))
    streamer.start()
    latencies = []
    with httpx.Client(base_url=gw.endpoint, timeout=10) as client:
        while (streamer.is_alive() and len(latencies) < 200) or len(latencies) < 20:
            started = time.perf_counter()
            assert client.get("/healthz").status_code == 200
            latencies.append(time.perf_counter() - started)
    streamer.join(30)
    assert not streamer.is_alive()
    answer = result["answer"]
    tally.op(expected=not isinstance(answer, Exception) and answer[0] == 400,
             what=f"300 MB header -> {answer!r:.200}")
    assert not isinstance(answer, Exception), answer
    status, headers, body, closed = answer
    assert status == 400 and b"<Code>RequestHeaderSectionTooLarge</Code>" in body, (status, body)
    assert headers["content-type"] == "application/xml" and closed
    assert result["sent"] < 8 * 1024 * 1024, result["sent"]  # cut off long before 300 MB
    grew = rss(pid) - before
    print(f"huge header: refused after {result['sent']} bytes sent; /healthz median "
          f"{statistics.median(latencies) * 1000:.1f} ms over {len(latencies)}; RSS +{grew / 2**20:.1f} MiB")
    assert grew < 64 * 1024 * 1024, grew


@pytest.mark.parametrize("count", [300, 10_000])
def test_too_many_headers(gw: GatewayProcess, tally: Tally, count: int) -> None:
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        head = b"GET /b/k HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(count)) + b"\r\n"
        with contextlib.suppress(OSError):
            sock.sendall(head)
        status, _, body, closed = read_answer(sock)
    tally.op(expected=status == 400, what=f"{count} headers -> {status}")
    assert status == 400 and b"RequestHeaderSectionTooLarge" in body and closed


def test_malformed_request_gets_xml(gw: GatewayProcess, tally: Tally) -> None:
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(b"GET /b/k HTTP/1.1\r\nHost x\r\n\r\n")  # no colon
        status, headers, body, closed = read_answer(sock)
    tally.op(expected=status == 400, what=f"malformed header line -> {status}")
    assert status == 400 and headers["content-type"] == "application/xml" and b"<Error>" in body and closed


def test_idle_connections_past_the_cap_never_starve_clients(gw: GatewayProcess, tally: Tally) -> None:
    """5x the cap of connections that never send a byte: the gateway keeps at most the cap open
    (idle ones are closed to make room), real requests go through, descriptors stay bounded."""
    pid = gw.proc.pid  # type: ignore[union-attr]
    base = fds(pid)
    idle = []
    try:
        for _ in range(CAP * 5):
            idle.append(socket.create_connection(("127.0.0.1", gw.port), timeout=10))
        time.sleep(0.5)
        peak = fds(pid)
        started = time.monotonic()
        listing = gw.client().list_buckets()
        took = time.monotonic() - started
        tally.op(expected=listing["ResponseMetadata"]["HTTPStatusCode"] == 200,
                 what=f"ListBuckets with {CAP * 5} idle connections open")
        print(f"{CAP * 5} idle connections: gateway fds {base} -> {peak}; ListBuckets in {took * 1000:.1f} ms")
        assert took < 2.0
        assert peak - base <= CAP + 5, (base, peak)
    finally:
        for sock in idle:
            sock.close()


def test_busy_connections_past_the_cap_get_slowdown(gw: GatewayProcess, tally: Tally) -> None:
    """Connections each holding a request (a PUT whose body never comes) fill the cap: the next
    connection is answered 503 SlowDown (S3 XML, Retry-After) at once, not accepted and starved."""
    busy = []
    try:
        for i in range(CAP):
            sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            sock.sendall(b"PUT /b/k%d HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" % i)
            busy.append(sock)
        time.sleep(0.5)
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, body, closed = read_answer(extra)
        took = time.monotonic() - started
    finally:
        for sock in busy:
            sock.close()
    tally.op(expected=status == 503, what=f"connection past the cap -> {status}")
    print(f"past the cap: {status} in {took * 1000:.1f} ms")
    assert status == 503 and b"<Code>SlowDown</Code>" in body and headers.get("retry-after") and closed
    assert took < 1.0
    time.sleep(0.5)
    assert httpx.get(f"{gw.endpoint}/healthz", timeout=10).status_code == 200


def test_slow_loris_headers_and_idle_keep_alive_close(gw: GatewayProcess, tally: Tally) -> None:
    """A header byte a second is cut off by the header timeout (3 s here); so is a connection that
    never sends anything."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as slow, \
            socket.create_connection(("127.0.0.1", gw.port), timeout=10) as silent:
        started = time.monotonic()
        slow.sendall(b"GET /b/k HTTP/1.1\r\n")
        closed = False
        while time.monotonic() - started < 10 and not closed:
            try:
                slow.sendall(b"X: 1\r\n")
                slow.settimeout(1)
                closed = slow.recv(1) == b""
            except TimeoutError:
                pass
            except OSError:
                closed = True
        took = time.monotonic() - started
        silent.settimeout(10)
        silent_closed = silent.recv(1) == b""
    tally.op(expected=closed and took < 6, what=f"slow-loris headers closed after {took:.1f} s")
    tally.op(expected=silent_closed, what="silent connection closed")
    assert closed and took < 6 and silent_closed


def test_slow_loris_body_gets_request_timeout_and_nothing_is_stored(gw: GatewayProcess, tally: Tally) -> None:
    """A PUT body trickled at ~40 bytes/s (well under 1 KiB/s over the 2 s window configured here)
    is cut off with S3's 400 RequestTimeout and the connection closed, long before the 20 s idle
    timeout would; the key does not exist afterwards. A PUT at full speed still works."""
    client = gw.client(signature_version="s3v4")
    bucket = f"slow-body-{os.getpid()}"
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="fast", Body=b"f" * 200_000)
    url = httpx.URL(client.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "slow"},
                                                  ExpiresIn=300))
    target = url.raw_path.decode()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(f"PUT {target} HTTP/1.1\r\nHost: {url.netloc.decode()}\r\n"
                     f"Content-Length: 100000\r\n\r\n".encode())
        started = time.monotonic()
        sock.settimeout(0.25)
        answer = b""
        while time.monotonic() - started < 15 and b"\r\n\r\n" not in answer:
            with contextlib.suppress(OSError):
                sock.sendall(b"x" * 10)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
        took = time.monotonic() - started
        status, _, body, closed = read_answer(sock, 5, answer, strict_close=True)
    print(f"slow body: {status} after {took:.1f} s, closed={closed}: {body[:120]!r}")
    stored = True
    try:
        client.head_object(Bucket=bucket, Key="slow")
    except ClientError as err:
        stored = err.response["ResponseMetadata"]["HTTPStatusCode"] != 404
    ok = status == 400 and b"<Code>RequestTimeout</Code>" in body and closed and took < 8 and not stored
    tally.op(expected=ok, what=f"slow-loris body: {status} after {took:.1f} s, closed={closed}, stored={stored}")
    assert status == 400 and b"<Code>RequestTimeout</Code>" in body, (status, body)
    assert closed and took < 8, (closed, took)
    assert not stored
    assert client.get_object(Bucket=bucket, Key="fast")["Body"].read() == b"f" * 200_000

