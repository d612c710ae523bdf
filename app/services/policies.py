"""The policy book: every process resolves policies from an in-memory copy of the rules,
refreshed from the catalog at most every ``refresh_seconds`` so that a change made through the
admin API (on any node) applies to running gateways without a restart."""

from __future__ import annotations

import threading
import time
from typing import Protocol

from app.domain.policy import Policy, PolicyRule, resolve


class PolicyRules(Protocol):
    """The catalog's policy rules (``adapters/catalog/policies.PolicyRepo``) and their version."""

    def version(self) -> tuple[int, float]: ...
    def list(self) -> list[PolicyRule]: ...


class PolicyBook:
    def __init__(self, repo: PolicyRules, defaults: Policy, *, refresh_seconds: float = 1.0) -> None:
        self.repo = repo
        self.defaults = defaults
        self.refresh_seconds = refresh_seconds
        self._rules: list[PolicyRule] = []
        self._version: tuple[int, float] | None = None
        self._checked = 0.0
        self._lock = threading.Lock()

    def rules(self) -> list[PolicyRule]:
        now = time.monotonic()
        if now - self._checked >= self.refresh_seconds:
            with self._lock:
                if now - self._checked >= self.refresh_seconds:
                    self._reload()
                    self._checked = now
        return self._rules

    def _reload(self) -> None:
        version = self.repo.version()
        if version != self._version:
            self._rules = self.repo.list()
            self._version = version

    def invalidate(self) -> None:
        """Re-read on next use (after this process changed a rule)."""
        self._checked = 0.0

    def for_key(self, bucket: str, key: str) -> Policy:
        return resolve(self.defaults, self.rules(), bucket, key)

    def for_bucket(self, bucket: str) -> Policy:
        """The bucket-level policy (prefix ``""``): what bucket-wide operations follow."""
        return resolve(self.defaults, [r for r in self.rules() if r.prefix == ""], bucket, "")
