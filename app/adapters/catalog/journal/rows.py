"""A journal row between the catalog's table (``ObjectVersion``) and the domain's record
(``VersionRow``): what the journal reads and what a unit of work (``unit_of_work.py``) adds."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import bindparam, select

from app.adapters.catalog.tables import ObjectVersion, table
from app.domain.states import VersionState
from app.domain.versions import BlobRef, VersionDraft, VersionRow

_T = table(ObjectVersion)
# A key's newest row (seq, state), whatever its state: the journal's reads and a unit of work's
# check inside its transaction (a rename's source) use this one statement (b=bucket, k=key).
NEWEST_ROW = (select(_T.c.seq, _T.c.state).where(_T.c.bucket == bindparam("b"), _T.c.key == bindparam("k"))
              .order_by(_T.c.seq.desc()).limit(1))


def after_json(seq: int) -> str:
    return json.dumps({"after": seq})


def put_row(d: VersionDraft, node_id: str) -> ObjectVersion:
    return ObjectVersion(
        bucket=d.bucket, key=d.key, op="put", state=VersionState.BUFFERED.value, generation=0, size=d.size,
        etag=d.etag, blobs_json=json.dumps([b.as_json() for b in d.blobs]), remote_upload_id=d.remote_upload_id,
        multipart=d.multipart, headers_json=json.dumps({"content": d.content_headers, "metadata": d.metadata}
                                                    | ({"renamed_from": d.renamed_from} if d.renamed_from else {})),
        checksums_json=json.dumps(d.checksums), checksum_algorithm=d.checksum_algorithm, node_id=node_id,
        tenant_id=d.tenant_id, created_at=datetime.now(UTC), attempts=0, next_attempt_at=0.0, lease_until=0.0,
        inline_body=d.inline,
    )


def delete_row(bucket: str, key: str, tenant_id: int | None, node_id: str, *,
                after_seq: int | None = None) -> ObjectVersion:
    """A delete's row; a rename's names the put it must destage after (in its headers)."""
    return ObjectVersion(
        bucket=bucket, key=key, op="delete", state=VersionState.BUFFERED.value, generation=0, size=0, etag="",
        blobs_json="[]", multipart=False, headers_json="{}" if after_seq is None else after_json(after_seq),
        checksums_json="{}", node_id=node_id, tenant_id=tenant_id, created_at=datetime.now(UTC), attempts=0,
        next_attempt_at=0.0, lease_until=0.0,
    )


def aware(when: datetime | None) -> datetime | None:
    if when is None:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def version_row(r: ObjectVersion) -> VersionRow:
    headers = json.loads(r.headers_json)
    return VersionRow(
        seq=r.seq, bucket=r.bucket, key=r.key, op=r.op, state=VersionState(r.state), generation=r.generation,
        size=r.size, etag=r.etag, blobs=[BlobRef(*b) for b in json.loads(r.blobs_json)],
        multipart=r.multipart, content_headers=headers.get("content", {}), metadata=headers.get("metadata", {}),
        checksums=json.loads(r.checksums_json), checksum_algorithm=r.checksum_algorithm, node_id=r.node_id,
        created_at=aware(r.created_at) or datetime.now(UTC), attempts=r.attempts, last_error=r.last_error,
        next_attempt_at=r.next_attempt_at, remote_etag=r.remote_etag, durable_at=aware(r.durable_at),
        remote_upload_id=r.remote_upload_id, after_seq=headers.get("after"),
        renamed_from=headers.get("renamed_from"),
    )
