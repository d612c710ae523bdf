"""Cache entries and multipart uploads enforce their tables (``CACHE_ALLOWED``, ``UPLOAD_ALLOWED``):
exactly the tables' moves succeed through the one writer of each state, on real SQLite tables."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert, select, update

from app.adapters.catalog.cache.entry_rows import invalidate_key, move_entries
from app.adapters.catalog.cache.index import CacheIndex
from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.migrate import upgrade
from app.adapters.catalog.repo import Catalog, move_uploads
from app.adapters.catalog.tables import CacheEntry, MultipartUpload
from app.domain.states import CACHE_ALLOWED, UPLOAD_ALLOWED, CacheState, IllegalTransition, UploadState

CACHE_PAIRS = list(itertools.product(CacheState, CacheState))
UPLOAD_PAIRS = list(itertools.product(UploadState, UploadState))
C = CacheEntry.__table__
U = MultipartUpload.__table__


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


def _entry_in(engine: Engine, state: CacheState) -> int:
    now = time.time()
    with engine.begin() as conn:
        return int(conn.execute(insert(C).values(
            node_id="n", bucket="b", key="k", etag="e", size=1, block_size=1, meta_json="{}", tenant_id=None,
            state=state.value, pinned=False, cached_bytes=0, created_at=now, validated_at=now, last_access=now,
            hits=0)).inserted_primary_key[0])


@pytest.mark.parametrize(("current", "target"), CACHE_PAIRS, ids=[f"{a}-{b}" for a, b in CACHE_PAIRS])
def test_cache_entry_moves_follow_the_table(engine: Engine, current: CacheState, target: CacheState) -> None:
    entry_id = _entry_in(engine, current)
    with engine.begin() as conn:
        if target in CACHE_ALLOWED[current]:
            assert move_entries(conn, [current], target, C.c.id == entry_id) == 1
        else:
            with pytest.raises(IllegalTransition):
                move_entries(conn, [current], target, C.c.id == entry_id)
    with engine.connect() as conn:
        state = conn.execute(select(C.c.state).where(C.c.id == entry_id)).scalar()
    assert state == (target if target in CACHE_ALLOWED[current] else current).value


def test_invalidation_goes_through_the_table(engine: Engine) -> None:
    index = CacheIndex(engine, "n")
    _entry_in(engine, CacheState.READY)
    with engine.begin() as conn:
        invalidate_key(conn, "b", "k")
    entry = index.get("b", "k")
    assert entry is not None and entry.state is CacheState.INVALID
    assert [e.key for e in index.invalid_entries()] == ["k"]


def _upload_in(engine: Engine, state: UploadState) -> str:
    Catalog(engine, "n").create_upload("u1", "b", "k", None, {}, None)
    with engine.begin() as conn:  # test setup: place the upload in the state under test
        conn.execute(update(U).where(U.c.upload_id == "u1").values(state=state.value))
    return "u1"


@pytest.mark.parametrize(("current", "target"), UPLOAD_PAIRS, ids=[f"{a}-{b}" for a, b in UPLOAD_PAIRS])
def test_upload_moves_follow_the_table(engine: Engine, current: UploadState, target: UploadState) -> None:
    upload_id = _upload_in(engine, current)
    with engine.begin() as conn:
        if target in UPLOAD_ALLOWED[current]:
            assert move_uploads(conn, [current], target, U.c.upload_id == upload_id) == 1
        else:
            with pytest.raises(IllegalTransition):
                move_uploads(conn, [current], target, U.c.upload_id == upload_id)
    assert Catalog(engine, "n").upload_state(upload_id) == (
        target if target in UPLOAD_ALLOWED[current] else current).value


def test_claim_complete_and_release_move_through_the_table(engine: Engine) -> None:
    catalog = Catalog(engine, "n")
    catalog.create_upload("u1", "b", "k", None, {}, None)
    assert catalog.claim_complete("u1", "b", "k", "t1", 60.0)[0] == "claimed"
    assert catalog.upload_state("u1") == UploadState.COMPLETING
    assert catalog.claim_complete("u1", "b", "k", "t2", 60.0)[0] == "busy"
    catalog.release_claim("u1", "t1")
    assert catalog.upload_state("u1") == UploadState.OPEN
    assert catalog.claim_complete("u1", "b", "k", "t3", -1.0)[0] == "claimed"  # its lease already ran out
    assert catalog.claim_complete("u1", "b", "k", "t4", 60.0)[0] == "claimed"  # the takeover keeps the state
    assert catalog.upload_state("u1") == UploadState.COMPLETING
    assert catalog.release_claims_of_node() == 1
    assert catalog.upload_state("u1") == UploadState.OPEN
    for move in (move_entries, move_uploads):
        with engine.begin() as conn, pytest.raises(IllegalTransition):
            move(conn, [], CacheState.INVALID if move is move_entries else UploadState.OPEN)  # type: ignore[operator]
