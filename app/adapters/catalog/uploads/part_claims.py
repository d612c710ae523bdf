"""Claims of parts being sent to a remote multipart upload (``part_copies``).

Eager part copies run in the worker process that received the part; the destage of the
completed upload may run in another one (``ferry serve --workers N``, Celery). Each sender
claims (remote upload, part number) first, with a single statement that exactly one caller
wins on SQLite and PostgreSQL alike (an insert, or an update of a run-out row), renews it
while the body is sent, and deletes it when done. The destage waits for the live claims of its
upload before it lists the remote's parts, so a part still in flight is neither sent twice
nor skipped; a claim whose holder was killed runs out with its lease.
"""

from __future__ import annotations

import time

from sqlalchemy import Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from app.adapters.catalog.engine import writer
from app.adapters.catalog.tables import PartCopy


class PartClaims:
    """Take, renew and release the claim of one part of a remote upload."""

    def __init__(self, engine: Engine, node_id: str | None = None) -> None:
        self.engine = engine
        self.node_id = node_id

    def claim_part(self, remote_id: str, number: int, token: str, lease_seconds: float) -> bool:
        """True when the part is ours until the lease runs out; False while another holds it."""
        now = time.time()
        mine = {"token": token, "lease_until": now + lease_seconds, "node_id": self.node_id}
        try:
            with writer(self.engine).begin() as conn:
                conn.execute(insert(PartCopy).values(remote_upload_id=remote_id, part_number=number, **mine))
            return True
        except IntegrityError:
            pass  # a row exists: take it only if its lease ran out (its holder died)
        t = PartCopy
        with writer(self.engine).begin() as conn:
            moved = conn.execute(update(t).where(t.remote_upload_id == remote_id, t.part_number == number,
                                                 t.lease_until < now).values(**mine)).rowcount
        return moved == 1

    def renew_part(self, remote_id: str, number: int, token: str, lease_seconds: float) -> bool:
        t = PartCopy
        with writer(self.engine).begin() as conn:
            moved = conn.execute(update(t).where(t.remote_upload_id == remote_id, t.part_number == number,
                                                 t.token == token)
                                 .values(lease_until=time.time() + lease_seconds)).rowcount
        return moved == 1

    def release_part(self, remote_id: str, number: int, token: str) -> None:
        t = PartCopy
        with writer(self.engine).begin() as conn:
            conn.execute(delete(t).where(t.remote_upload_id == remote_id, t.part_number == number,
                                         t.token == token))

    def live_parts(self, remote_id: str) -> set[int]:
        """The parts of this remote upload that a live claim holds now."""
        t = PartCopy
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.part_number).where(t.remote_upload_id == remote_id,
                                                            t.lease_until >= time.time()))
            return {int(n) for (n,) in rows}

    def forget_parts(self, remote_id: str) -> None:
        """Drop what is left of an upload that is completed or aborted (claims of dead holders)."""
        t = PartCopy
        with writer(self.engine).begin() as conn:
            conn.execute(delete(t).where(t.remote_upload_id == remote_id))

    def forget_run_out(self, ended_before: float) -> int:
        """Drop claims whose lease ended before ``ended_before``: a holder killed mid-copy whose
        upload was then aborted or expired (nothing else deletes its row)."""
        t = PartCopy
        with writer(self.engine).begin() as conn:
            return int(conn.execute(delete(t).where(t.lease_until < ended_before)).rowcount or 0)
