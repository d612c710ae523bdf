"""The internal endpoint's routes for buffered writes (docs/fleet.md, "Writes across nodes").

- ``GET /_ferry/v1/journal?seq=N`` with ``Range: bytes=a-b``: bytes of buffered version ``seq``
  from this node's blobs (206), or 404 when this node does not hold it (durable and dropped,
  taken over). A node reading another node's newest buffered write streams it from here.
- ``PUT /_ferry/v1/replica?size=&md5=``: one piece of a write to hold as a replica
  (``write_replicas: 2``); answered 200 with its blob id here only once it is fsynced. Its body
  can be large, so it is signed as ``UNSIGNED-PAYLOAD`` and its integrity is the MD5 in the signed
  query, checked while it is received (a mismatch stores nothing and answers 400).

Both are reached only after the signature check of ``peer_server.PeerServer``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any, Protocol
from urllib.parse import parse_qs

from app import metrics
from app.domain.errors import S3Error
from app.domain.ranges import RangeRequest
from app.services.bodies import BodyStream, ObjectRead

log = logging.getLogger("ferry.fleet")
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
JOURNAL_PATH = "/_ferry/v1/journal"
REPLICA_PATH = "/_ferry/v1/replica"
UNSIGNED = "UNSIGNED-PAYLOAD"
_SPAN = re.compile(r"^bytes=(\d{1,19})-(\d{1,19})$")
_MD5 = re.compile(r"^[0-9a-f]{32}$")


class HeldWrites(Protocol):
    """What the routes need of the gateway (``services.reads`` / ``services.core``)."""

    async def open_held_version(self, seq: int, rng: RangeRequest) -> ObjectRead | None: ...
    async def accept_replica(self, body: BodyStream, size: int, md5_hex: str) -> str: ...


def _args(query: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}


async def serve_held(writes: HeldWrites, query: str, headers: dict[str, str], send: Send) -> None:
    """206 with bytes ``a..b`` of buffered version ``seq`` held here, else 404."""
    seq, span = _args(query).get("seq", ""), _SPAN.match(headers.get("range", ""))
    if not seq.isdigit() or len(seq) > 19 or span is None or int(span[1]) > int(span[2]):
        await _answer(send, 400, b"seq and a Range bytes=a-b are required\n")
        return
    try:
        read = await writes.open_held_version(int(seq), RangeRequest.span(int(span[1]), int(span[2])))
    except S3Error as err:
        await _answer(send, 416 if err.code == "InvalidRange" else 503, err.code.encode())
        return
    if read is None:
        await _answer(send, 404, b"not held here\n")
        return
    try:
        br = read.byte_range
        first, last = (br.first, br.last) if br is not None else (0, read.meta.size - 1)
        await send({"type": "http.response.start", "status": 206, "headers": [
            (b"content-length", str(last - first + 1).encode()),
            (b"content-range", f"bytes {first}-{last}/{read.meta.size}".encode())]})
        sent = 0
        async for chunk in read.stream:
            await send({"type": "http.response.body", "body": bytes(chunk), "more_body": True})
            sent += len(chunk)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        metrics.fleet_served(206, sent)
    finally:
        read.close()


class _RequestBody:
    """The ASGI request body as a ``BodyStream`` (no trailers on the internal endpoint)."""

    trailers: dict[str, str] = {}

    def __init__(self, receive: Receive) -> None:
        self.receive = receive

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise S3Error("IncompleteBody")
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return

    def take_payload_hash(self) -> None:
        """Nothing declared to check here: the piece's MD5 is (``accept_replica``)."""
        return None


async def accept_replica(writes: HeldWrites, query: str, receive: Receive, send: Send) -> None:
    """Receive one piece, check its size and MD5, fsync it; 200 ``{"blob": id}``."""
    args = _args(query)
    size, md5 = args.get("size", ""), args.get("md5", "")
    if not size.isdigit() or len(size) > 13 or _MD5.match(md5) is None:
        await _answer(send, 400, b"size and md5 are required\n")
        return
    try:
        blob = await writes.accept_replica(_RequestBody(receive), int(size), md5)
    except S3Error as err:
        log.warning("fleet: refused a replica (%s: %s)", err.code, err.message)
        await _answer(send, 503 if err.status >= 500 else 400, err.code.encode())
        return
    await _answer(send, 200, json.dumps({"blob": blob}).encode(), "application/json")


async def _answer(send: Send, status: int, body: bytes, content_type: str = "text/plain") -> None:
    metrics.fleet_served(status)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
