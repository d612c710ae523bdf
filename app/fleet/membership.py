"""The live nodes of the fleet, as this process knows them: cheap to ask on every block read.

The catalog's ``nodes`` table is the truth (each node beats every ``node_heartbeat_seconds``);
this process re-reads it at the same period in a thread, so asking for a block's owner is a dict
lookup and a few hashes, never SQL. A node whose heartbeat is older than ``node_stale_seconds``
is gone: it owns nothing, and its blocks move to their runner-up (rendezvous hashing). A peer
that refused a connection is *suspected* at once, until its heartbeat moves again, so a kill -9
costs one failed connection per process, not one per read until the heartbeat ages.
"""

from __future__ import annotations

import logging
import threading
import time

from app.adapters.catalog.control.nodes import LiveNode, NodeDirectory
from app.domain.ownership import block_key, owner, score

log = logging.getLogger("ferry.fleet")


class Membership:
    def __init__(self, directory: NodeDirectory, node_id: str, address: str, *, stale_after: float,
                 refresh_every: float) -> None:
        self.directory = directory
        self.node_id = node_id
        self.address = address
        self.stale_after = stale_after
        self.refresh_every = refresh_every
        self._nodes: dict[str, LiveNode] = {}
        self._ids: tuple[str, ...] = (node_id,)
        self._suspects: dict[str, float] = {}  # node id -> the heartbeat it had when it failed us
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- the view ------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the live nodes (those with an internal endpoint) from the catalog."""
        nodes = {n.node_id: n for n in self.directory.live(self.stale_after) if n.address}
        with self._lock:
            for node_id, beat in list(self._suspects.items()):
                current = nodes.get(node_id)
                if current is None or current.heartbeat_at > beat:
                    del self._suspects[node_id]  # gone for everyone, or alive again
            self._nodes = nodes
            self._rebuild()

    def _rebuild(self) -> None:
        ids = {n for n in self._nodes if n not in self._suspects}
        ids.add(self.node_id)  # this process serves, whatever the catalog said a moment ago
        self._ids = tuple(sorted(ids))

    def suspect(self, node_id: str) -> None:
        """A peer failed us (refused, reset, timed out): route around it until it beats again."""
        if node_id == self.node_id:
            return
        with self._lock:
            node = self._nodes.get(node_id)
            self._suspects[node_id] = node.heartbeat_at if node is not None else time.time()
            self._rebuild()
        log.warning("fleet: peer %s failed; its blocks go to the others until it beats again", node_id)

    def live_ids(self) -> tuple[str, ...]:
        return self._ids

    def owner(self, bucket: str, key: str, index: int) -> LiveNode | None:
        """The owner of block ``index`` of (bucket, key); None when it is this node."""
        chosen = owner(block_key(bucket, key, index), self._ids)
        if chosen is None or chosen == self.node_id:
            return None
        return self._nodes.get(chosen)

    def address_of(self, node_id: str) -> str | None:
        """The internal address of a live, unsuspected node (buffered writes it holds are read there)."""
        node = self._nodes.get(node_id)
        if node is None or node_id in self._suspects or node_id == self.node_id:
            return None
        return node.address

    def others(self, seed: bytes) -> list[LiveNode]:
        """The other live, unsuspected nodes, in rendezvous order for ``seed`` (where replicas go:
        spread over the fleet, the same order for every node that asks)."""
        ids = [n for n in self._ids if n != self.node_id]
        ids.sort(key=lambda n: (score(n, seed), n), reverse=True)
        return [self._nodes[n] for n in ids if n in self._nodes]

    # ---- the refresh thread --------------------------------------------------------------------
    def start(self) -> None:
        try:
            self.refresh()
        except Exception:  # the catalog is down at start: begin alone, the thread retries
            log.warning("fleet: could not read the live nodes", exc_info=True)
        self._thread = threading.Thread(target=self._run, name="ferry-fleet-membership", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.refresh_every):
            try:
                self.refresh()
            except Exception:  # keep the last view; a catalog outage does not stop reads
                log.warning("fleet: could not refresh the live nodes", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
