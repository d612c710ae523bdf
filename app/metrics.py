"""Prometheus metrics: the figures an operator alerts on.

The services call the small functions below; they never import prometheus_client themselves.
Several uvicorn workers share one ``/metrics``: ``ferry serve`` sets PROMETHEUS_MULTIPROC_DIR
before any worker imports this module, every process then writes its samples to files there, and
the scrape adds them up (``exposition``). Figures that live in the catalog (cached, pinned and
dirty bytes, destage lag) are read at scrape time, once per scrape, by ``CatalogCollector``.
See docs/operations.md ("Metrics and alerts") for what each figure means.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import os
import time
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, generate_latest, mmap_dict, values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from app import slowlog
from app.domain.states import DIRTY


class _AllocatedMmapedDict(mmap_dict.MmapedDict):  # type: ignore[misc]
    """prometheus_client's sample file (multiprocess mode), with its disk blocks allocated before
    the mmap writes to them. The library grows a sparse file with ``truncate``; a write through
    the mmap into a hole that a full disk cannot back kills the worker with SIGBUS. Allocating
    with ``posix_fallocate`` first turns that into an OSError (ENOSPC) at worst."""

    def __init__(self, filename: str, read_mode: bool = False) -> None:
        if not read_mode:
            fd = os.open(filename, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.posix_fallocate(fd, 0, max(os.fstat(fd).st_size, mmap_dict._INITIAL_MMAP_SIZE))
            finally:
                os.close(fd)
        super().__init__(filename, read_mode)

    def _init_value(self, key: str) -> None:
        encoded = len(key.encode("utf-8"))
        needed = self._used + 4 + encoded + (8 - (encoded + 4) % 8) + 16  # the library's record size
        capacity = self._capacity
        while needed > capacity:
            capacity *= 2
        if capacity != self._capacity:
            os.posix_fallocate(self._f.fileno(), 0, capacity)
        super()._init_value(key)


values.MmapedDict = _AllocatedMmapedDict  # where MultiProcessValue opens its files

CACHE_REQUESTS = Counter("ferry_cache_requests_total", "Object reads by cache outcome",
                         ["bucket", "tenant", "outcome"])
CACHE_BYTES = Counter("ferry_cache_served_bytes_total", "Bytes served to clients by cache outcome",
                      ["bucket", "outcome"])
CACHE_EVICTIONS = Counter("ferry_cache_evictions_total", "Cache entries evicted", ["reason"])
CACHE_EVICTED_BYTES = Counter("ferry_cache_evicted_bytes_total", "Bytes evicted from the cache", ["reason"])
REMOTE_FETCH_BYTES = Counter("ferry_cache_remote_fetch_bytes_total", "Bytes fetched from the remote to fill the cache")
CACHE_CORRUPT = Counter("ferry_cache_corrupt_fills_total",
                        "Fills whose bytes did not match the remote's stored checksum (discarded, never served again)")
SINGLEFLIGHT_WAITS = Histogram("ferry_cache_singleflight_wait_seconds",
                               "Time a reader waited for another reader's fetch of the same block",
                               buckets=(0.001, 0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
REVALIDATIONS = Counter("ferry_cache_revalidations_total", "Revalidations of cached entries by result",
                        ["result"])


def cache_outcome(outcome: str, bucket: str, tenant: int | None) -> None:
    """One object read: hit, miss, stale (served past policy during an outage) or bypass.

    Also labels the HTTP request being served with the outcome (``set_outcome``).
    """
    CACHE_REQUESTS.labels(bucket, str(tenant) if tenant is not None else "", outcome).inc()
    set_outcome(outcome)


def served_bytes(outcome: str, bucket: str, nbytes: int) -> None:
    CACHE_BYTES.labels(bucket, outcome).inc(nbytes)


def evicted(reason: str, entries: int, nbytes: int) -> None:
    CACHE_EVICTIONS.labels(reason).inc(entries)
    CACHE_EVICTED_BYTES.labels(reason).inc(nbytes)


def remote_fetched(nbytes: int) -> None:
    REMOTE_FETCH_BYTES.inc(nbytes)


def cache_corrupt() -> None:
    CACHE_CORRUPT.inc()


def singleflight_waited(seconds: float) -> None:
    SINGLEFLIGHT_WAITS.observe(seconds)


HTTP_ZEROCOPY_BYTES = Counter("ferry_http_zerocopy_bytes_total",
                              "Response body bytes handed to the server's sendfile (cache hits over plain HTTP)")


def zerocopy_sent(nbytes: int) -> None:
    HTTP_ZEROCOPY_BYTES.inc(nbytes)


FLEET_PEER_READS = Counter("ferry_fleet_peer_reads_total",
                           "Block fetches this node sent to the block's owner, by how they ended: peer "
                           "(the owner answered) or fallback (read from the remote instead)", ["result"])
FLEET_SERVED = Counter("ferry_fleet_served_total", "Requests of the internal endpoint by status", ["status"])
FLEET_SERVED_BYTES = Counter("ferry_fleet_served_bytes_total", "Block bytes sent to peers")


def fleet_peer_read(result: str) -> None:
    FLEET_PEER_READS.labels(result).inc()


def fleet_served(status: int, nbytes: int = 0) -> None:
    FLEET_SERVED.labels(str(status)).inc()
    if nbytes:
        FLEET_SERVED_BYTES.inc(nbytes)


def revalidated(result: str) -> None:
    """result: unchanged, changed, deleted, error, deferred (a serve-stale read answered before it)."""
    REVALIDATIONS.labels(result).inc()


# ---- S3 requests (instrumented in app/s3/app.py) ------------------------------------------------

# Latency of a whole request, until its last byte is handed to the server: from sub-millisecond
# hits to multi-GiB bodies.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

HTTP_REQUESTS = Counter("ferry_http_requests_total", "S3 requests by operation and outcome",
                        ["operation", "outcome"])
HTTP_REQUEST_BYTES = Counter("ferry_http_request_bytes_total",
                             "Request body bytes received (as sent on the wire, aws-chunked framing included)",
                             ["operation"])
HTTP_RESPONSE_BYTES = Counter("ferry_http_response_bytes_total", "Response body bytes sent",
                              ["operation", "outcome"])
HTTP_DURATION = Histogram("ferry_http_request_duration_seconds",
                          "S3 request latency, until the response is fully sent", ["operation", "outcome"],
                          buckets=_LATENCY_BUCKETS)
HTTP_IN_FLIGHT = Gauge("ferry_http_requests_in_flight", "S3 requests being served (updated every FLUSH_SECONDS)",
                       multiprocess_mode="livesum")

UNKNOWN_OPERATION = "Unknown"  # the request was not understood far enough to name its operation


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
    __slots__ = ("bytes_in", "in_flight", "requests", "scheduled_on")

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str], list[Any]] = {}  # (operation, outcome) -> [count, bytes out, latencies]
        self.bytes_in: dict[str, int] = {}
        self.in_flight = 0
        self.scheduled_on: asyncio.AbstractEventLoop | None = None  # the loop holding the pending flush


_BATCH = _Batch()
_HTTP_CHILDREN: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
_HTTP_IN_BYTES: dict[str, Any] = {}


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


# ---- destage (app/services/destage.py) ----------------------------------------------------------

DESTAGE_ATTEMPTS = Counter("ferry_destage_attempts_total",
                           "Destage runs of a claimed journal row, by outcome "
                           "(durable, superseded, retry, failed, lost)", ["outcome"])
DESTAGE_FAILURES = Counter("ferry_destage_failures_total",
                           "Destage runs that did not reach the remote (outcome retry or failed)")
DESTAGED_BYTES = Counter("ferry_destaged_bytes_total", "Bytes made durable on the remote by destage")
DESTAGE_DELAY = Histogram("ferry_destage_delay_seconds",
                          "From the client's acknowledgement to durable on the remote (the at-risk window)",
                          buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600, 14400))


def destage_outcome(outcome: str, nbytes: int, acknowledged_at: float | None) -> None:
    """One destage run ended; ``acknowledged_at`` (unix time) of the write, to measure the window."""
    DESTAGE_ATTEMPTS.labels(outcome).inc()
    if outcome in ("retry", "failed"):
        DESTAGE_FAILURES.inc()
    elif outcome == "durable":
        if nbytes:
            DESTAGED_BYTES.inc(nbytes)
        if acknowledged_at is not None:
            DESTAGE_DELAY.observe(max(0.0, time.time() - acknowledged_at))


# ---- the remote (botocore event hooks on RemoteStore's client) ----------------------------------

REMOTE_REQUESTS = Counter("ferry_remote_requests_total",
                          "Remote S3 API calls by operation and outcome (ok, client_error, server_error, network)",
                          ["operation", "outcome"])
REMOTE_DURATION = Histogram("ferry_remote_request_duration_seconds",
                            "Remote S3 API call latency, retries included; for GetObject until the headers",
                            ["operation"], buckets=_LATENCY_BUCKETS)
REMOTE_RETRIES = Counter("ferry_remote_retries_total", "Retries made of remote calls (botocore and the lean GET)", ["operation"])
# A GET whose headers were fine (counted ok above) can still fail in its body: cut short, reset,
# or bytes that do not match the stored checksum. Those are remote errors too (the status page's).
REMOTE_BODY_ERRORS = Counter("ferry_remote_body_errors_total",
                             "Remote GET bodies that failed after good headers (truncated, network, corrupt)",
                             ["reason"])

_T0 = "ferry_metrics_t0"


def instrument_boto_client(client: Any) -> None:
    """Time every API call of a botocore client and count its errors.

    'before-call' starts the clock in the call's context; 'after-call' (an HTTP answer, after
    botocore's retries) or 'after-call-error' (no answer: connection refused, timeout) stops it.
    """

    def before(context: dict[str, Any], **_: Any) -> None:
        context[_T0] = time.perf_counter()

    def after(http_response: Any, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        status = int(getattr(http_response, "status_code", 0) or 0)
        outcome = "ok" if status < 400 else ("client_error" if status < 500 else "server_error")
        _remote_done(model.name, outcome, context)
        retries = (parsed or {}).get("ResponseMetadata", {}).get("RetryAttempts", 0)
        if retries:
            REMOTE_RETRIES.labels(model.name).inc(retries)

    def after_error(context: dict[str, Any], event_name: str, **_: Any) -> None:
        _remote_done(event_name.rsplit(".", 1)[-1], "network", context)

    events = client.meta.events
    events.register("before-call.s3.*", before, unique_id="ferry-metrics-before")
    events.register("after-call.s3.*", after, unique_id="ferry-metrics-after")
    events.register("after-call-error.s3.*", after_error, unique_id="ferry-metrics-after-error")


def remote_call_done(operation: str, outcome: str, started: float | None, retries: int = 0) -> None:
    """One remote call's figures, from botocore's events or from the lean GET (``remote_get``)."""
    REMOTE_REQUESTS.labels(operation, outcome).inc()
    if started is not None:
        REMOTE_DURATION.labels(operation).observe(time.perf_counter() - started)
    if retries:
        REMOTE_RETRIES.labels(operation).inc(retries)


def remote_body_failed(reason: str) -> None:
    """A remote body failed after its headers: ``truncated``, ``network`` or ``corrupt``."""
    REMOTE_BODY_ERRORS.labels(reason).inc()


def _remote_done(operation: str, outcome: str, context: dict[str, Any]) -> None:
    remote_call_done(operation, outcome, context.pop(_T0, None))


# ---- catalog-derived gauges, computed at scrape time --------------------------------------------


@dataclass(frozen=True)
class TenantUsage:
    tenant: str  # tenant id as text ("" for entries without a tenant), as in the counters' labels
    name: str
    cached_bytes: int
    pinned_bytes: int
    entries: int
    quota_bytes: int | None = None


@dataclass(frozen=True)
class NodeStats:
    """Aggregates of this node's catalog rows (see app/adapters/catalog/stats.py)."""

    tenants: list[TenantUsage] = field(default_factory=list)
    dirty_versions: dict[str, int] = field(default_factory=dict)  # by journal state (dirty states)
    dirty_bytes: int = 0
    oldest_dirty_age: float = 0.0  # seconds; 0 when nothing is dirty
    multipart_bytes: int = 0  # parts of open multipart uploads

    @property
    def cached_bytes(self) -> int:
        return sum(t.cached_bytes for t in self.tenants)

    @property
    def pinned_bytes(self) -> int:
        return sum(t.pinned_bytes for t in self.tenants)

    @property
    def queue_depth(self) -> int:
        return self.dirty_versions.get("buffered", 0) + self.dirty_versions.get("destaging", 0)


