"""A small tally for the security, bad-input and fuzz suites, written in the reliability record
format (tests/reliability/README.md): one JSON line per (suite, class) to
``$FERRY_RELIABILITY_OUT/<suite>.jsonl``, nothing when the variable is unset.

Every hostile input counts as an operation and an injected fault; one answered otherwise than
expected (a 500, a hang, a wrong code) is listed under ``unexpected``.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

OUT_ENV = "FERRY_RELIABILITY_OUT"


class Tally:
    def __init__(self, suite: str, cls: str) -> None:
        self.suite, self.cls = suite, cls
        self.operations = self.faults_injected = self.bytes_verified = 0
        self.unexpected: list[str] = []
        self._lock = threading.Lock()

    def op(self, *, expected: bool, what: str, hostile: bool = True, verified: int = 0) -> None:
        """One request tried; ``expected``: it got the answer it should."""
        with self._lock:
            self.operations += 1
            self.faults_injected += int(hostile)
            self.bytes_verified += verified
            if not expected and len(self.unexpected) < 50:
                self.unexpected.append(what[:300])

    def as_json(self) -> dict[str, object]:
        return {"suite": self.suite, "class": self.cls, "operations": self.operations,
                "faults_injected": self.faults_injected, "bytes_verified": self.bytes_verified,
                "lost": 0, "corrupted": 0, "unexpected": list(self.unexpected)}

    def write(self) -> None:
        out = os.environ.get(OUT_ENV)
        if not out or not self.operations:
            return
        Path(out).mkdir(parents=True, exist_ok=True)
        with open(Path(out) / f"{self.suite}.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(self.as_json()) + "\n")
