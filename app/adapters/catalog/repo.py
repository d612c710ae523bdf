"""Catalog queries: tenants and keys, multipart uploads and their parts.

Each method is one short transaction. Secrets are looked up on every request, so they are
cached in-process for a few seconds (a disabled key stops working within that window).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import Engine, delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.adapters.catalog.tables import AccessKey, MultipartPart, MultipartUpload, Tenant
from app.domain.objects import PartInfo, UploadInfo

SECRET_CACHE_SECONDS = 5.0


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(when: datetime) -> datetime:
    """SQLite returns naive datetimes; the catalog stores UTC."""
    return when if when.tzinfo else when.replace(tzinfo=UTC)


class Catalog:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        self._secrets: dict[str, tuple[float, str | None, int | None]] = {}

    # ---- tenants and keys --------------------------------------------------------------------
    def ensure_tenant_key(self, tenant_name: str, access_key: str, secret_key: str) -> int:
        """Create the tenant and key if missing (bootstrap on first start); returns tenant id."""
        with self.sessions.begin() as s:
            tenant = s.scalar(select(Tenant).where(Tenant.name == tenant_name))
            if tenant is None:
                tenant = Tenant(name=tenant_name, disabled=False, created_at=utcnow())
                s.add(tenant)
                s.flush()
            key = s.get(AccessKey, access_key)
            if key is None:
                s.add(AccessKey(access_key=access_key, tenant_id=tenant.id, secret_key=secret_key,
                                disabled=False, created_at=utcnow()))
            elif key.secret_key != secret_key:
                key.secret_key = secret_key
            self._secrets.pop(access_key, None)
            return tenant.id

    def lookup_key(self, access_key: str) -> tuple[str | None, int | None]:
        """(secret, tenant id) for an enabled key of an enabled tenant, else (None, None)."""
        now = time.monotonic()
        hit = self._secrets.get(access_key)
        if hit and hit[0] > now:
            return hit[1], hit[2]
        with self.sessions() as s:
            row = s.execute(
                select(AccessKey.secret_key, AccessKey.tenant_id)
                .join(Tenant, Tenant.id == AccessKey.tenant_id)
                .where(AccessKey.access_key == access_key, AccessKey.disabled.is_(False),
                       Tenant.disabled.is_(False))
            ).first()
        secret, tenant = (row[0], row[1]) if row else (None, None)
        if len(self._secrets) > 10_000:
            self._secrets.clear()
        self._secrets[access_key] = (now + SECRET_CACHE_SECONDS, secret, tenant)
        return secret, tenant

    def cached_key(self, access_key: str) -> tuple[str | None, int | None] | None:
        """The answer ``lookup_key`` would give from its in-process cache, or None (ask it):
        lets the hot path skip a thread hop for a key seen in the last seconds."""
        hit = self._secrets.get(access_key)
        if hit and hit[0] > time.monotonic():
            return hit[1], hit[2]
        return None

    def forget_secrets(self) -> None:
        """Drop cached secrets after an admin change: this process sees it at once, other
        processes within SECRET_CACHE_SECONDS."""
        self._secrets.clear()

    # ---- multipart ---------------------------------------------------------------------------
    def create_upload(self, upload_id: str, bucket: str, key: str, tenant_id: int | None,
                      headers: dict[str, object], checksum_algorithm: str | None) -> UploadInfo:
        now = utcnow()
        with self.sessions.begin() as s:
            s.add(MultipartUpload(upload_id=upload_id, bucket=bucket, key=key, tenant_id=tenant_id,
                                  initiated_at=now, headers_json=json.dumps(headers),
                                  checksum_algorithm=checksum_algorithm, state="open"))
        return UploadInfo(upload_id, bucket, key, now, checksum_algorithm)

    def get_upload(self, upload_id: str) -> tuple[UploadInfo, dict[str, object]] | None:
        with self.sessions() as s:
            row = s.get(MultipartUpload, upload_id)
            if row is None or row.state != "open":
                return None
            info = UploadInfo(row.upload_id, row.bucket, row.key, _aware(row.initiated_at),
                              row.checksum_algorithm)
            return info, json.loads(row.headers_json)

    def remote_upload(self, upload_id: str) -> str | None:
        with self.sessions() as s:
            return s.scalar(select(MultipartUpload.remote_upload_id).where(MultipartUpload.upload_id == upload_id))

    def claim_remote_upload(self, upload_id: str, remote_upload_id: str) -> str | None:
        """Record the remote upload of this upload unless one is recorded already (several
        workers may race to create it); returns the one that counts (None: upload gone)."""
        with self.sessions.begin() as s:
            s.execute(update(MultipartUpload).where(MultipartUpload.upload_id == upload_id,
                                                    MultipartUpload.remote_upload_id.is_(None))
                      .values(remote_upload_id=remote_upload_id))
            return s.scalar(select(MultipartUpload.remote_upload_id).where(MultipartUpload.upload_id == upload_id))

    def put_part(self, upload_id: str, part: PartInfo, blob: str) -> str | None:
        """Record a part (replacing an earlier upload of the same number); returns the old blob."""
        with self.sessions.begin() as s:
            old = s.get(MultipartPart, (upload_id, part.part_number))
            old_blob = old.blob if old else None
            if old is not None:
                s.delete(old)
                s.flush()
            s.add(MultipartPart(upload_id=upload_id, part_number=part.part_number, size=part.size,
                                etag=part.etag, blob=blob, checksums_json=json.dumps(part.checksums),
                                last_modified=part.last_modified))
            return old_blob

    def parts(self, upload_id: str, after: int = 0, limit: int | None = None
              ) -> list[tuple[PartInfo, str]]:
        stmt = (select(MultipartPart).where(MultipartPart.upload_id == upload_id,
                                            MultipartPart.part_number > after)
                .order_by(MultipartPart.part_number))
        if limit is not None:
            stmt = stmt.limit(limit)
        with self.sessions() as s:
            return [
                (PartInfo(p.part_number, p.size, p.etag, _aware(p.last_modified),
                          json.loads(p.checksums_json)), p.blob)
                for p in s.scalars(stmt)
            ]

    def list_uploads(self, bucket: str, prefix: str = "", key_marker: str | None = None,
                     limit: int = 1000) -> list[UploadInfo]:
        stmt = select(MultipartUpload).where(MultipartUpload.bucket == bucket,
                                             MultipartUpload.state == "open")
        with self.sessions() as s:
            rows: Sequence[MultipartUpload] = s.scalars(stmt).all()
        out = [UploadInfo(r.upload_id, r.bucket, r.key, _aware(r.initiated_at), r.checksum_algorithm)
               for r in rows if r.key.startswith(prefix) and (key_marker is None or r.key > key_marker)]
        out.sort(key=lambda u: (u.key, u.initiated))
        return out[:limit]

    def delete_upload(self, upload_id: str) -> list[str]:
        """Remove an upload and its parts; returns their blobs for the caller to delete."""
        with self.sessions.begin() as s:
            blobs = list(s.scalars(select(MultipartPart.blob).where(MultipartPart.upload_id == upload_id)))
            s.execute(delete(MultipartPart).where(MultipartPart.upload_id == upload_id))
            s.execute(delete(MultipartUpload).where(MultipartUpload.upload_id == upload_id))
        return blobs

    def session(self) -> Session:
        return self.sessions()
