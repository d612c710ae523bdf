"""The destage lease's clock: how long a write request of a key may still be in flight.

A destage holds its journal row under a lease (``lease_until`` in the catalog). Another worker
may claim the row only once ``lease_until + takeover grace`` has passed (``Journal.claim``,
``Journal.release_expired_leases``). The holder keeps its side of that bargain with this clock:

- ``Lease.renew`` stamps the (monotonic) time *before* it asks the catalog to extend the lease,
  so the holder's idea of its lease ends no later than the catalog's ``lease_until``;
- every request that writes starts under a lease the catalog just confirmed: renewed right
  before it, or, for the first request after the claim, the claim itself (``Lease()``);
- a request body sent under the lease (``Lease.bound``) stops being read once the lease is over:
  the HTTP client drops the connection mid-body and the remote discards the write;
- no request (nor a retry of one) starts once the lease is over: the remote client's
  ``before-send`` hook asks ``check()`` (``Lease.guard`` marks the requests it covers).

What is left in flight after the lease ends is a request whose body was already sent, waiting
for its answer: bounded by the remote client's connect and read timeouts (one attempt, since
no retry starts). The takeover grace is at least that long, so the next holder's first write
starts after the last one of the previous holder ended. Renewals that keep succeeding move the
end forward, so a long upload is never cut while the catalog answers, and the happy path never
waits: the grace only delays the takeover of a row whose holder stopped renewing.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, cast

FRESH = 2 / 3  # of a term: the first request after a claim with this much left is sent unrenewed


class LeaseLost(Exception):
    """Another worker owns the journal row now (or may soon): this one must not write anything remotely."""


_current: contextvars.ContextVar[Lease | None] = contextvars.ContextVar("ferry_destage_lease", default=None)


def check() -> None:
    """Raise LeaseLost if the calling thread sends under a lease that is over (the remote
    client's ``before-send`` hook: a retry of a request must not start after the lease)."""
    lease = _current.get()
    if lease is not None and lease.expired():
        raise LeaseLost(f"the destage lease ended before a request to the remote could start ({lease.what})")


class Lease:
    """The holder's view of one destage lease: renewed through ``renew_in_catalog``."""

    def __init__(self, renew_in_catalog: Callable[[], bool], seconds: float, *, what: str = "",
                 clock: Callable[[], float] = time.monotonic, started: float | None = None) -> None:
        self._renew = renew_in_catalog
        self.seconds = seconds
        self.what = what
        self.clock = clock
        self._lock = threading.Lock()
        # The claim's commit happened after ``started``: the catalog's lease ends later than this.
        self._until = (clock() if started is None else started) + seconds
        self._claimed_just_now = True  # no request was sent under it yet

    def __call__(self) -> bool:
        """The fence, asked right before each request that writes the key: True when the lease
        is ours for another whole term, renewed in the catalog now. The first request after
        the claim needs no renewal while most of the term is left (``FRESH``): the claim's own
        commit just checked the row is ours, as a renewal would, and nothing was read from the
        remote since. Every later one renews (after a refusal and a HEAD, the expectation read
        must be under a lease the catalog still gives us). A small new key's destage thus costs
        one catalog write fewer."""
        first, self._claimed_just_now = self._claimed_just_now, False
        if first and self.remaining() >= self.seconds * FRESH:
            return True
        return self.renew()

    def renew(self) -> bool:
        stamp = self.clock()
        if not self._renew():
            with self._lock:
                self._until = min(self._until, stamp)  # taken over: nothing more may be sent
            return False
        with self._lock:
            self._until = max(self._until, stamp + self.seconds)
        return True

    def remaining(self) -> float:
        with self._lock:
            return self._until - self.clock()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def bound(self, body: BinaryIO) -> BinaryIO:
        """``body``, read only while the lease lasts (the watchdog of a long upload)."""
        return cast(BinaryIO, _FencedBody(body, self))  # the uploader only reads it

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Requests sent by this thread inside the block start only while the lease lasts."""
        token = _current.set(self)
        try:
            yield
        finally:
            _current.reset(token)


def unwrap(body: BinaryIO) -> tuple[BinaryIO, Callable[[], None]]:
    """The file under a body's ``Lease.bound`` wrappers, and a check that raises LeaseLost as
    their reads would: for a sender that hands the file to the kernel (``sendfile``) instead of
    reading it, which must ask the check before every piece it sends."""
    leases: list[Lease] = []
    while isinstance(body, _FencedBody):
        leases.append(body._lease)
        body = body._raw

    def check() -> None:
        for lease in leases:
            if lease.expired():
                raise LeaseLost(f"the destage lease ended while the body was being sent ({lease.what})")

    return body, check


class _FencedBody:
    """A file object whose reads fail with LeaseLost once the lease is over: the HTTP client then
    closes the connection before the body is complete, so the remote never commits the write."""

    def __init__(self, raw: BinaryIO, lease: Lease) -> None:
        self._raw = raw
        self._lease = lease

    def read(self, size: int = -1) -> bytes:
        if self._lease.expired():
            raise LeaseLost(f"the destage lease ended while the body was being sent ({self._lease.what})")
        return self._raw.read(size)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def __getattr__(self, name: str) -> Any:  # seek, tell, fileno-less file API for the HTTP client
        return getattr(self._raw, name)

    def __iter__(self) -> Iterator[bytes]:
        while chunk := self.read(64 * 1024):
            yield chunk
