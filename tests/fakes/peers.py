"""Peer reads between two in-process gateways: the internal endpoint's service call without HTTP.

The HTTP transport (``app/fleet``) is tested against real ``ferry serve`` processes in
``tests/integration/test_fleet_writes.py``; this lets the read logic run in unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from app.domain.errors import S3Error
from app.domain.ranges import RangeRequest
from app.domain.versions import VersionRow
from app.services.bodies import ObjectRead


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
