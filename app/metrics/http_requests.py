"""S3 request figures: what one request did (``RequestStats``), added up in batches and written
to the request metrics every ``FLUSH_SECONDS`` (instrumented in ``app/s3/app.py``)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import os
import time
from collections.abc import Callable, MutableMapping
from typing import Any

from app import slowlog
from app.metrics.definitions import (
    CACHE_BYTES,
    CACHE_REQUESTS,
    HTTP_DURATION,
    HTTP_IN_FLIGHT,
    HTTP_REQUEST_BYTES,
    HTTP_REQUESTS,
    HTTP_RESPONSE_BYTES,
    UNKNOWN_OPERATION,
)


class RequestStats:
    """What one S3 request did; filled in while it runs, recorded once when it ends.

    A mutable holder (not a bare value) sits in the context variable so that code running in a
    worker thread (which gets a copy of the context) can still set the outcome.
    """

    __slots__ = ("auth_at", "bucket", "bytes_in", "bytes_out", "elapsed", "first_byte_at", "key", "operation",
                 "outcome", "started", "status", "token")

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.operation = UNKNOWN_OPERATION
        self.outcome: str | None = None
        self.status = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.elapsed = 0.0
        self.auth_at: float | None = None  # stage marks (perf_counter), for app/slowlog.py
        self.first_byte_at: float | None = None
        self.bucket = ""
        self.key = ""
        self.token: contextvars.Token[RequestStats | None] | None = None

    def wrap_receive(self, receive: Callable[[], Any]) -> Callable[[], Any]:
        async def counted() -> MutableMapping[str, Any]:
            message: MutableMapping[str, Any] = await receive()
            self.bytes_in += len(message.get("body", b""))
            return message

        return counted

    def wrap_send(self, send: Callable[[MutableMapping[str, Any]], Any]) -> Callable[[MutableMapping[str, Any]], Any]:
        """Counts what reaches the server, whatever path produced the response."""

        async def counted(message: MutableMapping[str, Any]) -> None:
            kind = message["type"]
            if kind == "http.response.body":
                self.bytes_out += len(message.get("body", b""))
            elif kind == "http.response.start":
                self.status = int(message["status"])
                self.first_byte_at = time.perf_counter()
            elif kind == "http.response.zerocopysend":
                self.bytes_out += message.get("count") or 0
            elif kind == "http.response.pathsend":
                with contextlib.suppress(OSError):
                    self.bytes_out += os.stat(message["path"]).st_size
            await send(message)

        return counted


_CURRENT: contextvars.ContextVar[RequestStats | None] = contextvars.ContextVar("ferry_request_stats", default=None)

# Request figures are added up in plain Python and written to prometheus_client in batches: in
# multiprocess mode every write is a locked mmap update (~5 us, six per request), which would cost
# a small cache hit a fifth of its time. A batch is written FLUSH_SECONDS after the first request
# that needs it, by a callback on the event loop (where requests end, so no lock is needed), and
# before every /metrics or /admin/stats answer of this process.
FLUSH_SECONDS = 0.5


class _Batch:
    __slots__ = ("bytes_in", "counts", "in_flight", "requests", "scheduled_on")

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str], list[Any]] = {}  # (operation, outcome) -> [count, bytes out, latencies]
        self.bytes_in: dict[str, int] = {}
        self.counts: dict[tuple[Any, tuple[str, ...]], float] = {}  # (counter, labels) -> amount (cache figures)
        self.in_flight = 0
        self.scheduled_on: asyncio.AbstractEventLoop | None = None  # the loop holding the pending flush


_BATCH = _Batch()
_HTTP_CHILDREN: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
_HTTP_IN_BYTES: dict[str, Any] = {}
_COUNTER_CHILDREN: dict[tuple[Any, tuple[str, ...]], Any] = {}


def _count(counter: Any, labels: tuple[str, ...], amount: float) -> None:
    """Add to a labelled counter in the next batch (a hit counts two: its outcome, its bytes)."""
    counts = _BATCH.counts
    key = (counter, labels)
    counts[key] = counts.get(key, 0) + amount
    _schedule_flush()


def _schedule_flush() -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no event loop (a script, a test): write at once
        flush_requests()
        return
    if _BATCH.scheduled_on is loop:
        return
    _BATCH.scheduled_on = loop  # (a flush left on a loop that ended is replaced by this one)
    loop.call_later(FLUSH_SECONDS, _scheduled_flush)


def _scheduled_flush() -> None:
    _BATCH.scheduled_on = None
    flush_requests()
    if _BATCH.in_flight:  # keep the in-flight gauge current during long transfers
        _schedule_flush()


def flush_requests() -> None:
    """Write this process's pending request figures to the metrics. Call it on the event loop."""
    batch = _BATCH
    requests, batch.requests = batch.requests, {}
    bytes_in, batch.bytes_in = batch.bytes_in, {}
    counts, batch.counts = batch.counts, {}
    for (counter, labels), amount in counts.items():
        child = _COUNTER_CHILDREN.get((counter, labels))
        if child is None:
            child = _COUNTER_CHILDREN[(counter, labels)] = counter.labels(*labels)
        child.inc(amount)
    for key, (count, out, latencies) in requests.items():
        children = _HTTP_CHILDREN.get(key)
        if children is None:
            children = (HTTP_REQUESTS.labels(*key), HTTP_RESPONSE_BYTES.labels(*key), HTTP_DURATION.labels(*key))
            _HTTP_CHILDREN[key] = children
        counter, out_bytes, duration = children
        counter.inc(count)
        if out:
            out_bytes.inc(out)
        _observe_all(duration, latencies)
    for operation, nbytes in bytes_in.items():
        child = _HTTP_IN_BYTES.get(operation)
        if child is None:
            child = _HTTP_IN_BYTES[operation] = HTTP_REQUEST_BYTES.labels(operation)
        child.inc(nbytes)
    HTTP_IN_FLIGHT.set(batch.in_flight)


