"""The local read socket: S3 GETs from a client on this node, answered with file descriptors.

Why: ``ferry mount`` on the serving node read every cached byte through loopback TCP (the
gateway's ``sendfile`` into a socket, the mount's ``recv`` out of it) and copied it again into
FUSE; the TCP copy was most of the mount's CPU (py-spy, docs/benchmarks.md "POSIX mount"). Over
this socket the same request returns the cache blocks' descriptors and the mount reads the pages
itself: one copy and no TCP stack.

The request is the same S3 request a client would send over HTTP: the presigned GET's path, query
and headers go through the S3 app as one HTTP request does (one parser, one SigV4 check, the
tenant's own rules), with the zero-copy send extension offered. What the app would have sent with
``sendfile`` comes back as descriptors (dup'ed: the app closes its own); anything sent as bytes
(a miss, an error's XML) comes back as bytes. The socket lives in a directory of mode 0700 in
the data directory, so only the gateway's own user reaches it; one process of the node serves
it (a lock file decides among ``--workers``), the others serve HTTP only (invariant 6: the
mount stays a client of the owner).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote

from app.server.local_wire import HEADER, MAX_FDS, MAX_FRAME, frame, reachable, rights
from app.server.zerocopy import EXTENSION

log = logging.getLogger("ferry.local_reads")

ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]
MAX_INLINE = 64 * 1024 * 1024  # bytes of one answer sent as bytes (a miss of a mount's chunk is 8 MiB)


def socket_path(data_dir: Path) -> Path:
    return data_dir / "local" / "ferry.sock"


class TooLarge(Exception):
    """An answer beyond what one exchange carries: the connection is closed instead."""


class LocalReadListener:
    def __init__(self, app: ASGIApp, path: Path) -> None:
        self.app = app
        self.path = path
        self._lock: IO[bytes] | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> bool:
        """Serve the socket unless another process of the node does (False then)."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.path.parent, 0o700)
        lock = open(self.path.with_suffix(".lock"), "ab")  # noqa: SIM115 - held while serving
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            return False
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a previous owner's (the lock says none serves it now)
        try:
            with reachable(self.path) as name:
                self._server = await asyncio.start_unix_server(self._serve, path=name)
        except OSError as exc:  # the gateway serves HTTP either way; the mount then reads over it
            log.warning("the local read socket %s could not be served: %s", self.path, exc)
            lock.close()
            return False
        self._lock = lock
        log.info("local reads on %s", self.path)
        return True

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        sock = writer.get_extra_info("socket")
        try:
            while True:
                request = await _request(reader)
                if request is None:
                    return
                status, headers, fds, segments, body = await self._answer(request)
                try:
                    await _send_answer(writer, sock, {"status": status, "headers": headers, "segments": segments,
                                                      "body": len(body)}, fds, body)
                finally:
                    for fd in fds:
                        os.close(fd)
        except (ConnectionError, TooLarge, ValueError, TypeError, asyncio.IncompleteReadError) as exc:
            log.info("local read connection closed: %s", exc)
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _answer(self, request: dict[str, Any]
                      ) -> tuple[int, list[list[str]], list[int], list[list[int]], bytes]:
        raw_path = str(request.get("path", "/"))
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                 "scheme": "http", "path": unquote(raw_path), "raw_path": raw_path.encode(),
                 "query_string": str(request.get("query", "")).encode(), "root_path": "",
                 "headers": [(str(k).lower().encode("latin-1"), str(v).encode("latin-1"))
                             for k, v in dict(request.get("headers") or {}).items()],
                 "client": ("local", 0), "server": ("local", 0), "extensions": {EXTENSION: {}}}
        status = 500
        headers: list[list[str]] = []
        fds: list[int] = []
        segments: list[list[int]] = []
        body = bytearray()
        asked = False

        async def receive() -> dict[str, Any]:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await asyncio.Event().wait()  # a GET has no more body; the app never asks twice
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            kind = message["type"]
            if kind == "http.response.start":  # a second one (the request deadline's 503) replaces the first
                status = int(message["status"])
                headers[:] = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in message.get("headers", [])]
                body.clear()
                for fd in fds:
                    os.close(fd)
                fds.clear()
                segments.clear()
            elif kind == EXTENSION:
                if body or len(fds) >= MAX_FDS:
                    raise TooLarge("a file segment after bytes, or too many segments")
                source = message["file"]
                fd = source if isinstance(source, int) else source.fileno()
                fds.append(os.dup(fd))
                offset = message.get("offset") or 0
                count = message.get("count")
                segments.append([int(offset), int(count if count is not None else os.fstat(fd).st_size - offset)])
            elif kind == "http.response.body":
                body.extend(message.get("body", b""))
                if len(body) > MAX_INLINE:
                    raise TooLarge("an answer of more bytes than one exchange carries")

        try:
            await self.app(scope, receive, send)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return status, headers, fds, segments, bytes(body)


async def _request(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    try:
        head = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError:
        return None  # the client closed between exchanges
    (size,) = HEADER.unpack(head)
    if size > MAX_FRAME:
        raise TooLarge("request frame too large")
    message = await reader.readexactly(size)
    parsed = json.loads(message)
    if not isinstance(parsed, dict):
        raise ValueError("a local read request is a JSON object")
    return parsed


async def _send_answer(writer: asyncio.StreamWriter, sock: Any, message: dict[str, Any], fds: list[int],
                       body: bytes) -> None:
    """The frame with the descriptors in one sendmsg (the transport's buffer drained first, so
    nothing written through it can come after), then the body through the transport."""
    await writer.drain()
    data = frame(message)
    loop = asyncio.get_running_loop()
    raw = socket.socket(fileno=os.dup(sock.fileno()))  # the transport's own socket refuses sendmsg
    try:
        raw.setblocking(False)
        sent = 0
        while sent == 0:
            try:
                sent = raw.sendmsg([data], rights(fds))
            except BlockingIOError:
                await _writable(loop, raw)
        rest = data[sent:]
        if rest:
            await loop.sock_sendall(raw, rest)
    finally:
        raw.close()  # the dup only: the connection stays the transport's
    if body:
        writer.write(body)
        await writer.drain()


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_writer(sock.fileno())


__all__ = ["LocalReadListener", "socket_path"]
