"""Where a cache block's bytes come from in a fleet: its owner's internal endpoint, else the remote.

``PeerBlockSource`` has the remote's ``get_object`` shape, so the read cache asks it exactly as it
would ask the remote (app/bootstrap.py injects it in fleet mode). For the block the request
starts in, it finds the owner (rendezvous hashing over live nodes, app/fleet/membership.py):

- this node, or a node with no internal endpoint: the remote (this node is the one that fetches);
- a peer: a signed GET of that range from the peer, whose answer streams straight into this
  node's fill (no temp copy in between). The peer fills the block from the remote if it does not
  hold it, once, however many nodes ask: fleet-wide single-flight;
- a peer that cannot be reached, refuses, or fails mid-body: the remote, for the bytes not yet
  received (``If-Match`` the peer's ETag), and the peer is suspected until it beats again.

Requests served *for* a peer never go to another peer (``SERVING_PEER``): the owner fetches from
the remote, so two nodes with different views of the fleet cannot bounce a block between them.
"""

from __future__ import annotations

import contextvars
import logging
from typing import BinaryIO, Protocol, cast
from urllib.parse import urlencode

from app import metrics
from app.adapters.catalog.control.nodes import LiveNode
from app.domain.cache import Entry
from app.domain.errors import S3Error
from app.domain.objects import ObjectMeta
from app.domain.ranges import RangeRequest
from app.fleet import auth
from app.fleet.membership import Membership
from app.fleet.peer_http import PeerAnswer, PeerConnections
from app.fleet.wire import BLOCK_PATH, META, OWNED_PATH, decode_meta
from app.services.cache.on_behalf import FILL_TENANT

log = logging.getLogger("ferry.fleet")
SERVING_PEER: contextvars.ContextVar[bool] = contextvars.ContextVar("ferry_serving_peer", default=False)


class Remote(Protocol):
    def get_object(self, bucket: str, key: str, byte_range: str | None = None,
                   if_match: str | None = None) -> tuple[ObjectMeta, BinaryIO]: ...


class PeerUnavailable(Exception):
    """The owner could not answer (connection, timeout, 5xx, 403): read the remote instead."""


def _span(byte_range: str | None, block_size: int) -> tuple[int, int | None]:
    """(first, last or None) of a ``bytes=a-b`` / ``bytes=a-`` header (the one Range parser of
    app/domain/ranges.py); no range: block 0's bytes. ValueError for a suffix or ignored range."""
    if not byte_range:
        return 0, block_size - 1
    spec = RangeRequest.from_header(byte_range).spec
    if spec is None or spec[0] is None:
        raise ValueError(f"not a range from a first byte: {byte_range!r}")
    return spec[0], spec[1]


