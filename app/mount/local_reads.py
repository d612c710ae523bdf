"""The mount's side of the gateway's local read socket (``app/server/local_reads.py``).

A ranged GET goes over the Unix socket as the same presigned request; a cached range comes back
as descriptors of the gateway's cache blocks, which are read here with ``preadv`` straight into
the chunk's buffer (no TCP, one copy). Anything else comes back as bytes. Connections are kept
in a small pool, one exchange at a time each. Any failure of the socket itself (the gateway
restarting, an older gateway without it) is the caller's cue to use HTTP.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
from pathlib import Path
from urllib.parse import urlsplit

from app.server.local_wire import MAX_FDS, frame, reachable, read_frame


class LocalUnavailable(Exception):
    """The socket did not answer: use HTTP."""


class LocalReads:
    def __init__(self, path: Path, connections: int = 16) -> None:
        self.path = path
        self._idle: queue.LifoQueue[socket.socket] = queue.LifoQueue(maxsize=connections)

    def get(self, url: str, headers: dict[str, str], into: bytearray) -> tuple[int, dict[str, str], int, bytes]:
        """(status, headers, bytes read into ``into``, other body bytes). ``into`` receives the
        body of a 2xx answer (at most its length); an error's body is returned as bytes."""
        split = urlsplit(url)
        request = {"path": split.path, "query": split.query, "headers": {"host": split.netloc, **headers}}
        sock = self._connection()
        try:
            sock.sendall(frame(request))
            answer, fds, rest = read_frame(sock, MAX_FDS)
            try:
                body = self._body(sock, int(answer.get("body", 0)), rest)
                status = int(answer["status"])
                names = {str(k).lower(): str(v) for k, v in answer.get("headers", [])}
                got = 0
                if 200 <= status < 300:
                    got = _read_segments(fds, answer.get("segments", []), into)
                    if body:
                        end = min(len(into), got + len(body))
                        into[got:end] = body[:end - got]
                        got = end
                        body = b""
            finally:
                for fd in fds:
                    os.close(fd)
        except (OSError, ValueError, KeyError) as exc:
            sock.close()
            raise LocalUnavailable(str(exc)) from exc
        self._release(sock)
        return status, names, got, body

    def _connection(self) -> socket.socket:
        with contextlib.suppress(queue.Empty):
            return self._idle.get_nowait()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(120)
        try:
            with reachable(self.path) as name:
                sock.connect(name)
        except OSError as exc:
            sock.close()
            raise LocalUnavailable(str(exc)) from exc
        return sock

    def _release(self, sock: socket.socket) -> None:
        try:
            self._idle.put_nowait(sock)
        except queue.Full:
            sock.close()

    @staticmethod
    def _body(sock: socket.socket, size: int, rest: bytes) -> bytes:
        data = bytearray(rest)
        while len(data) < size:
            chunk = sock.recv(min(size - len(data), 1024 * 1024))
            if not chunk:
                raise ConnectionError("the local read socket closed mid-answer")
            data.extend(chunk)
        if len(data) != size:
            raise ConnectionError("more bytes than the answer announced")
        return bytes(data)

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


def _read_segments(fds: list[int], segments: list[list[int]], into: bytearray) -> int:
    """The segments' bytes into ``into`` in order; a short file is an error (never a short body)."""
    if len(segments) != len(fds):
        raise ValueError("segments and descriptors differ in number")
    view = memoryview(into)
    got = 0
    for fd, (offset, count) in zip(fds, segments, strict=True):
        if got + count > len(into):
            raise ValueError("the answer is longer than the range asked for")
        done = 0
        while done < count:
            n = os.preadv(fd, [view[got + done:got + count]], offset + done)
            if n <= 0:
                raise ValueError("a cache block shorter than its segment")
            done += n
        got += count
    return got