def _observe_all(histogram: Any, values: list[float]) -> None:
    """``observe`` for many values with one write per bucket touched (same result as one by one)."""
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for value in values:  # a prometheus_client without these internals
            histogram.observe(value)
        return
    counts = [0] * len(bounds)
    for value in values:
        counts[bisect.bisect_left(bounds, value)] += 1  # the first bound >= value; the last is +Inf
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)
    total.inc(sum(values))


def request_started() -> RequestStats:
    """Called by the S3 entry point as a request arrives; pair with ``request_finished``."""
    stats = RequestStats()
    stats.token = _CURRENT.set(stats)
    _BATCH.in_flight += 1
    _schedule_flush()
    return stats


def set_operation(name: str) -> None:
    """The S3 operation (router Route.name) of the request being served."""
    stats = _CURRENT.get()
    if stats is not None:
        stats.operation = name


def mark_authorized(bucket: str | None, key: str | None) -> None:
    """The request being served passed authentication and authorization (a stage for the slow log)."""
    stats = _CURRENT.get()
    if stats is not None:
        stats.auth_at = time.perf_counter()
        stats.bucket = bucket or ""
        stats.key = key or ""


def set_outcome(outcome: str) -> None:
    """How the request being served was answered: hit, miss, stale, bypass (reads).

    The cache calls this while it serves; a no-op outside an S3 request (background jobs). Other
    requests get ``ok``/``client_error``/``error`` from their status; a 5xx is always ``error``.
    """
    stats = _CURRENT.get()
    if stats is not None:
        stats.outcome = outcome


def current_outcome() -> str | None:
    stats = _CURRENT.get()
    return stats.outcome if stats is not None else None


def outcome_of(stats: RequestStats) -> str:
    status = stats.status
    if status == 0:
        return "aborted"  # the client left before an answer was sent
    if status >= 500:
        return "error"
    if stats.outcome:
        return stats.outcome
    return "client_error" if status >= 400 else "ok"


def request_finished(stats: RequestStats, *, aborted: bool = False, failed: bool = False) -> None:
    """Records one request; ``aborted``: the client left before the response's end; ``failed``:
    the server could not finish it (an exception after the headers went out): an ``error``.

    Leaves the final ``outcome`` and ``elapsed`` seconds in ``stats`` (for the access log).
    """
    if stats.token is not None:
        _CURRENT.reset(stats.token)
        stats.token = None
    elapsed = stats.elapsed = time.perf_counter() - stats.started
    outcome = stats.outcome = "error" if failed else "aborted" if aborted else outcome_of(stats)
    batch = _BATCH
    batch.in_flight -= 1
    key = (stats.operation, outcome)
    pending = batch.requests.get(key)
    if pending is None:
        pending = batch.requests[key] = [0, 0, []]
    pending[0] += 1
    pending[1] += stats.bytes_out
    pending[2].append(elapsed)
    if stats.bytes_in:
        batch.bytes_in[stats.operation] = batch.bytes_in.get(stats.operation, 0) + stats.bytes_in
    start = stats.started
    slowlog.record(elapsed, stats.auth_at - start if stats.auth_at is not None else None,
                   stats.first_byte_at - start if stats.first_byte_at is not None else None,
                   stats.operation, stats.status, outcome, stats.bucket, stats.key, stats.bytes_in, stats.bytes_out)
    _schedule_flush()

def cache_outcome(outcome: str, bucket: str, tenant: int | None) -> None:
    """One object read: hit, miss, stale (served past policy during an outage) or bypass.

    Also labels the HTTP request being served with the outcome (``set_outcome``).
    """
    _count(CACHE_REQUESTS, (bucket, str(tenant) if tenant is not None else "", outcome), 1)
    set_outcome(outcome)


def served_bytes(outcome: str, bucket: str, nbytes: int) -> None:
    """Bytes a read served from the cache (written with the next batch)."""
    _count(CACHE_BYTES, (bucket, outcome), nbytes)
