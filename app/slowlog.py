"""The slowest recent S3 requests of this process, with the time spent in each stage.

Two bounded rings, so the hot path pays one tuple and one ``deque.append``: the last
``RECENT`` requests (any speed), and the last ``SLOW`` requests slower than ``SLOW_SECONDS``
(kept longer on a busy node). ``slowest()`` merges and sorts them only when asked.
Per process: with FERRY_WORKERS > 1 each worker keeps its own (the admin call sees one).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

RECENT = 1024
SLOW = 256
SLOW_SECONDS = 1.0
KEY_CHARS = 256

# (wall time, total, auth, first byte, operation, status, outcome, bucket, key, bytes in, bytes out)
Record = tuple[float, float, float | None, float | None, str, int, str, str, str, int, int]
_recent: deque[Record] = deque(maxlen=RECENT)
_slow: deque[Record] = deque(maxlen=SLOW)


def record(total: float, auth: float | None, first_byte: float | None, operation: str, status: int,
           outcome: str, bucket: str, key: str, bytes_in: int, bytes_out: int) -> None:
    """Called once per finished request; stage times are seconds since the request arrived."""
    rec = (time.time(), total, auth, first_byte, operation, status, outcome, bucket, key[:KEY_CHARS],
           bytes_in, bytes_out)
    _recent.append(rec)
    if total >= SLOW_SECONDS:
        _slow.append(rec)


def _ms(value: float | None) -> float | None:
    return round(value * 1000, 3) if value is not None else None


def _doc(rec: Record) -> dict[str, Any]:
    at, total, auth, first, operation, status, outcome, bucket, key, bytes_in, bytes_out = rec
    handler = (first - auth) if first is not None and auth is not None else None
    return {"time": at, "operation": operation, "status": status, "outcome": outcome, "bucket": bucket,
            "key": key, "bytes_in": bytes_in, "bytes_out": bytes_out, "total_ms": _ms(total),
            "stages_ms": {"auth": _ms(auth), "lookup": _ms(handler), "first_byte": _ms(first),
                          "transfer": _ms(total - first) if first is not None else None}}


def slowest(limit: int = 20, since: float = 0.0) -> list[dict[str, Any]]:
    """The ``limit`` slowest of the remembered requests that finished after ``since`` (epoch s)."""
    seen = {id(r): r for r in (*_slow, *_recent) if r[0] >= since}
    ranked = sorted(seen.values(), key=lambda r: r[1], reverse=True)[:limit]
    return [_doc(r) for r in ranked]


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def latency(since: float = 0.0) -> list[dict[str, Any]]:
    """Latency per bucket over the remembered requests (the last ``RECENT``) after ``since``."""
    by_bucket: dict[str, list[float]] = {}
    for rec in _recent:
        if rec[0] >= since:
            by_bucket.setdefault(rec[7], []).append(rec[1])
    rows = []
    for bucket, values in sorted(by_bucket.items()):
        values.sort()
        rows.append({"bucket": bucket, "requests": len(values), "p50_ms": _ms(_quantile(values, 0.5)),
                     "p95_ms": _ms(_quantile(values, 0.95)), "max_ms": _ms(values[-1])})
    return rows


def clear() -> None:
    _recent.clear()
    _slow.clear()
