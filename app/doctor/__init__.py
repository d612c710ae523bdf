"""``ferry doctor``: checks a node's settings and dependencies, one line per finding.

Local checks (settings, data directory, TLS files, admin token) live in ``local.py``; the
checks that talk to something (catalog, broker, remotes) in ``remote.py``. ``run`` gathers
them; a finding at level ``fail`` makes the command exit non-zero.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

Level = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Finding:
    """One line of the report: what was checked, how it went, and why."""

    level: Level
    area: str
    detail: str

    def line(self) -> str:
        return f"{self.level.upper():4} {self.area}: {self.detail}"


def report(findings: Iterator[Finding] | list[Finding]) -> tuple[list[str], bool]:
    """The lines to print and whether everything passed (warnings do not fail)."""
    items = list(findings)
    return [f.line() for f in items], all(f.level != "fail" for f in items)
