"""An HTTP proxy in front of SeaweedFS that records every request the gateway makes.

Tests of the read cache count remote requests (GETs per key, bytes per range) through it. It
forwards bytes unchanged (the Host header included, so SigV4 signatures stay valid) and can be
told to fail requests, to play a remote outage, and inject faults (tests/reliability): S3 error
answers on a share of requests (``fail_ratio``, a flapping remote), connections reset in the middle
of a GET body or after a write reached the remote (its answer lost), GET bodies cut short
(``truncate_ratio``) or altered (``corrupt_at``). ``faults`` counts what was injected, and
``max_concurrent_writes`` the most writes of one key that were at the remote at once.

A write of a key (``write_of_key``) is a request that the destage sends only under the key's
lease (app/services/destage/destager.py ``upload``), so no two may be at the remote at once: PutObject
and CopyObject (PUT /bucket/key), DeleteObject (DELETE /bucket/key), CreateMultipartUpload
(POST ?uploads), CompleteMultipartUpload (POST ?uploadId=) and AbortMultipartUpload (DELETE
?uploadId=). Not one: UploadPart and UploadPartCopy (PUT ?partNumber=), the parts of one upload
that go in parallel; requests of a bucket (no key). The key is the unquoted path, and a write is
at the remote from when the proxy sends it upstream until the remote's answer has been read:
not while the proxy holds it back (``delay``) nor when the proxy answers it itself
(``fail_with``: the remote never sees it).
"""

from __future__ import annotations

import contextlib
import http.client
import io
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


@dataclass
class Seen:
    method: str
    path: str
    query: str
    range: str | None
    status: int
    sent_bytes: int

    @property
    def key(self) -> str:
        """The object key of a path-style request (``/bucket/key``), '' for bucket requests."""
        parts = unquote(self.path).lstrip("/").split("/", 1)
        return parts[1] if len(parts) == 2 else ""


