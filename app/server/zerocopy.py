"""uvicorn's httptools protocol with the ASGI Zero Copy Send extension (``http.response.zerocopysend``).

Why: serving a cached block through Python chunks reaches 0.4-0.8x of nginx's ``sendfile``; letting
the kernel copy file pages to the socket reaches parity (DESIGN.md, "Performance notes"). uvicorn
offers neither pathsend nor zerocopysend, so this subclass adds the latter to plain-HTTP connections.

    {"type": "http.response.zerocopysend", "file": fd or file object, "offset": int | None,
     "count": int | None, "more_body": bool}

Bytes go out with ``os.sendfile`` on the connection's socket once the transport's own buffer is empty
(so the status line and headers precede them), and only as fast as the kernel accepts them: on EAGAIN
the send waits for writability on a dup of the socket (the loop refuses a watcher on a transport's own
fd), which is the flow control. Content-Length framing stays uvicorn's: every byte sent is counted
against the declared length and the final ``more_body=False`` goes through uvicorn's own send.
Under TLS the kernel cannot encrypt, so the extension is not advertised and apps use their bodies.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle
from uvicorn.protocols.utils import is_ssl

from app.server.headers import HeaderTimeoutProtocol

EXTENSION = "http.response.zerocopysend"
MAX_SENDFILE = 16 * 1024 * 1024  # per syscall; the socket's free space bounds it well below this anyway
FALLBACK_CHUNK = 1024 * 1024  # pread + transport.write when sendfile is refused for this file/socket
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK, errno.EOVERFLOW}
_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)

log = logging.getLogger("ferry.zerocopy")
Send = Callable[[Any], Awaitable[None]]


class ZeroCopyHttpToolsProtocol(HeaderTimeoutProtocol):
    """HttpToolsProtocol whose request cycles also accept ``http.response.zerocopysend``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)  # what the event loop passes a stream protocol
        super().connection_made(tcp)
        sock = tcp.get_extra_info("socket")
        # Plain TCP only: TLS records are built in user space, so the kernel cannot send file pages.
        self._sock_fd: int | None = sock.fileno() if sock is not None and not is_ssl(tcp) else None
        self._writable_waiter: asyncio.Future[None] | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        waiter = self._writable_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("connection lost"))
        super().connection_lost(exc)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        if self._sock_fd is not None:
            cycle.scope.setdefault("extensions", {})[EXTENSION] = {}
            plain_send: Send = cycle.send

            async def send(message: MutableMapping[str, Any]) -> None:
                if message["type"] == EXTENSION:
                    await self._zerocopy_send(cycle, plain_send, message)
                else:
                    await plain_send(message)

            cycle.send = send  # type: ignore[method-assign,assignment]  # run_asgi looks it up per request; typed as its own send
        super()._start_asgi_task(cycle, app)

    async def _zerocopy_send(self, cycle: RequestResponseCycle, plain_send: Send, message: MutableMapping[str, Any]) -> None:
        """One zerocopysend message, with uvicorn's checks and framing around our own sending."""
        if cycle.disconnected:
            return  # as uvicorn's send: the app learns of it through receive()
        if not cycle.response_started:
            raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{EXTENSION}'.")
        if cycle.response_complete:
            raise RuntimeError(f"Unexpected ASGI message '{EXTENSION}' sent, after response already completed.")
        file = message["file"]
        fd: int = file if isinstance(file, int) else file.fileno()
        offset: int | None = message.get("offset")
        advance = offset is None  # spec: no offset = from the file's position, which then moves on
        start = os.lseek(fd, 0, os.SEEK_CUR) if offset is None else offset
        count: int | None = message.get("count")
        if count is None:
            count = max(0, os.fstat(fd).st_size - start)
        if cycle.scope["method"] == "HEAD":
            cycle.expected_content_length = 0
        elif count:
            if cycle.chunked_encoding:
                self.transport.write(b"%x\r\n" % count)
            elif count > cycle.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            else:
                cycle.expected_content_length -= count
            sent = await self._send_file(cycle, fd, start, count)
            if advance:
                os.lseek(fd, start + sent, os.SEEK_SET)
            if cycle.disconnected:
                return
            if sent != count:
                # Never let a short body look complete: run_asgi closes the connection on this.
                raise RuntimeError(f"file ended after {sent} of {count} bytes")
            if cycle.chunked_encoding:
                self.transport.write(b"\r\n")
        if not message.get("more_body", False):
            await plain_send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_file(self, cycle: RequestResponseCycle, fd: int, offset: int, count: int) -> int:
        """Send ``count`` bytes of ``fd`` from ``offset``; returns how many went out (less at EOF)."""
        await self._drain_buffer(cycle)
        sock_fd = self._sock_fd
        assert sock_fd is not None
        sent = 0
        poll_fd: int | None = None
        try:
            while sent < count:
                if cycle.disconnected or self.transport.is_closing():
                    self._lost(cycle)
                    return sent
                try:
                    n = os.sendfile(sock_fd, fd, offset + sent, min(count - sent, MAX_SENDFILE))
                except BlockingIOError:
                    if poll_fd is None:
                        poll_fd = os.dup(sock_fd)
                    await self._wait_writable(poll_fd)  # raises ConnectionResetError if the peer leaves
                    continue
                except _GONE:
                    self._lost(cycle)
                    return sent
                except OSError as exc:
                    if exc.errno in _UNSUPPORTED and sent == 0:
                        return await self._copy_file(cycle, fd, offset, count)
                    raise
                if n == 0:
                    return sent  # end of file
                sent += n
                await asyncio.sleep(0)  # let other connections run between socket-buffer-fulls
        finally:
            if poll_fd is not None:
                os.close(poll_fd)  # after remove_writer (in _wait_writable): epoll keys on the open file
        return sent

    async def _wait_writable(self, poll_fd: int) -> None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._writable_waiter = waiter
        loop.add_writer(poll_fd, _wake, waiter)
        try:
            await waiter
        finally:
            loop.remove_writer(poll_fd)
            self._writable_waiter = None

    async def _drain_buffer(self, cycle: RequestResponseCycle) -> None:
        """Wait until everything written through the transport (the headers) reached the socket."""
        transport = self.transport
        if not transport.get_write_buffer_size():
            return
        low, high = transport.get_write_buffer_limits()
        transport.set_write_buffer_limits(high=0, low=0)  # pauses us now, resumes us when empty
        try:
            while transport.get_write_buffer_size() and not cycle.disconnected and not transport.is_closing():
                if self.flow.write_paused:
                    await self.flow.drain()
                else:
                    await asyncio.sleep(0.001)
        finally:
            if not transport.is_closing():
                transport.set_write_buffer_limits(high=high, low=low)

    async def _copy_file(self, cycle: RequestResponseCycle, fd: int, offset: int, count: int) -> int:
        """Fallback for files or sockets sendfile refuses: large reads through the transport."""
        sent = 0
        while sent < count and not cycle.disconnected:
            if self.flow.write_paused:
                await self.flow.drain()
                continue
            chunk = os.pread(fd, min(FALLBACK_CHUNK, count - sent), offset + sent)
            if not chunk:
                break
            self.transport.write(chunk)
            sent += len(chunk)
        return sent

    def _lost(self, cycle: RequestResponseCycle) -> None:
        """The peer is gone mid-body: drop the connection (it cannot carry a complete response)."""
        cycle.disconnected = True
        cycle.keep_alive = False
        if not self.transport.is_closing():
            self.transport.abort()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
