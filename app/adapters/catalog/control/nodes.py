"""Node registration: one live process per node id in a catalog (the ``nodes`` table).

A node id names a node's queue, its journal rows and its cache rows; two live gateways with one
id would take each other's work. ``ferry serve`` registers its id with a fresh ``instance`` and
keeps a heartbeat. A row is taken over (a compare-and-set, so two successors cannot both win)
when its heartbeat is older than ``stale_after`` (a dead node), or at once when it names the data
dir this process owns: its writer no longer holds that dir's lock, so it is dead (kill -9 and
restart of one node needs no wait).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass

from sqlalchemy import Engine, delete, or_, select, update
from sqlalchemy.exc import IntegrityError

from app.adapters.catalog.engine import Sessions, affected
from app.adapters.catalog.tables import Node


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    host: str
    pid: int
    version: str
    heartbeat_age: float


class NodeIdInUse(Exception):
    """A live node (recent heartbeat, another instance) already uses this node id."""

    def __init__(self, other: NodeInfo) -> None:
        self.other = other
        super().__init__(
            f"node id {other.node_id!r} is in use by a live node (host {other.host}, pid {other.pid}, "
            f"ferry {other.version}, heartbeat {other.heartbeat_age:.1f}s ago); give each node its own "
            "FERRY_NODE_ID")


class NodeRegistry:
    """This process's row in ``nodes``: register, heartbeat, leave."""

    def __init__(self, engine: Engine, node_id: str, version: str, data_dir_id: str, address: str = "") -> None:
        self.sessions = Sessions(engine)
        self.node_id = node_id
        self.address = address  # host:port of the internal endpoint, '' without one
        self.data_dir_id = data_dir_id
        self.version = version
        self.instance = uuid.uuid4().hex

    def register(self, stale_after: float) -> None:
        """Claim the id, or raise ``NodeIdInUse`` when a live node holds it."""
        for _ in range(3):
            now = time.time()
            values = dict(instance=self.instance, data_dir_id=self.data_dir_id, host=socket.gethostname(), pid=os.getpid(),
                          version=self.version, started_at=now, heartbeat_at=now, address=self.address)
            try:
                with self.sessions.begin() as s:
                    taken = s.execute(
                        update(Node).where(Node.node_id == self.node_id,
                                           or_(Node.instance == self.instance, Node.data_dir_id == self.data_dir_id,
                                               Node.heartbeat_at < now - stale_after))
                        .values(**values).execution_options(synchronize_session=False))
                    if affected(taken) == 1:
                        return
                    row = s.get(Node, self.node_id)
                    if row is None:
                        s.add(Node(node_id=self.node_id, **values))
                        return
                    raise NodeIdInUse(NodeInfo(row.node_id, row.host, row.pid, row.version, now - row.heartbeat_at))
            except IntegrityError:
                continue  # another start inserted the row at the same moment: look again
        raise RuntimeError(f"could not register node id {self.node_id!r}")

    def heartbeat(self) -> bool:
        """Refresh the row; False when another instance took the id over (this node was presumed dead)."""
        with self.sessions.begin() as s:
            result = s.execute(update(Node).where(Node.node_id == self.node_id, Node.instance == self.instance)
                               .values(heartbeat_at=time.time()).execution_options(synchronize_session=False))
            return affected(result) == 1

    def leave(self) -> None:
        """A clean stop frees the id at once (a successor need not wait for the heartbeat to age)."""
        with self.sessions.begin() as s:
            s.execute(delete(Node).where(Node.node_id == self.node_id, Node.instance == self.instance))


@dataclass(frozen=True)
class LiveNode:
    node_id: str
    address: str  # host:port of its internal endpoint ('' when it serves no peers)
    version: str
    heartbeat_at: float


class NodeDirectory:
    """Who is in the fleet: the nodes whose heartbeat is younger than ``stale_after``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.query = select(Node.node_id, Node.address, Node.version, Node.heartbeat_at)  # a few rows

    def live(self, stale_after: float) -> list[LiveNode]:
        now = time.time()
        with self.engine.connect() as conn:
            rows = conn.execute(self.query).all()
        return [LiveNode(r.node_id, r.address, r.version, r.heartbeat_at) for r in rows
                if r.heartbeat_at >= now - stale_after]
