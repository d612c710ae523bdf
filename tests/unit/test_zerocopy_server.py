"""app/server/zerocopy.py in-process: uvicorn with the protocol, a small ASGI app, raw HTTP clients.

Run on both event loops uvicorn may pick (uvloop by default, asyncio without it).
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from app.server import http_protocol
from app.server.zerocopy import EXTENSION, ZeroCopyHttpToolsProtocol

MiB = 1024 * 1024
DATA = os.urandom(12 * MiB + 321)


class Server:
    """uvicorn in a thread on a free port, serving ``app`` below."""

    def __init__(self, loop: str, path: Path) -> None:
        self.path = path
        self.calls: list[str] = []  # "done" or the exception each request's app raised
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, http=http_protocol(True), loop=loop,
                                lifespan="off", interface="asgi3", log_level="critical")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    async def app(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        """``/?offset=&count=&length=&parts=&prefix=`` - the file's bytes in ``parts`` messages, the first
        ``prefix`` of them as a plain body message (which the transport may still hold when the next comes)."""
        query = dict(p.split("=") for p in scope["query_string"].decode().split("&") if p)
        offset, count = int(query.get("offset", 0)), int(query.get("count", len(DATA)))
        parts = int(query.get("parts", 1))
        headers = [(b"x-zerocopy", str(EXTENSION in scope.get("extensions", {})).encode())]
        if "chunked" not in query:
            headers.append((b"content-length", query.get("length", str(count)).encode()))
        fd = os.open(self.path, os.O_RDONLY)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            prefix = int(query.get("prefix", 0))
            if prefix:
                await send({"type": "http.response.body", "body": DATA[offset:offset + prefix], "more_body": True})
                offset, count = offset + prefix, count - prefix
            step = -(-count // parts)
            for pos in range(offset, offset + count, step):
                n = min(step, offset + count - pos)
                await send({"type": EXTENSION, "file": fd, "offset": pos, "count": n, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            self.calls.append("done")
        except Exception as exc:
            self.calls.append(repr(exc))
            raise
        finally:
            os.close(fd)


@pytest.fixture(params=["uvloop", "asyncio"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    path = tmp_path / "data.bin"
    path.write_bytes(DATA)
    with Server(request.param, path) as srv:
        yield srv


def connect(srv: Server) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)


def test_segments_are_exact_and_the_connection_is_kept(server: Server) -> None:
    conn = connect(server)
    try:
        for query, expected in [("", DATA), ("offset=5&count=9000000&parts=3", DATA[5:9000005]),
                                ("offset=4194303&count=2", DATA[4194303:4194305])]:
            conn.request("GET", f"/?{query}")
            r = conn.getresponse()
            assert r.getheader("x-zerocopy") == "True"
            assert r.read() == expected, query
            name = conn.sock.getsockname()
        conn.request("GET", "/?chunked=1&offset=7&count=3000000&parts=2")
        r = conn.getresponse()
        assert r.getheader("transfer-encoding") == "chunked" and r.read() == DATA[7:3000007]
        conn.request("HEAD", "/")
        r = conn.getresponse()
        assert r.getheader("content-length") == str(len(DATA)) and r.read() == b""
        conn.request("GET", "/?offset=1&count=100")
        assert conn.getresponse().read() == DATA[1:101]
        assert conn.sock.getsockname() == name
    finally:
        conn.close()


def test_a_slow_reader_gets_every_byte(server: Server) -> None:
    """The socket fills up: sends wait for writability instead of buffering the file in memory, and
    the file's bytes wait for what the transport still buffers (the plain prefix)."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    sock.sendall(b"GET /?parts=2&prefix=8000000 HTTP/1.1\r\nHost: x\r\n\r\n")
    received = bytearray()
    time.sleep(0.3)  # the server meets a full socket
    while chunk := sock.recv(256 * 1024):
        received += chunk
        if len(received) >= len(DATA) and received.find(b"\r\n\r\n") + 4 + len(DATA) <= len(received):
            break
    sock.close()
    assert bytes(received).partition(b"\r\n\r\n")[2] == DATA


@pytest.mark.parametrize("query", ["count=1000&length=1001", "count=1000&length=999",
                                   f"offset={len(DATA) - 10}&count=20"])
def test_a_body_that_does_not_match_its_length_drops_the_connection(server: Server, query: str) -> None:
    conn = connect(server)
    try:
        conn.request("GET", f"/?{query}")
        r = conn.getresponse()
        with pytest.raises(http.client.IncompleteRead):
            r.read()
    finally:
        conn.close()
    assert server.calls and server.calls[-1] != "done"


def test_a_client_leaving_mid_body_leaves_the_server_serving(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    lost: list[int] = []
    original = ZeroCopyHttpToolsProtocol._lost

    def counted(self: ZeroCopyHttpToolsProtocol, cycle: Any) -> None:
        lost.append(1)
        original(self, cycle)

    monkeypatch.setattr(ZeroCopyHttpToolsProtocol, "_lost", counted)
    fds = len(os.listdir("/proc/self/fd"))
    for linger in (False, True):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        sock.sendall(b"GET /?parts=4 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(64 * 1024)
        if linger:  # RST instead of FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()
    deadline = time.monotonic() + 10
    while len(server.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.calls == ["done", "done"]  # as uvicorn does: sends after a disconnect are no-ops
    assert len(lost) == 2  # each noticed mid-body by the zero-copy sender
    conn = connect(server)
    try:
        conn.request("GET", "/")
        assert conn.getresponse().read() == DATA
    finally:
        conn.close()
    while len(os.listdir("/proc/self/fd")) > fds and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(os.listdir("/proc/self/fd")) <= fds
