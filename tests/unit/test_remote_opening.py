"""One opener of an upload's remote multipart upload at a time (app/adapters/catalog/uploads/remote_opening.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import update

from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.journal.journal import BlobRef, Journal
from app.adapters.catalog.migrate import upgrade
from app.adapters.catalog.repo import Catalog
from app.adapters.catalog.tables import MultipartUpload
from app.domain.versions import VersionDraft
from tests.support.journal_rows import append_put


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    cat = Catalog(make_engine(url), "unit")
    cat.create_upload("u1", "b", "k", None, {}, None)
    return cat


def test_the_second_opener_waits_for_the_first_ones_id(catalog: Catalog) -> None:
    assert catalog.open_remote_upload("u1", "first", 30) == ("mine", None)
    assert catalog.open_remote_upload("u1", "second", 30) == ("busy", None)
    assert catalog.settled_remote_upload("u1") == (False, None)  # a Complete waits
    assert catalog.opened_remote_upload("u1", "first", "R1")
    assert catalog.open_remote_upload("u1", "second", 30) == ("have", "R1")
    assert catalog.settled_remote_upload("u1") == (True, "R1")
    assert not catalog.opened_remote_upload("u1", "second", "R2")  # never a second record


def test_an_opener_that_ran_out_is_struck_off_and_its_late_record_refused(catalog: Catalog) -> None:
    assert catalog.open_remote_upload("u1", "slow", 30)[0] == "mine"
    with catalog.engine.begin() as conn:  # its lease ran out
        conn.execute(update(MultipartUpload).values(remote_opener_until=time.time() - 1))
    assert catalog.settled_remote_upload("u1") == (True, None)
    assert not catalog.opened_remote_upload("u1", "slow", "R-late")  # the opener aborts it


def test_a_failed_create_lets_the_next_copy_open(catalog: Catalog) -> None:
    assert catalog.open_remote_upload("u1", "a", 30)[0] == "mine"
    catalog.drop_remote_opener("u1", "a")
    assert catalog.open_remote_upload("u1", "b", 30) == ("mine", None)


def test_no_opening_of_an_upload_that_is_gone(catalog: Catalog) -> None:
    catalog.abort_upload("u1")
    assert catalog.open_remote_upload("u1", "a", 30) == ("gone", None)
    assert catalog.open_remote_upload("nope", "a", 30) == ("gone", None)


def _buffered(journal: Journal, key: str) -> int:
    return append_put(journal, VersionDraft("b", key, 1, "e", [BlobRef("0" * 32, 1, "e")], {}, {}, {}, None)).seq


def test_an_opening_and_a_destage_of_one_key_exclude_each_other(catalog: Catalog) -> None:
    """Opening a remote upload is a write of the key: not while a destage of the key holds its
    lease (or its grace), and no destage claims the key while an opening is held."""
    journal = Journal(catalog.engine, "unit")
    older = _buffered(journal, "k")
    assert journal.claim(older, 30) is not None
    assert catalog.open_remote_upload("u1", "a", 30) == ("busy", None)
    journal.renew(journal.get(older), -5)  # its lease ended 5 s ago
    assert catalog.open_remote_upload("u1", "a", 30, grace=10) == ("busy", None)
    assert catalog.open_remote_upload("u1", "a", 30, grace=1) == ("mine", None)
    newer = _buffered(journal, "k")
    assert journal.claim(newer, 30) is None  # the opener holds the key
    assert journal.claim(_buffered(journal, "other"), 30) is not None
    assert catalog.opened_remote_upload("u1", "a", "R1")
    assert journal.claim(newer, 30) is not None


def test_expiry_waits_for_an_opener_and_aborts_what_it_recorded(catalog: Catalog, tmp_path: Path) -> None:
    """The sweep of abandoned uploads, like a client's Abort, waits for a copy that is opening the
    remote upload, then aborts the recorded one itself (was: the upload's rows went first, and the
    opener aborted its late remote upload some time after the sweep: seen left over in CI)."""
    import threading
    from datetime import UTC, datetime, timedelta

    from app.adapters.local.blobstore import BlobStore
    from app.services.multipart.expiry import UploadExpiry

    class Remote:
        aborted: list[str] = []

        def abort_multipart(self, bucket: str, key: str, upload_id: str) -> None:
            self.aborted.append(upload_id)

    remote = Remote()
    expiry = UploadExpiry(catalog, BlobStore(tmp_path / "data", fsync=False), remote, 0.0)  # type: ignore[arg-type]
    assert catalog.open_remote_upload("u1", "opener", 30)[0] == "mine"
    threading.Timer(0.3, lambda: catalog.opened_remote_upload("u1", "opener", "R1")).start()
    assert catalog.expired_uploads(datetime.now(UTC) + timedelta(seconds=1)) == ["u1"]
    assert expiry.sweep() == 1
    assert remote.aborted == ["R1"]
