"""Catalog queries: tenants and keys, multipart uploads and their parts.

Each method is one short transaction. Secrets are looked up on every request, so they are
cached in-process for a few seconds (a disabled key stops working within that window).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Connection, Engine, delete, or_, select, update
from sqlalchemy.orm import Session

from app.adapters.catalog.engine import Sessions, affected
from app.adapters.catalog.journal.key_claims import KeyClaims
from app.adapters.catalog.tables import AccessKey, MultipartPart, MultipartUpload, Tenant, table
from app.adapters.catalog.uploads.remote_opening import Opening, RemoteOpenings
from app.domain.conditions import PreviousWrite
from app.domain.objects import PartInfo, UploadInfo
from app.domain.states import UPLOAD_ALLOWED, IllegalTransition, UploadState, check_move
from app.domain.uploads import ClaimLost, CompletedUpload, PartSource, UploadClaim, UploadNotOpen

SECRET_CACHE_SECONDS = 5.0


ClaimOutcome = Literal["claimed", "completed", "busy", "gone"]


def move_uploads(conn: Connection, froms: Iterable[UploadState], to: UploadState, *where: Any, **values: Any) -> int:
    """The one writer of a multipart upload's state: moves the rows matching ``where`` that are
    in one of ``froms`` to ``to``, each (from, to) checked against ``UPLOAD_ALLOWED`` first."""
    declared = frozenset(UploadState(f) for f in froms)
    if not declared:
        raise IllegalTransition(f"a move to {to} must declare the states it leaves")
    for current in sorted(declared):
        check_move(UPLOAD_ALLOWED, current, to)
    t = table(MultipartUpload)
    stmt = (update(t).where(t.c.state.in_(sorted(s.value for s in declared)), *where)
            .values(state=to.value, **values))
    return int(conn.execute(stmt).rowcount or 0)


_NO_CLAIM = {"claim": None, "claim_until": None, "claim_node": None}


def finish_upload(conn: Connection, claim: UploadClaim) -> list[str]:
    """In the caller's transaction: turn a claimed upload into its kept result and drop its part
    rows (their blobs are now the object's, or the caller deletes them). Raises ClaimLost when
    the claim is no longer this Complete's, so that transaction rolls back."""
    t = table(MultipartUpload)
    done = move_uploads(conn, [UploadState.COMPLETING], UploadState.COMPLETED, t.c.upload_id == claim.upload_id,
                        t.c.claim == claim.token, result_json=claim.result.as_json(), completed_at=utcnow(),
                        **_NO_CLAIM)
    if done != 1:
        raise ClaimLost(claim.upload_id)
    p = table(MultipartPart)
    blobs = list(conn.scalars(select(p.c.blob).where(p.c.upload_id == claim.upload_id)))
    conn.execute(delete(p).where(p.c.upload_id == claim.upload_id))
    return blobs


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(when: datetime) -> datetime:
    """SQLite returns naive datetimes; the catalog stores UTC."""
    return when if when.tzinfo else when.replace(tzinfo=UTC)


class Catalog:
    """Uploads, parts, access keys. Two parts it is composed of keep their own rows and answer
    through it: the per-key claims of conditional writes (``claims``, key_claims.py) and the
    opening of a multipart upload's remote upload (``openings``, remote_opening.py)."""

    def __init__(self, engine: Engine, node_id: str | None = None) -> None:
        self.engine = engine
        self.node_id = node_id  # recorded on uploads and parts: whose data directory holds them
        self.sessions = Sessions(engine)
        self._secrets: dict[str, tuple[float, str | None, int | None]] = {}
        self.claims = KeyClaims(engine, node_id)
        self.openings = RemoteOpenings(engine)

    # ---- the parts: key claims, remote openings ------------------------------------------------
    def claim_key(self, bucket: str, key: str, token: str, lease_seconds: float) -> PreviousWrite | None:
        return self.claims.claim_key(bucket, key, token, lease_seconds)

    def release_key(self, bucket: str, key: str, token: str, *, invocation: str | None = None,
                    etag: str | None = None) -> None:
        self.claims.release_key(bucket, key, token, invocation=invocation, etag=etag)

    def forget_key_claims(self, done_before: float) -> int:
        return self.claims.forget_key_claims(done_before)

    def release_key_claims_of_node(self) -> int:
        return self.claims.release_key_claims_of_node()

    def open_remote_upload(self, upload_id: str, token: str, lease_seconds: float,
                           grace: float = 0.0) -> tuple[Opening, str | None]:
        return self.openings.open_remote_upload(upload_id, token, lease_seconds, grace)

    def opened_remote_upload(self, upload_id: str, token: str, remote_upload_id: str) -> bool:
        return self.openings.opened_remote_upload(upload_id, token, remote_upload_id)

    def drop_remote_opener(self, upload_id: str, token: str) -> None:
        self.openings.drop_remote_opener(upload_id, token)

    def settled_remote_upload(self, upload_id: str) -> tuple[bool, str | None]:
        return self.openings.settled_remote_upload(upload_id)

    def take_remote_upload(self, upload_id: str) -> str | None:
        return self.openings.take_remote_upload(upload_id)

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
                                  checksum_algorithm=checksum_algorithm, state=UploadState.OPEN.value,
                                  node_id=self.node_id))
        return UploadInfo(upload_id, bucket, key, now, checksum_algorithm, tenant_id=tenant_id)

    def get_upload(self, upload_id: str) -> tuple[UploadInfo, dict[str, object]] | None:
        with self.sessions() as s:
            row = s.get(MultipartUpload, upload_id)
            if row is None or row.state != UploadState.OPEN.value:
                return None
            info = UploadInfo(row.upload_id, row.bucket, row.key, _aware(row.initiated_at),
                              row.checksum_algorithm, tenant_id=row.tenant_id)
            return info, json.loads(row.headers_json)

    def remote_upload(self, upload_id: str) -> str | None:
        with self.sessions() as s:
            return s.scalar(select(MultipartUpload.remote_upload_id).where(
                MultipartUpload.upload_id == upload_id, MultipartUpload.state != UploadState.COMPLETED.value))

    def put_part(self, upload_id: str, part: PartInfo, blob: str, replica: PartSource | None = None,
                 intend_drop: Callable[[list[str]], None] | None = None) -> str | None:
        """Record a part (replacing an earlier upload of the same number); returns the old blob.
        ``replica``: the other node holding a copy of it (``write_replicas: 2``). ``intend_drop``
        is told the old blob before the commit (so a crash right after it does not leak the file).

        The no-op update locks the upload row, so a part commits either before a Complete's
        claim (which then sees it) or not at all (UploadNotOpen)."""
        with self.sessions.begin() as s:
            self._lock_open(s, upload_id)
            old = s.get(MultipartPart, (upload_id, part.part_number))
            old_blob = old.blob if old else None
            if old is not None:
                if intend_drop is not None:
                    intend_drop([old.blob])
                s.delete(old)
                s.flush()
            s.add(MultipartPart(upload_id=upload_id, part_number=part.part_number, size=part.size,
                                etag=part.etag, blob=blob, checksums_json=json.dumps(part.checksums),
                                last_modified=part.last_modified, node_id=self.node_id,
                                replica_node=replica.node_id if replica else None,
                                replica_blob=replica.blob if replica else None))
            return old_blob

    @staticmethod
    def _lock_open(s: Session, upload_id: str) -> None:
        """Lock the upload row if it is open, reopening it first if a dead Complete's claim has
        run out (its claimer, if alive after all, then loses its commit: ClaimLost)."""
        u = MultipartUpload
        move_uploads(s.connection(), [UploadState.COMPLETING], UploadState.OPEN, u.upload_id == upload_id,
                     u.claim_until < time.time(), **_NO_CLAIM)
        locked = s.execute(update(u).where(u.upload_id == upload_id, u.state == UploadState.OPEN.value)
                           .values(**_NO_CLAIM))
        if affected(locked) != 1:
            raise UploadNotOpen(s.scalar(select(MultipartUpload.state)
                                         .where(MultipartUpload.upload_id == upload_id)))

    def upload_state(self, upload_id: str) -> str | None:
        with self.sessions() as s:
            return s.scalar(select(MultipartUpload.state).where(MultipartUpload.upload_id == upload_id))

    def part_sources(self, upload_id: str) -> dict[int, list[PartSource]]:
        """The nodes holding each part, the one that took it first, then its replica's."""
        p = MultipartPart
        with self.sessions() as s:
            rows = s.execute(select(p.part_number, p.node_id, p.blob, p.replica_node, p.replica_blob)
                             .where(p.upload_id == upload_id))
            return {r.part_number: [PartSource(r.node_id, r.blob)]
                    + ([PartSource(r.replica_node, r.replica_blob)] if r.replica_node and r.replica_blob else [])
                    for r in rows}

    def holds_part(self, upload_id: str, number: int, blob: str) -> bool:
        """Whether this node holds ``blob`` as part ``number`` of the upload (or its replica):
        what a peer may read from here while it completes the upload."""
        p = MultipartPart
        mine = ((p.node_id == self.node_id) & (p.blob == blob)) | (
            (p.replica_node == self.node_id) & (p.replica_blob == blob))
        with self.sessions() as s:
            return s.scalar(select(p.part_number).where(p.upload_id == upload_id, p.part_number == number,
                                                        mine)) is not None

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
                                             MultipartUpload.state.in_((UploadState.OPEN.value, UploadState.COMPLETING.value)))
        with self.sessions() as s:
            rows: Sequence[MultipartUpload] = s.scalars(stmt).all()
        out = [UploadInfo(r.upload_id, r.bucket, r.key, _aware(r.initiated_at), r.checksum_algorithm)
               for r in rows if r.key.startswith(prefix) and (key_marker is None or r.key > key_marker)]
        out.sort(key=lambda u: (u.key, u.initiated))
        return out[:limit]

    def abort_upload(self, upload_id: str, intend_drop: Callable[[list[str]], None] | None = None
                     ) -> tuple[list[str], str | None]:
        """Remove an open upload and its parts (a CAS on ``open``: never one being completed);
        returns their blobs and the remote upload for the caller to delete. Raises UploadNotOpen.
        ``intend_drop`` is told the blobs before the commit (a crash right after it leaks none)."""
        with self.sessions.begin() as s:
            self._lock_open(s, upload_id)
            remote_id = s.scalar(select(MultipartUpload.remote_upload_id)
                                 .where(MultipartUpload.upload_id == upload_id))
            blobs = list(s.scalars(select(MultipartPart.blob).where(MultipartPart.upload_id == upload_id)))
            if intend_drop is not None:
                intend_drop(blobs)
            s.execute(delete(MultipartPart).where(MultipartPart.upload_id == upload_id))
            s.execute(delete(MultipartUpload).where(MultipartUpload.upload_id == upload_id))
        return blobs, remote_id

    # ---- the Complete claim ------------------------------------------------------------------
    def claim_complete(self, upload_id: str, bucket: str, key: str, token: str, lease_seconds: float
                       ) -> tuple[ClaimOutcome, tuple[UploadInfo, dict[str, object]] | CompletedUpload | None]:
        """CAS ``open -> completing`` (or take over a claim whose lease ran out): exactly one
        Complete wins. The others learn the kept result, that it is still busy, or that it is gone
        (also when the upload id belongs to another bucket or key)."""
        now = time.time()
        u = MultipartUpload
        with self.sessions.begin() as s:
            mine = {"claim": token, "claim_until": now + lease_seconds, "claim_node": self.node_id}
            this = (u.upload_id == upload_id, u.bucket == bucket, u.key == key)
            won = move_uploads(s.connection(), [UploadState.OPEN], UploadState.COMPLETING, *this, **mine)
            if won == 0:  # take over a claim that ran out: the claim changes hands, the state stays
                won = affected(s.execute(update(u).where(*this, u.state == UploadState.COMPLETING.value,
                                                         u.claim_until < now).values(**mine)))
            row = s.get(u, upload_id)
            if row is None or (row.bucket, row.key) != (bucket, key):
                return "gone", None
            if won == 1:
                info = UploadInfo(row.upload_id, row.bucket, row.key, _aware(row.initiated_at),
                                  row.checksum_algorithm, tenant_id=row.tenant_id)
                return "claimed", (info, json.loads(row.headers_json))
            if row.state == UploadState.COMPLETED.value and row.result_json:
                return "completed", CompletedUpload.from_json(row.result_json)
            return "busy", None

    def release_claim(self, upload_id: str, token: str) -> None:
        """A Complete that failed (bad part list, remote refusal) hands the upload back."""
        with self.sessions.begin() as s:
            move_uploads(s.connection(), [UploadState.COMPLETING], UploadState.OPEN,
                         MultipartUpload.upload_id == upload_id, MultipartUpload.claim == token, **_NO_CLAIM)

    def release_claims_of_node(self) -> int:
        """Crash recovery at start, before any process of this node serves: claims this node
        holds belong to Completes that died with the previous run, so their uploads reopen."""
        u = MultipartUpload
        with self.sessions.begin() as s:
            return move_uploads(s.connection(), [UploadState.COMPLETING], UploadState.OPEN,
                                u.claim_node == self.node_id, **_NO_CLAIM)

    def finish_upload(self, claim: UploadClaim) -> list[str]:
        """Write-through: the object is on the remote; keep the result, return the part blobs."""
        with self.sessions.begin() as s:
            return finish_upload(s.connection(), claim)

    # ---- expiry ------------------------------------------------------------------------------
    def _mine(self) -> ColumnElement[bool]:
        return or_(MultipartUpload.node_id == self.node_id, MultipartUpload.node_id.is_(None))

    def expired_uploads(self, initiated_before: datetime) -> list[str]:
        """Open uploads of this node started before the cutoff (abandoned: the expiry aborts them)."""
        with self.sessions() as s:
            return list(s.scalars(select(MultipartUpload.upload_id).where(
                MultipartUpload.state == UploadState.OPEN.value, MultipartUpload.initiated_at < initiated_before, self._mine())))

    def forget_completed(self, completed_before: datetime) -> int:
        """Drop kept Complete results older than the retention (a repeated Complete then gets
        NoSuchUpload, as from S3 long after the fact)."""
        with self.sessions.begin() as s:
            gone = s.execute(delete(MultipartUpload).where(
                MultipartUpload.state == UploadState.COMPLETED.value, MultipartUpload.completed_at < completed_before,
                self._mine()))
            return affected(gone)

    def session(self) -> Session:
        return self.sessions()
