"""A peer's block as the fill reads it: into one reused buffer (``readinto``), and, when the peer
stops mid-block, the rest from the remote with ``If-Match`` the version the peer was sending.

The peer is a real HTTP server on loopback (http.server) answering the block path the way
app/fleet/peer_server.py does; the remote is the in-memory fake.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from typing import Any

import pytest

from app.adapters.catalog.control.nodes import LiveNode
from app.domain.objects import ObjectMeta
from app.fleet.peer_client import PeerBlockSource
from app.fleet.wire import META, encode_meta

BLOCK = 1024 * 1024
DATA = os.urandom(BLOCK)
META_OF = ObjectMeta(key="k", size=BLOCK, etag="e1", last_modified=datetime.now(UTC))


class Remote:
    """The rest of the block, for the version asked (If-Match)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str | None, str | None]] = []

    def get_object(self, bucket: str, key: str, byte_range: str | None = None,
                   if_match: str | None = None) -> tuple[ObjectMeta, Any]:
        self.asked.append((byte_range, if_match))
        first = int((byte_range or "bytes=0-").split("=")[1].split("-")[0])
        return META_OF, BytesIO(DATA[first:])


class Membership:
    node_id = "asker"

    def __init__(self, address: str) -> None:
        self.peer = LiveNode("owner", address, "test", 0.0)
        self.suspected: list[str] = []

    def owner(self, bucket: str, key: str, index: int) -> LiveNode:
        return self.peer

    def suspect(self, node_id: str) -> None:
        self.suspected.append(node_id)


@pytest.fixture
def peer() -> Iterator[dict[str, int]]:
    """A peer that sends ``cut`` bytes of the block, then closes (all of it by default)."""
    state = {"cut": BLOCK}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(206)
            self.send_header(META, encode_meta(META_OF))
            self.send_header("Content-Length", str(BLOCK))
            self.end_headers()
            self.wfile.write(DATA[:state["cut"]])
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["port"] = server.server_address[1]
    yield state
    server.shutdown()
    server.server_close()


def _read_all(body: Any, chunk: int = 256 * 1024) -> bytes:
    buffer = memoryview(bytearray(chunk))
    out = bytearray()
    while n := body.readinto(buffer):
        out += buffer[:n]
    return bytes(out)


def _source(peer: dict[str, int]) -> tuple[PeerBlockSource, Remote, Membership]:
    remote, membership = Remote(), Membership(f"127.0.0.1:{peer['port']}")
    return PeerBlockSource(remote, membership, "secret", BLOCK), remote, membership  # type: ignore[arg-type]


def test_a_whole_block_is_read_into_one_buffer_from_the_peer(peer: dict[str, int]) -> None:
    source, remote, membership = _source(peer)
    meta, body = source.get_object("b", "k", f"bytes=0-{BLOCK - 1}", if_match="e1")
    assert meta.etag == "e1"
    assert _read_all(body) == DATA
    body.close()
    assert remote.asked == [] and membership.suspected == []


def test_a_peer_that_stops_mid_block_leaves_the_rest_to_the_remote_for_the_same_version(
        peer: dict[str, int]) -> None:
    peer["cut"] = BLOCK // 3
    source, remote, _ = _source(peer)
    _, body = source.get_object("b", "k", f"bytes=0-{BLOCK - 1}", if_match="e1")
    assert _read_all(body) == DATA
    body.close()
    assert remote.asked == [(f"bytes={BLOCK // 3}-{BLOCK - 1}", "e1")]
