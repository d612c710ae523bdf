"""Membership (app/fleet/membership.py) over a real PostgreSQL catalog: who is live, who owns."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import update

from app.adapters.catalog.control.nodes import NodeDirectory, NodeRegistry
from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.migrate import upgrade
from app.adapters.catalog.tables import Node
from app.config import ConfigError, Settings
from app.domain.ownership import block_key, owner
from app.fleet.membership import Membership

pytestmark = pytest.mark.fleet


def test_live_nodes_their_addresses_and_ownership_move_with_heartbeats(fresh_postgres_url: str) -> None:
    upgrade(fresh_postgres_url)
    engine = make_engine(fresh_postgres_url)
    try:
        regs = {n: NodeRegistry(engine, n, "test", f"dir-{n}", f"127.0.0.1:{7000 + i}")
                for i, n in enumerate(["n1", "n2", "n3"])}
        for reg in regs.values():
            reg.register(stale_after=3)
        NodeRegistry(engine, "no-endpoint", "test", "dir-x").register(stale_after=3)  # serves no peers
        view = Membership(NodeDirectory(engine), "n1", "127.0.0.1:7000", stale_after=3, refresh_every=60)
        view.refresh()
        assert view.live_ids() == ("n1", "n2", "n3")
        blocks = [("b", f"k{i}", i % 4) for i in range(300)]
        before = {blk: owner(block_key(*blk), ["n1", "n2", "n3"]) for blk in blocks}
        for blk, node in before.items():
            got = view.owner(*blk)
            assert (got.node_id if got else "n1") == node
            assert got is None or got.address == f"127.0.0.1:{7000 + int(node[1]) - 1}"

        # n3 stops beating: once its heartbeat is stale, its blocks (and only they) move.
        with engine.begin() as conn:
            conn.execute(update(Node).where(Node.node_id == "n3").values(heartbeat_at=time.time() - 10))
        view.refresh()
        assert view.live_ids() == ("n1", "n2")
        for blk, node in before.items():
            got = view.owner(*blk)
            now = got.node_id if got else "n1"
            assert now == node or node == "n3"

        # A peer that failed us is routed around until its heartbeat moves.
        view.suspect("n2")
        assert view.live_ids() == ("n1",) and all(view.owner(*blk) is None for blk in blocks[:20])
        view.refresh()
        assert view.live_ids() == ("n1",)  # same heartbeat: still suspected
        time.sleep(0.01)
        assert regs["n2"].heartbeat()
        view.refresh()
        assert view.live_ids() == ("n1", "n2")

        regs["n2"].leave()  # a clean stop is seen at the next refresh
        view.refresh()
        assert view.live_ids() == ("n1",)
    finally:
        engine.dispose()


def test_fleet_mode_needs_a_secret_and_a_shared_catalog() -> None:
    with pytest.raises(ConfigError, match="FERRY_FLEET_SECRET"):
        Settings(fleet_port=9100, database_url="postgresql+psycopg://x@h/db", node_id="a").require_fleet()
    with pytest.raises(ConfigError, match="shared catalog"):
        Settings(fleet_port=9100, fleet_secret="s" * 16, node_id="a").require_fleet()
    Settings(fleet_port=9100, fleet_secret="s" * 16, database_url="postgresql+psycopg://x@h/db",
             node_id="a").require_fleet()
    Settings().require_fleet()  # a node alone: nothing to check
    assert Settings(fleet_port=9100, fleet_host="0.0.0.0").fleet_address.endswith(":9100")
    assert Settings(fleet_port=9100, fleet_advertise="n1.lan:9100").fleet_address == "n1.lan:9100"
    assert Settings().fleet_address == ""
