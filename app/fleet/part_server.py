"""The internal endpoint's routes for multipart parts held here (docs/fleet.md, "Multipart
uploads across nodes"): a Complete on another node gathers the parts this node took.

- ``GET /_ferry/v1/part?upload=&part=&blob=``: the whole blob of part ``part`` of ``upload``
  if this node holds it as that part (or as that part's replica), 200; else 404. The asking
  node checks its size and MD5 against the part's row before it keeps it.
- ``DELETE /_ferry/v1/part?blobs=a,b``: the asking node completed or aborted the upload; each
  blob no catalog row references any more is deleted here (204). At most ``MAX_DROP`` ids.

Both are reached only after the signature check of ``peer_server.PeerServer``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any, Protocol
from urllib.parse import parse_qs

from app import metrics

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
PART_PATH = "/_ferry/v1/part"
MAX_DROP = 100
_BLOB = re.compile(r"^[0-9a-f]{32}$")


class HeldParts(Protocol):
    """What the routes need of the gateway (``services.part_gather``)."""

    async def open_held_part(self, upload_id: str, number: int, blob: str
                             ) -> tuple[int, AsyncIterator[bytes]] | None: ...
    async def drop_held_parts(self, blobs: list[str]) -> int: ...


def _args(query: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}


async def serve_part(parts: HeldParts, query: str, send: Send) -> None:
    args = _args(query)
    upload_id, number, blob = args.get("upload", ""), args.get("part", ""), args.get("blob", "")
    if not upload_id or len(upload_id) > 64 or not number.isdigit() or len(number) > 5 or not _BLOB.match(blob):
        await _answer(send, 400, b"upload, part and blob are required\n")
        return
    held = await parts.open_held_part(upload_id, int(number), blob)
    if held is None:
        await _answer(send, 404, b"not held here\n")
        return
    size, chunks = held
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(size).encode())]})
    sent = 0
    async for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        sent += len(chunk)
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    metrics.fleet_served(200, sent)


async def drop_parts(parts: HeldParts, query: str, send: Send) -> None:
    blobs = [b for b in _args(query).get("blobs", "").split(",") if b]
    if not blobs or len(blobs) > MAX_DROP or not all(_BLOB.match(b) for b in blobs):
        await _answer(send, 400, f"blobs: 1 to {MAX_DROP} blob ids\n".encode())
        return
    await parts.drop_held_parts(blobs)
    await _answer(send, 204, b"")


async def _answer(send: Send, status: int, body: bytes) -> None:
    metrics.fleet_served(status)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
