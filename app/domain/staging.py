"""Staging job records: the durable state of a warm-up and the progress its runner reports."""

from __future__ import annotations

from dataclasses import dataclass

ACTIVE = ("queued", "running")
FINISHED = ("done", "failed", "cancelled")


@dataclass(frozen=True)
class JobInfo:
    id: str
    bucket: str
    prefix: str
    node_id: str
    tenant_id: int | None
    state: str
    objects_total: int
    objects_done: int
    objects_skipped: int
    bytes_total: int
    bytes_done: int
    listing_done: bool
    error: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None


@dataclass
class Progress:
    objects_total: int = 0
    objects_done: int = 0
    objects_skipped: int = 0
    bytes_total: int = 0
    bytes_done: int = 0
    listing_done: bool = False
