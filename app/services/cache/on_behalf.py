"""Whose read a fill serves: the tenant that a peer's copy of the block is charged to.

In a fleet a fill's bytes may come from the block's owner (app/fleet/peer_client.py), whose
cache then records an entry of its own. That entry belongs to the tenant whose read caused it,
not to nobody. The block source keeps the remote's ``get_object`` shape, so the tenant travels
beside the call: the discovery and the fill thread that make the call set it here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

FILL_TENANT: ContextVar[int | None] = ContextVar("ferry_fill_tenant", default=None)


@contextmanager
def on_behalf_of(tenant_id: int | None) -> Iterator[None]:
    """Within this block, remote or peer fetches are made for ``tenant_id``'s read."""
    token = FILL_TENANT.set(tenant_id)
    try:
        yield
    finally:
        FILL_TENANT.reset(token)
