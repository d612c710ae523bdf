"""Parts being copied ahead to the remote, per object key, so a destage can wait for them.

When a client completes a multipart upload, its last parts may still be on their way to the
remote upload. A destage that listed the remote's parts at that moment would send those parts a
second time, in parallel, halving the link for both. It waits for the copies of its key first.
Shared by the gateway and the in-process destager; a destager in another process (Celery)
does not see them and at worst sends a part twice (still correct).
"""

from __future__ import annotations

import threading


class PartCopies:
    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], int] = {}
        self._changed = threading.Condition()

    def started(self, bucket: str, key: str) -> None:
        with self._changed:
            self._pending[(bucket, key)] = self._pending.get((bucket, key), 0) + 1

    def finished(self, bucket: str, key: str) -> None:
        with self._changed:
            left = self._pending.get((bucket, key), 1) - 1
            if left > 0:
                self._pending[(bucket, key)] = left
            else:
                self._pending.pop((bucket, key), None)
            self._changed.notify_all()

    def wait_idle(self, bucket: str, key: str, timeout: float) -> bool:
        """True once no copy of this key is pending (False: still some after ``timeout``)."""
        with self._changed:
            return self._changed.wait_for(lambda: (bucket, key) not in self._pending, timeout)
