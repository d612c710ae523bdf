"""The internal endpoint's listener, started inside each serving process (lifespan).

Each uvicorn worker binds the internal port with ``SO_REUSEPORT``, so the kernel spreads peer
connections over the workers as it does for the S3 port. It runs uvicorn's HTTP protocol on this
process's event loop without uvicorn's signal handling (the S3 server owns the process's signals).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import uvicorn

from app.server import http_protocol


def _socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class InternalListener:
    def __init__(self, app: Any, host: str, port: int) -> None:
        self.sock = _socket(host, port)  # at construction: a taken port stops the process's start
        # The S3 port's protocol: httptools with the header timeout and zerocopysend (block
        # files sent by the kernel to the asking node).
        config = uvicorn.Config(app, lifespan="off", access_log=False, log_level="warning", http=http_protocol(True),
                                timeout_keep_alive=30, server_header=False, timeout_graceful_shutdown=2)
        config.load()
        self.server = uvicorn.Server(config)
        self.server.lifespan = config.lifespan_class(config)  # "off": what serve() would have set

    async def start(self) -> None:
        await self.server.startup(sockets=[self.sock])

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.server.shutdown(sockets=[self.sock])