class StatsSource(Protocol):
    def node_stats(self) -> NodeStats: ...


class CatalogCollector:
    """Gauges read from the catalog when scraped: one scrape runs one set of aggregate queries.

    A scrape always queries; the status page's polls (``stats()``) reuse a result up to ``ttl``
    seconds old, so many open pages cost one set of queries per ``ttl``, not one each.
    """

    def __init__(self, source: StatsSource, *, write_buffer_bytes: int, cache_budget_bytes: int,
                 ttl: float = 2.0) -> None:
        self.source = source
        self.write_buffer_bytes = write_buffer_bytes
        self.cache_budget_bytes = cache_budget_bytes
        self.ttl = ttl
        self._cached: tuple[float, NodeStats, float] | None = None

    def stats(self, max_age: float | None = None) -> NodeStats:
        """Aggregates at most ``max_age`` (default ``ttl``) seconds old; raises if the catalog cannot be read."""
        now = time.monotonic()
        cached = self._cached
        if cached is not None and now - cached[0] < (self.ttl if max_age is None else max_age):
            return cached[1]
        started = time.perf_counter()
        stats = self.source.node_stats()
        self._cached = (now, stats, time.perf_counter() - started)
        return stats

    def describe(self) -> Iterable[Metric]:
        return list(self._families(None, 0.0))

    def collect(self) -> Iterable[Metric]:
        try:
            stats = self.stats(max_age=0.0)
        except Exception:
            stats = None
        took = self._cached[2] if self._cached else 0.0
        return list(self._families(stats, took))

    def _families(self, stats: NodeStats | None, took: float) -> Iterator[Metric]:
        yield GaugeMetricFamily("ferry_write_buffer_bytes", "Write buffer budget (FERRY_WRITE_BUFFER_BYTES)",
                                value=self.write_buffer_bytes)
        yield GaugeMetricFamily("ferry_cache_budget_bytes", "Read cache budget (FERRY_CACHE_BYTES)",
                                value=self.cache_budget_bytes)
        yield GaugeMetricFamily("ferry_catalog_up", "1 if the catalog answered this scrape's queries",
                                value=0 if stats is None else 1)
        yield GaugeMetricFamily("ferry_catalog_scrape_duration_seconds",
                                "Time the catalog aggregate queries took", value=took)
        s = stats or NodeStats()
        cached = GaugeMetricFamily("ferry_cache_bytes", "Bytes held in the read cache on this node, by tenant",
                                   labels=["tenant"])
        pinned = GaugeMetricFamily("ferry_cache_pinned_bytes", "Cached bytes under pinned policies, by tenant",
                                   labels=["tenant"])
        entries = GaugeMetricFamily("ferry_cache_entries", "Cached objects ready to serve, by tenant",
                                    labels=["tenant"])
        quota = GaugeMetricFamily("ferry_tenant_cache_quota_bytes", "Cache quota of a tenant (when set)",
                                  labels=["tenant"])
        info = GaugeMetricFamily("ferry_tenant_info", "Tenant id to name (join on the tenant label)",
                                 labels=["tenant", "name"])
        for t in s.tenants:
            cached.add_metric([t.tenant], t.cached_bytes)
            pinned.add_metric([t.tenant], t.pinned_bytes)
            entries.add_metric([t.tenant], t.entries)
            if t.quota_bytes is not None:
                quota.add_metric([t.tenant], t.quota_bytes)
            if t.name:
                info.add_metric([t.tenant, t.name], 1)
        yield from (cached, pinned, entries, quota, info)
        versions = GaugeMetricFamily("ferry_dirty_versions", "Journal rows not yet on the remote, by state",
                                     labels=["state"])
        for state in DIRTY:
            versions.add_metric([state.value], s.dirty_versions.get(state.value, 0))
        yield versions
        yield GaugeMetricFamily("ferry_dirty_bytes", "Bytes written by clients and not yet durable on the remote",
                                value=s.dirty_bytes)
        yield GaugeMetricFamily("ferry_multipart_pending_bytes", "Bytes of parts of open multipart uploads",
                                value=s.multipart_bytes)
        yield GaugeMetricFamily("ferry_write_buffer_used_bytes",
                                "What counts against the write buffer: dirty plus open multipart parts",
                                value=s.dirty_bytes + s.multipart_bytes)
        yield GaugeMetricFamily("ferry_destage_queue_depth", "Journal rows waiting for or in destage",
                                value=s.queue_depth)
        yield GaugeMetricFamily("ferry_destage_failed_versions",
                                "Journal rows whose destage gave up (state failed; bytes kept, operator retry)",
                                value=s.dirty_versions.get("failed", 0))
        yield GaugeMetricFamily("ferry_destage_lag_seconds", "Age of the oldest write not yet on the remote",
                                value=s.oldest_dirty_age)


