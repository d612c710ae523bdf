"""The figures a reliability test records (format: tests/reliability/README.md).

A test fills a ``Record`` while it runs; the ``recorder`` fixture writes every record it handed
out when the test ends, pass or fail, so a failing run still shows its figures.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUT_ENV = "FERRY_RELIABILITY_OUT"


@dataclass
class Record:
    suite: str
    cls: str
    operations: int = 0
    faults_injected: int = 0
    bytes_verified: int = 0
    lost: int = 0
    corrupted: int = 0
    unexpected: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        """Thread-safe increments: ``rec.add(operations=1, bytes_verified=n)``."""
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def odd(self, what: str) -> None:
        """Something wrong that is neither a loss nor a corruption (a 500, a hang, a leak)."""
        with self._lock:
            if len(self.unexpected) < 50:  # the report stays readable; the count is in the text
                self.unexpected.append(what[:300])

    def as_json(self) -> dict[str, Any]:
        return {"suite": self.suite, "class": self.cls, "operations": self.operations,
                "faults_injected": self.faults_injected, "bytes_verified": self.bytes_verified,
                "lost": self.lost, "corrupted": self.corrupted, "unexpected": list(self.unexpected)}

    def write(self) -> None:
        """Append one JSON line to ``$FERRY_RELIABILITY_OUT/<suite>.jsonl`` (if set)."""
        out = os.environ.get(OUT_ENV)
        if not out:
            return
        Path(out).mkdir(parents=True, exist_ok=True)
        with open(Path(out) / f"{self.suite}.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(self.as_json()) + "\n")

    def assert_clean(self) -> None:
        """The verdict every fault test ends with: nothing lost, nothing corrupted, nothing odd."""
        assert (self.lost, self.corrupted, self.unexpected) == (0, 0, []), self.as_json()
        assert self.operations > 0, "the test tried nothing"
