"""Node identity: one live process per node id in a catalog; each node sweeps only its own rows."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.journal.journal import Journal
from app.adapters.catalog.migrate import upgrade
from app.bootstrap import make_executor
from app.config import Settings
from app.domain.versions import VersionDraft
from app.services.destage.executor import EmbeddedExecutor
from tests.support.gateway import FERRY, GatewayProcess, free_port
from tests.support.journal_rows import append_put
from tests.support.procs import run_bounded

pytestmark = pytest.mark.fleet


def _buffer_row(journal: Journal, key: str) -> int:
    row = append_put(journal, VersionDraft("bkt", key, 0, "d41d8cd98f00b204e9800998ecf8427e", [], {}, {}, {}, None))
    return int(row.seq)


def test_embedded_sweep_takes_only_this_nodes_rows(fresh_postgres_url: str) -> None:
    """PostgreSQL without a broker: node b's sweeper must not claim node a's buffered rows (their
    bytes are in node a's data dir)."""
    upgrade(fresh_postgres_url)
    engine = make_engine(fresh_postgres_url)
    try:
        seq_a = _buffer_row(Journal(engine, "node-a"), "from-a")
        seq_b = _buffer_row(Journal(engine, "node-b"), "from-b")
        settings = Settings(database_url=fresh_postgres_url, node_id="node-b")
        sweeper_b = make_executor(settings, Journal(engine, "node-b"), None)  # type: ignore[arg-type]
        assert isinstance(sweeper_b, EmbeddedExecutor)
        sweeper_b._queue = asyncio.Queue()  # started enough to record what it submits
        asyncio.run(sweeper_b.sweep())
        assert sweeper_b._queued == {seq_b}, f"node b took {sweeper_b._queued} (node a's row is {seq_a})"
    finally:
        engine.dispose()


def _node_env(db: str, node_id: str) -> dict[str, str]:
    return {"FERRY_DATABASE_URL": db, "FERRY_NODE_ID": node_id,
            "FERRY_NODE_HEARTBEAT_SECONDS": "0.5", "FERRY_NODE_STALE_SECONDS": "3"}


def test_a_second_live_node_with_the_same_id_refuses(seaweed: Any, fresh_postgres_url: str, tmp_path: Path) -> None:
    node_id = f"dup-{uuid.uuid4().hex[:8]}"
    first = GatewayProcess(seaweed, tmp_path / "a", env=_node_env(fresh_postgres_url, node_id)).start()
    try:
        second = GatewayProcess(seaweed, tmp_path / "b", env=_node_env(fresh_postgres_url, node_id))
        code, out, took = run_bounded([FERRY, "serve"], second.env())
        assert code == 1, out
        assert f"node id {node_id!r} is in use by a live node" in out and f"pid {first.proc.pid}" in out, out
        assert took < 15, took
        other = GatewayProcess(seaweed, tmp_path / "c", env=_node_env(fresh_postgres_url, node_id + "-2")).start()
        other.stop()  # another id on the same catalog is fine
    finally:
        first.kill()


def test_a_crashed_nodes_id_is_taken_over_after_its_heartbeat_goes_stale(seaweed: Any, fresh_postgres_url: str,
                                                                         tmp_path: Path) -> None:
    node_id = f"crash-{uuid.uuid4().hex[:8]}"
    env = _node_env(fresh_postgres_url, node_id)
    first = GatewayProcess(seaweed, tmp_path / "a", env=env).start()
    bucket = f"n-{uuid.uuid4().hex[:12]}"
    first.client().create_bucket(Bucket=bucket)
    first.kill()  # kill -9: its row stays, with a heartbeat that stops
    time.sleep(3.5)
    successor = GatewayProcess(seaweed, tmp_path / "b", env=env, port=free_port()).start()
    try:
        successor.client().put_object(Bucket=bucket, Key="k", Body=b"after take-over")
        successor.stop()  # a clean stop frees the id at once
        GatewayProcess(seaweed, tmp_path / "c", env=env).start().stop()
    finally:
        successor.kill()


def test_a_shared_catalog_needs_an_explicit_node_id(seaweed: Any, fresh_postgres_url: str, tmp_path: Path) -> None:
    """Two gateways on one host would share the hostname as id (one queue, one set of rows)."""
    gw = GatewayProcess(seaweed, tmp_path / "a", env={"FERRY_DATABASE_URL": fresh_postgres_url})
    code, out, _ = run_bounded([FERRY, "serve"], gw.env())
    assert code == 2 and "FERRY_NODE_ID must be set explicitly with a shared catalog" in out, out
