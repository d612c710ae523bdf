"""Registered remotes and bucket mappings: the routing table of ``adapters/remote/router.py``.

Every change of a mapping or a remote moves the routing generation in its commit, under an
exclusive lock that a destage's durable commit takes shared (``check_route``): a remap and a
destage's "durable" are ordered, so a write is never marked durable on a remote its bucket no
longer maps to. A remap also invalidates the bucket's cache entries (they came from the old
remote) in the same commit.
"""

from __future__ import annotations

import builtins
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, delete, exists, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.adapters.catalog.cache.entry_rows import move_entries
from app.adapters.catalog.engine import Sessions, affected
from app.adapters.catalog.errors import Conflict, NotFound
from app.adapters.catalog.tables import BucketMapping, CacheEntry, Remote, RoutingGeneration
from app.domain.routing import DEFAULT_ROUTE, RouteId, RouteMoved, RouteStamp
from app.domain.states import CacheState

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


_ROUTING_LOCK = (0x46657273, 1)  # PostgreSQL advisory lock (space, id): remaps exclusive, destages shared


def _lock_routing(conn: Connection, *, shared: bool) -> None:
    """PostgreSQL: the routing lock (advisory: no row is written by the shared holders).
    SQLite: every writing transaction already holds the database's one write lock."""
    if conn.dialect.name == "postgresql":
        fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        conn.execute(text(f"SELECT {fn}(:space, :id)"), {"space": _ROUTING_LOCK[0], "id": _ROUTING_LOCK[1]})


def read_generation(conn: Connection) -> int:
    """The routing generation: one primary-key read (0 before the first change)."""
    value = conn.execute(select(RoutingGeneration.generation).where(RoutingGeneration.id == 1)).scalar()
    return int(value or 0)


def bump_generation(s: Session) -> None:
    """Inside a change's transaction: the exclusive routing lock, then generation + 1."""
    conn = s.connection()
    _lock_routing(conn, shared=False)
    moved = conn.execute(update(RoutingGeneration).where(RoutingGeneration.id == 1)
                         .values(generation=RoutingGeneration.generation + 1)).rowcount
    if not moved:
        conn.execute(insert(RoutingGeneration).values(id=1, generation=1))


def route_of(conn: Connection, bucket: str) -> RouteId:
    """The bucket's route as the catalog has it now (``RouteId``)."""
    row = conn.execute(select(BucketMapping.remote_id, BucketMapping.remote_bucket, Remote.endpoint)
                       .join(Remote, Remote.id == BucketMapping.remote_id)
                       .where(BucketMapping.bucket == bucket)).first()
    return (int(row[0]), str(row[1]), str(row[2])) if row is not None else DEFAULT_ROUTE


def check_route(conn: Connection, bucket: str, stamp: RouteStamp) -> None:
    """Inside a durable commit: raise ``RouteMoved`` unless the bucket still maps where the
    upload went. The shared routing lock orders it with every remap (either the remap commits
    first and is seen here, or it waits for this commit). A generation that moved for another
    bucket's change costs one more read, not a re-upload."""
    _lock_routing(conn, shared=True)
    if read_generation(conn) == stamp.generation:
        return
    if route_of(conn, bucket) != stamp.route:
        raise RouteMoved(f"bucket {bucket!r} was remapped while its write was being destaged")


def _invalidate_bucket(s: Session, bucket: str) -> None:
    """Every node's cache entries of the bucket turn invalid: their bytes came from the old remote."""
    now = time.time()
    move_entries(s.connection(), CacheState, CacheState.INVALID, CacheEntry.bucket == bucket, validated_at=now)


def _remote(r: Remote) -> RemoteInfo:
    return RemoteInfo(r.id, r.name, r.endpoint, r.region, r.access_key, r.secret_key, r.addressing_style,
                      r.verify_tls, r.created_at, r.profile)


class RemoteRepo:
    def __init__(self, engine: Engine) -> None:
        self.sessions = Sessions(engine)

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

    def list(self) -> builtins.list[RemoteInfo]:
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
                moved = "endpoint" in values and values["endpoint"] != row.endpoint
                for key in REMOTE_FIELDS:
                    if key in values:
                        setattr(row, key, values[key])
                s.flush()
                bump_generation(s)
                if moved:  # its buckets' data is elsewhere now, as after a remap
                    for bucket in s.scalars(select(BucketMapping.bucket).where(BucketMapping.remote_id == remote_id)):
                        _invalidate_bucket(s, bucket)
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
            if affected(s.execute(delete(Remote).where(Remote.id == remote_id, unused)
                                  .execution_options(synchronize_session=False))) == 1:
                return
            used = list(s.scalars(select(BucketMapping.bucket).where(BucketMapping.remote_id == remote_id)))
            raise Conflict(f"remote {row.name!r} is used by bucket mappings: {', '.join(sorted(used))}")

    def generation(self) -> int:
        """The routing generation (what every route() compares, at most every refresh interval)."""
        with self.sessions() as s:
            return read_generation(s.connection())

    def routes(self) -> tuple[int, builtins.list[RemoteInfo], builtins.list[MappingInfo]]:
        """The generation, every remote and every mapping, read in one transaction (the
        router's reload). A change committed after the generation was read moves it again,
        so the router reloads once more."""
        with self.sessions.begin() as s:
            generation = read_generation(s.connection())
            remotes = {r.id: _remote(r) for r in s.scalars(select(Remote))}
            mappings = [self._mapping(m, remotes[m.remote_id].name)
                        for m in s.scalars(select(BucketMapping)) if m.remote_id in remotes]
            return generation, list(remotes.values()), mappings

    # ---- bucket mappings ---------------------------------------------------------------------
    def _mapping(self, m: BucketMapping, remote_name: str) -> MappingInfo:
        return MappingInfo(m.bucket, m.remote_id, remote_name, m.remote_bucket, m.created_at)

    def list_mappings(self) -> builtins.list[MappingInfo]:
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
                bump_generation(s)
                _invalidate_bucket(s, bucket)
                return self._mapping(row, remote.name), created
        except IntegrityError as exc:
            raise Conflict(f"mapping for bucket {bucket!r} changed concurrently") from exc

    def delete_mapping(self, bucket: str) -> None:
        with self.sessions.begin() as s:
            row = s.get(BucketMapping, bucket)
            if row is None:
                raise NotFound(f"no mapping for bucket {bucket!r}")
            s.delete(row)
            s.flush()
            bump_generation(s)
            _invalidate_bucket(s, bucket)
