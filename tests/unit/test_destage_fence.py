"""Every request that writes a key at the remote starts under a lease renewed just before it: when
the renewal fails (the catalog restarting) or finds the row taken over, nothing is sent, so a
worker whose lease lapsed never writes alongside the one that claimed the row after it (issue 15:
after a PostgreSQL restart the remote saw two writes of one key at once)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from app.domain.states import VersionState
from tests.fakes.faulty import FaultyRemote
from tests.fakes.harness import build


@pytest.mark.parametrize("renewal", ["catalog-down", "taken-over"])
@pytest.mark.parametrize("op", ["put", "delete"])
def test_no_remote_write_without_a_renewed_lease(tmp_path: Path, renewal: str, op: str) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def write() -> int:
        if op == "put":
            await svc.put("b", "k", b"v1")
        else:  # on a key the remote has (a delete of an absent key sends nothing)
            await svc.put("b", "k", b"v0")
            assert svc.destage_all() == ["durable"]
            await svc.gateway.delete_object("b", "k")
        return svc.executor.queued[-1]

    seq = asyncio.run(write())
    real = svc.journal.renew

    def renew(row: object, seconds: float) -> bool:
        if renewal == "catalog-down":
            raise OperationalError("UPDATE object_versions", {}, Exception("server closed the connection"))
        return False

    svc.journal.renew = renew  # type: ignore[method-assign]
    before = list(remote.calls)
    assert svc.destager.destage(seq) == "retry"  # an outage: it does not use up the attempts
    assert not [c for c in remote.calls[len(before):] if c.startswith(("PUT", "DELETE"))], remote.calls
    row = svc.journal.get(seq)
    assert row is not None and row.state is VersionState.BUFFERED
    svc.journal.renew = real  # type: ignore[method-assign]
    assert svc.destager.destage(seq) == "durable"
