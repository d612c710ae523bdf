"""The raw-ASGI ceiling of a 4 KiB hit: a minimal ASGI app under the same uvicorn (httptools
protocol, access log off, no server header) that answers every GET with the bytes of one file.

A Ferry hit can cost no less than this on the same server; the difference is Ferry's own work
(signature, lookups, policy, metrics, headers). Run by ``bench.hitpath``:

    FERRY_CEILING_FILE=/path/to/4k uvicorn bench.asgi_ceiling:app --http httptools --port N
"""

from __future__ import annotations

import os
from typing import Any

_PATH = os.environ.get("FERRY_CEILING_FILE", "")


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["method"] == "PUT":  # bench.server_ab: read the body, answer 200
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        return
    fd = os.open(_PATH, os.O_RDONLY)
    try:
        body = os.pread(fd, 1 << 20, 0)
    finally:
        os.close(fd)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode()), (b"etag", b'"x"')]})
    await send({"type": "http.response.body", "body": body})
