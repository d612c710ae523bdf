"""Peer reads between two in-process gateways: the internal endpoint's service call without HTTP.

The HTTP transport (``app/fleet``) is tested against real ``ferry serve`` processes in
``tests/integration/test_fleet_writes.py``; this lets the read logic run in unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.domain.errors import S3Error
from app.domain.ranges import RangeRequest
from app.domain.versions import BlobRef, Replica, VersionRow
from app.services.bodies import ObjectRead, StreamBody


@dataclass
class HeldBody:
    read: ObjectRead

    def chunks(self) -> AsyncIterator[bytes]:
        return self.read.stream

    def close(self) -> None:
        self.read.close()


@dataclass
class InProcessPeers:
    """``PeerVersions`` over a dict of node id -> gateway; a node absent from it is gone."""

    node_id: str
    nodes: dict[str, Any] = field(default_factory=dict)
    asked: list[tuple[str, int]] = field(default_factory=list)

    async def open(self, row: VersionRow, first: int, last: int) -> HeldBody | None:
        self.asked.append((row.node_id, row.seq))
        gateway = self.nodes.get(row.node_id)
        if gateway is None:
            raise S3Error("ServiceUnavailable", f"node {row.node_id} is gone")
        read = await gateway.open_held_version(row.seq, RangeRequest.span(first, last))
        return HeldBody(read) if read is not None else None

    async def replicate(self, pieces: list[BlobRef], path: Callable[[str], Path]) -> Replica:
        """The first other node in the dict takes the copies; none: SlowDown."""
        others = [n for n in self.nodes if n != self.node_id]
        if not others:
            raise S3Error("SlowDown", "no other live node can hold a replica")
        target = others[0]
        copies = []
        for piece in pieces:
            data = path(piece.blob).read_bytes()
            blob = await self.nodes[target].accept_replica(StreamBody(_once(data)), piece.size, piece.etag)
            copies.append(BlobRef(blob, piece.size, piece.etag, dict(piece.checksums), piece.number))
        return Replica(target, copies)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
