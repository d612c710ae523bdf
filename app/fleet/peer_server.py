"""The internal endpoint: peers read cache blocks here, on its own port (FERRY_FLEET_PORT).

Every request must carry a valid HMAC signature of the fleet's secret (app/fleet/auth.py);
anything else is 403 before any lookup. ``GET /_ferry/v1/block?bucket=&key=[&tenant=]`` with a ``Range``
answers those bytes through this node's read cache: a hit is served from the block file; a
block this node does not hold is filled from the remote (the cache's per-process and cross-process
single-flight: one remote fetch however many peers and clients ask) and streamed while it fills.
Requests served here never go on to another peer (``SERVING_PEER``). The object's metadata comes
back in one header (app/fleet/wire.py) so the asking node can record the entry without a remote
request. ``tenant`` names the asking read's tenant: the entry this node records is charged to it
(the query is signed, so only a node of the fleet can say it). When this node will not cache
the object (second-hit admission, a racing write, a full disk, a non-caching policy) it answers
503 and the asking node reads the remote itself.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from app import metrics
from app.domain.errors import S3Error
from app.domain.names import validate_bucket_name, validate_key
from app.domain.objects import FileRange
from app.domain.ranges import RangeRequest
from app.fleet import auth
from app.fleet.journal_server import JOURNAL_PATH, REPLICA_PATH, UNSIGNED, HeldWrites, accept_replica, serve_held
from app.fleet.part_server import PART_PATH, HeldParts, drop_parts, serve_part
from app.fleet.peer_client import SERVING_PEER
from app.fleet.wire import BLOCK_PATH, META, OWNED_PATH, PING_PATH, encode_meta
from app.server.zerocopy import EXTENSION as ZEROCOPY
from app.services.cache import ReadCache
from app.services.control.policies import PolicyBook

log = logging.getLogger("ferry.fleet")
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
MAX_BODY = 1024 * 1024
STATUS_OF = {"NoSuchKey": 404, "NoSuchBucket": 404, "PreconditionFailed": 412, "InvalidRange": 416}


class PeerServer:
    def __init__(self, cache: ReadCache, policies: PolicyBook, secret: str, node_id: str, *,
                 skew: float = 30.0, writes: HeldWrites | None = None, parts: HeldParts | None = None) -> None:
        self.cache = cache
        self.writes = writes  # buffered writes: peer reads and replicas (app/fleet/journal_server.py)
        self.parts = parts  # uploaded parts: a Complete on another node gathers them (part_server.py)
        self.policies = policies
        self.secret = secret
        self.node_id = node_id
        self.skew = skew

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        query = scope.get("query_string", b"").decode("latin-1")
        if scope["method"] == "PUT" and path == REPLICA_PATH and self.writes is not None:
            # A large body, streamed to disk: signed UNSIGNED-PAYLOAD, checked by its signed MD5.
            if not auth.verify(self.secret, "PUT", path, query, headers, UNSIGNED, self.skew):
                await _answer(send, 403, b"forbidden\n")
                return
            await accept_replica(self.writes, query, receive, send)
            return
        body_sha256 = await _body_sha256(receive)
        if body_sha256 is None or not auth.verify(self.secret, scope["method"], path, query, headers, body_sha256,
                                                  self.skew):
            await _answer(send, 403, b"forbidden\n")
            return
        if scope["method"] == "GET" and path == PING_PATH:
            await _answer(send, 200, json.dumps({"node_id": self.node_id}).encode(), "application/json")
        elif scope["method"] == "GET" and path == OWNED_PATH:
            await self.owned(query, headers, send, zero_copy=ZEROCOPY in (scope.get("extensions") or {}))
        elif scope["method"] == "GET" and path == BLOCK_PATH:
            await self.block(query, headers, send, zero_copy=ZEROCOPY in (scope.get("extensions") or {}))
        elif scope["method"] == "GET" and path == JOURNAL_PATH and self.writes is not None:
            await serve_held(self.writes, query, headers, send)
        elif path == PART_PATH and self.parts is not None and scope["method"] in ("GET", "DELETE"):
            await (serve_part if scope["method"] == "GET" else drop_parts)(self.parts, query, send)
        else:
            await _answer(send, 404, b"no such internal path\n")

    async def block(self, query: str, headers: dict[str, str], send: Send, *, zero_copy: bool = False) -> None:
        """Bytes of one block (the request's Range) from this node's cache, filling it if absent;
        with ``zero_copy`` (the listener's server offers zerocopysend) block files are sent by
        the kernel, as S3 hits are."""
        args = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
        bucket, key, rng = args.get("bucket", ""), args.get("key", ""), headers.get("range", "")
        tenant = args.get("tenant", "")
        tenant_id = int(tenant) if tenant.isdigit() and len(tenant) < 19 else None  # the asking read's tenant
        try:
            validate_bucket_name(bucket)
            validate_key(key)
        except S3Error:
            await _answer(send, 400, b"bad bucket or key\n")
            return
        if not rng.startswith("bytes=") or rng.startswith("bytes=-"):
            await _answer(send, 400, b"a Range bytes=first-[last] is required\n")
            return
        token = SERVING_PEER.set(True)  # fills started here read the remote, never another peer
        try:
            await self._serve_block(bucket, key, RangeRequest.from_header(rng), headers.get("if-match"), tenant_id, send,
                                    zero_copy)
        finally:
            SERVING_PEER.reset(token)

    async def owned(self, query: str, headers: dict[str, str], send: Send, *, zero_copy: bool = False) -> None:
        """A range of one block of this node's, named by (bucket, key, ETag, size, block size) in
        the signed query: answered from its file alone (app/services/cache/owned.py), or 404 when
        the block is not here whole (the asking node then reads the usual way)."""
        args = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
        bucket, key, etag = args.get("bucket", ""), args.get("key", ""), args.get("etag", "")
        try:
            validate_bucket_name(bucket)
            validate_key(key)
            size, block_size, entry_id = int(args["size"]), int(args["block_size"]), int(args["entry"])
            tenant = args.get("tenant")
            tenant_id = int(tenant) if tenant is not None else None
            rng = RangeRequest.from_header(headers.get("range", "")).spec
        except (S3Error, KeyError, ValueError):
            await _answer(send, 400, b"bad block name\n")
            return
        if rng is None or rng[0] is None or rng[1] is None or not etag or size <= 0 or block_size <= 0:
            await _answer(send, 400, b"a Range bytes=first-last is required\n")
            return
        first, last = rng[0], rng[1]
        found = self.cache.owned.open(bucket, key, etag, size, block_size, first, last, zero_copy)
        if found is None:
            await _answer(send, 404, b"not here by that name\n")
            return
        self.cache.owned.served(bucket, key, etag, size, entry_id, tenant_id, first == 0)
        await send({"type": "http.response.start", "status": 206, "headers": [
            (b"content-length", str(last - first + 1).encode()),
            (b"content-range", f"bytes {first}-{last}/{size}".encode()),
        ]})
        if isinstance(found, bytes):
            await send({"type": "http.response.body", "body": found})
            metrics.fleet_served(206, len(found))
            return
        await self._send_stream(found, send)

    async def _serve_block(self, bucket: str, key: str, rng: RangeRequest, if_match: str | None,
                           tenant_id: int | None, send: Send, zero_copy: bool = False) -> None:
        policy = self.policies.for_key(bucket, key)
        try:
            cached = await self.cache.read(bucket, key, rng, policy, tenant_id, file_ranges=zero_copy) \
                if policy.caches else None
        except S3Error as err:
            await _answer(send, STATUS_OF.get(err.code, 503), err.code.encode())
            return
        if cached is None:
            await _answer(send, 503, b"not cached here: read the remote\n")
            return
        stream = cached.stream
        try:
            if if_match and if_match.strip('"') != cached.meta.etag:
                await _answer(send, 412, b"PreconditionFailed")
                return
            meta, br = cached.meta, cached.byte_range
            first, last = (br.first, br.last) if br is not None else (0, meta.size - 1)
            await send({"type": "http.response.start", "status": 206, "headers": [
                (b"content-length", str(max(0, last - first + 1)).encode()),
                (b"content-range", f"bytes {first}-{last}/{meta.size}".encode()),
                (b"etag", f'"{meta.etag}"'.encode()),
                (META.encode(), encode_meta(meta).encode()),
            ]})
            await self._send_stream(stream, send)
        finally:
            if isinstance(stream, AsyncGenerator):
                await stream.aclose()

    @staticmethod
    async def _send_stream(stream: AsyncIterator[Any], send: Send) -> None:
        """An answer's body, its head sent: bytes, or ``FileRange`` items the server sends itself."""
        try:
            sent = zero_copied = 0
            async for chunk in stream:
                if isinstance(chunk, FileRange):  # valid until the stream resumes: sent before that
                    await send({"type": ZEROCOPY, "file": chunk.fd, "offset": chunk.offset, "count": chunk.length,
                                "more_body": True})
                    zero_copied += chunk.length
                else:  # a memoryview of the block map goes to the socket as it is (no copy; httptools writes it)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                sent += len(chunk)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            metrics.fleet_served(206, sent)
            if zero_copied:
                metrics.zerocopy_sent(zero_copied)
        finally:
            if isinstance(stream, AsyncGenerator):
                await stream.aclose()


async def _body_sha256(receive: Receive) -> str | None:
    """The hex SHA-256 of the request body (None past MAX_BODY: no internal request is that big)."""
    digest, size = hashlib.sha256(), 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        digest.update(chunk)
        if not message.get("more_body", False):
            return digest.hexdigest()


async def _answer(send: Send, status: int, body: bytes, content_type: str = "text/plain") -> None:
    metrics.fleet_served(status)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
