"""Catalog tables (SQLAlchemy 2.x typed ORM). Alembic migrations create them; never ``create_all``.

Keys of objects only ever appear here as data: files on disk are named by generated ids.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

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


class AccessKey(Base):
    __tablename__ = "access_keys"

    access_key: Mapped[str] = mapped_column(String(128), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    secret_key: Mapped[str] = mapped_column(String(256))
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class MultipartUpload(Base):
    """An upload in progress; parts live in the local blob store until Complete."""

    __tablename__ = "multipart_uploads"

    upload_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    bucket: Mapped[str] = mapped_column(String(63), index=True)
    key: Mapped[str] = mapped_column(Text)
    tenant_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    initiated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    headers_json: Mapped[str] = mapped_column(Text, default="{}")
    checksum_algorithm: Mapped[str | None] = mapped_column(String(16), nullable=True)
    state: Mapped[str] = mapped_column(String(16), default="open")


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
