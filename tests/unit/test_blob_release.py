"""A kill -9 between a catalog commit that releases part blobs and their unlinks leaks no file:
the blobs are named by drop intents before the commit, and the restart's recovery acts on them
(app/adapters/local/blobstore.py ``intend_drop``; app/adapters/catalog/repo.py)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine

from app.adapters.catalog.journal.journal import Journal
from app.adapters.catalog.repo import Catalog
from app.adapters.local.blobstore import DROP_AFTER, BlobStore
from app.domain.objects import PartInfo


@pytest.fixture
def catalog(engine: Engine) -> Catalog:
    """An open upload in a migrated catalog (SQLite and PostgreSQL: tests/unit/conftest.py)."""
    cat = Catalog(engine, "unit")
    cat.create_upload("u1", "b", "k", None, {}, None)
    return cat


def _blob(store: BlobStore, body: bytes) -> str:
    staging = store.open_staging()
    staging.write(body)
    blob = store.commit(staging)
    store.settle(blob)  # as a committed part row holds it
    return blob


def _files(store: BlobStore) -> set[str]:
    return {p.name for p in store.blobs.rglob("*") if p.is_file()}


def _recover(store: BlobStore, catalog: Catalog) -> None:
    """What ``ferry serve`` does at its next start, after the kill."""
    store.recover(Journal(catalog.engine, "unit").blobs_referenced)


def _part(number: int, body: bytes) -> PartInfo:
    return PartInfo(number, len(body), "e", datetime.now(UTC), {})


def test_a_crash_after_an_abort_commit_leaves_no_part_file(catalog: Catalog, tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "data", fsync=False)
    blobs = [_blob(store, b"one"), _blob(store, b"two")]
    for number, blob in enumerate(blobs, 1):
        catalog.put_part("u1", _part(number, b"x"), blob, None, store.intend_drop)
    keep = _blob(store, b"a dirty write's body")  # named by a row of someone else: never touched
    released, _ = catalog.abort_upload("u1", store.intend_drop)
    assert sorted(released) == sorted(blobs)
    # killed here: the rows are gone, the unlinks never ran
    assert _files(store) == {*blobs, keep}
    _recover(store, catalog)
    assert _files(store) == {keep}


def test_a_crash_after_a_part_is_replaced_drops_only_the_old_body(catalog: Catalog, tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "data", fsync=False)
    old, new = _blob(store, b"first send"), _blob(store, b"second send")
    catalog.put_part("u1", _part(1, b"x"), old, None, store.intend_drop)
    assert catalog.put_part("u1", _part(1, b"x"), new, None, store.intend_drop) == old
    # killed here, before the old body's unlink
    _recover(store, catalog)
    assert _files(store) == {new}
    assert [blob for _, blob in catalog.parts("u1")] == [new]


def test_an_intent_whose_commit_failed_keeps_the_blob(catalog: Catalog, tmp_path: Path) -> None:
    """An abort refused (the upload is being completed) after its intents: the parts stay."""
    store = BlobStore(tmp_path / "data", fsync=False)
    blob = _blob(store, b"part")
    catalog.put_part("u1", _part(1, b"x"), blob, None, store.intend_drop)
    store.intend_drop([blob])  # as the failed commit's callback did
    _recover(store, catalog)
    assert _files(store) == {blob}


def test_a_worker_killed_after_its_release_commit_leaks_nothing_while_the_node_runs(catalog: Catalog,
                                                                                   tmp_path: Path) -> None:
    """A destage worker killed between a row's final commit and the unlink (no restart of the
    node follows): the running node's collect drops the blob once its drop intent is
    ``DROP_AFTER`` old; a commit's intent (a blob no row references *yet*) waits the long grace."""
    store = BlobStore(tmp_path / "data", fsync=False)
    released = _blob(store, b"released")
    store.intend_drop([released])  # the commit that released it went through, then the kill
    staging = store.open_staging()
    staging.write(b"being written")
    in_flight = store.commit(staging)  # its row is not committed yet
    held = _blob(store, b"held")
    catalog.put_part("u1", _part(1, b"x"), held, None, store.intend_drop)
    store.intend_drop([held])  # a release whose commit failed: a row still holds it
    referenced = Journal(catalog.engine, "unit").blobs_referenced
    now = time.time()
    assert store.collect(referenced, older_than=3600, now=now) == 0  # too young yet
    assert store.collect(referenced, older_than=3600, now=now + DROP_AFTER + 1) == 1
    assert _files(store) == {in_flight, held}
    assert (store.tmp / f"{held}.drop").exists()  # kept while it may still be released
    assert store.collect(referenced, older_than=3600, now=now + 3601) == 1  # the orphaned commit
    assert _files(store) == {held}
    assert not (store.tmp / f"{held}.drop").exists()  # the failed release's intent is forgotten
