"""The block reads' HTTP client (app/fleet/peer_http.py) against a real HTTP/1.1 server on
loopback: connections kept and reused, a kept one the server closed is asked again fresh, an
error answer drained, a body cut short seen as short."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from app.fleet.peer_http import PeerConnections

BODY = bytes(range(256)) * 1024  # 256 KiB


@pytest.fixture
def server() -> Iterator[dict[str, Any]]:
    state: dict[str, Any] = {"connections": 0, "requests": 0, "cut": None, "status": 206, "close": False}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            state["connections"] += 1

        def do_GET(self) -> None:
            state["requests"] += 1
            state["path"] = self.path
            state["range"] = self.headers.get("Range")
            body = BODY if state["status"] == 206 else b"not cached here\n"
            self.send_response(state["status"])
            self.send_header("Content-Length", str(len(body)))
            if state["close"]:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body[: state["cut"]] if state["cut"] is not None else body)
            self.wfile.flush()
            if state["cut"] is not None or state["close"]:
                self.close_connection = True

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    state["address"] = f"127.0.0.1:{httpd.server_address[1]}"
    state["httpd"] = httpd
    yield state
    httpd.shutdown()
    httpd.server_close()


def test_answers_are_read_whole_and_their_connection_kept(server: dict[str, Any]) -> None:
    pool = PeerConnections(2.0, 5.0)
    for _ in range(3):
        answer = pool.get(server["address"], "/_ferry/v1/block?bucket=b&key=k", {"Range": "bytes=0-262143"})
        assert answer.status == 206 and answer.headers["content-length"] == str(len(BODY))
        buffer = bytearray(len(BODY))
        view, got = memoryview(buffer), 0
        while (n := answer.readinto(view[got:])) > 0:
            got += n
        assert bytes(buffer) == BODY
        answer.close()
    assert server["requests"] == 3 and server["connections"] == 1
    assert server["path"] == "/_ferry/v1/block?bucket=b&key=k" and server["range"] == "bytes=0-262143"
    pool.clear()


def test_a_kept_connection_the_peer_closed_is_asked_again_fresh(server: dict[str, Any]) -> None:
    pool = PeerConnections(2.0, 5.0)
    assert pool.get(server["address"], "/x", {}).read() == BODY
    idle = pool._idle[server["address"]][0]
    idle.shutdown(2)  # as if the peer's keep-alive timeout had closed it
    assert pool.get(server["address"], "/x", {}).read() == BODY
    assert server["connections"] == 2
    pool.clear()


def test_an_error_answer_is_drained_and_connection_close_is_honoured(server: dict[str, Any]) -> None:
    pool = PeerConnections(2.0, 5.0)
    server["status"] = 503
    answer = pool.get(server["address"], "/x", {})
    assert answer.status == 503
    answer.drain()
    assert len(pool._idle[server["address"]]) == 1  # kept: read to its end
    server["status"], server["close"] = 206, True
    assert pool.get(server["address"], "/x", {}).read() == BODY
    assert len(pool._idle[server["address"]]) == 0  # the peer said close: not kept
    pool.clear()


def test_a_body_cut_short_reads_short_and_its_connection_is_dropped(server: dict[str, Any]) -> None:
    pool = PeerConnections(2.0, 5.0)
    server["cut"] = 1000
    answer = pool.get(server["address"], "/x", {})
    data = answer.read()
    assert data == BODY[:1000] and answer.left == len(BODY) - 1000
    assert answer.read1(10) == b""
    answer.close()
    assert not pool._idle.get(server["address"])


def test_a_peer_that_is_not_there_raises_oserror() -> None:
    pool = PeerConnections(0.5, 1.0)
    with pytest.raises(OSError):
        pool.get("127.0.0.1:9", "/x", {})
