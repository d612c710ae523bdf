"""Fixtures of the reliability suite: the recorder, a fleet node (its own PostgreSQL database,
node id and Redis queues), and the soak knobs (``FERRY_RELIABILITY_ROUNDS``,
``FERRY_RELIABILITY_SECONDS``) that scripts/reliability.sh sets."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.fleet import FleetNode
from tests.reliability.record import Record


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this directory is a reliability test; service restarts can be skipped."""
    skip = os.environ.get("FERRY_SKIP_SERVICE_RESTARTS", "") not in ("", "0", "no", "false")
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)
            if skip and item.get_closest_marker("restarts_services"):
                item.add_marker(pytest.mark.skip(reason="FERRY_SKIP_SERVICE_RESTARTS is set"))


def soak_rounds(quick: int) -> int:
    return max(quick, int(os.environ.get("FERRY_RELIABILITY_ROUNDS", "0") or 0))


def soak_seconds() -> float:
    return float(os.environ.get("FERRY_RELIABILITY_SECONDS", "0") or 0)


@pytest.fixture
def recorder() -> Iterator[Callable[[str, str], Record]]:
    """``rec = recorder("faults", "kill9")``: written to $FERRY_RELIABILITY_OUT when the test ends."""
    records: list[Record] = []

    def make(suite: str, cls: str) -> Record:
        rec = Record(suite, cls)
        records.append(rec)
        return rec

    yield make
    for rec in records:
        rec.write()


@pytest.fixture
def fleet_node(fresh_postgres_url: str, redis_url: str, seaweed: Any,
               tmp_path: Path) -> Iterator[Callable[..., FleetNode]]:
    """``fleet_node(remote=None, env={})``: a started node on a fresh database; stopped after."""
    nodes: list[FleetNode] = []
    node_id = f"rel-{uuid.uuid4().hex[:10]}"

    def make(remote: Any = None, env: dict[str, str] | None = None) -> FleetNode:
        node = FleetNode(remote or seaweed, tmp_path / f"node{len(nodes)}",
                         {"FERRY_DATABASE_URL": fresh_postgres_url, "FERRY_BROKER_URL": redis_url,
                          "FERRY_NODE_ID": node_id, **(env or {})})
        nodes.append(node)
        node.ensure_running()
        return node

    yield make
    for node in nodes:
        node.stop()
    import redis

    with contextlib.suppress(redis.RedisError), redis.Redis.from_url(redis_url) as r:
        for key in r.scan_iter(match=f"*{node_id}*"):
            r.delete(key)
