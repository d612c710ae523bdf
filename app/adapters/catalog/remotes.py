"""Registered remotes and bucket mappings: the routing table of ``adapters/remote_router.py``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, exists, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import sessionmaker

from app.adapters.catalog.errors import Conflict, NotFound
from app.adapters.catalog.tables import BucketMapping, Remote

REMOTE_FIELDS = ("name", "endpoint", "region", "access_key", "secret_key", "addressing_style", "verify_tls",
                 "profile")


@dataclass(frozen=True)
class RemoteInfo:
    id: int
    name: str
    endpoint: str
    region: str
    access_key: str | None
    secret_key: str | None
    addressing_style: str
    verify_tls: bool
    created_at: float
    profile: str = "seaweedfs"


@dataclass(frozen=True)
class MappingInfo:
    bucket: str
    remote_id: int
    remote_name: str
    remote_bucket: str
    created_at: float


def _remote(r: Remote) -> RemoteInfo:
    return RemoteInfo(r.id, r.name, r.endpoint, r.region, r.access_key, r.secret_key, r.addressing_style,
                      r.verify_tls, r.created_at, r.profile)


class RemoteRepo:
    def __init__(self, engine: Engine) -> None:
        self.sessions = sessionmaker(engine, expire_on_commit=False)

    # ---- remotes -----------------------------------------------------------------------------
    def create(self, **values: Any) -> RemoteInfo:
        try:
            with self.sessions.begin() as s:
                if s.scalar(select(Remote.id).where(Remote.name == values["name"])) is not None:
                    raise Conflict(f"a remote named {values['name']!r} exists")
                row = Remote(created_at=time.time(), **{k: values[k] for k in REMOTE_FIELDS if k in values})
                s.add(row)
                s.flush()
                return _remote(row)
        except IntegrityError as exc:
            raise Conflict(f"a remote named {values['name']!r} exists") from exc

    def list(self) -> list[RemoteInfo]:
        with self.sessions() as s:
            return [_remote(r) for r in s.scalars(select(Remote).order_by(Remote.id))]

    def get(self, remote_id: int) -> RemoteInfo:
        with self.sessions() as s:
            row = s.get(Remote, remote_id)
            if row is None:
                raise NotFound(f"no remote with id {remote_id}")
            return _remote(row)

    def update(self, remote_id: int, **values: Any) -> RemoteInfo:
        try:
            with self.sessions.begin() as s:
                row = s.get(Remote, remote_id)
                if row is None:
                    raise NotFound(f"no remote with id {remote_id}")
                name = values.get("name")
                if name and name != row.name and s.scalar(select(Remote.id).where(Remote.name == name)) is not None:
                    raise Conflict(f"a remote named {name!r} exists")
                for key in REMOTE_FIELDS:
                    if key in values:
                        setattr(row, key, values[key])
                s.flush()
                return _remote(row)
        except IntegrityError as exc:
            raise Conflict(str(exc.orig)) from exc

    def delete(self, remote_id: int) -> None:
        """Delete a remote; refused while a bucket mapping still points at it."""
        with self.sessions.begin() as s:
            # Locked, then deleted only if unused, in one statement: checked first and deleted
            # after, a mapping added in between would go with it (ON DELETE CASCADE), after its
            # caller was told it was saved. (PostgreSQL: a mapping's insert waits for the lock.)
            row = s.scalars(select(Remote).where(Remote.id == remote_id).with_for_update()).first()
            if row is None:
                raise NotFound(f"no remote with id {remote_id}")
            unused = ~exists().where(BucketMapping.remote_id == remote_id)
            if s.execute(delete(Remote).where(Remote.id == remote_id, unused)
                         .execution_options(synchronize_session=False)).rowcount == 1:
                return
            used = list(s.scalars(select(BucketMapping.bucket).where(BucketMapping.remote_id == remote_id)))
            raise Conflict(f"remote {row.name!r} is used by bucket mappings: {', '.join(sorted(used))}")

    def routes(self) -> tuple[list[RemoteInfo], list[MappingInfo]]:
        """Every remote and every mapping, read in one transaction (the router's refresh)."""
        with self.sessions() as s:
            remotes = {r.id: _remote(r) for r in s.scalars(select(Remote))}
            mappings = [self._mapping(m, remotes[m.remote_id].name)
                        for m in s.scalars(select(BucketMapping)) if m.remote_id in remotes]
            return list(remotes.values()), mappings

    # ---- bucket mappings ---------------------------------------------------------------------
    def _mapping(self, m: BucketMapping, remote_name: str) -> MappingInfo:
        return MappingInfo(m.bucket, m.remote_id, remote_name, m.remote_bucket, m.created_at)

    def list_mappings(self) -> list[MappingInfo]:
        with self.sessions() as s:
            rows = s.execute(select(BucketMapping, Remote.name).join(Remote, Remote.id == BucketMapping.remote_id)
                             .order_by(BucketMapping.bucket)).all()
            return [self._mapping(m, name) for m, name in rows]

    def get_mapping(self, bucket: str) -> MappingInfo:
        with self.sessions() as s:
            row = s.execute(select(BucketMapping, Remote.name).join(Remote, Remote.id == BucketMapping.remote_id)
                            .where(BucketMapping.bucket == bucket)).first()
            if row is None:
                raise NotFound(f"no mapping for bucket {bucket!r}")
            return self._mapping(row[0], row[1])

    def put_mapping(self, bucket: str, remote_id: int, remote_bucket: str) -> tuple[MappingInfo, bool]:
        """Create or replace the mapping of a bucket; returns (mapping, created)."""
        try:
            with self.sessions.begin() as s:
                remote = s.get(Remote, remote_id)
                if remote is None:
                    raise NotFound(f"no remote with id {remote_id}")
                row = s.get(BucketMapping, bucket)
                created = row is None
                if row is None:
                    row = BucketMapping(bucket=bucket, remote_id=remote_id, remote_bucket=remote_bucket,
                                        created_at=time.time())
                    s.add(row)
                else:
                    row.remote_id, row.remote_bucket = remote_id, remote_bucket
                s.flush()
                return self._mapping(row, remote.name), created
        except IntegrityError as exc:
            raise Conflict(f"mapping for bucket {bucket!r} changed concurrently") from exc

    def delete_mapping(self, bucket: str) -> None:
        with self.sessions.begin() as s:
            row = s.get(BucketMapping, bucket)
            if row is None:
                raise NotFound(f"no mapping for bucket {bucket!r}")
            s.delete(row)
