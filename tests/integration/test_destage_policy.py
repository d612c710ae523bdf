"""Destage retry policy: an outage never exhausts a write's attempts; a refusal of the object does."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.journal.journal import BlobRef, Journal
from app.adapters.catalog.migrate import upgrade
from app.adapters.local.blobstore import BlobStore
from app.domain.errors import S3Error
from app.domain.states import VersionState
from app.domain.versions import VersionDraft
from app.services.destage.destager import Destager
from tests.support.journal_rows import append_put


class RefusingRemote:
    """A remote whose PutObject always fails with the given S3 error."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.calls = 0

    def conditional_writes(self, bucket: str) -> bool:
        return False

    def put_object(self, *args: Any, **kwargs: Any) -> str:
        self.calls += 1
        raise S3Error(self.code)


@pytest.mark.parametrize(("code", "final"), [("ServiceUnavailable", VersionState.BUFFERED),
                                             ("InternalError", VersionState.BUFFERED),
                                             # refused credentials (a key revoked before its rotation
                                             # reached the worker): the remote is out, not the object
                                             ("InvalidAccessKeyId", VersionState.BUFFERED),
                                             ("SignatureDoesNotMatch", VersionState.BUFFERED),
                                             ("AccessDenied", VersionState.FAILED)])
def test_outages_do_not_use_up_attempts(tmp_path: Path, code: str, final: VersionState) -> None:
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    journal = Journal(make_engine(url), "node-a")
    store = BlobStore(tmp_path / "data", fsync=False)
    staging = store.open_staging()
    staging.write(b"payload")
    blob = store.commit(staging)
    store.settle(blob)
    etag = hashlib.md5(b"payload").hexdigest()
    row = append_put(journal, VersionDraft("b", "k", 7, etag, [BlobRef(blob, 7, etag)], {}, {}, {}, None))
    remote = RefusingRemote(code)
    destager = Destager(journal, store, remote, max_attempts=2, backoff_base=0.001,  # type: ignore[arg-type]
                        backoff_cap=0.001)
    for _ in range(5):
        current = journal.get(row.seq)
        assert current is not None
        if current.state is VersionState.FAILED:
            break
        _due_now(journal, row.seq)
        destager.destage(row.seq)
    current = journal.get(row.seq)
    assert current is not None
    assert current.state is final, current
    assert code in (current.last_error or "")
    assert store.path(blob).exists()  # the bytes are kept whatever happens


def _due_now(journal: Journal, seq: int) -> None:
    """Skip the row's backoff (the test's clock): its state is not touched."""
    from sqlalchemy import update

    from app.adapters.catalog.tables import ObjectVersion

    with journal.sessions.begin() as s:
        s.execute(update(ObjectVersion).where(ObjectVersion.seq == seq).values(next_attempt_at=0.0))
