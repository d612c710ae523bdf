"""One catalog transaction a service composes: the unit of work of an acknowledged write.

A write's commit spans tables: the journal row, the key's cached copies turned invalid, a
multipart upload turned into its result, the record of a replica. Each table's adapter hands
out a part that adds to one open transaction (``Work``); the service opens the unit, says what
the write is made of, and the unit commits once when the ``with`` block ends (or rolls all of
it back on an exception: ``ClaimLost``, ``SourceChanged``, a failed insert). No adapter builds
another's statements, and no flag says what else a commit carries.

Lock order, which every unit keeps (so two writes of one key queue rather than deadlock): an
upload's claim first, then the key's cache entries (``invalidate``: PostgreSQL's per-key
advisory lock), then the journal rows. On SQLite the transaction begins with ``BEGIN
IMMEDIATE`` (``Sessions.begin``), so the whole unit holds the one write lock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.adapters.catalog.cache.entry_rows import invalidate_key
from app.adapters.catalog.engine import Sessions
from app.adapters.catalog.journal.rows import NEWEST_ROW, delete_row, put_row, version_row
from app.adapters.catalog.repo import UploadClaim, finish_upload
from app.adapters.catalog.tables import JournalReplica
from app.domain.versions import Replica, VersionDraft, VersionRow


class JournalWork:
    """The journal's part of a unit: rows of acknowledged writes."""

    def __init__(self, session: Session, node_id: str) -> None:
        self._session = session
        self._node_id = node_id

    def put(self, draft: VersionDraft) -> VersionRow:
        """A buffered PUT's row (its seq assigned now, committed with the unit). With
        ``draft.inline`` the body is in the row: the unit's commit is the write's only fsync."""
        row = put_row(draft, self._node_id)
        self._session.add(row)
        self._session.flush()
        return version_row(row)

    def delete(self, bucket: str, key: str, tenant_id: int | None, *, after_seq: int | None = None) -> VersionRow:
        """A delete's row; ``after_seq``: a put whose destage must come first (a rename's)."""
        row = delete_row(bucket, key, tenant_id, self._node_id, after_seq=after_seq)
        self._session.add(row)
        self._session.flush()
        return version_row(row)

    def newest_seq(self, bucket: str, key: str) -> int | None:
        """The key's newest row, read inside the unit (a check the unit's commit depends on)."""
        found = self._session.connection().execute(NEWEST_ROW, {"b": bucket, "k": key}).first()
        return int(found[0]) if found else None


class CacheWork:
    """The cache index's part: a write's key stops being served from any node's cache."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def invalidate(self, bucket: str, key: str) -> None:
        """Every node's entry of the key turns invalid and the shared tombstone moves to now,
        in the unit's commit (a buffered write pays one commit)."""
        invalidate_key(self._session.connection(), bucket, key)


class UploadsWork:
    """The uploads catalog's part: a claimed Complete's upload becomes its result."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def finish(self, claim: UploadClaim) -> list[str]:
        """The upload turns into its kept result and its part rows go, or nothing commits
        (``ClaimLost``): one upload never yields two rows sharing its part blobs."""
        return finish_upload(self._session.connection(), claim)


class ReplicasWork:
    """The replicas' part: a second node's copy of a buffered write, recorded with its row."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, row: VersionRow, replica: Replica) -> None:
        """A replicated write never exists without the record of its copy."""
        self._session.add(JournalReplica(seq=row.seq, node_id=replica.node_id, created_at=time.time(),
                                         blobs_json=json.dumps([b.as_json() for b in replica.blobs])))


@dataclass(frozen=True, slots=True)
class Work:
    """The parts of one open unit; each adds to the same transaction."""

    journal: JournalWork
    cache: CacheWork
    uploads: UploadsWork
    replicas: ReplicasWork


class UnitsOfWork:
    """Opens units of work on the journal's engine (``synchronous=FULL``: a write's commit)."""

    def __init__(self, engine: Engine, node_id: str) -> None:
        self._sessions = Sessions(engine)
        self._node_id = node_id

    @contextmanager
    def begin(self) -> Iterator[Work]:
        """One writing transaction: committed when the block ends, rolled back if it raises."""
        with self._sessions.begin() as session:
            yield Work(JournalWork(session, self._node_id), CacheWork(session), UploadsWork(session),
                       ReplicasWork(session))
