"""Catalog tables (SQLAlchemy 2.x typed ORM). Alembic migrations create them; never ``create_all``.

Keys of objects only ever appear here as data: files on disk are named by generated ids.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, deferred, mapped_column

from app.domain.states import CacheState, UploadState

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    cache_quota_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class AccessKey(Base):
    __tablename__ = "access_keys"

    access_key: Mapped[str] = mapped_column(String(128), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    secret_key: Mapped[str] = mapped_column(String(256))
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class MultipartUpload(Base):
    """An upload in progress; parts live in the local blob store until Complete.

    ``state`` is ``open``, then ``completing`` while one Complete holds the claim (``claim``,
    until ``claim_until``, taken on ``claim_node``), then ``completed``: the row then keeps only the result
    (``result_json``) so a repeated Complete gets the same answer, until the expiry sweep.
    """

    __tablename__ = "multipart_uploads"
    __table_args__ = (Index("ix_multipart_uploads_state_initiated", "state", "initiated_at"),)

    upload_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    bucket: Mapped[str] = mapped_column(String(63), index=True)
    key: Mapped[str] = mapped_column(Text)
    tenant_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    initiated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    headers_json: Mapped[str] = mapped_column(Text, default="{}")
    checksum_algorithm: Mapped[str | None] = mapped_column(String(16), nullable=True)
    state: Mapped[str] = mapped_column(String(16), default=UploadState.OPEN.value)
    # The remote multipart upload that parts are copied to as they arrive (write-back), so the
    # remote holds most of the object by the time the client completes it.
    remote_upload_id: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    node_id: Mapped[str | None] = mapped_column(String(128), nullable=True)  # whose disk holds the parts
    # Who is opening the remote upload right now (record before create): one opener per upload,
    # until ``remote_opener_until`` (app/adapters/catalog/uploads/remote_opening.py).
    remote_opener: Mapped[str | None] = mapped_column(String(64), nullable=True)
    remote_opener_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    claim: Mapped[str | None] = mapped_column(String(64), nullable=True)
    claim_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    claim_node: Mapped[str | None] = mapped_column(String(128), nullable=True)  # the claimer's node
    result_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class MultipartPart(Base):
    __tablename__ = "multipart_parts"

    upload_id: Mapped[str] = mapped_column(
        ForeignKey("multipart_uploads.upload_id", ondelete="CASCADE"), primary_key=True
    )
    part_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    etag: Mapped[str] = mapped_column(String(64))
    blob: Mapped[str] = mapped_column(String(64))
    checksums_json: Mapped[str] = mapped_column(Text, default="{}")
    last_modified: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    node_id: Mapped[str | None] = mapped_column(String(128), nullable=True)  # whose disk holds the blob
    # write_replicas 2: the other node holding a copy of the part, and its blob id there
    replica_node: Mapped[str | None] = mapped_column(String(128), nullable=True)
    replica_blob: Mapped[str | None] = mapped_column(String(64), nullable=True)


class ObjectVersion(Base):
    """The write journal: one row per acknowledged PUT, multipart Complete, COPY or DELETE.

    ``seq`` is the monotonically increasing sequence number; for one key, the row with the
    highest seq is the truth until it is durable on the remote.
    """

    __tablename__ = "object_versions"
    __table_args__ = (
        Index("ix_object_versions_bucket_key_seq", "bucket", "key", "seq"),
        Index("ix_object_versions_state_due", "state", "next_attempt_at"),
    )

    seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                     autoincrement=True)
    bucket: Mapped[str] = mapped_column(String(63))
    # Keys sort by code point, as S3 lists them (PostgreSQL's default collation would not).
    key: Mapped[str] = mapped_column(Text().with_variant(Text(collation="C"), "postgresql"))
    op: Mapped[str] = mapped_column(String(8))  # put | delete
    state: Mapped[str] = mapped_column(String(16))
    generation: Mapped[int] = mapped_column(Integer, default=0)
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    etag: Mapped[str] = mapped_column(String(64), default="")
    blobs_json: Mapped[str] = mapped_column(Text, default="[]")
    multipart: Mapped[bool] = mapped_column(Boolean, default=False)
    headers_json: Mapped[str] = mapped_column(Text, default="{}")
    checksums_json: Mapped[str] = mapped_column(Text, default="{}")
    checksum_algorithm: Mapped[str | None] = mapped_column(String(16), nullable=True)
    node_id: Mapped[str] = mapped_column(String(64), default="")
    tenant_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Unix times (float) where SQL compares them: portable across SQLite and PostgreSQL.
    next_attempt_at: Mapped[float] = mapped_column(Float, default=0.0)
    lease_until: Mapped[float] = mapped_column(Float, default=0.0)
    remote_etag: Mapped[str | None] = mapped_column(String(128), nullable=True)
    remote_version_id: Mapped[str | None] = mapped_column(String(256), nullable=True)
    durable_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # A multipart write's remote upload whose parts may already be there (checked before use).
    remote_upload_id: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    # A small body kept in the row itself (``BlobRef.blob == INLINE_BLOB``): the row's commit is
    # then its only fsync. Emptied when the row is final (durable, superseded); loaded only on
    # demand (``Journal.inline_body``), never with the row.
    inline_body: Mapped[bytes | None] = deferred(mapped_column(LargeBinary, nullable=True))


class Policy(Base):
    """Per bucket or prefix behaviour; the longest matching prefix wins, unset fields inherit.

    ``bucket = "*"`` with prefix ``""`` is the node-wide default an operator can override.
    """

    __tablename__ = "policies"
    __table_args__ = (UniqueConstraint("bucket", "prefix", name="uq_policies_bucket_prefix"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    bucket: Mapped[str] = mapped_column(String(63))
    prefix: Mapped[str] = mapped_column(Text().with_variant(Text(collation="C"), "postgresql"), default="")
    mode: Mapped[str | None] = mapped_column(String(16), nullable=True)  # write-back|write-through|read-only|bypass
    revalidate: Mapped[str | None] = mapped_column(String(16), nullable=True)  # immutable|ttl|always
    ttl_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    serve_stale: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    pinned: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    admission: Mapped[str | None] = mapped_column(String(16), nullable=True)  # frequency|always|second-hit
    quota_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    write_replicas: Mapped[int | None] = mapped_column(Integer, nullable=True)  # 1 | 2 (fleet)
    prefetch: Mapped[str | None] = mapped_column(String(16), nullable=True)  # sequential|prefix|off
    updated_at: Mapped[float] = mapped_column(Float, default=0.0)


class JournalReplica(Base):
    """A second node's copy of a buffered write (``write_replicas: 2``): its own blob ids there.

    Inserted in the same commit as the journal row, so a row that asked for a replica never
    exists without one. If the row's node is lost, the replica's node takes the row over (its
    ``node_id`` and ``blobs_json`` become the replica's) and destages it.
    """

    __tablename__ = "journal_replicas"

    seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"),
                                     ForeignKey("object_versions.seq", ondelete="CASCADE"), primary_key=True)
    node_id: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)
    blobs_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)


class CacheEntry(Base):
    """One cached remote object version on one node: its metadata and how many bytes are local.

    Block files are named by a hash of (bucket, key, etag, block index), so a row is the whole
    index of an entry: no directory walk at start-up, and a changed object never reuses blocks.
    ``state``: ``ready`` (serve), ``seen`` (second-hit admission: one miss recorded, nothing
    cached), ``invalid`` (a write replaced it; the owning node deletes its blocks).
    """

    __tablename__ = "cache_entries"
    __table_args__ = (
        UniqueConstraint("node_id", "bucket", "key", name="uq_cache_entries_node_bucket_key"),
        Index("ix_cache_entries_node_access", "node_id", "last_access"),
        Index("ix_cache_entries_bucket_key", "bucket", "key"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                    autoincrement=True)
    node_id: Mapped[str] = mapped_column(String(64))
    bucket: Mapped[str] = mapped_column(String(63))
    key: Mapped[str] = mapped_column(Text().with_variant(Text(collation="C"), "postgresql"))
    etag: Mapped[str] = mapped_column(String(128))
    version_id: Mapped[str | None] = mapped_column(String(256), nullable=True)
    size: Mapped[int] = mapped_column(BigInteger)
    block_size: Mapped[int] = mapped_column(BigInteger)
    meta_json: Mapped[str] = mapped_column(Text, default="{}")
    tenant_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    state: Mapped[str] = mapped_column(String(8), default=CacheState.READY.value)
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)
    cached_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    validated_at: Mapped[float] = mapped_column(Float, default=0.0)
    last_access: Mapped[float] = mapped_column(Float, default=0.0)
    hits: Mapped[int] = mapped_column(BigInteger, default=0)


class StagingJob(Base):
    """A warm-up of a prefix ahead of a job, with progress an operator can watch or cancel."""

    __tablename__ = "staging_jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    bucket: Mapped[str] = mapped_column(String(63))
    prefix: Mapped[str] = mapped_column(Text, default="")
    node_id: Mapped[str] = mapped_column(String(64))
    tenant_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    state: Mapped[str] = mapped_column(String(16), default="queued")  # queued|running|done|failed|cancelled
    objects_total: Mapped[int] = mapped_column(BigInteger, default=0)
    objects_done: Mapped[int] = mapped_column(BigInteger, default=0)
    objects_skipped: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_total: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_done: Mapped[int] = mapped_column(BigInteger, default=0)
    listing_done: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # the runner's last progress write


class AdminToken(Base):
    """A scoped bearer token for the admin API; only its SHA-256 is stored."""

    __tablename__ = "admin_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[str] = mapped_column(String(512), default="")  # space-separated, e.g. "read write"
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Bound to one tenant (read/write only): sees and changes that tenant's buckets, nothing else.
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), nullable=True)


class Remote(Base):
    """A remote S3 endpoint an operator registered (the settings' remote is the default one)."""

    __tablename__ = "remotes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    endpoint: Mapped[str] = mapped_column(String(1024))
    region: Mapped[str] = mapped_column(String(64), default="us-east-1")
    access_key: Mapped[str | None] = mapped_column(String(256), nullable=True)
    secret_key: Mapped[str | None] = mapped_column(String(256), nullable=True)
    addressing_style: Mapped[str] = mapped_column(String(16), default="path")
    verify_tls: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    # Capability profile (app/domain/profiles.py): which key checks the gateway applies.
    profile: Mapped[str] = mapped_column(String(32), default="seaweedfs", server_default="seaweedfs")


class BucketMapping(Base):
    """A gateway bucket served from a registered remote's bucket (else the default remote)."""

    __tablename__ = "bucket_mappings"

    bucket: Mapped[str] = mapped_column(String(63), primary_key=True)
    remote_id: Mapped[int] = mapped_column(ForeignKey("remotes.id", ondelete="CASCADE"), index=True)
    remote_bucket: Mapped[str] = mapped_column(String(63))
    created_at: Mapped[float] = mapped_column(Float, default=0.0)


class RoutingGeneration(Base):
    """One row: a counter every change of a bucket mapping or a remote moves, in the change's
    commit. Every process compares it with the table it routes by (``adapters/remote/router.py``)."""

    __tablename__ = "routing_generation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger, default=0)


class BucketOwner(Base):
    """Which tenant owns a bucket: set when a tenant creates it, or by the admin API for a bucket
    that already exists on the remote. A bucket without a row belongs to the bootstrap tenant."""

    __tablename__ = "bucket_owners"

    bucket: Mapped[str] = mapped_column(String(63), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)


class Node(Base):
    """A serving node: registered at start, heartbeat while it serves (app/adapters/catalog/control/nodes.py).

    ``instance`` tells two starts of the same node id apart; a row with a recent heartbeat, another
    instance and another data dir means a live node already uses the id.
    """

    __tablename__ = "nodes"

    node_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    instance: Mapped[str] = mapped_column(String(64))
    # The data dir the instance owns (its ferry.dirid): a successor that owns the same dir
    # knows the old instance is dead (it would still hold the dir's lock) and takes over at once.
    data_dir_id: Mapped[str] = mapped_column(String(64), default="", server_default="")
    host: Mapped[str] = mapped_column(String(255), default="", server_default="")
    pid: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    version: Mapped[str] = mapped_column(String(64), default="", server_default="")
    started_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    heartbeat_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # host:port of the node's internal endpoint (peer reads); '' when it serves no peers.
    address: Mapped[str] = mapped_column(String(255), default="", server_default="")


class KeyClaim(Base):
    """A conditional write's hold on one key (``adapters/catalog/journal/key_claims.py``): the check of
    If-Match / If-None-Match and the write happen while it is held, on every process sharing the
    catalog. Released, the row keeps the last conditional write's result so that the same request
    retried (same SDK invocation id) gets its answer again instead of 412."""

    __tablename__ = "key_claims"

    bucket: Mapped[str] = mapped_column(String(63), primary_key=True)
    key: Mapped[str] = mapped_column(Text().with_variant(Text(collation="C"), "postgresql"), primary_key=True)
    token: Mapped[str] = mapped_column(String(64), default="", server_default="")
    lease_until: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    node_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    invocation: Mapped[str | None] = mapped_column(String(128), nullable=True)
    etag: Mapped[str | None] = mapped_column(String(128), nullable=True)
    done_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class PartCopy(Base):
    """A part being sent to a remote multipart upload (``adapters/catalog/uploads/part_claims.py``):
    by an eager copy or a destage, in whichever worker process; held under a lease so that a
    worker killed mid-copy gives the part back, and released (deleted) when the copy ends."""

    __tablename__ = "part_copies"

    remote_upload_id: Mapped[str] = mapped_column(String(1024), primary_key=True)
    part_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    token: Mapped[str] = mapped_column(String(64))
    lease_until: Mapped[float] = mapped_column(Float)
    node_id: Mapped[str | None] = mapped_column(String(64), nullable=True)


def table(model: type[Base]) -> Table:
    """A model's Core table (``__table__`` is typed as any FROM clause; it is always a Table)."""
    return cast(Table, model.__table__)
