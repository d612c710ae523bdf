"""The slow log keeps the slowest recent requests, bounded, with their stages."""

from __future__ import annotations

import time

from app import slowlog


def test_slowest_first_with_stages_and_bounded() -> None:
    slowlog.clear()
    for i in range(slowlog.RECENT + 10):
        slowlog.record(0.001, 0.0002, 0.0005, "GetObject", 200, "hit", "b", f"k{i}", 0, 10)
    slowlog.record(2.0, 0.1, 1.5, "PutObject", 200, "ok", "b", "big", 100, 0)
    assert len(slowlog._recent) == slowlog.RECENT and len(slowlog._slow) == 1
    top = slowlog.slowest(3)
    assert top[0]["key"] == "big" and len(top) == 3
    assert top[0]["stages_ms"] == {"auth": 100.0, "lookup": 1400.0, "first_byte": 1500.0, "transfer": 500.0}
    for _ in range(slowlog.RECENT):  # pushed out of the recent ring, still in the slow ring
        slowlog.record(0.001, None, None, "HeadObject", 404, "client_error", "b", "x", 0, 0)
    assert slowlog.slowest(1)[0]["key"] == "big"
    assert slowlog.slowest(5, since=time.time() + 1) == []
    rows = slowlog.latency()
    assert rows == [{"bucket": "b", "requests": slowlog.RECENT, "p50_ms": 1.0, "p95_ms": 1.0, "max_ms": 1.0}]
    slowlog.clear()
