"""The policy book: every process resolves policies from an in-memory copy of the rules, no
older than ``refresh_seconds`` when used, so that a change made through the admin API (on any
node) applies to running gateways without a restart. A refresher thread keeps the copy fresh
(app/refresher.py): a request reads the catalog itself only for the first rules, after this
process changed a rule, or when the refresher is behind.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

from app.domain.policy import Policy, PolicyRule, resolve, setting_prefix
from app.refresher import Refresher


class PolicyRules(Protocol):
    """The catalog's policy rules (``adapters/catalog/control/policies.PolicyRepo``) and their version."""

    def version(self) -> tuple[int, float]: ...
    def list(self) -> list[PolicyRule]: ...
    def get(self, rule_id: int) -> PolicyRule | None: ...
    def upsert(self, rule: PolicyRule) -> PolicyRule: ...
    def delete(self, rule_id: int) -> bool: ...


class PolicyBook:
    def __init__(self, repo: PolicyRules, defaults: Policy, *, refresh_seconds: float = 1.0) -> None:
        self.repo = repo
        self.defaults = defaults
        self.refresh_seconds = refresh_seconds
        self._rules: list[PolicyRule] = []
        self._version: tuple[int, float] | None = None
        self._checked = 0.0  # monotonic time the last successful refresh began
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._refresher = Refresher(self, "_refresh_if_half_old", refresh_seconds / 2)

    def rules(self) -> list[PolicyRule]:
        """The rules as of at most ``refresh_seconds`` ago (``refresh_seconds`` 0: as of now)."""
        if time.monotonic() - self._checked >= self.refresh_seconds or self._version is None:
            self._refresh()
        elif self.refresh_seconds > 0:
            self._refresher.used()
        return self._rules

    def _refresh(self) -> None:
        began = time.monotonic()
        with self._guard():
            version = self.repo.version()
            if version != self._version:
                self._rules = self.repo.list()
                self._version = version
            self._checked = max(self._checked, began)

    def _refresh_if_half_old(self) -> None:
        if time.monotonic() - self._checked >= self.refresh_seconds / 2:
            self._refresh()

    def invalidate(self) -> None:
        """Re-read on next use (after this process changed a rule)."""
        with self._guard():
            self._checked = 0.0

    def _guard(self) -> threading.Lock:
        if self._pid != os.getpid():  # forked (a prefork pool): the refresher may have held the lock
            self._pid, self._lock = os.getpid(), threading.Lock()
        return self._lock

    def for_key(self, bucket: str, key: str) -> Policy:
        return resolve(self.defaults, self.rules(), bucket, key)

    def prefix_setting(self, bucket: str, key: str, name: str) -> str | None:
        """The prefix of the rule that sets ``name`` for ``bucket/key`` (None: the defaults do)."""
        return setting_prefix(self.rules(), bucket, key, name)

    # ---- changes (the admin API): the catalog first, then this process re-reads at once ----------
    def stored(self) -> list[PolicyRule]:
        """The rules as the catalog has them now (not this process's copy)."""
        return self.repo.list()

    def get(self, rule_id: int) -> PolicyRule | None:
        return self.repo.get(rule_id)

    def save(self, rule: PolicyRule) -> tuple[PolicyRule, bool]:
        """Create the rule for (bucket, prefix), or replace its settings; True when it is new.
        Raises ``ValueError`` for a rule that does not validate."""
        existing = {(r.bucket, r.prefix) for r in self.repo.list()}
        saved = self.repo.upsert(rule)
        self.invalidate()
        return saved, (rule.bucket, rule.prefix) not in existing

    def delete(self, rule_id: int) -> bool:
        removed = self.repo.delete(rule_id)
        if removed:
            self.invalidate()
        return removed

    def effective(self, bucket: str, key: str) -> tuple[Policy, list[PolicyRule]]:
        """The policy ``bucket/key`` gets now, and the rules that match it in the order applied."""
        rules = self.repo.list()
        matching = sorted((r for r in rules if r.bucket in ("*", bucket) and key.startswith(r.prefix)),
                          key=lambda r: (r.bucket != "*", len(r.prefix)))
        return resolve(self.defaults, rules, bucket, key), matching

    def for_bucket(self, bucket: str) -> Policy:
        """The bucket-level policy (prefix ``""``): what bucket-wide operations follow."""
        return resolve(self.defaults, [r for r in self.rules() if r.prefix == ""], bucket, "")
