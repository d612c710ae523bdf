"""Bucket ownership as the services see it: a snapshot of which tenant owns which bucket."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OwnerMap:
    """A snapshot of every explicit owner, plus the tenant that owns the buckets without one."""

    owners: dict[str, int]
    default_tenant: int | None
