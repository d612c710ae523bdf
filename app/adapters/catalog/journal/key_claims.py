"""Per-key claims of conditional writes (``key_claims``).

A conditional write (If-Match / If-None-Match) holds its key's claim from the check of the
condition until its write is committed (journal row or remote object). The claim is one row
per key taken with an insert, or an update of a released or run-out row: both are single
statements that exactly one caller wins on SQLite and PostgreSQL alike, so two conditional
writes of one key never both pass their check, whichever gateway process of the catalog
they reach. Released, the row keeps what the last conditional write produced (its ETag and
the client's SDK invocation id) so that the same request retried after a lost answer can be
recognised.
"""

from __future__ import annotations

import time

from sqlalchemy import Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from app.adapters.catalog.engine import writer
from app.adapters.catalog.tables import KeyClaim
from app.domain.conditions import PreviousWrite


class KeyClaims:
    """Take and release the claim of one key; see the module docstring."""

    def __init__(self, engine: Engine, node_id: str | None = None) -> None:
        self.engine = engine
        self.node_id = node_id

    def claim_key(self, bucket: str, key: str, token: str, lease_seconds: float) -> PreviousWrite | None:
        """The claim, or None while another live claim holds the key. The answer carries the
        previous conditional write's result (empty for a key never claimed)."""
        now = time.time()
        mine = {"token": token, "lease_until": now + lease_seconds, "node_id": self.node_id}
        try:
            with writer(self.engine).begin() as conn:
                conn.execute(insert(KeyClaim).values(bucket=bucket, key=key, done_at=0.0, **mine))
            return PreviousWrite(None, None, 0.0)
        except IntegrityError:
            pass  # a row exists: take it only if it is released or its lease ran out
        t = KeyClaim
        with writer(self.engine).begin() as conn:
            # Take it first, then read what the last write left: read before, a release
            # committed in between would be missed (SQLite runs a SELECT that precedes every
            # write outside the transaction), and a retry of that write would be refused.
            # The update leaves those columns as they are and locks the row until commit.
            moved = conn.execute(update(t).where(t.bucket == bucket, t.key == key, t.lease_until < now)
                                 .values(**mine)).rowcount
            if moved != 1:
                return None
            before = conn.execute(select(t.invocation, t.etag, t.done_at)
                                  .where(t.bucket == bucket, t.key == key)).one()
        return PreviousWrite(before.invocation, before.etag, before.done_at)

    def release_key(self, bucket: str, key: str, token: str, *, invocation: str | None = None,
                    etag: str | None = None) -> None:
        """Release our claim; ``etag`` (the write succeeded) is kept with the invocation id."""
        t = KeyClaim
        values: dict[str, object] = {"token": "", "lease_until": 0.0}
        if etag is not None:
            values.update(invocation=invocation, etag=etag, done_at=time.time())
        with writer(self.engine).begin() as conn:
            conn.execute(update(t).where(t.bucket == bucket, t.key == key, t.token == token).values(**values))

    def forget_key_claims(self, done_before: float) -> int:
        """Drop released claims whose last result is older than the cutoff: a retry of that
        request is long over, and the table stays one row per recently written key."""
        t = KeyClaim
        with writer(self.engine).begin() as conn:
            return int(conn.execute(delete(t).where(t.lease_until == 0, t.done_at < done_before)).rowcount)

    def release_key_claims_of_node(self) -> int:
        """Crash recovery at start: claims this node holds died with its previous run."""
        t = KeyClaim
        with writer(self.engine).begin() as conn:
            return int(conn.execute(update(t).where(t.node_id == self.node_id, t.lease_until > 0)
                                    .values(token="", lease_until=0.0)).rowcount)
