"""The unit of work (``adapters/catalog/unit_of_work.py``): what a service adds to one unit
commits together or not at all, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select

from app.adapters.catalog.cache.entry_rows import SHARED_NODE
from app.adapters.catalog.journal.journal import Journal
from app.adapters.catalog.repo import Catalog
from app.adapters.catalog.tables import CacheEntry, JournalReplica, MultipartUpload, ObjectVersion
from app.adapters.catalog.unit_of_work import UnitsOfWork
from app.domain.uploads import ClaimLost, CompletedUpload, UploadClaim
from app.domain.versions import BlobRef, Replica, VersionDraft


def _draft(key: str = "k") -> VersionDraft:
    return VersionDraft("b", key, 1, "e", [BlobRef("0" * 32, 1, "e")], {}, {}, {}, 7)


def _count(engine: Engine, model: type, *where: object) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(model).where(*where)).scalar_one())


def _tombstones(engine: Engine, key: str) -> int:
    return _count(engine, CacheEntry, CacheEntry.node_id == SHARED_NODE, CacheEntry.key == key)


def test_what_a_unit_adds_commits_once_when_it_ends(engine: Engine) -> None:
    units = UnitsOfWork(engine, "n1")
    with units.begin() as work:
        work.cache.invalidate("b", "k")
        row = work.journal.put(_draft())
        work.replicas.add(row, Replica("n2", [BlobRef("1" * 32, 1, "e")]))
        assert row.seq > 0
        assert _count(engine, ObjectVersion) == 0  # not yet committed: another connection sees none
    assert _count(engine, ObjectVersion, ObjectVersion.tenant_id == 7) == 1  # the tenant goes onto the row
    assert _count(engine, JournalReplica, JournalReplica.seq == row.seq) == 1
    assert _tombstones(engine, "k") == 1
    assert Journal(engine, "n1").newest_seq("b", "k") == row.seq


def test_a_unit_that_raises_leaves_nothing(engine: Engine) -> None:
    units = UnitsOfWork(engine, "n1")
    with pytest.raises(RuntimeError), units.begin() as work:
        work.cache.invalidate("b", "k")
        work.journal.put(_draft())
        raise RuntimeError("a check the commit depends on failed")
    assert _count(engine, ObjectVersion) == 0
    assert _tombstones(engine, "k") == 0


def test_a_lost_claim_rolls_the_whole_complete_back(engine: Engine) -> None:
    catalog = Catalog(engine, "n1")
    catalog.create_upload("u1", "b", "k", None, {}, None)
    units = UnitsOfWork(engine, "n1")
    claim = UploadClaim("u1", "not-the-claim", CompletedUpload("b", "k", '"e-1"', [(1, "e")], {}))
    with pytest.raises(ClaimLost), units.begin() as work:
        work.uploads.finish(claim)
        work.cache.invalidate("b", "k")
        work.journal.put(_draft())
    assert _count(engine, ObjectVersion) == 0
    assert _tombstones(engine, "k") == 0
    assert _count(engine, MultipartUpload, MultipartUpload.upload_id == "u1", MultipartUpload.state == "open") == 1


def test_a_rename_reads_the_source_inside_its_unit(engine: Engine) -> None:
    units = UnitsOfWork(engine, "n1")
    with units.begin() as work:
        first = work.journal.put(_draft("src"))
    with units.begin() as work:
        assert work.journal.newest_seq("b", "src") == first.seq
        put = work.journal.put(_draft("dst"))
        gone = work.journal.delete("b", "src", 7, after_seq=put.seq)
    assert gone.op == "delete" and gone.after_seq == put.seq and gone.seq > put.seq
