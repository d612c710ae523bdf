"""A circuit breaker per remote endpoint: a hung or unreachable remote is discovered once, not by
every request waiting out its own timeouts.

Closed: calls go through. After ``failures`` consecutive calls that got no answer (network errors
and timeouts, after the client's own retries), the circuit opens: calls fail at once with
``503 ServiceUnavailable`` without touching the remote. Any HTTP answer, a 5xx or SlowDown
included, proves the remote alive: those are retried by the client and passed on, never a reason to
refuse everyone. After ``cooldown`` seconds it is half-open: one call at a time goes through as a
probe (a probe that never reports back is replaced after another cooldown); an answer closes the
circuit, a failure reopens it.
The destage keeps retrying with its own backoff: an open circuit only makes its attempts cheap.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import botocore.exceptions
from prometheus_client import Counter, Gauge

from app.domain.errors import S3Error

CLOSED, HALF_OPEN, OPEN = 0, 1, 2
STATE_NAMES = {CLOSED: "closed", HALF_OPEN: "half-open", OPEN: "open"}
CIRCUIT_STATE = Gauge("ferry_remote_circuit_state", "Remote circuit breaker: 0 closed, 1 half-open, 2 open",
                      ["endpoint"], multiprocess_mode="max")
CIRCUIT_REJECTED = Counter("ferry_remote_circuit_rejected_total",
                           "Remote calls refused at once because the circuit was open", ["endpoint"])


class CircuitBreaker:
    """Thread-safe breaker; ``before()`` admits or refuses a call, ``record()`` reports its end."""

    def __init__(self, endpoint: str, failures: int = 1, cooldown: float = 5.0) -> None:
        self.endpoint = endpoint
        self.failures = max(1, failures)
        self.cooldown = cooldown
        self._lock = threading.Lock()
        self._state = CLOSED
        self._consecutive = 0
        self._opened_at = 0.0
        self._probe_at: float | None = None  # when the half-open probe in flight started
        CIRCUIT_STATE.labels(endpoint).set(CLOSED)

    @property
    def state(self) -> str:
        with self._lock:
            return STATE_NAMES[self._current()]

    def _current(self) -> int:
        if self._state == OPEN and time.monotonic() - self._opened_at >= self.cooldown:
            self._set(HALF_OPEN)
        return self._state

    def _set(self, state: int) -> None:
        self._state = state
        CIRCUIT_STATE.labels(self.endpoint).set(state)

    def before(self) -> None:
        """Raise 503 at once when the remote is marked down (or another call is probing it)."""
        with self._lock:
            state = self._current()
            if state == CLOSED:
                return
            now = time.monotonic()
            if state == HALF_OPEN and (self._probe_at is None or now - self._probe_at >= self.cooldown):
                self._probe_at = now
                return
        CIRCUIT_REJECTED.labels(self.endpoint).inc()
        retry_in = max(1, int(self.cooldown - (time.monotonic() - self._opened_at)) + 1)
        raise S3Error("ServiceUnavailable", "The remote region is not answering (circuit open); retry later.",
                      headers={"Retry-After": str(retry_in)})

    def release(self) -> None:
        """A call ended without telling whether the remote is up: only free the probe slot."""
        with self._lock:
            self._probe_at = None

    def record(self, ok: bool) -> None:
        """A call ended: ``ok`` when the remote answered at all (any HTTP status)."""
        with self._lock:
            self._probe_at = None
            if ok:
                self._consecutive = 0
                if self._state != CLOSED:
                    self._set(CLOSED)
                return
            self._consecutive += 1
            if self._state == HALF_OPEN or self._consecutive >= self.failures:
                self._opened_at = time.monotonic()
                self._set(OPEN)

    def instrument(self, client: Any) -> None:
        """Guard every call of a botocore client (before its retry loop, so refusal costs nothing)."""

        def before(**_: Any) -> None:
            self.before()

        def after(**_: Any) -> None:
            self.record(True)

        def after_error(exception: Exception | None = None, **_: Any) -> None:
            network = (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectionClosedError,
                       botocore.exceptions.ReadTimeoutError, botocore.exceptions.ConnectTimeoutError,
                       botocore.exceptions.HTTPClientError)
            self.record(not isinstance(exception, network))

        events = client.meta.events
        events.register("before-call.s3.*", before, unique_id="ferry-circuit-before")
        events.register("after-call.s3.*", after, unique_id="ferry-circuit-after")
        events.register("after-call-error.s3.*", after_error, unique_id="ferry-circuit-after-error")
