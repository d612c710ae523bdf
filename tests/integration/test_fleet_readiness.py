"""``/readyz``'s ``fleet`` check (issue 26): a node is ready only when its own internal endpoint
and every live peer it routes to answer a signed ping. Two nodes; the peer is killed -9 while
its heartbeat is still fresh (a long FERRY_NODE_STALE_SECONDS), so the survivor still routes to
it: its readiness must say so instead of "all is well".
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.databases import throwaway_database
from tests.support.fleet import Fleet
from tests.support.gateway import readyz

pytestmark = pytest.mark.fleet


@pytest.fixture
def pair(proxy: Any, fleet_services: Any, tmp_path: Any) -> Iterator[Fleet]:
    with throwaway_database(fleet_services.postgres_url, "ferry_rdy") as db, \
            Fleet(proxy, db, tmp_path, size=2, env={"FERRY_NODE_STALE_SECONDS": "60",
                                                   "FERRY_READY_CACHE_SECONDS": "0"}) as fleet:
        fleet.wait_live(2)
        yield fleet


def test_readyz_checks_the_fleet_port_and_the_peers_it_routes_to(pair: Fleet) -> None:
    status, body = readyz(pair.nodes[0])
    assert body["checks"]["fleet"] == {"ok": True, "latency_ms": body["checks"]["fleet"]["latency_ms"],
                                       "detail": "fleet port and 1 peers answer"}, body
    assert status == 200, body
    pair.kill(1)
    deadline = time.monotonic() + 20
    while (found := readyz(pair.nodes[0]))[0] != 503 and time.monotonic() < deadline:
        time.sleep(0.2)
    status, body = found
    assert status == 503 and not body["checks"]["fleet"]["ok"], body
    assert "node-2 at 127.0.0.1:" in body["checks"]["fleet"]["detail"], body
