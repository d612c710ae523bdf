"""Kept-open HTTP/1.1 connections for block reads between nodes: the request and its answer's
head in a few syscalls, the body straight into the caller's buffer.

A fleet node reads two thirds of a 3-node fleet's samples from their owners (issue 28). Through
urllib3 each block GET spent about a seventh of the asking node's GIL time in urllib3 and
http.client (pool bookkeeping, header objects, ``email``'s header parser), more than the
catalog lookups of the same read (py-spy, bench/peer_rate.py). The internal endpoint is ours
(app/fleet/peer_server.py): it always answers with a ``Content-Length``, never chunked, so a
client needs to parse one status line and a few headers. Nothing else speaks to it.

One request at a time per connection; idle connections are kept per peer address (at most
``max_idle`` each). A kept connection the peer closed meanwhile (its keep-alive timeout) fails
on the first read of the answer's head: the GET is sent once more on a new connection (a GET
of a block has no side effect), and only then is the failure the caller's.
"""

from __future__ import annotations

import contextlib
import socket
import threading

HEAD_MAX = 64 * 1024  # an answer's status line and headers; more is not our peer speaking


class PeerProtocolError(OSError):
    """The answer is not HTTP/1.1 as the internal endpoint speaks it, or it stopped short."""


class PeerClosed(PeerProtocolError):
    """The connection ended before the answer's first byte."""


class PeerConnections:
    def __init__(self, connect_timeout: float, read_timeout: float, max_idle: int = 32) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_idle = max_idle
        self._idle: dict[str, list[socket.socket]] = {}
        self._lock = threading.Lock()

    def get(self, address: str, target: str, headers: dict[str, str]) -> PeerAnswer:
        """``GET target`` of the node at ``address`` (host:port); raises OSError when it cannot
        be asked or answers garbage (the caller then reads the remote)."""
        request = _request(address, target, headers)
        sock = self._take(address)
        if sock is not None:
            try:
                return self._exchange(sock, address, request)
            except (PeerClosed, ConnectionError):
                _close(sock)  # closed by the peer while it was idle here: once more, fresh
            except OSError:
                _close(sock)
                raise
        sock = socket.create_connection(_host_port(address), timeout=self.connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return self._exchange(sock, address, request)
        except OSError:
            _close(sock)
            raise

    def _exchange(self, sock: socket.socket, address: str, request: bytes) -> PeerAnswer:
        sock.settimeout(self.read_timeout)
        sock.sendall(request)
        head = bytearray()
        while True:
            chunk = sock.recv(HEAD_MAX)
            if not chunk:
                if not head:
                    raise PeerClosed("the peer closed the connection before its answer")
                raise PeerProtocolError("the peer closed the connection inside its answer's head")
            head += chunk
            end = head.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(head) > HEAD_MAX:
                raise PeerProtocolError("an answer head over 64 KiB")
        status, fields, keep = _parse_head(bytes(head[:end]))
        try:
            length = int(fields["content-length"])
        except (KeyError, ValueError) as exc:
            raise PeerProtocolError("an answer without a Content-Length") from exc
        return PeerAnswer(self, address if keep else None, sock, status, fields, bytes(head[end + 4:]), length)

    def _take(self, address: str) -> socket.socket | None:
        with self._lock:
            idle = self._idle.get(address)
            return idle.pop() if idle else None

    def give_back(self, address: str, sock: socket.socket) -> None:
        with self._lock:
            idle = self._idle.setdefault(address, [])
            if len(idle) < self.max_idle:
                idle.append(sock)
                return
        _close(sock)

    def clear(self) -> None:
        with self._lock:
            socks = [s for idle in self._idle.values() for s in idle]
            self._idle.clear()
        for sock in socks:
            _close(sock)


class PeerAnswer:
    """One answer: its status and headers (lower-case names), its body read as the caller asks.
    Read to its end, the connection goes back to the pool; closed before, it is dropped."""

    def __init__(self, pool: PeerConnections, address: str | None, sock: socket.socket, status: int,
                 headers: dict[str, str], early: bytes, length: int) -> None:
        self.pool, self.address, self.sock = pool, address, sock  # address None: not to be kept
        self.status, self.headers = status, headers
        self._early = early[:length]  # body bytes that came with the head
        self.left = length  # body bytes not handed to the caller yet
        self._released = False

    def read1(self, amt: int = 1024 * 1024) -> bytes:
        """Up to ``amt`` bytes, one recv at most; b"" once the body is done or the peer closed
        early (then ``left`` says how much is missing and the connection is not kept)."""
        if self.left <= 0:
            self._done()
            return b""
        if self._early:
            data, self._early = self._early[:amt], self._early[amt:]
        else:
            data = self.sock.recv(min(amt, self.left))
            if not data:
                return b""  # the peer closed early: the caller sees a short body (and the connection goes)
        self.left -= len(data)
        if self.left <= 0:
            self._done()
        return data

    def read(self) -> bytes:
        """The rest of the body (short if the peer closed early)."""
        parts = []
        while self.left > 0:
            data = self.read1(self.left)
            if not data:
                break
            parts.append(data)
        if self.left <= 0:
            self._done()
        return b"".join(parts)

    def readinto(self, buffer: memoryview) -> int:
        """Up to ``len(buffer)`` bytes straight into ``buffer``; 0 once the body is done."""
        if self.left <= 0:
            self._done()
            return 0
        if self._early:
            n = min(len(buffer), len(self._early))
            buffer[:n] = self._early[:n]
            self._early = self._early[n:]
        else:
            n = self.sock.recv_into(buffer[:min(len(buffer), self.left)])
            if not n:
                return 0  # the peer closed early, as read1
        self.left -= n
        if self.left <= 0:
            self._done()
        return n

    def drain(self) -> None:
        """Read what is left (a short error answer) so the connection can be kept."""
        with contextlib.suppress(OSError):
            self.read()
        self.close()  # a no-op once read to its end (the connection is back in the pool)

    def _done(self) -> None:
        if not self._released:
            self._released = True
            if self.address is None:
                _close(self.sock)
            else:
                self.pool.give_back(self.address, self.sock)

    def close(self) -> None:
        """Done with the answer: its connection is kept if the body was read to its end."""
        if not self._released:
            self._released = True
            _close(self.sock)


def _request(address: str, target: str, headers: dict[str, str]) -> bytes:
    lines = [f"GET {target} HTTP/1.1", f"Host: {address}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """(status, headers by lower-case name, whether the connection may be kept)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise PeerProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise PeerProtocolError(f"not a header line: {line[:80]!r}")
        fields[name.strip().lower()] = value.strip()
    keep = parts[0] == "HTTP/1.1" and fields.get("connection", "").lower() != "close"
    return int(parts[1]), fields, keep


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()
