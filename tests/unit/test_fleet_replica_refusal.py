"""A node that answers a replica PUT with a refusal (its write buffer or disk is full: 503) is
alive: the origin tries the next node without routing reads around it. A node that cannot be
reached is suspected, as before (app/fleet/journal_client.py)."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.domain.errors import S3Error
from app.domain.versions import BlobRef
from app.fleet.journal_client import PeerJournal
from tests.support.gateway import free_port


@dataclass
class Node:
    node_id: str
    address: str


@dataclass
class FakeMembership:
    nodes: list[Node]
    node_id: str = "origin"
    suspected: list[str] = field(default_factory=list)

    def others(self, seed: bytes) -> list[Node]:
        return [n for n in self.nodes if n.node_id not in self.suspected]

    def suspect(self, node_id: str) -> None:
        self.suspected.append(node_id)


class Full(BaseHTTPRequestHandler):
    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b"SlowDown"
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_full_node_is_not_suspected_an_unreachable_one_is(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Full)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        full = Node("full", f"127.0.0.1:{server.server_address[1]}")
        gone = Node("gone", f"127.0.0.1:{free_port()}")  # nothing listens there
        membership = FakeMembership([full, gone])
        peers = PeerJournal(membership, "a-fleet-secret-0123456789", timeout=2.0)  # type: ignore[arg-type]
        blob = tmp_path / "piece"
        blob.write_bytes(b"bytes of a write")
        piece = BlobRef("0" * 32, 16, hashlib.md5(b"bytes of a write").hexdigest())
        with pytest.raises(S3Error) as err:
            asyncio.run(peers.replicate([piece], lambda _: blob))
        assert err.value.code == "SlowDown"
        assert membership.suspected == ["gone"], "a node that answered is alive"
    finally:
        server.shutdown()
        server.server_close()
