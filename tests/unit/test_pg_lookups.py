"""The hot path's point lookups on a PostgreSQL catalog (app/adapters/catalog/cache/hotpath.py,
``PgLookups``): one round trip each on autocommit connections of their own, the same answers as
the SQLAlchemy statements they stand in for, a connection the server dropped replaced without a
failed lookup, and an unreachable server a 503 (``CatalogUnavailable``), never a 500."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, text

from app.adapters.catalog.cache.hotpath import PgLookups, SqliteLookups, lookups_for
from app.adapters.catalog.cache.index import CacheIndex
from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.journal.journal import Journal
from app.adapters.catalog.migrate import upgrade
from app.adapters.catalog.tables import ObjectVersion, table
from app.domain.cache import Lookup
from app.domain.errors import CatalogUnavailable
from app.domain.objects import ObjectMeta
from tests.unit.test_catalog_unavailable import closed_port

pytestmark = pytest.mark.fleet


def meta(key: str, etag: str = "e1") -> ObjectMeta:
    return ObjectMeta(key=key, size=5, etag=etag, last_modified=datetime(2026, 12, 6, tzinfo=UTC))


def test_each_catalog_gets_its_lookups(engine: Engine) -> None:
    found = lookups_for(engine)
    assert isinstance(found, PgLookups if engine.dialect.name == "postgresql" else SqliteLookups)


def test_answers_equal_the_engines(fresh_postgres_url: str) -> None:
    upgrade(fresh_postgres_url)
    engine = make_engine(fresh_postgres_url)
    index = CacheIndex(engine, "node-a")
    assert isinstance(index.lookups, PgLookups)
    assert index.get("b", "k") is None
    index.put_ready(meta("k"), "b", 1 << 20, None, False, time.time(), cached_bytes=5)
    fast = index.get("b", "k")
    index.lookups = None  # the SQLAlchemy statement it stands in for
    slow = index.get("b", "k")
    assert fast is not None and fast == slow
    journal = Journal(engine, "node-a")
    assert isinstance(journal.lookups, PgLookups)
    assert journal.lookups.newest_version("b", "k") is None
    assert journal.latest_dirty("b", "k") is None
    engine.dispose()


def test_a_connection_the_server_dropped_costs_no_lookup(fresh_postgres_url: str) -> None:
    upgrade(fresh_postgres_url)
    engine = make_engine(fresh_postgres_url)
    lookups = PgLookups.for_engine(engine)
    assert lookups is not None
    with ThreadPoolExecutor(4) as pool:  # four connections idle
        barrier = threading.Barrier(4)
        list(pool.map(lambda _: (barrier.wait(), lookups._one("SELECT pg_sleep(0.05)", ()))[1], range(4)))
    idle = list(lookups._idle)
    assert len(idle) == 4
    with engine.connect() as admin:  # as a server restart does: every connection dropped
        for conn in idle:
            admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": conn.info.backend_pid})
    assert lookups.newest_version("b", "k") is None  # tried again on a new connection
    assert len(lookups._idle) == 1 and lookups._idle[0] not in idle
    lookups.close()
    engine.dispose()


def test_an_unreachable_server_is_service_unavailable() -> None:
    engine = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/ferry")
    lookups = PgLookups.for_engine(engine)
    assert lookups is not None
    with pytest.raises(CatalogUnavailable):
        lookups.cache_entry("node-a", "b", "k")
    assert not lookups._idle


def test_connections_are_bounded_and_reused(fresh_postgres_url: str) -> None:
    """40 threads asking at once hold at most 16 connections; 8 stay open afterwards."""
    upgrade(fresh_postgres_url)
    engine = make_engine(fresh_postgres_url)
    lookups = PgLookups.for_engine(engine)
    assert lookups is not None
    lock = threading.Lock()
    out = {"now": 0, "most": 0}
    real_borrow, real_give_back = lookups._borrow, lookups._give_back

    def borrow() -> Any:
        conn = real_borrow()
        with lock:
            out["now"] += 1
            out["most"] = max(out["most"], out["now"])
        return conn

    def give_back(conn: Any) -> None:
        with lock:
            out["now"] -= 1
        real_give_back(conn)

    lookups._borrow = borrow  # type: ignore[method-assign]
    lookups._give_back = give_back  # type: ignore[method-assign]
    with ThreadPoolExecutor(40) as pool:
        assert set(pool.map(lambda i: lookups.newest_version("b", f"k{i}"), range(2000))) == {None}
    assert 1 <= out["most"] <= 16 and out["now"] == 0
    assert len(lookups._idle) <= 8
    lookups.close()
    assert not lookups._idle
    engine.dispose()


def test_a_gets_two_lookups_in_one_statement_answer_as_the_two_do(fresh_postgres_url: str) -> None:
    """``newest_and_entry`` (a fleet GET's one round trip) answers what ``newest_version`` and
    ``cache_entry`` answer, for a key with neither, with a cache row only, and with both; and
    the reads service's ``dirty_row`` of it is ``latest_dirty``'s answer."""
    upgrade(fresh_postgres_url)
    engine = make_engine(fresh_postgres_url)
    index, journal = CacheIndex(engine, "node-a"), Journal(engine, "node-a")
    lookups = index.lookups
    assert isinstance(lookups, PgLookups)

    def agree(key: str) -> None:
        newest, raw = lookups.newest_and_entry("node-a", "b", key)
        assert newest == lookups.newest_version("b", key)
        assert raw == lookups.cache_entry("node-a", "b", key)
        both = index.get_with_newest("b", key)
        assert both is not None and both.entry == index.get("b", key) and both.owned is None
        assert journal.dirty_row(both.newest) == journal.latest_dirty("b", key)

    agree("none")
    index.put_ready(meta("cached"), "b", 1 << 20, None, False, time.time(), cached_bytes=5)
    agree("cached")
    versions = table(ObjectVersion)
    with engine.begin() as conn:
        for state in ("durable", "buffered"):  # the newest is the one that counts: a buffered write
            conn.execute(versions.insert().values(bucket="b", key="cached", op="put", state=state,
                                                  created_at=datetime.now(UTC), etag="e2", size=5))
    agree("cached")
    newest, raw = lookups.newest_and_entry("node-a", "b", "cached")
    assert newest is not None and newest[1] == "buffered" and raw is not None
    assert journal.dirty_row(newest) is not None
    assert lookups.newest_and_entry("node-b", "b", "cached")[1] is None  # another node's row is not ours
    engine.dispose()


def test_bytes_with_reads_the_total_and_each_keys_ready_bytes_at_once(engine: Engine) -> None:
    """Admission's measurement (``CacheIndex.bytes_with``): this node's total and the ready rows
    of the named keys, in one statement; another node's rows and invalid rows are not a key's."""
    index, other = CacheIndex(engine, "node-a"), CacheIndex(engine, "node-b")
    assert index.bytes_with([]) == (0, {})
    index.put_ready(meta("k1"), "b", 1 << 20, None, False, time.time(), cached_bytes=5)
    index.put_ready(meta("k2"), "b", 1 << 20, None, False, time.time(), cached_bytes=3)
    other.put_ready(meta("k3"), "b", 1 << 20, None, False, time.time(), cached_bytes=7)
    assert index.bytes_with([]) == (8, {})
    assert index.bytes_with([("b", "k1"), ("b", "k3"), ("c", "k2")]) == (8, {("b", "k1"): 5})
    index.invalidate("b", "k2")
    total, held = index.bytes_with([("b", "k2"), ("b", "k1")])
    assert held == {("b", "k1"): 5} and total == index.total_bytes()


def test_a_gets_lookup_reads_the_owners_row_in_the_same_statement(fresh_postgres_url: str) -> None:
    """With an owner named, the one statement also answers that node's row (what a read of the
    owner's block by name trusts), and only that node's: never this node's, never a third's."""
    upgrade(fresh_postgres_url)
    engine = make_engine(fresh_postgres_url)
    mine, owners, third = CacheIndex(engine, "node-a"), CacheIndex(engine, "node-b"), CacheIndex(engine, "node-c")
    assert mine.get_with_newest("b", "k", "node-b") == Lookup(None, None, None)
    owners.put_ready(meta("k"), "b", 1 << 20, None, False, time.time(), cached_bytes=5)
    third.put_ready(meta("other"), "b", 1 << 20, None, False, time.time(), cached_bytes=5)
    found = mine.get_with_newest("b", "k", "node-b")
    assert found is not None and found.entry is None and found.owned is not None
    assert found.owned.node_id == "node-b" and found.owned.entry == owners.get("b", "k")
    assert mine.get_with_newest("b", "k", "node-c") == Lookup(None, None, None)
    assert mine.get_with_newest("b", "other", "node-b") == Lookup(None, None, None)
    by_owner = owners.get_with_newest("b", "k")  # no owner asked: the row of the node asking
    assert by_owner is not None and by_owner.entry == owners.get("b", "k") and by_owner.owned is None
    engine.dispose()
