"""Every counter, gauge and histogram Ferry exposes, and the small functions the services
call to move them (the services never import prometheus_client themselves)."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from app.metrics import storage  # noqa: F401  (sample files allocated before the first metric)

CACHE_REQUESTS = Counter("ferry_cache_requests_total", "Object reads by cache outcome",
                         ["bucket", "tenant", "outcome"])
CACHE_BYTES = Counter("ferry_cache_served_bytes_total", "Bytes served to clients by cache outcome",
                      ["bucket", "outcome"])
CACHE_EVICTIONS = Counter("ferry_cache_evictions_total", "Cache entries evicted", ["reason"])
CACHE_ADMISSIONS = Counter("ferry_cache_admissions_total",
                           "Misses judged by frequency admission: room (cached, nothing evicted), admitted (cached "
                           "in place of less frequent entries), partial (as many blocks as the free room holds) or "
                           "refused (read through uncached)", ["decision"])
CACHE_PREFETCHED_BYTES = Counter("ferry_cache_prefetched_bytes_total",
                                 "Bytes fetched into the cache ahead of any reader", ["kind"])
CACHE_PREFETCH_UNREAD_BYTES = Counter("ferry_cache_prefetch_unread_bytes_total",
                                      "Bytes fetched ahead of a sequential reader that it turned away from or stopped "
                                      "before reading (the cost of a wrong prediction)")
CACHE_EVICTED_BYTES = Counter("ferry_cache_evicted_bytes_total", "Bytes evicted from the cache", ["reason"])
REMOTE_FETCH_BYTES = Counter("ferry_cache_remote_fetch_bytes_total", "Bytes fetched from the remote to fill the cache")
CACHE_CORRUPT = Counter("ferry_cache_corrupt_fills_total",
                        "Fills whose bytes did not match the remote's stored checksum (discarded, never served again)")
SINGLEFLIGHT_WAITS = Histogram("ferry_cache_singleflight_wait_seconds",
                               "Time a reader waited for another reader's fetch of the same block",
                               buckets=(0.001, 0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
REVALIDATIONS = Counter("ferry_cache_revalidations_total", "Revalidations of cached entries by result",
                        ["result"])



def evicted(reason: str, entries: int, nbytes: int) -> None:
    CACHE_EVICTIONS.labels(reason).inc(entries)
    CACHE_EVICTED_BYTES.labels(reason).inc(nbytes)


def admission_decided(decision: str) -> None:
    CACHE_ADMISSIONS.labels(decision).inc()


def prefetched(kind: str, nbytes: int) -> None:
    CACHE_PREFETCHED_BYTES.labels(kind).inc(nbytes)


def prefetch_unread(nbytes: int) -> None:
    CACHE_PREFETCH_UNREAD_BYTES.inc(nbytes)


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
                           "(the owner answered) or fallback (read from the remote instead); owned "
                           "(a read the owner answered from its block file by name) or owned-refused "
                           "(it could not: the read went the usual way)", ["result"])
FLEET_SERVED = Counter("ferry_fleet_served_total", "Requests of the internal endpoint by status", ["status"])
FLEET_SERVED_BYTES = Counter("ferry_fleet_served_bytes_total", "Block bytes sent to peers")


FLEET_PEER_RELAYED = Counter("ferry_fleet_peer_relayed_total",
                             "Objects this node served from their owners without keeping a copy (its "
                             "first reads of them, below FERRY_FLEET_COPY_READS)")


READ_AHEAD_BYTES = Counter("ferry_read_ahead_bytes_total",
                           "Bytes of reads the cache passed through: fetched ahead from the remote in "
                           "windows (fetched), served from those windows (served)", ["outcome"])


def read_ahead(outcome: str, nbytes: int) -> None:
    READ_AHEAD_BYTES.labels(outcome).inc(nbytes)


def fleet_peer_read(result: str) -> None:
    FLEET_PEER_READS.labels(result).inc()


def peer_relayed() -> None:
    FLEET_PEER_RELAYED.inc()


def fleet_served(status: int, nbytes: int = 0) -> None:
    FLEET_SERVED.labels(str(status)).inc()
    if nbytes:
        FLEET_SERVED_BYTES.inc(nbytes)


def revalidated(result: str) -> None:
    """result: unchanged, changed, deleted, error, deferred (a serve-stale read answered before it)."""
    REVALIDATIONS.labels(result).inc()


# Sizing (app/services/cache/sizing.py): the miss-ratio curve at the budget, and what the cache measured
# on the same reads, per bucket. Each serving process keeps its own curves and sets its own values
# every 30 s ("liveall": one series per live worker, a ``pid`` label in multiprocess mode).
CACHE_PREDICTED_HIT_RATIO = Gauge("ferry_cache_predicted_hit_ratio",
                                  "Hit ratio the miss-ratio curve predicts for the bucket's reads at the node's "
                                  "cache budget (less dirty bytes), since this process started",
                                  ["bucket"], multiprocess_mode="liveall")
CACHE_MEASURED_HIT_RATIO = Gauge("ferry_cache_measured_hit_ratio",
                                 "Hit ratio the read cache measured on the same reads (hit or stale over reads)",
                                 ["bucket"], multiprocess_mode="liveall")


def sizing_ratios(rows: dict[str, tuple[float, float]]) -> None:
    """bucket -> (predicted, measured) hit ratio, set together."""
    for bucket, (predicted, measured) in rows.items():
        CACHE_PREDICTED_HIT_RATIO.labels(bucket).set(predicted)
        CACHE_MEASURED_HIT_RATIO.labels(bucket).set(measured)



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


# ---- destage (app/services/destage/destager.py) ----------------------------------------------------------

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
    """One remote call's figures, from botocore's events or from the lean GET (``adapters.remote.get``)."""
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


