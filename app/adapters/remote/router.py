"""Per-bucket remotes: one ``RemoteStore`` per registered remote, chosen by the bucket mapping.

``RemoteRouter`` has ``RemoteStore``'s interface, so the services, the read cache, staging and
the destage (gateway and Celery workers alike) route without knowing it: a mapped bucket's calls
go to its remote under the remote bucket's name; an unmapped bucket's to the default remote
(settings). Remote errors that name the remote bucket name the gateway bucket instead.

The table (remotes and mappings) is read at start with the catalog's routing generation, which
every change of a mapping or a remote moves in its commit. ``route()`` trusts the table for
``refresh_seconds`` after the generation read it was checked by *began*; past that, the call
itself reads the generation (one primary-key read, at most once per interval per process) and,
when it moved, reloads the table before answering. The admin call that made the change answers
only ``settle_seconds()`` after its commit, so every request and every destage decided after it
is answered in any process routes by the change (issue 26: a background refresh answered the
first calls of an idle process from the old table). A remote whose row changed (credentials
rotated, endpoint moved, profile changed) gets a new client; requests in flight keep the old one.
A destage pins one route for its whole upload (``pinned``) and hands its ``RouteStamp`` to the
durable commit, which refuses it if the bucket was remapped meanwhile.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, BinaryIO, cast

from app.adapters.catalog.control.remotes import MappingInfo, RemoteInfo, RemoteRepo
from app.adapters.remote import RemoteConfig, RemoteStore
from app.adapters.remote.order import ByteOrderWalk
from app.domain.errors import S3Error
from app.domain.objects import BucketInfo, ListPage, ObjectMeta, PartAttributes
from app.domain.profiles import RemoteProfile, profile_named
from app.domain.routing import DEFAULT_ROUTE, RouteId, RouteStamp
from app.refresher import Refresher

log = logging.getLogger("ferry.remote")

COPY_SPOOL_BYTES = 8 * 1024 * 1024  # a copy between two remotes spills to a temp file above this


@dataclass(frozen=True)
class Route:
    """Where one gateway bucket lives."""

    store: RemoteStore
    remote_bucket: str | None  # the bucket's name on that remote (None: the gateway's name)
    profile: RemoteProfile
    remote: str  # the registered remote's name, "default" for the settings' one
    ident: RouteId = DEFAULT_ROUTE  # what a destage's durable commit compares (``check_route``)

    def name(self, bucket: str) -> str:
        return self.remote_bucket or bucket


@dataclass(frozen=True)
class _Table:
    """The routes by bucket and the generation they were read at: swapped as one value."""

    generation: int
    routes: dict[str, Route]


def _fingerprint(info: RemoteInfo) -> tuple[Any, ...]:
    return (info.endpoint, info.region, info.access_key, info.secret_key, info.addressing_style,
            info.verify_tls, info.profile)


class RemoteRouter:
    """``RemoteStore``'s interface over several remotes, routed by bucket."""

    def __init__(self, default: RemoteStore, default_profile: RemoteProfile, repo: RemoteRepo | None,
                 base: RemoteConfig, *, refresh_seconds: float = 2.0,
                 factory: Callable[[RemoteConfig], RemoteStore] = RemoteStore) -> None:
        self.default = Route(default, None, default_profile, "default")
        self.repo = repo
        self.base = base  # timeouts, pool and circuit settings every registered remote inherits
        self.refresh_seconds = refresh_seconds
        self.factory = factory
        self._stores: dict[int, tuple[tuple[Any, ...], RemoteStore]] = {}
        self._table = _Table(-1, {})
        self._checked_at = float("-inf")  # monotonic time the last generation read began
        self._pins: dict[str, Route] = {}  # a pinned view's fixed routes (``pinned``)
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._refresher = Refresher(self, "_check_if_half_old", refresh_seconds / 2)
        if repo is not None:
            self.refresh()

    # ---- the default remote's face (health checks, circuit) -----------------------------------
    @property
    def cfg(self) -> RemoteConfig:
        return self.default.store.cfg

    @property
    def circuit(self) -> Any:
        return self.default.store.circuit

    # ---- routing table -------------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the generation and, if it moved, the table now (blocking); a failure keeps
        the table in use for another interval (the catalog is down: nothing can be remapped
        through it either, and every request would otherwise wait on it)."""
        if self.repo is None:
            return
        with self._guard():
            self._check(time.monotonic(), force=True)

    def settle_seconds(self) -> float:
        """How long after a change's commit every process is sure to route by it: the interval,
        plus a margin for clock rates of other hosts and the scheduler."""
        return self.refresh_seconds * 1.02 + 0.05

    def _guard(self) -> threading.Lock:
        if self._pid != os.getpid():  # forked (a prefork pool): the parent's lock may be held
            self._pid, self._lock = os.getpid(), threading.Lock()
        return self._lock

    def _check(self, started: float, *, force: bool = False) -> None:
        """Under the lock. ``started`` is taken before the generation read: the snapshot it reads
        is at least that recent, so the table may be trusted until ``started + refresh_seconds``."""
        assert self.repo is not None
        try:
            if force or self.repo.generation() != self._table.generation:
                self._apply(*self.repo.routes())
        except Exception as exc:  # the catalog is down: keep routing as before, retry later
            log.warning("remote routes not refreshed: %s", exc)
        self._checked_at = started

    def _current(self) -> _Table:
        """The table, checked against the catalog's generation within the last interval (by the
        refresher, app/refresher.py; by this call when the refresher is behind)."""
        if self.repo is not None:
            if time.monotonic() - self._checked_at >= self.refresh_seconds:
                with self._guard():
                    now = time.monotonic()
                    if now - self._checked_at >= self.refresh_seconds:  # not done by another thread meanwhile
                        self._check(now)
            else:
                self._refresher.used()
        return self._table

    def _check_if_half_old(self) -> None:
        """The refresher's tick."""
        with self._guard():
            now = time.monotonic()
            if now - self._checked_at >= self.refresh_seconds / 2:
                self._check(now)

    def _apply(self, generation: int, remotes: list[RemoteInfo], mappings: list[MappingInfo]) -> None:
        stores: dict[int, tuple[tuple[Any, ...], RemoteStore]] = {}
        for info in remotes:
            fp = _fingerprint(info)
            known = self._stores.get(info.id)
            if known is not None and known[0] == fp:
                stores[info.id] = known
                continue
            try:
                stores[info.id] = (fp, self.factory(self._config(info)))
            except Exception as exc:  # e.g. a malformed endpoint: its buckets answer 503
                log.warning("remote %s: client not built: %s", info.name, exc)
        by_id = {r.id: r for r in remotes}
        routes = {m.bucket: Route(stores[m.remote_id][1], m.remote_bucket, _profile(by_id[m.remote_id]),
                                  m.remote_name, (m.remote_id, m.remote_bucket, by_id[m.remote_id].endpoint))
                  for m in mappings if m.remote_id in stores}
        self._stores, self._table = stores, _Table(generation, routes)

    def _config(self, info: RemoteInfo) -> RemoteConfig:
        return replace(self.base, endpoint=info.endpoint, region=info.region, access_key=info.access_key,
                       secret_key=info.secret_key, addressing_style=info.addressing_style,
                       verify_tls=info.verify_tls)

    def route(self, bucket: str) -> Route:
        """The remote of a gateway bucket (``Route.name(bucket)``: its name there)."""
        if self._pins:
            pinned = self._pins.get(bucket)
            if pinned is not None:
                return pinned
        return self._current().routes.get(bucket, self.default)

    def pinned(self, bucket: str, fresh: bool = False) -> tuple[RemoteRouter, RouteStamp | None]:
        """A view of this router whose calls for ``bucket`` all go to the route it has now, and
        that route's stamp (None without a catalog): a destage uploads to one remote from its
        first request to its last, and its durable commit checks that the bucket still maps there.
        ``fresh``: re-read the catalog first (the commit refused the last route)."""
        if fresh:
            self.refresh()
        table = self._current()
        route = table.routes.get(bucket, self.default)
        view = copy.copy(self)
        view._pins = {bucket: route}
        return view, RouteStamp(table.generation, route.ident) if self.repo is not None else None

    def profile(self, bucket: str) -> RemoteProfile:
        """The capability profile of the bucket's remote (which keys it can hold)."""
        return self.route(bucket).profile

    def remote_name(self, bucket: str) -> str:
        return self.route(bucket).remote

    @contextmanager
    def _named(self, route: Route, bucket: str) -> Iterator[None]:
        """Errors that name the remote bucket name the gateway's."""
        try:
            yield
        except S3Error as err:
            if route.name(bucket) != bucket and err.fields.get("BucketName") == route.remote_bucket:
                err.fields["BucketName"] = bucket
            raise

    def _call(self, name: str, bucket: str, *args: Any, **kwargs: Any) -> Any:
        route = self.route(bucket)
        with self._named(route, bucket):
            return getattr(route.store, name)(route.name(bucket), *args, **kwargs)

    # ---- buckets -------------------------------------------------------------------------------
    def list_buckets(self) -> list[BucketInfo]:
        """The default remote's buckets that no mapping shadows, plus every mapped bucket whose
        remote bucket exists (or, when its remote does not answer, is at least mapped)."""
        routes = dict(self._current().routes)
        listed = [b for b in self.default.store.list_buckets() if b.name not in routes]
        by_store: dict[int, list[tuple[str, Route]]] = {}
        for bucket, route in routes.items():
            by_store.setdefault(id(route.store), []).append((bucket, route))
        for entries in by_store.values():
            try:
                there = {b.name: b.created for b in entries[0][1].store.list_buckets()}
            except S3Error:
                there = {route.name(b): datetime.fromtimestamp(0).astimezone() for b, route in entries}
            listed += [BucketInfo(b, there[route.name(b)]) for b, route in entries if route.name(b) in there]
        return sorted(listed, key=lambda b: b.name)

    def create_bucket(self, bucket: str, location: str | None) -> None:
        self._call("create_bucket", bucket, location)

    def head_bucket(self, bucket: str) -> None:
        self._call("head_bucket", bucket)

    def delete_bucket(self, bucket: str) -> None:
        self._call("delete_bucket", bucket)

    def bucket_location(self, bucket: str) -> str | None:
        result: str | None = self._call("bucket_location", bucket)
        return result

    # ---- listing -------------------------------------------------------------------------------
    def list_objects(self, bucket: str, prefix: str, delimiter: str | None, start_after: str | None,
                     max_keys: int) -> ListPage:
        """A page in S3's byte order, whatever order the bucket's remote lists in (its profile)."""
        route = self.route(bucket)
        if route.profile.ordered_listing:
            page: ListPage = self._call("list_objects", bucket, prefix, delimiter, start_after, max_keys)
            return page

        def remote_page(p: str, d: str | None, after: str | None, n: int) -> ListPage:
            listed: ListPage = self._call("list_objects", bucket, p, d, after, n)
            return listed

        return ByteOrderWalk(remote_page).page(prefix, delimiter, start_after, max_keys)

    def list_as_listed(self, bucket: str, prefix: str, start_after: str | None, max_keys: int) -> ListPage:
        """One page of the remote's own listing, in its own order (no walk)."""
        page: ListPage = self._call("list_objects", bucket, prefix, None, start_after, max_keys)
        return page

    def list_object_versions(self, bucket: str, prefix: str, delimiter: str | None, key_marker: str | None,
                             max_keys: int) -> ListPage:
        page: ListPage = self._call("list_object_versions", bucket, prefix, delimiter, key_marker, max_keys)
        return page

    # ---- objects -------------------------------------------------------------------------------
    def head_object(self, bucket: str, key: str, if_none_match: str | None = None) -> ObjectMeta:
        meta: ObjectMeta = self._call("head_object", bucket, key, if_none_match)
        return meta

    def object_parts(self, bucket: str, key: str) -> tuple[str, list[PartAttributes]] | None:
        parts: tuple[str, list[PartAttributes]] | None = self._call("object_parts", bucket, key)
        return parts

    def get_object(self, bucket: str, key: str, byte_range: str | None = None,
                   if_match: str | None = None) -> tuple[ObjectMeta, BinaryIO]:
        got: tuple[ObjectMeta, BinaryIO] = self._call("get_object", bucket, key, byte_range, if_match)
        return got

    def put_object(self, bucket: str, key: str, body: BinaryIO, size: int, content_md5: str,
                   content_headers: dict[str, str], metadata: dict[str, str], checksums: dict[str, str], *,
                   if_match: str | None = None, if_none_match: str | None = None) -> str:
        etag: str = self._call("put_object", bucket, key, body, size, content_md5, content_headers, metadata,
                               checksums, if_match=if_match, if_none_match=if_none_match)
        return etag

    def copy_object(self, bucket: str, key: str, src_bucket: str, src_key: str, replace: bool,
                    content_headers: dict[str, str], metadata: dict[str, str]) -> tuple[str, datetime]:
        """Server-side on one remote; between two remotes, the bytes go through this process."""
        dst, src = self.route(bucket), self.route(src_bucket)
        if dst.store is src.store:
            with self._named(src, src_bucket), self._named(dst, bucket):
                result: tuple[str, datetime] = dst.store.copy_object(
                    dst.name(bucket), key, src.name(src_bucket), src_key, replace, content_headers, metadata)
                return result
        return self._copy_across(dst, bucket, key, src, src_bucket, src_key, replace, content_headers, metadata)

    def _copy_across(self, dst: Route, bucket: str, key: str, src: Route, src_bucket: str, src_key: str,
                     replace: bool, content_headers: dict[str, str], metadata: dict[str, str]) -> tuple[str, datetime]:
        with self._named(src, src_bucket):
            meta, body = src.store.get_object(src.name(src_bucket), src_key)
        if not replace:
            content_headers, metadata = dict(meta.content_headers), dict(meta.metadata)
        md5 = hashlib.md5()  # S3's Content-MD5
        with tempfile.SpooledTemporaryFile(max_size=COPY_SPOOL_BYTES) as spool:
            try:
                while chunk := body.read(1024 * 1024):
                    md5.update(chunk)
                    spool.write(chunk)
            finally:
                body.close()
            size = spool.tell()
            spool.seek(0)
            with self._named(dst, bucket):
                etag = dst.store.put_object(dst.name(bucket), key, cast(BinaryIO, spool), size,  # a binary file
                                            base64.b64encode(md5.digest()).decode(), content_headers,
                                            metadata, {})
        return etag, datetime.now().astimezone()

    def delete_object(self, bucket: str, key: str, if_match: str | None = None) -> None:
        self._call("delete_object", bucket, key, if_match)

    def delete_objects(self, bucket: str, keys: list[str]) -> dict[str, tuple[str, str]]:
        failures: dict[str, tuple[str, str]] = self._call("delete_objects", bucket, keys)
        return failures

    def current_etag(self, bucket: str, key: str) -> str | None:
        etag: str | None = self._call("current_etag", bucket, key)
        return etag

    def conditional_writes(self, bucket: str) -> bool:
        return bool(self._call("conditional_writes", bucket))

    # ---- multipart -----------------------------------------------------------------------------
    def create_multipart(self, bucket: str, key: str, content_headers: dict[str, str],
                         metadata: dict[str, str], checksum_algorithm: str | None,
                         checksum_type: str | None = None) -> str:
        upload: str = self._call("create_multipart", bucket, key, content_headers, metadata, checksum_algorithm,
                                 checksum_type)
        return upload

    def list_multipart(self, bucket: str) -> list[tuple[str, str, datetime]]:
        uploads: list[tuple[str, str, datetime]] = self._call("list_multipart", bucket)
        return uploads

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: BinaryIO, size: int,
                    content_md5: str, checksums: dict[str, str]) -> str:
        etag: str = self._call("upload_part", bucket, key, upload_id, number, body, size, content_md5, checksums)
        return etag

    def complete_multipart(self, bucket: str, key: str, upload_id: str,
                           parts: list[tuple[int, str, dict[str, str]]]) -> str:
        etag: str = self._call("complete_multipart", bucket, key, upload_id, parts)
        return etag

    def list_parts(self, bucket: str, key: str, upload_id: str) -> dict[int, str]:
        parts: dict[int, str] = self._call("list_parts", bucket, key, upload_id)
        return parts

    def abort_multipart(self, bucket: str, key: str, upload_id: str) -> None:
        self._call("abort_multipart", bucket, key, upload_id)


def _profile(info: RemoteInfo) -> RemoteProfile:
    try:
        return profile_named(info.profile)
    except ValueError:
        return profile_named(None)  # a value this version does not know: the strictest checks
