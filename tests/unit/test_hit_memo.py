"""The warm hit's in-memory lookups (app/adapters/catalog/cache/hotpath.py): a repeated hit runs no
catalog query, only SQLite's change counter, and any commit by another connection (another
``--workers`` process, checked from a real subprocess) makes the next GET ask the catalog again.
On the fake remote with a real SQLite catalog and block store."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.domain.errors import S3Error
from tests.fakes.harness import Services, build, fills_settled
from tests.fakes.remote import InMemoryRemote

ROOT = Path(__file__).resolve().parents[2]


def put_remote(remote: InMemoryRemote, key: str, data: bytes) -> str:
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    return remote.put_object("b", key, io.BytesIO(data), len(data), md5, {}, {}, {})


def warm(tmp_path: Path, key: str, data: bytes) -> tuple[InMemoryRemote, Services]:
    remote = InMemoryRemote()
    remote.create_bucket("b", None)
    put_remote(remote, key, data)
    svc = build(tmp_path, remote)
    assert svc.cache is not None

    async def first() -> None:
        assert await svc.get("b", key) == data  # the miss that caches it
        await fills_settled(svc.cache)
        assert await svc.get("b", key) == data  # a hit
    asyncio.run(first())
    return remote, svc


def traced(svc: Services) -> list[str]:
    """Every statement the hit path's two raw connections run from now on."""
    seen: list[str] = []
    assert svc.cache is not None
    for lookups in (svc.journal.lookups, svc.cache.index.lookups):  # type: ignore[attr-defined]
        assert lookups is not None
        lookups._conn.set_trace_callback(seen.append)
    return seen


def in_other_process(tmp_path: Path, code: str) -> None:
    """Run ``code`` (with ``url``, ``make_engine``, ``CacheIndex`` and ``Journal`` at hand) in a
    separate interpreter: another worker process writing the same catalog."""
    prelude = ("import sys; from app.adapters.catalog.engine import make_engine; "
               "from app.adapters.catalog.cache.index import CacheIndex; "
               "from app.adapters.catalog.journal.journal import Journal; "
               "from tests.support.journal_rows import append_delete; url = sys.argv[1]; ")
    subprocess.run([sys.executable, "-c", prelude + code, f"sqlite:///{tmp_path / 'ferry.db'}"], check=True,
                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)


def test_a_repeated_hit_runs_no_catalog_query(tmp_path: Path) -> None:
    _, svc = warm(tmp_path, "k", b"x" * 4096)
    seen = traced(svc)
    for _ in range(5):
        assert asyncio.run(svc.get("b", "k")) == b"x" * 4096
    queries = [s for s in seen if not s.startswith("PRAGMA data_version")]
    assert queries == [], queries
    assert 0 < len(seen) <= 2 * 5  # the change counter, once per lookup


def test_a_commit_by_another_connection_makes_the_next_lookup_ask_again(tmp_path: Path) -> None:
    _, svc = warm(tmp_path, "k", b"x" * 4096)
    seen = traced(svc)
    svc.journal.lookups._conn.set_trace_callback(None)  # type: ignore[union-attr]
    assert svc.cache is not None
    svc.cache.index.touch({})  # nothing to write: no commit, the memo holds
    asyncio.run(svc.get("b", "k"))
    assert not [s for s in seen if s.startswith("SELECT")]
    in_other_process(tmp_path, "CacheIndex(make_engine(url), 'unit').invalidate('b', 'other')")
    asyncio.run(svc.get("b", "k"))
    assert [s for s in seen if s.startswith("SELECT")], "a commit elsewhere must end the memo"


def test_an_overwrite_by_another_worker_is_seen_by_the_next_get(tmp_path: Path) -> None:
    """Another worker's write lands at the remote and invalidates the key (as its destage's
    commit does): this process's next GET must not serve the bytes it had in memory."""
    remote, svc = warm(tmp_path, "k", b"1" * 4096)
    put_remote(remote, "k", b"2" * 4096)
    in_other_process(tmp_path, "CacheIndex(make_engine(url), 'unit').invalidate('b', 'k')")
    assert asyncio.run(svc.get("b", "k")) == b"2" * 4096


def test_a_delete_by_another_worker_is_seen_by_the_next_get(tmp_path: Path) -> None:
    """A buffered delete journaled by another worker answers NoSuchKey here at once."""
    _, svc = warm(tmp_path, "k", b"1" * 4096)
    in_other_process(tmp_path, "append_delete(Journal(make_engine(url), 'unit'), 'b', 'k', None, invalidate=False)")
    with pytest.raises(S3Error) as err:
        asyncio.run(svc.get("b", "k"))
    assert err.value.code == "NoSuchKey"


def test_an_eviction_by_another_worker_is_seen_by_the_next_get(tmp_path: Path) -> None:
    """The janitor of another process deleted the entry's row and its block: the next GET reads
    through to the remote (a miss), never a stale row's vanished block."""
    _, svc = warm(tmp_path, "k", b"1" * 4096)
    assert svc.cache is not None
    entry = svc.cache.index.get("b", "k")
    assert entry is not None
    for i in range(entry.blocks):
        svc.cache.store.delete(svc.cache.block_file(entry, i))
    in_other_process(tmp_path, "ix = CacheIndex(make_engine(url), 'unit'); ix.remove(ix.get('b', 'k'))")
    assert svc.cache.index.get("b", "k") is None
    assert asyncio.run(svc.get("b", "k")) == b"1" * 4096
