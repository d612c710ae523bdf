"""Conditional writes: If-Match / If-None-Match on PutObject, CopyObject and Complete.

The condition is judged against the key's newest version as Ferry knows it: the newest
journal row that is not yet on the remote (a buffered put counts with its ETag, a pending
delete counts as no object), else the remote itself (HEAD). The check and the write are one
step per key: both happen under the key's claim in the catalog (``KeyClaims``), which one
conditional write at a time holds, on every gateway process sharing the catalog; a second
conditional write of the key meanwhile gets ``409 ConditionalRequestConflict`` as on S3.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from app.domain.conditions import WriteConditions
from app.domain.errors import S3Error
from app.services.core import GatewayCore


@dataclass
class KeyHold:
    """A held key: what the condition was judged against, and what the write produced."""

    current: str | None = None  # the newest version's ETag when judged (None: no object)
    repeat: str | None = None  # the retried request's earlier result: answer it, write nothing
    result: str | None = None  # set by the write once committed: kept for a retry to find

    def fence(self) -> dict[str, str]:
        """The same condition for the remote, so a writer that bypasses Ferry is caught too."""
        return {"if_none_match": "*"} if self.current is None else {"if_match": self.current}


class KeyHolds:
    """The per-key claim around a conditional write (the write services are handed one)."""

    def __init__(self, core: GatewayCore) -> None:
        self.catalog = core.catalog
        self.journal = core.journal
        self.remote = core.remote
        self._run = core.run

    async def current_etag(self, bucket: str, key: str) -> str | None:
        """The key's newest version: a dirty journal row first, else the remote's answer."""
        if self.journal is not None:
            row = await self._run(self.journal.latest_dirty, bucket, key)
            if row is not None:
                return None if row.op == "delete" else row.etag
        return await self._run(self.remote.current_etag, bucket, key)

    @asynccontextmanager
    async def hold(self, bucket: str, key: str, conditions: WriteConditions, lease_seconds: float,
                   body_etag: str | None = None) -> AsyncIterator[KeyHold]:
        """Hold the key while the conditions are judged and the write commits; without
        conditions, nothing is held (unconditional writes never wait for a claim)."""
        hold = KeyHold()
        if not conditions.any:
            yield hold
            return
        token = secrets.token_hex(16)
        previous = await self._run(self.catalog.claim_key, bucket, key, token, lease_seconds)
        if previous is None:
            raise S3Error("ConditionalRequestConflict")
        try:
            hold.current = await self.current_etag(bucket, key)
            try:
                conditions.check(hold.current)
            except S3Error:
                if body_etag is None or not conditions.retried(previous, hold.current, body_etag):
                    raise
                hold.repeat = hold.current
            yield hold
        finally:
            with anyio.CancelScope(shield=True):
                kept = hold.repeat or hold.result
                await self._run(lambda: self.catalog.release_key(
                    bucket, key, token, invocation=conditions.invocation if kept else None, etag=kept))
