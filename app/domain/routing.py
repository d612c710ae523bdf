"""Where a bucket's data goes, as a value a destage can carry to its commit (issue 26).

A ``RouteStamp`` is what a destage uploaded to: the routing table's generation when that table
was read, and the bucket's route in it. ``Journal.mark_durable`` compares it with the catalog
in the durable commit, fenced against a concurrent remap, and raises ``RouteMoved`` when the
bucket maps elsewhere now: the write is then sent to the new remote instead of being marked
durable where nobody will read it.
"""

from __future__ import annotations

from dataclasses import dataclass

# (registered remote id, the bucket's name there, its endpoint); all None: the default remote.
RouteId = tuple[int | None, str | None, str | None]
DEFAULT_ROUTE: RouteId = (None, None, None)


@dataclass(frozen=True)
class RouteStamp:
    generation: int  # the catalog's routing generation the route was read at
    route: RouteId


class RouteMoved(Exception):
    """The bucket was remapped after the upload began: the upload went to the old remote."""
