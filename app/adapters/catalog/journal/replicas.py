"""Replica records of buffered writes (``journal_replicas``) and the takeover of a lost node's rows.

With ``write_replicas: 2`` a write's journal row commits together with the record of a second
node's copy of its blobs. When the row's node stops heartbeating (``nodes``), the node holding
the copy takes the row over: one compare-and-set moves ``node_id`` and ``blobs_json`` to the
copy, so the row's ``seq`` (its place in the key's order) is kept and the usual destage rules
(newest row per key, one lease per key, conditional remote writes) still decide what lands.
"""

from __future__ import annotations

import json
import time

from sqlalchemy import ColumnElement, Engine, and_, delete, exists, select, update

from app.adapters.catalog.engine import Sessions, affected
from app.adapters.catalog.tables import JournalReplica, Node, ObjectVersion
from app.domain.states import DIRTY, VersionState

DIRTY_VALUES = tuple(s.value for s in DIRTY)
# What a survivor takes over: rows no live worker holds a lease on. A DESTAGING row of a lost
# node returns to BUFFERED when its lease runs out (``Journal.release_expired_leases``).
TAKEN_STATES = (VersionState.BUFFERED.value, VersionState.FAILED.value)


class ReplicaRepo:
    """This node's replica records: what it holds for others, and what it takes over."""

    def __init__(self, engine: Engine, node_id: str) -> None:
        self.sessions = Sessions(engine)
        self.node_id = node_id

    def _lost(self, now: float, stale_after: float) -> ColumnElement[bool]:
        """The row's node has no heartbeat within ``stale_after`` (or no row in ``nodes`` at all)."""
        return ~exists().where(Node.node_id == ObjectVersion.node_id, Node.heartbeat_at >= now - stale_after)

    def take_over(self, stale_after: float, now: float | None = None, limit: int = 1000) -> list[int]:
        """Move to this node the dirty rows of lost nodes that it can destage: those it holds a
        replica of, and deletes (they have no bytes). Returns the seqs taken, oldest first."""
        now = time.time() if now is None else now
        lost = self._lost(now, stale_after)
        with self.sessions() as s:
            copies = s.execute(
                select(ObjectVersion.seq, ObjectVersion.node_id, ObjectVersion.generation, JournalReplica.blobs_json)
                .join(JournalReplica, and_(JournalReplica.seq == ObjectVersion.seq,
                                           JournalReplica.node_id == self.node_id))
                .where(ObjectVersion.state.in_(TAKEN_STATES), ObjectVersion.node_id != self.node_id, lost)
                .order_by(ObjectVersion.seq).limit(limit)).all()
            deletes = s.execute(
                select(ObjectVersion.seq, ObjectVersion.node_id, ObjectVersion.generation)
                .where(ObjectVersion.op == "delete", ObjectVersion.state.in_(TAKEN_STATES),
                       ObjectVersion.node_id != self.node_id, lost)
                .order_by(ObjectVersion.seq).limit(limit)).all()
        taken = [seq for seq, old, gen, blobs in copies if self._move(seq, old, gen, blobs)]
        taken += [seq for seq, old, gen in deletes if self._move(seq, old, gen, None)]
        return sorted(taken)

    def _move(self, seq: int, old_node: str, generation: int, blobs_json: str | None) -> bool:
        """One row to this node, if nobody changed it since it was read (generation)."""
        values: dict[str, object] = {"node_id": self.node_id, "generation": ObjectVersion.generation + 1,
                                     "next_attempt_at": 0.0, "last_error": f"taken over from lost node {old_node}"}
        if blobs_json is not None:
            values["blobs_json"] = blobs_json
        with self.sessions.begin() as s:
            moved = s.execute(update(ObjectVersion).where(
                ObjectVersion.seq == seq, ObjectVersion.node_id == old_node, ObjectVersion.generation == generation,
                ObjectVersion.state.in_(TAKEN_STATES)).values(**values).execution_options(synchronize_session=False))
            if affected(moved) != 1:
                return False
            # The copy is the row's own blobs now, no longer a replica.
            s.execute(delete(JournalReplica).where(JournalReplica.seq == seq, JournalReplica.node_id == self.node_id))
            return True

    def finished(self, limit: int = 1000) -> list[tuple[int, list[str]]]:
        """Replicas this node holds of rows that left the buffer (durable, superseded): their
        blobs can go. Returns (seq, blob ids)."""
        with self.sessions() as s:
            rows = s.execute(
                select(JournalReplica.seq, JournalReplica.blobs_json)
                .where(JournalReplica.node_id == self.node_id,
                       ~exists().where(ObjectVersion.seq == JournalReplica.seq,
                                       ObjectVersion.state.in_(DIRTY_VALUES)))
                .limit(limit)).all()
        return [(seq, [b[0] for b in json.loads(blobs)]) for seq, blobs in rows]

    def forget(self, seq: int) -> None:
        with self.sessions.begin() as s:
            s.execute(delete(JournalReplica).where(JournalReplica.seq == seq, JournalReplica.node_id == self.node_id))

    def held(self) -> int:
        """How many replicas this node holds (metrics, tests)."""
        with self.sessions() as s:
            return len(s.scalars(select(JournalReplica.seq).where(JournalReplica.node_id == self.node_id)).all())
