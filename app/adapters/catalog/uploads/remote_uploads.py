"""Which remote multipart uploads Ferry still owns (the sweep of leaked ones asks this).

An upload is owned while a multipart upload of the catalog records it (open, being completed,
or its kept result) or a journal row not yet on the remote will complete or abort it.
"""

from __future__ import annotations

from sqlalchemy import Engine, select

from app.adapters.catalog.tables import MultipartUpload, ObjectVersion
from app.domain.states import DIRTY


class OwnedRemoteUploads:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def owned(self) -> set[str]:
        u, v = MultipartUpload, ObjectVersion
        with self.engine.connect() as conn:
            uploads = conn.execute(select(u.remote_upload_id).where(u.remote_upload_id.is_not(None))).scalars()
            rows = conn.execute(select(v.remote_upload_id).where(
                v.remote_upload_id.is_not(None), v.state.in_([s.value for s in DIRTY]))).scalars()
            return {str(i) for i in uploads} | {str(i) for i in rows}
