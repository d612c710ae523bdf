"""The mount's side of the gateway's local read socket (``app/server/local_reads.py``).

A ranged GET goes over the Unix socket as the same presigned request; a cached range comes back
as descriptors of the gateway's cache blocks, which are mapped here read-only (no TCP, no copy:
FUSE's reply copies the pages straight to the reader). Anything else comes back as bytes. Connections are kept
in a small pool, one exchange at a time each. Any failure of the socket itself (the gateway
restarting, an older gateway without it) is the caller's cue to use HTTP.
"""

from __future__ import annotations

import contextlib
import mmap
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

    def get_mapped(self, url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], memoryview | None,
                                                                     memoryview]:
        """(status, headers, the body as a read-only map of the one cache block that holds it or
        None, the body's bytes otherwise). A map is no copy at all: the kernel copies the block's pages
        straight into the reader's buffer when FUSE is answered from it. A block file is never
        changed in place (a new version is a new block; an evicted one is renamed, then unlinked,
        and the map keeps its pages; a fill only appends), so the view stays valid while it lives.
        Pieces of more than one file, or an answer as bytes, come back as bytes (None for the map)."""
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
                segments = answer.get("segments", [])
                mapped = None
                if 200 <= status < 300 and segments:
                    span = _one_span(fds, segments) if not body else None
                    if span is not None:
                        mapped = _mapped(fds[0], *span)
                    else:
                        buf = bytearray(sum(int(count) for _, count in segments))
                        got = _read_segments(fds, segments, buf)
                        body = memoryview(buf)[:got] if not body else memoryview(bytes(buf[:got]) + body)
            finally:
                for fd in fds:
                    os.close(fd)
        except (OSError, ValueError, KeyError) as exc:
            sock.close()
            raise LocalUnavailable(str(exc)) from exc
        self._release(sock)
        return status, names, mapped, body

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
    def _body(sock: socket.socket, size: int, rest: bytes) -> memoryview:
        """The answer's ``size`` bytes, received straight into one buffer (a miss is a whole
        chunk: no per-recv pieces joined, no copy of the whole at the end)."""
        if len(rest) > size:
            raise ConnectionError("more bytes than the answer announced")
        data = memoryview(bytearray(size))
        data[:len(rest)] = rest
        got = len(rest)
        while got < size:
            n = sock.recv_into(data[got:], min(size - got, 4 * 1024 * 1024))
            if not n:
                raise ConnectionError("the local read socket closed mid-answer")
            got += n
        return data

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


def _one_span(fds: list[int], segments: list[list[int]]) -> tuple[int, int] | None:
    """(offset, count) when the segments are one run of one file, else None. A miss comes back as
    the pieces of its block's fill as they landed (each its own descriptor of the same file):
    one map of the run, not a copy of each piece."""
    if len(fds) != len(segments) or not fds:
        return None
    first = os.fstat(fds[0])
    start, end = int(segments[0][0]), int(segments[0][0]) + int(segments[0][1])
    for fd, (offset, count) in zip(fds[1:], segments[1:], strict=True):
        here = os.fstat(fd)
        if (here.st_dev, here.st_ino) != (first.st_dev, first.st_ino) or int(offset) != end:
            return None
        end += int(count)
    return start, end - start


def _mapped(fd: int, offset: int, count: int) -> memoryview:
    """``count`` bytes of ``fd`` from ``offset``, mapped read-only and populated up front (one
    call maps every page, rather than a fault per page as FUSE copies them out)."""
    aligned = offset - offset % mmap.ALLOCATIONGRANULARITY
    if os.fstat(fd).st_size < offset + count:
        raise ValueError("a cache block shorter than its segment")
    if count == 0:
        return memoryview(b"")
    mapping = mmap.mmap(fd, count + offset - aligned, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE,
                        prot=mmap.PROT_READ, offset=aligned)
    return memoryview(mapping)[offset - aligned:offset - aligned + count]


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
