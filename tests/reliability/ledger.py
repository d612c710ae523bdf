"""What a mixed load wrote and read, and what the gateway may therefore answer afterwards.

Each key has one writer thread, so its operations form one sequence. Every operation is
``acked`` (the client got its success), ``refused`` (an S3 error answer: it did not happen) or
``unknown`` (the connection died: it may or may not have committed). A read may return any state
the key ever had or may have had (``possible``); after the faults, the key must hold the state of
its last acknowledged operation or of a later unknown one (``allowed_final``).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field

from tests.reliability.record import Record

ABSENT = "absent"  # the state of a deleted (or never written) key


@dataclass
class Op:
    state: str  # sha256 of the body, or ABSENT for a delete
    size: int
    outcome: str = "in-flight"  # in-flight -> acked | refused | unknown


@dataclass
class KeyHistory:
    initial: str = ABSENT  # a key seeded on the remote before the test starts has its sha here
    initial_size: int = 0
    ops: list[Op] = field(default_factory=list)

    def possible(self) -> set[str]:
        return {self.initial} | {op.state for op in self.ops if op.outcome != "refused"}

    def allowed_final(self) -> set[str]:
        last_acked = max((i for i, op in enumerate(self.ops) if op.outcome == "acked"), default=-1)
        allowed = {self.initial} if last_acked < 0 else {self.ops[last_acked].state}
        allowed |= {op.state for op in self.ops[last_acked + 1:] if op.outcome in ("unknown", "in-flight")}
        return allowed

    def acked_states(self) -> set[str]:
        return {op.state for op in self.ops if op.outcome == "acked"} | {self.initial}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Ledger:
    def __init__(self, record: Record) -> None:
        self.record = record
        self.keys: dict[str, KeyHistory] = {}
        self._lock = threading.Lock()

    def seed(self, key: str, body: bytes) -> None:
        with self._lock:
            self.keys[key] = KeyHistory(initial=sha(body), initial_size=len(body))

    def begin(self, key: str, state: str, size: int) -> Op:
        op = Op(state, size)
        with self._lock:
            self.keys.setdefault(key, KeyHistory()).ops.append(op)
        self.record.add(operations=1)
        return op

    def read(self, key: str, state: str, size: int, *, where: str) -> None:
        """A complete read (or a NoSuchKey, state ABSENT) of ``key``: corrupted unless the key
        could have held it."""
        self.record.add(operations=1, bytes_verified=size if state != ABSENT else 0)
        with self._lock:
            history = self.keys.get(key, KeyHistory())
            ok = state in history.possible()
        if not ok:
            self.record.add(corrupted=1)
            self.record.odd(f"{where}: {key} read {state[:12]} ({size} B), never written")

    def verify_final(self, key: str, state: str, size: int, *, where: str) -> bool:
        """The key's state after the faults: lost if an acknowledged write is missing."""
        with self._lock:
            history = self.keys.get(key, KeyHistory())  # never written: it must be absent
            allowed = history.allowed_final()
            possible = history.possible()
        self.record.add(bytes_verified=size if state != ABSENT else 0)
        if state in allowed:
            return True
        if state in possible:  # an older version: the newer acknowledged one is lost
            self.record.add(lost=1)
            self.record.odd(f"{where}: {key} holds {state[:12]}, expected one of {sorted(s[:12] for s in allowed)}")
        else:
            self.record.add(corrupted=1)
            self.record.odd(f"{where}: {key} holds {state[:12]} ({size} B), never written")
        return False
