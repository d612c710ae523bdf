"""A background refresh for a copy of catalog state that requests read on the event loop.

The policy book, the remote routing table and the tenancy table each keep an in-memory copy that
must be no older than an interval when a request uses it. Checked in the request that finds the
copy old, that check is a catalog round trip on the event loop, once per interval per process,
and everything else the loop had to do waits on it (a peer read crosses two processes, so it
paid twice as often as a hit). ``Refresher`` re-checks in a thread of its own every half
interval while the copy is in use, so a request finds it fresh; the owner still checks itself
when the copy is older than the interval (the refresher behind: the catalog slow or away), so
the bound each owner promises is unchanged. A process idle for ``IDLE_PERIODS`` half-intervals
stops refreshing (and polling the catalog) until its next use.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger("ferry.refresher")
IDLE_PERIODS = 20


class Refresher:
    """Calls ``owner.<tick>()`` every ``period`` seconds in a daemon thread while ``used()`` is
    called. It holds its owner weakly: the thread ends with it (tests build many owners)."""

    def __init__(self, owner: object, tick: str, period: float) -> None:
        self._owner = weakref.ref(owner)
        self._tick = tick
        self.period = period
        self._last_use = 0.0
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def used(self) -> None:
        """The copy was just read: keep it fresh (start the thread if it is not running)."""
        self._last_use = time.monotonic()
        thread = self._thread
        if thread is not None and thread.is_alive():  # every request: no syscall here (a forked
            return  # child sees the parent's thread as not alive, and takes the slow path)
        if self._pid != os.getpid():  # forked: the parent's thread is not here, its lock may be held
            self._pid, self._lock, self._thread = os.getpid(), threading.Lock(), None
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=_run, args=(self,), name=f"ferry-refresh-{self._tick}",
                                                daemon=True)
                self._thread.start()

    def _idle(self) -> bool:
        return time.monotonic() - self._last_use > IDLE_PERIODS * self.period

    def _call(self) -> bool:
        """One tick; False once the owner is gone."""
        owner: Any = self._owner()
        if owner is None:
            return False
        tick: Callable[[], None] = getattr(owner, self._tick)
        try:
            tick()
        except Exception as exc:  # the owner's own check in a request will try again, and say why
            log.warning("background refresh %s failed: %s", self._tick, exc)
        return True


def _run(refresher: Refresher) -> None:
    while True:
        time.sleep(refresher.period)
        if refresher._idle() or not refresher._call():
            return