def write_of_key(method: str, path: str) -> str | None:
    """The key that this request writes (see the module docstring), or None."""
    target, _, query = path.partition("?")
    params = {p.partition("=")[0] for p in query.split("&") if p}
    parts = unquote(target).lstrip("/").split("/", 1)
    if len(parts) != 2 or not parts[1]:
        return None  # a request of a bucket
    if method == "PUT" and "partNumber" not in params:
        return parts[1]
    if method == "DELETE" or (method == "POST" and params & {"uploads", "uploadId"}):
        return parts[1]
    return None


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A peer that resets or drops a connection (the faults this proxy plays) is not news."""


class CountingProxy:
    def __init__(self, upstream: Any) -> None:
        self.upstream = upstream
        split = urlsplit(upstream.endpoint)
        self._host, self._port = split.hostname or "127.0.0.1", split.port or 80
        self.access_key = upstream.access_key
        self.secret_key = upstream.secret_key
        self.seen: list[Seen] = []
        self.arrived: list[str] = []  # "METHOD path?query" of every request, as it arrives (before any delay)
        self.fail_with: int | None = None  # answer every request with this status (an outage)
        self.delay = 0.0  # seconds added before forwarding each request (a long-haul link)
        self.part_delay = 0.0  # seconds added before forwarding each UploadPart (a slow part upload)
        # Hold every GET body after this many bytes until ``release`` is set (a remote that is
        # still sending); ``stalled`` is set when a body is held.
        self.stall_after: int | None = None
        self.stalled = threading.Event()
        self.release = threading.Event()
        self.cut_held = False  # a released held body is cut off instead (a remote that fails mid-body)
        self.corrupt_at: int | None = None  # flip this byte of every GET body (a remote that lies)
        # Also record answers the client cut short (a fill that took the first block of a whole-object
        # GET and closed it); off by default, as the tests written before it count without them.
        self.record_cut = False
        self.fail_code = ""  # with fail_with: an S3 XML error body with this code (SlowDown, InternalError)
        self.fail_ratio = 1.0  # share of requests that fail_with answers (< 1: a flapping remote)
        self.fail_only: Any = None  # with fail_with: (method, path) -> bool, the requests that fail (None: all)
        self.reset_ratio = 0.0  # share of requests whose connection is reset (GET: mid-body; writes: after upstream)
        self.truncate_ratio = 0.0  # share of GET bodies cut (clean close) half-way, Content-Length promising all
        self.faults = 0
        self.max_concurrent_writes = 0
        self.overlaps: list[str] = []  # the requests of each moment two writes of a key were in flight
        self._writes: dict[str, int] = {}
        self._writing: dict[str, list[str]] = {}  # key -> the writes in flight ("METHOD path?query")
        self._lock = threading.Lock()
        self._busy = threading.Condition()
        self._in_flight = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                with proxy._busy:
                    proxy._in_flight += 1
                    proxy.arrived.append(f"{self.command} {self.path}")
                try:
                    self._relay()
                finally:
                    with proxy._busy:
                        proxy._in_flight -= 1
                        proxy._busy.notify_all()

            @contextlib.contextmanager
            def _at_remote(self) -> Iterator[None]:
                """Count a write of a key while it is at the remote (see write_of_key)."""
                key = write_of_key(self.command, self.path)
                if key is None:
                    yield
                    return
                what = f"{time.time():.3f} {self.command} {self.path}"
                with proxy._busy:
                    proxy._writes[key] = proxy._writes.get(key, 0) + 1
                    proxy.max_concurrent_writes = max(proxy.max_concurrent_writes, proxy._writes[key])
                    proxy._writing.setdefault(key, []).append(what)
                    if proxy._writes[key] > 1:
                        proxy.overlaps.append(" | ".join(proxy._writing[key]))
                try:
                    yield
                finally:
                    with proxy._busy:
                        proxy._writes[key] -= 1
                        proxy._writing[key].remove(what)

            def _reset(self) -> None:
                """Close with RST: the peer sees 'connection reset', not an end of stream."""
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if proxy.delay:
                    proxy._count()
                    time.sleep(proxy.delay)
                if proxy.part_delay and self.command == "PUT" and "partNumber=" in self.path:
                    time.sleep(proxy.part_delay)
                if proxy.fail_with is not None and (proxy.fail_only is None or proxy.fail_only(
                        self.command, self.path)) and proxy._roll(proxy.fail_ratio):
                    error = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected'
                             b'</Message></Error>' % proxy.fail_code.encode()) if proxy.fail_code else b""
                    self.send_response(proxy.fail_with)
                    self.send_header("Content-Length", str(len(error)))
                    if error:
                        self.send_header("Content-Type", "application/xml")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(error)
                    proxy._record(self, proxy.fail_with, 0)
                    return
                cut = ""  # how this request's answer is broken, if it is
                if proxy._roll(proxy.reset_ratio):
                    cut = "reset"
                elif self.command == "GET" and proxy._roll(proxy.truncate_ratio):
                    cut = "truncate"
                conn = http.client.HTTPConnection(proxy._host, proxy._port, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                    with self._at_remote():
                        conn.request(self.command, self.path, body=body, headers=headers)
                        resp = conn.getresponse()
                        # A write is at the remote until its (small) answer is read; a GET streams.
                        source = resp.read if self.command == "GET" else io.BytesIO(resp.read()).read
                    if cut == "reset" and self.command != "GET":  # it happened; the answer is lost
                        self._reset()
                        proxy._record(self, 0, 0)
                        return
                    length = int(resp.getheader("Content-Length") or 0)
                    cut_at = length // 2 if cut and self.command == "GET" and resp.status in (200, 206) and length > 1 else None
                    self.send_response(resp.status, resp.reason)
                    for name, value in resp.getheaders():
                        if name.lower() not in HOP_BY_HOP:
                            self.send_header(name, value)
                    chunked = (resp.getheader("Content-Length") is None and self.command != "HEAD"
                               and resp.status not in (204, 304))
                    if chunked:
                        self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    sent = 0

                    def emit(data: bytes) -> None:
                        if data:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                            self.wfile.flush()

                    try:
                        while self.command != "HEAD":
                            chunk = source(256 * 1024)
                            if not chunk:
                                break
                            if cut_at is not None and sent <= cut_at < sent + len(chunk):
                                emit(chunk[:cut_at - sent])
                                if cut == "reset":
                                    self._reset()
                                else:
                                    self.close_connection = True
                                    with contextlib.suppress(OSError):
                                        self.connection.shutdown(socket.SHUT_RDWR)
                                proxy._record(self, resp.status, cut_at)
                                return
                            flip = proxy.corrupt_at
                            if self.command == "GET" and flip is not None and sent <= flip < sent + len(chunk):
                                at = flip - sent
                                chunk = chunk[:at] + bytes([chunk[at] ^ 0xFF]) + chunk[at + 1:]
                                proxy._count()
                            stall = proxy.stall_after
                            if self.command == "GET" and stall is not None and sent <= stall < sent + len(chunk):
                                proxy.stalled.set()  # before the bytes: a reader may see them before we run again
                                emit(chunk[:stall - sent])
                                proxy.release.wait(60)
                                if proxy.cut_held:
                                    self.close_connection = True
                                    with contextlib.suppress(OSError):
                                        self.connection.shutdown(socket.SHUT_RDWR)
                                    proxy._record(self, resp.status, stall)
                                    return
                                emit(chunk[stall - sent:])
                            else:
                                emit(chunk)
                            sent += len(chunk)
                    except OSError:  # the client closed the connection mid-body
                        if proxy.record_cut:
                            proxy._record(self, resp.status, sent)
                        raise
                    if chunked:
                        self.wfile.write(b"0\r\n\r\n")
                    proxy._record(self, resp.status, sent)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _roll(self, ratio: float) -> bool:
        """True for a ``ratio`` share of requests (each one counted as an injected fault)."""
        hit = ratio > 0 and (ratio >= 1 or random.random() < ratio)
        if hit:
            self._count()
        return hit

    def _count(self) -> None:
        with self._lock:
            self.faults += 1

    def clear_faults(self) -> None:
        """Back to a faithful proxy (counters kept)."""
        self.fail_with = None
        self.fail_code = ""
        self.fail_ratio = 1.0
        self.reset_ratio = self.truncate_ratio = 0.0
        self.corrupt_at = None
        self.delay = 0.0

    def _record(self, handler: BaseHTTPRequestHandler, status: int, sent: int) -> None:
        path, _, query = handler.path.partition("?")
        with self._lock:
            self.seen.append(Seen(handler.command, path, query, handler.headers.get("Range"), status, sent))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> CountingProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> None:
        """Forget what was seen, once what is in flight has been recorded: a request is recorded
        after its last byte went out, so a GET the gateway already finished could otherwise be
        counted against the test's next step (seen on a loaded CI machine)."""
        self.stall_after = None
        self.cut_held = False
        self.corrupt_at = None
        self.release.set()  # a held answer goes on, so it can finish and be recorded now
        self.idle()
        with self._lock:
            self.seen.clear()
        self.stalled.clear()
        self.release = threading.Event()

    def idle(self, timeout: float = 5.0) -> bool:
        """Wait until no request is being relayed: a request is recorded once its answer has
        been sent, which may be just after the gateway's client got its last byte."""
        with self._busy:
            return self._busy.wait_for(lambda: self._in_flight == 0, timeout)

    def requests(self, method: str | None = None, key: str | None = None) -> list[Seen]:
        self.idle()
        with self._lock:
            return [s for s in self.seen if (method is None or s.method == method)
                    and (key is None or s.key == key) and "uploads" not in s.query]

    def gets(self, key: str | None = None) -> list[Seen]:
        return [s for s in self.requests("GET", key) if s.key]

    def bytes_fetched(self, key: str | None = None) -> int:
        return sum(s.sent_bytes for s in self.gets(key))

    def __enter__(self) -> CountingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
