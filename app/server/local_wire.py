"""The wire of the local read socket: a client on the gateway's own node (``ferry mount``) sends
an S3 GET and gets the body's file descriptors back instead of its bytes.

One connection carries one exchange at a time:

- request: a 4-byte big-endian length, then JSON ``{"path", "query", "headers"}`` (the raw path
  and query string of a presigned GET, and its headers: Host, Range, If-Match);
- answer: a 4-byte length, then JSON ``{"status", "headers", "segments", "body"}``, sent in one
  ``sendmsg`` with the descriptors as SCM_RIGHTS, then ``body`` bytes. ``segments`` are
  ``[offset, count]`` pairs, one per descriptor, in body order: the answer's body is those file
  ranges followed by the ``body`` bytes (a hit is all segments, a miss or an error all bytes).
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HEADER = struct.Struct("!I")
MAX_FRAME = 1024 * 1024  # a request's or an answer's JSON; bodies are counted separately
MAX_FDS = 64  # descriptors in one answer: a chunk of the mount spans one or two cache blocks


def frame(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_FRAME:
        raise ValueError("local read frame too large")
    return HEADER.pack(len(data)) + data


def read_frame(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any], list[int], bytes]:
    """One frame from a blocking socket: the message, the descriptors that came with it, and the
    bytes read past it (the start of a body). Raises ConnectionError when the peer closed."""
    fds: list[int] = []
    data = b""
    while len(data) < HEADER.size:
        chunk = _recv(sock, fds, max_fds)
        data += chunk
    (size,) = HEADER.unpack_from(data)
    if size > MAX_FRAME:
        _close_all(fds)
        raise ConnectionError("local read frame too large")
    while len(data) < HEADER.size + size:
        data += _recv(sock, fds, max_fds)
    end = HEADER.size + size
    return json.loads(data[HEADER.size:end]), fds, data[end:]


def _recv(sock: socket.socket, fds: list[int], max_fds: int) -> bytes:
    if max_fds:
        data, got, _, _ = socket.recv_fds(sock, 256 * 1024, max_fds)
        fds.extend(got)
    else:
        data = sock.recv(256 * 1024)
    if not data:
        _close_all(fds)
        raise ConnectionError("the local read socket closed")
    return data


def rights(fds: list[int]) -> list[tuple[int, int, bytes]]:
    """The ancillary data that passes ``fds``."""
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


MAX_SUN_PATH = 100  # sun_path holds 108 bytes with its NUL; a data directory's path may be longer


@contextlib.contextmanager
def reachable(path: Path) -> Iterator[str]:
    """A name of ``path`` short enough for bind/connect: itself, or, when longer than a socket
    address holds, the same file through a descriptor of its directory (/proc/self/fd/N/name)."""
    if len(os.fsencode(path)) <= MAX_SUN_PATH:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)