# ---- exposition and multiprocess mode -----------------------------------------------------------


def multiprocess_dir() -> str | None:
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return path if path and os.path.isdir(path) else None


class _Chain:
    """A registry-like object: what ``generate_latest`` needs is only ``collect()``."""

    def __init__(self, *sources: Any) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()


def process_metrics() -> Any:
    """The counters and histograms of every worker (multiprocess mode) or of this process."""
    path = multiprocess_dir()
    return MultiProcessCollector(None, path) if path else REGISTRY


def process_registry() -> Any:
    """What a process without the admin app serves (a Celery worker's own /metrics)."""
    return _Chain(process_metrics())


def exposition(*extra: Any) -> tuple[bytes, str]:
    """The /metrics body and its content type: all workers' samples plus ``extra`` collectors."""
    return generate_latest(_Chain(process_metrics(), *extra)), CONTENT_TYPE_LATEST  # type: ignore[arg-type]


def samples(names: Iterable[str]) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Current values of some metrics (sample names, e.g. ``ferry_http_requests_total``), all workers."""
    wanted = set(names)
    out: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in wanted}
    for family in process_metrics().collect():
        for sample in family.samples:
            if sample.name in wanted:
                out[sample.name].append((dict(sample.labels), float(sample.value)))
    return out


def process_exit() -> None:
    """On a worker's shutdown: write what is pending; its live gauges (requests in flight) stop counting."""
    flush_requests()
    path = multiprocess_dir()
    if path:
        mark_process_dead(os.getpid(), path)