class PeerBlockSource:
    def __init__(self, remote: Remote, membership: Membership, secret: str, block_size: int, *,
                 connect_timeout: float = 2.0, read_timeout: float = 25.0, max_connections: int = 32) -> None:
        self.remote = remote
        self.membership = membership
        self.secret = secret
        self.block_size = block_size
        self.peers = PeerConnections(connect_timeout, read_timeout, max_idle=max_connections)

    def open_range(self, bucket: str, key: str, etag: str, first: int, last: int) -> BinaryIO:
        """A fill's bytes ``first..last`` of version ``etag`` (the cache's ``BlockSource``)."""
        return self.get_object(bucket, key, f"bytes={first}-{last}", if_match=etag)[1]

    def from_peer(self, bucket: str, key: str, index: int) -> bool:
        """Whether another live node owns the block (and keeps it); never for a request served
        for a peer, whose fills read the remote and are this node's to keep."""
        return not SERVING_PEER.get() and self.membership.owner(bucket, key, index) is not None

    def owner_of(self, bucket: str, key: str, index: int) -> str | None:
        """The other live node that owns block ``index`` (None: this node)."""
        peer = self.membership.owner(bucket, key, index)
        return peer.node_id if peer is not None else None

    def read_owned(self, owner: str, entry: Entry, first: int, last: int, tenant_id: int | None) -> bytes | None:
        """Bytes ``first..last`` of ``entry`` (a ready row of ``owner``) from that node's block
        file, named by the signed query (app/services/cache/owned.py); None when the node cannot
        be asked or does not hold the block whole (the caller reads the usual way)."""
        address = self.membership.address_of(owner)
        if address is None:
            return None
        params = {"bucket": entry.bucket, "key": entry.key, "etag": entry.etag, "size": str(entry.size),
                  "block_size": str(entry.block_size), "entry": str(entry.id)}
        if tenant_id is not None:
            params["tenant"] = str(tenant_id)
        query = urlencode(params)
        headers = auth.sign(self.secret, "GET", OWNED_PATH, query)
        headers[auth.NODE] = self.membership.node_id
        headers["Range"] = f"bytes={first}-{last}"
        resp: PeerAnswer | None = None
        try:
            resp = self.peers.get(address, f"{OWNED_PATH}?{query}", headers)
            if resp.status != 206:
                resp.drain()
                return None
            data = resp.read()
        except OSError as exc:
            if resp is not None:
                resp.close()
            log.info("fleet: block of %s/%s by name: peer %s unavailable (%s)", entry.bucket, entry.key, owner, exc)
            self.membership.suspect(owner)
            return None
        if len(data) != last - first + 1:  # the peer closed early: its connection is dropped, not kept
            resp.close()
            return None
        return data

    def get_object(self, bucket: str, key: str, byte_range: str | None = None,
                   if_match: str | None = None) -> tuple[ObjectMeta, BinaryIO]:
        """The remote's answer, or the same answer from the owner of the block it starts in."""
        if SERVING_PEER.get() or (byte_range is not None and not byte_range.strip().startswith("bytes=")):
            return self.remote.get_object(bucket, key, byte_range, if_match)
        try:
            first, last = _span(byte_range, self.block_size)
        except ValueError:  # a suffix range: only the remote knows the size
            return self.remote.get_object(bucket, key, byte_range, if_match)
        peer = self.membership.owner(bucket, key, first // self.block_size)
        if peer is None:
            return self.remote.get_object(bucket, key, byte_range, if_match)
        try:
            meta, body = self._from_peer(peer, bucket, key, first, last, if_match)
        except PeerUnavailable as exc:
            log.info("fleet: block of %s/%s from the remote: peer %s unavailable (%s)", bucket, key, peer.node_id, exc)
            metrics.fleet_peer_read("fallback")
            return self.remote.get_object(bucket, key, byte_range, if_match)
        metrics.fleet_peer_read("peer")
        return meta, body

    def _from_peer(self, peer: LiveNode, bucket: str, key: str, first: int, last: int | None,
                   if_match: str | None) -> tuple[ObjectMeta, BinaryIO]:
        params = {"bucket": bucket, "key": key}
        tenant_id = FILL_TENANT.get()
        if tenant_id is not None:
            params["tenant"] = str(tenant_id)  # signed with the query: only a node can say whose read it is
        query = urlencode(params)
        headers = auth.sign(self.secret, "GET", BLOCK_PATH, query)
        headers[auth.NODE] = self.membership.node_id
        headers["Range"] = f"bytes={first}-{'' if last is None else last}"
        if if_match:
            headers["If-Match"] = if_match
        try:
            resp = self.peers.get(peer.address, f"{BLOCK_PATH}?{query}", headers)
        except OSError as exc:
            self.membership.suspect(peer.node_id)
            raise PeerUnavailable(str(exc)) from exc
        if resp.status in (200, 206) and resp.headers.get(META):
            meta = decode_meta(resp.headers[META])
            return meta, cast(BinaryIO, PeerBody(resp, self, peer, bucket, key, meta, first, last))  # read and closed
        resp.drain()
        if resp.status == 412:
            raise S3Error("PreconditionFailed", "The object changed since this node cached it.")
        if resp.status == 404:
            raise S3Error("NoSuchKey", "The specified key does not exist.")
        if resp.status == 416:
            raise S3Error("InvalidRange", "The requested range is not satisfiable")
        if resp.status == 403:
            log.error("fleet: peer %s refused our signature (is FERRY_FLEET_SECRET the same on every node, "
                      "and the clocks in sync?)", peer.node_id)
        raise PeerUnavailable(f"HTTP {resp.status}")


class PeerBody:
    """The peer's answer as the fill reads it; if the peer fails mid-body, the rest comes from
    the remote (``If-Match`` the version the peer was sending), so the fill does not fail."""

    from_peer = True  # the block's owner sent it: the asking node may relay it without a copy

    def __init__(self, resp: PeerAnswer, source: PeerBlockSource, peer: LiveNode, bucket: str, key: str,
                 meta: ObjectMeta, first: int, last: int | None) -> None:
        self.resp = resp
        self.source = source
        self.peer = peer
        self.bucket, self.key, self.meta = bucket, key, meta
        self.first, self.last = first, last
        self.got = 0
        self.fallback: BinaryIO | None = None

    def read(self, amt: int = -1) -> bytes:
        if self.fallback is not None:
            return bytes(self.fallback.read(amt))
        try:
            chunk = self.resp.read1(amt) if amt and amt > 0 else self.resp.read()
        except OSError as exc:
            self.source.membership.suspect(self.peer.node_id)
            return self._switch(exc)
        if not chunk and not self._complete():
            return self._switch(None)  # the peer closed early
        self.got += len(chunk)
        return bytes(chunk)

    def readinto(self, buffer: memoryview) -> int:
        """Up to ``len(buffer)`` bytes straight into ``buffer`` (the socket's ``recv_into``: no
        intermediate bytes object per chunk, which on a busy machine costs as much as the copy
        into the cache file); 0 at the end."""
        if self.fallback is not None:
            data = self.fallback.read(len(buffer))
            buffer[:len(data)] = data
            return len(data)
        try:
            n = self.resp.readinto(buffer)
        except (OSError, ValueError) as exc:
            self.source.membership.suspect(self.peer.node_id)
            data = self._switch(exc, len(buffer))
        else:
            if n or self._complete():
                self.got += n
                return n
            data = self._switch(None, len(buffer))  # the peer closed early
        buffer[:len(data)] = data
        return len(data)

    def _complete(self) -> bool:
        end = self.meta.size - 1 if self.last is None else min(self.last, self.meta.size - 1)
        return self.first + self.got > end

    def _switch(self, exc: BaseException | None, amt: int = 1024 * 1024) -> bytes:
        log.warning("fleet: peer %s failed mid-block (%s); the rest from the remote", self.peer.node_id, exc)
        metrics.fleet_peer_read("fallback")
        self.close()
        rng = f"bytes={self.first + self.got}-{'' if self.last is None else self.last}"
        _, self.fallback = self.source.remote.get_object(self.bucket, self.key, rng, if_match=self.meta.etag)
        return bytes(self.fallback.read(amt))

    def close(self) -> None:
        self.resp.close()  # kept for the next block if it was read to its end, else dropped
        if self.fallback is not None:
            self.fallback.close()
