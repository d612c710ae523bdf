"""Policy rules in the catalog: listed whole (they are few) and changed one at a time."""

from __future__ import annotations

import time

from sqlalchemy import Engine, delete, func, select

from app.adapters.catalog.engine import Sessions, affected
from app.adapters.catalog.tables import Policy as PolicyRow
from app.domain.policy import PolicyRule, validate_rule

_FIELDS = ("mode", "revalidate", "ttl_seconds", "serve_stale", "pinned", "admission", "quota_bytes", "write_replicas",
           "prefetch")


def _rule(row: PolicyRow) -> PolicyRule:
    return PolicyRule(bucket=row.bucket, prefix=row.prefix, id=row.id,
                      **{name: getattr(row, name) for name in _FIELDS})


class PolicyRepo:
    def __init__(self, engine: Engine) -> None:
        self.sessions = Sessions(engine)

    def list(self) -> list[PolicyRule]:
        with self.sessions() as s:
            return [_rule(r) for r in s.scalars(select(PolicyRow).order_by(PolicyRow.bucket, PolicyRow.prefix))]

    def get(self, rule_id: int) -> PolicyRule | None:
        with self.sessions() as s:
            row = s.get(PolicyRow, rule_id)
            return _rule(row) if row else None

    def upsert(self, rule: PolicyRule) -> PolicyRule:
        """Create the rule for (bucket, prefix), or replace its fields."""
        validate_rule(rule)
        with self.sessions.begin() as s:
            row = s.scalar(select(PolicyRow).where(PolicyRow.bucket == rule.bucket, PolicyRow.prefix == rule.prefix))
            if row is None:
                row = PolicyRow(bucket=rule.bucket, prefix=rule.prefix)
                s.add(row)
            for name in _FIELDS:
                setattr(row, name, getattr(rule, name))
            row.updated_at = time.time()
            s.flush()
            return _rule(row)

    def delete(self, rule_id: int) -> bool:
        with self.sessions.begin() as s:
            return bool(affected(s.execute(delete(PolicyRow).where(PolicyRow.id == rule_id))))

    def version(self) -> tuple[int, float]:
        """Changes show as a new (count, newest update): cheap to poll from every process."""
        with self.sessions() as s:
            count, newest = s.execute(select(func.count(PolicyRow.id), func.max(PolicyRow.updated_at))).one()
            return int(count or 0), float(newest or 0.0)
