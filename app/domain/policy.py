"""Policies: what the gateway does for a bucket or prefix (write mode, revalidation, caching).

Rules are matched by bucket (``*`` for every bucket) and key prefix; the longest matching prefix
wins field by field, so a rule sets only what it changes and inherits the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from app.domain.errors import S3Error

MODES = ("write-back", "write-through", "read-only", "bypass")
REVALIDATIONS = ("immutable", "ttl", "always")
ADMISSIONS = ("frequency", "always", "second-hit")
PREFETCHES = ("sequential", "prefix", "off")


@dataclass(frozen=True)
class Policy:
    """The effective policy of one key."""

    mode: str = "write-back"
    revalidate: str = "ttl"
    ttl_seconds: float = 300.0
    serve_stale: bool = False
    pinned: bool = False
    admission: str = "frequency"
    quota_bytes: int | None = None
    write_replicas: int = 1  # fleet: nodes that hold a buffered write durably before it is acknowledged
    prefetch: str = "sequential"  # what a read predicts (app/services/cache/prefetch.py)

    @property
    def caches(self) -> bool:
        return self.mode != "bypass"

    @property
    def accepts_writes(self) -> bool:
        return self.mode != "read-only"

    def is_fresh(self, validated_at: float, now: float) -> bool:
        """Whether an entry validated at ``validated_at`` may be served without asking the remote."""
        if self.revalidate == "immutable":
            return True
        if self.revalidate == "always":
            return False
        return now - validated_at < self.ttl_seconds

    def refuse_write(self, bucket: str) -> None:
        if not self.accepts_writes:
            raise S3Error("AccessDenied", f"Bucket {bucket} is read-only through this gateway.")


@dataclass(frozen=True)
class PolicyRule:
    """One stored rule; ``None`` fields inherit from shorter prefixes and the defaults."""

    bucket: str
    prefix: str = ""
    mode: str | None = None
    revalidate: str | None = None
    ttl_seconds: float | None = None
    serve_stale: bool | None = None
    pinned: bool | None = None
    admission: str | None = None
    quota_bytes: int | None = None
    write_replicas: int | None = None
    prefetch: str | None = None
    id: int | None = None

    def overrides(self) -> dict[str, Any]:
        names = {f.name for f in fields(Policy)}
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}


def validate_rule(rule: PolicyRule) -> None:
    """Reject values no code path understands, with a message naming the field."""
    if not rule.bucket:
        raise ValueError("bucket must not be empty (use '*' for every bucket)")
    if rule.mode is not None and rule.mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    if rule.revalidate is not None and rule.revalidate not in REVALIDATIONS:
        raise ValueError(f"revalidate must be one of {', '.join(REVALIDATIONS)}")
    if rule.admission is not None and rule.admission not in ADMISSIONS:
        raise ValueError(f"admission must be one of {', '.join(ADMISSIONS)}")
    if rule.prefetch is not None and rule.prefetch not in PREFETCHES:
        raise ValueError(f"prefetch must be one of {', '.join(PREFETCHES)}")
    if rule.ttl_seconds is not None and rule.ttl_seconds < 0:
        raise ValueError("ttl_seconds must be >= 0")
    if rule.quota_bytes is not None and rule.quota_bytes < 0:
        raise ValueError("quota_bytes must be >= 0")
    if rule.write_replicas is not None and rule.write_replicas not in (1, 2):
        raise ValueError("write_replicas must be 1 or 2")


def resolve(defaults: Policy, rules: list[PolicyRule], bucket: str, key: str) -> Policy:
    """The effective policy of ``bucket/key``: defaults, then ``*`` rules, then the bucket's,
    each group from the shortest matching prefix to the longest."""
    matching = [r for r in rules if r.bucket in ("*", bucket) and key.startswith(r.prefix)]
    if not matching:
        return defaults
    matching.sort(key=lambda r: (r.bucket != "*", len(r.prefix)))
    merged: dict[str, Any] = {}
    for rule in matching:
        merged.update(rule.overrides())
    return replace(defaults, **merged)


def pinned_prefixes(rules: list[PolicyRule]) -> list[tuple[str, str]]:
    """(bucket, prefix) pairs whose objects must never be evicted."""
    return [(r.bucket, r.prefix) for r in rules if r.pinned]


def setting_prefix(rules: list[PolicyRule], bucket: str, key: str, name: str) -> str | None:
    """The prefix of the rule that gives ``bucket/key`` its ``name`` field (the one ``resolve``
    applies last), or None when only the defaults set it."""
    matching = [r for r in rules if r.bucket in ("*", bucket) and key.startswith(r.prefix)
                and getattr(r, name) is not None]
    if not matching:
        return None
    return max(matching, key=lambda r: (r.bucket != "*", len(r.prefix))).prefix
