"""Record before create: one opener of an upload's remote multipart upload at a time.

Eager part copies (app/services/multipart/service.py) open the remote multipart upload of a local upload
on its first copied part. Two copies of one upload used to both find no remote upload recorded,
both send CreateMultipartUpload, and then record one and abort the other; a Complete that read
"no remote upload" between the two saw both aborted, its destage opening a third (issue 15: two
Creates of one key 2 ms apart, then their Aborts, at the remote at once). Now an opener first
takes ``remote_opener`` on the upload's row (one statement that exactly one caller wins), creates
the remote upload, and records it with the same token. Other copies wait for the recorded id; a
write-through Complete waits until no opener is live before it reads the id
(``settled_remote_upload``), so the id it hands to the remote is the only remote upload ever
opened for the local upload. A buffered Complete does not wait on the remote (issue 26: 19 s
behind a hung CreateMultipartUpload): ``take_remote_upload`` strikes a live opener off and
reads the id; the opener's late record then fails and it aborts what it created.

An opening is also a write of the key, like a destage's (app/services/destage/destager.py): it starts
only while no destage of the key holds a lease (or its takeover grace), and ``Journal.claim``
takes no row of a key that an opener holds. Both decide under the key's advisory lock on
PostgreSQL (SQLite runs one writer at a time), so an eager opener of a newer version never
creates its remote upload while an older version of the key is being written remotely.
"""

from __future__ import annotations

import time
import zlib
from typing import Any, Literal

from sqlalchemy import BindParameter, ColumnElement, Engine, exists, select, text, update

from app.adapters.catalog.engine import writer
from app.adapters.catalog.tables import MultipartUpload, ObjectVersion
from app.domain.states import UploadState, VersionState

Opening = Literal["have", "mine", "busy", "gone"]
_OPEN = UploadState.OPEN.value
_LIVE = (UploadState.OPEN.value, UploadState.COMPLETING.value)
_NO_OPENER = {"remote_opener": None, "remote_opener_until": None}


def key_lock_id(bucket: str, key: str) -> int:
    """The PostgreSQL advisory lock of one key (destage claims and remote openings)."""
    return zlib.crc32(f"{bucket}/{key}".encode("utf-8", "surrogatepass")) - 2**31


def opener_of_key(bucket: str | BindParameter[Any], key: str | BindParameter[Any],
                  now: float | BindParameter[Any]) -> ColumnElement[bool]:
    """True while an eager copy holds the opening of a remote upload of this key (values, or
    parameters of a statement built once: the destage claim's)."""
    u = MultipartUpload
    return exists().where(u.bucket == bucket, u.key == key, u.remote_opener.is_not(None),
                          u.remote_opener_until >= now)


def _destage_of_key(bucket: str, key: str, now: float, grace: float) -> ColumnElement[bool]:
    v = ObjectVersion
    return exists().where(v.bucket == bucket, v.key == key, v.state == VersionState.DESTAGING.value,
                          v.lease_until > now - grace)


class RemoteOpenings:
    """The ``remote_opener`` columns of ``multipart_uploads``; see the module docstring."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def open_remote_upload(self, upload_id: str, token: str, lease_seconds: float,
                           grace: float = 0.0) -> tuple[Opening, str | None]:
        """("have", id): recorded already; ("mine", None): the caller may create it now and must
        record it with ``opened_remote_upload`` (or give up with ``drop_remote_opener``) within
        the lease; ("busy", None): another opener, or a destage of the key (whose lease ended
        less than ``grace`` ago), is at it; ("gone", None): not open any more."""
        u = MultipartUpload
        now = time.time()
        with writer(self.engine).begin() as conn:
            row = conn.execute(select(u.state, u.remote_upload_id, u.bucket, u.key)
                               .where(u.upload_id == upload_id)).first()
            if row is not None and row.remote_upload_id is not None and row.state in _LIVE:
                return "have", str(row.remote_upload_id)
            if row is None or row.state != _OPEN:
                return "gone", None
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": key_lock_id(row.bucket, row.key)})
            won = conn.execute(update(u).where(
                u.upload_id == upload_id, u.state == _OPEN, u.remote_upload_id.is_(None),
                (u.remote_opener.is_(None)) | (u.remote_opener_until < now),
                ~_destage_of_key(row.bucket, row.key, now, grace))
                .values(remote_opener=token, remote_opener_until=now + lease_seconds)).rowcount
        return ("mine", None) if won == 1 else ("busy", None)

    def opened_remote_upload(self, upload_id: str, token: str, remote_upload_id: str) -> bool:
        """Record the remote upload the holder of ``token`` created; False when its opening is
        no longer its own (the upload ended, or a Complete gave up waiting): it must abort it."""
        u = MultipartUpload
        with writer(self.engine).begin() as conn:
            done = conn.execute(update(u).where(u.upload_id == upload_id, u.remote_opener == token,
                                                u.remote_upload_id.is_(None), u.state.in_(_LIVE))
                                .values(remote_upload_id=remote_upload_id, **_NO_OPENER)).rowcount
        return bool(done == 1)

    def drop_remote_opener(self, upload_id: str, token: str) -> None:
        """The holder created nothing (the remote refused): let the next copy or the Complete go on."""
        u = MultipartUpload
        with writer(self.engine).begin() as conn:
            conn.execute(update(u).where(u.upload_id == upload_id, u.remote_opener == token).values(**_NO_OPENER))

    def settled_remote_upload(self, upload_id: str) -> tuple[bool, str | None]:
        """(settled, remote upload id) for a Complete: not settled while an opener's lease runs;
        an opener whose lease ran out is struck off (its late record then fails, and it aborts
        what it created), so the id read when settled is the one the destage may reuse."""
        u = MultipartUpload
        now = time.time()
        with writer(self.engine).begin() as conn:
            conn.execute(update(u).where(u.upload_id == upload_id, u.remote_opener.is_not(None),
                                         u.remote_opener_until < now).values(**_NO_OPENER))
            row = conn.execute(select(u.remote_upload_id, u.remote_opener).where(u.upload_id == upload_id)).first()
        if row is None:
            return True, None
        return row.remote_opener is None, (str(row.remote_upload_id) if row.remote_upload_id else None)

    def take_remote_upload(self, upload_id: str) -> str | None:
        """For a buffered Complete holding its claim (no new opener can start): the recorded
        remote upload id, striking off a live opener at once instead of waiting for its
        CreateMultipartUpload; the destage opens its own remote upload when there is none."""
        u = MultipartUpload
        with writer(self.engine).begin() as conn:
            conn.execute(update(u).where(u.upload_id == upload_id, u.remote_opener.is_not(None)).values(**_NO_OPENER))
            found = conn.execute(select(u.remote_upload_id).where(u.upload_id == upload_id)).scalar()
        return str(found) if found else None
